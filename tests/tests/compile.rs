//! `spartac compile` without a GPU: models lowered to programs, written as artifacts and read
//! back, run on the CPU executor and compared with onnxruntime and with the reference executor
//! (the pruned model compiled = the dense model with the pruned weights zeroed); every kernel
//! of a compiled MiniLM-L3 goes through NVRTC and ptxas; the program text of a small model is
//! a snapshot.

use spartac::frontend::{load_model, load_model_bytes, LoadOptions};
use spartac::ir::{DType, Graph, Tensor};
use spartac::plan::{plan, PlanOptions};
use spartac::program::artifact::{decode, encode, ArtifactError};
use spartac::program::model::{lower_model, ModelOptions, ModelProgram};
use spartac::program::{Op, Operand};
use spartac::propagate::{execute_zeroing_pruned, propagate, PropagateOptions};
use spartac::rewrite::{prepare, prepare_for_lowering, RewriteOptions};
use spartac::tesa::attrs::{apply_attrs, TesaAttrs};
use spartac_runtime::exec::model::{relative_error, run_cpu};
use spartac_tests::builder::{fixed, ModelBuilder, A};
use spartac_tests::compiled::{assert_compiled_matches, nvrtc_compiles};
use spartac_tests::models::models_dir;
use std::collections::BTreeMap;

fn compile(graph: Graph, tesa: Option<&str>, options: &ModelOptions) -> (Graph, ModelProgram) {
    compile_with(graph, tesa, options, &RewriteOptions::default())
}

/// The rewrites with Q, K and V kept apart (`--no-merge-qkv`; merged by default).
const APART: RewriteOptions = RewriteOptions { shrink: true, merge_matmuls: false, dense_pointwise_as_conv: false };

fn compile_with(
    mut graph: Graph,
    tesa: Option<&str>,
    options: &ModelOptions,
    rewrites: &RewriteOptions,
) -> (Graph, ModelProgram) {
    let attrs = tesa.map(|t| TesaAttrs::parse(t).unwrap());
    apply_attrs(&mut graph, attrs.as_ref()).unwrap();
    propagate(&mut graph, &PropagateOptions::default()).unwrap();
    prepare(&mut graph, rewrites).unwrap();
    let p = plan(&graph, &PlanOptions::default()).unwrap();
    let model = lower_model(&graph, &p, options, &mut |_, _| {}).unwrap();
    // Through the artifact and back: what `spartac run` reads.
    let bytes = encode(&model, &[]).unwrap();
    let back = decode(&bytes).unwrap().model;
    assert_eq!(back, model, "the artifact reads back as written");
    (graph, back)
}

fn minilm_l3() -> Graph {
    let path = models_dir().join("minilm-l3.onnx");
    assert!(path.exists(), "{} is missing: run models/setup_minilm_l3.sh first (.ci/run does)", path.display());
    load_model(&path, &LoadOptions::default()).unwrap()
}

/// 90% of the 32×32 blocks of every MatMul weight of MiniLM-L3 pruned by magnitude.
const L3_BLOCK90: &str =
    r#"{ "tensors": { "onnx::MatMul_*": { "block_magnitude": { "block": [32, 32], "sparsity": 0.9 } } } }"#;

#[test]
fn minilm_l3_compiled_matches_onnxruntime_on_the_cpu_executor() {
    let (graph, model) = compile_with(minilm_l3(), None, &ModelOptions::default(), &APART);
    assert_eq!(model.stats.planned_ops, 18, "every MatMul weight is planned: {:?}", model.stats);
    assert!(model.stats.fused_epilogues >= 18, "biases and GELUs run in epilogues: {:?}", model.stats);
    // Both residual Adds of each layer run in their LayerNorm's kernel, and the embeddings' sum
    // in the first one's (the position embeddings, `[1, S, d]`, read at strided row starts).
    assert_eq!(model.stats.fused_norms, 7, "{:?}", model.stats);
    assert_eq!(kernels_named(&model, "layernorm_fused_"), 7);
    // By default Q, K and V are one matmul per layer, 4 planned matmuls per layer, and each
    // attention reads its Q, K and V slices in place: no Slice copy kernel.
    let merged = compile(minilm_l3(), None, &ModelOptions::default()).1;
    assert_eq!(merged.stats.planned_ops, 12, "merged Q, K, V: {:?}", merged.stats);
    assert_eq!(merged.stats.fused_epilogues, 15, "biases and GELUs run in epilogues: {:?}", merged.stats);
    assert_eq!(kernels_named(&merged, "remap_"), 0, "the slices are read in place");
    assert_eq!(kernels_named(&merged, "attention_"), 3);
    eprintln!(
        "MiniLM-L3 steps: {} (Q, K, V apart), {} (merged); LayerNorms with their residual Add: {}",
        model.program.steps.len(),
        merged.program.steps.len(),
        model.stats.fused_norms
    );
    // Each layer's attention (Q·Kᵀ, scale and mask, Softmax, ·V, the heads merged back) is one
    // kernel: no score tensor, no Softmax or batched matmul kernel of its own.
    let kernels = |prefix: &str| model.program.kernels.iter().filter(|k| k.name.starts_with(prefix)).count();
    assert_eq!(kernels("attention_"), 3, "one fused attention per layer");
    assert_eq!(kernels("softmax_") + kernels("matmul_"), 0, "no unfused attention step");
    let arrays = spartac_runtime::npz::read_npz(&models_dir().join("minilm-l3.ref.npz")).unwrap();
    let inputs: BTreeMap<String, Tensor> = graph
        .inputs
        .iter()
        .map(|&v| {
            let name = graph.value(v).name.clone();
            (name.clone(), arrays[&format!("in:{name}")].clone())
        })
        .collect();
    for (what, program) in [("apart", &model), ("merged", &merged)] {
        let outputs = run_cpu(program, &inputs).unwrap();
        assert_eq!(outputs.len(), 4);
        for (name, got) in &outputs {
            let e = relative_error(got, &arrays[&format!("out:{name}")]);
            eprintln!("{what}: {name}: relative error {e:.3e}");
            assert!(e <= 1e-4, "{what}: {name}: relative error {e:.3e} against onnxruntime");
        }
    }
}

#[test]
fn pruned_minilm_l3_compiled_equals_the_model_with_pruned_weights_zeroed() {
    let (graph, model) = compile(minilm_l3(), Some(L3_BLOCK90), &ModelOptions::default());
    // 18 weights, 12 planned matmuls (Q, K and V merged per layer), every one sparse.
    assert_eq!(model.stats.planned_ops, 12, "{:?}", model.stats);
    assert_eq!(model.stats.sparse_ops, 12, "every pruned weight runs sparse: {:?}", model.stats);
    // FFN hidden units whose blocks are all pruned (a whole 32-row block row of the second
    // weight, or a whole block column of the first) are cut out of both weights first
    // (`shrink_hidden`), in whole aligned blocks: every FFN weight keeps a multiple of 32 of its
    // 1536 units, and some lose some.
    let ffn: Vec<usize> = graph
        .nodes
        .iter()
        .filter(|n| n.op_type == "MatMul")
        .filter_map(|n| n.inputs[1].filter(|w| graph.initializers.contains_key(w)))
        .map(|w| graph.fact(w).shape.clone())
        .filter(|s| s.len() == 2 && s.contains(&384))
        .map(|s| if s[0] == 384 { s[1] } else { s[0] })
        .filter(|&h| h <= 1536 && h != 384 && h != 3 * 384)
        .collect();
    assert_eq!(ffn.len(), 6, "two FFN weights per layer: {ffn:?}");
    assert!(ffn.iter().all(|&h| h % 32 == 0) && ffn.iter().any(|&h| h < 1536), "some units cut: {ffn:?}");
    // A 90%-pruned model's weights take a tenth of the dense bytes of the cut weights plus
    // index tables and the zeros of the blocks the cover picks (wider ones on the merged Q/K/V
    // weights, where the cost model prices them faster), and the cut FFN weights are denser
    // than the pruned ones were: 17.4% of the dense bytes apart.
    let ratio = model.stats.packed_weight_bytes as f64 / model.stats.dense_weight_bytes as f64;
    assert!(ratio < 0.2, "packed weights are {ratio:.3} of the dense ones");
    let apart = compile_with(minilm_l3(), Some(L3_BLOCK90), &ModelOptions::default(), &APART).1;
    let ratio_apart = apart.stats.packed_weight_bytes as f64 / apart.stats.dense_weight_bytes as f64;
    assert!(ratio_apart < 0.19, "apart: packed weights are {ratio_apart:.3} of the dense ones");
    // Activations share buffers once their values are dead: far less scratch than one buffer
    // per value.
    let per_value: usize = (0..graph.values.len())
        .map(|i| spartac::ir::ValueId(i as u32))
        .filter(|v| !graph.initializers.contains_key(v))
        .map(|v| graph.fact(v).numel() * graph.fact(v).dtype.size_bytes())
        .sum();
    let scratch: usize = model
        .program
        .buffers
        .iter()
        .filter(|b| matches!(b.storage, spartac::program::Storage::Scratch | spartac::program::Storage::Output))
        .map(|b| b.bytes())
        .sum();
    assert!(scratch * 5 < per_value, "scratch {scratch} B for {per_value} B of values");
    let inputs = spartac::reference::random_inputs(&graph, 11);
    let want = execute_zeroing_pruned(&graph, &inputs).unwrap();
    let got = run_cpu(&model, &inputs).unwrap();
    for ((name, g), (_, w)) in got.iter().zip(&want) {
        let e = relative_error(g, w);
        eprintln!("{name}: relative error {e:.3e}");
        assert!(e <= 1e-5, "{name}: relative error {e:.3e} against the zeroed reference");
    }
}

#[test]
fn every_kernel_of_a_compiled_minilm_l3_compiles_with_nvrtc() {
    use rayon::prelude::*;
    let lib = spartac_tests::repo_root().join(".cuda/nvidia/cu13/lib");
    if lib.is_dir() {
        spartac_runtime::cuda::preload_nvrtc(&lib).unwrap();
    }
    spartac_runtime::cuda::nvrtc_version()
        .expect("NVRTC is required (tests/run-all.sh installs the pinned wheels under .cuda/)");
    let (_, model) = compile(minilm_l3(), Some(L3_BLOCK90), &ModelOptions::default());
    let failures: Vec<String> = model
        .program
        .kernels
        .par_iter()
        .filter_map(|k| {
            spartac_runtime::cuda::compile_ptx(&k.name, &k.source, "sm_90a").err().map(|e| format!("{}: {e}", k.name))
        })
        .collect();
    assert!(failures.is_empty(), "{} kernels failed:\n{}", failures.len(), failures.join("\n"));
    assert!(model.program.kernels.len() >= 10);
}

