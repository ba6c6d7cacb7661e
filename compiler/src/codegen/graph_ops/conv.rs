//! 2-D convolution in channels-last layout: `y[n, oh, ow, c_out] = act(conv(x[n, h, w, c_in], w) +
//! bias)`, with the fused epilogue of `templates/epilogue.cuh`. x and y are f32, f16 or bf16 (the
//! activation type); the bias is f32 in every case, and in the depthwise and direct kernels the
//! packed weight and the math are f32 too: a 16-bit element is widened on load and rounded on store with the conversions of
//! `templates/ops.cuh` (`ld_f16`/`st_f16`, `ld_bf16`/`st_bf16`), as in the other graph-op kernels.
//! Where the fp32 kernels move 4 channels as one 16-byte access, the 16-bit ones move them as one
//! 8-byte `uint2` (two elements per 32-bit word, the first in the low half). Three templates, four
//! paths chosen by the shape:
//!
//! 1. **Depthwise** (`groups == c_in == c_out`, `templates/op_conv_depthwise.cu.tera`),
//!    memory-bound. A thread computes 4 consecutive channels (one 16- or 8-byte access; 1 channel
//!    when `c % 4 != 0`, or 4 scalar accesses when a pointer is misaligned) of `pw` adjacent
//!    output pixels along w. It walks each input row of its window once, column by column, and
//!    adds every loaded column into each output pixel whose window covers it, so a 3×3 stride-1
//!    thread with `pw = 8` loads 10 columns per row instead of 24; the row's weights sit in
//!    registers. Lanes run along channels first, so a warp's accesses are whole 128-byte lines
//!    (`c / 4` lanes per pixel). One work item per thread, no grid-stride loop: the weights
//!    depend on the channel group, which a stride would change, and a single item leaves no
//!    loop-carried index math; CTAs go out in memory order (channels, then column blocks, rows,
//!    images), so the input rows that the next output row reads again are still in L2. DRAM
//!    traffic is then the input once and the output once: 8 bytes per output element at
//!    stride 1, 20 at stride 2 (each output reads a 2×2 patch of new input); half that in 16 bits.
//!    `pw` ([`depthwise_columns`]): at most 8 at stride 1 and 4 at larger strides (registers:
//!    `pw · 4` accumulators and `kw · 4` weights), lowered until the grid has at least
//!    [`MIN_THREADS`] threads, then evened out over the row (`ow = 14` takes two blocks of 7).
//!    Large kernels (at least [`MIN_TILE_TAPS`] taps: ConvNeXt's 7×7) take the **tiled**
//!    depthwise kernel instead (`templates/op_conv_depthwise_tile.cu.tera`, [`depthwise_tiling`]):
//!    a CTA copies the input window of a tile of output rows × columns × a slab of 32 (16, 8, 4)
//!    channels, zeros outside the image, and the tile's weights into shared memory once; each
//!    thread then computes 4 channels of 4 adjacent output pixels (2 at larger strides) from
//!    there. A 7×7 window re-read from L2 by every output row costs the per-thread kernel more
//!    than the copy (87 → 54 registers, twice the resident warps); shared rows are padded to
//!    start half a bank cycle apart.
//! 2. **Dense (`groups == 1`), or grouped with groups that tile 64 or 128 output channels**:
//!    the implicit GEMM on tensor cores ([`conv_igemm`], `templates/op_conv_igemm.cu.tera`),
//!    its weight packed in the activation type ([`conv_weight`]); [`ConvEngine::Direct`] keeps
//!    such a convolution on the direct kernel below.
//! 3. **Dense, other** (`templates/op_conv_direct.cu.tera`): the stem (c_in = 3,
//!    3×3, stride 2). A thread computes `cot` consecutive output channels (8 when they divide
//!    the channels per group) of one output pixel; the lanes of a warp take the channel groups
//!    of a few adjacent pixels, so the weight reads are a handful of distinct shared-memory
//!    addresses (broadcasts) and the stores whole lines. The whole packed weight is staged in
//!    shared memory once per CTA when it fits in 48 KiB, and read from global memory (through
//!    L1) otherwise: correct for any channel count, kernel, stride, dilation and padding, fast
//!    only for small weights. A grid-stride loop over `(pixel, channel group)` with at most 8
//!    CTAs per SM amortizes the staging. The stem moves 5.5 bytes per output element in fp32
//!    (0.375 input elements, read once, and the output), 2.75 in 16 bits.
//! 4. **Other grouped** (`1 < groups`, not depthwise, or a depth multiplier): the same direct
//!    kernel; `cot` divides the channels per group, so each thread stays in one group and reads
//!    that group's input channels.
//!
//! Weight layout ([`pack_conv_weight`], [`packed_index`]): ONNX's OIHW `[c_out, c_in/groups, kh,
//! kw]` reordered to `[kh, kw, c_in/groups, c_out]` (HWIO per group), output channels fastest:
//! a depthwise tap is one row of `c` floats (16-byte loads over 4 channels), and the direct
//! kernel's `cot` weights of one tap and input channel are contiguous.
//!
//! Every shape is baked in as constants; pads read as zero; index arithmetic is 32-bit when the
//! tensors allow it. Parameters: `(const T* x, const float* w, const float* bias, T* y)`, `T` the
//! activation type (`float`, `half_t` or `bf16_t`); `bias` is never read when the kernel has no
//! bias.

