//! The `MatMul` masks on bits: `Y = A·B` with batch broadcasting, forward and backward.
//!
//! Per product (`A` of `m × k`, `B` of `k × n`), with `U` meaning "unpruned":
//! - forward: `Y[i,j]` is pruned when it already is or no `k` has `AU[i,k]` and `BU[k,j]`:
//!   the live columns of row `i` are the OR of `BU`'s rows over `AU`'s row `i`;
//! - backward `A[i,k]`: pruned when no `j` has `YU[i,j]` and `BU[k,j]`;
//! - backward `B[k,j]`: pruned when no `i` has `YU[i,j]` and `AU[i,k]`.
//!
//! All three are computed once per *distinct* row of `A` (and of `Y`, and pair of both) rather
//! than per row: the rows of a pruned activation are mostly alike (whole columns pruned), so a
//! 6304 × 768 × 768 product costs a handful of row ORs instead of `m·n·k/64` word ANDs. The
//! result is the same function; `matmul_tests.rs` holds it against the per-element definition.

use crate::ir::broadcast_index_map;
use crate::tesa::BitMask;
use std::collections::HashMap;

/// Row-major rows of `cols` bits each, a whole number of words per row.
struct Rows {
    words: usize,
    data: Vec<u64>,
}

impl Rows {
    fn new(rows: usize, cols: usize) -> Rows {
        let words = cols.div_ceil(64).max(1);
        Rows { words, data: vec![0; rows * words] }
    }

    /// The complement of `rows × cols` bits of `mask` from `off`, bits past `cols` clear.
    fn unpruned(mask: &BitMask, off: usize, rows: usize, cols: usize) -> Rows {
        let mut r = Rows::new(rows, cols);
        for i in 0..rows {
            let row = r.row_mut(i);
            let mut t = 0;
            for w in row.iter_mut() {
                let n = (cols - t).min(64);
                *w = !mask.read(off + i * cols + t, n) & low(n);
                t += n;
            }
        }
        r
    }

    fn row(&self, i: usize) -> &[u64] {
        &self.data[i * self.words..(i + 1) * self.words]
    }

    fn row_mut(&mut self, i: usize) -> &mut [u64] {
        &mut self.data[i * self.words..(i + 1) * self.words]
    }

    /// Class of every row (rows with equal bits share one) and the first row of each class.
    fn classes(&self, rows: usize) -> (Vec<usize>, Vec<usize>) {
        let mut seen: HashMap<&[u64], usize> = HashMap::new();
        let mut first = vec![];
        let class = (0..rows)
            .map(|i| {
                *seen.entry(self.row(i)).or_insert_with(|| {
                    first.push(i);
                    first.len() - 1
                })
            })
            .collect();
        (class, first)
    }
}

fn low(n: usize) -> u64 {
    if n >= 64 {
        u64::MAX
    } else {
        (1u64 << n) - 1
    }
}

/// Bits set in `row` (of `cols` bits), in order.
fn ones(row: &[u64], cols: usize) -> impl Iterator<Item = usize> + '_ {
    row.iter().enumerate().flat_map(move |(w, &bits)| {
        (0..64).filter(move |b| bits >> b & 1 == 1).map(move |b| w * 64 + b).filter(move |&c| c < cols)
    })
}

fn or_into(dst: &mut [u64], src: &[u64]) {
    dst.iter_mut().zip(src).for_each(|(d, s)| *d |= s);
}

fn intersects(a: &[u64], b: &[u64]) -> bool {
    a.iter().zip(b).any(|(x, y)| x & y != 0)
}

/// Writes the `cols` bits of `row` at `off` of `mask`, ORed with what is there (`or`) or
/// replacing it.
fn put(mask: &mut BitMask, off: usize, row: &[u64], cols: usize, or: bool) {
    let mut t = 0;
    for &w in row {
        if t >= cols {
            break;
        }
        let n = (cols - t).min(64);
        let v = if or { mask.read(off + t, n) | w } else { w };
        mask.write(off + t, n, v);
        t += n;
    }
}

