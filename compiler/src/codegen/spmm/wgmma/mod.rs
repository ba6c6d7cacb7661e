//! The Hopper block-sparse family: `wgmma.mma_async` from shared memory on a persistent grid.
//!
//! Each work item is (row tile of `bm` rows, block column of `bw` columns); CTA `b` takes items
//! `b, b + grid, ...` in row-tile-major order, and its cp.async pipeline streams the live
//! k-blocks of all its items as one sequence, so the pipeline fills once per CTA, not once per
//! item. A tiles and W blocks sit in shared memory in the no-swizzle K-major layout that the
//! wgmma matrix descriptors read ([`CoreLayout`]); W blocks are packed transposed (`[n][k]`)
//! so that B is K-major like A. This first kernel (a CTA barrier per k-block) is taken only
//! when `Engine::Wgmma` asks for it.
//!
//! The warp-specialized kernel (`Engine::WgmmaWs`, `templates/spmm_block_wgmma_ws.cu.tera`) is
//! what `Engine::Auto` takes for f16/bf16 right-orientation block covers (not the dense
//! kernel). One producer thread fills a ring of stages, each one k-block row or more
//! (`Tile::k_rows`): A tiles by TMA (`Kernel::tma_a`: the compiler describes the tensor map,
//! the runtime encodes it) and W blocks, packed as their shared-memory image
//! (`Kernel::w_smem_image`), by bulk copies, with per-stage mbarriers. Consumer warpgroups run
//! wgmma (one straight-line path per set of live slots, one wgmma group per row) with no
//! CTA-wide barrier in the loop. A work item is a row tile × a group of block columns whose
//! merged k-block rows ([`schedule`], built on the host and read after `idx` by the producer
//! and the consumers alike, see `Kernel::steps`) share each A tile; the epilogue stages its
//! rows through shared memory. One CTA per SM with as deep a ring as fits, or, where few
//! blocks are live (an item is then a step or two of latency), two CTAs per SM with short
//! rings (`Tile::per_sm`).

use crate::codegen::render::{render, MaskPath, WgmmaCtx, WgmmaTileCtx, WgmmaWsCtx};
use crate::codegen::spmm::kernel::{
    block_flops, blocks_column_major, packer, Family, FamilyOps, Kernel, Launch, TmaBox,
};
use crate::codegen::spmm::shared::{block_tables, kernel_head, kernel_literals, resolve_mode, spec_err, value_bits};
use crate::codegen::{CodegenError, Dtype, Engine, Mode, Orientation, SpmmSpec, Tile};
use crate::kernel_choice::block_wgmma::supports;
use crate::sparse::WeightLookup;

/// SMs the persistent grid is sized for (H100/H200 SXM: 132). More CTAs than fit only queue;
/// fewer leave SMs idle; correctness does not depend on it.
const TARGET_SMS: usize = 132;
/// Shared memory of one SM and the per-CTA reserve (bytes), Hopper.
const SMEM_PER_SM: usize = 233_472;
const SMEM_PER_CTA_MAX: usize = 232_448;
const SMEM_RESERVED_PER_CTA: usize = 1024;

/// The swizzled K-major shared-memory layout of a wgmma operand tile whose rows hold
/// `k_chunks` 16-byte chunks (8 half elements each; 2, 4 or 8 chunks = a 32, 64 or 128-byte
/// row): the swizzle width equals the row, so an 8-row group is one swizzle atom of
/// `8 · row` bytes (SBO apart), and inside it chunk `q` of row `r` sits at chunk
/// `q XOR (address bits 7.. of the row start)`, as the hardware's 32/64/128-byte swizzle modes
/// expect. (Run 7a used the no-swizzle layout: correct, but its 512-byte row-group stride put
/// every row group of a core-matrix column in the same banks.) Tiles must start 1024-byte aligned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CoreLayout {
    pub k_chunks: usize,
}

