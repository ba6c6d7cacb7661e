//! Pruning rules by TeSA algebra (SparTA Table 2), forward and backward, keyed by op type.
//!
//! The rules live in this separate registry (`rule_for`) rather than as a third hook on
//! `ops::OpDef`: it keeps the op families untouched while the rule set grows, and every
//! rule is documented in one place. `rule_for` returns `None` for ops without a rule;
//! the pass then falls back to tensor scrambling (`scramble.rs`).
//!
//! Rules compute on bits ([`BitMask`], set = pruned), a word at a time: elementwise ops and
//! broadcasts ([`BitMask::broadcast`], [`BitMask::reduce_all`]), `Transpose`
//! ([`BitMask::permute`]), `Concat`/`Split` and traced data movement as bit runs, `MatMul` per
//! distinct row (`matmul.rs`). A few rarely large ones (`Conv`, `BatchNormalization`,
//! `GlobalAveragePool`, pools, reductions) still work on one bool per element and convert.
//! The masks are the same as the per-element definitions below; the tests hold them to it.
//!
//! Meaning of "pruned": forcing every pruned element of every tensor to zero (weights
//! before the run, each node's outputs right after it runs) leaves the graph outputs
//! unchanged. Under that reading:
//! - a **forward** rule prunes an output element that is zero whenever the pruned input
//!   elements are zero (`0 → 0` algebra: `x·0 = 0`, `0 + 0 = 0`, `relu(0) = 0`);
//! - a **backward** rule prunes an input element when every output element it
//!   influences is pruned. This is the inference reading of the gradient formulas:
//!   for `Y = A·X + B`, `gA = gY·Xᵀ` is zero in row `i` when row `i` of `gY` is, etc.
//!   The pass only applies a backward proposal when *every* consumer of the value
//!   agrees (and never to graph outputs).
//!
//! Rules per op:
//! - `Relu Neg Abs Sqrt LeakyRelu Tanh Erf Gelu Identity Cast Dropout HardSwish Elu Selu
//!   Sign`: map 0 to 0; forward and backward elementwise (`Clip` too when `min <= 0 <= max`).
//! - `Sigmoid Exp Log Reciprocal HardSigmoid Softplus`: do not map 0 to 0: backward only.
//! - `Mul`: output pruned when either (broadcast) input element is; `Add Sub Max Min`
//!   (two inputs): when both are; `Div`: when the numerator is. Backward: an input
//!   element is pruned when every output element it broadcasts to is pruned.
//! - `MatMul` (batched, broadcasting): `Y[i,j]` pruned when no `k` has both `A[i,k]` and
//!   `B[k,j]` unpruned (exact for random values); backward: `A[i,k]` pruned when for
//!   every unpruned `Y[i,j]` the element `B[k,j]` is pruned, `B` likewise.
//! - `Gemm`: `MatMul` on the (transposed) operands, combined with `C` like `Add`.
//! - `Where`: pruned when both candidates are, whatever the condition.
//! - `Transpose Reshape Flatten Squeeze Unsqueeze`: element permutation / identity.
//! - `Concat Split`: index mapping along the axis.
//! - `Conv` (grouped, depthwise): output channel `o` pruned when every unpruned weight of
//!   filter `o` reads a fully pruned input channel and the bias is absent or pruned.
//!   Backward: a filter whose output channel is fully pruned, weights reading a fully
//!   pruned input channel, an input channel that no live filter reads.
//! - `BatchNormalization` (inference): per channel `y = a·x + b`; forward only where
//!   `b == 0` (the affine map sends 0 to 0), backward elementwise and per channel.
//! - `GlobalAveragePool`: `(n, c)` pruned when the whole plane is, and back.
//! - `MaxPool AveragePool`: an output element is pruned when its whole window is.
//! - `Reduce*`: an output is pruned when its whole reduced set is (`ReduceProd`: when
//!   any element is; `ReduceLogSum`/`LogSumExp` backward only).
//! - `Slice Gather GatherElements Expand Tile Pad DepthToSpace SpaceToDepth`: each
//!   output element copies one input element (or Pad's fill), found by source tracing
//!   (`structural.rs`); `Gather` with run-time indices prunes whole gathered columns.
//! - Everything else goes to scrambling, forward and backward (`scramble.rs`);
//!   `Softmax LogSoftmax LayerNormalization` and shape ops are left dense.

