//! `spartac run MODEL.sparta`: a compiled artifact on the GPU (one CUDA graph, replayed) or on
//! the CPU executor, with `--check` comparing the two on the same inputs.

use super::RunArgs;
use anyhow::{anyhow, bail, Context, Result};
use spartac::ir::Tensor;
use spartac::program::artifact::{decode, Artifact};
use spartac::program::model::ModelProgram;
use spartac::program::{Elem, Op};
use spartac_runtime::exec::model::{relative_error, run_cpu, weak_reference, GpuModel, Outputs};
use spartac_runtime::npz::{read_npz, write_npz};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

/// Whether `path` names an artifact (by its extension, or by its magic when it can be read).
pub fn is_artifact(path: &Path) -> bool {
    if path.extension().and_then(|e| e.to_str()) == Some("sparta") {
        return true;
    }
    let mut head = [0u8; 8];
    // Only a regular file is opened (a FIFO would block); anything else is left to the loader's error.
    spartac::contained::check_regular(path).is_ok()
        && std::fs::File::open(path)
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head))
            .is_ok_and(|()| &head == spartac::program::artifact::ARTIFACT_MAGIC)
}

/// Reads and checks an artifact (one-line errors for a missing, truncated, corrupted or
/// other-version file). The header is checked against the file's length before the rest is
/// read: a file longer than its header says is refused, not read whole.
pub fn load_artifact(path: &Path) -> Result<Artifact> {
    use spartac::program::artifact::{check_header, ARTIFACT_HEADER_BYTES};
    use std::io::Read;
    let reading = || format!("reading {}", path.display());
    spartac::contained::check_regular(path).with_context(reading)?;
    let mut file = std::fs::File::open(path).with_context(reading)?;
    let len = file.metadata().with_context(reading)?.len();
    let mut bytes = vec![];
    (&mut file).take(ARTIFACT_HEADER_BYTES as u64).read_to_end(&mut bytes).with_context(reading)?;
    check_header(&bytes, len).with_context(|| format!("{}", path.display()))?;
    let len = usize::try_from(len).context("the artifact is larger than memory can address")?;
    bytes
        .try_reserve_exact(len - bytes.len())
        .map_err(|_| anyhow!("{}: {len} bytes do not fit in memory", path.display()))?;
    file.take((len - bytes.len()) as u64).read_to_end(&mut bytes).with_context(reading)?;
    decode(&bytes).with_context(|| format!("{}", path.display()))
}

fn inputs_for(model: &ModelProgram, args: &RunArgs) -> Result<BTreeMap<String, Tensor>> {
    match (&args.inputs, args.random) {
        (Some(path), _) => read_npz(path),
        (None, Some(seed)) => {
            let specs: Vec<_> =
                model.inputs.iter().map(|s| (s.name.clone(), s.dtype, s.shape.clone(), s.bound)).collect();
            Ok(spartac::reference::random_tensors(&specs, seed))
        }
        (None, None) => bail!("give --inputs IN.npz or --random SEED"),
    }
}

