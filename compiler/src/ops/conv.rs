//! Convolution: Conv over 1-D, 2-D and N-D inputs with groups (depthwise included),
//! explicit or automatic padding, strides, dilations and an optional bias.
//!
//! Normal convolutions run as im2col + f64 GEMM per (image, group), pointwise ones
//! (1×1, stride 1, no padding) skip the im2col copy, and depthwise ones (one input
//! channel per group, 1-D or 2-D) run as a direct loop; all of them in parallel over
//! image × group. [`Window`], the sliding-window geometry, is shared with the pools.

use super::linalg::{compute_chunks, dgemm, f64_data, load_f64, with_float_type, Scratch};
use super::{optional, required, FamilyRegistrar, InferInput, NodeCtx, OpResult};
use crate::bail_op;
use crate::ir::{numel, Element, Tensor, ValueFact};

pub(super) fn register(reg: &mut FamilyRegistrar) {
    reg.op("Conv", infer_conv, eval_conv);
}

/// Geometry of a sliding window over the spatial axes (Conv and the pools).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Window {
    pub input: Vec<usize>,
    pub kernel: Vec<usize>,
    pub strides: Vec<usize>,
    pub dilations: Vec<usize>,
    pub pad_begin: Vec<usize>,
    pub pad_end: Vec<usize>,
    pub output: Vec<usize>,
}

/// A positive-int list attribute of one entry per spatial axis, or `default` everywhere.
fn per_axis(ctx: &NodeCtx, name: &str, rank: usize, default: usize) -> OpResult<Vec<usize>> {
    match ctx.attrs.ints_opt(name)? {
        None | Some([]) => Ok(vec![default; rank]),
        Some(v) if v.len() != rank => bail_op!("attribute '{name}' has {} values for {rank} spatial axes", v.len()),
        Some(v) => v
            .iter()
            .map(|&x| match usize::try_from(x) {
                Ok(x) if x > 0 => Ok(x),
                _ => bail_op!("attribute '{name}' must hold positive values, got {v:?}"),
            })
            .collect(),
    }
}

impl Window {
    /// Reads `strides`, `dilations` (when `use_dilations`), `pads` and `auto_pad` and
    /// computes the output size like ONNX shape inference (PyTorch's rule in ceil mode:
    /// a window that would start inside the end padding is dropped).
    pub fn from_attrs(
        ctx: &NodeCtx,
        input: &[usize],
        kernel: &[usize],
        use_dilations: bool,
        ceil_mode: bool,
    ) -> OpResult<Window> {
        let rank = input.len();
        if kernel.len() != rank {
            bail_op!("kernel has {} spatial axes but the input has {rank}", kernel.len());
        }
        if kernel.contains(&0) {
            bail_op!("kernel shape {kernel:?} has a zero dimension");
        }
        let strides = per_axis(ctx, "strides", rank, 1)?;
        let dilations = if use_dilations { per_axis(ctx, "dilations", rank, 1)? } else { vec![1; rank] };
        let extent: Vec<usize> = (0..rank).map(|i| (kernel[i] - 1) * dilations[i] + 1).collect();
        let auto_pad = ctx.attrs.string("auto_pad", "NOTSET")?;
        let (pad_begin, pad_end) = match (ctx.attrs.ints_opt("pads")?, auto_pad) {
            (Some(p), _) if !p.is_empty() && auto_pad != "NOTSET" && p.iter().any(|&x| x != 0) => {
                bail_op!("attributes 'pads' and auto_pad={auto_pad} cannot be used together")
            }
            (Some(p), "NOTSET") if !p.is_empty() => {
                if p.len() != 2 * rank || p.iter().any(|&x| x < 0) {
                    bail_op!("attribute 'pads' must hold {} non-negative values, got {p:?}", 2 * rank);
                }
                let p: Vec<usize> = p.iter().map(|&x| x as usize).collect();
                (p[..rank].to_vec(), p[rank..].to_vec())
            }
            (_, "NOTSET" | "VALID") => (vec![0; rank], vec![0; rank]),
            (_, same @ ("SAME_UPPER" | "SAME_LOWER")) => {
                let mut begin = vec![0; rank];
                let mut end = vec![0; rank];
                for i in 0..rank {
                    let residual = input[i] % strides[i];
                    let total = extent[i].saturating_sub(if residual == 0 { strides[i] } else { residual });
                    let (small, big) = (total / 2, total - total / 2);
                    (begin[i], end[i]) = if same == "SAME_UPPER" { (small, big) } else { (big, small) };
                }
                (begin, end)
            }
            (_, other) => bail_op!("unknown auto_pad '{other}'"),
        };
        let mut output = vec![0; rank];
        for i in 0..rank {
            let padded = input[i] + pad_begin[i] + pad_end[i];
            if padded < extent[i] {
                bail_op!(
                    "window of extent {} does not fit axis {i} of size {} with pads ({}, {})",
                    extent[i],
                    input[i],
                    pad_begin[i],
                    pad_end[i]
                );
            }
            let span = padded - extent[i];
            output[i] = if ceil_mode { span.div_ceil(strides[i]) + 1 } else { span / strides[i] + 1 };
            if ceil_mode && (output[i] - 1) * strides[i] >= input[i] + pad_begin[i] {
                output[i] -= 1;
            }
        }
        let kernel = kernel.to_vec();
        Ok(Window { input: input.to_vec(), kernel, strides, dilations, pad_begin, pad_end, output })
    }

