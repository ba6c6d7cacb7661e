//! Executors of compiled [`Program`](spartac::program::Program)s: [`cpu`] runs the steps on
//! the host (the simulation every program is tested with), [`cuda`] turns them into one CUDA
//! graph (kernel, memcpy and memset nodes, edges = the steps' `after` lists), instantiated once
//! and relaunched with updated per-run parameters.

pub mod cpu;
pub mod cuda;
pub mod model;

use std::path::PathBuf;

/// Where spartac keeps what it compiled, between runs: `$SPARTAC_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/spartac`, else `~/.cache/spartac`; `None` when none can be named. PTX goes
/// under `ptx/`, compiled HPEC layers under `layers/`.
pub fn cache_root() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("SPARTAC_CACHE_DIR") {
        return Some(PathBuf::from(d));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("spartac"))
}

/// Writes `bytes` to `path` atomically ([`spartac::output::write_atomic`]); a failure only
/// costs the cache entry, so it is not an error.
pub fn write_cache_entry(path: &std::path::Path, bytes: &[u8]) {
    if let Some(d) = path.parent() {
        let _ = std::fs::create_dir_all(d);
    }
    let _ = spartac::output::write_atomic(path, bytes);
}

/// Errors of program execution.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("step {step} ({label}): {message}")]
    Step { step: usize, label: String, message: String },
    #[error("{0}")]
    Shape(String),
    #[error(transparent)]
    Cuda(#[from] crate::cuda::CudaError),
}
