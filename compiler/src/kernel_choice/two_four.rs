//! Which 2:4 parts run on the sparse tensor cores (`codegen/spmm/two_four/`,
//! [`super::Family::TwoFour`]) and the kernel's tiling, shared by the specializer and anyone
//! who prices or tunes it.
//!
//! The product is `C[M,N] = A[M,K]·W[K,N]` with W 2:4 along the reduction axis (of every 4
//! consecutive k of one column at most 2 are kept). PTX's `mma.sp` takes its sparse operand as
//! the instruction's A (the `M × K` side), so the kernel computes `Cᵀ = Wᵀ·Aᵀ`: a 16-row tile of
//! `Wᵀ` (16 output columns × 32 k, compressed to 16 × 16 plus metadata) is the sparse operand
//! and 8 rows of A are the dense `.col` operand, read by `ldmatrix` from A's rows as they lie
//! in memory (k contiguous). Each CTA owns `bn` output columns × `bm` rows of A; its warps
//! split that into warp tiles of `wn × wm`; every pipeline stage covers `bk` of K.

use super::{Dtype, Engine, Orientation, SpecError, Tile};

/// Multiprocessors the automatic tile aims to fill (H100/H200 SXM).
const SMS: usize = 132;
/// Shared memory a CTA may take (Hopper: 227 KiB).
const SMEM_MAX: usize = 227 * 1024;

/// Whether the kernel computes this product: 16-bit operands, the weight on the right, K a
/// multiple of 32 (one `mma.sp` k-step) and N a multiple of 16 (one sparse tile; also 16-byte
/// rows of C).
pub fn supports(dtype: Dtype, orientation: Orientation, k: usize, n: usize) -> bool {
    matches!(dtype, Dtype::F16 | Dtype::Bf16)
        && orientation == Orientation::Right
        && k > 0
        && n > 0
        && k.is_multiple_of(32)
        && n.is_multiple_of(16)
}

/// The tiling of one 2:4 kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TwoFourTiling {
    /// Rows of A (rows of C) per CTA.
    pub bm: usize,
    /// Output columns per CTA (a multiple of 16: sparse tiles).
    pub bn: usize,
    /// Logical k per pipeline stage (a multiple of 32: `mma.sp` k-steps).
    pub bk: usize,
    pub warps_m: usize,
    pub warps_n: usize,
    /// Depth of the cp.async ring.
    pub stages: usize,
}

impl TwoFourTiling {
    pub fn warps(&self) -> usize {
        self.warps_m * self.warps_n
    }
    /// Rows of A per warp (a multiple of 8: `mma.sp`'s n).
    pub fn wm(&self) -> usize {
        self.bm / self.warps_m
    }
    /// Output columns per warp (a multiple of 16: `mma.sp`'s m).
    pub fn wn(&self) -> usize {
        self.bn / self.warps_n
    }
    /// Row stride of the A tile in shared memory (elements): 8 past the row, so that the eight
    /// 16-byte rows one `ldmatrix` reads fall in distinct bank groups.
    pub fn a_ld(&self) -> usize {
        self.bk + 8
    }
    /// Row stride of the fp32 output staging (elements): 4 past the row, so that the
    /// accumulator stores of a warp hit 32 distinct banks.
    pub fn c_ld(&self) -> usize {
        self.bn + 4
    }
    /// Bytes of one pipeline stage: the A tile, the compressed W tile (`bn × bk/2` 16-bit
    /// values) and its metadata (a 4-bit nibble per column and 4-k chunk: `bn × bk/8` bytes,
    /// 16 words per sparse tile and k32 step, as the template's `Ms` ring holds them).
    pub fn stage_bytes(&self) -> usize {
        2 * self.bm * self.a_ld() + self.bn * self.bk + self.bn * self.bk / 8
    }
    /// Shared memory of one CTA: the ring, or the fp32 output staging where it is larger.
    pub fn smem_bytes(&self) -> usize {
        (self.stages * self.stage_bytes()).max(4 * self.bm * self.c_ld())
    }
    /// CTAs of an `m × n` output.
    pub fn ctas(&self, m: usize, n: usize) -> usize {
        m.div_ceil(self.bm) * n.div_ceil(self.bn)
    }
}