    /// For output position `o` on axis `i`, the kernel taps `[lo, hi)` that land inside the input.
    pub fn taps(&self, i: usize, o: usize) -> (usize, usize) {
        let (s, d, p, n) = (self.strides[i], self.dilations[i], self.pad_begin[i], self.input[i]);
        // Input coordinate of tap t: o*s - p + t*d, kept when it lies in [0, n).
        let start = (o * s) as isize - p as isize;
        let lo = if start >= 0 { 0 } else { ((-start) as usize).div_ceil(d) };
        let hi = if start >= n as isize { 0 } else { ((n as isize - start - 1) as usize / d + 1).min(self.kernel[i]) };
        (lo.min(hi), hi)
    }

    /// The same geometry on two spatial axes: 1-D gets a leading axis of size 1.
    fn as_2d(&self) -> Option<Window> {
        match self.input.len() {
            2 => Some(self.clone()),
            1 => {
                let lift = |v: &Vec<usize>, x: usize| vec![x, v[0]];
                Some(Window {
                    input: lift(&self.input, 1),
                    kernel: lift(&self.kernel, 1),
                    strides: lift(&self.strides, 1),
                    dilations: lift(&self.dilations, 1),
                    pad_begin: lift(&self.pad_begin, 0),
                    pad_end: lift(&self.pad_end, 0),
                    output: lift(&self.output, 1),
                })
            }
            _ => None,
        }
    }

    fn is_pointwise(&self) -> bool {
        self.kernel.iter().chain(&self.strides).all(|&x| x == 1)
            && self.pad_begin.iter().chain(&self.pad_end).all(|&x| x == 0)
    }
}

/// Everything Conv needs to know about its operands.
struct ConvShape {
    batch: usize,
    channels: usize,
    out_channels: usize,
    group: usize,
    window: Window,
}

fn conv_shape(ctx: &NodeCtx, x: &ValueFact, w: &ValueFact, b: Option<&ValueFact>) -> OpResult<ConvShape> {
    for (what, f) in [("X", Some(x)), ("W", Some(w)), ("B", b)] {
        if let Some(f) = f {
            super::expect_float(f, what)?;
            if f.dtype != x.dtype {
                bail_op!("Conv {what} is {} but X is {}", f.dtype, x.dtype);
            }
        }
    }
    if x.shape.len() < 3 || w.shape.len() != x.shape.len() {
        bail_op!("Conv needs X of rank >= 3 and W of the same rank, got {:?} and {:?}", x.shape, w.shape);
    }
    let group = usize::try_from(ctx.attrs.int("group", 1)?).ok().filter(|&g| g > 0);
    let Some(group) = group else { bail_op!("attribute 'group' must be positive") };
    let (channels, out_channels) = (x.shape[1], w.shape[0]);
    if channels != w.shape[1] * group || out_channels % group != 0 {
        bail_op!("Conv with group {group}: X {:?} and W {:?} do not match", x.shape, w.shape);
    }
    let kernel = &w.shape[2..];
    if let Some(k) = ctx.attrs.ints_opt("kernel_shape")? {
        if k.len() != kernel.len() || k.iter().zip(kernel).any(|(&a, &b)| a != b as i64) {
            bail_op!("attribute kernel_shape {k:?} does not match W {:?}", w.shape);
        }
    }
    if let Some(b) = b {
        if b.shape != [out_channels] {
            bail_op!("Conv bias must have shape [{out_channels}], got {:?}", b.shape);
        }
    }
    let window = Window::from_attrs(ctx, &x.shape[2..], kernel, true, false)?;
    Ok(ConvShape { batch: x.shape[0], channels, out_channels, group, window })
}

