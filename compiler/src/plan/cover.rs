//! WeightedBlockCover (SparTA Algorithm 3): cover the unpruned elements of a 2-D weight
//! with aligned blocks of a few shapes, each block shape with a cost (its weight), so
//! that the total cost is small. Greedy weighted set cover: repeatedly take the block with
//! the lowest weight per newly covered unpruned element.
//!
//! Conventions:
//! - A block of shape `h × w` sits on the grid of its own size: block `(br, bc)` spans
//!   rows `br·h .. br·h+h` and columns `bc·w .. bc·w+w`, clipped at the matrix edge.
//! - Every unpruned element is owned by exactly one part: the first chosen block that
//!   covered it. The union of the parts' owned elements is exactly the unpruned set. Zeros
//!   inside chosen blocks are "covered zeros" (declared padding).
//! - The result may hold several block shapes (SparTA's own code assumes one). The planner's
//!   candidates are the 14 [`DEFAULT_SHAPES`]: squares 128 down to 8, vectors 1×32 … 4×1, and
//!   1×1.
//!
//! Speed: initial block counts come from a 2-D prefix sum, the uncovered set is a row-wise
//! bitset (a block is re-counted with popcounts), and a lazy priority queue re-scores a
//! block only when it reaches the top (its ratio can only grow). A shape's blocks are
//! enumerated only once the best queued ratio reaches the shape's bound (weight / area). When 1×1 is one of the
//! shapes, a block whose ratio is not below the 1×1 weight can never win, so it is never
//! queued; what is left at the end becomes the 1×1 part. A block that is full and lies in
//! a full block of a larger shape whose grid nests its own and whose weight per element is
//! lower is not queued either: the larger block is taken first (this pruning is a
//! heuristic when grids overlap without nesting; the ILP test measures the result). The
//! loop stops as soon as every element is covered.

use rayon::prelude::*;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// A block shape, rows × columns of the weight's 2-D view.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct BlockShape {
    pub h: usize,
    pub w: usize,
}

impl BlockShape {
    pub const fn new(h: usize, w: usize) -> BlockShape {
        BlockShape { h, w }
    }

    pub fn area(self) -> usize {
        self.h * self.w
    }
}

impl std::fmt::Display for BlockShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}x{}", self.h, self.w)
    }
}

/// The 14 default candidate shapes: scalars, row and column vectors, squares to 128×128.
pub const DEFAULT_SHAPES: [BlockShape; 14] = [
    BlockShape::new(128, 128),
    BlockShape::new(64, 64),
    BlockShape::new(32, 32),
    BlockShape::new(16, 16),
    BlockShape::new(8, 8),
    BlockShape::new(1, 32),
    BlockShape::new(32, 1),
    BlockShape::new(1, 16),
    BlockShape::new(16, 1),
    BlockShape::new(1, 8),
    BlockShape::new(8, 1),
    BlockShape::new(1, 4),
    BlockShape::new(4, 1),
    BlockShape::new(1, 1),
];

/// The blocks of one shape in a cover and the unpruned elements they own.
#[derive(Clone, Debug, PartialEq)]
pub struct CoverPart {
    pub shape: BlockShape,
    /// `(block_row, block_col)` on the shape's grid, row-major sorted.
    pub blocks: Vec<(u32, u32)>,
    /// Flat row-major indices (`r·cols + c`) of the unpruned elements owned, sorted.
    pub owned: Vec<u32>,
    /// Elements inside the blocks (clipped at the edge) not owned by this part.
    pub covered_zeros: usize,
}

/// A cover of the unpruned elements of a `rows × cols` matrix.
#[derive(Clone, Debug, PartialEq)]
pub struct Cover {
    pub rows: usize,
    pub cols: usize,
    pub parts: Vec<CoverPart>,
    /// Σ weight(shape) × blocks.
    pub cost: f64,
}

impl Cover {
    pub fn n_owned(&self) -> usize {
        self.parts.iter().map(|p| p.owned.len()).sum()
    }

    /// For every element, the index of the part owning it (`None` = not owned).
    pub fn owner_map(&self) -> Vec<Option<usize>> {
        let mut map = vec![None; self.rows * self.cols];
        for (k, p) in self.parts.iter().enumerate() {
            for &i in &p.owned {
                map[i as usize] = Some(k);
            }
        }
        map
    }

    /// `32x32×120 + 1x1×9000`-style summary.
    pub fn summary(&self) -> String {
        let s: Vec<String> = self.parts.iter().map(|p| format!("{}×{}", p.shape, p.blocks.len())).collect();
        if s.is_empty() {
            "empty".into()
        } else {
            s.join(" + ")
        }
    }
}

