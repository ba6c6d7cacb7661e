//! Sub-operators: `X·W = Σₖ X·Wₖ`, where each `Wₖ` holds the elements one part of a
//! cover owns. Each sub-operator carries the hints a specialized kernel needs (block
//! shape, dtype, tile, the loop level it dismantles, orientation, epilogue, mode) and the
//! nonzero block list. Also the 2:4 split (a part for sparse tensor cores plus the
//! remainder) and the dense fallback.
//!
//! A part is priced with the model of the kernel that will run it: an fp32 right-orientation
//! 1×1 part that `Engine::Auto` would run on the 3xTF32 fine kernel is predicted with that
//! kernel's model, on the work it would do for the part's pattern.
//!
//! Coordinates are those of the logical weight `W` of `Y = X·W` (`k × n`, rows = the
//! reduction axis) for [`Orientation::WeightRight`]; for `Y = W·X`
//! ([`Orientation::WeightLeft`]) `W` is `m × k` as stored. A Gemm with `transB = 1` is
//! planned on `Bᵀ`, so its coordinates are transposed from the stored initializer.

use super::cost::{CostModel, Geometry};
use super::cover::{BlockShape, Cover, CoverPart};
use super::hardware::NumberFormat;
use crate::kernel_choice::{fine_tf32, Dtype, FineTf32Work, SpmmSpec};
use crate::tesa::Format;

/// Which side the sparse weight is on (defined with the cost model, which prices both).
pub use super::cost::Orientation;

/// How the kernel gets its block list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Block coordinates baked into the kernel as constants (few blocks).
    Unrolled,
    /// Block coordinates read from an index array at run time.
    IndexStream,
}

/// What kind of kernel runs a sub-operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubOpKind {
    /// Only the listed blocks of one shape.
    BlockSparse,
    /// 2:4 structured sparsity along the reduction axis (`mma.sp`); `blocks` is empty and
    /// `owned` lists the kept elements (at most 2 of every 4 along k).
    TwoFour,
    /// The whole weight, dense.
    Dense,
}

/// Bias and activation applied to the operator's output, fused into the last sub-operator
/// when the plan says so.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Epilogue {
    /// Name of the bias tensor (added along the output's last axis).
    pub bias: Option<String>,
    /// ONNX op name of the activation, e.g. `Relu`.
    pub activation: Option<String>,
    /// The epilogue runs inside the kernel (true) or as a separate elementwise kernel.
    pub fused: bool,
}

impl Epilogue {
    pub fn is_empty(&self) -> bool {
        self.bias.is_none() && self.activation.is_none()
    }
}

/// What a specialized kernel needs to know about its sub-operator. Plain fields.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelHints {
    /// Block shape `(h, w)` in weight coordinates (`(1, 1)` for 2:4, the full weight for dense).
    pub block: (usize, usize),
    pub bits: u8,
    pub format: Format,
    /// Kernel dtype: `f32 tf32 f16 bf16 fp8e4m3 fp8e5m2 i8 u8 i4 u4`.
    pub dtype: String,
    /// Thread-block tile `(tm, tn, tk)`.
    pub tile: (usize, usize, usize),
    /// The loop the block list replaces: 0 = none (dense), 1 = the k loop of each output
    /// column block (blocks grouped by column), 2 = the k and n loops (one flat list).
    pub dismantle_level: u8,
    pub orientation: Orientation,
    pub mode: Mode,
    /// Tensor cores (`mma.sync`, or `mma.sp` for 2:4) rather than SIMT.
    pub tensor_cores: bool,
}

/// One term of `Σₖ X·Wₖ`.
#[derive(Clone, Debug, PartialEq)]
pub struct SubOperator {
    pub kind: SubOpKind,
    pub hints: KernelHints,
    /// Nonzero blocks `(block_row, block_col)` on the grid of `hints.block`, row-major sorted.
    pub blocks: Vec<(u32, u32)>,
    /// Flat row-major indices into the logical weight of the elements this term owns.
    pub owned: Vec<u32>,
    /// Zeros computed inside the blocks (padding).
    pub covered_zeros: usize,
    /// Predicted time in seconds.
    pub predicted_s: f64,
}

/// Blocks at most this many are unrolled into the kernel.
pub const UNROLL_LIMIT: usize = 256;

