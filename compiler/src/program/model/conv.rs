//! NHWC convolutions as `rewrite::channels_last` leaves them: the Transposes around a Conv and
//! an activation after it run inside one conv kernel (`codegen::graph_ops::conv`). A 1-D
//! convolution (NLC between `perm [0, 2, 1]` Transposes) runs as a 2-D one of height 1: the
//! NLC input is the NHWC input with H = 1, its `[O, C/g, k]` weight the `[O, C/g, 1, k]` one.

use super::*;

impl Lowering<'_> {
    /// Whether node `i` is a Conv read through `Transpose(perm 0,3,1,2)` and written through
    /// `Transpose(perm 0,2,3,1)` (1-D: `perm 0,2,1` both), each its only neighbour: (the first,
    /// the second).
    pub(super) fn nhwc_conv(&self, i: usize) -> Option<(usize, usize)> {
        let node = &self.graph.nodes[i];
        if node.op_type != "Conv" || self.planned.contains_key(node.name.as_str()) {
            return None;
        }
        self.between_layout_transposes(i)
    }

    /// Whether node `i` (one input read, one output) reads a channels-first value made by a
    /// `Transpose` from channels last and writes one that a `Transpose` turns channels last,
    /// each its only neighbour, at rank 3 or 4: (the first Transpose, the second).
    pub(super) fn between_layout_transposes(&self, i: usize) -> Option<(usize, usize)> {
        let graph = self.graph;
        let node = &graph.nodes[i];
        if node.outputs.len() != 1 {
            return None;
        }
        let x = node.inputs.first().copied().flatten()?;
        let rank = graph.fact(x).shape.len();
        if !(rank == 3 || rank == 4) || self.only_consumer(x) != Some(i) {
            return None;
        }
        let t_in = graph.nodes.iter().position(|n| n.outputs.contains(&x))?;
        let t_out = self.only_consumer(node.outputs[0])?;
        let is_transpose = |t: usize, perm: &[usize]| {
            graph.nodes[t].op_type == "Transpose" && transpose_perm(graph, &graph.nodes[t]) == perm
        };
        let (to_first, to_last): (&[usize], &[usize]) =
            if rank == 4 { (&[0, 3, 1, 2], &[0, 2, 3, 1]) } else { (&[0, 2, 1], &[0, 2, 1]) };
        (is_transpose(t_in, to_first) && is_transpose(t_out, to_last)).then_some((t_in, t_out))
    }

    /// An NHWC convolution ([`Lowering::nhwc_conv`]): one kernel reading the NHWC input and
    /// writing the NHWC output, with the bias and an activation chain after it in its epilogue.
    /// The step's nodes are the Transposes, the Conv and the chain, so the CPU executor computes
    /// exactly the graph's ops.
    pub(super) fn lower_conv(&mut self, i: usize, t_in: usize, t_out: usize) -> Result<(), ProgramError> {
        let graph = self.graph;
        let node = &graph.nodes[i];
        let xh = graph.nodes[t_in].inputs[0].ok_or_else(|| self.node_err(node, "the input transpose reads nothing"))?;
        let w = node.inputs.get(1).copied().flatten().ok_or_else(|| self.node_err(node, "input 1 is missing"))?;
        let bias = node.inputs.get(2).copied().flatten();
        let yh = graph.nodes[t_out].outputs[0];
        let wt = constant(graph, w).ok_or_else(|| self.node_err(node, "a non-constant weight is not built"))?;
        let bt = match bias {
            Some(b) => Some(constant(graph, b).ok_or_else(|| self.node_err(node, "a non-constant bias is not built"))?),
            None => None,
        };
        let shape = conv_shape(graph, node).map_err(|e| self.node_err(node, e))?;
        let one_d = graph.fact(xh).shape.len() == 3;
        let mut ys = graph.fact(yh).shape.clone();
        if one_d {
            ys.insert(1, 1);
        }
        if ys[..] != [shape.n, shape.oh(), shape.ow(), shape.c_out] {
            return Err(self.node_err(node, format!("output {ys:?} does not match the convolution's shape")));
        }
        let mut activation = Activation::None;
        let mut chain = vec![];
        let mut out = yh;
        if self.options.fuse_epilogues {
            if let Some((act, end, members)) = self.activation_after(yh) {
                (activation, out, chain) = (act, end, members);
                self.stats.fused_epilogues += 1;
            }
        }
        let w32: Vec<f32> = wt.to_f64_vec().into_iter().map(|x| x as f32).collect();
        let dtype = graph.fact(xh).dtype;
        let engine =
            if self.options.implicit_gemm_conv { graph_ops::ConvEngine::Auto } else { graph_ops::ConvEngine::Direct };
        let packed = graph_ops::conv_weight(&shape, dtype, engine, &w32).map_err(|e| self.node_err(node, e))?;
        let name = format!("conv_{}", sanitize(&node.name));
        let k = graph_ops::conv_nhwc_with(&name, &shape, dtype, bt.is_some(), activation, engine)
            .map_err(|e| self.node_err(node, e))?;
        let data = match packed {
            graph_ops::ConvWeight::F32(v) => Data::F32(v),
            graph_ops::ConvWeight::F16(v) => Data::F16(v),
            graph_ops::ConvWeight::BF16(v) => Data::BF16(v),
        };
        let wb = self.b.constant(&format!("{}.packed", node.name), data, false);
        let bb = match bt {
            Some(b) => self.b.constant(
                &format!("{}.bias", node.name),
                Data::F32(b.to_f64_vec().into_iter().map(|x| x as f32).collect()),
                false,
            ),
            None => wb,
        };
        let members: Vec<usize> = [t_in, i, t_out].into_iter().chain(chain).collect();
        let nodes = self.fused_nodes(&members, 3, out)?;
        let args = vec![self.buf(xh)?, wb, bb, self.buf(out)?];
        self.kernel_step(&node.name.clone(), Op::Nodes(nodes), k, args);
        Ok(())
    }

    /// The node ops of a step computing the graph nodes `members` (in order) into `out`: each
    /// value made inside the step a temporary, `out` its buffer; one-element constants read by
    /// the members past the first `n_core` (an activation chain) are literals.
    pub(super) fn fused_nodes(
        &mut self,
        members: &[usize],
        n_core: usize,
        out: ValueId,
    ) -> Result<Vec<NodeOp>, ProgramError> {
        let graph = self.graph;
        let inside: Vec<ValueId> = members.iter().map(|&m| graph.nodes[m].outputs[0]).collect();
        let mut nodes = vec![];
        for (k, &m) in members.iter().enumerate() {
            let mnode = &graph.nodes[m];
            let mut operands = vec![];
            for v in &mnode.inputs {
                operands.push(match *v {
                    None => None,
                    Some(v) => Some(match inside.iter().position(|&x| x == v) {
                        Some(id) => {
                            let f = graph.fact(v);
                            Operand::Temp { id: id as u32, dtype: f.dtype, shape: f.shape.clone() }
                        }
                        None => match scalar_constant(graph, v).filter(|_| k >= n_core) {
                            Some((dtype, value)) => Operand::Scalar { dtype, value },
                            None => self.operand(v)?,
                        },
                    }),
                });
            }
            let o = mnode.outputs[0];
            let f = graph.fact(o);
            let result = if o == out {
                self.operand(o)?
            } else {
                let id = inside.iter().position(|&x| x == o).expect("inside value") as u32;
                Operand::Temp { id, dtype: f.dtype, shape: f.shape.clone() }
            };
            let op = self.node_op(mnode, operands, vec![result]);
            nodes.push(op);
        }
        Ok(nodes)
    }
}

