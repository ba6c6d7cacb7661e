//! Fused attention: `out = softmax(f(q·k, extra...))·v` in one kernel, flash-attention style:
//! the scores and probabilities never leave the SM and shared memory does not grow with the
//! number of keys, so any sequence length fuses.
//!
//! Unfused, attention is a batched matmul writing the `[batch..., Sq, Sk]` scores, an
//! elementwise kernel (scale, mask), a softmax and a second batched matmul, each pass reading
//! and writing the scores through DRAM: for BERT at 384 keys (32 × 12 heads × 384 × 384 fp16
//! scores, 113 MB a layer) that traffic is most of the attention's time.
//!
//! A CTA takes one batch entry and [`BQ`] query rows (4 warps, a warp 16 rows; the batch entry
//! and the query tile are both in `blockIdx.x`, so the batch is not limited by grid.y). Each
//! warp reads its Q rows once into mma A fragments in registers. The CTA then walks the keys a
//! tile at a time: the K tile (`[key][d]`) and the V tile (`[key][e]`) are double-buffered in
//! shared memory, copied with `cp.async` when the operand is contiguous along the staged axis
//! (checked on the strides here and on the 16-byte alignment of the pointer at run time),
//! with plain loads otherwise; `S = Q·Kᵀ` on `mma.sync`, then the score expression `f` (the
//! elementwise group between the matmul and the softmax, an [`Expr`] whose input 0 is the raw
//! score and inputs 1.. the extra operands broadcast to the scores' shape: scales, additive
//! masks; each read through a row pointer formed once per query row, so a score costs one
//! load per extra and no index arithmetic), then an online softmax per row (running maximum and
//! sum; the output accumulators rescaled when the maximum grows), then `P·V` accumulated in
//! f32 fragments. The last key tile is ragged: keys past `Sk` score `-inf` and their K and V
//! rows are zero. A row whose scores are all `-inf` (every key masked) gives NaN, as the
//! reference softmax does (`exp(-inf - -inf)`); partial rows never do. A 16-bit `f` is rounded
//! to its type, as the graph's value is, so that a row masked whole by the type's lowest finite
//! value (transformers' `finfo.min`) ties and is uniform, as in the reference; a row whose
//! maximum is below -1e37 (the fp32 `finfo.min`) takes its exponents from the differences, as
//! `max · log2 e` would overflow.
//!
//! Three templates:
//! - `op_attention_wgmma.cu.tera` when every operand and the raw scores are f16, or every one
//!   bf16 ([`AttentionEngine::Auto`]): Hopper `wgmma.mma_async`, a CTA one warpgroup (the same
//!   64 query rows, 16 a warp). `S = Q·Kᵀ` is one m64n{BK}k16 wgmma per 16 of d with Q's
//!   fragments as the register A operand and the K tile as B; `P·V` takes the rounded
//!   probabilities as the register A operand and reads the V tile (`[key][e]`, e contiguous)
//!   as an N-major B, transposed by the tensor core. K and V tiles sit in shared memory in the
//!   32/64/128-byte swizzled layouts of the matrix descriptors (a head over 64 wide as two
//!   128-byte regions, P·V then two wgmmas of 64 columns); the score accumulators have the
//!   mma.sync C layout per warp, so the score expression and online softmax are the same code.
//!   Each thread stages fixed chunk columns of the K and V tiles (its pointers and swizzled
//!   offsets formed once), and an extra operand that does not vary along the queries (the
//!   padding mask) is loaded with the tile and read from shared memory by the scores
//!   (Nsight Compute, call 2: its per-score global loads were the kernel's top stall, and
//!   staging index arithmetic 37% of its instructions). The staging code is written out at each
//!   use (`op_attention_wgmma_stage.cuh`), not called as a lambda: through the lambda NVRTC kept a
//!   strided operand's staging addresses in registers (BERT-base's merged QKV: 187 registers,
//!   168 written out; nvcc took 168 either way). The scores walk both of a lane's rows at once,
//!   so a mask value is read where it is used rather than a tile's worth held in registers. At
//!   one warpgroup a CTA the registers decide the occupancy (at most 168: three CTAs an SM, 128:
//!   four); bf16 with 64-wide heads asks ptxas for three ([`auto_min_ctas`]).
//!   Key tiles of 128 where heads are at most 64 wide, 64 otherwise ([`wgmma_key_tile`]; H200,
//!   `kernels attention --bench`, session 5 call 1: BERT-base's layer 21.5 µs against 27.4 on
//!   mma.sync and 24.7 with tiles of 64; d 128 at 1024 keys 150 µs against 183, and 195 with
//!   tiles of 128), and 64 where every key fits one. Where the keys fit the two key tiles the
//!   kernel double-buffers (up to 256 keys at 64-wide heads), they are staged once and a CTA
//!   takes several query tiles of its batch entry in turn ([`resident_q_tiles`]), each loading
//!   the next tile's Q under its own softmax and P·V: MiniLM-L6 fp16 at 90% blocks 0.270 →
//!   0.263 ms, ViT-B/16 1.795 → 1.746 (H200, call c115, same call).
//! - `op_attention_flash.cu.tera` on [`AttentionEngine::MmaSync`]: `mma.sync m16n8k16`, key
//!   tiles of 64, the probabilities rounded to the 16-bit type as the A fragments of `P·V` (as
//!   the unfused ops round them), K's B fragments by `ldmatrix` and V's by `ldmatrix.trans`.
//! - `op_attention_flash_tf32.cu.tera` otherwise (f32, and mixed element types, each operand
//!   widened to f32 as it is staged): 3xTF32 `mma.sync m16n8k8` (each operand split as
//!   `big + small`, `big·big + big·small + small·big`, `templates/tf32.cuh`), about 1e-6
//!   relative like FFMA; the probabilities stay f32 and are split the same way for `P·V`. Key
//!   tiles of 64, or 32 when a head is wider than 64 (the f32 tiles would take 135 KB); Q in
//!   shared memory instead of registers when d is over 64 (255 registers would spill).
//!
//! Every operand is read through its strides, so the transposes around attention (the heads
//! split out of the projections, `Kᵀ`, the heads merged back) fold into the kernel. Head
//! widths `d` and `dv` are at most [`MAX_HEAD_DIM`] (padded to 16 or 8 in the tiles; the Q
//! fragments and output accumulators live in registers). A causal mask arrives as an extra
//! operand through the same expression; given the keys each query sees (`key_ends`), the wgmma
//! kernel stops a query tile after its last visible key tile (unless a row has seen only masked
//! keys), while the other two kernels walk every key tile.

