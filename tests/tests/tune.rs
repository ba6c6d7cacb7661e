//! `spartac tune` without a GPU (a fake [`Timer`]): cache keys, candidate enumeration and the
//! cost model's pruning on a real plan, atomic entries and resuming, a damaged entry rebuilt,
//! applying a cache to a plan, and the refit of the cost DB from the measurements.

use spartac::codegen::from_plan::kernels_for_operator;
use spartac::codegen::{Engine, SpmmSpec};
use spartac::frontend::{load_model_bytes, LoadOptions};
use spartac::ir::{DType, Graph, Tensor};
use spartac::plan::calibrate::{predict, PartKernel};
use spartac::plan::cost::WaveTerms;
use spartac::plan::site::find_sites;
use spartac::plan::{plan, KernelChoice, PlanOptions};
use spartac::propagate::{propagate, PropagateOptions};
use spartac::rewrite::prepare_for_lowering;
use spartac::rng::SplitMix64;
use spartac::tesa::attrs::apply_attrs;
use spartac::tesa::patterns::Pattern;
use spartac::tune::{
    apply_cache, cache_key, enumerate, holdout_rel_err, median_rel_err, operator_samples, refit, samples, signature,
    spartac_version, tune_graph, Event, Measurement, StopReason, Target, TuneCache, TuneOptions,
};
use spartac_tests::builder::{fixed, ModelBuilder};
use spartac_tests::fake_timer::FakeTimer;
use std::time::Instant;

/// `y = relu(x · w + b)`, `w` pruned by `pattern` (seeded), through `compile`'s pipeline up
/// to the plan.
fn linear(m: usize, k: usize, n: usize, pattern: Pattern, seed: u64) -> Graph {
    let mask = pattern.mask(k, n, seed);
    let mut rng = SplitMix64::new(seed + 1);
    let w: Vec<f32> = mask.iter().map(|p| if *p { 0.0 } else { rng.uniform(-1.0, 1.0) as f32 }).collect();
    let b: Vec<f32> = (0..n).map(|_| rng.uniform(-1.0, 1.0) as f32).collect();
    let bytes = ModelBuilder::new("tune", 17)
        .input("x", DType::F32, &fixed(&[m, k]))
        .init("w", &Tensor::from_vec(vec![k, n], w))
        .init("b", &Tensor::from_vec(vec![n], b))
        .node("fc", "MatMul", &["x", "w"], &["h"], vec![])
        .node("add", "Add", &["h", "b"], &["z"], vec![])
        .node("relu", "Relu", &["z"], &["y"], vec![])
        .output("y", DType::F32, &fixed(&[m, n]))
        .bytes();
    let mut g = load_model_bytes(&bytes, "tune.onnx", &LoadOptions::default()).unwrap();
    apply_attrs(&mut g, None).unwrap();
    propagate(&mut g, &PropagateOptions::default()).unwrap();
    prepare_for_lowering(&mut g, true).unwrap();
    g
}

fn mixed() -> Pattern {
    Pattern::Mixed { bh: 32, bw: 32, block_sparsity: 0.85, scattered: 0.01 }
}

fn key_of(g: &Graph, target: &Target, version: &str) -> String {
    let site = &find_sites(g)[0];
    let op = &plan(g, &PlanOptions::default()).unwrap().operators[0];
    cache_key(&signature(g, site, op), target, version)
}

