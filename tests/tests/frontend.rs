//! Frontend behaviour on small hand-built models: sparse and external initializers,
//! pinned symbolic dims, folding of shape subgraphs, node order, the IR text form,
//! and the errors for bad models.

use spartac::frontend::{load_model, load_model_bytes, LoadOptions};
use spartac::ir::{print_graph, DType, Initializer, SparseTensor, Tensor};
use spartac::reference::execute;
use spartac_tests::builder::{fixed, Dim, ModelBuilder, A};
use std::collections::BTreeMap;

fn load(bytes: &[u8]) -> Result<spartac::ir::Graph, spartac::Error> {
    load_model_bytes(bytes, "test.onnx", &LoadOptions::default())
}

fn run1(graph: &spartac::ir::Graph, name: &str, x: Tensor) -> Tensor {
    let out = execute(graph, &BTreeMap::from([(name.to_string(), x)])).unwrap();
    out.into_iter().next().unwrap().1
}

#[test]
fn sparse_initializer_in_both_index_layouts_feeds_matmul() {
    let w =
        SparseTensor { shape: vec![3, 2], indices: vec![0, 3, 5], values: spartac::ir::Data::F32(vec![1.0, 2.0, 3.0]) };
    let model = ModelBuilder::new("sparse", 17)
        .input("x", DType::F32, &fixed(&[1, 3]))
        .sparse_init("w", &w)
        .node("mm", "MatMul", &["x", "w"], &["y"], vec![])
        .output("y", DType::F32, &fixed(&[1, 2]))
        .bytes();
    let graph = load(&model).unwrap();
    let id = graph.find_value("w").unwrap();
    assert!(matches!(graph.initializers[&id], Initializer::Sparse(_)));
    assert!((graph.initializers[&id].density() - 0.5).abs() < 1e-12);
    // x = [1, 10, 100]; W = [[1,0],[0,2],[0,3]] -> y = [1, 320]
    let y = run1(&graph, "x", Tensor::from_vec(vec![1, 3], vec![1.0f32, 10.0, 100.0]));
    assert_eq!(y.to_f64_vec(), vec![1.0, 320.0]);
}

#[test]
fn external_data_is_read_relative_to_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let values = [0.5f32, -1.0, 2.0, 4.0];
    let mut raw = vec![0u8; 16]; // an offset of 16 bytes
    for v in values {
        raw.extend_from_slice(&v.to_le_bytes());
    }
    std::fs::write(dir.path().join("weights.bin"), &raw).unwrap();
    let mut model = ModelBuilder::new("ext", 17)
        .input("x", DType::F32, &fixed(&[4]))
        .init("w", &Tensor::from_vec(vec![4], vec![0.0f32; 4]))
        .node("add", "Add", &["x", "w"], &["y"], vec![])
        .output("y", DType::F32, &fixed(&[4]))
        .build();
    let t = &mut model.graph.as_mut().unwrap().initializer[0];
    t.raw_data.clear();
    t.data_location = protobuf::EnumOrUnknown::from_i32(1);
    for (k, v) in [("location", "weights.bin"), ("offset", "16"), ("length", "16")] {
        let mut e = onnx_protobuf::StringStringEntryProto::new();
        e.key = k.into();
        e.value = v.into();
        t.external_data.push(e);
    }
    let path = dir.path().join("model.onnx");
    std::fs::write(&path, protobuf::Message::write_to_bytes(&model).unwrap()).unwrap();
    let graph = load_model(&path, &LoadOptions::default()).unwrap();
    let y = run1(&graph, "x", Tensor::from_vec(vec![4], vec![1.0f32; 4]));
    assert_eq!(y.to_f64_vec(), vec![1.5, 0.0, 3.0, 5.0]);

    // A location that leaves the model's directory is refused.
    let t = &mut model.graph.as_mut().unwrap().initializer[0];
    t.external_data[0].value = "../weights.bin".into();
    std::fs::write(&path, protobuf::Message::write_to_bytes(&model).unwrap()).unwrap();
    let err = load_model(&path, &LoadOptions::default()).unwrap_err().to_string();
    assert!(err.contains("must be a relative path inside"), "{err}");

    // A link inside the folder that points out of it is refused, not followed (a model must
    // not read a file the user never gave it into its tensors), and so is a device.
    #[cfg(unix)]
    for (link, target) in [("leak.bin", "/etc/passwd"), ("zero.bin", "/dev/zero")] {
        std::os::unix::fs::symlink(target, dir.path().join(link)).unwrap();
        let t = &mut model.graph.as_mut().unwrap().initializer[0];
        t.external_data[0].value = link.into();
        std::fs::write(&path, protobuf::Message::write_to_bytes(&model).unwrap()).unwrap();
        let err = load_model(&path, &LoadOptions::default()).unwrap_err().to_string();
        assert!(err.contains("leads outside") && !err.contains('\n'), "{link}: {err}");
    }
}

