//! How local each layer's inputs are under the compiler's neuron reordering
//! ([`spartac::program::hpec_order`]) against the natural order: for every tile of `TILE`
//! consecutive output columns (the 3xTF32 fine kernel's 192), the distinct `TILE`-row chunks of
//! its input its nonzeros touch (the kernel loads only those), and how many of its 8-column
//! groups share one set of rows (their k8 × n8 steps are then full, not padded).
//!
//! Run: `cargo run --release -p spartac-runtime --example hpec_reorder_locality -- NEURONS LAYERS`

use spartac::program::hpec_order::{boundary_orders, relabel};
use spartac::sparse::{Csr, CsrRef};
use spartac_runtime::hpec;

const TILE: usize = 192;

/// (mean chunks a tile touches, most, share of 8-column groups whose columns have equal row sets).
fn locality(w: &Csr) -> (f64, usize, f64) {
    let mut cols_rows: Vec<Vec<u32>> = vec![vec![]; w.cols];
    for r in 0..w.rows {
        for &c in &w.indices[w.offsets[r] as usize..w.offsets[r + 1] as usize] {
            cols_rows[c as usize].push(r as u32);
        }
    }
    let (mut total, mut most) = (0, 0);
    for tile in cols_rows.chunks(TILE) {
        let mut seen: Vec<u32> = tile.iter().flatten().map(|&r| r / TILE as u32).collect();
        seen.sort_unstable();
        seen.dedup();
        total += seen.len();
        most = most.max(seen.len());
    }
    let groups = cols_rows.chunks(8);
    let n_groups = groups.len();
    let shared = groups.filter(|g| g.iter().all(|c| c == &g[0])).count();
    (total as f64 / w.cols.div_ceil(TILE) as f64, most, shared as f64 / n_groups as f64)
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let neurons: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(65536);
    let layers: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(16);
    let network = hpec::generate(neurons, layers, 0)?;
    let views: Vec<CsrRef> = network
        .layers
        .iter()
        .map(|l| {
            let m = &l.csr;
            CsrRef { rows: m.n_outer, cols: m.n_inner, offsets: &m.offsets, indices: &m.indices, values: &m.values }
        })
        .collect();
    // One order per boundary (no permuting steps): what a single relabelling gives.
    let orders = boundary_orders(&views, &|_| false);
    let identity: Vec<u32> = (0..neurons as u32).collect();
    println!("{neurons} neurons: {TILE}-row input chunks a {TILE}-column tile touches (mean / most), 8-column groups with one row set");
    for (l, &w) in views.iter().enumerate() {
        let (a, b, c) = locality(&relabel(w, &identity, &identity));
        let (x, y, z) = locality(&relabel(w, &orders[l].read, &orders[l + 1].written));
        println!(
            "layer {l:>3}: natural {a:>6.1} / {b:>4}, {:>5.1}%   reordered {x:>6.1} / {y:>4}, {:>5.1}%",
            100.0 * c,
            100.0 * z
        );
    }
    Ok(())
}
