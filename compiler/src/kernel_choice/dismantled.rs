//! Whether an element-sparse weight is dismantled down to the element (one multiply-add
//! instruction per nonzero, `codegen/spmm/dismantled.rs`), and the tiling that kernel takes.
//! The 3xTF32 fine kernel's rule ([`super::fine_tf32::auto_prefers`]) defers to it, and the
//! specializer's fine dispatcher asks it next, so the planner and the specializer agree on
//! which fine kernel runs a part.

use super::{Dtype, Mode, Orientation, SpecError, SpmmSpec};

/// Rows of A (lanes) per warp and CTA.
pub(crate) const BM: usize = 32;

/// The tiling of a dismantled kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Tiling {
    /// Output columns per warp (accumulators per thread): 32 or 64.
    pub nt: usize,
    /// Warps (segments) per CTA.
    pub ws: usize,
    /// Depth of a k-chunk (a multiple of 4).
    pub kc: usize,
}

impl Tiling {
    /// The specializer's choice, or the override `Tile { rows: 32, stages: nt / 32, warps }`.
    pub(crate) fn choose(spec: &SpmmSpec) -> Result<Tiling, SpecError> {
        let kc = spec.k.next_multiple_of(4).min(128);
        match spec.tile {
            Some(t) if t.warps > 0 => {
                // 128 accumulators spilled under ptxas (44 bytes at 2 warps).
                if t.rows != BM || !(1..=2).contains(&t.stages) || !(1..=16).contains(&t.warps) {
                    return Err(SpecError(format!(
                        "dismantled fine tiles are 32 rows × 32 or 64 columns per warp and 1 to 16 warps, not {} rows × {} columns × {} warps",
                        t.rows,
                        32 * t.stages,
                        t.warps
                    )));
                }
                Ok(Tiling { nt: 32 * t.stages, ws: t.warps, kc })
            }
            // 64 accumulators per thread: each 16-byte load of A feeds ~3 multiply-adds at 95%
            // sparsity (64 columns × 4 k × 5%), four warps over one staged A tile.
            _ => Ok(Tiling { nt: if spec.n > 32 { 64 } else { 32 }, ws: 4, kc }),
        }
    }
}

/// Whether `spec` (right orientation, 1×1 blocks) gets the dismantled kernel: fp32, and either
/// a dismantled tile (`Tile::warps` > 0), `Mode::Unrolled`, or `Mode::Auto` where it measured
/// faster than the loop kernel (run 12, H200): under 1.5% kept, every column in one CTA's
/// warps (N ≤ 256: A read once, all CTAs running the same code), at most `unroll_budget`
/// nonzeros. A loop-kernel tile override or `Mode::IndexStream` keeps the loop kernel.
pub fn applies(spec: &SpmmSpec) -> Result<bool, SpecError> {
    let tile = spec.tile.map(|t| t.warps > 0);
    if tile == Some(true) && (spec.dtype != Dtype::F32 || spec.mode == Mode::IndexStream) {
        return Err(SpecError(format!(
            "a dismantled fine tile needs fp32 and the pattern in the code (mode Auto or Unrolled), not {} {:?}",
            spec.dtype.name(),
            spec.mode
        )));
    }
    Ok(spec.dtype == Dtype::F32
        && spec.orientation == Orientation::Right
        && match (tile, spec.mode) {
            (Some(dismantled), _) => dismantled,
            (None, Mode::IndexStream) => false,
            (None, Mode::Unrolled) => true,
            (None, Mode::Auto) => {
                let density = spec.blocks.len() as f64 / (spec.k * spec.n) as f64;
                let t = Tiling::choose(spec)?;
                spec.blocks.len() <= spec.unroll_budget && density < 0.015 && spec.n <= t.nt * t.ws
            }
        })
}
