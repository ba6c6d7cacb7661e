//! `spartac tune`: autotuning with profiling feedback on the GPU (SparTA §3.3–§4).
//!
//! The model goes through `compile`'s pipeline up to the plan (the propagation from the
//! propagation cache when it holds it, as `compile`'s); then, per planned operator,
//! every candidate (`spartac::tune`: the planner's alternatives × the kernel choices that
//! matter, those the cost model puts above `--prune`× the best skipped) is checked and timed on
//! the GPU (`spartac_runtime::cuda::tune::GpuTimer`), each result cached as it comes. The
//! measurements refit the cost DB; the plan is redone with it and its new alternatives measured,
//! until a round finds nothing new (at most [`FEEDBACK_ROUNDS`]); the report (`tune_report.rs`)
//! shows, per operator, the model's choice and the measured winner, predicted before and after
//! the refit. `compile` reads the cache (`--tune-cache`, `stages::CompileTuning`).

use crate::model_args::ModelArgs;
use crate::tune_report::Report;
use anyhow::{Context, Result};
use clap::Args;
use spartac::plan::cost::CostModel;
use spartac::plan::PlanOptions;
use spartac::tune::{
    measure_prepared, refit, run_samples, tune_graph_ahead, Event, OperatorTuning, StopReason, Timer, TuneCache,
    TuneOptions, TuneRun,
};
use spartac_runtime::cuda::tune::GpuTimer;
use spartac_runtime::cuda::CudaDevice;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

const TUNE_HELP: &str = "\
Examples:
  spartac tune minilm-l6.onnx --tesa models/tesa/minilm-l6-block32-90.json --budget 10m \\
      --json tune.json --plot tune.png
  spartac compile minilm-l6.onnx --tesa models/tesa/minilm-l6-block32-90.json -o minilm.sparta

Every planned MatMul/Gemm is timed on this GPU in each of its candidate plans (cover by block
shape, one shape, 1x1, 2:4 + rest, dense) on each kernel choice that matters (fp32: the
specializer's, SIMT, the 3xTF32 fine kernel on two tiles); candidates the cost model predicts
slower than --prune times the best are skipped. Each is checked against a CPU reference first.
Results go to the cache (default $SPARTAC_CACHE_DIR/tune, else ~/.cache/spartac/tune) as they
come: a tune stopped by --budget or Ctrl-C resumes where it left off. The measurements refit
the cost DB, the model is planned again with it and what is new measured (a few rounds); the
DB is saved as costdb.json in the cache. `spartac compile` then takes the measured winners and
the refitted DB from the same folder.";

/// Tune a model's kernels on the GPU: time every candidate plan, cache the winners, refit the cost DB.
#[derive(Args, Debug)]
#[command(after_help = TUNE_HELP)]
pub struct TuneArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// TeSA attributes: which tensors are pruned or quantized (format: models/tesa.schema.json).
    #[arg(long, value_name = "attrs.json")]
    pub tesa: Option<PathBuf>,
    /// Skip sparsity propagation (as `compile --no-propagate`).
    #[arg(long)]
    pub no_propagate: bool,
    /// Neither read nor write the propagation cache (as `compile --no-propagation-cache`).
    #[arg(long)]
    pub no_propagation_cache: bool,
    /// Element type the model runs in (as `compile --dtype`; tune with the dtype you compile with:
    /// the cache keys carry it).
    #[arg(long, default_value = "f32", value_parser = ["f32", "f16", "bf16"])]
    pub dtype: String,
    /// Cost DB the candidates are predicted (and pruned) with before the refit (default: the
    /// built-in sm_90 one).
    #[arg(long, value_name = "COSTDB.json")]
    pub costdb: Option<PathBuf>,
    /// Stop measuring this long after the start (e.g. 90s, 5m, 1h30m); everything measured is kept.
    #[arg(long, value_parser = parse_duration)]
    pub budget: Option<Duration>,
    /// The tuning cache (default: $SPARTAC_CACHE_DIR/tune, else ~/.cache/spartac/tune).
    #[arg(long, value_name = "DIR")]
    pub cache: Option<PathBuf>,
    /// Timed runs per candidate (the median is kept).
    #[arg(long, default_value_t = 30)]
    pub reps: usize,
    /// Skip candidates predicted slower than this times the best prediction.
    #[arg(long, default_value_t = 2.0)]
    pub prune: f64,
    /// Write the report as JSON.
    #[arg(long, value_name = "REPORT.json")]
    pub json: Option<PathBuf>,
    /// Plot predicted against measured time per candidate (PNG, log-log, before and after the refit).
    #[arg(long, value_name = "PLOT.png")]
    pub plot: Option<PathBuf>,
}