mod matmul;
mod structural;

use crate::ir::{Node, Tensor, ValueFact};
use crate::ops::{OpError, OpResult};
use crate::tesa::{BitMask, Tesa};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

/// What a rule sees: the node, per input its fact, TeSA and constant value, per output
/// its fact and current TeSA, and the pass's [`RuleMemo`] with the node's index in it (`None`:
/// nothing is kept between calls).
pub struct RuleCtx<'a> {
    pub node: &'a Node,
    pub in_facts: Vec<Option<&'a ValueFact>>,
    pub ins: Vec<Option<&'a Tesa>>,
    pub consts: Vec<Option<&'a Tensor>>,
    pub out_facts: Vec<&'a ValueFact>,
    pub outs: Vec<&'a Tesa>,
    pub memo: Option<(&'a RuleMemo, usize)>,
}

/// What rules keep between the visits of one propagation run, by node index: the source
/// tracing of data-movement nodes (`structural.rs`) with the constant operands it was traced
/// with. A node visited again with equal operands reuses its trace (the trace is a function
/// of the node, its input shape and those operands); other operands trace anew. At most
/// [`RuleMemo::MAX_RUNS`] runs are kept in all, so memory stays bounded.
#[derive(Default)]
pub struct RuleMemo {
    traced: RefCell<HashMap<usize, TracedEntry>>,
    runs: Cell<usize>,
}

/// A node's constant operands and the trace they gave.
type TracedEntry = (Vec<Option<Tensor>>, Rc<structural::Copies>);

impl RuleMemo {
    /// Runs kept at most, over all nodes (24 bytes each).
    pub const MAX_RUNS: usize = 1 << 22;

    fn traced(&self, node: usize, operands: &[Option<Tensor>]) -> Option<Rc<structural::Copies>> {
        let kept = self.traced.borrow();
        let (ops, copies) = kept.get(&node)?;
        (ops.as_slice() == operands).then(|| copies.clone())
    }

    fn keep_traced(&self, node: usize, operands: Vec<Option<Tensor>>, copies: Rc<structural::Copies>) {
        let mut kept = self.traced.borrow_mut();
        let old = kept.get(&node).map_or(0, |(_, c)| c.runs());
        let runs = self.runs.get() - old + copies.runs();
        if runs <= Self::MAX_RUNS {
            self.runs.set(runs);
            kept.insert(node, (operands, copies));
        }
    }
}

/// Masks a rule proposes (set = pruned); `None` = nothing to say.
#[derive(Default)]
pub struct Proposal {
    pub outputs: Vec<Option<BitMask>>,
    pub inputs: Vec<Option<BitMask>>,
}

impl Proposal {
    fn new(ctx: &RuleCtx) -> Proposal {
        Proposal { outputs: vec![None; ctx.outs.len()], inputs: vec![None; ctx.ins.len()] }
    }
}

pub type RuleFn = fn(&RuleCtx) -> OpResult<Proposal>;

/// The algebra rule of an op type, if it has one.
pub fn rule_for(op_type: &str) -> Option<RuleFn> {
    Some(match op_type {
        "Relu" | "Neg" | "Abs" | "Sqrt" | "LeakyRelu" | "Tanh" | "Erf" | "Gelu" | "Identity" | "Cast" | "Dropout"
        | "HardSwish" | "Elu" | "Selu" | "Sign" => unary_zero_preserving,
        "Clip" => clip,
        "Sigmoid" | "Exp" | "Log" | "Reciprocal" | "HardSigmoid" | "Softplus" => unary_backward_only,
        "Mul" => |c| binary(c, Combine::Any),
        "Add" | "Sub" | "Max" | "Min" => |c| binary(c, Combine::All),
        "Div" => |c| binary(c, Combine::First),
        "Where" => where_select,
        "MatMul" => matmul,
        "Gemm" => gemm,
        "Transpose" => transpose,
        "Reshape" | "Flatten" | "Squeeze" | "Unsqueeze" => same_elements,
        "Concat" => concat,
        "Split" => split,
        "Conv" => conv,
        "BatchNormalization" => batch_norm,
        "GlobalAveragePool" => global_average_pool,
        "MaxPool" | "AveragePool" => structural::pool,
        "ReduceSum" | "ReduceMean" | "ReduceMax" | "ReduceMin" | "ReduceProd" | "ReduceL1" | "ReduceL2"
        | "ReduceSumSquare" | "ReduceLogSum" | "ReduceLogSumExp" => structural::reduce,
        "Slice" | "Gather" | "GatherElements" | "Expand" | "Tile" | "Pad" | "DepthToSpace" | "SpaceToDepth" => {
            structural::traced
        }
        _ => return None,
    })
}

