//! Which dense matmuls run on the streaming kernel (`codegen/spmm/stream.rs`,
//! [`super::Family::DenseStream`]) and its tiling: the rule `Engine::Auto` applies, which the
//! model lowering applies too when it decides between this kernel and the vendor library.
//!
//! The kernel is for skinny 16-bit products, `C[M,N] = A[M,K]·W[K,N]` with a small K: the
//! 1×1 convolutions of a vision model in NHWC (M = batch × pixels, up to 401,408 rows; K and
//! N from 16 to a few hundred). Those are memory bound (`K·N / (K + N)` flops per byte, 14
//! for 16 → 96), so what matters is reading A once and writing C once at full bandwidth. The
//! tiled kernels and the library are built for large K: a 16-deep product there is one
//! pipeline step per tile, with nothing to overlap its load with, and the library adds a
//! bias prefill and an activation pass around the GEMM (three writes of C).
//!
//! Tiling: the whole `K × BN` weight slab stays in shared memory for the CTA's life; each warp
//! streams 16-row tiles on its own through its own cp.async ring of `stages` tiles, so the
//! loads of later tiles overlap the math and the stores of the current one, and no warp waits
//! for another (a CTA-wide ring of 128-row tiles, synced per tile, ran at 2.3-4.5× the
//! bytes floor).

use super::{Dtype, Orientation};

/// Deepest K the kernel takes (rounded up to 16): past it an A tile of 64 rows no longer fits
/// a two-slot ring beside the weight slab, and the product stops being memory bound.
pub const MAX_K: usize = 512;
/// Most flops per byte moved (`K·N / (K + N)`) for `Engine::Auto` to take the kernel: above it
/// the product is no longer clearly memory bound and the library's GEMM (wgmma, deep
/// pipelines) is the better engine.
pub const MAX_INTENSITY: f64 = 96.0;
/// Most flops per byte for a product wider than one slab ([`MAX_BN`] columns), whose A the
/// kernel reads once per slab: past it the library wins. Measured on an H200: ConvNeXt-T's
/// 96 → 384 expansions (77 flops/byte, three slabs) ran at 102 µs, five times their bytes
/// floor; ResNet-50's 64 → 256 ones (51) made the model 1.888 ms against 1.629 on cuBLASLt.
pub const WIDE_MAX_INTENSITY: f64 = 48.0;
/// Widest column slab a CTA holds (its accumulators: `BN / 2` registers a thread).
pub const MAX_BN: usize = 128;
/// Most bytes of shared memory the weight slab may take (narrower slabs past it).
const W_SLAB: usize = 72 * 1024;
/// Shared memory a multiprocessor gives its CTAs (Hopper: 227 KiB, 1 KiB of it per CTA
/// reserved).
const SMEM_PER_SM: usize = 227 * 1024;
/// Bytes of A a multiprocessor should have in flight to stream at full bandwidth (about
/// 25 B/ns per SM × ~1.5 µs of latency, doubled for slack).
const IN_FLIGHT: usize = 64 * 1024;
/// CTAs a multiprocessor runs at most (`__launch_bounds__` minimum: 128 registers a thread).
pub const PER_SM: usize = 2;

/// Whether the kernel can compute this product: a 16-bit, right-orientation dense weight with
/// K at most [`MAX_K`] (any K and N: rows whose bytes are not a multiple of 16 take the packed
/// ring, see [`StreamTiling::packed`]).
pub fn supports(dtype: Dtype, orientation: Orientation, k: usize, n: usize) -> bool {
    matches!(dtype, Dtype::F16 | Dtype::Bf16)
        && orientation == Orientation::Right
        && k > 0
        && n > 0
        && k.next_multiple_of(16) <= MAX_K
}

/// Whether `Engine::Auto` runs a dense product of this shape on the streaming kernel (and the
/// model lowering keeps it off the library): [`supports`] and memory bound, clearly so
/// ([`WIDE_MAX_INTENSITY`]) when wider than one slab.
pub fn auto_takes(dtype: Dtype, orientation: Orientation, k: usize, n: usize) -> bool {
    let intensity = (k * n) as f64 / (k + n) as f64;
    supports(dtype, orientation, k, n) && intensity <= MAX_INTENSITY && (n <= MAX_BN || intensity <= WIDE_MAX_INTENSITY)
}