use super::conv_igemm;
use super::{
    check_name, index_type, shape_text, spec_error, stride_grid, type_ctx, OpKernel, TypeCtx, MAX_STRIDE_CTAS,
};
use crate::codegen::render::{render, EpilogueCtx};
use crate::codegen::spmm::shared::epilogue_ctx_of;
use crate::codegen::{Activation, CodegenError, Epilogue};
use crate::ir::DType;
use serde::Serialize;

/// A 2-D convolution in channels-last layout: x `[n, h, w, c_in]` → y `[n, oh, ow, c_out]`.
#[derive(Clone, Debug, PartialEq)]
pub struct ConvShape {
    pub n: usize,
    pub h: usize,
    pub w: usize,
    pub c_in: usize,
    pub c_out: usize,
    pub groups: usize,
    pub kh: usize,
    pub kw: usize,
    /// Along (h, w).
    pub stride: (usize, usize),
    /// Along (h, w).
    pub dilation: (usize, usize),
    /// ONNX order: top, left, bottom, right.
    pub pads: [usize; 4],
}

/// ONNX's output size along one axis, `⌊(input + pads − dilation·(kernel − 1) − 1) / stride⌋ + 1`,
/// or 0 when the window does not fit the padded input (or a size is 0).
fn out_size(input: usize, kernel: usize, stride: usize, dilation: usize, pad_begin: usize, pad_end: usize) -> usize {
    if stride == 0 || kernel == 0 || dilation == 0 {
        return 0;
    }
    let padded = input.saturating_add(pad_begin).saturating_add(pad_end);
    let extent = dilation.saturating_mul(kernel - 1).saturating_add(1);
    if padded < extent {
        0
    } else {
        (padded - extent) / stride + 1
    }
}

impl ConvShape {
    /// Output height (ONNX's formula; 0 when the window does not fit).
    pub fn oh(&self) -> usize {
        out_size(self.h, self.kh, self.stride.0, self.dilation.0, self.pads[0], self.pads[2])
    }

    /// Output width (ONNX's formula; 0 when the window does not fit).
    pub fn ow(&self) -> usize {
        out_size(self.w, self.kw, self.stride.1, self.dilation.1, self.pads[1], self.pads[3])
    }

    /// Input channels per group.
    fn cig(&self) -> usize {
        self.c_in / self.groups
    }

    /// Output channels per group.
    fn cog(&self) -> usize {
        self.c_out / self.groups
    }

    /// Elements of the weight, `c_out · c_in/groups · kh · kw`.
    pub fn weight_len(&self) -> usize {
        self.c_out * self.cig() * self.kh * self.kw
    }

    fn is_depthwise(&self) -> bool {
        self.groups == self.c_in && self.c_in == self.c_out
    }

