//! CPU edges/s of the HPEC engine: real 1024×120 (read from ../shared/hpec when present, else
//! regenerated exactly from the bundled relabellings), generated 1024×480, 1024×1920, 4096×120,
//! each on 1,200 real images (the challenge's for 1024, MNIST-derived 64×64 ones for 4096); plus the load/cache times and the
//! crossover between the two SpMM forms by nonzero-row density. Prints markdown.
//!
//! Run: `cargo bench -p spartac-runtime --bench hpec_cpu`

use std::path::PathBuf;
use std::time::Instant;

use spartac_runtime::hpec::kernels::{step_column_wise_csc, step_row_wise_csr, ImageBlock};
use spartac_runtime::hpec::{self, bundled, CacheConfig, CacheStatus, InferOptions, KernelChoice, NetworkSource};

fn best_of(runs: usize, mut f: impl FnMut() -> hpec::InferResult) -> hpec::InferResult {
    let mut best: Option<hpec::InferResult> = None;
    for _ in 0..runs {
        let result = f();
        if best.as_ref().is_none_or(|b| result.seconds < b.seconds) {
            best = Some(result);
        }
    }
    best.expect("at least one run")
}

fn bench_network(name: &str, network: &hpec::Network, images: &hpec::Images, runs: usize) -> anyhow::Result<()> {
    let mut categories = None;
    for (label, options) in [
        ("auto", InferOptions::default()),
        ("row-wise CSR", InferOptions { kernel: KernelChoice::RowWiseCsr, ..InferOptions::default() }),
        ("column-wise CSC", InferOptions { kernel: KernelChoice::ColumnWiseCsc, ..InferOptions::default() }),
        ("auto, no input hashing", InferOptions { input_hashing: false, ..InferOptions::default() }),
        ("auto, layer hashing 128", InferOptions { layer_hashing_buckets: Some(128), ..InferOptions::default() }),
        ("auto, 16 images/block", InferOptions { block_images: 16, ..InferOptions::default() }),
        ("auto, 64 images/block", InferOptions { block_images: 64, ..InferOptions::default() }),
        ("auto, 1 thread", InferOptions { threads: Some(1), ..InferOptions::default() }),
    ] {
        let result = best_of(runs, || hpec::infer(network, images, &options).expect("inference runs"));
        if let Some(previous) = &categories {
            anyhow::ensure!(previous == &result.categories, "{name} {label}: categories differ between settings");
        }
        categories = Some(result.categories.clone());
        println!(
            "| {name} | {label} | {} | {} | {:.4} | {:.3e} | {} / {} | {} |",
            images.n_images(),
            result.threads,
            result.seconds,
            result.edges_per_second,
            result.row_wise_steps,
            result.column_wise_steps,
            result.categories.len()
        );
    }
    Ok(())
}

/// One layer step of each form on a 32-image block whose rows are nonzero with `density`.
fn crossover(layer: &hpec::LayerMatrix, bias: f32, density: f64) -> (f64, f64) {
    let neurons = layer.n_neurons();
    let step = (1.0 / density).round().max(1.0) as usize;
    let pixels: Vec<u32> = (0..neurons as u32).filter(|p| (*p as usize).is_multiple_of(step)).collect();
    let values = vec![1.0f32; pixels.len()];
    let make = || ImageBlock::new(neurons, (0..32).collect(), |_| (&pixels[..], &values[..]));
    let repeats = 200;
    let mut times = [0f64; 2];
    for (form, time) in times.iter_mut().enumerate() {
        let mut total = 0.0;
        for _ in 0..repeats {
            let mut block = make();
            let start = Instant::now();
            if form == 0 {
                step_row_wise_csr(&mut block, layer, bias);
            } else {
                step_column_wise_csc(&mut block, layer, bias);
            }
            total += start.elapsed().as_secs_f64();
        }
        *time = total / repeats as f64;
    }
    (times[0], times[1])
}

