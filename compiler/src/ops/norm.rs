//! Normalization: BatchNormalization in inference mode (the given running mean and
//! variance; training mode is refused) and LayerNormalization with its optional Mean and
//! InvStdDev outputs. Statistics and the affine map are computed in f64.

use super::linalg::{f64_data, with_float_type};
use super::{expect_float, optional, required, FamilyRegistrar, InferInput, NodeCtx, OpResult};
use crate::bail_op;
use crate::ir::{broadcast_index_map, broadcast_shapes, normalize_axis, numel, DType, Element, Tensor, ValueFact};
use rayon::prelude::*;

pub(super) fn register(reg: &mut FamilyRegistrar) {
    reg.op("BatchNormalization", infer_batch_norm, eval_batch_norm).op(
        "LayerNormalization",
        infer_layer_norm,
        eval_layer_norm,
    );
}

// ---- BatchNormalization ----

/// Checks the operands and the mode; returns whether the parameters are per channel
/// (`[C]`) rather than per element (`X.shape[1..]`, opsets before 9 with spatial=0).
fn check_batch_norm(ctx: &NodeCtx, x: &ValueFact, params: [&ValueFact; 4]) -> OpResult<bool> {
    expect_float(x, "X")?;
    if ctx.attrs.int("training_mode", 0)? != 0 {
        bail_op!("training_mode=1 is not supported (inference only)");
    }
    if ctx.n_outputs > 1 {
        bail_op!("the running statistics outputs exist only in training mode, which is not supported");
    }
    if x.shape.len() < 2 {
        bail_op!("X must have rank >= 2 ([N, C, ...]), got {:?}", x.shape);
    }
    let per_element = &x.shape[1..];
    let mut per_channel = true;
    for (name, p) in ["scale", "B", "input_mean", "input_var"].iter().zip(params) {
        expect_float(p, name)?;
        if p.shape == [x.shape[1]] {
            continue;
        }
        if p.shape == per_element {
            per_channel = false;
            continue;
        }
        bail_op!("{name} must have shape [{}], got {:?}", x.shape[1], p.shape);
    }
    Ok(per_channel)
}

fn infer_batch_norm(ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    let x = required(inputs, 0)?.fact;
    let mut params = vec![];
    for i in 1..5 {
        params.push(required(inputs, i)?.fact);
    }
    check_batch_norm(ctx, x, [params[0], params[1], params[2], params[3]])?;
    Ok(vec![x.clone()])
}

fn eval_batch_norm(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    let x = *required(inputs, 0)?;
    let mut params = vec![];
    for i in 1..5 {
        params.push(*required(inputs, i)?);
    }
    let facts: Vec<ValueFact> = params.iter().map(|t| ValueFact::of(t)).collect();
    let per_channel = check_batch_norm(ctx, &ValueFact::of(x), [&facts[0], &facts[1], &facts[2], &facts[3]])?;
    let eps = ctx.attrs.float("epsilon", 1e-5)? as f64;
    let [scale, bias, mean, var] = [0, 1, 2, 3].map(|i| f64_data(params[i]));
    // y = x * a + b with a = scale / sqrt(var + eps) and b = bias - mean * a.
    let a: Vec<f64> = scale.iter().zip(&var).map(|(s, v)| s / (v + eps).sqrt()).collect();
    let b: Vec<f64> = bias.iter().zip(&mean).zip(&a).map(|((b, m), a)| b - m * a).collect();
    let channels = x.shape()[1];
    let plane: usize = x.shape()[2..].iter().product();
    let out = with_float_type!(x.dtype(), T => {
        let xv = x.as_slice::<T>().expect("dtype checked");
        let mut y = vec![T::default(); xv.len()];
        if plane > 0 {
            y.par_chunks_mut(plane).zip(xv.par_chunks(plane)).enumerate().for_each(|(i, (y, x))| {
                let c = i % channels;
                for (k, (y, x)) in y.iter_mut().zip(x).enumerate() {
                    let p = if per_channel { c } else { c * plane + k };
                    *y = T::from_f64(x.to_f64() * a[p] + b[p]);
                }
            });
        }
        Tensor::from_vec(x.shape().to_vec(), y)
    });
    Ok(vec![out])
}

// ---- LayerNormalization ----

/// Resolved LayerNormalization layout: rows of `cols` elements normalized independently.
struct LayerNormShape {
    axis: usize,
    rows: usize,
    cols: usize,
    stash: DType,
}

fn layer_norm_shape(
    ctx: &NodeCtx,
    x: &ValueFact,
    scale: &ValueFact,
    bias: Option<&ValueFact>,
) -> OpResult<LayerNormShape> {
    expect_float(x, "X")?;
    let rank = x.shape.len();
    let axis_attr = ctx.attrs.int("axis", -1)?;
    let Some(axis) = normalize_axis(axis_attr, rank) else {
        bail_op!("axis {axis_attr} is out of range for rank {rank}");
    };
    let normalized = &x.shape[axis..];
    for (name, p) in [("Scale", Some(scale)), ("B", bias)] {
        let Some(p) = p else { continue };
        if p.dtype != x.dtype {
            bail_op!("{name} is {} but X is {}", p.dtype, x.dtype);
        }
        if broadcast_shapes(&p.shape, normalized).as_deref() != Some(normalized) {
            bail_op!("{name} of shape {:?} does not broadcast to the normalized shape {normalized:?}", p.shape);
        }
    }
    let stash_code = ctx.attrs.int("stash_type", 1)?;
    let stash = match DType::from_onnx(stash_code as i32) {
        Some(d) if d.is_float() => d,
        _ => bail_op!("stash_type {stash_code} is not a float type"),
    };
    Ok(LayerNormShape { axis, rows: numel(&x.shape[..axis]), cols: numel(normalized), stash })
}