    /// Refuses zero sizes, channels that groups do not divide, an empty output and sizes past
    /// the kernels' arithmetic (rows and padded extents in `int`, tensors in 64 bits).
    fn check(&self) -> Result<(), String> {
        let sizes = [
            ("n", self.n),
            ("h", self.h),
            ("w", self.w),
            ("c_in", self.c_in),
            ("c_out", self.c_out),
            ("groups", self.groups),
            ("kh", self.kh),
            ("kw", self.kw),
            ("stride h", self.stride.0),
            ("stride w", self.stride.1),
            ("dilation h", self.dilation.0),
            ("dilation w", self.dilation.1),
        ];
        if let Some((what, _)) = sizes.iter().find(|(_, v)| *v == 0) {
            return Err(format!("{what} is 0 in {self:?}"));
        }
        if !self.c_in.is_multiple_of(self.groups) || !self.c_out.is_multiple_of(self.groups) {
            return Err(format!("{} groups do not divide c_in {} and c_out {}", self.groups, self.c_in, self.c_out));
        }
        let int_max = i32::MAX as u128;
        let [pt, pl, pb, pr] = self.pads.map(|p| p as u128);
        let (h, w) = (self.h as u128, self.w as u128);
        let extent = |k: usize, d: usize| (k as u128 - 1) * d as u128 + 1;
        let fits = h + pt + pb <= int_max
            && w + pl + pr <= int_max
            && extent(self.kh, self.dilation.0) <= int_max
            && extent(self.kw, self.dilation.1) <= int_max
            && w * self.c_in as u128 <= int_max
            && self.w as u128 * self.c_out as u128 <= int_max
            && [self.n, self.h, self.w, self.c_in.max(self.c_out)].iter().map(|&d| d as u128).product::<u128>()
                < 1 << 62;
        if !fits {
            return Err(format!("{self:?} is too large for the kernels' index arithmetic"));
        }
        if self.oh() == 0 || self.ow() == 0 {
            return Err(format!(
                "the {}x{} window (dilation {:?}) does not fit the {}x{} input padded by {:?}: output {}x{}",
                self.kh,
                self.kw,
                self.dilation,
                self.h,
                self.w,
                self.pads,
                self.oh(),
                self.ow()
            ));
        }
        let y_len = [self.n, self.oh(), self.ow(), self.c_out].iter().map(|&d| d as u128).product::<u128>();
        if y_len >= 1 << 62 {
            return Err(format!("{self:?} is too large for the kernels' index arithmetic"));
        }
        Ok(())
    }
}

/// Where OIHW weight `[co, ci, ky, kx]` (`ci` within its group, `0..c_in/groups`) lies in the
/// packed weight the kernels read: `[kh, kw, c_in/groups, c_out]`, output channels fastest.
pub(crate) fn packed_index(shape: &ConvShape, co: usize, ci: usize, ky: usize, kx: usize) -> usize {
    ((ky * shape.kw + kx) * shape.cig() + ci) * shape.c_out + co
}

/// The weight as the kernels read it, from ONNX's OIHW layout `[c_out, c_in/groups, kh, kw]`
/// (see [`packed_index`]). Refuses a shape [`conv_nhwc`] would refuse and a weight of the wrong
/// length.
pub fn pack_conv_weight(shape: &ConvShape, oihw: &[f32]) -> Result<Vec<f32>, CodegenError> {
    let fail = |m: String| CodegenError::Spec(format!("conv weight: {m}"));
    shape.check().map_err(fail)?;
    let (cig, len) = (shape.cig(), shape.weight_len());
    if oihw.len() != len {
        return Err(fail(format!(
            "expected {len} values ([{}, {cig}, {}, {}]), got {}",
            shape.c_out,
            shape.kh,
            shape.kw,
            oihw.len()
        )));
    }
    let mut packed = vec![0.0; len];
    for (i, &v) in oihw.iter().enumerate() {
        let (kx, ky) = (i % shape.kw, i / shape.kw % shape.kh);
        let (ci, co) = (i / (shape.kw * shape.kh) % cig, i / (shape.kw * shape.kh * cig));
        packed[packed_index(shape, co, ci, ky, kx)] = v;
    }
    Ok(packed)
}

