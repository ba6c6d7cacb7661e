//! Pooling: MaxPool (with the optional Indices output), AveragePool, GlobalAveragePool
//! and GlobalMaxPool over N-D windows, with pads, auto_pad, strides, dilations and ceil
//! mode (the window geometry is [`Window`], shared with Conv). Values are pooled in f64,
//! one (image, channel) plane per rayon task.

use super::conv::Window;
use super::linalg::{f64_data, tensor_from_f64};
use super::{required, FamilyRegistrar, InferInput, NodeCtx, OpResult};
use crate::bail_op;
use crate::ir::{numel, DType, Tensor, ValueFact};
use rayon::prelude::*;

pub(super) fn register(reg: &mut FamilyRegistrar) {
    reg.op("MaxPool", infer_max_pool, eval_max_pool)
        .op("AveragePool", infer_average_pool, eval_average_pool)
        .op("GlobalAveragePool", infer_global_pool, eval_global_average_pool)
        .op("GlobalMaxPool", infer_global_pool, eval_global_max_pool);
}

fn check_input(x: &ValueFact, op: &str, allow_8bit: bool) -> OpResult<()> {
    let ok = x.dtype.is_float() || allow_8bit && matches!(x.dtype, DType::I8 | DType::U8);
    if !ok {
        bail_op!("{op} does not take {} tensors", x.dtype);
    }
    if x.shape.len() < 3 {
        bail_op!("{op} needs an input of rank >= 3 ([N, C, spatial...]), got {:?}", x.shape);
    }
    Ok(())
}

fn pool_window(ctx: &NodeCtx, x: &ValueFact) -> OpResult<Window> {
    let Some(kernel) = ctx.attrs.ints_opt("kernel_shape")? else {
        bail_op!("missing required attribute 'kernel_shape'");
    };
    let kernel: Vec<usize> = kernel.iter().map(|&k| k.max(0) as usize).collect();
    let ceil_mode = ctx.attrs.int("ceil_mode", 0)? != 0;
    Window::from_attrs(ctx, &x.shape[2..], &kernel, true, ceil_mode)
}

fn out_shape(x: &ValueFact, win: &Window) -> Vec<usize> {
    [&x.shape[..2], &win.output[..]].concat()
}

fn infer_max_pool(ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    let x = required(inputs, 0)?.fact;
    check_input(x, "MaxPool", true)?;
    let shape = out_shape(x, &pool_window(ctx, x)?);
    Ok(vec![ValueFact::new(x.dtype, shape.clone()), ValueFact::new(DType::I64, shape)])
}

fn infer_average_pool(ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    let x = required(inputs, 0)?.fact;
    check_input(x, "AveragePool", false)?;
    Ok(vec![ValueFact::new(x.dtype, out_shape(x, &pool_window(ctx, x)?))])
}

/// Per spatial axis and output position: the in-input taps `[lo, hi)` and how many taps
/// lie inside the padded extent (the divisor of AveragePool with count_include_pad).
fn axis_tables(win: &Window) -> Vec<Vec<(usize, usize, usize)>> {
    (0..win.input.len())
        .map(|i| {
            (0..win.output[i])
                .map(|o| {
                    let (lo, hi) = win.taps(i, o);
                    let start = (o * win.strides[i]) as isize - win.pad_begin[i] as isize;
                    let end = (win.input[i] + win.pad_end[i]) as isize;
                    let padded =
                        (0..win.kernel[i]).filter(|&t| start + ((t * win.dilations[i]) as isize) < end).count();
                    (lo, hi, padded)
                })
                .collect()
        })
        .collect()
}

/// Calls `visit(out_index, taps)` for every output position of one plane, where `taps`
/// lists the flat (row-major) input positions inside the window.
fn for_each_window(win: &Window, tables: &[Vec<(usize, usize, usize)>], mut visit: impl FnMut(usize, &[usize], usize)) {
    let rank = win.input.len();
    let mut pos = vec![0usize; rank];
    let mut taps: Vec<usize> = Vec::with_capacity(numel(&win.kernel));
    let mut t = vec![0usize; rank];
    let mut ranges = vec![(0, 0, 0); rank];
    for out_index in 0..numel(&win.output) {
        taps.clear();
        for i in 0..rank {
            ranges[i] = tables[i][pos[i]];
        }
        let padded_count: usize = ranges.iter().map(|r| r.2).product();
        if ranges.iter().all(|&(lo, hi, _)| lo < hi) {
            for i in 0..rank {
                t[i] = ranges[i].0;
            }
            'taps: loop {
                let mut flat = 0;
                for i in 0..rank {
                    let coord = pos[i] * win.strides[i] + t[i] * win.dilations[i] - win.pad_begin[i];
                    flat = flat * win.input[i] + coord;
                }
                taps.push(flat);
                for i in (0..rank).rev() {
                    t[i] += 1;
                    if t[i] < ranges[i].1 {
                        continue 'taps;
                    }
                    t[i] = ranges[i].0;
                }
                break;
            }
        }
        visit(out_index, &taps, padded_count);
        for i in (0..rank).rev() {
            pos[i] += 1;
            if pos[i] < win.output[i] {
                break;
            }
            pos[i] = 0;
        }
    }
}

