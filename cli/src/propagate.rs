//! `spartac propagate`: annotate a model with TeSA (from `--tesa attrs.json`, or every
//! initializer's zeros) and run the propagation pass; prints per-tensor and total weight
//! density before → after and the pass time; `--report` writes the JSON report.

use crate::model_args::ModelArgs;
use anyhow::{Context, Result};
use clap::Args;
use serde_json::json;
use spartac::ir::print_graph;
use spartac::propagate::{propagate, PropagateOptions, PropagateReport};
use spartac::tesa::attrs::{apply_attrs, TesaAttrs};
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
    /// Print the IR with TeSA types after propagation.
    #[arg(long)]
    pub print_ir: bool,
    /// Scrambling samples per node without an algebra rule.
    #[arg(long, default_value_t = 256)]
    pub samples: usize,
}

pub fn run(args: PropagateArgs) -> Result<ExitCode> {
    let mut graph = args.model.load()?;
    let attrs = match &args.tesa {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            Some(TesaAttrs::parse(&text).with_context(|| format!("in {}", path.display()))?)
        }
        None => None,
    };
    apply_attrs(&mut graph, attrs.as_ref())?;
    let mut opts = PropagateOptions::default();
    opts.scramble.samples = args.samples;
    let report = propagate(&mut graph, &opts)?;
    print!("{}", to_text(&report));
    if args.print_ir {
        println!();
        print!("{}", print_graph(&graph));
    }
    if let Some(path) = &args.report {
        std::fs::write(path, serde_json::to_string_pretty(&to_json(&report))?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
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
