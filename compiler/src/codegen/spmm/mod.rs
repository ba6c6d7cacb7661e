//! Sparse × dense matmul: family choice, loop nest, dismantle, tables and rendering.
//!
//! [`specialize`] dispatches: int8 to `spmm::int8`; element-sparse weights (1×1 blocks) to the
//! 3xTF32 fine kernel, the dismantled kernel or the fine loop kernel here, as their rules say;
//! skinny dense 16-bit products to the streaming kernel (`stream`); a spec marked 2:4 to the
//! sparse tensor-core kernel (`two_four`); other blocks to the wgmma family, the 3xTF32 block kernel, else the block kernels here (fp32
//! SIMT, fp16/bf16 mma.sync; [`Family::Dense`] when every block is live). Tile heuristics and
//! the choice between literal tables and an index stream (under `SpmmSpec::code_budget`) are
//! made here; templates only loop and branch. The left orientation (`C = W·B`) of the block and
//! dense kernels is the transposed right problem (`specialize_left`). What `Kernel` asks of a
//! family after that (how its weight is packed, its work) is the family's row in the family
//! table (`families.rs`), defined in the family's module as its `OPS`.
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

mod block;
mod dismantled;
mod families;
pub mod few_rows;
mod fine;
pub(crate) mod fine_tf32;
pub(crate) mod int8;
pub(crate) mod kernel;
pub mod row_scatter;
pub(crate) mod shared;
pub(crate) mod stream;
#[cfg(test)]
mod tests;
pub(crate) mod tf32;
pub(crate) mod two_four;
pub(crate) mod wgmma;

use crate::codegen::{CodegenError, Dtype, Engine, Orientation, SpmmSpec};
use block::block;
use fine::*;
pub use kernel::{Family, FineTable, Kernel, Launch, Prepass, TmaBox};
use shared::*;

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
    if spec.row_norm.any() {
        // Only the warp-specialized wgmma kernel does the LayerNorm work.
        let tensor = matches!(spec.dtype, Dtype::F16 | Dtype::Bf16);
        if spec.two_four || spec.orientation != Orientation::Right || !tensor || spec.live_rows || spec.accumulate {
            return Err(spec_err(
                "LayerNorm work around the epilogue is built for 16-bit right-orientation block kernels that write C"
                    .into(),
            ));
        }
        if !matches!(spec.engine, Engine::Auto | Engine::WgmmaWs)
            || !crate::kernel_choice::block_wgmma::supports(bh, bw)
        {
            return Err(spec_err(format!(
                "LayerNorm work around the epilogue needs the warp-specialized wgmma kernel, not {bh}x{bw} blocks"
            )));
        }
    }
    if spec.two_four {
        return two_four::specialize(spec);
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
    if (bh, bw) == (1, 1) && spec.dtype != Dtype::I8 {
        // The 3xTF32 fine kernel reads the element list only: a weight too large for a
        // dense grid (a 65,536² HPEC layer) is specialized without one.
        check_elements(&spec.blocks, k, n)?;
        if let Some(kernel) = fine_tf32::try_specialize(spec)? {
            return Ok(kernel);
        }
    }
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
        return int8::block_int8(spec, &live, dense);
    }
    if (bh, bw) == (1, 1) {
        if !spec.live_rows && crate::kernel_choice::dismantled::applies(spec)? {
            return dismantled::specialize(spec, &live);
        }
        return fine(spec, &live);
    }
    if dense
        && spec.engine == Engine::Auto
        && !spec.live_rows
        && !spec.accumulate
        && !spec.row_norm.any()
        && crate::kernel_choice::stream::auto_takes(spec.dtype, spec.orientation, k, n)
    {
        return stream::specialize(spec);
    }
    if let Some(kernel) = wgmma::try_specialize(spec, &live, dense)? {
        return Ok(kernel);
    }
    if let Some(kernel) = tf32::try_specialize(spec, &live, dense)? {
        return Ok(kernel);
    }
    let kernel = block(spec, &live, dense, false)?;
    if spec.live_rows && !matches!(kernel.family, Family::BlockSimt | Family::Dense) {
        return Err(spec_err(format!("live rows are not built into the {} kernel", kernel.family.name())));
    }
    Ok(kernel)
}

/// Every element of a fine spec inside the `k × n` weight and listed once (sorted keys, no
/// grid of the weight's size).
fn check_elements(blocks: &[(usize, usize)], k: usize, n: usize) -> Result<(), CodegenError> {
    let mut keys = Vec::with_capacity(blocks.len());
    for &(r, c) in blocks {
        if r >= k || c >= n {
            return Err(spec_err(format!("block ({r}, {c}) lies outside the {k}x{n} block grid")));
        }
        keys.push((r as u64) << 32 | c as u64);
    }
    keys.sort_unstable();
    match keys.windows(2).find(|p| p[0] == p[1]) {
        Some(p) => Err(spec_err(format!("block ({}, {}) is listed twice", p[0] >> 32, p[0] & 0xffff_ffff))),
        None => Ok(()),
    }
}

/// Caps the row tiles of `kernel`, specialized from `spec`, when `spec` asks for
/// [`SpmmSpec::live_rows`] and the kernel's template strides over them (the 3xTF32 block and
/// fine kernels, the fp32 block kernel): its grid's y holds at most twice the CTAs that
/// `sm_count` multiprocessors keep resident (estimated from the kernel's threads and shared
/// memory), and each CTA walks every `grid.y`-th live row tile. A batch whose rows mostly died
/// then launches a grid sized for the GPU, not thousands of CTAs that find nothing to do.
/// Returns whether the kernel strides (other families keep one CTA per row tile).
pub fn stride_live_rows(kernel: &mut Kernel, spec: &SpmmSpec, sm_count: usize) -> bool {
    if !spec.live_rows || !matches!(kernel.family, Family::BlockTf32 | Family::FineTf32 | Family::BlockSimt) {
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
