//! The graph IR: values with a static type, nodes in topological order, dense and
//! sparse initializers, and a slot on every value for its TeSA (`crate::tesa`).
//!
//! A [`Value`] has its ONNX name, a [`ValueFact`] (dtype and static shape), a [`ValueKind`] and
//! `tesa: Option<Tesa>`; a sparse initializer ([`SparseTensor`]) holds sorted flat positions and
//! their values (ONNX's COO forms are read into it). Value ids are stable: graph inputs, then
//! initializers, then node outputs in topological order; the text form prints them, so
//! snapshots are deterministic.

use super::{Attrs, DType, Data, Tensor};
use std::collections::BTreeMap;
use std::fmt;

/// Index of a value in `Graph::values`. Ids are assigned once, in a deterministic
/// order (graph inputs, initializers, then node outputs in topological order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId(pub u32);

/// Index of a node in `Graph::nodes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub u32);

impl ValueId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl NodeId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for ValueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{}", self.0)
    }
}

/// Static type of a value: element type and fully known shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ValueFact {
    pub dtype: DType,
    pub shape: Vec<usize>,
}

impl ValueFact {
    pub fn new(dtype: DType, shape: Vec<usize>) -> ValueFact {
        ValueFact { dtype, shape }
    }

    pub fn of(t: &Tensor) -> ValueFact {
        ValueFact { dtype: t.dtype(), shape: t.shape().to_vec() }
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// The element count, `None` when the product of the dims overflows.
    pub fn checked_numel(&self) -> Option<usize> {
        self.shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
    }

    /// The bytes a dense value of this type takes, `None` when that overflows.
    pub fn checked_bytes(&self) -> Option<usize> {
        self.checked_numel()?.checked_mul(self.dtype.size_bytes())
    }

    /// `Err(reason)` when a dense value of this type overflows the address space or takes
    /// more than `budget` bytes (the one place sizes are checked before anything is allocated).
    pub fn fits(&self, budget: usize) -> Result<usize, String> {
        match self.checked_bytes() {
            None => Err(format!("{self} has more elements than memory can address")),
            Some(b) if b > budget => Err(format!(
                "{self} takes {}, over the memory budget of {} (--memory-budget-gib)",
                human_bytes(b),
                human_bytes(budget)
            )),
            Some(b) => Ok(b),
        }
    }
}

/// `1.5 GiB`-style sizes for messages.
pub fn human_bytes(b: usize) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

impl fmt::Display for ValueFact {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dims: Vec<String> = self.shape.iter().map(|d| d.to_string()).collect();
        write!(f, "{}[{}]", self.dtype, dims.join(","))
    }
}

/// Where a value comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueKind {
    Input,
    Initializer,
    NodeOutput(NodeId),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Value {
    /// The ONNX tensor name (unique in the graph).
    pub name: String,
    pub fact: ValueFact,
    pub kind: ValueKind,
    /// The value's TeSA (SparTA's sparsity attribute); `None` = dense, not yet annotated.
    pub tesa: Option<super::tesa::Tesa>,
}

/// A tensor stored in COO form: flat row-major positions of the nonzeros and their values.
#[derive(Clone, Debug, PartialEq)]
pub struct SparseTensor {
    pub shape: Vec<usize>,
    /// Strictly increasing flat positions.
    pub indices: Vec<usize>,
    pub values: Data,
}

impl SparseTensor {
    pub fn dtype(&self) -> DType {
        self.values.dtype()
    }

    pub fn nnz(&self) -> usize {
        self.indices.len()
    }

    /// Scatters into a dense tensor.
    pub fn to_dense(&self) -> Tensor {
        let n: usize = self.shape.iter().product();
        let mut dense = Data::zeros(self.dtype(), n);
        crate::with_data!(&mut dense, d => {
            let vals = Data::clone(&self.values);
            let src = Element::into_vec(vals).unwrap_or_default();
            for (&pos, &v) in self.indices.iter().zip(src.iter()) {
                d[pos] = v;
            }
        });
        Tensor::new(self.shape.clone(), dense).expect("sparse to dense keeps the shape")
    }
}

