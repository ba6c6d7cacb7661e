//! Which 16-bit block shapes the wgmma block kernels (`codegen/spmm/wgmma`) take: the
//! specializer's rule, which the cost model reads too (16-bit shapes without a DB entry of their
//! own that these kernels run are priced with the fitted entry's activation streaming).

/// Whether the wgmma kernels take `(bh, bw)`: rows of 32, 64 or 128 bytes (one swizzle atom
/// wide), wgmma N a multiple of 8 up to 64 (one block column per instruction, 32 accumulators
/// per thread at most).
pub fn supports(bh: usize, bw: usize) -> bool {
    [16, 32, 64].contains(&bh) && bw.is_multiple_of(8) && (8..=64).contains(&bw)
}