fn symbolic_model() -> Vec<u8> {
    ModelBuilder::new("sym", 17)
        .input("a", DType::F32, &[Dim::Symbol("batch"), Dim::Fixed(4)])
        .input("b", DType::F32, &[Dim::Symbol("batch"), Dim::Fixed(4)])
        .node("add", "Add", &["a", "b"], &["y"], vec![])
        .output("y", DType::F32, &[Dim::Symbol("batch"), Dim::Fixed(4)])
        .bytes()
}

#[test]
fn pinning_one_input_binds_the_symbol_for_all() {
    let mut opts = LoadOptions::default();
    opts.input_shapes.insert("a".into(), vec![3, 4]);
    let graph = load_model_bytes(&symbolic_model(), "sym.onnx", &opts).unwrap();
    let b = graph.find_value("b").unwrap();
    assert_eq!(graph.fact(b).shape, vec![3, 4]);
    assert_eq!(graph.fact(graph.outputs[0]).shape, vec![3, 4]);
}

#[test]
fn unpinned_symbolic_dim_says_how_to_pin_it() {
    let err = load(&symbolic_model()).unwrap_err().to_string();
    assert!(err.contains("\"batch\"") && err.contains("--input-shape a="), "{err}");
    let mut opts = LoadOptions::default();
    opts.input_shapes.insert("a".into(), vec![3, 5]);
    let err = load_model_bytes(&symbolic_model(), "sym.onnx", &opts).unwrap_err().to_string();
    assert!(err.contains("fixes dim 1 to 4"), "{err}");
}

/// A Shape -> Gather -> Unsqueeze -> Concat chain computing Reshape's target folds away.
#[test]
fn shape_subgraphs_fold_to_constants() {
    let model = ModelBuilder::new("fold", 17)
        .input("x", DType::F32, &fixed(&[2, 3, 4]))
        .init("zero", &Tensor::scalar(0i64))
        .init("minus_one", &Tensor::from_vec(vec![1], vec![-1i64]))
        .node("shape", "Shape", &["x"], &["s"], vec![])
        .node("gather", "Gather", &["s", "zero"], &["d0"], vec![("axis", A::I(0))])
        .node("unsq", "Unsqueeze", &["d0", "axes"], &["d0v"], vec![])
        .init("axes", &Tensor::from_vec(vec![1], vec![0i64]))
        .node("concat", "Concat", &["d0v", "minus_one"], &["target"], vec![("axis", A::I(0))])
        .node("reshape", "Reshape", &["x", "target"], &["y"], vec![])
        .output("y", DType::F32, &fixed(&[2, 12]))
        .bytes();
    let graph = load(&model).unwrap();
    assert_eq!(graph.nodes.len(), 1, "{}", print_graph(&graph));
    assert_eq!(graph.nodes[0].op_type, "Reshape");
    let x: Vec<f32> = (0..24).map(|i| i as f32).collect();
    let y = run1(&graph, "x", Tensor::from_vec(vec![2, 3, 4], x.clone()));
    assert_eq!(y.shape(), &[2, 12]);
    assert_eq!(y.as_slice::<f32>().unwrap(), &x[..]);
}

#[test]
fn nodes_out_of_order_are_sorted_topologically() {
    let model = ModelBuilder::new("order", 17)
        .input("x", DType::F32, &fixed(&[2]))
        .node("second", "Neg", &["t"], &["y"], vec![])
        .node("first", "Abs", &["x"], &["t"], vec![])
        .output("y", DType::F32, &fixed(&[2]))
        .bytes();
    let graph = load(&model).unwrap();
    assert_eq!(graph.nodes[0].name, "first");
    let y = run1(&graph, "x", Tensor::from_vec(vec![2], vec![-1.0f32, 2.0]));
    assert_eq!(y.to_f64_vec(), vec![-1.0, -2.0]);
}