fn main() -> anyhow::Result<()> {
    let shared = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/hpec/neuron1024.tar.gz");
    let real_config = hpec::GeneratorConfig {
        neurons: 1024,
        layers: 120,
        seed: 0,
        relabellings: Some(bundled::real_1024_relabellings()?),
    };
    println!("## Loading\n");
    let real = if shared.is_file() {
        let cache_dir = std::env::temp_dir().join(format!("spartac-hpec-bench-{}", std::process::id()));
        let cache = CacheConfig::Directory(cache_dir.clone());
        let source = NetworkSource::from_path(&shared);
        let start = Instant::now();
        let (network, status) = hpec::load_network_with_status(&source, None, &cache)?;
        let parse = start.elapsed().as_secs_f64();
        anyhow::ensure!(matches!(status, CacheStatus::Written { .. }), "expected a fresh cache: {status:?}");
        let start = Instant::now();
        let (cached, status) = hpec::load_network_with_status(&source, None, &cache)?;
        let reload = start.elapsed().as_secs_f64();
        anyhow::ensure!(matches!(status, CacheStatus::Hit(_)) && cached == network, "cache reload failed");
        let _ = std::fs::remove_dir_all(&cache_dir);
        println!("- real 1024×120 from neuron1024.tar.gz (stream, parse, validate, write cache): {parse:.3} s");
        println!("- the same from the binary cache: {reload:.3} s");
        network
    } else {
        println!("- ../shared/hpec missing: the real 1024×120 network is regenerated from the bundled relabellings");
        hpec::generate_with(&real_config)?
    };
    for layers in [480usize, 1920] {
        let start = Instant::now();
        let network = hpec::generate_with(&hpec::GeneratorConfig { layers, ..real_config.clone() })?;
        let generate = start.elapsed().as_secs_f64();
        let cache_dir = std::env::temp_dir().join(format!("spartac-hpec-bench-c{}", std::process::id()));
        let path = cache_dir.join("generated.spnet");
        let start = Instant::now();
        hpec::cache::write_cache_file(&path, &network, 1)?;
        let write = start.elapsed().as_secs_f64();
        let start = Instant::now();
        let reloaded = hpec::cache::read_cache_file(&path, 1).map_err(anyhow::Error::msg)?;
        let reload = start.elapsed().as_secs_f64();
        anyhow::ensure!(reloaded == network, "cache round trip of 1024×{layers} differs");
        let _ = std::fs::remove_dir_all(&cache_dir);
        println!("- generate 1024×{layers}: {generate:.3} s; cache write {write:.3} s; cache reload {reload:.3} s");
    }

    println!("\n## Kernel crossover (one real layer, 32 images, mean of 200 steps)\n");
    println!("| nonzero rows of Y | row-wise CSR µs | column-wise CSC µs |\n| --- | --- | --- |");
    for density in [0.02, 0.1, 0.25, 0.5, 1.0] {
        let (row_wise, column_wise) = crossover(&real.layers[6], real.bias, density);
        println!("| {:.0}% | {:.1} | {:.1} |", density * 100.0, row_wise * 1e6, column_wise * 1e6);
    }

    println!("\n## Inference (best of runs; edges/s = images × nonzeros / seconds)\n");
    println!("| network | setting | images | threads | seconds | edges/s | row/column steps | categories |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    let images_1024 = bundled::real_1024_images()?;
    bench_network("real 1024×120", &real, &images_1024, 3)?;
    for layers in [480usize, 1920] {
        let network = hpec::generate_with(&hpec::GeneratorConfig { layers, ..real_config.clone() })?;
        bench_network(&format!("generated 1024×{layers}"), &network, &images_1024, if layers > 500 { 1 } else { 2 })?;
    }
    let network_4096 = hpec::generate(4096, 120, 0)?;
    let images_4096 = bundled::images_for_neurons(4096, 1200)?;
    bench_network("generated 4096×120", &network_4096, &images_4096, 1)?;
    Ok(())
}
