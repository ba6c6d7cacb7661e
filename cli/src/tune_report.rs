//! The report of `spartac tune`: per operator, the model's choice before the refit and the
//! measured winner (measured times, predictions before and after the refit); the totals, the
//! cost model's median error before and after; the same as JSON; the points of the plot.

use crate::plot::{ScatterPlot, Series};
use anyhow::Result;
use spartac::plan::calibrate::predict;
use spartac::plan::cost::CostModel;
use spartac::tune::{
    current_sample, median_rel_err, run_samples, spartac_version, Entry, Measured, StopReason, Target, TuneRun,
};
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

/// The measured time of a candidate in `entry`.
fn measured(entry: &Entry, split: &str, label: &str, kernel: spartac::plan::KernelChoice) -> Option<f64> {
    entry.candidates.iter().find(|c| c.split == split && c.label == label && c.kernel == kernel)?.seconds
}

/// The report: the table and the JSON (built together), and the points of the plot.
pub(crate) struct Report {
    pub json: serde_json::Value,
    lines: String,
    /// `(predicted, measured)` per timed candidate, by the DB before and after the refit.
    before: Vec<(f64, f64)>,
    after: Vec<(f64, f64)>,
}

impl Report {
    pub fn new(
        target: &Target,
        rounds: &[TuneRun],
        base: &CostModel,
        refitted: Option<&CostModel>,
        elapsed: Duration,
    ) -> Result<Report> {
        let (first, last) = (&rounds[0], &rounds[rounds.len() - 1]);
        let after = refitted.unwrap_or(base);
        let us = |t: Option<f64>| t.map_or("-".to_string(), |t| format!("{:.1}", t * 1e6));
        let mut lines = String::new();
        writeln!(
            lines,
            "{:<28} {:>16} {:>7} | {:<34} {:>8} | {:<34} {:>8} {:>7} | {:>9} {:>9}",
            "operator",
            "m x k x n",
            "density",
            "model's choice (before refit)",
            "meas µs",
            "measured winner",
            "meas µs",
            "speedup",
            "pred µs",
            "refit µs"
        )?;
        let (mut ops_json, mut before_pts, mut after_pts) = (vec![], vec![], vec![]);
        let (mut model_total, mut tuned_total, mut refit_total) = (0.0, 0.0, 0.0);
        for (i, (o1, o2)) in first.operators.iter().zip(&last.operators).enumerate() {
            let entry = &o2.entry;
            let ex = &o1.candidates.extracted;
            let Some(model_alt) = ex.chosen else { continue };
            let mc = &ex.considered[model_alt];
            let model_t = measured(entry, mc.split.name(), &mc.label, spartac::plan::KernelChoice::Auto);
            let winner = entry.winner();
            let win_t = winner.and_then(|w| w.seconds);
            let ex2 = &o2.candidates.extracted;
            let refit_choice = ex2.chosen.map(|c| &ex2.considered[c]);
            let refit_t =
                refit_choice.and_then(|c| measured(entry, c.split.name(), &c.label, spartac::plan::KernelChoice::Auto));
            if let (Some(a), Some(b)) = (model_t, win_t) {
                model_total += a;
                tuned_total += b;
                refit_total += refit_t.unwrap_or(a);
            }
            let name = |m: &Measured| format!("{} {} [{}]", m.split, m.label, m.kernel.label());
            let pred = |model: &CostModel, m: &Measured| predict(model, &current_sample(&o2.candidates, m)).ok();
            writeln!(
                lines,
                "{:<28} {:>16} {:>7.3} | {:<34} {:>8} | {:<34} {:>8} {:>6.2}× | {:>9} {:>9}",
                cut(&o1.node, 28),
                format!("{}x{}x{}", ex.m, ex.rows, ex.cols),
                ex.density,
                cut(&format!("{} {}", mc.split.name(), mc.label), 34),
                us(model_t),
                cut(&winner.map(name).unwrap_or_else(|| "-".into()), 34),
                us(win_t),
                model_t.zip(win_t).map_or(f64::NAN, |(a, b)| a / b),
                us(winner.and_then(|w| pred(base, w))),
                us(winner.and_then(|w| pred(after, w))),
            )?;
            let mut cands = vec![];
            for c in &entry.candidates {
                let (pb, pa) = (pred(base, c), pred(after, c));
                if let (Some(t), Some(pb), Some(pa)) = (c.seconds, pb, pa) {
                    before_pts.push((pb, t));
                    after_pts.push((pa, t));
                }
                cands.push(serde_json::json!({
                    "candidate": name(c), "split": c.split, "label": c.label, "kernel": c.kernel.label(),
                    "measured_s": c.seconds, "predicted_before_s": pb, "predicted_after_s": pa,
                    "rel_err": c.rel_err, "error": c.error,
                }));
            }
            ops_json.push(serde_json::json!({
                "node": o1.node,
                "key": entry.key,
                "signature": entry.signature,
                "same_as": o1.same_as,
                "model_choice": {"candidate": format!("{} {} [auto]", mc.split.name(), mc.label), "measured_s": model_t},
                "refitted_choice": refit_choice.map(|c| serde_json::json!({
                    "candidate": format!("{} {} [auto]", c.split.name(), c.label), "measured_s": refit_t,
                })),
                "winner": winner.map(|w| serde_json::json!({
                    "candidate": name(w), "measured_s": w.seconds,
                    "predicted_before_s": pred(base, w), "predicted_after_s": pred(after, w),
                })),
                "measured_now": rounds.iter().map(|r| r.operators[i].measured).sum::<usize>(),
                "from_cache": o1.cached,
                "pruned": o1.candidates.pruned.len(),
                "inapplicable": o1.candidates.inapplicable,
                "duplicates": o1.candidates.duplicates,
                "complete": entry.complete,
                "candidates": cands,
            }));
        }
        let all = run_samples(last);
        let err_before = median_rel_err(base, &all)?;
        let err_after = median_rel_err(after, &all)?;
        // Cached, pruned and refused as the first round saw them; failed among everything measured.
        let (_, cached, pruned, inapplicable, _) = first.counts();
        let failed = last.counts().4;
        let measured_now = rounds.iter().map(|r| r.counts().0).sum::<usize>();
        let stop = if rounds.iter().any(|r| r.stop == StopReason::Budget) { "budget" } else { "done" };
        writeln!(
            lines,
            "\n{} operators on {target}: {measured_now} candidates measured now, {cached} from the cache, \
             {pruned} skipped (predicted > best × prune factor), {inapplicable} not applicable, {failed} failed; \
             stopped: {stop}; {:.1} s",
            ops_json.len(),
            elapsed.as_secs_f64()
        )?;
        writeln!(
            lines,
            "matmul time, measured: model's choices {:.1} µs, refitted model's {:.1} µs, measured winners {:.1} µs ({:.2}×)",
            model_total * 1e6,
            refit_total * 1e6,
            tuned_total * 1e6,
            model_total / tuned_total.max(1e-15)
        )?;
        writeln!(
            lines,
            "cost model, median |predicted − measured| / measured over {} timed candidates: {:.1}% before the refit, {:.1}% after",
            all.len(),
            100.0 * err_before,
            100.0 * err_after
        )?;
        let json = serde_json::json!({
            "device": target.device, "arch": target.arch, "version": spartac_version(),
            "elapsed_s": elapsed.as_secs_f64(), "stop": stop,
            "measured_now": measured_now, "from_cache": cached, "pruned": pruned,
            "inapplicable": inapplicable, "failed": failed,
            "median_rel_err_before": err_before, "median_rel_err_after": err_after,
            "matmul_model_s": model_total, "matmul_refitted_s": refit_total, "matmul_tuned_s": tuned_total,
            "refitted": refitted.is_some(),
            "operators": ops_json,
        });
        Ok(Report { json, lines, before: before_pts, after: after_pts })
    }

    pub fn table(&self) -> &str {
        &self.lines
    }

    pub fn plot(&self, model: &Path) -> ScatterPlot {
        let name = model.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        ScatterPlot {
            title: format!("spartac tune: predicted vs measured, {name}"),
            x_label: "predicted time".into(),
            y_label: "measured time".into(),
            series: vec![
                Series { legend: "before the refit".into(), color: crate::plot::BEFORE, points: self.before.clone() },
                Series { legend: "after the refit".into(), color: crate::plot::AFTER, points: self.after.clone() },
            ],
        }
    }
}

/// `s` cut to `max` characters, ending in `..` when cut.
fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        s.chars().take(max - 2).chain("..".chars()).collect()
    }
}
