//! The implicit-GEMM convolution (`templates/op_conv_igemm.cu.tera`): a dense (`groups == 1`;
//! grouped below) channels-last convolution as the product `Y[M, c_out] = X̃[M, K] · Wᵀ` with `M = n·oh·ow`
//! output pixels and `K = kh·kw·c_in`, on tensor cores. Row `m` of `X̃` is output pixel `m`'s
//! receptive field in `(ky, kx, ci)` order; it is never formed in memory: each 16-byte run of
//! channels is gathered straight from the NHWC input into the shared-memory tile by `cp.async`,
//! zero-filled where the window leaves the image (padding) or `k` passes `K`. Channel runs
//! never straddle two taps because `c_in` (and a grouped CTA's window) is a multiple of the
//! run. Where it is not (the stem,
//! `c_in = 3`: [`narrow`]), the A tile is gathered element by element instead: each thread
//! loads one k column of several rows into registers while the tensor cores work on the
//! previous slice, then stores them into the stage; the rows' receptive fields are a table in
//! shared memory.
//!
//! Grouped convolutions (RegNet's groups of 16 channels) whose groups tile a CTA's 64 or 128
//! output channels whole run here too, as block-diagonal products: a CTA reads only the input
//! channels of its `bn / cog` groups (its window, [`window`]) and its weight tile holds each
//! output channel's weights at its group's place in the window, zeros elsewhere. Groups of 16
//! in a 64-channel tile waste three quarters of the products on those zeros, still far cheaper
//! on tensor cores than the direct kernel's FFMA; other groupings and depthwise stay there
//! ([`eligible`]).
//!
//! - 16-bit activations: `mma.sync m16n8k16` with f32 accumulation, both operands in the
//!   activation type (the weight is packed in it: a 16-bit model's weights are 16-bit already).
//! - f32: `mma.sync m16n8k8` in 3xTF32 (each operand split into a TF32 part and its remainder,
//!   three products, `templates/tf32.cuh`), so the result keeps fp32 accuracy (about 1e-6
//!   relative) at a third of the TF32 rate, well above the FFMA rate of the direct kernel.
//!
//! The weight is packed `[co_pad][k_pad]` ([`pack_weight`]): output channel major, `k` in
//! `(ky, kx, ci in the window)` order, both zero-padded to the tiles so the B loads need no bounds checks.
//! Tiles ([`tiles`]): 128×128 CTAs of 8 warps (warp tile 64×32); 64 output channels or fewer
//! (or grouped in groups that divide 64) take 128×64 tiles, 32 or fewer (one group) 128×32, and a
//! grid under one wave of the GPU's 132 SMs halves the tile's rows.
//! Shared memory rows are the 64-byte k-slice plus 16 bytes of padding (the rows of one
//! `ldmatrix` then fall in distinct banks); 4 pipeline stages.

use super::conv::ConvShape;
use super::{shape_text, spec_error, type_ctx, OpKernel, TypeCtx};
use crate::codegen::render::{render, EpilogueCtx};
use crate::codegen::spmm::shared::epilogue_ctx_of;
use crate::codegen::{Activation, CodegenError, Epilogue};
use crate::ir::DType;
use serde::Serialize;

/// SMs of the GPU the tile choice fills (an H100 SXM or H200).
const SMS: usize = 132;
/// Bytes of a k-slice row in shared memory (the padding follows it).
const SLICE_BYTES: usize = 64;
const ROW_BYTES: usize = SLICE_BYTES + 16;
const STAGES: usize = 4;

/// A CTA's tile of `Y`: `bm` output pixels × `bn` output channels, `2 × warps_n` warps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IgemmTiles {
    pub bm: usize,
    pub bn: usize,
    pub warps_n: usize,
}

impl IgemmTiles {
    pub fn threads(&self) -> usize {
        64 * self.warps_n
    }

    pub fn smem_bytes(&self) -> usize {
        STAGES * (self.bm + self.bn) * ROW_BYTES
    }
}

/// Elements of one 16-byte chunk of `dtype`.
fn chunk(dtype: DType) -> usize {
    16 / dtype.size_bytes()
}

/// Output channels per group, input channels per group.
fn group_sizes(shape: &ConvShape) -> (usize, usize) {
    (shape.c_out / shape.groups, shape.c_in / shape.groups)
}

