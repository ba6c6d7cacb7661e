//! Neuron orders of an HPEC network: a relabelling of the activations between layers that
//! makes each layer's tiles read a few contiguous runs of their input instead of many scattered
//! ones.
//!
//! A layer `y = relu(x·W + b)` does not care in which order its neurons sit: with the neurons
//! of boundary `l` (the activations between layers `l - 1` and `l`) placed at `pos_l`, layer `l`
//! computes the same values from `W'[pos_l(r), pos_{l+1}(c)] = W[r, c]`, and an image's category
//! (does its last row hold a nonzero) is the same. So the order is free: nothing is permuted at
//! run time, only the layers' indices (and the images' pixels, for boundary 0) are relabelled
//! once, at compile time.
//!
//! The order of a boundary ([`boundary_orders`]) groups the neurons that both layers around it
//! treat alike: a neuron's key is (its row set as a column of the layer before, its column set
//! as a row of the layer after). Neurons with one key sit together, the groups ordered by their
//! smallest neuron. Nothing here knows how the networks are generated; on the challenge
//! networks a layer of the first block (`W[r, c] = R[r mod M, c mod M] / 16`) has groups of 16
//! neurons (one per `n mod M`), and in that order its 32 nonzeros per column sit in 16×16 dense
//! blocks, two per block column, whose rows are two contiguous runs: a 192-column tile of the
//! fine kernel then touches 2-4 of the 342 192-row chunks of a 65,536-wide input, not 32-53.
//! Where no two neurons share a key (the relabelled blocks: a neuron's place as a column and as
//! a row are unrelated there), the order stays the natural one.
//!
//! The last boundary keeps the natural order, so the layers after it (the tail) and the
//! network's output are untouched.

use std::collections::HashMap;

use rayon::prelude::*;

use crate::sparse::{Csr, CsrRef};

/// A boundary keeps the natural order unless its groups hold at least this many neurons on
/// average.
const MIN_MEAN_GROUP: usize = 4;

/// The order of the neurons at one boundary: as the layer before writes them and as the layer
/// after reads them (equal unless the boundary permutes; see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Boundary {
    pub written: Vec<u32>,
    pub read: Vec<u32>,
}

impl Boundary {
    fn same(pos: Vec<u32>) -> Boundary {
        Boundary { written: pos.clone(), read: pos }
    }

    /// The permutation between the two orders, when they differ: `columns[p]` is the written
    /// position of the neuron read at position `p` ([`crate::program::Op::PermuteColumns`]).
    pub fn columns(&self) -> Option<Vec<u32>> {
        if self.written == self.read {
            return None;
        }
        let mut columns = vec![0u32; self.read.len()];
        for (neuron, &p) in self.read.iter().enumerate() {
            columns[p as usize] = self.written[neuron];
        }
        Some(columns)
    }
}

