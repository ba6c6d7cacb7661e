//! Index family: ops that pick or place elements through index tensors. Gather,
//! GatherElements, GatherND, ScatterElements (and its old name Scatter), ScatterND,
//! plus Range and Size.
//!
//! Indices may be int32 or int64 and negative (counting from the end of their axis); an
//! index out of range is an error. Data may have any element type: Gather and GatherND
//! copy whole rows (`extend_from_slice`), the element-wise ops go through flat offsets.

use super::{constant_input, required, FamilyRegistrar, InferInput, NodeCtx, OpResult};
use crate::bail_op;
use crate::ir::{normalize_axis, numel, strides, DType, Data, Element, Tensor, ValueFact};

pub(super) fn register(reg: &mut FamilyRegistrar) {
    reg.op("Gather", infer_gather, eval_gather)
        .op("GatherElements", infer_gather_elements, eval_gather_elements)
        .op("GatherND", infer_gather_nd, eval_gather_nd)
        .op("ScatterElements", infer_scatter, eval_scatter_elements)
        .op("Scatter", infer_scatter, eval_scatter_elements)
        .op("ScatterND", infer_scatter, eval_scatter_nd)
        .op("Range", infer_range, eval_range)
        .op("Size", infer_size, eval_size);
}

fn check_indices(dtype: DType) -> OpResult<()> {
    if !matches!(dtype, DType::I32 | DType::I64) {
        bail_op!("indices must be int32 or int64, got {dtype}");
    }
    Ok(())
}

fn axis_attr(ctx: &NodeCtx, rank: usize) -> OpResult<usize> {
    let axis = ctx.attrs.int("axis", 0)?;
    normalize_axis(axis, rank)
        .ok_or_else(|| super::OpError::new(format!("axis {axis} is out of range for rank {rank}")))
}

/// Every index of `t` checked against `dim`, negative ones counted from the end.
fn indices_in(t: &Tensor, dim: usize) -> OpResult<Vec<usize>> {
    t.to_i64_vec().into_iter().map(|i| index_in(i, dim)).collect()
}

fn index_in(i: i64, dim: usize) -> OpResult<usize> {
    let d = dim as i64;
    let j = if i < 0 { i + d } else { i };
    if !(0..d).contains(&j) {
        bail_op!("index {i} is out of range for a dim of {dim}");
    }
    Ok(j as usize)
}

// ---- Gather ----

/// Gather's axis and output shape: data dims before the axis, the indices' dims, then
/// the data dims after it.
fn gather_plan(ctx: &NodeCtx, data: &[usize], indices: &[usize]) -> OpResult<(usize, Vec<usize>)> {
    let axis = axis_attr(ctx, data.len())?;
    let shape = [&data[..axis], indices, &data[axis + 1..]].concat();
    Ok((axis, shape))
}

fn infer_gather(ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    let (data, indices) = (required(inputs, 0)?.fact, required(inputs, 1)?.fact);
    check_indices(indices.dtype)?;
    Ok(vec![ValueFact::new(data.dtype, gather_plan(ctx, &data.shape, &indices.shape)?.1)])
}

fn eval_gather(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    let (data, indices) = (*required(inputs, 0)?, *required(inputs, 1)?);
    check_indices(indices.dtype())?;
    let (axis, shape) = gather_plan(ctx, data.shape(), indices.shape())?;
    let dim = data.shape()[axis];
    let idx = indices_in(indices, dim)?;
    let outer = numel(&data.shape()[..axis]);
    let inner = numel(&data.shape()[axis + 1..]);
    let out = crate::map_data!(data.data(), v => gather_rows(v, outer, dim * inner, inner, &idx));
    Ok(vec![tensor(shape, out)])
}

/// For every outer block of `block` elements, copies the rows of `row` elements that
/// `idx` names (an embedding lookup is one block of table rows).
fn gather_rows<T: Copy>(src: &[T], outer: usize, block: usize, row: usize, idx: &[usize]) -> Vec<T> {
    let mut out = Vec::with_capacity(outer * idx.len() * row);
    for o in 0..outer {
        let block = &src[o * block..(o + 1) * block];
        for &i in idx {
            out.extend_from_slice(&block[i * row..(i + 1) * row]);
        }
    }
    out
}

fn tensor(shape: Vec<usize>, data: Data) -> Tensor {
    Tensor::new(shape, data).expect("kernel output length matches the planned shape")
}

// ---- GatherElements, ScatterElements ----

