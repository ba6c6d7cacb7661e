//! Logic and types: Cast and CastLike (between the numeric types and bool), Where (three-way
//! broadcasting), the comparisons Equal, Less, Greater, LessOrEqual, GreaterOrEqual
//! (bool results) and the boolean And, Or, Xor, Not.

use super::arith::elementwise::{any_pair, map, tensor_of, zip2, zip3, Broadcast};
use super::arith::{infer_binary, is_numeric, rhs_shape};
use super::{required, FamilyRegistrar, InferInput, NodeCtx, OpResult};
use crate::bail_op;
use crate::ir::{DType, Data, Element, Tensor, ValueFact};

pub(super) fn register(reg: &mut FamilyRegistrar) {
    reg.op("Cast", infer_cast, eval_cast)
        .op("CastLike", infer_cast_like, eval_cast_like)
        .op("Where", infer_where, eval_where)
        .op("Equal", infer_equal, eval_equal)
        .op("Less", infer_compare, eval_less)
        .op("Greater", infer_compare, eval_greater)
        .op("LessOrEqual", infer_compare, eval_less_or_equal)
        .op("GreaterOrEqual", infer_compare, eval_greater_or_equal)
        .op("And", infer_logical, eval_and)
        .op("Or", infer_logical, eval_or)
        .op("Xor", infer_logical, eval_xor)
        .op("Not", infer_not, eval_not);
}

// ---- Cast ----

/// The target type of a Cast. `saturate` only concerns float8 targets, which the IR does
/// not hold, so it is ignored.
fn cast_target(ctx: &NodeCtx) -> OpResult<DType> {
    let code = ctx.attrs.req_int("to")?;
    let code = i32::try_from(code).unwrap_or(-1);
    match DType::from_onnx(code) {
        Some(d) => Ok(d),
        None => bail_op!("Cast to {} (type code {code}) is not supported", DType::onnx_code_name(code)),
    }
}

fn infer_cast(ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    let x = required(inputs, 0)?.fact;
    Ok(vec![ValueFact::new(cast_target(ctx)?, x.shape.clone())])
}

fn eval_cast(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    let x = *required(inputs, 0)?;
    Ok(vec![x.cast(cast_target(ctx)?)])
}

/// CastLike: casts input 0 to the element type of input 1.
fn infer_cast_like(_ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    let (x, like) = (required(inputs, 0)?.fact, required(inputs, 1)?.fact);
    Ok(vec![ValueFact::new(like.dtype, x.shape.clone())])
}

fn eval_cast_like(_ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    let (x, like) = (*required(inputs, 0)?, *required(inputs, 1)?);
    Ok(vec![x.cast(like.dtype())])
}

// ---- Where ----

fn infer_where(_ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    let (c, x, y) = (required(inputs, 0)?.fact, required(inputs, 1)?.fact, required(inputs, 2)?.fact);
    if c.dtype != DType::Bool {
        bail_op!("condition must be a bool tensor, got {}", c.dtype);
    }
    if x.dtype != y.dtype {
        bail_op!("X and Y types differ: {} and {}", x.dtype, y.dtype);
    }
    let plan = Broadcast::new([&c.shape, &x.shape, &y.shape])?;
    Ok(vec![ValueFact::new(x.dtype, plan.out_shape)])
}

fn eval_where(_ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    let (c, x, y) = (*required(inputs, 0)?, *required(inputs, 1)?, *required(inputs, 2)?);
    let Some(cond) = c.as_slice::<bool>() else { bail_op!("condition must be a bool tensor, got {}", c.dtype()) };
    let plan = Broadcast::new([c.shape(), x.shape(), y.shape()])?;
    let data: Data = any_pair!((x.data(), y.data()), |a, b| Element::wrap(zip3(&plan, cond, a, b, |k, p, q| if k {
        p
    } else {
        q
    })), else bail_op!("X and Y types differ: {} and {}", x.dtype(), y.dtype()));
    Ok(vec![Tensor::new(plan.out_shape, data).expect("kernel output matches the broadcast shape")])
}

