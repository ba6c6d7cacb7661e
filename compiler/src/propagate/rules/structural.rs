//! Algebra rules for ops that move, select or fold elements without mixing them
//! arithmetically: pooling windows, reductions, and data movement (Slice, Gather,
//! GatherElements, Expand, Tile, Pad, DepthToSpace, SpaceToDepth).
//!
//! All of them come from one relation: which input elements each output element is
//! made of. Forward, an output element is pruned when all of its inputs are (for a
//! product, when any is); backward, an input element is pruned when every output
//! element made from it is (an input element no output reads is pruned too).
//!
//! Data movement finds the relation by *source tracing*: the op's own reference `eval`
//! runs once on an f64 tensor holding `1, 2, 3, ...` in place of the data, with the
//! other (constant) operands as they are; each output value names its source element,
//! and 0 marks a fill (Pad's constant). Only one evaluation, exact, and no copy of any
//! op's index logic; the trace is kept as runs of copied elements ([`Copies`]) and, in the
//! pass's [`super::RuleMemo`], reused while the node's constant operands stay the same.
//! Windows and reductions ask the ops for their geometry (`ops::pool_taps`,
//! `ops::reduce_target_of_each_input`).

use super::{bits_of, input, mask_of, Proposal, RuleCtx};
use crate::ir::{DType, Data, Tensor};
use crate::ops::{registry, NodeCtx, OpError, OpResult};
use crate::tesa::BitMask;
use std::rc::Rc;

/// Output element -> the input elements it is made of.
struct Relation {
    n_in: usize,
    sources: Vec<Vec<usize>>,
}

/// A relation where every output element is one input element or a fill, as runs:
/// outputs `out..out + len` are inputs `src..src + len` (`src` `None`: fills).
pub(super) struct Copies {
    n_in: usize,
    n_out: usize,
    runs: Vec<(usize, Option<usize>, usize)>,
}

impl Copies {
    /// Number of runs.
    pub(super) fn runs(&self) -> usize {
        self.runs.len()
    }

    /// From each output element's source (`None`: a fill), in output order.
    fn new(n_in: usize, sources: impl Iterator<Item = Option<usize>>) -> Copies {
        let mut runs: Vec<(usize, Option<usize>, usize)> = vec![];
        let mut n_out = 0;
        for s in sources {
            match runs.last_mut() {
                Some((_, Some(last), len)) if s == Some(*last + *len) => *len += 1,
                Some((_, None, len)) if s.is_none() => *len += 1,
                _ => runs.push((n_out, s, 1)),
            }
            n_out += 1;
        }
        Copies { n_in, n_out, runs }
    }

    /// Forward: an output is pruned when its source is, a fill when `fill_pruned`.
    fn forward(&self, x: &BitMask, fill_pruned: bool) -> BitMask {
        let mut y = BitMask::new(self.n_out);
        for &(out, src, len) in &self.runs {
            match src {
                Some(s) => y.copy_run(out, x, s, len),
                None => y.fill_run(out, len, fill_pruned),
            }
        }
        y
    }

    /// Backward: an input element is pruned when no unpruned output copies it.
    fn backward(&self, y: &BitMask) -> BitMask {
        let live = y.not();
        let mut needed = BitMask::new(self.n_in);
        for &(out, src, len) in &self.runs {
            if let Some(s) = src {
                needed.or_run(s, &live, out, len);
            }
        }
        needed.not()
    }
}

impl Relation {
    /// Forward: pruned when all sources are (`any`: when any is), or when no source
    /// exists and `empty_pruned`.
    fn forward(&self, x: &[bool], any: bool, empty_pruned: bool) -> Vec<bool> {
        self.sources
            .iter()
            .map(|s| {
                if s.is_empty() {
                    empty_pruned
                } else if any {
                    s.iter().any(|&i| x[i])
                } else {
                    s.iter().all(|&i| x[i])
                }
            })
            .collect()
    }

    /// Backward: an input element is pruned when no unpruned output reads it.
    fn backward(&self, y: &[bool]) -> Vec<bool> {
        let mut needed = vec![false; self.n_in];
        for (o, s) in self.sources.iter().enumerate() {
            if !y[o] {
                for &i in s {
                    needed[i] = true;
                }
            }
        }
        needed.into_iter().map(|n| !n).collect()
    }
}

