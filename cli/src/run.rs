//! `spartac run`: runs a model on given or random inputs and writes the outputs. An ONNX file
//! runs on the CPU reference engine (`spartac_runtime::engine`); a `.sparta` artifact goes to
//! `run/artifact.rs` (a child module: it takes this file's [`RunArgs`]).

pub(crate) mod artifact;

use crate::model_args::ModelArgs;
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use spartac_runtime::npz::{read_npz, write_npz};
use spartac_runtime::{select_engine, Backend};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Run a model and write its outputs. The model is an ONNX file (run by the CPU reference
/// engine) or an artifact of `spartac compile` (MODEL.sparta: one CUDA graph on the GPU, or
/// the same program on the CPU with --backend cpu). Inputs come from an .npz file keyed by
/// the model's input names, or are random (deterministic for a seed: floats in [-1,1),
/// integer ids within the range of the table they index, masks 0/1).
///
/// Prints one line: model, backend, time per run (median when --repeat > 1; GPU: device
/// time of each graph launch, after warm-up).
///
/// Examples:
///   spartac run model.onnx --random 7 --output out.npz
///   spartac run minilm.sparta --random 7 --backend cuda --repeat 100 --check
///   spartac run minilm.sparta --inputs in.npz --output out.npz --profile
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct RunArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Read inputs from this .npz (keys = ONNX input names).
    #[arg(long, value_name = "IN.npz", conflicts_with = "random", required_unless_present = "random")]
    pub inputs: Option<PathBuf>,
    /// Use random inputs made from this seed.
    #[arg(long, value_name = "SEED")]
    pub random: Option<u64>,
    /// Write the outputs to this .npz (keys = ONNX output names). Written atomically.
    #[arg(long, value_name = "OUT.npz")]
    pub output: Option<PathBuf>,
    /// Engine to run on: cpu, cuda (artifacts only), or auto (the GPU when one answers and the
    /// model is an artifact, else the CPU).
    #[arg(long, default_value = "auto", value_parser = ["auto", "cpu", "cuda"])]
    pub backend: String,
    /// Artifacts on the GPU: also run the program on the CPU executor and compare every output
    /// (normwise relative error; fails above --tolerance). Warns where an output says little
    /// about the layers before it: all zero, or NaN/infinite values (which match their own kind).
    #[arg(long)]
    pub check: bool,
    /// Largest relative error --check accepts (default: 1e-4; 1e-2 for a model compiled with
    /// fp16 values, whose GPU and CPU sums round differently at every kernel boundary; 8e-2
    /// with bf16 values, whose rounding is 8× coarser).
    #[arg(long, value_parser = parse_tolerance)]
    pub tolerance: Option<f64>,
    /// Also write the run's summary (times, errors) as JSON.
    #[arg(long, value_name = "RUN.json")]
    pub json: Option<PathBuf>,
    /// Run this many times and report the median.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: u32,
    /// After the runs, print where the time goes: a table of op types (CPU engine; per step
    /// kind on the GPU, from events between the steps run one by one).
    #[arg(long)]
    pub profile: bool,
    /// How many of the slowest steps `--profile` lists.
    #[arg(long, default_value_t = 8, value_name = "N")]
    pub profile_top: usize,
}

pub fn run(args: RunArgs) -> Result<ExitCode> {
    if let Some(out) = &args.output {
        if out.extension().and_then(|e| e.to_str()) != Some("npz") {
            bail!("--output {} must end in .npz", out.display());
        }
    }
    crate::outputs::check_outputs([("--output", args.output.as_deref()), ("--json", args.json.as_deref())])?;
    if artifact::is_artifact(&args.model.model) {
        return artifact::run(&args);
    }
    let backend: Backend = match args.backend.as_str() {
        "cuda" => bail!(
            "--backend cuda runs compiled artifacts: spartac compile {} first, then run the .sparta file",
            args.model.model.display()
        ),
        other => other.parse().map_err(|e: String| anyhow!(e))?,
    };
    if args.check {
        bail!("--check compares a compiled artifact's GPU run with its CPU run: give a .sparta file");
    }
    let graph = args.model.load()?;
    let inputs = match (&args.inputs, args.random) {
        (Some(path), _) => read_npz(path)?,
        (None, Some(seed)) => spartac::reference::random_inputs(&graph, seed),
        (None, None) => bail!("give --inputs IN.npz or --random SEED"),
    };
    spartac::reference::check_inputs(&graph, &inputs)
        .with_context(|| format!("inputs for {}", args.model.model.display()))?;
    let engine = select_engine(backend)?;
    let spinner = indicatif::ProgressBar::new_spinner().with_message(format!("running on {}", engine.name()));
    spinner.enable_steady_tick(Duration::from_millis(120));
    let mut times = vec![];
    let mut last = None;
    for _ in 0..args.repeat {
        let out = engine.run(&graph, &inputs).map_err(|e| anyhow!(e))?;
        times.push(out.elapsed);
        last = Some(out);
    }
    spinner.finish_and_clear();
    let out = last.expect("repeat >= 1");
    times.sort();
    let median = times[times.len() / 2];
    if let Some(path) = &args.output {
        write_npz(path, &out.outputs)?;
    }
    if let Some(path) = &args.json {
        let summary = serde_json::json!({
            "model": args.model.model.display().to_string(),
            "name": graph.name,
            "backend": engine.name(),
            "runs": times.len(),
            "median_ms": median.as_secs_f64() * 1e3,
            "min_ms": times[0].as_secs_f64() * 1e3,
        });
        spartac::output::write_atomic(path, serde_json::to_string_pretty(&summary)?.as_bytes())?;
    }
    if args.profile {
        let mut profile = spartac::reference::Profile::default();
        spartac::reference::execute_profiled(&graph, &inputs, Some(&mut profile))?;
        print_profile(&profile);
    }
    let written = match &args.output {
        Some(p) => format!(", {} outputs written to {}", out.outputs.len(), p.display()),
        None => String::new(),
    };
    let runs = if args.repeat > 1 { format!("median of {} runs", args.repeat) } else { "1 run".to_string() };
    println!(
        "{}: {} on {}, {runs}: {:.1} ms{written}",
        args.model.model.display(),
        graph.name,
        engine.name(),
        median.as_secs_f64() * 1e3
    );
    Ok(ExitCode::SUCCESS)
}

fn print_profile(profile: &spartac::reference::Profile) {
    let mut rows: Vec<(&String, &(usize, Duration))> = profile.per_op.iter().collect();
    rows.sort_by(|a, b| b.1 .1.cmp(&a.1 .1).then(a.0.cmp(b.0)));
    let total = profile.total.as_secs_f64().max(1e-12);
    println!("{:<24} {:>6} {:>11} {:>7}", "op", "nodes", "ms", "share");
    for (op, (count, time)) in rows {
        let ms = time.as_secs_f64() * 1e3;
        println!("{op:<24} {count:>6} {ms:>11.1} {:>6.1}%", 100.0 * time.as_secs_f64() / total);
    }
    println!("{:<24} {:>6} {:>11.1}", "total", "", total * 1e3);
}

/// `--tolerance`: a finite relative error, 0 or more (NaN would accept every output).
fn parse_tolerance(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(t) if t.is_finite() && t >= 0.0 => Ok(t),
        _ => Err(format!("{s:?}: expected a finite relative error, 0 or more (e.g. 1e-4)")),
    }
}
