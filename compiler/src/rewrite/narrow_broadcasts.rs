//! `narrow_broadcasts`: an elementwise op whose constant operand is its identity everywhere
//! (`And` with all true, `Or` with all false, `Add` with all zeros, `Mul` with all ones, `Sub`
//! and `Div` by zeros and ones) only broadcasts its other operand; the node goes, and the
//! broadcast is left to the readers.
//!
//! Exported transformers build their attention mask that way: `And(ones[1, 1, S, 1],
//! pad[B, 1, 1, S])` then `Where(·, 0, -inf)` makes a `[B, 1, S, S]` mask whose every query row
//! is the same. Narrowed, the mask is `[B, 1, 1, S]`: the fused attention reads one mask row
//! per batch entry instead of one per query (a row-independent operand it loads once per key
//! tile), and the mask kernels write S times less.
//!
//! Only a node whose other operand is smaller than its output goes (an identity that does not
//! broadcast, such as a zero bias, is left as the model wrote it). It is dropped when every
//! value that would change shape can: starting from the dropped
//! node's output (now its other operand), each reader must be a broadcasting elementwise op
//! (`BROADCASTING`) or a shape-keeping unary one (`UNARY`); a reader whose output shape the
//! narrower input does not change is where the narrowing stops, one whose output shrinks is
//! narrowed in turn (its value retyped, its TeSA the slice at the first index of each axis it
//! lost: the values are equal along those axes). A graph output never changes shape, and any
//! other reader keeps the whole chain as it was.
//!
//! First, a constant `Add` between a Reshape that splits axis 0 and one that merges it back
//! (`[B, …] → [B₁, B₂, …] + m → [B, …]`: Swin's shifted-window mask, one mask per window, the
//! windows of every image on axis 0) becomes one `Add` of the unsplit value and the constant
//! laid out along the merged axis (`m` repeated over whichever of B₁, B₂ it varies along):
//! an elementwise op the fused attention's score group takes, where the Reshapes stopped it.

use super::renumber;
use crate::ir::{broadcast_all, Graph, Initializer, Tensor, ValueFact, ValueId, ValueKind};
use crate::Error;
use std::collections::BTreeMap;

/// Ops whose output is their inputs broadcast together, element by element.
const BROADCASTING: &[&str] = &[
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "Max",
    "Min",
    "And",
    "Or",
    "Xor",
    "Equal",
    "Less",
    "Greater",
    "LessOrEqual",
    "GreaterOrEqual",
    "Where",
];
/// Single-input ops whose output has their input's shape.
const UNARY: &[&str] =
    &["Identity", "Cast", "Not", "Neg", "Abs", "Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Erf", "Reciprocal"];

/// What [`narrow_broadcasts`] did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NarrowReport {
    /// Identity nodes dropped.
    pub dropped: usize,
    /// Constant Adds taken out from between a split and a merge of axis 0.
    pub unsplit: usize,
    /// Values that became smaller (broadcast by their readers instead).
    pub narrowed: usize,
}

/// Which operand (0 or 1) of node `n` is a constant identity of its op whose other operand
/// it only broadcasts to the output's shape.
fn identity_operand(graph: &Graph, n: usize) -> Option<usize> {
    let node = &graph.nodes[n];
    if !node.domain.is_empty() || node.inputs.len() != 2 || node.outputs.len() != 1 {
        return None;
    }
    let is_const = |i: usize, want: f64| -> bool {
        let Some(v) = node.inputs[i] else { return false };
        match graph.initializers.get(&v) {
            Some(Initializer::Dense(t)) => !t.is_empty() && t.to_f64_vec().iter().all(|&x| x == want),
            _ => false,
        }
    };
    let (first, second) = match node.op_type.as_str() {
        "And" => (Some(1.0), Some(1.0)),
        "Or" => (Some(0.0), Some(0.0)),
        "Add" => (Some(0.0), Some(0.0)),
        "Mul" => (Some(1.0), Some(1.0)),
        "Sub" => (None, Some(0.0)),
        "Div" => (None, Some(1.0)),
        _ => return None,
    };
    // The operand passed through must have the output's type (Add of -0.0 and 0.0 aside,
    // x + 0 and x · 1 are x) and be smaller than the output: an identity that broadcasts
    // nothing (a zero bias, say) stays as the model wrote it. Checked before the constant's
    // values are read.
    let out = graph.value(node.outputs[0]).fact.clone();
    let narrower = |i: usize| {
        node.inputs[i].is_some_and(|v| {
            let f = &graph.value(v).fact;
            f.dtype == out.dtype && f.shape.iter().product::<usize>() < out.shape.iter().product::<usize>()
        })
    };
    if second.is_some() && narrower(0) && second.is_some_and(|w| is_const(1, w)) {
        Some(1)
    } else if first.is_some() && narrower(1) && first.is_some_and(|w| is_const(0, w)) {
        Some(0)
    } else {
        None
    }
}

