//! The measurements of `benches/results/plan.md`: SparTA Fig. 16 covers, greedy vs exact
//! cover on 20 small instances, covers of the real HPEC 1024 layers, and cover times on a
//! 4096×4096 weight. Predicted times come from the sm_90 cost model.
//!
//! `cargo run --release -p spartac-tests --bin plan_report [-- SECTION...]` with sections
//! `fig16 ilp hpec big` (all when none). HPEC data: `$SPARTAC_SHARED_DIR/hpec` or
//! `../shared/hpec` beside the repository.

use spartac::plan::cost::CostModel;
use spartac::plan::cover::{
    cover_blocks, cover_blocks_fewer_parts, single_shape_cover, BlockShape, Cover, DEFAULT_SHAPES,
};
use spartac::plan::explain::micros;
use spartac::plan::hardware::NumberFormat;
use spartac::plan::ilp::exact_cover;
use spartac::plan::suboperator::Orientation;
use spartac::tesa::patterns::Pattern;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

/// Weights on the right of the activations (`Y = X·W`, as ONNX MatMul has them).
const RIGHT: Orientation = Orientation::WeightRight;

fn predicted(cm: &CostModel, nf: &NumberFormat, cover: &Cover, m: usize) -> f64 {
    cover.parts.iter().map(|p| cm.sparse_time(nf, p.shape, RIGHT, p.blocks.len(), m, cover.rows, cover.cols)).sum()
}

fn zeros(cover: &Cover) -> usize {
    cover.parts.iter().map(|p| p.covered_zeros).sum()
}

fn fig16() {
    let (n, m) = (1024, 1024);
    let cm = CostModel::sm_90();
    println!("## SparTA Fig. 16: 1024×1024 weight, 32×32 blocks + 1% scattered, m = {m}\n");
    println!("| dtype | block sparsity | density | multi-shape cover | covered zeros | predicted | 32×32-only cover | covered zeros | predicted | dense | cover time |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for dtype in ["f32", "f16"] {
        let nf = cm.hw.by_dtype(dtype).unwrap().clone();
        let weights = cm.shape_weights(&nf, &DEFAULT_SHAPES, m, RIGHT);
        for bs in [0.7, 0.8, 0.9] {
            let mask = Pattern::Mixed { bh: 32, bw: 32, block_sparsity: bs, scattered: 0.01 }.mask(n, n, 16);
            let density = mask.iter().filter(|p| !**p).count() as f64 / (n * n) as f64;
            let t = Instant::now();
            let cover = cover_blocks_fewer_parts(&mask, n, n, &weights, cm.suboperator_fixed(&nf, m, n));
            let cover_s = t.elapsed().as_secs_f64();
            let s32 = BlockShape::new(32, 32);
            let only = single_shape_cover(&mask, n, n, s32, cm.block_time(&nf, s32, m, RIGHT));
            println!(
                "| {dtype} | {bs} | {density:.4} | {} | {} | {} | {} | {} | {} | {} | {:.1} ms |",
                cover.summary(),
                zeros(&cover),
                micros(predicted(&cm, &nf, &cover, m)),
                only.summary(),
                zeros(&only),
                micros(predicted(&cm, &nf, &only, m)),
                micros(cm.dense_time(&nf, m, n, n)),
                cover_s * 1e3
            );
        }
    }
    println!();
}

fn ilp() {
    // The same 20 instances as the unit test `plan::ilp::tests`.
    let (shapes, instances) = spartac::plan::ilp::gap_benchmark();
    println!("## Greedy vs exact (good_lp + microlp) on 20 small instances\n");
    println!("shapes 1×1, 1×4, 4×1, 4×4, 8×8 with weight 2 + area/2\n");
    println!("| seed | size | pattern | greedy | exact | gap | exact solve |");
    println!("|---|---|---|---|---|---|---|");
    let mut gaps = vec![];
    for (seed, n, pattern) in instances {
        let mask = pattern.mask(n, n, seed);
        let greedy = cover_blocks(&mask, n, n, &shapes);
        let t = Instant::now();
        let exact = exact_cover(&mask, n, n, &shapes).expect("solver");
        let gap = greedy.cost / exact.cost - 1.0;
        gaps.push(gap);
        println!(
            "| {seed} | {n}×{n} | {} | {:.1} | {:.1} | {:.2}% | {:.1} ms |",
            pattern.label(),
            greedy.cost,
            exact.cost,
            100.0 * gap,
            t.elapsed().as_secs_f64() * 1e3
        );
    }
    let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
    let max = gaps.iter().cloned().fold(0.0, f64::max);
    let optimal = gaps.iter().filter(|g| **g < 1e-9).count();
    println!("\nmean gap {:.2}%, max {:.2}%, greedy optimal on {optimal}/20\n", 100.0 * mean, 100.0 * max);
}

