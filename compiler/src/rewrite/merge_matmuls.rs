//! `merge_matmuls`: MatMuls that read the same activation with constant 2-D weights (a
//! transformer's Q, K and V projections) become one MatMul over the weights concatenated along
//! N, so the activation is read once and one wider product runs instead of several narrow ones.
//!
//! A set merges when it has two or more MatMuls (default domain) whose left operand is the
//! same value and whose right operand is a dense 2-D float initializer with the same K, the
//! same element type and the same TeSA widths (uniform bit width and format, no per-element
//! overrides; or no TeSA on any of them), and whose outputs (after the bias Add below) are
//! read only by attentions: activation×activation MatMuls, directly or through Reshapes,
//! Transposes and the like. When each MatMul's output is read only by an
//! `Add` of a constant bias of N elements (a row vector, same type), the biases are
//! concatenated too and one `Add` follows the merged MatMul, zeros standing for the bias of a
//! member without one (Whisper's K projection between biased Q and V): the bias is then part
//! of the merged product's epilogue instead of Adds on the slices. Each original output (the bias Add's when merged, else the MatMul's) is
//! then a `Slice` of the merged one along its last axis, keeping its value (name, shape, TeSA)
//! so every reader is unchanged.
//!
//! TeSAs concatenate with their elements: the merged weight's TeSA is the weights' TeSAs side
//! by side (pruned blocks stay pruned where they were), the merged bias's likewise, and the
//! merged output's is the outputs' side by side when every output has one. This runs after
//! propagation, and keeps it sound: every element of the merged values is an element of an
//! original value with the same attribute, and the slices give back exactly the originals.
//!
//! A fused attention reads its Q, K and V slices in place, through an offset and the merged
//! output's row stride (`program/model/strided_views.rs`), so the merge saves two launches
//! and two reads of the activation per layer (MiniLM-L6 fp16 at 90% blocks 0.527 → 0.477 ms,
//! BERT-base 1.882 → 1.810, H200, `benches/results/e2e_gpu.md`). A Slice no attention
//! absorbs runs as a gather through a compile-time map (one copy kernel), which is why sets
//! that feed anything else do not merge.

use super::{fresh_name, renumber};
use crate::ir::{DType, Graph, Initializer, Node, NodeId, Tensor, ValueFact, ValueId, ValueKind};
use crate::tesa::Tesa;
use crate::Error;
use std::collections::{BTreeMap, HashSet};

/// What [`merge_matmuls`] did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MergeReport {
    /// Merged sets, and the MatMuls in them.
    pub sets: usize,
    pub matmuls: usize,
    /// Sets whose bias Adds merged too.
    pub with_bias: usize,
}

/// What the MatMuls of one set share: activation, K, weight type, TeSA widths.
type SetKey = (ValueId, usize, DType, Option<(u8, u8)>);

/// One MatMul of a candidate set: its node, weight, output, and the bias Add after it.
struct Member {
    node: usize,
    weight: ValueId,
    n: usize,
    out: ValueId,
    bias: Option<(usize, ValueId, ValueId)>,
}

/// The widths a TeSA gives its unpruned elements, when they are uniform.
fn widths(tesa: &Option<Tesa>) -> Option<Option<(u8, u8)>> {
    match tesa {
        None => Some(None),
        Some(t) => {
            let u = t.uniform();
            let uniform = (0..t.numel()).all(|i| t.is_pruned(i) || t.attr(i) == u);
            uniform.then_some(Some((u.bits(), u.format() as u8)))
        }
    }
}

/// The constant bias of `Add(y, b)` / `Add(b, y)` when it is `y`'s only reader: (Add node,
/// bias value, Add output).
fn bias_after(graph: &Graph, readers: &[Vec<usize>], y: ValueId, n: usize) -> Option<(usize, ValueId, ValueId)> {
    let [add] = readers[y.index()][..] else { return None };
    let node = &graph.nodes[add];
    if node.op_type != "Add" || !node.domain.is_empty() || graph.outputs.contains(&y) {
        return None;
    }
    let ins: Vec<ValueId> = node.inputs.iter().flatten().copied().collect();
    let [a, b] = ins[..] else { return None };
    let bias = if a == y { b } else { a };
    let shape = &graph.fact(bias).shape;
    let row = shape.last() == Some(&n) && shape.iter().rev().skip(1).all(|&d| d == 1) && shape.len() == 1;
    let dense = matches!(graph.initializers.get(&bias), Some(Initializer::Dense(_)));
    let same =
        graph.fact(bias).dtype == graph.fact(y).dtype && graph.fact(node.outputs[0]).shape == graph.fact(y).shape;
    (bias != y && row && dense && same).then_some((add, bias, node.outputs[0]))
}

