//! Reductions: ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1,
//! ReduceL2, ReduceSumSquare, ReduceLogSum and ReduceLogSumExp, with keepdims, axes as an
//! attribute (before opset 13 for ReduceSum, 18 for the others) or as an input, and
//! noop_with_empty_axes. Float values accumulate in f64; integer sums and products wrap
//! in i64 like the element type would; Max and Min compare in the element type itself.
//! Reducing an empty set gives the identity: 0, 1, -inf / the type's minimum for Max,
//! +inf / the maximum for Min, and ln(0) = -inf for the log reductions.

use super::{constant_input, optional, required, FamilyRegistrar, InferInput, NodeCtx, OpResult};
use crate::bail_op;
use crate::ir::{normalize_axis, numel, strides, DType, Data, Element, Tensor, ValueFact};
use rayon::prelude::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
    L1,
    L2,
    SumSquare,
    LogSum,
    LogSumExp,
}

macro_rules! register_reductions {
    ($reg:ident; $($op:literal => $kind:ident),* $(,)?) => {
        $( $reg.op($op, |ctx, inputs| infer(Kind::$kind, ctx, inputs), |ctx, inputs| eval(Kind::$kind, ctx, inputs)); )*
    };
}

pub(super) fn register(reg: &mut FamilyRegistrar) {
    register_reductions!(reg;
        "ReduceSum" => Sum,
        "ReduceMean" => Mean,
        "ReduceMax" => Max,
        "ReduceMin" => Min,
        "ReduceProd" => Prod,
        "ReduceL1" => L1,
        "ReduceL2" => L2,
        "ReduceSumSquare" => SumSquare,
        "ReduceLogSum" => LogSum,
        "ReduceLogSumExp" => LogSumExp,
    );
}

/// Which axes a node reduces, and the output shape.
#[derive(Debug)]
struct Plan {
    /// `None`: empty axes with noop_with_empty_axes, the output is the input.
    reduced: Option<Vec<bool>>,
    out_shape: Vec<usize>,
}

/// The opset from which the op takes its axes as an input instead of an attribute.
fn axes_input_opset(kind: Kind) -> i64 {
    if kind == Kind::Sum {
        13
    } else {
        18
    }
}