/// A small encoder block: MatMul + bias + erf-GELU, residual Add, LayerNormalization, an
/// attention-like Transpose + MatMul + Softmax, and a mask chain (Unsqueeze, Cast, Sub, Mul).
fn small_block() -> Graph {
    let w: Vec<f32> = (0..64 * 64).map(|i| ((i * 37 % 101) as f32 - 50.0) / 200.0).collect();
    let bias: Vec<f32> = (0..64).map(|i| i as f32 / 64.0 - 0.5).collect();
    let ones = Tensor::from_vec(vec![64], vec![1.0f32; 64]);
    let zeros = Tensor::from_vec(vec![64], vec![0.0f32; 64]);
    let bytes = ModelBuilder::new("small_block", 17)
        .input("x", DType::F32, &fixed(&[2, 16, 64]))
        .input("mask", DType::I64, &fixed(&[2, 16]))
        .output("y", DType::F32, &fixed(&[2, 16, 64]))
        .output("p", DType::F32, &fixed(&[2, 16, 16]))
        .init("w", &Tensor::from_vec(vec![64, 64], w))
        .init("b", &Tensor::from_vec(vec![64], bias))
        .init("sqrt2", &Tensor::scalar(std::f32::consts::SQRT_2))
        .init("one", &Tensor::scalar(1.0f32))
        .init("half", &Tensor::scalar(0.5f32))
        .init("big", &Tensor::scalar(-10000.0f32))
        .init("axes1", &Tensor::from_vec(vec![1], vec![1i64]))
        .init("gamma", &ones)
        .init("beta", &zeros)
        .node("mm", "MatMul", &["x", "w"], &["h0"], vec![])
        .node("bias", "Add", &["h0", "b"], &["h1"], vec![])
        .node("div", "Div", &["h1", "sqrt2"], &["g0"], vec![])
        .node("erf", "Erf", &["g0"], &["g1"], vec![])
        .node("add1", "Add", &["g1", "one"], &["g2"], vec![])
        .node("mulx", "Mul", &["h1", "g2"], &["g3"], vec![])
        .node("mulh", "Mul", &["g3", "half"], &["g4"], vec![])
        .node("res", "Add", &["g4", "x"], &["r"], vec![])
        .node(
            "ln",
            "LayerNormalization",
            &["r", "gamma", "beta"],
            &["y"],
            vec![("axis", A::I(-1)), ("epsilon", A::F(1e-5))],
        )
        .node("tr", "Transpose", &["y"], &["yt"], vec![("perm", A::Is(vec![0, 2, 1]))])
        .node("scores", "MatMul", &["y", "yt"], &["s"], vec![])
        .node("unsq", "Unsqueeze", &["mask", "axes1"], &["m0"], vec![])
        .node("cast", "Cast", &["m0"], &["m1"], vec![("to", A::I(1))])
        .node("inv", "Sub", &["one", "m1"], &["m2"], vec![])
        .node("scale", "Mul", &["m2", "big"], &["m3"], vec![])
        .node("masked", "Add", &["s", "m3"], &["s2"], vec![])
        .node("sm", "Softmax", &["s2"], &["p"], vec![("axis", A::I(-1))])
        .bytes();
    load_model_bytes(&bytes, "small_block", &LoadOptions::default()).unwrap()
}

#[test]
fn a_small_block_compiles_to_the_program_of_the_snapshot_and_matches_the_reference() {
    let (graph, model) = compile(small_block(), None, &ModelOptions::default());
    assert_eq!(model.stats.fused_epilogues, 2, "bias and GELU fused: {:?}", model.stats);
    // Post-LN: the residual Add runs inside the LayerNorm's kernel, its sum never stored.
    assert_eq!(model.stats.fused_norms, 1, "{:?}", model.stats);
    assert_eq!((kernels_named(&model, "ew_res"), kernels_named(&model, "layernorm_fused_ln")), (0, 1));
    insta::assert_snapshot!("small_block_program", model.program.to_text());
    for seed in [1, 2] {
        let inputs = spartac::reference::random_inputs(&graph, seed);
        let want = spartac::reference::execute(&graph, &inputs).unwrap();
        let got = run_cpu(&model, &inputs).unwrap();
        for ((name, g), (_, w)) in got.iter().zip(&want) {
            let e = relative_error(g, w);
            assert!(e <= 1e-5, "{name}: relative error {e:.3e}");
        }
    }
    // Without fusion: the same results from one kernel per node.
    let (_, unfused) = compile(
        small_block(),
        None,
        &ModelOptions { fuse_epilogues: false, fuse_elementwise: false, ..ModelOptions::default() },
    );
    assert!(unfused.program.steps.len() > model.program.steps.len());
    let inputs = spartac::reference::random_inputs(&graph, 3);
    let (a, b) = (run_cpu(&model, &inputs).unwrap(), run_cpu(&unfused, &inputs).unwrap());
    for ((name, x), (_, y)) in a.iter().zip(&b) {
        assert!(relative_error(x, y) <= 1e-5, "{name}: fused and unfused differ");
    }
}

#[test]
fn damaged_artifacts_are_refused_with_the_reason() {
    let (_, model) = compile(small_block(), None, &ModelOptions::default());
    let bytes = encode(&model, &[]).unwrap();
    assert!(matches!(decode(&bytes[..bytes.len() - 1]), Err(ArtifactError::Length { .. })));
    assert!(matches!(decode(&bytes[..10]), Err(ArtifactError::Length { .. })));
    assert!(matches!(decode(b"PK\x03\x04 not an artifact"), Err(ArtifactError::Magic)));
    let mut flipped = bytes.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x40;
    assert!(matches!(decode(&flipped), Err(ArtifactError::Checksum)));
    let mut version = bytes.clone();
    version[8] = 99;
    let e = decode(&version).unwrap_err();
    assert!(matches!(e, ArtifactError::Version { found: 99 }));
    assert!(e.to_string().contains("compile the model again"), "{e}");
}

#[test]
fn an_op_without_a_gpu_kernel_is_an_error_naming_the_node() {
    // GatherElements with constant indices lowers to a gather through a traced map; with
    // indices that arrive at run time it has no kernel.
    let bytes = ModelBuilder::new("ge", 17)
        .input("x", DType::F32, &fixed(&[4, 8]))
        .input("idx", DType::I64, &fixed(&[4, 2]))
        .output("y", DType::F32, &fixed(&[4, 2]))
        .node("gather_elements_node", "GatherElements", &["x", "idx"], &["y"], vec![("axis", A::I(1))])
        .bytes();
    let graph = load_model_bytes(&bytes, "ge", &LoadOptions::default()).unwrap();
    let p = plan(&graph, &PlanOptions::default()).unwrap();
    let e = lower_model(&graph, &p, &ModelOptions::default(), &mut |_, _| {}).unwrap_err().to_string();
    assert!(e.contains("gather_elements_node") && e.contains("GatherElements") && e.contains("opset"), "{e}");
}

/// The EfficientNet-shaped convnet, half its filters pruned: channels shrink, the 1×1 convs
/// become planned matmuls with ReLU6 epilogues, the others NHWC conv kernels with theirs; the
/// CPU executor matches the reference of the pruned model, and every kernel compiles.
#[test]
fn a_pruned_convnet_compiles_to_nhwc_kernels_and_matches_the_reference() {
    let graph = load_model_bytes(&spartac_tests::builder::small_convnet(), "convnet", &LoadOptions::default()).unwrap();
    let original = graph.clone();
    let tesa = r#"{"tensors": {"*.weight": {"channel_magnitude": {"sparsity": 0.5}}, "fc.weight": {}}}"#;
    let (compiled, model) = compile(graph, Some(tesa), &ModelOptions::default());
    assert_eq!(model.stats.planned_ops, 4, "3 pointwise convs and the classifier: {:?}", model.stats);
    let convs: Vec<&str> =
        model.program.kernels.iter().map(|k| k.name.as_str()).filter(|n| n.starts_with("conv_")).collect();
    assert_eq!(convs, ["conv_stem", "conv_dw"], "the NHWC conv kernels");
    // ReLU6 after the stem, the expand, the depthwise and the head conv: all in epilogues.
    assert_eq!(model.stats.fused_epilogues, 4 + 3, "{:?}", model.stats);
    let mut pruned = original;
    apply_attrs(&mut pruned, Some(&TesaAttrs::parse(tesa).unwrap())).unwrap();
    for seed in [1, 2] {
        let inputs = spartac::reference::random_inputs(&compiled, seed);
        let want = execute_zeroing_pruned(&pruned, &inputs).unwrap();
        let got = run_cpu(&model, &inputs).unwrap();
        for ((name, g), (_, w)) in got.iter().zip(&want) {
            let e = relative_error(g, w);
            assert!(e <= 1e-5, "{name}: relative error {e:.3e}");
        }
    }
    let lib = spartac_tests::repo_root().join(".cuda/nvidia/cu13/lib");
    if lib.is_dir() {
        spartac_runtime::cuda::preload_nvrtc(&lib).unwrap();
    }
    spartac_runtime::cuda::nvrtc_version().expect("NVRTC is required (tests/run-all.sh installs it under .cuda/)");
    for k in &model.program.kernels {
        spartac_runtime::cuda::compile_ptx(&k.name, &k.source, "sm_90a").unwrap_or_else(|e| panic!("{}: {e}", k.name));
    }
}

/// `--dtype f16`: the small block runs with every value between kernels in fp16 (the planned
/// matmuls on fp16 kernels); the CPU executor stays within fp16 rounding of the fp32 reference,
/// and every kernel compiles.
#[test]
fn the_small_block_in_fp16_stays_within_half_precision_of_the_reference() {
    let mut graph = small_block();
    let reference = graph.clone();
    apply_attrs(&mut graph, None).unwrap();
    propagate(&mut graph, &PropagateOptions::default()).unwrap();
    prepare_for_lowering(&mut graph, true).unwrap();
    let report = spartac::rewrite::to_half(&mut graph, DType::F16).unwrap();
    assert!(report.values > 5 && report.constants > 3, "{report:?}");
    let p = plan(&graph, &PlanOptions::default()).unwrap();
    assert!(p.operators.iter().all(|op| op.dtype == "f16"), "every planned matmul on fp16 kernels");
    let model = lower_model(&graph, &p, &ModelOptions::default(), &mut |_, _| {}).unwrap();
    let halves = model.program.buffers.iter().filter(|b| b.elem == spartac::program::Elem::F16).count();
    assert!(halves > 5, "fp16 buffers: {halves}");
    let gemms = |m: &ModelProgram| -> Vec<(usize, usize, usize, bool, bool)> {
        let launches = m.program.steps.iter().flat_map(|s| &s.launches);
        launches
            .filter_map(|l| match l {
                spartac::program::Launch::Gemm { m, k, n, accumulate, bias, .. } => {
                    Some((*m, *k, *n, *accumulate, bias.is_some()))
                }
                _ => None,
            })
            .collect()
    };
    // The dense 32 × 64 × 64 fp16 matmul is skinny: the streaming kernel takes it, its bias and
    // GELU in the epilogue.
    assert!(gemms(&model).is_empty() && model.stats.library_gemms == 0, "{}", model.program.to_text());
    assert!(model.program.kernels.iter().any(|k| k.name.starts_with("spmm_dense_stream_f16")));
    // Without the streaming kernel it runs on the library, which adds the bias itself (one
    // rounding of the sum); GELU follows in a kernel after it. The artifact carries the GEMM.
    let library = ModelOptions { stream_dense: false, ..ModelOptions::default() };
    let library = lower_model(&graph, &p, &library, &mut |_, _| {}).unwrap();
    assert_eq!(gemms(&library), [(32, 64, 64, false, true)], "{}", library.program.to_text());
    assert_eq!(library.stats.library_gemms, 1);
    assert!(library.program.kernels.iter().any(|k| k.name.starts_with("epilogue_rows")), "no GELU pass");
    assert!(!library.program.kernels.iter().any(|k| k.name.starts_with("bias_rows")), "a bias prefill");
    let read = decode(&encode(&library, &[]).unwrap()).unwrap().model;
    assert_eq!(read, library, "the artifact reads back as written");
    // Without the library's epilogue: the bias written into the output first (the GEMM adds
    // into it, so the sum is rounded once), GELU in the kernel after it.
    let unfused = ModelOptions { stream_dense: false, library_epilogue: false, ..ModelOptions::default() };
    let unfused = lower_model(&graph, &p, &unfused, &mut |_, _| {}).unwrap();
    assert_eq!(gemms(&unfused), [(32, 64, 64, true, false)], "{}", unfused.program.to_text());
    for kernel in ["bias_rows", "epilogue_rows"] {
        assert!(unfused.program.kernels.iter().any(|k| k.name.starts_with(kernel)), "no {kernel} kernel");
    }
    let own = ModelOptions { library_dense: false, ..ModelOptions::default() };
    let own = lower_model(&graph, &p, &own, &mut |_, _| {}).unwrap();
    assert!(gemms(&own).is_empty() && own.stats.library_gemms == 0, "--no-library keeps our kernels");
    // The interface keeps the model's fp32 types.
    assert!(model.inputs.iter().chain(&model.outputs).all(|s| s.dtype != DType::F16));
    for seed in [1, 2] {
        let inputs = spartac::reference::random_inputs(&reference, seed);
        let want = spartac::reference::execute(&reference, &inputs).unwrap();
        let got = run_cpu(&model, &inputs).unwrap();
        for ((name, g), (_, w)) in got.iter().zip(&want) {
            let e = relative_error(g, w);
            assert!(e <= 1e-2 && e > 0.0, "{name}: relative error {e:.3e} (fp16 rounds, but not by more)");
        }
        for other in [&own, &library, &unfused] {
            let theirs = run_cpu(other, &inputs).unwrap();
            for ((name, g), (_, w)) in got.iter().zip(&theirs) {
                assert!(relative_error(g, w) <= 1e-6, "{name}: the streaming, library and own-kernel programs differ");
            }
        }
    }
    let lib = spartac_tests::repo_root().join(".cuda/nvidia/cu13/lib");
    if lib.is_dir() {
        spartac_runtime::cuda::preload_nvrtc(&lib).unwrap();
    }
    spartac_runtime::cuda::nvrtc_version().expect("NVRTC is required (tests/run-all.sh installs it under .cuda/)");
    for k in model.program.kernels.iter().chain(&own.program.kernels).chain(&library.program.kernels) {
        spartac_runtime::cuda::compile_ptx(&k.name, &k.source, "sm_90a").unwrap_or_else(|e| panic!("{}: {e}", k.name));
    }
}