/// Ops that only move or rename data between a projection and the attention that reads it.
const MOVES: &[&str] = &["Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity"];

/// Whether every reader of `v` is an activation×activation MatMul (an attention's Q·Kᵀ or ·V),
/// directly or through ops that only move data: then the lowering reads the merged output's
/// slices in place (`program/model/strided_views.rs`) instead of copying them.
fn feeds_attention(graph: &Graph, readers: &[Vec<usize>], v: ValueId, depth: usize) -> bool {
    if depth > 8 || graph.outputs.contains(&v) || readers[v.index()].is_empty() {
        return false;
    }
    readers[v.index()].iter().all(|&r| {
        let node = &graph.nodes[r];
        if !node.domain.is_empty() {
            return false;
        }
        if node.op_type == "MatMul" {
            return node.inputs.iter().flatten().all(|i| !graph.initializers.contains_key(i));
        }
        MOVES.contains(&node.op_type.as_str())
            && node.outputs.len() == 1
            && feeds_attention(graph, readers, node.outputs[0], depth + 1)
    })
}

/// `tensors` (each `[rows, n_i]`) side by side: `[rows, Σ n_i]`.
fn concat_columns(tensors: &[Tensor], rows: usize) -> Tensor {
    let total: usize = tensors.iter().map(|t| t.len() / rows.max(1)).sum();
    let mut positions = vec![];
    let mut offsets = vec![0usize];
    for t in tensors {
        offsets.push(offsets.last().expect("nonempty") + t.len());
    }
    // The concatenated flat data is the tensors one after another; gather it row by row.
    for r in 0..rows {
        for (i, t) in tensors.iter().enumerate() {
            let n = t.len() / rows.max(1);
            positions.extend((0..n).map(|c| offsets[i] + r * n + c));
        }
    }
    let flat: Vec<f64> = tensors.iter().flat_map(|t| t.to_f64_vec()).collect();
    let dtype = tensors[0].dtype();
    let all = Tensor::new(vec![flat.len()], crate::ir::Data::from_f64_iter(dtype, flat.into_iter())).expect("flat");
    let shape = if tensors[0].shape().len() == 1 { vec![total] } else { vec![rows, total] };
    super::gather_tensor(&all, shape, &positions)
}

/// TeSAs of `[.., n_i]` tensors side by side along the last axis.
fn concat_tesas(tesas: &[&Tesa], shape: &[usize]) -> Tesa {
    let first = tesas[0];
    let u = first.uniform();
    let mut out = Tesa::dense(shape, u.bits(), u.format());
    let total = *shape.last().expect("rank ≥ 1");
    let rows = out.numel() / total.max(1);
    let mut col0 = 0;
    for t in tesas {
        let n = *t.shape().last().expect("rank ≥ 1");
        for r in 0..rows {
            for c in 0..n {
                out.set_attr(r * total + col0 + c, t.attr(r * n + c));
            }
        }
        col0 += n;
    }
    out
}

