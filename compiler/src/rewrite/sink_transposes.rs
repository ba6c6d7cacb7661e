//! `sink_transposes`: a Transpose that permutes only the leading (row) axes of a MatMul's
//! activation moves below the MatMul (and below the bias Add after it) when the product feeds
//! attentions through data movement alone, so that the fused attention reads it in place with
//! the rest of its operands' data movement (`program/model/strided_views.rs`) instead of the
//! Transpose being a copy before the projection.
//!
//! `nn.MultiheadAttention(batch_first=False)` in a batch-first model (torchvision's ViT) exports
//! `LayerNorm → Transpose[1, 0, 2] → MatMul(W_qkv) → Add(b_qkv) → Reshape → ... → attention`:
//! after the pass the projection reads the LayerNorm's rows as they are and the Transpose sits
//! between the bias Add and the Reshape, where the attention's operand chains take it.
//!
//! It keeps what the graph computes: a MatMul by a 2-D constant maps each row (the last axis)
//! alone, `MatMul(T_p(x), W) = T_p(MatMul(x, W))` for every permutation `p` that keeps the last
//! axis last, and an Add of a constant that varies along the last axis alone (shape `[n]` or
//! `[1, ..., 1, n]`, or one element) commutes with `T_p` the same way. Values that move keep
//! their TeSA, permuted with their elements.
//!
//! A sink happens only where the product is read by attentions alone (activation×activation
//! MatMuls through Reshape, Transpose, Squeeze, Unsqueeze, Slice, Gather of one constant index
//! and Mul by a one-element constant), as `merge_matmuls` merges only then: where the
//! attention does not fuse after all, the Transpose is a copy of the wider product.
//!
//! The Transpose back to batch first after the output projection moves the other way, into the
//! Transpose that merges the attention's heads: `Transpose[1, 0, 2](Reshape(Gemm(Reshape(
//! Transpose[2, 0, 1, 3](o)), W), [S, B, E]))` becomes `Reshape(Gemm(Reshape(Transpose[0, 2, 1,
//! 3](o)), W), [B, S, E])` (a row permutation commutes with a product by a constant and a bias
//! along the rows; the attention writes the merged heads through its output strides either way).
//! The product's rows are then the residual stream's, so the residual Add and the LayerNorm after
//! it can be done by the products around them (`program/model/norm_defer.rs`) instead of a step
//! that reads the permuted product: ViT-B/16 fp16 at 90% blocks 83 → 71 steps, 1.741 → 1.656 ms
//! (H200, call c118). Only where the head merge's input is an attention's output (an
//! activation×activation MatMul, through data movement alone), its first axes are the rows the
//! Transpose permutes, and each value between it and the Transpose has no other reader.

use super::{fresh_name, renumber};
use crate::ir::{Attr, Attrs, DType, Graph, Initializer, Node, NodeId, Tensor, ValueFact, ValueId, ValueKind};
use crate::tesa::Tesa;
use crate::Error;
use std::collections::HashMap;

/// What [`sink_transposes`] did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SinkReport {
    /// Transposes moved below a MatMul.
    pub sunk: usize,
    /// Of them, those moved below its bias Add too.
    pub with_bias: usize,
    /// Transposes after an output projection moved above it, onto the attention's output.
    pub hoisted: usize,
}

/// Ops that only move data with constant parameters between a projection and its attention.
const MOVES: &[&str] = &["Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Slice"];

fn one_element_constant(graph: &Graph, v: ValueId) -> bool {
    graph.initializers.get(&v).is_some_and(|init| init.fact().numel() == 1)
}