use super::expr::{render, Expr};
use super::{check_name, float_acc, offset_expr, shape_text, spec_error, type_ctx, OpKernel, TensorDesc, TypeCtx};
use crate::codegen::render::render as render_template;
use crate::codegen::CodegenError;
use crate::ir::DType;
use serde::Serialize;

/// Query rows of a CTA: 4 warps of 16 rows. Measured and not kept (BERT-base fp16 at 90%
/// blocks, H200): 128-row CTAs of 8 warps (1.88 against 1.59 ms: 288 CTAs, two a SM, make
/// two waves) and `__launch_bounds__(128, 4)` to fit four CTAs an SM instead of three (the
/// kernel takes 138 registers a thread; capped at 128, attention steps took 0.65 ms against
/// 0.61). Key tiles of 128 for 16-bit heads up to 64 wide: mixed (`kernels attention --bench`:
/// MiniLM-L6 and BERT-512 layers 6-7% faster, BERT-base's 4% slower), so 64 stays.
pub const BQ: usize = 64;
const THREADS: usize = 32 * BQ / 16;
/// Widest `d` (q and k) and `dv` (v) the kernels take.
pub const MAX_HEAD_DIM: usize = 128;
/// Most CTAs in grid.x (`2^31 - 1`).
const MAX_CTAS: usize = (1 << 31) - 1;

/// Whether a fused attention with `n_batch` batch entries, `sq` queries and heads `d` and `dv`
/// wide can run (the number of keys does not matter); `find_attention` asks before fusing.
pub fn attention_fits(n_batch: usize, sq: usize, d: usize, dv: usize) -> bool {
    d <= MAX_HEAD_DIM && dv <= MAX_HEAD_DIM && n_batch.max(1).saturating_mul(sq.div_ceil(BQ)) <= MAX_CTAS
}

/// The 16-bit path's element type when it applies: every operand and the raw scores f16, or
/// every one bf16.
fn mma16_type(types: [DType; 5]) -> Option<&'static str> {
    let t = match types[0] {
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        _ => return None,
    };
    types.iter().all(|&x| x == types[0]).then_some(t)
}

