//! A small builder for ONNX models in tests: inputs, outputs, initializers (dense and
//! sparse) and nodes, serialized with `onnx-protobuf`.

use onnx_protobuf::tensor_shape_proto::dimension::Value as DimValue;
use onnx_protobuf::tensor_shape_proto::Dimension;
use onnx_protobuf::type_proto::{Tensor as TensorType, Value as TypeValue};
use onnx_protobuf::{
    attribute_proto::AttributeType, AttributeProto, GraphProto, Message, ModelProto, NodeProto, OperatorSetIdProto,
    TensorShapeProto, TypeProto, ValueInfoProto,
};
use spartac::frontend::tensor_proto::{sparse_to_proto, tensor_to_proto};
use spartac::ir::{DType, SparseTensor, Tensor};
use spartac::rng::SplitMix64;

/// A dimension of a declared input/output type.
#[derive(Clone, Debug)]
pub enum Dim {
    Fixed(usize),
    Symbol(&'static str),
}

pub struct ModelBuilder {
    graph: GraphProto,
    opset: i64,
}

fn value_info(name: &str, dtype: DType, dims: &[Dim]) -> ValueInfoProto {
    let mut shape = TensorShapeProto::new();
    for d in dims {
        let mut dim = Dimension::new();
        dim.value = Some(match d {
            Dim::Fixed(n) => DimValue::DimValue(*n as i64),
            Dim::Symbol(s) => DimValue::DimParam(s.to_string()),
        });
        shape.dim.push(dim);
    }
    let mut tt = TensorType::new();
    tt.elem_type = dtype.to_onnx();
    tt.shape = protobuf::MessageField::some(shape);
    let mut tp = TypeProto::new();
    tp.value = Some(TypeValue::TensorType(tt));
    let mut vi = ValueInfoProto::new();
    vi.name = name.to_string();
    vi.type_ = protobuf::MessageField::some(tp);
    vi
}

/// Fixed dims from a plain shape.
pub fn fixed(shape: &[usize]) -> Vec<Dim> {
    shape.iter().map(|&d| Dim::Fixed(d)).collect()
}

/// An attribute for `ModelBuilder::node`.
pub enum A {
    I(i64),
    F(f32),
    S(&'static str),
    Is(Vec<i64>),
    T(Tensor),
    /// A sparse tensor (a Constant's `sparse_value`).
    Sparse(SparseTensor),
}

impl ModelBuilder {
    pub fn new(name: &str, opset: i64) -> ModelBuilder {
        let mut graph = GraphProto::new();
        graph.name = name.to_string();
        ModelBuilder { graph, opset }
    }

    pub fn input(mut self, name: &str, dtype: DType, dims: &[Dim]) -> Self {
        self.graph.input.push(value_info(name, dtype, dims));
        self
    }

    pub fn output(mut self, name: &str, dtype: DType, dims: &[Dim]) -> Self {
        self.graph.output.push(value_info(name, dtype, dims));
        self
    }

    /// An output with an element type but no declared shape.
    pub fn output_untyped_shape(mut self, name: &str, dtype: DType) -> Self {
        let mut vi = value_info(name, dtype, &[]);
        if let Some(TypeValue::TensorType(t)) = vi.type_.as_mut().and_then(|t| t.value.as_mut()) {
            t.shape = protobuf::MessageField::none();
        }
        self.graph.output.push(vi);
        self
    }

    pub fn init(mut self, name: &str, t: &Tensor) -> Self {
        self.graph.initializer.push(tensor_to_proto(name, t));
        self
    }

    pub fn sparse_init(mut self, name: &str, s: &SparseTensor) -> Self {
        self.graph.sparse_initializer.push(sparse_to_proto(name, s));
        self
    }

    pub fn node(mut self, name: &str, op: &str, inputs: &[&str], outputs: &[&str], attrs: Vec<(&str, A)>) -> Self {
        let mut n = NodeProto::new();
        n.name = name.to_string();
        n.op_type = op.to_string();
        n.input = inputs.iter().map(|s| s.to_string()).collect();
        n.output = outputs.iter().map(|s| s.to_string()).collect();
        for (k, v) in attrs {
            let mut a = AttributeProto::new();
            a.name = k.to_string();
            let ty = match v {
                A::I(i) => {
                    a.i = i;
                    AttributeType::INT
                }
                A::F(f) => {
                    a.f = f;
                    AttributeType::FLOAT
                }
                A::S(s) => {
                    a.s = s.as_bytes().to_vec();
                    AttributeType::STRING
                }
                A::Is(v) => {
                    a.ints = v;
                    AttributeType::INTS
                }
                A::T(t) => {
                    a.t = protobuf::MessageField::some(tensor_to_proto("", &t));
                    AttributeType::TENSOR
                }
                A::Sparse(s) => {
                    a.sparse_tensor = protobuf::MessageField::some(sparse_to_proto("", &s));
                    AttributeType::SPARSE_TENSOR
                }
            };
            a.type_ = protobuf::EnumOrUnknown::new(ty);
            n.attribute.push(a);
        }
        self.graph.node.push(n);
        self
    }