fn hpec() {
    use spartac_runtime::hpec::{load_network, CacheConfig, NetworkSource};
    let shared = std::env::var_os("SPARTAC_SHARED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared"));
    let path = shared.join("hpec/neuron1024.tar.gz");
    let network = match load_network(&NetworkSource::from_path(&path), None, &CacheConfig::Disabled) {
        Ok(n) => n,
        Err(e) => {
            println!("## HPEC: skipped ({e})\n");
            return;
        }
    };
    let m = 1024;
    let cm = CostModel::sm_90();
    let nf = cm.hw.by_dtype("f32").unwrap().clone();
    let weights = cm.shape_weights(&nf, &DEFAULT_SHAPES, m, RIGHT);
    println!("## Real HPEC 1024-neuron layers ({} layers, f32, m = {m})\n", network.n_layers());
    let mut shapes: BTreeMap<String, (usize, usize, usize)> = BTreeMap::new();
    let mut times = vec![];
    let mut summaries: BTreeMap<String, usize> = BTreeMap::new();
    let (mut t_cover, mut t_dense, mut t_32) = (0.0, 0.0, 0.0);
    for layer in &network.layers {
        let csr = &layer.csr;
        let (rows, cols) = (csr.n_outer, csr.n_inner);
        let mut mask = vec![true; rows * cols];
        for r in 0..rows {
            for c in csr.slot(r).0 {
                mask[r * cols + *c as usize] = false;
            }
        }
        let t = Instant::now();
        let cover = cover_blocks_fewer_parts(&mask, rows, cols, &weights, cm.suboperator_fixed(&nf, m, cols));
        times.push(t.elapsed().as_secs_f64());
        for p in &cover.parts {
            let e = shapes.entry(p.shape.to_string()).or_default();
            e.0 += 1;
            e.1 += p.blocks.len();
            e.2 += p.owned.len();
        }
        *summaries
            .entry(cover.parts.iter().map(|p| p.shape.to_string()).collect::<Vec<_>>().join(" + "))
            .or_default() += 1;
        t_cover += predicted(&cm, &nf, &cover, m);
        let s32 = BlockShape::new(32, 32);
        t_32 += predicted(&cm, &nf, &single_shape_cover(&mask, rows, cols, s32, cm.block_time(&nf, s32, m, RIGHT)), m);
        t_dense += cm.dense_time(&nf, m, rows, cols);
    }
    println!("| block shape | layers using it | blocks (all layers) | elements owned |");
    println!("|---|---|---|---|");
    for (s, (l, b, o)) in &shapes {
        println!("| {s} | {l} | {b} | {o} |");
    }
    println!("\nshape sets: {summaries:?}\n");
    times.sort_by(f64::total_cmp);
    let mean = times.iter().sum::<f64>() / times.len() as f64;
    println!(
        "cover time per layer: min {:.2} ms, median {:.2} ms, mean {:.2} ms, max {:.2} ms",
        times[0] * 1e3,
        times[times.len() / 2] * 1e3,
        mean * 1e3,
        times[times.len() - 1] * 1e3
    );
    println!(
        "predicted, all layers: multi-shape cover {}, 32×32 only {}, dense {}\n",
        micros(t_cover),
        micros(t_32),
        micros(t_dense)
    );
}

fn big() {
    let (n, m) = (4096, 4096);
    let cm = CostModel::sm_90();
    let nf = cm.hw.by_dtype("f32").unwrap().clone();
    let weights = cm.shape_weights(&nf, &DEFAULT_SHAPES, m, RIGHT);
    println!("## Cover time on a 4096×4096 weight (14 shapes, one thread)\n");
    println!("| pattern | cover | time |");
    println!("|---|---|---|");
    for pattern in [
        Pattern::Unstructured { sparsity: 0.9 },
        Pattern::Unstructured { sparsity: 0.5 },
        Pattern::Block { bh: 32, bw: 32, sparsity: 0.9 },
        Pattern::Mixed { bh: 32, bw: 32, block_sparsity: 0.8, scattered: 0.01 },
        Pattern::NM { n: 2, m: 4 },
    ] {
        let mask = pattern.mask(n, n, 7);
        let t = Instant::now();
        let cover = cover_blocks(&mask, n, n, &weights);
        let s = t.elapsed().as_secs_f64();
        let summary = cover.parts.iter().map(|p| p.shape.to_string()).collect::<Vec<_>>().join(" + ");
        println!("| {} | {summary} | {:.0} ms |", pattern.label(), s * 1e3);
    }
    println!();
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let want = |s: &str| args.is_empty() || args.iter().any(|a| a == s);
    if want("fig16") {
        fig16();
    }
    if want("ilp") {
        ilp();
    }
    if want("hpec") {
        hpec();
    }
    if want("big") {
        big();
    }
}
