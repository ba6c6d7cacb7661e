//! `spartac compile`: ONNX model + TeSA attrs → a compiled artifact (`MODEL.sparta`).
//!
//! Stages: frontend, TeSA, propagation, rewrites (pruned weights zeroed, channels shrunk,
//! convolutions to NHWC, MatMuls of one activation merged: `spartac::rewrite`), plan, lowering (every node specialized to its kernel),
//! PTX (when NVRTC is present here), write; each a pass of `spartac::pipeline` (`--passes` lists
//! them with their times, `--print-ir-after` prints the IR a graph pass leaves). The artifact is written atomically; the summary
//! table says what the compiler did and what it predicts. TeSA and propagation go through the
//! propagation cache (`stages::sparsify`; the stage time says `(cached)` when it was used),
//! which `tune` shares.

use crate::model_args::ModelArgs;
use crate::stages::{cost_model, propagation_cache, rewrite_in, sparsify};
use anyhow::{bail, Context, Result};
use clap::Args;
use spartac::pipeline::{Pipeline, PrintIrAfter};
use spartac::plan::PlanOptions;
use spartac::program::artifact::{encode, PtxProto};
use spartac::program::model::{lower_model, ModelOptions, ModelProgram};
use spartac::rewrite::{RewriteOptions, RewriteReport};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

const COMPILE_HELP: &str = "\
Examples:
  spartac compile minilm-l6.onnx --tesa models/tesa/minilm-l6-block32-90.json -o minilm.sparta
  spartac compile model.onnx --input-shape input_ids=32,128 -o model.sparta --json summary.json
  spartac run minilm.sparta --random 7 --backend cuda --repeat 50

Every MatMul/Gemm with a constant weight is planned (sub-operators per block shape, or one
dense kernel) and specialized with the sparsity pattern baked in; bias and activation chains
after it run in its epilogue; chains of elementwise ops become one generated kernel; views
(Reshape, Unsqueeze, ...) cost nothing. The artifact holds the kernels, the packed weights
(pruned elements absent) and the program the runtime turns into one CUDA graph.";

