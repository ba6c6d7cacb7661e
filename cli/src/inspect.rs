//! `spartac inspect`: what is in a model: inputs, outputs, op histogram, parameters,
//! per-initializer density; `--json` for scripts, `--ir` for the full IR text form. On a
//! `MODEL.sparta` artifact: its signature, what the compiler did, steps, kernels and memory;
//! `--ir` prints the program's text form.

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
    if crate::run::artifact::is_artifact(&args.model.model) {
        return inspect_artifact(&args);
    }
    let graph = args.model.load_to_describe()?;
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

/// `spartac inspect MODEL.sparta`: the signature, what the compiler did, the steps by kind, the
/// kernels and memory; `--ir` prints the whole program in its text form.
/// The sparse-matmul kernel families among kernel names (`spmm_<family>_<dtype>_...`, as
/// `codegen` names them), with how many distinct kernels each has.
fn matmul_families<'a>(names: impl Iterator<Item = &'a str>) -> std::collections::BTreeMap<String, usize> {
    let mut out = std::collections::BTreeMap::new();
    for name in names {
        let Some(rest) = name.strip_prefix("spmm_") else { continue };
        let family: Vec<&str> = rest.split('_').take_while(|t| !matches!(*t, "f32" | "f16" | "bf16" | "i8")).collect();
        *out.entry(family.join("_")).or_default() += 1;
    }
    out
}

fn inspect_artifact(args: &InspectArgs) -> Result<ExitCode> {
    let art = crate::run::artifact::load_artifact(&args.model.model)?;
    let m = &art.model;
    let p = &m.program;
    let dims = |s: &[usize]| s.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(",");
    let mut kinds: std::collections::BTreeMap<String, usize> = Default::default();
    for s in &p.steps {
        *kinds.entry(crate::run::artifact::step_kind(&s.op)).or_default() += 1;
    }
    let constants: usize = p
        .buffers
        .iter()
        .filter(|b| matches!(b.storage, spartac::program::Storage::Constant(_)))
        .map(|b| b.bytes())
        .sum();
    let families = matmul_families(p.kernels.iter().map(|k| k.name.as_str()));
    let s = &m.stats;
    if args.json {
        let sig = |v: &[spartac::program::model::Signature]| {
            v.iter()
                .map(|s| serde_json::json!({"name": s.name, "dtype": s.dtype.name(), "shape": s.shape}))
                .collect::<Vec<_>>()
        };
        let json = serde_json::json!({
            "name": p.name,
            "inputs": sig(&m.inputs),
            "outputs": sig(&m.outputs),
            "steps": p.steps.len(),
            "step_kinds": kinds,
            "kernels": p.kernels.len(),
            "matmul_families": families,
            "ptx": art.ptx.iter().map(|x| x.arch.clone()).collect::<std::collections::BTreeSet<_>>(),
            "device_bytes": p.device_bytes(),
            "constant_bytes": constants,
            "planned_ops": s.planned_ops,
            "sparse_ops": s.sparse_ops,
            "library_gemms": s.library_gemms,
            "fused_nodes": s.fused_nodes,
            "fused_norms": s.fused_norms,
            "dense_weight_bytes": s.dense_weight_bytes,
            "packed_weight_bytes": s.packed_weight_bytes,
        });
        println!("{}", serde_json::to_string_pretty(&json)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("artifact {} (program {})", args.model.model.display(), p.name);
    println!("inputs:");
    for i in &m.inputs {
        println!("  {:<32} {}[{}]", i.name, i.dtype.name(), dims(&i.shape));
    }
    println!("outputs:");
    for o in &m.outputs {
        println!("  {:<32} {}[{}]", o.name, o.dtype.name(), dims(&o.shape));
    }
    println!("steps: {} ({} distinct kernels; PTX for {} of them)", p.steps.len(), p.kernels.len(), art.ptx.len());
    for (k, n) in &kinds {
        println!("  {k:<24} {n:>5}");
    }
    let mib = |b: usize| b as f64 / (1 << 20) as f64;
    println!(
        "planned matmuls: {} ({} sparse, {} dense parts on cuBLAS); weights {:.2} MiB dense -> {:.2} MiB packed",
        s.planned_ops,
        s.sparse_ops,
        s.library_gemms,
        mib(s.dense_weight_bytes),
        mib(s.packed_weight_bytes)
    );
    if !families.is_empty() {
        let list: Vec<String> = families.iter().map(|(f, n)| format!("{f} {n}")).collect();
        println!("matmul kernel families (distinct kernels): {}", list.join(", "));
    }
    println!(
        "fused: {} epilogues, {} nodes in fused steps, {} LayerNorms with their input's group",
        s.fused_epilogues, s.fused_nodes, s.fused_norms
    );
    println!("device memory: {:.1} MiB ({:.1} MiB constants)", mib(p.device_bytes()), mib(constants));
    if args.ir {
        println!();
        print!("{}", p.to_text());
    }
    Ok(ExitCode::SUCCESS)
}