/// `90s`, `5m`, `1h30m`, `500ms`, or plain seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if let Ok(secs) = t.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).map_err(|_| format!("{s:?}: not a duration (finite, 0 or more)"));
    }
    let (mut total, mut rest) = (0.0f64, t);
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let unit_end = rest[digits..].find(|c: char| c.is_ascii_digit()).map_or(rest.len(), |i| digits + i);
        let value: f64 = rest[..digits].parse().map_err(|_| format!("{s:?}: expected e.g. 90s, 5m or 1h30m"))?;
        let scale = match &rest[digits..unit_end] {
            "ms" => 1e-3,
            "s" | "sec" => 1.0,
            "m" | "min" => 60.0,
            "h" => 3600.0,
            unit => return Err(format!("{s:?}: unknown unit {unit:?} (ms, s, m, h)")),
        };
        total += value * scale;
        rest = &rest[unit_end..];
    }
    Duration::try_from_secs_f64(total).map_err(|_| format!("{s:?}: too long a duration"))
}

pub fn run(args: TuneArgs) -> Result<ExitCode> {
    let started = Instant::now();
    crate::outputs::check_outputs([("--json", args.json.as_deref()), ("--plot", args.plot.as_deref())])?;
    // The GPU first: without one, say so before any work.
    let dev = CudaDevice::open(0).context("spartac tune times kernels on the GPU")?;
    let dir =
        args.cache.clone().or_else(crate::stages::default_cache_dir).context("no cache folder: pass --cache DIR")?;
    let t = Instant::now();
    let mut graph = args.model.load()?;
    let load_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let cache = crate::stages::propagation_cache(args.no_propagation_cache);
    let tesa = args.tesa.as_deref();
    let sparsified = crate::stages::sparsify(&mut graph, &args.model.model, tesa, !args.no_propagate, cache.as_ref())?;
    for w in &sparsified.warnings {
        eprintln!("warning: {w}");
    }
    let sparsify_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    crate::stages::rewrite(&mut graph, &Default::default(), &args.dtype)?;
    println!(
        "pipeline: frontend {load_s:.2} s, tesa+propagate {sparsify_s:.2} s{}, rewrite {:.2} s",
        if sparsified.cached { " (cached)" } else { "" },
        t.elapsed().as_secs_f64()
    );
    let base = crate::stages::cost_model(args.costdb.as_deref())?;
    let mut timer = GpuTimer::new(dev, 5, args.reps);
    let cache = TuneCache::new(&dir);
    // A budget past what the clock can represent is no deadline at all.
    let deadline = args.budget.and_then(|b| started.checked_add(b));
    let report = tune_model(&graph, &base, &mut timer, &cache, args.prune, deadline, started)?;
    print!("{}", report.table());
    if let Some(path) = &args.json {
        spartac::output::write_atomic(path, serde_json::to_string_pretty(&report.json)?.as_bytes())?;
    }
    if let Some(path) = &args.plot {
        report.plot(&args.model.model).write_png(path)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Rounds of planning under a refitted DB after the first, at most.
const FEEDBACK_ROUNDS: usize = 3;

/// The tune of a graph (after `compile`'s pipeline up to the plan) on `timer`: the
/// measurements, the feedback rounds (refit, plan again, measure what is new), the refitted DB
/// (saved as the cache's `costdb.json`), and the report.
fn tune_model(
    graph: &spartac::ir::Graph,
    base: &CostModel,
    timer: &mut dyn Timer,
    cache: &TuneCache,
    prune_factor: f64,
    deadline: Option<Instant>,
    started: Instant,
) -> Result<Report> {
    let target = timer.target();
    println!("device: {target}; cache: {}", cache.dir().display());
    let opts =
        TuneOptions { plan: PlanOptions { cost: base.clone(), ..PlanOptions::default() }, prune_factor, deadline };
    // The DB the previous tune on this cache fitted: when this round measures nothing new, the
    // refit gives it again, so the feedback round's enumeration runs beside this one's.
    let with_cost = |cost: CostModel| TuneOptions { plan: PlanOptions { cost, ..opts.plan.clone() }, ..opts.clone() };
    let guessed = crate::stages::cost_model(Some(&cache.costdb_path())).ok().map(with_cost);
    let (first, mut ahead) = tune_with_bar(graph, &opts, Round::Plan(guessed.as_ref()), cache, timer, "")?;
    if first.counts().0 > 0 {
        ahead = None;
    }
    // Feedback: refit on everything measured, plan again with the refitted DB and measure the
    // candidates that are new, until a round finds none (then the DB that planned it is the one
    // fitted to every measurement, and a tune run again measures nothing) or the rounds run out.
    let source = |n: usize| format!("fitted by `spartac tune` on {target} to {n} measurements");
    let mut rounds: Vec<TuneRun> = vec![first];
    let mut ahead_used = false;
    let mut refitted: Option<CostModel> = None;
    let mut stale = false;
    for round in 1..=FEEDBACK_ROUNDS {
        let run = rounds.last().expect("the first round");
        let all = run_samples(run);
        if all.is_empty() {
            break;
        }
        let cost = match refit(base, &all, &source(all.len())) {
            Ok(f) => CostModel::new(base.hw.clone(), f.db)?,
            Err(e) => {
                eprintln!("warning: the measurements do not refit the cost DB ({e}); keeping it");
                refitted = None;
                break;
            }
        };
        refitted = Some(cost.clone());
        stale = false;
        if run.stop == StopReason::Budget {
            break;
        }
        let same_db =
            |g: &TuneOptions| serde_json::to_string(&g.plan.cost.db).ok() == serde_json::to_string(&cost.db).ok();
        let input = match ahead.take() {
            Some(ops) if guessed.as_ref().is_some_and(same_db) => {
                ahead_used = true;
                Round::Prepared(ops)
            }
            _ => Round::Plan(None),
        };
        let opts_round = with_cost(cost);
        let (next, _) = tune_with_bar(graph, &opts_round, input, cache, timer, &format!("feedback round {round}: "))?;
        stale = next.counts().0 > 0;
        rounds.push(next);
        if !stale {
            break;
        }
    }
    if stale {
        // The last round measured more than its DB was fitted to.
        let all = run_samples(rounds.last().expect("the first round"));
        refitted =
            refit(base, &all, &source(all.len())).ok().map(|f| CostModel::new(base.hw.clone(), f.db)).transpose()?;
    }
    if let Some(cost) = &refitted {
        let text = serde_json::to_string_pretty(&cost.db)? + "\n";
        let dir = cache.dir();
        std::fs::create_dir_all(dir).with_context(|| dir.display().to_string())?;
        spartac::output::write_atomic(&cache.costdb_path(), text.as_bytes())?;
        println!("refitted cost DB: {} (`spartac compile` uses it)", cache.costdb_path().display());
    }
    let mut report = Report::new(&target, &rounds, base, refitted.as_ref(), started.elapsed())?;
    // Whether the feedback round came from the enumeration run beside the first (a warm cache).
    report.json["feedback_enumerated_ahead"] = serde_json::json!(ahead_used);
    Ok(report)
}

/// What a round starts from: enumerate (and, beside it, the operators under the guessed next
/// round's options), or operators already enumerated under this round's options.
enum Round<'a> {
    Plan(Option<&'a TuneOptions>),
    Prepared(Vec<OperatorTuning>),
}

/// One round of [`spartac::tune::tune_graph`] with a progress bar: ETA over the candidates to
/// measure, the operator's best time so far, one line per operator when it is done. Returns
/// the run and the operators enumerated ahead ([`Round::Plan`] with options).
fn tune_with_bar(
    graph: &spartac::ir::Graph,
    opts: &TuneOptions,
    input: Round,
    cache: &TuneCache,
    timer: &mut dyn Timer,
    round: &str,
) -> Result<(TuneRun, Option<Vec<OperatorTuning>>)> {
    let bar = indicatif::ProgressBar::new(0).with_style(
        indicatif::ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} ETA {eta} {msg}")
            .expect("progress template"),
    );
    // A hidden bar (no terminal) prints nothing: the lines go to stderr then.
    let say = |line: String| if bar.is_hidden() { eprintln!("{line}") } else { bar.println(line) };
    let mut current: Option<(String, f64)> = None;
    let mut progress = |e: &Event| match e {
        Event::Enumerated { node, index, total } => {
            bar.set_length(*total as u64);
            bar.set_position(*index as u64);
            bar.set_message(format!("{round}enumerating candidates: {node}"));
        }
        Event::Measuring { to_measure } => {
            bar.set_position(0);
            bar.set_length(*to_measure as u64);
            bar.reset_eta();
            if *to_measure == 0 {
                say(format!("{round}every candidate is in the cache"));
            }
        }
        Event::Measured { node, candidate, result, best } => {
            if let Some((prev, t)) = current.take().filter(|(n, _)| n != node) {
                say(format!("{round}{prev}: best {:.1} µs", t * 1e6));
            }
            current = best.map(|b| (node.to_string(), b));
            let what = match (result.seconds, &result.error) {
                (Some(s), _) => format!("{:.1} µs", s * 1e6),
                (None, Some(e)) => e.chars().take(60).collect(),
                (None, None) => "-".into(),
            };
            bar.inc(1);
            bar.set_message(format!(
                "{node}: best {} | {} {what}",
                best.map_or("-".into(), |b| format!("{:.1} µs", b * 1e6)),
                candidate.name()
            ));
        }
        Event::Warning(w) => say(format!("warning: {w}")),
    };
    let (run, ahead) = match input {
        Round::Plan(ahead) => tune_graph_ahead(graph, opts, ahead, cache, timer, &mut progress)?,
        Round::Prepared(operators) => (measure_prepared(operators, opts, cache, timer, &mut progress)?, None),
    };
    if let Some((prev, t)) = current {
        say(format!("{round}{prev}: best {:.1} µs", t * 1e6));
    }
    bar.finish_and_clear();
    if run.stop == StopReason::Budget {
        println!("{round}budget spent: stopped; everything measured is cached (run again to go on)");
    }
    Ok((run, ahead))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// Two linear layers through `compile`'s pipeline.
    fn two_layers() -> spartac::ir::Graph {
        use spartac::ir::{DType, Tensor};
        use spartac::tesa::patterns::Pattern;
        use spartac_tests::builder::{fixed, ModelBuilder};
        let weight = |pattern: Pattern, seed: u64| {
            let mask = pattern.mask(256, 256, seed);
            let mut rng = spartac::rng::SplitMix64::new(seed);
            let w = mask.iter().map(|p| if *p { 0.0 } else { rng.uniform(-1.0, 1.0) as f32 }).collect();
            Tensor::from_vec(vec![256, 256], w)
        };
        let bytes = ModelBuilder::new("two", 17)
            .input("x", DType::F32, &fixed(&[128, 256]))
            .init("w1", &weight(Pattern::Mixed { bh: 32, bw: 32, block_sparsity: 0.85, scattered: 0.01 }, 1))
            .init("w2", &weight(Pattern::Block { bh: 32, bw: 32, sparsity: 0.75 }, 2))
            .node("fc1", "MatMul", &["x", "w1"], &["h"], vec![])
            .node("relu", "Relu", &["h"], &["r"], vec![])
            .node("fc2", "MatMul", &["r", "w2"], &["y"], vec![])
            .output("y", DType::F32, &fixed(&[128, 256]))
            .bytes();
        let mut g = spartac::frontend::load_model_bytes(&bytes, "two.onnx", &Default::default()).unwrap();
        crate::stages::sparsify(&mut g, Path::new("two.onnx"), None, true, None).unwrap();
        crate::stages::rewrite(&mut g, &Default::default(), "f32").unwrap();
        g
    }

    /// The whole tune but the GPU: two rounds, the refit saved, the report, its JSON and plot;
    /// then again from the cache, and with the budget spent.
    #[test]
    fn a_tune_on_a_fake_gpu_reports_refits_and_resumes() {
        use spartac::codegen::Engine;
        use spartac::plan::KernelChoice;
        use spartac_tests::fake_timer::FakeTimer;
        let dir = tempfile::tempdir().unwrap();
        let cache = TuneCache::new(dir.path().join("tune"));
        let g = two_layers();
        let base = CostModel::sm_90();
        let mut timer = FakeTimer::favoring(KernelChoice::Engine(Engine::Simt));
        let report = tune_model(&g, &base, &mut timer, &cache, 2.0, None, Instant::now()).unwrap();
        let j = &report.json;
        assert_eq!(j["operators"].as_array().unwrap().len(), 2, "{j}");
        assert_eq!((j["stop"].as_str(), j["refitted"].as_bool()), (Some("done"), Some(true)));
        assert!(j["measured_now"].as_u64().unwrap() as usize == timer.calls && timer.calls >= 4, "{j}");
        for op in j["operators"].as_array().unwrap() {
            assert!(op["winner"]["candidate"].as_str().unwrap().ends_with("[simt]"), "{op}");
            assert!(op["model_choice"]["measured_s"].as_f64().is_some(), "{op}");
        }
        let table = report.table();
        assert!(table.contains("fc1") && table.contains("fc2") && table.contains("median"), "{table}");
        let db = spartac::plan::cost::CostDb::parse(&std::fs::read_to_string(cache.costdb_path()).unwrap()).unwrap();
        assert!(db.source.contains("Fake GPU"), "{}", db.source);
        let png = dir.path().join("tune.png");
        report.plot(Path::new("two.onnx")).write_png(&png).unwrap();
        assert!(std::fs::metadata(&png).unwrap().len() > 1000);
        // Again: everything from the cache, the same winners.
        let mut again = FakeTimer::favoring(KernelChoice::Engine(Engine::Simt));
        let report2 = tune_model(&g, &base, &mut again, &cache, 2.0, None, Instant::now()).unwrap();
        assert_eq!(again.calls, 0);
        assert_eq!(report2.json["operators"][0]["winner"], j["operators"][0]["winner"]);
        // Its feedback round was enumerated beside the first under the cached DB (the refit of
        // the same measurements): the same refitted choices, predictions and errors as a tune
        // that enumerates it after the refit (the first run's last round).
        assert_eq!(
            (j["feedback_enumerated_ahead"].as_bool(), report2.json["feedback_enumerated_ahead"].as_bool()),
            (Some(false), Some(true))
        );
        for k in ["matmul_refitted_s", "median_rel_err_before", "median_rel_err_after"] {
            assert_eq!(report2.json[k], j[k], "{k}");
        }
        for (a, b) in report2.json["operators"].as_array().unwrap().iter().zip(j["operators"].as_array().unwrap()) {
            assert_eq!((&a["refitted_choice"], &a["candidates"]), (&b["refitted_choice"], &b["candidates"]));
        }
        // A spent budget: a report of what the cache holds, stopped by the budget.
        std::fs::remove_file(cache.path_of(report.json["operators"][1]["key"].as_str().unwrap())).unwrap();
        let mut idle = FakeTimer::favoring(KernelChoice::Auto);
        let report3 = tune_model(&g, &base, &mut idle, &cache, 2.0, Some(Instant::now()), Instant::now()).unwrap();
        assert_eq!((idle.calls, report3.json["stop"].as_str()), (0, Some("budget")));
        assert!(report3.json["operators"][1]["winner"].is_null());
    }

    #[test]
    fn durations_parse_like_humantime() {
        assert_eq!(parse_duration("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("12").unwrap(), Duration::from_secs(12));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("m").is_err());
    }
}
