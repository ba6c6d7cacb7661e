//! Activations: Relu, LeakyRelu, Clip, Sigmoid, Tanh, Gelu, HardSigmoid, HardSwish,
//! Elu, Selu, Softplus (elementwise, f16/bf16 computed in f32), and Softmax,
//! LogSoftmax (along one axis from opset 13, over the input coerced to 2-D before).

use super::arith::elementwise::{map, map_float, numeric_one, tensor_of};
use super::arith::{erf, infer_float_unary};
use super::{expect_float, optional, required, FamilyRegistrar, InferInput, NodeCtx, OpResult};
use crate::bail_op;
use crate::ir::{normalize_axis, numel, DType, Data, Element, Tensor, ValueFact};
use half::{bf16, f16};
use rayon::prelude::*;
use std::ops::{Add, Mul, Sub};

pub(super) fn register(reg: &mut FamilyRegistrar) {
    reg.op("Relu", infer_relu, eval_relu)
        .op("LeakyRelu", infer_float_unary, eval_leaky_relu)
        .op("Clip", infer_clip, eval_clip)
        .op("Sigmoid", infer_float_unary, eval_sigmoid)
        .op("Tanh", infer_float_unary, eval_tanh)
        .op("Gelu", infer_gelu, eval_gelu)
        .op("HardSigmoid", infer_float_unary, eval_hard_sigmoid)
        .op("HardSwish", infer_float_unary, eval_hard_swish)
        .op("Elu", infer_float_unary, eval_elu)
        .op("Selu", infer_float_unary, eval_selu)
        .op("Softplus", infer_float_unary, eval_softplus)
        .op("Softmax", infer_softmax, eval_softmax)
        .op("LogSoftmax", infer_softmax, eval_log_softmax);
}

fn infer_gelu(ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    gelu_uses_tanh(ctx)?;
    infer_float_unary(ctx, inputs)
}

fn infer_relu(_ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    let x = required(inputs, 0)?.fact;
    if !(x.dtype.is_float() || x.dtype.is_signed_int()) {
        bail_op!("input must be a float or signed integer tensor, got {}", x.dtype);
    }
    Ok(vec![x.clone()])
}

fn eval_relu(_ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    let x = *required(inputs, 0)?;
    // `x < 0 ? 0 : x` keeps NaN, as numpy's maximum(x, 0) does.
    fn relu<T: Element>(x: T) -> T {
        if x < T::default() {
            T::default()
        } else {
            x
        }
    }
    numeric_one!(x.data(), |v| Ok(vec![tensor_of(x.shape(), map(v, relu))]),
        else bail_op!("input must be numeric, got {}", x.dtype()))
}

fn eval_leaky_relu(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    let alpha = ctx.attrs.float("alpha", 0.01)?;
    Ok(vec![map_float!(required(inputs, 0)?, |x: F| if x < 0.0 { alpha as F * x } else { x })?])
}

fn eval_sigmoid(_ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    // Both branches only ever exponentiate a non-positive number: no overflow.
    Ok(vec![map_float!(required(inputs, 0)?, |x: F| if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    })?])
}

fn eval_tanh(_ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    Ok(vec![map_float!(required(inputs, 0)?, |x: F| x.tanh())?])
}

/// Whether Gelu uses the tanh approximation (`approximate="tanh"`) rather than erf ("none").
fn gelu_uses_tanh(ctx: &NodeCtx) -> OpResult<bool> {
    match ctx.attrs.string("approximate", "none")? {
        "none" => Ok(false),
        "tanh" => Ok(true),
        other => bail_op!("approximate must be \"none\" or \"tanh\", got {other:?}"),
    }
}

fn eval_gelu(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    let x = *required(inputs, 0)?;
    let y = if gelu_uses_tanh(ctx)? {
        let k = (2.0 / std::f64::consts::PI).sqrt();
        map_float!(x, |x: F| 0.5 * x * (1.0 + (k as F * (x + 0.044715 * x * x * x)).tanh()))?
    } else {
        // In f64: erf is computed there anyway.
        map_float!(x, |x: F| (0.5 * x as f64 * (1.0 + erf(x as f64 * std::f64::consts::FRAC_1_SQRT_2))) as F)?
    };
    Ok(vec![y])
}