/// Unpruned-and-uncovered elements, one bit each, row by row.
struct Remaining {
    cols: usize,
    words_per_row: usize,
    bits: Vec<u64>,
}

impl Remaining {
    fn new(pruned: &[bool], rows: usize, cols: usize) -> Remaining {
        let words_per_row = cols.div_ceil(64);
        let mut bits = vec![0u64; rows * words_per_row];
        for r in 0..rows {
            for c in 0..cols {
                if !pruned[r * cols + c] {
                    bits[r * words_per_row + c / 64] |= 1 << (c % 64);
                }
            }
        }
        Remaining { cols, words_per_row, bits }
    }

    /// Set bits of row `r` in columns `c0..c1`.
    fn count_range(&self, r: usize, c0: usize, c1: usize) -> u32 {
        let row = &self.bits[r * self.words_per_row..(r + 1) * self.words_per_row];
        let mut n = 0;
        let mut c = c0;
        while c < c1 {
            let (word, bit) = (c / 64, c % 64);
            let span = (64 - bit).min(c1 - c);
            let mask = if span == 64 { !0 } else { ((1u64 << span) - 1) << bit };
            n += (row[word] & mask).count_ones();
            c += span;
        }
        n
    }

    /// Clears rows `r0..r1` × columns `c0..c1`, appending the cleared indices.
    fn take(&mut self, r0: usize, r1: usize, c0: usize, c1: usize, out: &mut Vec<u32>) {
        for r in r0..r1 {
            let mut c = c0;
            while c < c1 {
                let (word, bit) = (c / 64, c % 64);
                let span = (64 - bit).min(c1 - c);
                let mask = if span == 64 { !0 } else { ((1u64 << span) - 1) << bit };
                let w = &mut self.bits[r * self.words_per_row + word];
                let mut hit = *w & mask;
                *w &= !mask;
                while hit != 0 {
                    let b = hit.trailing_zeros() as usize;
                    out.push((r * self.cols + word * 64 + b) as u32);
                    hit &= hit - 1;
                }
                c += span;
            }
        }
    }
}

/// 2-D prefix sums of unpruned elements: `count(r0..r1, c0..c1)` in O(1).
pub(crate) struct PrefixCounts {
    stride: usize,
    sums: Vec<u32>,
}

impl PrefixCounts {
    pub(crate) fn new(pruned: &[bool], rows: usize, cols: usize) -> PrefixCounts {
        let stride = cols + 1;
        let mut sums = vec![0u32; (rows + 1) * stride];
        for r in 0..rows {
            let mut run = 0u32;
            for c in 0..cols {
                run += u32::from(!pruned[r * cols + c]);
                sums[(r + 1) * stride + c + 1] = sums[r * stride + c + 1] + run;
            }
        }
        PrefixCounts { stride, sums }
    }

    pub(crate) fn count(&self, r0: usize, r1: usize, c0: usize, c1: usize) -> u32 {
        let s = |r: usize, c: usize| self.sums[r * self.stride + c];
        s(r1, c1) + s(r0, c0) - s(r0, c1) - s(r1, c0)
    }
}

/// Row and column ranges of block `(br, bc)` of `shape`, clipped.
pub(super) fn extent(
    shape: BlockShape,
    br: usize,
    bc: usize,
    rows: usize,
    cols: usize,
) -> (usize, usize, usize, usize) {
    let (r0, c0) = (br * shape.h, bc * shape.w);
    (r0, (r0 + shape.h).min(rows), c0, (c0 + shape.w).min(cols))
}

/// A queued block: `key` orders by ratio, then shape, then position (one `u128`
/// comparison); `count` is its unpruned-uncovered count when queued.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Candidate {
    key: u128,
    pub(super) count: u32,
}

impl Candidate {
    /// `ratio` is positive, so its IEEE bits order like the numbers.
    pub(super) fn new(ratio: f64, shape_idx: usize, br: usize, bc: usize, count: u32) -> Candidate {
        let key = (ratio.to_bits() as u128) << 64 | (shape_idx as u128) << 56 | (br as u128) << 28 | bc as u128;
        Candidate { key, count }
    }

    pub(super) fn ratio(&self) -> f64 {
        f64::from_bits((self.key >> 64) as u64)
    }

    pub(super) fn shape_idx(&self) -> usize {
        (self.key >> 56) as usize & 0xff
    }

    pub(super) fn br(&self) -> usize {
        (self.key >> 28) as usize & 0xfff_ffff
    }

