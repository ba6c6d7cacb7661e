//! `spartac plan` and `spartac explain`: the execution plan of a model (SparTA §3.3).
//! `plan` prints the sub-operators of every operator with a constant weight and writes
//! the plan as JSON (`--json`) or as the versioned protobuf artifact (`--artifact`);
//! `explain` says, per sparse operator, which cover was chosen and why.

use crate::model_args::ModelArgs;
use crate::outputs::write_atomic;
use crate::stages::plan_graph;
use anyhow::{Context, Result};
use clap::Args;
use spartac::ir::Graph;
use spartac::plan::cost::{CostDb, CostModel};
use spartac::plan::explain::{explain, micros};
use spartac::plan::hardware::HardwareProfile;
use spartac::plan::{Plan, PlanOptions};
use spartac::propagate::{propagate, PropagateOptions};
use spartac::tesa::attrs::{apply_attrs, TesaAttrs};
use std::path::PathBuf;
use std::process::ExitCode;

/// Inputs shared by `plan` and `explain`.
#[derive(Args, Debug)]
pub struct PlanInputs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// TeSA attributes per tensor name (JSON, schema in models/tesa.schema.json). Without
    /// it every weight is pruned where it is zero.
    #[arg(long, value_name = "attrs.json")]
    pub tesa: Option<PathBuf>,
    /// Run the TeSA propagation pass before planning (it can prune more).
    #[arg(long)]
    pub propagate: bool,
    /// Cost DB to use instead of the bundled costdb/sm_90.json (format in costdb/README.md).
    #[arg(long, value_name = "COSTDB.json")]
    pub costdb: Option<PathBuf>,
}

const PLAN_HELP: &str = "\
Examples:
  spartac plan model.onnx
  spartac plan model.onnx --tesa attrs.json --json plan.json
  spartac plan model.onnx --tesa attrs.json --artifact plan.pb --input-shape input_ids=1,128

Each operator with a constant 2-D weight (MatMul, Gemm) is split into sub-operators
X·W = Σ X·Wk: one per block shape and bit width of the weight's cover, a 2:4 part for
sparse tensor cores, or one dense kernel when that is predicted faster. Times are
predictions of the cost model for sm_90, not measurements.";

const EXPLAIN_HELP: &str = "\
Examples:
  spartac explain model.onnx --tesa attrs.json
  spartac explain minilm-l6.onnx --tesa models/tesa/minilm-l6-block32-90.json --input-shape input_ids=1,128
  spartac explain vit_b_16.onnx --tesa models/tesa/matmul-block32-90.json --dtype f16   # what compile plans

