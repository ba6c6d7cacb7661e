//! IR -> ONNX: writes a graph back as a ModelProto (static shapes, dense initializers
//! as `raw_data`, sparse ones as `sparse_initializer`), and saves it atomically. `spartac hpec
//! export` writes challenge networks through it.

use super::tensor_proto::{sparse_to_proto, tensor_to_proto};
use crate::ir::{Attr, Graph, Initializer, ValueFact, ValueId};
use crate::Error;
use onnx_protobuf::attribute_proto::AttributeType;
use onnx_protobuf::tensor_shape_proto::dimension::Value as DimValue;
use onnx_protobuf::tensor_shape_proto::Dimension;
use onnx_protobuf::type_proto::{Tensor as TensorType, Value as TypeValue};
use onnx_protobuf::{
    AttributeProto, GraphProto, Message, ModelProto, NodeProto, OperatorSetIdProto, TensorShapeProto, TypeProto,
    ValueInfoProto,
};
use std::path::Path;

fn value_info(name: &str, fact: &ValueFact) -> ValueInfoProto {
    let mut shape = TensorShapeProto::new();
    for &d in &fact.shape {
        let mut dim = Dimension::new();
        dim.value = Some(DimValue::DimValue(d as i64));
        shape.dim.push(dim);
    }
    let mut tensor = TensorType::new();
    tensor.elem_type = fact.dtype.to_onnx();
    tensor.shape = protobuf::MessageField::some(shape);
    let mut ty = TypeProto::new();
    ty.value = Some(TypeValue::TensorType(tensor));
    let mut info = ValueInfoProto::new();
    info.name = name.to_string();
    info.type_ = protobuf::MessageField::some(ty);
    info
}

fn attr_to_proto(name: &str, attr: &Attr) -> AttributeProto {
    let mut a = AttributeProto::new();
    a.name = name.to_string();
    let ty = match attr {
        Attr::Int(i) => {
            a.i = *i;
            AttributeType::INT
        }
        Attr::Float(f) => {
            a.f = *f;
            AttributeType::FLOAT
        }
        Attr::String(s) => {
            a.s = s.as_bytes().to_vec();
            AttributeType::STRING
        }
        Attr::Tensor(t) => {
            a.t = protobuf::MessageField::some(tensor_to_proto("", t));
            AttributeType::TENSOR
        }
        Attr::Ints(v) => {
            a.ints = v.clone();
            AttributeType::INTS
        }
        Attr::Floats(v) => {
            a.floats = v.clone();
            AttributeType::FLOATS
        }
        Attr::Strings(v) => {
            a.strings = v.iter().map(|s| s.as_bytes().to_vec()).collect();
            AttributeType::STRINGS
        }
    };
    a.type_ = protobuf::EnumOrUnknown::new(ty);
    a
}

/// Builds the ModelProto of a graph.
pub fn graph_to_model(graph: &Graph) -> ModelProto {
    let name_of = |id: ValueId| graph.value(id).name.clone();
    let mut g = GraphProto::new();
    g.name = graph.name.clone();
    for &id in &graph.inputs {
        g.input.push(value_info(&name_of(id), graph.fact(id)));
    }
    for &id in &graph.outputs {
        g.output.push(value_info(&name_of(id), graph.fact(id)));
    }
    for (id, init) in &graph.initializers {
        match init {
            Initializer::Dense(t) => g.initializer.push(tensor_to_proto(&name_of(*id), t)),
            Initializer::Sparse(s) => g.sparse_initializer.push(sparse_to_proto(&name_of(*id), s)),
        }
    }
    for node in &graph.nodes {
        let mut n = NodeProto::new();
        n.name = node.name.clone();
        n.op_type = node.op_type.clone();
        n.domain = node.domain.clone();
        n.input = node.inputs.iter().map(|i| i.map(name_of).unwrap_or_default()).collect();
        n.output = node.outputs.iter().map(|&o| name_of(o)).collect();
        n.attribute = node.attrs.0.iter().map(|(k, v)| attr_to_proto(k, v)).collect();
        g.node.push(n);
    }
    let mut model = ModelProto::new();
    // IR version 8 (ONNX 1.10+) is what sparse initializers and opsets up to 15+ need.
    model.ir_version = 8;
    model.producer_name = "spartac".into();
    model.producer_version = env!("CARGO_PKG_VERSION").into();
    for (domain, version) in &graph.opsets {
        let mut o = OperatorSetIdProto::new();
        o.domain = domain.clone();
        o.version = *version;
        model.opset_import.push(o);
    }
    model.graph = protobuf::MessageField::some(g);
    model
}

/// Writes the graph as an ONNX file; a temporary file is renamed into place, so a
/// failure never leaves a partial model behind.
pub fn save_model(graph: &Graph, path: &Path) -> Result<(), Error> {
    let bytes = graph_to_model(graph)
        .write_to_bytes()
        .map_err(|e| Error::Unsupported(format!("cannot serialize the model: {e}")))?;
    crate::output::write_atomic(path, &bytes).map_err(|source| Error::Write { path: path.to_path_buf(), source })
}