#[test]
fn cache_keys_follow_shape_pattern_gpu_and_version() {
    let h100 = Target { arch: "sm_90a".into(), device: "NVIDIA H100 80GB HBM3".into() };
    let v = spartac_version();
    let g = linear(128, 256, 256, mixed(), 1);
    let key = key_of(&g, &h100, v);
    assert_eq!(key.len(), 16);
    assert_eq!(key, key_of(&linear(128, 256, 256, mixed(), 1), &h100, v), "the same operator, the same key");
    // Other weight values, same pattern: the same key (values do not change a kernel's time).
    let mut other_values = g.clone();
    let wid = find_sites(&g)[0].weight;
    let t = other_values.initializers[&wid].to_dense();
    let doubled: Vec<f32> = t.to_f64_vec().iter().map(|x| 2.0 * *x as f32).collect();
    other_values
        .initializers
        .insert(wid, spartac::ir::Initializer::Dense(Tensor::from_vec(t.shape().to_vec(), doubled)));
    assert_eq!(key, key_of(&other_values, &h100, v));
    let others = [
        key_of(&linear(128, 256, 256, mixed(), 2), &h100, v),
        key_of(&linear(64, 256, 256, mixed(), 1), &h100, v),
        key_of(&g, &Target { device: "NVIDIA H200".into(), ..h100.clone() }, v),
        key_of(&g, &Target { arch: "sm_80".into(), ..h100.clone() }, v),
        key_of(&g, &h100, "0.0.0-other"),
    ];
    for (i, k) in others.iter().enumerate() {
        assert_ne!(&key, k, "case {i}: a different pattern, shape, GPU or version must miss");
    }
}

#[test]
fn candidates_cross_alternatives_with_kernels_and_prune_by_prediction() {
    let g = linear(128, 256, 256, mixed(), 3);
    let site = &find_sites(&g)[0];
    let opts = PlanOptions::default();
    let all = enumerate(&g, site, &opts, f64::INFINITY).unwrap();
    let n_alts = all.extracted.considered.len();
    assert!(n_alts >= 4, "dense, by-shape and one-shape covers: {:?}", all.extracted.considered);
    assert!(all.pruned.is_empty());
    // Every alternative appears, on more than one kernel choice in all (fp32: SIMT, 3xTF32 tiles).
    for a in 0..n_alts {
        assert!(
            all.survivors.iter().any(|c| c.alternative == a) || all.duplicates > 0,
            "alternative {a} has no candidate"
        );
    }
    let kernels: std::collections::BTreeSet<String> = all.survivors.iter().map(|c| c.kernel.label()).collect();
    assert!(kernels.contains("auto") && kernels.contains("simt"), "{kernels:?}");
    assert!(kernels.iter().any(|k| k.starts_with("tf32x3")), "{kernels:?}");
    assert_eq!(all.survivors.iter().filter(|c| c.is_model_choice).count(), 1);
    // The same enumeration with the 2× rule: the ones it drops were predicted above 2× the best.
    let pruned = enumerate(&g, site, &opts, 2.0).unwrap();
    let best = all.survivors.iter().map(|c| c.predicted_s).fold(f64::INFINITY, f64::min);
    assert_eq!(pruned.survivors.len() + pruned.pruned.len(), all.survivors.len());
    assert!(!pruned.pruned.is_empty(), "some candidates are predicted far slower than the best");
    for c in &pruned.pruned {
        assert!(c.predicted_s > 2.0 * best && !c.is_model_choice, "{} {}", c.name(), c.predicted_s);
    }
    for c in &pruned.survivors {
        assert!(c.predicted_s <= 2.0 * best || c.is_model_choice, "{}", c.name());
    }
    // Each candidate's kernels hold exactly the weight (the lowering's path).
    for c in &pruned.survivors {
        let ks = pruned.kernels(c).unwrap();
        let mut sum = vec![0.0f32; 256 * 256];
        ks.iter().for_each(|pk| sum.iter_mut().zip(&pk.weight).for_each(|(a, b)| *a += b));
        assert_eq!(sum, pruned.weight, "{}", c.name());
    }
}

fn opts() -> TuneOptions {
    TuneOptions { prune_factor: 2.0, ..TuneOptions::default() }
}

fn no_events(_: &Event) {}