/// Compile an ONNX model (plus TeSA sparsity attributes) to a spartac artifact.
#[derive(Args, Debug)]
#[command(after_help = COMPILE_HELP)]
pub struct CompileArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// TeSA attributes: which tensors are pruned or quantized (format: models/tesa.schema.json).
    #[arg(long, value_name = "attrs.json")]
    pub tesa: Option<PathBuf>,
    /// Where to write the artifact (default: the model's path with the extension .sparta).
    #[arg(short, long, value_name = "MODEL.sparta")]
    pub output: Option<PathBuf>,
    /// Element type the model runs in: f32, or a 16-bit float type (every value between
    /// kernels rounded to it, inputs and outputs kept fp32, sums and reductions in fp32).
    #[arg(long, default_value = "f32", value_parser = ["f32", "f16", "bf16"])]
    pub dtype: String,
    /// Skip sparsity propagation (the pruned weights alone are planned).
    #[arg(long)]
    pub no_propagate: bool,
    /// Neither read nor write the propagation cache ($SPARTAC_CACHE_DIR/propagate, else
    /// ~/.cache/spartac/propagate: the TeSAs after propagation, by model, attrs and flags).
    #[arg(long)]
    pub no_propagation_cache: bool,
    /// Keep pruned channels in the tensors (no channel shrinking; for ablations).
    #[arg(long)]
    pub no_shrink: bool,
    /// Keep Q, K and V projections apart. By default MatMuls that read one activation and
    /// feed attentions only merge into one MatMul over the concatenated weights, whose
    /// column slices the fused attention reads in place
    #[arg(long)]
    pub no_merge_qkv: bool,
    /// Do not fuse epilogues or elementwise chains (one kernel per node; for ablations).
    #[arg(long)]
    pub no_fuse: bool,
    /// Run every convolution on the direct (FFMA) kernel, not as an implicit GEMM on tensor
    /// cores (for ablations).
    #[arg(long)]
    pub direct_conv: bool,
    /// Keep 1×1 convolutions with no pruned weight element as convolution kernels (implicit
    /// GEMM, epilogue fused) instead of planned MatMuls (for measurement; pruned ones stay
    /// MatMuls).
    #[arg(long)]
    pub pointwise_conv: bool,
    /// Run dense fp16/bf16 matmuls on our own dense kernel instead of cuBLAS (for ablations;
    /// fp32 always runs on our 3xTF32 kernel).
    #[arg(long)]
    pub no_library: bool,
    /// Apply the bias and ReLU of a cuBLAS matmul in separate kernels (a bias prefill before,
    /// an activation pass after) instead of in the library call (cuBLASLt epilogues; for
    /// ablations).
    #[arg(long)]
    pub no_library_epilogue: bool,
    /// Write every Concat out as a step of its own, even where the elementwise step after it
    /// (DenseNet's BatchNorm and ReLU) could read its parts in place (for ablations).
    #[arg(long)]
    pub no_concat_reads: bool,
    /// Run each LayerNorm between two sparse fp16/bf16 matmuls as a step of its own instead of
    /// inside them (the first writes the sum and its rows' statistics, the next reads the sum
    /// and normalizes; for ablations).
    #[arg(long)]
    pub no_defer_norms: bool,
    /// Run skinny dense fp16/bf16 matmuls (1×1 convolutions) on cuBLAS too instead of the
    /// streaming kernel (for ablations).
    #[arg(long)]
    pub no_stream: bool,
    /// Tile of the 3xTF32 fine kernels: ROWS,GROUPS,K_ROWS,N_TILES (e.g. 64,16,6,1), or auto
    /// for the specializer's choice.
    #[arg(long, default_value = "auto", value_parser = crate::model_args::parse_tile)]
    pub fine_tile: crate::model_args::FineTile,
    /// Cost database the planner prices kernels with (default: the built-in sm_90 one).
    #[arg(long, value_name = "COSTDB.json")]
    pub costdb: Option<PathBuf>,
    /// Do not put PTX into the artifact even when NVRTC is present (it is then compiled at
    /// first load and cached).
    #[arg(long)]
    pub no_ptx: bool,
    /// Also write the summary as JSON.
    #[arg(long, value_name = "SUMMARY.json")]
    pub json: Option<PathBuf>,
    /// The `spartac tune` cache whose measured winners (and refitted cost DB) the plan takes
    /// (default: $SPARTAC_CACHE_DIR/tune or ~/.cache/spartac/tune, when it exists).
    #[arg(long, value_name = "DIR")]
    pub tune_cache: Option<PathBuf>,
    /// Print the IR (its text form) after these graph passes, to stdout: `all`, or names
    /// separated by commas (frontend, propagate, narrow_broadcasts, fold_batchnorm,
    /// shrink_channels, channels_last, merge_matmuls, sink_transposes, to_half). Without the flag,
    /// $SPARTAC_PRINT_IR_AFTER is read the same way.
    #[arg(long, value_name = "PASS|all")]
    pub print_ir_after: Option<String>,
    /// Also print every pass with its time and one-line result.
    #[arg(long)]
    pub passes: bool,
}

/// The artifact's PTX architecture (the H100/H200's, with the wgmma features).
const PTX_ARCH: &str = "sm_90a";

