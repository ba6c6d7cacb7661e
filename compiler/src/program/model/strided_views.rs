//! Slices read in place by a fused attention: when a Q, K or V operand of an attention is a
//! `Slice` of a wider value (the merged Q/K/V projection of `rewrite::merge_matmuls`), possibly
//! reshaped before or after, the attention kernel reads the wider value's buffer through an
//! offset and strides instead of a copy of the slice being made first.
//!
//! The chain is found by walking up from the operand through nodes that only move data (the
//! views of `VIEWS` and `Slice`, every input past the data a constant, each value read by the
//! next node alone) to the first value something else computes: the base, which has a
//! contiguous buffer. Whether the chain is one strided view is not reasoned about op by op:
//! the chain is evaluated with the ops' own `eval` on the base's element numbers (as the
//! remaps of `lower_remap` are traced), and the element map it gives is fitted with an
//! offset and one stride per axis and checked element by element. A chain that does not fit
//! (a Slice with steps that reverse, a Reshape that merges sliced axes) stays as it was: the
//! Slice is lowered as a copy.
//!
//! The chain's nodes join the attention's step ([`Op::Nodes`](crate::program::Op::Nodes)), so
//! the CPU executor still slices and reshapes for itself; only the GPU kernel reads in place.

use super::{constant, Lowering, VIEWS};
use crate::ir::{Tensor, ValueId};
use crate::ops::{registry, NodeCtx};

/// An operand read in place: the value `base` seen through the data-movement `nodes` (graph
/// order), whose output element at index `i` (row-major in the operand's shape) is the base's
/// element `offset + Σ i_d · strides[d]`.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct ViewChain {
    pub base: ValueId,
    pub nodes: Vec<usize>,
    pub offset: usize,
    pub strides: Vec<usize>,
}

/// Most elements a chain is traced over (the base's): past this the slice stays a copy rather
/// than costing the compile time and memory of the trace.
const MAX_TRACE: usize = 1 << 26;

/// The chain that makes value `v` from a wider value by slicing (at least one `Slice`) and
/// views alone, when it is one strided view of that value.
pub(super) fn view_chain(l: &Lowering, v: ValueId) -> Option<ViewChain> {
    let graph = l.graph;
    let producer = |v: ValueId| graph.nodes.iter().position(|n| n.outputs.contains(&v));
    let mut nodes = vec![];
    let mut cur = v;
    while let Some(p) = producer(cur) {
        let node = &graph.nodes[p];
        let moves = node.op_type == "Slice" || VIEWS.contains(&node.op_type.as_str());
        let consts = node.inputs.iter().skip(1).flatten().all(|&c| graph.initializers.contains_key(&c));
        if !moves || !consts || node.outputs.len() != 1 || l.planned.contains_key(node.name.as_str()) {
            break;
        }
        if cur != v && l.only_consumer(cur).is_none() {
            break;
        }
        nodes.push(p);
        cur = node.inputs.first().copied().flatten()?;
    }
    nodes.reverse();
    let base = cur;
    if !nodes.iter().any(|&n| graph.nodes[n].op_type == "Slice") || (l.is_output[v.index()]) {
        return None;
    }
    let base_fact = graph.fact(base);
    let n = base_fact.numel();
    if n == 0 || n > MAX_TRACE {
        return None;
    }
    let mut map = Tensor::from_vec(base_fact.shape.clone(), (0..n as i64).collect::<Vec<i64>>());
    for &i in &nodes {
        let node = &graph.nodes[i];
        let consts: Vec<Option<Tensor>> =
            node.inputs.iter().skip(1).map(|c| c.and_then(|c| constant(graph, c))).collect();
        let mut refs: Vec<Option<&Tensor>> = vec![Some(&map)];
        refs.extend(consts.iter().map(|t| t.as_ref()));
        let def = registry().get(&node.op_type)?;
        let ctx = NodeCtx { name: &node.name, attrs: &node.attrs, opset: node.opset, n_outputs: 1 };
        map = (def.eval)(&ctx, &refs).ok()?.into_iter().next()?;
    }
    let shape = graph.fact(v).shape.clone();
    let (offset, strides) = fit_strides(&map.to_i64_vec(), &shape)?;
    Some(ViewChain { base, nodes, offset, strides })
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