impl CoreLayout {
    /// Bytes per row = swizzle width.
    pub fn row_bytes(self) -> usize {
        16 * self.k_chunks
    }
    /// Unused by K-major swizzled operands whose K step fits one atom; 16 bytes by convention.
    pub fn lbo(self) -> usize {
        16
    }
    /// Stride between 8-row groups (one swizzle atom).
    pub fn sbo(self) -> usize {
        8 * self.row_bytes()
    }
    /// Descriptor layout type (bits 62-63): 1 = 128-byte, 2 = 64-byte, 3 = 32-byte swizzle.
    pub fn swizzle_mode(self) -> u64 {
        match self.row_bytes() {
            128 => 1,
            64 => 2,
            32 => 3,
            b => panic!("no swizzle mode for {b}-byte rows"),
        }
    }
    fn xor_of_row(self, row: usize) -> usize {
        (((row % 8) * self.row_bytes()) >> 7) & (self.k_chunks - 1)
    }
    /// Byte offset of the 16-byte chunk `q` (elements `8q..8q+8` along K) of row `row`.
    pub fn offset(self, row: usize, q: usize) -> usize {
        (row / 8) * self.sbo() + (row % 8) * self.row_bytes() + 16 * (q ^ self.xor_of_row(row))
    }
    /// Descriptor bits other than the start address: LBO (bits 16-29) and SBO (bits 32-45)
    /// in 16-byte units, base offset 0, the swizzle mode.
    pub fn descriptor_const(self) -> u64 {
        (((self.lbo() >> 4) as u64) << 16) | (((self.sbo() >> 4) as u64) << 32) | (self.swizzle_mode() << 62)
    }
    /// Byte offset (from a 1024-aligned tile start) where the tensor core reads element
    /// `(row, k)` of the operand whose descriptor start is `start` bytes into the tile: the
    /// unswizzled address `start + (row / 8) · SBO + (row % 8) · width + 2k`, then address bits
    /// 4.. XORed with bits 7.. (as many bits as the width has 16-byte chunks, log2).
    pub fn descriptor_offset(desc: u64, start: usize, row: usize, k: usize, elem_bytes: usize) -> usize {
        let sbo = ((desc >> 32) & 0x3fff) as usize * 16;
        let width = match desc >> 62 {
            1 => 128,
            2 => 64,
            3 => 32,
            _ => panic!("no-swizzle descriptors are not used"),
        };
        let mask = width / 16 - 1;
        let a = start + (row / 8) * sbo + (row % 8) * width + k * elem_bytes;
        a ^ (((a >> 7) & mask) << 4)
    }
}

/// The wgmma kernel for `spec` if its engine and block shape select it; `None` hands the spec
/// to the mma.sync / SIMT kernels.
pub(super) fn try_specialize(spec: &SpmmSpec, live: &[bool], dense: bool) -> Result<Option<Kernel>, CodegenError> {
    let (bh, bw) = spec.block;
    let tensor = matches!(spec.dtype, Dtype::F16 | Dtype::Bf16);
    match spec.engine {
        Engine::MmaSync | Engine::Tf32x3 | Engine::Simt => return Ok(None),
        // The warp-specialized kernel for every f16/bf16 right-orientation block cover but the
        // dense kernel (run 17 call 11, with its staged epilogue, f16 32×32 against mma.sync:
        // 4096³ 50% 0.276 ms against 0.568, 90% 0.0785 against 0.128, 95% 0.0453 against 0.076,
        // 99% 0.0253 against 0.0333; 1024³ 90/95/99% 0.0082/0.0078/0.0067 against
        // 0.0094/0.0080/0.0072). The first wgmma kernel (no producer warpgroup) only ever tied
        // mma.sync (run 7b) and is taken only when asked for.
        Engine::Auto
            if (ws_pays(spec, dense) || spec.row_norm.any()) && tensor && spec.orientation == Orientation::Right =>
        {
            return block_wgmma_ws(spec, live).map(Some)
        }
        Engine::Auto => return Ok(None),
        Engine::Wgmma | Engine::WgmmaWs if !tensor => {
            return Err(spec_err(format!("wgmma kernels take f16 or bf16, not {}", spec.dtype.name())))
        }
        Engine::Wgmma | Engine::WgmmaWs if spec.orientation != Orientation::Right => {
            return Err(spec_err("wgmma kernels take the right orientation (A · W, W sparse) only".into()))
        }
        Engine::Wgmma | Engine::WgmmaWs if !supports(bh, bw) => {
            return Err(spec_err(format!(
                "wgmma kernels need bh 16, 32 or 64 and bw in 8..=64 (a multiple of 8), got {bh}x{bw}"
            )))
        }
        _ => {}
    }
    if spec.engine == Engine::WgmmaWs {
        return block_wgmma_ws(spec, live).map(Some);
    }
    block_wgmma(spec, live).map(Some)
}

