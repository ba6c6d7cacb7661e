//! Autotuning with profiling feedback (SparTA §3.3–§4): the candidate plans of every operator
//! are specialized, checked and timed on the GPU, the fastest is cached, and the measurements
//! refit the cost DB.
//!
//! Per operator ([`prepare_operator`]): its [`Signature`] and cache key ([`key`]), its
//! candidates ([`candidates`]: the planner's alternatives × the kernel choices that matter,
//! pruned by the cost model), and what the cache ([`cache`]) already holds for it. Then
//! [`measure_operator`] hands every candidate not yet settled to a [`Timer`] (the runtime's GPU
//! timer; a fake in tests), records the result in the operator's entry and writes the entry
//! atomically after each one, so a tune that stops (its budget, a crash) resumes where it
//! left off. [`tune_graph`] does this for every operator of a graph (enumerated in parallel;
//! [`tune_graph_ahead`] also enumerates them under a guessed next round's options beside it, for
//! [`measure_prepared`] once the guess is confirmed); the operator-level calls
//! serve any one-weight graph as well (an HPEC layer: `codegen::from_plan::single_weight_graph`).
//!
//! Feedback: [`samples`] turns the measurements into `calibrate::Sample`s, [`refit`] fits the
//! cost DB to them, and [`apply_cache`] makes a plan's choices the measured winners (and their
//! kernel choice), which `spartac compile --tune-cache` does. This module is GPU-free: the
//! timing lives behind [`Timer`].
//!
//! Layering: tuning drives both the planner (every alternative of a site) and the specializer
//! (each candidate's kernels, to tell identical ones apart and count their work), so it sits
//! above `plan` and `codegen`, as `program` does.

pub mod cache;
pub mod candidates;
pub mod key;

pub use cache::{Entry, Measured, TuneCache};
pub use candidates::{enumerate, kernel_variants, sample_of, tolerance, Candidate, Candidates};
pub use key::{cache_key, signature, spartac_version, Signature, Target};

use crate::codegen::from_plan::PlannedKernel;
use crate::codegen::SpmmSpec;
use crate::ir::Graph;
use crate::plan::calibrate::{fit, predict, Fitted, Sample};
use crate::plan::cost::CostModel;
use crate::plan::site::{find_sites, Site};
use crate::plan::{plan_site_with, KernelChoice, OperatorPlan, Plan, PlanOptions};
use crate::Error;
use rayon::prelude::*;
use std::time::Instant;

/// Times candidates. The contract: `measure` runs `kernels` (in order, the first overwriting the
/// output, as the model lowering launches them) at the operator's real shape on random
/// activations, checks the output against a CPU reference of `X·W` (W the sum of the kernels'
/// weights, the epilogue applied), then times repeated runs and returns their median. An
/// `Err` is a run that failed (not cached as settled: the next tune tries again).
pub trait Timer {
    /// The GPU the times are for (part of every cache key).
    fn target(&self) -> Target;
    /// Called with the specs of every candidate of an operator before they are measured (a GPU
    /// timer compiles their kernels in parallel here).
    fn prepare(&mut self, _specs: &[SpmmSpec]) {}
    fn measure(&mut self, op: &OperatorPlan, kernels: &[PlannedKernel]) -> Result<Measurement, String>;
}

/// One candidate's run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Measurement {
    /// Median over the timed runs.
    pub seconds: f64,
    /// ‖out − ref‖ / ‖ref‖ of the checked run.
    pub rel_err: f64,
}

/// Settings of a tune.
#[derive(Clone, Debug)]
pub struct TuneOptions {
    pub plan: PlanOptions,
    /// Candidates predicted slower than this times the best prediction are not measured.
    pub prune_factor: f64,
    /// Stop measuring at this instant (everything measured so far is kept).
    pub deadline: Option<Instant>,
}

impl Default for TuneOptions {
    fn default() -> TuneOptions {
        TuneOptions { plan: PlanOptions::default(), prune_factor: 2.0, deadline: None }
    }
}

/// Why a tune stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// Every candidate is settled.
    Done,
    /// The deadline passed first.
    Budget,
}

