//! Sparse × dense matmul: family choice, loop nest, dismantle, tables and rendering.
//!
//! [`specialize`] dispatches: int8 to `spmm_int8`; element-sparse weights (1×1 blocks) to the
//! 3xTF32 fine kernel, the dismantled kernel or the fine loop kernel here, as their rules say;
//! other blocks to the wgmma family, the 3xTF32 block kernel, else the block kernels here (fp32
//! SIMT, fp16/bf16 mma.sync; [`Family::Dense`] when every block is live). Tile heuristics and
//! the choice between literal tables and an index stream (under `SpmmSpec::code_budget`) are
//! made here; templates only loop and branch. The left orientation (`C = W·B`) of the block and
//! dense kernels is the transposed right problem (`specialize_left`).
//!
//! The fine loop kernel ([`Family::Fine`], [`Family::FineLeft`]) serves both orientations
//! (left = the same kernel on the transposed frame, W's rows chunked). K goes in chunks; each
//! (chunk, column) run is padded to whole groups of four entries that read a zero row; entries
//! reach the device as byte offsets into the shared D tile ([`Kernel::device_idx`]: one add per
//! entry); runs are ordered by (chunk, tile, warp, column), so each warp walks one contiguous
//! stream per chunk ([`FineTable::column`] maps a position back). A lane's `rpl` rows are
//! adjacent (one vector load per entry). How D reaches shared memory (`fine_tiling` decides):
//! - fp32 tiles stream in by cp.async through a two-stage shared ring (right orientation:
//!   transposed on the way in, stride `bm + rpl`, a warp copying `32 / rpl` k × `rpl` rows;
//!   left: B's rows as they are);
//! - with a [`Kernel::prepass`], an fp32 copy is written once and the tiles are its rows,
//!   copied 16 bytes at a time: `templates/transpose.cu.tera` (At = Aᵀ) from 8 column tiles up
//!   (4 for 16-bit A, which 4-byte copies cannot transpose) or when `SpmmSpec::dense_copy` asks;
//!   `templates/widen.cu.tera` for the left's 16-bit B;
//! - other dtypes without it, and very sparse fp32 weights on grids too small for 32 × 512
//!   tiles, through a register prefetch.
//!
//! A `Tile` may split K over a thread-block cluster (partials summed through distributed shared
//! memory in rank order) or ask for 2 CTAs per SM (one row per lane). The entry loop is
//! software-pipelined across a warp's groups when runs are long (~20 live entries or more) and
//! sums one group at a time when they are short (`runs_are_long`). Accumulate epilogues read
//! the previous output before storing any of it.
//!
//! The fp32 SIMT block kernel folds uniform blocks when the values are known: all of them (no
//! W tiles) or some (one raw-bits literal per block, NaN marking the general ones).

use super::loopnest::{Level, LoopNest};
use super::render::{render, BlockCtx, EpilogueCtx, FineCtx, KernelHead, Literals, TransposeCtx, WidenCtx};
use super::{CodegenError, DenseCopy, Dtype, Engine, Mode, Orientation, SpmmSpec};
use serde::Serialize;

/// Kernel families.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Family {
    /// fp32 block-sparse on CUDA cores (FFMA), cp.async pipeline.
    BlockSimt,
    /// fp16/bf16 block-sparse on tensor cores (ldmatrix + mma.sync m16n8k16, fp32 accumulate).
    BlockMma,
    /// Element-wise sparse weight (block 1×1): chunked CSC, A tile transposed in shared memory.
    Fine,
    /// Element-wise sparse weight on the left (`C = W · B`): chunked CSR of W, B rows in shared memory.
    FineLeft,
    /// Every block present: the block kernels without tables.
    Dense,
    /// Bias and activation in place, after a library GEMM (see `codegen::library_gemm`).
    Epilogue,
    /// int8 block-sparse, or dense with every block present, on tensor cores (ldmatrix +
    /// mma.sync m16n8k32 s8, int32 accumulate, dequantizing epilogue, fp16 output).
    BlockInt8,
    /// fp16/bf16 block-sparse on Hopper tensor cores (wgmma from shared memory, persistent grid);
    /// W blocks packed transposed. See `spmm_wgmma.rs`.
    BlockWgmma,
    /// Element-wise sparse fp32 weight dismantled to the element: one FFMA per nonzero in the
    /// code, W values as immediates or packed in code order. See `spmm_dismantled.rs`.
    FineDismantled,
    /// fp32 block-sparse (or dense) on tensor cores at fp32 accuracy (3xTF32: mma.sync
    /// m16n8k8 on the operands split into TF32 big and small parts); W blocks packed as their
    /// big part then their small part. See `spmm_tf32.rs`.
    BlockTf32,
    /// Element-sparse fp32 weight on tensor cores at fp32 accuracy (3xTF32): columns in
    /// groups of 8, each multiplying the gathered k where any of them is nonzero. See
    /// `spmm_fine_tf32.rs`.
    FineTf32,
}

impl Family {
    pub fn name(self) -> &'static str {
        match self {
            Family::BlockSimt => "block_simt",
            Family::BlockMma => "block_mma",
            Family::Fine => "fine",
            Family::FineLeft => "fine_left",
            Family::Dense => "dense",
            Family::Epilogue => "epilogue",
            Family::BlockInt8 => "block_int8",
            Family::BlockWgmma => "block_wgmma",
            Family::FineDismantled => "fine_dismantled",
            Family::BlockTf32 => "block_tf32",
            Family::FineTf32 => "fine_tf32",
        }
    }
}

/// Launch geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Launch {
    pub grid: (u32, u32, u32),
    pub block: (u32, u32, u32),
    pub smem_bytes: u32,
}

/// A specialized kernel: source, entry point, launch geometry and the tables its arguments
/// take. Every family has the signature
/// `(const T* A, const T* W, const int* ptr, const int* idx, const T* bias, T* C)`;
/// `W` is the weight packed by [`Kernel::pack_weight`]; in unrolled mode `ptr`/`idx` (and `W`
/// when the values are embedded) are ignored and may be null. A fine kernel with a
/// [`Kernel::prepass`] takes the prepass's fp32 output in place of `A` (`const float*`); the
/// caller launches the prepass on `A` first. A kernel with [`Kernel::tma_a`] takes one more,
/// last parameter: the tensor map of `A` the caller encodes (the warp-specialized wgmma kernel).
///
/// The int8 family ([`Family::BlockInt8`], dtype [`Dtype::I8`]) extends it additively:
/// `(const int8* A_q, const int8* W_q, const int* ptr, const int* idx, const f16* bias,
/// f16* C, const float* scale_w, float scale_a)`, with `A_q` row-major, `W_q` packed by
/// [`Kernel::pack_weight_i8`], `scale_w` one dequantization scale per output column and
/// `scale_a` the activation's (see [`super::quant`]): `C = epilogue(scale_a · scale_w[col] ·
/// Σ A_q·W_q)`.
#[derive(Clone, Debug, Serialize)]
pub struct Kernel {
    pub name: String,
    pub family: Family,
    /// `Unrolled` or `IndexStream`, never `Auto`.
    pub mode: Mode,
    pub source: String,
    pub launch: Launch,
    pub spec_shape: (usize, usize, usize),
    pub dtype: Dtype,
    pub block: (usize, usize),
    /// Where the sparse weight sits. Left-orientation block kernels run on the transposed
    /// problem `Cᵀ = Bᵀ·Wᵀ`: their `ptr`/`idx` are the tables of `Wᵀ` (one run per block
    /// row of W, block columns of W as the k-blocks), in blocks of `Wᵀ`.
    pub orientation: Orientation,
    /// Block kernels: start of each block column's run in `idx` (`N/bw + 1`).
    /// Fine kernel: start of each (k-chunk, column) run (`chunks × N + 1`); left: each
    /// (k-chunk, row of W) run (`chunks × M + 1`). Dismantled: each column segment's first
    /// entry (the code holds the pattern; the kernel does not read the tables).
    pub ptr: Vec<i32>,
    /// Block kernels: block row of each live block. Fine kernels: the entry's offset in the
    /// kernel's shared D tile (see [`FineTable`]). Dismantled: `k × N + col` of each FFMA in
    /// code order, -1 for padding (what `pack_weight` gathers).
    pub idx: Vec<i32>,
    /// Fine kernels: how `idx` maps to k (`None` for the other families).
    pub fine: Option<FineTable>,
    pub live_instances: usize,
    pub dead_instances: usize,
    pub literal_words: usize,
    pub values_embedded: bool,
    /// A kernel to launch before this one, whose output this one reads as its dense operand
    /// (see [`Prepass`]).
    pub prepass: Option<Prepass>,
    /// Words the kernel reads after `idx` in its index table (see [`Kernel::device_idx`]):
    /// the warp-specialized wgmma kernel's step schedule (`spmm_wgmma::schedule`); empty for
    /// the other kernels.
    pub steps: Vec<i32>,
    /// A kernel that loads its dense operand `A` by the Tensor Memory Accelerator takes a
    /// tensor map of it as one more, last parameter (`const __grid_constant__` 128 bytes),
    /// which the caller encodes for the `A` it launches on (see [`TmaBox`]).
    pub tma_a: Option<TmaBox>,
    /// Block wgmma kernels: each live block of W packed as its shared-memory image (the
    /// swizzled K-major layout), so one bulk copy lands it (the warp-specialized kernel).
    pub w_smem_image: bool,
}

/// The tensor map a kernel wants of its dense operand `A` (row-major `M × K` of the kernel's
/// dtype, `K` innermost): boxes of `rows` × `cols` elements landing in shared memory with the
/// `swizzle_bytes` swizzle (32, 64 or 128; the wgmma layouts' swizzle), rows past `M` filled
/// with zeros. The compiler only describes it; the runtime encodes it
/// (`cuTensorMapEncodeTiled`) with the device address of `A`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct TmaBox {
    pub rows: u32,
    pub cols: u32,
    pub swizzle_bytes: u32,
}

/// A fine kernel's prepass over its dense operand, into an fp32 scratch buffer of
/// `scratch_bytes` that the kernel then reads instead, copying its rows 16 bytes at a time into
/// its fp32 tile (pad columns zeroed). Right orientation: `At = Aᵀ`, A row-major `M × K` (any
/// float dtype), At `K × ld`, `ld = M` rounded up to 4. Left orientation, 16-bit B: `Bw = B`
/// widened, B row-major `K × N`, Bw `K × ld`, `ld = N` rounded up to 4. Signature
/// `(const T* D, float* Dw)`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Prepass {
    pub name: String,
    pub source: String,
    pub launch: Launch,
    /// Bytes of the scratch buffer (`4 × K × ld`).
    pub scratch_bytes: usize,
}

/// How a fine kernel's entries address its shared D tile: an entry's `idx` is
/// `k_in_chunk × ld`; every (chunk, column) run is padded to a multiple of 4 entries whose
/// offset is the tile's zero row (`k_in_chunk = chunk`) and whose weight is 0.
/// Runs are in (chunk, position) order: the sparse columns are numbered tile by tile (`cols`
/// per CTA, the last tile completed with empty runs) and, inside a tile, warp by warp, each
/// warp owning every `warps`-th column, so the runs one warp walks in a chunk are contiguous.
/// The 3xTF32 fine kernel ([`Family::FineTf32`]) keeps its own layout (see
/// `spmm_fine_tf32.rs`): `chunk` its k-chunk, `ld` the rows of an A box, `cols` its columns per
/// CTA, `warps` its consumer warps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct FineTable {
    /// Depth of a k-chunk.
    pub chunk: usize,
    /// Row stride (elements) of the D tile.
    pub ld: usize,
    /// Sparse columns per CTA tile.
    pub cols: usize,
    /// Warps per CTA.
    pub warps: usize,
}