fn block_wgmma(spec: &SpmmSpec, live: &[bool]) -> Result<Kernel, CodegenError> {
    let (m, n) = (spec.m, spec.n);
    let (bh, bw) = spec.block;
    let nbs = n / bw;
    // Rows per item: (warpgroups, m64 tiles per warpgroup).
    let rows = match spec.tile {
        Some(t) => t.rows,
        // 128 rows, 6 stages: the fastest tile of run 7b (0.129 ms; 256 rows 0.138-0.143).
        None if m > 64 => 128,
        None => 64,
    };
    let (warpgroups, m_tiles) = match rows {
        64 => (1, 1),
        128 => (2, 1),
        192 => (3, 1),
        256 => (2, 2),
        r => return Err(spec_err(format!("wgmma tiles hold 64, 128, 192 or 256 rows, not {r}"))),
    };
    let stages = match spec.tile {
        Some(t) if (3..=8).contains(&t.stages) => t.stages,
        Some(t) => return Err(spec_err(format!("wgmma pipelines have 3 to 8 stages, not {}", t.stages))),
        None => 6,
    };
    let esize = spec.dtype.bytes();
    let bm = rows;
    let threads = 128 * warpgroups;
    let a_stage_bytes = bm * bh * esize;
    let stage_bytes = a_stage_bytes + bh * bw * esize;
    // + 1024: the kernel aligns the ring to the 1024-byte swizzle period.
    let smem = stages * stage_bytes + 1024;
    if smem > SMEM_PER_CTA_MAX {
        return Err(spec_err(format!("{stages} stages of {stage_bytes} bytes exceed the shared memory of a CTA")));
    }
    let acc_regs = bw / 2;
    // Registers a thread needs: the accumulators plus ~64 for addresses and the epilogue.
    let regs = (m_tiles * acc_regs + 64).next_multiple_of(8);
    let min_ctas =
        (SMEM_PER_SM / (smem + SMEM_RESERVED_PER_CTA)).min(2048 / threads).min(65536 / (threads * regs)).clamp(1, 8);

    let items = m.div_ceil(bm) * nbs;
    let grid = items.min(TARGET_SMS * min_ctas);
    let launch = Launch { grid: (grid as u32, 1, 1), block: (threads as u32, 1, 1), smem_bytes: smem as u32 };
    let (mut kernel, values) = wgmma_kernel(
        spec,
        live,
        bm,
        launch,
        |mode| format!("spmm_block_wgmma_{}_{}x{}_{mode}", spec.dtype.name(), bh, bw),
        |_, _| vec![],
        false,
    )?;
    let ctx = WgmmaCtx {
        head: kernel_head(&kernel.name, spec.dtype, spec),
        literals: kernel_literals(&kernel, kernel.device_idx(), values, 16, 0),
        tile: tile_ctx(spec, bm, (warpgroups, m_tiles), threads, stages, items, stage_bytes),
        min_ctas,
    };
    kernel.source = render("spmm_block_wgmma.cu.tera", &ctx)?;
    Ok(kernel)
}

/// The template context both wgmma kernels fill alike, from the spec, the item's rows and
/// warpgroups, and the ring.
fn tile_ctx(
    spec: &SpmmSpec,
    bm: usize,
    (warpgroups, m_tiles): (usize, usize),
    threads: usize,
    stages: usize,
    items: usize,
    stage_bytes: usize,
) -> WgmmaTileCtx {
    let (bh, bw) = spec.block;
    let esize = spec.dtype.bytes();
    let layout = CoreLayout { k_chunks: bh / 8 };
    let acc_regs = bw / 2;
    WgmmaTileCtx {
        bh,
        bw,
        bm,
        warpgroups,
        m_tiles,
        threads,
        stages,
        n_blocks: spec.n / bw,
        items,
        k_chunks: layout.k_chunks,
        lbo: layout.lbo(),
        sbo: layout.sbo(),
        row_bytes: layout.row_bytes(),
        desc_const: format!("0x{:016x}", layout.descriptor_const()),
        a_stage_bytes: bm * bh * esize,
        stage_bytes,
        m64_bytes: 64 * bh * esize,
        acc_regs,
        operand_a: acc_regs,
        operand_b: acc_regs + 1,
        operand_one: acc_regs + 2,
    }
}

