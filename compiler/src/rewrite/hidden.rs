//! `shrink_hidden`: cut the hidden units of an MLP that propagation pruned (structured neuron
//! pruning of a transformer's FFN, ConvNeXt's pointwise layers), so the two matmuls become
//! physically smaller dense ones; the last-axis counterpart of [`super::shrink_channels`].
//!
//! A *hidden chain* starts at a MatMul (or Gemm) with a constant weight, `Y = X · W1`, whose
//! last axis (`H` units) only elementwise ops then carry ([`super::ELEMENTWISE`]: a bias Add,
//! GELU in its erf form, Relu, ...; not `Pow`, so not the tanh GELU's cube) until one MatMul
//! (or Gemm) with a constant weight reads it as its left operand, `Z · W2`. Unit `j` only ever
//! meets unit `j` inside the chain, so it is cut when every value of the chain has it pruned
//! in its TeSA: that is exact, as a pruned element is zero or unused (propagation's
//! invariant). Cutting it drops column `j` of `W1` (row `j` of a `transB` Gemm's), entry `j`
//! of every per-unit constant in the chain (a bias) and row `j` of `W2` (column `j` of a
//! `transB` Gemm's). Pruning the rows of a MatMul's `W2` (`channel_magnitude` on it: its axis
//! 0 is the hidden axis) is enough: propagation finds the units unused and prunes them back to
//! `W1`.
//!
//! Which dead units go ([`aligned_kept`]): while the weights stay sparse (block pruning: over
//! a tenth of their live units' elements pruned), only whole aligned groups of 32 units, so
//! the remaining blocks stay on their grid; once they are dense (neuron pruning), every dead
//! unit, keeping a multiple of 8.
//!
//! A chain is left whole when a value of it is a graph output or is read outside the chain,
//! or when an op in it reads another activation or a constant that is neither a scalar nor one
//! entry per unit. A weight or constant to cut that other nodes read too (exporters share equal
//! constants: torchvision's zero-initialised biases of ConvNeXt's blocks) is copied for the
//! chain and the copy cut.

use super::{fresh_name, gather_tensor, renumber, take_positions};
use crate::ir::{Graph, Initializer, ValueFact, ValueId, ValueKind};
use crate::Error;
use std::collections::{BTreeSet, HashMap};

/// What [`shrink_hidden`] did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HiddenReport {
    /// Hidden chains found, and how many were cut.
    pub chains: usize,
    pub shrunk: usize,
    /// Hidden units summed over the chains, before and after.
    pub units_before: usize,
    pub units_after: usize,
}

/// A constant input to cut along `axis`: (node, input, axis).
type Cut = (usize, usize, usize);

/// One chain: its values (the first is the producer's output), the cuts and the unit count.
struct Chain {
    values: BTreeSet<ValueId>,
    cuts: Vec<Cut>,
    units: usize,
}

/// The axis of a MatMul/Gemm weight that holds the output units (`out`) or the reduced
/// inputs (`!out`); `None` when the node is not a plain product with a constant 2-D weight at
/// input 1 (and its left operand not transposed).
fn weight_axis(graph: &Graph, node: &crate::ir::Node, out: bool) -> Option<usize> {
    let w = node.inputs.get(1).copied().flatten()?;
    if !graph.initializers.contains_key(&w) || graph.fact(w).shape.len() != 2 {
        return None;
    }
    match node.op_type.as_str() {
        "MatMul" => Some(usize::from(out)),
        "Gemm" if node.attrs.int("transA", 0).unwrap_or(0) == 0 => {
            let trans_b = node.attrs.int("transB", 0).unwrap_or(0) != 0;
            Some(usize::from(out != trans_b))
        }
        _ => None,
    }
}