    pub(super) fn bc(&self) -> usize {
        self.key as usize & 0xfff_ffff
    }
}

/// Greedy weighted block cover of the unpruned elements (`pruned[i]` false) of a
/// row-major `rows × cols` matrix, with `(shape, weight)` candidates. Weights must be
/// positive. Ties break by shape order, then block position: the result is deterministic.
pub fn cover_blocks(pruned: &[bool], rows: usize, cols: usize, shapes: &[(BlockShape, f64)]) -> Cover {
    assert_eq!(pruned.len(), rows * cols, "mask length must be rows × cols");
    assert!(shapes.len() < 256 && shapes.iter().all(|(s, w)| s.h > 0 && s.w > 0 && *w > 0.0));
    assert!(rows < 1 << 28 && cols < 1 << 28, "at most 2^28 rows and columns");
    let prefix = PrefixCounts::new(pruned, rows, cols);
    let mut remaining = Remaining::new(pruned, rows, cols);
    let unit = shapes.iter().position(|(s, _)| s.area() == 1);
    let threshold = unit.map_or(f64::INFINITY, |u| shapes[u].1);
    // Shapes enter the queue lazily, cheapest possible ratio (weight / area) first: no block
    // of a shape can beat its bound, so a shape joins only once the best queued ratio
    // reaches it, and shapes that are never needed are never enumerated.
    let bound = |k: usize| shapes[k].1 / shapes[k].0.area() as f64;
    let mut order: Vec<usize> = (0..shapes.len()).filter(|k| Some(*k) != unit && bound(*k) < threshold).collect();
    order.sort_by(|a, b| bound(*a).total_cmp(&bound(*b)).then(a.cmp(b)));
    let mut order = order.into_iter().peekable();
    let mut heap = BinaryHeap::new();
    let mut n_remaining = remaining.bits.iter().map(|w| w.count_ones() as usize).sum::<usize>();
    let mut parts: Vec<CoverPart> =
        shapes.iter().map(|&(shape, _)| CoverPart { shape, blocks: vec![], owned: vec![], covered_zeros: 0 }).collect();
    // Stop as soon as everything is covered: the queue may still hold dead blocks.
    while n_remaining > 0 {
        let top = heap.peek().map(|Reverse(c): &Reverse<Candidate>| c.ratio());
        while let Some(&k) = order.peek() {
            if top.is_some_and(|t| bound(k) > t) {
                break;
            }
            order.next();
            let queued = queue_shape(&prefix, shapes, k, threshold, rows, cols);
            if heap.is_empty() {
                // Heapify once: O(n) instead of n pushes.
                heap = BinaryHeap::from(queued);
            } else {
                heap.extend(queued);
            }
        }
        let Some(Reverse(cand)) = heap.pop() else { break };
        let k = cand.shape_idx();
        let (shape, weight) = shapes[k];
        let (br, bc) = (cand.br(), cand.bc());
        let (r0, r1, c0, c1) = extent(shape, br, bc, rows, cols);
        let count: u32 = (r0..r1).map(|r| remaining.count_range(r, c0, c1)).sum();
        if count == 0 {
            continue;
        }
        if count != cand.count {
            let ratio = weight / count as f64;
            if ratio < threshold {
                heap.push(Reverse(Candidate::new(ratio, k, br, bc, count)));
            }
            continue;
        }
        let part = &mut parts[k];
        part.blocks.push((br as u32, bc as u32));
        remaining.take(r0, r1, c0, c1, &mut part.owned);
        part.covered_zeros += (r1 - r0) * (c1 - c0) - count as usize;
        n_remaining -= count as usize;
    }
    if let Some(u) = unit {
        let part = &mut parts[u];
        remaining.take(0, rows, 0, cols, &mut part.owned);
        part.blocks = part.owned.iter().map(|&i| ((i as usize / cols) as u32, (i as usize % cols) as u32)).collect();
    }
    finish(parts, shapes, rows, cols)
}