/// The convolution `node` computes, as the NHWC kernels see it (a 1-D one as height 1), from
/// its channels-first input and weight shapes and its attributes (strides, dilations, pads or
/// `auto_pad`, group); an error names what is not built.
pub fn conv_shape(graph: &Graph, node: &Node) -> Result<graph_ops::ConvShape, String> {
    let x = node.inputs.first().copied().flatten().ok_or("input 0 is missing")?;
    let w = node.inputs.get(1).copied().flatten().ok_or("input 1 is missing")?;
    let (mut xs, mut ws) = (graph.fact(x).shape.clone(), graph.fact(w).shape.clone());
    let one_d = xs.len() == 3;
    if !matches!(graph.fact(x).dtype, DType::F32 | DType::F16 | DType::BF16) || ws.len() != xs.len() || xs.len() < 3 {
        return Err("only 1-D and 2-D f32, f16 and bf16 convolutions are built".into());
    }
    if one_d {
        // [N, C, L] as [N, C, 1, L], the weight [O, C/g, k] as [O, C/g, 1, k].
        xs.insert(2, 1);
        ws.insert(2, 1);
    }
    let attrs = &node.attrs;
    let pair = |name: &str| -> Result<(usize, usize), String> {
        match attrs.ints_opt(name).ok().flatten() {
            Some([a, b]) if !one_d && *a > 0 && *b > 0 => Ok((*a as usize, *b as usize)),
            Some([b]) if one_d && *b > 0 => Ok((1, *b as usize)),
            Some(v) => Err(format!("{name} {v:?} are not one positive integer per axis")),
            None => Ok((1, 1)),
        }
    };
    let (stride, dilation) = (pair("strides")?, pair("dilations")?);
    let (kh, kw) = (ws[2], ws[3]);
    let pads: [usize; 4] = match attrs.string("auto_pad", "NOTSET").unwrap_or("NOTSET") {
        "NOTSET" => match attrs.ints_opt("pads").ok().flatten() {
            Some(p) if !one_d && p.len() == 4 && p.iter().all(|&x| x >= 0) => {
                [p[0] as usize, p[1] as usize, p[2] as usize, p[3] as usize]
            }
            Some(p) if one_d && p.len() == 2 && p.iter().all(|&x| x >= 0) => [0, p[0] as usize, 0, p[1] as usize],
            Some(p) => return Err(format!("pads {p:?} are not two non-negative integers per axis")),
            None => [0; 4],
        },
        "VALID" => [0; 4],
        mode @ ("SAME_UPPER" | "SAME_LOWER") => {
            let same = |size: usize, k: usize, s: usize, d: usize| {
                let total = ((size.div_ceil(s) - 1) * s + (k - 1) * d + 1).saturating_sub(size);
                if mode == "SAME_UPPER" {
                    (total / 2, total - total / 2)
                } else {
                    (total - total / 2, total / 2)
                }
            };
            let (t, b) = same(xs[2], kh, stride.0, dilation.0);
            let (l, r) = same(xs[3], kw, stride.1, dilation.1);
            [t, l, b, r]
        }
        other => return Err(format!("auto_pad {other} is not an ONNX mode")),
    };
    Ok(graph_ops::ConvShape {
        n: xs[0],
        h: xs[2],
        w: xs[3],
        c_in: xs[1],
        c_out: ws[0],
        groups: attrs.int("group", 1).unwrap_or(1).max(1) as usize,
        kh,
        kw,
        stride,
        dilation,
        pads,
    })
}