/// Ops that neither get a rule nor scrambling: they never pass zeros through
/// (normalizations) or compute shapes, so they stay dense.
pub fn never_scramble(op_type: &str) -> bool {
    matches!(
        op_type,
        "Softmax" | "LogSoftmax" | "LayerNormalization" | "Shape" | "Constant" | "ConstantOfShape" | "Range"
    )
}

/// Checks that input `i` is present; callers index `ctx.ins` directly afterwards.
fn input(ctx: &RuleCtx, i: usize) -> OpResult<()> {
    match ctx.ins.get(i) {
        Some(Some(_)) => Ok(()),
        _ => Err(OpError::new(format!("missing input {i}"))),
    }
}

/// Input `i`'s pruned elements, one bool each (empty when the input is absent).
fn mask_of(ctx: &RuleCtx, i: usize) -> Vec<bool> {
    ctx.ins[i].map(|t| t.mask()).unwrap_or_default()
}

/// Input `i`'s pruned elements as bits (empty when the input is absent).
fn bits_of(ctx: &RuleCtx, i: usize) -> BitMask {
    ctx.ins[i].map(|t| t.pruned_bits()).unwrap_or_else(|| BitMask::new(0))
}

fn unary_zero_preserving(ctx: &RuleCtx) -> OpResult<Proposal> {
    input(ctx, 0)?;
    let mut p = Proposal::new(ctx);
    p.outputs[0] = Some(bits_of(ctx, 0));
    p.inputs[0] = Some(ctx.outs[0].pruned_bits());
    Ok(p)
}

fn unary_backward_only(ctx: &RuleCtx) -> OpResult<Proposal> {
    input(ctx, 0)?;
    let mut p = Proposal::new(ctx);
    p.inputs[0] = Some(ctx.outs[0].pruned_bits());
    Ok(p)
}

fn clip(ctx: &RuleCtx) -> OpResult<Proposal> {
    let bound = |i: usize, attr: &str, default: f64| -> Option<f64> {
        if ctx.node.opset < 11 {
            return Some(ctx.node.attrs.float(attr, default as f32).ok()? as f64);
        }
        match ctx.in_facts.get(i).copied().flatten() {
            None => Some(default),
            Some(_) => ctx.consts.get(i).copied().flatten().map(|t| t.to_f64_vec()[0]),
        }
    };
    let lo = bound(1, "min", f64::NEG_INFINITY);
    let hi = bound(2, "max", f64::INFINITY);
    match (lo, hi) {
        (Some(lo), Some(hi)) if lo <= 0.0 && 0.0 <= hi => unary_zero_preserving(ctx),
        _ => unary_backward_only(ctx),
    }
}

#[derive(Clone, Copy)]
enum Combine {
    Any,
    All,
    First,
}