impl ConvShape {
    fn out_shape(&self) -> Vec<usize> {
        [vec![self.batch, self.out_channels], self.window.output.clone()].concat()
    }
}

fn infer_conv(ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    let (x, w) = (required(inputs, 0)?.fact, required(inputs, 1)?.fact);
    let s = conv_shape(ctx, x, w, optional(inputs, 2).map(|b| b.fact))?;
    Ok(vec![ValueFact::new(x.dtype, s.out_shape())])
}

fn eval_conv(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    let (x, w) = (*required(inputs, 0)?, *required(inputs, 1)?);
    let b = optional(inputs, 2);
    let s = conv_shape(ctx, &ValueFact::of(x), &ValueFact::of(w), b.map(ValueFact::of).as_ref())?;
    let wv = f64_data(w);
    let bias = b.map(f64_data);
    let out = with_float_type!(x.dtype(), T => {
        let xv = x.as_slice::<T>().expect("dtype checked");
        Tensor::from_vec(s.out_shape(), conv_float(&s, xv, &wv, bias.as_deref()))
    });
    Ok(vec![out])
}

/// The convolution of `x` (`[N, C, ...]`) with f64 weights (`[M, C/group, ...]`), computed in
/// f64 one (image, group) pair at a time and rounded once into the output type. A rayon
/// task takes several consecutive pairs when they are small (depthwise layers on 7×7
/// planes would otherwise be mostly task overhead).
fn conv_float<T: Element>(s: &ConvShape, x: &[T], w: &[f64], bias: Option<&[f64]>) -> Vec<T> {
    let win = &s.window;
    let (in_ch, out_ch) = (s.channels / s.group, s.out_channels / s.group);
    let (in_px, out_px) = (numel(&win.input), numel(&win.output));
    let taps = numel(&win.kernel);
    let rows = in_ch * taps;
    let mut out = vec![T::default(); s.batch * s.out_channels * out_px];
    let depthwise_2d = if in_ch == 1 { win.as_2d() } else { None };
    let pointwise = win.is_pointwise();
    let per_pair = out_ch * out_px;
    let pairs_per_task = ((1 << 14) / per_pair.max(1)).max(1);
    compute_chunks(&mut out, pairs_per_task * per_pair, true, |task, sc| {
        let Scratch { out: ys, a: xs, b: work } = sc;
        for (k, y) in ys.chunks_mut(per_pair).enumerate() {
            let pair = task * pairs_per_task + k;
            let (n, g) = (pair / s.group, pair % s.group);
            load_f64(xs, &x[(n * s.channels + g * in_ch) * in_px..][..in_ch * in_px]);
            let w = &w[g * out_ch * rows..][..out_ch * rows];
            if let Some(b) = bias {
                for (m, y) in y.chunks_mut(out_px).enumerate() {
                    y.fill(b[g * out_ch + m]);
                }
            }
            let beta = if bias.is_some() { 1.0 } else { 0.0 };
            if let Some(win2) = &depthwise_2d {
                let plane = if win2.strides[1] == 1 {
                    &*xs
                } else {
                    phase_split(xs, (win2.input[0], win2.input[1]), win2.strides[1], work);
                    &*work
                };
                for (m, y) in y.chunks_mut(out_px).enumerate() {
                    depthwise_plane(win2, plane, &w[m * taps..(m + 1) * taps], y);
                }
            } else if pointwise {
                dgemm((out_ch, in_ch, out_px), 1.0, (w, rows, 1), (xs, in_px, 1), beta, (y, out_px, 1));
            } else {
                im2col(win, xs, in_ch, work);
                dgemm((out_ch, rows, out_px), 1.0, (w, rows, 1), (work, out_px, 1), beta, (y, out_px, 1));
            }
        }
    });
    out
}