fn node_ctx<'a>(ctx: &'a RuleCtx) -> NodeCtx<'a> {
    NodeCtx { name: &ctx.node.name, attrs: &ctx.node.attrs, opset: ctx.node.opset, n_outputs: ctx.node.outputs.len() }
}

fn apply(ctx: &RuleCtx, rel: &Relation, any: bool, empty_pruned: bool) -> Proposal {
    let mut p = Proposal::new(ctx);
    p.outputs[0] = Some(BitMask::from_bools(&rel.forward(&mask_of(ctx, 0), any, empty_pruned)));
    p.inputs[0] = Some(BitMask::from_bools(&rel.backward(&ctx.outs[0].mask())));
    p
}

/// `MaxPool` (first output) and `AveragePool`: an output is its window.
pub(super) fn pool(ctx: &RuleCtx) -> OpResult<Proposal> {
    input(ctx, 0)?;
    let x_shape = &ctx.in_facts[0].unwrap().shape;
    let (taps, in_px, out_px) = crate::ops::pool_taps(&node_ctx(ctx), x_shape)?;
    let planes = ctx.in_facts[0].unwrap().numel().checked_div(in_px).unwrap_or(0);
    let mut sources = Vec::with_capacity(planes * out_px);
    for plane in 0..planes {
        for t in &taps {
            sources.push(t.iter().map(|i| plane * in_px + i).collect());
        }
    }
    let rel = Relation { n_in: planes * in_px, sources };
    let mut p = apply(ctx, &rel, false, true);
    // MaxPool's Indices output is never pruned: keep it out of the proposal.
    p.outputs.truncate(1);
    p.outputs.resize(ctx.outs.len(), None);
    Ok(p)
}

/// Reductions whose value is 0 on an all-zero set (Sum, Mean, Max, Min, L1, L2,
/// SumSquare) prune an output when its whole set is pruned; `ReduceProd` when any
/// element is. `ReduceLogSum`/`ReduceLogSumExp` map zeros to non-zeros: backward only.
pub(super) fn reduce(ctx: &RuleCtx) -> OpResult<Proposal> {
    input(ctx, 0)?;
    let x_shape = &ctx.in_facts[0].unwrap().shape;
    let axes = ctx.consts.get(1).copied().flatten();
    if ctx.ins.get(1).copied().flatten().is_some() && axes.is_none() {
        return Ok(Proposal::new(ctx)); // axes known only at run time
    }
    let target = crate::ops::reduce_target_of_each_input(&ctx.node.op_type, &node_ctx(ctx), x_shape, axes)?;
    let mut sources = vec![vec![]; ctx.out_facts[0].numel()];
    for (i, &o) in target.iter().enumerate() {
        sources[o].push(i);
    }
    let rel = Relation { n_in: target.len(), sources };
    let mut p = apply(ctx, &rel, ctx.node.op_type == "ReduceProd", false);
    if matches!(ctx.node.op_type.as_str(), "ReduceLogSum" | "ReduceLogSumExp") {
        p.outputs[0] = None;
    }
    Ok(p)
}