fn eval_hard_sigmoid(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    let alpha = ctx.attrs.float("alpha", 0.2)?;
    let beta = ctx.attrs.float("beta", 0.5)?;
    Ok(vec![map_float!(required(inputs, 0)?, |x: F| (alpha as F * x + beta as F).clamp(0.0, 1.0))?])
}

fn eval_hard_swish(_ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    Ok(vec![map_float!(required(inputs, 0)?, |x: F| x * (x / 6.0 + 0.5).clamp(0.0, 1.0))?])
}

fn eval_elu(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    let alpha = ctx.attrs.float("alpha", 1.0)?;
    Ok(vec![map_float!(required(inputs, 0)?, |x: F| if x < 0.0 { alpha as F * x.exp_m1() } else { x })?])
}

fn eval_selu(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    let alpha = ctx.attrs.float("alpha", 1.673_263_2)?;
    let gamma = ctx.attrs.float("gamma", 1.050_701)?;
    Ok(vec![map_float!(required(inputs, 0)?, |x: F| if x > 0.0 {
        gamma as F * x
    } else {
        gamma as F * alpha as F * x.exp_m1()
    })?])
}

fn eval_softplus(_ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    // ln(1 + e^x) = max(x, 0) + ln(1 + e^-|x|), without overflow.
    Ok(vec![map_float!(required(inputs, 0)?, |x: F| x.max(0.0) + (-x.abs()).exp().ln_1p())?])
}

// ---- Clip ----

/// The bounds of a Clip: attributes before opset 11, optional scalar inputs after.
fn infer_clip(ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    let x = required(inputs, 0)?.fact;
    if x.dtype == DType::Bool {
        bail_op!("input must be numeric, got bool");
    }
    if ctx.opset >= 11 {
        for (k, what) in [(1, "min"), (2, "max")] {
            if let Some(b) = optional(inputs, k) {
                if b.fact.dtype != x.dtype || b.fact.numel() != 1 {
                    bail_op!("{what} must be a single {} value, got {}", x.dtype, b.fact);
                }
            }
        }
    } else if !x.dtype.is_float() {
        bail_op!("input must be a float tensor before opset 11, got {}", x.dtype);
    }
    Ok(vec![x.clone()])
}

/// The single value of an optional bound input, of the input's type `T`.
fn bound<T: Element>(t: Option<&Tensor>, what: &str) -> OpResult<Option<T>> {
    let Some(t) = t else { return Ok(None) };
    match t.as_slice::<T>() {
        Some([v]) => Ok(Some(*v)),
        _ => bail_op!("{what} must be a single {} value, got {}[{:?}]", T::DTYPE, t.dtype(), t.shape()),
    }
}

/// `min(max(x, lo), hi)`: NaN stays NaN, and every value becomes `hi` when `lo > hi`.
fn clip<T: Element>(v: &[T], lo: Option<T>, hi: Option<T>) -> Vec<T> {
    match (lo, hi) {
        (Some(lo), Some(hi)) => map(v, |x| {
            let y = if x < lo { lo } else { x };
            if y > hi {
                hi
            } else {
                y
            }
        }),
        (Some(lo), None) => map(v, |x| if x < lo { lo } else { x }),
        (None, Some(hi)) => map(v, |x| if x > hi { hi } else { x }),
        (None, None) => v.to_vec(),
    }
}