#[test]
fn entries_are_written_atomically_and_a_tune_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let cache = TuneCache::new(dir.path());
    let g = linear(128, 256, 256, mixed(), 4);
    let mut timer = FakeTimer::favoring(KernelChoice::Engine(Engine::Simt));
    let run = tune_graph(&g, &opts(), &cache, &mut timer, &mut no_events).unwrap();
    assert_eq!(run.stop, StopReason::Done);
    let op = &run.operators[0];
    let survivors = op.candidates.survivors.len();
    assert!(survivors >= 3);
    assert_eq!((timer.calls, op.measured, op.cached), (survivors, survivors, 0));
    assert!(timer.prepared >= survivors, "the timer sees every spec first");
    assert!(op.entry.complete && op.entry.pruned == op.candidates.pruned.len());
    // One entry file, no temporary left behind, and it reads back as written.
    let names: Vec<String> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(names, vec![format!("{}.json", op.entry.key)]);
    assert_eq!(cache.read(&op.entry.key).unwrap().as_ref(), Some(&op.entry));
    // Again: nothing is measured.
    let mut again = FakeTimer::favoring(KernelChoice::Engine(Engine::Simt));
    let run2 = tune_graph(&g, &opts(), &cache, &mut again, &mut no_events).unwrap();
    assert_eq!((again.calls, run2.operators[0].cached, run2.operators[0].measured), (0, survivors, 0));
    // An interrupted tune (two candidates never measured) measures just those.
    let mut partial = op.entry.clone();
    partial.candidates.truncate(survivors - 2);
    partial.complete = false;
    cache.write(&partial).unwrap();
    let mut resume = FakeTimer::favoring(KernelChoice::Engine(Engine::Simt));
    let run3 = tune_graph(&g, &opts(), &cache, &mut resume, &mut no_events).unwrap();
    assert_eq!(resume.calls, 2);
    assert!(run3.operators[0].entry.complete);
    // A spent budget stops before the first measurement, keeping the entry as it was.
    cache.write(&partial).unwrap();
    let spent = TuneOptions { deadline: Some(Instant::now()), ..opts() };
    let mut idle = FakeTimer::favoring(KernelChoice::Auto);
    let run4 = tune_graph(&g, &spent, &cache, &mut idle, &mut no_events).unwrap();
    assert_eq!((run4.stop, idle.calls), (StopReason::Budget, 0));
    assert_eq!(cache.read(&partial.key).unwrap().unwrap(), partial);
}

#[test]
fn wrong_results_are_settled_and_run_errors_are_retried() {
    let dir = tempfile::tempdir().unwrap();
    let cache = TuneCache::new(dir.path());
    let g = linear(128, 256, 256, mixed(), 5);
    // SIMT candidates compute garbage, 3xTF32-tile candidates fail to run.
    let mut timer = FakeTimer::new(|op, _| match op.kernel {
        KernelChoice::Engine(Engine::Simt) => Ok(Measurement { seconds: 1e-6, rel_err: 0.5 }),
        KernelChoice::FineTf32(_) => Err("cuLaunchKernel: too many resources requested".into()),
        _ => Ok(Measurement { seconds: 2e-5, rel_err: 1e-7 }),
    });
    let run = tune_graph(&g, &opts(), &cache, &mut timer, &mut no_events).unwrap();
    let entry = &run.operators[0].entry;
    let winner = entry.winner().unwrap();
    assert_eq!(winner.kernel, KernelChoice::Auto, "a wrong candidate never wins, however fast");
    assert!(entry.candidates.iter().any(|c| c.error.as_deref().is_some_and(|e| e.starts_with("wrong"))));
    let failed = entry.candidates.iter().filter(|c| matches!(c.kernel, KernelChoice::FineTf32(_))).count();
    assert!(failed > 0 && !entry.complete);
    let mut again = FakeTimer::favoring(KernelChoice::Auto);
    tune_graph(&g, &opts(), &cache, &mut again, &mut no_events).unwrap();
    assert_eq!(again.calls, failed, "only the candidates that failed to run are measured again");
}