/// Threads per CTA of both kernels.
const THREADS: usize = 256;
/// Fewest threads a depthwise grid should have: 1024 per SM of an H100, half its capacity.
const MIN_THREADS: usize = 132 * 1024;
/// Fewest taps (`kh · kw`) a depthwise convolution has to run through the shared-memory tile.
/// Measured on the H200 (call c120, fp16, against the per-thread kernel): ConvNeXt-T's 7×7
/// convolutions 79 → 49 µs (56 × 56 × 96), 40 → 31 (28 × 28 × 192), 18.8 → 18.1, 13.5 → 12.5
/// (the model 1.910 → 1.771 ms); the 3×3 and 5×5 ones of MobileNetV3-Large and EfficientNet-B0
/// moved their models by −2.5% to +4%, so they stay on the per-thread kernel.
const MIN_TILE_TAPS: usize = 49;
/// Largest packed weight staged in shared memory by the direct kernel (48 KiB of floats).
const SMEM_WEIGHT_FLOATS: usize = 48 * 1024 / 4;

/// Geometry both templates share: shape constants and comments.
#[derive(Serialize)]
struct ConvHead {
    kernel_name: String,
    /// For `common.cuh`: the epilogue's element type, that of the bias (always f32).
    dtype: &'static str,
    /// Storage of x and y (`op_conv.cuh`'s `act_t`), its size and its name.
    act: TypeCtx,
    act_bytes: usize,
    act_name: &'static str,
    x_shape: String,
    y_shape: String,
    idx: &'static str,
    threads: usize,
    h: usize,
    w: usize,
    c_in: usize,
    c_out: usize,
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
    /// Elements of one input image and one input row.
    x_image: usize,
    x_row: usize,
    /// Work items (threads of the depthwise grid, iterations of the direct loop).
    total: usize,
    epilogue: EpilogueCtx,
}

#[derive(Serialize)]
struct DepthwiseCtx {
    #[serde(flatten)]
    head: ConvHead,
    /// Channels per thread (4 or 1) and channel groups per pixel.
    vec: usize,
    cgroups: usize,
    /// Output pixels per thread along w, blocks per output row, input columns a thread reads.
    pw: usize,
    blocks: usize,
    cols: usize,
    /// The last block of a row is partial.
    ragged: bool,
}

#[derive(Serialize)]
struct DepthwiseTileCtx {
    #[serde(flatten)]
    head: ConvHead,
    /// Channels of a CTA's slab, their 4-channel lanes, and the slabs of the channels.
    cc: usize,
    cl: usize,
    slabs: usize,
    /// Output pixels per thread along w; output rows and columns of a tile; tiles down and across.
    pw: usize,
    th: usize,
    tw: usize,
    tiles_h: usize,
    tiles_w: usize,
    /// The input window of a tile (rows, columns), the elements of one shared row (padded so
    /// that two rows start half a bank cycle apart), the input columns a thread reads per row.
    ir: usize,
    ic: usize,
    pitch: usize,
    cols: usize,
    ctas: usize,
    /// The last tile of a row is partial.
    ragged: bool,
}

/// The tiling of the shared-memory depthwise kernel for `shape` in `dtype` (`c % 4 == 0`), when
/// its tile fits the 48 KiB of static shared memory.
struct DepthwiseTiling {
    cc: usize,
    pw: usize,
    wb: usize,
    th: usize,
    ir: usize,
    ic: usize,
    pitch: usize,
}

impl DepthwiseTiling {
    fn threads(&self) -> usize {
        self.cc / 4 * self.wb * self.th
    }
}

