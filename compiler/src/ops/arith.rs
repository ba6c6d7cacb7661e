//! Arithmetic: the binary Add, Sub, Mul, Div, Pow with numpy broadcasting (and the
//! `broadcast`/`axis` attributes of opset < 7); the unary Sqrt, Reciprocal, Neg, Abs,
//! Exp, Log, Erf; the variadic Min, Max, Sum, Mean. The broadcasting kernels live in
//! [`elementwise`] and serve the activation and logic families too.

pub(super) mod elementwise;

use super::{required, FamilyRegistrar, InferInput, NodeCtx, OpResult};
use crate::bail_op;
use crate::ir::{broadcast_all, DType, Data, Element, Tensor, ValueFact};
use elementwise::{map, map_float, max_nan, min_nan, numeric_one, numeric_pair, tensor_of, zip2, Broadcast, Num};

pub(super) fn register(reg: &mut FamilyRegistrar) {
    reg.op("Add", infer_arith, eval_add)
        .op("Sub", infer_arith, eval_sub)
        .op("Mul", infer_arith, eval_mul)
        .op("Div", infer_arith, eval_div)
        .op("Pow", infer_pow, eval_pow)
        .op("Sqrt", infer_float_unary, eval_sqrt)
        .op("Reciprocal", infer_float_unary, eval_reciprocal)
        .op("Exp", infer_float_unary, eval_exp)
        .op("Log", infer_float_unary, eval_log)
        .op("Erf", infer_float_unary, eval_erf)
        .op("Neg", infer_neg, eval_neg)
        .op("Abs", infer_abs, eval_abs)
        .op("Min", infer_variadic, eval_min)
        .op("Max", infer_variadic, eval_max)
        .op("Sum", infer_variadic_float, eval_sum)
        .op("Mean", infer_variadic_float, eval_mean);
}

// ---- binary ops: shared inference, also used by the logic family ----

/// The shape the second operand of a binary op broadcasts with. From opset 7 on that
/// is its own shape (numpy rules); before, broadcasting needed `broadcast=1` and the
/// second operand lined up with the first at `axis` (by default at the trailing axes).
pub(super) fn rhs_shape(ctx: &NodeCtx, a: &[usize], b: &[usize]) -> OpResult<Vec<usize>> {
    if ctx.opset >= 7 || a == b {
        return Ok(b.to_vec());
    }
    if ctx.attrs.int("broadcast", 0)? == 0 {
        bail_op!("shapes {a:?} and {b:?} differ and broadcast=0 (opset {})", ctx.opset);
    }
    let Some(axis) = ctx.attrs.int_opt("axis")? else {
        return Ok(b.to_vec());
    };
    let axis = if axis < 0 { axis + a.len() as i64 } else { axis };
    if axis < 0 || axis as usize + b.len() > a.len() {
        bail_op!("axis {axis} does not fit shape {b:?} into shape {a:?}");
    }
    let mut shape = vec![1; a.len()];
    shape[axis as usize..axis as usize + b.len()].copy_from_slice(b);
    Ok(shape)
}

/// Output type of a broadcasting binary op whose operands share one type (checked with
/// `accepts`), with element type `out` (or the operands' when `None`).
pub(super) fn infer_binary(
    ctx: &NodeCtx,
    inputs: &[Option<InferInput>],
    accepts: fn(DType) -> bool,
    out: Option<DType>,
) -> OpResult<Vec<ValueFact>> {
    let (a, b) = (required(inputs, 0)?.fact, required(inputs, 1)?.fact);
    if a.dtype != b.dtype {
        bail_op!("operand types differ: {} and {}", a.dtype, b.dtype);
    }
    if !accepts(a.dtype) {
        bail_op!("operands of type {} are not supported", a.dtype);
    }
    let b_shape = rhs_shape(ctx, &a.shape, &b.shape)?;
    let plan = Broadcast::new([&a.shape, &b_shape])?;
    Ok(vec![ValueFact::new(out.unwrap_or(a.dtype), plan.out_shape)])
}

pub(super) fn is_numeric(d: DType) -> bool {
    d != DType::Bool
}