/// What the driver reports as it goes (the CLI's progress bar).
#[derive(Debug)]
pub enum Event<'a> {
    /// Operator `index` of `total` enumerated.
    Enumerated { node: &'a str, index: usize, total: usize },
    /// The measuring starts: this many candidates to run.
    Measuring { to_measure: usize },
    /// One candidate ran; `best` is the operator's fastest time so far.
    Measured { node: &'a str, candidate: &'a Candidate, result: &'a Measured, best: Option<f64> },
    /// Something the user should know (a damaged cache entry, which is then rebuilt).
    Warning(String),
}

/// One operator being tuned.
#[derive(Clone, Debug)]
pub struct OperatorTuning {
    pub site: Site,
    pub node: String,
    pub candidates: Candidates,
    pub entry: Entry,
    /// Candidates settled in the cache before this tune.
    pub cached: usize,
    /// Candidates measured by this tune.
    pub measured: usize,
    /// Another operator has the same key: it is measured there.
    pub same_as: Option<String>,
}

impl OperatorTuning {
    /// Survivors not yet settled in the entry.
    pub fn to_measure(&self) -> Vec<&Candidate> {
        let settled = |c: &Candidate| self.entry.find(c.split, &c.label, c.kernel).is_some_and(Measured::is_settled);
        self.candidates.survivors.iter().filter(|c| !settled(c)).collect()
    }
}

/// Enumerates the candidates of `site` and reads its entry from `cache` (a damaged entry is
/// reported through `warn` and started afresh).
pub fn prepare_operator(
    graph: &Graph,
    site: &Site,
    opts: &TuneOptions,
    target: &Target,
    cache: &TuneCache,
    warn: &mut dyn FnMut(String),
) -> Result<OperatorTuning, Error> {
    let candidates = enumerate(graph, site, &opts.plan, opts.prune_factor)?;
    let node = graph.node(site.node).name.clone();
    let sig = signature(graph, site, &candidates.extracted);
    let fresh = Entry::new(sig, target.clone(), spartac_version(), &node);
    let entry = match cache.read(&fresh.key) {
        Ok(Some(e)) => e,
        Ok(None) => fresh,
        Err(why) => {
            warn(format!("damaged tune cache entry ignored (measured again): {why}"));
            fresh
        }
    };
    let mut op = OperatorTuning { site: site.clone(), node, candidates, entry, cached: 0, measured: 0, same_as: None };
    op.cached = op.candidates.survivors.len() - op.to_measure().len();
    Ok(op)
}

/// Measures the unsettled candidates of `op` with `timer` until the deadline, writing the
/// entry after each one; then marks the entry complete when every survivor is settled.
pub fn measure_operator(
    op: &mut OperatorTuning,
    cache: &TuneCache,
    timer: &mut dyn Timer,
    deadline: Option<Instant>,
    progress: &mut dyn FnMut(&Event),
) -> Result<StopReason, Error> {
    let past = |d: Option<Instant>| d.is_some_and(|d| Instant::now() >= d);
    let todo: Vec<Candidate> = op.to_measure().into_iter().cloned().collect();
    if !todo.is_empty() && !past(deadline) {
        let mut specs = vec![];
        for c in &todo {
            // A candidate that does not map to kernels fails below, with its reason.
            specs.extend(op.candidates.kernels(c).into_iter().flatten().map(|pk| pk.spec));
        }
        timer.prepare(&specs);
    }
    for c in &todo {
        if past(deadline) {
            return Ok(StopReason::Budget);
        }
        let plan = op.candidates.plan_of(c);
        let outcome =
            op.candidates.kernels(c).map_err(|e| e.to_string()).and_then(|kernels| timer.measure(&plan, &kernels));
        let tol = tolerance(&plan.dtype);
        let mut m = Measured {
            split: c.split.name().to_string(),
            label: c.label.clone(),
            kernel: c.kernel,
            sample: c.sample.clone(),
            predicted_s: c.predicted_s,
            seconds: None,
            rel_err: None,
            error: None,
        };
        match outcome {
            Ok(r) if r.rel_err.is_finite() && r.rel_err <= tol && r.seconds.is_finite() && r.seconds > 0.0 => {
                m.seconds = Some(r.seconds);
                m.rel_err = Some(r.rel_err);
                m.sample.seconds = r.seconds;
            }
            Ok(r) => {
                m.rel_err = Some(r.rel_err);
                m.error = Some(format!("wrong: relative error {:.2e} above {tol:.0e}", r.rel_err));
            }
            Err(e) => m.error = Some(e),
        }
        op.entry.record(m.clone());
        op.measured += 1;
        op.entry.complete = false;
        cache.write(&op.entry)?;
        let best = op.entry.winner().and_then(|w| w.seconds);
        progress(&Event::Measured { node: &op.node, candidate: c, result: &m, best });
    }
    op.entry.pruned = op.candidates.pruned.len();
    let complete = op.to_measure().is_empty();
    if complete != op.entry.complete || !todo.is_empty() {
        op.entry.complete = complete;
        cache.write(&op.entry)?;
    }
    Ok(StopReason::Done)
}

/// The result of [`tune_graph`].
#[derive(Clone, Debug)]
pub struct TuneRun {
    pub operators: Vec<OperatorTuning>,
    pub stop: StopReason,
}

impl TuneRun {
    /// Candidates measured by this run, settled from the cache before it, pruned by the cost
    /// model, refused by the specializer, and failed (wrong or errors) among those measured.
    pub fn counts(&self) -> (usize, usize, usize, usize, usize) {
        let ops = || self.operators.iter().filter(|o| o.same_as.is_none());
        let failed = ops().flat_map(|o| &o.entry.candidates).filter(|c| c.seconds.is_none()).count();
        (
            ops().map(|o| o.measured).sum(),
            ops().map(|o| o.cached).sum(),
            ops().map(|o| o.candidates.pruned.len()).sum(),
            ops().map(|o| o.candidates.inapplicable.len()).sum(),
            failed,
        )
    }
}

/// Tunes every planned operator of `graph` (run the same pipeline as `compile` first).
/// Operators that share a key are measured once.
pub fn tune_graph(
    graph: &Graph,
    opts: &TuneOptions,
    cache: &TuneCache,
    timer: &mut dyn Timer,
    progress: &mut dyn FnMut(&Event),
) -> Result<TuneRun, Error> {
    tune_graph_ahead(graph, opts, None, cache, timer, progress).map(|(run, _)| run)
}

/// [`tune_graph`], enumerating every operator under `ahead` as well, side by side with `opts`:
/// the next feedback round's options when its cost DB can be guessed before this round ends
/// (the DB a previous tune fitted to the measurements the cache holds). The second list, read
/// from the cache before this round measured anything, is for [`measure_prepared`] once the
/// guess is confirmed: only when this round measured nothing and the refit gives that DB.
pub fn tune_graph_ahead(
    graph: &Graph,
    opts: &TuneOptions,
    ahead: Option<&TuneOptions>,
    cache: &TuneCache,
    timer: &mut dyn Timer,
    progress: &mut dyn FnMut(&Event),
) -> Result<(TuneRun, Option<Vec<OperatorTuning>>), Error> {
    let target = timer.target();
    let sites = find_sites(graph);
    // Operators are enumerated in parallel (each one's planning and specializing is independent;
    // a warm re-tune is nothing else), then reported in graph order.
    type Prepared = (Result<OperatorTuning, Error>, Vec<String>, Option<Result<OperatorTuning, Error>>);
    let prepared: Vec<Prepared> = sites
        .par_iter()
        .map(|site| {
            let mut warnings = vec![];
            let (op, next) = rayon::join(
                || prepare_operator(graph, site, opts, &target, cache, &mut |w| warnings.push(w)),
                || ahead.map(|a| prepare_operator(graph, site, a, &target, cache, &mut |_| {})),
            );
            (op, warnings, next)
        })
        .collect();
    let mut operators: Vec<OperatorTuning> = vec![];
    let mut next_ops: Option<Vec<OperatorTuning>> = ahead.map(|_| vec![]);
    for (i, (op, warnings, next)) in prepared.into_iter().enumerate() {
        for w in warnings {
            progress(&Event::Warning(w));
        }
        // An operator whose key an earlier one has is measured there.
        let push = |list: &mut Vec<OperatorTuning>, mut op: OperatorTuning| {
            op.same_as = list.iter().find(|o| o.entry.key == op.entry.key).map(|o| o.node.clone());
            list.push(op);
        };
        push(&mut operators, op?);
        let op = operators.last().expect("just pushed");
        progress(&Event::Enumerated { node: &op.node, index: i + 1, total: sites.len() });
        if let (Some(list), Some(next)) = (next_ops.as_mut(), next) {
            push(list, next?);
        }
    }
    Ok((measure_prepared(operators, opts, cache, timer, progress)?, next_ops))
}

/// Measures what the prepared `operators` (from [`tune_graph_ahead`]) leave unsettled, as
/// [`tune_graph`] does after its enumeration.
pub fn measure_prepared(
    mut operators: Vec<OperatorTuning>,
    opts: &TuneOptions,
    cache: &TuneCache,
    timer: &mut dyn Timer,
    progress: &mut dyn FnMut(&Event),
) -> Result<TuneRun, Error> {
    let to_measure = operators.iter().filter(|o| o.same_as.is_none()).map(|o| o.to_measure().len()).sum();
    progress(&Event::Measuring { to_measure });
    let mut stop = StopReason::Done;
    for op in operators.iter_mut() {
        if op.same_as.is_some() || op.candidates.extracted.chosen.is_none() {
            continue;
        }
        if measure_operator(op, cache, timer, opts.deadline, progress)? == StopReason::Budget {
            stop = StopReason::Budget;
            break;
        }
    }
    // Operators measured under another's key see its entry.
    for i in 0..operators.len() {
        if let Some(first) = operators[i].same_as.clone() {
            if let Some(e) = operators.iter().find(|o| o.node == first).map(|o| o.entry.clone()) {
                operators[i].entry = e;
            }
        }
    }
    Ok(TuneRun { operators, stop })
}

/// Calibration samples of every timed candidate of `entries` (`seconds` the measured median), as
/// the entries stored them.
pub fn samples<'a>(entries: impl IntoIterator<Item = &'a Entry>) -> Vec<Sample> {
    entries.into_iter().flat_map(|e| e.timed().map(|c| c.sample.clone())).collect()
}