/// Splits `warps` over a `bn × bm` CTA tile: the layout that reads the fewest shared-memory
/// bytes per `mma.sp` (`512 / (wm/8) + 512 / (wn/16)`) with at most 128 accumulators a thread;
/// of equals, the narrower warp tile (fewer sparse fragments held in registers).
fn warp_layout(bn: usize, bm: usize, warps: usize) -> Option<(usize, usize)> {
    (1..=warps)
        .filter(|wn_count| warps.is_multiple_of(*wn_count))
        .map(|warps_n| (warps_n, warps / warps_n))
        .filter(|&(warps_n, warps_m)| {
            bn.is_multiple_of(16 * warps_n)
                && bm.is_multiple_of(8 * warps_m)
                && (bn / warps_n / 16) * (bm / warps_m / 8) * 4 <= 128
        })
        .min_by_key(|&(warps_n, warps_m)| (512 * 8 / (bm / warps_m) + 512 * 16 / (bn / warps_n), bn / warps_n))
}

/// The tiling of an `m × k × n` product: the forced `tile` where given (`rows`: rows of A per
/// CTA, 64, 128 or 256; `group`: output columns per CTA / 32, 2, 4 or 8; `warps`: 4 or 8;
/// `stages`: 2 to 6; `k_rows`: k per stage / 32, 1, 2 or 4; 0 = the default of each), else the
/// largest of 128 × 128, 64 × 128 and 64 × 64 (columns × rows) that still gives every
/// multiprocessor a CTA, 4 warps, 64 of K a stage, as many stages as fit (at most 4).
pub fn tiling(m: usize, k: usize, n: usize, tile: Option<Tile>) -> Result<TwoFourTiling, SpecError> {
    let err = |msg: String| SpecError(msg);
    let t = tile.unwrap_or(Tile::new(0, 0));
    let default_bk = if k.is_multiple_of(64) { 64 } else { 32 };
    let bk = match t.k_rows {
        0 => default_bk,
        r @ (1 | 2 | 4) if k.is_multiple_of(32 * r) => 32 * r,
        r => return Err(err(format!("2:4 tiles take 32, 64 or 128 of K a stage dividing K = {k}, not {}", 32 * r))),
    };
    let warps = match t.warps {
        0 => 4,
        w @ (4 | 8) => w,
        w => return Err(err(format!("2:4 tiles have 4 or 8 warps, not {w}"))),
    };
    let (bn, bm) = match (t.group, t.rows) {
        (0, 0) => {
            let fits = |&(bn, bm): &(usize, usize)| m.div_ceil(bm) * n.div_ceil(bn) >= SMS;
            [(128, 128), (128, 64), (64, 64)].into_iter().find(fits).unwrap_or((64, 64))
        }
        (g, r) => {
            let bn = if g == 0 { 128 } else { 32 * g };
            let bm = if r == 0 { 128 } else { r };
            if ![64, 128, 256].contains(&bn) || ![64, 128, 256].contains(&bm) {
                return Err(err(format!("2:4 tiles hold 64, 128 or 256 columns and rows, not {bn} x {bm}")));
            }
            (bn, bm)
        }
    };
    let (warps_n, warps_m) =
        warp_layout(bn, bm, warps).ok_or_else(|| err(format!("{warps} warps cannot split a {bn} x {bm} 2:4 tile")))?;
    let mut tiling = TwoFourTiling { bm, bn, bk, warps_m, warps_n, stages: 2 };
    match t.stages {
        0 => {
            while tiling.stages < 4 && (tiling.stages + 1) * tiling.stage_bytes() <= SMEM_MAX {
                tiling.stages += 1;
            }
        }
        s @ 2..=6 => tiling.stages = s,
        s => return Err(err(format!("2:4 pipelines have 2 to 6 stages, not {s}"))),
    }
    if tiling.smem_bytes() > SMEM_MAX {
        return Err(err(format!(
            "the 2:4 tile {bn} x {bm} x {bk} in {} stages needs {} bytes of shared memory (at most {SMEM_MAX})",
            tiling.stages,
            tiling.smem_bytes()
        )));
    }
    Ok(tiling)
}

/// Which 2:4 kernel runs a 16-bit part: the Hopper kernel ([`wgmma_tiling`]) wherever it
/// applies (sm_90a, K whole 64-deep stages, the fused epilogue not accumulating onto C), else
/// the `mma.sp` kernel ([`tiling`]). `Engine::MmaSync` forces the latter. An int8 part has the
/// Hopper kernel only ([`supports_int8`]).
pub fn takes_wgmma(engine: Engine, k: usize, accumulate: bool) -> bool {
    engine != Engine::MmaSync && k.is_multiple_of(64) && !accumulate
}