/// The candidate blocks of shape `k`, counted on the original mask (a count can only be
/// too high, so a queued ratio is never above the true one, as the lazy queue needs).
fn queue_shape(
    prefix: &PrefixCounts,
    shapes: &[(BlockShape, f64)],
    k: usize,
    threshold: f64,
    rows: usize,
    cols: usize,
) -> Vec<Reverse<Candidate>> {
    let (shape, weight) = shapes[k];
    // Shapes whose grid nests this one's and that are cheaper per element when full.
    let dominators: Vec<(BlockShape, f64)> = shapes
        .iter()
        .filter(|(l, lw)| {
            *l != shape
                && l.h % shape.h == 0
                && l.w % shape.w == 0
                && lw / l.area() as f64 <= weight / shape.area() as f64
        })
        .copied()
        .collect();
    let mut queued = vec![];
    for br in 0..rows.div_ceil(shape.h) {
        for bc in 0..cols.div_ceil(shape.w) {
            let (r0, r1, c0, c1) = extent(shape, br, bc, rows, cols);
            let count = prefix.count(r0, r1, c0, c1);
            let ratio = weight / count as f64;
            if count as usize == (r1 - r0) * (c1 - c0)
                && dominators.iter().any(|&(l, lw)| {
                    let (lr0, lr1, lc0, lc1) = extent(l, r0 / l.h, c0 / l.w, rows, cols);
                    let l_count = prefix.count(lr0, lr1, lc0, lc1);
                    // Full (also when clipped at the edge) and no worse a ratio.
                    l_count as usize == (lr1 - lr0) * (lc1 - lc0) && lw / l_count as f64 <= ratio
                })
            {
                // Inside a full block of a cheaper nesting shape: never better.
                continue;
            }
            if count > 0 && ratio < threshold {
                queued.push(Reverse(Candidate::new(ratio, k, br, bc, count)));
            }
        }
    }
    queued
}

/// [`cover_blocks`], then fewer parts when that is cheaper: every part becomes one more
/// sub-operator with a fixed cost (`part_fixed`: a launch, an output pass), which the
/// per-block weights do not see. A part cheaper than that fixed cost is dropped (its shape
/// removed, the rest re-covered) when the total `cost + part_fixed × parts` goes down.
pub fn cover_blocks_fewer_parts(
    pruned: &[bool],
    rows: usize,
    cols: usize,
    shapes: &[(BlockShape, f64)],
    part_fixed: f64,
) -> Cover {
    fewer_parts(&|allowed: &[(BlockShape, f64)]| cover_blocks(pruned, rows, cols, allowed), shapes, part_fixed)
}

/// A cover of one fixed mask with the `(shape, weight)` candidates it is given.
pub(super) type CoverWith<'a> = dyn Fn(&[(BlockShape, f64)]) -> Cover + Sync + 'a;

/// The part-dropping loop of [`cover_blocks_fewer_parts`] around any cover of one mask
/// (`cover` covers it with the shapes it is given).
pub(super) fn fewer_parts(cover: &CoverWith, shapes: &[(BlockShape, f64)], part_fixed: f64) -> Cover {
    let total = |c: &Cover| c.cost + part_fixed * c.parts.len() as f64;
    let mut allowed = shapes.to_vec();
    let mut best = cover(&allowed);
    loop {
        let weight = |s: BlockShape| allowed.iter().find(|(a, _)| *a == s).map_or(0.0, |(_, w)| *w);
        let mut small: Vec<(f64, BlockShape)> = best
            .parts
            .iter()
            .map(|p| (weight(p.shape) * p.blocks.len() as f64, p.shape))
            .filter(|(c, _)| *c < part_fixed)
            .collect();
        small.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let mut improved = false;
        // Both trials are covered side by side; the first (in order) that improves wins, as
        // if they had been tried one after the other.
        let trial_shapes: Vec<Vec<(BlockShape, f64)>> = small
            .into_iter()
            .take(2)
            .map(|(_, shape)| allowed.iter().filter(|(s, _)| *s != shape).copied().collect::<Vec<_>>())
            .filter(|t| !t.is_empty())
            .collect();
        let trials: Vec<Cover> = trial_shapes.par_iter().map(|t| cover(t)).collect();
        for (shapes, trial) in trial_shapes.into_iter().zip(trials) {
            if total(&trial) < total(&best) {
                best = trial;
                allowed = shapes;
                improved = true;
                break;
            }
        }
        if !improved {
            return best;
        }
    }
}

/// The cover with one shape only: every block holding an unpruned element.
pub fn single_shape_cover(pruned: &[bool], rows: usize, cols: usize, shape: BlockShape, weight: f64) -> Cover {
    let mut remaining = Remaining::new(pruned, rows, cols);
    let mut part = CoverPart { shape, blocks: vec![], owned: vec![], covered_zeros: 0 };
    for br in 0..rows.div_ceil(shape.h) {
        for bc in 0..cols.div_ceil(shape.w) {
            let (r0, r1, c0, c1) = extent(shape, br, bc, rows, cols);
            let before = part.owned.len();
            remaining.take(r0, r1, c0, c1, &mut part.owned);
            let n = part.owned.len() - before;
            if n > 0 {
                part.blocks.push((br as u32, bc as u32));
                part.covered_zeros += (r1 - r0) * (c1 - c0) - n;
            }
        }
    }
    finish(vec![part], &[(shape, weight)], rows, cols)
}

