//! WeightedBlockCover on a sparse mask: [`cover_blocks_sparse`] and
//! [`single_shape_cover_sparse`] take the weight's unpruned elements as sorted row-major flat
//! indices and build nothing of the weight's dense size, so a 65,536² HPEC layer (2^32
//! elements, 2 million unpruned) is covered in memory proportional to its nonzeros.
//!
//! The greedy is [`super::cover::cover_blocks`]'s, step for step: the same lazy queue keyed by
//! (ratio, shape, block), the same shape bounds and threshold, the same dominator rule, the
//! same ratio from the original counts when a block is queued and the same re-count when it
//! reaches the top. The candidate keys are unique, so the pops come in the same order and the
//! covers are equal (the tests compare them on random masks). Only the bookkeeping differs:
//! per shape, the occupied blocks (sorted block ids), the elements of each, and each block's
//! uncovered count, decremented as elements are taken.

use super::cover::{extent, fewer_parts, finish, BlockShape, Candidate, Cover, CoverPart};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// The occupied blocks of one shape.
struct ShapeBlocks {
    /// Blocks per grid row (`cols / w`, rounded up): block id = `br · per_row + bc`.
    per_row: u64,
    /// Occupied block ids, increasing.
    ids: Vec<u64>,
    /// `members[starts[b]..starts[b + 1]]`: positions (into the unpruned list) of block `b`'s
    /// elements, increasing.
    starts: Vec<u32>,
    members: Vec<u32>,
    /// Per block, its elements not yet covered.
    uncovered: Vec<u32>,
    /// Per element (position in the unpruned list), the index of its block.
    block_of: Vec<u32>,
}

impl ShapeBlocks {
    fn new(unpruned: &[u32], cols: usize, shape: BlockShape, covered: &[bool]) -> ShapeBlocks {
        let per_row = cols.div_ceil(shape.w) as u64;
        let id = |i: u32| {
            let (r, c) = (i as usize / cols, i as usize % cols);
            (r / shape.h) as u64 * per_row + (c / shape.w) as u64
        };
        let mut order: Vec<(u64, u32)> = unpruned.iter().enumerate().map(|(e, &i)| (id(i), e as u32)).collect();
        order.sort_unstable();
        let (mut ids, mut starts, mut uncovered) = (vec![], vec![], vec![]);
        let mut members = Vec::with_capacity(order.len());
        let mut block_of = vec![0u32; order.len()];
        for (pos, &(block, e)) in order.iter().enumerate() {
            if ids.last() != Some(&block) {
                ids.push(block);
                starts.push(pos as u32);
                uncovered.push(0);
            }
            block_of[e as usize] = (ids.len() - 1) as u32;
            members.push(e);
            *uncovered.last_mut().unwrap() += u32::from(!covered[e as usize]);
        }
        starts.push(order.len() as u32);
        ShapeBlocks { per_row, ids, starts, members, uncovered, block_of }
    }

    /// Index of block `(br, bc)` among the occupied ones.
    fn find(&self, br: usize, bc: usize) -> Option<usize> {
        self.ids.binary_search(&(br as u64 * self.per_row + bc as u64)).ok()
    }

    /// Elements of block `b` on the original mask.
    fn count(&self, b: usize) -> u32 {
        self.starts[b + 1] - self.starts[b]
    }

    fn position(&self, b: usize) -> (usize, usize) {
        ((self.ids[b] / self.per_row) as usize, (self.ids[b] % self.per_row) as usize)
    }
}

/// The state of one greedy run: each shape's blocks, built when first needed.
struct Blocks<'a> {
    unpruned: &'a [u32],
    rows: usize,
    cols: usize,
    shapes: &'a [(BlockShape, f64)],
    tables: Vec<Option<ShapeBlocks>>,
    covered: Vec<bool>,
}

impl Blocks<'_> {
    fn table(&mut self, k: usize) -> &ShapeBlocks {
        if self.tables[k].is_none() {
            self.tables[k] = Some(ShapeBlocks::new(self.unpruned, self.cols, self.shapes[k].0, &self.covered));
        }
        self.tables[k].as_ref().unwrap()
    }

    /// Original count of the block of shape `k` holding element `(r, c)` (0 when empty).
    fn count_at(&mut self, k: usize, r: usize, c: usize) -> u32 {
        let shape = self.shapes[k].0;
        let t = self.table(k);
        t.find(r / shape.h, c / shape.w).map_or(0, |b| t.count(b))
    }

    /// Marks the uncovered elements of block `b` of shape `k` covered, appends their flat
    /// indices to `out` and keeps every other built shape's counts current.
    fn take(&mut self, k: usize, b: usize, out: &mut Vec<u32>) {
        let t = self.tables[k].as_ref().unwrap();
        let taken: Vec<u32> = t.members[t.starts[b] as usize..t.starts[b + 1] as usize]
            .iter()
            .copied()
            .filter(|&e| !self.covered[e as usize])
            .collect();
        for &e in &taken {
            self.covered[e as usize] = true;
            out.push(self.unpruned[e as usize]);
            for t in self.tables.iter_mut().flatten() {
                t.uncovered[t.block_of[e as usize] as usize] -= 1;
            }
        }
    }
}