pub fn run(args: CompileArgs) -> Result<ExitCode> {
    let out = args.output.clone().unwrap_or_else(|| args.model.model.with_extension("sparta"));
    if out == args.model.model {
        bail!("the output {} would overwrite the model", out.display());
    }
    crate::outputs::check_outputs([("--output", Some(out.as_path())), ("--json", args.json.as_deref())])?;
    let mut stages: Vec<(&str, f64)> = vec![];
    let bar = indicatif::ProgressBar::new(7).with_style(
        indicatif::ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
            .expect("progress template"),
    );
    let print_ir = PrintIrAfter::from_flag_or_env(args.print_ir_after.as_deref()).map_err(anyhow::Error::msg)?;
    let printer = bar.clone();
    let mut pipeline = Pipeline::new(print_ir, move |pass, ir| {
        printer.suspend(|| print!("// IR after {pass}\n{ir}\n"));
    });
    let mut t = Instant::now();
    let mut stage = |name: &'static str, bar: &indicatif::ProgressBar, t: &mut Instant| -> f64 {
        let s = t.elapsed().as_secs_f64();
        stages.push((name, s));
        *t = Instant::now();
        bar.inc(1);
        s
    };
    bar.set_message("reading the model");
    let mut graph = args.model.load()?;
    let secs = stage("frontend", &bar, &mut t);
    let line = format!("{} nodes, {} values", graph.nodes.len(), graph.values.len());
    pipeline.record("frontend", secs, line, Some(&graph))?;
    bar.set_message("TeSA and propagation");
    let cache = propagation_cache(args.no_propagation_cache);
    let sparsified = sparsify(&mut graph, &args.model.model, args.tesa.as_deref(), !args.no_propagate, cache.as_ref())?;
    for w in &sparsified.warnings {
        bar.suspend(|| eprintln!("warning: {w}"));
    }
    let secs = stage("tesa+propagate", &bar, &mut t);
    let pruned = graph.values.iter().filter(|v| v.tesa.as_ref().is_some_and(|t| t.n_pruned() > 0)).count();
    let line = format!("{pruned} values with pruned elements{}", if sparsified.cached { " (cached)" } else { "" });
    pipeline.record("propagate", secs, line, Some(&graph))?;
    bar.set_message("shrinking channels, NHWC");
    let rewrites = RewriteOptions {
        shrink: !args.no_shrink,
        merge_matmuls: !args.no_merge_qkv,
        dense_pointwise_as_conv: args.pointwise_conv,
    };
    let RewriteReport { narrow, batchnorm, shrink, hidden, layout, scales, merge, .. } =
        rewrite_in(&mut graph, &rewrites, &args.dtype, &mut pipeline)?;
    stage("rewrite", &bar, &mut t);
    bar.set_message("planning");
    let mut opts = PlanOptions::default();
    if args.costdb.is_some() {
        opts.cost = cost_model(args.costdb.as_deref())?;
    }
    // Tuning (`spartac tune`): the refitted cost DB, then the measured winners.
    let tuning = crate::stages::CompileTuning::open(args.tune_cache.as_deref(), args.costdb.is_some(), &mut opts)?;
    let mut plan = crate::stages::plan_graph(&graph, &opts)?;
    let tuned = tuning.apply(&graph, &mut plan, &opts)?;
    let secs = stage("plan", &bar, &mut t);
    pipeline.record("plan", secs, format!("{} operators planned", plan.operators.len()), None)?;
    bar.set_message("specializing kernels");
    let options = ModelOptions {
        fuse_epilogues: !args.no_fuse,
        fuse_elementwise: !args.no_fuse,
        fine_tile: args.fine_tile.0,
        library_dense: !args.no_library,
        library_epilogue: !args.no_library_epilogue,
        stream_dense: !args.no_stream,
        implicit_gemm_conv: !args.direct_conv,
        concat_reads: !args.no_concat_reads,
        defer_norms: !args.no_defer_norms,
    };
    let model = lower_model(&graph, &plan, &options, &mut |done, total| {
        bar.set_message(format!("specializing kernels: node {done}/{total}"));
    })
    .with_context(|| format!("compiling {}", args.model.model.display()))?;
    let secs = stage("specialize", &bar, &mut t);
    let line = format!("{} steps, {} distinct kernels", model.program.steps.len(), model.program.kernels.len());
    pipeline.record("lower", secs, line, None)?;
    let ptx = if args.no_ptx { vec![] } else { ptx_of(&model, &bar)? };
    let secs = stage("ptx", &bar, &mut t);
    pipeline.record("ptx", secs, format!("{} kernels", ptx.len()), None)?;
    bar.set_message("writing");
    let bytes = encode(&model, &ptx)?;
    spartac::output::write_atomic(&out, &bytes).with_context(|| format!("writing {}", out.display()))?;
    let secs = stage("write", &bar, &mut t);
    pipeline.record("write", secs, format!("{} bytes", bytes.len()), None)?;
    bar.finish_and_clear();

    let dense_s: f64 = plan.operators.iter().map(|o| o.dense_s).sum();
    let planned_s: f64 = plan.operators.iter().map(|o| o.planned_s).sum();
    let s = &model.stats;
    let p = &model.program;
    let mib = |b: usize| b as f64 / (1 << 20) as f64;
    let rows: Vec<(String, String)> = vec![
        ("graph nodes".into(), s.graph_nodes.to_string()),
        (
            "program steps".into(),
            format!("{} ({} kernels, {} distinct)", p.steps.len(), launches(&model), p.kernels.len()),
        ),
        (
            "channels".into(),
            if shrink.shrunk == 0 {
                "none cut".to_string()
            } else {
                format!(
                    "{} → {} in {} of {} classes; their weights {} → {} elements",
                    shrink.channels_before,
                    shrink.channels_after,
                    shrink.shrunk,
                    shrink.classes,
                    shrink.weight_elements_before,
                    shrink.weight_elements_after
                )
            },
        ),
        (
            "MLP hidden units".into(),
            if hidden.shrunk == 0 {
                "none cut".to_string()
            } else {
                format!("{} → {} in {} of {} chains", hidden.units_before, hidden.units_after, hidden.shrunk, hidden.chains)
            },
        ),
        (
            "convolutions".into(),
            format!(
                "{} 1×1 and {} patch embeddings as matmuls, {} as NHWC conv kernels, {} NHWC pools, {} NHWC concats, {} layout transposes ({} cancelled), {} BatchNorms folded, {} as channel affines",
                layout.pointwise,
                layout.patchify,
                layout.convs,
                layout.pools,
                layout.concats,
                layout.border_transposes,
                layout.transposes_cancelled,
                batchnorm.folded,
                batchnorm.affine
            ),
        ),
        (
            "folded scales".into(),
            match (scales.folded, scales.out_of_range) {
                (0, 0) => "none".to_string(),
                (f, 0) => format!("{f} per-column Muls into their MatMuls"),
                (f, k) => format!("{f} per-column Muls into their MatMuls, {k} kept (folded weights would leave fp16's range)"),
            },
        ),
        (
            "merged matmuls".into(),
            if merge.sets == 0 {
                "none".to_string()
            } else {
                format!("{} MatMuls into {} ({} with their biases)", merge.matmuls, merge.sets, merge.with_bias)
            },
        ),
        (
            "broadcasts".into(),
            if narrow.dropped == 0 && narrow.unsplit == 0 && narrow.gathers_as_views == 0 {
                "none narrowed".to_string()
            } else {
                format!(
                    "{} identity op{} dropped, {} value{} narrowed (their readers broadcast), {} constant Add{} taken out of a split batch axis, {} in-order GatherND{} as views",
                    narrow.dropped,
                    if narrow.dropped == 1 { "" } else { "s" },
                    narrow.narrowed,
                    if narrow.narrowed == 1 { "" } else { "s" },
                    narrow.unsplit,
                    if narrow.unsplit == 1 { "" } else { "s" },
                    narrow.gathers_as_views,
                    if narrow.gathers_as_views == 1 { "" } else { "s" }
                )
            },
        ),
        (
            "planned matmuls".into(),
            format!("{} ({} sparse, {} dense parts on cuBLAS)", s.planned_ops, s.sparse_ops, s.library_gemms),
        ),
        ("tuning".into(), tuned.clone()),
        (
            "fused".into(),
            format!(
                "{} epilogues, {} nodes in fused steps, {} LayerNorms with their input's group, {} done by the matmuls around them, {} views, {} concats read in place, {} data-movement chains as one gather",
                s.fused_epilogues, s.fused_nodes, s.fused_norms, s.deferred_norms, s.views, s.fused_concats, s.fused_movements
            ),
        ),
        (
            "predicted matmul time".into(),
            format!(
                "{:.1} µs sparse vs {:.1} µs dense ({:.2}×)",
                planned_s * 1e6,
                dense_s * 1e6,
                dense_s / planned_s.max(1e-12)
            ),
        ),
        (
            "matmul weights".into(),
            format!(
                "{:.2} MiB dense → {:.2} MiB packed ({:.1}%)",
                mib(s.dense_weight_bytes),
                mib(s.packed_weight_bytes),
                100.0 * s.packed_weight_bytes as f64 / s.dense_weight_bytes.max(1) as f64
            ),
        ),
        ("device memory".into(), format!("{:.1} MiB", mib(p.device_bytes()))),
        ("artifact".into(), format!("{} ({:.2} MiB, PTX for {} kernels)", out.display(), mib(bytes.len()), ptx.len())),
    ];
    for (k, v) in &rows {
        println!("{k:<24} {v}");
    }
    let cached = |n: &str| if n == "tesa+propagate" && sparsified.cached { " (cached)" } else { "" };
    let times: Vec<String> = stages.iter().map(|(n, s)| format!("{n} {s:.2} s{}", cached(n))).collect();
    let total: f64 = stages.iter().map(|(_, s)| s).sum();
    println!("{:<24} {total:.2} s ({})", "compile time", times.join(", "));
    if args.passes {
        print!("\n{}", pipeline.table());
    }
    if let Some(path) = &args.json {
        let json = serde_json::json!({
            "model": args.model.model.display().to_string(),
            "artifact": out.display().to_string(),
            "artifact_bytes": bytes.len(),
            "graph_nodes": s.graph_nodes,
            "steps": p.steps.len(),
            "kernels": p.kernels.len(),
            "planned_ops": s.planned_ops,
            "sparse_ops": s.sparse_ops,
            "library_gemms": s.library_gemms,
            "fused_epilogues": s.fused_epilogues,
            "fused_nodes": s.fused_nodes,
            "fused_norms": s.fused_norms,
            "deferred_norms": s.deferred_norms,
            "fused_concats": s.fused_concats,
            "fused_movements": s.fused_movements,
            "views": s.views,
            "merged_matmuls": merge.matmuls,
            "merged_sets": merge.sets,
            "channels_before": shrink.channels_before,
            "channels_after": shrink.channels_after,
            "hidden_units": [hidden.units_before, hidden.units_after],
            "pointwise_convs": layout.pointwise,
            "patch_convs": layout.patchify,
            "folded_batchnorms": batchnorm.folded,
            "affine_batchnorms": batchnorm.affine,
            "dropped_identity_ops": narrow.dropped,
            "narrowed_values": narrow.narrowed,
            "unsplit_adds": narrow.unsplit,
            "nhwc_convs": layout.convs,
            "nhwc_pools": layout.pools,
            "nhwc_concats": layout.concats,
            "layout_transposes": layout.border_transposes,
            "cancelled_transposes": layout.transposes_cancelled,
            "folded_scales": scales.folded,
            "unfolded_scales": scales.out_of_range,
            "predicted_sparse_s": planned_s,
            "predicted_dense_s": dense_s,
            "dense_weight_bytes": s.dense_weight_bytes,
            "packed_weight_bytes": s.packed_weight_bytes,
            "device_bytes": p.device_bytes(),
            "ptx_kernels": ptx.len(),
            "stages_s": stages.iter().map(|(n, s)| (n.to_string(), *s)).collect::<std::collections::BTreeMap<_, _>>(),
            "compile_s": total,
            "passes": pipeline.records.iter().map(|r| serde_json::json!({"pass": r.name, "s": r.seconds, "result": r.result})).collect::<Vec<_>>(),
            "propagation_cached": sparsified.cached,
            "tuning": tuned,
        });
        spartac::output::write_atomic(path, serde_json::to_string_pretty(&json)?.as_bytes())?;
    }
    Ok(ExitCode::SUCCESS)
}