/// What both wgmma kernels build the same way: the block tables of `bm`-row tiles, the
/// extra index words `steps(ptr, idx)` reads after them, the mode (their literal words against
/// the unroll budget), the kernel record (source still empty) named by `name(mode)`, and the
/// weight's values when the mode embeds them.
fn wgmma_kernel(
    spec: &SpmmSpec,
    live: &[bool],
    bm: usize,
    launch: Launch,
    name: impl FnOnce(&str) -> String,
    steps: impl FnOnce(&[i32], &[i32]) -> Vec<i32>,
    w_smem_image: bool,
) -> Result<(Kernel, Vec<String>), CodegenError> {
    let (m, k, n) = (spec.m, spec.k, spec.n);
    let (bh, bw) = spec.block;
    let esize = spec.dtype.bytes();
    let tables = block_tables(m, (k / bh, n / bw), (bh, bw), bm, live)?;
    let (ptr, idx) = (&tables.ptr, &tables.idx);
    let steps = steps(ptr, idx);
    let value_words = spec.values.as_ref().map(|_| idx.len() * bh * bw * esize / 4).unwrap_or(0);
    let literal_words = ptr.len() + idx.len() + steps.len() + value_words;
    let mode = resolve_mode(spec, literal_words);
    let unrolled = mode == Mode::Unrolled;
    let name = name(if unrolled { "unrolled" } else { "stream" });
    let kernel = Kernel {
        steps,
        w_smem_image,
        ..Kernel::new(name, Family::BlockWgmma, mode, launch, (m, k, n), spec.dtype, (bh, bw)).with_block_tables(
            tables,
            literal_words,
            spec.values.is_some(),
        )
    };
    let values = match (&spec.values, kernel.values_embedded) {
        (Some(v), true) => value_bits(spec.dtype, &kernel.pack_weight(v)),
        _ => vec![],
    };
    Ok((kernel, values))
}

/// The warp-specialized kernel's step schedule, read after the block tables (`idx`, `nnz`
/// words) in its index table: `n_groups + 1` step pointers (group `g`'s steps are
/// `[sptr[g], sptr[g + 1])`), then one word per step, `kb | live_slots << 16`: the k-block
/// rows live in any block column of the group, in increasing order, and which of the
/// group's `group` columns hold a block there. The kernel takes `kr` rows per ring stage, so
/// every group's list is padded to a whole number of stages (at least one) with rows without
/// slots (a group without live blocks still writes its output). The producer then reads
/// `kr` words per stage instead of merging the group's columns itself.
pub fn schedule(ptr: &[i32], idx: &[i32], group: usize, kr: usize) -> Vec<i32> {
    let nbs = ptr.len() - 1;
    let n_groups = nbs.div_ceil(group);
    let mut sptr = Vec::with_capacity(n_groups + 1);
    let mut words = Vec::new();
    for g in 0..n_groups {
        sptr.push(words.len() as i32);
        let mut rows: Vec<(i32, i32)> = Vec::new(); // (kb, slot mask)
        for c in 0..group.min(nbs - g * group) {
            let j = g * group + c;
            for &kb in &idx[ptr[j] as usize..ptr[j + 1] as usize] {
                rows.push((kb, 1 << c));
            }
        }
        rows.sort_unstable();
        let mut merged: Vec<(i32, i32)> = Vec::new();
        for (kb, bit) in rows {
            match merged.last_mut() {
                Some(last) if last.0 == kb => last.1 |= bit,
                _ => merged.push((kb, bit)),
            }
        }
        // Whole steps of `kr` rows: a short last step is padded with rows without slots.
        while merged.is_empty() || !merged.len().is_multiple_of(kr) {
            merged.push((0, 0));
        }
        words.extend(merged.iter().map(|&(kb, mask)| kb | (mask << 16)));
    }
    sptr.push(words.len() as i32);
    sptr.extend(words);
    sptr
}

/// Widest group whose live-slot sets each get their own straight-line wgmma path (15 paths
/// at 4 columns).
pub const MASK_PATHS_MAX_GROUP: usize = 4;

/// The wgmma paths of a step, one per nonempty set of live slots, for groups of up to
/// `MASK_PATHS_MAX_GROUP` columns. With one `if` per slot instead, ptxas closes a wgmma group
/// (`gsb0`) at the end of every slot's block and a dummy one at the commit: the wait for "one
/// group in flight" then waited for the step's own wgmmas, and no step overlapped the next
/// (run 18 call 3: the consumers alone took ~650 cycles per step whatever its wgmma count).
fn mask_paths(group: usize) -> Vec<MaskPath> {
    if group > MASK_PATHS_MAX_GROUP {
        return vec![];
    }
    (1u32..1 << group)
        .map(|mask| MaskPath { mask, slots: (0..group).filter(|&c| mask & (1 << c) != 0).collect() })
        .collect()
}

