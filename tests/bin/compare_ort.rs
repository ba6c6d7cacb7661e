//! Compares the reference executor with onnxruntime on a prepared model and prints the
//! error per output and the median CPU time per batch.
//!
//! `cargo run --release -p spartac-tests --bin compare_ort -- MODEL.onnx REF.npz [RUNS]`

use anyhow::{bail, Result};
use spartac_tests::models::compare_with_ort;
use std::path::PathBuf;

fn main() -> Result<()> {
    spartac_runtime::host_memory::retain_freed_memory();
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 2 {
        bail!("usage: compare_ort MODEL.onnx REF.npz [RUNS]");
    }
    let runs = args.get(2).map(|r| r.parse()).transpose()?.unwrap_or(3);
    let c = compare_with_ort(&PathBuf::from(&args[0]), &PathBuf::from(&args[1]), runs)?;
    println!("{:<24} {:>12} {:>12}", "output", "max rel err", "max abs err");
    for o in &c.outputs {
        println!("{:<24} {:>12.3e} {:>12.3e}", o.name, o.max_rel, o.max_abs);
    }
    let ms: Vec<String> = c.times.iter().map(|t| format!("{:.0}", t.as_secs_f64() * 1e3)).collect();
    println!(
        "spartac cpu reference ({} threads): median {:.1} ms per batch over {runs} runs [{} ms]; worst rel err {:.3e}",
        rayon::current_num_threads(),
        c.median_time().as_secs_f64() * 1e3,
        ms.join(", "),
        c.worst_rel()
    );
    Ok(())
}