/// `reference` (no TeSA) lowered in `dtype`: every value between kernels in that type when it is
/// 16-bit.
fn lower_in(reference: &Graph, dtype: DType) -> ModelProgram {
    let mut graph = reference.clone();
    apply_attrs(&mut graph, None).unwrap();
    prepare_for_lowering(&mut graph, true).unwrap();
    if dtype != DType::F32 {
        spartac::rewrite::to_half(&mut graph, dtype).unwrap();
    }
    let p = plan(&graph, &PlanOptions::default()).unwrap();
    lower_model(&graph, &p, &ModelOptions::default(), &mut |_, _| {}).unwrap()
}

/// The op types of each step that runs a LayerNormalization.
fn norm_steps(model: &ModelProgram) -> Vec<Vec<&str>> {
    let steps = model.program.steps.iter();
    steps
        .filter_map(|s| match &s.op {
            Op::Nodes(nodes) if nodes.iter().any(|n| n.op_type == "LayerNormalization") => {
                Some(nodes.iter().map(|n| n.op_type.as_str()).collect())
            }
            _ => None,
        })
        .collect()
}

/// The single-output `model` on the CPU executor within `tolerance` of `reference`, seeds 1 and 2.
fn assert_near_reference(reference: &Graph, model: &ModelProgram, tolerance: f64, what: &str) {
    for seed in [1, 2] {
        let inputs = spartac::reference::random_inputs(reference, seed);
        let want = spartac::reference::execute(reference, &inputs).unwrap();
        let got = run_cpu(model, &inputs).unwrap();
        let e = relative_error(&got[0].1, &want[0].1);
        assert!(e <= tolerance, "{what} seed {seed}: relative error {e:.3e}");
    }
}

/// A 16-bit model whose last LayerNorm feeds its fp32 output: the Cast back to fp32 joins the
/// LayerNorm's step (the kernel rounds each value to fp16 and stores it as f32), one kernel and
/// no Cast step; the CPU executor runs the same nodes and stays within fp16 rounding of the
/// reference; in fp32 there is no Cast to join.
#[test]
fn a_final_layernorm_stores_through_the_output_cast_in_fp16() {
    let gamma: Vec<f32> = (0..384).map(|i| 0.5 + (i % 7) as f32 / 7.0).collect();
    let beta: Vec<f32> = (0..384).map(|i| (i % 5) as f32 / 10.0 - 0.2).collect();
    let bytes = ModelBuilder::new("final_norm", 17)
        .input("x", DType::F32, &fixed(&[3, 5, 384]))
        .input("r", DType::F32, &fixed(&[3, 5, 384]))
        .output("y", DType::F32, &fixed(&[3, 5, 384]))
        .init("gamma", &Tensor::from_vec(vec![384], gamma))
        .init("beta", &Tensor::from_vec(vec![384], beta))
        .node("res", "Add", &["x", "r"], &["s"], vec![])
        .node(
            "ln",
            "LayerNormalization",
            &["s", "gamma", "beta"],
            &["y"],
            vec![("axis", A::I(-1)), ("epsilon", A::F(1e-5))],
        )
        .bytes();
    let reference = load_model_bytes(&bytes, "final_norm", &LoadOptions::default()).unwrap();
    for (dtype, cast) in [(DType::F16, true), (DType::BF16, true), (DType::F32, false)] {
        let model = lower_in(&reference, dtype);
        let norm_steps = norm_steps(&model);
        // One step: the inputs' Casts to 16 bits, the Add and the LayerNorm (its prologue), then
        // the output's Cast.
        let want: &[&str] = if cast { &["Add", "LayerNormalization", "Cast"] } else { &["Add", "LayerNormalization"] };
        assert_eq!(model.program.steps.len(), 1, "{dtype}: {}", model.program.to_text());
        assert!(norm_steps.len() == 1 && norm_steps[0].ends_with(want), "{dtype}: {norm_steps:?}");
        let kernel = model.program.kernels.iter().find(|k| k.name.starts_with("layernorm_fused")).unwrap();
        let rounding = match dtype {
            DType::F16 => "rnd_f16((w[",
            _ => "rnd_bf16((w[",
        };
        assert_eq!(kernel.source.contains(rounding), cast, "{dtype}: {}", kernel.source);
        assert!(kernel.source.contains("float* __restrict__ y)"), "{dtype}: the kernel stores f32");
        let tolerance = match dtype {
            DType::F16 => 1e-2,
            DType::BF16 => 8e-2,
            _ => 1e-5,
        };
        assert_near_reference(&reference, &model, tolerance, &dtype.to_string());
        nvrtc_compiles(&model);
    }
}

/// BERT's embedding: word and token-type lookups (Gather along axis 0) summed with a position
/// row and normalized. Both Gathers join the LayerNorm's step, whose kernel reads the table rows
/// the ids name; in f32 and fp16 the program matches the reference (ids from the inputs, a
/// negative id counting from the end as ONNX says), and the kernel compiles.
#[test]
fn embedding_lookups_fold_into_the_layernorm() {
    let table: Vec<f32> = (0..50 * 64).map(|i| ((i * 29 % 97) as f32 - 48.0) / 50.0).collect();
    let types: Vec<f32> = (0..2 * 64).map(|i| (i % 11) as f32 / 20.0 - 0.25).collect();
    let pos: Vec<f32> = (0..7 * 64).map(|i| ((i * 13 % 31) as f32 - 15.0) / 40.0).collect();
    let bytes = ModelBuilder::new("embedding", 17)
        .input("ids", DType::I64, &fixed(&[3, 7]))
        .input("tt", DType::I64, &fixed(&[3, 7]))
        .output("y", DType::F32, &fixed(&[3, 7, 64]))
        .init("table", &Tensor::from_vec(vec![50, 64], table))
        .init("types", &Tensor::from_vec(vec![2, 64], types))
        .init("pos", &Tensor::from_vec(vec![1, 7, 64], pos))
        .init("gamma", &Tensor::from_vec(vec![64], vec![1.5f32; 64]))
        .init("minus_one", &Tensor::from_vec(vec![1], vec![-1i64]))
        .node("neg", "Mul", &["ids", "minus_one"], &["nids"], vec![])
        .node("word", "Gather", &["table", "nids"], &["w"], vec![("axis", A::I(0))])
        .node("type", "Gather", &["types", "tt"], &["t"], vec![("axis", A::I(0))])
        .node("add1", "Add", &["w", "t"], &["s1"], vec![])
        .node("add2", "Add", &["s1", "pos"], &["s2"], vec![])
        .node("ln", "LayerNormalization", &["s2", "gamma"], &["y"], vec![("axis", A::I(-1)), ("epsilon", A::F(1e-5))])
        .bytes();
    let reference = load_model_bytes(&bytes, "embedding", &LoadOptions::default()).unwrap();
    for (dtype, tolerance) in [(DType::F32, 1e-6), (DType::F16, 1e-2)] {
        let model = lower_in(&reference, dtype);
        let text = model.program.to_text();
        let norms = norm_steps(&model);
        assert_eq!(norms.len(), 1, "{dtype}: one LayerNorm step\n{text}");
        let gathers = norms[0].iter().filter(|&&t| t == "Gather").count();
        assert_eq!(gathers, 2, "{dtype}: both lookups in the LayerNorm's step\n{text}");
        assert_eq!(kernels_named(&model, "gather"), 0, "{dtype}: no gather kernel\n{text}");
        let kernel = model.program.kernels.iter().find(|k| k.name.starts_with("layernorm_fused")).unwrap();
        assert!(kernel.source.contains("ix0") && kernel.source.contains("ix1"), "{}", kernel.source);
        assert_near_reference(&reference, &model, tolerance, &dtype.to_string());
        nvrtc_compiles(&model);
    }
}

/// The pruned convnet in fp16: NHWC conv kernels and planned matmuls on 16-bit activations.
#[test]
fn the_pruned_convnet_in_fp16_stays_within_half_precision_of_the_reference() {
    let mut graph =
        load_model_bytes(&spartac_tests::builder::small_convnet(), "convnet", &LoadOptions::default()).unwrap();
    let tesa = r#"{"tensors": {"*.weight": {"channel_magnitude": {"sparsity": 0.5}}, "fc.weight": {}}}"#;
    apply_attrs(&mut graph, Some(&TesaAttrs::parse(tesa).unwrap())).unwrap();
    let pruned = graph.clone();
    propagate(&mut graph, &PropagateOptions::default()).unwrap();
    prepare_for_lowering(&mut graph, true).unwrap();
    spartac::rewrite::to_half(&mut graph, DType::F16).unwrap();
    let p = plan(&graph, &PlanOptions::default()).unwrap();
    let model = lower_model(&graph, &p, &ModelOptions::default(), &mut |_, _| {}).unwrap();
    let convs = model.program.kernels.iter().filter(|k| k.name.starts_with("conv_")).count();
    assert_eq!(convs, 2);
    for seed in [1, 2] {
        let inputs = spartac::reference::random_inputs(&pruned, seed);
        let want = execute_zeroing_pruned(&pruned, &inputs).unwrap();
        let got = run_cpu(&model, &inputs).unwrap();
        for ((name, g), (_, w)) in got.iter().zip(&want) {
            let e = relative_error(g, w);
            assert!(e <= 1e-2 && e > 0.0, "{name}: relative error {e:.3e}");
        }
    }
}