/// Dynamic shared memory of the warp-specialized kernel: `stages` ring stages of `kr` k-block
/// rows (a `rows`-row A tile and `group` W blocks, each slot 1024-aligned), + 1024 to align the
/// ring to the swizzle period, + 16 per stage for its two mbarriers, + the epilogue's staging
/// rows (per consumer warpgroup, its rows × the group's columns padded by 16 bytes; none when
/// the epilogue works in place: accumulating, or accumulators filling 128 registers).
fn ws_smem(spec: &SpmmSpec, rows: usize, group: usize, kr: usize, stages: usize) -> usize {
    let (bh, bw) = spec.block;
    let esize = spec.dtype.bytes();
    let (warpgroups, m_tiles) = if rows == 64 { (1, 1) } else { (2, rows / 128) };
    let stage_bytes = kr * (rows * bh * esize + group * (bh * bw * esize).next_multiple_of(1024));
    let staged = !spec.accumulate && m_tiles * group * bw / 2 < 128;
    let staging = if staged { warpgroups * m_tiles * 64 * (group * bw * esize + 16) + 16 } else { 0 };
    stages * stage_bytes + 1024 + 16 * stages + staging + norm_smem(spec, warpgroups, m_tiles)
}

/// Shared memory of the LayerNorm work (`RowNorm`): per consumer warpgroup, the residual's row
/// statistics (mean and 1/std) for the store loop.
fn norm_smem(spec: &SpmmSpec, warpgroups: usize, m_tiles: usize) -> usize {
    warpgroups * m_tiles * 64 * 8 * usize::from(spec.row_norm.residual_affine.is_some())
}

/// Live block fraction at or below which the automatic tile runs two CTAs per SM.
const TWO_CTAS_MAX_LIVE: f64 = 0.2;

/// The fraction of `live` that is true.
fn live_fraction(live: &[bool]) -> f64 {
    live.iter().filter(|&&l| l).count() as f64 / live.len().max(1) as f64
}

/// Whether auto takes the warp-specialized kernel: a supported block shape and not the
/// dense kernel (every block live: the dense kernel, or cuBLAS in the planner, takes it).
fn ws_pays(spec: &SpmmSpec, dense: bool) -> bool {
    let (bh, bw) = spec.block;
    !dense && supports(bh, bw)
}