/// The calibration sample of `m`, a candidate of the operator enumerated as `candidates`, as this
/// build describes it (its launch geometry, the kernel of a dense candidate) where it still
/// enumerates that candidate, else as the entry stored it; `seconds` the measured median. So
/// entries written before the samples carried their geometry refit with it.
pub fn current_sample(candidates: &Candidates, m: &Measured) -> Sample {
    let fresh = candidates.survivors.iter().chain(&candidates.pruned).find(|c| m.is(c.split, &c.label, c.kernel));
    let mut s = fresh.map_or_else(|| m.sample.clone(), |c| c.sample.clone());
    s.seconds = m.seconds.unwrap_or(m.sample.seconds);
    s
}

/// [`current_sample`] of every timed candidate of `entry`.
pub fn operator_samples(candidates: &Candidates, entry: &Entry) -> Vec<Sample> {
    entry.timed().map(|m| current_sample(candidates, m)).collect()
}

/// [`operator_samples`] of every operator of `run` measured under its own key.
pub fn run_samples(run: &TuneRun) -> Vec<Sample> {
    run.operators
        .iter()
        .filter(|o| o.same_as.is_none())
        .flat_map(|o| operator_samples(&o.candidates, &o.entry))
        .collect()
}

/// The cost DB of `model` fitted to `samples` (`calibrate::fit`), refused when a fitted entry is
/// not usable (the error names it).
pub fn refit(model: &CostModel, samples: &[Sample], source: &str) -> Result<Fitted, Error> {
    let fitted = fit(model, samples, source)?;
    fitted.db.validate()?;
    Ok(fitted)
}