/// The flat data offset every element of `indices` addresses along `axis` (the other
/// coordinates are the element's own). Indices must have the data's rank and fit in it.
fn element_offsets(data_shape: &[usize], indices: &Tensor, axis: usize) -> OpResult<Vec<usize>> {
    let idx_shape = indices.shape();
    if idx_shape.len() != data_shape.len() {
        bail_op!("indices have rank {} but data has rank {}", idx_shape.len(), data_shape.len());
    }
    if idx_shape.iter().zip(data_shape).enumerate().any(|(i, (a, b))| i != axis && a > b) {
        bail_op!("indices shape {idx_shape:?} exceeds data shape {data_shape:?} outside axis {axis}");
    }
    let data_strides = strides(data_shape);
    let idx_strides = strides(idx_shape);
    let dim = data_shape[axis];
    indices
        .to_i64_vec()
        .into_iter()
        .enumerate()
        .map(|(flat, i)| {
            let base: usize = (0..idx_shape.len())
                .filter(|&k| k != axis)
                .map(|k| (flat / idx_strides[k]) % idx_shape[k] * data_strides[k])
                .sum();
            Ok(base + index_in(i, dim)? * data_strides[axis])
        })
        .collect()
}

fn infer_gather_elements(ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    let (data, indices) = (required(inputs, 0)?.fact, required(inputs, 1)?.fact);
    check_indices(indices.dtype)?;
    axis_attr(ctx, data.shape.len())?;
    if indices.shape.len() != data.shape.len() {
        bail_op!("indices have rank {} but data has rank {}", indices.shape.len(), data.shape.len());
    }
    Ok(vec![ValueFact::new(data.dtype, indices.shape.clone())])
}

fn eval_gather_elements(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    let (data, indices) = (*required(inputs, 0)?, *required(inputs, 1)?);
    check_indices(indices.dtype())?;
    let offsets = element_offsets(data.shape(), indices, axis_attr(ctx, data.rank())?)?;
    Ok(vec![tensor(indices.shape().to_vec(), data.data().gather_flat(&offsets))])
}

/// Scatter ops return data's type; updates must be of the same type.
fn infer_scatter(_ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    let (data, indices, updates) = (required(inputs, 0)?.fact, required(inputs, 1)?.fact, required(inputs, 2)?.fact);
    check_indices(indices.dtype)?;
    if updates.dtype != data.dtype {
        bail_op!("updates are {} but data is {}", updates.dtype, data.dtype);
    }
    Ok(vec![data.clone()])
}

fn eval_scatter_elements(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    let (data, indices, updates) = (*required(inputs, 0)?, *required(inputs, 1)?, *required(inputs, 2)?);
    check_indices(indices.dtype())?;
    if updates.shape() != indices.shape() {
        bail_op!("updates shape {:?} differs from indices shape {:?}", updates.shape(), indices.shape());
    }
    let offsets = element_offsets(data.shape(), indices, axis_attr(ctx, data.rank())?)?;
    let out = scatter(data.data(), updates.data(), &offsets, 1, reduction(ctx)?);
    Ok(vec![tensor(data.shape().to_vec(), out)])
}

// ---- GatherND, ScatterND ----

/// How index tuples of length `k` (the indices' last dim) address `data` after
/// `batch_dims` leading dims shared by data and indices.
struct NdPlan {
    batch_dims: usize,
    k: usize,
    /// Elements of the slice one tuple names: data dims after `batch_dims + k`.
    slice: usize,
}

fn nd_plan(batch_dims: i64, data: &[usize], indices: &[usize]) -> OpResult<NdPlan> {
    let (r, q) = (data.len(), indices.len());
    if q == 0 || r == 0 {
        bail_op!("data and indices must have rank 1 or more, got {r} and {q}");
    }
    if batch_dims < 0 || batch_dims as usize >= q.min(r) {
        bail_op!("batch_dims {batch_dims} must be in [0, {})", q.min(r));
    }
    let b = batch_dims as usize;
    if data[..b] != indices[..b] {
        bail_op!("batch dims of data {:?} and indices {:?} differ", &data[..b], &indices[..b]);
    }
    let k = indices[q - 1];
    if k < 1 || b + k > r {
        bail_op!("index tuples of length {k} do not fit data of rank {r} with {b} batch dims");
    }
    Ok(NdPlan { batch_dims: b, k, slice: numel(&data[b + k..]) })
}