impl FineTable {
    /// Run positions per chunk for `fc` sparse columns (whole tiles).
    pub fn positions(&self, fc: usize) -> usize {
        fc.next_multiple_of(self.cols)
    }
    /// The sparse column at run position `pos` (it may lie past the last column: an empty run).
    pub fn column(&self, pos: usize) -> usize {
        let (tile, p) = (pos / self.cols, pos % self.cols);
        let per_warp = self.cols / self.warps;
        tile * self.cols + p / per_warp + (p % per_warp) * self.warps
    }
    /// The k inside its chunk of the entry with offset `idx`; `None` for a padding entry.
    pub fn k_in_chunk(&self, idx: i32) -> Option<usize> {
        Some(idx as usize / self.ld).filter(|&kk| kk < self.chunk)
    }
    /// The offset padding entries carry.
    fn pad(&self) -> i32 {
        (self.chunk * self.ld) as i32
    }
}

impl Kernel {
    /// Packs a row-major `K × N` weight (left orientation: `M × K`) into the order the
    /// kernel reads it: block kernels store each live block row-major, blocks in `idx`
    /// order; the fine kernel one value per entry in `idx` order; dense: the same as block
    /// kernels with every block live; the int8 family each live block column-major
    /// (n-major, the block's k contiguous), blocks in `idx` order. Left-orientation block
    /// kernels read the blocks of `Wᵀ` (`K × M`), each stored row-major. The 3xTF32 family
    /// stores each live block's TF32 big part, then its small part (both row-major).
    pub fn pack_weight(&self, w: &[f32]) -> Vec<f32> {
        if self.family == Family::BlockTf32 {
            let (_, k, n) = self.spec_shape;
            assert_eq!(w.len(), k * n, "weight has the wrong size");
            return super::spmm_tf32::split_blocks(&pack_blocks(&self.ptr, &self.idx, self.block, n, w), self.block);
        }
        self.pack(w)
    }

    /// [`Kernel::pack_weight`] on quantized values (the int8 family's `W_q` argument).
    pub fn pack_weight_i8(&self, w: &[i8]) -> Vec<i8> {
        self.pack(w)
    }

    fn pack<T: Copy + Default>(&self, w: &[T]) -> Vec<T> {
        if self.orientation == Orientation::Left && !matches!(self.family, Family::Fine | Family::FineLeft) {
            let (m, k, _) = self.spec_shape;
            assert_eq!(w.len(), m * k, "weight has the wrong size");
            let mut wt = vec![T::default(); k * m];
            for r in 0..m {
                for c in 0..k {
                    wt[c * m + r] = w[r * k + c];
                }
            }
            return pack_blocks(&self.ptr, &self.idx, (self.block.1, self.block.0), m, &wt);
        }
        let (_, k, n) = self.spec_shape;
        if self.family != Family::FineLeft {
            assert_eq!(w.len(), k * n, "weight has the wrong size");
        }
        match self.family {
            Family::Epilogue => vec![],
            Family::FineDismantled => super::spmm_dismantled::pack(self, w),
            Family::FineTf32 => super::spmm_fine_tf32::pack(self, w),
            Family::Fine | Family::FineLeft => {
                // Runs in (chunk, sparse column) order. Right: column `col` of W (`K × N`);
                // left: row `col` of W (`M × K`, row-major).
                let t = self.fine.expect("fine kernels carry their table layout");
                let (m, k, _) = self.spec_shape;
                let left = self.family == Family::FineLeft;
                if left {
                    assert_eq!(w.len(), m * k, "weight has the wrong size");
                }
                let fct = t.positions(if left { m } else { n });
                let at = |row: usize, col: usize| if left { col * k + row } else { row * n + col };
                let mut out = Vec::with_capacity(self.idx.len());
                for s in 0..self.ptr.len() - 1 {
                    let (c, col) = (s / fct, t.column(s % fct));
                    for e in self.ptr[s]..self.ptr[s + 1] {
                        out.push(match t.k_in_chunk(self.idx[e as usize]) {
                            Some(kk) => w[at(c * t.chunk + kk, col)],
                            None => T::default(),
                        });
                    }
                }
                out.resize(self.idx.len(), T::default());
                out
            }
            // Each live block column-major (n-major, the block's k contiguous): the int8
            // B fragments via plain ldmatrix, and wgmma's K-major B operand.
            Family::BlockWgmma if self.w_smem_image => {
                let (bh, bw) = self.block;
                let layout = super::CoreLayout { k_chunks: bh / 8 };
                let esize = self.dtype.bytes();
                let mut out = vec![T::default(); self.idx.len() * bh * bw];
                let mut e = 0;
                for j in 0..self.ptr.len() - 1 {
                    for &kb in &self.idx[self.ptr[j] as usize..self.ptr[j + 1] as usize] {
                        let base = e * bh * bw;
                        for c in 0..bw {
                            for r in 0..bh {
                                let at = base + (layout.offset(c, r / 8) / esize) + r % 8;
                                out[at] = w[(kb as usize * bh + r) * n + j * bw + c];
                            }
                        }
                        e += 1;
                    }
                }
                out
            }
            Family::BlockInt8 | Family::BlockWgmma => {
                let (bh, bw) = self.block;
                let mut out = Vec::with_capacity(self.idx.len() * bh * bw);
                for j in 0..self.ptr.len() - 1 {
                    for e in self.ptr[j]..self.ptr[j + 1] {
                        let kb = self.idx[e as usize] as usize;
                        for c in 0..bw {
                            for r in 0..bh {
                                out.push(w[(kb * bh + r) * n + j * bw + c]);
                            }
                        }
                    }
                }
                out
            }
            _ => pack_blocks(&self.ptr, &self.idx, self.block, n, w),
        }
    }

    /// The `idx` table as the kernel reads it: fine kernels take their entry offsets in bytes;
    /// the others take `idx` as it is.
    pub fn device_idx(&self) -> Vec<i32> {
        match self.family {
            // Byte offsets into the shared D tile: the kernel adds each to the lane's address
            // as it is (one add per entry, no unpacking).
            Family::Fine | Family::FineLeft => self.idx.iter().map(|&e| 4 * e).collect(),
            _ => self.idx.iter().chain(&self.steps).copied().collect(),
        }
    }

    /// The k8 steps of a 3xTF32 fine kernel (each an `M × 8·n_tiles × 8` TF32 product on gathered k;
    /// what the planner's cost model counts), `None` for other families.
    pub fn tensor_steps(&self) -> Option<usize> {
        (self.family == Family::FineTf32).then(|| self.ptr.last().map_or(0, |&p| p as usize))
    }

    /// The n8 tiles per step of a 3xTF32 fine kernel (1 or 2), `None` for other families.
    pub fn tensor_n_tiles(&self) -> Option<usize> {
        let t = self.fine.filter(|_| self.family == Family::FineTf32)?;
        Some(t.cols / (8 * t.warps).max(1))
    }

    /// Multiply-adds the kernel executes (live blocks or entries only) times 2.
    pub fn flops(&self) -> f64 {
        let (m, _, n) = self.spec_shape;
        // The dense operand's other dimension: rows of A, or columns of B (left).
        let m = if self.orientation == Orientation::Left { n } else { m };
        match self.family {
            Family::Epilogue => 0.0,
            Family::Fine | Family::FineDismantled | Family::FineTf32 => 2.0 * m as f64 * self.live_instances as f64,
            Family::FineLeft => 2.0 * self.spec_shape.2 as f64 * self.live_instances as f64,
            _ => 2.0 * m as f64 * (self.idx.len() * self.block.0 * self.block.1) as f64,
        }
    }
}

/// The live `(bh, bw)` blocks of a row-major weight with `n` columns, row-major each, in
/// the order of the block-column tables `ptr`/`idx`.
fn pack_blocks<T: Copy>(ptr: &[i32], idx: &[i32], (bh, bw): (usize, usize), n: usize, w: &[T]) -> Vec<T> {
    let mut out = Vec::with_capacity(idx.len() * bh * bw);
    for j in 0..ptr.len() - 1 {
        for e in ptr[j]..ptr[j + 1] {
            let kb = idx[e as usize] as usize;
            for r in 0..bh {
                for c in 0..bw {
                    out.push(w[(kb * bh + r) * n + j * bw + c]);
                }
            }
        }
    }
    out
}

pub(super) fn spec_err(msg: String) -> CodegenError {
    CodegenError::Spec(msg)
}

/// Specializes `spec` into a kernel (SparTA's code specialization pass).
pub fn specialize(spec: &SpmmSpec) -> Result<Kernel, CodegenError> {
    let (m, k, n) = (spec.m, spec.k, spec.n);
    let (bh, bw) = spec.block;
    if m == 0 || k == 0 || n == 0 {
        return Err(spec_err(format!("empty matmul {m}x{k}x{n}")));
    }
    if spec.live_rows && (spec.orientation == Orientation::Left || spec.dtype != Dtype::F32) {
        return Err(spec_err(
            "live rows (a run-time row count) are built for right-orientation fp32 kernels only".into(),
        ));
    }
    if spec.orientation == Orientation::Left && spec.block == (1, 1) {
        return fine_left(spec);
    }
    if spec.orientation == Orientation::Left {
        if spec.dtype == Dtype::I8 {
            return Err(spec_err("the int8 kernel has the right orientation only (C = A·W)".into()));
        }
        return specialize_left(spec);
    }
    if bh == 0 || bw == 0 || k % bh != 0 || n % bw != 0 {
        return Err(spec_err(format!("block {bh}x{bw} does not tile the {k}x{n} weight")));
    }
    if let Some(v) = &spec.values {
        if v.len() != k * n {
            return Err(spec_err(format!("values hold {} elements, the weight {k}x{n} has {}", v.len(), k * n)));
        }
    }
    let (kbs, nbs) = (k / bh, n / bw);
    let mut live = vec![false; kbs * nbs];
    for &(r, c) in &spec.blocks {
        if r >= kbs || c >= nbs {
            return Err(spec_err(format!("block ({r}, {c}) lies outside the {kbs}x{nbs} block grid")));
        }
        if std::mem::replace(&mut live[r * nbs + c], true) {
            return Err(spec_err(format!("block ({r}, {c}) is listed twice")));
        }
    }
    let dense = spec.blocks.len() == kbs * nbs;
    if spec.dtype == Dtype::I8 {
        if (bh, bw) == (1, 1) {
            return Err(spec_err("int8 fine-grained kernel not built (int8 runs on block kernels only)".into()));
        }
        return super::spmm_int8::block_int8(spec, &live, dense);
    }
    if (bh, bw) == (1, 1) {
        return fine(spec, &live);
    }
    if let Some(kernel) = super::spmm_wgmma::try_specialize(spec, &live, dense)? {
        return Ok(kernel);
    }
    if let Some(kernel) = super::spmm_tf32::try_specialize(spec, &live, dense)? {
        return Ok(kernel);
    }
    let kernel = block(spec, &live, dense, false)?;
    if spec.live_rows && !matches!(kernel.family, Family::BlockSimt | Family::Dense) {
        return Err(spec_err(format!("live rows are not built into the {} kernel", kernel.family.name())));
    }
    Ok(kernel)
}

/// Caps the row tiles of `kernel`, specialized from `spec`, when `spec` asks for
/// [`SpmmSpec::live_rows`] and the kernel's template strides over them (the 3xTF32 block and
/// fine kernels): its grid's y holds at most twice the CTAs that
/// `sm_count` multiprocessors keep resident (estimated from the kernel's threads and shared
/// memory), and each CTA walks every `grid.y`-th live row tile. A batch whose rows mostly died
/// then launches a grid sized for the GPU, not thousands of CTAs that find nothing to do.
/// Returns whether the kernel strides (other families keep one CTA per row tile).
pub fn stride_live_rows(kernel: &mut Kernel, spec: &SpmmSpec, sm_count: usize) -> bool {
    if !spec.live_rows || !matches!(kernel.family, Family::BlockTf32 | Family::FineTf32) {
        return false;
    }
    let threads = (kernel.launch.block.0 * kernel.launch.block.1 * kernel.launch.block.2).max(1) as usize;
    // Hopper: 2048 threads, 32 CTAs and 227 KiB of shared memory per multiprocessor (1 KiB of it
    // reserved per CTA).
    let by_smem = (227 * 1024) / (kernel.launch.smem_bytes as usize + 1024);
    let per_sm = (2048 / threads).min(32).min(by_smem).max(1);
    let col_tiles = kernel.launch.grid.0.max(1) as usize;
    let rows = (2 * per_sm * sm_count.max(1)).div_ceil(col_tiles).max(1);
    kernel.launch.grid.1 = kernel.launch.grid.1.min(rows as u32);
    true
}