#[test]
fn ir_text_form_snapshot() {
    let w = SparseTensor {
        shape: vec![4, 3],
        indices: vec![0, 4, 8, 11],
        values: spartac::ir::Data::F32(vec![1.0, 2.0, 3.0, 4.0]),
    };
    let model = ModelBuilder::new("tiny_mlp", 17)
        .input("x", DType::F32, &fixed(&[2, 4]))
        .sparse_init("w", &w)
        .init("b", &Tensor::from_vec(vec![3], vec![0.5f32, 0.0, -0.25]))
        .node("mm", "MatMul", &["x", "w"], &["h"], vec![])
        .node("bias", "Add", &["h", "b"], &["z"], vec![])
        .node("act", "LeakyRelu", &["z"], &["y"], vec![("alpha", A::F(0.1))])
        .node("sm", "Softmax", &["y"], &["p"], vec![("axis", A::I(-1))])
        .output("p", DType::F32, &fixed(&[2, 3]))
        .bytes();
    let graph = load(&model).unwrap();
    insta::assert_snapshot!(print_graph(&graph));
}

#[test]
fn unknown_op_names_node_op_and_opset() {
    let model = ModelBuilder::new("bad", 19)
        .input("x", DType::F32, &fixed(&[2]))
        .node("mystery_node", "FancyOp", &["x"], &["y"], vec![])
        .output("y", DType::F32, &fixed(&[2]))
        .bytes();
    let err = load(&model).unwrap_err().to_string();
    assert_eq!(err, "node \"mystery_node\": unsupported op FancyOp (domain \"\", opset 19)");
}

#[test]
fn reading_an_undefined_value_is_an_error() {
    let model = ModelBuilder::new("missing", 17)
        .input("x", DType::F32, &fixed(&[2]))
        .node("add", "Add", &["x", "weights_that_are_not_there"], &["y"], vec![])
        .output("y", DType::F32, &fixed(&[2]))
        .bytes();
    let err = load(&model).unwrap_err().to_string();
    assert!(err.contains("\"weights_that_are_not_there\"") && err.contains("\"add\""), "{err}");
}

#[test]
fn shapes_that_do_not_fit_name_the_node() {
    let model = ModelBuilder::new("mismatch", 17)
        .input("x", DType::F32, &fixed(&[2, 3]))
        .init("w", &Tensor::from_vec(vec![4, 5], vec![0.0f32; 20]))
        .node("proj", "MatMul", &["x", "w"], &["y"], vec![])
        .output("y", DType::F32, &fixed(&[2, 5]))
        .bytes();
    let err = load(&model).unwrap_err().to_string();
    assert!(err.starts_with("node \"proj\" (MatMul): "), "{err}");
}

#[test]
fn declared_output_shape_must_match() {
    let model = ModelBuilder::new("decl", 17)
        .input("x", DType::F32, &fixed(&[2, 3]))
        .node("neg", "Neg", &["x"], &["y"], vec![])
        .output("y", DType::F32, &fixed(&[3, 2]))
        .bytes();
    let err = load(&model).unwrap_err().to_string();
    assert!(err.contains("shape mismatch") && err.contains("[3,2]") && err.contains("f32[2,3]"), "{err}");
}

#[test]
fn truncated_and_corrupt_bytes_are_decode_errors() {
    let model = symbolic_model();
    let err = load(&model[..model.len() / 2]).unwrap_err();
    assert!(matches!(err, spartac::Error::Decode { .. }), "{err}");
    let err = load(b"this is not protobuf at all \xff\xff\xff").unwrap_err();
    assert!(matches!(err, spartac::Error::Decode { .. }), "{err}");
    assert!(matches!(load(b"").unwrap_err(), spartac::Error::Decode { .. }));
}

#[test]
fn written_models_load_back_to_the_same_graph() {
    let w = SparseTensor {
        shape: vec![4, 3],
        indices: vec![1, 5, 6],
        values: spartac::ir::Data::F32(vec![1.0, -2.0, 3.0]),
    };
    let model = ModelBuilder::new("round_trip", 17)
        .input("x", DType::F32, &fixed(&[2, 4]))
        .sparse_init("w", &w)
        .node("mm", "MatMul", &["x", "w"], &["h"], vec![])
        .node("t", "Transpose", &["h"], &["y"], vec![("perm", A::Is(vec![1, 0]))])
        .output("y", DType::F32, &fixed(&[3, 2]))
        .bytes();
    let graph = load(&model).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("again.onnx");
    spartac::frontend::save_model(&graph, &path).unwrap();
    let again = load_model(&path, &LoadOptions::default()).unwrap();
    assert_eq!(print_graph(&again), print_graph(&graph));
    assert_eq!(again.initializers, graph.initializers);
}