fn tile_for(nf: &NumberFormat, shape: BlockShape, tensor_cores: bool) -> (usize, usize, usize) {
    // fp32 on tensor cores runs as 3xTF32, on TF32's m16n8k8.
    let tf32 = (nf.dtype == "f32").then_some((16, 8, 8));
    match nf.mma_tile.or(tf32) {
        Some((_, tn, tk)) if tensor_cores => (64, shape.w.div_ceil(tn) * tn, shape.h.div_ceil(tk) * tk),
        _ => (32, shape.w.max(1), shape.h.max(1)),
    }
}

impl SubOperator {
    /// The block-sparse term of one cover part.
    pub fn from_part(
        part: &CoverPart,
        nf: &NumberFormat,
        tensor_cores: bool,
        orientation: Orientation,
        predicted_s: f64,
    ) -> SubOperator {
        let shape = part.shape;
        let dismantle_level = if shape.w >= 8 { 1 } else { 2 };
        let mode = if part.blocks.len() <= UNROLL_LIMIT { Mode::Unrolled } else { Mode::IndexStream };
        SubOperator {
            kind: SubOpKind::BlockSparse,
            hints: KernelHints {
                block: (shape.h, shape.w),
                bits: nf.bits,
                format: nf.format,
                dtype: nf.dtype.to_string(),
                tile: tile_for(nf, shape, tensor_cores),
                dismantle_level,
                orientation,
                mode,
                tensor_cores,
            },
            blocks: part.blocks.clone(),
            owned: part.owned.clone(),
            covered_zeros: part.covered_zeros,
            predicted_s,
        }
    }

    /// The dense term of a `rows × cols` weight owning its `owned` elements.
    pub fn dense(
        rows: usize,
        cols: usize,
        owned: Vec<u32>,
        nf: &NumberFormat,
        orientation: Orientation,
        t: f64,
    ) -> Self {
        let tensor_cores = nf.mma_tile.is_some();
        let covered_zeros = rows * cols - owned.len();
        SubOperator {
            kind: SubOpKind::Dense,
            hints: KernelHints {
                block: (rows, cols),
                bits: nf.bits,
                format: nf.format,
                dtype: nf.dtype.to_string(),
                tile: if tensor_cores { (128, 128, 32) } else { (64, 64, 16) },
                dismantle_level: 0,
                orientation,
                mode: Mode::Unrolled,
                tensor_cores,
            },
            blocks: vec![(0, 0)],
            owned,
            covered_zeros,
            predicted_s: t,
        }
    }

    /// The 2:4 term owning `owned`.
    pub fn two_four(owned: Vec<u32>, nf: &NumberFormat, orientation: Orientation, t: f64) -> SubOperator {
        let (tm, tn, tk) = nf.mma_tile.unwrap_or((16, 8, 16));
        SubOperator {
            kind: SubOpKind::TwoFour,
            hints: KernelHints {
                block: (1, 1),
                bits: nf.bits,
                format: nf.format,
                dtype: nf.dtype.to_string(),
                tile: (tm * 4, tn * 8, tk * 2),
                dismantle_level: 0,
                orientation,
                mode: Mode::IndexStream,
                tensor_cores: true,
            },
            blocks: vec![],
            owned,
            covered_zeros: 0,
            predicted_s: t,
        }
    }

    /// Label for tables: `32x32 f32 ×120`, `2:4 f16`, `dense f32`.
    pub fn label(&self) -> String {
        match self.kind {
            SubOpKind::BlockSparse => {
                format!("{}x{} {} ×{}", self.hints.block.0, self.hints.block.1, self.hints.dtype, self.blocks.len())
            }
            SubOpKind::TwoFour => format!("2:4 {}", self.hints.dtype),
            SubOpKind::Dense => format!("dense {}", self.hints.dtype),
        }
    }

    /// `weight` (row-major, the logical weight) with everything this term does not own
    /// zeroed: `Wₖ` of `Σₖ X·Wₖ`.
    pub fn masked_weight(&self, weight: &[f32]) -> Vec<f32> {
        let mut out = vec![0.0; weight.len()];
        for &i in &self.owned {
            out[i as usize] = weight[i as usize];
        }
        out
    }

    /// The values of each block, block after block in `blocks` order, each `h × w`
    /// row-major, zero where this term does not own the element or past the matrix edge:
    /// what a block-sparse kernel stores. `cols` is the logical weight's column count.
    pub fn block_values(&self, weight: &[f32], cols: usize) -> Vec<f32> {
        let (h, w) = self.hints.block;
        let rows = weight.len() / cols.max(1);
        let masked = self.masked_weight(weight);
        let mut out = Vec::with_capacity(self.blocks.len() * h * w);
        for &(br, bc) in &self.blocks {
            for r in br as usize * h..br as usize * h + h {
                for c in bc as usize * w..bc as usize * w + w {
                    out.push(if r < rows && c < cols { masked[r * cols + c] } else { 0.0 });
                }
            }
        }
        out
    }
}