// ---- comparisons ----

fn infer_equal(ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    infer_binary(ctx, inputs, |_| true, Some(DType::Bool))
}

fn infer_compare(ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    infer_binary(ctx, inputs, is_numeric, Some(DType::Bool))
}

#[derive(Clone, Copy)]
enum Compare {
    Equal,
    Less,
    Greater,
    LessOrEqual,
    GreaterOrEqual,
}

#[allow(clippy::bool_comparison)] // Less/Greater on bool operands, as ONNX defines them
fn eval_compare(ctx: &NodeCtx, inputs: &[Option<&Tensor>], op: Compare) -> OpResult<Vec<Tensor>> {
    let (a, b) = (*required(inputs, 0)?, *required(inputs, 1)?);
    let b_shape = rhs_shape(ctx, a.shape(), b.shape())?;
    let plan = Broadcast::new([a.shape(), &b_shape])?;
    // Each arm gets its own copy of the comparison, so it inlines into the loop.
    let out: Vec<bool> = any_pair!((a.data(), b.data()), |x, y| match op {
        Compare::Equal => zip2(&plan, x, y, |p, q| p == q),
        Compare::Less => zip2(&plan, x, y, |p, q| p < q),
        Compare::Greater => zip2(&plan, x, y, |p, q| p > q),
        Compare::LessOrEqual => zip2(&plan, x, y, |p, q| p <= q),
        Compare::GreaterOrEqual => zip2(&plan, x, y, |p, q| p >= q),
    }, else bail_op!("operand types differ: {} and {}", a.dtype(), b.dtype()));
    Ok(vec![tensor_of(&plan.out_shape, out)])
}

fn eval_equal(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    eval_compare(ctx, inputs, Compare::Equal)
}

fn eval_less(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    eval_compare(ctx, inputs, Compare::Less)
}

fn eval_greater(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    eval_compare(ctx, inputs, Compare::Greater)
}

fn eval_less_or_equal(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    eval_compare(ctx, inputs, Compare::LessOrEqual)
}

fn eval_greater_or_equal(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    eval_compare(ctx, inputs, Compare::GreaterOrEqual)
}

// ---- boolean logic ----

fn infer_logical(ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    infer_binary(ctx, inputs, |d| d == DType::Bool, None)
}

fn eval_logical(ctx: &NodeCtx, inputs: &[Option<&Tensor>], f: fn(bool, bool) -> bool) -> OpResult<Vec<Tensor>> {
    let (a, b) = (*required(inputs, 0)?, *required(inputs, 1)?);
    let (Some(x), Some(y)) = (a.as_slice::<bool>(), b.as_slice::<bool>()) else {
        bail_op!("operands must be bool tensors, got {} and {}", a.dtype(), b.dtype());
    };
    let b_shape = rhs_shape(ctx, a.shape(), b.shape())?;
    let plan = Broadcast::new([a.shape(), &b_shape])?;
    Ok(vec![tensor_of(&plan.out_shape, zip2(&plan, x, y, f))])
}

fn eval_and(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    eval_logical(ctx, inputs, |p, q| p & q)
}

fn eval_or(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    eval_logical(ctx, inputs, |p, q| p | q)
}

fn eval_xor(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    eval_logical(ctx, inputs, |p, q| p ^ q)
}

fn infer_not(_ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    let x = required(inputs, 0)?.fact;
    if x.dtype != DType::Bool {
        bail_op!("input must be a bool tensor, got {}", x.dtype);
    }
    Ok(vec![x.clone()])
}