fn infer_arith(ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    infer_binary(ctx, inputs, is_numeric, None)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Arith {
    Add,
    Sub,
    Mul,
    Div,
}

fn eval_arith(ctx: &NodeCtx, inputs: &[Option<&Tensor>], op: Arith) -> OpResult<Vec<Tensor>> {
    let (a, b) = (*required(inputs, 0)?, *required(inputs, 1)?);
    let b_shape = rhs_shape(ctx, a.shape(), b.shape())?;
    let plan = Broadcast::new([a.shape(), &b_shape])?;
    let data: Data = numeric_pair!((a.data(), b.data()), |x, y| {
        if op == Arith::Div && b.dtype().is_int() && y.iter().any(|v| v.is_int_zero()) {
            bail_op!("integer division by zero");
        }
        Element::wrap(match op {
            Arith::Add => zip2(&plan, x, y, Num::add),
            Arith::Sub => zip2(&plan, x, y, Num::sub),
            Arith::Mul => zip2(&plan, x, y, Num::mul),
            Arith::Div => zip2(&plan, x, y, Num::div),
        })
    }, else bail_op!("unsupported operand types {} and {}", a.dtype(), b.dtype()));
    Ok(vec![Tensor::new(plan.out_shape, data).expect("kernel output matches the broadcast shape")])
}

fn eval_add(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    eval_arith(ctx, inputs, Arith::Add)
}

fn eval_sub(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    eval_arith(ctx, inputs, Arith::Sub)
}

fn eval_mul(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    eval_arith(ctx, inputs, Arith::Mul)
}

fn eval_div(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    eval_arith(ctx, inputs, Arith::Div)
}

// ---- Pow: base and exponent may have different types; the output has the base's ----

fn infer_pow(ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    let (a, b) = (required(inputs, 0)?.fact, required(inputs, 1)?.fact);
    if a.dtype == DType::Bool || b.dtype == DType::Bool {
        bail_op!("Pow does not take bool operands");
    }
    let b_shape = rhs_shape(ctx, &a.shape, &b.shape)?;
    Ok(vec![ValueFact::new(a.dtype, Broadcast::new([&a.shape, &b_shape])?.out_shape)])
}

fn eval_pow(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    let (a, b) = (*required(inputs, 0)?, *required(inputs, 1)?);
    let b_shape = rhs_shape(ctx, a.shape(), b.shape())?;
    let plan = Broadcast::new([a.shape(), &b_shape])?;
    let unsupported = || bail_op!("Pow of {} by {} is not supported", a.dtype(), b.dtype());
    let data = match (a.data(), b.data()) {
        // Same float type: natively (squares exactly, as x * x).
        (Data::F32(x), Data::F32(y)) => Data::F32(zip2(&plan, x, y, |p, q| if q == 2.0 { p * p } else { p.powf(q) })),
        (Data::F64(x), Data::F64(y)) => Data::F64(zip2(&plan, x, y, |p, q| if q == 2.0 { p * p } else { p.powf(q) })),
        (Data::F16(x), Data::F16(y)) => {
            Data::F16(zip2(&plan, x, y, |p, q| half::f16::from_f32(p.to_f32().powf(q.to_f32()))))
        }
        (Data::BF16(x), Data::BF16(y)) => {
            Data::BF16(zip2(&plan, x, y, |p, q| half::bf16::from_f32(p.to_f32().powf(q.to_f32()))))
        }
        (Data::Bool(_), _) | (_, Data::Bool(_)) => return unsupported(),
        // Integer base, integer exponent: exact integer powers.
        (base, exp) if !base.dtype().is_float() && !exp.dtype().is_float() => {
            let e = exp.cast(DType::I64);
            let e = e.to_i64_vec();
            numeric_one!(base, |x| Element::wrap(zip2(&plan, x, &e, |p, q| p.powi64(q))), else return unsupported())
        }
        // Mixed: in f64, rounded (integers: truncated) to the base type.
        (base, exp) => {
            let e = exp.to_f64_vec();
            numeric_one!(base, |x| Element::wrap(zip2(&plan, x, &e, pow_f64)),
                else return unsupported())
        }
    };
    Ok(vec![Tensor::new(plan.out_shape, data).expect("kernel output matches the broadcast shape")])
}

/// `p` to the power `q`, in f64, converted back to `p`'s type (integers truncate).
fn pow_f64<T: Element>(p: T, q: f64) -> T {
    T::from_f64(p.to_f64().powf(q))
}

// ---- unary ops ----

pub(super) fn infer_float_unary(_ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    let x = required(inputs, 0)?.fact;
    super::expect_float(x, "input")?;
    Ok(vec![x.clone()])
}

fn eval_sqrt(_ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    Ok(vec![map_float!(required(inputs, 0)?, |x: F| x.sqrt())?])
}

fn eval_reciprocal(_ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    Ok(vec![map_float!(required(inputs, 0)?, |x: F| 1.0 / x)?])
}

fn eval_exp(_ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    Ok(vec![map_float!(required(inputs, 0)?, |x: F| x.exp())?])
}

fn eval_log(_ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    Ok(vec![map_float!(required(inputs, 0)?, |x: F| x.ln())?])
}

fn eval_erf(_ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    Ok(vec![map_float!(required(inputs, 0)?, |x: F| erf(x as f64) as F)?])
}

/// The error function (std has it only unstably): the `libm` port of FreeBSD's s_erf.c,
/// rational approximations on four intervals, under one ulp. It replaced a Taylor series
/// plus continued fraction that was as accurate but 2-3x slower: MiniLM's six Gelu-by-Erf
/// nodes (37.7M elements at batch 32) took 296 ms of a 1.27 s run.
pub(super) fn erf(x: f64) -> f64 {
    libm::erf(x)
}

fn infer_neg(_ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    let x = required(inputs, 0)?.fact;
    if !(x.dtype.is_float() || x.dtype.is_signed_int()) {
        bail_op!("input must be a signed integer or float tensor, got {}", x.dtype);
    }
    Ok(vec![x.clone()])
}

fn eval_neg(_ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    let x = *required(inputs, 0)?;
    numeric_one!(x.data(), |v| Ok(vec![tensor_of(x.shape(), map(v, Num::neg))]),
        else bail_op!("input must be numeric, got {}", x.dtype()))
}

fn infer_abs(_ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    let x = required(inputs, 0)?.fact;
    if !is_numeric(x.dtype) {
        bail_op!("input must be numeric, got {}", x.dtype);
    }
    Ok(vec![x.clone()])
}

fn eval_abs(_ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    let x = *required(inputs, 0)?;
    numeric_one!(x.data(), |v| Ok(vec![tensor_of(x.shape(), map(v, Num::abs))]),
        else bail_op!("input must be numeric, got {}", x.dtype()))
}

// ---- variadic ops: every input broadcasts with every other ----

fn infer_variadic_with(inputs: &[Option<InferInput>], accepts: fn(DType) -> bool) -> OpResult<Vec<ValueFact>> {
    let facts: Vec<&ValueFact> = inputs.iter().flatten().map(|i| i.fact).collect();
    let Some(first) = facts.first() else { bail_op!("needs at least one input") };
    if let Some(other) = facts.iter().find(|f| f.dtype != first.dtype) {
        bail_op!("input types differ: {} and {}", first.dtype, other.dtype);
    }
    if !accepts(first.dtype) {
        bail_op!("inputs of type {} are not supported", first.dtype);
    }
    let shapes: Vec<&[usize]> = facts.iter().map(|f| f.shape.as_slice()).collect();
    let shape =
        broadcast_all(&shapes).ok_or_else(|| super::OpError::new(format!("cannot broadcast shapes {shapes:?}")))?;
    Ok(vec![ValueFact::new(first.dtype, shape)])
}

fn infer_variadic(_ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    infer_variadic_with(inputs, is_numeric)
}

fn infer_variadic_float(_ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    infer_variadic_with(inputs, DType::is_float)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Fold {
    Min,
    Max,
    Sum,
}

fn fold_inputs(inputs: &[Option<&Tensor>], op: Fold) -> OpResult<Tensor> {
    let mut present = inputs.iter().flatten();
    let Some(&first) = present.next() else { bail_op!("needs at least one input") };
    let mut acc = first.clone();
    for &t in present {
        let plan = Broadcast::new([acc.shape(), t.shape()])?;
        let data: Data = numeric_pair!((acc.data(), t.data()), |x, y| Element::wrap(match op {
            Fold::Min => zip2(&plan, x, y, min_nan),
            Fold::Max => zip2(&plan, x, y, max_nan),
            Fold::Sum => zip2(&plan, x, y, Num::add),
        }), else bail_op!("unsupported input types {} and {}", acc.dtype(), t.dtype()));
        acc = Tensor::new(plan.out_shape, data).expect("kernel output matches the broadcast shape");
    }
    Ok(acc)
}

fn eval_min(_ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    Ok(vec![fold_inputs(inputs, Fold::Min)?])
}

fn eval_max(_ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    Ok(vec![fold_inputs(inputs, Fold::Max)?])
}

fn eval_sum(_ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    Ok(vec![fold_inputs(inputs, Fold::Sum)?])
}

fn eval_mean(_ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    let n = inputs.iter().flatten().count();
    let sum = fold_inputs(inputs, Fold::Sum)?;
    Ok(vec![map_float!(&sum, |x: F| x / n as F)?])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Attr, Attrs};

    use crate::ops::test_support::run_op as run;

    #[test]
    fn add_broadcasts_a_bias_row() {
        let x = Tensor::from_vec(vec![2, 2, 3], (0..12).map(|i| i as f32).collect());
        let b = Tensor::from_vec(vec![3], vec![10.0f32, 20.0, 30.0]);
        let y = run("Add", 17, &Attrs::new(), &[&x, &b]).unwrap();
        assert_eq!(y.as_slice::<f32>().unwrap()[..6], [10.0, 21.0, 32.0, 13.0, 24.0, 35.0]);
    }

    #[test]
    fn legacy_broadcast_lines_up_at_axis() {
        let x = Tensor::from_vec(vec![2, 3, 2], (0..12).map(|i| i as i64).collect());
        let b = Tensor::from_vec(vec![3], vec![100i64, 200, 300]);
        let mut attrs = Attrs::new();
        attrs.insert("broadcast", Attr::Int(1));
        attrs.insert("axis", Attr::Int(1));
        let y = run("Sub", 6, &attrs, &[&x, &b]).unwrap();
        assert_eq!(y.to_i64_vec()[..6], [-100, -99, -198, -197, -296, -295]);
        assert!(run("Sub", 6, &Attrs::new(), &[&x, &b]).is_err());
    }

    #[test]
    fn integer_division_truncates_and_rejects_zero() {
        let a = Tensor::from_vec(vec![3], vec![7i32, -7, 9]);
        let b = Tensor::from_vec(vec![3], vec![2i32, 2, -4]);
        assert_eq!(run("Div", 14, &Attrs::new(), &[&a, &b]).unwrap().to_i64_vec(), [3, -3, -2]);
        let z = Tensor::from_vec(vec![1], vec![0i32]);
        let err = run("Div", 14, &Attrs::new(), &[&a, &z]).unwrap_err();
        assert!(err.to_string().contains("division by zero"), "{err}");
    }

    #[test]
    fn pow_mixes_types_and_keeps_the_base_type() {
        let a = Tensor::from_vec(vec![3], vec![1i32, 2, 3]);
        let e = Tensor::from_vec(vec![3], vec![1.0f32, 2.0, 3.0]);
        assert_eq!(run("Pow", 15, &Attrs::new(), &[&a, &e]).unwrap().to_i64_vec(), [1, 4, 27]);
        let f = Tensor::from_vec(vec![2], vec![2.0f32, 4.0]);
        let half = Tensor::scalar(0.5f32);
        assert_eq!(run("Pow", 15, &Attrs::new(), &[&f, &half]).unwrap().to_f64_vec(), [2f64.sqrt() as f32 as f64, 2.0]);
        let i = Tensor::from_vec(vec![2], vec![3i64, 5]);
        assert_eq!(run("Pow", 15, &Attrs::new(), &[&i, &i]).unwrap().to_i64_vec(), [27, 3125]);
    }

    #[test]
    fn erf_matches_known_values() {
        // erf values to 17 digits (from mpmath).
        let known = [
            (0.0, 0.0),
            (1e-8, 1.1283791670955126e-8),
            (0.5, 0.5204998778130465),
            (0.9, 0.7969082124228322),
            (1.0, 0.8427007929497149),
            (1.2, 0.9103139782296353),
            (2.0, 0.9953222650189527),
            (2.5, 0.999_593_047_982_555),
            (3.0, 0.9999779095030014),
            (5.0, 0.9999999999984626),
        ];
        for (x, want) in known {
            let got = erf(x);
            assert!((got - want).abs() <= 1e-15 * want.max(1e-300) + 1e-300, "erf({x}) = {got}, want {want}");
            assert_eq!(erf(-x), -got);
        }
        assert_eq!(erf(f64::INFINITY), 1.0);
        assert!(erf(f64::NAN).is_nan());
    }

    #[test]
    fn variadic_min_max_mean_broadcast() {
        let a = Tensor::from_vec(vec![2, 1], vec![1.0f32, 5.0]);
        let b = Tensor::from_vec(vec![3], vec![0.0f32, 3.0, 6.0]);
        let mx = run("Max", 13, &Attrs::new(), &[&a, &b]).unwrap();
        assert_eq!(mx.shape(), &[2, 3]);
        assert_eq!(mx.to_f64_vec(), [1.0, 3.0, 6.0, 5.0, 5.0, 6.0]);
        let mean = run("Mean", 13, &Attrs::new(), &[&a, &b]).unwrap();
        assert_eq!(mean.to_f64_vec(), [0.5, 2.0, 3.5, 2.5, 4.0, 5.5]);
        let one = run("Min", 13, &Attrs::new(), &[&b]).unwrap();
        assert_eq!(one, b);
    }
}
