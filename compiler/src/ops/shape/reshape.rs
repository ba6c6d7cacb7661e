//! Reshape, Flatten, Squeeze and Unsqueeze: the elements stay in row-major order, only
//! the shape changes.

use super::{distinct_axes, int_list, known_values, tensor};
use crate::bail_op;
use crate::ir::{checked_numel, numel, Tensor, ValueFact};
use crate::ops::{optional, required, FamilyRegistrar, InferInput, NodeCtx, OpResult};

pub(super) fn register(reg: &mut FamilyRegistrar) {
    reg.op("Reshape", infer_reshape, eval_reshape)
        .op("Flatten", infer_flatten, eval_flatten)
        .op("Squeeze", infer_squeeze, eval_squeeze)
        .op("Unsqueeze", infer_unsqueeze, eval_unsqueeze);
}

/// The output shape of an op, from the input shape and the values of the other inputs.
type PlanFn = fn(&NodeCtx, &[usize], &[Option<&Tensor>]) -> OpResult<Vec<usize>>;

/// Inference for a shape-only op whose inputs `needed` must be constant.
fn infer_with(
    plan: PlanFn,
    ctx: &NodeCtx,
    inputs: &[Option<InferInput>],
    needed: &[(usize, &str)],
) -> OpResult<Vec<ValueFact>> {
    let x = required(inputs, 0)?.fact;
    let values = known_values(inputs, needed)?;
    Ok(vec![ValueFact::new(x.dtype, plan(ctx, &x.shape, &values)?)])
}

/// Evaluation of a shape-only op: the same elements under the planned shape.
fn eval_with(plan: PlanFn, ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    let x = *required(inputs, 0)?;
    let shape = plan(ctx, x.shape(), inputs)?;
    Ok(vec![tensor(shape, x.data().clone())])
}

/// Reshape: `shape` is an attribute before opset 5 and input 1 from then on. A 0 copies
/// the input dim at that position (unless `allowzero`), one -1 is inferred.
fn reshape_plan(ctx: &NodeCtx, in_shape: &[usize], values: &[Option<&Tensor>]) -> OpResult<Vec<usize>> {
    let target: Vec<i64> = if ctx.opset < 5 {
        match ctx.attrs.ints_opt("shape")? {
            Some(s) => s.to_vec(),
            None => bail_op!("missing required attribute 'shape'"),
        }
    } else {
        int_list(required(values, 1)?, "shape")?
    };
    let allow_zero = ctx.attrs.int("allowzero", 0)? != 0;
    if allow_zero && target.contains(&0) && target.contains(&-1) {
        bail_op!("shape {target:?} holds both 0 and -1, which allowzero=1 forbids");
    }
    let mut out = Vec::with_capacity(target.len());
    let mut inferred = None;
    for (i, &d) in target.iter().enumerate() {
        out.push(match d {
            -1 if inferred.is_some() => bail_op!("shape {target:?} has more than one -1"),
            -1 => {
                inferred = Some(i);
                1
            }
            0 if !allow_zero => match in_shape.get(i) {
                Some(&copied) => copied,
                None => bail_op!("shape {target:?} copies dim {i} with 0, but the input has rank {}", in_shape.len()),
            },
            d if d < 0 => bail_op!("shape {target:?} has a negative dim {d}"),
            d => d as usize,
        });
    }
    let total = numel(in_shape);
    // The target comes from the model's data: its element count may not even fit a usize.
    let Some(known) = checked_numel(&out) else {
        bail_op!("shape {target:?} has more elements than can be addressed");
    };
    if let Some(i) = inferred {
        if known == 0 || !total.is_multiple_of(known) {
            bail_op!("cannot infer the -1 of shape {target:?} for an input of shape {in_shape:?}");
        }
        out[i] = total / known;
    }
    if numel(&out) != total {
        bail_op!("cannot reshape {in_shape:?} ({total} elements) to {target:?}");
    }
    Ok(out)
}

fn infer_reshape(ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    infer_with(reshape_plan, ctx, inputs, &[(1, "shape")])
}

fn eval_reshape(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    eval_with(reshape_plan, ctx, inputs)
}