/// Resolves `Auto` against the budget.
pub(super) fn resolve_mode(spec: &SpmmSpec, words: usize) -> Mode {
    match spec.mode {
        Mode::Auto if words <= spec.code_budget => Mode::Unrolled,
        Mode::Auto => Mode::IndexStream,
        m => m,
    }
}

/// The head of a kernel's template context: name, element type, shape and epilogue of `spec`.
pub(super) fn kernel_head(name: &str, dtype: Dtype, spec: &SpmmSpec) -> KernelHead {
    KernelHead {
        kernel_name: name.to_string(),
        dtype: dtype.name().to_string(),
        m: spec.m,
        k: spec.k,
        n: spec.n,
        epilogue: epilogue_ctx(spec),
        live_rows: spec.live_rows,
    }
}

/// The literals of a kernel's template context: `kernel`'s tables when it is unrolled (`idx`
/// as the kernel reads it), in `__constant__` memory when they and `extra_words` more fit in
/// 16384 words, and the embedded `values`.
pub(super) fn kernel_literals(
    kernel: &Kernel,
    idx: Vec<i32>,
    values: Vec<String>,
    value_bits: usize,
    extra_words: usize,
) -> Literals {
    let unrolled = kernel.mode == Mode::Unrolled;
    Literals {
        unrolled,
        tables_in_constant: kernel.ptr.len() + kernel.idx.len() + extra_words <= 16384,
        ptr: if unrolled { kernel.ptr.clone() } else { vec![] },
        idx: if unrolled { idx } else { vec![] },
        values,
        value_bits,
    }
}

pub(super) fn epilogue_ctx(spec: &SpmmSpec) -> EpilogueCtx {
    epilogue_ctx_of(spec.epilogue, spec.accumulate)
}

/// The template context of `epilogue` (`templates/epilogue.cuh`), adding the previous output
/// first when `accumulate`.
pub(super) fn epilogue_ctx_of(epilogue: super::Epilogue, accumulate: bool) -> EpilogueCtx {
    use super::Activation::*;
    let (act, lo, hi) = match epilogue.activation {
        None => ("none", 0.0, 0.0),
        Relu => ("relu", 0.0, 0.0),
        Clip { lo, hi } => ("clip", lo, hi),
        Gelu => ("gelu", 0.0, 0.0),
        GeluErf => ("gelu_erf", 0.0, 0.0),
    };
    EpilogueCtx {
        bias: epilogue.bias,
        activation: act.to_string(),
        clip_lo: float_literal(lo),
        clip_hi: float_literal(hi),
        accumulate,
    }
}

/// A C float literal that round-trips `x` (infinities as the CUDA constants).
fn float_literal(x: f32) -> String {
    if x == f32::INFINITY {
        "__int_as_float(0x7f800000)".into()
    } else if x == f32::NEG_INFINITY {
        "__int_as_float(0xff800000)".into()
    } else {
        format!("{x:e}f")
    }
}

/// Raw bits of the packed values in the kernel's dtype, as hex literals.
pub(super) fn value_bits(dtype: Dtype, packed: &[f32]) -> Vec<String> {
    packed
        .iter()
        .map(|v| match dtype {
            Dtype::F32 => format!("0x{:08x}u", v.to_bits()),
            Dtype::F16 => format!("0x{:04x}u", half::f16::from_f32(*v).to_bits()),
            Dtype::Bf16 => format!("0x{:04x}u", half::bf16::from_f32(*v).to_bits()),
            // Not reached: the int8 family refuses embedded values (see `spmm_int8`).
            Dtype::I8 => format!("0x{:02x}u", (*v as i8) as u8),
        })
        .collect()
}

/// The left orientation, `C[M,N] = W[M,K]·B[K,N]` with W sparse (blocks `(bh, bw)` over
/// `M × K`, values row-major `M × K`).
///
/// Block and dense kernels run the transposed problem `Cᵀ[N,M] = Bᵀ[N,K]·Wᵀ[K,M]`, which
/// is the right orientation with `A' = Bᵀ`, `W' = Wᵀ` (blocks `(bw, bh)`) and `C' = Cᵀ`, so
/// the tables, the block walk, the pipeline and the math stay those of the right kernels.
/// Only two things change, in `{% if left %}` branches of the templates: the `A'` tile is
/// copied from rows of B (contiguous along the output's columns, kept k-major in shared
/// memory: fp32 reads it as float4 along the rows of `C'`, the tensor-core kernel takes
/// its fragments by `ldmatrix.trans`), and `C'` is stored transposed (fp32: each thread's
/// rows of `C'` are contiguous, so its stores are float4 along the rows of C; tensor cores:
/// through shared memory, 16-byte stores along the rows of C). This was chosen over
/// direct left kernels (W blocks as the MMA A operand) because it reuses the block tables,
/// `pack_weight`'s block order and every tile heuristic unchanged, and the transposed
/// loads and stores cost the same bytes. The bias stays per column of C (rows of `C'`).
/// Needs `N` to be a multiple of 8 (16-byte rows of B).
fn specialize_left(spec: &SpmmSpec) -> Result<Kernel, CodegenError> {
    let (m, k, n) = (spec.m, spec.k, spec.n);
    let (bh, bw) = spec.block;
    if bh == 0 || bw == 0 || m % bh != 0 || k % bw != 0 {
        return Err(spec_err(format!("block {bh}x{bw} does not tile the {m}x{k} weight (left orientation)")));
    }
    if let Some(v) = &spec.values {
        if v.len() != m * k {
            return Err(spec_err(format!("values hold {} elements, the weight {m}x{k} has {}", v.len(), m * k)));
        }
    }
    if (bh, bw) == (1, 1) {
        return Err(spec_err("the fine-grained kernel has no left orientation in this build".into()));
    }
    if spec.engine == Engine::Tf32x3 {
        return Err(spec_err("3xTF32 kernels take the right orientation (A · W, W sparse) only".into()));
    }
    if n % 8 != 0 {
        return Err(spec_err(format!("left-orientation block kernels need N a multiple of 8, got {n}")));
    }
    let (mbs, kbs) = (m / bh, k / bw);
    // Wᵀ: block (c, r) for W's block (r, c); its grid is kbs × mbs.
    let mut live = vec![false; kbs * mbs];
    for &(r, c) in &spec.blocks {
        if r >= mbs || c >= kbs {
            return Err(spec_err(format!("block ({r}, {c}) lies outside the {mbs}x{kbs} block grid")));
        }
        if std::mem::replace(&mut live[c * mbs + r], true) {
            return Err(spec_err(format!("block ({r}, {c}) is listed twice")));
        }
    }
    let transposed = SpmmSpec {
        m: n,
        k,
        n: m,
        block: (bw, bh),
        orientation: Orientation::Right,
        blocks: spec.blocks.iter().map(|&(r, c)| (c, r)).collect(),
        values: spec.values.as_ref().map(|v| {
            let mut t = vec![0.0f32; k * m];
            for r in 0..m {
                for c in 0..k {
                    t[c * m + r] = v[r * k + c];
                }
            }
            t
        }),
        ..spec.clone()
    };
    let dense = spec.blocks.len() == kbs * mbs;
    let mut kernel = block(&transposed, &live, dense, true)
        .map_err(|e| spec_err(format!("left orientation, on the transposed weight: {e}")))?;
    kernel.spec_shape = (m, k, n);
    kernel.block = (bh, bw);
    kernel.orientation = Orientation::Left;
    Ok(kernel)
}

/// Block and dense kernels of the right orientation; `left`: the same problem is the
/// transpose of a left-orientation one (see [`specialize_left`]).
fn block(spec: &SpmmSpec, live: &[bool], dense: bool, left: bool) -> Result<Kernel, CodegenError> {
    let (m, k, n) = (spec.m, spec.k, spec.n);
    let (bh, bw) = spec.block;
    let (kbs, nbs) = (k / bh, n / bw);
    let mma = spec.dtype != Dtype::F32;
    let family = if dense {
        Family::Dense
    } else if mma {
        Family::BlockMma
    } else {
        Family::BlockSimt
    };
    // Tile shapes: every number the template needs is computed here.
    let threads;
    let (bm, tm, threads_n, threads_m);
    let (a_ld, w_ld);
    if mma {
        if bh % 16 != 0 || bw % 16 != 0 || bw > 64 {
            return Err(spec_err(format!(
                "tensor-core kernels need bh, bw multiples of 16 and bw <= 64, got {bh}x{bw}"
            )));
        }
        let warps = warp_rows(spec, "tensor-core")?;
        threads = 32 * warps;
        bm = 32 * warps;
        (tm, threads_n, threads_m) = (0, 0, 0);
        // Left: the A' tile is k-major (BH rows of BM), as it comes from rows of B.
        (a_ld, w_ld) = (if left { bm + 8 } else { bh + 8 }, bw + 8);
    } else {
        if bh % 4 != 0 || bw % 4 != 0 || bw > 128 {
            return Err(spec_err(format!(
                "fp32 block kernels need bh, bw multiples of 4 and bw <= 128, got {bh}x{bw}"
            )));
        }
        threads = 256;
        threads_n = bw / 4;
        threads_m = threads / threads_n;
        // Enough rows per thread for reuse, few enough CTAs lost on small M.
        tm = match spec.tile {
            Some(t) if t.rows % threads_m == 0 && [1, 2, 4, 8].contains(&(t.rows / threads_m)) => t.rows / threads_m,
            Some(t) => {
                return Err(spec_err(format!(
                    "fp32 tiles at bw {bw} hold {threads_m} × 1, 2, 4 or 8 rows, not {}",
                    t.rows
                )))
            }
            // 8 rows per thread (with 2 stages) at large M: the fastest fp32 tile in runs 2 and 4
            // (their notes are in the git history of benches/results/).
            None if m >= 2048 && threads_m * 8 <= 256 => 8,
            None if threads_m * 4 <= 256 => 4,
            None => 1,
        };
        bm = threads_m * tm;
        (a_ld, w_ld) = (if left { bm + 4 } else { bh + 4 }, bw);
    }
    let stages = pipeline_stages(
        spec,
        if mma {
            4
        } else if tm == 8 {
            2
        } else {
            3
        },
    )?;
    let esize = spec.dtype.bytes();
    let a_tile = if left { bh * a_ld } else { bm * a_ld };
    let mut smem = stages * (a_tile + bh * w_ld) * esize;
    // Left tensor-core kernels stage C'ᵀ (bw × bm fp32, rows padded by 4) for the store.
    let cs_ld = bm + 4;
    if left && mma {
        smem = smem.max(bw * cs_ld * 4);
    }
    if smem > 227 * 1024 {
        return Err(spec_err(format!("block {bh}x{bw} needs {smem} bytes of shared memory per CTA (at most 232448)")));
    }

    let BlockTables { ptr, idx, live_instances, dead_instances } = block_tables(m, (kbs, nbs), (bh, bw), bm, live)?;
    // Folding: when the values are known, a uniform block (one value repeated, e.g. binarized
    // or HPEC-style weights) needs one literal instead of the block, and a row sum of the A
    // tile instead of the block product (fp32 kernel). When every live block is uniform the
    // W tiles go entirely (unrolled kernels); when some are, those blocks skip their W tile and
    // take the row sum (either mode).
    let block_values = match (&spec.values, family, left) {
        (Some(v), Family::BlockSimt, false) => uniform_block_values(&ptr, &idx, (bh, bw), n, v),
        _ => vec![],
    };
    let uniform_blocks = block_values.iter().filter(|v| v.is_some()).count();
    let all_uniform = uniform_blocks > 0 && uniform_blocks == block_values.len();
    let w_words = spec.values.as_ref().map_or(0, |_| idx.len() * bh * bw * esize / 4);
    let value_words = match (all_uniform, uniform_blocks) {
        (true, _) => block_values.len(),
        (false, 0) => w_words,
        (false, _) => block_values.len() + w_words,
    };
    let literal_words = if dense { 0 } else { ptr.len() + idx.len() } + value_words;
    let mode = if dense && spec.values.is_none() { Mode::IndexStream } else { resolve_mode(spec, literal_words) };
    let folded = all_uniform && mode == Mode::Unrolled;
    // Partial folding embeds one literal per block even when the tables and W stream from
    // device memory (W too large to embed): the uniform blocks' W tiles are then not read.
    let part_folded = !all_uniform && uniform_blocks > 0 && block_values.len() <= spec.code_budget;
    let mut kernel = Kernel {
        name: String::new(),
        family,
        mode,
        source: String::new(),
        launch: Launch {
            grid: (nbs as u32, m.div_ceil(bm) as u32, 1),
            block: (threads as u32, 1, 1),
            smem_bytes: smem as u32,
        },
        spec_shape: (m, k, n),
        dtype: spec.dtype,
        block: (bh, bw),
        orientation: Orientation::Right,
        ptr,
        idx,
        fine: None,
        live_instances,
        dead_instances,
        literal_words: if mode == Mode::Unrolled { literal_words } else { 0 },
        values_embedded: mode == Mode::Unrolled && spec.values.is_some(),
        prepass: None,
        steps: vec![],
        tma_a: None,
        w_smem_image: false,
    };
    let values = match (&spec.values, kernel.values_embedded) {
        (Some(_), true) if folded => vec![],
        (Some(v), true) => value_bits(spec.dtype, &kernel.pack_weight(v)),
        _ => vec![],
    };
    let unrolled = mode == Mode::Unrolled;
    kernel.name = format!(
        "spmm_{}_{}_{}x{}_{}{}{}",
        family.name(),
        spec.dtype.name(),
        if left { bw } else { bh },
        if left { bh } else { bw },
        if unrolled { "unrolled" } else { "stream" },
        if left { "_left" } else { "" },
        if folded {
            "_folded"
        } else if part_folded {
            "_partfolded"
        } else {
            ""
        }
    );
    if folded {
        // No W tiles in shared memory.
        kernel.launch.smem_bytes = (stages * a_tile * esize) as u32;
    }
    let ctx = BlockCtx {
        head: kernel_head(&kernel.name, spec.dtype, spec),
        literals: kernel_literals(
            &kernel,
            kernel.idx.clone(),
            values,
            if esize == 4 { 32 } else { 16 },
            if folded || part_folded { kernel.idx.len() } else { 0 },
        ),
        bh,
        bw,
        bm,
        tm,
        threads,
        threads_n,
        threads_m,
        warps: threads / 32,
        stages,
        a_ld,
        w_ld,
        a_chunks: bm * bh * esize / 16,
        w_chunks: bh * bw * esize / 16,
        a_row_chunks: if left { bm } else { bh } * esize / 16,
        w_row_chunks: bw * esize / 16,
        dense,
        k_blocks: kbs,
        folded,
        part_folded,
        // Folded: float literals. Partly folded: raw bits, NaN marking a general block (a
        // uniform block's value is finite).
        block_values: if folded {
            block_values.iter().flatten().map(|x| float_literal(*x)).collect()
        } else if part_folded {
            block_values.iter().map(|x| x.map_or(0x7fff_ffff, f32::to_bits).to_string()).collect()
        } else {
            vec![]
        },
        n_tiles: bw / 8,
        left,
        cs_ld,
        c_chunks: bw * bm / 8,
        c_row_chunks: bm / 8,
    };
    kernel.source = render(if mma { "spmm_block_mma.cu.tera" } else { "spmm_block_simt.cu.tera" }, &ctx)?;
    Ok(kernel)
}

