//! A table row as a [`Case`]: its options ([`Opt`], the [`Case`] builders as data, written
//! in the order the label prints them) and the pattern shorthands of the correctness table.

use super::{Case, Cover};
use spartac::codegen::{Activation, DenseCopy, Dtype, Engine, Mode, Orientation};
use spartac::tesa::patterns::Pattern;
use Opt::*;

/// One option of a case: a [`Case`] builder as data.
#[derive(Clone, Copy)]
pub(super) enum Opt {
    /// A bias in the epilogue.
    Bias,
    /// The epilogue's activation.
    Relu,
    Gelu,
    Clip(f32, f32),
    /// [`Mode::IndexStream`].
    Stream,
    Unrolled,
    /// [`Case::with_values`].
    Values,
    /// [`Case::with_tile`]`(rows, stages)`.
    Tile(usize, usize),
    /// [`Case::with_fine_tile`]`(rows, stages, per_sm, split)`.
    FineTile(usize, usize, usize, usize),
    /// [`Case::with_ws_tile`]`(rows, stages, group, k_rows)`.
    WsTile(usize, usize, usize, usize),
    /// [`Case::with_n_tiles`]: after the tile it changes.
    NTiles(usize),
    /// [`Case::with_two_four_tile`]`(rows, group, warps, stages, k_rows)`.
    SpTile(usize, usize, usize, usize, usize),
    /// [`Case::with_dismantled_tile`]`(cols32, warps)`.
    Dismantled(usize, usize),
    /// [`Case::with_cublas`].
    Cublas,
    /// The sparse weight on the left: `C = W·B`.
    Left,
    /// [`Case::with_uniform`].
    Uniform(f32),
    /// [`Case::with_uniform_half`].
    UniformHalf(f32),
    /// [`Case::with_dead_blocks`]`(bh, bw, sparsity)`.
    DeadBlocks(usize, usize, f64),
    /// The [`Engine`] forced.
    MmaSync,
    Wgmma,
    WgmmaWs,
    Tf32x3,
    Simt,
    /// The [`DenseCopy`] forced.
    Transposing,
    Prepass,
    /// [`Case::with_nonfinite`]: NaN, +Inf and -Inf in the dense operand.
    NonFinite,
}

impl Opt {
    fn apply(self, mut case: Case) -> Case {
        match self {
            Bias => case.epilogue.bias = true,
            Relu => case.epilogue.activation = Activation::Relu,
            Gelu => case.epilogue.activation = Activation::Gelu,
            Clip(lo, hi) => case.epilogue.activation = Activation::Clip { lo, hi },
            Stream => return case.with_mode(Mode::IndexStream),
            Unrolled => return case.with_mode(Mode::Unrolled),
            Values => return case.with_values(),
            Tile(rows, stages) => return case.with_tile(rows, stages),
            FineTile(rows, stages, per_sm, split) => return case.with_fine_tile(rows, stages, per_sm, split),
            WsTile(rows, stages, group, k_rows) => return case.with_ws_tile(rows, stages, group, k_rows),
            NTiles(n_tiles) => return case.with_n_tiles(n_tiles),
            Dismantled(cols32, warps) => return case.with_dismantled_tile(cols32, warps),
            SpTile(rows, group, warps, stages, k_rows) => {
                return case.with_two_four_tile(rows, group, warps, stages, k_rows)
            }
            Cublas => return case.with_cublas(),
            Left => return case.with_orientation(Orientation::Left),
            Uniform(v) => return case.with_uniform(v),
            UniformHalf(v) => return case.with_uniform_half(v),
            DeadBlocks(bh, bw, s) => return case.with_dead_blocks(bh, bw, s),
            MmaSync => return case.with_engine(Engine::MmaSync),
            Wgmma => return case.with_engine(Engine::Wgmma),
            WgmmaWs => return case.with_engine(Engine::WgmmaWs),
            Tf32x3 => return case.with_engine(Engine::Tf32x3),
            Simt => return case.with_engine(Engine::Simt),
            Transposing => return case.with_dense_copy(DenseCopy::Transposing),
            Prepass => return case.with_dense_copy(DenseCopy::Prepass),
            NonFinite => return case.with_nonfinite(),
        }
        case
    }
}

pub(super) fn build(mkn: (usize, usize, usize), dtype: Dtype, pattern: Pattern, cover: Cover, opts: &[Opt]) -> Case {
    opts.iter().fold(Case::new(mkn, dtype, pattern, cover), |case, opt| opt.apply(case))
}

pub(super) const fn u(sparsity: f64) -> Pattern {
    Pattern::Unstructured { sparsity }
}
pub(super) const fn b(bh: usize, bw: usize, sparsity: f64) -> Pattern {
    Pattern::Block { bh, bw, sparsity }
}
/// 2:4 along K (the cases draw N:M groups along the reduction axis).
pub(super) const fn nm24() -> Pattern {
    Pattern::NM { n: 2, m: 4 }
}
/// 32×32 blocks plus 1% scattered.
pub(super) const fn mixed(block_sparsity: f64) -> Pattern {
    Pattern::Mixed { bh: 32, bw: 32, block_sparsity, scattered: 0.01 }
}