/// Whether the implicit GEMM computes `shape` in `dtype` (f32 or 16-bit): a dense convolution
/// (one group), or a grouped one whose groups tile a 64- or 128-channel CTA tile whole
/// (RegNet's and ResNeXt's 3×3 convolutions; not depthwise, which has its own kernel).
pub fn eligible(shape: &ConvShape, dtype: DType) -> bool {
    let (cog, cig) = group_sizes(shape);
    matches!(dtype, DType::F32 | DType::F16 | DType::BF16)
        && (shape.groups == 1 || (cig > 1 && (64 % cog == 0 || 128 % cog == 0)))
}

/// Input channels a CTA reads: all for one group, else those of its `bn / cog` groups.
fn window(shape: &ConvShape, t: &IgemmTiles) -> usize {
    let (cog, cig) = group_sizes(shape);
    if shape.groups == 1 {
        shape.c_in
    } else {
        t.bn / cog * cig
    }
}

/// Whether the input channels are too few for whole 16-byte runs, so that the A tile is
/// gathered element by element (the stem, `c_in = 3`).
fn narrow(shape: &ConvShape, t: &IgemmTiles, dtype: DType) -> bool {
    !shape.c_in.is_multiple_of(chunk(dtype)) || !window(shape, t).is_multiple_of(chunk(dtype))
}

/// `K = kh·kw·window` and its padding to whole k-slices.
fn k_sizes(shape: &ConvShape, t: &IgemmTiles, dtype: DType) -> (usize, usize) {
    let k = shape.kh * shape.kw * window(shape, t);
    let bk = SLICE_BYTES / dtype.size_bytes();
    (k, k.div_ceil(bk) * bk)
}

/// The tile of a CTA for `shape` (see the module docs).
pub fn tiles(shape: &ConvShape) -> IgemmTiles {
    let m = shape.n * shape.oh() * shape.ow();
    let ctas = |t: &IgemmTiles| m.div_ceil(t.bm) * shape.c_out.div_ceil(t.bn);
    let cog = shape.c_out / shape.groups;
    // Grouped: the narrower tile that holds whole groups wastes the fewest products on the
    // block diagonal's zeros.
    let narrow_tile = shape.c_out <= 64 || (shape.groups > 1 && 64 % cog == 0);
    let mut t = if shape.groups == 1 && shape.c_out <= 32 {
        // DenseNet's 32-channel growth convolutions: a 64-wide tile would waste half its products.
        IgemmTiles { bm: 128, bn: 32, warps_n: 2 }
    } else if narrow_tile {
        IgemmTiles { bm: 128, bn: 64, warps_n: 2 }
    } else {
        IgemmTiles { bm: 128, bn: 128, warps_n: 4 }
    };
    if ctas(&t) < SMS {
        t.bm = 64;
    }
    t
}

/// The weight as the kernel reads it: ONNX's OIHW `[c_out, c_in/groups, kh, kw]` as
/// `[co_pad][k_pad]` with `k = (ky·kw + kx)·window + ci_window`, where `ci_window` is the input
/// channel's place in the CTA's window ([`window`]): for output channel `co` of group `g`, the
/// window starts at the first group of `co`'s tile, so its weights sit at
/// `(g − first group)·cig + ci`; zeros elsewhere (the block diagonal's zeros and the padding).
pub fn pack_weight(shape: &ConvShape, t: &IgemmTiles, dtype: DType, oihw: &[f32]) -> Vec<f32> {
    let (_, k_pad) = k_sizes(shape, t, dtype);
    let (cog, cig) = group_sizes(shape);
    let win = window(shape, t);
    let co_pad = shape.c_out.div_ceil(t.bn) * t.bn;
    let mut packed = vec![0.0; co_pad * k_pad];
    for (i, &v) in oihw.iter().enumerate() {
        let (kx, ky) = (i % shape.kw, i / shape.kw % shape.kh);
        let (ci, co) = (i / (shape.kw * shape.kh) % cig, i / (shape.kw * shape.kh * cig));
        let first_group = co / t.bn * t.bn / cog;
        let at = (co / cog - first_group) * cig + ci;
        packed[co * k_pad + (ky * shape.kw + kx) * win + at] = v;
    }
    packed
}