fn launches(model: &ModelProgram) -> usize {
    model
        .program
        .steps
        .iter()
        .flat_map(|s| &s.launches)
        .filter(|l| matches!(l, spartac::program::Launch::Kernel { .. }))
        .count()
}

/// PTX of every kernel for [`PTX_ARCH`] when NVRTC can be loaded here; none (with a note)
/// when it cannot: the runtime then compiles at first load.
fn ptx_of(model: &ModelProgram, bar: &indicatif::ProgressBar) -> Result<Vec<PtxProto>> {
    use rayon::prelude::*;
    if spartac_runtime::cuda::nvrtc_version().is_err() {
        bar.println(
            "note: NVRTC not found: the artifact carries CUDA sources only (compiled at first load, then cached)",
        );
        return Ok(vec![]);
    }
    let n = model.program.kernels.len();
    bar.set_message(format!("PTX for {n} kernels"));
    let ptx: Vec<Result<PtxProto>> = model
        .program
        .kernels
        .par_iter()
        .enumerate()
        .map(|(i, k)| {
            let p = spartac_runtime::cuda::compile_ptx(&k.name, &k.source, PTX_ARCH)
                .with_context(|| format!("kernel {} did not compile", k.name))?;
            Ok(PtxProto { kernel: i as u32, arch: PTX_ARCH.to_string(), ptx: p.ptx })
        })
        .collect();
    ptx.into_iter().collect()
}
