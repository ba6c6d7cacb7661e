//! LayerNorms between planned 16-bit products, with no step of their own. A transformer's
//! `y = LN(x + Linear(h))` read by the next linear layers costs a step (the residual Add and
//! the LayerNorm) between two products; here the products do its work around their epilogues
//! (`codegen::RowNorm`, the warp-specialized wgmma kernel), without any CTA waiting for another:
//! - the **producer** (the planned MatMul before the LayerNorm) adds the residual and writes
//!   the sum `s` (what the LayerNorm reads), and adds each row's sum and sum of squares (over
//!   its item's columns, in a fixed order) into f64 row sums with f64 atomics; every deferred
//!   LayerNorm's sums share one buffer, which one step zeroes before the first producer (a
//!   last-arriving-item finisher measured 68 µs slower on MiniLM-L6, partials every reader
//!   combines slower still: `benches/results/e2e_gpu.md`);
//! - a **consumer product** (a planned MatMul reading `y`) reads `s` instead: with
//!   `W' = diag(γ)·W`, `y·W = rstd·(s·W' − mean·colsum(W')) + βᵀW`, so its weight is `W'`
//!   (rounded to the activations' type), its epilogue's bias `βᵀW + bias`, and it applies the
//!   row statistics (mean and 1/std from the row sums) before the epilogue;
//! - a **consumer residual** (the residual Add of another producer here, a post-LN layer's
//!   skip connection) is normalized as that producer's kernel reads it: `(s − mean)·rstd·γ + β`.
//!
//! A LayerNorm is deferred when its input is a planned MatMul's output (after its bias and
//! activation, a view that keeps rows, and a residual Add of a value made earlier), every one of
//! those products runs one block-sparse part on our wgmma kernel (16-bit, weight on the right,
//! not the library), the LayerNorm normalizes the last axis (the product's columns) with
//! constant γ and β and its Mean and InvStdDev are unread, and every reader of `y` (through
//! views that keep rows) is a consumer product or consumer residual as above, never a graph
//! output. Which LayerNorms qualify is a fixpoint: a residual consumer is only one while its
//! own LayerNorm is deferred. The final LayerNorm of an encoder (a graph output) stays a step.
//! The steps' semantics are `program::SpmmNorm`'s, which the CPU executor computes.

use super::registry::is_view;
use super::*;

/// A LayerNorm deferred into the products around it.
#[derive(Clone, Debug)]
pub(super) struct DeferredNorm {
    pub ln: usize,
    /// The planned MatMul whose step writes the sum and the row statistics.
    pub producer: usize,
    /// Nodes no step computes: a view and the residual Add after the producer, the LayerNorm,
    /// and views of its output.
    pub members: Vec<usize>,
    pub residual: Option<ValueId>,
    /// The LayerNorm's input: what the producer's step writes.
    pub sum: ValueId,
    /// The LayerNorm's output and views of it: values never stored.
    pub outs: Vec<ValueId>,
    pub gamma: Vec<f32>,
    pub beta: Vec<f32>,
    pub eps: f32,
    /// The LayerNorm is deferred; else the producer only adds its (deferred) residual and
    /// writes the sum, and the LayerNorm is a step.
    pub defer_ln: bool,
}

/// A deferred LayerNorm's buffers, once its producer's step is made.
#[derive(Clone, Copy, Debug)]
pub(super) struct DeferredBufs {
    pub sum: BufferId,
    pub stats: crate::program::RowStats,
    pub gamma: BufferId,
    pub beta: BufferId,
}