/// `--dtype bf16` on a block-sparse model: the planned matmuls run on bf16 kernels (the
/// weights' TeSA becomes bf16, not fp16: a pruned MatMul used to be planned as fp16 under bf16
/// activations and refused), within bf16 rounding of the reference, and every kernel compiles.
#[test]
fn a_block_sparse_block_in_bf16_plans_bf16_kernels() {
    const BLOCK50: &str = r#"{ "tensors": { "w": { "block_magnitude": { "block": [16, 16], "sparsity": 0.5 } } } }"#;
    let mut graph = small_block();
    apply_attrs(&mut graph, Some(&TesaAttrs::parse(BLOCK50).unwrap())).unwrap();
    let pruned = graph.clone();
    propagate(&mut graph, &PropagateOptions::default()).unwrap();
    prepare_for_lowering(&mut graph, true).unwrap();
    spartac::rewrite::to_half(&mut graph, DType::BF16).unwrap();
    let p = plan(&graph, &PlanOptions::default()).unwrap();
    assert!(!p.operators.is_empty() && p.operators.iter().all(|op| op.dtype == "bf16"), "bf16 plans");
    let model = lower_model(&graph, &p, &ModelOptions::default(), &mut |_, _| {}).unwrap();
    assert!(model.stats.sparse_ops >= 1, "{:?}", model.stats);
    for seed in [1, 2] {
        let inputs = spartac::reference::random_inputs(&pruned, seed);
        let want = execute_zeroing_pruned(&pruned, &inputs).unwrap();
        let got = run_cpu(&model, &inputs).unwrap();
        for ((name, g), (_, w)) in got.iter().zip(&want) {
            let e = relative_error(g, w);
            assert!(e <= 3e-2 && e > 0.0, "{name}: relative error {e:.3e}");
        }
    }
    nvrtc_compiles(&model);
}

/// A `rows × cols` weight of small values in a fixed pattern: `((i·seed mod 97) − 48) / div`.
fn seeded_weight(rows: usize, cols: usize, seed: usize, div: f32) -> Tensor {
    Tensor::from_vec(vec![rows, cols], (0..rows * cols).map(|i| ((i * seed % 97) as f32 - 48.0) / div).collect())
}

/// A vector of `n` values rising linearly across it: `shift + scale·(i/n − 1/2)`.
fn ramp(n: usize, scale: f32, shift: f32) -> Tensor {
    Tensor::from_vec(vec![n], (0..n).map(|i| shift + scale * (i as f32 / n as f32 - 0.5)).collect())
}

/// A pre-LN block (GPT-2's order), 64 wide: `r1 = x + W1·LN1(x) + b1`, `y = r1 + W2·LN2(r1) + b2`.
/// The residual sum `r1` is read by LN2 and by the second residual Add, and is an output too.
fn pre_ln_block() -> Graph {
    pre_ln_graph("pre_ln_block", [2, 16, 64], [0.0; 6])
}

/// The pre-LN pair of [`pre_ln_block`] over `[batch, sequence, width]`, each of b1, b2, γ1, β1,
/// γ2, β2 a ramp across the width shifted by `shifts` (in that order).
fn pre_ln_graph(name: &str, shape: [usize; 3], shifts: [f32; 6]) -> Graph {
    let n = shape[2];
    let w = |seed: usize| seeded_weight(n, n, seed, 300.0);
    let row = |scale: f32, shift: f32| ramp(n, scale, shift);
    let [b1, b2, g1, be1, g2, be2] = shifts;
    let bytes = ModelBuilder::new(name, 17)
        .input("x", DType::F32, &fixed(&shape))
        .output("y", DType::F32, &fixed(&shape))
        .output("r1", DType::F32, &fixed(&shape))
        .init("w1", &w(31))
        .init("w2", &w(53))
        .init("b1", &row(0.2, b1))
        .init("b2", &row(-0.3, b2))
        .init("g1", &row(1.0, g1))
        .init("be1", &row(0.1, be1))
        .init("g2", &row(-1.5, g2))
        .init("be2", &row(0.4, be2))
        .node("ln1", "LayerNormalization", &["x", "g1", "be1"], &["n1"], vec![("axis", A::I(-1))])
        .node("mm1", "MatMul", &["n1", "w1"], &["h1"], vec![])
        .node("bias1", "Add", &["h1", "b1"], &["a1"], vec![])
        .node("res1", "Add", &["a1", "x"], &["r1"], vec![])
        .node("ln2", "LayerNormalization", &["r1", "g2", "be2"], &["n2"], vec![("axis", A::I(-1))])
        .node("mm2", "MatMul", &["n2", "w2"], &["h2"], vec![])
        .node("bias2", "Add", &["h2", "b2"], &["a2"], vec![])
        .node("res2", "Add", &["a2", "r1"], &["y"], vec![])
        .bytes();
    load_model_bytes(&bytes, name, &LoadOptions::default()).unwrap()
}

/// The kernels whose names start with `prefix`.
fn kernels_named(model: &ModelProgram, prefix: &str) -> usize {
    model.program.kernels.iter().filter(|k| k.name.starts_with(prefix)).count()
}

/// Pre-LN: LN2 computes its input (the residual Add) in its kernel and writes the sum out in
/// the same pass for the second residual Add and the graph output; f32 and fp16 both match.
#[test]
fn a_pre_ln_block_fuses_the_residual_add_into_the_layernorm_and_writes_the_sum() {
    let (graph, model) = compile(pre_ln_block(), None, &ModelOptions::default());
    assert_eq!(model.stats.fused_norms, 1, "LN2 takes the residual Add (LN1 reads the input): {:?}", model.stats);
    assert_eq!(kernels_named(&model, "layernorm_fused_ln2"), 1);
    // Steps: LN1, mm1, LN2 with res1, mm2, res2: no step of its own for the first residual.
    let labels: Vec<&str> = model.program.steps.iter().map(|s| s.label.as_str()).collect();
    assert_eq!(labels, ["ln1", "mm1", "ln2", "mm2", "res2"], "{}", model.program.to_text());
    let fused = model.program.steps.iter().find(|s| s.label == "ln2").unwrap();
    let Op::Nodes(nodes) = &fused.op else { panic!("the fused LayerNorm runs its nodes") };
    let ops: Vec<&str> = nodes.iter().map(|n| n.op_type.as_str()).collect();
    assert_eq!(ops, ["Add", "LayerNormalization"]);
    assert!(matches!(nodes[0].outputs[0], Operand::Buf { .. }), "the sum is written out");
    for seed in [1, 2] {
        let inputs = spartac::reference::random_inputs(&graph, seed);
        let want = spartac::reference::execute(&graph, &inputs).unwrap();
        let got = run_cpu(&model, &inputs).unwrap();
        assert_eq!(got.len(), 2);
        for ((name, g), (_, w)) in got.iter().zip(&want) {
            let e = relative_error(g, w);
            assert!(e <= 1e-5, "{name}: relative error {e:.3e}");
        }
    }
    let (_, half) = compile_half(pre_ln_block(), DType::F16);
    // In fp16 LN1 takes the input's Cast to fp16 as well (and writes it out for res1).
    assert_eq!(half.stats.fused_norms, 2, "{}", half.program.to_text());
    let reference = pre_ln_block();
    let inputs = spartac::reference::random_inputs(&reference, 3);
    let want = spartac::reference::execute(&reference, &inputs).unwrap();
    for ((name, g), (_, w)) in run_cpu(&half, &inputs).unwrap().iter().zip(&want) {
        let e = relative_error(g, w);
        assert!(e <= 1e-2, "{name}: relative error {e:.3e} in fp16");
    }
    nvrtc_compiles(&model);
    nvrtc_compiles(&half);
}

/// A residual block's tail and the next matmul: `z = relu(x·W + b + x)·W2`, 256 wide (dense:
/// the library's GEMMs).
fn residual_tail() -> Graph {
    let w = Tensor::from_vec(vec![256, 256], (0..256 * 256).map(|i| ((i * 37 % 101) as f32 - 50.0) / 900.0).collect());
    let b = Tensor::from_vec(vec![256], (0..256).map(|i| (i as f32 / 256.0 - 0.5) * 0.4).collect());
    let bytes = ModelBuilder::new("residual_tail", 17)
        .input("x", DType::F32, &fixed(&[64, 256]))
        .output("z", DType::F32, &fixed(&[64, 256]))
        .init("w", &w)
        .init("b", &b)
        .init("w2", &w)
        .node("mm", "MatMul", &["x", "w"], &["h"], vec![])
        .node("bias", "Add", &["h", "b"], &["a"], vec![])
        .node("res", "Add", &["a", "x"], &["r"], vec![])
        .node("act", "Relu", &["r"], &["y"], vec![])
        .node("mm2", "MatMul", &["y", "w2"], &["z"], vec![])
        .bytes();
    load_model_bytes(&bytes, "residual_tail", &LoadOptions::default()).unwrap()
}