/// Unfolds `channels` planes into a `[channels * taps, out_px]` matrix (zeros for padding).
fn im2col(win: &Window, x: &[f64], channels: usize, cols: &mut Vec<f64>) {
    let rank = win.input.len();
    let (in_px, out_px, taps) = (numel(&win.input), numel(&win.output), numel(&win.kernel));
    cols.clear();
    cols.resize(channels * taps * out_px, 0.0);
    let last = rank - 1;
    let (w_in, w_out) = (win.input[last], win.output[last]);
    let (s_last, d_last, p_last) = (win.strides[last], win.dilations[last], win.pad_begin[last] as isize);
    let outer_out: usize = win.output[..last].iter().product();
    let mut tap = vec![0usize; rank];
    let mut pos = vec![0usize; last];
    for (row, col_row) in cols.chunks_mut(out_px).enumerate() {
        let c = row / taps;
        // Multi-index of this tap (row-major over the kernel).
        let mut t = row % taps;
        for i in (0..rank).rev() {
            tap[i] = t % win.kernel[i];
            t /= win.kernel[i];
        }
        let plane = &x[c * in_px..(c + 1) * in_px];
        // Output columns on the last axis whose input coordinate is inside [0, w_in).
        let shift = tap[last] as isize * d_last as isize - p_last;
        let lo = if shift >= 0 { 0 } else { ((-shift) as usize).div_ceil(s_last) };
        let hi =
            if shift >= w_in as isize { 0 } else { (((w_in as isize - 1 - shift) as usize) / s_last + 1).min(w_out) };
        pos.fill(0);
        for outer in 0..outer_out {
            // Input row offset for the leading axes, or skip when it falls into padding.
            let mut offset = Some(0usize);
            for i in 0..last {
                let coord = (pos[i] * win.strides[i] + tap[i] * win.dilations[i]) as isize - win.pad_begin[i] as isize;
                offset = match offset {
                    Some(o) if coord >= 0 && (coord as usize) < win.input[i] => Some(o * win.input[i] + coord as usize),
                    _ => None,
                };
            }
            if let Some(o) = offset {
                let src = &plane[o * w_in..(o + 1) * w_in];
                let dst = &mut col_row[outer * w_out..(outer + 1) * w_out];
                if lo >= hi {
                    // Every column of this row falls into padding.
                } else if s_last == 1 {
                    let start = (lo as isize + shift) as usize;
                    dst[lo..hi].copy_from_slice(&src[start..start + (hi - lo)]);
                } else {
                    for ow in lo..hi {
                        dst[ow] = src[(ow as isize * s_last as isize + shift) as usize];
                    }
                }
            }
            for i in (0..last).rev() {
                pos[i] += 1;
                if pos[i] < win.output[i] {
                    break;
                }
                pos[i] = 0;
            }
        }
    }
}

/// Splits a `[h, w]` plane by column phase for a stride-`s` sweep: row `ih`, phase `p`
/// holds columns `p, p + s, p + 2s, ...` contiguously, `w.div_ceil(s)` slots per row.
fn phase_split(x: &[f64], (h, w): (usize, usize), s: usize, out: &mut Vec<f64>) {
    let w_q = w.div_ceil(s);
    out.clear();
    out.resize(h * s * w_q, 0.0);
    for (ih, row) in x.chunks(w).enumerate().take(h) {
        for p in 0..s.min(w) {
            let dst = &mut out[(ih * s + p) * w_q..][..w_q];
            for (d, &v) in dst.iter_mut().zip(row[p..].iter().step_by(s)) {
                *d = v;
            }
        }
    }
}

/// One output plane of a depthwise convolution on two spatial axes, accumulated into `y`.
/// `x` is the input plane after [`phase_split`] by the column stride (as is for stride 1),
/// so every tap is a contiguous multiply-add over an output row.
fn depthwise_plane(win: &Window, x: &[f64], w: &[f64], y: &mut [f64]) {
    let (w_in, w_out, kw) = (win.input[1], win.output[1], win.kernel[1]);
    let (sw, dw, pw) = (win.strides[1], win.dilations[1], win.pad_begin[1] as isize);
    let w_q = w_in.div_ceil(sw);
    // Per column tap: the output columns [lo, hi) it reaches, its phase and first slot.
    // Input column of output column ow is ow * sw + shift = (ow + q) * sw + r.
    let columns: Vec<(usize, usize, usize, usize)> = (0..kw)
        .map(|tw| {
            let shift = (tw * dw) as isize - pw;
            let lo = if shift >= 0 { 0 } else { ((-shift) as usize).div_ceil(sw) };
            let hi =
                if shift >= w_in as isize { 0 } else { (((w_in as isize - 1 - shift) as usize) / sw + 1).min(w_out) };
            if lo >= hi {
                return (0, 0, 0, 0);
            }
            let (q, r) = (shift.div_euclid(sw as isize), shift.rem_euclid(sw as isize) as usize);
            (lo, hi, r, (lo as isize + q) as usize)
        })
        .collect();
    for (oh, y_row) in y.chunks_mut(w_out).enumerate() {
        let (t0, t1) = win.taps(0, oh);
        for th in t0..t1 {
            let ih = oh * win.strides[0] + th * win.dilations[0] - win.pad_begin[0];
            for (tw, &(lo, hi, r, start)) in columns.iter().enumerate() {
                let wv = w[th * kw + tw];
                let row = &x[(ih * sw + r) * w_q..][..w_q];
                axpy(&mut y_row[lo..hi], &row[start..start + (hi - lo)], wv);
            }
        }
    }
}