/// Masks of `Y = A·B` with batch broadcasting; `a`, `b`, `y` are flat masks of logical
/// shapes `[..., m, k]`, `[..., k, n]`, `[..., m, n]`. Returns (forward y, back a, back b).
pub(super) fn matmul_masks(
    a: &BitMask,
    a_shape: &[usize],
    b: &BitMask,
    b_shape: &[usize],
    y: &BitMask,
    y_batch: &[usize],
) -> (BitMask, BitMask, BitMask) {
    let (m, k) = (a_shape[a_shape.len() - 2], a_shape[a_shape.len() - 1]);
    let n = b_shape[b_shape.len() - 1];
    let map_a = broadcast_index_map(&a_shape[..a_shape.len() - 2], y_batch);
    let map_b = broadcast_index_map(&b_shape[..b_shape.len() - 2], y_batch);
    let mut fwd = BitMask::new(y.len());
    let mut a_needed = BitMask::new(a.len());
    let mut b_needed = BitMask::new(b.len());
    for (ob, (&ab, &bb)) in map_a.iter().zip(&map_b).enumerate() {
        let (ao, bo, yo) = (ab * m * k, bb * k * n, ob * m * n);
        let a_rows = Rows::unpruned(a, ao, m, k);
        let b_rows = Rows::unpruned(b, bo, k, n);
        let (a_class, a_first) = a_rows.classes(m);
        // Forward, per class of A's rows: the columns some unpruned k reaches.
        let mut live = Rows::new(a_first.len(), n);
        for (c, &i) in a_first.iter().enumerate() {
            for kk in ones(a_rows.row(i), k) {
                or_into(live.row_mut(c), b_rows.row(kk));
            }
        }
        // Y's unpruned rows after the forward step: live and not already pruned.
        let y_free = Rows::unpruned(y, yo, m, n);
        let mut y_rows = Rows::new(m, n);
        for (i, &class) in a_class.iter().enumerate() {
            let (src, alive) = (y_free.row(i), live.row(class));
            y_rows.row_mut(i).iter_mut().zip(src.iter().zip(alive)).for_each(|(d, (s, l))| *d = s & l);
        }
        let mut pruned_row = vec![0u64; y_rows.words];
        for i in 0..m {
            let (mut t, row) = (0, y_rows.row(i));
            for (p, w) in pruned_row.iter_mut().zip(row) {
                *p = !w & low(n.saturating_sub(t));
                t += 64;
            }
            put(&mut fwd, yo + i * n, &pruned_row, n, false);
        }
        // Backward on A, per class of Y's rows: the k whose B row meets the live columns.
        let (y_class, y_first) = y_rows.classes(m);
        let mut a_need = Rows::new(y_first.len(), k);
        for (c, &i) in y_first.iter().enumerate() {
            for kk in 0..k {
                if intersects(y_rows.row(i), b_rows.row(kk)) {
                    a_need.row_mut(c)[kk / 64] |= 1 << (kk % 64);
                }
            }
        }
        for (i, &class) in y_class.iter().enumerate() {
            put(&mut a_needed, ao + i * k, a_need.row(class), k, true);
        }
        // Backward on B, per distinct (Y row, A row) pair: row k of B is needed at Y's live
        // columns wherever A's row has k unpruned.
        let mut pairs: HashMap<(usize, usize), usize> = HashMap::new();
        for (i, pair) in y_class.iter().zip(&a_class).enumerate() {
            pairs.entry((*pair.0, *pair.1)).or_insert(i);
        }
        let mut b_need = Rows::new(k, n);
        let mut firsts: Vec<usize> = pairs.into_values().collect();
        firsts.sort_unstable();
        for i in firsts {
            for kk in ones(a_rows.row(i), k) {
                or_into(b_need.row_mut(kk), y_rows.row(i));
            }
        }
        for kk in 0..k {
            put(&mut b_needed, bo + kk * n, b_need.row(kk), n, true);
        }
    }
    (fwd, a_needed.not(), b_needed.not())
}

#[cfg(test)]
#[path = "matmul_tests.rs"]
mod tests;