/// Warps of a warp-per-32-rows block kernel (mma.sync, int8, 3xTF32): the tile override's
/// rows / 32 (32 to 256 rows), else 4 (2 under 128 rows of M).
pub(super) fn warp_rows(spec: &SpmmSpec, what: &str) -> Result<usize, CodegenError> {
    match spec.tile {
        Some(t) if t.rows % 32 == 0 && (32..=256).contains(&t.rows) => Ok(t.rows / 32),
        Some(t) => Err(spec_err(format!("{what} tiles hold 32 to 256 rows in steps of 32, not {}", t.rows))),
        None if spec.m >= 128 => Ok(4),
        None => Ok(2),
    }
}

/// cp.async pipeline stages of a block kernel: the tile override's (2 to 8), else `default`.
pub(super) fn pipeline_stages(spec: &SpmmSpec, default: usize) -> Result<usize, CodegenError> {
    match spec.tile {
        Some(t) if (2..=8).contains(&t.stages) => Ok(t.stages),
        Some(t) => Err(spec_err(format!("pipelines have 2 to 8 stages, not {}", t.stages))),
        None => Ok(default),
    }
}

/// The block-column tables of a block kernel: the loop nest (block columns, their k-blocks,
/// then rows and the k inside a block as loops) dismantled at the k-block level against the
/// live blocks; `ptr[j]..ptr[j + 1]` are block column `j`'s live k-blocks in `idx`.
pub(super) struct BlockTables {
    pub ptr: Vec<i32>,
    pub idx: Vec<i32>,
    pub live_instances: usize,
    pub dead_instances: usize,
}

pub(super) fn block_tables(
    m: usize,
    (kbs, nbs): (usize, usize),
    (bh, bw): (usize, usize),
    bm: usize,
    live: &[bool],
) -> Result<BlockTables, CodegenError> {
    let nest = LoopNest::new(vec![
        Level::new("n_block", nbs, bw),
        Level::new("k_block", kbs, bh),
        Level::new("m", m, bm),
        Level::new("k", bh, 1),
    ]);
    let d = nest.dismantle(nest.level("k_block")?, |p| match p {
        // Column blocks always live: their output must be written even when empty.
        [_] => true,
        [j, kb] => live[kb * nbs + j],
        _ => false,
    })?;
    let mut ptr = vec![0i32; nbs + 1];
    let mut idx = Vec::with_capacity(d.instances.len());
    for inst in &d.instances {
        ptr[inst[0] + 1] += 1;
        idx.push(inst[1] as i32);
    }
    for j in 0..nbs {
        ptr[j + 1] += ptr[j];
    }
    Ok(BlockTables { ptr, idx, live_instances: d.instances.len(), dead_instances: d.dead_instances() })
}

/// For every live block in table order, its value where it is uniform (all `bh × bw`
/// elements bitwise equal and finite), `None` where it is not.
fn uniform_block_values(ptr: &[i32], idx: &[i32], block: (usize, usize), n: usize, w: &[f32]) -> Vec<Option<f32>> {
    let mut out = Vec::with_capacity(idx.len());
    for j in 0..ptr.len() - 1 {
        for e in ptr[j]..ptr[j + 1] {
            out.push(uniform_block(w, n, block, idx[e as usize] as usize, j));
        }
    }
    out
}

/// The value of block (`kb`, `j`) of the row-major `K × n` weight `w` when every element of
/// it has the same bits and is finite (the SIMT kernel folds such a block to one literal).
pub(super) fn uniform_block(w: &[f32], n: usize, (bh, bw): (usize, usize), kb: usize, j: usize) -> Option<f32> {
    let first = w[kb * bh * n + j * bw];
    let uniform = first.is_finite()
        && (0..bh).all(|r| (0..bw).all(|c| w[(kb * bh + r) * n + j * bw + c].to_bits() == first.to_bits()));
    uniform.then_some(first)
}

/// Threads per CTA of the fine-grained kernels (16 warps: enough to hide shared-memory latency
/// with one CTA per SM).
const FINE_THREADS: usize = 512;

/// A tiling of the fine-grained kernel in its frame (dense rows × sparse columns).
#[derive(Clone, Copy, Debug, PartialEq)]
struct FineTiling {
    /// Dense rows per lane: 1, 2 or 4 (rows per CTA = 32 × rpl).
    rpl: usize,
    /// Sparse columns per CTA.
    nc: usize,
    /// Depth of a k-chunk.
    chunk: usize,
    /// CTAs resident per SM: 1 (up to 128 registers per thread) or 2 (64, half the shared memory).
    per_sm: usize,
    /// CTAs of a cluster that split the k-chunks (1, 2 or 4).
    split: usize,
    /// The D tiles stream in by cp.async through a two-stage shared ring (no register
    /// prefetch, so the chunk depth is bounded by shared memory only): fp32; left: B's rows
    /// as they are (a multiple of 4 elements); right: A transposed one element per copy, a
    /// warp's copy covering `32 / rpl` consecutive k of `rpl` adjacent rows.
    async_d: bool,
}

impl FineTiling {
    fn bm(&self) -> usize {
        32 * self.rpl
    }
    /// Deepest chunk whose dense tile the threads hold in 8 four-element registers each (4 when
    /// the accumulators and the two pipelined groups of D rows (8 × rpl) take more than 24
    /// registers: those kernels spilled under the 128 registers of 512 threads).
    /// Two CTAs per SM (64 registers) hold 2.
    fn max_chunk(rpl: usize, nc: usize, per_sm: usize) -> usize {
        let loads = match (per_sm, Self::accumulators(rpl, nc) + 8 * rpl) {
            (2.., _) => 2,
            (_, 25..) => 4,
            _ => 8,
        };
        loads * 4 * FINE_THREADS / (32 * rpl)
    }
    /// Accumulator registers per thread.
    fn accumulators(rpl: usize, nc: usize) -> usize {
        nc / (FINE_THREADS / 32) * rpl
    }
    /// Whether `per_sm` CTAs fit the registers: two need at most 8 accumulators per thread and
    /// one row per lane (with the pipelined D rows, 2 spilled under 64 registers).
    fn fits(rpl: usize, nc: usize, per_sm: usize) -> bool {
        per_sm == 1 || (per_sm == 2 && rpl == 1 && Self::accumulators(rpl, nc) <= 8)
    }
    /// Shared memory one CTA may take (the SM's 228 KB less 1 KB per CTA for the driver).
    fn smem_limit(&self) -> usize {
        (228 * 1024) / self.per_sm - 1024
    }
    /// Shallowest chunk: one four-element load per thread.
    fn min_chunk(rpl: usize) -> usize {
        4 * FINE_THREADS / (32 * rpl)
    }
    fn with_chunk_for(rpl: usize, nc: usize, k: usize, per_sm: usize, split: usize, async_d: bool) -> FineTiling {
        // With the ring, shared memory bounds the depth: a stage of at most ~96 KB (two stages
        // and the entries fit the SM; the caller halves it further until they do).
        let max = if async_d {
            (24 * 1024 / (33 * rpl) + 1).next_power_of_two() / 2
        } else {
            Self::max_chunk(rpl, nc, per_sm)
        };
        let chunk = k.next_power_of_two().clamp(Self::min_chunk(rpl), max);
        FineTiling { rpl, nc, chunk, per_sm, split, async_d }
    }
}

/// Estimated time (seconds, H100/H200-class GPU) of a fine tiling: bytes from L2 (the dense
/// operand once per column tile, the entries once per row tile) at ~6 TB/s, plus shared-memory
/// cycles (rpl + 0.5 wavefronts per warp and entry, ~6 per warp and column segment) spread over
/// the CTAs that run at once, one CTA per SM. Only used to rank tilings.
fn fine_estimate(fr: usize, fc: usize, k: usize, nnz: usize, esize: usize, t: FineTiling) -> f64 {
    const SMS: f64 = 132.0;
    let row_tiles = fr.div_ceil(t.bm()) as f64;
    let col_tiles = fc.div_ceil(t.nc) as f64;
    let chunks = k.div_ceil(t.chunk) as f64;
    let ctas = row_tiles * col_tiles * t.split as f64;
    // Runs are padded to groups of four: ~1.5 extra entries per nonempty (chunk, column) run.
    let entries = nnz as f64 + 1.5 * (chunks * fc as f64).min(nnz as f64);
    let l2 = row_tiles * t.bm() as f64 * k as f64 * esize as f64 * col_tiles + entries * (4 + esize) as f64 * row_tiles;
    let mio = entries * row_tiles * (t.rpl as f64 + 0.5) + chunks * col_tiles * t.nc as f64 * row_tiles * 4.0;
    // A split reads every partial tile once more through distributed shared memory.
    let reduce = if t.split > 1 { row_tiles * col_tiles * (t.bm() * t.nc * t.split) as f64 / 32.0 } else { 0.0 };
    let waves = (ctas / (SMS * t.per_sm as f64)).ceil();
    l2 / 6e12 + (mio + reduce) / ctas * waves * t.per_sm as f64 / 1.8e9
}