/// Merges the MatMuls of `graph` that share an input (see the module docs). The graph stays
/// verified; unreferenced values are dropped and the rest renumbered.
pub fn merge_matmuls(graph: &mut Graph) -> Result<MergeReport, Error> {
    let mut readers: Vec<Vec<usize>> = vec![vec![]; graph.values.len()];
    for (i, n) in graph.nodes.iter().enumerate() {
        for v in n.inputs.iter().flatten() {
            if !readers[v.index()].contains(&i) {
                readers[v.index()].push(i);
            }
        }
    }
    // Candidate MatMuls by (activation, K, weight type, widths).
    let mut sets: BTreeMap<SetKey, Vec<Member>> = BTreeMap::new();
    for (i, node) in graph.nodes.iter().enumerate() {
        // Slice takes its bounds as inputs from opset 10 on.
        if node.op_type != "MatMul" || !node.domain.is_empty() || node.inputs.len() != 2 || node.opset < 10 {
            continue;
        }
        let (Some(a), Some(w)) = (node.inputs[0], node.inputs[1]) else { continue };
        let Some(Initializer::Dense(_)) = graph.initializers.get(&w) else { continue };
        let wf = graph.fact(w);
        let af = graph.fact(a);
        if wf.shape.len() != 2 || !wf.dtype.is_float() || af.shape.len() < 2 || af.dtype != wf.dtype {
            continue;
        }
        let Some(width) = widths(&graph.value(w).tesa) else { continue };
        let (k, n) = (wf.shape[0], wf.shape[1]);
        let out = node.outputs[0];
        let bias = bias_after(graph, &readers, out, n);
        if !feeds_attention(graph, &readers, bias.map_or(out, |(_, _, y)| y), 0) {
            continue;
        }
        sets.entry((a, k, wf.dtype, width)).or_default().push(Member { node: i, weight: w, n, out, bias });
    }
    let sets: Vec<Vec<Member>> = sets.into_values().filter(|s| s.len() >= 2).collect();
    let mut report = MergeReport::default();
    if sets.is_empty() {
        return Ok(report);
    }
    // New nodes, placed where each set's first MatMul was.
    let mut at_first: BTreeMap<usize, Vec<Node>> = BTreeMap::new();
    let mut removed: HashSet<usize> = HashSet::new();
    for set in sets {
        let first = &graph.nodes[set[0].node];
        let a = first.inputs[0].expect("checked");
        let base = first.name.clone();
        let opset_here = first.opset;
        let k = graph.fact(set[0].weight).shape[0];
        let n_total: usize = set.iter().map(|m| m.n).sum();
        let dtype = graph.fact(set[0].weight).dtype;
        let weights: Vec<Tensor> = set.iter().map(|m| graph.initializers[&m.weight].to_dense()).collect();
        let w = concat_columns(&weights, k);
        let w_tesas = set.iter().map(|m| graph.value(m.weight).tesa.as_ref()).collect::<Option<Vec<&Tesa>>>();
        let w_tesa = w_tesas.map(|ts| concat_tesas(&ts, &[k, n_total]));
        let w_name = fresh_name(graph, &format!("{base}.merged_weight"));
        let w_id = graph.add_value(w_name, ValueFact::of(&w), ValueKind::Initializer);
        graph.values[w_id.index()].tesa = w_tesa;
        graph.initializers.insert(w_id, Initializer::Dense(w));
        let mut out_shape = graph.fact(a).shape.clone();
        *out_shape.last_mut().expect("rank ≥ 2") = n_total;
        let side_by_side = |graph: &Graph, values: &[ValueId]| -> Option<Tesa> {
            let ts = values.iter().map(|&v| graph.value(v).tesa.as_ref()).collect::<Option<Vec<&Tesa>>>()?;
            Some(concat_tesas(&ts, &out_shape))
        };
        let mm_outs: Vec<ValueId> = set.iter().map(|m| m.out).collect();
        let mm_tesa = side_by_side(graph, &mm_outs);
        let mm_name = fresh_name(graph, &format!("{base}.merged"));
        let mm_out =
            graph.add_value(mm_name, ValueFact::new(dtype, out_shape.clone()), ValueKind::NodeOutput(NodeId(0)));
        graph.values[mm_out.index()].tesa = mm_tesa;
        let mut new_nodes = vec![Node {
            name: format!("{base}.merged"),
            op_type: "MatMul".into(),
            domain: String::new(),
            opset: opset_here,
            attrs: Default::default(),
            inputs: vec![Some(a), Some(w_id)],
            outputs: vec![mm_out],
        }];
        let with_bias = set.iter().any(|m| m.bias.is_some());
        let mut merged = mm_out;
        // The values the slices give back: the bias Adds' outputs when those merge.
        let mut originals = mm_outs.clone();
        for m in &set {
            removed.insert(m.node);
        }
        if with_bias {
            // A member without a bias adds zeros (Whisper's K projection beside biased Q and V).
            let zeros = |n: usize| Tensor::new(vec![n], crate::ir::Data::from_f64_iter(dtype, (0..n).map(|_| 0.0)));
            let biases: Vec<Tensor> = set
                .iter()
                .map(|m| match m.bias {
                    Some((_, b, _)) => graph.initializers[&b].to_dense(),
                    None => zeros(m.n).expect("n zeros"),
                })
                .collect();
            let b = concat_columns(&biases, 1);
            let b_tesas: Vec<Option<Tesa>> = set
                .iter()
                .map(|m| match m.bias {
                    Some((_, b, _)) => graph.value(b).tesa.clone(),
                    None => Some(Tesa::for_dtype(&[m.n], dtype)),
                })
                .collect();
            let any_bias_tesa = set.iter().any(|m| m.bias.is_some_and(|(_, b, _)| graph.value(b).tesa.is_some()));
            let b_tesa = b_tesas.iter().map(|t| t.as_ref()).collect::<Option<Vec<&Tesa>>>();
            let b_tesa = b_tesa.filter(|_| any_bias_tesa).map(|ts| concat_tesas(&ts, &[n_total]));
            let b_name = fresh_name(graph, &format!("{base}.merged_bias"));
            let b_id = graph.add_value(b_name, ValueFact::of(&b), ValueKind::Initializer);
            graph.values[b_id.index()].tesa = b_tesa;
            graph.initializers.insert(b_id, Initializer::Dense(b));
            originals = set.iter().map(|m| m.bias.map_or(m.out, |(_, _, y)| y)).collect();
            let add_tesa = side_by_side(graph, &originals);
            let add_name = fresh_name(graph, &format!("{base}.merged_biased"));
            let add_out =
                graph.add_value(add_name, ValueFact::new(dtype, out_shape.clone()), ValueKind::NodeOutput(NodeId(0)));
            graph.values[add_out.index()].tesa = add_tesa;
            new_nodes.push(Node {
                name: format!("{base}.merged_bias"),
                op_type: "Add".into(),
                domain: String::new(),
                opset: opset_here,
                attrs: Default::default(),
                inputs: vec![Some(mm_out), Some(b_id)],
                outputs: vec![add_out],
            });
            for (add, _, _) in set.iter().filter_map(|m| m.bias) {
                removed.insert(add);
            }
            merged = add_out;
            report.with_bias += 1;
        }
        let axis = out_shape.len() as i64 - 1;
        let mut col0 = 0;
        for (m, &orig) in set.iter().zip(&originals) {
            let name = graph.nodes[m.node].name.clone();
            let ints = |graph: &mut Graph, what: &str, v: i64| -> ValueId {
                let t = Tensor::from_vec(vec![1], vec![v]);
                let id = graph.add_value(
                    fresh_name(graph, &format!("{name}.slice_{what}")),
                    ValueFact::of(&t),
                    ValueKind::Initializer,
                );
                graph.initializers.insert(id, Initializer::Dense(t));
                id
            };
            let starts = ints(graph, "start", col0 as i64);
            let ends = ints(graph, "end", (col0 + m.n) as i64);
            let axes = ints(graph, "axis", axis);
            new_nodes.push(Node {
                name: format!("{name}.slice"),
                op_type: "Slice".into(),
                domain: String::new(),
                opset: opset_here,
                attrs: Default::default(),
                inputs: vec![Some(merged), Some(starts), Some(ends), Some(axes)],
                outputs: vec![orig],
            });
            col0 += m.n;
        }
        report.sets += 1;
        report.matmuls += set.len();
        at_first.insert(set[0].node, new_nodes);
    }
    let old = std::mem::take(&mut graph.nodes);
    for (i, node) in old.into_iter().enumerate() {
        if let Some(new) = at_first.remove(&i) {
            graph.nodes.extend(new);
        }
        if !removed.contains(&i) {
            graph.nodes.push(node);
        }
    }
    renumber(graph)?;
    Ok(report)
}