/// What a step is, for the profile table and `inspect`: its ops (`MatMul (planned)` for the
/// planned ones, `attention (fused)` for one attention kernel, `MatMul + residual (library)`
/// for a planned MatMul whose library call adds a residual).
pub(crate) fn step_kind(op: &Op) -> String {
    match op {
        Op::Spmm { .. } => "MatMul (planned)".into(),
        Op::Nodes(nodes)
            if nodes.first().is_some_and(|n| n.op_type == "MatMul")
                && nodes.iter().filter(|n| n.op_type == "Add").count() >= 1
                && nodes.iter().all(|n| matches!(n.op_type.as_str(), "MatMul" | "Add" | "Relu")) =>
        {
            "MatMul + residual (library)".into()
        }
        Op::Nodes(nodes)
            if nodes.iter().any(|n| n.op_type == "Softmax") && nodes.iter().any(|n| n.op_type == "MatMul") =>
        {
            "attention (fused)".into()
        }
        Op::Nodes(nodes) if nodes.iter().any(|n| n.op_type == "MatMul") => "MatMul (activations)".into(),
        Op::Nodes(nodes) if nodes.iter().any(|n| n.op_type == "Conv") => "Conv (NHWC kernel)".into(),
        Op::Nodes(nodes) if nodes.len() > 1 && nodes.iter().any(|n| n.op_type == "LayerNormalization") => {
            "LayerNorm + elementwise (fused)".into()
        }
        Op::Nodes(nodes) if nodes.len() > 1 => "fused elementwise".into(),
        Op::Nodes(nodes) => nodes.first().map_or("node".into(), |n| n.op_type.clone()),
        Op::Move => "copy".into(),
        _ => "other".into(),
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

pub fn run(args: &RunArgs) -> Result<ExitCode> {
    let path = &args.model.model;
    if !args.model.input_shape.is_empty() || !args.model.dim.is_empty() {
        bail!("--input-shape/--dim apply when compiling; {} has its shapes fixed", path.display());
    }
    let Artifact { model, ptx } = load_artifact(path)?;
    let inputs = inputs_for(&model, args)?;
    spartac::program::model::check_model_inputs(&model.inputs, &inputs)
        .map_err(|e| anyhow!("inputs for {}: {e}", path.display()))?;
    let device = match args.backend.as_str() {
        "cpu" => None,
        "cuda" => Some(spartac_runtime::cuda::CudaDevice::open(0).context("--backend cuda: no GPU answered")?),
        _ => spartac_runtime::cuda::CudaDevice::open(0).ok(),
    };
    let mut summary = serde_json::json!({ "model": path.display().to_string(), "name": model.program.name });
    let (outputs, backend, ms): (Outputs, String, Vec<f64>) = match device {
        None => {
            if args.check {
                bail!("--check compares the GPU run with the CPU run: it needs a GPU (--backend cuda)");
            }
            let mut times = vec![];
            let mut last = None;
            for _ in 0..args.repeat {
                let t = Instant::now();
                last = Some(run_cpu(&model, &inputs)?);
                times.push(t.elapsed().as_secs_f64() * 1e3);
            }
            (last.expect("repeat >= 1"), "cpu".into(), times)
        }
        Some(dev) => {
            let dev = std::sync::Arc::new(dev);
            let arch = dev.arch().to_string();
            spartac_runtime::exec::cuda::seed_artifact_ptx(&model.program, &ptx, &arch);
            let reference = if args.check { Some(model.clone()) } else { None };
            let t = Instant::now();
            let mut gm = GpuModel::load(dev.clone(), model.clone())?;
            let load_s = t.elapsed().as_secs_f64();
            gm.set_inputs(&inputs)?;
            gm.program.poison()?;
            gm.run()?;
            let outputs = gm.outputs()?;
            let mut times = vec![];
            let mut after = None;
            if args.repeat > 1 {
                // Warm-up, then device time per launch.
                gm.program.time_launches(&[], 3)?;
                times = gm.program.time_launches(&[], args.repeat as usize)?;
                // The outputs of the last launch too: state a launch leaves behind (counters
                // not back at zero, a buffer read before it is written) shows there.
                if args.check {
                    after = Some(gm.outputs()?);
                }
            }
            summary["load_s"] = load_s.into();
            summary["kernels_compiled"] = gm.program.compile.compiled.into();
            summary["kernels_from_cache"] = gm.program.compile.from_cache.into();
            summary["device_bytes"] = gm.program.program().device_bytes().into();
            if let Some(reference) = reference {
                let t = Instant::now();
                let want = run_cpu(&reference, &inputs)?;
                let mut worst = 0.0f64;
                let mut errors = serde_json::Map::new();
                let mut weak = serde_json::Map::new();
                for ((name, got), (_, w)) in outputs.iter().zip(&want) {
                    let e = relative_error(got, w);
                    println!("check {name}: relative error {e:.3e} (GPU vs CPU executor)");
                    if let Some(why) = weak_reference(w) {
                        println!("check {name}: warning: the check says little here: {why}");
                        weak.insert(name.clone(), why.into());
                    }
                    errors.insert(name.clone(), e.into());
                    worst = worst.max(e);
                }
                summary["check_weak"] = weak.into();
                if let Some(after) = &after {
                    for ((name, got), (_, w)) in after.iter().zip(&want) {
                        let e = relative_error(got, w);
                        println!("check {name} after {} more launches: relative error {e:.3e}", args.repeat + 3);
                        worst = worst.max(e);
                    }
                }
                summary["check_errors"] = errors.into();
                summary["check_cpu_s"] = t.elapsed().as_secs_f64().into();
                // bf16 keeps 8 bits of mantissa against fp16's 11: its rounding is 8× coarser.
                let has = |e: Elem| reference.program.buffers.iter().any(|b| b.elem == e);
                let default = if has(Elem::BF16) {
                    8e-2
                } else if has(Elem::F16) {
                    1e-2
                } else {
                    1e-4
                };
                let tolerance = args.tolerance.unwrap_or(default);
                summary["check_tolerance"] = tolerance.into();
                if worst > tolerance {
                    write_summary(args, &summary)?;
                    bail!("GPU outputs differ from the CPU executor: relative error {worst:.3e} > {tolerance:.1e}");
                }
            }
            if args.profile {
                let steps = gm.program.profile_steps(&[])?;
                gm.program.synchronize()?;
                print_step_profile(&model, &steps, args.profile_top);
            }
            (outputs, format!("cuda ({})", dev.name()), times)
        }
    };
    if let Some(out) = &args.output {
        write_npz(out, &outputs)?;
    }
    let mut ms = ms;
    let runs = if ms.len() > 1 { format!("median of {} runs", ms.len()) } else { "1 run".into() };
    let med = if ms.is_empty() { f64::NAN } else { median(&mut ms) };
    summary["backend"] = backend.clone().into();
    summary["runs"] = ms.len().into();
    summary["median_ms"] = med.into();
    summary["min_ms"] = ms.first().copied().unwrap_or(f64::NAN).into();
    write_summary(args, &summary)?;
    let time = if ms.is_empty() { "(time with --repeat N > 1)".to_string() } else { format!("{med:.3} ms") };
    let written = match &args.output {
        Some(p) => format!(", {} outputs written to {}", outputs.len(), p.display()),
        None => String::new(),
    };
    println!("{}: {} on {backend}, {runs}: {time}{written}", path.display(), model.program.name);
    Ok(ExitCode::SUCCESS)
}

fn write_summary(args: &RunArgs, summary: &serde_json::Value) -> Result<()> {
    if let Some(path) = &args.json {
        spartac::output::write_atomic(path, serde_json::to_string_pretty(summary)?.as_bytes())?;
    }
    Ok(())
}

fn print_step_profile(model: &ModelProgram, steps: &[f64], top: usize) {
    let mut by_kind: BTreeMap<String, (usize, f64)> = BTreeMap::new();
    for (s, ms) in model.program.steps.iter().zip(steps) {
        let e = by_kind.entry(step_kind(&s.op)).or_default();
        e.0 += 1;
        e.1 += ms;
    }
    let total: f64 = steps.iter().sum();
    let mut rows: Vec<_> = by_kind.into_iter().collect();
    rows.sort_by(|a, b| b.1 .1.total_cmp(&a.1 .1));
    println!("{:<24} {:>6} {:>10} {:>7}", "step kind", "steps", "ms", "share");
    for (k, (n, ms)) in rows {
        println!("{k:<24} {n:>6} {ms:>10.3} {:>6.1}%", 100.0 * ms / total.max(1e-12));
    }
    println!("{:<24} {:>6} {total:>10.3}   (steps run one by one; the graph is faster)", "total", "");
    let mut slowest: Vec<(usize, f64)> = steps.iter().copied().enumerate().collect();
    slowest.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    println!("slowest steps:");
    for (i, ms) in slowest.into_iter().take(top) {
        let s = &model.program.steps[i];
        println!("  {ms:>8.3} ms  #{i:<4} {:<20} {}", step_kind(&s.op), s.label);
    }
}