/// Sizes are checked before anything is allocated: a dim product that overflows, and a tensor
/// over the memory budget, are one-line errors naming the input, node or tensor (issue 29,
/// class 1); a `--dim` naming no symbol is an error rather than silently ignored.
#[test]
fn huge_and_overflowing_sizes_are_refused_at_load() {
    let with = |dims: &[(&str, usize)], budget: usize| {
        let mut opts = LoadOptions { memory_budget: budget, ..LoadOptions::default() };
        for (s, v) in dims {
            opts.dim_params.insert(s.to_string(), *v);
        }
        load_model_bytes(&symbolic_model(), "sym.onnx", &opts).map(|_| ()).map_err(|e| e.to_string())
    };
    let err = with(&[("batch", 1 << 62)], usize::MAX).unwrap_err();
    assert!(err.contains("input \"a\"") && err.contains("more elements than memory can address"), "{err}");
    let err = with(&[("batch", 100_000_000_000)], 1 << 30).unwrap_err();
    assert!(err.contains("input \"a\"") && err.contains("1.5 TiB, over the memory budget of 1.0 GiB"), "{err}");
    assert!(with(&[("batch", 1000)], 1 << 20).is_ok());
    let err = with(&[("batch", 2), ("nope", 3)], usize::MAX).unwrap_err();
    assert!(err.contains("--dim nope") && err.contains("symbols: batch"), "{err}");

    // A node whose output is huge: Expand to 2^32 x 2^32 (the element count overflows) and
    // Pad by 1e12 (fits the address space, not the memory).
    let expand = ModelBuilder::new("expand", 17)
        .input("x", DType::F32, &fixed(&[1, 1]))
        .init("shape", &Tensor::from_vec(vec![2], vec![1i64 << 32, 1i64 << 32]))
        .node("big", "Expand", &["x", "shape"], &["y"], vec![])
        .output_untyped_shape("y", DType::F32)
        .bytes();
    let err = load(&expand).unwrap_err().to_string();
    assert!(err.starts_with("node \"big\" (Expand): output \"y\"") && err.contains("more elements"), "{err}");
    let pad = ModelBuilder::new("pad", 17)
        .input("x", DType::F32, &fixed(&[1, 4]))
        .init("pads", &Tensor::from_vec(vec![4], vec![0i64, 1_000_000_000_000, 0, 1_000_000_000_000]))
        .node("wide", "Pad", &["x", "pads"], &["y"], vec![])
        .output_untyped_shape("y", DType::F32)
        .bytes();
    let opts = LoadOptions { memory_budget: 1 << 30, ..LoadOptions::default() };
    let err = load_model_bytes(&pad, "pad.onnx", &opts).unwrap_err().to_string();
    assert!(err.starts_with("node \"wide\" (Pad)") && err.contains("7.3 TiB, over the memory budget"), "{err}");

    // A 1-nonzero sparse initializer of 1e5 x 1e5 loads (and is described) sparse; whatever
    // makes it dense (40 GB) is refused: a node that folds it, and the commands that compute.
    let w = SparseTensor { shape: vec![100_000, 100_000], indices: vec![7], values: spartac::ir::Data::F32(vec![1.0]) };
    let model = ModelBuilder::new("sparse_huge", 17)
        .input("x", DType::F32, &fixed(&[1, 100_000]))
        .sparse_init("w", &w)
        .node("mm", "MatMul", &["x", "w"], &["y"], vec![])
        .output_untyped_shape("y", DType::F32)
        .bytes();
    let graph = load_model_bytes(&model, "s.onnx", &opts).unwrap();
    assert!(matches!(graph.initializers[&graph.find_value("w").unwrap()], Initializer::Sparse(_)));
    let err = spartac::frontend::check_dense_initializers(&graph, 1 << 30).unwrap_err().to_string();
    assert!(err.contains("tensor \"w\"") && err.contains("made dense: f32[100000,100000] takes 37.3 GiB"), "{err}");
    let folded = ModelBuilder::new("sparse_fold", 17)
        .sparse_init("w", &w)
        .node("neg", "Neg", &["w"], &["y"], vec![])
        .output_untyped_shape("y", DType::F32)
        .bytes();
    let err = load_model_bytes(&folded, "s.onnx", &opts).unwrap_err().to_string();
    assert!(err.contains("tensor \"w\"") && err.contains("made dense for node \"neg\""), "{err}");
}