/// Channels per slab: the widest of 32, 16, 8, 4 that divides the channels (32 channels of
/// 16 bits are one 64-byte run per pixel). 4 output columns a thread at stride 1, 2 at larger
/// strides; 4 column blocks a tile (fewer on narrower outputs) and as many rows as 256 threads
/// give, at most the output's height; rows halved until the tile fits in shared memory.
fn depthwise_tiling(shape: &ConvShape, dtype: DType) -> Option<DepthwiseTiling> {
    let c = shape.c_in;
    if !c.is_multiple_of(4) || shape.kh * shape.kw < MIN_TILE_TAPS {
        return None;
    }
    let cc = [32, 16, 8, 4].into_iter().find(|d| c.is_multiple_of(*d))?;
    let es = dtype.size_bytes();
    let pw = if shape.stride.1 == 1 { 4 } else { 2 };
    let wb = shape.ow().div_ceil(pw).min(4);
    let mut th = (THREADS / (cc / 4) / wb).min(shape.oh()).max(1);
    loop {
        let ir = (th - 1) * shape.stride.0 + (shape.kh - 1) * shape.dilation.0 + 1;
        let ic = (wb * pw - 1) * shape.stride.1 + (shape.kw - 1) * shape.dilation.1 + 1;
        let row_bytes = ic * cc * es;
        let pitch = (row_bytes + (64 + 128 - row_bytes % 128) % 128) / es;
        let bytes = ir * pitch * es + shape.kh * shape.kw * cc * 4;
        if bytes <= 48 * 1024 {
            return Some(DepthwiseTiling { cc, pw, wb, th, ir, ic, pitch });
        }
        if th == 1 {
            return None;
        }
        th /= 2;
    }
}

#[derive(Serialize)]
struct DirectCtx {
    #[serde(flatten)]
    head: ConvHead,
    cig: usize,
    cog: usize,
    /// Output channels per thread and channel groups per pixel.
    cot: usize,
    cgroups: usize,
    /// Floats between two taps of the packed weight, and all of it.
    tap_stride: usize,
    w_len: usize,
    smem_weights: bool,
    /// 16-byte shared-memory weight reads and 4-channel output stores (`cot % 4 == 0`).
    vec: bool,
    /// `#pragma unroll` argument of the input-channel loop (empty: fully).
    ci_unroll: &'static str,
}

/// Which kernel computes a convolution.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ConvEngine {
    /// Depthwise where the shape is depthwise, else the implicit GEMM where it applies
    /// ([`conv_igemm::eligible`]), else the direct kernel.
    #[default]
    Auto,
    /// The depthwise or direct kernel, never the implicit GEMM.
    Direct,
    /// The implicit GEMM; refused where it does not apply.
    ImplicitGemm,
}

/// The path a convolution takes.
enum ConvPath {
    Depthwise,
    Direct,
    Igemm(conv_igemm::IgemmTiles),
}

fn conv_path(shape: &ConvShape, dtype: DType, engine: ConvEngine) -> ConvPath {
    match engine {
        ConvEngine::ImplicitGemm => ConvPath::Igemm(conv_igemm::tiles(shape)),
        _ if shape.is_depthwise() => ConvPath::Depthwise,
        ConvEngine::Auto if conv_igemm::eligible(shape, dtype) => ConvPath::Igemm(conv_igemm::tiles(shape)),
        _ => ConvPath::Direct,
    }
}

/// Which kernel [`conv_nhwc_with`] builds for `shape` in `dtype`, in words (for `explain`).
pub fn conv_kernel_label(shape: &ConvShape, dtype: DType, engine: ConvEngine) -> String {
    match conv_path(shape, dtype, engine) {
        ConvPath::Depthwise => "depthwise kernel".into(),
        ConvPath::Direct => "direct kernel (FFMA)".into(),
        ConvPath::Igemm(t) => {
            let how = if shape.groups > 1 {
                format!(", {} groups block-diagonal", shape.groups)
            } else if !shape.c_in.is_multiple_of(16 / dtype.size_bytes().max(1)) {
                format!(", {} channels gathered", shape.c_in)
            } else {
                String::new()
            };
            format!("implicit GEMM {}x{} tiles{how}", t.bm, t.bn)
        }
    }
}

/// A packed convolution weight: f32 for the depthwise and direct kernels, the activation type
/// for the implicit GEMM (16-bit values as their bits).
#[derive(Clone, Debug, PartialEq)]
pub enum ConvWeight {
    F32(Vec<f32>),
    F16(Vec<u16>),
    BF16(Vec<u16>),
}