use super::Element;

/// A constant of the graph, kept in the form the model stored it in.
#[derive(Clone, Debug, PartialEq)]
pub enum Initializer {
    Dense(Tensor),
    Sparse(SparseTensor),
}

impl Initializer {
    pub fn fact(&self) -> ValueFact {
        match self {
            Initializer::Dense(t) => ValueFact::of(t),
            Initializer::Sparse(s) => ValueFact::new(s.dtype(), s.shape.clone()),
        }
    }

    /// Fraction of nonzero elements.
    pub fn density(&self) -> f64 {
        match self {
            Initializer::Dense(t) => t.density(),
            Initializer::Sparse(s) => {
                let n: usize = s.shape.iter().product();
                if n == 0 {
                    1.0
                } else {
                    (s.nnz() - s.values.count_zeros()) as f64 / n as f64
                }
            }
        }
    }

    pub fn to_dense(&self) -> Tensor {
        match self {
            Initializer::Dense(t) => t.clone(),
            Initializer::Sparse(s) => s.to_dense(),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// The ONNX node name; the frontend makes up `{op_type}_{index}` when it is empty.
    pub name: String,
    pub op_type: String,
    /// Operator domain ("" for the default ONNX domain).
    pub domain: String,
    /// Opset version in effect for this node's domain.
    pub opset: i64,
    pub attrs: Attrs,
    /// Inputs by position; `None` for an omitted optional input.
    pub inputs: Vec<Option<ValueId>>,
    pub outputs: Vec<ValueId>,
}

/// A whole model: values, nodes in topological order, inputs, outputs and constants.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Graph {
    pub name: String,
    /// Opset per domain, sorted.
    pub opsets: BTreeMap<String, i64>,
    pub values: Vec<Value>,
    pub nodes: Vec<Node>,
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<ValueId>,
    pub initializers: BTreeMap<ValueId, Initializer>,
}

impl Graph {
    pub fn value(&self, id: ValueId) -> &Value {
        &self.values[id.index()]
    }

    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.index()]
    }

    pub fn fact(&self, id: ValueId) -> &ValueFact {
        &self.values[id.index()].fact
    }

    pub fn find_value(&self, name: &str) -> Option<ValueId> {
        self.values.iter().position(|v| v.name == name).map(|i| ValueId(i as u32))
    }

    pub fn add_value(&mut self, name: String, fact: ValueFact, kind: ValueKind) -> ValueId {
        let id = ValueId(self.values.len() as u32);
        self.values.push(Value { name, fact, kind, tesa: None });
        id
    }

    /// Number of parameters: elements of all initializers.
    pub fn n_parameters(&self) -> usize {
        self.initializers.values().map(|i| i.fact().numel()).sum()
    }

    /// For every value, the index of the last node that reads it (graph outputs never die).
    pub fn last_uses(&self) -> Vec<Option<usize>> {
        let mut last = vec![None; self.values.len()];
        for (i, node) in self.nodes.iter().enumerate() {
            for id in node.inputs.iter().flatten() {
                last[id.index()] = Some(i);
            }
        }
        for o in &self.outputs {
            last[o.index()] = Some(usize::MAX);
        }
        last
    }

    /// Op type histogram, sorted by op type.
    pub fn op_histogram(&self) -> BTreeMap<String, usize> {
        let mut h = BTreeMap::new();
        for n in &self.nodes {
            *h.entry(n.op_type.clone()).or_insert(0) += 1;
        }
        h
    }
}

impl crate::Error {
    /// An op's error on `node` (`Error::Op`, naming the node and its op type).
    pub fn op(node: &Node, err: super::OpError) -> crate::Error {
        crate::Error::Op { node: node.name.clone(), op_type: node.op_type.clone(), message: err.0 }
    }
}
