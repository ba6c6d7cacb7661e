//! `spartac propagate`: annotate a model with TeSA (from `--tesa attrs.json`, or every
//! initializer's zeros) and run the propagation pass; prints per-tensor and total weight
//! density before → after and the pass time; `--report` writes the JSON report, `--plot`
//! a bar chart of the densities.

use crate::model_args::ModelArgs;
use anyhow::{Context, Result};
use clap::Args;
use serde_json::json;
use spartac::ir::print_graph;
use spartac::ir::Tensor;
use spartac::propagate::quantize::{quantize, QuantizeOptions, QuantizeReport};
use spartac::propagate::{propagate, PropagateOptions, PropagateReport};
use spartac::tesa::attrs::{apply_attrs, zero_pruned_initializers, TesaAttrs};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

/// Propagate sparsity (TeSA) through a model: SparTA's Algorithm 1.
#[derive(Args, Debug)]
pub struct PropagateArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// TeSA attributes per tensor name (JSON, schema in models/tesa.schema.json).
    #[arg(long, value_name = "attrs.json")]
    pub tesa: Option<PathBuf>,
    /// Write the per-tensor JSON report here.
    #[arg(long, value_name = "REPORT.json")]
    pub report: Option<PathBuf>,
    /// Draw every weight's density before and after as a bar chart (PNG).
    #[arg(long, value_name = "sparsity.png")]
    pub plot: Option<PathBuf>,
    /// Print the IR with TeSA types after propagation.
    #[arg(long)]
    pub print_ir: bool,
    /// Run the quantization rule first: calibration inputs from an .npz (one array per
    /// model input), or `random` / `random:SEED` for seeded random inputs. Each weight
    /// of every MatMul, Gemm and Conv gets the narrowest of --quant-widths that keeps
    /// the operator's relative output error under --quant-threshold.
    #[arg(long, value_name = "FILE.npz|random[:SEED]")]
    pub calib: Option<String>,
    /// Largest relative L2 error of an operator's output the quantization rule accepts (finite,
    /// 0 or more).
    #[arg(long, default_value_t = 1e-2, requires = "calib", value_parser = parse_threshold)]
    pub quant_threshold: f64,
    /// Candidate widths for the quantization rule (16 = half, 8 and 4 = symmetric int).
    #[arg(long, value_delimiter = ',', default_value = "16,8,4", requires = "calib")]
    pub quant_widths: Vec<u8>,
    /// Narrow the activation operands of MatMul/Gemm/Conv too, not only weights.
    #[arg(long, requires = "calib")]
    pub quant_activations: bool,
    /// Scrambling samples per node without an algebra rule (1 to 1,000,000).
    #[arg(long, default_value_t = 256, value_parser = parse_samples)]
    pub samples: usize,
    /// Check the invariant: on random inputs (this seed), the model with its pruned
    /// weights zeroed gives the same outputs when every propagated-pruned element of
    /// every tensor is zeroed too.
    #[arg(long, value_name = "SEED")]
    pub check_invariant: Option<u64>,
}

pub fn run(args: PropagateArgs) -> Result<ExitCode> {
    crate::outputs::check_outputs([("--report", args.report.as_deref()), ("--plot", args.plot.as_deref())])?;
    let mut graph = args.model.load()?;
    let attrs = match &args.tesa {
        Some(path) => Some(TesaAttrs::read(path).with_context(|| format!("in {}", path.display()))?),
        None => None,
    };
    apply_attrs(&mut graph, attrs.as_ref())?;
    if args.check_invariant.is_some() {
        zero_pruned_initializers(&mut graph);
    }
    let quant = match &args.calib {
        Some(spec) => {
            if let Some(bad) = args.quant_widths.iter().find(|w| !matches!(w, 4 | 8 | 16)) {
                anyhow::bail!("--quant-widths: {bad} is not supported (use 16, 8 and 4)");
            }
            let calib = calibration_inputs(&graph, spec)?;
            let opts = QuantizeOptions {
                widths: args.quant_widths.clone(),
                threshold: args.quant_threshold,
                activations: args.quant_activations,
            };
            Some(quantize(&mut graph, &calib, &opts)?)
        }
        None => None,
    };
    let mut opts = PropagateOptions::default();
    opts.scramble.samples = args.samples;
    let report = propagate(&mut graph, &opts)?;
    if let Some(q) = &quant {
        print!("{}", quant_text(q));
    }
    print!("{}", to_text(&report));
    if args.print_ir {
        println!();
        print!("{}", print_graph(&graph));
    }
    if let Some(seed) = args.check_invariant {
        let inputs = spartac::reference::random_inputs(&graph, seed);
        let (worst, _) = spartac::propagate::invariant_gap(&graph, &inputs)?;
        println!("invariant: max relative difference {worst:.3e} with all pruned elements zeroed");
        if worst > 1e-6 {
            anyhow::bail!("invariant violated: zeroing pruned elements changed the outputs by {worst:.3e}");
        }
    }
    if let Some(path) = &args.plot {
        crate::plot::SparsityPlot::from_report(&args.model.model, &report).write_png(path)?;
    }
    if let Some(path) = &args.report {
        let mut doc = to_json(&report);
        if let Some(q) = &quant {
            doc["quantization"] = json!({
                "threshold": args.quant_threshold,
                "seconds": q.elapsed.as_secs_f64(),
                "tensors": q.choices.iter().map(|c| json!({
                    "name": c.tensor, "node": c.node, "bits": c.bits, "format": c.format.name(), "error": c.error,
                })).collect::<Vec<_>>(),
            });
        }
        spartac::output::write_atomic(path, serde_json::to_string_pretty(&doc)?.as_bytes())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `--quant-threshold`: a finite relative error, 0 or more (NaN would accept every width, inf
/// the narrowest whatever its error).
fn parse_threshold(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(t) if t.is_finite() && t >= 0.0 => Ok(t),
        _ => Err(format!("{s:?}: expected a finite relative error, 0 or more (e.g. 1e-2)")),
    }
}

/// Most scrambling samples per node `--samples` takes.
const MAX_SAMPLES: usize = 1_000_000;

/// `--samples`: 1 to [`MAX_SAMPLES`] (0 would scramble nothing and prune on no evidence).
fn parse_samples(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_SAMPLES).contains(&n) => Ok(n),
        _ => Err(format!("{s:?}: expected 1 to {MAX_SAMPLES} samples")),
    }
}