/// The chain that starts at node `start`'s output, if it is one.
fn chain_from(graph: &Graph, start: usize, readers: &HashMap<ValueId, Vec<usize>>) -> Option<Chain> {
    let producer = &graph.nodes[start];
    let w1_axis = weight_axis(graph, producer, true)?;
    let y = producer.outputs[0];
    let units = *graph.fact(y).shape.last()?;
    if units <= 1 || graph.fact(producer.inputs[1]?).shape[w1_axis] != units {
        return None;
    }
    let mut cuts: Vec<Cut> = vec![(start, 1, w1_axis)];
    // A Gemm's bias: one entry per unit (a scalar or a row of one broadcasts: left alone).
    if producer.op_type == "Gemm" {
        if let Some(c) = producer.inputs.get(2).copied().flatten() {
            let f = graph.fact(c);
            if !graph.initializers.contains_key(&c) {
                return None;
            }
            if f.shape.last() == Some(&units) && f.numel() == units {
                cuts.push((start, 2, f.shape.len() - 1));
            } else if f.numel() != 1 {
                return None;
            }
        }
    }
    let mut values: BTreeSet<ValueId> = BTreeSet::from([y]);
    let mut todo = vec![y];
    let mut consumer = None;
    let mut seen_nodes: BTreeSet<usize> = BTreeSet::new();
    while let Some(v) = todo.pop() {
        if graph.outputs.contains(&v) {
            return None;
        }
        for &ni in readers.get(&v).map(Vec::as_slice).unwrap_or(&[]) {
            let node = &graph.nodes[ni];
            if !super::ELEMENTWISE.contains(&node.op_type.as_str()) {
                // The end of the chain: one product reading it as its left operand.
                let is_end = weight_axis(graph, node, false).is_some() && node.inputs.first() == Some(&Some(v));
                if !is_end || consumer.is_some_and(|c| c != ni) {
                    return None;
                }
                consumer = Some(ni);
                continue;
            }
            if !seen_nodes.insert(ni) {
                continue;
            }
            let out = *node.outputs.first()?;
            if node.outputs.len() != 1 || graph.fact(out).shape.last() != Some(&units) {
                return None;
            }
            for (i, input) in node.inputs.iter().enumerate() {
                let Some(input) = *input else { continue };
                if values.contains(&input) {
                    continue;
                }
                if !graph.initializers.contains_key(&input) {
                    // Another activation: it would have to be cut too (or its units joined).
                    // Its producer may still be in the chain (a DAG such as GELU's `x · ...`).
                    if reaches_chain(graph, input, &values) {
                        continue;
                    }
                    return None;
                }
                let f = graph.fact(input);
                if f.numel() == 1 {
                    continue;
                }
                if f.shape.last() == Some(&units) && f.numel() == units {
                    cuts.push((ni, i, f.shape.len() - 1));
                } else {
                    return None;
                }
            }
            if values.insert(out) {
                todo.push(out);
            }
        }
    }
    let end = consumer?;
    // Every elementwise input that is an activation is a chain value by now.
    for &ni in &seen_nodes {
        let node = &graph.nodes[ni];
        let foreign = node.inputs.iter().flatten().any(|i| !values.contains(i) && !graph.initializers.contains_key(i));
        if foreign {
            return None;
        }
    }
    let end_node = &graph.nodes[end];
    let w2_axis = weight_axis(graph, end_node, false)?;
    if graph.fact(end_node.inputs[1]?).shape[w2_axis] != units {
        return None;
    }
    cuts.push((end, 1, w2_axis));
    Some(Chain { values, cuts, units })
}

/// Whether `v` is (so far) produced from the chain: its producer's activation inputs lead back
/// to it. Checked again once the chain is complete.
fn reaches_chain(graph: &Graph, v: ValueId, values: &BTreeSet<ValueId>) -> bool {
    let Some(node) = graph.nodes.iter().find(|n| n.outputs.contains(&v)) else { return false };
    super::ELEMENTWISE.contains(&node.op_type.as_str())
        && node.inputs.iter().flatten().any(|i| values.contains(i) || reaches_chain(graph, *i, values))
}

