//! MaxPool and AveragePool: the reference's window geometry as tables (per output position of
//! one plane, its input taps, and AveragePool's divisor) and one kernel that reduces them
//! ([`graph_ops::pool`]). A pool as `rewrite::channels_last` leaves it, between the Transposes
//! out of and back into channels last (each its only neighbour, as a convolution), runs with
//! them as one channels-last kernel: the same tables over the spatial positions, the channels
//! the kernel's inner axis, and no Transpose computed. MaxPool's optional Indices output is
//! not built.

use super::ops::Built;
use super::registry::{GpuOp, Registry};
use super::*;

/// Registers the channels-first pools (one step each; the channels-last ones are fused with
/// their Transposes before the registry is asked).
pub(super) fn register(registry: &mut Registry) {
    for op in ["MaxPool", "AveragePool"] {
        registry.insert(
            op,
            GpuOp::Kernel(|l, node, _| {
                l.lower_pool(node, None)?;
                Ok(Built::Done)
            }),
        );
    }
}

impl Lowering<'_> {
    /// Whether node `i` is a MaxPool or AveragePool between the layout's Transposes: (the
    /// Transpose before it, the one after it).
    pub(super) fn channels_last_pool(&self, i: usize) -> Option<(usize, usize)> {
        let node = &self.graph.nodes[i];
        if !matches!(node.op_type.as_str(), "MaxPool" | "AveragePool") {
            return None;
        }
        self.between_layout_transposes(i)
    }

    /// `node` as one pool step: channels first on its own, or with `around` (the Transposes of
    /// [`Lowering::channels_last_pool`]) reading and writing channels last.
    pub(super) fn lower_pool(&mut self, node: &Node, around: Option<(usize, usize)>) -> Result<(), ProgramError> {
        let graph = self.graph;
        let x = node.inputs.first().copied().flatten().ok_or_else(|| self.node_err(node, "input 0 is missing"))?;
        if node.outputs.len() > 1 {
            return Err(self.node_err(node, "MaxPool's Indices output is not built on the GPU"));
        }
        let xf = graph.fact(x).clone();
        if xf.shape.len() < 3 {
            return Err(self.node_err(node, format!("input {:?} has no spatial axis", xf.shape)));
        }
        let ctx = NodeCtx { name: &node.name, attrs: &node.attrs, opset: node.opset, n_outputs: 1 };
        let w = crate::ops::pool_windows(&ctx, &xf.shape).map_err(|e| self.node_err(node, e.to_string()))?;
        let (n, c) = (xf.shape[0], xf.shape[1]);
        // Channels first: N·C planes of one channel; channels last: N planes of C channels.
        let (planes, channels) = if around.is_some() { (n, c) } else { (n * c, 1) };
        let max = node.op_type == "MaxPool";
        let prefix = if around.is_some() { "_nhwc" } else { "" };
        let name = format!("{}{prefix}_{}", node.op_type.to_lowercase(), sanitize(&node.name));
        let k = graph_ops::pool(&name, xf.dtype, planes, channels, w.in_px, w.out_px, max)
            .map_err(|e| self.node_err(node, e))?;
        let mut starts = Vec::with_capacity(w.out_px + 1);
        let mut taps = Vec::new();
        starts.push(0i32);
        for t in &w.taps {
            taps.extend(t.iter().map(|&p| p as i32));
            starts.push(taps.len() as i32);
        }
        let (src, out, nodes) = match around {
            Some((t_in, t_out)) => {
                let i = self.node_index(node);
                let src = graph.nodes[t_in].inputs[0]
                    .ok_or_else(|| self.node_err(node, "the input transpose reads nothing"))?;
                let out = graph.nodes[t_out].outputs[0];
                (src, out, self.fused_nodes(&[t_in, i, t_out], 3, out)?)
            }
            None => {
                let out = node.outputs[0];
                let operands = vec![Some(self.operand(x)?)];
                let outs = vec![self.operand(out)?];
                (x, out, vec![self.node_op(node, operands, outs)])
            }
        };
        let mut args = vec![self.buf(src)?];
        args.push(self.b.constant(&format!("{}.starts", node.name), Data::I32(starts), false));
        args.push(self.b.constant(&format!("{}.taps", node.name), Data::I32(taps), false));
        if !max {
            let divisors = w.divisors.iter().map(|&d| d as f32).collect();
            args.push(self.b.constant(&format!("{}.divisors", node.name), Data::F32(divisors), false));
        }
        args.push(self.buf(out)?);
        self.kernel_step(&node.name.clone(), Op::Nodes(nodes), k, args);
        Ok(())
    }
}