fn binary(ctx: &RuleCtx, combine: Combine) -> OpResult<Proposal> {
    let mut p = Proposal::new(ctx);
    let n_in = ctx.ins.iter().flatten().count();
    if n_in != 2 || ctx.ins.len() != 2 {
        return Ok(p);
    }
    let out_shape = &ctx.out_facts[0].shape;
    let shapes: Vec<&[usize]> = (0..2).map(|i| ctx.in_facts[i].unwrap().shape.as_slice()).collect();
    // Each input broadcast to the output: element k of both is what output k reads.
    let wide: Vec<BitMask> = (0..2).map(|i| bits_of(ctx, i).broadcast(shapes[i], out_shape)).collect();
    let mut fwd = wide[0].clone();
    match combine {
        Combine::Any => {
            fwd.or_assign(&wide[1]);
        }
        Combine::All => fwd.and_assign(&wide[1]),
        Combine::First => {}
    }
    let y = ctx.outs[0].pruned_bits();
    for i in 0..2 {
        // For Mul an output element also stops needing one operand where the other is
        // pruned (x·0 = 0 whatever x is).
        let y_i = match combine {
            Combine::Any => {
                let mut y_i = y.clone();
                y_i.or_assign(&wide[1 - i]);
                y_i
            }
            _ => y.clone(),
        };
        p.inputs[i] = Some(y_i.reduce_all(shapes[i], out_shape));
    }
    p.outputs[0] = Some(fwd);
    Ok(p)
}

/// `Where(cond, a, b)`: an output element is pruned when both candidates are (whatever
/// the condition picks); backward, a candidate element is pruned when every output
/// element it broadcasts to is. The condition is never pruned.
fn where_select(ctx: &RuleCtx) -> OpResult<Proposal> {
    let mut p = Proposal::new(ctx);
    if ctx.ins.len() != 3 || ctx.ins.iter().any(|t| t.is_none()) {
        return Ok(p);
    }
    let out_shape = &ctx.out_facts[0].shape;
    let shape = |i: usize| ctx.in_facts[i].unwrap().shape.as_slice();
    let mut fwd = bits_of(ctx, 1).broadcast(shape(1), out_shape);
    fwd.and_assign(&bits_of(ctx, 2).broadcast(shape(2), out_shape));
    p.outputs[0] = Some(fwd);
    let y = ctx.outs[0].pruned_bits();
    for i in 1..3 {
        p.inputs[i] = Some(y.reduce_all(shape(i), out_shape));
    }
    Ok(p)
}

fn matmul(ctx: &RuleCtx) -> OpResult<Proposal> {
    input(ctx, 0)?;
    input(ctx, 1)?;
    let mut a_shape = ctx.in_facts[0].unwrap().shape.clone();
    let mut b_shape = ctx.in_facts[1].unwrap().shape.clone();
    if a_shape.len() == 1 {
        a_shape.insert(0, 1);
    }
    if b_shape.len() == 1 {
        b_shape.push(1);
    }
    // A 2-D right operand is shared by every batch: fold A's batch into its rows, one
    // product instead of one per batch.
    if b_shape.len() == 2 && a_shape.len() > 2 {
        let rows: usize = a_shape[..a_shape.len() - 1].iter().product();
        a_shape = vec![rows, a_shape[a_shape.len() - 1]];
    }
    let (m, n) = (a_shape[a_shape.len() - 2], b_shape[b_shape.len() - 1]);
    let y_numel = ctx.out_facts[0].numel();
    let batch_n = y_numel.checked_div(m * n).unwrap_or(0);
    let y_batch = crate::ir::broadcast_shapes(&a_shape[..a_shape.len() - 2], &b_shape[..b_shape.len() - 2])
        .ok_or_else(|| OpError::new("MatMul batch dims do not broadcast"))?;
    debug_assert_eq!(y_batch.iter().product::<usize>(), batch_n);
    let (fwd, ba, bb) = matmul::matmul_masks(
        &bits_of(ctx, 0),
        &a_shape,
        &bits_of(ctx, 1),
        &b_shape,
        &ctx.outs[0].pruned_bits(),
        &y_batch,
    );
    let mut p = Proposal::new(ctx);
    p.outputs[0] = Some(fwd);
    p.inputs[0] = Some(ba);
    p.inputs[1] = Some(bb);
    Ok(p)
}

/// A `rows × cols` mask transposed.
fn transpose_2d(mask: &BitMask, rows: usize, cols: usize) -> BitMask {
    mask.permute(&[rows, cols], &[1, 0])
}