fn eval_clip(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    let x = *required(inputs, 0)?;
    if ctx.opset < 11 {
        let lo = ctx.attrs.float("min", f32::MIN)? as f64;
        let hi = ctx.attrs.float("max", f32::MAX)? as f64;
        return numeric_one!(x.data(), |v| Ok(vec![tensor_of(x.shape(), clip(v, Some(Element::from_f64(lo)), Some(Element::from_f64(hi))))]),
            else bail_op!("input must be numeric, got {}", x.dtype()));
    }
    numeric_one!(x.data(), |v| {
        let lo = bound(optional(inputs, 1), "min")?;
        let hi = bound(optional(inputs, 2), "max")?;
        Ok(vec![tensor_of(x.shape(), clip(v, lo, hi))])
    }, else bail_op!("input must be numeric, got {}", x.dtype()))
}

// ---- Softmax, LogSoftmax ----

/// The input as `[outer, n, inner]` with the softmax taken over `n`. Opset 13 on: along
/// `axis` (default -1). Before: over everything from `axis` on (default 1), the input
/// coerced to 2-D.
fn softmax_layout(ctx: &NodeCtx, shape: &[usize]) -> OpResult<(usize, usize, usize)> {
    let rank = shape.len();
    if ctx.opset >= 13 {
        let axis = ctx.attrs.int("axis", -1)?;
        let Some(a) = normalize_axis(axis, rank) else { bail_op!("axis {axis} is out of range for rank {rank}") };
        Ok((numel(&shape[..a]), shape[a], numel(&shape[a + 1..])))
    } else {
        let axis = ctx.attrs.int("axis", 1)?;
        let a = if axis < 0 { axis + rank as i64 } else { axis };
        if !(0..=rank as i64).contains(&a) {
            bail_op!("axis {axis} is out of range for rank {rank}");
        }
        let a = a as usize;
        Ok((numel(&shape[..a]), numel(&shape[a..]), 1))
    }
}

fn infer_softmax(ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    let x = required(inputs, 0)?.fact;
    expect_float(x, "input")?;
    softmax_layout(ctx, &x.shape)?;
    Ok(vec![x.clone()])
}

/// f32 or f64, for the softmax arithmetic (denominators are summed in f64).
trait Real:
    Copy + Send + Sync + PartialOrd + Default + Add<Output = Self> + Sub<Output = Self> + Mul<Output = Self>
{
    const NEG_INFINITY: Self;
    fn exp(self) -> Self;
    fn to_f64(self) -> f64;
    fn from_f64(x: f64) -> Self;
}

macro_rules! impl_real {
    ($($t:ty),*) => {$(
        impl Real for $t {
            const NEG_INFINITY: Self = <$t>::NEG_INFINITY;
            fn exp(self) -> Self { <$t>::exp(self) }
            fn to_f64(self) -> f64 { self as f64 }
            fn from_f64(x: f64) -> Self { x as $t }
        }
    )*};
}

impl_real!(f32, f64);

/// Softmax (or log-softmax) of one `[n, inner]` block, over `n`.
fn softmax_block<R: Real>(src: &[R], dst: &mut [R], inner: usize, log: bool) {
    let max = |a: R, b: R| super::arith::elementwise::max_nan(a, b);
    if inner == 1 {
        let m = src.iter().fold(R::NEG_INFINITY, |acc, &x| max(acc, x));
        let mut sum = 0.0f64;
        for (d, &x) in dst.iter_mut().zip(src) {
            *d = (x - m).exp();
            sum += d.to_f64();
        }
        if log {
            let lse = R::from_f64(sum.ln());
            dst.iter_mut().zip(src).for_each(|(d, &x)| *d = x - m - lse);
        } else {
            let r = R::from_f64(1.0 / sum);
            dst.iter_mut().for_each(|d| *d = *d * r);
        }
        return;
    }
    let mut m = vec![R::NEG_INFINITY; inner];
    for row in src.chunks_exact(inner) {
        m.iter_mut().zip(row).for_each(|(m, &x)| *m = max(*m, x));
    }
    let mut sum = vec![0.0f64; inner];
    for (drow, row) in dst.chunks_exact_mut(inner).zip(src.chunks_exact(inner)) {
        for (((d, &x), &m), s) in drow.iter_mut().zip(row).zip(&m).zip(&mut sum) {
            *d = (x - m).exp();
            *s += d.to_f64();
        }
    }
    if log {
        let lse: Vec<R> = sum.iter().zip(&m).map(|(&s, &m)| m + R::from_f64(s.ln())).collect();
        for (drow, row) in dst.chunks_exact_mut(inner).zip(src.chunks_exact(inner)) {
            drow.iter_mut().zip(row).zip(&lse).for_each(|((d, &x), &l)| *d = x - l);
        }
    } else {
        let r: Vec<R> = sum.iter().map(|s| R::from_f64(1.0 / s)).collect();
        for drow in dst.chunks_exact_mut(inner) {
            drow.iter_mut().zip(&r).for_each(|(d, &r)| *d = *d * r);
        }
    }
}