/// The tiling of one kernel: key tile, padded head widths and the padded row lengths of the
/// staged K and V tiles (elements), shared memory in bytes.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Tiling {
    bk: usize,
    dp: usize,
    dvp: usize,
    ks: usize,
    vs: usize,
    /// f32 heads wider than 64: Q staged in shared memory (`[BQ][ks]`), not in registers.
    q_smem: bool,
    smem: usize,
}

/// 16-bit: d padded to 16 (the mma's k), dv to 16 (ldmatrix.x4 covers two 8-column groups),
/// rows padded by 8 elements (16 bytes: fragment loads and ldmatrix rows fall in distinct
/// banks). f32: both padded to 8, rows by 4 floats (the same, for the m16n8k8 fragments).
fn tiling(sixteen_bit: bool, d: usize, dv: usize) -> Tiling {
    if sixteen_bit {
        let (dp, dvp, bk) = (d.div_ceil(16) * 16, dv.div_ceil(16) * 16, 64);
        let (ks, vs) = (dp + 8, dvp + 8);
        Tiling { bk, dp, dvp, ks, vs, q_smem: false, smem: 2 * 2 * bk * (ks + vs) }
    } else {
        let (dp, dvp) = (d.div_ceil(8) * 8, dv.div_ceil(8) * 8);
        let bk = if dp.max(dvp) > 64 { 32 } else { 64 };
        let (ks, vs, q_smem) = (dp + 4, dvp + 4, dp > 64);
        let q = if q_smem { BQ * ks } else { 0 };
        Tiling { bk, dp, dvp, ks, vs, q_smem, smem: 4 * (2 * bk * (ks + vs) + q) }
    }
}

/// Which 16-bit kernel runs a fused attention. `Auto` takes the `wgmma` kernel where it applies
/// (every operand f16, or every one bf16, on Hopper) with key tiles of `wgmma_key_tile`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum AttentionEngine {
    #[default]
    Auto,
    /// `mma.sync m16n8k16` (any Ampere-or-later GPU), key tiles of 64.
    MmaSync,
    /// `wgmma.mma_async` (Hopper, sm_90a) with key tiles of `bk` (64 or 128), registers capped
    /// so that `ctas` CTAs fit an SM (`__launch_bounds__(128, ctas)`; 1: no cap).
    Wgmma { bk: usize, ctas: usize },
}

impl AttentionEngine {
    /// The label `kernels attention` prints: `mma`, `wgmma64`, `wgmma128` (empty for `Auto`).
    pub fn label(self) -> String {
        match self {
            AttentionEngine::Auto => String::new(),
            AttentionEngine::MmaSync => "mma".into(),
            AttentionEngine::Wgmma { bk, ctas: 1 } => format!("wgmma{bk}"),
            AttentionEngine::Wgmma { bk, ctas } => format!("wgmma{bk}x{ctas}"),
        }
    }
}

/// One operand tile (K or V) as the wgmma kernel stages it: the kernel's names for its shared
/// tile, source pointer, base pointer, cp.async row step, swizzled row bytes, the thread's first
/// key row and destination offset, width and padded width, and whether its columns are whole
/// chunks; the key stride, the element's offset (`c` the column, `j` the key), whether cp.async
/// may stage it (and the kernel's run-time flag for that), and whether the plain loop walks the
/// columns fastest. K and V differ only in these, so one template loop stages both.
#[derive(Clone, Debug, Serialize)]
struct StagedTile {
    tile: &'static str,
    src: &'static str,
    base: &'static str,
    step: &'static str,
    row: &'static str,
    j: &'static str,
    dst: &'static str,
    width: &'static str,
    padded: &'static str,
    col_ok: &'static str,
    key_stride: usize,
    elem: String,
    asynchronous: bool,
    flag: &'static str,
    columns_fast: bool,
}

/// The wgmma kernel's key tile for heads `dp` (q, k) and `dvp` (v) wide once padded and `sk`
/// keys: 128 keys where both are at most 64 (the scores and the output then take 64 + 32
/// accumulators a thread), 64 otherwise (64 + 64), and 64 where the keys fit one such tile
/// (Swin-T's 49-key windows: a 128-key tile would be 62% padding, each padded key a score,
/// an exponent and a column of P·V).
pub fn wgmma_key_tile(dp: usize, dvp: usize, sk: usize) -> usize {
    if dp.max(dvp) <= 64 && sk > 64 {
        128
    } else {
        64
    }
}

