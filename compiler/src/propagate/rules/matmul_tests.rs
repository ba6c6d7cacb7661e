//! The row-class `MatMul` masks against the per-element definition, on random masks whose
//! rows repeat (as a pruned activation's do) and on fully random ones, with batch broadcasting.

use super::matmul_masks;
use crate::ir::{broadcast_index_map, broadcast_shapes};
use crate::rng::SplitMix64;
use crate::tesa::BitMask;

/// `Y = A·B` masks element by element, straight from the rule's definition.
fn definition(
    a: &[bool],
    a_shape: &[usize],
    b: &[bool],
    b_shape: &[usize],
    y: &[bool],
    y_batch: &[usize],
) -> (Vec<bool>, Vec<bool>, Vec<bool>) {
    let (m, k) = (a_shape[a_shape.len() - 2], a_shape[a_shape.len() - 1]);
    let n = b_shape[b_shape.len() - 1];
    let map_a = broadcast_index_map(&a_shape[..a_shape.len() - 2], y_batch);
    let map_b = broadcast_index_map(&b_shape[..b_shape.len() - 2], y_batch);
    let mut fwd = vec![false; y.len()];
    let (mut a_needed, mut b_needed) = (vec![false; a.len()], vec![false; b.len()]);
    for (ob, (&ab, &bb)) in map_a.iter().zip(&map_b).enumerate() {
        let (ao, bo, yo) = (ab * m * k, bb * k * n, ob * m * n);
        for i in 0..m {
            for j in 0..n {
                let reached = (0..k).any(|kk| !a[ao + i * k + kk] && !b[bo + kk * n + j]);
                fwd[yo + i * n + j] = y[yo + i * n + j] || !reached;
            }
        }
        for i in 0..m {
            for j in 0..n {
                if fwd[yo + i * n + j] {
                    continue;
                }
                for kk in 0..k {
                    a_needed[ao + i * k + kk] |= !b[bo + kk * n + j];
                    b_needed[bo + kk * n + j] |= !a[ao + i * k + kk];
                }
            }
        }
    }
    let not = |v: Vec<bool>| v.into_iter().map(|x| !x).collect();
    (fwd, not(a_needed), not(b_needed))
}

/// A mask of `rows × cols` (times `batches`): random, or a few random rows repeated.
fn mask(batches: usize, rows: usize, cols: usize, repeat: bool, density: f64, rng: &mut SplitMix64) -> Vec<bool> {
    let patterns: Vec<Vec<bool>> = (0..3).map(|_| (0..cols).map(|_| rng.next_f64() < density).collect()).collect();
    (0..batches * rows)
        .flat_map(|_| {
            if repeat {
                patterns[rng.below(3) as usize].clone()
            } else {
                (0..cols).map(|_| rng.next_f64() < density).collect()
            }
        })
        .collect()
}

#[test]
fn row_classes_give_the_per_element_masks() {
    let mut rng = SplitMix64::new(45);
    const DIMS: [usize; 7] = [1, 2, 3, 17, 63, 64, 70];
    let dim = |rng: &mut SplitMix64| DIMS[rng.below(DIMS.len() as u64) as usize];
    for case in 0..120 {
        let (m, k, n) = (dim(&mut rng), dim(&mut rng), dim(&mut rng));
        let (a_batch, b_batch): (Vec<usize>, Vec<usize>) = match case % 4 {
            0 => (vec![], vec![]),
            1 => (vec![3], vec![3]),
            2 => (vec![2, 1], vec![3]),
            _ => (vec![1], vec![2, 2]),
        };
        let y_batch = broadcast_shapes(&a_batch, &b_batch).unwrap();
        let (na, nb, ny) =
            (a_batch.iter().product::<usize>(), b_batch.iter().product::<usize>(), y_batch.iter().product::<usize>());
        let repeat = case % 3 != 0;
        let density = [0.3, 0.7, 0.95][case % 3];
        let a = mask(na, m, k, repeat, density, &mut rng);
        let b = mask(nb, k, n, false, density, &mut rng);
        let y = mask(ny, m, n, repeat, 0.2, &mut rng);
        let a_shape: Vec<usize> = a_batch.iter().copied().chain([m, k]).collect();
        let b_shape: Vec<usize> = b_batch.iter().copied().chain([k, n]).collect();
        let want = definition(&a, &a_shape, &b, &b_shape, &y, &y_batch);
        let (fwd, back_a, back_b) = matmul_masks(
            &BitMask::from_bools(&a),
            &a_shape,
            &BitMask::from_bools(&b),
            &b_shape,
            &BitMask::from_bools(&y),
            &y_batch,
        );
        let label = format!("case {case}: {a_shape:?} x {b_shape:?}");
        assert_eq!(fwd.to_bools(), want.0, "{label}: forward");
        assert_eq!(back_a.to_bools(), want.1, "{label}: backward A");
        assert_eq!(back_b.to_bools(), want.2, "{label}: backward B");
    }
}