/// The warp-specialized variant: a producer warpgroup whose one working thread fills a
/// `stages`-deep ring of `k_rows` k-block rows per stage (A tiles by TMA, W blocks by bulk
/// copies of their shared-memory image; an mbarrier per stage each way) and 1-2 consumer
/// warpgroups of wgmma; a work item is a row tile × `group` block columns, whose k-block
/// lists the host merges ([`schedule`]) so that one A tile copy serves every live block of its
/// k-block row in the group. Per A element the L2 then serves one read per live k-block row
/// of each group instead of one per live block.
fn block_wgmma_ws(spec: &SpmmSpec, live: &[bool]) -> Result<Kernel, CodegenError> {
    let (m, n) = (spec.m, spec.n);
    let (bh, bw) = spec.block;
    let nbs = n / bw;
    let tile = spec.tile.unwrap_or(Tile::new(0, 0));
    // Default 256 rows × 2 block columns per item where that still gives every SM two items
    // (run 17 call 4, 4096³ 32×32 90%: 0.0953 ms, against 0.0974 at 256 × 4 and 0.113-0.137 at
    // 128 rows), else 128 rows × 1 (call 5, 1024³ 90%: 0.0085 ms, against 0.0103 at 256 × 2).
    let wide = m.div_ceil(256) * nbs.div_ceil(2) >= 2 * TARGET_SMS;
    // Few live blocks (an item then holds a step or two): two CTAs per SM, each 128 rows × 1
    // block column with a 3-stage ring, so that one CTA's loads overlap the other's epilogue
    // (session 4 call 3, in the models, fp16 32×32 90%: MiniLM-L6 0.401 → 0.390 ms, BERT-base
    // 1.200 → 1.151; at 50% the one deep ring was faster, MiniLM 0.482 against 0.499).
    let tile = match tile {
        t if t == Tile::new(0, 0)
            && m > 128
            && live_fraction(live) <= TWO_CTAS_MAX_LIVE
            && 2 * (ws_smem(spec, 128, 1, 2, 3) + SMEM_RESERVED_PER_CTA) <= SMEM_PER_SM =>
        {
            Tile { rows: 128, stages: 3, per_sm: 2, group: 1, k_rows: 2, ..t }
        }
        t => t,
    };
    let rows = match tile.rows {
        0 if m > 128 && wide => 256,
        0 if m > 64 => 128,
        0 => 64,
        r => r,
    };
    let (warpgroups, m_tiles) = match rows {
        64 => (1, 1),
        128 => (2, 1),
        256 => (2, 2),
        r => return Err(spec_err(format!("warp-specialized wgmma tiles hold 64, 128 or 256 rows, not {r}"))),
    };
    let group = match tile.group {
        0 if rows == 256 => 2,
        0 => 1,
        g if (1..=8).contains(&g) => g,
        g => return Err(spec_err(format!("warp-specialized wgmma items hold 1 to 8 block columns, not {g}"))),
    };
    // The LayerNorm work (a residual, row statistics) runs in the staged store loop: an item
    // whose accumulators would fill the 128 registers (the in-place epilogue) takes as many
    // block columns as stay below them, so that this kernel takes the work at any tile.
    let group = if spec.row_norm.residual || spec.row_norm.stats {
        group.min(127 / (m_tiles * (bw / 2))).max(1)
    } else {
        group
    };
    // Two k-block rows per stage by default (run 18 call 4, 4096³ 32×32 f16: 90% 0.0763 →
    // 0.0705 ms, 50% 0.267 → 0.245; three rows no better): the per-step protocol (barrier
    // waits, wgmma wait) is paid once per two rows. 256-row tiles take one row per
    // stage once the producer is a single thread of bulk copies: the ring is then 9 stages
    // deep instead of 4 (call 9: 90% 0.0611 → 0.0598, 50%, 95% and 99% within ±1%).
    let kr = match tile.k_rows {
        0 if rows == 256 => 1,
        0 => 2,
        r if (1..=4).contains(&r) && r * group <= 16 => r,
        r => {
            return Err(spec_err(format!(
                "warp-specialized wgmma stages hold 1 to 4 k-block rows of at most 16 slots, not {r} × {group}"
            )))
        }
    };
    let acc_regs = bw / 2;
    if m_tiles * group * acc_regs > 128 {
        return Err(spec_err(format!(
            "{m_tiles} m64 tile(s) × {group} block columns of {bw} need {} accumulators per thread (at most 128)",
            m_tiles * group * acc_regs
        )));
    }
    let layout = CoreLayout { k_chunks: bh / 8 };
    let esize = spec.dtype.bytes();
    let bm = rows;
    let threads = 128 * (warpgroups + 1);
    let a_stage_bytes = bm * bh * esize;
    let w_block_bytes = (bh * bw * esize).next_multiple_of(1024);
    let stage_bytes = kr * (a_stage_bytes + group * w_block_bytes);
    // The epilogue's staging rows (per consumer warpgroup: its rows × the group's columns,
    // padded by 16 bytes). The accumulating epilogue works in place, and so does a kernel
    // whose accumulators fill 128 registers (staging made ptxas spill there).
    let stg_stride = group * bw * esize + 16;
    let stg_bytes = m_tiles * 64 * stg_stride;
    let staged = !spec.accumulate && m_tiles * group * acc_regs < 128;
    if spec.row_norm.stats && !(8..=64).contains(&bw) {
        return Err(spec_err(format!("row statistics need block columns of 8 to 64, not {bw}")));
    }
    let staging = if staged { warpgroups * stg_bytes + 16 } else { 0 } + norm_smem(spec, warpgroups, m_tiles);
    let per_sm = match tile.per_sm {
        0 | 1 => 1,
        2 => 2,
        c => return Err(spec_err(format!("warp-specialized wgmma kernels run 1 or 2 CTAs per SM, not {c}"))),
    };
    // Default: as deep a ring as fits, up to 12 stages.
    let fit = (SMEM_PER_CTA_MAX - 1024 - staging) / (stage_bytes + 16);
    let stages = match tile.stages {
        0 => fit.clamp(3, 12),
        // An explicit (tuned) ring gives up the stages the LayerNorm work's shared memory takes.
        s if (3..=16).contains(&s) && spec.row_norm.any() => s.min(fit).max(3),
        s if (3..=16).contains(&s) => s,
        s => return Err(spec_err(format!("warp-specialized wgmma rings have 3 to 16 stages, not {s}"))),
    };
    let smem = ws_smem(spec, rows, group, kr, stages);
    debug_assert_eq!(smem, stages * stage_bytes + 1024 + 16 * stages + staging);
    if smem > SMEM_PER_CTA_MAX {
        return Err(spec_err(format!("{stages} stages of {stage_bytes} bytes exceed the shared memory of a CTA")));
    }
    let n_groups = nbs.div_ceil(group);
    let items = m.div_ceil(bm) * n_groups;
    // Two CTAs per SM where their shared memory fits (registers: the launch bound caps them).
    let min_ctas = if per_sm == 2 && 2 * (smem + SMEM_RESERVED_PER_CTA) <= SMEM_PER_SM { 2 } else { 1 };
    let grid = items.min(TARGET_SMS * min_ctas);
    let launch = Launch { grid: (grid as u32, 1, 1), block: (threads as u32, 1, 1), smem_bytes: smem as u32 };
    let (mut kernel, values) = wgmma_kernel(
        spec,
        live,
        bm,
        launch,
        |mode| format!("spmm_block_wgmma_ws_{}_{}x{}_g{group}_{mode}", spec.dtype.name(), bh, bw),
        |ptr, idx| schedule(ptr, idx, group, kr),
        true,
    )?;
    // A's tiles come by TMA: one instruction per tile from one thread, rows past M zero-filled
    // by the copy engine.
    kernel.tma_a = Some(TmaBox { rows: bm as u32, cols: bh as u32, swizzle_bytes: layout.row_bytes() as u32 });
    let nnz = kernel.idx.len();
    let ctx = WgmmaWsCtx {
        head: kernel_head(&kernel.name, spec.dtype, spec),
        literals: kernel_literals(&kernel, kernel.device_idx(), values, 16, kernel.steps.len()),
        tile: tile_ctx(spec, bm, (warpgroups, m_tiles), threads, stages, items, stage_bytes),
        group,
        kr,
        nnz,
        n_groups,
        w_block_bytes,
        stg_stride,
        stg_bytes,
        stg_chunks: group * bw * esize / 16,
        staged,
        min_ctas,
        mask_paths: mask_paths(group),
        row_norm: spec.row_norm,
        norm_any: spec.row_norm.any(),
        in_eps: format!("{:e}f", spec.row_norm.input.map_or(0.0, |i| i.eps)),
        res_eps: format!("{:e}f", spec.row_norm.residual_affine.map_or(0.0, |i| i.eps)),
        norm_off: if staged { warpgroups * stg_bytes } else { 0 },
        res_prefetch: spec.row_norm.residual && staged && {
            let chunks = m_tiles * 64 * group * bw / 8;
            chunks % 128 == 0 && chunks / 128 <= 2
        },
    };
    kernel.source = render("spmm_block_wgmma_ws.cu.tera", &ctx)?;
    Ok(kernel)
}

