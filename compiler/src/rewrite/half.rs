//! `to_half`: the model runs in a 16-bit float type (`spartac compile --dtype f16|bf16`).
//!
//! Every fp32 value and constant becomes the 16-bit type; the graph's interface keeps its fp32
//! types (a Cast after each fp32 input, one before each fp32 output), so a user feeds and reads
//! what the ONNX model declares. Cast nodes to fp32 cast to the 16-bit type instead. Constants
//! are clamped to the type's finite range first, so that masks written with the fp32 minimum
//! (`(1 − mask) · f32::MIN`) stay finite and `0 · min` stays 0 rather than NaN. Weight TeSAs are
//! limited to 16 bits, so the planner picks the 16-bit kernels. Kernels that reduce (LayerNorm,
//! Softmax, reductions, matmul accumulators) compute in fp32 internally; what is rounded to
//! 16 bits is every value between kernels, as in PyTorch's `model.half()`.

use super::{fresh_name, renumber};
use crate::ir::{Attr, Attrs, DType, Graph, Initializer, Node, NodeId, Tensor, ValueFact, ValueId, ValueKind};
use crate::tesa::Format;
use crate::Error;

/// What [`to_half`] did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HalfReport {
    pub values: usize,
    pub constants: usize,
    /// Constant elements outside the 16-bit range, clamped.
    pub clamped: usize,
}

/// The largest finite value of `dtype` (a 16-bit float type).
fn finite_max(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 65504.0,
        _ => 3.389_531_389_251_535_5e38,
    }
}

/// Converts `graph` to run in `dtype` (F16 or BF16; see the module docs).
pub fn to_half(graph: &mut Graph, dtype: DType) -> Result<HalfReport, Error> {
    if !matches!(dtype, DType::F16 | DType::BF16) {
        return Err(Error::Invalid(format!("to_half: {} is not a 16-bit float type", dtype.name())));
    }
    let mut report = HalfReport::default();
    let opset = graph.opsets.get("").copied().unwrap_or(13);
    let cast = |name: String, x: ValueId, y: ValueId, to: DType| {
        let mut attrs = Attrs::new();
        attrs.insert("to", Attr::Int(to.to_onnx() as i64));
        Node {
            name,
            op_type: "Cast".into(),
            domain: String::new(),
            opset,
            attrs,
            inputs: vec![Some(x)],
            outputs: vec![y],
        }
    };
    // Interface values: the graph keeps them fp32; the inside reads/writes 16-bit twins.
    let mut prologue = vec![];
    let mut epilogue = vec![];
    let inputs = graph.inputs.clone();
    for x in inputs {
        if graph.fact(x).dtype != DType::F32 {
            continue;
        }
        let name = fresh_name(graph, &format!("{}.{}", graph.value(x).name, dtype.name()));
        let fact = ValueFact::new(dtype, graph.fact(x).shape.clone());
        let h = graph.add_value(name.clone(), fact, ValueKind::NodeOutput(NodeId(0)));
        for node in graph.nodes.iter_mut() {
            for v in node.inputs.iter_mut().flatten() {
                if *v == x {
                    *v = h;
                }
            }
        }
        if let Some(o) = graph.outputs.iter_mut().find(|o| **o == x) {
            *o = h;
        }
        prologue.push(cast(format!("{name}.cast"), x, h, dtype));
    }
    let outputs = graph.outputs.clone();
    for y in outputs {
        if graph.fact(y).dtype != DType::F32 || graph.inputs.contains(&y) {
            continue;
        }
        // `y` keeps its name and fp32 type; the producer now writes a 16-bit twin.
        let name = fresh_name(graph, &format!("{}.{}", graph.value(y).name, dtype.name()));
        let fact = ValueFact::new(DType::F32, graph.fact(y).shape.clone());
        let h = graph.add_value(name.clone(), fact, ValueKind::NodeOutput(NodeId(0)));
        graph.values[h.index()].tesa = graph.value(y).tesa.clone();
        for node in graph.nodes.iter_mut() {
            for v in node.inputs.iter_mut().flatten().chain(node.outputs.iter_mut()) {
                if *v == y {
                    *v = h;
                }
            }
        }
        epilogue.push(cast(format!("{name}.cast"), h, y, DType::F32));
    }
    let interface: Vec<ValueId> = graph.inputs.iter().chain(&graph.outputs).copied().collect();
    // Every other fp32 value, and the constants.
    for (i, value) in graph.values.iter_mut().enumerate() {
        if value.fact.dtype != DType::F32 || interface.contains(&ValueId(i as u32)) {
            continue;
        }
        value.fact.dtype = dtype;
        if let Some(t) = value.tesa.as_mut() {
            t.to_half_float(if dtype == DType::BF16 { Format::BFloat } else { Format::Float });
        }
        report.values += 1;
    }
    let max = finite_max(dtype);
    for init in graph.initializers.values_mut() {
        let t = init.to_dense();
        if t.dtype() != DType::F32 {
            continue;
        }
        let v: Vec<f64> = t
            .to_f64_vec()
            .into_iter()
            .map(|x| {
                if x.abs() > max && x.is_finite() {
                    report.clamped += 1;
                }
                if x.is_finite() {
                    x.clamp(-max, max)
                } else {
                    x
                }
            })
            .collect();
        let data = crate::ir::Data::from_f64_iter(dtype, v.into_iter());
        *init = Initializer::Dense(Tensor::new(t.shape().to_vec(), data).expect("same shape"));
        report.constants += 1;
    }
    for node in graph.nodes.iter_mut() {
        if node.op_type == "Cast" && node.attrs.int("to", 0).unwrap_or(0) == DType::F32.to_onnx() as i64 {
            node.attrs.insert("to", Attr::Int(dtype.to_onnx() as i64));
        }
    }
    let mut nodes = prologue;
    nodes.append(&mut graph.nodes);
    nodes.append(&mut epilogue);
    graph.nodes = nodes;
    renumber(graph)?;
    Ok(report)
}
