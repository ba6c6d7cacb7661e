//! Helpers shared by the kernel compile tests: the pinned NVRTC and ptxas wheels under `.cuda/`.

use spartac_runtime::cuda::{nvrtc_version, preload_nvrtc};
use std::path::{Path, PathBuf};
use std::process::Command;

pub fn cuda_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../.cuda/nvidia/cu13")
}

/// Loads NVRTC from the wheels, or fails with the way to get it.
pub fn nvrtc() {
    let lib = cuda_dir().join("lib");
    if lib.is_dir() {
        preload_nvrtc(&lib).expect("loading NVRTC from .cuda");
    }
    if let Err(e) = nvrtc_version() {
        panic!("NVRTC is required by the kernel tests and was not found ({e}); run tests/run-all.sh, which installs the pinned wheels under .cuda/");
    }
}

/// `ptxas -v` on one PTX for sm_90a: (registers, spill store bytes, spill load bytes).
pub fn ptxas(name: &str, ptx: &str, dir: &Path) -> (u32, u32, u32) {
    ptxas_for(name, ptx, dir, "sm_90a")
}

/// [`ptxas`] for `arch` (e.g. `sm_80`). Not every test binary that includes this module calls it.
#[allow(dead_code)]
pub fn ptxas_for(name: &str, ptx: &str, dir: &Path, arch: &str) -> (u32, u32, u32) {
    let ptxas = cuda_dir().join("bin/ptxas");
    assert!(ptxas.is_file(), "ptxas not found at {} (run tests/run-all.sh)", ptxas.display());
    let src = dir.join(format!("{name}.ptx"));
    std::fs::write(&src, ptx).unwrap();
    let out = Command::new(&ptxas)
        .arg(format!("-arch={arch}"))
        .args(["-v", "-O3"])
        .arg(&src)
        .arg("-o")
        .arg(dir.join(format!("{name}.cubin")))
        .output()
        .expect("running ptxas");
    let log = String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "ptxas failed on {name}: {log}");
    // ptxas serializes wgmmas it cannot prove safe to overlap (C7510, C7520): a silent slowdown.
    assert!(!log.contains("Performance Loss: wgmma"), "ptxas serialized the wgmmas of {name}: {log}");
    let num_before = |needle: &str| -> u32 {
        log.lines()
            .find_map(|l| {
                let i = l.find(needle)?;
                l[..i].split_whitespace().last()?.parse().ok()
            })
            .unwrap_or_else(|| panic!("no {needle:?} in ptxas output: {log}"))
    };
    (num_before("registers"), num_before("bytes spill stores"), num_before("bytes spill loads"))
}
