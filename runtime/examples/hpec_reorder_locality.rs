//! How local a layer's inputs would be under a generic neuron reordering, the lever the HPEC
//! peers (XY-2021, SNICIT) use and spartac does not have yet: for every tile of `TILE` consecutive
//! output columns (the 3xTF32 fine kernel's 192), the number of distinct `TILE`-wide chunks of
//! input rows its nonzeros touch (the kernel lands A one chunk at a time), in the natural order
//! and after the reordering below. Nothing here assumes the generator's structure:
//!
//! 1. columns with identical row sets form groups, ordered by their smallest column;
//! 2. rows with identical column sets form groups, ordered by the smallest group position of the
//!    columns they feed (then the next smallest, then their smallest row);
//! 3. columns and rows follow their groups' order.
//!
//! The layer then reads its input in the row order and writes its output in the column order;
//! where the next layer wants another row order, the activations are permuted between layers.
//!
//! Run: `cargo run --release -p spartac-runtime --example hpec_reorder_locality -- NEURONS LAYERS`

use std::collections::HashMap;

use spartac_runtime::hpec;

const TILE: usize = 192;

/// Groups of identical sets: `sets[i]` the sorted set of item i; returns (group of each item,
/// groups in order of their smallest item).
fn groups(sets: &[Vec<u32>]) -> (Vec<usize>, usize) {
    let mut ids: HashMap<&[u32], usize> = HashMap::new();
    let mut of = vec![0; sets.len()];
    for (i, s) in sets.iter().enumerate() {
        let next = ids.len();
        of[i] = *ids.entry(s.as_slice()).or_insert(next);
    }
    (of, ids.len())
}

/// Chunks touched per column tile: columns in `col_order`, input rows at `row_pos`.
fn chunks_per_tile(cols_rows: &[Vec<u32>], col_order: &[usize], row_pos: &[usize]) -> (f64, usize) {
    let mut total = 0;
    let mut most = 0;
    let tiles = col_order.len().div_ceil(TILE);
    for t in col_order.chunks(TILE) {
        let mut seen: Vec<usize> =
            t.iter().flat_map(|&c| cols_rows[c].iter().map(|&r| row_pos[r as usize] / TILE)).collect();
        seen.sort_unstable();
        seen.dedup();
        total += seen.len();
        most = most.max(seen.len());
    }
    (total as f64 / tiles as f64, most)
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let neurons: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(65536);
    let layers: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(12);
    let network = hpec::generate(neurons, layers, 0)?;
    let n = neurons;
    println!("{n} neurons, {TILE}-column tiles; distinct {TILE}-row chunks of input a tile touches (mean / most)");
    for (l, layer) in network.layers.iter().enumerate() {
        // Row sets of the columns and column sets of the rows, from the CSR (row -> columns).
        let mut cols_rows: Vec<Vec<u32>> = vec![vec![]; n];
        let mut rows_cols: Vec<Vec<u32>> = vec![vec![]; n];
        for (r, row) in rows_cols.iter_mut().enumerate() {
            let (cs, _) = layer.csr.slot(r);
            for &c in cs {
                cols_rows[c as usize].push(r as u32);
            }
            *row = cs.to_vec();
            row.sort_unstable();
        }
        let identity: Vec<usize> = (0..n).collect();
        let before = chunks_per_tile(&cols_rows, &identity, &identity);

        let (col_group, n_col_groups) = groups(&cols_rows);
        let mut col_order = identity.clone();
        col_order.sort_by_key(|&c| (col_group[c], c));
        let mut group_pos = vec![usize::MAX; n_col_groups];
        for (p, &c) in col_order.iter().enumerate() {
            group_pos[col_group[c]] = group_pos[col_group[c]].min(p);
        }
        let (row_group, _) = groups(&rows_cols);
        let key = |r: usize| {
            let mut ks: Vec<usize> = rows_cols[r].iter().map(|&c| group_pos[col_group[c as usize]]).collect();
            ks.sort_unstable();
            ks.dedup();
            (ks.first().copied().unwrap_or(usize::MAX), ks.get(1).copied().unwrap_or(usize::MAX), row_group[r])
        };
        let mut row_order = identity.clone();
        row_order.sort_by_key(|&r| (key(r), r));
        let mut row_pos = vec![0; n];
        for (p, &r) in row_order.iter().enumerate() {
            row_pos[r] = p;
        }
        let after = chunks_per_tile(&cols_rows, &col_order, &row_pos);
        println!(
            "layer {l:>3}: natural {:>6.1} / {:>4}   reordered {:>6.1} / {:>4}   ({n_col_groups} column groups)",
            before.0, before.1, after.0, after.1
        );
    }
    Ok(())
}