/// CTAs of the wgmma kernel that keep every SM busy: three an SM (168 registers a thread) on
/// the 132 SMs of an H100/H200 SXM, less a tenth.
const FILLING_CTAS: usize = 3 * 132 * 9 / 10;

/// Query tiles one CTA of the wgmma kernel takes in turn, for `n_batch` batch entries of
/// `q_tiles` tiles whose keys fit the kernel's two key tiles: the most that divides `q_tiles`
/// and still leaves [`FILLING_CTAS`] CTAs. The CTA stages the keys and values once and keeps
/// them in shared memory for each of its query tiles, and loads the next tile's Q while the
/// current one's softmax and P·V run, so a CTA pays the load latency once instead of once a
/// tile (MiniLM-L6: 768 CTAs of one tile, two rounds of three an SM, become 384 of two;
/// ViT-B/16's 197 keys: 1,536 become 384 of four).
fn resident_q_tiles(n_batch: usize, q_tiles: usize) -> usize {
    (1..=q_tiles).rev().find(|&c| q_tiles.is_multiple_of(c) && n_batch * (q_tiles / c) >= FILLING_CTAS).unwrap_or(1)
}

/// CTAs an SM the wgmma kernel asks ptxas to fit (`__launch_bounds__(128, n)`; 1: no cap) when
/// the engine is `Auto`. bf16 with 64-wide heads (128-key tiles): ptxas 13.0 left uncapped
/// took 174 registers at BERT-base's bench layout and 204 at its merged-QKV layout (two CTAs an
/// SM); capped at three it takes 160 and 164 without spilling. The same cap on fp16 spills at
/// the merged layout (24 bytes), where fp16 uncapped takes 168 and fits three already; so does
/// the bf16 kernel that stops at a causal mask's last visible key tile (`stops`: 268 bytes).
fn auto_min_ctas(mma_t: &str, dp: usize, dvp: usize, stops: bool) -> usize {
    if mma_t == "bf16" && !stops && (dp, dvp) == (64, 64) {
        3
    } else {
        1
    }
}

/// A head width padded for the wgmma kernel's swizzled tiles: 16, 32, 64 or 128.
fn wgmma_width(d: usize) -> usize {
    d.max(16).next_power_of_two()
}

/// The wgmma kernel's tiling for a key tile of `bk`: padded widths, the swizzled row bytes
/// (a tile wider than 64 elements is two 128-byte regions) and shared memory: two K and two
/// V tiles, plus 1024 bytes to align them to the swizzle period.
fn wgmma_tiling(d: usize, dv: usize, bk: usize) -> (usize, usize, usize, usize, usize) {
    let (dp, dvp) = (wgmma_width(d), wgmma_width(dv));
    let (k_row, v_row) = ((2 * dp).min(128), (2 * dvp).min(128));
    (dp, dvp, k_row, v_row, 2 * 2 * bk * (dp + dvp) + 1024)
}

/// Shared memory of the kernel (bytes) for `d`- and `dv`-wide heads: two K and two V tiles
/// (and the Q tile of f32 heads wider than 64), whatever the number of keys.
pub fn attention_smem(sixteen_bit: bool, d: usize, dv: usize) -> usize {
    tiling(sixteen_bit, d, dv).smem
}

#[derive(Serialize)]
struct ExtraCtx {
    index: usize,
    t: TypeCtx,
    used: bool,
    /// Offset of the batch entry `z`'s scores, and the strides of a score row and of a key:
    /// the kernel forms a row's pointer once and steps along it, no index divisions per score.
    batch: String,
    rs: usize,
    cs: usize,
}

