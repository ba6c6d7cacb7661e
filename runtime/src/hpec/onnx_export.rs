//! The ONNX form of a challenge network: per layer `MatMul` with the weight as a
//! `sparse_initializer`, `Add` of the bias, `Relu`, and `Min` with 32, on an input
//! `images: f32[B, N]`. The frontend loads it like any model; the reference executor's
//! result on it equals the engine's.

use super::network::Network;
use super::sparse::CompressedMatrix;
use spartac::ir::{
    verify, Attrs, DType, Data, Graph, Initializer, Node, NodeId, SparseTensor, Tensor, ValueFact, ValueId, ValueKind,
};

/// Opset of the exported model (Min with broadcasting needs 8+; 17 is widely supported).
const OPSET: i64 = 17;

/// A layer's CSR weight as a COO sparse tensor with sorted flat indices.
fn layer_weight(csr: &CompressedMatrix) -> SparseTensor {
    let mut indices = Vec::with_capacity(csr.n_nonzeros());
    let mut values = Vec::with_capacity(csr.n_nonzeros());
    for row in 0..csr.n_outer {
        let (cols, vals) = csr.slot(row);
        for (&col, &v) in cols.iter().zip(vals) {
            indices.push(row * csr.n_inner + col as usize);
            values.push(v);
        }
    }
    SparseTensor { shape: vec![csr.n_outer, csr.n_inner], indices, values: Data::F32(values) }
}

fn add_const(graph: &mut Graph, name: &str, init: Initializer) -> ValueId {
    let id = graph.add_value(name.to_string(), init.fact(), ValueKind::Initializer);
    graph.initializers.insert(id, init);
    id
}

fn add_node(graph: &mut Graph, name: String, op: &str, inputs: Vec<ValueId>, out: String, fact: ValueFact) -> ValueId {
    let node_id = NodeId(graph.nodes.len() as u32);
    let id = graph.add_value(out, fact, ValueKind::NodeOutput(node_id));
    graph.nodes.push(Node {
        name,
        op_type: op.to_string(),
        domain: String::new(),
        opset: OPSET,
        attrs: Attrs::new(),
        inputs: inputs.into_iter().map(Some).collect(),
        outputs: vec![id],
    });
    id
}

/// Builds the graph of `network` for a batch of `batch` images.
pub fn network_to_graph(network: &Network, batch: usize) -> Graph {
    let n = network.neurons;
    let mut graph = Graph { name: format!("hpec_n{n}_l{}", network.n_layers()), ..Graph::default() };
    graph.opsets.insert(String::new(), OPSET);
    let input = graph.add_value("images".into(), ValueFact::new(DType::F32, vec![batch, n]), ValueKind::Input);
    graph.inputs.push(input);
    let bias = add_const(&mut graph, "bias", Initializer::Dense(Tensor::scalar(network.bias)));
    let cap = add_const(&mut graph, "cap", Initializer::Dense(Tensor::scalar(32.0f32)));
    let fact = ValueFact::new(DType::F32, vec![batch, n]);
    let mut y = input;
    for (k, layer) in network.layers.iter().enumerate() {
        let l = k + 1;
        let w = add_const(&mut graph, &format!("w{l}"), Initializer::Sparse(layer_weight(&layer.csr)));
        let z = add_node(&mut graph, format!("layer{l}/matmul"), "MatMul", vec![y, w], format!("z{l}"), fact.clone());
        let zb = add_node(&mut graph, format!("layer{l}/bias"), "Add", vec![z, bias], format!("zb{l}"), fact.clone());
        let r = add_node(&mut graph, format!("layer{l}/relu"), "Relu", vec![zb], format!("r{l}"), fact.clone());
        let name = if l == network.n_layers() { "scores".to_string() } else { format!("y{l}") };
        y = add_node(&mut graph, format!("layer{l}/cap"), "Min", vec![r, cap], name, fact.clone());
    }
    graph.outputs.push(y);
    verify(&graph).expect("the exported HPEC graph is well formed");
    graph
}

/// The images as a dense `f32[B, N]` tensor (the exported model's input).
pub fn images_to_tensor(images: &super::Images) -> Tensor {
    let (b, n) = (images.n_images(), images.neurons());
    let mut dense = vec![0.0f32; b * n];
    for img in 0..b {
        let (pixels, values) = images.pixels.slot(img);
        for (&p, &v) in pixels.iter().zip(values) {
            dense[img * n + p as usize] = v;
        }
    }
    Tensor::from_vec(vec![b, n], dense)
}