/// Chooses the fine tiling: the override (`Tile { rows: 32 × rpl, stages: nc / 32, .. }`) or
/// the cheapest by [`fine_estimate`] among the one-row-per-lane tilings, each alone or split
/// over a cluster of 2 or 4 CTAs when there are chunks enough.
fn fine_tiling(spec: &SpmmSpec, fr: usize, fc: usize, nnz: usize, ring_ok: bool) -> Result<FineTiling, CodegenError> {
    let k = spec.k;
    let density = nnz as f64 / (k * fc).max(1) as f64;
    let big = fr >= 256 && fc >= 256;
    let tiles = |rpl: usize, nc: usize| fr.div_ceil(32 * rpl) * fc.div_ceil(nc);
    // D tiles go through the cp.async ring when it can copy them, except for very sparse
    // weights whose 32 × 512 tiles would leave SMs idle: one row per lane gains nothing from
    // the ring there and keeps the register prefetch's overlap (1024³ 99%: 0.0174 ms with the
    // prefetch in run 10, 0.0184 with the ring in run 11).
    // The prepass, when asked for and it applies, feeds the ring.
    let async_d = ring_ok
        && (!(density < 0.02 && big && tiles(1, 512) < 66)
            || (spec.dense_copy == DenseCopy::Prepass && prepass_applies(spec)));
    if let Some(t) = spec.tile {
        let (rpl, nc, per_sm) = (t.rows / 32, 32 * t.stages, t.per_sm.max(1));
        if t.rows % 32 != 0 || ![1, 2, 4].contains(&rpl) || !(1..=16).contains(&t.stages) || rpl * nc > 512 {
            return Err(spec_err(format!(
                "fine tiles hold 32, 64 or 128 rows and 32 × (1 to 16) columns, at most 512 × 32 elements, not {} rows × {} columns",
                t.rows, nc
            )));
        }
        if !FineTiling::fits(rpl, nc, per_sm) {
            return Err(spec_err(format!(
                "{per_sm} fine CTAs per SM need 32 rows and at most 4096 elements per tile (64 registers per thread), not {} rows × {nc} columns",
                t.rows
            )));
        }
        let split = t.split.max(1);
        if ![1, 2, 4].contains(&split) {
            return Err(spec_err(format!("a fine kernel splits K over 1, 2 or 4 CTAs, not {split}")));
        }
        return Ok(FineTiling::with_chunk_for(rpl, nc, k, per_sm, split, async_d));
    }
    let mut best: Option<(f64, FineTiling)> = None;
    // Sparse weights (under 25% kept) take one row per lane when the D tile is prefetched in
    // registers: on the H200 it was the fastest (or within 2%) of every swept tiling at 1024³
    // and 4096³, 95% and 99% (run 9); the estimate ranks 2 and 4 rows per lane
    // too high there (their chunks are 128-256 deep under the register cap). Denser ones amortize each
    // entry over more rows: at 50%, one row per lane lost 1.4-1.5× (run 9).
    // With the D ring (no register cap on the chunk) the left and right sweeps of session 5
    // (run 10, p5 and p6: 1024³ and 4096³, 95% and 99%) set the tile of
    // sparse weights: from 2% kept, two rows per lane and 256 columns (each entry's broadcasts
    // serve 64 rows), K split over 2 CTAs when the tiles leave SMs idle; under 2%, one row per
    // lane and 512 columns (fewer, longer runs; the grids where that leaves SMs idle keep the
    // register prefetch, above).
    // Session 7 (run 13): in the left orientation, where 64 × 256 tiles leave SMs
    // idle, 64 × 128 tiles without a split are faster (1024³ 95%: 0.0211 ms against 0.0233);
    // in the right one they tie (0.0265 against 0.0259), so the split stays.
    if async_d && density <= 0.25 && big {
        let (rpl, mut nc) = if density >= 0.02 { (2, 256) } else { (1, 512) };
        let left = spec.orientation == Orientation::Left;
        if left && rpl == 2 && tiles(rpl, nc) < 66 && tiles(rpl, nc / 2) >= 66 {
            nc /= 2;
        }
        let mut t = FineTiling::with_chunk_for(rpl, nc, k, 1, 1, async_d);
        if tiles(rpl, nc) < 66 && k.div_ceil(t.chunk) >= 2 {
            t.split = 2;
        }
        return Ok(t);
    }
    let rpls: &[usize] = if density > 0.25 { &[1, 2, 4] } else { &[1] };
    for &rpl in rpls {
        if rpl > 1 && 32 * rpl > 2 * fr.next_power_of_two() {
            continue;
        }
        let mut nc = 32;
        while nc * rpl <= 512 && nc <= fc.next_power_of_two().max(32) {
            for split in [1, 2, 4] {
                let t = FineTiling::with_chunk_for(rpl, nc, k, 1, split, async_d);
                // A split only pays when the tiles alone leave SMs idle (at 128 tiles it lost:
                // run9), and needs a chunk per CTA.
                let tiles = fr.div_ceil(t.bm()) * fc.div_ceil(nc);
                if split > 1 && (tiles >= 66 || k.div_ceil(t.chunk) < split) {
                    break;
                }
                let est = fine_estimate(fr, fc, k, nnz, spec.dtype.bytes(), t);
                if best.is_none_or(|(b, _)| est < b) {
                    best = Some((est, t));
                }
            }
            nc *= 2;
        }
    }
    Ok(best.map(|b| b.1).unwrap_or(FineTiling::with_chunk_for(1, 32, k, 1, 1, async_d)))
}

/// Chunked CSC of the sparse operand in the kernel's frame: `live(row, col)` over K × `fc`.
/// Returns `(ptr, idx, live, dead)`. Each entry's `idx` is its row's offset in the shared D
/// tile (`k_in_chunk × ld`), and every (chunk, column) run is padded to a multiple of 4 entries
/// that point at the tile's zero row (`k_in_chunk = chunk`): the kernel walks whole aligned
/// groups of four, with no per-run head or tail loop and no index arithmetic beyond one add.
fn fine_tables(
    k: usize,
    fc: usize,
    fr: usize,
    t: FineTiling,
    table: FineTable,
    live: &dyn Fn(usize, usize) -> bool,
) -> Result<(Vec<i32>, Vec<i32>, usize, usize), CodegenError> {
    let chunk = t.chunk;
    let chunks = k.div_ceil(chunk);
    let nest = LoopNest::new(vec![
        Level::new("k_chunk", chunks, chunk),
        Level::new("n", fc, 1),
        Level::new("k", chunk, 1),
        Level::new("m", fr, t.bm()),
    ]);
    let d = nest.dismantle(nest.level("k")?, |p| match p {
        [_] | [_, _] => true,
        [c, col, kk] => {
            let row = c * chunk + kk;
            row < k && live(row, *col)
        }
        _ => false,
    })?;
    let mut ptr = vec![0i32; chunks * fc + 1];
    let mut idx = Vec::with_capacity(d.instances.len() * 5 / 4 + 4);
    let mut run = 0;
    // Closes every run before run `s`, padding the open one to a whole group of four.
    let mut close_until = |s: usize, idx: &mut Vec<i32>| {
        while run < s {
            idx.resize(idx.len().next_multiple_of(4), table.pad());
            run += 1;
            ptr[run] = idx.len() as i32;
        }
    };
    for inst in &d.instances {
        close_until(inst[0] * fc + inst[1], &mut idx);
        idx.push((inst[2] * table.ld) as i32);
    }
    close_until(chunks * fc, &mut idx);
    // The runs in (chunk, position) order (see [`FineTable`]).
    let fct = table.positions(fc);
    let mut pos_ptr = Vec::with_capacity(chunks * fct + 1);
    pos_ptr.push(0);
    let mut pos_idx = Vec::with_capacity(idx.len());
    for c in 0..chunks {
        for pos in 0..fct {
            let col = table.column(pos);
            if col < fc {
                let s = c * fc + col;
                pos_idx.extend_from_slice(&idx[ptr[s] as usize..ptr[s + 1] as usize]);
            }
            pos_ptr.push(pos_idx.len() as i32);
        }
    }
    if pos_idx.is_empty() {
        pos_idx.resize(4, table.pad());
    }
    Ok((pos_ptr, pos_idx, d.instances.len(), d.dead_instances()))
}

fn fine(spec: &SpmmSpec, live: &[bool]) -> Result<Kernel, CodegenError> {
    if let Some(kernel) = super::spmm_fine_tf32::try_specialize(spec, live)? {
        return Ok(kernel);
    }
    if !spec.live_rows && super::spmm_dismantled::applies(spec)? {
        return super::spmm_dismantled::specialize(spec, live);
    }
    let n = spec.n;
    fine_kernel(spec, false, &|row, col| live[row * n + col])
}

/// The left orientation, `C[M,N] = W[M,K] · B[K,N]` with W element-sparse: the fine kernel in
/// the transposed frame (dense rows = the N columns of B and C, sparse columns = the M rows of
/// W). `spec.blocks` are `(m, k)` coordinates of W's nonzeros and `spec.values` is W row-major
/// `M × K`; the bias, as in the right orientation, is indexed by the output column.
fn fine_left(spec: &SpmmSpec) -> Result<Kernel, CodegenError> {
    let (m, k) = (spec.m, spec.k);
    if spec.engine == Engine::Tf32x3 {
        return Err(spec_err(
            "the 3xTF32 fine kernel takes the right orientation (A · W) only; a left-orientation \
             element-sparse weight runs on the SIMT kernel (Engine::Auto or Engine::Simt)"
                .into(),
        ));
    }
    if let Some(v) = &spec.values {
        if v.len() != m * k {
            return Err(spec_err(format!("values hold {} elements, the weight {m}x{k} has {}", v.len(), m * k)));
        }
    }
    let mut live = vec![false; m * k];
    for &(r, c) in &spec.blocks {
        if r >= m || c >= k {
            return Err(spec_err(format!("element ({r}, {c}) lies outside the {m}x{k} weight")));
        }
        if std::mem::replace(&mut live[r * k + c], true) {
            return Err(spec_err(format!("element ({r}, {c}) is listed twice")));
        }
    }
    fine_kernel(spec, true, &|row, col| live[col * k + row])
}

/// Whether the fine kernel's (chunk, column) runs are long enough for the entry loop that is
/// software-pipelined across groups: about 20 live entries per run or more. Shorter runs take
/// the one-group-at-a-time loop, whose columns cost no pipeline remainder (H200, run 14: 4096³
/// 99% 0.559 → 0.419 ms, 95% 1.076 → 1.035, 1024³ 99% 0.0173 → 0.0145; at 90%, 25.6 entries per
/// run, the simple loop lost, 1.760 → 1.877).
fn runs_are_long(nnz: usize, k: usize, fc: usize, chunk: usize) -> bool {
    nnz as f64 / (k * fc).max(1) as f64 * chunk as f64 >= 20.0
}

/// Whether a fine kernel's dense operand can go through a prepass: A of the right orientation
/// (transposed), or 16-bit B of the left (widened); fp32 B is copied as it is.
fn prepass_applies(spec: &SpmmSpec) -> bool {
    // The prepass transposes all M rows of A; a run-time row count would leave it copying dead ones.
    !spec.live_rows && (spec.orientation == Orientation::Right || spec.dtype != Dtype::F32)
}

/// Whether the prepass pays for a fine tiling (`DenseCopy::Auto`). Right orientation, fp32:
/// without it every column tile re-transposes A's tiles on the way in (4-byte copies), with it
/// A is transposed once (one read and one write of A: 33 µs at 4096², 4.3 µs at 1024²) and every
/// column tile copies At's rows 16 bytes at a time. So it pays from enough column tiles: on the
/// H200 (run 16, call 2) it won at 8 and 16 column tiles (4096³ 99% 0.418 →
/// 0.385 ms, 95% 1.031 → 0.927, 2048³ 95% 0.142 → 0.133) and lost at 4 (1024³ 95% 0.0252 →
/// 0.0288, 2048³ 99% 0.0615 → 0.0635). For 16-bit A the alternative is the register prefetch
/// (4-byte copies cannot transpose it), which loses already at 4 column tiles (call 6: 1024³ fp16
/// 90% 0.0412 → 0.0378 with the prepass, 95% 0.0284 → 0.0270) but not at 2 (99%: 0.0161 →
/// 0.0189). The left orientation's 16-bit B takes the same rule (its widening prepass against
/// the register path: 1024³ fp16 95% 0.0261 → 0.0238, 99% at 2 column tiles 0.0142 → 0.0180,
/// call 8).
fn prepass_pays(fc: usize, t: FineTiling, dtype: Dtype) -> bool {
    fc.div_ceil(t.nc) >= if dtype == Dtype::F32 { 8 } else { 4 }
}