fn gemm(ctx: &RuleCtx) -> OpResult<Proposal> {
    input(ctx, 0)?;
    input(ctx, 1)?;
    let attrs = &ctx.node.attrs;
    let (ta, tb) = (attrs.int("transA", 0)? != 0, attrs.int("transB", 0)? != 0);
    let (alpha, beta) = (attrs.float("alpha", 1.0)?, attrs.float("beta", 1.0)?);
    let a_shape = &ctx.in_facts[0].unwrap().shape;
    let b_shape = &ctx.in_facts[1].unwrap().shape;
    let (mut a, mut b) = (bits_of(ctx, 0), bits_of(ctx, 1));
    let (m, k) = if ta { (a_shape[1], a_shape[0]) } else { (a_shape[0], a_shape[1]) };
    let n = if tb { b_shape[0] } else { b_shape[1] };
    if ta {
        a = transpose_2d(&a, k, m);
    }
    if tb {
        b = transpose_2d(&b, n, k);
    }
    if alpha == 0.0 {
        a = BitMask::ones(a.len());
    }
    let y = ctx.outs[0].pruned_bits();
    let (mut fwd, mut ba, mut bb) = matmul::matmul_masks(&a, &[m, k], &b, &[k, n], &y, &[]);
    let mut p = Proposal::new(ctx);
    // With C: Y = mm + C is pruned where both are.
    if let (Some(Some(c_fact)), true) = (ctx.in_facts.get(2), beta != 0.0) {
        fwd.and_assign(&bits_of(ctx, 2).broadcast(&c_fact.shape, &[m, n]));
        fwd.or_assign(&y);
        p.inputs[2] = Some(y.reduce_all(&c_fact.shape, &[m, n]));
    }
    if ta {
        ba = transpose_2d(&ba, m, k);
    }
    if tb {
        bb = transpose_2d(&bb, k, n);
    }
    p.outputs[0] = Some(fwd);
    p.inputs[0] = Some(ba);
    p.inputs[1] = Some(bb);
    Ok(p)
}

fn transpose(ctx: &RuleCtx) -> OpResult<Proposal> {
    input(ctx, 0)?;
    let in_shape = &ctx.in_facts[0].unwrap().shape;
    let rank = in_shape.len();
    let perm: Vec<usize> = match ctx.node.attrs.ints_opt("perm")? {
        Some(p) => p.iter().map(|&x| x as usize).collect(),
        None => (0..rank).rev().collect(),
    };
    let out_shape: Vec<usize> = perm.iter().map(|&p| in_shape[p]).collect();
    // Backward is the inverse permutation of the output's mask.
    let mut inverse = vec![0; rank];
    for (a, &p) in perm.iter().enumerate() {
        inverse[p] = a;
    }
    let mut p = Proposal::new(ctx);
    p.outputs[0] = Some(bits_of(ctx, 0).permute(in_shape, &perm));
    p.inputs[0] = Some(ctx.outs[0].pruned_bits().permute(&out_shape, &inverse));
    Ok(p)
}

fn same_elements(ctx: &RuleCtx) -> OpResult<Proposal> {
    unary_zero_preserving(ctx)
}

/// (outer, inner sizes per piece) for pieces concatenated along `axis`.
fn pieces(shapes: &[&[usize]], axis: usize) -> (usize, Vec<usize>) {
    let outer: usize = shapes[0][..axis].iter().product();
    (outer, shapes.iter().map(|s| s[axis..].iter().product()).collect())
}

fn concat(ctx: &RuleCtx) -> OpResult<Proposal> {
    let rank = ctx.out_facts[0].shape.len();
    let axis = crate::ir::normalize_axis(ctx.node.attrs.req_int("axis")?, rank)
        .ok_or_else(|| OpError::new("axis out of range"))?;
    if ctx.ins.iter().any(|t| t.is_none()) {
        return Ok(Proposal::new(ctx));
    }
    let shapes: Vec<&[usize]> = ctx.in_facts.iter().map(|f| f.unwrap().shape.as_slice()).collect();
    let (outer, inners) = pieces(&shapes, axis);
    let total: usize = inners.iter().sum();
    let y = ctx.outs[0].pruned_bits();
    let mut fwd = BitMask::new(y.len());
    let mut p = Proposal::new(ctx);
    let mut offset = 0;
    for (i, &inner) in inners.iter().enumerate() {
        let x = bits_of(ctx, i);
        let mut back = BitMask::new(x.len());
        for o in 0..outer {
            fwd.copy_run(o * total + offset, &x, o * inner, inner);
            back.copy_run(o * inner, &y, o * total + offset, inner);
        }
        p.inputs[i] = Some(back);
        offset += inner;
    }
    p.outputs[0] = Some(fwd);
    Ok(p)
}