/// Flatten: dims before `axis` (in [-rank, rank]) become the rows, the rest the columns.
fn flatten_plan(ctx: &NodeCtx, in_shape: &[usize], _values: &[Option<&Tensor>]) -> OpResult<Vec<usize>> {
    let rank = in_shape.len() as i64;
    let axis = ctx.attrs.int("axis", 1)?;
    let a = if axis < 0 { axis + rank } else { axis };
    if !(0..=rank).contains(&a) {
        bail_op!("axis {axis} is out of range for rank {rank}");
    }
    let (outer, inner) = in_shape.split_at(a as usize);
    Ok(vec![numel(outer), numel(inner)])
}

fn infer_flatten(ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    infer_with(flatten_plan, ctx, inputs, &[])
}

fn eval_flatten(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    eval_with(flatten_plan, ctx, inputs)
}

/// The axes of Squeeze/Unsqueeze: an attribute before opset 13, input 1 from then on.
fn axes_of(ctx: &NodeCtx, values: &[Option<&Tensor>]) -> OpResult<Option<Vec<i64>>> {
    if ctx.opset < 13 {
        Ok(ctx.attrs.ints_opt("axes")?.map(<[i64]>::to_vec))
    } else {
        optional(values, 1).map(|t| int_list(t, "axes")).transpose()
    }
}

/// Squeeze: drops the listed unit axes, or every unit axis when none are listed.
fn squeeze_plan(ctx: &NodeCtx, in_shape: &[usize], values: &[Option<&Tensor>]) -> OpResult<Vec<usize>> {
    let rank = in_shape.len();
    let drop: Vec<bool> = match axes_of(ctx, values)? {
        None => in_shape.iter().map(|&d| d == 1).collect(),
        Some(axes) => {
            let mut drop = vec![false; rank];
            for a in distinct_axes(&axes, rank, "axis")? {
                if in_shape[a] != 1 {
                    bail_op!("cannot squeeze axis {a} of shape {in_shape:?}: its size is not 1");
                }
                drop[a] = true;
            }
            drop
        }
    };
    Ok(in_shape.iter().zip(&drop).filter(|(_, &d)| !d).map(|(&s, _)| s).collect())
}

fn infer_squeeze(ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    infer_with(squeeze_plan, ctx, inputs, &[(1, "axes")])
}

fn eval_squeeze(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    eval_with(squeeze_plan, ctx, inputs)
}

/// Unsqueeze: inserts unit axes at the listed positions of the output.
fn unsqueeze_plan(ctx: &NodeCtx, in_shape: &[usize], values: &[Option<&Tensor>]) -> OpResult<Vec<usize>> {
    let Some(axes) = axes_of(ctx, values)? else {
        bail_op!("missing axes");
    };
    let out_rank = in_shape.len() + axes.len();
    let mut unit = vec![false; out_rank];
    for a in distinct_axes(&axes, out_rank, "axis")? {
        unit[a] = true;
    }
    let mut dims = in_shape.iter();
    Ok(unit.iter().map(|&u| if u { 1 } else { *dims.next().expect("one dim per non-unit axis") }).collect())
}

fn infer_unsqueeze(ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    infer_with(unsqueeze_plan, ctx, inputs, &[(1, "axes")])
}

fn eval_unsqueeze(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    eval_with(unsqueeze_plan, ctx, inputs)
}

#[cfg(test)]
mod tests {
    use super::super::test_util::{i64s, ints, iota, run};
    use crate::ir::{Attr, Tensor};

    fn shape_of(
        op: &str,
        opset: i64,
        attrs: &[(&str, Attr)],
        x: &Tensor,
        param: Option<&Tensor>,
    ) -> Result<Vec<usize>, String> {
        let inputs: Vec<Option<&Tensor>> = if param.is_some() { vec![Some(x), param] } else { vec![Some(x)] };
        run(op, opset, attrs, &inputs).map(|o| o[0].shape().to_vec()).map_err(|e| e.0)
    }

    #[test]
    fn reshape_copies_zeros_and_infers_minus_one() {
        let x = iota(&[2, 3, 4]);
        assert_eq!(shape_of("Reshape", 14, &[], &x, Some(&i64s(&[0, -1]))), Ok(vec![2, 12]));
        assert_eq!(shape_of("Reshape", 14, &[], &x, Some(&i64s(&[4, 0, -1]))), Ok(vec![4, 3, 2]));
        assert_eq!(shape_of("Reshape", 14, &[], &x, Some(&i64s(&[-1]))), Ok(vec![24]));
        assert_eq!(shape_of("Reshape", 1, &[("shape", ints(&[6, -1]))], &x, None), Ok(vec![6, 4]));
        let y = &run("Reshape", 14, &[], &[Some(&x), Some(&i64s(&[4, 6]))]).unwrap()[0];
        assert_eq!(y.to_f64_vec(), x.to_f64_vec());
    }