/// Flat data offset of the slice every index tuple names.
fn nd_offsets(plan: &NdPlan, data: &[usize], indices: &Tensor) -> OpResult<Vec<usize>> {
    let (b, k) = (plan.batch_dims, plan.k);
    let batch_block = numel(&data[b..]);
    let tuples_per_batch = numel(&indices.shape()[b..indices.rank() - 1]);
    let tuple_strides: Vec<usize> = strides(&data[b..b + k]).iter().map(|s| s * plan.slice).collect();
    let values = indices.to_i64_vec();
    values
        .chunks(k.max(1))
        .enumerate()
        .map(|(t, tuple)| {
            let mut off = (t / tuples_per_batch.max(1)) * batch_block;
            for (j, &i) in tuple.iter().enumerate() {
                off += index_in(i, data[b + j])? * tuple_strides[j];
            }
            Ok(off)
        })
        .collect()
}

fn gather_nd_shape(plan: &NdPlan, data: &[usize], indices: &[usize]) -> Vec<usize> {
    [&indices[..indices.len() - 1], &data[plan.batch_dims + plan.k..]].concat()
}

fn infer_gather_nd(ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    let (data, indices) = (required(inputs, 0)?.fact, required(inputs, 1)?.fact);
    check_indices(indices.dtype)?;
    let plan = nd_plan(ctx.attrs.int("batch_dims", 0)?, &data.shape, &indices.shape)?;
    Ok(vec![ValueFact::new(data.dtype, gather_nd_shape(&plan, &data.shape, &indices.shape))])
}

fn eval_gather_nd(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    let (data, indices) = (*required(inputs, 0)?, *required(inputs, 1)?);
    check_indices(indices.dtype())?;
    let plan = nd_plan(ctx.attrs.int("batch_dims", 0)?, data.shape(), indices.shape())?;
    let offsets = nd_offsets(&plan, data.shape(), indices)?;
    let n = plan.slice;
    let out = crate::map_data!(data.data(), v => {
        let mut out = Vec::with_capacity(offsets.len() * n);
        for &off in &offsets {
            out.extend_from_slice(&v[off..off + n]);
        }
        out
    });
    Ok(vec![tensor(gather_nd_shape(&plan, data.shape(), indices.shape()), out)])
}

fn eval_scatter_nd(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    let (data, indices, updates) = (*required(inputs, 0)?, *required(inputs, 1)?, *required(inputs, 2)?);
    check_indices(indices.dtype())?;
    let plan = nd_plan(0, data.shape(), indices.shape())?;
    let want = gather_nd_shape(&plan, data.shape(), indices.shape());
    if updates.shape() != want {
        bail_op!("updates shape {:?} must be {want:?}", updates.shape());
    }
    let offsets = nd_offsets(&plan, data.shape(), indices)?;
    let out = scatter(data.data(), updates.data(), &offsets, plan.slice, reduction(ctx)?);
    Ok(vec![tensor(data.shape().to_vec(), out)])
}

// ---- scatter with reduction ----

#[derive(Clone, Copy, Debug, PartialEq)]
enum Reduction {
    None,
    Add,
    Mul,
    Max,
    Min,
}

fn reduction(ctx: &NodeCtx) -> OpResult<Reduction> {
    Ok(match ctx.attrs.string("reduction", "none")? {
        "none" => Reduction::None,
        "add" => Reduction::Add,
        "mul" => Reduction::Mul,
        "max" => Reduction::Max,
        "min" => Reduction::Min,
        other => bail_op!("reduction must be none, add, mul, max or min, got {other:?}"),
    })
}