fn softmax_blocks<R: Real>(x: &[R], block: usize, inner: usize, log: bool) -> Vec<R> {
    let mut out = vec![R::default(); x.len()];
    if block == 0 {
        return out;
    }
    if x.len() >= 1 << 16 {
        out.par_chunks_mut(block).zip(x.par_chunks(block)).for_each(|(d, s)| softmax_block(s, d, inner, log));
    } else {
        out.chunks_mut(block).zip(x.chunks(block)).for_each(|(d, s)| softmax_block(s, d, inner, log));
    }
    out
}

fn softmax_like(ctx: &NodeCtx, inputs: &[Option<&Tensor>], log: bool) -> OpResult<Vec<Tensor>> {
    let x = *required(inputs, 0)?;
    let (_, n, inner) = softmax_layout(ctx, x.shape())?;
    let block = n * inner;
    let data = match x.data() {
        Data::F32(v) => Data::F32(softmax_blocks(v, block, inner, log)),
        Data::F64(v) => Data::F64(softmax_blocks(v, block, inner, log)),
        Data::F16(v) => {
            let wide: Vec<f32> = v.iter().map(|h| h.to_f32()).collect();
            Data::F16(softmax_blocks(&wide, block, inner, log).into_iter().map(f16::from_f32).collect())
        }
        Data::BF16(v) => {
            let wide: Vec<f32> = v.iter().map(|h| h.to_f32()).collect();
            Data::BF16(softmax_blocks(&wide, block, inner, log).into_iter().map(bf16::from_f32).collect())
        }
        _ => bail_op!("input must be a float tensor, got {}", x.dtype()),
    };
    Ok(vec![Tensor::new(x.shape().to_vec(), data).expect("softmax keeps the shape")])
}

fn eval_softmax(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    softmax_like(ctx, inputs, false)
}