/// Whether the Hopper kernel computes this int8 product (`wgmma.mma_async.sp` m64nNk64 on
/// s8): the weight on the right, K whole 128-deep stages, N a multiple of 16, the part
/// writing C (int8 has no `mma.sp` kernel to fall back on).
pub fn supports_int8(orientation: Orientation, k: usize, n: usize, accumulate: bool) -> bool {
    orientation == Orientation::Right && k > 0 && n > 0 && k.is_multiple_of(128) && n.is_multiple_of(16) && !accumulate
}

/// Logical k of one stage of the Hopper kernel: 128 bytes of each row of A (64 16-bit values,
/// 128 int8 ones), two instructions' worth (k32 on 16 bits, k64 on int8).
pub fn wgmma_k_stage(dtype: Dtype) -> usize {
    if dtype == Dtype::I8 {
        128
    } else {
        64
    }
}

/// Shared memory per SM a CTA of the Hopper kernel may take (the 227 KiB opt-in less the
/// CTA's 1 KiB reserve).
const WGMMA_SMEM_MAX: usize = 232_448;
/// Tokens (rows of A) a staging slice of the Hopper kernel's epilogue holds.
pub const WGMMA_SLICE: usize = 64;

/// The tiling of the Hopper 2:4 kernel (`wgmma.mma_async.sp` m64nNk32 on 16 bits, m64nNk64 on
/// int8, `codegen/spmm/two_four/wgmma.rs`): a work item is `cols()` output columns (W's columns,
/// the instruction's M: `m_tiles` m64 tiles for each of `warpgroups` consumer warpgroups) × `tn`
/// rows of A (the instruction's N), streamed through a ring of `stages` stages of `k_stage`
/// logical k ([`wgmma_k_stage`]). In bytes a stage is the same for both widths, except that
/// int8 metadata takes twice the words (64 chunks of 4 k a row, not 32).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WgmmaTiling {
    pub warpgroups: usize,
    pub m_tiles: usize,
    pub tn: usize,
    pub stages: usize,
    pub k_stage: usize,
}

impl WgmmaTiling {
    /// Output columns per item.
    pub fn cols(&self) -> usize {
        64 * self.warpgroups * self.m_tiles
    }
    /// Bytes of one stage's compressed weight: `cols()` rows of 64 bytes (32 kept 16-bit
    /// values, 64 kept int8 ones).
    pub fn w_bytes(&self) -> usize {
        64 * self.cols()
    }
    /// Metadata words per warp and instruction: 16 on 16 bits (lanes 4g and 4g + 1 give
    /// them), 32 on int8 (every lane).
    pub fn meta_words(&self) -> usize {
        16 * self.k_stage / 64
    }
    /// Bytes of one stage's metadata: [`Self::meta_words`] per m64 tile's warp and each of
    /// the stage's two instructions.
    pub fn meta_bytes(&self) -> usize {
        self.cols() / 16 * 2 * self.meta_words() * 4
    }
    /// Where a stage's A tile starts (1024-aligned: the 128-byte swizzle's period).
    pub fn a_offset(&self) -> usize {
        (self.w_bytes() + self.meta_bytes()).next_multiple_of(1024)
    }
    /// Bytes of one stage: the weight, its metadata, `tn` rows of 64 k of A.
    pub fn stage_bytes(&self) -> usize {
        self.a_offset() + 128 * self.tn
    }
    /// Dynamic shared memory of a CTA: 1024 of alignment slack, the ring, two barriers a
    /// stage, each consumer warpgroup's epilogue staging.
    pub fn smem_bytes(&self) -> usize {
        1024 + self.stages * (self.stage_bytes() + 16) + self.warpgroups * WGMMA_SLICE * self.stg_ld()
    }
    /// Work items of an `m × n` product (the last column tile padded with zero columns).
    pub fn items(&self, m: usize, n: usize) -> usize {
        n.div_ceil(self.cols()) * m.div_ceil(self.tn)
    }
    /// Bytes of one staged row of A in the epilogue: a warpgroup's `64 · m_tiles` output
    /// columns of 16 bits and 16 bytes of padding, so that the 8 rows of one `stmatrix` matrix
    /// fall in distinct banks.
    pub fn stg_ld(&self) -> usize {
        128 * self.m_tiles + 16
    }
    /// fp32 accumulators per consumer thread.
    pub fn acc_regs(&self) -> usize {
        self.m_tiles * self.tn / 2
    }
}