For every operator whose weight has pruned elements: its shape and density, the chosen
cover (block shapes, block counts, covered zeros), the predicted time sparse vs dense,
the expected speedup, and why (e.g. \"dense: density 0.62 above crossover 0.35\").
Then every convolution after the rewrites compile runs: its weight before and after
pruned channels are cut, and what runs it (an NHWC kernel, or the planned MatMul a 1x1
convolution or a patch embedding becomes).";

/// Plan a model: sub-operators per operator (SparTA's execution-plan transformation).
#[derive(Args, Debug)]
#[command(after_help = PLAN_HELP)]
pub struct PlanArgs {
    #[command(flatten)]
    pub inputs: PlanInputs,
    /// Write the plan as JSON (all but the per-element ownership lists).
    #[arg(long, value_name = "PLAN.json")]
    pub json: Option<PathBuf>,
    /// Write the plan as the versioned protobuf artifact that later stages read.
    #[arg(long, value_name = "PLAN.pb")]
    pub artifact: Option<PathBuf>,
}

/// Explain the plan of every sparse operator: cover, predicted times, speedup and why.
#[derive(Args, Debug)]
#[command(after_help = EXPLAIN_HELP)]
pub struct ExplainArgs {
    #[command(flatten)]
    pub inputs: PlanInputs,
    /// Explain what `compile --dtype DTYPE` plans: the TeSA propagated, the graph rewritten as
    /// compile rewrites it (BatchNorms folded, pruned channels and hidden units cut, channels
    /// last, per-column scales folded, Q/K/V merged) and its values in DTYPE. Without it the
    /// plan is of the graph as loaded (propagated with --propagate).
    #[arg(long, value_name = "DTYPE", value_parser = ["f32", "f16", "bf16"])]
    pub dtype: Option<String>,
    /// Also write the plan as JSON.
    #[arg(long, value_name = "PLAN.json")]
    pub json: Option<PathBuf>,
}

fn load(inputs: &PlanInputs) -> Result<(Graph, PlanOptions)> {
    let mut graph = inputs.model.load()?;
    let attrs = match &inputs.tesa {
        Some(path) => Some(TesaAttrs::read(path).with_context(|| format!("in {}", path.display()))?),
        None => None,
    };
    apply_attrs(&mut graph, attrs.as_ref())?;
    if inputs.propagate {
        propagate(&mut graph, &PropagateOptions::default())?;
    }
    let mut opts = PlanOptions::default();
    if let Some(path) = &inputs.costdb {
        let text =
            spartac::contained::read_regular_text(path).with_context(|| format!("reading {}", path.display()))?;
        let db = CostDb::parse(&text).with_context(|| format!("in {}", path.display()))?;
        opts.cost = CostModel::new(HardwareProfile::sm_90(), db)?;
    }
    Ok((graph, opts))
}

pub fn run_plan(args: PlanArgs) -> Result<ExitCode> {
    crate::outputs::check_outputs([("--json", args.json.as_deref()), ("--artifact", args.artifact.as_deref())])?;
    let (graph, opts) = load(&args.inputs)?;
    let plan = plan_graph(&graph, &opts)?;
    print!("{}", to_table(&plan));
    if let Some(path) = &args.json {
        write_atomic(path, serde_json::to_string_pretty(&plan.to_json())?.as_bytes())?;
    }
    if let Some(path) = &args.artifact {
        write_atomic(path, &plan.encode())?;
    }
    Ok(ExitCode::SUCCESS)
}

pub fn run_explain(args: ExplainArgs) -> Result<ExitCode> {
    crate::outputs::check_outputs([("--json", args.json.as_deref())])?;
    let (graph, opts) = load(&args.inputs)?;
    let (plan, conv_dtype) = match &args.dtype {
        Some(dtype) => {
            let mut compiled = graph.clone();
            if !args.inputs.propagate {
                propagate(&mut compiled, &PropagateOptions::default())?;
            }
            let options = spartac::rewrite::RewriteOptions::default();
            crate::stages::rewrite_in(&mut compiled, &options, dtype, &mut spartac::pipeline::Pipeline::quiet())?;
            println!("plan of the graph `compile --dtype {dtype}` plans (propagated, rewritten, {dtype} values)");
            let conv_dtype = match dtype.as_str() {
                "f32" => spartac::ir::DType::F32,
                "bf16" => spartac::ir::DType::BF16,
                _ => spartac::ir::DType::F16,
            };
            (plan_graph(&compiled, &opts)?, conv_dtype)
        }
        None => (plan_graph(&graph, &opts)?, spartac::ir::DType::F16),
    };
    print!("{}", explain(&plan));
    print!("{}", explain_convolutions(&graph, &opts, !args.inputs.propagate, conv_dtype)?);
    if let Some(path) = &args.json {
        write_atomic(path, serde_json::to_string_pretty(&plan.to_json())?.as_bytes())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The convolutions' section of `explain`: each Conv of `graph` after what `compile` runs
/// (the propagation, where `propagate` says it has not run yet; the rewrites: BatchNorm
/// folded, pruned channels cut, channels last), with its weight shape before
/// and after and what runs it: an NHWC kernel (which one, for f16) or, for a 1×1 convolution
/// or a patch embedding (windows that tile the input), the planned MatMul it became (its chosen plan and predicted time). Empty without Convs.
fn explain_convolutions(
    graph: &Graph,
    opts: &PlanOptions,
    propagate_first: bool,
    dtype: spartac::ir::DType,
) -> Result<String> {
    use spartac::codegen::graph_ops::{conv_kernel_label, ConvEngine};
    use std::fmt::Write as _;
    let convs: Vec<_> = graph.nodes.iter().filter(|n| n.op_type == "Conv").collect();
    if convs.is_empty() {
        return Ok(String::new());
    }
    let mut rewritten = graph.clone();
    if propagate_first {
        propagate(&mut rewritten, &PropagateOptions::default())?;
    }
    spartac::rewrite::prepare(&mut rewritten, &spartac::rewrite::RewriteOptions::default())?;
    let planned = plan_graph(&rewritten, opts)?;
    let dims = |g: &Graph, n: &spartac::ir::Node| {
        let shape = n.inputs.get(1).copied().flatten().map(|w| g.fact(w).shape.clone()).unwrap_or_default();
        shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("x")
    };
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\nconvolutions after the rewrites (kernels for {}; `compile --direct-conv` keeps the direct kernel):",
        dtype.name()
    );
    let _ = writeln!(s, "{:<32} {:>13} {:>13}  runs as", "conv", "weight", "after");
    for conv in convs {
        let before = dims(graph, conv);
        let matmul = format!("{}.matmul", conv.name);
        let (after, how) = if let Some(n) = rewritten.nodes.iter().find(|n| n.name == conv.name && n.op_type == "Conv")
        {
            let how = match spartac::program::model::conv_shape(&rewritten, n) {
                Ok(shape) => conv_kernel_label(&shape, dtype, ConvEngine::Auto),
                Err(e) => format!("not built: {e}"),
            };
            (dims(&rewritten, n), how)
        } else if let Some(o) = planned.operators.iter().find(|o| o.node == matmul) {
            let chosen = o.chosen.map(|c| o.considered[c].split.name()).unwrap_or("nothing");
            // A 1×1 convolution, or one whose windows tile its input (a patch embedding).
            let pointwise = conv
                .inputs
                .get(1)
                .copied()
                .flatten()
                .is_some_and(|w| graph.fact(w).shape.iter().skip(2).all(|&k| k == 1));
            let what = if pointwise { "1x1" } else { "patches" };
            (format!("{}x{}", o.rows, o.cols), format!("{what} as a planned MatMul: {chosen}, {}", micros(o.planned_s)))
        } else {
            ("-".into(), "folded away".into())
        };
        let _ = writeln!(s, "{:<32} {before:>13} {after:>13}  {how}", conv.name);
    }
    Ok(s)
}

/// One row per operator, then its sub-operators indented.
pub fn to_table(plan: &Plan) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<32} {:>13} {:>8} {:<14} {:>13} {:>13} {:>8}",
        "operator", "weight", "density", "plan", "predicted", "dense", "speedup"
    );
    for o in &plan.operators {
        let chosen = o.chosen.map(|c| o.considered[c].split.name()).unwrap_or("nothing");
        let _ = writeln!(
            s,
            "{:<32} {:>13} {:>8.4} {:<14} {:>13} {:>13} {:>7.2}×",
            o.node,
            format!("{}x{}", o.rows, o.cols),
            o.density,
            chosen,
            micros(o.planned_s),
            micros(o.dense_s),
            o.speedup()
        );
        if o.is_sparse() {
            for sub in &o.suboperators {
                let _ = writeln!(s, "    {:<40} {:>13}", sub.label(), micros(sub.predicted_s));
            }
        }
    }
    let dense: f64 = plan.operators.iter().map(|o| o.dense_s).sum();
    let planned: f64 = plan.operators.iter().map(|o| o.planned_s).sum();
    let _ = writeln!(
        s,
        "total: {} predicted vs {} dense ({:.2}×)",
        micros(planned),
        micros(dense),
        dense / planned.max(1e-15)
    );
    s
}