/// `owned` in increasing order: a bitset pass for long lists (linear, where a sort of
/// millions of indices is not), a sort for short ones and for lists far sparser than the
/// matrix (the bitset would be larger than the list: a 65,536² weight's is 512 MiB).
fn sorted(mut owned: Vec<u32>, numel: usize) -> Vec<u32> {
    if owned.len() < 4096 || numel / 64 > 8 * owned.len() {
        owned.sort_unstable();
        return owned;
    }
    let mut bits = vec![0u64; numel.div_ceil(64)];
    for &i in &owned {
        bits[i as usize / 64] |= 1 << (i % 64);
    }
    owned.clear();
    for (w, word) in bits.iter().enumerate() {
        let mut x = *word;
        while x != 0 {
            owned.push((w * 64) as u32 + x.trailing_zeros());
            x &= x - 1;
        }
    }
    owned
}

pub(super) fn finish(mut parts: Vec<CoverPart>, shapes: &[(BlockShape, f64)], rows: usize, cols: usize) -> Cover {
    let mut cost = 0.0;
    for (p, (_, weight)) in parts.iter_mut().zip(shapes) {
        p.blocks.sort_unstable();
        p.owned = sorted(std::mem::take(&mut p.owned), rows * cols);
        cost += weight * p.blocks.len() as f64;
    }
    parts.retain(|p| !p.owned.is_empty());
    Cover { rows, cols, parts, cost }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tesa::patterns::Pattern;

    fn check_exact(cover: &Cover, pruned: &[bool]) {
        let owners = cover.owner_map();
        for (i, p) in pruned.iter().enumerate() {
            assert_eq!(owners[i].is_some(), !p, "element {i}");
        }
        assert_eq!(cover.n_owned(), pruned.iter().filter(|p| !**p).count());
    }

    fn weights(shapes: &[BlockShape]) -> Vec<(BlockShape, f64)> {
        // Weight grows slower than area: big blocks are cheaper per element.
        shapes.iter().map(|s| (*s, 4.0 + s.area() as f64 * 0.25)).collect()
    }

    #[test]
    fn mixed_pattern_splits_into_blocks_and_scalars() {
        let (rows, cols) = (256, 256);
        let pruned = Pattern::Mixed { bh: 32, bw: 32, block_sparsity: 0.8, scattered: 0.01 }.mask(rows, cols, 5);
        let cover = cover_blocks(&pruned, rows, cols, &weights(&DEFAULT_SHAPES));
        check_exact(&cover, &pruned);
        let shapes: Vec<BlockShape> = cover.parts.iter().map(|p| p.shape).collect();
        assert!(shapes.contains(&BlockShape::new(1, 1)), "{}", cover.summary());
        assert!(shapes.iter().any(|s| s.area() >= 1024), "{}", cover.summary());
        let only32 = single_shape_cover(&pruned, rows, cols, BlockShape::new(32, 32), 4.0 + 256.0);
        check_exact(&only32, &pruned);
        assert!(cover.cost < only32.cost, "{} vs {}", cover.cost, only32.cost);
        // A high fixed cost per part leaves fewer parts, still exact.
        let fewer = cover_blocks_fewer_parts(&pruned, rows, cols, &weights(&DEFAULT_SHAPES), 1e4);
        check_exact(&fewer, &pruned);
        assert!(fewer.parts.len() < cover.parts.len(), "{} vs {}", fewer.summary(), cover.summary());
    }

    #[test]
    fn clipped_edges_and_without_unit_shape() {
        let (rows, cols) = (37, 45);
        let pruned = Pattern::Unstructured { sparsity: 0.7 }.mask(rows, cols, 9);
        let shapes = weights(&[BlockShape::new(8, 8), BlockShape::new(1, 4)]);
        let cover = cover_blocks(&pruned, rows, cols, &shapes);
        check_exact(&cover, &pruned);
        assert_eq!(cover, cover_blocks(&pruned, rows, cols, &shapes), "deterministic");
    }

    #[test]
    fn empty_and_full() {
        let cover = cover_blocks(&[true; 64], 8, 8, &weights(&DEFAULT_SHAPES));
        assert!(cover.parts.is_empty());
        let cover = cover_blocks(&[false; 64 * 64], 64, 64, &weights(&DEFAULT_SHAPES));
        assert_eq!(cover.summary(), "64x64×1");
        assert_eq!(cover.parts[0].covered_zeros, 0);
    }
}