/// A model of the Hopper kernel's time in SM clocks (for choosing its tile, not for the
/// planner, which prices parts from measurements): whole rounds of items over the SMs, each
/// item its stages at the slower of the sparse tensor-core rate and the L2 feed, plus its
/// pipeline fill and epilogue.
fn wgmma_clocks(m: usize, k: usize, n: usize, t: &WgmmaTiling) -> f64 {
    /// Logical (dense-equivalent) flops a clock of one SM on 2:4 operands.
    const SPARSE_FLOPS_PER_CLK: f64 = 8192.0;
    /// Bytes a clock one SM takes from L2, with every SM loading.
    const L2_BYTES_PER_CLK: f64 = 48.0;
    const ITEM_OVERHEAD_CLK: f64 = 600.0;
    // An int8 stage holds twice the logical k at twice the rate: the same clocks.
    let stages = (k / t.k_stage) as f64;
    let mma = (2 * t.cols() * t.tn * 64) as f64 / SPARSE_FLOPS_PER_CLK;
    let feed = (t.w_bytes() + t.meta_bytes() + 128 * t.tn) as f64 / L2_BYTES_PER_CLK;
    let epilogue = (2 * t.cols() * t.tn) as f64 / 32.0;
    let rounds = t.items(m, n).div_ceil(SMS) as f64;
    rounds * (stages * mma.max(feed) + epilogue + ITEM_OVERHEAD_CLK)
}

