//! Times the binary cache of a generated 1024-neuron network as a fresh process sees it.
//!
//! With a cache file path that does not exist yet, generates 1024×LAYERS (bundled real
//! relabellings, seed 0), writes the cache there and checks one reload against the network.
//! With an existing file, only reloads it RUNS times (each reload reads the file, verifies
//! checksums and structure and builds the CSR arrays; CSC is built lazily, on first use).
//!
//! Run: `cargo run --release -p spartac-runtime --example hpec_reload -- LAYERS RUNS PATH`
//! twice with the same PATH (the second run gives the reload times).

use std::time::Instant;

use spartac_runtime::hpec::{self, bundled};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let layers: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(1920);
    let runs: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(5);
    let path = std::path::PathBuf::from(args.next().unwrap_or_else(|| "/tmp/hpec-reload.spnet".to_string()));
    if !path.exists() {
        let config = hpec::GeneratorConfig {
            neurons: 1024,
            layers,
            seed: 0,
            relabellings: Some(bundled::real_1024_relabellings()?),
        };
        let network = hpec::generate_with(&config)?;
        let start = Instant::now();
        hpec::cache::write_cache_file(&path, &network, 1)?;
        let write = start.elapsed().as_secs_f64();
        let reloaded = hpec::cache::read_cache_file(&path, 1).map_err(anyhow::Error::msg)?;
        anyhow::ensure!(reloaded == network, "cache round trip differs");
        let bytes = std::fs::metadata(&path)?.len();
        println!("wrote 1024×{layers} to {}: {:.1} MB in {write:.3} s", path.display(), bytes as f64 / 1e6);
        return Ok(());
    }
    let mut times = Vec::new();
    let mut n_layers = 0;
    for _ in 0..runs {
        let start = Instant::now();
        let reloaded = hpec::cache::read_cache_file(&path, 1).map_err(anyhow::Error::msg)?;
        times.push(start.elapsed().as_secs_f64());
        n_layers = reloaded.n_layers();
    }
    let text: Vec<String> = times.iter().map(|t| format!("{t:.3}")).collect();
    println!("reload of {} ({n_layers} layers), seconds per run: {}", path.display(), text.join(" "));
    Ok(())
}