fn plan(kind: Kind, ctx: &NodeCtx, shape: &[usize], axes_input: Option<&Tensor>) -> OpResult<Plan> {
    let axes: Vec<i64> = if ctx.opset >= axes_input_opset(kind) {
        axes_input.map(|t| t.to_i64_vec()).unwrap_or_default()
    } else {
        ctx.attrs.ints_opt("axes")?.map(|a| a.to_vec()).unwrap_or_default()
    };
    let keepdims = ctx.attrs.int("keepdims", 1)? != 0;
    if axes.is_empty() && ctx.attrs.int("noop_with_empty_axes", 0)? != 0 {
        return Ok(Plan { reduced: None, out_shape: shape.to_vec() });
    }
    let rank = shape.len();
    let mut reduced = vec![axes.is_empty(); rank];
    for &a in &axes {
        match normalize_axis(a, rank) {
            Some(i) if !reduced[i] => reduced[i] = true,
            Some(_) => bail_op!("axis {a} is listed twice in {axes:?}"),
            None => bail_op!("axis {a} is out of range for rank {rank}"),
        }
    }
    let out_shape = shape
        .iter()
        .zip(&reduced)
        .filter_map(|(&d, &r)| match (r, keepdims) {
            (false, _) => Some(d),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect();
    Ok(Plan { reduced: Some(reduced), out_shape })
}

/// For the sparsity rules: the flat output index each input element of `shape` folds
/// into, for a reduction node of type `op_type` (`axes` = its axes input, if any).
pub(crate) fn reduce_target_of_each_input(
    op_type: &str,
    ctx: &NodeCtx,
    shape: &[usize],
    axes: Option<&Tensor>,
) -> OpResult<Vec<usize>> {
    let kind = match op_type {
        "ReduceSum" => Kind::Sum,
        "ReduceMean" => Kind::Mean,
        "ReduceMax" => Kind::Max,
        "ReduceMin" => Kind::Min,
        "ReduceProd" => Kind::Prod,
        "ReduceL1" => Kind::L1,
        "ReduceL2" => Kind::L2,
        "ReduceSumSquare" => Kind::SumSquare,
        "ReduceLogSum" => Kind::LogSum,
        "ReduceLogSumExp" => Kind::LogSumExp,
        other => bail_op!("{other} is not a reduction"),
    };
    let n = numel(shape);
    let Some(reduced) = plan(kind, ctx, shape, axes)?.reduced else { return Ok((0..n).collect()) };
    let kept_dims: Vec<usize> = shape.iter().zip(&reduced).filter(|(_, r)| !**r).map(|(d, _)| *d).collect();
    let kept_strides = strides(&kept_dims);
    let in_strides = strides(shape);
    Ok((0..n)
        .map(|i| {
            let (mut rest, mut o, mut k) = (i, 0, 0);
            for ax in 0..shape.len() {
                let c = rest / in_strides[ax];
                rest %= in_strides[ax];
                if !reduced[ax] {
                    o += c * kept_strides[k];
                    k += 1;
                }
            }
            o
        })
        .collect())
}

fn check_dtype(kind: Kind, dtype: DType) -> OpResult<()> {
    if dtype == DType::Bool && !matches!(kind, Kind::Max | Kind::Min) {
        bail_op!("{kind:?} reduction does not take bool tensors");
    }
    Ok(())
}

fn infer(kind: Kind, ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    let x = required(inputs, 0)?.fact;
    check_dtype(kind, x.dtype)?;
    let axes = match optional(inputs, 1) {
        Some(_) if ctx.opset >= axes_input_opset(kind) => Some(constant_input(inputs, 1, "axes")?),
        _ => None,
    };
    Ok(vec![ValueFact::new(x.dtype, plan(kind, ctx, &x.shape, axes)?.out_shape)])
}

/// Where each output's inputs are: output `o` folds `x[base(o) + offsets[r]]` over `r`.
struct Layout {
    n_out: usize,
    /// Number of reduced elements per output.
    n_red: usize,
    /// `None` when the reduced axes are the trailing ones: base(o) = o * n_red and the
    /// offsets are 0..n_red (a contiguous slice).
    gather: Option<(Vec<usize>, Vec<usize>)>,
}

fn layout(shape: &[usize], reduced: &[bool]) -> Layout {
    let n_red: usize = shape.iter().zip(reduced).filter(|(_, &r)| r).map(|(&d, _)| d).product();
    let n_out: usize = shape.iter().zip(reduced).filter(|(_, &r)| !r).map(|(&d, _)| d).product();
    let first_reduced = reduced.iter().position(|&r| r).unwrap_or(shape.len());
    if reduced[first_reduced..].iter().all(|&r| r) {
        return Layout { n_out, n_red, gather: None };
    }
    let st = strides(shape);
    // Flat offsets of every multi-index over the selected axes, row-major.
    let offsets = |want_reduced: bool| -> Vec<usize> {
        let mut out = vec![0usize];
        for ax in 0..shape.len() {
            if reduced[ax] == want_reduced {
                let (dim, stride) = (shape[ax], st[ax]);
                out = out.iter().flat_map(|&o| (0..dim).map(move |i| o + i * stride)).collect();
            }
        }
        out
    };
    Layout { n_out, n_red, gather: Some((offsets(false), offsets(true))) }
}

/// Folds every output's elements with `step`, starting from `init`.
fn fold<T: Copy + Sync, A: Copy + Send + Sync>(
    l: &Layout,
    x: &[T],
    init: A,
    step: impl Fn(A, T) -> A + Sync,
) -> Vec<A> {
    let one = |o: usize| -> A {
        match &l.gather {
            None => x[o * l.n_red..(o + 1) * l.n_red].iter().fold(init, |a, &v| step(a, v)),
            Some((base, offsets)) => offsets.iter().fold(init, |a, &r| step(a, x[base[o] + r])),
        }
    };
    if l.n_out > 1 && l.n_out * l.n_red >= 1 << 16 {
        (0..l.n_out).into_par_iter().map(one).collect()
    } else {
        (0..l.n_out).map(one).collect()
    }
}

fn is_nan<T: PartialEq>(v: T) -> bool {
    #[allow(clippy::eq_op)]
    let nan = v != v;
    nan
}

/// Max or Min in the element type; NaN wins (propagates) like numpy.
fn extremum<T: Element>(l: &Layout, x: &[T], max: bool) -> Vec<T> {
    let init = match (max, T::DTYPE) {
        (true, DType::Bool) => T::from_f64(0.0),
        (true, _) => T::from_f64(f64::NEG_INFINITY),
        (false, _) => T::from_f64(f64::INFINITY),
    };
    fold(l, x, init, |a, v| {
        let better = if max { v > a } else { v < a };
        if !is_nan(a) && (better || is_nan(v)) {
            v
        } else {
            a
        }
    })
}

fn reduce_f64(kind: Kind, l: &Layout, x: &[f64]) -> Vec<f64> {
    let n = l.n_red as f64;
    match kind {
        Kind::Sum => fold(l, x, 0.0, |a, v| a + v),
        Kind::Mean => fold(l, x, 0.0, |a, v| a + v).into_iter().map(|s| s / n).collect(),
        Kind::Prod => fold(l, x, 1.0, |a, v| a * v),
        Kind::L1 => fold(l, x, 0.0, |a, v| a + v.abs()),
        Kind::L2 => fold(l, x, 0.0, |a, v| a + v * v).into_iter().map(f64::sqrt).collect(),
        Kind::SumSquare => fold(l, x, 0.0, |a, v| a + v * v),
        Kind::LogSum => fold(l, x, 0.0, |a, v| a + v).into_iter().map(f64::ln).collect(),
        Kind::LogSumExp => logsumexp(l, x, &extremum(l, x, true)),
        Kind::Max | Kind::Min => extremum(l, x, kind == Kind::Max),
    }
}

/// `max + ln(sum(exp(x - max)))`: shifted by the maximum so large inputs do not overflow.
fn logsumexp(l: &Layout, x: &[f64], peaks: &[f64]) -> Vec<f64> {
    (0..l.n_out)
        .map(|o| {
            let m = peaks[o];
            if !m.is_finite() {
                return m;
            }
            let sum: f64 = match &l.gather {
                None => x[o * l.n_red..(o + 1) * l.n_red].iter().map(|v| (v - m).exp()).sum(),
                Some((base, offsets)) => offsets.iter().map(|&r| (x[base[o] + r] - m).exp()).sum(),
            };
            m + sum.ln()
        })
        .collect()
}

/// Sums and products of integers, wrapping like the element type.
fn reduce_i64(kind: Kind, l: &Layout, x: &[i64]) -> Vec<i64> {
    match kind {
        Kind::Sum => fold(l, x, 0i64, |a, v| a.wrapping_add(v)),
        Kind::Prod => fold(l, x, 1i64, |a, v| a.wrapping_mul(v)),
        Kind::L1 => fold(l, x, 0i64, |a, v| a.wrapping_add(v.wrapping_abs())),
        Kind::SumSquare => fold(l, x, 0i64, |a, v| a.wrapping_add(v.wrapping_mul(v))),
        _ => unreachable!("{kind:?} is computed in f64"),
    }
}

fn eval(kind: Kind, ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    let x = *required(inputs, 0)?;
    check_dtype(kind, x.dtype())?;
    let axes = if ctx.opset >= axes_input_opset(kind) { optional(inputs, 1) } else { None };
    let p = plan(kind, ctx, x.shape(), axes)?;
    let Some(reduced) = p.reduced else {
        return Ok(vec![x.clone()]);
    };
    let l = layout(x.shape(), &reduced);
    let dtype = x.dtype();
    let data = match kind {
        Kind::Max | Kind::Min => {
            let max = kind == Kind::Max;
            macro_rules! ext {
                ($($variant:ident),*) => {
                    match x.data() {
                        $(Data::$variant(v) => Data::$variant(extremum(&l, v, max)),)*
                    }
                };
            }
            ext!(Bool, U8, I8, U16, I16, U32, I32, U64, I64, F16, BF16, F32, F64)
        }
        Kind::Sum | Kind::Prod | Kind::L1 | Kind::SumSquare if dtype.is_int() => {
            Data::I64(reduce_i64(kind, &l, &x.to_i64_vec())).cast(dtype)
        }
        _ => {
            let xv = match x.as_slice::<f32>() {
                Some(v) => v.iter().map(|&v| v as f64).collect(),
                None => x.to_f64_vec(),
            };
            let out = reduce_f64(kind, &l, &xv);
            match dtype {
                DType::F32 => Data::F32(out.iter().map(|&v| v as f32).collect()),
                _ => Data::from_f64_iter(dtype, out.into_iter()),
            }
        }
    };
    debug_assert_eq!(data.len(), numel(&p.out_shape));
    Ok(vec![Tensor::new(p.out_shape, data).expect("length computed from shape")])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Attr, Attrs};

    fn run(op: &str, opset: i64, attrs: &[(&str, Attr)], inputs: &[Option<&Tensor>]) -> OpResult<Tensor> {
        let mut a = Attrs::new();
        for (k, v) in attrs {
            a.insert(*k, v.clone());
        }
        let ctx = NodeCtx { name: "t", attrs: &a, opset, n_outputs: 1 };
        Ok((crate::ops::registry().get(op).unwrap().eval)(&ctx, inputs)?.remove(0))
    }

    fn x234() -> Tensor {
        Tensor::from_vec(vec![2, 3, 4], (0..24).map(|v| v as f32).collect())
    }

    #[test]
    fn axes_come_from_the_attribute_or_the_input_by_opset() {
        let x = x234();
        let axes = Tensor::from_vec(vec![2], vec![0i64, 2]);
        let a = run("ReduceSum", 13, &[("keepdims", Attr::Int(0))], &[Some(&x), Some(&axes)]).unwrap();
        let b = run("ReduceSum", 11, &[("keepdims", Attr::Int(0)), ("axes", Attr::Ints(vec![0, -1]))], &[Some(&x)])
            .unwrap();
        assert_eq!(a, b);
        assert_eq!(a.as_slice::<f32>().unwrap(), &[60.0, 92.0, 124.0]);
        let mean = run("ReduceMean", 18, &[], &[Some(&x), Some(&axes)]).unwrap();
        assert_eq!(mean.shape(), &[1, 3, 1]);
        assert_eq!(mean.as_slice::<f32>().unwrap(), &[7.5, 11.5, 15.5]);
    }

    #[test]
    fn trailing_and_gathered_axes_agree_with_a_direct_sum() {
        let x = x234();
        let last = run("ReduceMax", 13, &[("axes", Attr::Ints(vec![1, 2]))], &[Some(&x)]).unwrap();
        assert_eq!(last.as_slice::<f32>().unwrap(), &[11.0, 23.0]);
        let middle =
            run("ReduceMin", 13, &[("axes", Attr::Ints(vec![1])), ("keepdims", Attr::Int(0))], &[Some(&x)]).unwrap();
        assert_eq!(middle.shape(), &[2, 4]);
        assert_eq!(middle.as_slice::<f32>().unwrap(), &[0.0, 1.0, 2.0, 3.0, 12.0, 13.0, 14.0, 15.0]);
    }

    #[test]
    fn empty_axes_reduce_all_or_nothing() {
        let x = x234();
        let all = run("ReduceSum", 13, &[("keepdims", Attr::Int(0))], &[Some(&x)]).unwrap();
        assert_eq!(all.as_slice::<f32>().unwrap(), &[276.0]);
        let noop = run("ReduceSum", 13, &[("noop_with_empty_axes", Attr::Int(1))], &[Some(&x)]).unwrap();
        assert_eq!(noop, x);
    }

    #[test]
    fn empty_sets_give_the_identity() {
        let x = Tensor::from_vec(vec![2, 0], Vec::<f32>::new());
        let axes = [("axes", Attr::Ints(vec![1]))];
        let get = |op: &str| run(op, 11, &axes, &[Some(&x)]).unwrap().to_f64_vec();
        assert_eq!(get("ReduceSum"), vec![0.0, 0.0]);
        assert_eq!(get("ReduceProd"), vec![1.0, 1.0]);
        assert_eq!(get("ReduceMax"), vec![f64::NEG_INFINITY; 2]);
        assert_eq!(get("ReduceMin"), vec![f64::INFINITY; 2]);
        assert_eq!(get("ReduceLogSumExp"), vec![f64::NEG_INFINITY; 2]);
        let b = Tensor::from_vec(vec![2, 0], Vec::<bool>::new());
        let max = run("ReduceMax", 13, &axes, &[Some(&b)]).unwrap();
        assert_eq!(max.as_slice::<bool>().unwrap(), &[false, false]);
    }

    #[test]
    fn integer_reductions_stay_exact() {
        let x = Tensor::from_vec(vec![3], vec![i64::MAX - 1, 1, 3]);
        let max = run("ReduceMax", 13, &[], &[Some(&x)]).unwrap();
        assert_eq!(max.as_slice::<i64>().unwrap(), &[i64::MAX - 1]);
        let sum = run("ReduceSum", 13, &[], &[Some(&Tensor::from_vec(vec![2], vec![i64::MAX - 5, 2]))]).unwrap();
        assert_eq!(sum.as_slice::<i64>().unwrap(), &[i64::MAX - 3]);
        let u = Tensor::from_vec(vec![2], vec![u64::MAX, 1]);
        assert_eq!(run("ReduceMax", 13, &[], &[Some(&u)]).unwrap().as_slice::<u64>().unwrap(), &[u64::MAX]);
    }

    #[test]
    fn log_sum_exp_does_not_overflow() {
        let x = Tensor::from_vec(vec![2], vec![1000.0f32, 1000.0]);
        let y = run("ReduceLogSumExp", 18, &[], &[Some(&x)]).unwrap();
        assert!((y.to_f64_vec()[0] - (1000.0 + 2f64.ln())).abs() < 1e-3);
    }
}
