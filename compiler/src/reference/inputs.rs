//! Deterministic random inputs for a graph (`spartac run --random SEED`, tests).
//!
//! Floats are uniform in [-1, 1). Integer inputs used as Gather indices are uniform over
//! the valid index range of the gathered axis (token ids into an embedding table);
//! other integer inputs are 0 or 1 (masks); bools are fair coin flips.

use crate::ir::{Data, Graph, Tensor, ValueId};
use crate::rng::SplitMix64;
use std::collections::BTreeMap;

/// Exclusive upper bound for an integer input, from how the graph uses it.
fn integer_bound(graph: &Graph, id: ValueId) -> u64 {
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
    let mut rng = SplitMix64::new(seed);
    let mut out = BTreeMap::new();
    for &id in &graph.inputs {
        let v = graph.value(id);
        let n = v.fact.numel();
        let dtype = v.fact.dtype;
        let data = if dtype.is_float() {
            Data::from_f64_iter(dtype, (0..n).map(|_| rng.uniform(-1.0, 1.0)))
        } else {
            let bound = integer_bound(graph, id);
            Data::from_f64_iter(dtype, (0..n).map(|_| rng.below(bound) as f64))
        };
        out.insert(v.name.clone(), Tensor::new(v.fact.shape.clone(), data).expect("length from shape"));
    }
    out
}