fn eval_log_softmax(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    softmax_like(ctx, inputs, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Attr, Attrs};
    use crate::ops::registry;

    fn run(op: &str, opset: i64, attrs: &Attrs, inputs: &[Option<&Tensor>]) -> OpResult<Tensor> {
        let ctx = NodeCtx { name: "n", attrs, opset, n_outputs: 1 };
        let def = registry().get(op).unwrap();
        let facts: Vec<Option<ValueFact>> = inputs.iter().map(|t| t.map(ValueFact::of)).collect();
        let infer_in: Vec<Option<InferInput>> =
            facts.iter().map(|f| f.as_ref().map(|fact| InferInput { fact, value: None })).collect();
        let want = (def.infer)(&ctx, &infer_in)?;
        let out = (def.eval)(&ctx, inputs)?.remove(0);
        assert_eq!(ValueFact::of(&out), want[0], "{op}: eval disagrees with infer");
        Ok(out)
    }

    fn close(got: &[f64], want: &[f64]) {
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-6, "{got:?} vs {want:?}");
        }
    }

    #[test]
    fn softmax_axis_defaults_differ_by_opset() {
        let x = Tensor::from_vec(vec![2, 2], vec![0.0f32, 0.0, 0.0, 0.0]);
        // Opset 11: coerced to [2, 4]... here [2, 2] over axis 1, same as opset 13.
        let y13 = run("Softmax", 13, &Attrs::new(), &[Some(&x)]).unwrap();
        close(&y13.to_f64_vec(), &[0.5; 4]);
        let x3 = Tensor::from_vec(vec![2, 2, 2], vec![0.0f32; 8]);
        let y11 = run("Softmax", 11, &Attrs::new(), &[Some(&x3)]).unwrap();
        close(&y11.to_f64_vec(), &[0.25; 8]);
        let y13 = run("Softmax", 13, &Attrs::new(), &[Some(&x3)]).unwrap();
        close(&y13.to_f64_vec(), &[0.5; 8]);
    }

    #[test]
    fn softmax_along_a_middle_axis() {
        let x = Tensor::from_vec(vec![1, 2, 2], vec![0.0f64, 1.0, 2.0, 3.0]);
        let mut attrs = Attrs::new();
        attrs.insert("axis", Attr::Int(1));
        let y = run("LogSoftmax", 13, &attrs, &[Some(&x)]).unwrap();
        let l = (1.0 + 2f64.exp()).ln();
        close(&y.to_f64_vec(), &[-l, -l, 2.0 - l, 2.0 - l]);
    }

    #[test]
    fn clip_bounds_from_inputs_or_attributes() {
        let x = Tensor::from_vec(vec![4], vec![-5i8, 0, 5, 100]);
        let lo = Tensor::scalar(-1i8);
        let y = run("Clip", 13, &Attrs::new(), &[Some(&x), Some(&lo), None]).unwrap();
        assert_eq!(y.to_i64_vec(), [-1, 0, 5, 100]);
        let f = Tensor::from_vec(vec![3], vec![-2.0f32, 0.5, f32::NAN]);
        let mut attrs = Attrs::new();
        attrs.insert("min", Attr::Float(-1.0));
        attrs.insert("max", Attr::Float(1.0));
        let y = run("Clip", 6, &attrs, &[Some(&f)]).unwrap().to_f64_vec();
        assert_eq!(y[..2], [-1.0, 0.5]);
        assert!(y[2].is_nan());
        let wrong = Tensor::scalar(1.0f32);
        assert!(run("Clip", 13, &Attrs::new(), &[Some(&x), None, Some(&wrong)]).is_err());
    }

    #[test]
    fn activations_at_known_points() {
        let x = Tensor::from_vec(vec![3], vec![-1.0f32, 0.0, 2.0]);
        let sig = run("Sigmoid", 13, &Attrs::new(), &[Some(&x)]).unwrap().to_f64_vec();
        close(&sig, &[1.0 / (1.0 + 1f64.exp()), 0.5, 1.0 / (1.0 + (-2f64).exp())]);
        let gelu = run("Gelu", 20, &Attrs::new(), &[Some(&x)]).unwrap().to_f64_vec();
        close(&gelu, &[-0.15865525393145707, 0.0, 1.9544997361036416]);
        let hs = run("HardSwish", 14, &Attrs::new(), &[Some(&x)]).unwrap().to_f64_vec();
        close(&hs, &[-1.0 / 3.0, 0.0, 2.0 * (2.0 / 6.0 + 0.5)]);
        let sp = run("Softplus", 1, &Attrs::new(), &[Some(&x)]).unwrap().to_f64_vec();
        close(&sp, &[(1.0 + (-1f64).exp()).ln(), 2f64.ln(), (1.0 + 2f64.exp()).ln()]);
        let i = Tensor::from_vec(vec![2], vec![-3i32, 4]);
        assert_eq!(run("Relu", 14, &Attrs::new(), &[Some(&i)]).unwrap().to_i64_vec(), [0, 4]);
        let h = Tensor::from_vec(vec![2], vec![f16::from_f32(-1.0), f16::from_f32(1.0)]);
        assert_eq!(run("Tanh", 13, &Attrs::new(), &[Some(&h)]).unwrap().dtype(), DType::F16);
    }
}
