//! The fine loop kernel ([`Family::Fine`], [`Family::FineLeft`]): tiling, tables and the
//! prepasses (see the module docs of `codegen::spmm`).

use super::kernel::*;
use super::shared::*;
use crate::codegen::loopnest::{Level, LoopNest};
use crate::codegen::render::{render, FineCtx, TransposeCtx, WidenCtx};
use crate::codegen::{CodegenError, DenseCopy, Dtype, Engine, Mode, Orientation, SpmmSpec};
use crate::sparse::WeightLookup;

/// Threads per CTA of the fine-grained kernels (16 warps: enough to hide shared-memory latency
/// with one CTA per SM).
pub(crate) const FINE_THREADS: usize = 512;

/// A tiling of the fine-grained kernel in its frame (dense rows × sparse columns).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct FineTiling {
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
pub(crate) fn fine_estimate(fr: usize, fc: usize, k: usize, nnz: usize, esize: usize, t: FineTiling) -> f64 {
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
pub(crate) fn fine_tiling(
    spec: &SpmmSpec,
    fr: usize,
    fc: usize,
    nnz: usize,
    ring_ok: bool,
) -> Result<FineTiling, CodegenError> {
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
pub(crate) fn fine_tables(
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

/// The SIMT loop kernel of a right-orientation spec the 3xTF32 fine kernel and the dismantled
/// kernel declined (the dispatcher asks them first).
pub(crate) fn fine(spec: &SpmmSpec, live: &[bool]) -> Result<Kernel, CodegenError> {
    let n = spec.n;
    fine_kernel(spec, false, &|row, col| live[row * n + col])
}

/// The left orientation, `C[M,N] = W[M,K] · B[K,N]` with W element-sparse: the fine kernel in
/// the transposed frame (dense rows = the N columns of B and C, sparse columns = the M rows of
/// W). `spec.blocks` are `(m, k)` coordinates of W's nonzeros and `spec.values` is W row-major
/// `M × K`; the bias, as in the right orientation, is indexed by the output column.
pub(crate) fn fine_left(spec: &SpmmSpec) -> Result<Kernel, CodegenError> {
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
pub(crate) fn runs_are_long(nnz: usize, k: usize, fc: usize, chunk: usize) -> bool {
    nnz as f64 / (k * fc).max(1) as f64 * chunk as f64 >= 20.0
}

/// Whether a fine kernel's dense operand can go through a prepass: A of the right orientation
/// (transposed), or 16-bit B of the left (widened); fp32 B is copied as it is.
pub(crate) fn prepass_applies(spec: &SpmmSpec) -> bool {
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
pub(crate) fn prepass_pays(fc: usize, t: FineTiling, dtype: Dtype) -> bool {
    fc.div_ceil(t.nc) >= if dtype == Dtype::F32 { 8 } else { 4 }
}

/// The widening prepass of a left-orientation fine kernel over 16-bit B (`k × n`): the fp32 Bw
/// (`k × ld`).
pub(crate) fn widen_prepass(dtype: Dtype, k: usize, n: usize, ld: usize) -> Result<Prepass, CodegenError> {
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
pub(crate) fn transpose_prepass(dtype: Dtype, m: usize, k: usize, ld: usize) -> Result<Prepass, CodegenError> {
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
pub(crate) fn fine_kernel(
    spec: &SpmmSpec,
    left: bool,
    live: &dyn Fn(usize, usize) -> bool,
) -> Result<Kernel, CodegenError> {
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
    let name = format!(
        "spmm_{}_{}_{}{}",
        family.name(),
        spec.dtype.name(),
        if unrolled { "unrolled" } else { "stream" },
        match (&prepass, left) {
            (None, _) => "",
            (Some(_), false) => "_at",
            (Some(_), true) => "_wide",
        }
    );
    let launch = Launch {
        grid: (fc.div_ceil(t.nc) as u32, fr.div_ceil(bm) as u32, t.split as u32),
        block: (FINE_THREADS as u32, 1, 1),
        smem_bytes: smem as u32,
    };
    let mut kernel = Kernel {
        ptr,
        idx,
        fine: Some(FineTable { chunk, ld: a_ld, cols: t.nc, warps }),
        live_instances: live_n,
        dead_instances: dead_n,
        literal_words: if unrolled { literal_words } else { 0 },
        values_embedded: unrolled && spec.values.is_some(),
        prepass,
        ..Kernel::new(name, family, mode, launch, (m, k, n), spec.dtype, (1, 1))
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

/// The fine loop kernel's entry in the family table (right orientation).
pub(crate) const FINE_OPS: FamilyOps = FamilyOps { pack: packer!(pack), flops: entry_flops };

/// The fine loop kernel's entry in the family table (left orientation: `C = W·B`, the dense
/// operand's other dimension is N).
pub(crate) const FINE_LEFT_OPS: FamilyOps = FamilyOps {
    pack: packer!(pack),
    flops: |kernel, _| 2.0 * kernel.spec_shape.2 as f64 * kernel.live_instances as f64,
};

/// One value per entry, runs in (chunk, sparse column) order. Right: column `col` of W
/// (`K × N`); left: row `col` of W (`M × K`, row-major).
fn pack<T: Copy + Default, W: WeightLookup<T> + ?Sized>(kernel: &Kernel, w: &W) -> Vec<T> {
    let t = kernel.fine.expect("fine kernels carry their table layout");
    let (m, k, n) = kernel.spec_shape;
    let left = kernel.family == Family::FineLeft;
    if left {
        assert_eq!(w.numel(), m * k, "weight has the wrong size");
    }
    let fct = t.positions(if left { m } else { n });
    let at = |row: usize, col: usize| if left { col * k + row } else { row * n + col };
    let mut out = Vec::with_capacity(kernel.idx.len());
    for s in 0..kernel.ptr.len() - 1 {
        let (c, col) = (s / fct, t.column(s % fct));
        for e in kernel.ptr[s]..kernel.ptr[s + 1] {
            out.push(match t.k_in_chunk(kernel.idx[e as usize]) {
                Some(kk) => w.at(at(c * t.chunk + kk, col)),
                None => T::default(),
            });
        }
    }
    out.resize(kernel.idx.len(), T::default());
    out
}