/// Unit groups that stay whole while the weights keep pruned elements (32 units: the block
/// pruning's grid, so the cut keeps the remaining blocks aligned).
pub const UNIT_GROUP: usize = 32;

/// What a cut of the dense weights keeps a multiple of (8 units: 16-byte rows in 16 bits).
pub const UNIT_ALIGN: usize = 8;

/// The share of pruned elements (numerator, denominator) above which the live units' weights
/// count as sparse: 1 in 10.
const SPARSE_SHARE: (usize, usize) = (1, 10);

/// The units a chain keeps, given which are live. While the chain's weights keep more than a
/// tenth of their live units' elements pruned (block pruning), only whole dead groups of [`UNIT_GROUP`]
/// aligned units go, so the remaining blocks stay on their grid. Once they are dense (neuron
/// pruning) every dead unit may go, the count rounded up to a multiple of [`UNIT_ALIGN`] by
/// keeping the first dead units (zero or unused, like every dead unit).
fn aligned_kept(graph: &Graph, chain: &Chain, live: &[bool]) -> Vec<usize> {
    let units = live.len();
    // Pruned elements among the live units' weights (a few zeros do not make a weight sparse).
    let (mut pruned, mut total) = (0usize, 0usize);
    for &(ni, i, axis) in &chain.cuts {
        let w = graph.nodes[ni].inputs[i].expect("a cut input");
        let (Some(tesa), shape) = (&graph.value(w).tesa, &graph.fact(w).shape) else { continue };
        let inner: usize = shape[axis + 1..].iter().product();
        for e in (0..tesa.numel()).filter(|e| live[(e / inner) % shape[axis]]) {
            total += 1;
            pruned += usize::from(tesa.is_pruned(e));
        }
    }
    let weights_sparse = pruned * SPARSE_SHARE.1 > total * SPARSE_SHARE.0;
    if weights_sparse {
        let group_live = |j: usize| {
            live[j / UNIT_GROUP * UNIT_GROUP..((j / UNIT_GROUP + 1) * UNIT_GROUP).min(units)].contains(&true)
        };
        return (0..units).filter(|&j| group_live(j)).collect();
    }
    let n_live = live.iter().filter(|l| **l).count();
    let target = n_live.div_ceil(UNIT_ALIGN).saturating_mul(UNIT_ALIGN).min(units);
    let mut extra = target - n_live;
    (0..units)
        .filter(|&j| {
            if live[j] {
                return true;
            }
            let keep = extra > 0;
            extra = extra.saturating_sub(1);
            keep
        })
        .collect()
}

/// The nodes reading each value (each node once).
fn readers_of(graph: &Graph) -> HashMap<ValueId, Vec<usize>> {
    let mut readers: HashMap<ValueId, Vec<usize>> = HashMap::new();
    for (ni, node) in graph.nodes.iter().enumerate() {
        for v in node.inputs.iter().flatten() {
            let r = readers.entry(*v).or_default();
            if !r.contains(&ni) {
                r.push(ni);
            }
        }
    }
    readers
}

/// Which of a chain's units hold an unpruned element in any of its values (unit `j` of a value is
/// its elements `e` with `e % units == j`). Row by row, only the units still dead are looked at,
/// so a value whose units are mostly live costs a row's scan, not one look per element.
fn live_units(graph: &Graph, chain: &Chain) -> Vec<bool> {
    let units = chain.units;
    let mut dead: Vec<usize> = (0..units).collect();
    for v in &chain.values {
        let value = graph.value(*v);
        let Some(tesa) = &value.tesa else { return vec![true; units] };
        let numel = value.fact.numel();
        for row in 0..numel.div_ceil(units) {
            if dead.is_empty() {
                return vec![true; units];
            }
            let e0 = row * units;
            dead.retain(|&j| e0 + j >= numel || tesa.is_pruned(e0 + j));
        }
    }
    let mut live = vec![true; units];
    for j in dead {
        live[j] = false;
    }
    live
}

