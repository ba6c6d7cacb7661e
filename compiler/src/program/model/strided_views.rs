//! Operands read in place by a fused attention: when a Q, K or V operand of an attention is
//! made from a wider value by data movement alone (a `Slice` of the merged Q/K/V projection
//! of `rewrite::merge_matmuls`, or a `Split` of a packed one as GPT-2 exports it; the heads split out of a packed projection by `Reshape`,
//! `Transpose` and a `Gather` of one constant index, as `nn.MultiheadAttention` exports it),
//! the attention kernel reads the wider value's buffer through an offset and strides instead
//! of a copy being made first.
//!
//! The chain is found by walking up from the operand through nodes that only move data (the
//! views (`views.rs`), `Slice`, `Split`, `Transpose`, `Gather` of a one-element constant index; every
//! input past the data a constant) to the first value something else computes: the base,
//! which has a contiguous buffer. Whether the chain is one strided view is not reasoned about
//! op by op: the chain is evaluated with the ops' own `eval` on the base's element numbers (as
//! the remaps of `lower_remap` are traced), and the element map it gives is fitted with an
//! offset and one stride per axis and checked element by element. A chain that does not fit
//! (a Slice with steps that reverse, a Reshape that merges sliced axes) stays as it was: its
//! nodes are lowered as their own steps. A chain of plain views alone is no chain (the
//! operand is already its base's buffer).
//!
//! The three operands of one attention may share the top of their chains (the packed
//! projection's `Squeeze` read by the three `Gather`s): a value on a chain may be read by
//! other nodes only when every one of them is on a chain of the same attention, and an
//! elementwise group a chain node is in must lie on the chains too. Otherwise the chain is cut
//! to the part where each value is read by the next node alone, and failing that dropped.
//!
//! The chain's nodes join the attention's step ([`Op::Nodes`](crate::program::Op::Nodes)), so
//! the CPU executor still moves the data for itself (a shared top once per chain, into
//! temporaries of the step); only the GPU kernel reads in place.

use super::registry::is_view;
use super::{constant, Lowering};
use crate::ir::{Tensor, ValueId};
use crate::ops::{registry, NodeCtx};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

/// An operand read in place: the value `base` seen through the data-movement `nodes` (graph
/// order), whose output element at index `i` (row-major in the operand's shape) is the base's
/// element `offset + Σ i_d · strides[d]`. `outs[j]`: the output of `nodes[j]` the chain goes
/// on from (a `Split` has several).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct ViewChain {
    pub base: ValueId,
    pub nodes: Vec<usize>,
    pub outs: Vec<ValueId>,
    pub offset: usize,
    pub strides: Vec<usize>,
}

/// Most elements a chain is traced over (the base's): past this the operand stays a copy
/// rather than costing the compile time and memory of the trace.
const MAX_TRACE: usize = 1 << 26;

/// Element maps of values read by more than one node, keyed by (base, value): the shared top
/// of the chains of one attention is traced once.
type Traces = HashMap<(ValueId, ValueId), Rc<Tensor>>;

/// The chains of one attention's operands `sources` (see the module docs), in their order:
/// `None` where an operand is read as it is. `taken[n]`: node `n` already runs inside another
/// step (a chain stops above it); `groups`: the elementwise groups, keyed by their last node.
pub(super) fn attention_chains(
    l: &Lowering,
    sources: &[ValueId],
    taken: &[bool],
    groups: &HashMap<usize, Vec<usize>>,
) -> Vec<Option<ViewChain>> {
    let mut traces = Traces::new();
    let mut shared = vec![true; sources.len()];
    let mut chains: Vec<Option<ViewChain>> =
        sources.iter().map(|&v| view_chain(l, v, true, taken, &mut traces)).collect();
    let group_of: HashMap<usize, &Vec<usize>> =
        groups.values().flat_map(|members| members.iter().map(move |&m| (m, members))).collect();
    // Cut (then drop) a chain whose values are read outside the chains, until none is.
    loop {
        let on_chains: HashSet<usize> = chains.iter().flatten().flat_map(|c| c.nodes.iter().copied()).collect();
        let inside = |c: &ViewChain, source: ValueId| {
            c.nodes.iter().all(|&n| {
                let reads_ok =
                    l.graph.nodes[n].outputs.iter().filter(|&&o| o != source).all(|&o| {
                        !l.is_output[o.index()] && l.consumers[o.index()].iter().all(|r| on_chains.contains(r))
                    });
                let group_ok = group_of.get(&n).is_none_or(|g| g.iter().all(|m| on_chains.contains(m)));
                reads_ok && group_ok
            })
        };
        let Some(i) = (0..sources.len()).find(|&i| chains[i].as_ref().is_some_and(|c| !inside(c, sources[i]))) else {
            break;
        };
        chains[i] = if shared[i] { view_chain(l, sources[i], false, taken, &mut traces) } else { None };
        shared[i] = false;
    }
    chains
}

/// Whether `node` moves data in a way one strided view can express when its inputs past the
/// data are constants: a view, `Slice`, `Split` (each output a slice; GPT-2 splits its packed
/// Q/K/V projection so), `Transpose`, or `Gather` of one index.
fn moves_data(l: &Lowering, node: &crate::ir::Node) -> bool {
    match node.op_type.as_str() {
        "Slice" | "Split" | "Transpose" => true,
        "Gather" => node
            .inputs
            .get(1)
            .copied()
            .flatten()
            .and_then(|i| l.graph.initializers.get(&i))
            .is_some_and(|init| init.fact().numel() == 1),
        op => is_view(op),
    }
}

