//! The execution plan on hand-built models and real HPEC layers: sub-operators sum to the
//! original operator on the CPU reference executor (random masks, real layers), covers
//! own exactly the unpruned set, plans are deterministic and round-trip through the
//! artifact, and the `explain` text of a small model (snapshot).

use proptest::prelude::*;
use spartac::frontend::{load_model_bytes, LoadOptions};
use spartac::ir::{DType, Graph, Tensor};
use spartac::plan::cost::CostModel;
use spartac::plan::cover::{cover_blocks, DEFAULT_SHAPES};
use spartac::plan::explain::explain;
use spartac::plan::site::{find_sites, Site};
use spartac::plan::suboperator::{from_cover, Orientation, SubOperator};
use spartac::plan::{plan, Plan, PlanOptions};
use spartac::reference::execute;
use spartac::rng::SplitMix64;
use spartac::tesa::attrs::apply_attrs;
use spartac::tesa::patterns::Pattern;
use spartac_tests::builder::{fixed, ModelBuilder, A};
use std::collections::BTreeMap;
use std::path::PathBuf;

fn load(bytes: &[u8]) -> Graph {
    let mut g = load_model_bytes(bytes, "test.onnx", &LoadOptions::default()).unwrap();
    apply_attrs(&mut g, None).unwrap();
    g
}

/// Values in [-1, 1) with `pruned` positions zero.
fn weight(seed: u64, shape: &[usize], pruned: &[bool]) -> Tensor {
    let mut rng = SplitMix64::new(seed);
    let v: Vec<f32> = pruned.iter().map(|p| if *p { 0.0 } else { rng.uniform(-1.0, 1.0) as f32 }).collect();
    Tensor::from_vec(shape.to_vec(), v)
}

/// `y = x · w` (or `Gemm(x, wᵀ)` with `transB = 1` when `gemm`), no bias.
fn linear(m: usize, k: usize, n: usize, w: &Tensor, gemm: bool) -> Vec<u8> {
    let b = ModelBuilder::new("linear", 17).input("x", DType::F32, &fixed(&[m, k])).init("w", w);
    let b = if gemm {
        b.node("fc", "Gemm", &["x", "w"], &["y"], vec![("transB", A::I(1))])
    } else {
        b.node("fc", "MatMul", &["x", "w"], &["y"], vec![])
    };
    b.output("y", DType::F32, &fixed(&[m, n])).bytes()
}

fn random_x(seed: u64, m: usize, k: usize) -> BTreeMap<String, Tensor> {
    let mut rng = SplitMix64::new(seed);
    let x: Vec<f32> = (0..m * k).map(|_| rng.uniform(-1.0, 1.0) as f32).collect();
    BTreeMap::from([("x".to_string(), Tensor::from_vec(vec![m, k], x))])
}

/// Σₖ (x · Wₖ) over `subops` on the reference executor equals x · W.
fn assert_sum_matches(graph: &Graph, site: &Site, subops: &[SubOperator], seed: u64) {
    let inputs = random_x(seed, site.m, site.rows);
    let expected = execute(graph, &inputs).unwrap()[0].1.to_f64_vec();
    let w = site.weight_values(graph);
    let mut sum = vec![0.0f64; expected.len()];
    for sub in subops {
        let part = site.with_weight(graph, &sub.masked_weight(&w));
        for (s, v) in sum.iter_mut().zip(execute(&part, &inputs).unwrap()[0].1.to_f64_vec()) {
            *s += v;
        }
    }
    for (i, (a, b)) in expected.iter().zip(&sum).enumerate() {
        assert!((a - b).abs() <= 1e-4 * (1.0 + a.abs()), "output {i}: {a} vs Σ parts {b}");
    }
}

