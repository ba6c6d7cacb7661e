//! Chains of data movement read as one gather: Slices, zero Pads, Concats, lone Transposes,
//! the other remaps with constant parameters and views, where every value between them is read
//! only by the next and everything traces back to one tensor. A Swin block's shifted windows
//! (the roll as two Slices and a Concat per axis, the window partition's Pad, Reshapes and
//! Transpose) and a patch merging's four strided Slices and their Concat are such chains: one
//! step each instead of one per node.
//!
//! The chain's nodes evaluated with their reference ops on the element numbers of the source
//! (`Pad`'s padding traced past the source, a zero in the gather) give where each output
//! element comes from; runs of elements that move whole (rows of channels,
//! `ops::run_length`) are gathered by run. The step holds the chain's nodes, so the
//! CPU executor computes the graph's ops. A chain that leaves every element where it was (a
//! Transpose, a Reshape and the inverse Transpose: ViT's patch rows; a lone Transpose that only
//! moves axes of length one) is a view, no step.

use super::registry::{gpu_ops, is_view, GpuOp};
use super::*;

/// A chain of data movement lowered as one gather (see the module docs).
#[derive(Clone, Debug)]
pub(super) struct Movement {
    /// The nodes, in graph order; the last one's output is `out`.
    pub members: Vec<usize>,
    /// The one tensor every member's data comes from.
    pub source: ValueId,
    pub out: ValueId,
}