fn split(ctx: &RuleCtx) -> OpResult<Proposal> {
    input(ctx, 0)?;
    let in_shape = &ctx.in_facts[0].unwrap().shape;
    let axis = crate::ir::normalize_axis(ctx.node.attrs.int("axis", 0)?, in_shape.len())
        .ok_or_else(|| OpError::new("axis out of range"))?;
    let shapes: Vec<&[usize]> = ctx.out_facts.iter().map(|f| f.shape.as_slice()).collect();
    let (outer, inners) = pieces(&shapes, axis);
    let total: usize = in_shape[axis..].iter().product();
    if inners.iter().sum::<usize>() != total {
        return Ok(Proposal::new(ctx));
    }
    let x = bits_of(ctx, 0);
    let mut back = BitMask::ones(x.len());
    let mut p = Proposal::new(ctx);
    let mut offset = 0;
    for (j, &inner) in inners.iter().enumerate() {
        let y = ctx.outs[j].pruned_bits();
        let mut fwd = BitMask::new(y.len());
        for o in 0..outer {
            fwd.copy_run(o * inner, &x, o * total + offset, inner);
            back.copy_run(o * total + offset, &y, o * inner, inner);
        }
        p.outputs[j] = Some(fwd);
        offset += inner;
    }
    p.inputs[0] = Some(back);
    Ok(p)
}

/// Per channel of an `[N, C, ...]` mask: true when the whole channel (all n) is pruned.
fn channel_all(mask: &[bool], shape: &[usize]) -> Vec<bool> {
    let (n, c) = (shape[0], shape[1]);
    let plane: usize = shape[2..].iter().product();
    (0..c).map(|ch| (0..n).all(|b| mask[(b * c + ch) * plane..(b * c + ch + 1) * plane].iter().all(|m| *m))).collect()
}

fn conv(ctx: &RuleCtx) -> OpResult<Proposal> {
    input(ctx, 0)?;
    input(ctx, 1)?;
    let x_shape = &ctx.in_facts[0].unwrap().shape;
    let w_shape = &ctx.in_facts[1].unwrap().shape;
    let y_shape = &ctx.out_facts[0].shape;
    let group = ctx.node.attrs.int("group", 1)?.max(1) as usize;
    let (c_in, o_n, c_g) = (x_shape[1], w_shape[0], w_shape[1]);
    let o_per_group = o_n / group;
    let ksize: usize = w_shape[2..].iter().product();
    let x = mask_of(ctx, 0);
    let w = mask_of(ctx, 1);
    let bias = ctx.ins.get(2).copied().flatten().map(|t| t.mask());
    let x_dead = channel_all(&x, x_shape);
    let y = ctx.outs[0].mask();
    let y_dead = channel_all(&y, y_shape);
    let w_at = |o: usize, ci: usize| &w[(o * c_g + ci) * ksize..(o * c_g + ci + 1) * ksize];
    let mut p = Proposal::new(ctx);
    // Forward: a filter whose every unpruned weight reads a dead input channel is dead.
    let mut fwd = y.clone();
    let plane: usize = y_shape[2..].iter().product();
    for o in 0..o_n {
        let g = o / o_per_group.max(1);
        let filter_dead = (0..c_g).all(|ci| x_dead[g * c_g + ci] || w_at(o, ci).iter().all(|m| *m));
        let bias_dead = bias.as_ref().is_none_or(|b| b[o]);
        if filter_dead && bias_dead {
            for b in 0..y_shape[0] {
                fwd[(b * o_n + o) * plane..(b * o_n + o + 1) * plane].iter_mut().for_each(|m| *m = true);
            }
        }
    }
    // Backward on weights: filters of dead outputs, and slices reading dead inputs.
    let mut w_back = vec![false; w.len()];
    for o in 0..o_n {
        let g = o / o_per_group.max(1);
        for ci in 0..c_g {
            if y_dead[o] || x_dead[g * c_g + ci] {
                w_back[(o * c_g + ci) * ksize..(o * c_g + ci + 1) * ksize].iter_mut().for_each(|m| *m = true);
            }
        }
    }
    // Backward on the input: a channel no live filter reads with an unpruned weight.
    let mut x_back = vec![false; x.len()];
    let x_plane: usize = x_shape[2..].iter().product();
    for c in 0..c_in {
        let (g, ci) = (c / c_g, c % c_g);
        let unused = (g * o_per_group..(g + 1) * o_per_group).all(|o| y_dead[o] || w_at(o, ci).iter().all(|m| *m));
        if unused {
            for b in 0..x_shape[0] {
                x_back[(b * c_in + c) * x_plane..(b * c_in + c + 1) * x_plane].iter_mut().for_each(|m| *m = true);
            }
        }
    }
    p.outputs[0] = Some(BitMask::from_bools(&fwd));
    p.inputs[0] = Some(BitMask::from_bools(&x_back));
    p.inputs[1] = Some(BitMask::from_bools(&w_back));
    if bias.is_some() {
        p.inputs[2] = Some(BitMask::from_bools(&y_dead));
    }
    Ok(p)
}

