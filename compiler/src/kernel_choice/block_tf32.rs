//! Which fp32 blocks run on the 3xTF32 block kernel (`codegen/spmm/tf32.rs`): the block shapes
//! it takes, and the rule `Engine::Auto` applies, which the cost model applies too (its
//! `BlockTf32Entry` prices exactly the parts this rule sends to the kernel).

use super::{Dtype, Orientation};

/// Block shapes the kernel takes: k8 steps within a block, n8 tiles up to 32 columns (64
/// columns need 128 accumulator registers with the per-block partial sums, and spilled),
/// powers of two (a thread's 16-byte copy column is the same in every row it copies).
pub fn supports(bh: usize, bw: usize) -> bool {
    bh.is_power_of_two() && bw.is_power_of_two() && (8..=128).contains(&bh) && (8..=32).contains(&bw)
}

/// Whether `Engine::Auto` runs blocks of this dtype, orientation and `(bh, bw)` on the 3xTF32
/// block kernel (unless known values make a block uniform, which the SIMT kernel folds). The
/// planner prices such parts with the kernel's own cost entry (`plan::cost::BlockTf32Entry`).
pub fn auto_takes(dtype: Dtype, orientation: Orientation, (bh, bw): (usize, usize)) -> bool {
    dtype == Dtype::F32 && orientation == Orientation::Right && supports(bh, bw)
}