/// A copy of `data` with run `j` of `updates` (`run` elements) combined into the run at
/// `starts[j]`, in order (so later duplicates win without a reduction). Add and Mul run
/// in f64 or wrapping i64, which is exact for every type (then cast back); None, Max
/// and Min compare in the element type itself.
fn scatter(data: &Data, updates: &Data, starts: &[usize], run: usize, reduction: Reduction) -> Data {
    fn combine<T: Element>(data: &[T], updates: &Data, starts: &[usize], run: usize, f: impl Fn(T, T) -> T) -> Data {
        let updates = T::slice(updates).expect("updates have the data's type");
        let mut out = data.to_vec();
        for (j, &s) in starts.iter().enumerate() {
            for (o, &u) in out[s..s + run].iter_mut().zip(&updates[j * run..(j + 1) * run]) {
                *o = f(*o, u);
            }
        }
        T::wrap(out)
    }
    let dtype = data.dtype();
    // The max/min closures are generic over every element type, bool included, where `>`
    // and `<` are the ONNX semantics (true > false) that clippy would rewrite per type.
    #[allow(clippy::bool_comparison)]
    match reduction {
        Reduction::None => crate::with_data!(data, v => combine(v, updates, starts, run, |_, u| u)),
        Reduction::Max => {
            crate::with_data!(data, v => combine(v, updates, starts, run, |a, u| if u > a { u } else { a }))
        }
        Reduction::Min => {
            crate::with_data!(data, v => combine(v, updates, starts, run, |a, u| if u < a { u } else { a }))
        }
        Reduction::Add | Reduction::Mul => {
            let wide = if dtype.is_float() { DType::F64 } else { DType::I64 };
            let (data, updates) = (data.cast(wide), updates.cast(wide));
            let mul = reduction == Reduction::Mul;
            let out = match &data {
                Data::F64(v) => combine(v, &updates, starts, run, |a, u| if mul { a * u } else { a + u }),
                Data::I64(v) => {
                    combine(
                        v,
                        &updates,
                        starts,
                        run,
                        |a: i64, u| if mul { a.wrapping_mul(u) } else { a.wrapping_add(u) },
                    )
                }
                _ => unreachable!("cast to f64 or i64"),
            };
            out.cast(dtype)
        }
    }
}

// ---- Range, Size ----

/// Range's element type, first value, step and length, from its scalar inputs.
fn range_plan(start: &Tensor, limit: &Tensor, delta: &Tensor) -> OpResult<(DType, f64, f64, usize)> {
    let dtype = start.dtype();
    if limit.dtype() != dtype || delta.dtype() != dtype {
        bail_op!("start, limit and delta must have one type, got {dtype}, {} and {}", limit.dtype(), delta.dtype());
    }
    if dtype == DType::Bool {
        bail_op!("range of bool is not defined");
    }
    for (t, what) in [(start, "start"), (limit, "limit"), (delta, "delta")] {
        if t.len() != 1 {
            bail_op!("{what} must be a scalar, got shape {:?}", t.shape());
        }
    }
    if dtype.is_float() {
        let (s, l, d) = (start.to_f64_vec()[0], limit.to_f64_vec()[0], delta.to_f64_vec()[0]);
        if d == 0.0 || !d.is_finite() || !s.is_finite() || !l.is_finite() {
            bail_op!("range ({s}, {l}, {d}) is not a finite sequence");
        }
        Ok((dtype, s, d, ((l - s) / d).ceil().max(0.0) as usize))
    } else {
        let (s, l, d) = (start.to_i64_vec()[0] as i128, limit.to_i64_vec()[0] as i128, delta.to_i64_vec()[0] as i128);
        if d == 0 {
            bail_op!("delta must not be 0");
        }
        let n = if d > 0 { (l - s + d - 1).div_euclid(d) } else { (s - l - d - 1).div_euclid(-d) };
        Ok((dtype, s as f64, d as f64, n.max(0) as usize))
    }
}

fn infer_range(_ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    let start = constant_input(inputs, 0, "start")?;
    let limit = constant_input(inputs, 1, "limit")?;
    let delta = constant_input(inputs, 2, "delta")?;
    let (dtype, _, _, n) = range_plan(start, limit, delta)?;
    Ok(vec![ValueFact::new(dtype, vec![n])])
}

fn eval_range(_ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    let (start, limit, delta) = (*required(inputs, 0)?, *required(inputs, 1)?, *required(inputs, 2)?);
    let (dtype, s, d, n) = range_plan(start, limit, delta)?;
    let data = if dtype.is_float() {
        Data::from_f64_iter(dtype, (0..n).map(|i| s + i as f64 * d))
    } else {
        // Exact integer steps (f64 would round beyond 2^53), cast back with wrapping.
        let (s, d) = (start.to_i64_vec()[0], delta.to_i64_vec()[0]);
        Data::I64((0..n as i64).map(|i| s.wrapping_add(i.wrapping_mul(d))).collect()).cast(dtype)
    };
    Ok(vec![tensor(vec![n], data)])
}

fn infer_size(_ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    required(inputs, 0)?;
    Ok(vec![ValueFact::new(DType::I64, vec![])])
}

fn eval_size(_ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    Ok(vec![Tensor::scalar(required(inputs, 0)?.len() as i64)])
}

#[cfg(test)]
mod tests;
