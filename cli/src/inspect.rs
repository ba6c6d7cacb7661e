//! `spartac inspect`: what is in a model: inputs, outputs, op histogram, parameters,
//! per-initializer density; `--json` for scripts, `--ir` for the full IR text form.

use crate::model_args::ModelArgs;
use anyhow::Result;
use clap::Args;
use serde_json::json;
use spartac::ir::{print_graph, Graph, Initializer};
use std::process::ExitCode;

/// Summarize a model: inputs and outputs with static types, op histogram, parameter
/// count and the density (fraction of nonzeros) of every initializer.
#[derive(Args, Debug)]
pub struct InspectArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Print machine-readable JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Also print the whole graph in the IR text form.
    #[arg(long)]
    pub ir: bool,
}

pub fn run(args: InspectArgs) -> Result<ExitCode> {
    let graph = args.model.load()?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&to_json(&graph))?);
    } else {
        print!("{}", to_text(&graph));
        if args.ir {
            println!();
            print!("{}", print_graph(&graph));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn human(n: usize) -> String {
    match n {
        n if n >= 1_000_000 => format!("{:.2}M", n as f64 / 1e6),
        n if n >= 10_000 => format!("{:.1}k", n as f64 / 1e3),
        n => n.to_string(),
    }
}

fn storage(init: &Initializer) -> String {
    match init {
        Initializer::Dense(_) => "dense".into(),
        Initializer::Sparse(s) => format!("sparse ({} nnz)", s.nnz()),
    }
}

pub fn to_text(graph: &Graph) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let opsets: Vec<String> =
        graph.opsets.iter().map(|(d, v)| format!("{}={v}", if d.is_empty() { "ai.onnx" } else { d })).collect();
    let _ = writeln!(s, "graph {:?}  opsets: {}", graph.name, opsets.join(", "));
    let _ = writeln!(
        s,
        "{} nodes, {} parameters in {} initializers\n",
        graph.nodes.len(),
        human(graph.n_parameters()),
        graph.initializers.len()
    );
    let _ = writeln!(s, "inputs:");
    for &id in &graph.inputs {
        let _ = writeln!(s, "  {:<32} {}", graph.value(id).name, graph.value(id).fact);
    }
    let _ = writeln!(s, "outputs:");
    for &id in &graph.outputs {
        let _ = writeln!(s, "  {:<32} {}", graph.value(id).name, graph.value(id).fact);
    }
    let _ = writeln!(s, "\nops:");
    let hist = graph.op_histogram();
    let mut ops: Vec<(&String, &usize)> = hist.iter().collect();
    ops.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    for (op, n) in ops {
        let _ = writeln!(s, "  {op:<24} {n:>5}");
    }
    let _ = writeln!(s, "\ninitializers:");
    let w = graph.initializers.keys().map(|id| graph.value(*id).name.len()).max().unwrap_or(4).max(4);
    let _ = writeln!(s, "  {:<w$} {:<18} {:>9} {:>8}  storage", "name", "type", "elements", "density");
    for (id, init) in &graph.initializers {
        let v = graph.value(*id);
        let _ = writeln!(
            s,
            "  {:<w$} {:<18} {:>9} {:>8.4}  {}",
            v.name,
            v.fact.to_string(),
            human(v.fact.numel()),
            init.density(),
            storage(init)
        );
    }
    s
}

pub fn to_json(graph: &Graph) -> serde_json::Value {
    let io = |ids: &[spartac::ir::ValueId]| -> Vec<serde_json::Value> {
        ids.iter()
            .map(|&id| {
                let v = graph.value(id);
                json!({"name": v.name, "dtype": v.fact.dtype.name(), "shape": v.fact.shape})
            })
            .collect()
    };
    let inits: Vec<serde_json::Value> = graph
        .initializers
        .iter()
        .map(|(id, init)| {
            let v = graph.value(*id);
            json!({
                "name": v.name, "dtype": v.fact.dtype.name(), "shape": v.fact.shape,
                "elements": v.fact.numel(), "density": init.density(),
                "storage": match init { Initializer::Dense(_) => "dense", Initializer::Sparse(_) => "sparse" },
            })
        })
        .collect();
    json!({
        "name": graph.name,
        "opsets": graph.opsets,
        "nodes": graph.nodes.len(),
        "parameters": graph.n_parameters(),
        "inputs": io(&graph.inputs),
        "outputs": io(&graph.outputs),
        "ops": graph.op_histogram(),
        "initializers": inits,
    })
}