/// Cuts pruned hidden units out of `graph` (see the module docs). Run it after propagation.
pub fn shrink_hidden(graph: &mut Graph) -> Result<HiddenReport, Error> {
    let readers = readers_of(graph);
    let mut uses: HashMap<ValueId, usize> = HashMap::new();
    for v in graph.nodes.iter().flat_map(|n| n.inputs.iter().flatten()) {
        *uses.entry(*v).or_default() += 1;
    }
    let mut report = HiddenReport::default();
    let mut plans: Vec<(Chain, Vec<usize>)> = vec![];
    let mut taken: BTreeSet<ValueId> = BTreeSet::new();
    for start in 0..graph.nodes.len() {
        let Some(chain) = chain_from(graph, start, &readers) else { continue };
        // Chains must not overlap.
        if chain.values.iter().any(|v| taken.contains(v)) {
            continue;
        }
        let mut live = live_units(graph, &chain);
        // A chain keeps at least one unit (a fully pruned one keeps unit 0, which is zero).
        if !live.contains(&true) {
            live[0] = true;
        }
        let kept = aligned_kept(graph, &chain, &live);
        report.chains += 1;
        report.units_before += chain.units;
        report.units_after += kept.len();
        if kept.len() < chain.units {
            // A constant to cut that other nodes read too (an exporter shares equal constants:
            // the zero biases torchvision starts ConvNeXt's blocks with) gets a copy of its own.
            for &(ni, i, _) in &chain.cuts {
                let c = graph.nodes[ni].inputs[i].expect("a cut input");
                if uses.get(&c).copied().unwrap_or(0) > 1 {
                    let name = fresh_name(graph, &format!("{}.{}", graph.value(c).name, graph.nodes[ni].name));
                    let id = graph.add_value(name, graph.fact(c).clone(), ValueKind::Initializer);
                    graph.values[id.index()].tesa = graph.value(c).tesa.clone();
                    let t = graph.initializers[&c].clone();
                    graph.initializers.insert(id, t);
                    graph.nodes[ni].inputs[i] = Some(id);
                    *uses.entry(c).or_default() -= 1;
                    uses.insert(id, 1);
                }
            }
            report.shrunk += 1;
            taken.extend(chain.values.iter().copied());
            plans.push((chain, kept));
        }
    }
    for (chain, kept) in &plans {
        for &(ni, i, axis) in &chain.cuts {
            let w = graph.nodes[ni].inputs[i].expect("a cut input");
            let t = graph.initializers[&w].to_dense();
            let (shape, positions) = take_positions(t.shape(), axis, kept);
            let value = &mut graph.values[w.index()];
            value.tesa = value.tesa.as_ref().map(|tesa| tesa.gather(&shape, &positions));
            value.fact = ValueFact::new(t.dtype(), shape.clone());
            graph.initializers.insert(w, Initializer::Dense(gather_tensor(&t, shape, &positions)));
        }
        for v in &chain.values {
            let value = &mut graph.values[v.index()];
            let last = value.fact.shape.len() - 1;
            value.tesa = value.tesa.as_ref().map(|tesa| tesa.take(last, kept));
            value.fact.shape[last] = kept.len();
        }
    }
    renumber(graph)?;
    Ok(report)
}

/// The second weight (`W2`) of every hidden chain of `graph`, in node order: what the TeSA
/// selector `@mlp_out_weights` picks (its rows, axis 0 of a MatMul weight, are the units).
pub fn mlp_out_weights(graph: &Graph) -> Vec<ValueId> {
    let readers = readers_of(graph);
    let mut out = vec![];
    for start in 0..graph.nodes.len() {
        let Some(chain) = chain_from(graph, start, &readers) else { continue };
        let &(end, input, _) = chain.cuts.last().expect("a chain ends at its second weight");
        let w = graph.nodes[end].inputs[input].expect("the second weight");
        if !out.contains(&w) {
            out.push(w);
        }
    }
    out
}