impl Lowering<'_> {
    /// Whether planned MatMul `i`'s plan is one block-sparse part that our warp-specialized
    /// wgmma kernel runs (16-bit activations, weight on the right, not the library): that
    /// kernel takes the LayerNorm work at any tile (`codegen::RowNorm`). Computed once per node.
    pub(super) fn ws_one_part(&self, i: usize, op: &OperatorPlan) -> bool {
        if let Some(&known) = self.ws_one_part_memo.borrow().get(&i) {
            return known;
        }
        let takes = self.ws_one_part_uncached(i, op);
        self.ws_one_part_memo.borrow_mut().insert(i, takes);
        takes
    }

    fn ws_one_part_uncached(&self, i: usize, op: &OperatorPlan) -> bool {
        let graph = self.graph;
        let node = &graph.nodes[i];
        if op.orientation != crate::plan::suboperator::Orientation::WeightRight
            || (node.op_type == "Gemm" && node.attrs.int("transA", 0).unwrap_or(0) != 0)
        {
            return false;
        }
        let Some(x) = node.inputs.first().copied().flatten() else { return false };
        if !matches!(graph.fact(x).dtype, DType::F16 | DType::BF16) {
            return false;
        }
        let Some(wt) = node.inputs.get(1).copied().flatten().and_then(|w| constant(graph, w)) else { return false };
        let (k, n) = (op.rows, op.cols);
        let w: Vec<f32> = wt.to_f64_vec().into_iter().map(|x| x as f32).collect();
        let w = if op.transposed { super::planned::transpose(&w, n, k) } else { w };
        let m = graph.fact(x).numel() / k.max(1);
        let mut planned_op = op.clone();
        planned_op.m = m;
        planned_op.epilogue.activation = None;
        let Ok(parts) = crate::codegen::from_plan::kernels_for_operator(&planned_op, &w) else { return false };
        let [part] = &parts[..] else { return false };
        let mut spec = part.spec.clone();
        spec.m = m;
        let spec = &spec;
        let library = if self.options.stream_dense {
            crate::codegen::library_takes(spec, self.options.library_epilogue)
        } else {
            crate::codegen::library_takes_dense(spec)
        };
        let (bh, bw) = spec.block;
        let sparse = bh > 1 && bw > 1 && spec.blocks.len() < (k / bh) * (n / bw);
        sparse
            && !(self.options.library_dense && library)
            && !spec.two_four
            && spec.orientation == crate::codegen::Orientation::Right
            && matches!(spec.engine, crate::codegen::Engine::Auto | crate::codegen::Engine::WgmmaWs)
            && crate::kernel_choice::block_wgmma::supports(bh, bw)
            && k % bh == 0
            && n % bw == 0
            && !spec.live_rows
            && !spec.accumulate
    }

    /// The LayerNorm after planned MatMul `i` that its step could write the input and
    /// statistics of (see the module docs; its readers are checked by the caller).
    fn deferrable_after(
        &self,
        i: usize,
        op: &OperatorPlan,
        groups: &HashMap<usize, Vec<usize>>,
    ) -> Option<DeferredNorm> {
        let graph = self.graph;
        let node = &graph.nodes[i];
        let x = node.inputs.first().copied().flatten()?;
        let dt = graph.fact(x).dtype;
        let n = op.cols;
        let (mut out, _) = self.epilogue_end(node, op);
        let of = graph.fact(out);
        if of.dtype != dt || of.shape.last() != Some(&n) {
            return None;
        }
        let mut c = self.only_consumer(out)?;
        let mut members = vec![];
        // One view between (GPT-2's `Gemm → Reshape`): the element order stays.
        if is_view(&graph.nodes[c].op_type) && graph.nodes[c].outputs.len() == 1 {
            let v = graph.nodes[c].outputs[0];
            let vf = graph.fact(v);
            if vf.numel() != of.numel() || vf.shape.last() != Some(&n) {
                return None;
            }
            members.push(c);
            out = v;
            c = self.only_consumer(out)?;
        }
        let (mut residual, mut sum) = (None, out);
        let mut add = None;
        if graph.nodes[c].op_type == "Add" {
            let r = self.residual_operand(c, out)?;
            members.push(c);
            add = Some(c);
            residual = Some(r);
            sum = graph.nodes[c].outputs[0];
        }
        let readers = &self.consumers[sum.index()];
        let ln_i = *readers.iter().find(|&&r| graph.nodes[r].op_type == "LayerNormalization")?;
        let ln = &graph.nodes[ln_i];
        if ln.inputs.first().copied().flatten() != Some(sum) || ln.inputs.iter().skip(1).flatten().any(|&v| v == sum) {
            return None;
        }
        if residual.is_none() && readers.len() != 1 {
            return None;
        }
        // The Add is the LayerNorm fusion's whole group, or a group of its own.
        let mut ln_ok = true;
        match (self.norms.get(&ln_i), add) {
            (Some(f), _) => {
                let adds: Vec<usize> = add.into_iter().collect();
                if f.group != adds || !f.gathers.is_empty() {
                    return None;
                }
                // Stored through a Cast (an output): the LayerNorm stays a step.
                ln_ok &= f.cast.is_none();
            }
            (None, Some(a)) => {
                if groups.get(&a).map(|g| &g[..]) != Some(&[a][..]) {
                    return None;
                }
            }
            (None, None) => {}
        }
        let geometry = super::norm_fusion::norm_geometry(self, ln).ok();
        let (shape, axis, eps) = geometry.unwrap_or((vec![], 0, 0.0));
        ln_ok &= !shape.is_empty() && axis + 1 == shape.len() && shape[axis] == n;
        let y = ln.outputs[0];
        ln_ok &= graph.fact(y).dtype == dt;
        let vector = |pos: usize, default: f32| -> Option<Vec<f32>> {
            match ln.inputs.get(pos).copied().flatten() {
                None => Some(vec![default; n]),
                Some(v) => {
                    let t = constant(graph, v)?;
                    (t.shape().iter().product::<usize>() == n)
                        .then(|| t.to_f64_vec().into_iter().map(|x| x as f32).collect())
                }
            }
        };
        let (gamma, beta) = match (vector(1, 1.0), vector(2, 0.0)) {
            (Some(g), Some(b)) => (g, b),
            _ => {
                ln_ok = false;
                (vec![], vec![])
            }
        };
        // Not deferrable, the producer may still add a deferred residual (the caller decides).
        if !ln_ok && residual.is_none() {
            return None;
        }
        let mut outs = vec![];
        if ln_ok {
            members.push(ln_i);
            // y and the views of it that keep its rows.
            outs.push(y);
            let mut at = 0;
            while at < outs.len() {
                let v = outs[at];
                at += 1;
                for &r in &self.consumers[v.index()] {
                    let rn = &graph.nodes[r];
                    if is_view(&rn.op_type) && rn.outputs.len() == 1 && rn.inputs.first().copied().flatten() == Some(v)
                    {
                        let vf = graph.fact(rn.outputs[0]);
                        if vf.numel() == graph.fact(y).numel() && vf.shape.last() == Some(&n) {
                            members.push(r);
                            outs.push(rn.outputs[0]);
                        }
                    }
                }
            }
        }
        if !self.ws_one_part(i, op) {
            return None;
        }
        Some(DeferredNorm { ln: ln_i, producer: i, members, residual, sum, outs, gamma, beta, eps, defer_ln: ln_ok })
    }

    /// The LayerNorms to defer (see the module docs), given the elementwise groups and the
    /// iteration each node is emitted at; with `defer_ln` false, a producer that only adds its
    /// residual (another deferred LayerNorm's output, read normalized) and writes the sum a
    /// LayerNorm step then reads (an encoder's last LayerNorm, a graph output).
    pub(super) fn find_deferred_norms(
        &self,
        groups: &HashMap<usize, Vec<usize>>,
        emit_at: &[usize],
    ) -> Vec<DeferredNorm> {
        let graph = self.graph;
        let mut cands = vec![];
        for (i, node) in graph.nodes.iter().enumerate() {
            let Some(op) = self.planned.get(node.name.as_str()).copied() else { continue };
            if let Some(d) = self.deferrable_after(i, op, groups) {
                cands.push(d);
            }
        }
        // The residual is made before the producer's step (a deferred output: by its producer).
        let producer_of: HashMap<ValueId, usize> =
            cands.iter().flat_map(|d| d.outs.iter().map(move |&v| (v, d.producer))).collect();
        cands.retain(|d| {
            let made_at = d.residual.and_then(|r| match producer_of.get(&r) {
                Some(&p) => Some(p),
                None => graph.nodes.iter().position(|n| n.outputs.contains(&r)).map(|p| emit_at[p]),
            });
            made_at.is_none_or(|at| at < d.producer)
        });
        // A LayerNorm is deferred when every reader of its output is a product that can read
        // its sum or a candidate's residual Add (which stays a candidate: see below).
        let residual_adds: Vec<(ValueId, usize)> = cands
            .iter()
            .filter_map(|d| {
                d.residual.map(|r| (r, d.members.iter().copied().find(|&m| graph.nodes[m].op_type == "Add")))
            })
            .filter_map(|(r, a)| a.map(|a| (r, a)))
            .collect();
        for d in &mut cands {
            d.defer_ln = d.defer_ln
                && d.outs.iter().all(|&v| {
                    !self.is_output[v.index()]
                        && self.consumers[v.index()].iter().all(|&r| {
                            if d.members.contains(&r) || residual_adds.contains(&(v, r)) {
                                return true;
                            }
                            let rn = &graph.nodes[r];
                            let Some(op) = self.planned.get(rn.name.as_str()).copied() else { return false };
                            rn.inputs.first().copied().flatten() == Some(v)
                                && rn.inputs.iter().skip(1).flatten().all(|&u| u != v)
                                && self.ws_one_part(r, op)
                        })
                });
        }
        // Every candidate whose residual is a deferred output stays (its kernel normalizes the
        // residual); one that defers nothing and reads a stored residual is left as it was.
        let deferred: Vec<ValueId> = cands.iter().filter(|d| d.defer_ln).flat_map(|d| d.outs.clone()).collect();
        cands.retain(|d| d.defer_ln || d.residual.is_some_and(|r| deferred.contains(&r)));
        for d in &mut cands {
            if !d.defer_ln {
                // The LayerNorm and the views of its output stay steps of their own.
                d.members.retain(|&m| m < d.ln);
                d.outs.clear();
            }
        }
        cands
    }
}