/// [`super::cover::cover_blocks`] of the matrix whose unpruned elements are `unpruned`
/// (row-major flat indices, increasing): the same cover, in memory proportional to them.
pub fn cover_blocks_sparse(unpruned: &[u32], rows: usize, cols: usize, shapes: &[(BlockShape, f64)]) -> Cover {
    assert!(unpruned.windows(2).all(|p| p[0] < p[1]), "unpruned indices must be increasing");
    assert!(unpruned.last().is_none_or(|&i| (i as usize) < rows * cols), "an unpruned index lies outside the matrix");
    assert!(shapes.len() < 256 && shapes.iter().all(|(s, w)| s.h > 0 && s.w > 0 && *w > 0.0));
    assert!(rows < 1 << 28 && cols < 1 << 28, "at most 2^28 rows and columns");
    let mut st = Blocks {
        unpruned,
        rows,
        cols,
        shapes,
        tables: shapes.iter().map(|_| None).collect(),
        covered: vec![false; unpruned.len()],
    };
    let unit = shapes.iter().position(|(s, _)| s.area() == 1);
    let threshold = unit.map_or(f64::INFINITY, |u| shapes[u].1);
    let bound = |k: usize| shapes[k].1 / shapes[k].0.area() as f64;
    // A shape none of whose blocks holds enough elements to beat the unit ratio would queue no
    // block: skipping it (before its table is built, the costly part on a 0.2%-dense HPEC
    // layer) leaves the cover as it is.
    let may_queue = |k: usize| {
        let most = f64::from(max_block_count(unpruned, cols, shapes[k].0));
        threshold.is_infinite() || shapes[k].1 / most < threshold
    };
    let mut order: Vec<usize> =
        (0..shapes.len()).filter(|k| Some(*k) != unit && bound(*k) < threshold && may_queue(*k)).collect();
    order.sort_by(|a, b| bound(*a).total_cmp(&bound(*b)).then(a.cmp(b)));
    let mut order = order.into_iter().peekable();
    let mut heap = BinaryHeap::new();
    let mut n_remaining = unpruned.len();
    let mut parts: Vec<CoverPart> =
        shapes.iter().map(|&(shape, _)| CoverPart { shape, blocks: vec![], owned: vec![], covered_zeros: 0 }).collect();
    while n_remaining > 0 {
        let top = heap.peek().map(|Reverse(c): &Reverse<Candidate>| c.ratio());
        while let Some(&k) = order.peek() {
            if top.is_some_and(|t| bound(k) > t) {
                break;
            }
            order.next();
            let queued = queue_shape(&mut st, k, threshold);
            if heap.is_empty() {
                heap = BinaryHeap::from(queued);
            } else {
                heap.extend(queued);
            }
        }
        let Some(Reverse(cand)) = heap.pop() else { break };
        let k = cand.shape_idx();
        let (shape, weight) = shapes[k];
        let (br, bc) = (cand.br(), cand.bc());
        let b = st.table(k).find(br, bc).expect("a queued block is occupied");
        let count = st.table(k).uncovered[b];
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
        let (r0, r1, c0, c1) = extent(shape, br, bc, rows, cols);
        let mut owned = std::mem::take(&mut parts[k].owned);
        st.take(k, b, &mut owned);
        let part = &mut parts[k];
        part.owned = owned;
        part.blocks.push((br as u32, bc as u32));
        part.covered_zeros += (r1 - r0) * (c1 - c0) - count as usize;
        n_remaining -= count as usize;
    }
    if let Some(u) = unit {
        let part = &mut parts[u];
        part.owned.extend(unpruned.iter().zip(&st.covered).filter(|(_, c)| !**c).map(|(&i, _)| i));
        part.blocks = part.owned.iter().map(|&i| ((i as usize / cols) as u32, (i as usize % cols) as u32)).collect();
    }
    for p in &mut parts {
        p.owned.sort_unstable();
    }
    finish(parts, shapes, rows, cols)
}

