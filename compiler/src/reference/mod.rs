//! The CPU reference executor: runs a graph node by node with each op's reference
//! semantics (`ops::OpDef::eval`). It is the correctness oracle for every later pass,
//! plan and kernel, so it checks everything it can: input names, types and shapes,
//! and that every op produced exactly the type shape inference promised.
//!
//! Nodes run in graph order and every value is freed after its last use.
//! [`execute_transformed`] applies a rewrite to every value as it is made (constants and inputs
//! before the run, each node's outputs right after it); the propagation invariant forces
//! pruned elements to zero through it (`propagate::execute_zeroing_pruned`).

mod inputs;

pub use inputs::{integer_bound, random_inputs, random_tensors};

use crate::ir::{Graph, Initializer, Tensor, ValueFact, ValueId};
use crate::ops::{registry, NodeCtx};
use crate::Error;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Time spent per op type during one run.
#[derive(Clone, Debug, Default)]
pub struct Profile {
    pub per_op: BTreeMap<String, (usize, Duration)>,
    pub total: Duration,
}

/// One value slot during execution: borrowed constants or owned results.
enum Slot<'a> {
    Empty,
    Borrowed(&'a Tensor),
    Owned(Tensor),
}

impl Slot<'_> {
    fn get(&self) -> Option<&Tensor> {
        match self {
            Slot::Empty => None,
            Slot::Borrowed(t) => Some(t),
            Slot::Owned(t) => Some(t),
        }
    }
}

/// Checks a set of named inputs against the graph's inputs: same names, types, shapes.
pub fn check_inputs(graph: &Graph, inputs: &BTreeMap<String, Tensor>) -> Result<(), Error> {
    for name in inputs.keys() {
        if !graph.inputs.iter().any(|&id| &graph.value(id).name == name) {
            let names: Vec<&str> = graph.inputs.iter().map(|&id| graph.value(id).name.as_str()).collect();
            return Err(Error::input(name, format!("is not an input of the model (inputs: {})", names.join(", "))));
        }
    }
    for &id in &graph.inputs {
        let v = graph.value(id);
        let t = inputs.get(&v.name).ok_or_else(|| Error::input(&v.name, format!("is missing (expects {})", v.fact)))?;
        let got = ValueFact::of(t);
        if got != v.fact {
            return Err(Error::input(&v.name, format!("expects {} but got {got}", v.fact)));
        }
    }
    Ok(())
}

/// Runs the graph; returns the outputs by name, in the graph's output order.
pub fn execute(graph: &Graph, inputs: &BTreeMap<String, Tensor>) -> Result<Vec<(String, Tensor)>, Error> {
    execute_profiled(graph, inputs, None)
}

/// Like [`execute`], and adds per-op-type times to `profile` when given.
pub fn execute_profiled(
    graph: &Graph,
    inputs: &BTreeMap<String, Tensor>,
    profile: Option<&mut Profile>,
) -> Result<Vec<(String, Tensor)>, Error> {
    run(graph, inputs, profile, None)
}

/// A rewrite applied to every value as it comes into existence (constants and inputs
/// before the run, each node's outputs right after the node runs).
pub type ValueTransform<'a> = &'a dyn Fn(ValueId, Tensor) -> Tensor;

/// Like [`execute`], with `transform` applied to every value (e.g. forcing the elements
/// a pass proved pruned to zero).
pub fn execute_transformed(
    graph: &Graph,
    inputs: &BTreeMap<String, Tensor>,
    transform: ValueTransform,
) -> Result<Vec<(String, Tensor)>, Error> {
    run(graph, inputs, None, Some(transform))
}

fn run(
    graph: &Graph,
    inputs: &BTreeMap<String, Tensor>,
    mut profile: Option<&mut Profile>,
    transform: Option<ValueTransform>,
) -> Result<Vec<(String, Tensor)>, Error> {
    check_inputs(graph, inputs)?;
    let started = Instant::now();
    let mut slots: Vec<Slot> = (0..graph.values.len()).map(|_| Slot::Empty).collect();
    let mut densified: BTreeMap<usize, Tensor> = BTreeMap::new();
    for (id, init) in &graph.initializers {
        if let Initializer::Sparse(s) = init {
            densified.insert(id.index(), s.to_dense());
        }
    }
    for (id, init) in &graph.initializers {
        slots[id.index()] = match init {
            Initializer::Dense(t) => Slot::Borrowed(t),
            Initializer::Sparse(_) => Slot::Borrowed(&densified[&id.index()]),
        };
    }
    for &id in &graph.inputs {
        slots[id.index()] = Slot::Borrowed(&inputs[&graph.value(id).name]);
    }
    if let Some(f) = transform {
        for id in graph.initializers.keys().chain(&graph.inputs) {
            let owned = slots[id.index()].get().expect("constants and inputs are set").clone();
            slots[id.index()] = Slot::Owned(f(*id, owned));
        }
    }
    let last_use = graph.last_uses();
    for (node_idx, node) in graph.nodes.iter().enumerate() {
        let def = registry().get(&node.op_type).ok_or_else(|| Error::UnknownOp {
            node: node.name.clone(),
            op_type: node.op_type.clone(),
            domain: node.domain.clone(),
            opset: node.opset,
        })?;
        let ctx = NodeCtx { name: &node.name, attrs: &node.attrs, opset: node.opset, n_outputs: node.outputs.len() };
        let t0 = Instant::now();
        let outs = {
            let ins: Vec<Option<&Tensor>> =
                node.inputs.iter().map(|i| i.and_then(|id| slots[id.index()].get())).collect();
            (def.eval)(&ctx, &ins).map_err(|e| Error::op(node, e))?
        };
        if let Some(p) = profile.as_deref_mut() {
            let e = p.per_op.entry(node.op_type.clone()).or_default();
            e.0 += 1;
            e.1 += t0.elapsed();
        }
        if outs.len() < node.outputs.len() {
            return Err(Error::Invalid(format!(
                "node {:?} ({}) produced {} outputs, expected {}",
                node.name,
                node.op_type,
                outs.len(),
                node.outputs.len()
            )));
        }
        for (t, &id) in outs.into_iter().zip(&node.outputs) {
            let want = graph.fact(id);
            if ValueFact::of(&t) != *want {
                return Err(Error::Invalid(format!(
                    "node {:?} ({}) produced {} for {:?}, but inference said {want}",
                    node.name,
                    node.op_type,
                    ValueFact::of(&t),
                    graph.value(id).name
                )));
            }
            slots[id.index()] = Slot::Owned(match transform {
                Some(f) => f(id, t),
                None => t,
            });
        }
        // Free what no later node reads.
        for id in node.inputs.iter().flatten() {
            if last_use[id.index()] == Some(node_idx) {
                slots[id.index()] = Slot::Empty;
            }
        }
    }
    if let Some(p) = profile {
        p.total += started.elapsed();
    }
    let mut result = Vec::with_capacity(graph.outputs.len());
    for &id in &graph.outputs {
        let t = match std::mem::replace(&mut slots[id.index()], Slot::Empty) {
            Slot::Owned(t) => t,
            Slot::Borrowed(t) => t.clone(),
            Slot::Empty => {
                // The same value listed twice as an output: take it from the earlier entry.
                let name = &graph.value(id).name;
                result
                    .iter()
                    .find(|(n, _): &&(String, Tensor)| n == name)
                    .map(|(_, t)| t.clone())
                    .ok_or_else(|| Error::Invalid(format!("graph output {name:?} was never computed")))?
            }
        };
        result.push((graph.value(id).name.clone(), t));
    }
    Ok(result)
}