/// The kernel's tiling of an `m × k × n` product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamTiling {
    /// K rounded up to 16 (one mma k-step); the pad columns are zero in shared memory.
    pub kp: usize,
    /// Warps of a CTA: 8 where a two-slot ring of 128-row tiles fits beside the slab, else 4
    /// (tiles of 64 rows).
    pub warps: usize,
    /// Rows of a tile: 16 per warp.
    pub bm: usize,
    /// K is not a multiple of 8, so A's rows are not 16-byte aligned: a ring slot holds the
    /// tile's `bm × k` elements as they lie in memory (one contiguous run: a tile starts at a
    /// multiple of 256·k bytes), copied 16 bytes at a time, and the fragments are read element
    /// by element (k past K read as zero). Otherwise each row lands at its own 16-byte aligned
    /// row of `a_ld` and `ldmatrix` reads the fragments.
    pub packed: bool,
    /// Elements of one ring slot of the CTA: one 16-row slot per warp (`wslot` each; every warp
    /// streams its own tiles through its own ring).
    pub slot: usize,
    pub wslot: usize,
    /// Columns of a CTA's slab (a multiple of 16: n8 tiles in pairs); the last slab may reach
    /// past N (its n8 tiles past N are skipped).
    pub bn: usize,
    /// Column slabs (`grid.y`).
    pub col_tiles: usize,
    /// Depth of the A ring.
    pub stages: usize,
    /// CTAs a multiprocessor holds (by shared memory, at most [`PER_SM`]).
    pub per_sm: usize,
    /// Row strides in shared memory (elements): 8 past the row, so that the eight 16-byte
    /// rows an `ldmatrix` reads fall in distinct bank groups (packed: `a_ld` = K).
    pub a_ld: usize,
    pub w_ld: usize,
}

impl StreamTiling {
    pub fn row_tiles(&self, m: usize) -> usize {
        m.div_ceil(self.bm)
    }
    /// Shared memory of one CTA, bytes: the weight slab, the A ring and the warps' output
    /// staging (16 rows × `bn` each).
    pub fn smem_bytes(&self) -> usize {
        2 * (self.kp * self.w_ld + self.stages * self.slot + self.warps * 16 * self.bn)
    }
    /// CTAs along the rows: enough for every multiprocessor's `per_sm` over all column slabs,
    /// at most one per `bm` rows; each warp walks every `grid.x · warps`-th 16-row tile.
    pub fn grid_x(&self, m: usize, sms: usize) -> usize {
        (self.per_sm * sms).div_ceil(self.col_tiles).clamp(1, self.row_tiles(m).max(1))
    }
}