/// The most elements any block of `shape` holds: one pass over the elements, a band of `h`
/// rows at a time, counting per block column.
fn max_block_count(unpruned: &[u32], cols: usize, shape: BlockShape) -> u32 {
    let mut counts = vec![0u32; cols.div_ceil(shape.w)];
    let mut touched: Vec<usize> = vec![];
    let (mut band, mut max) = (usize::MAX, 0);
    for &i in unpruned {
        let (r, c) = (i as usize / cols, i as usize % cols);
        if r / shape.h != band {
            band = r / shape.h;
            touched.drain(..).for_each(|b| counts[b] = 0);
        }
        let b = c / shape.w;
        if counts[b] == 0 {
            touched.push(b);
        }
        counts[b] += 1;
        max = max.max(counts[b]);
    }
    max.max(1)
}

/// The queued blocks of shape `k`: [`super::cover`]'s `queue_shape` over the occupied blocks
/// only (an empty block is never queued there either).
fn queue_shape(st: &mut Blocks, k: usize, threshold: f64) -> Vec<Reverse<Candidate>> {
    let (shape, weight) = st.shapes[k];
    let (rows, cols) = (st.rows, st.cols);
    let dominators: Vec<usize> = (0..st.shapes.len())
        .filter(|&l| {
            let (ls, lw) = st.shapes[l];
            ls != shape
                && ls.h % shape.h == 0
                && ls.w % shape.w == 0
                && lw / ls.area() as f64 <= weight / shape.area() as f64
        })
        .collect();
    let n_blocks = st.table(k).ids.len();
    let mut queued = vec![];
    for b in 0..n_blocks {
        let t = st.tables[k].as_ref().unwrap();
        let ((br, bc), count) = (t.position(b), t.count(b));
        let (r0, r1, c0, c1) = extent(shape, br, bc, rows, cols);
        let ratio = weight / count as f64;
        let full = count as usize == (r1 - r0) * (c1 - c0);
        if full
            && dominators.iter().any(|&l| {
                let (ls, lw) = st.shapes[l];
                let (lr0, lr1, lc0, lc1) = extent(ls, r0 / ls.h, c0 / ls.w, rows, cols);
                let l_count = st.count_at(l, r0, c0);
                l_count as usize == (lr1 - lr0) * (lc1 - lc0) && lw / l_count as f64 <= ratio
            })
        {
            continue;
        }
        if ratio < threshold {
            queued.push(Reverse(Candidate::new(ratio, k, br, bc, count)));
        }
    }
    queued
}

/// [`super::cover::cover_blocks_fewer_parts`] on a sparse mask.
pub fn cover_blocks_fewer_parts_sparse(
    unpruned: &[u32],
    rows: usize,
    cols: usize,
    shapes: &[(BlockShape, f64)],
    part_fixed: f64,
) -> Cover {
    fewer_parts(&|allowed: &[(BlockShape, f64)]| cover_blocks_sparse(unpruned, rows, cols, allowed), shapes, part_fixed)
}

/// [`super::cover::single_shape_cover`] on a sparse mask: every occupied block of `shape`.
pub fn single_shape_cover_sparse(unpruned: &[u32], rows: usize, cols: usize, shape: BlockShape, weight: f64) -> Cover {
    let t = ShapeBlocks::new(unpruned, cols, shape, &vec![false; unpruned.len()]);
    let mut part = CoverPart { shape, blocks: vec![], owned: unpruned.to_vec(), covered_zeros: 0 };
    for b in 0..t.ids.len() {
        let (br, bc) = t.position(b);
        let (r0, r1, c0, c1) = extent(shape, br, bc, rows, cols);
        part.blocks.push((br as u32, bc as u32));
        part.covered_zeros += (r1 - r0) * (c1 - c0) - t.count(b) as usize;
    }
    finish(vec![part], &[(shape, weight)], rows, cols)
}

#[cfg(test)]
mod tests {
    use super::super::cover::{cover_blocks, cover_blocks_fewer_parts, single_shape_cover, DEFAULT_SHAPES};
    use super::*;
    use crate::tesa::patterns::Pattern;

    fn unpruned(pruned: &[bool]) -> Vec<u32> {
        (0..pruned.len() as u32).filter(|&i| !pruned[i as usize]).collect()
    }

    fn weights(shapes: &[BlockShape], per_block: f64) -> Vec<(BlockShape, f64)> {
        shapes.iter().map(|s| (*s, per_block + s.area() as f64 * 0.25)).collect()
    }

