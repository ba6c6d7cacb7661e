//! Keys a fused attention may skip: where the score expression masks some (query, key) pairs
//! whatever the run-time inputs are (a causal mask, however the exporter spells it), the
//! wgmma kernel stops walking a query tile's keys after the last key tile any of its rows can
//! see (`graph_ops::attention_with`'s `key_ends`), half the work of a causal attention.
//!
//! The mask is found by evaluation, not by matching a pattern. The score group's nodes and the
//! elementwise nodes that make its other inputs, back to constants and to run-time values, are
//! run with the reference ops: the raw score as a one-element tensor of `±RAW_SCORE_BOUND`,
//! every run-time value that is bool (or a run-time value cast to bool) as all-true or all-false (every combination; each element
//! of an elementwise subgraph reads one element of each input, so the uniform assignments cover
//! every combination an element can see). A pair is masked when every evaluation gives at most
//! `-MASKED_BELOW` for it. A run-time input that is not bool (an additive float mask) gives no
//! structure: nothing is skipped.
//!
//! Skipping is exact under two conditions the kernel keeps or assumes. The kernel skips a key
//! tile only when every row of its query tile already has a running maximum above
//! `-SETTLED_ABOVE` (`codegen::graph_ops`'s constants; a row whose visible keys are all masked too, fully padded, walks every
//! key as the reference's softmax does, which spreads it over all of them). A skipped score is
//! then at least `MASKED_BELOW - SETTLED_ABOVE = RAW_SCORE_BOUND` under the row's maximum, and
//! its exponent is 0 in f32, as long as the raw scores stay within `±RAW_SCORE_BOUND` (a
//! q·k product of 1000 is far past any trained model's; the expression is assumed monotone in
//! the raw score between the two probes, as scalings, additive masks and soft caps are).

use super::{eval_node, is_elementwise, Lowering};
use crate::codegen::graph_ops::{MASKED_BELOW, RAW_SCORE_BOUND};
use crate::ir::{DType, Tensor, ValueId};
use std::collections::{HashMap, HashSet};

/// Most run-time bool inputs enumerated (2^n evaluations), nodes evaluated, and elements of any
/// value evaluated: past these the attention walks every key.
const MAX_BOOL_LEAVES: usize = 3;
const MAX_NODES: usize = 24;
const MAX_ELEMENTS: usize = 1 << 24;

