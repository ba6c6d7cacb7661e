//! TeSA propagation on hand-built ONNX models: the IR text form after the pass
//! (snapshot), the invariant (zeroing every pruned element keeps the outputs) on an MLP
//! and a small conv net, and attrs-file pruning.

use spartac::frontend::{load_model_bytes, LoadOptions};
use spartac::ir::{print_graph, DType, Graph, Tensor};
use spartac::propagate::{invariant_gap, propagate, PropagateOptions, StopReason};
use spartac::reference::random_inputs;
use spartac::rng::SplitMix64;
use spartac::tesa::attrs::{apply_attrs, zero_pruned_initializers, TesaAttrs};
use spartac_tests::builder::{fixed, ModelBuilder, A};

fn load(bytes: &[u8]) -> Graph {
    load_model_bytes(bytes, "test.onnx", &LoadOptions::default()).unwrap()
}

fn random(seed: u64, shape: &[usize], zero_rows: std::ops::Range<usize>, row_len: usize) -> Tensor {
    let mut rng = SplitMix64::new(seed);
    let n: usize = shape.iter().product();
    let v: Vec<f32> =
        (0..n).map(|i| if zero_rows.contains(&(i / row_len)) { 0.0 } else { rng.uniform(-1.0, 1.0) as f32 }).collect();
    Tensor::from_vec(shape.to_vec(), v)
}

fn assert_invariant_for(graph: &Graph, seed: u64) {
    let (gap, name) = invariant_gap(graph, &random_inputs(graph, seed)).unwrap();
    assert!(gap <= 1e-6, "{name}: relative difference {gap:e} after zeroing pruned elements");
}

fn assert_invariant(graph: &Graph) {
    for seed in 0..3 {
        assert_invariant_for(graph, seed);
    }
}

/// x[2,4] -> Gemm(w1ᵀ: 6 hidden, units 0..3 dead) -> Relu -> MatMul w2[6,3] -> Softmax.
fn mlp() -> Vec<u8> {
    ModelBuilder::new("mlp", 17)
        .input("x", DType::F32, &fixed(&[2, 4]))
        .init("w1", &random(1, &[6, 4], 0..3, 4))
        .init("b1", &Tensor::from_vec(vec![6], vec![0.0f32, 0.0, 0.0, 0.5, -0.5, 0.25]))
        .init("w2", &random(2, &[6, 3], 6..6, 3))
        .node("fc1", "Gemm", &["x", "w1", "b1"], &["h"], vec![("transB", A::I(1))])
        .node("act", "Relu", &["h"], &["a"], vec![])
        .node("fc2", "MatMul", &["a", "w2"], &["z"], vec![])
        .node("sm", "Softmax", &["z"], &["p"], vec![("axis", A::I(-1))])
        .output("p", DType::F32, &fixed(&[2, 3]))
        .bytes()
}

#[test]
fn mlp_after_propagation_snapshot_and_invariant() {
    let mut graph = load(&mlp());
    apply_attrs(&mut graph, None).unwrap();
    let report = propagate(&mut graph, &PropagateOptions::default()).unwrap();
    assert_eq!(report.stop, StopReason::Converged);
    let (before, after) = report.weight_density();
    assert!(after < before, "{before} -> {after}");
    insta::assert_snapshot!(print_graph(&graph));
    assert_invariant(&graph);
}

#[test]
fn conv_net_invariant_with_dead_filters() {
    // 8 filters, 0..4 all zero; depthwise conv; BN with zero-preserving channels; pool.
    let w1 = random(3, &[8, 3, 3, 3], 0..4, 27);
    let wd = random(4, &[8, 1, 3, 3], 8..8, 9);
    let scale = Tensor::from_vec(vec![8], vec![1.0f32; 8]);
    let bias = Tensor::from_vec(vec![8], vec![0.0f32, 0.0, 0.0, 0.0, 0.1, 0.2, 0.3, 0.4]);
    let mean = Tensor::from_vec(vec![8], vec![0.0f32; 8]);
    let var = Tensor::from_vec(vec![8], vec![1.0f32; 8]);
    let w3 = random(5, &[4, 8, 1, 1], 0..0, 8);
    let model = ModelBuilder::new("convnet", 17)
        .input("x", DType::F32, &fixed(&[1, 3, 8, 8]))
        .init("w1", &w1)
        .init("wd", &wd)
        .init("scale", &scale)
        .init("bias", &bias)
        .init("mean", &mean)
        .init("var", &var)
        .init("w3", &w3)
        .node("c1", "Conv", &["x", "w1"], &["h1"], vec![("pads", A::Is(vec![1, 1, 1, 1]))])
        .node("r1", "Relu", &["h1"], &["a1"], vec![])
        .node("dw", "Conv", &["a1", "wd"], &["h2"], vec![("group", A::I(8)), ("pads", A::Is(vec![1, 1, 1, 1]))])
        .node("bn", "BatchNormalization", &["h2", "scale", "bias", "mean", "var"], &["h3"], vec![])
        .node(
            "mp",
            "MaxPool",
            &["h3"],
            &["h4"],
            vec![("kernel_shape", A::Is(vec![2, 2])), ("strides", A::Is(vec![2, 2]))],
        )
        .node("c3", "Conv", &["h4", "w3"], &["h5"], vec![])
        .node("gap", "GlobalAveragePool", &["h5"], &["y"], vec![])
        .output("y", DType::F32, &fixed(&[1, 4, 1, 1]))
        .bytes();
    let mut graph = load(&model);
    apply_attrs(&mut graph, None).unwrap();
    let report = propagate(&mut graph, &PropagateOptions::default()).unwrap();
    let density = |name: &str| report.tensors.iter().find(|t| t.name == name).unwrap().density_after;
    assert_eq!(density("h2"), 0.5, "depthwise filters of dead channels are pruned too");
    assert_eq!(density("wd"), 0.5);
    assert_eq!(density("h4"), 0.5, "MaxPool windows (scrambled) of dead channels");
    assert_eq!(density("w3"), 0.5, "the 1x1 conv's input channels 0..4 are unused");
    assert_invariant(&graph);
}