/// Median of |predicted − measured| / measured over `samples` under `model` (NaN without any).
pub fn median_rel_err(model: &CostModel, samples: &[Sample]) -> Result<f64, Error> {
    let mut errs: Vec<f64> =
        samples.iter().map(|s| Ok((predict(model, s)? - s.seconds).abs() / s.seconds)).collect::<Result<_, Error>>()?;
    errs.sort_by(f64::total_cmp);
    Ok(if errs.is_empty() { f64::NAN } else { errs[errs.len() / 2] })
}

/// The operator a tune sample belongs to: the first word of its label (the node's name).
fn operator_of(s: &Sample) -> &str {
    s.label.split_whitespace().next().unwrap_or("")
}

/// Median relative error of the refit on operators it did not see: the operators (in sorted
/// order of their names) alternate between two halves, each half is predicted by the DB
/// refitted (from `model`) to the other, and the median is over every sample. Guards the refit's
/// terms against fitting operators rather than kernels. NaN with fewer than two operators.
pub fn holdout_rel_err(model: &CostModel, samples: &[Sample]) -> Result<f64, Error> {
    let mut ops: Vec<&str> = samples.iter().map(operator_of).collect();
    ops.sort_unstable();
    ops.dedup();
    if ops.len() < 2 {
        return Ok(f64::NAN);
    }
    let half = |s: &Sample| ops.binary_search(&operator_of(s)).unwrap_or(0) % 2;
    let mut errs = vec![];
    for held in 0..2 {
        let (train, test): (Vec<Sample>, Vec<Sample>) = samples.iter().cloned().partition(|s| half(s) != held);
        let fitted = CostModel::new(model.hw.clone(), refit(model, &train, "holdout")?.db)?;
        for s in &test {
            errs.push((predict(&fitted, s)? - s.seconds).abs() / s.seconds);
        }
    }
    errs.sort_by(f64::total_cmp);
    Ok(errs[errs.len() / 2])
}