/// The wgmma family's entry in the family table: with [`Kernel::w_smem_image`] each live block
/// as its shared-memory image (the swizzled K-major layout), else column-major (n-major, the
/// block's k contiguous: wgmma's K-major B operand).
pub(crate) const OPS: FamilyOps = FamilyOps { pack: packer!(pack), flops: block_flops };

fn pack<T: Copy + Default, W: WeightLookup<T> + ?Sized>(kernel: &Kernel, w: &W) -> Vec<T> {
    if !kernel.w_smem_image {
        return blocks_column_major(kernel, w);
    }
    let (bh, bw) = kernel.block;
    let n = kernel.spec_shape.2;
    let layout = crate::codegen::CoreLayout { k_chunks: bh / 8 };
    let esize = kernel.dtype.bytes();
    let mut out = vec![T::default(); kernel.idx.len() * bh * bw];
    let mut e = 0;
    for j in 0..kernel.ptr.len() - 1 {
        for &kb in &kernel.idx[kernel.ptr[j] as usize..kernel.ptr[j + 1] as usize] {
            let base = e * bh * bw;
            for c in 0..bw {
                for r in 0..bh {
                    let at = base + (layout.offset(c, r / 8) / esize) + r % 8;
                    out[at] = w.at((kb as usize * bh + r) * n + j * bw + c);
                }
            }
            e += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests;