/// The weight, from ONNX's OIHW layout, as the kernel [`conv_nhwc_with`] builds for the same
/// `shape`, `dtype` and `engine` reads it. Refuses what that kernel refuses and a weight of the
/// wrong length.
pub fn conv_weight(
    shape: &ConvShape,
    dtype: DType,
    engine: ConvEngine,
    oihw: &[f32],
) -> Result<ConvWeight, CodegenError> {
    let direct = pack_conv_weight(shape, oihw)?;
    Ok(match conv_path(shape, dtype, engine) {
        ConvPath::Igemm(_) if !conv_igemm::eligible(shape, dtype) => {
            return Err(CodegenError::Spec(format!(
                "conv weight: the implicit GEMM does not apply to {shape:?} in {dtype}"
            )))
        }
        ConvPath::Igemm(t) => {
            let packed = conv_igemm::pack_weight(shape, &t, dtype, oihw);
            match dtype {
                DType::F16 => ConvWeight::F16(packed.iter().map(|&v| half::f16::from_f32(v).to_bits()).collect()),
                DType::BF16 => ConvWeight::BF16(packed.iter().map(|&v| half::bf16::from_f32(v).to_bits()).collect()),
                _ => ConvWeight::F32(packed),
            }
        }
        _ => ConvWeight::F32(direct),
    })
}

/// [`conv_nhwc_with`] on the automatic choice of kernel.
pub fn conv_nhwc(
    name: &str,
    shape: &ConvShape,
    dtype: DType,
    bias: bool,
    activation: Activation,
) -> Result<OpKernel, CodegenError> {
    conv_nhwc_with(name, shape, dtype, bias, activation, ConvEngine::Auto)
}