fn stats_shape(x_shape: &[usize], axis: usize) -> Vec<usize> {
    let mut shape = x_shape.to_vec();
    shape[axis..].fill(1);
    shape
}

fn infer_layer_norm(ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    let (x, scale) = (required(inputs, 0)?.fact, required(inputs, 1)?.fact);
    let s = layer_norm_shape(ctx, x, scale, optional(inputs, 2).map(|b| b.fact))?;
    let stats = ValueFact::new(s.stash, stats_shape(&x.shape, s.axis));
    Ok(vec![x.clone(), stats.clone(), stats])
}

/// An affine parameter spread over one row of the normalized shape.
fn row_param(t: Option<&Tensor>, normalized: &[usize], default: f64) -> Vec<f64> {
    match t {
        None => vec![default; numel(normalized)],
        Some(t) => {
            let v = f64_data(t);
            broadcast_index_map(t.shape(), normalized).into_iter().map(|i| v[i]).collect()
        }
    }
}

fn eval_layer_norm(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    let (x, scale) = (*required(inputs, 0)?, *required(inputs, 1)?);
    let bias = optional(inputs, 2);
    let s = layer_norm_shape(ctx, &ValueFact::of(x), &ValueFact::of(scale), bias.map(ValueFact::of).as_ref())?;
    let eps = ctx.attrs.float("epsilon", 1e-5)? as f64;
    let normalized = &x.shape()[s.axis..];
    let (gamma, beta) = (row_param(Some(scale), normalized, 1.0), row_param(bias, normalized, 0.0));
    let mut stats = vec![(0.0, 0.0); s.rows];
    let y = with_float_type!(x.dtype(), T => {
        let xv = x.as_slice::<T>().expect("dtype checked");
        let mut y = vec![T::default(); xv.len()];
        if s.cols > 0 {
            y.par_chunks_mut(s.cols).zip(xv.par_chunks(s.cols)).zip(stats.par_iter_mut()).for_each(|((y, x), st)| {
                let n = s.cols as f64;
                let mean = x.iter().map(|v| v.to_f64()).sum::<f64>() / n;
                let var = x.iter().map(|v| (v.to_f64() - mean).powi(2)).sum::<f64>() / n;
                let inv_std = 1.0 / (var + eps).sqrt();
                for (j, (y, x)) in y.iter_mut().zip(x).enumerate() {
                    *y = T::from_f64((x.to_f64() - mean) * inv_std * gamma[j] + beta[j]);
                }
                *st = (mean, inv_std);
            });
        }
        Tensor::from_vec(x.shape().to_vec(), y)
    });
    let shape = stats_shape(x.shape(), s.axis);
    let stat = |f: fn(&(f64, f64)) -> f64| {
        let v: Vec<f64> = stats.iter().map(f).collect();
        super::linalg::tensor_from_f64(s.stash, shape.clone(), v)
    };
    let mut out = vec![y];
    if ctx.n_outputs > 1 {
        out.push(stat(|s| s.0));
    }
    if ctx.n_outputs > 2 {
        out.push(stat(|s| s.1));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Attr, Attrs};

    fn run(op: &str, attrs: &Attrs, opset: i64, n_outputs: usize, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        let ctx = NodeCtx { name: "t", attrs, opset, n_outputs };
        (crate::ops::registry().get(op).unwrap().eval)(&ctx, inputs)
    }

    #[test]
    fn batch_norm_uses_running_statistics() {
        let x = Tensor::from_vec(vec![1, 2, 1, 2], vec![1.0f32, 3.0, 10.0, 20.0]);
        let p = |v: [f32; 2]| Tensor::from_vec(vec![2], v.to_vec());
        let (scale, bias, mean, var) = (p([2.0, 1.0]), p([0.5, 0.0]), p([2.0, 15.0]), p([1.0, 25.0]));
        let mut attrs = Attrs::new();
        attrs.insert("epsilon", Attr::Float(0.0));
        let ins = [Some(&x), Some(&scale), Some(&bias), Some(&mean), Some(&var)];
        let y = run("BatchNormalization", &attrs, 15, 1, &ins).unwrap().remove(0);
        assert_eq!(y.as_slice::<f32>().unwrap(), &[-1.5, 2.5, -1.0, 1.0]);
        attrs.insert("training_mode", Attr::Int(1));
        let err = run("BatchNormalization", &attrs, 15, 1, &ins).unwrap_err();
        assert!(err.0.contains("training_mode"), "{err}");
    }

    #[test]
    fn layer_norm_outputs_mean_and_inverse_std() {
        let x = Tensor::from_vec(vec![2, 2], vec![1.0f32, 3.0, -2.0, 2.0]);
        let scale = Tensor::from_vec(vec![2], vec![1.0f32, 2.0]);
        let mut attrs = Attrs::new();
        attrs.insert("epsilon", Attr::Float(0.0));
        let out = run("LayerNormalization", &attrs, 17, 3, &[Some(&x), Some(&scale)]).unwrap();
        assert_eq!(out[0].as_slice::<f32>().unwrap(), &[-1.0, 2.0, -1.0, 2.0]);
        assert_eq!(out[1].shape(), &[2, 1]);
        assert_eq!(out[1].as_slice::<f32>().unwrap(), &[2.0, 0.0]);
        assert_eq!(out[2].as_slice::<f32>().unwrap(), &[1.0, 0.5]);
    }
}