/// The orders of the neurons at every boundary of `layers` (square, all `n × n`): element `l`
/// is the boundary before layer `l`, the last the output of the last layer (the identity).
/// Boundaries where `permutable(l)` holds may permute (see the module docs).
pub fn boundary_orders(layers: &[CsrRef<'_>], permutable: &(dyn Fn(usize) -> bool + Sync)) -> Vec<Boundary> {
    let Some(first) = layers.first() else { return vec![] };
    let n = first.rows;
    // Per layer: the id of each row's column set and of each column's row set.
    let sets: Vec<(Vec<u32>, Vec<u32>)> = layers.par_iter().map(|w| (row_set_ids(w), column_set_ids(w))).collect();
    let grouped = |key: &dyn Fn(usize) -> (u32, u32)| {
        let (pos, groups) = order_by_keys(n, key);
        (groups * MIN_MEAN_GROUP <= n).then_some(pos)
    };
    let mut orders: Vec<Boundary> = (0..layers.len())
        .into_par_iter()
        .map(|l| {
            let before = (l > 0).then(|| &sets[l - 1].1);
            let after = &sets[l].0;
            let both = |i: usize| (before.map_or(0, |b| b[i]), after[i]);
            let producer = |i: usize| (before.map_or(0, |b| b[i]), 0);
            let consumer = |i: usize| (0, after[i]);
            if let Some(pos) = grouped(&both) {
                return Boundary::same(pos);
            }
            if l > 0 && permutable(l) {
                if let (Some(written), Some(read)) = (grouped(&producer), grouped(&consumer)) {
                    return Boundary { written, read };
                }
            }
            // The producer's groups (the fine kernel's 8-column tiles then share their k),
            // else the consumer's, else the natural order.
            let pos = grouped(&producer).or_else(|| grouped(&consumer)).unwrap_or_else(|| (0..n as u32).collect());
            Boundary::same(pos)
        })
        .collect();
    orders.push(Boundary::same((0..n as u32).collect()));
    orders
}

/// Whether an order leaves every neuron in place.
pub fn is_identity(pos: &[u32]) -> bool {
    pos.iter().enumerate().all(|(i, &p)| p as usize == i)
}

/// `W'` with `W'[row_pos[r], col_pos[c]] = W[r, c]`, each row's entries in column order.
pub fn relabel(w: CsrRef<'_>, row_pos: &[u32], col_pos: &[u32]) -> Csr {
    let mut source_row = vec![0u32; w.rows];
    for (r, &p) in row_pos.iter().enumerate() {
        source_row[p as usize] = r as u32;
    }
    let mut offsets = Vec::with_capacity(w.rows + 1);
    offsets.push(0u32);
    let mut indices = Vec::with_capacity(w.indices.len());
    let mut values = Vec::with_capacity(w.values.len());
    let mut entries: Vec<(u32, f32)> = vec![];
    for &r in &source_row {
        let (lo, hi) = (w.offsets[r as usize] as usize, w.offsets[r as usize + 1] as usize);
        entries.clear();
        entries.extend((lo..hi).map(|e| (col_pos[w.indices[e] as usize], w.values[e])));
        entries.sort_unstable_by_key(|&(c, _)| c);
        indices.extend(entries.iter().map(|&(c, _)| c));
        values.extend(entries.iter().map(|&(_, v)| v));
        offsets.push(indices.len() as u32);
    }
    Csr { rows: w.rows, cols: w.cols, offsets, indices, values }
}

/// Neurons ordered by key: groups of equal keys in the order of their smallest neuron, each
/// group's neurons in their own order. Returns each neuron's position and the group count.
fn order_by_keys(n: usize, key: impl Fn(usize) -> (u32, u32)) -> (Vec<u32>, usize) {
    let mut group_of_key: HashMap<(u32, u32), u32> = HashMap::new();
    let mut group = Vec::with_capacity(n);
    for i in 0..n {
        let next = group_of_key.len() as u32;
        group.push(*group_of_key.entry(key(i)).or_insert(next));
    }
    // Counting sort by group (stable: neurons of a group keep their order).
    let mut start = vec![0u32; group_of_key.len() + 1];
    for &g in &group {
        start[g as usize + 1] += 1;
    }
    for g in 1..start.len() {
        start[g] += start[g - 1];
    }
    let pos = group
        .iter()
        .map(|&g| {
            let p = start[g as usize];
            start[g as usize] += 1;
            p
        })
        .collect();
    (pos, group_of_key.len())
}

/// Ids of the rows' column sets (equal sets, equal ids).
fn row_set_ids(w: &CsrRef<'_>) -> Vec<u32> {
    let sets: Vec<Vec<u32>> = (0..w.rows)
        .map(|r| {
            let mut s = w.indices[w.offsets[r] as usize..w.offsets[r + 1] as usize].to_vec();
            s.sort_unstable();
            s
        })
        .collect();
    set_ids(&sets)
}

/// Ids of the columns' row sets.
fn column_set_ids(w: &CsrRef<'_>) -> Vec<u32> {
    let mut sets: Vec<Vec<u32>> = vec![vec![]; w.cols];
    for r in 0..w.rows {
        for &c in &w.indices[w.offsets[r] as usize..w.offsets[r + 1] as usize] {
            sets[c as usize].push(r as u32);
        }
    }
    set_ids(&sets)
}

fn set_ids(sets: &[Vec<u32>]) -> Vec<u32> {
    let mut ids: HashMap<&[u32], u32> = HashMap::new();
    sets.iter()
        .map(|s| {
            let next = ids.len() as u32;
            *ids.entry(s.as_slice()).or_insert(next)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A layer of the challenge's first block at `n` neurons: `W[r, c] = R[r mod M, c mod M]`,
    /// R the radix-2 butterfly of place value `p` (row i to columns i and i - p mod M).
    fn first_block_layer(n: usize, p: usize) -> Csr {
        let m = n / 16;
        let mut dense = vec![0f32; n * n];
        for r in 0..n {
            for t in 0..16 {
                for base in [r % m, (r % m + m - p) % m] {
                    dense[r * n + base + t * m] = 1.0 / 16.0;
                }
            }
        }
        Csr::from_dense(&dense, n, n)
    }

    fn dense_of(w: &Csr) -> Vec<f32> {
        let mut d = vec![0f32; w.rows * w.cols];
        for r in 0..w.rows {
            for e in w.offsets[r] as usize..w.offsets[r + 1] as usize {
                d[r * w.cols + w.indices[e] as usize] = w.values[e];
            }
        }
        d
    }

    #[test]
    fn relabelled_product_is_the_permuted_product() {
        // y = x·W; with x' = x permuted by pos_in and W' relabelled, x'·W' is y permuted by pos_out.
        let n = 64;
        let w = first_block_layer(n, 2);
        let mut w2 = w.clone();
        for (e, v) in w2.values.iter_mut().enumerate() {
            *v = (e % 7) as f32 - 3.5;
        }
        let pos_in: Vec<u32> = (0..n as u32).map(|i| (i * 5 + 3) % n as u32).collect();
        let pos_out: Vec<u32> = (0..n as u32).map(|i| (i * 9 + 1) % n as u32).collect();
        let relabelled = relabel(w2.view(), &pos_in, &pos_out);
        relabelled.validate(true).unwrap();
        let (d, d2) = (dense_of(&w2), dense_of(&relabelled));
        let x: Vec<f32> = (0..n).map(|i| (i % 5) as f32).collect();
        let mut x2 = vec![0f32; n];
        for i in 0..n {
            x2[pos_in[i] as usize] = x[i];
        }
        for c in 0..n {
            let y: f32 = (0..n).map(|r| x[r] * d[r * n + c]).sum();
            let y2: f32 = (0..n).map(|r| x2[r] * d2[r * n + pos_out[c] as usize]).sum();
            assert_eq!(y, y2, "column {c}");
        }
    }

    #[test]
    fn first_block_layers_become_dense_blocks_in_two_row_runs() {
        let n = 1024;
        let layers = [first_block_layer(n, 1), first_block_layer(n, 2), first_block_layer(n, 4)];
        let views: Vec<_> = layers.iter().map(Csr::view).collect();
        let orders = boundary_orders(&views, &|_| false);
        assert_eq!(orders.len(), 4);
        assert!(is_identity(&orders[3].read));
        // Boundaries 0-2 group the 16 neurons of each n mod 64, ordered by n mod 64.
        for b in &orders[..3] {
            assert_eq!(b.written, b.read);
            for (i, &p) in b.read.iter().enumerate() {
                assert_eq!(p as usize, (i % 64) * 16 + i / 64, "neuron {i}");
            }
        }
        // Layer 1 in that order: each 16-column block reads exactly two full 16-row blocks.
        let w = relabel(views[1], &orders[1].read, &orders[2].written);
        let mut blocks: Vec<Vec<usize>> = vec![vec![]; n / 16];
        for r in 0..n {
            for e in w.offsets[r] as usize..w.offsets[r + 1] as usize {
                blocks[w.indices[e] as usize / 16].push(r / 16);
            }
        }
        for (c, rows) in blocks.iter_mut().enumerate() {
            rows.sort_unstable();
            rows.dedup();
            assert_eq!(rows, &vec![c.min((c + 2) % 64), c.max((c + 2) % 64)], "block column {c}");
        }
        assert_eq!(w.indices.len(), 32 * n);
    }

    #[test]
    fn a_relabelled_consumer_leaves_the_producers_column_groups() {
        // Layer 1 reads base rows through a scrambling σ (16-to-1): no neuron's pair of sets is
        // shared, so boundary 1 groups layer 0's columns (n mod 16) alone.
        let n = 256;
        let m = n / 16;
        let sigma: Vec<usize> = (0..n).map(|r| (r * 7 + r / 16) % m).collect();
        let mut dense = vec![0f32; n * n];
        for r in 0..n {
            for t in 0..16 {
                for base in [sigma[r], (sigma[r] + m - 1) % m] {
                    dense[r * n + base + t * m] = 1.0;
                }
            }
        }
        let relabelled = Csr::from_dense(&dense, n, n);
        let layers = [first_block_layer(n, 2), relabelled];
        let views: Vec<_> = layers.iter().map(Csr::view).collect();
        let orders = boundary_orders(&views, &|_| false);
        for (i, &p) in orders[1].written.iter().enumerate() {
            assert_eq!(p as usize, (i % m) * 16 + i / m, "neuron {i}");
        }
        assert_eq!(orders[1].written, orders[1].read);
        // Allowed to permute: layer 1 reads its rows grouped by σ (16 equal σ together), and
        // the permutation takes each neuron from where layer 0 wrote it.
        let permuted = boundary_orders(&views, &|_| true);
        let b = &permuted[1];
        assert_eq!(b.written, orders[1].written);
        let mut at_read = vec![0usize; n];
        for (i, &p) in b.read.iter().enumerate() {
            at_read[p as usize] = i;
        }
        for group in at_read.chunks(16) {
            assert!(group.iter().all(|&i| sigma[i] == sigma[group[0]]), "{group:?}");
        }
        let columns = b.columns().expect("the orders differ");
        for i in 0..n {
            assert_eq!(columns[b.read[i] as usize], b.written[i]);
        }
    }

    #[test]
    fn unrelated_row_and_column_sets_keep_the_natural_order() {
        // A cyclic band: every neuron's sets differ from every other's.
        let n = 40;
        let mut dense = vec![0f32; n * n];
        for r in 0..n {
            for d in 0..3 {
                dense[r * n + (r + d) % n] = 1.0;
            }
        }
        let w = Csr::from_dense(&dense, n, n);
        let orders = boundary_orders(&[w.view(), w.view()], &|_| true);
        assert!(orders.iter().all(|o| is_identity(&o.read) && o.columns().is_none()));
    }
}