/// Whether every reader of `v` is an activation×activation MatMul, directly or through data
/// movement with constant parameters and Muls by a one-element constant.
fn feeds_attention(graph: &Graph, readers: &[Vec<usize>], v: ValueId, depth: usize) -> bool {
    if depth > 16 || graph.outputs.contains(&v) || readers[v.index()].is_empty() {
        return false;
    }
    readers[v.index()].iter().all(|&r| {
        let node = &graph.nodes[r];
        if !node.domain.is_empty() || node.outputs.len() != 1 {
            return false;
        }
        let others: Vec<ValueId> = node.inputs.iter().flatten().copied().filter(|&i| i != v).collect();
        let reads_data = node.inputs.first() == Some(&Some(v));
        let through = match node.op_type.as_str() {
            "MatMul" => return others.iter().all(|i| !graph.initializers.contains_key(i)),
            "Gather" => reads_data && others.len() == 1 && one_element_constant(graph, others[0]),
            // A scale of Q or K, which the attention takes into its score expression.
            "Mul" => {
                let scaled = node.outputs[0];
                let matmul = |&r: &usize| graph.nodes[r].op_type == "MatMul";
                others.len() == 1
                    && one_element_constant(graph, others[0])
                    && !graph.outputs.contains(&scaled)
                    && readers[scaled.index()].iter().all(matmul)
            }
            op => MOVES.contains(&op) && reads_data && others.iter().all(|i| graph.initializers.contains_key(i)),
        };
        through && feeds_attention(graph, readers, node.outputs[0], depth + 1)
    })
}

/// A Transpose node's permutation (reversed axes by default).
fn perm_of(graph: &Graph, node: &Node) -> Option<Vec<usize>> {
    match node.attrs.ints_opt("perm").ok()? {
        Some(p) => p.iter().map(|&a| usize::try_from(a).ok()).collect(),
        None => Some((0..graph.fact(node.inputs.first().copied().flatten()?).shape.len()).rev().collect()),
    }
}

/// The Add of a constant varying along the last axis alone (`n` wide) that is `y`'s only
/// reader: (Add node, its output).
fn bias_after(graph: &Graph, readers: &[Vec<usize>], y: ValueId, n: usize) -> Option<(usize, ValueId)> {
    let [add] = readers[y.index()][..] else { return None };
    let node = &graph.nodes[add];
    if node.op_type != "Add" || !node.domain.is_empty() || graph.outputs.contains(&y) || node.outputs.len() != 1 {
        return None;
    }
    let ins: Vec<ValueId> = node.inputs.iter().flatten().copied().collect();
    let [a, b] = ins[..] else { return None };
    let bias = if a == y { b } else { a };
    let (bf, yf) = (graph.fact(bias), graph.fact(y));
    let row = bf.shape.len() <= yf.shape.len()
        && bf.shape.iter().rev().skip(1).all(|&d| d == 1)
        && bf.shape.last().is_none_or(|&d| d == 1 || d == n);
    let same = graph.fact(node.outputs[0]).shape == yf.shape;
    (bias != y && row && same && graph.initializers.contains_key(&bias)).then_some((add, node.outputs[0]))
}

/// One sink: the Transpose, its permutation, the MatMul, the bias Add.
struct Sink {
    transpose: usize,
    perm: Vec<usize>,
    matmul: usize,
    bias: Option<usize>,
}