/// The multi-shape cover of a site as sub-operators (whatever the plan chose).
fn cover_subops(graph: &Graph, site: &Site) -> Vec<SubOperator> {
    let cm = CostModel::sm_90();
    let nf = cm.hw.by_dtype("f32").unwrap().clone();
    let pruned = site.pruned(graph);
    let cover = cover_blocks(
        &pruned,
        site.rows,
        site.cols,
        &cm.shape_weights(&nf, &DEFAULT_SHAPES, site.m, Orientation::WeightRight),
    );
    // Ownership is exact: every unpruned element once, nothing else.
    let owners = cover.owner_map();
    for (i, p) in pruned.iter().enumerate() {
        assert_eq!(owners[i].is_some(), !p, "element {i}");
    }
    from_cover(&cover, &nf, Orientation::WeightRight, &cm, site.m)
}

fn pattern_strategy() -> impl Strategy<Value = Pattern> {
    prop_oneof![
        (0.3f64..0.99).prop_map(|sparsity| Pattern::Unstructured { sparsity }),
        (0.3f64..0.95).prop_map(|sparsity| Pattern::Block { bh: 8, bw: 8, sparsity }),
        (0.5f64..0.95, 0.0f64..0.05).prop_map(|(block_sparsity, scattered)| Pattern::Mixed {
            bh: 16,
            bw: 16,
            block_sparsity,
            scattered
        }),
        Just(Pattern::NM { n: 2, m: 4 }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn suboperators_sum_to_the_operator(
        pattern in pattern_strategy(),
        k in 8usize..80,
        n in 8usize..80,
        seed in 0u64..1000,
        gemm in any::<bool>(),
    ) {
        let pruned = pattern.mask(k, n, seed);
        let stored = if gemm {
            // Gemm stores Wᵀ (n × k).
            let t: Vec<bool> = (0..k * n).map(|i| pruned[(i % k) * n + i / k]).collect();
            weight(seed, &[n, k], &t)
        } else {
            weight(seed, &[k, n], &pruned)
        };
        let graph = load(&linear(3, k, n, &stored, gemm));
        let sites = find_sites(&graph);
        prop_assert_eq!(sites.len(), 1);
        let site = &sites[0];
        prop_assert_eq!((site.rows, site.cols, site.transposed), (k, n, gemm));
        prop_assert_eq!(&site.pruned(&graph), &pruned);
        assert_sum_matches(&graph, site, &cover_subops(&graph, site), seed);
        let planned = plan(&graph, &PlanOptions::default()).unwrap();
        assert_sum_matches(&graph, site, &planned.operators[0].suboperators, seed + 1);
    }
}

/// `$SPARTAC_SHARED_DIR/hpec`, else `../shared/hpec` beside the repository; the test fails
/// (never passes silently) without it.
fn shared_hpec_dir() -> PathBuf {
    let shared = std::env::var_os("SPARTAC_SHARED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared"));
    let dir = shared.join("hpec");
    assert!(dir.join("neuron1024.tar.gz").is_file(), "the real HPEC data is missing: expected {}", dir.display());
    dir
}

#[test]
fn suboperators_sum_to_real_hpec_layers() {
    use spartac_runtime::hpec::{load_network, CacheConfig, NetworkSource};
    let source = NetworkSource::from_path(&shared_hpec_dir().join("neuron1024.tar.gz"));
    let network = load_network(&source, Some(2), &CacheConfig::Disabled).unwrap();
    for (l, layer) in network.layers.iter().enumerate() {
        let csr = &layer.csr;
        let (rows, cols) = (csr.n_outer, csr.n_inner);
        let mut dense = vec![0.0f32; rows * cols];
        for r in 0..rows {
            let (idx, vals) = csr.slot(r);
            for (c, v) in idx.iter().zip(vals) {
                dense[r * cols + *c as usize] = *v;
            }
        }
        let w = Tensor::from_vec(vec![rows, cols], dense);
        let graph = load(&linear(4, rows, cols, &w, false));
        let site = &find_sites(&graph)[0];
        let subops = cover_subops(&graph, site);
        assert!(!subops.is_empty());
        let owned: usize = subops.iter().map(|s| s.owned.len()).sum();
        assert_eq!(owned, csr.n_nonzeros(), "layer {l}");
        assert_sum_matches(&graph, site, &subops, l as u64);
    }
}

/// x[m,64] -> Gemm(w1ᵀ, b1) -> Relu -> MatMul w2[64,48] (mixed pattern) -> y.
fn small_model(m: usize) -> Vec<u8> {
    let p1 = Pattern::Block { bh: 16, bw: 16, sparsity: 0.75 }.mask(64, 64, 11);
    let p2 = Pattern::Mixed { bh: 16, bw: 16, block_sparsity: 0.7, scattered: 0.02 }.mask(64, 48, 12);
    let b1 = Tensor::from_vec(vec![64], (0..64).map(|i| i as f32 * 0.01).collect::<Vec<f32>>());
    ModelBuilder::new("small", 17)
        .input("x", DType::F32, &fixed(&[m, 64]))
        .init("w1", &weight(1, &[64, 64], &p1))
        .init("b1", &b1)
        .init("w2", &weight(2, &[64, 48], &p2))
        .node("fc1", "Gemm", &["x", "w1", "b1"], &["h"], vec![("transB", A::I(1))])
        .node("act", "Relu", &["h"], &["a"], vec![])
        .node("fc2", "MatMul", &["a", "w2"], &["y"], vec![])
        .output("y", DType::F32, &fixed(&[m, 48]))
        .bytes()
}

#[test]
fn explain_small_model_snapshot() {
    // Many activation rows, so that the kernels are not launch-bound.
    let graph = load(&small_model(1 << 16));
    let planned = plan(&graph, &PlanOptions::default()).unwrap();
    assert_eq!(planned.operators.len(), 2);
    assert_eq!(planned.operators[0].epilogue.activation.as_deref(), Some("Relu"));
    assert_eq!(planned.operators[0].epilogue.bias.as_deref(), Some("b1"));
    insta::assert_snapshot!(explain(&planned));
}

#[test]
fn plans_are_deterministic_and_round_trip() {
    let graph = load(&small_model(8));
    let a = plan(&graph, &PlanOptions::default()).unwrap();
    let b = plan(&graph, &PlanOptions::default()).unwrap();
    assert_eq!(a.encode(), b.encode(), "planning twice gives identical bytes");
    let decoded = Plan::decode(&a.encode()).unwrap();
    assert_eq!(decoded.to_proto(), a.to_proto());
    assert_eq!(decoded.encode(), a.encode());
    // A future version is refused, not misread.
    let mut proto = a.to_proto();
    proto.version = 2;
    let err = Plan::decode(&proto.to_bytes()).unwrap_err().to_string();
    assert!(err.contains("version 2"), "{err}");
}

/// In 16 bits, a weight whose sparse plan would compute half of it is planned dense (cuBLAS's
/// GEMM beats the sparse kernels there: `plan::MAX_SPARSE_DENSITY_16`); with 90% of its blocks
/// pruned it stays sparse.
#[test]
fn half_dense_16_bit_weights_plan_dense() {
    use spartac::plan::suboperator::SubOpKind;
    for (sparsity, dense) in [(0.5, true), (0.9, false)] {
        let pruned = Pattern::Block { bh: 32, bw: 32, sparsity }.mask(512, 512, 3);
        let mut graph = load(&linear(4096, 512, 512, &weight(1, &[512, 512], &pruned), false));
        spartac::rewrite::to_half(&mut graph, DType::F16).unwrap();
        let planned = plan(&graph, &PlanOptions::default()).unwrap();
        let subops = &planned.operators[0].suboperators;
        let kinds: Vec<_> = subops.iter().map(|s| (s.kind, s.hints.block)).collect();
        assert_eq!(subops.iter().all(|s| s.kind == SubOpKind::Dense), dense, "sparsity {sparsity}: {kinds:?}");
    }
}