/// The tiling of `k × n` ([`supports`] must hold): slabs of equal width, at most [`MAX_BN`]
/// columns and [`W_SLAB`] bytes, and the deepest ring (2 to 8 stages) that keeps [`IN_FLIGHT`]
/// bytes of A loading per multiprocessor within its shared memory.
pub fn tiling(k: usize, n: usize) -> StreamTiling {
    let kp = k.next_multiple_of(16);
    let widest = (W_SLAB / (2 * kp)).saturating_sub(8) / 16 * 16;
    let col_tiles = n.div_ceil(widest.clamp(16, MAX_BN));
    let bn = n.div_ceil(col_tiles).next_multiple_of(16);
    let packed = !k.is_multiple_of(8);
    let (a_ld, w_ld) = (if packed { k } else { kp + 8 }, bn + 8);
    let wslot = if packed { 16 * k } else { 16 * a_ld };
    let slot_of = |bm: usize| bm / 16 * wslot;
    let smem = |warps: usize, stages: usize| 2 * (kp * w_ld + stages * slot_of(16 * warps) + warps * 16 * bn);
    let fits = |warps: usize, stages: usize, per_sm: usize| smem(warps, stages) + 1024 <= SMEM_PER_SM / per_sm;
    // Eight warps (128-row tiles) where a two-slot ring of them fits, else four.
    let warps = if fits(8, 2, 1) { 8 } else { 4 };
    let (bm, slot) = (16 * warps, slot_of(16 * warps));
    let stage = 2 * slot;
    let fits = |stages: usize, per_sm: usize| fits(warps, stages, per_sm);
    let mut per_sm = PER_SM;
    while per_sm > 1 && !fits(2, per_sm) {
        per_sm -= 1;
    }
    let want = 1 + IN_FLIGHT.div_ceil(stage * per_sm);
    let mut stages = want.clamp(2, 8);
    while stages > 2 && !fits(stages, per_sm) {
        stages -= 1;
    }
    StreamTiling { kp, warps, bm, packed, slot, wslot, bn, col_tiles, stages, per_sm, a_ld, w_ld }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_skinny_16_bit_products_only() {
        assert!(auto_takes(Dtype::F16, Orientation::Right, 16, 96));
        assert!(auto_takes(Dtype::Bf16, Orientation::Right, 144, 24));
        assert!(auto_takes(Dtype::F16, Orientation::Right, 240, 40));
        assert!(!auto_takes(Dtype::F32, Orientation::Right, 16, 96), "fp32 stays on 3xTF32");
        assert!(!auto_takes(Dtype::F16, Orientation::Left, 16, 96));
        assert!(!auto_takes(Dtype::F16, Orientation::Right, 384, 1536), "compute bound");
        assert!(auto_takes(Dtype::F16, Orientation::Right, 346, 99), "a 64-row tile");
        assert!(!supports(Dtype::F16, Orientation::Right, 520, 64), "K past the ring");
        assert!(auto_takes(Dtype::F16, Orientation::Right, 11, 43), "odd channel counts after pruning");
        assert!(supports(Dtype::F16, Orientation::Right, 256, 4096));
        assert!(!auto_takes(Dtype::F16, Orientation::Right, 256, 4096), "compute bound: the library");
        assert!(!auto_takes(Dtype::F16, Orientation::Right, 96, 384), "three slabs, 77 flops/byte: the library");
        assert!(!auto_takes(Dtype::F16, Orientation::Right, 64, 256), "ResNet-50's layer1 expansion");
        assert!(auto_takes(Dtype::F16, Orientation::Right, 384, 96), "one slab");
        assert!(auto_takes(Dtype::F16, Orientation::Right, 40, 240), "wide but memory bound (34 flops/byte)");
    }

    #[test]
    fn tilings_fit_the_multiprocessor_and_cover_the_columns() {
        for (k, n) in
            [(16, 96), (24, 144), (144, 24), (240, 40), (256, 128), (96, 1152), (40, 480), (8, 8), (11, 43), (202, 51)]
        {
            let t = tiling(k, n);
            assert!(t.kp >= k && t.kp.is_multiple_of(16) && t.kp - k < 16);
            assert!(t.bn.is_multiple_of(16) && t.bn <= MAX_BN && t.bn * t.col_tiles >= n);
            assert_eq!(t.bm, 16 * t.warps);
            assert!(2 * t.kp * t.w_ld <= W_SLAB + 2 * 16 * t.kp, "{k}x{n}: slab {t:?}");
            assert!(t.bn * (t.col_tiles - 1) < n, "{k}x{n}: no empty slab");
            assert!((2..=8).contains(&t.stages) && (1..=PER_SM).contains(&t.per_sm));
            assert!(t.smem_bytes() + 1024 <= SMEM_PER_SM / t.per_sm, "{k}x{n}: {t:?}");
            assert_eq!(t.packed, !k.is_multiple_of(8));
            assert!(t.packed || (t.a_ld / 8) % 2 == 1, "ldmatrix rows in distinct bank groups");
            assert!(t.slot >= t.bm * k && t.wslot.is_multiple_of(8) && t.slot == t.warps * t.wslot);
            assert_eq!((t.w_ld / 8) % 2, 1);
        }
        // A 16-deep product keeps several small tiles in flight; a 256-deep one two big ones.
        assert!(tiling(16, 96).stages > tiling(256, 128).stages);
        assert_eq!(tiling(16, 96).grid_x(401_408, 132), 264);
        assert_eq!(tiling(96, 1152).col_tiles, 9);
        assert_eq!(tiling(8, 8).grid_x(100, 132), 1, "one row tile");
    }
}