#[derive(Serialize)]
struct AttentionCtx {
    kernel_name: String,
    q_shape: String,
    k_shape: String,
    v_shape: String,
    out_shape: String,
    expr: String,
    q: TypeCtx,
    k: TypeCtx,
    v: TypeCtx,
    out: TypeCtx,
    score: TypeCtx,
    extras: Vec<ExtraCtx>,
    /// The 16-bit path's mma type (`f16` or `bf16`), empty on the TF32 path.
    mma_t: &'static str,
    sq: usize,
    sk: usize,
    d: usize,
    dv: usize,
    bq: usize,
    /// Query tiles a CTA takes in turn ([`resident_q_tiles`]).
    qpc: usize,
    /// See [`Tiling`]; `q_tiles` and `k_tiles` count query and key tiles.
    bk: usize,
    dp: usize,
    dvp: usize,
    ks: usize,
    vs: usize,
    q_smem: bool,
    q_tiles: usize,
    k_tiles: usize,
    threads: usize,
    /// Strides: q (row, column), k (d, j), v (j, e), out (row, column).
    q_rs: usize,
    q_cs: usize,
    k_rs: usize,
    k_cs: usize,
    v_rs: usize,
    v_cs: usize,
    o_rs: usize,
    o_cs: usize,
    /// The plain staging loops walk K along d (k is d-contiguous) and V along e.
    k_d_fast: bool,
    v_e_fast: bool,
    /// K (V) tiles may be staged with 16-byte cp.async: the operand is in the staged type,
    /// contiguous along d (e), and every other stride and the width are whole 16-byte chunks.
    k_async: bool,
    v_async: bool,
    /// 16-bit Q (the output) read (written) two columns per 32-bit access: the rows are
    /// contiguous and every other stride and the width are even (the pointer's alignment is
    /// checked at run time).
    q_pair: bool,
    o_pair: bool,
    /// The K (V) tile's 16-byte chunks split evenly over the threads with the head unpadded:
    /// each thread copies one chunk column at fixed rows, its pointers formed once.
    k_even: bool,
    v_even: bool,
    q_batch: String,
    k_batch: String,
    v_batch: String,
    o_batch: String,
    /// The wgmma kernel: swizzled row bytes of the K and V tiles, the columns of one P·V wgmma,
    /// the accumulators of S and of one P·V wgmma a thread.
    k_row: usize,
    v_row: usize,
    vn: usize,
    s_regs: usize,
    o_regs: usize,
    /// The K and V tiles as the wgmma kernel stages them (`op_attention_wgmma_stage.cuh`).
    staged: [StagedTile; 2],
    /// CTAs an SM the wgmma kernel's registers must allow.
    min_ctas: usize,
    /// Extra operands that do not vary along the queries are read from shared memory (staged
    /// with the key tile: the wgmma kernel) rather than from global memory a score tile.
    xk_smem: bool,
    /// Per query tile, the key tiles walked before its rows may stop (wgmma kernel; empty: every
    /// key tile), and the running maximum above which a row has seen an unmasked key.
    kt_ends: Vec<usize>,
    settled: String,
    /// Type of the row and key offsets into the extra operands: 32-bit when every offset fits.
    idx_t: &'static str,
}

/// Whether an operand staged as rows of `width` elements (contiguous, stride 1) with `row_stride`
/// between rows and `batch` strides can be copied in chunks of `chunk` elements.
fn chunked(width: usize, inner: usize, row_stride: usize, batch: &[usize], chunk: usize) -> bool {
    inner == 1
        && width.is_multiple_of(chunk)
        && row_stride.is_multiple_of(chunk)
        && batch.iter().all(|s| s.is_multiple_of(chunk))
}

/// Whether a `width`-wide head padded to `padded` splits its key tile of `bk` rows into 16-byte
/// chunks the threads share evenly, each thread one chunk column (16-bit elements).
fn even_chunks(width: usize, padded: usize, bk: usize) -> bool {
    let per_row = padded / 8;
    width == padded && THREADS.is_multiple_of(per_row) && (bk * per_row).is_multiple_of(THREADS)
}

/// `out = softmax(expr(q·k, extra...), last axis)·v`. `q` is `[batch..., Sq, D]`, `k`
/// `[batch..., D, Sk]`, `v` `[batch..., Sk, Dv]`, `out` `[batch..., Sq, Dv]`, each with any strides
/// (batch dimensions broadcast by numpy rules against `out`'s); `score` is the element type of
/// the raw scores (`expr`'s input 0), `extra[i]` is `expr`'s input `i + 1`, broadcast to the
/// scores' shape `[batch..., Sq, Sk]`. Float element types; `expr` must give a float; `D` and
/// `Dv` at most [`MAX_HEAD_DIM`], any `Sk`. Parameters: `(q, k, v, extra..., out)`.
#[allow(clippy::too_many_arguments)] // the operands of one formula, each with its own role
pub fn attention(
    name: &str,
    q: &TensorDesc,
    k: &TensorDesc,
    v: &TensorDesc,
    score: DType,
    extra: &[TensorDesc],
    expr: &Expr,
    out: &TensorDesc,
) -> Result<OpKernel, CodegenError> {
    attention_with(name, q, k, v, score, extra, expr, out, AttentionEngine::Auto, None)
}

