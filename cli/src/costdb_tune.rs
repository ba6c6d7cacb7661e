//! `spartac costdb samples` and `spartac costdb refit`: the cost model against the candidates a
//! `spartac tune` measured, without a GPU.
//!
//! `samples` runs `compile`'s pipeline to the plan, enumerates every operator's candidates as
//! this build does (with their launch geometry) and joins them with the measured times of a
//! tuning cache (matched by operator signature and spartac version, whatever GPU measured
//! them), so a cache written before the samples carried their geometry refits with it.
//! `refit` fits the cost DB to such samples and reports the median relative error before the
//! refit, after it, and held out (each half of the operators predicted by the DB fitted to the
//! other half).

use anyhow::{bail, Context, Result};
use spartac::plan::calibrate::{predict, PartKernel, Sample};
use spartac::plan::cost::CostModel;
use spartac::plan::site::find_sites;
use spartac::plan::PlanOptions;
use spartac::tune::TuneCache;
use spartac::tune::{enumerate, holdout_rel_err, median_rel_err, operator_samples, refit, signature, spartac_version};
use std::path::{Path, PathBuf};

/// What `spartac costdb samples` needs.
pub struct SamplesArgs<'a> {
    pub model: &'a crate::model_args::ModelArgs,
    pub tesa: Option<&'a Path>,
    pub dtype: &'a str,
    pub tune_cache: &'a Path,
    pub out: &'a Path,
}

/// The samples file: the measured candidates and where they came from.
#[derive(serde::Serialize, serde::Deserialize)]
struct SamplesFile {
    source: String,
    samples: Vec<Sample>,
}

pub fn samples(args: SamplesArgs) -> Result<()> {
    let cache = TuneCache::new(args.tune_cache);
    let (entries, damaged) = cache.entries();
    for d in &damaged {
        eprintln!("warning: damaged tune cache entry skipped: {d}");
    }
    if entries.is_empty() {
        bail!("{}: no tune cache entries", args.tune_cache.display());
    }
    let mut graph = args.model.load()?;
    let prop_cache = crate::stages::propagation_cache(false);
    let sparsified = crate::stages::sparsify(&mut graph, &args.model.model, args.tesa, true, prop_cache.as_ref())?;
    for w in &sparsified.warnings {
        eprintln!("warning: {w}");
    }
    crate::stages::rewrite(&mut graph, &Default::default(), args.dtype)?;
    let opts = PlanOptions { cost: CostModel::sm_90(), ..PlanOptions::default() };
    let (mut all, mut seen, mut unmatched) = (vec![], vec![], 0);
    let mut devices: Vec<String> = vec![];
    for site in find_sites(&graph) {
        let candidates = enumerate(&graph, &site, &opts, f64::INFINITY)?;
        let sig = signature(&graph, &site, &candidates.extracted);
        let Some(entry) = entries.iter().find(|e| e.signature == sig && e.version == spartac_version()) else {
            unmatched += 1;
            continue;
        };
        if seen.contains(&entry.key) {
            continue;
        }
        seen.push(entry.key.clone());
        if !devices.contains(&entry.target.device) {
            devices.push(entry.target.device.clone());
        }
        all.extend(operator_samples(&candidates, entry));
    }
    if all.is_empty() {
        bail!("no operator of {} has a timed entry in {}", args.model.model.display(), args.tune_cache.display());
    }
    let source = format!(
        "{} operators of {} timed on {} ({}), {} samples",
        seen.len(),
        args.model.model.file_name().and_then(|n| n.to_str()).unwrap_or("the model"),
        devices.join(", "),
        args.tune_cache.display(),
        all.len()
    );
    println!("{source}; {unmatched} operators without an entry");
    let json = serde_json::to_string(&SamplesFile { source, samples: all })? + "\n";
    crate::outputs::write_atomic(args.out, json.as_bytes())?;
    eprintln!("wrote {}", args.out.display());
    Ok(())
}

/// `spartac costdb refit`: the errors, and the fitted DB written to `out` when given.
pub fn refit_samples(samples_path: &Path, base: &CostModel, out: Option<&PathBuf>) -> Result<()> {
    let text = spartac::contained::read_regular_text(samples_path)
        .with_context(|| format!("reading {}", samples_path.display()))?;
    let file: SamplesFile = serde_json::from_str(&text)
        .with_context(|| format!("{}: not `spartac costdb samples` output", samples_path.display()))?;
    if file.samples.is_empty() {
        bail!("{}: no samples", samples_path.display());
    }
    let n = file.samples.len();
    let fitted = refit(base, &file.samples, &format!("fitted by `spartac costdb refit` to {}", file.source))?;
    let after = CostModel::new(base.hw.clone(), fitted.db.clone())?;
    let before_err = median_rel_err(base, &file.samples)?;
    let after_err = median_rel_err(&after, &file.samples)?;
    let holdout = holdout_rel_err(base, &file.samples)?;
    println!("{}", file.source);
    println!(
        "median |predicted − measured| / measured over {n} samples: {:.1}% before the refit, {:.1}% after, \
         {:.1}% held out (each half of the operators predicted by the DB fitted to the other half)",
        100.0 * before_err,
        100.0 * after_err,
        100.0 * holdout
    );
    println!("\n| kernel | samples | median error before | after | predicted / measured after, p10 - p50 - p90 |");
    println!("| --- | ---: | ---: | ---: | --- |");
    for (group, members) in groups(&file.samples) {
        let errs = |model: &CostModel| -> Result<Vec<f64>> {
            let mut r: Vec<f64> =
                members.iter().map(|s| Ok(predict(model, s)? / s.seconds)).collect::<Result<_, spartac::Error>>()?;
            r.sort_by(f64::total_cmp);
            Ok(r)
        };
        let (b, a) = (errs(base)?, errs(&after)?);
        let med_err = |r: &[f64]| {
            let mut e: Vec<f64> = r.iter().map(|x| (x - 1.0).abs()).collect();
            e.sort_by(f64::total_cmp);
            100.0 * e[e.len() / 2]
        };
        let q = |r: &[f64], f: f64| r[((r.len() - 1) as f64 * f).round() as usize];
        println!(
            "| {group} | {} | {:.1}% | {:.1}% | {:.2} - {:.2} - {:.2} |",
            members.len(),
            med_err(&b),
            med_err(&a),
            q(&a, 0.1),
            q(&a, 0.5),
            q(&a, 0.9)
        );
    }
    if let Some(path) = out {
        let json = serde_json::to_string_pretty(&fitted.db)? + "\n";
        crate::outputs::write_atomic(path, json.as_bytes())?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// The samples by the kernel that ran them: its family and block shape, dense or not.
fn groups(samples: &[Sample]) -> Vec<(String, Vec<&Sample>)> {
    let mut out: Vec<(String, Vec<&Sample>)> = vec![];
    for s in samples {
        let kernel = match s.parts.first() {
            None => "library".to_string(),
            Some(p) => {
                let family = match p.kernel {
                    PartKernel::Blocks => "table",
                    PartKernel::Tf32Blocks => "3xTF32 blocks",
                    PartKernel::FineTf32(_) => "3xTF32 fine",
                    PartKernel::TwoFour => "2:4",
                };
                format!("{family} {}x{}", p.shape.h, p.shape.w)
            }
        };
        let engine = s.label.rsplit_once('[').map_or("", |(_, e)| e.trim_end_matches(']'));
        let name = format!("{}{kernel} [{engine}]", if s.dense { "dense " } else { "" });
        match out.iter_mut().find(|(n, _)| *n == name) {
            Some((_, v)) => v.push(s),
            None => out.push((name, vec![s])),
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}