/// The widening prepass of a left-orientation fine kernel over 16-bit B (`k × n`): the fp32 Bw
/// (`k × ld`).
fn widen_prepass(dtype: Dtype, k: usize, n: usize, ld: usize) -> Result<Prepass, CodegenError> {
    let name = format!("widen_{}_f32", dtype.name());
    let ctx = WidenCtx { kernel_name: name.clone(), dtype: dtype.name().into(), k, n, ld, vec: n.is_multiple_of(4) };
    let groups = k * ld / 4;
    Ok(Prepass {
        source: render("widen.cu.tera", &ctx)?,
        name,
        launch: Launch { grid: (groups.div_ceil(256).min(132 * 8) as u32, 1, 1), block: (256, 1, 1), smem_bytes: 0 },
        scratch_bytes: 4 * k * ld,
    })
}

/// The transpose prepass of a right-orientation fine kernel over A (`m × k`, any float dtype,
/// 16-bit A widened on the way): the fp32 At (`k × ld`).
fn transpose_prepass(dtype: Dtype, m: usize, k: usize, ld: usize) -> Result<Prepass, CodegenError> {
    let name = format!("transpose_{}_f32", dtype.name());
    let ctx =
        TransposeCtx { kernel_name: name.clone(), dtype: dtype.name().into(), m, k, ld, vec: k.is_multiple_of(4) };
    Ok(Prepass {
        source: render("transpose.cu.tera", &ctx)?,
        name,
        launch: Launch { grid: (k.div_ceil(64) as u32, ld.div_ceil(64) as u32, 1), block: (256, 1, 1), smem_bytes: 0 },
        scratch_bytes: 4 * k * ld,
    })
}