/// The chain that makes value `v` from a wider value by data movement (at least one node that
/// is not a plain view), when it is one strided view of that value. `shared`: values read by
/// other nodes too may be on the chain (the caller checks who reads them).
fn view_chain(l: &Lowering, v: ValueId, shared: bool, taken: &[bool], traces: &mut Traces) -> Option<ViewChain> {
    let graph = l.graph;
    let producer = |v: ValueId| graph.nodes.iter().position(|n| n.outputs.contains(&v));
    let mut nodes = vec![];
    let mut outs = vec![];
    let mut cur = v;
    while let Some(p) = producer(cur) {
        let node = &graph.nodes[p];
        let consts = node.inputs.iter().skip(1).flatten().all(|&c| graph.initializers.contains_key(&c));
        if !moves_data(l, node)
            || !consts
            || (node.outputs.len() != 1 && node.op_type != "Split")
            || taken[p]
            || l.planned.contains_key(node.name.as_str())
        {
            break;
        }
        if cur != v && (l.is_output[cur.index()] || !shared && l.only_consumer(cur).is_none()) {
            break;
        }
        nodes.push(p);
        outs.push(cur);
        cur = node.inputs.first().copied().flatten()?;
    }
    nodes.reverse();
    outs.reverse();
    let base = cur;
    if nodes.iter().all(|&n| is_view(&graph.nodes[n].op_type)) || l.is_output[v.index()] {
        return None;
    }
    let base_fact = graph.fact(base);
    let n = base_fact.numel();
    if n == 0 || n > MAX_TRACE {
        return None;
    }
    // Start from the deepest value already traced for this base.
    let out = |i: usize| outs[i];
    let from = (0..nodes.len()).rev().find(|&i| traces.contains_key(&(base, out(i))));
    let mut map = match from {
        Some(i) => traces[&(base, out(i))].clone(),
        None => Rc::new(Tensor::from_vec(base_fact.shape.clone(), (0..n as i64).collect::<Vec<i64>>())),
    };
    for (i, &ni) in nodes.iter().enumerate().skip(from.map_or(0, |i| i + 1)) {
        let node = &graph.nodes[ni];
        let consts: Vec<Option<Tensor>> =
            node.inputs.iter().skip(1).map(|c| c.and_then(|c| constant(graph, c))).collect();
        let mut refs: Vec<Option<&Tensor>> = vec![Some(&map)];
        refs.extend(consts.iter().map(|t| t.as_ref()));
        let def = registry().get(&node.op_type)?;
        let ctx = NodeCtx { name: &node.name, attrs: &node.attrs, opset: node.opset, n_outputs: node.outputs.len() };
        let at = node.outputs.iter().position(|&o| o == out(i))?;
        let next = Rc::new((def.eval)(&ctx, &refs).ok()?.into_iter().nth(at)?);
        map = next;
        if l.consumers[out(i).index()].len() > 1 {
            traces.insert((base, out(i)), map.clone());
        }
    }
    let shape = graph.fact(v).shape.clone();
    let (offset, strides) = fit_strides(&map.to_i64_vec(), &shape)?;
    Some(ViewChain { base, nodes, outs, offset, strides })
}

/// The offset and strides that give `map` (row-major over `shape`) as
/// `offset + Σ i_d · strides[d]`, when some do; strides of one-element axes are 0.
pub(super) fn fit_strides(map: &[i64], shape: &[usize]) -> Option<(usize, Vec<usize>)> {
    let numel: usize = shape.iter().product();
    if map.len() != numel || numel == 0 {
        return None;
    }
    let offset = usize::try_from(map[0]).ok()?;
    let rank = shape.len();
    let mut strides = vec![0usize; rank];
    let mut unit = 1usize;
    for d in (0..rank).rev() {
        if shape[d] > 1 {
            strides[d] = usize::try_from(map[unit] - map[0]).ok()?;
        }
        unit *= shape[d];
    }
    // Walk every element with a running index and offset, as an odometer.
    let mut idx = vec![0usize; rank];
    let mut at = offset;
    for &m in map {
        if m != at as i64 {
            return None;
        }
        for d in (0..rank).rev() {
            idx[d] += 1;
            at += strides[d];
            if idx[d] < shape[d] {
                break;
            }
            at -= strides[d] * shape[d];
            idx[d] = 0;
        }
    }
    Some((offset, strides))
}

#[cfg(test)]
mod tests {
    use super::fit_strides;

    #[test]
    fn a_column_range_of_a_wider_matrix_fits_with_its_offset() {
        // [4, 6] → columns 2..5 → reshaped to [4, 1, 3].
        let map: Vec<i64> = (0..4).flat_map(|r| (2..5).map(move |c| r * 6 + c)).collect();
        assert_eq!(fit_strides(&map, &[4, 1, 3]), Some((2, vec![6, 0, 1])));
    }

    #[test]
    fn a_reversed_or_gathered_map_does_not_fit() {
        assert_eq!(fit_strides(&[3, 2, 1, 0], &[4]), None);
        assert_eq!(fit_strides(&[0, 1, 3, 4, 5, 6], &[2, 3]), None);
        assert_eq!(fit_strides(&[0, 1], &[3]), None);
    }

    #[test]
    fn heads_split_out_of_a_slice_fit() {
        // base [2, 4, 12] (batch, seq, 3 × 4 columns); K = columns 4..8 as [2, 4, 2, 2].
        let map: Vec<i64> =
            (0..2).flat_map(|b| (0..4).flat_map(move |s| (4..8).map(move |c| b * 48 + s * 12 + c))).collect();
        assert_eq!(fit_strides(&map, &[2, 4, 2, 2]), Some((4, vec![48, 12, 2, 1])));
    }
}
