//! Executors of compiled [`Program`](spartac::program::Program)s: [`cpu`] runs the steps on
//! the host (the simulation every program is tested with), [`cuda`] turns them into one CUDA
//! graph (kernel, memcpy and memset nodes, edges = the steps' `after` lists), instantiated once
//! and relaunched with updated per-run parameters.

pub mod cpu;
pub mod cuda;
pub mod external;
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
/// costs the cache entry, so it is not an error. Nothing is written when it would leave the
/// file system with less than [`CACHE_KEEP_FREE`] of room (a 16384x1920 HPEC network's
/// compiled layers are ~45 GB): a cache must not fill the disk the run needs.
pub fn write_cache_entry(path: &std::path::Path, bytes: &[u8]) {
    if let Some(d) = path.parent() {
        let _ = std::fs::create_dir_all(d);
        if free_bytes(d).is_some_and(|free| free < bytes.len() as u64 + CACHE_KEEP_FREE) {
            return;
        }
    }
    let _ = spartac::output::write_atomic(path, bytes);
}

/// Room a cache write leaves on its file system at least.
pub const CACHE_KEEP_FREE: u64 = 8 << 30;

/// Bytes an unprivileged writer may still use on the file system holding `dir`.
fn free_bytes(dir: &std::path::Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs fills the zeroed struct; the path is a valid C string.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some(st.f_bavail as u64 * st.f_frsize as u64)
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

#[cfg(test)]
mod tests {
    #[test]
    fn free_bytes_reads_the_file_system_and_fails_on_a_missing_folder() {
        let dir = std::env::temp_dir();
        assert!(super::free_bytes(&dir).is_some_and(|b| b > 0));
        assert_eq!(super::free_bytes(&dir.join("spartac-no-such-folder/inner")), None);
    }
}