    #[test]
    fn reshape_allowzero_keeps_zero_dims() {
        let x = Tensor::zeros(crate::ir::DType::F32, vec![0, 3, 4]);
        let allow = [("allowzero", Attr::Int(1))];
        assert_eq!(shape_of("Reshape", 14, &allow, &x, Some(&i64s(&[3, 4, 0]))), Ok(vec![3, 4, 0]));
        assert!(shape_of("Reshape", 14, &allow, &x, Some(&i64s(&[0, -1]))).is_err());
    }

    #[test]
    fn reshape_rejects_bad_targets() {
        let x = iota(&[2, 3]);
        for bad in [&[-1, -1][..], &[4, -1], &[5], &[-2, 3], &[0, 0, 0]] {
            let err = shape_of("Reshape", 14, &[], &x, Some(&i64s(bad))).unwrap_err();
            assert!(!err.is_empty(), "{bad:?}");
        }
    }

    #[test]
    fn flatten_splits_at_the_axis() {
        let x = iota(&[2, 3, 4, 5]);
        assert_eq!(shape_of("Flatten", 13, &[], &x, None), Ok(vec![2, 60]));
        assert_eq!(shape_of("Flatten", 13, &[("axis", Attr::Int(0))], &x, None), Ok(vec![1, 120]));
        assert_eq!(shape_of("Flatten", 13, &[("axis", Attr::Int(4))], &x, None), Ok(vec![120, 1]));
        assert_eq!(shape_of("Flatten", 13, &[("axis", Attr::Int(-2))], &x, None), Ok(vec![6, 20]));
        assert!(shape_of("Flatten", 13, &[("axis", Attr::Int(5))], &x, None).is_err());
    }

    #[test]
    fn squeeze_with_axes_attribute_or_input() {
        let x = iota(&[1, 3, 1, 2]);
        assert_eq!(shape_of("Squeeze", 13, &[], &x, None), Ok(vec![3, 2]));
        assert_eq!(shape_of("Squeeze", 13, &[], &x, Some(&i64s(&[-2]))), Ok(vec![1, 3, 2]));
        assert_eq!(shape_of("Squeeze", 11, &[("axes", ints(&[0]))], &x, None), Ok(vec![3, 1, 2]));
        assert!(shape_of("Squeeze", 13, &[], &x, Some(&i64s(&[1]))).unwrap_err().contains("not 1"));
    }

    #[test]
    fn unsqueeze_inserts_unit_axes_in_output_positions() {
        let x = iota(&[3, 4]);
        assert_eq!(shape_of("Unsqueeze", 13, &[], &x, Some(&i64s(&[0, 3]))), Ok(vec![1, 3, 4, 1]));
        assert_eq!(shape_of("Unsqueeze", 13, &[], &x, Some(&i64s(&[3, -4]))), Ok(vec![1, 3, 4, 1]));
        assert_eq!(shape_of("Unsqueeze", 11, &[("axes", ints(&[1]))], &x, None), Ok(vec![3, 1, 4]));
        assert!(shape_of("Unsqueeze", 13, &[], &x, Some(&i64s(&[1, 1]))).unwrap_err().contains("twice"));
        assert!(shape_of("Unsqueeze", 13, &[], &x, None).is_err());
    }

    #[test]
    fn infer_needs_the_shape_as_a_constant() {
        use crate::ir::{DType, ValueFact};
        use crate::ops::{registry, InferInput, NodeCtx};
        let attrs = crate::ir::Attrs::new();
        let ctx = NodeCtx { name: "r", attrs: &attrs, opset: 14, n_outputs: 1 };
        let x = ValueFact::new(DType::F32, vec![2, 3]);
        let s = ValueFact::new(DType::I64, vec![2]);
        let inputs = [Some(InferInput { fact: &x, value: None }), Some(InferInput { fact: &s, value: None })];
        let err = (registry().get("Reshape").unwrap().infer)(&ctx, &inputs).unwrap_err();
        assert!(err.0.contains("must be a constant"), "{err}");
    }
}