fn batch_norm(ctx: &RuleCtx) -> OpResult<Proposal> {
    input(ctx, 0)?;
    let mut p = Proposal::new(ctx);
    if ctx.outs.len() != 1 || ctx.ins.len() < 5 {
        return Ok(p);
    }
    let x_shape = &ctx.in_facts[0].unwrap().shape;
    let c = x_shape[1];
    let plane: usize = x_shape[2..].iter().product();
    let y = ctx.outs[0].mask();
    let y_dead = channel_all(&y, x_shape);
    // Forward needs the constants (pruned elements count as zero).
    let vals: Option<Vec<Vec<f64>>> = (1..5)
        .map(|i| {
            let t = ctx.consts.get(i).copied().flatten()?;
            let tesa = ctx.ins[i]?;
            Some(tesa.apply_to(t).to_f64_vec())
        })
        .collect();
    if let Some(v) = vals {
        let eps = ctx.node.attrs.float("epsilon", 1e-5)? as f64;
        let x = mask_of(ctx, 0);
        let mut fwd = y.clone();
        // Four parameter vectors indexed by the same channel.
        #[allow(clippy::needless_range_loop)]
        for ch in 0..c {
            let a = v[0][ch] / (v[3][ch] + eps).sqrt();
            let b = v[1][ch] - v[2][ch] * a;
            if b != 0.0 {
                continue;
            }
            for n in 0..x_shape[0] {
                for r in 0..plane {
                    let i = (n * c + ch) * plane + r;
                    fwd[i] = fwd[i] || x[i] || a == 0.0;
                }
            }
        }
        p.outputs[0] = Some(BitMask::from_bools(&fwd));
    }
    p.inputs[0] = Some(BitMask::from_bools(&y));
    for i in 1..5 {
        p.inputs[i] = Some(BitMask::from_bools(&y_dead));
    }
    Ok(p)
}

fn global_average_pool(ctx: &RuleCtx) -> OpResult<Proposal> {
    input(ctx, 0)?;
    let x_shape = &ctx.in_facts[0].unwrap().shape;
    let plane: usize = x_shape[2..].iter().product();
    let x = mask_of(ctx, 0);
    let y = ctx.outs[0].mask();
    let mut p = Proposal::new(ctx);
    let fwd: Vec<bool> = (0..y.len()).map(|i| x[i * plane..(i + 1) * plane].iter().all(|m| *m)).collect();
    let back: Vec<bool> = (0..x.len()).map(|i| y[i / plane.max(1)]).collect();
    p.outputs[0] = Some(BitMask::from_bools(&fwd));
    p.inputs[0] = Some(BitMask::from_bools(&back));
    Ok(p)
}
