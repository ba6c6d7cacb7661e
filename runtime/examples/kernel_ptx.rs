//! Writes the CUDA source and the sm_90a PTX of the kernels of the benchmark cases whose label
//! ends with a given text, without a GPU (NVRTC only): the input of `ptxas` + `cuobjdump -sass`
//! when reading a kernel's machine code (see `benches/sass_loops.py`).
//!
//! Run: `cargo run --release -p spartac-runtime --example kernel_ptx -- SIZE DTYPE LABEL_END OUT_DIR`,
//! e.g. `1024 f32 "unstructured@0.95 fine" /tmp/k`. NVRTC comes from the pinned wheels under
//! `.cuda/` (`tests/run-all.sh` installs them) or the library path. The weights are the ones
//! `spartac kernels bench` draws (seed 2026), so the tables match the benchmarked kernels.

use anyhow::{bail, Context};
use spartac::codegen::{specialize, Dtype};
use spartac_runtime::cuda::cases::bench_cases;
use spartac_runtime::cuda::{compile_ptx, preload_nvrtc};
use std::path::{Path, PathBuf};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [size, dtype, label_end, out] = args.as_slice() else {
        bail!("usage: kernel_ptx SIZE DTYPE LABEL_END OUT_DIR (e.g. 1024 f32 \"unstructured@0.95 fine\" /tmp/k)");
    };
    let size: usize = size.parse().context("SIZE")?;
    let dtype = match dtype.as_str() {
        "f32" => Dtype::F32,
        "f16" => Dtype::F16,
        "bf16" => Dtype::Bf16,
        "i8" => Dtype::I8,
        d => bail!("unknown dtype {d} (f32, f16, bf16, i8)"),
    };
    let out = PathBuf::from(out);
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let wheels = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.cuda/nvidia/cu13/lib");
    if wheels.is_dir() {
        preload_nvrtc(&wheels)?;
    }
    let mut written = 0;
    for case in bench_cases(size, dtype).iter().filter(|c| c.label().ends_with(label_end.as_str())) {
        for spec in &case.problem(2026).specs {
            let kernel = specialize(spec).with_context(|| case.label())?;
            let stem = format!("{}__{}", case.label().replace([' ', '@', '+'], "_"), kernel.name);
            let ptx = compile_ptx(&kernel.name, &kernel.source, "sm_90a").with_context(|| case.label())?;
            std::fs::write(out.join(format!("{stem}.cu")), &kernel.source)?;
            std::fs::write(out.join(format!("{stem}.ptx")), &ptx.ptx)?;
            println!("{}: {} grid {:?} block {:?}", case.label(), kernel.name, kernel.launch.grid, kernel.launch.block);
            written += 1;
        }
    }
    if written == 0 {
        bail!("no {size} {} benchmark case's label ends with {label_end:?}", dtype.name());
    }
    Ok(())
}
