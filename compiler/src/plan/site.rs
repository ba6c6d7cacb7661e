//! Plan sites: the operators the planner can split, `MatMul` and `Gemm` with a rank-2
//! constant weight, with the weight's logical view (`k × n` for `Y = X·W`), the activation
//! rows `m`, and the epilogue (bias add, activation) that follows.
//!
//! Convolutions reach the planner through `rewrite::channels_last`: a 1×1 convolution is a
//! MatMul there, planned like any other. Other convolutions (k×k, depthwise) are not planned:
//! their pruned channels are cut by `rewrite::shrink_channels`, and finer sparsity inside a
//! k×k filter would need the implicit-GEMM view of its weight, which is not built. Also not
//! planned: weights of rank above 2, Gemm with a constant `A`.

use super::suboperator::{Epilogue, Orientation};
use crate::ir::{Graph, Initializer, NodeId, Tensor, ValueId, ValueKind};
use crate::tesa::Tesa;

/// An operator with a constant weight.
#[derive(Clone, Debug)]
pub struct Site {
    pub node: NodeId,
    pub weight: ValueId,
    pub orientation: Orientation,
    /// Gemm with `transB = 1`: the logical weight is the stored one transposed.
    pub transposed: bool,
    /// Logical weight rows × cols (`k × n` for weight-right, `m × k` for weight-left).
    pub rows: usize,
    pub cols: usize,
    /// The other GEMM dimension: activation rows for weight-right, activation columns
    /// for weight-left.
    pub m: usize,
    pub epilogue: Epilogue,
}

impl Site {
    /// Row-major pruned mask of the logical weight (`true` = pruned); a weight without a
    /// TeSA is pruned where it is zero.
    pub fn pruned(&self, graph: &Graph) -> Vec<bool> {
        let v = graph.value(self.weight);
        let mask = match &v.tesa {
            Some(t) => t.mask(),
            None => Tesa::from_zeros(&self.stored(graph)).mask(),
        };
        self.logical(&mask)
    }

    /// The TeSA of the weight in logical order (bit widths included).
    pub fn tesa(&self, graph: &Graph) -> Tesa {
        let stored = graph.value(self.weight).tesa.clone().unwrap_or_else(|| Tesa::from_zeros(&self.stored(graph)));
        if !self.transposed {
            return stored;
        }
        let mut t = Tesa::dense(&[self.rows, self.cols], 32, stored.uniform().format());
        t.set_uniform(stored.uniform());
        for r in 0..self.rows {
            for c in 0..self.cols {
                t.set_attr(r * self.cols + c, stored.attr(c * self.rows + r));
            }
        }
        t
    }

    fn stored(&self, graph: &Graph) -> Tensor {
        graph.initializers.get(&self.weight).map(Initializer::to_dense).expect("a site's weight is an initializer")
    }

    /// The weight values in logical order, as f32.
    pub fn weight_values(&self, graph: &Graph) -> Vec<f32> {
        let v: Vec<f32> = self.stored(graph).to_f64_vec().into_iter().map(|x| x as f32).collect();
        self.logical(&v)
    }

    fn logical<T: Copy>(&self, stored: &[T]) -> Vec<T> {
        if !self.transposed {
            return stored.to_vec();
        }
        // Stored is cols × rows.
        (0..self.rows * self.cols).map(|i| stored[(i % self.cols) * self.rows + i / self.cols]).collect()
    }

    /// `graph` with this site's weight replaced by `logical` values (logical order).
    pub fn with_weight(&self, graph: &Graph, logical: &[f32]) -> Graph {
        let stored: Vec<f32> = if self.transposed {
            (0..logical.len()).map(|i| logical[(i % self.rows) * self.cols + i / self.rows]).collect()
        } else {
            logical.to_vec()
        };
        let mut g = graph.clone();
        let shape = graph.fact(self.weight).shape.clone();
        let dtype = graph.fact(self.weight).dtype;
        let t = Tensor::from_vec(shape, stored).cast(dtype);
        g.initializers.insert(self.weight, Initializer::Dense(t));
        g
    }
}