/// `random` / `random:SEED`, or an .npz with one array per model input.
fn calibration_inputs(graph: &spartac::ir::Graph, spec: &str) -> Result<BTreeMap<String, Tensor>> {
    if let Some(rest) = spec.strip_prefix("random") {
        let seed = match rest.strip_prefix(':') {
            Some(s) => s.parse().map_err(|_| anyhow::anyhow!("--calib {spec:?}: the seed must be an integer"))?,
            None if rest.is_empty() => 0,
            None => anyhow::bail!("--calib {spec:?}: expects FILE.npz, random or random:SEED"),
        };
        return Ok(spartac::reference::random_inputs(graph, seed));
    }
    let path = std::path::Path::new(spec);
    let inputs = spartac_runtime::npz::read_npz(path).with_context(|| format!("reading calibration inputs {spec}"))?;
    spartac::reference::check_inputs(graph, &inputs).with_context(|| format!("calibration inputs {spec}"))?;
    Ok(inputs)
}

fn quant_text(q: &QuantizeReport) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(s, "quantization ({:.3} s):", q.elapsed.as_secs_f64());
    let wt = q.choices.iter().map(|c| c.tensor.len()).max().unwrap_or(0).max(6);
    let wn = q.choices.iter().map(|c| c.node.len()).max().unwrap_or(0).max(8);
    let _ = writeln!(s, "  {:<wt$} {:<wn$} {:>4} {:<6} {:>9}", "tensor", "operator", "bits", "format", "error");
    for c in &q.choices {
        let _ =
            writeln!(s, "  {:<wt$} {:<wn$} {:>4} {:<6} {:>9.3e}", c.tensor, c.node, c.bits, c.format.name(), c.error);
    }
    let mut by_bits: BTreeMap<u8, usize> = BTreeMap::new();
    for c in &q.choices {
        *by_bits.entry(c.bits).or_default() += 1;
    }
    let summary: Vec<String> = by_bits.iter().rev().map(|(b, n)| format!("{n} at {b} bits")).collect();
    let _ = writeln!(s, "  {}", summary.join(", "));
    s
}

pub fn to_text(report: &PropagateReport) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(s, "weights whose density changed:");
    for t in report.tensors.iter().filter(|t| t.is_weight && t.density_after != t.density_before) {
        let _ = writeln!(
            s,
            "  {:<48} {:>16} {:.4} -> {:.4}",
            t.name,
            format!("{:?}", t.shape),
            t.density_before,
            t.density_after
        );
    }
    let (before, after) = report.weight_density();
    let _ = writeln!(
        s,
        "total weight density: {before:.4} -> {after:.4} (sparsity {:.2}% -> {:.2}%)",
        100.0 * (1.0 - before),
        100.0 * (1.0 - after)
    );
    let _ = writeln!(
        s,
        "pass: {:?} after {} node visits, {} scrambled, in {:.3} s",
        report.stop,
        report.visits,
        report.scrambled,
        report.elapsed.as_secs_f64()
    );
    if !report.unhandled.is_empty() {
        let ops: Vec<String> = report.unhandled.iter().map(|(op, n)| format!("{op}×{n}")).collect();
        let _ = writeln!(s, "no rule and no scrambling (left as is): {}", ops.join(", "));
    }
    s
}

pub fn to_json(report: &PropagateReport) -> serde_json::Value {
    let (before, after) = report.weight_density();
    json!({
        "stop": format!("{:?}", report.stop),
        "visits": report.visits,
        "seconds": report.elapsed.as_secs_f64(),
        "weight_density_before": before,
        "weight_density_after": after,
        "tensors": report.tensors.iter().map(|t| json!({
            "name": t.name,
            "shape": t.shape,
            "weight": t.is_weight,
            "density_before": t.density_before,
            "density_after": t.density_after,
            "bits": t.bits,
        })).collect::<Vec<_>>(),
    })
}
