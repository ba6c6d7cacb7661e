//! Which nodes after a planned matmul its epilogue absorbs: a bias `Add` of a 1-D constant and
//! an activation chain, recognized by evaluating the chain with the reference ops on probe
//! values and comparing it with each epilogue activation (so any spelling of GELU is found).

use super::registry::is_view;
use super::*;

/// A residual `Add` (and a ReLU after it) that a planned MatMul's library call adds
/// (`Launch::Gemm`'s `residual`): found by [`Lowering::residual_after`].
#[derive(Clone, Debug, PartialEq)]
pub(super) struct ResidualFusion {
    /// The Add, then the ReLU's nodes, in graph order.
    pub members: Vec<usize>,
    /// The Add's other operand.
    pub residual: ValueId,
    /// The last member's output: what the step writes.
    pub end: ValueId,
    pub relu: bool,
}

impl Lowering<'_> {
    /// The residual Add after planned MatMul `i` (after its bias Add, if any) whose library call
    /// can add it: the MatMul's weight plain (not transposed), 16-bit, planned as one dense part
    /// the library takes; the Add's other operand a computed value of the same shape and type
    /// (no broadcast); at most a ReLU after it. Whether the other operand is made before the
    /// MatMul's step is the caller's to check.
    pub(super) fn residual_after(&self, i: usize, op: &OperatorPlan) -> Option<ResidualFusion> {
        let graph = self.graph;
        let node = &graph.nodes[i];
        if !(self.options.library_dense && self.options.library_epilogue)
            || node.op_type != "MatMul"
            || op.transposed
            || op.orientation != crate::plan::suboperator::Orientation::WeightRight
        {
            return None;
        }
        let (x, wv) = (node.inputs.first().copied().flatten()?, node.inputs.get(1).copied().flatten()?);
        let mut out = node.outputs[0];
        let dt = graph.fact(out).dtype;
        if !matches!(dt, DType::F16 | DType::BF16) || graph.fact(wv).dtype != dt || graph.fact(x).dtype != dt {
            return None;
        }
        let mut bias = false;
        if let Some((add_out, _, _)) = self.bias_after(out, op.cols) {
            (out, bias) = (add_out, true);
        }
        let add_i = self.only_consumer(out)?;
        let residual = self.residual_operand(add_i, out)?;
        let mut members = vec![add_i];
        let (mut end, mut relu) = (graph.nodes[add_i].outputs[0], false);
        if let Some((act, act_end, act_members)) = self.activation_after(end) {
            // A ReLU alone (not a chain that also casts out of the type).
            if act != Activation::Relu || graph.fact(act_end).dtype != dt {
                return None;
            }
            (end, relu) = (act_end, true);
            members.extend(act_members);
        }
        // The plan must leave the whole weight as one dense part on the library.
        let w: Vec<f32> = constant(graph, wv)?.to_f64_vec().into_iter().map(|x| x as f32).collect();
        let m = graph.fact(x).numel() / op.rows.max(1);
        let mut planned_op = op.clone();
        planned_op.m = m;
        planned_op.epilogue.activation = None;
        let parts = crate::codegen::from_plan::kernels_for_operator(&planned_op, &w).ok()?;
        let [part] = &parts[..] else { return None };
        let mut spec = part.spec.clone();
        spec.m = m;
        let activation = if relu { Activation::Relu } else { Activation::None };
        spec.epilogue = Epilogue { bias, activation };
        let library = if self.options.stream_dense {
            crate::codegen::library_takes(&spec, self.options.library_epilogue)
        } else {
            crate::codegen::library_takes_dense(&spec)
        };
        (library && part.weight == w).then_some(ResidualFusion { members, residual, end, relu })
    }

    /// `add_i` as a residual Add of `out`: `Add(out, r)` or `Add(r, out)` with `r` a computed
    /// value (not a constant) of `out`'s type and shape, and the sum of that shape too (no
    /// broadcast). Returns `r`.
    pub(super) fn residual_operand(&self, add_i: usize, out: ValueId) -> Option<ValueId> {
        let graph = self.graph;
        let add = &graph.nodes[add_i];
        if add.op_type != "Add" || add.inputs.len() != 2 || add.outputs.len() != 1 {
            return None;
        }
        let r = add.inputs.iter().flatten().copied().find(|&v| v != out)?;
        let (rf, of) = (graph.fact(r), graph.fact(out));
        (constant(graph, r).is_none()
            && rf.dtype == of.dtype
            && rf.shape == of.shape
            && graph.fact(add.outputs[0]).shape == of.shape)
            .then_some(r)
    }

    /// The nodes after planned `node` that its epilogue absorbs (the same choice
    /// [`Lowering::lower_planned`] makes).
    pub(super) fn epilogue_nodes(&self, node: &Node, op: &OperatorPlan) -> Vec<usize> {
        self.epilogue_end(node, op).1
    }

    /// Where planned `node`'s epilogue ends: the value its step writes (after the bias Add and
    /// the activation chain it absorbs, each where present) and the nodes it absorbs.
    pub(super) fn epilogue_end(&self, node: &Node, op: &OperatorPlan) -> (ValueId, Vec<usize>) {
        let mut out = node.outputs[0];
        let mut nodes = vec![];
        let gemm_bias = node.op_type == "Gemm" && node.inputs.get(2).copied().flatten().is_some();
        if !gemm_bias {
            if let Some((add_out, _, add_i)) = self.bias_after(out, op.cols) {
                out = add_out;
                nodes.push(add_i);
            }
        }
        if let Some((_, end, members)) = self.activation_after(out) {
            out = end;
            nodes.extend(members);
        }
        (out, nodes)
    }

    /// `Add(y, b)` / `Add(b, y)` with `b` a constant of `n` elements (or one), when it is the
    /// only consumer of `y`: its output, the bias and the node index.
    pub(super) fn bias_after(&self, y: ValueId, n: usize) -> Option<(ValueId, Vec<f32>, usize)> {
        let graph = self.graph;
        let c = self.only_consumer(y)?;
        let add = &graph.nodes[c];
        if add.op_type != "Add" || add.inputs.len() != 2 {
            return None;
        }
        let other = add.inputs.iter().flatten().find(|&&v| v != y).copied()?;
        let t = constant(graph, other)?;
        if t.dtype() != graph.fact(y).dtype || graph.fact(add.outputs[0]).shape != graph.fact(y).shape {
            return None;
        }
        let vals: Vec<f32> = t.to_f64_vec().into_iter().map(|x| x as f32).collect();
        let shape = t.shape();
        let row_vector = shape.iter().rev().skip(1).all(|&d| d == 1);
        let bias = match vals.len() {
            1 => vec![vals[0]; n],
            l if l == n && row_vector && shape.last() == Some(&n) => vals,
            _ => return None,
        };
        Some((add.outputs[0], bias, c))
    }

    /// The chain of elementwise nodes after `z` that computes one epilogue activation of `z`:
    /// (activation, the chain's output, its nodes). Found by growing the region of nodes that
    /// read only `z`, region values and one-element constants, then evaluating it with the
    /// reference ops on probe values. The chain may start after one view of `z` that `z` alone
    /// feeds (GPT-2's `Gemm → Reshape → GELU`): a view keeps the element order, so the chain
    /// computes the activation of `z` element for element, and the view joins the nodes.
    pub(super) fn activation_after(&self, z: ValueId) -> Option<(Activation, ValueId, Vec<usize>)> {
        if let Some(found) = self.activation_chain(z) {
            return Some(found);
        }
        let v = self.only_consumer(z)?;
        let view = &self.graph.nodes[v];
        if !is_view(&view.op_type) || view.outputs.len() != 1 {
            return None;
        }
        let zv = view.outputs[0];
        if self.graph.fact(zv).numel() != self.graph.fact(z).numel() {
            return None;
        }
        let (act, end, mut members) = self.activation_chain(zv)?;
        members.insert(0, v);
        Some((act, end, members))
    }

    /// [`Self::activation_after`] without the view: the chain starts at `z` itself.
    fn activation_chain(&self, z: ValueId) -> Option<(Activation, ValueId, Vec<usize>)> {
        let graph = self.graph;
        if self.is_output[z.0 as usize] {
            return None;
        }
        let start = graph.nodes.iter().position(|n| n.outputs.contains(&z)).map_or(0, |p| p + 1);
        let mut region: Vec<usize> = vec![];
        let mut values = vec![z];
        for (i, node) in graph.nodes.iter().enumerate().skip(start) {
            if region.len() >= 12 {
                break;
            }
            if !is_elementwise(&node.op_type) || node.op_type == "Transpose" || node.outputs.len() != 1 {
                continue;
            }
            let ins: Vec<ValueId> = node.inputs.iter().flatten().copied().collect();
            let reads_region = ins.iter().any(|v| values.contains(v));
            let rest_scalar = ins.iter().all(|v| values.contains(v) || scalar_constant(graph, *v).is_some());
            if reads_region && rest_scalar && graph.fact(node.outputs[0]).shape == graph.fact(z).shape {
                region.push(i);
                values.push(node.outputs[0]);
            }
        }
        // Try each prefix ending where exactly one value leaves, longest first.
        for end in (0..region.len()).rev() {
            let members = &region[..=end];
            let outs: Vec<ValueId> = members.iter().map(|&m| graph.nodes[m].outputs[0]).collect();
            let internal = std::iter::once(z).chain(outs[..outs.len() - 1].iter().copied());
            let escapes = internal.into_iter().any(|v| {
                self.is_output[v.0 as usize] || self.consumers[v.0 as usize].iter().any(|c| !members.contains(c))
            });
            if escapes {
                continue;
            }
            let end_v = outs[outs.len() - 1];
            // A Clip with constant bounds (ReLU6) is a candidate of its own.
            let mut candidates = vec![Activation::GeluErf, Activation::Gelu, Activation::Relu];
            if let [one] = members {
                if let Some(clip) = self.clip_bounds(&graph.nodes[*one]) {
                    candidates.push(clip);
                }
            }
            // The closest candidate within the tolerance: in 16 bits the erf and tanh forms of
            // GELU are both within it of either chain, and the chain's own form is the closer.
            let best = candidates
                .into_iter()
                .filter_map(|act| self.chain_error(z, members, end_v, act).map(|e| (e, act)))
                .min_by(|a, b| a.0.total_cmp(&b.0));
            if let Some((_, act)) = best {
                return Some((act, end_v, members.to_vec()));
            }
        }
        None
    }

    /// The epilogue of a Clip node whose bounds are constants (absent: unbounded).
    pub(super) fn clip_bounds(&self, node: &Node) -> Option<Activation> {
        if node.op_type != "Clip" {
            return None;
        }
        let bound = |i: usize, default: f32| -> Option<f32> {
            match node.inputs.get(i).copied().flatten() {
                Some(v) => scalar_constant(self.graph, v).map(|(_, x)| x as f32),
                None => Some(default),
            }
        };
        let (lo, hi) = if node.opset < 11 {
            (node.attrs.float("min", f32::MIN).ok()?, node.attrs.float("max", f32::MAX).ok()?)
        } else {
            (bound(1, f32::MIN)?, bound(2, f32::MAX)?)
        };
        Some(Activation::Clip { lo, hi })
    }

    /// The largest error of `act(z)` against running `members` on probe values of `z`
    /// (relative, or absolute below magnitude 1), when the chain computes `act(z)`: within
    /// 1e-6, or the rounding of a 16-bit type.
    fn chain_error(&self, z: ValueId, members: &[usize], end: ValueId, act: Activation) -> Option<f64> {
        let graph = self.graph;
        // Probes in z's own type (a 16-bit model's chain computes in 16 bits).
        let dtype = graph.fact(z).dtype;
        let raw: Vec<f32> = (-40..=40).map(|i| i as f32 * 0.173).collect();
        let probe_t = Tensor::from_vec(vec![raw.len()], raw).cast(dtype);
        let probes = probe_t.to_f64_vec();
        let tolerance = match dtype {
            DType::F16 => 2e-3,
            DType::BF16 => 1e-2,
            _ => 1e-6,
        };
        let mut vals: HashMap<ValueId, Tensor> = HashMap::new();
        vals.insert(z, probe_t);
        for &m in members {
            let out = eval_node(graph, m, &vals)?;
            vals.insert(graph.nodes[m].outputs[0], out);
        }
        let got = vals.get(&end)?;
        if got.len() != probes.len() {
            return None;
        }
        let e = Epilogue { bias: false, activation: act };
        let mut worst = 0.0f64;
        for (g, &x) in got.to_f64_vec().iter().zip(&probes) {
            let want = e.apply(x, 0.0);
            let err = (g - want).abs() / want.abs().max(1.0);
            if err.is_nan() || err > tolerance {
                return None;
            }
            worst = worst.max(err);
        }
        Some(worst)
    }
}