/// The window structure of a MaxPool or AveragePool node on an input of `x_shape`, for
/// the sparsity rules: per output position of one `(n, c)` plane, the flat input
/// positions inside its window; and the input and output plane sizes.
pub(crate) fn pool_taps(ctx: &NodeCtx, x_shape: &[usize]) -> OpResult<(Vec<Vec<usize>>, usize, usize)> {
    let w = pool_windows(ctx, x_shape)?;
    Ok((w.taps, w.in_px, w.out_px))
}

/// The windows of a MaxPool or AveragePool node on one `(n, c)` plane of an input of
/// `x_shape`, as the evaluators walk them (the GPU lowering builds its tables from this).
pub(crate) struct PoolWindows {
    /// Per output position, the flat input positions inside its window.
    pub taps: Vec<Vec<usize>>,
    /// Per output position, AveragePool's divisor: the window's taps inside the padded extent
    /// with `count_include_pad`, else its taps inside the input.
    pub divisors: Vec<usize>,
    pub in_px: usize,
    pub out_px: usize,
}

pub(crate) fn pool_windows(ctx: &NodeCtx, x_shape: &[usize]) -> OpResult<PoolWindows> {
    let fact = ValueFact::new(DType::F32, x_shape.to_vec());
    check_input(&fact, "pool", true)?;
    let win = pool_window(ctx, &fact)?;
    let include_pad = ctx.attrs.int("count_include_pad", 0)? != 0;
    let tables = axis_tables(&win);
    let out_px = numel(&win.output);
    let (mut taps, mut divisors) = (vec![vec![]; out_px], vec![0; out_px]);
    for_each_window(&win, &tables, |o, t, padded| {
        taps[o] = t.to_vec();
        divisors[o] = if include_pad { padded } else { t.len() };
    });
    Ok(PoolWindows { taps, divisors, in_px: numel(&win.input), out_px })
}

/// Row-major flat spatial index to column-major (MaxPool's storage_order=1).
fn column_major(mut flat: usize, dims: &[usize]) -> usize {
    let mut coords = vec![0; dims.len()];
    for i in (0..dims.len()).rev() {
        coords[i] = flat % dims[i];
        flat /= dims[i];
    }
    let mut index = 0;
    for i in (0..dims.len()).rev() {
        index = index * dims[i] + coords[i];
    }
    index
}

fn eval_max_pool(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    let x = *required(inputs, 0)?;
    let fact = ValueFact::of(x);
    check_input(&fact, "MaxPool", true)?;
    let win = pool_window(ctx, &fact)?;
    let column_major_indices = match ctx.attrs.int("storage_order", 0)? {
        0 => false,
        1 => true,
        other => bail_op!("attribute 'storage_order' must be 0 or 1, got {other}"),
    };
    let tables = axis_tables(&win);
    let (in_px, out_px) = (numel(&win.input), numel(&win.output));
    let xv = f64_data(x);
    let shape = out_shape(&fact, &win);
    let mut values = vec![0.0; numel(&shape)];
    let mut indices = vec![0i64; if ctx.n_outputs > 1 { values.len() } else { 0 }];
    if out_px > 0 {
        let planes = values.par_chunks_mut(out_px).enumerate();
        let work = |(plane, y): (usize, &mut [f64]), z: Option<&mut [i64]>| {
            let src = &xv[plane * in_px..(plane + 1) * in_px];
            let mut z = z;
            for_each_window(&win, &tables, |o, taps, _| {
                // NaN never wins a comparison: windows skip it like padding.
                let (mut best, mut at) = (f64::NEG_INFINITY, None);
                for &t in taps {
                    if src[t] > best || at.is_none() && !src[t].is_nan() {
                        (best, at) = (src[t], Some(t));
                    }
                }
                y[o] = best;
                if let Some(z) = z.as_deref_mut() {
                    z[o] = match at {
                        Some(t) => {
                            let t = if column_major_indices { column_major(t, &win.input) } else { t };
                            (plane * in_px + t) as i64
                        }
                        None => -1,
                    };
                }
            });
        };
        if indices.is_empty() {
            planes.for_each(|p| work(p, None));
        } else {
            planes.zip(indices.par_chunks_mut(out_px)).for_each(|(p, z)| work(p, Some(z)));
        }
    }
    let mut out = vec![tensor_from_f64(x.dtype(), shape.clone(), values)];
    if ctx.n_outputs > 1 {
        out.push(Tensor::from_vec(shape, indices));
    }
    Ok(out)
}

