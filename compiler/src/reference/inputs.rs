//! Deterministic random inputs for a graph (`spartac run --random SEED`, tests).
//!
//! Floats are uniform in [-1, 1). Integer inputs used as Gather indices are uniform over
//! the valid index range of the gathered axis (token ids into an embedding table);
//! other integer inputs are 0 or 1 (masks); bools are fair coin flips.

use crate::ir::{Data, Graph, Tensor, ValueId};
use crate::rng::SplitMix64;
use std::collections::BTreeMap;

/// Exclusive upper bound for an integer input, from how the graph uses it.
pub fn integer_bound(graph: &Graph, id: ValueId) -> u64 {
    let mut bound: Option<u64> = None;
    for node in &graph.nodes {
        if node.op_type == "Gather" && node.inputs.get(1).copied().flatten() == Some(id) {
            if let Some(Some(data)) = node.inputs.first() {
                let shape = &graph.fact(*data).shape;
                let axis = node.attrs.int("axis", 0).unwrap_or(0);
                if let Some(ax) = crate::ir::normalize_axis(axis, shape.len()) {
                    let n = shape[ax] as u64;
                    bound = Some(bound.map_or(n, |b| b.min(n)));
                }
            }
        }
    }
    bound.unwrap_or(2).max(1)
}

/// One random tensor per graph input, keyed by input name.
pub fn random_inputs(graph: &Graph, seed: u64) -> BTreeMap<String, Tensor> {
    let specs: Vec<(String, crate::ir::DType, Vec<usize>, u64)> = graph
        .inputs
        .iter()
        .map(|&id| {
            let v = graph.value(id);
            (v.name.clone(), v.fact.dtype, v.fact.shape.clone(), integer_bound(graph, id))
        })
        .collect();
    random_tensors(&specs, seed)
}

/// Random tensors for `(name, dtype, shape, integer bound)` specs, drawn in order from one
/// stream: [`random_inputs`] of a graph and of its compiled program give the same tensors.
pub fn random_tensors(specs: &[(String, crate::ir::DType, Vec<usize>, u64)], seed: u64) -> BTreeMap<String, Tensor> {
    let mut rng = SplitMix64::new(seed);
    let mut out = BTreeMap::new();
    for (name, dtype, shape, bound) in specs {
        let n: usize = shape.iter().product();
        let data = if dtype.is_float() {
            Data::from_f64_iter(*dtype, (0..n).map(|_| rng.uniform(-1.0, 1.0)))
        } else {
            Data::from_f64_iter(*dtype, (0..n).map(|_| rng.below((*bound).max(1)) as f64))
        };
        out.insert(name.clone(), Tensor::new(shape.clone(), data).expect("length from shape"));
    }
    out
}
