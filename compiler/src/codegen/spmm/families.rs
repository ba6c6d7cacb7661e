//! The kernel-family table: each [`Family`] to its entry ([`FamilyOps`]: how its weight is
//! packed, how its work is counted), defined beside the family's kernel in its module. The
//! shared kernel code ([`Kernel::pack_weight`](super::Kernel::pack_weight),
//! [`Kernel::flops`](super::Kernel::flops)) asks the table, so no family module imports
//! another through it. The match is exhaustive: a new [`Family`] does not build without its row.

use super::kernel::{packer, FamilyOps, BLOCK_OPS};
use super::{dismantled, few_rows, fine, fine_tf32, int8, row_scatter, stream, tf32, two_four, wgmma, Family};

/// Bias and activation in place after a library GEMM: no weight, no multiply-add of its own.
const EPILOGUE_OPS: FamilyOps = FamilyOps { pack: packer!(no_weight), flops: |_, _| 0.0 };

fn no_weight<T, W: ?Sized>(_: &super::Kernel, _: &W) -> Vec<T> {
    vec![]
}

/// The entry of `family`.
pub(crate) fn ops(family: Family) -> &'static FamilyOps {
    match family {
        Family::BlockSimt | Family::BlockMma | Family::Dense => &BLOCK_OPS,
        Family::Fine => &fine::FINE_OPS,
        Family::FineLeft => &fine::FINE_LEFT_OPS,
        Family::Epilogue => &EPILOGUE_OPS,
        Family::BlockInt8 => &int8::OPS,
        Family::BlockWgmma => &wgmma::OPS,
        Family::FineDismantled => &dismantled::OPS,
        Family::BlockTf32 => &tf32::OPS,
        Family::FineTf32 => &fine_tf32::OPS,
        Family::FineRows => &few_rows::OPS,
        Family::RowScatter => &row_scatter::OPS,
        Family::DenseStream => &stream::OPS,
        Family::TwoFour => &two_four::OPS,
        Family::TwoFourWgmma => &two_four::wgmma::OPS,
    }
}