fn eval_average_pool(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    let x = *required(inputs, 0)?;
    let fact = ValueFact::of(x);
    check_input(&fact, "AveragePool", false)?;
    let win = pool_window(ctx, &fact)?;
    let include_pad = ctx.attrs.int("count_include_pad", 0)? != 0;
    let tables = axis_tables(&win);
    let (in_px, out_px) = (numel(&win.input), numel(&win.output));
    let xv = f64_data(x);
    let shape = out_shape(&fact, &win);
    let mut values = vec![0.0; numel(&shape)];
    if out_px > 0 {
        values.par_chunks_mut(out_px).enumerate().for_each(|(plane, y)| {
            let src = &xv[plane * in_px..(plane + 1) * in_px];
            for_each_window(&win, &tables, |o, taps, padded_count| {
                let sum: f64 = taps.iter().map(|&t| src[t]).sum();
                let count = if include_pad { padded_count } else { taps.len() };
                y[o] = sum / count as f64;
            });
        });
    }
    Ok(vec![tensor_from_f64(x.dtype(), shape, values)])
}

fn infer_global_pool(_ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    let x = required(inputs, 0)?.fact;
    check_input(x, "global pooling", false)?;
    let mut shape = x.shape.clone();
    shape[2..].fill(1);
    Ok(vec![ValueFact::new(x.dtype, shape)])
}

fn global_pool(inputs: &[Option<&Tensor>], fold: fn(&[f64]) -> f64) -> OpResult<Vec<Tensor>> {
    let x = *required(inputs, 0)?;
    check_input(&ValueFact::of(x), "global pooling", false)?;
    let mut shape = x.shape().to_vec();
    let plane: usize = shape[2..].iter().product();
    shape[2..].fill(1);
    let xv = f64_data(x);
    let values: Vec<f64> =
        if plane == 0 { vec![fold(&[]); numel(&shape)] } else { xv.par_chunks(plane).map(fold).collect() };
    Ok(vec![tensor_from_f64(x.dtype(), shape, values)])
}

fn eval_global_average_pool(_ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    global_pool(inputs, |v| v.iter().sum::<f64>() / v.len() as f64)
}

fn eval_global_max_pool(_ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    global_pool(inputs, |v| v.iter().copied().fold(f64::NEG_INFINITY, f64::max))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Attr, Attrs};

    fn run(op: &str, attrs: &[(&str, Attr)], x: &Tensor, n_outputs: usize) -> Vec<Tensor> {
        let mut a = Attrs::new();
        for (k, v) in attrs {
            a.insert(*k, v.clone());
        }
        let ctx = NodeCtx { name: "t", attrs: &a, opset: 19, n_outputs };
        (crate::ops::registry().get(op).unwrap().eval)(&ctx, &[Some(x)]).unwrap()
    }

    fn grid(h: usize, w: usize) -> Tensor {
        Tensor::from_vec(vec![1, 1, h, w], (1..=h * w).map(|v| v as f32).collect())
    }

    #[test]
    fn max_pool_indices_in_both_storage_orders() {
        let x = grid(5, 5);
        let attrs = [("kernel_shape", Attr::Ints(vec![2, 2])), ("strides", Attr::Ints(vec![2, 2]))];
        let out = run("MaxPool", &attrs, &x, 2);
        assert_eq!(out[0].as_slice::<f32>().unwrap(), &[7.0, 9.0, 17.0, 19.0]);
        assert_eq!(out[1].as_slice::<i64>().unwrap(), &[6, 8, 16, 18]);
        let mut attrs = attrs.to_vec();
        attrs.push(("storage_order", Attr::Int(1)));
        let out = run("MaxPool", &attrs, &x, 2);
        assert_eq!(out[1].as_slice::<i64>().unwrap(), &[6, 16, 8, 18]);
    }

    #[test]
    fn average_pool_counts_padding_only_when_asked() {
        let x = grid(3, 3);
        let base = [("kernel_shape", Attr::Ints(vec![3, 3])), ("pads", Attr::Ints(vec![1, 1, 1, 1]))];
        let out = run("AveragePool", &base, &x, 1);
        assert_eq!(out[0].as_slice::<f32>().unwrap()[0], (1.0 + 2.0 + 4.0 + 5.0) / 4.0);
        let mut attrs = base.to_vec();
        attrs.push(("count_include_pad", Attr::Int(1)));
        let out = run("AveragePool", &attrs, &x, 1);
        assert_eq!(out[0].as_slice::<f32>().unwrap()[0], (1.0 + 2.0 + 4.0 + 5.0) / 9.0);
    }

    #[test]
    fn ceil_mode_drops_windows_starting_in_padding() {
        let x = grid(4, 4);
        let attrs = [
            ("kernel_shape", Attr::Ints(vec![3, 3])),
            ("strides", Attr::Ints(vec![2, 2])),
            ("ceil_mode", Attr::Int(1)),
        ];
        let out = run("MaxPool", &attrs, &x, 1);
        assert_eq!(out[0].shape(), &[1, 1, 2, 2]);
        assert_eq!(out[0].as_slice::<f32>().unwrap(), &[11.0, 12.0, 15.0, 16.0]);
    }

    #[test]
    fn global_pools_reduce_every_spatial_axis() {
        let x = grid(2, 3);
        assert_eq!(run("GlobalAveragePool", &[], &x, 1)[0].as_slice::<f32>().unwrap(), &[3.5]);
        assert_eq!(run("GlobalMaxPool", &[], &x, 1)[0].shape(), &[1, 1, 1, 1]);
    }
}