/// The Hopper kernel's tiling of an `m × k × n` product of `dtype` operands: the forced `tile`
/// where given (`rows`: rows of A per item, 64, 128, 192 or 256; `group`: output columns per
/// item / 64, 1, 2 or 4; `stages`: 2 to 8; 0 = the default of each), else the tile
/// [`wgmma_clocks`] finds fastest of those with one m64 tile a warpgroup, as many stages as
/// fit (at most 6).
pub fn wgmma_tiling(
    dtype: Dtype,
    (m, k, n): (usize, usize, usize),
    tile: Option<Tile>,
) -> Result<WgmmaTiling, SpecError> {
    let err = |msg: String| SpecError(msg);
    let k_stage = wgmma_k_stage(dtype);
    if !k.is_multiple_of(k_stage) {
        return Err(err(format!(
            "the Hopper 2:4 kernel takes {} K in whole stages of {k_stage}, not {k}",
            dtype.name()
        )));
    }
    let with_stages = |mut t: WgmmaTiling, forced: usize| -> Result<WgmmaTiling, SpecError> {
        match forced {
            0 => {
                t.stages = 2;
                while t.stages < 6 && (WgmmaTiling { stages: t.stages + 1, ..t }).smem_bytes() <= WGMMA_SMEM_MAX {
                    t.stages += 1;
                }
            }
            s @ 2..=8 => t.stages = s,
            s => return Err(err(format!("Hopper 2:4 pipelines have 2 to 8 stages, not {s}"))),
        }
        if t.smem_bytes() > WGMMA_SMEM_MAX {
            return Err(err(format!(
                "the Hopper 2:4 tile of {} columns x {} rows in {} stages needs {} bytes of shared memory (at most {WGMMA_SMEM_MAX})",
                t.cols(),
                t.tn,
                t.stages,
                t.smem_bytes()
            )));
        }
        Ok(t)
    };
    let shape = |group: usize, tn: usize| -> Option<WgmmaTiling> {
        let (warpgroups, m_tiles) = match group {
            1 => (1, 1),
            2 => (2, 1),
            4 => (2, 2),
            _ => return None,
        };
        let t = WgmmaTiling { warpgroups, m_tiles, tn, stages: 2, k_stage };
        // int8: one m64 tile a warpgroup. With two (and 128 rows), ptxas serializes the
        // wgmmas (C7513: the next stage's metadata loads define registers of wgmmas still in
        // flight); the automatic tile never takes two anyway.
        let int8_ok = dtype != Dtype::I8 || m_tiles == 1;
        ([64, 128, 192, 256].contains(&tn) && t.acc_regs() <= 128 && int8_ok).then_some(t)
    };
    match tile {
        Some(t) if t.group != 0 || t.rows != 0 => {
            let (group, tn) = (if t.group == 0 { 2 } else { t.group }, if t.rows == 0 { 128 } else { t.rows });
            let s = shape(group, tn).ok_or_else(|| {
                err(format!(
                    "Hopper 2:4 tiles hold 64, 128 or 256 columns (int8: 64 or 128) and 64, 128, 192 or 256 rows with at most 128 accumulators a thread, not {} x {tn}{}",
                    64 * group,
                    if dtype == Dtype::I8 { " on int8" } else { "" }
                ))
            })?;
            with_stages(s, t.stages)
        }
        _ => {
            let forced = tile.map_or(0, |t| t.stages);
            let mut best: Option<(f64, WgmmaTiling)> = None;
            // Not two m64 tiles a warpgroup: forced, they measured slower than one tile of
            // twice the rows on every bench shape (c58: 4096³ 0.1243 ms at 256 × 128 against
            // 0.1204 at 128 × 256; BERT-base ffn1 0.0250 against 0.0239).
            for group in [2, 1] {
                for tn in [256, 192, 128, 64] {
                    let Some(s) = shape(group, tn) else { continue };
                    let Ok(s) = with_stages(s, forced) else { continue };
                    let c = wgmma_clocks(m, k, n, &s);
                    if best.is_none_or(|(b, _)| c < b) {
                        best = Some((c, s));
                    }
                }
            }
            best.map(|(_, t)| t).ok_or_else(|| err("no Hopper 2:4 tile fits".into()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn supports_16_bit_right_weights_on_whole_steps() {
        assert!(supports(Dtype::F16, Orientation::Right, 384, 1536));
        assert!(supports(Dtype::Bf16, Orientation::Right, 4096, 4096));
        assert!(!supports(Dtype::F32, Orientation::Right, 384, 1536), "fp32 stays on the fine kernel");
        assert!(!supports(Dtype::F16, Orientation::Left, 384, 1536));
        assert!(!supports(Dtype::F16, Orientation::Right, 48, 64), "K not whole k32 steps");
        assert!(!supports(Dtype::F16, Orientation::Right, 64, 40), "N not whole sparse tiles");
    }

    #[test]
    fn tilings_fit_and_fill_the_machine() {
        let t = tiling(4096, 4096, 4096, None).unwrap();
        assert_eq!((t.bn, t.bm, t.bk, t.warps(), t.stages), (128, 128, 64, 4, 4));
        assert_eq!((t.wn(), t.wm()), (64, 64), "64 × 64 warp tiles: 192 shared bytes per mma.sp");
        // MiniLM's ffn2 (384 columns): 128 × 128 leaves SMs idle.
        let t = tiling(4096, 1536, 384, None).unwrap();
        assert!(t.ctas(4096, 384) >= SMS, "{t:?}");
        let t = tiling(4096, 96, 384, None).unwrap();
        assert_eq!(t.bk, 32, "K = 96: stages of 32");
        let forced = Tile { group: 4, warps: 8, k_rows: 2, ..Tile::new(256, 3) };
        let t = tiling(4096, 4096, 4096, Some(forced)).unwrap();
        assert_eq!((t.bn, t.bm, t.warps_n, t.warps_m, t.stages), (128, 256, 2, 4, 3));
        assert!(t.smem_bytes() <= SMEM_MAX);
        for (bn, bm, warps) in [(64, 64, 4), (128, 64, 4), (256, 128, 8), (128, 128, 8), (64, 256, 8)] {
            let t = tiling(4096, 4096, 4096, Some(Tile { group: bn / 32, warps, ..Tile::new(bm, 0) })).unwrap();
            assert!(t.wn().is_multiple_of(16) && t.wm().is_multiple_of(8), "{t:?}");
            assert!((t.wn() / 16) * (t.wm() / 8) * 4 <= 128, "{t:?}");
            assert!(t.smem_bytes() <= SMEM_MAX && t.stages >= 2, "{t:?}");
            assert!(t.bm * t.c_ld() * 4 <= t.smem_bytes());
        }
        assert!(tiling(4096, 4096, 4096, Some(Tile::new(96, 0))).is_err());
        assert!(tiling(4096, 96, 4096, Some(Tile { k_rows: 2, ..Tile::new(0, 0) })).is_err(), "64 ∤ 96");
        assert!(tiling(4096, 4096, 4096, Some(Tile { warps: 2, ..Tile::new(0, 0) })).is_err());
        assert!(tiling(4096, 4096, 4096, Some(Tile { group: 8, k_rows: 4, ..Tile::new(256, 6) })).is_err());
    }
}