#[derive(Serialize)]
struct IgemmCtx {
    kernel_name: String,
    /// For `common.cuh`: the epilogue's element type, that of the bias (always f32).
    dtype: &'static str,
    act: TypeCtx,
    act_bytes: usize,
    act_name: &'static str,
    x_shape: String,
    y_shape: String,
    idx: &'static str,
    h: usize,
    w: usize,
    c_in: usize,
    c_out: usize,
    c_out_even: bool,
    groups: usize,
    win: usize,
    cig: usize,
    cog: usize,
    /// The last CTA's window reaches past `c_in` (its tile holds fewer groups).
    ragged_window: bool,
    oh: usize,
    ow: usize,
    kh: usize,
    kw: usize,
    sh: usize,
    sw: usize,
    dh: usize,
    dw: usize,
    pt: usize,
    pl: usize,
    m: usize,
    k: usize,
    k_pad: usize,
    co_pad: usize,
    bk: usize,
    ch: usize,
    narrow: bool,
    bm: usize,
    bn: usize,
    warps_m: usize,
    warps_n: usize,
    threads: usize,
    stages: usize,
    n_tiles: usize,
    epilogue: EpilogueCtx,
}

/// The kernel: parameters `(const T* x, const T* w, const float* bias, T* y)`, `w` packed by
/// [`pack_weight`] with the same tiles. The caller checked `shape` and [`eligible`].
pub fn kernel(
    name: &str,
    shape: &ConvShape,
    dtype: DType,
    bias: bool,
    activation: Activation,
    t: &IgemmTiles,
) -> Result<OpKernel, CodegenError> {
    let fail = |m: String| spec_error("conv", name, m);
    if !eligible(shape, dtype) {
        return Err(fail(format!("the implicit GEMM needs one group or groups that tile 64 or 128 channels, in f32, f16 or bf16 ({dtype}): {shape:?}")));
    }
    let (oh, ow) = (shape.oh(), shape.ow());
    let m = shape.n * oh * ow;
    let (k, k_pad) = k_sizes(shape, t, dtype);
    let (cog, cig) = group_sizes(shape);
    let co_pad = shape.c_out.div_ceil(t.bn) * t.bn;
    let ctas = m.div_ceil(t.bm) * (co_pad / t.bn);
    if ctas > i32::MAX as usize {
        return Err(fail(format!("{ctas} CTAs do not fit one grid")));
    }
    let x_len = shape.n * shape.h * shape.w * shape.c_in;
    let ctx = IgemmCtx {
        kernel_name: name.to_string(),
        dtype: "f32",
        act: type_ctx(dtype),
        act_bytes: dtype.size_bytes(),
        act_name: dtype.name(),
        x_shape: shape_text(&[shape.n, shape.h, shape.w, shape.c_in]),
        y_shape: shape_text(&[shape.n, oh, ow, shape.c_out]),
        // Indices reach past M by up to a tile's rows (rows past M compute but never load).
        idx: super::index_type(x_len.max((m + t.bm) * co_pad.max(shape.c_out)).max(co_pad * k_pad)),
        h: shape.h,
        w: shape.w,
        c_in: shape.c_in,
        c_out: shape.c_out,
        c_out_even: shape.c_out.is_multiple_of(2),
        groups: shape.groups,
        win: window(shape, t),
        cig,
        cog,
        ragged_window: shape.groups > 1 && !shape.c_out.is_multiple_of(t.bn),
        oh,
        ow,
        kh: shape.kh,
        kw: shape.kw,
        sh: shape.stride.0,
        sw: shape.stride.1,
        dh: shape.dilation.0,
        dw: shape.dilation.1,
        pt: shape.pads[0],
        pl: shape.pads[1],
        m,
        k,
        k_pad,
        co_pad,
        bk: SLICE_BYTES / dtype.size_bytes(),
        ch: chunk(dtype),
        narrow: narrow(shape, t, dtype),
        bm: t.bm,
        bn: t.bn,
        warps_m: 2,
        warps_n: t.warps_n,
        threads: t.threads(),
        stages: STAGES,
        n_tiles: co_pad / t.bn,
        epilogue: epilogue_ctx_of(Epilogue { bias, activation }, false),
    };
    let source = render("op_conv_igemm.cu.tera", &ctx)?;
    Ok(OpKernel {
        name: name.to_string(),
        source,
        grid: (ctas as u32, 1, 1),
        block: (t.threads() as u32, 1, 1),
        smem_bytes: t.smem_bytes() as u32,
    })
}