/// The output shape of `node` when its inputs have `shapes`, for the ops this pass walks.
fn output_shape(op: &str, shapes: &[&[usize]]) -> Option<Vec<usize>> {
    if UNARY.contains(&op) {
        return shapes.first().map(|s| s.to_vec());
    }
    broadcast_all(shapes)
}

/// Flat positions, in a tensor of `full` shape, of the elements of its slice of `narrow` shape
/// (same rank, each axis equal or 1) at index 0 along the axes it lost.
fn slice_positions(full: &[usize], narrow: &[usize]) -> Vec<usize> {
    let strides = crate::ir::strides(full);
    let n: usize = narrow.iter().product();
    let mut out = Vec::with_capacity(n);
    let mut idx = vec![0usize; narrow.len()];
    for _ in 0..n {
        out.push(idx.iter().zip(&strides).map(|(i, s)| i * s).sum());
        for d in (0..idx.len()).rev() {
            idx[d] += 1;
            if idx[d] < narrow[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    out
}

/// Drops identity nodes whose readers can broadcast (see the module docs); the graph stays
/// verified.
pub fn narrow_broadcasts(graph: &mut Graph) -> Result<NarrowReport, Error> {
    let mut report = NarrowReport { unsplit: unsplit_constant_adds(graph)?, ..NarrowReport::default() };
    let mut readers = readers_of(graph);
    let mut dropped = vec![false; graph.nodes.len()];
    // By index: the body rewrites graph.nodes while it walks them.
    #[allow(clippy::needless_range_loop)]
    for n in 0..graph.nodes.len() {
        let Some(c) = identity_operand(graph, n) else { continue };
        let node = &graph.nodes[n];
        let (out, x) = (node.outputs[0], node.inputs[1 - c].expect("checked"));
        if graph.outputs.contains(&out) {
            continue;
        }
        // New shapes of the values that shrink: the dropped output takes x's (rank kept).
        let rank = graph.value(out).fact.shape.len();
        let mut x_shape = graph.value(x).fact.shape.clone();
        while x_shape.len() < rank {
            x_shape.insert(0, 1);
        }
        let mut shapes: BTreeMap<ValueId, Vec<usize>> = BTreeMap::from([(out, x_shape)]);
        let mut queue = vec![out];
        let mut ok = true;
        while let Some(v) = queue.pop() {
            for &r in readers.get(&v).map(Vec::as_slice).unwrap_or(&[]) {
                let rn = &graph.nodes[r];
                let op = rn.op_type.as_str();
                if !rn.domain.is_empty()
                    || rn.outputs.len() != 1
                    || !(BROADCASTING.contains(&op) || UNARY.contains(&op))
                {
                    ok = false;
                    break;
                }
                let ins: Vec<Vec<usize>> = rn
                    .inputs
                    .iter()
                    .flatten()
                    .map(|i| shapes.get(i).cloned().unwrap_or_else(|| graph.value(*i).fact.shape.clone()))
                    .collect();
                let refs: Vec<&[usize]> = ins.iter().map(Vec::as_slice).collect();
                let ro = rn.outputs[0];
                let old = &graph.value(ro).fact.shape;
                match output_shape(op, &refs) {
                    Some(s) if &s == old => {}
                    Some(s) if s.len() == old.len() && !graph.outputs.contains(&ro) => {
                        if shapes.insert(ro, s).is_none() {
                            queue.push(ro);
                        }
                    }
                    _ => ok = false,
                }
            }
            if !ok {
                break;
            }
        }
        if !ok {
            continue;
        }
        // Apply: readers of `out` read x; every other shrunk value is retyped.
        for r in readers.remove(&out).unwrap_or_default() {
            for i in graph.nodes[r].inputs.iter_mut().flatten() {
                if *i == out {
                    *i = x;
                }
            }
            readers.entry(x).or_default().push(r);
        }
        for (&v, s) in &shapes {
            if v == out {
                continue;
            }
            let val = &mut graph.values[v.index()];
            if let Some(t) = &val.tesa {
                val.tesa = Some(t.gather(s, &slice_positions(&val.fact.shape, s)));
            }
            val.fact.shape = s.clone();
            report.narrowed += 1;
        }
        dropped[n] = true;
        report.dropped += 1;
    }
    if report.dropped > 0 {
        drop_nodes(graph, &dropped)?;
    }
    Ok(report)
}

/// The constant Adds between a split and a merge of axis 0 (see the module docs), rewritten;
/// how many.
fn unsplit_constant_adds(graph: &mut Graph) -> Result<usize, Error> {
    let readers = readers_of(graph);
    let only_reader = |v: ValueId, op: &str, g: &Graph| -> Option<usize> {
        match readers.get(&v).map(Vec::as_slice) {
            Some(&[r]) if g.nodes[r].op_type == op && g.nodes[r].domain.is_empty() && !g.outputs.contains(&v) => {
                Some(r)
            }
            _ => None,
        }
    };
    let mut dropped = vec![false; graph.nodes.len()];
    let mut count = 0;
    for split in 0..graph.nodes.len() {
        let node = &graph.nodes[split];
        if node.op_type != "Reshape" || !node.domain.is_empty() || dropped[split] {
            continue;
        }
        let (Some(a), y5) = (node.inputs[0], node.outputs[0]) else { continue };
        let (sa, s5) = (graph.fact(a).shape.clone(), graph.fact(y5).shape.clone());
        if sa.is_empty() || s5.len() != sa.len() + 1 || s5[0] * s5[1] != sa[0] || s5[2..] != sa[1..] {
            continue;
        }
        let Some(add) = only_reader(y5, "Add", graph) else { continue };
        let an = &graph.nodes[add];
        let (Some(x0), Some(x1)) = (an.inputs[0], an.inputs.get(1).copied().flatten()) else { continue };
        let m = if x0 == y5 { x1 } else { x0 };
        let Some(Initializer::Dense(mt)) = graph.initializers.get(&m) else { continue };
        let sum = an.outputs[0];
        if m == y5 || mt.shape().len() > s5.len() || graph.fact(sum).shape != s5 {
            continue;
        }
        let Some(merge) = only_reader(sum, "Reshape", graph) else { continue };
        let out = graph.nodes[merge].outputs[0];
        if graph.fact(out).shape != sa {
            continue;
        }
        // m over the split shape, its own size-1 axes kept past the first two: [B₁ or 1, B₂ or
        // 1, …] as [B₁·B₂ or 1, …].
        let mut ms = mt.shape().to_vec();
        while ms.len() < s5.len() {
            ms.insert(0, 1);
        }
        let lead = if ms[0] == 1 && ms[1] == 1 { 1 } else { s5[0] * s5[1] };
        let rest: Vec<usize> = ms[2..].to_vec();
        let inner: usize = rest.iter().product();
        let positions: Vec<usize> = (0..lead * inner)
            .map(|e| {
                let (b, r) = (e / inner, e % inner);
                let (b1, b2) = if lead == 1 { (0, 0) } else { (b / s5[1], b % s5[1]) };
                let (b1, b2) = (if ms[0] == 1 { 0 } else { b1 }, if ms[1] == 1 { 0 } else { b2 });
                (b1 * ms[1] + b2) * inner + r
            })
            .collect();
        let mut shape4 = vec![lead];
        shape4.extend(rest);
        let m4 = Tensor::new(shape4, mt.data().gather_flat(&positions)).expect("one position per element");
        let name = super::fresh_name(graph, &format!("{}.unsplit", graph.value(m).name));
        let m4_id = graph.add_value(name, ValueFact::of(&m4), ValueKind::Initializer);
        graph.initializers.insert(m4_id, Initializer::Dense(m4));
        let an = &mut graph.nodes[add];
        an.inputs = if x0 == y5 { vec![Some(a), Some(m4_id)] } else { vec![Some(m4_id), Some(a)] };
        an.outputs[0] = out;
        dropped[split] = true;
        dropped[merge] = true;
        count += 1;
    }
    if count > 0 {
        drop_nodes(graph, &dropped)?;
    }
    Ok(count)
}

/// The nodes reading each value, in graph order.
fn readers_of(graph: &Graph) -> BTreeMap<ValueId, Vec<usize>> {
    let mut readers: BTreeMap<ValueId, Vec<usize>> = BTreeMap::new();
    for (i, n) in graph.nodes.iter().enumerate() {
        for v in n.inputs.iter().flatten() {
            readers.entry(*v).or_default().push(i);
        }
    }
    readers
}

/// Removes the nodes marked in `dropped` and renumbers the values.
fn drop_nodes(graph: &mut Graph, dropped: &[bool]) -> Result<(), Error> {
    let mut i = 0;
    graph.nodes.retain(|_| {
        i += 1;
        !dropped[i - 1]
    });
    renumber(graph)
}