/// Moves the row Transposes of `graph` below the projections that feed attentions (see the
/// module docs). The graph stays verified; unreferenced values are dropped and the rest
/// renumbered.
pub fn sink_transposes(graph: &mut Graph) -> Result<SinkReport, Error> {
    let mut readers: Vec<Vec<usize>> = vec![vec![]; graph.values.len()];
    for (i, n) in graph.nodes.iter().enumerate() {
        for v in n.inputs.iter().flatten() {
            if !readers[v.index()].contains(&i) {
                readers[v.index()].push(i);
            }
        }
    }
    let mut sinks = vec![];
    for (i, node) in graph.nodes.iter().enumerate() {
        if node.op_type != "Transpose" || !node.domain.is_empty() || node.outputs.len() != 1 {
            continue;
        }
        let (Some(x), t) = (node.inputs.first().copied().flatten(), node.outputs[0]) else { continue };
        let rank = graph.fact(x).shape.len();
        let Some(perm) = perm_of(graph, node) else { continue };
        let identity = perm.iter().enumerate().all(|(a, &p)| a == p);
        if rank < 2 || perm.len() != rank || perm[rank - 1] != rank - 1 || identity || graph.outputs.contains(&t) {
            continue;
        }
        let [matmul] = readers[t.index()][..] else { continue };
        let mm = &graph.nodes[matmul];
        if mm.op_type != "MatMul" || !mm.domain.is_empty() || mm.inputs.len() != 2 || mm.inputs[0] != Some(t) {
            continue;
        }
        let Some(w) = mm.inputs[1].filter(|w| graph.initializers.contains_key(w)) else { continue };
        let wf = graph.fact(w);
        if wf.shape.len() != 2 {
            continue;
        }
        let y = mm.outputs[0];
        let bias = bias_after(graph, &readers, y, wf.shape[1]);
        if !feeds_attention(graph, &readers, bias.map_or(y, |(_, e)| e), 0) {
            continue;
        }
        sinks.push(Sink { transpose: i, perm, matmul, bias: bias.map(|(add, _)| add) });
    }
    let mut report = SinkReport::default();
    // The moved Transposes, placed after the node whose output they now permute.
    let mut after: HashMap<usize, Node> = HashMap::new();
    let mut removed = vec![false; graph.nodes.len()];
    for s in &sinks {
        let tnode = graph.nodes[s.transpose].clone();
        let x = tnode.inputs[0].expect("checked");
        let mut inverse = vec![0; s.perm.len()];
        for (a, &p) in s.perm.iter().enumerate() {
            inverse[p] = a;
        }
        graph.nodes[s.matmul].inputs[0] = Some(x);
        // The MatMul's output, when the Add follows, is only read by it: permuted in place.
        let last = s.bias.unwrap_or(s.matmul);
        if s.bias.is_some() {
            let y = graph.nodes[s.matmul].outputs[0];
            permute_value(graph, y, &inverse);
        }
        // The last node writes a new value in the activation's row order; the Transpose after
        // it gives the original value back to its readers.
        let e = graph.nodes[last].outputs[0];
        let name = fresh_name(graph, &format!("{}.rows", graph.value(e).name));
        let fact = graph.fact(e).clone();
        let e_rows = graph.add_value(name, fact, ValueKind::NodeOutput(NodeId(0)));
        graph.values[e_rows.index()].tesa = graph.value(e).tesa.clone();
        permute_value(graph, e_rows, &inverse);
        graph.nodes[last].outputs[0] = e_rows;
        let mut attrs = Attrs::new();
        attrs.insert("perm", Attr::Ints(s.perm.iter().map(|&p| p as i64).collect()));
        let name = (0..)
            .map(|i| if i == 0 { format!("{}.sunk", tnode.name) } else { format!("{}.sunk.{i}", tnode.name) })
            .find(|n| graph.nodes.iter().chain(after.values()).all(|x| &x.name != n))
            .expect("a free node name");
        after.insert(
            last,
            Node {
                name,
                op_type: "Transpose".into(),
                domain: String::new(),
                opset: tnode.opset,
                attrs,
                inputs: vec![Some(e_rows)],
                outputs: vec![e],
            },
        );
        removed[s.transpose] = true;
        report.sunk += 1;
        report.with_bias += usize::from(s.bias.is_some());
    }
    if report.sunk == 0 {
        report.hoisted = hoist_output_transposes(graph)?;
        return Ok(report);
    }
    let old = std::mem::take(&mut graph.nodes);
    for (i, node) in old.into_iter().enumerate() {
        if !removed[i] {
            graph.nodes.push(node);
        }
        if let Some(t) = after.remove(&i) {
            graph.nodes.push(t);
        }
    }
    renumber(graph)?;
    report.hoisted = hoist_output_transposes(graph)?;
    Ok(report)
}

/// Whether `v` is an activation×activation MatMul's output (an attention's), directly or
/// through data movement with constant parameters.
fn from_attention(graph: &Graph, producer: &[Option<usize>], v: ValueId, depth: usize) -> bool {
    let Some(p) = producer[v.index()].filter(|_| depth <= 16) else { return false };
    let node = &graph.nodes[p];
    if !node.domain.is_empty() || node.outputs.len() != 1 {
        return false;
    }
    let constant = |i: &ValueId| graph.initializers.contains_key(i);
    match node.op_type.as_str() {
        "MatMul" => node.inputs.iter().flatten().all(|i| !constant(i)),
        op if MOVES.contains(&op) => {
            node.inputs.iter().skip(1).flatten().all(constant)
                && node.inputs.first().copied().flatten().is_some_and(|x| from_attention(graph, producer, x, depth + 1))
        }
        _ => false,
    }
}

