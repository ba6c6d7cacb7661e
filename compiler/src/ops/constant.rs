//! Constants and pass-throughs: Constant, ConstantOfShape, Shape, Identity, Dropout
//! (inference mode: the identity, with an all-true mask when asked for).

use super::{constant_input, optional, required, FamilyRegistrar, InferInput, NodeCtx, OpError, OpResult};
use crate::bail_op;
use crate::ir::{Attr, DType, Tensor, ValueFact};

pub(super) fn register(reg: &mut FamilyRegistrar) {
    reg.op("Constant", infer_constant, eval_constant)
        .op("ConstantOfShape", infer_constant_of_shape, eval_constant_of_shape)
        .op("Shape", infer_shape, eval_shape)
        .op("Identity", infer_identity, eval_identity)
        .op("Dropout", infer_dropout, eval_dropout);
}

fn constant_value(ctx: &NodeCtx) -> OpResult<Tensor> {
    let attrs = ctx.attrs;
    let mut found = attrs.0.iter();
    let (name, attr) = match (found.next(), found.next()) {
        (Some(one), None) => one,
        (None, _) => bail_op!("Constant needs exactly one value attribute, got none"),
        (Some(_), Some(_)) => bail_op!("Constant needs exactly one value attribute, got several"),
    };
    Ok(match (name.as_str(), attr) {
        ("value", Attr::Tensor(t)) => t.clone(),
        ("value_float", Attr::Float(f)) => Tensor::scalar(*f),
        ("value_floats", Attr::Floats(v)) => Tensor::from_vec(vec![v.len()], v.clone()),
        ("value_int", Attr::Int(i)) => Tensor::scalar(*i),
        ("value_ints", Attr::Ints(v)) => Tensor::from_vec(vec![v.len()], v.clone()),
        (other, _) => bail_op!("unsupported Constant attribute '{other}'"),
    })
}

fn infer_constant(ctx: &NodeCtx, _inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    Ok(vec![ValueFact::of(&constant_value(ctx)?)])
}

fn eval_constant(ctx: &NodeCtx, _inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    Ok(vec![constant_value(ctx)?])
}

fn shape_from(t: &Tensor) -> OpResult<Vec<usize>> {
    if t.rank() != 1 {
        bail_op!("shape input must be 1-D, got rank {}", t.rank());
    }
    t.to_i64_vec()
        .into_iter()
        .map(|d| usize::try_from(d).map_err(|_| OpError::new(format!("negative dimension {d} in shape input"))))
        .collect()
}

fn fill_value(ctx: &NodeCtx) -> OpResult<Tensor> {
    match ctx.attrs.tensor_opt("value")? {
        None => Ok(Tensor::scalar(0.0f32)),
        Some(t) if t.len() == 1 => Ok(t.clone()),
        Some(t) => bail_op!("ConstantOfShape value must hold one element, got {}", t.len()),
    }
}

fn infer_constant_of_shape(ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    let shape = shape_from(constant_input(inputs, 0, "shape")?)?;
    Ok(vec![ValueFact::new(fill_value(ctx)?.dtype(), shape)])
}

fn eval_constant_of_shape(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    let shape = shape_from(required(inputs, 0)?)?;
    let fill = fill_value(ctx)?;
    let n: usize = shape.iter().product();
    let data = fill.data().gather_flat(&vec![0; n]);
    Ok(vec![Tensor::new(shape, data).expect("length computed from shape")])
}

/// The `[start, end)` range of dimensions Shape-15 reports.
fn shape_range(ctx: &NodeCtx, rank: usize) -> OpResult<(usize, usize)> {
    let clamp = |x: i64| -> usize {
        let r = rank as i64;
        (if x < 0 { x + r } else { x }).clamp(0, r) as usize
    };
    let start = clamp(ctx.attrs.int("start", 0)?);
    let end = match ctx.attrs.int_opt("end")? {
        Some(e) => clamp(e),
        None => rank,
    };
    Ok((start, end.max(start)))
}

fn infer_shape(ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    let input = required(inputs, 0)?;
    let (start, end) = shape_range(ctx, input.fact.shape.len())?;
    Ok(vec![ValueFact::new(DType::I64, vec![end - start])])
}

/// The output of a Shape node from its input's static type alone (used for folding).
pub fn shape_of_fact(ctx: &NodeCtx, fact: &ValueFact) -> OpResult<Tensor> {
    let (start, end) = shape_range(ctx, fact.shape.len())?;
    let dims: Vec<i64> = fact.shape[start..end].iter().map(|&d| d as i64).collect();
    Ok(Tensor::from_vec(vec![dims.len()], dims))
}

fn eval_shape(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    let input = required(inputs, 0)?;
    let (start, end) = shape_range(ctx, input.rank())?;
    let dims: Vec<i64> = input.shape()[start..end].iter().map(|&d| d as i64).collect();
    Ok(vec![Tensor::from_vec(vec![dims.len()], dims)])
}

fn infer_identity(_ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    Ok(vec![required(inputs, 0)?.fact.clone()])
}

fn eval_identity(_ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    Ok(vec![(*required(inputs, 0)?).clone()])
}

/// Dropout runs in inference mode only: `training_mode` must be absent or false.
fn check_inference(inputs_training: Option<bool>) -> OpResult<()> {
    if inputs_training == Some(true) {
        bail_op!("Dropout with training_mode=true is not supported (inference only)");
    }
    Ok(())
}

fn infer_dropout(ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    let x = required(inputs, 0)?.fact.clone();
    let training = optional(inputs, 2).and_then(|i| i.value).map(|t| t.to_i64_vec().first() == Some(&1));
    check_inference(training)?;
    let mut out = vec![x.clone()];
    if ctx.n_outputs > 1 {
        out.push(ValueFact::new(DType::Bool, x.shape));
    }
    Ok(out)
}

fn eval_dropout(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    let x = *required(inputs, 0)?;
    let training = optional(inputs, 2).map(|t| t.to_i64_vec().first() == Some(&1));
    check_inference(training)?;
    let mut out = vec![x.clone()];
    if ctx.n_outputs > 1 {
        out.push(Tensor::from_vec(x.shape().to_vec(), vec![true; x.len()]));
    }
    Ok(out)
}