/// Splits the unpruned elements (`pruned[i]` false) of a `k × n` weight into a 2:4 part,
/// at most the first 2 kept elements of every 4 consecutive rows of a column (2:4 along
/// the reduction axis, as `mma.sp` wants), and the rest (as a pruned mask). `None` when
/// `k` is not a multiple of 4.
pub fn split_two_four(pruned: &[bool], k: usize, n: usize) -> Option<(Vec<u32>, Vec<bool>)> {
    if !k.is_multiple_of(4) {
        return None;
    }
    let mut two_four = vec![];
    let mut rest_pruned = pruned.to_vec();
    for g in 0..k / 4 {
        for c in 0..n {
            let mut taken = 0;
            for r in g * 4..g * 4 + 4 {
                let i = r * n + c;
                if !pruned[i] && taken < 2 {
                    two_four.push(i as u32);
                    rest_pruned[i] = true;
                    taken += 1;
                }
            }
        }
    }
    two_four.sort_unstable();
    Some((two_four, rest_pruned))
}

/// Sub-operators of every part of a cover, each with its predicted time.
pub fn from_cover(
    cover: &Cover,
    nf: &NumberFormat,
    orientation: Orientation,
    cost: &super::cost::CostModel,
    m: usize,
) -> Vec<SubOperator> {
    cover
        .parts
        .iter()
        .map(|p| {
            let (_, tc) = cost.block_rate(nf, p.shape, orientation);
            match fine_tf32_work(p, nf, orientation, m, cover.rows, cover.cols) {
                Some(work) => {
                    let bm = work.tile.0.max(1);
                    let launch = Geometry {
                        ctas: work.col_tiles * m.div_ceil(bm),
                        per_sm: 1,
                        heaviest: work.heaviest,
                        unit_fmas: bm * 64 * work.nt,
                    };
                    let t = cost.fine_tf32_time(nf, m, cover.rows, cover.cols, &work)
                        + cost.wave_time(cost.fine_tf32_entry().waves, Some(&launch));
                    let mut sub = SubOperator::from_part(p, nf, true, orientation, t);
                    sub.hints.tile = work.tile;
                    sub
                }
                None => {
                    let kernel = CostModel::block_kernel(nf, p.shape, orientation);
                    let launch = CostModel::block_geometry(p.shape, orientation, &p.blocks, m);
                    let k = CostModel::streamed_k(p.shape, orientation, &p.blocks, cover.rows);
                    let t = cost.sparse_time(nf, p.shape, orientation, p.blocks.len(), m, k, cover.cols)
                        + cost.wave_time(cost.block_waves(kernel, nf, p.shape), Some(&launch));
                    SubOperator::from_part(p, nf, tc, orientation, t)
                }
            }
        })
        .collect()
}

/// The work of the 3xTF32 fine kernel on an fp32 right-orientation 1×1 part, where the
/// specializer's `Engine::Auto` would run the part on it ([`fine_tf32::auto_work`]): its
/// time follows the k its column groups gather, not the count of elements.
fn fine_tf32_work(
    p: &CoverPart,
    nf: &NumberFormat,
    orientation: Orientation,
    m: usize,
    rows: usize,
    cols: usize,
) -> Option<FineTf32Work> {
    if p.shape != BlockShape::new(1, 1) || nf.dtype != "f32" || orientation != Orientation::WeightRight {
        return None;
    }
    let blocks = p.owned.iter().map(|&i| (i as usize / cols, i as usize % cols)).collect();
    let spec = SpmmSpec::new(m, rows, cols, Dtype::F32, (1, 1), blocks);
    fine_tf32::auto_work(&spec).ok().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_four_split_keeps_at_most_two_of_four_along_k() {
        let (k, n) = (8, 3);
        let pruned = vec![false; k * n];
        let (tf, rest) = split_two_four(&pruned, k, n).unwrap();
        assert_eq!(tf.len(), k * n / 2);
        assert_eq!(rest.iter().filter(|p| !**p).count(), k * n / 2);
        for g in 0..k / 4 {
            for c in 0..n {
                let in_group = tf.iter().filter(|&&i| (i as usize % n) == c && (i as usize / n) / 4 == g).count();
                assert_eq!(in_group, 2);
            }
        }
        assert!(split_two_four(&pruned[..9], 3, 3).is_none());
    }
}