/// In fp16 the residual Add and the ReLU after a dense matmul run in its library call (C the
/// residual, its bias and ReLU the call's epilogue): one step, and the CPU executor of that
/// step computes the graph's nodes; without the library's epilogue they stay a step of their own.
#[test]
fn a_residual_add_and_relu_after_a_dense_fp16_matmul_run_in_the_library_call() {
    let (_, model) = compile_half(residual_tail(), DType::F16);
    let gemms: Vec<_> = model
        .program
        .steps
        .iter()
        .flat_map(|s| &s.launches)
        .filter_map(|l| match l {
            spartac::program::Launch::Gemm { bias, relu, residual, accumulate, m, k, n, .. } => {
                Some((*m, *k, *n, bias.is_some(), *relu, residual.is_some(), *accumulate))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        gemms,
        [(64, 256, 256, true, true, true, false), (64, 256, 256, false, false, false, false)],
        "{}",
        model.program.to_text()
    );
    let step = model.program.steps.iter().find(|s| s.label == "mm").unwrap();
    let Op::Nodes(nodes) = &step.op else { panic!("the step computes the graph's nodes") };
    let ops: Vec<&str> = nodes.iter().map(|n| n.op_type.as_str()).collect();
    assert_eq!(ops, ["MatMul", "Add", "Add", "Relu"]);
    assert!(!model.program.steps.iter().any(|s| s.label == "res" || s.label == "act"), "{}", model.program.to_text());
    let read = decode(&encode(&model, &[]).unwrap()).unwrap().model;
    assert_eq!(read, model, "the artifact reads back as written");
    let reference = residual_tail();
    let mut graph = residual_tail();
    apply_attrs(&mut graph, None).unwrap();
    propagate(&mut graph, &PropagateOptions::default()).unwrap();
    prepare_for_lowering(&mut graph, true).unwrap();
    spartac::rewrite::to_half(&mut graph, DType::F16).unwrap();
    let p = plan(&graph, &PlanOptions::default()).unwrap();
    let unfused = ModelOptions { library_epilogue: false, ..ModelOptions::default() };
    let unfused = lower_model(&graph, &p, &unfused, &mut |_, _| {}).unwrap();
    assert!(
        unfused
            .program
            .steps
            .iter()
            .flat_map(|s| &s.launches)
            .all(|l| !matches!(l, spartac::program::Launch::Gemm { residual: Some(_), .. })),
        "--no-library-epilogue keeps the residual out of the call"
    );
    for seed in [1, 2] {
        let inputs = spartac::reference::random_inputs(&reference, seed);
        let want = spartac::reference::execute(&reference, &inputs).unwrap();
        for m in [&model, &unfused] {
            for ((name, g), (_, w)) in run_cpu(m, &inputs).unwrap().iter().zip(&want) {
                let e = relative_error(g, w);
                assert!(e <= 1e-2, "{name}: relative error {e:.3e} in fp16");
            }
        }
    }
}

/// The pipeline of `compile` in a 16-bit type (`spartac compile --dtype`).
fn compile_half(mut graph: Graph, dtype: DType) -> (Graph, ModelProgram) {
    apply_attrs(&mut graph, None).unwrap();
    propagate(&mut graph, &PropagateOptions::default()).unwrap();
    prepare_for_lowering(&mut graph, true).unwrap();
    spartac::rewrite::to_half(&mut graph, dtype).unwrap();
    let p = plan(&graph, &PlanOptions::default()).unwrap();
    let model = lower_model(&graph, &p, &ModelOptions::default(), &mut |_, _| {}).unwrap();
    (graph, model)
}

/// Q, K and V projections of one activation (hidden 128, with or without bias Adds) feeding
/// an attention: `softmax(q·kᵀ)·v`.
fn qkv_block(biases: [bool; 3]) -> Graph {
    let h = 128;
    let w = |seed: usize| -> Tensor {
        Tensor::from_vec(vec![h, h], (0..h * h).map(|i| ((i * seed % 89) as f32 - 44.0) / 400.0).collect())
    };
    let mut b = ModelBuilder::new("qkv_block", 17)
        .input("x", DType::F32, &fixed(&[2, 16, h]))
        .output("o", DType::F32, &fixed(&[2, 16, h]))
        .init("wq", &w(7))
        .init("wk", &w(11))
        .init("wv", &w(13));
    for (i, p) in ["q", "k", "v"].into_iter().enumerate() {
        let bias = biases[i];
        let mm_out = if bias { format!("{p}0") } else { p.to_string() };
        b = b.node(&format!("mm_{p}"), "MatMul", &["x", &format!("w{p}")], &[&mm_out], vec![]);
        if bias {
            let bt = Tensor::from_vec(vec![h], (0..h).map(|j| (j + 17 * i) as f32 / h as f32 - 0.5).collect());
            b = b.init(&format!("b{p}"), &bt).node(
                &format!("bias_{p}"),
                "Add",
                &[&mm_out, &format!("b{p}")],
                &[p],
                vec![],
            );
        }
    }
    let bytes = b
        .node("tr", "Transpose", &["k"], &["kt"], vec![("perm", A::Is(vec![0, 2, 1]))])
        .node("scores", "MatMul", &["q", "kt"], &["s"], vec![])
        .node("sm", "Softmax", &["s"], &["p"], vec![("axis", A::I(-1))])
        .node("pv", "MatMul", &["p", "v"], &["o"], vec![])
        .bytes();
    load_model_bytes(&bytes, "qkv_block", &LoadOptions::default()).unwrap()
}

/// A BatchNormalization after a Conv folds into the Conv's weight and bias at compile time:
/// the model compiles (BatchNorm has no GPU kernel of its own) and computes what it did.
#[test]
fn a_batchnorm_after_a_conv_folds_into_it() {
    let (ci, co) = (3, 4);
    let w =
        Tensor::from_vec(vec![co, ci, 3, 3], (0..co * ci * 9).map(|i| ((i * 7 % 23) as f32 - 11.0) / 20.0).collect());
    let per = |f: fn(usize) -> f32| Tensor::from_vec(vec![co], (0..co).map(f).collect());
    for with_bias in [false, true] {
        let mut b = ModelBuilder::new("conv_bn", 17)
            .input("x", DType::F32, &fixed(&[2, ci, 8, 8]))
            .output("y", DType::F32, &fixed(&[2, co, 8, 8]))
            .init("w", &w)
            .init("scale", &per(|i| 0.5 + i as f32 * 0.25))
            .init("beta", &per(|i| i as f32 * 0.1 - 0.2))
            .init("mean", &per(|i| 0.3 - i as f32 * 0.05))
            .init("var", &per(|i| 0.8 + i as f32 * 0.3))
            .init("cb", &per(|i| 0.05 * i as f32));
        let conv_in: Vec<&str> = if with_bias { vec!["x", "w", "cb"] } else { vec!["x", "w"] };
        b = b
            .node("conv", "Conv", &conv_in, &["c"], vec![("pads", A::Is(vec![1, 1, 1, 1]))])
            .node(
                "bn",
                "BatchNormalization",
                &["c", "scale", "beta", "mean", "var"],
                &["n"],
                vec![("epsilon", A::F(1e-3))],
            )
            .node("relu", "Relu", &["n"], &["y"], vec![]);
        let original = load_model_bytes(&b.bytes(), "conv_bn", &LoadOptions::default()).unwrap();
        let mut graph = original.clone();
        apply_attrs(&mut graph, None).unwrap();
        let report = prepare(&mut graph, &RewriteOptions::default()).unwrap();
        assert_eq!(report.batchnorm.folded, 1, "bias {with_bias}");
        assert!(graph.nodes.iter().all(|n| n.op_type != "BatchNormalization"), "bias {with_bias}");
        let (_, model) = compile(original.clone(), None, &ModelOptions::default());
        assert_compiled_matches(&original, &model, &[3, 4], 1e-5, &format!("bias {with_bias}"));
        nvrtc_compiles(&model);
    }
}

/// GPT-2's Split (Q, K, V out of one MatMul) and Swin's zero Pad run as gathers through
/// traced source maps, a Split's outputs in one step; the compiled model computes what the
/// graph does and NVRTC compiles it.
#[test]
fn split_and_zero_pad_run_as_gathers() {
    let bytes = ModelBuilder::new("split_pad", 18)
        .input("x", DType::F32, &fixed(&[2, 8, 5]))
        .output("p", DType::F32, &fixed(&[3, 4, 8]))
        .output("b", DType::F32, &fixed(&[2, 3, 5]))
        .output("c", DType::F32, &fixed(&[2, 3, 5]))
        .init("split", &Tensor::from_vec(vec![3], vec![2i64, 3, 3]))
        .init("pads", &Tensor::from_vec(vec![6], vec![0i64, 1, 2, 1, 1, 1]))
        .init("zero", &Tensor::from_vec(vec![], vec![0.0f32]))
        .node("split", "Split", &["x", "split"], &["a", "b", "c"], vec![("axis", A::I(1))])
        .node("pad", "Pad", &["a", "pads", "zero"], &["p"], vec![])
        .bytes();
    let original = load_model_bytes(&bytes, "split_pad", &LoadOptions::default()).unwrap();
    let (_, model) = compile(original.clone(), None, &ModelOptions::default());
    assert_eq!(model.program.kernels.iter().filter(|k| k.name.starts_with("remap_")).count(), 4);
    assert_compiled_matches(&original, &model, &[1, 2], 0.0, "a gather copies exactly");
    nvrtc_compiles(&model);
}

/// Swin's data movement, channels last: a shifted window's roll (two Slices and a Concat per
/// axis), the window partition's zero Pad, Reshape and Transpose, and a patch merging's four
/// strided Slices and their Concat; each chain from one tensor is one gather (rows of
/// channels), exact against the graph, a roll's Concat in its chain even where an Add could
/// read the Concat's parts in place; a chain whose middle value is read elsewhere stops there;
/// NVRTC compiles the gathers.
#[test]
fn chains_of_data_movement_from_one_tensor_run_as_one_gather() {
    let i = |v: &[i64]| Tensor::from_vec(vec![v.len()], v.to_vec());
    let bytes = ModelBuilder::new("swin_moves", 18)
        .input("x", DType::F32, &fixed(&[2, 6, 6, 8]))
        .output("windows", DType::F32, &fixed(&[2, 2, 2, 4, 4, 8]))
        .output("merged", DType::F32, &fixed(&[2, 3, 3, 32]))
        .output("shifted", DType::F32, &fixed(&[2, 6, 6, 8]))
        .output("seen", DType::F32, &fixed(&[2, 6, 6, 8]))
        .output("rolled_sum", DType::F32, &fixed(&[2, 6, 6, 8]))
        .init("s0", &i(&[2]))
        .init("e0", &i(&[6]))
        .init("s1", &i(&[0]))
        .init("e1", &i(&[2]))
        .init("ax1", &i(&[1]))
        .init("ax2", &i(&[2]))
        .init("pads", &i(&[0, 1, 1, 0, 0, 1, 1, 0]))
        .init("zero", &Tensor::from_vec(vec![], vec![0.0f32]))
        .init("shape6", &i(&[2, 2, 4, 2, 4, 8]))
        .init("m0", &i(&[0, 0]))
        .init("m1", &i(&[1, 0]))
        .init("m2", &i(&[0, 1]))
        .init("m3", &i(&[1, 1]))
        .init("mend", &i(&[6, 6]))
        .init("max", &i(&[1, 2]))
        .init("mstep", &i(&[2, 2]))
        // Roll by 2 along H, then along W.
        .node("h_a", "Slice", &["x", "s0", "e0", "ax1"], &["ha"], vec![])
        .node("h_b", "Slice", &["x", "s1", "e1", "ax1"], &["hb"], vec![])
        .node("h_cat", "Concat", &["ha", "hb"], &["rh"], vec![("axis", A::I(1))])
        .node("w_a", "Slice", &["rh", "s0", "e0", "ax2"], &["wa"], vec![])
        .node("w_b", "Slice", &["rh", "s1", "e1", "ax2"], &["wb"], vec![])
        .node("w_cat", "Concat", &["wa", "wb"], &["shifted"], vec![("axis", A::I(2))])
        // The shifted tensor is an output too: the window partition starts a chain of its own.
        .node("pad", "Pad", &["shifted", "pads", "zero"], &["padded"], vec![])
        .node("split_windows", "Reshape", &["padded", "shape6"], &["r6"], vec![])
        .node("partition", "Transpose", &["r6"], &["windows"], vec![("perm", A::Is(vec![0, 1, 3, 2, 4, 5]))])
        // Patch merging: x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2].
        .node("q0", "Slice", &["x", "m0", "mend", "max", "mstep"], &["x0"], vec![])
        .node("q1", "Slice", &["x", "m1", "mend", "max", "mstep"], &["x1"], vec![])
        .node("q2", "Slice", &["x", "m2", "mend", "max", "mstep"], &["x2"], vec![])
        .node("q3", "Slice", &["x", "m3", "mend", "max", "mstep"], &["x3"], vec![])
        .node("merge", "Concat", &["x0", "x1", "x2", "x3"], &["merged"], vec![("axis", A::I(-1))])
        // A roll whose Concat an elementwise Add reads: the chain takes the Concat (one gather,
        // the Add reading its output) rather than the Add reading the Concat's parts in place.
        .node("r_a", "Slice", &["x", "s0", "e0", "ax1"], &["ra"], vec![])
        .node("r_b", "Slice", &["x", "s1", "e1", "ax1"], &["rb"], vec![])
        .node("r_cat", "Concat", &["ra", "rb"], &["rolled"], vec![("axis", A::I(1))])
        .node("r_add", "Add", &["rolled", "x"], &["rolled_sum"], vec![])
        // A Slice whose output another node reads too: no chain through it.
        .node("cut", "Slice", &["x", "s1", "e0", "ax2"], &["cut"], vec![])
        .node("cut2", "Slice", &["cut", "s1", "e0", "ax1"], &["seen_a"], vec![])
        .node("use", "Add", &["cut", "seen_a"], &["seen"], vec![])
        .bytes();
    let original = load_model_bytes(&bytes, "swin_moves", &LoadOptions::default()).unwrap();
    let (_, model) = compile(original.clone(), None, &ModelOptions::default());
    assert_eq!(model.stats.fused_movements, 4, "{}", model.program.to_text());
    assert_eq!(model.stats.fused_concats, 0);
    let names: Vec<&str> = model.program.kernels.iter().map(|k| k.name.as_str()).collect();
    for chain in ["movement_w_cat", "movement_partition", "movement_merge", "movement_r_cat"] {
        assert!(names.contains(&chain), "{chain} in {names:?}");
    }
    // Roll and partition move rows of 8 channels, the patch merging too: maps of a word per row.
    let map = |name: &str| model.program.buffers.iter().find(|b| b.name == name).map(|b| b.len);
    let maps: Vec<Option<usize>> = ["w_cat.map", "partition.map", "merge.map"].into_iter().map(map).collect();
    assert_eq!(maps, [Some(2 * 6 * 6), Some(2 * 2 * 2 * 4 * 4), Some(2 * 3 * 3 * 4)]);
    // The Slices around the value read twice stay remaps of their own; a whole-tensor Slice
    // moves one run.
    assert_eq!(map("cut.map"), Some(1));
    assert_compiled_matches(&original, &model, &[1, 2], 0.0, "a gather copies exactly");
    let unfused =
        compile(original.clone(), None, &ModelOptions { fuse_elementwise: false, ..ModelOptions::default() }).1;
    assert_eq!(unfused.stats.fused_movements, 0);
    assert!(unfused.program.steps.len() >= model.program.steps.len() + 9);
    nvrtc_compiles(&model);
}

/// MobileNetV3's and EfficientNet's activations: a Sigmoid after a planned MatMul (the plan notes
/// it, no kernel fuses it: it runs as its own step instead of failing the kernel choice), then
/// HardSwish, HardSigmoid (non-default α, β) and LeakyRelu as generated elementwise code; the
/// compiled model computes what the graph does and NVRTC compiles it.
#[test]
fn sigmoid_after_a_matmul_and_the_hard_activations_compile() {
    let (m, k, n) = (16, 32, 24);
    let w = Tensor::from_vec(vec![k, n], (0..k * n).map(|i| ((i * 11 % 29) as f32 - 14.0) / 9.0).collect());
    let b = ModelBuilder::new("acts", 17)
        .input("x", DType::F32, &fixed(&[m, k]))
        .input("x2", DType::F32, &fixed(&[m, n]))
        .output("y", DType::F32, &fixed(&[m, n]))
        .init("w", &w)
        .node("mm", "MatMul", &["x", "w"], &["h"], vec![])
        .node("sig", "Sigmoid", &["h"], &["s"], vec![])
        .node("sub", "Sub", &["x2", "s"], &["d"], vec![])
        .node("hsw", "HardSwish", &["d"], &["e"], vec![])
        .node("hsg", "HardSigmoid", &["e"], &["f"], vec![("alpha", A::F(0.3)), ("beta", A::F(0.4))])
        .node("sub2", "Sub", &["f", "s"], &["g"], vec![])
        .node("lrelu", "LeakyRelu", &["g"], &["y"], vec![("alpha", A::F(0.2))]);
    let original = load_model_bytes(&b.bytes(), "acts", &LoadOptions::default()).unwrap();
    let (_, model) = compile(original.clone(), None, &ModelOptions::default());
    assert_compiled_matches(&original, &model, &[1, 2], 1e-5, "");
    nvrtc_compiles(&model);
}

/// ONNX's Gelu (opset 20) in both forms as elementwise steps (the erf form, and
/// `approximate="tanh"`), and a Tanh and a Pow by 3 in f16 (the MUFU tanh of 16-bit values,
/// the cube as products): the compiled model computes what the graph does, in f32 and f16.
#[test]
fn gelu_in_both_forms_tanh_and_a_cube_compile_in_f32_and_f16() {
    let (m, n) = (16, 40);
    let b = ModelBuilder::new("gelus", 20)
        .input("x", DType::F32, &fixed(&[m, n]))
        .output("y", DType::F32, &fixed(&[m, n]))
        .init("three", &Tensor::from_vec(vec![], vec![3.0f32]))
        .node("erf_form", "Gelu", &["x"], &["a"], vec![])
        .node("tanh_form", "Gelu", &["x"], &["b"], vec![("approximate", A::S("tanh"))])
        .node("sum", "Add", &["a", "b"], &["c"], vec![])
        .node("th", "Tanh", &["c"], &["d"], vec![])
        .node("cube", "Pow", &["x", "three"], &["e"], vec![])
        .node("out", "Add", &["d", "e"], &["y"], vec![]);
    let original = load_model_bytes(&b.bytes(), "gelus", &LoadOptions::default()).unwrap();
    let (_, model) = compile(original.clone(), None, &ModelOptions::default());
    assert_compiled_matches(&original, &model, &[1, 2], 1e-5, "f32");
    nvrtc_compiles(&model);
    let (_, model) = compile_half(original.clone(), DType::F16);
    // Past its definition (every kernel includes the helpers), a use.
    let uses = |k: &spartac::program::KernelCode| k.source.matches("op_tanh_16(").count() - 1;
    assert!(model.program.kernels.iter().any(|k| uses(k) > 0), "the 16-bit tanh");
    assert_compiled_matches(&original, &model, &[1, 2], 1e-2, "f16");
    nvrtc_compiles(&model);
}

/// DenseNet's order (BatchNorm → Relu → Conv, pools between blocks): the BatchNorm that no Conv
/// precedes becomes a channel affine (Mul, Add), MaxPool (padded, ceil mode) and AveragePool
/// (with and without the padding counted) get their GPU kernels, and the compiled model
/// computes what the graph does; every kernel NVRTC-compiles.
#[test]
fn a_batchnorm_without_a_conv_before_it_becomes_an_affine_and_pools_compile() {
    let c = 4;
    let w = Tensor::from_vec(vec![c, c, 1, 1], (0..c * c).map(|i| ((i * 5 % 13) as f32 - 6.0) / 8.0).collect());
    let per = |f: fn(usize) -> f32| Tensor::from_vec(vec![c], (0..c).map(f).collect());
    for include_pad in [0, 1] {
        let b = ModelBuilder::new("bn_pool", 17)
            .input("x", DType::F32, &fixed(&[2, c, 11, 10]))
            .output("y", DType::F32, &fixed(&[2, c, 4, 3]))
            .init("w", &w)
            .init("scale", &per(|i| 0.5 + i as f32 * 0.25))
            .init("beta", &per(|i| i as f32 * 0.1 - 0.2))
            .init("mean", &per(|i| 0.3 - i as f32 * 0.05))
            .init("var", &per(|i| 0.8 + i as f32 * 0.3))
            .node("relu0", "Relu", &["x"], &["r0"], vec![])
            .node("bn", "BatchNormalization", &["r0", "scale", "beta", "mean", "var"], &["n"], vec![])
            .node("relu", "Relu", &["n"], &["r"], vec![])
            .node("conv", "Conv", &["r", "w"], &["cv"], vec![])
            .node(
                "max",
                "MaxPool",
                &["cv"],
                &["m"],
                vec![
                    ("kernel_shape", A::Is(vec![3, 3])),
                    ("strides", A::Is(vec![2, 2])),
                    ("pads", A::Is(vec![1, 1, 1, 1])),
                    ("ceil_mode", A::I(1)),
                ],
            )
            .node(
                "avg",
                "AveragePool",
                &["m"],
                &["y"],
                vec![
                    ("kernel_shape", A::Is(vec![2, 3])),
                    ("strides", A::Is(vec![2, 2])),
                    ("pads", A::Is(vec![1, 0, 1, 1])),
                    ("count_include_pad", A::I(include_pad)),
                ],
            );
        let original = load_model_bytes(&b.bytes(), "bn_pool", &LoadOptions::default()).unwrap();
        let mut graph = original.clone();
        apply_attrs(&mut graph, None).unwrap();
        let report = prepare(&mut graph, &RewriteOptions::default()).unwrap();
        assert_eq!((report.batchnorm.folded, report.batchnorm.affine), (0, 1));
        assert!(graph.nodes.iter().all(|n| n.op_type != "BatchNormalization"));
        let (_, model) = compile(original.clone(), None, &ModelOptions::default());
        let pools = model
            .program
            .kernels
            .iter()
            .filter(|k| k.name.starts_with("maxpool_") || k.name.starts_with("averagepool_"));
        assert_eq!(pools.count(), 2);
        assert_compiled_matches(&original, &model, &[5, 6], 1e-5, &format!("count_include_pad {include_pad}"));
        nvrtc_compiles(&model);
    }
}

/// The mask transformers' exports build, `Where(And(ones[1, 1, S, 1], pad[B, 1, 1, S]), 0, -1e4)`,
/// is `[B, 1, S, S]` with every query row the same: the all-true operand goes, the mask is
/// `[B, 1, 1, S]` (the attention reads it once per key tile), and the model computes the same.
#[test]
fn an_all_true_mask_operand_is_dropped_and_the_mask_narrowed() {
    let (b, h, s, d) = (2, 3, 8, 16);
    let bytes = ModelBuilder::new("hf_mask", 17)
        .input("q", DType::F32, &fixed(&[b, h, s, d]))
        .input("k", DType::F32, &fixed(&[b, h, d, s]))
        .input("v", DType::F32, &fixed(&[b, h, s, d]))
        .input("pad", DType::Bool, &fixed(&[b, 1, 1, s]))
        .output("o", DType::F32, &fixed(&[b, h, s, d]))
        .init("ones", &Tensor::from_vec(vec![1, 1, s, 1], vec![true; s]))
        .init("zero", &Tensor::from_vec(vec![], vec![0.0f32]))
        .init("low", &Tensor::from_vec(vec![], vec![-1e4f32]))
        .init("scale", &Tensor::from_vec(vec![], vec![0.25f32]))
        .node("and", "And", &["ones", "pad"], &["keep"], vec![])
        .node("where", "Where", &["keep", "zero", "low"], &["mask"], vec![])
        .node("qk", "MatMul", &["q", "k"], &["s0"], vec![])
        .node("mul", "Mul", &["s0", "scale"], &["s1"], vec![])
        .node("add", "Add", &["s1", "mask"], &["s2"], vec![])
        .node("sm", "Softmax", &["s2"], &["p"], vec![("axis", A::I(-1))])
        .node("pv", "MatMul", &["p", "v"], &["o"], vec![])
        .bytes();
    let original = load_model_bytes(&bytes, "hf_mask", &LoadOptions::default()).unwrap();
    let mut graph = original.clone();
    apply_attrs(&mut graph, None).unwrap();
    let report = prepare(&mut graph, &RewriteOptions::default()).unwrap();
    assert_eq!((report.narrow.dropped, report.narrow.narrowed), (1, 1));
    assert!(graph.nodes.iter().all(|n| n.op_type != "And"));
    let mask = graph.find_value("mask").unwrap();
    assert_eq!(graph.value(mask).fact.shape, [b, 1, 1, s], "the mask keeps one row per batch entry");
    let (_, model) = compile(original.clone(), None, &ModelOptions::default());
    let kernels = |prefix: &str| model.program.kernels.iter().filter(|k| k.name.starts_with(prefix)).count();
    assert_eq!((kernels("attention_"), kernels("softmax_")), (1, 0), "the attention fuses with the narrow mask");
    assert_compiled_matches(&original, &model, &[5, 6], 1e-5, "");
    nvrtc_compiles(&model);
    // An operand that is not the identity everywhere stays.
    let mut graph = original.clone();
    if let Some(spartac::ir::Initializer::Dense(t)) = graph.initializers.get_mut(&graph.find_value("ones").unwrap()) {
        let mut v = vec![true; s];
        v[3] = false;
        *t = Tensor::from_vec(vec![1, 1, s, 1], v);
    }
    apply_attrs(&mut graph, None).unwrap();
    assert_eq!(prepare(&mut graph, &RewriteOptions::default()).unwrap().narrow.dropped, 0);
}

/// Swin's shifted-window attention: the scores plus a relative position bias, then viewed as
/// `[images, windows, heads, N, N]` for a per-window mask `[1, windows, 1, N, N]` and viewed
/// back. The Add between the two Reshapes becomes one Add of a `[images·windows, 1, N, N]`
/// constant, the attention fuses (one kernel, no Softmax step), and the model computes the
/// same; a mask that varies per image too is laid out the same way, one that varies along
/// neither split axis stays `[1, …]`.
#[test]
fn a_per_window_mask_between_reshapes_joins_the_fused_attention() {
    let (imgs, wins, h, n, d) = (2, 4, 2, 16, 32);
    let b = imgs * wins;
    let table = |shape: &[usize]| -> Tensor {
        let len: usize = shape.iter().product();
        Tensor::from_vec(
            shape.to_vec(),
            (0..len).map(|i| if (i * 7) % 5 == 0 { -100.0f32 } else { (i % 3) as f32 * 0.1 }).collect(),
        )
    };
    for (mask_shape, lead) in [(vec![1, wins, 1, n, n], b), (vec![imgs, wins, 1, n, n], b), (vec![1, 1, h, n, n], 1)] {
        let i = |v: &[i64]| Tensor::from_vec(vec![v.len()], v.to_vec());
        let bytes = ModelBuilder::new("shifted_windows", 17)
            .input("q", DType::F32, &fixed(&[b, h, n, d]))
            .input("k", DType::F32, &fixed(&[b, h, d, n]))
            .input("v", DType::F32, &fixed(&[b, h, n, d]))
            .output("o", DType::F32, &fixed(&[b, h, n, d]))
            .init("bias", &table(&[h, n, n]))
            .init("mask", &table(&mask_shape))
            .init("split", &i(&[imgs as i64, wins as i64, h as i64, n as i64, n as i64]))
            .init("merge", &i(&[b as i64, h as i64, n as i64, n as i64]))
            .node("qk", "MatMul", &["q", "k"], &["s0"], vec![])
            .node("add_bias", "Add", &["s0", "bias"], &["s1"], vec![])
            .node("view5", "Reshape", &["s1", "split"], &["s2"], vec![])
            .node("add_mask", "Add", &["s2", "mask"], &["s3"], vec![])
            .node("view4", "Reshape", &["s3", "merge"], &["s4"], vec![])
            .node("sm", "Softmax", &["s4"], &["p"], vec![("axis", A::I(-1))])
            .node("pv", "MatMul", &["p", "v"], &["o"], vec![])
            .bytes();
        let original = load_model_bytes(&bytes, "shifted_windows", &LoadOptions::default()).unwrap();
        let mut graph = original.clone();
        apply_attrs(&mut graph, None).unwrap();
        let report = prepare(&mut graph, &RewriteOptions::default()).unwrap();
        assert_eq!(report.narrow.unsplit, 1, "{mask_shape:?}");
        assert!(graph.nodes.iter().all(|n| n.op_type != "Reshape"), "{mask_shape:?}");
        let add = graph.nodes.iter().find(|n| n.name == "add_mask").unwrap();
        let m = add.inputs[1].unwrap();
        assert_eq!(graph.fact(m).shape, [lead, if lead == 1 { h } else { 1 }, n, n], "{mask_shape:?}");
        let (_, model) = compile(original.clone(), None, &ModelOptions::default());
        let kernels = |prefix: &str| model.program.kernels.iter().filter(|k| k.name.starts_with(prefix)).count();
        assert_eq!((kernels("attention_"), kernels("softmax_")), (1, 0), "{mask_shape:?}: one fused attention");
        assert_compiled_matches(&original, &model, &[5, 6], 1e-5, &format!("{mask_shape:?}"));
        nvrtc_compiles(&model);
    }
}

/// A model with several ops the GPU runtime lacks fails with one error that names every such
/// op type, with its node count, first node and opset, and the unknown ones apart.
#[test]
fn every_op_without_a_gpu_kernel_is_named_in_one_error() {
    let bytes = ModelBuilder::new("gaps", 17)
        .input("x", DType::F32, &fixed(&[1, 4, 8, 8]))
        .output("y", DType::F32, &fixed(&[1, 4, 8, 8]))
        .node("elu_a", "Elu", &["x"], &["e1"], vec![])
        .node("softplus", "Softplus", &["e1"], &["s1"], vec![])
        .node("elu_b", "Elu", &["s1"], &["y"], vec![])
        .bytes();
    let mut graph = load_model_bytes(&bytes, "gaps", &LoadOptions::default()).unwrap();
    apply_attrs(&mut graph, None).unwrap();
    prepare(&mut graph, &RewriteOptions::default()).unwrap();
    let p = plan(&graph, &PlanOptions::default()).unwrap();
    let e = lower_model(&graph, &p, &ModelOptions::default(), &mut |_, _| {}).unwrap_err().to_string();
    assert!(e.contains("2 op types run on the CPU reference but have no GPU kernel yet"), "{e}");
    assert!(e.contains("Elu (2 nodes, first elu_a, opset 17)"), "{e}");
    assert!(e.contains("Softplus (1 node, first softplus, opset 17)"), "{e}");
    assert!(!e.contains('\n'), "one line: {e}");
}

/// MatMuls that share an input but feed no attention stay apart: their slices would be copies.
#[test]
fn projections_read_by_anything_but_an_attention_do_not_merge() {
    let h = 64;
    let w = |seed: usize| {
        Tensor::from_vec(vec![h, h], (0..h * h).map(|i| ((i * seed % 31) as f32 - 15.0) / 64.0).collect())
    };
    let bytes = ModelBuilder::new("three_heads", 17)
        .input("x", DType::F32, &fixed(&[4, h]))
        .output("a", DType::F32, &fixed(&[4, h]))
        .output("b", DType::F32, &fixed(&[4, h]))
        .output("c", DType::F32, &fixed(&[4, h]))
        .init("wa", &w(3))
        .init("wb", &w(5))
        .init("wc", &w(7))
        .node("mm_a", "MatMul", &["x", "wa"], &["a"], vec![])
        .node("mm_b", "MatMul", &["x", "wb"], &["b0"], vec![])
        .node("relu_b", "Relu", &["b0"], &["b"], vec![])
        .node("mm_c", "MatMul", &["x", "wc"], &["c"], vec![])
        .bytes();
    let mut graph = load_model_bytes(&bytes, "three_heads", &LoadOptions::default()).unwrap();
    apply_attrs(&mut graph, None).unwrap();
    let report = prepare(&mut graph, &RewriteOptions::default()).unwrap();
    assert_eq!(report.merge.sets, 0, "{:?}", report.merge);
    assert_eq!(graph.nodes.iter().filter(|n| n.op_type == "Slice").count(), 0);
}

/// The planned matmuls of `model`'s program (steps of `Op::Spmm`).
fn spmm_steps(model: &ModelProgram) -> usize {
    model.program.steps.iter().filter(|s| matches!(s.op, Op::Spmm { .. })).count()
}

/// Q, K and V merge into one planned MatMul (its bias in the epilogue when they have biases),
/// dense and with 90% of their 16×16 blocks pruned; the CPU executor matches the reference of
/// the pruned model, the attention reads the three slices in place, and `merge_matmuls: false`
/// (`--no-merge-qkv`) keeps three.
#[test]
fn q_k_and_v_merge_into_one_matmul_with_and_without_biases_and_block_sparsity() {
    const BLOCK90: &str = r#"{ "tensors": { "w*": { "block_magnitude": { "block": [16, 16], "sparsity": 0.9 } } } }"#;
    // No bias, all three, and Whisper's: Q and V with a bias, K without (zeros stand in for it).
    for biases in [[false; 3], [true; 3], [true, false, true]] {
        let bias = biases.contains(&true);
        for tesa in [None, Some(BLOCK90)] {
            let what = format!("biases {biases:?}, tesa {}", tesa.is_some());
            let (graph, model) = compile(qkv_block(biases), tesa, &ModelOptions::default());
            assert_eq!(spmm_steps(&model), 1, "{what}: one merged matmul\n{}", model.program.to_text());
            assert_eq!(kernels_named(&model, "remap_"), 0, "{what}: no Slice copies\n{}", model.program.to_text());
            assert_eq!(model.stats.planned_ops, 1, "{what}");
            assert_eq!(model.stats.fused_epilogues, usize::from(bias), "{what}: the merged bias in the epilogue");
            let merged: Vec<_> =
                graph.nodes.iter().filter(|n| n.op_type == "MatMul" && n.name.ends_with(".merged")).collect();
            assert_eq!(merged.len(), 1, "{what}");
            let w = graph.value(merged[0].inputs[1].unwrap());
            assert_eq!(w.fact.shape, [128, 384], "{what}: the weights side by side");
            if tesa.is_some() {
                // 90% of each weight's 64 blocks pruned: the merged TeSA keeps every pruned block.
                let t = w.tesa.as_ref().expect("the merged weight keeps its TeSA");
                let (nonzero, total) = t.nonzero_blocks(&[16, 16]);
                assert_eq!(total, 3 * 64, "{what}");
                assert!(nonzero <= 3 * 7, "{what}: {nonzero} of {total} blocks left");
                assert_eq!(model.stats.sparse_ops, 1, "{what}: the merged matmul runs sparse");
            }
            let mut pruned = qkv_block(biases);
            apply_attrs(&mut pruned, tesa.map(|t| TesaAttrs::parse(t).unwrap()).as_ref()).unwrap();
            assert_compiled_matches(&pruned, &model, &[1, 2], 1e-5, &what);
            nvrtc_compiles(&model);
        }
        // The switch: three planned matmuls, the same results.
        let mut graph = qkv_block(biases);
        apply_attrs(&mut graph, None).unwrap();
        propagate(&mut graph, &PropagateOptions::default()).unwrap();
        let options = spartac::rewrite::RewriteOptions { merge_matmuls: false, ..Default::default() };
        let report = spartac::rewrite::prepare(&mut graph, &options).unwrap();
        assert_eq!(report.merge.sets, 0);
        let p = plan(&graph, &PlanOptions::default()).unwrap();
        let apart = lower_model(&graph, &p, &ModelOptions::default(), &mut |_, _| {}).unwrap();
        assert_eq!(spmm_steps(&apart), 3, "bias {bias}: with --no-merge-qkv three matmuls");
        let (_, merged) = compile(qkv_block(biases), None, &ModelOptions::default());
        let inputs = spartac::reference::random_inputs(&graph, 5);
        let (a, b) = (run_cpu(&apart, &inputs).unwrap(), run_cpu(&merged, &inputs).unwrap());
        for ((name, x), (_, y)) in a.iter().zip(&b) {
            assert!(relative_error(x, y) <= 1e-5, "bias {bias}: {name}: merged and apart differ");
        }
    }
}

/// Post-LN layers (BERT's order), 128 wide, 256 rows: `h0 = LN0(x·W0 + b0 + x)`,
/// `u = relu(h0·W1 + b1)` (256 wide), `h2 = LN2(u·W2 + b2 + h0)`, `o = LN3(h2·W3 + h2)` (no β).
fn post_ln_layers() -> Graph {
    let w = |rows: usize, cols: usize, seed: usize| seeded_weight(rows, cols, seed, 400.0);
    let row = ramp;
    let bytes = ModelBuilder::new("post_ln_layers", 17)
        .input("x", DType::F32, &fixed(&[4, 64, 128]))
        .output("o", DType::F32, &fixed(&[4, 64, 128]))
        .init("w0", &w(128, 128, 31))
        .init("w1", &w(128, 256, 53))
        .init("w2", &w(256, 128, 71))
        .init("w3", &w(128, 128, 29))
        .init("b0", &row(128, 0.2, 0.1))
        .init("b1", &row(256, -0.3, 0.05))
        .init("b2", &row(128, 0.4, -0.1))
        .init("g0", &row(128, 0.8, 1.0))
        .init("be0", &row(128, 0.2, 0.1))
        .init("g2", &row(128, -0.6, 0.9))
        .init("be2", &row(128, 0.3, -0.2))
        .init("g3", &row(128, 0.5, 1.1))
        .node("mm0", "MatMul", &["x", "w0"], &["p0"], vec![])
        .node("bias0", "Add", &["p0", "b0"], &["a0"], vec![])
        .node("res0", "Add", &["a0", "x"], &["s0"], vec![])
        .node("ln0", "LayerNormalization", &["s0", "g0", "be0"], &["h0"], vec![("axis", A::I(-1))])
        .node("mm1", "MatMul", &["h0", "w1"], &["p1"], vec![])
        .node("bias1", "Add", &["p1", "b1"], &["a1"], vec![])
        .node("relu1", "Relu", &["a1"], &["u"], vec![])
        .node("mm2", "MatMul", &["u", "w2"], &["p2"], vec![])
        .node("bias2", "Add", &["p2", "b2"], &["a2"], vec![])
        .node("res2", "Add", &["a2", "h0"], &["s2"], vec![])
        .node("ln2", "LayerNormalization", &["s2", "g2", "be2"], &["h2"], vec![("axis", A::I(-1))])
        .node("mm3", "MatMul", &["h2", "w3"], &["p3"], vec![])
        .node("res3", "Add", &["p3", "h2"], &["s3"], vec![])
        .node("ln3", "LayerNormalization", &["s3", "g3"], &["o"], vec![("axis", A::I(-1))])
        .bytes();
    load_model_bytes(&bytes, "post_ln_layers", &LoadOptions::default()).unwrap()
}

/// A pre-LN pair (GPT-2's order), 128 wide, 256 rows: `r1 = x + LN1(x)·W1 + b1` (the sum an
/// output too), `y = r1 + LN2(r1)·W2 + b2`.
fn pre_ln_layers() -> Graph {
    pre_ln_graph("pre_ln_layers", [4, 64, 128], [0.0, 0.1, 1.0, 0.0, 1.2, -0.1])
}

/// `compile`'s pipeline with a TeSA, in a 16-bit type.
fn compile_half_tesa(mut graph: Graph, tesa: &str, dtype: DType, options: &ModelOptions) -> ModelProgram {
    apply_attrs(&mut graph, Some(&TesaAttrs::parse(tesa).unwrap())).unwrap();
    propagate(&mut graph, &PropagateOptions::default()).unwrap();
    prepare_for_lowering(&mut graph, true).unwrap();
    spartac::rewrite::to_half(&mut graph, dtype).unwrap();
    let p = plan(&graph, &PlanOptions::default()).unwrap();
    let model = lower_model(&graph, &p, options, &mut |_, _| {}).unwrap();
    let back = decode(&encode(&model, &[]).unwrap()).unwrap().model;
    assert_eq!(back, model, "the artifact reads back as written");
    back
}

/// LayerNorms between block-sparse 16-bit products are no steps: the product before writes
/// the sum and its rows' statistics, the products after read the sum and normalize, and a
/// post-LN skip connection is normalized as the next producer reads it. Post-LN: LN0 (read by
/// a product and by LN2's residual) and LN2 (read by a product and by the last residual; the
/// last LayerNorm, an output, stays a step and reads the sum mm3 writes); pre-LN: LN2 (LN1
/// reads the input). In fp16 and bf16 the CPU executor stays within 16-bit rounding of the reference of
/// the pruned model, as it does without the deferral (`--no-defer-norms`), and every kernel
/// compiles.
#[test]
fn layernorms_between_block_sparse_16_bit_products_run_inside_them() {
    const BLOCK75: &str = r#"{ "tensors": { "w*": { "block_magnitude": { "block": [32, 32], "sparsity": 0.75 } } } }"#;
    let off = ModelOptions { defer_norms: false, ..Default::default() };
    for (build, deferred, norms) in [(post_ln_layers as fn() -> Graph, 2, 3), (pre_ln_layers, 1, 2)] {
        for dtype in [DType::F16, DType::BF16] {
            let model = compile_half_tesa(build(), BLOCK75, dtype, &ModelOptions::default());
            let name = build().name.clone();
            let what = format!("{name} {}", dtype.name());
            assert_eq!(model.stats.deferred_norms, deferred, "{what}\n{}", model.program.to_text());
            let text = model.program.to_text();
            assert_eq!(norm_steps(&model).len(), norms - deferred, "{what}: LayerNorm steps left\n{text}");
            assert_eq!(text.matches("row_stats(").count(), deferred, "{what}\n{text}");
            assert_eq!(text.matches("norm_input(").count(), deferred, "{what}\n{text}");
            let mut pruned = build();
            apply_attrs(&mut pruned, Some(&TesaAttrs::parse(BLOCK75).unwrap())).unwrap();
            let tol = if dtype == DType::F16 { 1e-2 } else { 4e-2 };
            let worst = assert_compiled_matches(&pruned, &model, &[1, 2], tol, &what);
            let plain = compile_half_tesa(build(), BLOCK75, dtype, &off);
            assert_eq!(plain.stats.deferred_norms, 0);
            assert_eq!(norm_steps(&plain).len(), norms, "{what}: --no-defer-norms keeps the steps");
            let worst_plain = assert_compiled_matches(&pruned, &plain, &[1, 2], tol, &what);
            assert!(worst <= 2.0 * worst_plain + 1e-3, "{what}: deferred {worst:.3e} against {worst_plain:.3e}");
            nvrtc_compiles(&model);
        }
    }
    // Post-LN: mm2 and mm3 read LN0's and LN2's sums as their residuals, normalized; LN3's
    // step reads the sum mm3 wrote (no Add) and stores through the output's Cast.
    let model = compile_half_tesa(post_ln_layers(), BLOCK75, DType::F16, &ModelOptions::default());
    assert_eq!(model.program.to_text().matches("(normalized stats=").count(), 2, "{}", model.program.to_text());
    assert_eq!(norm_steps(&model), [["LayerNormalization", "Cast"]]);
}

/// MiniLM-L3 in fp16 with 90% of its matmul blocks pruned: the five LayerNorms before the last
/// are done by the products around them (28 steps where there were 32), and its outputs on the
/// CPU executor stay within fp16 rounding of the reference of the pruned model, as they are
/// without the deferral.
#[test]
fn minilm_l3_in_fp16_defers_all_but_its_last_layernorm() {
    let block90 =
        std::fs::read_to_string(spartac_tests::repo_root().join("models/tesa/matmul-block32-90.json")).unwrap();
    let model = compile_half_tesa(minilm_l3(), &block90, DType::F16, &ModelOptions::default());
    let off = ModelOptions { defer_norms: false, ..Default::default() };
    let plain = compile_half_tesa(minilm_l3(), &block90, DType::F16, &off);
    assert_eq!(model.stats.deferred_norms, 5, "{:?}", model.stats);
    // Five LayerNorm steps fewer, one step more that zeroes their row sums.
    assert_eq!(plain.program.steps.len() - model.program.steps.len(), 4);
    assert_eq!(model.program.steps.iter().filter(|s| s.label == "zero LayerNorm row sums").count(), 1);
    let mut pruned = minilm_l3();
    apply_attrs(&mut pruned, Some(&TesaAttrs::parse(&block90).unwrap())).unwrap();
    let worst = assert_compiled_matches(&pruned, &model, &[3], 1e-2, "deferred");
    let worst_plain = assert_compiled_matches(&pruned, &plain, &[3], 1e-2, "not deferred");
    assert!(worst <= 2.0 * worst_plain + 1e-3, "deferred {worst:.3e} against {worst_plain:.3e}");
}

/// ViT's patch rows after its patch embedding: the product's `[images, 4, 4, C]` rows seen
/// channels first (Transpose), flattened (Reshape) and transposed back (Transpose) land every
/// element where it was, so the chain is a view of the product, not a gather step; a chain
/// that does move elements stays one gather. Both match the reference.
#[test]
fn a_data_movement_chain_that_moves_nothing_is_a_view() {
    for (perm_back, moves) in [([0i64, 2, 1], false), ([0, 1, 2], true)] {
        let (c, hw) = (6, 16);
        let out_shape = if moves { [2, c, hw] } else { [2, hw, c] };
        let bytes = ModelBuilder::new("patch_rows", 18)
            .input("x", DType::F32, &fixed(&[2, 4, 4, 8]))
            .output("y", DType::F32, &fixed(&[out_shape[0], out_shape[1], 5]))
            .init("w1", &seeded_weight(8, c, 7, 60.0))
            .init("w2", &seeded_weight(out_shape[2], 5, 11, 60.0))
            .init("flat", &Tensor::from_vec(vec![3], vec![2i64, c as i64, hw as i64]))
            .node("embed", "MatMul", &["x", "w1"], &["p"], vec![])
            .node("to_first", "Transpose", &["p"], &["pf"], vec![("perm", A::Is(vec![0, 3, 1, 2]))])
            .node("flatten", "Reshape", &["pf", "flat"], &["pr"], vec![])
            .node("back", "Transpose", &["pr"], &["rows"], vec![("perm", A::Is(perm_back.to_vec()))])
            .node("head", "MatMul", &["rows", "w2"], &["y"], vec![])
            .bytes();
        let graph = load_model_bytes(&bytes, "patch_rows", &LoadOptions::default()).unwrap();
        let (_, model) = compile(graph.clone(), None, &ModelOptions::default());
        let what = format!("moves {moves}");
        let steps = model.program.steps.len();
        assert_eq!(steps, if moves { 3 } else { 2 }, "{what}:\n{}", model.program.to_text());
        assert_eq!(model.stats.fused_movements, usize::from(moves), "{what}");
        let mut g = graph;
        apply_attrs(&mut g, None).unwrap();
        assert_compiled_matches(&g, &model, &[1, 2], 1e-5, &what);
    }
}

/// ConvNeXt's head: a Transpose that only moves axes of length one (`[n, 1, 1, c]` to
/// `[n, c, 1, 1]`) and the Reshape after it move nothing: a view, no step; the result matches.
#[test]
fn a_transpose_of_unit_axes_is_a_view() {
    let bytes = ModelBuilder::new("unit_axes", 18)
        .input("x", DType::F32, &fixed(&[4, 1, 1, 8]))
        .output("y", DType::F32, &fixed(&[4, 5]))
        .init("w1", &seeded_weight(8, 8, 7, 60.0))
        .init("w2", &seeded_weight(8, 5, 11, 60.0))
        .init("flat", &Tensor::from_vec(vec![2], vec![4i64, 8]))
        .node("mm1", "MatMul", &["x", "w1"], &["h"], vec![])
        .node("to_first", "Transpose", &["h"], &["hf"], vec![("perm", A::Is(vec![0, 3, 1, 2]))])
        .node("flatten", "Reshape", &["hf", "flat"], &["rows"], vec![])
        .node("mm2", "MatMul", &["rows", "w2"], &["y"], vec![])
        .bytes();
    let graph = load_model_bytes(&bytes, "unit_axes", &LoadOptions::default()).unwrap();
    let (_, model) = compile(graph.clone(), None, &ModelOptions::default());
    let labels: Vec<&str> = model.program.steps.iter().map(|s| s.label.as_str()).collect();
    assert_eq!(labels, ["mm1", "mm2"], "{}", model.program.to_text());
    let mut g = graph;
    apply_attrs(&mut g, None).unwrap();
    assert_compiled_matches(&g, &model, &[1, 2], 1e-5, "unit axes");
}