/// `y += a * x`, with fused multiply-adds on AVX2 machines (checked at run time).
fn axpy(y: &mut [f64], x: &[f64], a: f64) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU supports the features the function is compiled for.
        return unsafe { axpy_avx2(y, x, a) };
    }
    for (y, &x) in y.iter_mut().zip(x) {
        *y += a * x;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn axpy_avx2(y: &mut [f64], x: &[f64], a: f64) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y = a.mul_add(x, *y);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Attr, Attrs};
    use crate::rng::SplitMix64;

    fn random(shape: &[usize], rng: &mut SplitMix64) -> Tensor {
        let v: Vec<f32> = (0..numel(shape)).map(|_| rng.uniform(-1.0, 1.0) as f32).collect();
        Tensor::from_vec(shape.to_vec(), v)
    }

    /// Straightforward N-D convolution, one output element at a time.
    fn naive(s: &ConvShape, x: &[f64], w: &[f64], b: Option<&[f64]>) -> Vec<f64> {
        let win = &s.window;
        let rank = win.input.len();
        let (in_ch, out_ch) = (s.channels / s.group, s.out_channels / s.group);
        let (in_px, out_px, taps) = (numel(&win.input), numel(&win.output), numel(&win.kernel));
        let unravel = |mut i: usize, dims: &[usize]| -> Vec<usize> {
            let mut v = vec![0; dims.len()];
            for a in (0..dims.len()).rev() {
                v[a] = i % dims[a];
                i /= dims[a];
            }
            v
        };
        let mut out = vec![];
        for n in 0..s.batch {
            for m in 0..s.out_channels {
                let g = m / out_ch;
                for o in 0..out_px {
                    let o = unravel(o, &win.output);
                    let mut acc = b.map_or(0.0, |b| b[m]);
                    for c in 0..in_ch {
                        for t in 0..taps {
                            let tv = unravel(t, &win.kernel);
                            let mut flat = 0usize;
                            let mut inside = true;
                            for i in 0..rank {
                                let coord = (o[i] * win.strides[i] + tv[i] * win.dilations[i]) as isize
                                    - win.pad_begin[i] as isize;
                                inside &= coord >= 0 && (coord as usize) < win.input[i];
                                flat = flat * win.input[i] + coord.max(0) as usize;
                            }
                            if inside {
                                acc +=
                                    x[(n * s.channels + g * in_ch + c) * in_px + flat] * w[(m * in_ch + c) * taps + t];
                            }
                        }
                    }
                    out.push(acc);
                }
            }
        }
        out
    }

    fn check(x_shape: &[usize], w_shape: &[usize], attrs: &[(&str, Attr)], with_bias: bool, seed: u64) {
        let mut rng = SplitMix64::new(seed);
        let (x, w) = (random(x_shape, &mut rng), random(w_shape, &mut rng));
        let b = random(&[w_shape[0]], &mut rng);
        let mut a = Attrs::new();
        for (k, v) in attrs {
            a.insert(*k, v.clone());
        }
        let ctx = NodeCtx { name: "t", attrs: &a, opset: 11, n_outputs: 1 };
        let inputs = [Some(&x), Some(&w), with_bias.then_some(&b)];
        let got = eval_conv(&ctx, &inputs).unwrap().remove(0);
        let s = conv_shape(&ctx, &ValueFact::of(&x), &ValueFact::of(&w), with_bias.then(|| ValueFact::of(&b)).as_ref())
            .unwrap();
        assert_eq!(got.shape(), s.out_shape().as_slice());
        let want = naive(&s, &x.to_f64_vec(), &w.to_f64_vec(), with_bias.then(|| b.to_f64_vec()).as_deref());
        for (i, (g, w)) in got.to_f64_vec().iter().zip(&want).enumerate() {
            assert!((g - w).abs() < 1e-5, "{x_shape:?} {w_shape:?} {attrs:?} [{i}]: {g} vs {w}");
        }
    }

    fn ints(v: &[i64]) -> Attr {
        Attr::Ints(v.to_vec())
    }

    #[test]
    fn conv_matches_the_naive_loop() {
        let s = |x: &str| Attr::String(x.into());
        check(&[2, 3, 7, 6], &[4, 3, 3, 3], &[], true, 1);
        check(&[2, 3, 7, 6], &[4, 3, 3, 2], &[("pads", ints(&[1, 0, 2, 1])), ("strides", ints(&[2, 3]))], false, 2);
        check(&[1, 4, 9, 9], &[6, 2, 3, 3], &[("group", Attr::Int(2)), ("dilations", ints(&[2, 1]))], true, 3);
        check(&[2, 5, 8, 7], &[5, 1, 3, 3], &[("group", Attr::Int(5)), ("pads", ints(&[1, 1, 1, 1]))], true, 4);
        check(
            &[2, 4, 8, 7],
            &[8, 1, 5, 5],
            &[("group", Attr::Int(4)), ("strides", ints(&[2, 2])), ("auto_pad", s("SAME_UPPER"))],
            true,
            5,
        );
        check(
            &[1, 3, 8, 7],
            &[3, 1, 3, 3],
            &[("group", Attr::Int(3)), ("dilations", ints(&[2, 3])), ("auto_pad", s("SAME_LOWER"))],
            false,
            6,
        );
        check(&[2, 6, 5, 4], &[3, 6, 1, 1], &[], true, 7);
        check(&[2, 6, 5, 4], &[3, 6, 1, 1], &[("strides", ints(&[2, 2]))], true, 8);
        check(&[2, 3, 11], &[4, 3, 3], &[("pads", ints(&[2, 1])), ("strides", ints(&[2]))], true, 9);
        check(&[2, 3, 11], &[3, 1, 4], &[("group", Attr::Int(3)), ("auto_pad", s("SAME_UPPER"))], true, 10);
        check(
            &[1, 2, 5, 4, 6],
            &[3, 2, 2, 3, 2],
            &[("pads", ints(&[1, 0, 1, 0, 1, 1])), ("strides", ints(&[1, 2, 2]))],
            true,
            11,
        );
        check(&[1, 4, 5, 4, 6], &[4, 1, 3, 3, 3], &[("group", Attr::Int(4)), ("auto_pad", s("SAME_LOWER"))], false, 12);
        check(&[1, 2, 6, 6], &[2, 2, 3, 3], &[("auto_pad", s("VALID")), ("strides", ints(&[2, 2]))], false, 13);
        let strided = [
            ("group", Attr::Int(3)),
            ("strides", ints(&[2, 3])),
            ("dilations", ints(&[2, 2])),
            ("pads", ints(&[1, 3, 0, 2])),
        ];
        check(&[2, 3, 9, 11], &[6, 1, 3, 3], &strided, true, 15);
        check(
            &[1, 2, 7],
            &[2, 1, 3],
            &[("group", Attr::Int(2)), ("strides", ints(&[3])), ("pads", ints(&[2, 0]))],
            true,
            16,
        );
        check(&[1, 2, 3, 3], &[2, 1, 3, 3], &[("group", Attr::Int(2)), ("pads", ints(&[4, 4, 4, 4]))], false, 17);
        check(
            &[1, 2, 3, 3],
            &[2, 1, 3, 3],
            &[("group", Attr::Int(2)), ("pads", ints(&[4, 4, 4, 4])), ("strides", ints(&[2, 3]))],
            true,
            18,
        );
        check(&[1, 1, 3, 3], &[1, 1, 3, 3], &[("pads", ints(&[4, 4, 4, 4]))], false, 14);
    }

    #[test]
    fn conv_rejects_mismatched_channels() {
        let mut rng = SplitMix64::new(0);
        let (x, w) = (random(&[1, 3, 4, 4], &mut rng), random(&[2, 2, 3, 3], &mut rng));
        let a = Attrs::new();
        let ctx = NodeCtx { name: "t", attrs: &a, opset: 11, n_outputs: 1 };
        assert!(eval_conv(&ctx, &[Some(&x), Some(&w)]).unwrap_err().0.contains("do not match"));
    }
}