/// One hoist: `z = Transpose_p(Reshape(y, dims ++ [n]))` with `y = Gemm/MatMul(x, W)` and
/// `x = Reshape(Transpose_q(o), [rows, k])`, the first axes of `Transpose_q(o)` being `dims`.
struct Hoist {
    transpose: usize,
    reshape: usize,
    product: usize,
    head_merge: usize,
    dims: Vec<usize>,
    perm: Vec<usize>,
}

/// A `[rows.len(), width]` TeSA with its rows taken in the order `rows`.
fn rows_tesa(t: &Tesa, rows: &[usize], width: usize) -> Tesa {
    let shape = [rows.len(), width];
    let u = t.uniform();
    if *t == Tesa::dense(t.shape(), u.bits(), u.format()) {
        return Tesa::dense(&shape, u.bits(), u.format());
    }
    let positions: Vec<usize> = rows.iter().flat_map(|&r| r * width..(r + 1) * width).collect();
    t.gather(&shape, &positions)
}

/// Moves each Transpose after an output projection above it, into the Transpose that merges the
/// attention's heads (see the module docs); returns how many moved.
fn hoist_output_transposes(graph: &mut Graph) -> Result<usize, Error> {
    let mut readers: Vec<Vec<usize>> = vec![vec![]; graph.values.len()];
    let mut producer: Vec<Option<usize>> = vec![None; graph.values.len()];
    for (i, n) in graph.nodes.iter().enumerate() {
        for v in n.inputs.iter().flatten() {
            if !readers[v.index()].contains(&i) {
                readers[v.index()].push(i);
            }
        }
        for v in &n.outputs {
            producer[v.index()] = Some(i);
        }
    }
    let single = |v: ValueId| match readers[v.index()][..] {
        [r] if !graph.outputs.contains(&v) => Some(r),
        _ => None,
    };
    let op = |i: usize, op: &str| graph.nodes[i].op_type == op && graph.nodes[i].domain.is_empty();
    let mut hoists = vec![];
    for (i, node) in graph.nodes.iter().enumerate() {
        if !op(i, "Transpose") || node.outputs.len() != 1 {
            continue;
        }
        let Some(y3) = node.inputs.first().copied().flatten() else { continue };
        let Some(perm) = perm_of(graph, node) else { continue };
        let rank = graph.fact(y3).shape.len();
        let identity = perm.iter().enumerate().all(|(a, &p)| a == p);
        if rank < 3 || perm.len() != rank || perm[rank - 1] != rank - 1 || identity || single(y3) != Some(i) {
            continue;
        }
        // y3 = Reshape(y2), y2 = the product's output, read by that Reshape alone.
        let Some(reshape) = producer[y3.index()].filter(|&r| op(r, "Reshape")) else { continue };
        let Some(y2) = graph.nodes[reshape].inputs.first().copied().flatten() else { continue };
        let Some(product) = producer[y2.index()].filter(|_| single(y2) == Some(reshape)) else { continue };
        let g = &graph.nodes[product];
        let constant = |v: Option<ValueId>| v.is_some_and(|v| graph.initializers.contains_key(&v));
        let n = graph.fact(y3).shape[rank - 1];
        let row_bias = |v: Option<ValueId>| {
            v.is_none_or(|b| {
                let s = &graph.fact(b).shape;
                constant(Some(b))
                    && s.iter().rev().skip(1).all(|&d| d == 1)
                    && s.last().is_none_or(|&d| d == 1 || d == n)
            })
        };
        let is_product = g.domain.is_empty()
            && g.outputs.len() == 1
            && match (g.op_type.as_str(), &g.inputs[..]) {
                ("MatMul", [_, w]) => constant(*w),
                ("Gemm", [_, w, rest @ ..]) => {
                    g.attrs.int_opt("transA").ok().flatten().unwrap_or(0) == 0
                        && constant(*w)
                        && rest.len() <= 1
                        && row_bias(rest.first().copied().flatten())
                }
                _ => false,
            };
        let Some(x2) = g.inputs[0] else { continue };
        let dims = graph.fact(y3).shape[..rank - 1].to_vec();
        if !is_product || graph.fact(y2).shape != [dims.iter().product(), n] || graph.fact(x2).shape.len() != 2 {
            continue;
        }
        // x2 = Reshape(u), u = Transpose_q(o) of an attention's output, its first axes `dims`.
        let Some(rows) = producer[x2.index()].filter(|&r| op(r, "Reshape") && single(x2) == Some(product)) else {
            continue;
        };
        let Some(u) = graph.nodes[rows].inputs.first().copied().flatten() else { continue };
        let Some(head_merge) = producer[u.index()].filter(|&t| op(t, "Transpose") && single(u) == Some(rows)) else {
            continue;
        };
        let us = &graph.fact(u).shape;
        let Some(o) = graph.nodes[head_merge].inputs.first().copied().flatten() else { continue };
        if us.len() <= dims.len() || us[..dims.len()] != dims[..] || !from_attention(graph, &producer, o, 0) {
            continue;
        }
        hoists.push(Hoist { transpose: i, reshape, product, head_merge, dims, perm: perm[..rank - 1].to_vec() });
    }
    if hoists.is_empty() {
        return Ok(0);
    }
    let mut removed = vec![false; graph.nodes.len()];
    for h in &hoists {
        // The head merge takes the row permutation: its output's first axes in the new order.
        let merge = &graph.nodes[h.head_merge];
        let q = perm_of(graph, merge).expect("checked");
        let u = merge.outputs[0];
        let mut q2: Vec<usize> = h.perm.iter().map(|&a| q[a]).collect();
        q2.extend_from_slice(&q[h.dims.len()..]);
        let mut p_u: Vec<usize> = h.perm.clone();
        p_u.extend(h.dims.len()..q.len());
        graph.nodes[h.head_merge].attrs.insert("perm", Attr::Ints(q2.iter().map(|&p| p as i64).collect()));
        permute_value(graph, u, &p_u);
        // The rows the projection reads and writes, in the new order.
        // Row i of the new order is old row rows[i]: the flat positions of `dims` transposed.
        let (_, rows) = super::transpose_positions(&h.dims, &h.perm);
        let x2 = graph.nodes[h.product].inputs[0].expect("checked");
        let y2 = graph.nodes[h.product].outputs[0];
        for v in [x2, y2] {
            let width = graph.fact(v).shape[1];
            if let Some(t) = graph.values[v.index()].tesa.take() {
                graph.values[v.index()].tesa = Some(rows_tesa(&t, &rows, width));
            }
        }
        // The Reshape after the product now writes the Transpose's output (batch first).
        let z = graph.nodes[h.transpose].outputs[0];
        let dims: Vec<i64> = graph.fact(z).shape.iter().map(|&d| d as i64).collect();
        let name = fresh_name(graph, &format!("{}.shape", graph.value(z).name));
        let s = graph.add_value(name, ValueFact::new(DType::I64, vec![dims.len()]), ValueKind::Initializer);
        graph.initializers.insert(s, Initializer::Dense(Tensor::from_vec(vec![dims.len()], dims)));
        graph.nodes[h.reshape].inputs[1] = Some(s);
        graph.nodes[h.reshape].outputs[0] = z;
        removed[h.transpose] = true;
    }
    let old = std::mem::take(&mut graph.nodes);
    graph.nodes = old.into_iter().enumerate().filter(|(i, _)| !removed[*i]).map(|(_, n)| n).collect();
    renumber(graph)?;
    Ok(hoists.len())
}

/// Value `v` (shape and TeSA) as `Transpose(v, perm)`.
fn permute_value(graph: &mut Graph, v: ValueId, perm: &[usize]) {
    let value = &mut graph.values[v.index()];
    let shape: Vec<usize> = perm.iter().map(|&p| value.fact.shape[p]).collect();
    if let Some(t) = value.tesa.take() {
        let u = t.uniform();
        // A TeSA that says the same of every element (an activation's, mostly) needs no map.
        value.tesa = Some(if t == Tesa::dense(t.shape(), u.bits(), u.format()) {
            Tesa::dense(&shape, u.bits(), u.format())
        } else {
            t.transpose(perm)
        });
    }
    value.fact = ValueFact::new(value.fact.dtype, shape);
}