/// What [`apply_cache`] did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Applied {
    /// Operators planned from a cache entry.
    pub from_cache: usize,
    /// Among them, those whose alternative or kernel choice differs from the model's.
    pub changed: usize,
    /// Operators with an entry that was not used (incomplete, and the model's choice unmeasured).
    pub unusable: usize,
}

/// Replans every operator of `plan` (planned from `graph` with `opts`) that has a usable entry
/// for `target` among `entries`: its chosen alternative becomes the fastest measured one among
/// those it considers, on the kernel choice measured. An entry is usable when it is complete,
/// or when it measured the model's own choice (then the pick is never slower than it, as
/// measured).
pub fn apply_cache(
    graph: &Graph,
    plan: &mut Plan,
    opts: &PlanOptions,
    entries: &[Entry],
    target: &Target,
) -> Result<Applied, Error> {
    let mut applied = Applied::default();
    for site in find_sites(graph) {
        let node = &graph.node(site.node).name;
        let Some(slot) = plan.operators.iter().position(|o| &o.node == node) else { continue };
        let op = &plan.operators[slot];
        let Some(model) = op.chosen else { continue };
        let key = cache_key(&signature(graph, &site, op), target, spartac_version());
        let Some(entry) = entries.iter().find(|e| e.key == key) else { continue };
        let model_c = &op.considered[model];
        let model_timed =
            entry.find(model_c.split, &model_c.label, KernelChoice::Auto).is_some_and(|m| m.seconds.is_some());
        let mut timed: Vec<&Measured> = entry.timed().collect();
        timed.sort_by(|a, b| a.seconds.unwrap_or(f64::INFINITY).total_cmp(&b.seconds.unwrap_or(f64::INFINITY)));
        let pick = timed.iter().find_map(|m| {
            op.considered.iter().position(|c| c.split.name() == m.split && c.label == m.label).map(|a| (a, *m))
        });
        let Some((alt, best)) = pick.filter(|_| entry.complete || model_timed) else {
            applied.unusable += 1;
            continue;
        };
        let mut tuned = plan_site_with(graph, &site, opts, &|_| Some(alt))?;
        tuned.kernel = best.kernel;
        tuned.reason = format!(
            "tuned on {}: {} [{}] measured fastest ({:.1} µs) of {} candidates",
            target.device,
            best.split,
            best.kernel.label(),
            best.seconds.unwrap_or(f64::NAN) * 1e6,
            entry.timed().count()
        );
        applied.from_cache += 1;
        applied.changed += usize::from(alt != model || best.kernel != KernelChoice::Auto);
        plan.operators[slot] = tuned;
    }
    Ok(applied)
}