/// `y = act(conv(x, w) + bias)` over the channels-last `shape`, x and y of type `dtype` (F32,
/// F16 or BF16), `w` packed by [`conv_weight`] for the same engine. Parameters `(const T* x,
/// const W* w, const float* bias, T* y)` with `T` the storage type of `dtype` and `W` f32 (the
/// depthwise and direct kernels) or `T` (the implicit GEMM); `bias` (`c_out` floats) is never
/// read when `bias == false`. Refuses other types.
pub fn conv_nhwc_with(
    name: &str,
    shape: &ConvShape,
    dtype: DType,
    bias: bool,
    activation: Activation,
    engine: ConvEngine,
) -> Result<OpKernel, CodegenError> {
    let fail = |m: String| spec_error("conv", name, m);
    check_name(name).map_err(fail)?;
    if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
        return Err(fail(format!("x and y of type {dtype} are not supported (f32, f16 or bf16)")));
    }
    shape.check().map_err(fail)?;
    if let ConvPath::Igemm(t) = conv_path(shape, dtype, engine) {
        return conv_igemm::kernel(name, shape, dtype, bias, activation, &t);
    }
    let (oh, ow) = (shape.oh(), shape.ow());
    let x_len = shape.n * shape.h * shape.w * shape.c_in;
    let y_len = shape.n * oh * ow * shape.c_out;
    let head = |total: usize, stride: usize| ConvHead {
        kernel_name: name.to_string(),
        dtype: "f32",
        act: type_ctx(dtype),
        act_bytes: dtype.size_bytes(),
        act_name: dtype.name(),
        x_shape: shape_text(&[shape.n, shape.h, shape.w, shape.c_in]),
        y_shape: shape_text(&[shape.n, oh, ow, shape.c_out]),
        idx: index_type(x_len.max(y_len).max(total + stride)),
        threads: THREADS,
        h: shape.h,
        w: shape.w,
        c_in: shape.c_in,
        c_out: shape.c_out,
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
        x_image: shape.h * shape.w * shape.c_in,
        x_row: shape.w * shape.c_in,
        total,
        epilogue: epilogue_ctx_of(Epilogue { bias, activation }, false),
    };
    if let Some(t) = shape.is_depthwise().then(|| depthwise_tiling(shape, dtype)).flatten() {
        let tw = t.wb * t.pw;
        let (tiles_h, tiles_w, slabs) = (oh.div_ceil(t.th), ow.div_ceil(tw), shape.c_in / t.cc);
        let ctas = shape.n * tiles_h * tiles_w * slabs;
        if ctas > i32::MAX as usize {
            return Err(fail(format!("{ctas} CTAs do not fit one grid")));
        }
        let threads = t.threads();
        let mut head = head(ctas, 0);
        head.threads = threads;
        let ctx = DepthwiseTileCtx {
            head,
            cc: t.cc,
            cl: t.cc / 4,
            slabs,
            pw: t.pw,
            th: t.th,
            tw,
            tiles_h,
            tiles_w,
            ir: t.ir,
            ic: t.ic,
            pitch: t.pitch,
            cols: (t.pw - 1) * shape.stride.1 + (shape.kw - 1) * shape.dilation.1 + 1,
            ctas,
            ragged: !ow.is_multiple_of(t.pw),
        };
        let source = render("op_conv_depthwise_tile.cu.tera", &ctx)?;
        return Ok(OpKernel {
            name: name.to_string(),
            source,
            grid: (ctas as u32, 1, 1),
            block: (threads as u32, 1, 1),
            smem_bytes: 0,
        });
    }
    if shape.is_depthwise() {
        let vec = if shape.c_in.is_multiple_of(4) { 4 } else { 1 };
        let cgroups = shape.c_in / vec;
        let pw = depthwise_columns(shape, shape.n * oh * cgroups);
        let blocks = ow.div_ceil(pw);
        let total = shape.n * oh * blocks * cgroups;
        let ctas = total.div_ceil(THREADS);
        if ctas > i32::MAX as usize {
            return Err(fail(format!("{ctas} CTAs do not fit one grid")));
        }
        let ctx = DepthwiseCtx {
            head: head(total, THREADS),
            vec,
            cgroups,
            pw,
            blocks,
            cols: (pw - 1) * shape.stride.1 + (shape.kw - 1) * shape.dilation.1 + 1,
            ragged: !ow.is_multiple_of(pw),
        };
        let source = render("op_conv_depthwise.cu.tera", &ctx)?;
        return Ok(OpKernel {
            name: name.to_string(),
            source,
            grid: (ctas as u32, 1, 1),
            block: (THREADS as u32, 1, 1),
            smem_bytes: 0,
        });
    }
    let (cig, cog) = (shape.cig(), shape.cog());
    let cot = (1..=8).rev().find(|d| cog.is_multiple_of(*d)).expect("1 divides everything");
    let cgroups = shape.c_out / cot;
    let total = shape.n * oh * ow * cgroups;
    let w_len = shape.weight_len();
    let ctx = DirectCtx {
        head: head(total, MAX_STRIDE_CTAS * THREADS),
        cig,
        cog,
        cot,
        cgroups,
        tap_stride: cig * shape.c_out,
        w_len,
        smem_weights: w_len <= SMEM_WEIGHT_FLOATS,
        vec: cot.is_multiple_of(4),
        ci_unroll: if cig <= 8 { "" } else { "4" },
    };
    let source = render("op_conv_direct.cu.tera", &ctx)?;
    Ok(OpKernel {
        name: name.to_string(),
        source,
        grid: (stride_grid(total, THREADS), 1, 1),
        block: (THREADS as u32, 1, 1),
        smem_bytes: 0,
    })
}

/// Output pixels per depthwise thread along w: at most 8 at stride 1 and 4 at larger strides,
/// fewer while the grid would have under [`MIN_THREADS`] threads (`per_block`: threads per
/// column block of every row), then evened out so the blocks of a row differ by at most one.
fn depthwise_columns(shape: &ConvShape, per_block: usize) -> usize {
    let ow = shape.ow();
    let pw_max = if shape.stride.1 == 1 { 8 } else { 4 };
    let mut blocks = ow.div_ceil(pw_max);
    while blocks < ow && blocks * per_block < MIN_THREADS {
        blocks += 1;
    }
    ow.div_ceil(blocks)
}