impl Lowering<'_> {
    /// The data inputs of node `i` if it may join a chain (its other inputs constant): every
    /// input of a Concat, the first of a view, remap, zero Pad or a Transpose that is an
    /// elementwise group of its own (`groups`); `None` otherwise.
    fn movable_inputs(&self, i: usize, groups: &HashMap<usize, Vec<usize>>, absorbed: &[bool]) -> Option<Vec<ValueId>> {
        let graph = self.graph;
        let node = &graph.nodes[i];
        if absorbed[i] || node.outputs.len() != 1 || self.planned.contains_key(node.name.as_str()) {
            return None;
        }
        let rest_constant = node.inputs.iter().skip(1).flatten().all(|v| graph.initializers.contains_key(v));
        let data = node.inputs.first().copied().flatten()?;
        let ok = match node.op_type.as_str() {
            "Concat" => {
                let inputs: Vec<ValueId> = node.inputs.iter().flatten().copied().collect();
                return (inputs.len() == node.inputs.len() && inputs.iter().all(|v| constant(graph, *v).is_none()))
                    .then_some(inputs);
            }
            "Transpose" => groups.get(&i).is_some_and(|g| g == &[i]),
            "Pad" => {
                let mode = node.attrs.string("mode", "constant").unwrap_or("?");
                let value = node.inputs.get(2).copied().flatten().and_then(|v| constant(graph, v));
                // Opset 11 on: the pad value is input 2 (the trace sets it past the source).
                node.opset >= 11
                    && rest_constant
                    && mode == "constant"
                    && value.is_none_or(|t| t.to_f64_vec().iter().all(|&x| x == 0.0))
            }
            t if is_view(t) => rest_constant,
            t => rest_constant && matches!(gpu_ops().get(t), Some(GpuOp::Remap)),
        };
        (ok && constant(graph, data).is_none()).then(|| vec![data])
    }

    /// The chains of two or more steps' worth of data movement (see the module docs), over the
    /// nodes no other fusion took (`absorbed`) and the lone Transposes of `groups`: the
    /// connected sets of movable nodes joined through values that only movable nodes read, kept
    /// where they read one tensor from outside and only the last node's value leaves them.
    pub(super) fn find_movements(&self, groups: &HashMap<usize, Vec<usize>>, absorbed: &[bool]) -> Vec<Movement> {
        let graph = self.graph;
        let n = graph.nodes.len();
        let inputs: Vec<Option<Vec<ValueId>>> = (0..n).map(|i| self.movable_inputs(i, groups, absorbed)).collect();
        let producer: HashMap<ValueId, usize> =
            (0..n).filter(|&i| inputs[i].is_some()).map(|i| (graph.nodes[i].outputs[0], i)).collect();
        // Union-find over the movable nodes.
        let mut parent: Vec<usize> = (0..n).collect();
        fn root(parent: &mut [usize], mut i: usize) -> usize {
            while parent[i] != i {
                parent[i] = parent[parent[i]];
                i = parent[i];
            }
            i
        }
        let inner = |v: ValueId| {
            !self.is_output[v.index()]
                && !self.consumers[v.index()].is_empty()
                && self.consumers[v.index()].iter().all(|&c| inputs[c].is_some())
        };
        for (i, ins) in inputs.iter().enumerate() {
            let Some(ins) = ins else { continue };
            for v in ins {
                if let Some(&p) = producer.get(v) {
                    if inner(*v) {
                        let (a, b) = (root(&mut parent, p), root(&mut parent, i));
                        parent[a] = b;
                    }
                }
            }
        }
        let mut sets: HashMap<usize, Vec<usize>> = HashMap::new();
        for i in (0..n).filter(|&i| inputs[i].is_some()) {
            let r = root(&mut parent, i);
            sets.entry(r).or_default().push(i);
        }
        let mut found = vec![];
        for members in sets.into_values() {
            let last = *members.last().expect("a set has a node");
            let mut outside = vec![];
            for &m in &members {
                for v in inputs[m].iter().flatten() {
                    if !producer.get(v).is_some_and(|p| members.contains(p)) && !outside.contains(v) {
                        outside.push(*v);
                    }
                }
            }
            let leaves_early = members.iter().filter(|&&m| m != last).any(|&m| {
                !inner(graph.nodes[m].outputs[0])
                    || self.consumers[graph.nodes[m].outputs[0].index()].iter().any(|c| !members.contains(c))
            });
            let steps = members.iter().filter(|&&m| !is_view(&graph.nodes[m].op_type)).count();
            // A lone Transpose (with views around it) that keeps every axis longer than one in
            // order (ConvNeXt's head moving its 1×1 spatial axes) moves nothing: a chain of one
            // step, lowered as a view.
            let keeps_order = |m: usize| {
                let node = &graph.nodes[m];
                let Some(x) = node.inputs.first().copied().flatten() else { return false };
                let shape = &graph.fact(x).shape;
                let long: Vec<usize> = transpose_perm(graph, node).into_iter().filter(|&a| shape[a] > 1).collect();
                node.op_type == "Transpose" && long.windows(2).all(|w| w[0] < w[1])
            };
            let moving: Vec<usize> = members.iter().copied().filter(|&m| !is_view(&graph.nodes[m].op_type)).collect();
            let one_view = moving.len() == 1 && keeps_order(moving[0]);
            if outside.len() != 1
                || leaves_early
                || (steps < 2 && !one_view)
                || graph.fact(outside[0]).numel() >= i32::MAX as usize
            {
                continue;
            }
            found.push(Movement { source: outside[0], out: graph.nodes[last].outputs[0], members });
        }
        found.sort_by_key(|c| c.members[0]);
        found
    }

    /// One step for chain `mv`: its nodes traced on the source's element numbers, one gather.
    pub(super) fn lower_movement(&mut self, mv: &Movement) -> Result<(), ProgramError> {
        let graph = self.graph;
        let last = &graph.nodes[*mv.members.last().expect("a chain has a node")];
        let sf = graph.fact(mv.source).clone();
        let n_in = sf.numel();
        let mut vals: HashMap<ValueId, Tensor> = HashMap::new();
        vals.insert(mv.source, Tensor::from_vec(sf.shape.clone(), (0..n_in as i64).collect::<Vec<i64>>()));
        let pad_value = Tensor::from_vec(vec![], vec![n_in as i64]);
        for &m in &mv.members {
            let node = &graph.nodes[m];
            let mut ins: Vec<Option<Tensor>> = node
                .inputs
                .iter()
                .map(|v| v.and_then(|v| vals.get(&v).cloned().or_else(|| constant(graph, v))))
                .collect();
            if node.op_type == "Pad" {
                // Padding traces to element n_in: past the source, a zero in the gather.
                ins.resize(ins.len().max(3), None);
                ins[2] = Some(pad_value.clone());
            }
            let refs: Vec<Option<&Tensor>> = ins.iter().map(|t| t.as_ref()).collect();
            let def = registry().get(&node.op_type).ok_or_else(|| self.node_err(node, "unknown op"))?;
            let ctx = NodeCtx { name: &node.name, attrs: &node.attrs, opset: node.opset, n_outputs: 1 };
            let traced =
                (def.eval)(&ctx, &refs).map_err(|e| self.node_err(node, format!("tracing its sources: {e}")))?;
            let t = traced.into_iter().next().ok_or_else(|| self.node_err(node, "tracing gave no output"))?;
            vals.insert(node.outputs[0], t);
        }
        let map = vals[&mv.out].to_i64_vec();
        let identity = map.len() == n_in && map.iter().enumerate().all(|(i, &m)| m == i as i64);
        if identity && !self.is_output[mv.out.index()] {
            // The chain puts every element back where it was (ViT's patch rows: Transpose to
            // channels first, Reshape, Transpose back): a view of the source.
            let buf = self.buf(mv.source)?;
            self.bufs.insert(mv.out, buf);
            self.note_use(mv.out, buf);
            self.stats.views += 1;
            return Ok(());
        }
        let name = format!("movement_{}", sanitize(&last.name));
        let launch = self.gather_launch(last, &name, &format!("{}.map", last.name), mv.source, mv.out, &map)?;
        let nodes = self.fused_nodes(&mv.members, mv.members.len(), mv.out)?;
        self.stats.fused_nodes += mv.members.len();
        self.stats.fused_movements += 1;
        self.b.step(&last.name.clone(), Op::Nodes(nodes), vec![launch]);
        Ok(())
    }
}