impl Lowering<'_> {
    /// Per query row, the number of keys it can see: keys from `key_ends[q]` on are masked for
    /// every batch entry and head (see the module docs). `None` when no key is masked for any
    /// row, or when the analysis does not apply. `group`: the elementwise nodes from the
    /// scores `sv` to the softmax input `x`, in graph order.
    pub(super) fn attention_key_ends(&mut self, sv: ValueId, group: &[usize], x: ValueId) -> Option<Vec<usize>> {
        let graph = self.graph;
        if group.is_empty() {
            return None;
        }
        // The nodes to run: the group, then upward from its inputs through elementwise nodes.
        let producer = |v: ValueId| graph.nodes.iter().position(|n| n.outputs.contains(&v));
        let mut nodes: HashSet<usize> = group.iter().copied().collect();
        let mut stack: Vec<ValueId> =
            group.iter().flat_map(|&n| graph.nodes[n].inputs.iter().flatten().copied()).collect();
        let mut leaves: Vec<ValueId> = vec![];
        let mut seen: HashSet<ValueId> = HashSet::new();
        while let Some(v) = stack.pop() {
            if v == sv || !seen.insert(v) || graph.initializers.contains_key(&v) {
                continue;
            }
            match producer(v) {
                Some(p) if nodes.contains(&p) => {}
                Some(p)
                    if is_elementwise(&graph.nodes[p].op_type)
                        && graph.nodes[p].outputs.len() == 1
                        && !self.planned.contains_key(graph.nodes[p].name.as_str()) =>
                {
                    nodes.insert(p);
                    stack.extend(graph.nodes[p].inputs.iter().flatten().copied());
                }
                _ => leaves.push(v),
            }
            if nodes.len() > MAX_NODES {
                return None;
            }
        }
        // A run-time leaf that is not bool but only cast to bool by the nodes to run: those
        // Casts' outputs are the leaves instead, any bool per element as a bool input is (the
        // padding mask's `attention_mask.bool()`, in the score group or in the mask's own).
        let mut i = 0;
        while i < leaves.len() {
            let l = leaves[i];
            let readers: Vec<usize> =
                nodes.iter().copied().filter(|&n| graph.nodes[n].inputs.contains(&Some(l))).collect();
            let casts_to_bool = !readers.is_empty()
                && graph.fact(l).dtype != DType::Bool
                && readers.iter().all(|&n| {
                    let nd = &graph.nodes[n];
                    nd.op_type == "Cast" && nd.inputs.len() == 1 && graph.fact(nd.outputs[0]).dtype == DType::Bool
                });
            if casts_to_bool {
                leaves.remove(i);
                for n in readers {
                    nodes.remove(&n);
                    leaves.push(graph.nodes[n].outputs[0]);
                }
            } else {
                i += 1;
            }
        }
        let evaluated = |v: ValueId| graph.fact(v).numel() <= MAX_ELEMENTS;
        if leaves.len() > MAX_BOOL_LEAVES || leaves.iter().any(|&l| graph.fact(l).dtype != DType::Bool || !evaluated(l))
        {
            return None;
        }
        let mut order: Vec<usize> = nodes.into_iter().collect();
        order.sort_unstable();
        // The same computation in another layer (GPT-2's twelve attentions read one mask) is
        // found by its text: each node's op, attributes and inputs, the values the nodes make
        // named by their position.
        let made: HashMap<ValueId, usize> =
            order.iter().enumerate().flat_map(|(i, &n)| graph.nodes[n].outputs.iter().map(move |&o| (o, i))).collect();
        let name = |v: &Option<ValueId>| match v {
            Some(v) if *v == sv => "s".to_string(),
            Some(v) => made.get(v).map_or(format!("%{}", v.0), |i| format!("n{i}")),
            None => "-".to_string(),
        };
        let key: String = order
            .iter()
            .map(|&n| {
                let node = &graph.nodes[n];
                let ins: Vec<String> = node.inputs.iter().map(name).collect();
                format!("{} {:?} ({}) {:?};", node.op_type, node.attrs, ins.join(","), graph.fact(sv).shape)
            })
            .collect::<String>()
            + &format!("out {}", name(&Some(x)));
        if let Some(found) = self.key_ends_seen.get(&key) {
            return found.clone();
        }
        let ends = self.evaluate_key_ends(sv, &order, &leaves, x);
        self.key_ends_seen.insert(key, ends.clone());
        ends
    }

    /// [`Self::attention_key_ends`]'s evaluation: the nodes `order` (graph order) over every
    /// assignment of the bool `leaves` and both probe scores.
    fn evaluate_key_ends(&self, sv: ValueId, order: &[usize], leaves: &[ValueId], x: ValueId) -> Option<Vec<usize>> {
        let graph = self.graph;
        let shape = graph.fact(sv).shape.clone();
        let (sq, sk) = (shape[shape.len() - 2], shape[shape.len() - 1]);
        // The probe score: one element of sv's type and rank, broadcast by the ops.
        let sv_t = graph.fact(sv).dtype;
        let probe = |s: f64| Tensor::from_vec(vec![1; shape.len()], vec![s as f32]).cast(sv_t);
        let mut masked: Option<Vec<bool>> = None;
        for assignment in 0..(1usize << leaves.len()) {
            for s in [-RAW_SCORE_BOUND, RAW_SCORE_BOUND] {
                let mut vals: HashMap<ValueId, Tensor> = HashMap::new();
                vals.insert(sv, probe(s));
                for (i, &l) in leaves.iter().enumerate() {
                    let n = graph.fact(l).numel();
                    let bit = (assignment >> i) & 1 == 1;
                    vals.insert(l, Tensor::from_vec(graph.fact(l).shape.clone(), vec![bit; n]));
                }
                for &n in order {
                    let out = eval_node(graph, n, &vals)?;
                    // Values are as large as their inputs broadcast (the score a single element).
                    if out.len() > MAX_ELEMENTS {
                        return None;
                    }
                    vals.insert(graph.nodes[n].outputs[0], out);
                }
                let f = vals.get(&x)?;
                let here = masked_pairs(f, sq, sk)?;
                masked = Some(match masked {
                    None => here,
                    Some(m) => m.iter().zip(&here).map(|(a, b)| *a && *b).collect(),
                });
            }
        }
        let masked = masked?;
        let ends: Vec<usize> =
            (0..sq).map(|q| (0..sk).rev().find(|&k| !masked[q * sk + k]).map_or(0, |k| k + 1)).collect();
        ends.iter().any(|&e| e < sk).then_some(ends)
    }
}

/// For an evaluated score expression `f` (broadcastable to `[..., sq, sk]`), whether each
/// (query, key) pair is at most `-MASKED_BELOW` at every leading index; `None` when `f`'s last
/// two axes are not `sq` (or 1) and `sk`.
fn masked_pairs(f: &Tensor, sq: usize, sk: usize) -> Option<Vec<bool>> {
    let shape = f.shape();
    let r = shape.len();
    if r < 2 || shape[r - 1] != sk || (shape[r - 2] != sq && shape[r - 2] != 1) {
        return None;
    }
    let rows = shape[r - 2];
    let vals = f.to_f64_vec();
    let mut masked = vec![true; sq * sk];
    for chunk in vals.chunks(rows * sk) {
        for q in 0..sq {
            let src = if rows == 1 { 0 } else { q };
            for k in 0..sk {
                let m = &mut masked[q * sk + k];
                *m = *m && chunk[src * sk + k] <= -MASKED_BELOW;
            }
        }
    }
    Some(masked)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_causal_table_masks_the_keys_after_each_query() {
        let (sq, sk) = (3, 4);
        let v: Vec<f32> = (0..2 * sq * sk).map(|i| if (i % sk) <= (i / sk) % sq { 0.5 } else { -65504.0 }).collect();
        let f = Tensor::from_vec(vec![2, sq, sk], v);
        let m = masked_pairs(&f, sq, sk).unwrap();
        let expect: Vec<bool> = (0..sq * sk).map(|i| i % sk > i / sk).collect();
        assert_eq!(m, expect);
        // A key one batch entry sees is not masked.
        let mut v2 = f.to_f64_vec().iter().map(|&x| x as f32).collect::<Vec<_>>();
        v2[sq * sk + 3] = 0.0;
        let m2 = masked_pairs(&Tensor::from_vec(vec![2, sq, sk], v2), sq, sk).unwrap();
        assert!(!m2[3] && m2[sk + 3]);
        // A mask that does not vary along the keys has no key axis to skip along.
        assert!(masked_pairs(&Tensor::from_vec(vec![sq, 1], vec![0.0f32; sq]), sq, sk).is_none());
    }
}
