//! Property-test fuzzing of the loader: whatever bytes or whatever (possibly nonsensical)
//! graph it is given, loading returns `Ok` or a one-line `Err`, and never panics; a graph
//! that loads also runs on random inputs without panicking.

use proptest::prelude::*;
use spartac::frontend::{load_model_bytes, LoadOptions};
use spartac::ir::{DType, Tensor};
use spartac_tests::builder::{fixed, ModelBuilder, A};

fn seed_model() -> Vec<u8> {
    ModelBuilder::new("seed", 17)
        .input("x", DType::F32, &fixed(&[2, 3]))
        .init("w", &Tensor::from_vec(vec![3, 4], (0..12).map(|i| i as f32).collect()))
        .init("shape", &Tensor::from_vec(vec![2], vec![4i64, 2]))
        .node("mm", "MatMul", &["x", "w"], &["h"], vec![])
        .node("r", "Reshape", &["h", "shape"], &["y"], vec![])
        .node("t", "Transpose", &["y"], &["z"], vec![("perm", A::Is(vec![1, 0]))])
        .output("z", DType::F32, &fixed(&[2, 4]))
        .bytes()
}

fn check_load(bytes: &[u8]) {
    match load_model_bytes(bytes, "fuzz.onnx", &LoadOptions::default()) {
        Ok(graph) => {
            let inputs = spartac::reference::random_inputs(&graph, 1);
            let _ = spartac::reference::execute(&graph, &inputs);
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(!msg.contains('\n'), "multi-line error: {msg}");
        }
    }
}

/// A corrupted op type with a newline in it (found by `mutated_bytes_never_panic`): unknown
/// to the loader, and named on one line.
#[test]
fn op_type_with_a_newline_gives_a_one_line_error() {
    let bytes = ModelBuilder::new("nl", 17)
        .input("x", DType::F32, &fixed(&[2, 3]))
        .node("t", "Tran\npose", &["x"], &["z"], vec![])
        .output("z", DType::F32, &fixed(&[3, 2]))
        .bytes();
    let err = load_model_bytes(&bytes, "nl.onnx", &LoadOptions::default()).unwrap_err().to_string();
    assert_eq!(err, "node \"t\": unsupported op Tran\\npose (domain \"\", opset 17)");
    check_load(&bytes);
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Truncate(usize),
    Insert(usize, Vec<u8>),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Flip(i, b)),
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), proptest::collection::vec(any::<u8>(), 1..8)).prop_map(|(i, v)| Mutation::Insert(i, v)),
    ]
}

const OPS: &[&str] = &[
    "MatMul",
    "Gemm",
    "Add",
    "Mul",
    "Relu",
    "Softmax",
    "Transpose",
    "Reshape",
    "Concat",
    "Slice",
    "Gather",
    "Conv",
    "MaxPool",
    "ReduceSum",
    "LayerNormalization",
    "Split",
    "Expand",
    "Pad",
    "Squeeze",
    "Unsqueeze",
    "Cast",
    "Where",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 384, ..ProptestConfig::default() })]

    #[test]
    fn mutated_bytes_never_panic(muts in proptest::collection::vec(mutation(), 1..6)) {
        let mut bytes = seed_model();
        for m in muts {
            let n = bytes.len().max(1);
            match m {
                Mutation::Flip(i, b) => { let i = i % n; if i < bytes.len() { bytes[i] ^= b | 1; } }
                Mutation::Truncate(i) => bytes.truncate(i % n),
                Mutation::Insert(i, v) => { let i = i % (bytes.len() + 1); bytes.splice(i..i, v); }
            }
        }
        check_load(&bytes);
    }

    /// Random single-op graphs with random attributes, shapes and constant inputs.
    #[test]
    fn random_graphs_never_panic(
        op in 0..OPS.len(),
        shape_a in proptest::collection::vec(0usize..5, 0..4),
        shape_b in proptest::collection::vec(0usize..5, 0..4),
        const_vals in proptest::collection::vec(-6i64..7, 0..5),
        axis in -4i64..4,
        ints in proptest::collection::vec(-3i64..5, 0..5),
    ) {
        let c = Tensor::from_vec(vec![const_vals.len()], const_vals);
        let b = Tensor::from_vec(shape_b.clone(), vec![0.5f32; shape_b.iter().product()]);
        let bytes = ModelBuilder::new("rand", 18)
            .input("a", DType::F32, &fixed(&shape_a))
            .init("b", &b)
            .init("c", &c)
            .node("n", OPS[op], &["a", "b", "c"], &["y"], vec![("axis", A::I(axis)), ("perm", A::Is(ints.clone())), ("kernel_shape", A::Is(ints))])
            .output_untyped_shape("y", DType::F32)
            .bytes();
        check_load(&bytes);
    }
}