fn eval_not(_ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    let x = *required(inputs, 0)?;
    let Some(v) = x.as_slice::<bool>() else { bail_op!("input must be a bool tensor, got {}", x.dtype()) };
    Ok(vec![tensor_of(x.shape(), map(v, |b| !b))])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Attr, Attrs};

    use crate::ops::test_support::run_op as run;

    #[test]
    fn where_broadcasts_three_ways() {
        // An attention mask [2,1,1,3] picks between scores [2,2,1,3] and a scalar.
        let mask = Tensor::from_vec(vec![2, 1, 1, 3], vec![true, true, false, true, false, false]);
        let scores = Tensor::from_vec(vec![2, 2, 1, 3], (0..12).map(|i| i as f32).collect());
        let fill = Tensor::scalar(-1.0f32);
        let y = run("Where", 16, &Attrs::new(), &[&mask, &scores, &fill]).unwrap();
        assert_eq!(y.shape(), &[2, 2, 1, 3]);
        assert_eq!(y.to_f64_vec(), [0.0, 1.0, -1.0, 3.0, 4.0, -1.0, 6.0, -1.0, -1.0, 9.0, -1.0, -1.0]);
        let wrong = Tensor::scalar(1i64);
        assert!(run("Where", 16, &Attrs::new(), &[&mask, &scores, &wrong]).is_err());
    }

    #[test]
    fn comparisons_give_bool_and_nan_compares_unequal() {
        let a = Tensor::from_vec(vec![3], vec![1.0f32, f32::NAN, 3.0]);
        let b = Tensor::scalar(1.0f32);
        assert_eq!(run("Equal", 13, &Attrs::new(), &[&a, &a]).unwrap().to_i64_vec(), [1, 0, 1]);
        assert_eq!(run("GreaterOrEqual", 16, &Attrs::new(), &[&a, &b]).unwrap().to_i64_vec(), [1, 0, 1]);
        assert_eq!(run("Less", 13, &Attrs::new(), &[&b, &a]).unwrap().to_i64_vec(), [0, 0, 1]);
        let p = Tensor::from_vec(vec![2], vec![true, false]);
        assert_eq!(run("Equal", 13, &Attrs::new(), &[&p, &p]).unwrap().to_i64_vec(), [1, 1]);
        assert!(run("Less", 13, &Attrs::new(), &[&p, &p]).is_err());
    }

    #[test]
    fn boolean_logic_broadcasts() {
        let a = Tensor::from_vec(vec![2, 2], vec![true, true, false, false]);
        let b = Tensor::from_vec(vec![2], vec![true, false]);
        assert_eq!(run("And", 7, &Attrs::new(), &[&a, &b]).unwrap().to_i64_vec(), [1, 0, 0, 0]);
        assert_eq!(run("Or", 7, &Attrs::new(), &[&a, &b]).unwrap().to_i64_vec(), [1, 1, 1, 0]);
        assert_eq!(run("Xor", 7, &Attrs::new(), &[&a, &b]).unwrap().to_i64_vec(), [0, 1, 1, 0]);
        assert_eq!(run("Not", 1, &Attrs::new(), &[&b]).unwrap().to_i64_vec(), [0, 1]);
    }

    #[test]
    fn cast_maps_onnx_type_codes() {
        let x = Tensor::from_vec(vec![3], vec![-1.5f32, 0.0, 2.7]);
        let mut attrs = Attrs::new();
        attrs.insert("to", Attr::Int(7));
        assert_eq!(run("Cast", 13, &attrs, &[&x]).unwrap().to_i64_vec(), [-1, 0, 2]);
        attrs.insert("to", Attr::Int(9));
        assert_eq!(run("Cast", 13, &attrs, &[&x]).unwrap().to_i64_vec(), [1, 0, 1]);
        attrs.insert("to", Attr::Int(17));
        let err = run("Cast", 19, &attrs, &[&x]).unwrap_err();
        assert!(err.to_string().contains("FLOAT8"), "{err}");
        let like = Tensor::scalar(0i32);
        assert_eq!(run("CastLike", 15, &Attrs::new(), &[&x, &like]).unwrap().dtype(), DType::I32);
    }
}