#[test]
fn attrs_block_pruning_then_invariant() {
    let mut graph = load(&mlp());
    let attrs = TesaAttrs::parse(r#"{"tensors": {"w2": {"nm": [1, 3]}, "w1": {"block_magnitude": {"block": [2, 2], "sparsity": 0.5}, "bits": 8}}}"#)
        .unwrap();
    apply_attrs(&mut graph, Some(&attrs)).unwrap();
    zero_pruned_initializers(&mut graph);
    let report = propagate(&mut graph, &PropagateOptions::default()).unwrap();
    let w1 = report.tensors.iter().find(|t| t.name == "w1").unwrap();
    assert_eq!(w1.bits, 8);
    assert!(w1.density_after <= 0.5);
    assert_invariant(&graph);
    let err = apply_attrs(&mut graph, Some(&TesaAttrs::parse(r#"{"tensors": {"w3": {}}}"#).unwrap())).unwrap_err();
    assert!(err.to_string().contains("did you mean"), "{err}");
}

/// Propagates, then checks the invariant on one fresh random input set.
fn propagate_and_check(graph: &mut Graph, seed: u64) -> (f64, f64) {
    zero_pruned_initializers(graph);
    let report = propagate(graph, &PropagateOptions::default()).unwrap();
    assert_eq!(report.stop, StopReason::Converged);
    assert_invariant_for(graph, seed);
    report.weight_density()
}

#[test]
fn minilm_l3_with_90_percent_block_pruning_keeps_its_outputs() {
    let path = spartac_tests::models::models_dir().join("minilm-l3.onnx");
    assert!(path.exists(), "{} is missing: run models/setup_minilm_l3.sh first (.ci/run does)", path.display());
    // The model fixes its inputs at 32 x 128.
    let opts = spartac::frontend::LoadOptions { fold_constants: true, ..Default::default() };
    let mut graph = spartac::frontend::load_model(&path, &opts).unwrap();
    // Every 2-D weight a MatMul reads: 32x32 blocks, 90% pruned by L1 norm.
    let mut names: Vec<String> = graph
        .nodes
        .iter()
        .filter(|n| n.op_type == "MatMul")
        .filter_map(|n| n.inputs.get(1).copied().flatten())
        .filter(|id| graph.initializers.contains_key(id) && graph.fact(*id).shape.len() == 2)
        .map(|id| graph.value(id).name.clone())
        .collect();
    names.sort();
    names.dedup();
    assert!(names.len() >= 18, "{names:?}");
    let spec = r#"{"block_magnitude": {"block": [32, 32], "sparsity": 0.9}}"#;
    let entries: Vec<String> = names.iter().map(|n| format!("{n:?}: {spec}")).collect();
    let attrs = TesaAttrs::parse(&format!("{{\"tensors\": {{{}}}}}", entries.join(", "))).unwrap();
    apply_attrs(&mut graph, Some(&attrs)).unwrap();
    let (before, after) = propagate_and_check(&mut graph, 17);
    assert!(after <= before && before < 0.8, "{before} -> {after}");
}

#[test]
fn hpec_network_propagation_keeps_its_outputs() {
    let network = spartac_runtime::hpec::generator::generate(1024, 4, 3).unwrap();
    let mut graph = spartac_runtime::hpec::onnx_export::network_to_graph(&network, 8);
    apply_attrs(&mut graph, None).unwrap();
    let (before, after) = propagate_and_check(&mut graph, 5);
    assert!((before - 32.0 / 1024.0).abs() < 1e-3 && after <= before, "{before} -> {after}");
}

#[test]
fn minilm_l3_propagation_from_the_cache_equals_a_fresh_one() {
    use spartac::propagate::cache::{cache_key, graph_fingerprint, Lookup, PropagationCache};
    let path = spartac_tests::models::models_dir().join("minilm-l3.onnx");
    assert!(path.exists(), "{} is missing: run models/setup_minilm_l3.sh first (.ci/run does)", path.display());
    let load = || spartac::frontend::load_model(&path, &Default::default()).unwrap();
    let attrs = TesaAttrs::parse(
        r#"{"tensors": {"onnx::MatMul_*": {"block_magnitude": {"block": [32, 32], "sparsity": 0.9}}}}"#,
    )
    .unwrap();
    let opts = PropagateOptions::default();
    let key = cache_key(graph_fingerprint(&std::fs::read(&path).unwrap(), &load()), Some(&attrs), true, &opts);
    let mut fresh = load();
    apply_attrs(&mut fresh, Some(&attrs)).unwrap();
    propagate(&mut fresh, &opts).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cache = PropagationCache::new(dir.path());
    cache.store(&key, &fresh).unwrap();
    let mut cached = load();
    assert_eq!(cache.load(&key, &mut cached), Lookup::Hit);
    // The whole graph: every value's TeSA, and nothing else touched by the pass.
    assert_eq!(cached, fresh);
    let bytes = std::fs::metadata(cache.path_of(&key)).unwrap().len();
    let elements: usize = fresh.values.iter().map(|v| v.fact.shape.iter().product::<usize>()).sum();
    assert!((bytes as usize) < elements / 16, "{bytes} bytes for {elements} elements");
}
