//! Pruning masks for the attrs file: magnitude proposals (block, channel, N:M) computed
//! from an initializer's values, and explicit ones (block grids, row, column and channel
//! lists). Every mask is one bool per element in row-major order, true = pruned.
//!
//! Block and line masks see a tensor as a 2-D matrix, [`view_2d`]: `cols` is the last
//! axis, `rows` all leading axes flattened (rank 1 is one row, rank 0 one element).

/// The `(rows, cols)` matrix view of `shape`.
pub fn view_2d(shape: &[usize]) -> (usize, usize) {
    match shape.len() {
        0 => (1, 1),
        1 => (1, shape[0]),
        r => (shape[..r - 1].iter().product(), shape[r - 1]),
    }
}

/// The grid of `block` (rows × cols) over the matrix view of `shape`: `ceil(dim / block)`.
pub fn block_grid(shape: &[usize], block: [usize; 2]) -> [usize; 2] {
    let (rows, cols) = view_2d(shape);
    [rows.div_ceil(block[0].max(1)), cols.div_ceil(block[1].max(1))]
}

/// For every element, the row-major index of its block in [`block_grid`].
pub fn block_index(shape: &[usize], block: [usize; 2]) -> impl Iterator<Item = usize> {
    let (rows, cols) = view_2d(shape);
    let [br, bc] = [block[0].max(1), block[1].max(1)];
    let gc = cols.div_ceil(bc);
    (0..rows * cols).map(move |i| (i / cols / br) * gc + (i % cols) / bc)
}

/// Prunes the `sparsity` fraction of blocks (over the last `block.len()` axes, at most
/// two; leading axes flattened) with the smallest L1 norms.
pub fn block_magnitude_mask(values: &[f64], shape: &[usize], block: &[usize], sparsity: f64) -> Vec<bool> {
    let block = match block.len() {
        1 => [1, block[0]],
        _ => [block[block.len() - 2], block[block.len() - 1]],
    };
    let [gr, gc] = block_grid(shape, block);
    let mut norms = vec![0.0f64; gr * gc];
    for (b, v) in block_index(shape, block).zip(values) {
        norms[b] += v.abs();
    }
    let mut order: Vec<usize> = (0..norms.len()).collect();
    order.sort_by(|a, b| norms[*a].total_cmp(&norms[*b]).then(a.cmp(b)));
    let n_prune = ((norms.len() as f64) * sparsity).round() as usize;
    let mut dead = vec![false; norms.len()];
    for &b in &order[..n_prune.min(order.len())] {
        dead[b] = true;
    }
    block_index(shape, block).map(|b| dead[b]).collect()
}

/// Prunes the `sparsity` fraction of output channels (axis-0 slices) with the smallest
/// L1 norms.
pub fn channel_magnitude_mask(values: &[f64], shape: &[usize], sparsity: f64) -> Vec<bool> {
    let rest: usize = shape.iter().skip(1).product();
    let flat = [shape.first().copied().unwrap_or(1), rest];
    block_magnitude_mask(values, &flat, &[1, rest.max(1)], sparsity)
}

/// Keeps the `n` largest magnitudes of every `m` consecutive elements along `axis` (ties: the
/// lower index); `axis` must be below the rank (a scalar counts as rank 1).
pub fn nm_mask(values: &[f64], shape: &[usize], n: usize, m: usize, axis: usize) -> Vec<bool> {
    let len = shape.get(axis).copied().unwrap_or(values.len()).max(1);
    let inner: usize = shape.iter().skip(axis + 1).product::<usize>().max(1);
    let mut mask = vec![false; values.len()];
    for outer in 0..values.len() / (len * inner) {
        for lane in 0..inner {
            let at = |i: usize| (outer * len + i) * inner + lane;
            for start in (0..len).step_by(m) {
                let end = (start + m).min(len);
                let mut idx: Vec<usize> = (start..end).map(at).collect();
                idx.sort_by(|a, b| values[*b].abs().total_cmp(&values[*a].abs()).then(a.cmp(b)));
                for &i in idx.iter().skip(n) {
                    mask[i] = true;
                }
            }
        }
    }
    mask
}