/// The fine-grained kernel in its frame: `live(k_row, sparse_col)`.
fn fine_kernel(spec: &SpmmSpec, left: bool, live: &dyn Fn(usize, usize) -> bool) -> Result<Kernel, CodegenError> {
    let (m, k, n) = (spec.m, spec.k, spec.n);
    let (fr, fc) = if left { (n, m) } else { (m, n) };
    let esize = spec.dtype.bytes();
    let f32 = spec.dtype == Dtype::F32;
    // The ring copies D as it is into the fp32 tile: fp32 B (left, 16 bytes at a time), fp32 A
    // (right, transposed one element per copy), or, through the prepass, any dtype's A (right:
    // At is fp32) and 16-bit B (left: widened to fp32). 16-bit D without the prepass comes
    // through registers.
    let ring_ok = if left { !f32 || n % 4 == 0 } else { true };
    let mut t = fine_tiling(spec, fr, fc, spec.blocks.len(), ring_ok)?;
    let prepass = match spec.dense_copy {
        _ if !prepass_applies(spec) => false,
        DenseCopy::Auto => t.async_d && prepass_pays(fc, t, spec.dtype),
        DenseCopy::Transposing => false,
        DenseCopy::Prepass if t.async_d => true,
        // Not reached: `fine_tiling` gives the ring whenever the prepass is asked for (and applies).
        DenseCopy::Prepass => return Err(spec_err("internal: the prepass without the shared-memory ring".into())),
    };
    // The tiling above assumed the ring; 16-bit D without the prepass cannot take it, so it gets
    // the register prefetch's own tiling.
    if !f32 && t.async_d && !prepass {
        t = fine_tiling(spec, fr, fc, spec.blocks.len(), false)?;
    }
    let warps = FINE_THREADS / 32;
    let bm = t.bm();
    // Right, transposing copies: the tile's stride is bm + rpl ≡ rpl (mod 32), a lane's rpl rows
    // adjacent (one vector load per entry): a warp's copies or register stores of (32 / rpl) k ×
    // rpl rows then hit 32 distinct banks. Left and the prepass copy whole 16-byte row runs.
    let a_ld = if left || prepass { bm } else { bm + t.rpl };
    // Global row stride of a k-major D: B's rows (left), At's or Bw's rows (prepass, 16-byte
    // aligned).
    let d_ld = match (left, prepass) {
        (true, false) => n,
        (true, true) => n.next_multiple_of(4),
        (false, _) => m.next_multiple_of(4),
    };
    // Shrink the chunk until the tile, its entries and the column starts fit in shared memory.
    let (ptr, idx, live_n, dead_n, emax, stage_words, region_words, w_words, smem) = loop {
        let table = FineTable { chunk: t.chunk, ld: a_ld, cols: t.nc, warps };
        let (ptr, idx, live_n, dead_n) = fine_tables(k, fc, fr, t, table, live)?;
        let chunks = k.div_ceil(t.chunk);
        let fct = table.positions(fc);
        let mut emax = 8;
        for c in 0..chunks {
            for c0 in (0..fct).step_by(t.nc) {
                let lo = ptr[c * fct + c0];
                let hi = ptr[c * fct + c0 + t.nc];
                // Two pad groups follow the entries: the warps' read-ahead lands on them.
                emax = emax.max(((hi - lo) as usize + 8).next_multiple_of(8));
            }
        }
        // The C tile staged for the coalesced store (right) or the cluster's reduction (left, split).
        let c_tile = if !left {
            bm * (t.nc + 1)
        } else if t.split > 1 {
            bm * t.nc
        } else {
            0
        };
        // The chunk's rows plus the zero row that padded entries read.
        let stage_words = ((t.chunk + 1) * a_ld).next_multiple_of(4);
        let region_words = (if t.async_d { 2 * stage_words } else { stage_words }).max(c_tile).next_multiple_of(4);
        let w_words = (emax * esize).div_ceil(4).next_multiple_of(4);
        // Entry offsets are 32-bit byte offsets.
        let smem = 4 * (region_words + emax + w_words + t.nc + 1);
        if smem <= t.smem_limit() {
            break (ptr, idx, live_n, dead_n, emax, stage_words, region_words, w_words, smem);
        }
        if t.chunk <= FineTiling::min_chunk(t.rpl) {
            return Err(spec_err(format!(
                "the fine kernel's tile ({bm} rows x {} columns) needs {smem} bytes of shared memory (at most {})",
                t.nc,
                t.smem_limit()
            )));
        }
        t.chunk /= 2;
    };
    let chunk = t.chunk;
    let chunks = k.div_ceil(chunk);
    let value_words = spec.values.as_ref().map(|_| idx.len() * esize / 4).unwrap_or(0);
    let literal_words = ptr.len() + idx.len() + value_words;
    let mode = resolve_mode(spec, literal_words);
    let unrolled = mode == Mode::Unrolled;
    let family = if left { Family::FineLeft } else { Family::Fine };
    let prepass = match (prepass, left) {
        (false, _) => None,
        (true, false) => Some(transpose_prepass(spec.dtype, m, k, d_ld)?),
        (true, true) => Some(widen_prepass(spec.dtype, k, n, d_ld)?),
    };
    let mut kernel = Kernel {
        name: format!(
            "spmm_{}_{}_{}{}",
            family.name(),
            spec.dtype.name(),
            if unrolled { "unrolled" } else { "stream" },
            match (&prepass, left) {
                (None, _) => "",
                (Some(_), false) => "_at",
                (Some(_), true) => "_wide",
            }
        ),
        family,
        mode,
        source: String::new(),
        launch: Launch {
            grid: (fc.div_ceil(t.nc) as u32, fr.div_ceil(bm) as u32, t.split as u32),
            block: (FINE_THREADS as u32, 1, 1),
            smem_bytes: smem as u32,
        },
        spec_shape: (m, k, n),
        dtype: spec.dtype,
        block: (1, 1),
        orientation: Orientation::Right,
        ptr,
        idx,
        fine: Some(FineTable { chunk, ld: a_ld, cols: t.nc, warps }),
        live_instances: live_n,
        dead_instances: dead_n,
        literal_words: if unrolled { literal_words } else { 0 },
        values_embedded: unrolled && spec.values.is_some(),
        prepass,
        steps: vec![],
        tma_a: None,
        w_smem_image: false,
    };
    let values = match (&spec.values, kernel.values_embedded) {
        (Some(v), true) => value_bits(spec.dtype, &kernel.pack_weight(v)),
        _ => vec![],
    };
    let ctx = FineCtx {
        head: kernel_head(&kernel.name, spec.dtype, spec),
        literals: kernel_literals(&kernel, kernel.device_idx(), values, if esize == 4 { 32 } else { 16 }, 0),
        left,
        fr,
        fc,
        fct: kernel.fine.map_or(fc, |t| t.positions(fc)),
        rpl: t.rpl,
        bm,
        nc: t.nc,
        cpw: t.nc / warps,
        threads: FINE_THREADS,
        warps,
        chunk,
        chunks,
        a_ld,
        lpt: bm * chunk / (4 * FINE_THREADS),
        async_d: t.async_d,
        stage_words,
        min_blocks: t.per_sm,
        split: t.split,
        emax,
        region_words,
        w_words,
        vec: if left { n % 4 == 0 } else { k % 4 == 0 },
        pipelined: runs_are_long(spec.blocks.len(), k, fc, chunk),
        prepass: kernel.prepass.is_some(),
        d_ld,
    };
    kernel.source = render("spmm_fine.cu.tera", &ctx)?;
    Ok(kernel)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `spec` on the SIMT fine kernels (the tests of their tables and tiles; `Engine::Auto`
    /// may take the tensor cores for fp32).
    fn simt(mut spec: SpmmSpec) -> SpmmSpec {
        spec.engine = Engine::Simt;
        spec
    }
    use crate::codegen::Tile;

    /// An fp32 spec on the SIMT kernels (auto takes 3xTF32, see `spmm_tf32.rs`).
    fn spec(blocks: Vec<(usize, usize)>) -> SpmmSpec {
        let mut s = SpmmSpec::new(64, 64, 96, Dtype::F32, (32, 32), blocks);
        s.engine = Engine::Simt;
        s
    }

    #[test]
    fn tables_follow_block_columns_and_pack_weight_matches_them() {
        let k = specialize(&spec(vec![(1, 2), (0, 0), (1, 0)])).unwrap();
        assert_eq!(k.family, Family::BlockSimt);
        assert_eq!(k.ptr, vec![0, 2, 2, 3]);
        assert_eq!(k.idx, vec![0, 1, 1]);
        assert_eq!((k.live_instances, k.dead_instances), (3, 3));
        let w: Vec<f32> = (0..64 * 96).map(|i| i as f32).collect();
        let packed = k.pack_weight(&w);
        assert_eq!(packed.len(), 3 * 32 * 32);
        // Second packed block = block (1, 0): row 32, column 0 first.
        assert_eq!(packed[1024], w[32 * 96]);
        assert_eq!(packed[1024 + 33], w[33 * 96 + 1]);
        assert_eq!(k.flops(), 2.0 * 64.0 * 3.0 * 1024.0);
    }

    #[test]
    fn auto_mode_unrolls_under_the_budget_and_streams_above_it() {
        let mut s = spec(vec![(0, 0), (1, 1)]);
        assert_eq!(specialize(&s).unwrap().mode, Mode::Unrolled);
        s.code_budget = 3;
        let k = specialize(&s).unwrap();
        assert_eq!(k.mode, Mode::IndexStream);
        assert!(!k.source.contains("IDX_LIT[]") && k.source.contains("const int* idx = idx_arg;"));
        s.mode = Mode::Unrolled;
        assert!(specialize(&s).unwrap().source.contains("IDX_LIT[] = { 0,1, 0 }"));
    }

    #[test]
    fn every_block_present_selects_the_dense_kernel() {
        let all = (0..2).flat_map(|r| (0..3).map(move |c| (r, c))).collect();
        let mut s = spec(all);
        assert_eq!(specialize(&s).unwrap().family, Family::Dense);
        s.engine = Engine::Auto;
        let tf = specialize(&s).unwrap();
        assert_eq!(tf.family, Family::BlockTf32);
        assert!(tf.name.starts_with("spmm_dense_tf32x3") && tf.ptr.len() == 4);
        let mut s = spec(vec![(0, 0)]);
        s.dtype = Dtype::F16;
        s.engine = Engine::Auto;
        assert_eq!(specialize(&s).unwrap().family, Family::BlockWgmma);
        s.engine = Engine::MmaSync;
        assert_eq!(specialize(&s).unwrap().family, Family::BlockMma);
        s.block = (1, 1);
        assert_eq!(specialize(&s).unwrap().family, Family::Fine);
    }

    /// The left orientation's tables and packed weight, read the way the kernels read them
    /// (a CTA per block row of W, its live block columns as k-blocks, each packed block
    /// `Wᵀ`-row-major), give `W·B`.
    #[test]
    fn left_tables_and_packed_weight_compute_w_times_b() {
        let (m, k, n) = (64, 96, 16);
        for (dtype, block, blocks) in [
            (Dtype::F32, (32, 32), vec![(0, 1), (1, 0), (1, 2)]),
            (Dtype::F16, (16, 32), vec![(3, 2), (0, 0), (2, 1), (1, 1)]),
            (Dtype::F32, (32, 16), (0..2).flat_map(|r| (0..6).map(move |c| (r, c))).collect()),
        ] {
            let (bh, bw) = block;
            let mut s = SpmmSpec::new(m, k, n, dtype, block, blocks.clone());
            s.orientation = Orientation::Left;
            let kern = specialize(&s).unwrap();
            assert_eq!(kern.orientation, Orientation::Left);
            assert!(kern.name.ends_with("_left"), "{}", kern.name);
            assert!(kern.source.contains("Left orientation"));
            assert_eq!(kern.launch.grid.0 as usize, m / bh);
            let w: Vec<f32> = (0..m * k)
                .map(|i| if blocks.contains(&(i / k / bh, (i % k) / bw)) { (i % 7) as f32 - 3.0 } else { 0.0 })
                .collect();
            let b: Vec<f32> = (0..k * n).map(|i| (i % 5) as f32 - 2.0).collect();
            let packed = kern.pack_weight(&w);
            assert_eq!(packed.len(), blocks.len() * bh * bw);
            let mut got = vec![0.0f32; m * n];
            for jb in 0..kern.ptr.len() - 1 {
                for e in kern.ptr[jb] as usize..kern.ptr[jb + 1] as usize {
                    let kb = kern.idx[e] as usize;
                    for r in 0..bw {
                        for c in 0..bh {
                            let v = packed[e * bh * bw + r * bh + c];
                            for i in 0..n {
                                got[(jb * bh + c) * n + i] += v * b[(kb * bw + r) * n + i];
                            }
                        }
                    }
                }
            }
            let mut want = vec![0.0f32; m * n];
            for r in 0..m {
                for kk in 0..k {
                    for i in 0..n {
                        want[r * n + i] += w[r * k + kk] * b[kk * n + i];
                    }
                }
            }
            assert_eq!(got, want, "{block:?}");
            assert_eq!(kern.flops(), 2.0 * n as f64 * (blocks.len() * bh * bw) as f64);
        }
    }

    #[test]
    fn uniform_blocks_fold_to_one_literal_each() {
        let blocks = vec![(0, 0), (1, 1), (0, 2), (3, 2)];
        let mut s = SpmmSpec::new(64, 128, 96, Dtype::F32, (32, 32), blocks.clone());
        let mut w = vec![0.0f32; 128 * 96];
        for (i, &(r, c)) in blocks.iter().enumerate() {
            for rr in 0..32 {
                for cc in 0..32 {
                    w[(r * 32 + rr) * 96 + c * 32 + cc] = 0.0625 * (i + 1) as f32;
                }
            }
        }
        s.values = Some(w.clone());
        let k = specialize(&s).unwrap();
        assert!(k.name.ends_with("_folded") && k.values_embedded, "{}", k.name);
        assert!(k.source.contains("BLOCK_VAL") && !k.source.contains("W_LIT[]"));
        // Block column order: (0,0); (1,1); (0,2), (3,2).
        assert!(k.source.contains("6.25e-2f,1.25e-1f,1.875e-1f,2.5e-1f,"), "{}", k.source);
        // One element off breaks that block's uniformity: the others still fold, it keeps its
        // W tile (NaN marks it in the literal table).
        w[(3 * 32 + 5) * 96 + 2 * 32 + 7] = 1.0;
        s.values = Some(w.clone());
        let k = specialize(&s).unwrap();
        assert!(k.name.ends_with("_partfolded") && k.source.contains("W_LIT[]"), "{}", k.name);
        let bits = [0.0625f32, 0.125, 0.1875].map(|v| format!("{}u,", v.to_bits())).concat() + "2147483647u,";
        assert!(k.source.contains(&bits), "{}", k.source);
        // No uniform block left: the general kernel.
        for (i, &(r, c)) in blocks.iter().enumerate() {
            w[(r * 32 + i) * 96 + c * 32] = 2.0;
        }
        s.values = Some(w.clone());
        let k = specialize(&s).unwrap();
        assert!(!k.name.contains("folded") && k.source.contains("W_LIT[]") && !k.source.contains("BLOCK_VAL"));
        // fp16 (tensor cores) and index-stream kernels do not fold.
        for (i, &(r, c)) in blocks.iter().enumerate() {
            w[(r * 32 + i) * 96 + c * 32] = 0.0625 * (i + 1) as f32;
        }
        w[(3 * 32 + 5) * 96 + 2 * 32 + 7] = 0.25;
        s.values = Some(w);
        s.mode = Mode::IndexStream;
        assert!(!specialize(&s).unwrap().name.contains("folded"));
        s.mode = Mode::Auto;
        s.dtype = Dtype::F16;
        assert!(!specialize(&s).unwrap().name.contains("folded"));
    }

    #[test]
    fn fine_left_tables_are_rows_of_w_and_pack_weight_follows_them() {
        let mut s = SpmmSpec::new(4, 8, 12, Dtype::F32, (1, 1), vec![(2, 7), (0, 3), (2, 1), (3, 0)]);
        s.orientation = Orientation::Left;
        let k = specialize(&s).unwrap();
        assert_eq!(k.family, Family::FineLeft);
        // One 32-row tile of W over 16 warps: warp j owns rows j and j + 16, so the runs are in
        // the order of rows 0, 16, 1, 17, 2, 18, 3, ... (rows past 3 empty); each run padded to a
        // group of four; entries are k inside the chunk times the tile's row stride, pads point
        // at the zero row (k = chunk).
        let t = k.fine.unwrap();
        assert_eq!((0..8).map(|p| t.column(p)).collect::<Vec<_>>(), vec![0, 16, 1, 17, 2, 18, 3, 19]);
        assert_eq!(k.ptr.len(), 33);
        assert_eq!(k.ptr[..9], [0, 4, 4, 4, 4, 8, 8, 12, 12]);
        assert!(k.ptr[9..].iter().all(|&p| p == 12));
        let (ld, pad) = (t.ld as i32, (t.chunk * t.ld) as i32);
        assert_eq!(k.idx, vec![3 * ld, pad, pad, pad, ld, 7 * ld, pad, pad, 0, pad, pad, pad]);
        let w: Vec<f32> = (0..4 * 8).map(|i| i as f32).collect();
        let z = 0.0;
        assert_eq!(k.pack_weight(&w), vec![3.0, z, z, z, 17.0, 23.0, z, z, 24.0, z, z, z]);
        assert_eq!(k.flops(), 2.0 * 12.0 * 4.0);
        assert!(k.source.contains("C[4,12] = epilogue(W[4,8] · B[8,12])"));
        let mut s3 = s.clone();
        s3.blocks.pop();
        let k3 = specialize(&s3).unwrap();
        assert_eq!((k3.idx.len(), k3.live_instances), (8, 3));
        assert_eq!(k3.pack_weight(&w), vec![3.0, z, z, z, 17.0, 23.0, z, z]);
    }

    /// A right-orientation fp32 fine spec with every 20th element of the weight kept.
    fn fine_spec(m: usize, k: usize, n: usize, dtype: Dtype) -> SpmmSpec {
        let blocks = (0..k * n).filter(|i| i % 20 == 7).map(|i| (i / n, i % n)).collect();
        simt(SpmmSpec::new(m, k, n, dtype, (1, 1), blocks))
    }

    #[test]
    fn the_transpose_prepass_runs_from_eight_column_tiles_or_when_asked() {
        // 5% kept, 256 × 256 tiles: 2048 columns are 8 tiles (prepass), 1024 are 4 (none).
        let k = specialize(&fine_spec(256, 256, 2048, Dtype::F32)).unwrap();
        let pre = k.prepass.as_ref().expect("auto takes the prepass at 8 column tiles");
        assert_eq!((pre.scratch_bytes, pre.launch.grid), (4 * 256 * 256, (4, 4, 1)));
        assert!(k.name.ends_with("_at") && k.source.contains("#define D_ROW 256"));
        let k = specialize(&fine_spec(256, 256, 1024, Dtype::F32)).unwrap();
        assert!(k.prepass.is_none() && !k.source.contains("D_ROW"));
        // Asked for: ragged M pads At's rows to 4; asked off: none.
        let mut s = fine_spec(77, 256, 1024, Dtype::F32);
        s.dense_copy = DenseCopy::Prepass;
        let k = specialize(&s).unwrap();
        assert_eq!(k.prepass.as_ref().map(|p| p.scratch_bytes), Some(4 * 256 * 80));
        assert_eq!(k.fine.unwrap().ld, k.fine.unwrap().ld / 32 * 32, "At's tiles need no bank padding");
        let mut s = fine_spec(256, 256, 2048, Dtype::F32);
        s.dense_copy = DenseCopy::Transposing;
        assert!(specialize(&s).unwrap().prepass.is_none());
        // fp16: the prepass widens A to an fp32 At (4 bytes per element) and feeds the ring;
        // without it (asked off, or too few column tiles) the tiles come through registers.
        let mut s = fine_spec(256, 256, 2048, Dtype::F16);
        let k = specialize(&s).unwrap();
        assert_eq!(k.prepass.as_ref().map(|p| p.scratch_bytes), Some(4 * 256 * 256));
        assert!(k.source.contains("const float* __restrict__ D,") && k.source.contains("STAGE_WORDS"));
        s.dense_copy = DenseCopy::Transposing;
        let k = specialize(&s).unwrap();
        assert!(k.prepass.is_none() && !k.source.contains("STAGE_WORDS"), "fp16 without the prepass: registers");
        // 16-bit A takes it from 4 column tiles (the register path loses there), not at 2.
        let k = specialize(&fine_spec(256, 256, 1024, Dtype::Bf16)).unwrap();
        assert!(k.prepass.is_some());
        let k = specialize(&fine_spec(256, 256, 512, Dtype::Bf16)).unwrap();
        assert!(k.prepass.is_none() && !k.source.contains("STAGE_WORDS"));
        // Asked for, it also takes tilings whose very sparse tiles would prefetch through
        // registers (32 × 512 tiles leaving SMs idle) and 2-CTAs-per-SM tiles.
        let mut s = fine_spec(256, 256, 2048, Dtype::F32);
        s.blocks.truncate(s.blocks.len() / 4);
        s.tile = Some(crate::codegen::Tile { per_sm: 2, split: 1, ..crate::codegen::Tile::new(32, 4) });
        s.dense_copy = DenseCopy::Prepass;
        let k = specialize(&s).unwrap();
        assert!(k.prepass.is_some() && k.source.contains("STAGE_WORDS"));
        // The left orientation on 16-bit B widens it (Bw, N rounded up to 4) from 4 column tiles.
        let mut s = fine_spec(256, 256, 1026, Dtype::F16);
        s.orientation = Orientation::Left;
        s.m = 1024;
        s.n = 1026;
        s.blocks = (0..1024 * 256).filter(|i| i % 20 == 7).map(|i| (i / 256, i % 256)).collect();
        let k = specialize(&s).unwrap();
        let pre = k.prepass.as_ref().expect("16-bit B is widened");
        assert!(pre.name.starts_with("widen_f16") && k.name.ends_with("_wide"));
        assert_eq!(pre.scratch_bytes, 4 * 256 * 1028);
        assert!(k.source.contains("#define D_ROW 1028") && k.source.contains("const float* __restrict__ D,"));
        // The left orientation on fp32 B reads B's rows as they are: no prepass whatever is asked.
        let mut s = fine_spec(256, 256, 2048, Dtype::F32);
        s.orientation = Orientation::Left;
        s.blocks = s
            .blocks
            .iter()
            .map(|&(r, c)| (c % 256, r))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        s.dense_copy = DenseCopy::Prepass;
        assert!(specialize(&s).unwrap().prepass.is_none());
    }

    #[test]
    fn fine_tiling_follows_the_override_and_shrinks_chunks_to_fit() {
        let mut s = SpmmSpec::new(300, 512, 512, Dtype::F32, (1, 1), (0..512).map(|i| (i, i)).collect());
        s.tile = Some(Tile::new(128, 4));
        let k = specialize(&s).unwrap();
        assert_eq!(k.launch.grid, (4, 3, 1));
        assert!(k.source.contains("#define RPL 4") && k.source.contains("#define NC 128"));
        // Every element live: the entries of a 256-column tile do not fit one 256-deep chunk.
        let all: Vec<(usize, usize)> = (0..512).flat_map(|r| (0..512).map(move |c| (r, c))).collect();
        let mut d = SpmmSpec::new(64, 512, 512, Dtype::F32, (1, 1), all);
        d.tile = Some(Tile::new(64, 8));
        let k = specialize(&d).unwrap();
        let chunk = k.fine.unwrap().chunk;
        assert!(k.launch.smem_bytes <= 227 * 1024 && chunk < 256, "chunk {chunk} smem {}", k.launch.smem_bytes);
    }

    #[test]
    fn fine_right_tables_are_columns_of_w_and_pack_weight_follows_them() {
        // W is K × N = 8 × 3; column 0 empty, column 1 holds k = 2 and 7, column 2 holds k = 0.
        let k = specialize(&simt(SpmmSpec::new(4, 8, 3, Dtype::F32, (1, 1), vec![(2, 1), (7, 1), (0, 2)]))).unwrap();
        assert_eq!(k.family, Family::Fine);
        // Run positions 0, 2, 4 hold columns 0, 1, 2 (warp j owns columns j and j + 16).
        assert_eq!(k.ptr[..6], [0, 0, 0, 4, 4, 8]);
        let t = k.fine.unwrap();
        assert_eq!((t.k_in_chunk(k.idx[0]), t.k_in_chunk(k.idx[1]), t.k_in_chunk(k.idx[2])), (Some(2), Some(7), None));
        let w: Vec<f32> = (0..8 * 3).map(|i| i as f32).collect();
        assert_eq!(k.pack_weight(&w), vec![7.0, 22.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0]);
    }

    #[test]
    fn fine_entry_loop_follows_the_run_length() {
        // 1% kept, 512-deep chunks: ~5 live entries per (chunk, column) run, the simple loop;
        // half kept: the software-pipelined one.
        let pattern = |keep: usize| -> Vec<(usize, usize)> {
            (0..512)
                .flat_map(|r| (0..512).map(move |c| (r, c)))
                .filter(|&(r, c)| (r * 31 + c * 17) % 100 < keep)
                .collect()
        };
        let sparse = specialize(&simt(SpmmSpec::new(256, 512, 512, Dtype::F32, (1, 1), pattern(1)))).unwrap();
        let dense = specialize(&simt(SpmmSpec::new(256, 512, 512, Dtype::F32, (1, 1), pattern(50)))).unwrap();
        assert_eq!(sparse.family, Family::Fine);
        assert!(sparse.source.contains("Short runs") && !sparse.source.contains("DGroup dc, dn"));
        assert!(dense.source.contains("DGroup dc, dn") && !dense.source.contains("Short runs"));
        assert!(!runs_are_long(5, 512, 512, 512) && runs_are_long(512 * 512 / 20, 512, 512, 512));
    }

    #[test]
    fn fine_offsets_go_to_the_device_in_bytes() {
        let mut s = SpmmSpec::new(4, 8, 12, Dtype::F32, (1, 1), vec![(2, 7), (0, 3), (2, 1), (3, 0)]);
        s.orientation = Orientation::Left;
        let k = specialize(&s).unwrap();
        let t = k.fine.unwrap();
        let d = k.device_idx();
        assert_eq!(d.len(), k.idx.len());
        for (&dev, &e) in d.iter().zip(&k.idx) {
            assert_eq!(dev, 4 * e);
            // Live entries address a row of the tile, padding the zero row after the chunk.
            assert_eq!(dev as usize % (4 * t.ld), 0);
            assert!(dev as usize <= 4 * t.chunk * t.ld);
        }
        // The padding entries (3 per run here) read the zero row.
        assert_eq!(d.iter().filter(|&&v| v as usize == 4 * t.chunk * t.ld).count(), d.len() - 4);
        // Block kernels take their table as it is.
        let b = specialize(&spec(vec![(1, 2), (0, 0)])).unwrap();
        assert_eq!(b.device_idx(), b.idx);
    }

    #[test]
    fn fine_k_split_makes_a_cluster_and_bad_tiles_are_errors() {
        let pattern: Vec<(usize, usize)> = (0..1000).map(|i| (i % 700, (i * 7) % 300)).collect();
        let mut s = SpmmSpec::new(200, 700, 300, Dtype::F32, (1, 1), pattern);
        s.blocks.sort();
        s.blocks.dedup();
        s.tile = Some(Tile { per_sm: 1, split: 2, ..Tile::new(64, 4) });
        let k = specialize(&s).unwrap();
        assert_eq!(k.launch.grid, (3, 4, 2));
        assert!(k.source.contains("__cluster_dims__(1, 1, 2)") && k.source.contains("barrier.cluster.arrive.release"));
        for (tile, needle) in [
            (Tile { per_sm: 1, split: 3, ..Tile::new(64, 4) }, "1, 2 or 4 CTAs"),
            (Tile { per_sm: 2, split: 1, ..Tile::new(64, 2) }, "2 fine CTAs per SM"),
            (Tile { per_sm: 2, split: 1, ..Tile::new(32, 16) }, "2 fine CTAs per SM"),
        ] {
            s.tile = Some(tile);
            let e = specialize(&s).unwrap_err().to_string();
            assert!(e.contains(needle), "{tile:?}: {e}");
        }
    }

    /// fp32 fine kernels stage D through the cp.async ring; sparse ones take the tile measured
    /// in session 5 (64 × 256 from 2% kept, split over 2 CTAs when the tiles leave SMs idle, or,
    /// left, 64 × 128 unsplit when those are enough (session 7);
    /// 32 × 512 under 2%, or the register prefetch when those tiles would leave SMs idle); fp16
    /// keeps the register prefetch and one row per lane.
    #[test]
    fn fine_ring_and_its_sparse_tiles() {
        // Every column holds `per_col` entries spread over K (a deterministic scatter).
        let pattern = |k: usize, n: usize, per_col: usize| -> Vec<(usize, usize)> {
            let mut b: Vec<(usize, usize)> =
                (0..n).flat_map(|c| (0..per_col).map(move |j| ((c * 7 + j * (k / per_col)) % k, c))).collect();
            b.sort();
            b.dedup();
            b
        };
        let tile = |s: &SpmmSpec| {
            let k = specialize(&simt(s.clone())).unwrap();
            let src = &k.source;
            let def = |name: &str| -> usize {
                let at = src.find(&format!("#define {name} ")).unwrap() + name.len() + 9;
                src[at..].split_whitespace().next().unwrap().parse().unwrap()
            };
            (def("BM"), def("NC"), k.launch.grid.2, src.contains("#define STAGE_WORDS"), def("D_LD"))
        };
        // 5% kept at 1024³: 16 × 4 tiles of 64 × 256 leave SMs idle, so K splits over 2.
        let s = SpmmSpec::new(1024, 1024, 1024, Dtype::F32, (1, 1), pattern(1024, 1024, 51));
        // The right orientation transposes A into a tile of stride 66 ≡ 2 (mod 32): a warp's
        // copies of 16 k × 2 rows hit 32 banks.
        assert_eq!(tile(&s), (64, 256, 2, true, 66));
        // The left orientation streams B's rows as they are, in 64 × 128 tiles (128 of them,
        // no split).
        let mut l = s.clone();
        l.orientation = Orientation::Left;
        assert_eq!(tile(&l), (64, 128, 1, true, 64));
        // 1% kept at 2048³: 32 × 512, 64 × 4 tiles, no split.
        let s = SpmmSpec::new(2048, 2048, 2048, Dtype::F32, (1, 1), pattern(2048, 2048, 20));
        assert_eq!(tile(&s), (32, 512, 1, true, 33));
        // 1% kept at 1024³: 32 × 512 would leave SMs idle, so the register prefetch stays.
        let s = SpmmSpec::new(1024, 1024, 1024, Dtype::F32, (1, 1), pattern(1024, 1024, 10));
        let (bm, _, _, ring, _) = tile(&s);
        assert_eq!((bm, ring), (32, false));
        // fp16 at 4 column tiles: the prepass widens A into an fp32 At, which the ring takes in
        // the fp32 tiling (64 × 256, stride 64: no transposing copies).
        let mut h = SpmmSpec::new(1024, 1024, 1024, Dtype::F16, (1, 1), pattern(1024, 1024, 51));
        assert_eq!(tile(&h), (64, 256, 2, true, 64));
        // Without it (asked): the register prefetch, one row per lane.
        h.dense_copy = DenseCopy::Transposing;
        let (bm, _, _, ring, _) = tile(&h);
        assert_eq!((bm, ring), (32, false));
    }

    #[test]
    fn bad_specs_are_errors_not_panics() {
        let cases: Vec<(SpmmSpec, &str)> = vec![
            ({ spec(vec![(2, 0)]) }, "outside"),
            ({ spec(vec![(0, 0), (0, 0)]) }, "twice"),
            ({ SpmmSpec::new(64, 60, 96, Dtype::F32, (32, 32), vec![]) }, "does not tile"),
            (
                {
                    let mut s = SpmmSpec::new(64, 64, 12, Dtype::F32, (32, 32), vec![]);
                    s.orientation = Orientation::Left;
                    s
                },
                "multiple of 8",
            ),
            (
                {
                    let mut s = SpmmSpec::new(64, 96, 64, Dtype::F16, (128, 16), vec![]);
                    s.orientation = Orientation::Left;
                    s
                },
                "left orientation",
            ),
            (
                {
                    let mut s = SpmmSpec::new(64, 96, 64, Dtype::F32, (32, 32), vec![(0, 3)]);
                    s.orientation = Orientation::Left;
                    s
                },
                "outside",
            ),
            (
                {
                    let mut s = spec(vec![]);
                    s.tile = Some(Tile::new(100, 3));
                    s
                },
                "tiles",
            ),
            (
                {
                    let mut s = spec(vec![]);
                    s.values = Some(vec![0.0; 3]);
                    s
                },
                "values hold",
            ),
            ({ SpmmSpec::new(0, 64, 96, Dtype::F32, (32, 32), vec![]) }, "empty"),
            (
                {
                    let mut s = SpmmSpec::new(64, 64, 96, Dtype::F32, (1, 1), vec![]);
                    s.tile = Some(Tile::new(48, 2));
                    s
                },
                "fine tiles",
            ),
            (
                {
                    let mut s = SpmmSpec::new(8, 16, 96, Dtype::F32, (1, 1), vec![(8, 0)]);
                    s.orientation = Orientation::Left;
                    s
                },
                "outside the 8x16 weight",
            ),
        ];
        for (s, want) in cases {
            let e = match specialize(&s) {
                Ok(_) => panic!("spec accepted, expected an error mentioning {want:?}"),
                Err(e) => e.to_string(),
            };
            assert!(e.contains(want), "{e:?} should mention {want:?}");
        }
    }
}