#[test]
fn a_damaged_entry_is_ignored_with_a_warning_and_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let cache = TuneCache::new(dir.path());
    let g = linear(96, 128, 128, Pattern::Block { bh: 32, bw: 32, sparsity: 0.75 }, 6);
    let mut timer = FakeTimer::favoring(KernelChoice::Auto);
    let run = tune_graph(&g, &opts(), &cache, &mut timer, &mut no_events).unwrap();
    let key = run.operators[0].entry.key.clone();
    let path = cache.path_of(&key);
    let good = std::fs::read_to_string(&path).unwrap();
    let tampered = good.replacen("\"complete\": true", "\"complete\": false", 1);
    assert_ne!(tampered, good);
    for damage in [good[..good.len() / 2].to_string(), "not json".to_string(), tampered] {
        std::fs::write(&path, &damage).unwrap();
        assert!(cache.read(&key).is_err());
        let (entries, damaged) = cache.entries();
        assert!(entries.is_empty() && damaged.len() == 1, "{damaged:?}");
        let mut warnings = vec![];
        let mut retry = FakeTimer::favoring(KernelChoice::Auto);
        tune_graph(&g, &opts(), &cache, &mut retry, &mut |e| {
            if let Event::Warning(w) = e {
                warnings.push(w.clone());
            }
        })
        .unwrap();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("damaged") && warnings[0].contains(&key), "{}", warnings[0]);
        assert_eq!(retry.calls, timer.calls, "measured again");
        assert!(cache.read(&key).unwrap().unwrap().complete, "and rebuilt");
    }
}

#[test]
fn a_cache_makes_the_measured_winner_the_plan_and_refits_the_cost_db() {
    let dir = tempfile::tempdir().unwrap();
    let cache = TuneCache::new(dir.path());
    let g = linear(128, 256, 256, mixed(), 7);
    let opts_plan = PlanOptions::default();
    let model_plan = plan(&g, &opts_plan).unwrap();
    let model_choice = model_plan.operators[0].chosen.unwrap();
    // The fake GPU runs every element on its own (the 1x1 cover) fastest, on SIMT.
    let fine = model_plan.operators[0].considered.iter().position(|c| c.label.starts_with("1x1")).unwrap();
    assert_ne!(model_choice, fine);
    let mut timer = FakeTimer::new(move |op, _| {
        let fast = op.chosen == Some(fine) && op.kernel == KernelChoice::Engine(Engine::Simt);
        Ok(Measurement { seconds: if fast { 5e-6 } else { 30e-6 }, rel_err: 1e-7 })
    });
    let everything = TuneOptions { prune_factor: f64::INFINITY, ..opts() };
    let run = tune_graph(&g, &everything, &cache, &mut timer, &mut no_events).unwrap();
    let (entries, damaged) = cache.entries();
    assert!(damaged.is_empty() && entries.len() == 1);
    // Another GPU's cache does not apply.
    let mut p = model_plan.clone();
    let other = Target { device: "Other GPU".into(), ..timer.target.clone() };
    assert_eq!(apply_cache(&g, &mut p, &opts_plan, &entries, &other).unwrap().from_cache, 0);
    assert_eq!(p, model_plan);
    let applied = apply_cache(&g, &mut p, &opts_plan, &entries, &timer.target).unwrap();
    assert_eq!((applied.from_cache, applied.changed), (1, 1));
    let tuned = &p.operators[0];
    assert_eq!(tuned.chosen, Some(fine));
    assert_eq!(tuned.kernel, KernelChoice::Engine(Engine::Simt));
    assert!(tuned.reason.starts_with("tuned on Fake GPU"), "{}", tuned.reason);
    // The kernel choice reaches the specs the lowering specializes.
    let specs: Vec<SpmmSpec> =
        kernels_for_operator(tuned, &run.operators[0].candidates.weight).unwrap().into_iter().map(|k| k.spec).collect();
    assert!(!specs.is_empty() && specs.iter().all(|s| s.engine == Engine::Simt));
    // The plan artifact keeps it.
    assert_eq!(spartac::plan::Plan::decode(&p.encode()).unwrap().operators[0].kernel, tuned.kernel);
    // Feedback: the measurements refit the DB, which then predicts them better.
    let s = samples(&entries);
    assert_eq!(s.len(), entries[0].timed().count());
    let fitted = refit(&opts_plan.cost, &s, "test").unwrap();
    let after = spartac::plan::cost::CostModel::new(opts_plan.cost.hw.clone(), fitted.db).unwrap();
    let (before_err, after_err) = (median_rel_err(&opts_plan.cost, &s).unwrap(), median_rel_err(&after, &s).unwrap());
    assert!(after_err <= before_err, "refit {after_err} vs {before_err}");
}