/// Data movement by source tracing; the data is input 0 and every other present
/// input must be a constant. `Gather` with run-time indices gets [`gather_dynamic`].
pub(super) fn traced(ctx: &RuleCtx) -> OpResult<Proposal> {
    input(ctx, 0)?;
    let op = &ctx.node.op_type;
    let others_constant = (1..ctx.ins.len()).all(|i| ctx.ins[i].is_none() || ctx.consts[i].is_some());
    if !others_constant {
        return if op == "Gather" { gather_dynamic(ctx) } else { Ok(Proposal::new(ctx)) };
    }
    let x_fact = ctx.in_facts[0].unwrap();
    let n_in = x_fact.numel();
    if n_in as f64 >= 2f64.powi(52) {
        return Ok(Proposal::new(ctx));
    }
    // Pad's fill value: traced as 0 (no source); a non-zero fill keeps its elements.
    let mut fill_nonzero = false;
    let mut operands: Vec<Option<Tensor>> = vec![];
    for i in 1..ctx.ins.len() {
        let c = ctx.consts[i].map(|c| ctx.ins[i].map_or(c.clone(), |t| t.apply_to(c)));
        if op == "Pad" && i == 2 {
            if let Some(c) = &c {
                fill_nonzero = c.to_f64_vec().first().is_some_and(|v| *v != 0.0);
            }
            operands.push(Some(Tensor::new(vec![], Data::from_f64_iter(DType::F64, [0.0].into_iter())).unwrap()));
            continue;
        }
        operands.push(c);
    }
    // A node revisited with the same operands copies the same elements: trace it once.
    let memo = ctx.memo.and_then(|(memo, node)| memo.traced(node, &operands));
    let copies = match memo {
        Some(copies) => copies,
        None => {
            let iota = Tensor::new(x_fact.shape.clone(), Data::from_f64_iter(DType::F64, (1..=n_in).map(|i| i as f64)))
                .ok_or_else(|| OpError::new("cannot build the source-tracing tensor"))?;
            let def = registry().get(op).ok_or_else(|| OpError::new(format!("no reference op {op}")))?;
            let refs: Vec<Option<&Tensor>> =
                std::iter::once(Some(&iota)).chain(operands.iter().map(|t| t.as_ref())).collect();
            let traced = (def.eval)(&node_ctx(ctx), &refs)?;
            let Some(out) = traced.first() else { return Ok(Proposal::new(ctx)) };
            if out.len() != ctx.out_facts[0].numel() {
                return Ok(Proposal::new(ctx));
            }
            let sources = out.to_f64_vec().into_iter().map(|v| (v >= 1.0).then(|| v as usize - 1));
            let copies = Rc::new(Copies::new(n_in, sources));
            if let Some((memo, node)) = ctx.memo {
                memo.keep_traced(node, operands, copies.clone());
            }
            copies
        }
    };
    let mut p = Proposal::new(ctx);
    p.outputs[0] = Some(copies.forward(&bits_of(ctx, 0), !fill_nonzero));
    p.inputs[0] = Some(copies.backward(&ctx.outs[0].pruned_bits()));
    Ok(p)
}

/// `Gather` along `axis` with indices known only at run time (an embedding lookup):
/// output `[pre, idx.., post]` is pruned when `data[pre, r, post]` is pruned for every
/// row `r`; `data[pre, r, post]` is pruned when every output at `[pre, .., post]` is.
fn gather_dynamic(ctx: &RuleCtx) -> OpResult<Proposal> {
    let x_shape = &ctx.in_facts[0].unwrap().shape;
    let rank = x_shape.len() as i64;
    let axis = ctx.node.attrs.int("axis", 0)?;
    let axis = if axis < 0 { axis + rank } else { axis };
    if !(0..rank).contains(&axis) {
        return Err(OpError::new(format!("axis {axis} out of range for rank {rank}")));
    }
    let axis = axis as usize;
    let pre: usize = x_shape[..axis].iter().product();
    let rows = x_shape[axis];
    let post: usize = x_shape[axis + 1..].iter().product();
    let n_idx = ctx.in_facts[1].map_or(1, |f| f.numel());
    let x = mask_of(ctx, 0);
    let y = ctx.outs[0].mask();
    let mut fwd = vec![false; ctx.out_facts[0].numel()];
    let mut back = vec![false; x.len()];
    for a in 0..pre {
        for b in 0..post {
            let dead_in = (0..rows).all(|r| x[(a * rows + r) * post + b]);
            let dead_out = (0..n_idx).all(|j| y[(a * n_idx + j) * post + b]);
            for j in 0..n_idx {
                fwd[(a * n_idx + j) * post + b] = dead_in;
            }
            for r in 0..rows {
                back[(a * rows + r) * post + b] = dead_out;
            }
        }
    }
    let mut p = Proposal::new(ctx);
    p.outputs[0] = Some(BitMask::from_bools(&fwd));
    p.inputs[0] = Some(BitMask::from_bools(&back));
    Ok(p)
}