    #[test]
    fn equals_the_dense_cover_on_random_masks() {
        let cases: Vec<(usize, usize, Pattern)> = vec![
            (256, 256, Pattern::Mixed { bh: 32, bw: 32, block_sparsity: 0.8, scattered: 0.01 }),
            (96, 160, Pattern::Mixed { bh: 8, bw: 16, block_sparsity: 0.6, scattered: 0.05 }),
            (37, 45, Pattern::Unstructured { sparsity: 0.7 }),
            (128, 200, Pattern::Unstructured { sparsity: 0.97 }),
            (64, 64, Pattern::Unstructured { sparsity: 0.0 }),
        ];
        for (seed, (rows, cols, pattern)) in cases.into_iter().enumerate() {
            let pruned = pattern.mask(rows, cols, seed as u64 + 3);
            let idx = unpruned(&pruned);
            for per_block in [4.0, 40.0] {
                let shapes = weights(&DEFAULT_SHAPES, per_block);
                let dense = cover_blocks(&pruned, rows, cols, &shapes);
                assert_eq!(cover_blocks_sparse(&idx, rows, cols, &shapes), dense, "{rows}x{cols} {pattern:?}");
                let no_unit =
                    weights(&[BlockShape::new(8, 8), BlockShape::new(1, 4), BlockShape::new(16, 16)], per_block);
                assert_eq!(
                    cover_blocks_sparse(&idx, rows, cols, &no_unit),
                    cover_blocks(&pruned, rows, cols, &no_unit)
                );
                assert_eq!(
                    cover_blocks_fewer_parts_sparse(&idx, rows, cols, &shapes, 1e3),
                    cover_blocks_fewer_parts(&pruned, rows, cols, &shapes, 1e3)
                );
            }
            for shape in [BlockShape::new(1, 1), BlockShape::new(8, 8), BlockShape::new(32, 32), BlockShape::new(1, 16)]
            {
                assert_eq!(
                    single_shape_cover_sparse(&idx, rows, cols, shape, 5.0),
                    single_shape_cover(&pruned, rows, cols, shape, 5.0)
                );
            }
        }
    }

    #[test]
    fn skipping_shapes_that_cannot_beat_the_unit_keeps_the_cover() {
        // At 0.5% density an 8×8 block never holds the 14 elements its weight needs to beat
        // 1×1 blocks (so its table is never built), while some 1×4 blocks hold the 2 they need.
        let (rows, cols) = (300, 280);
        let pruned = Pattern::Unstructured { sparsity: 0.995 }.mask(rows, cols, 11);
        let idx = unpruned(&pruned);
        let shapes = weights(&DEFAULT_SHAPES, 1.0);
        let unit = shapes.iter().find(|(s, _)| s.area() == 1).unwrap().1;
        let queues = |shape: BlockShape| {
            let w = shapes.iter().find(|(s, _)| *s == shape).unwrap().1;
            w / f64::from(max_block_count(&idx, cols, shape)) < unit
        };
        assert!(!queues(BlockShape::new(8, 8)) && queues(BlockShape::new(1, 4)));
        assert_eq!(cover_blocks_sparse(&idx, rows, cols, &shapes), cover_blocks(&pruned, rows, cols, &shapes));
        assert_eq!(
            cover_blocks_fewer_parts_sparse(&idx, rows, cols, &shapes, 3.0),
            cover_blocks_fewer_parts(&pruned, rows, cols, &shapes, 3.0)
        );
    }

    #[test]
    fn max_block_count_is_the_fullest_block() {
        // 4 columns, elements at (0,0) (0,1) (1,1) (2,3) (3,2) (3,3).
        let idx = [0u32, 1, 5, 11, 14, 15];
        assert_eq!(max_block_count(&idx, 4, BlockShape::new(2, 2)), 3);
        assert_eq!(max_block_count(&idx, 4, BlockShape::new(1, 4)), 2);
        assert_eq!(max_block_count(&idx, 4, BlockShape::new(4, 1)), 2);
        assert_eq!(max_block_count(&idx, 4, BlockShape::new(4, 4)), 6);
        assert_eq!(max_block_count(&[], 4, BlockShape::new(2, 2)), 1);
    }

    #[test]
    fn covers_a_matrix_of_two_to_the_32_elements() {
        // A 65,536² weight with 3 nonzeros per row in a few rows: the dense mask would be 4 GiB.
        let n = 65_536usize;
        let mut idx: Vec<u32> = (0..64usize)
            .flat_map(|r| [(r * 977) % n, (r * 31_337 + 5) % n, n - 1 - r].map(move |c| (r * 1021 * n + c) as u32))
            .collect();
        idx.sort_unstable();
        idx.dedup();
        let cover = cover_blocks_sparse(&idx, n, n, &weights(&DEFAULT_SHAPES, 4.0));
        assert_eq!(cover.n_owned(), idx.len());
        let mut owned: Vec<u32> = cover.parts.iter().flat_map(|p| p.owned.iter().copied()).collect();
        owned.sort_unstable();
        assert_eq!(owned, idx, "every unpruned element owned once");
        // Rows 0 holds columns 0 and 5: one 1×8 block beats two scalars; the rest are scalars.
        assert_eq!(cover.summary(), format!("1x8×1 + 1x1×{}", idx.len() - 2));
    }
}