    pub fn build(self) -> ModelProto {
        let mut m = ModelProto::new();
        m.ir_version = 8;
        m.producer_name = "spartac-tests".into();
        let mut opset = OperatorSetIdProto::new();
        opset.version = self.opset;
        m.opset_import.push(opset);
        m.graph = protobuf::MessageField::some(self.graph);
        m
    }

    pub fn bytes(self) -> Vec<u8> {
        self.build().write_to_bytes().expect("serializing a test model")
    }
}

fn random_weight(seed: u64, shape: &[usize]) -> Tensor {
    let mut rng = SplitMix64::new(seed);
    let n: usize = shape.iter().product();
    Tensor::from_vec(shape.to_vec(), (0..n).map(|_| rng.uniform(-0.5, 0.5) as f32).collect())
}

/// An EfficientNet-shaped convnet: x[2,3,16,16] → stem 3×3/2 (8) → Clip → expand 1×1 (16) → Clip → depthwise 3×3 → Clip →
/// project 1×1 (8) → + stem → head 1×1 (12) → Clip → ReduceMean(H, W) → Reshape → Gemm (5).
pub fn small_convnet() -> Vec<u8> {
    let clip = |b: ModelBuilder, x: &str, y: &str| b.node(&format!("clip_{y}"), "Clip", &[x, "lo", "hi"], &[y], vec![]);
    let mut b = ModelBuilder::new("convnet", 18)
        .input("x", DType::F32, &fixed(&[2, 3, 16, 16]))
        .init("lo", &Tensor::scalar(0.0f32))
        .init("hi", &Tensor::scalar(6.0f32))
        .init("stem.weight", &random_weight(1, &[8, 3, 3, 3]))
        .init("stem.bias", &random_weight(2, &[8]))
        .init("expand.weight", &random_weight(3, &[16, 8, 1, 1]))
        .init("expand.bias", &random_weight(4, &[16]))
        .init("dw.weight", &random_weight(5, &[16, 1, 3, 3]))
        .init("dw.bias", &random_weight(6, &[16]))
        .init("project.weight", &random_weight(7, &[8, 16, 1, 1]))
        .init("project.bias", &random_weight(8, &[8]))
        .init("head.weight", &random_weight(9, &[12, 8, 1, 1]))
        .init("head.bias", &random_weight(10, &[12]))
        .init("axes", &Tensor::from_vec(vec![2], vec![2i64, 3]))
        .init("flat", &Tensor::from_vec(vec![2], vec![2i64, 12]))
        .init("fc.weight", &random_weight(11, &[5, 12]))
        .init("fc.bias", &random_weight(12, &[5]))
        .node(
            "stem",
            "Conv",
            &["x", "stem.weight", "stem.bias"],
            &["s"],
            vec![
                ("strides", A::Is(vec![2, 2])),
                ("pads", A::Is(vec![0, 0, 1, 1])),
                ("kernel_shape", A::Is(vec![3, 3])),
            ],
        );
    b = clip(b, "s", "s6");
    b = b.node("expand", "Conv", &["s6", "expand.weight", "expand.bias"], &["e"], vec![]);
    b = clip(b, "e", "e6");
    b = b.node(
        "dw",
        "Conv",
        &["e6", "dw.weight", "dw.bias"],
        &["d"],
        vec![("group", A::I(16)), ("pads", A::Is(vec![1, 1, 1, 1])), ("kernel_shape", A::Is(vec![3, 3]))],
    );
    b = clip(b, "d", "d6");
    b = b
        .node("project", "Conv", &["d6", "project.weight", "project.bias"], &["p"], vec![])
        .node("residual", "Add", &["p", "s6"], &["r"], vec![])
        .node("head", "Conv", &["r", "head.weight", "head.bias"], &["h"], vec![]);
    b = clip(b, "h", "h6");
    b.node("mean", "ReduceMean", &["h6", "axes"], &["m"], vec![("keepdims", A::I(1))])
        .node("flatten", "Reshape", &["m", "flat"], &["f"], vec![])
        .node("fc", "Gemm", &["f", "fc.weight", "fc.bias"], &["y"], vec![("transB", A::I(1))])
        .output("y", DType::F32, &fixed(&[2, 5]))
        .bytes()
}
