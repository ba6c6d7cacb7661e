//! Checks of a compiled model program that need no GPU: its CPU execution against the
//! reference executor of the graph (every pruned weight element zeroed), and every kernel
//! through NVRTC.

use spartac::ir::Graph;
use spartac::program::model::ModelProgram;
use spartac::propagate::execute_zeroing_pruned;
use spartac_runtime::exec::model::{relative_error, run_cpu};

/// For each seed, the compiled `model` on the CPU executor against the reference execution
/// of `reference` on the same random inputs: every output's relative error is at most
/// `max_error` (`context` prefixes the failure message). Returns the largest error seen, for
/// tests that also want it non-zero (a 16-bit model that must really round).
pub fn assert_compiled_matches(
    reference: &Graph,
    model: &ModelProgram,
    seeds: &[u64],
    max_error: f64,
    context: &str,
) -> f64 {
    let mut worst: f64 = 0.0;
    for &seed in seeds {
        let inputs = spartac::reference::random_inputs(reference, seed);
        let want = execute_zeroing_pruned(reference, &inputs).unwrap();
        let got = run_cpu(model, &inputs).unwrap();
        assert_eq!(got.len(), want.len(), "{context}: outputs");
        for ((name, g), (_, w)) in got.iter().zip(&want) {
            let e = relative_error(g, w);
            assert!(e <= max_error, "{context} seed {seed}: {name}: relative error {e:.3e}");
            worst = worst.max(e);
        }
    }
    worst
}

/// Every kernel of `model` through NVRTC for sm_90a (NVRTC from `.cuda/`, which
/// `tests/run-all.sh` installs).
pub fn nvrtc_compiles(model: &ModelProgram) {
    let lib = crate::repo_root().join(".cuda/nvidia/cu13/lib");
    if lib.is_dir() {
        spartac_runtime::cuda::preload_nvrtc(&lib).unwrap();
    }
    spartac_runtime::cuda::nvrtc_version().expect("NVRTC is required (tests/run-all.sh installs it under .cuda/)");
    for k in &model.program.kernels {
        spartac_runtime::cuda::compile_ptx(&k.name, &k.source, "sm_90a").unwrap_or_else(|e| panic!("{}: {e}", k.name));
    }
}