/// Which slices a list of indices prunes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Line {
    /// Rows of the matrix view (all axes but the last, flattened).
    Row,
    /// Columns of the matrix view (the last axis).
    Col,
    /// Slices along axis 0 (output channels of a weight).
    Channel,
}

impl Line {
    pub fn key(self) -> &'static str {
        match self {
            Line::Row => "rows",
            Line::Col => "cols",
            Line::Channel => "channels",
        }
    }

    /// How many rows, columns or channels `shape` has.
    pub fn count(self, shape: &[usize]) -> usize {
        match self {
            Line::Row => view_2d(shape).0,
            Line::Col => view_2d(shape).1,
            Line::Channel => shape.first().copied().unwrap_or(1),
        }
    }
}

/// Prunes the listed rows, columns or channels; `Err(index)` for the first index out of
/// range.
pub fn line_mask(shape: &[usize], line: Line, indices: &[usize]) -> Result<Vec<bool>, usize> {
    let count = line.count(shape);
    let mut dead = vec![false; count];
    for &i in indices {
        *dead.get_mut(i).ok_or(i)? = true;
    }
    let numel: usize = shape.iter().product();
    let (_, cols) = view_2d(shape);
    let per_channel = numel.checked_div(count).unwrap_or(0);
    Ok((0..numel)
        .map(|i| match line {
            Line::Row => dead[i / cols],
            Line::Col => dead[i % cols],
            Line::Channel => dead[i / per_channel],
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_and_nm_masks() {
        let v: Vec<f64> = (0..16).map(|i| i as f64).collect();
        let m = block_magnitude_mask(&v, &[4, 4], &[2, 2], 0.5);
        assert_eq!(m.iter().filter(|x| **x).count(), 8);
        assert!(m[0] && m[1] && m[4] && m[5], "the smallest block goes first");
        assert!(!m[15]);
        let m = nm_mask(&[1.0, -4.0, 3.0, 2.0, 0.5, 0.1, 0.2, 0.3], &[8], 2, 4, 0);
        assert_eq!(m, vec![true, false, false, true, false, true, true, false]);
        // Along axis 0 of a 4 × 2 matrix: each column's 4 rows are one group.
        let m = nm_mask(&[1.0, 0.5, -4.0, 0.1, 3.0, 0.2, 2.0, 0.3], &[4, 2], 2, 4, 0);
        assert_eq!(m, vec![true, false, false, true, false, true, true, false]);
        let m = nm_mask(&[1.0, 0.5, -4.0, 0.1, 3.0, 0.2, 2.0, 0.3], &[4, 2], 1, 2, 1);
        assert_eq!(m, vec![false, true, false, true, false, true, false, true]);
    }

    #[test]
    fn grids_and_lines_use_the_matrix_view() {
        assert_eq!(view_2d(&[2, 3, 4]), (6, 4));
        assert_eq!(block_grid(&[5, 5], [2, 4]), [3, 2]);
        let idx: Vec<usize> = block_index(&[3, 3], [2, 2]).collect();
        assert_eq!(idx, vec![0, 0, 1, 0, 0, 1, 2, 2, 3]);
        let rows = line_mask(&[2, 2, 2], Line::Row, &[3]).unwrap();
        assert_eq!(rows, vec![false, false, false, false, false, false, true, true]);
        let cols = line_mask(&[2, 3], Line::Col, &[0, 2]).unwrap();
        assert_eq!(cols, vec![true, false, true, true, false, true]);
        let chans = line_mask(&[2, 1, 2], Line::Channel, &[1]).unwrap();
        assert_eq!(chans, vec![false, false, true, true]);
        assert_eq!(line_mask(&[2, 3], Line::Col, &[3]), Err(3));
    }
}