/// Raw scores (Q·Kᵀ before the score expression) within `±RAW_SCORE_BOUND` are what skipping
/// masked keys is exact for (see `attention_with`'s `key_ends`): a score expression value at
/// most `-MASKED_BELOW` is masked, and a row whose running maximum is above `-SETTLED_ABOVE` has
/// seen a key that is not, so that a masked score is at least `RAW_SCORE_BOUND` under it and its
/// exponent is 0 in f32.
pub const RAW_SCORE_BOUND: f64 = 1000.0;
pub const MASKED_BELOW: f64 = 3.0 * RAW_SCORE_BOUND;
pub const SETTLED_ABOVE: f64 = 2.0 * RAW_SCORE_BOUND;

/// [`attention`] on a chosen 16-bit kernel (`kernels attention` compares them). The f32 and
/// mixed-type path ignores `engine`; asking for `wgmma` key tiles other than 64 or 128 is an
/// error. `key_ends[q]` (one per query row): the keys from there on are masked by the score
/// expression whatever the inputs (`program::model`'s causal-mask analysis, whose module docs
/// give the exactness conditions); the wgmma kernel then ends a query tile's key walk after the
/// last key tile one of its rows sees, once every row's running maximum is above
/// `-SETTLED_ABOVE` (a row that has seen only masked keys walks them all). The other kernels
/// walk every key.
#[allow(clippy::too_many_arguments)] // attention's operands, the engine and the key ends
pub fn attention_with(
    name: &str,
    q: &TensorDesc,
    k: &TensorDesc,
    v: &TensorDesc,
    score: DType,
    extra: &[TensorDesc],
    expr: &Expr,
    out: &TensorDesc,
    engine: AttentionEngine,
    key_ends: Option<&[usize]>,
) -> Result<OpKernel, CodegenError> {
    let fail = |m: String| spec_error("attention", name, m);
    check_name(name).map_err(fail)?;
    for (t, what) in [(q, "q"), (k, "k"), (v, "v"), (out, "the output")] {
        t.check(what).map_err(fail)?;
        if float_acc(t.dtype).is_none() || t.dtype == DType::F64 {
            return Err(fail(format!("{what} is {}, attention takes f32, f16 or bf16", t.dtype)));
        }
        if t.shape.len() < 2 {
            return Err(fail(format!("{what} needs rank 2 or more, got {:?}", t.shape)));
        }
    }
    let r = out.shape.len();
    let batch_shape = &out.shape[..r - 2];
    let (sq, dv) = (out.shape[r - 2], out.shape[r - 1]);
    let inner = |t: &TensorDesc| (t.shape[t.shape.len() - 2], t.shape[t.shape.len() - 1]);
    let (q_rows, d) = inner(q);
    let (k_d, sk) = inner(k);
    let (v_rows, v_cols) = inner(v);
    if q_rows != sq || k_d != d || v_rows != sk || v_cols != dv {
        return Err(fail(format!(
            "softmax({:?} · {:?}) · {:?} does not give {:?}",
            q.shape, k.shape, v.shape, out.shape
        )));
    }
    if [sq, sk, d, dv].contains(&0) {
        return Err(fail("an empty dimension".into()));
    }
    if d > MAX_HEAD_DIM || dv > MAX_HEAD_DIM {
        return Err(fail(format!(
            "heads {d} (q, k) and {dv} (v) wide: the kernel's fragments in registers take at most {MAX_HEAD_DIM}"
        )));
    }
    let batch_strides = |t: &TensorDesc, what: &str| -> Result<Vec<usize>, String> {
        let rt = t.shape.len() - 2;
        let view = TensorDesc { dtype: t.dtype, shape: t.shape[..rt].to_vec(), strides: t.strides[..rt].to_vec() };
        view.broadcast_strides(batch_shape).ok_or_else(|| {
            format!("{what}'s batch dimensions {:?} do not broadcast to {batch_shape:?}", &t.shape[..rt])
        })
    };
    let (qb, kb, vb) = (
        batch_strides(q, "q").map_err(fail)?,
        batch_strides(k, "k").map_err(fail)?,
        batch_strides(v, "v").map_err(fail)?,
    );
    let ob = out.strides[..r - 2].to_vec();
    let n_batch: usize = batch_shape.iter().product();
    if !attention_fits(n_batch, sq, d, dv) {
        return Err(fail(format!(
            "{n_batch} batch entries × {} query tiles do not fit one grid's x dimension",
            sq.div_ceil(BQ)
        )));
    }
    let mut scores_shape = batch_shape.to_vec();
    scores_shape.extend([sq, sk]);
    let mut dtypes = vec![score];
    dtypes.extend(extra.iter().map(|t| t.dtype));
    let (expr_c, expr_t) = render(expr, &dtypes).map_err(fail)?;
    if float_acc(expr_t).is_none() {
        return Err(fail(format!("the score expression gives {expr_t}, not a float")));
    }
    let mut extras = vec![];
    for (i, t) in extra.iter().enumerate() {
        t.check(&format!("extra input {i}")).map_err(fail)?;
        let s = t.broadcast_strides(&scores_shape).ok_or_else(|| {
            fail(format!("extra input {i} of shape {:?} does not broadcast to the scores {scores_shape:?}", t.shape))
        })?;
        let rb = scores_shape.len() - 2;
        extras.push(ExtraCtx {
            index: i + 1,
            t: type_ctx(t.dtype),
            used: expr.reads(i + 1),
            batch: offset_expr("z", batch_shape, &s[..rb]),
            rs: s[rb],
            cs: s[rb + 1],
        });
    }
    let mma = mma16_type([q.dtype, k.dtype, v.dtype, out.dtype, score]);
    let (wgmma_bk, min_ctas) = match (mma, engine) {
        (None, _) | (Some(_), AttentionEngine::MmaSync) => (None, 1),
        (Some(t), AttentionEngine::Auto) => {
            let (dp, dvp) = (wgmma_width(d), wgmma_width(dv));
            (Some(wgmma_key_tile(dp, dvp, sk)), auto_min_ctas(t, dp, dvp, key_ends.is_some()))
        }
        (Some(_), AttentionEngine::Wgmma { bk: bk @ (64 | 128), ctas: ctas @ 1..=4 }) => (Some(bk), ctas),
        (Some(_), AttentionEngine::Wgmma { bk, ctas }) => {
            return Err(fail(format!(
                "wgmma attention takes key tiles of 64 or 128 and 1 to 4 CTAs an SM, not {bk} and {ctas}"
            )))
        }
    };
    let mut tl = tiling(mma.is_some(), d, dv);
    let (mut k_row, mut v_row) = (0, 0);
    if let Some(bk) = wgmma_bk {
        let (dp, dvp, kr, vr, smem) = wgmma_tiling(d, dv, bk);
        tl = Tiling { bk, dp, dvp, ks: dp, vs: dvp, q_smem: false, smem };
        (k_row, v_row) = (kr, vr);
    }
    // Key tiles each query tile must walk: to the last one any of its rows sees.
    let mut kt_ends = vec![];
    if let (Some(bk), Some(ends)) = (wgmma_bk, key_ends) {
        if ends.len() != sq {
            return Err(fail(format!("{} key ends for {sq} queries", ends.len())));
        }
        let (k_tiles, per_tile) = (sk.div_ceil(bk), ends.chunks(BQ));
        kt_ends = per_tile.map(|c| c.iter().map(|&e| e.min(sk).div_ceil(bk)).max().unwrap_or(0).max(1)).collect();
        if kt_ends.iter().all(|&e| e == k_tiles) {
            kt_ends.clear();
        }
    }
    let q_tiles = sq.div_ceil(BQ);
    let qpc = match wgmma_bk {
        Some(bk) if kt_ends.is_empty() && sk.div_ceil(bk) <= 2 => resident_q_tiles(n_batch, q_tiles),
        _ => 1,
    };
    let rs = |t: &TensorDesc| (t.strides[t.shape.len() - 2], t.strides[t.shape.len() - 1]);
    let (q_rs, q_cs) = rs(q);
    let (k_rs, k_cs) = rs(k);
    let (v_rs, v_cs) = rs(v);
    let (o_rs, o_cs) = rs(out);
    // cp.async copies 16 bytes: 8 16-bit elements, or 4 f32 (only when no widening is needed).
    let chunk = |t: &TensorDesc| match (mma, t.dtype) {
        (Some(_), _) => Some(8),
        (None, DType::F32) => Some(4),
        _ => None,
    };
    let k_async = chunk(k).is_some_and(|c| chunked(d, k_rs, k_cs, &kb, c));
    let v_async = chunk(v).is_some_and(|c| chunked(dv, v_cs, v_rs, &vb, c));
    let (k_d_fast, v_e_fast) = (k_rs == 1 && k_cs != 1, v_cs == 1 || v_rs != 1);
    let q_pair = mma.is_some() && chunked(d, q_cs, q_rs, &qb, 2);
    let o_pair = mma.is_some() && chunked(dv, o_cs, o_rs, &ob, 2);
    let ctx = AttentionCtx {
        kernel_name: name.to_string(),
        q_shape: shape_text(&q.shape),
        k_shape: shape_text(&k.shape),
        v_shape: shape_text(&v.shape),
        out_shape: shape_text(&out.shape),
        // A 16-bit score value is rounded to its type, as the graph's value is: under a mask of
        // the type's lowest finite value (transformers' finfo.min, clamped by `rewrite::half`)
        // a fully masked row's scores then tie, and its softmax is uniform as in the reference,
        // instead of weighted by the scores the fp32 sum still carries.
        expr: match expr_t {
            DType::F16 => format!("rnd_f16({expr_c})"),
            DType::BF16 => format!("rnd_bf16({expr_c})"),
            _ => expr_c,
        },
        q: type_ctx(q.dtype),
        k: type_ctx(k.dtype),
        v: type_ctx(v.dtype),
        out: type_ctx(out.dtype),
        score: type_ctx(score),
        mma_t: mma.unwrap_or(""),
        idx_t: super::index_type(n_batch * sq * sk + extra.iter().map(|t| t.max_offset()).max().unwrap_or(0)),
        extras,
        sq,
        sk,
        d,
        dv,
        bq: BQ,
        bk: tl.bk,
        dp: tl.dp,
        dvp: tl.dvp,
        ks: tl.ks,
        vs: tl.vs,
        q_smem: tl.q_smem,
        q_tiles,
        qpc,
        k_tiles: sk.div_ceil(tl.bk),
        threads: THREADS,
        q_rs,
        q_cs,
        k_rs,
        k_cs,
        v_rs,
        v_cs,
        o_rs,
        o_cs,
        k_d_fast,
        v_e_fast,
        k_async,
        v_async,
        q_pair,
        o_pair,
        k_even: even_chunks(d, tl.dp, tl.bk),
        v_even: even_chunks(dv, tl.dvp, tl.bk),
        q_batch: offset_expr("z", batch_shape, &qb),
        k_batch: offset_expr("z", batch_shape, &kb),
        v_batch: offset_expr("z", batch_shape, &vb),
        o_batch: offset_expr("z", batch_shape, &ob),
        k_row,
        v_row,
        vn: v_row / 2,
        s_regs: tl.bk / 2,
        o_regs: v_row / 4,
        staged: [
            StagedTile {
                tile: "kd",
                src: "ksrc",
                base: "kb",
                step: "K_STEP",
                row: "K_ROW",
                j: "kj",
                dst: "kdst",
                width: "D",
                padded: "DP",
                col_ok: "k_col_ok",
                key_stride: k_cs,
                elem: format!("(long long)c * {k_rs} + (long long)j * {k_cs}"),
                asynchronous: k_async,
                flag: "k_async",
                columns_fast: k_d_fast,
            },
            StagedTile {
                tile: "vd",
                src: "vsrc",
                base: "vb",
                step: "V_STEP",
                row: "V_ROW",
                j: "vj",
                dst: "vdst",
                width: "DV",
                padded: "DVP",
                col_ok: "v_col_ok",
                key_stride: v_rs,
                elem: format!("(long long)j * {v_rs} + (long long)c * {v_cs}"),
                asynchronous: v_async,
                flag: "v_async",
                columns_fast: v_e_fast,
            },
        ],
        min_ctas,
        xk_smem: wgmma_bk.is_some(),
        kt_ends,
        settled: format!("{SETTLED_ABOVE:.1}f"),
    };
    let template = match (mma, wgmma_bk) {
        (Some(_), Some(_)) => "op_attention_wgmma.cu.tera",
        (Some(_), None) => "op_attention_flash.cu.tera",
        (None, _) => "op_attention_flash_tf32.cu.tera",
    };
    let source = render_template(template, &ctx)?;
    Ok(OpKernel {
        name: name.to_string(),
        source,
        grid: ((n_batch.max(1) * q_tiles / qpc) as u32, 1, 1),
        block: (THREADS as u32, 1, 1),
        smem_bytes: tl.smem as u32,
    })
}