/// Every candidate's sample carries its kernels' launch geometry (a block kernel's heaviest CTA
/// walks its longest block column); an entry stored before samples carried it refits with the
/// geometry of this build's enumeration; and a DB with the critical-path terms, fitted to samples
/// it generated, predicts operators it was not fitted to (the holdout) exactly.
#[test]
fn samples_carry_launch_geometry_and_old_entries_refit_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let cache = TuneCache::new(dir.path());
    let g = linear(256, 256, 256, mixed(), 11);
    let mut timer = FakeTimer::favoring(KernelChoice::Auto);
    let run = tune_graph(&g, &opts(), &cache, &mut timer, &mut no_events).unwrap();
    let op = &run.operators[0];
    let mut block_parts = 0;
    for c in op.candidates.survivors.iter().chain(&op.candidates.pruned) {
        for p in &c.sample.parts {
            let geo = p.geometry.unwrap_or_else(|| panic!("{}: no geometry", c.name()));
            assert!(geo.ctas > 0 && geo.per_sm > 0, "{}: {geo:?}", c.name());
            if p.shape.h > 1 && !c.sample.dense {
                block_parts += 1;
                let (cols, depth) = (256 / p.shape.w, 256 / p.shape.h);
                assert!(geo.heaviest >= p.n_blocks.div_ceil(cols) && geo.heaviest <= depth, "{}: {geo:?}", c.name());
            }
        }
    }
    assert!(block_parts > 0);
    // The same entry as an older build wrote it: samples without geometry.
    let mut old = op.entry.clone();
    old.candidates.iter_mut().flat_map(|m| &mut m.sample.parts).for_each(|p| p.geometry = None);
    assert!(samples([&old]).iter().all(|s| s.parts.iter().all(|p| p.geometry.is_none())));
    let current = operator_samples(&op.candidates, &old);
    assert_eq!(current.len(), old.timed().count());
    assert!(current.iter().all(|s| s.parts.iter().all(|p| p.geometry.is_some())));
    for (s, m) in current.iter().zip(old.timed()) {
        assert_eq!(Some(s.seconds), m.seconds);
    }
    // Times generated by a DB with critical-path terms, on two operators: the refit of either
    // half predicts the other exactly.
    let base = spartac::plan::cost::CostModel::sm_90();
    let mut truth = base.db.clone();
    let tf32 = truth.block_tf32.as_mut().unwrap();
    tf32.waves = Some(WaveTerms { wave_ns: 0.0, critical_ns: 400.0, critical_ps_per_fma: 9.0 });
    let truth = spartac::plan::cost::CostModel::new(base.hw.clone(), truth).unwrap();
    let g2 = linear(256, 256, 256, mixed(), 12);
    let e2 = enumerate(&g2, &find_sites(&g2)[0], &PlanOptions::default(), f64::INFINITY).unwrap();
    let tf32_only = |c: &&spartac::tune::Candidate| {
        !c.sample.dense && c.sample.parts.len() == 1 && c.sample.parts[0].kernel == PartKernel::Tf32Blocks
    };
    let mut generated = vec![];
    for (name, cands) in [("a", &op.candidates), ("b", &e2)] {
        for c in cands.survivors.iter().chain(&cands.pruned).filter(tf32_only) {
            let mut s = c.sample.clone();
            s.label = format!("{name} {}", c.name());
            s.seconds = predict(&truth, &s).unwrap();
            generated.push(s);
        }
    }
    assert!(generated.len() >= 4, "{}", generated.len());
    let held_out = holdout_rel_err(&base, &generated).unwrap();
    assert!(held_out < 0.05, "holdout {held_out}");
}