const ACTIVATIONS: [&str; 6] = ["Relu", "Gelu", "Sigmoid", "Tanh", "LeakyRelu", "Elu"];

/// The single consumer of `value`, if exactly one node reads it and it is no graph output.
fn sole_consumer(graph: &Graph, value: ValueId) -> Option<NodeId> {
    if graph.outputs.contains(&value) {
        return None;
    }
    let mut users = graph.nodes.iter().enumerate().filter(|(_, n)| n.inputs.contains(&Some(value)));
    let (idx, _) = users.next()?;
    users.next().is_none().then_some(NodeId(idx as u32))
}

fn is_const(graph: &Graph, id: ValueId) -> bool {
    graph.value(id).kind == ValueKind::Initializer && graph.initializers.contains_key(&id)
}

/// Bias add and activation after `out` (an Add with a constant input, then an activation).
fn epilogue_after(graph: &Graph, out: ValueId, mut epilogue: Epilogue) -> Epilogue {
    let mut cur = out;
    if epilogue.bias.is_none() {
        if let Some(add) = sole_consumer(graph, cur) {
            let node = graph.node(add);
            if node.op_type == "Add" {
                if let Some(other) = node.inputs.iter().flatten().find(|i| **i != cur) {
                    if is_const(graph, *other) {
                        epilogue.bias = Some(graph.value(*other).name.clone());
                        cur = node.outputs[0];
                    }
                }
            }
        }
    }
    if let Some(act) = sole_consumer(graph, cur) {
        let node = graph.node(act);
        if ACTIVATIONS.contains(&node.op_type.as_str()) {
            epilogue.activation = Some(node.op_type.clone());
        }
    }
    epilogue
}

/// Every plannable operator, in node order.
pub fn find_sites(graph: &Graph) -> Vec<Site> {
    let mut sites = vec![];
    for (idx, node) in graph.nodes.iter().enumerate() {
        let input = |i: usize| node.inputs.get(i).copied().flatten();
        let (Some(a), Some(b)) = (input(0), input(1)) else { continue };
        let rank2 = |id: ValueId| graph.fact(id).shape.len() == 2;
        let numel = |id: ValueId| graph.fact(id).numel();
        let site = match node.op_type.as_str() {
            "MatMul" if is_const(graph, b) && rank2(b) && !is_const(graph, a) => {
                let (k, n) = (graph.fact(b).shape[0], graph.fact(b).shape[1]);
                Some((b, Orientation::WeightRight, false, k, n, numel(a) / k.max(1), Epilogue::default()))
            }
            "MatMul" if is_const(graph, a) && rank2(a) && !is_const(graph, b) && graph.fact(b).shape.len() == 2 => {
                let (m, k) = (graph.fact(a).shape[0], graph.fact(a).shape[1]);
                Some((a, Orientation::WeightLeft, false, m, k, graph.fact(b).shape[1], Epilogue::default()))
            }
            "Gemm" if is_const(graph, b) && rank2(b) && !is_const(graph, a) => {
                let trans_b = node.attrs.int("transB", 0).unwrap_or(0) != 0;
                let s = &graph.fact(b).shape;
                let (k, n) = if trans_b { (s[1], s[0]) } else { (s[0], s[1]) };
                let bias = input(2).filter(|c| is_const(graph, *c)).map(|c| graph.value(c).name.clone());
                let epi = Epilogue { bias, ..Epilogue::default() };
                Some((b, Orientation::WeightRight, trans_b, k, n, numel(a) / k.max(1), epi))
            }
            _ => None,
        };
        if let Some((weight, orientation, transposed, rows, cols, m, epi)) = site {
            let epilogue = epilogue_after(graph, node.outputs[0], epi);
            sites.push(Site { node: NodeId(idx as u32), weight, orientation, transposed, rows, cols, m, epilogue });
        }
    }
    sites
}
