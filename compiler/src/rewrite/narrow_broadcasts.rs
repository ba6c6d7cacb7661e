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
//! Before that, a GatherND whose constant indices name the data's elements in their own order
//! (the exporters' `mask[:, None, None, :]`: a `[B, S]` mask gathered to `[B, 1, 1, S]`
//! tuple by tuple) becomes the Reshape it is: a view, so that the Cast before it and the
//! `Where` after it fuse into one elementwise kernel instead of three steps.
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
    /// GatherNDs that read their data in order, now Reshapes.
    pub gathers_as_views: usize,
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
    let gathers_as_views = identity_gathers(graph)?;
    let mut report =
        NarrowReport { unsplit: unsplit_constant_adds(graph)?, gathers_as_views, ..NarrowReport::default() };
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

/// Whether GatherND (`batch_dims` 0) of data of `shape` by the integer index tuples `idx`
/// (`tuples` of `q` each, negative ones counting from the end) reads every element of the data
/// once, in order: tuple `j` names the `j`-th slice of the data's trailing axes.
fn gathers_in_order(shape: &[usize], idx: &[i64], q: usize) -> bool {
    if q == 0 || q > shape.len() || !idx.len().is_multiple_of(q) {
        return false;
    }
    let tuples = idx.len() / q;
    let inner: usize = shape[q..].iter().product();
    if tuples * inner != shape.iter().product::<usize>() {
        return false;
    }
    let strides = crate::ir::strides(shape);
    idx.chunks(q).enumerate().all(|(j, t)| {
        let mut at = 0usize;
        for (k, &i) in t.iter().enumerate() {
            let d = shape[k] as i64;
            let i = if i < 0 { i + d } else { i };
            if !(0..d).contains(&i) {
                return false;
            }
            at += i as usize * strides[k];
        }
        at == j * inner
    })
}

/// Rewrites every GatherND that reads its data in order ([`gathers_in_order`]) as a Reshape
/// to its output's shape (a new constant shape input); how many.
fn identity_gathers(graph: &mut Graph) -> Result<usize, Error> {
    let mut done = 0;
    for n in 0..graph.nodes.len() {
        let node = &graph.nodes[n];
        if node.op_type != "GatherND" || !node.domain.is_empty() || node.inputs.len() != 2 || node.outputs.len() != 1 {
            continue;
        }
        if node.attrs.int("batch_dims", 0).ok() != Some(0) {
            continue;
        }
        let (Some(data), Some(indices)) = (node.inputs[0], node.inputs[1]) else { continue };
        let Some(Initializer::Dense(t)) = graph.initializers.get(&indices) else { continue };
        let ishape = graph.value(indices).fact.shape.clone();
        let Some(&q) = ishape.last() else { continue };
        let idx: Vec<i64> = t.to_f64_vec().iter().map(|&x| x as i64).collect();
        let dshape = graph.value(data).fact.shape.clone();
        if !gathers_in_order(&dshape, &idx, q) {
            continue;
        }
        let out_shape = graph.value(node.outputs[0]).fact.shape.clone();
        let dims: Vec<i64> = out_shape.iter().map(|&d| d as i64).collect();
        let shape_t = Tensor::from_vec(vec![dims.len()], dims);
        let name = super::fresh_name(graph, &format!("{}.shape", node.name));
        let s = graph.add_value(name, ValueFact::of(&shape_t), ValueKind::Initializer);
        graph.initializers.insert(s, Initializer::Dense(shape_t));
        let node = &mut graph.nodes[n];
        node.op_type = "Reshape".to_string();
        node.attrs = Default::default();
        node.inputs = vec![Some(data), Some(s)];
        done += 1;
        view_before_unary(graph, n);
    }
    if done > 0 {
        // The index tensors nobody reads any more go with the renumbering.
        renumber(graph)?;
    }
    Ok(done)
}

/// Where the data of Reshape node `r` is the output of a one-input shape-keeping op `u`
/// (`UNARY`: the mask's Cast) that nothing else reads, swaps the two (`u(x) → view` becomes
/// `view(x) → u`, the same elements): the view then reads `x` in place and `u` joins the
/// elementwise group of its readers. `u` takes `r`'s place in the node order (after it, as its
/// output's readers), the value between them `x`'s type at the view's shape.
fn view_before_unary(graph: &mut Graph, r: usize) {
    let Some(b) = graph.nodes[r].inputs[0] else { return };
    let Some(u) = graph.nodes.iter().position(|nd| nd.outputs.contains(&b)) else { return };
    let un = &graph.nodes[u];
    let single_reader = graph.nodes.iter().filter(|nd| nd.inputs.contains(&Some(b))).count() == 1;
    if !UNARY.contains(&un.op_type.as_str())
        || !un.domain.is_empty()
        || un.inputs.len() != 1
        || un.outputs.len() != 1
        || !single_reader
        || graph.outputs.contains(&b)
    {
        return;
    }
    let Some(x) = un.inputs[0] else { return };
    let c = graph.nodes[r].outputs[0];
    let (x_fact, c_shape) = (graph.value(x).fact.clone(), graph.value(c).fact.shape.clone());
    let n: usize = c_shape.iter().product();
    let tesa = graph.value(x).tesa.as_ref().map(|t| t.gather(&c_shape, &(0..n).collect::<Vec<_>>()));
    let bv = &mut graph.values[b.index()];
    bv.fact = ValueFact::new(x_fact.dtype, c_shape);
    bv.tesa = tesa;
    let mut view = graph.nodes[r].clone();
    view.inputs[0] = Some(x);
    view.outputs = vec![b];
    let mut unary = graph.nodes[u].clone();
    unary.inputs = vec![Some(b)];
    unary.outputs = vec![c];
    graph.nodes[u] = view;
    graph.nodes[r] = unary;
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

#[cfg(test)]
mod gather_tests {
    use super::*;

    #[test]
    fn in_order_tuples_are_a_view_and_any_other_order_is_not() {
        // [2, 3] gathered by (b, s) tuples in order to [2, 1, 1, 3]: the exporters' mask.
        let tuples: Vec<i64> = (0..2).flat_map(|b| (0..3).flat_map(move |s| [b, s])).collect();
        assert!(gathers_in_order(&[2, 3], &tuples, 2));
        // Negative indices count from the end.
        let neg: Vec<i64> = tuples.iter().enumerate().map(|(i, &x)| if i % 2 == 1 { x - 3 } else { x }).collect();
        assert!(gathers_in_order(&[2, 3], &neg, 2));
        // Whole rows (q = 1) in order.
        assert!(gathers_in_order(&[4, 5], &[0, 1, 2, 3], 1));
        // Swapped, repeated, missing or out of range: a real gather.
        let mut swapped = tuples.clone();
        swapped.swap(0, 2);
        swapped.swap(1, 3);
        assert!(!gathers_in_order(&[2, 3], &swapped, 2));
        assert!(!gathers_in_order(&[4, 5], &[0, 1, 1, 3], 1));
        assert!(!gathers_in_order(&[4, 5], &[0, 1, 2], 1));
        assert!(!gathers_in_order(&[4, 5], &[0, 1, 2, 4], 1));
        assert!(!gathers_in_order(&[4, 5], &[0, 1, 2, 3], 3));
    }

    #[test]
    fn an_in_order_gather_nd_becomes_a_reshape_that_computes_the_same() {
        let mut b = crate::propagate::tests::G::new();
        let x = b.input("x", &[2, 3]);
        let tuples: Vec<i64> = (0..2).flat_map(|b| (0..3).flat_map(move |s| [b, s])).collect();
        let idx = b.init("idx", Tensor::from_vec(vec![2, 1, 1, 3, 2], tuples));
        let y = b.node("GatherND", &[x, idx], crate::ir::Attrs::new());
        let mut g = b.finish(&[y]);
        let input = Tensor::from_vec(vec![2, 3], (0..6).map(|i| i as f32 * 0.5 - 1.0).collect::<Vec<f32>>());
        let feeds = BTreeMap::from([("x".to_string(), input)]);
        let before = crate::reference::execute(&g, &feeds).unwrap();
        let r = narrow_broadcasts(&mut g).unwrap();
        assert_eq!(r.gathers_as_views, 1);
        assert_eq!(g.nodes[0].op_type, "Reshape");
        assert_eq!(g.value(g.outputs[0]).fact.shape, vec![2, 1, 1, 3]);
        crate::ir::verify(&g).unwrap();
        assert_eq!(crate::reference::execute(&g, &feeds).unwrap(), before);
    }

    #[test]
    fn a_cast_before_the_view_moves_after_it() {
        let mut b = crate::propagate::tests::G::new();
        let x = b.input("x", &[2, 3]);
        let mut to = crate::ir::Attrs::new();
        to.insert("to", crate::ir::Attr::Int(9));
        let c = b.node("Cast", &[x], to);
        let tuples: Vec<i64> = (0..2).flat_map(|b| (0..3).flat_map(move |s| [b, s])).collect();
        let idx = b.init("idx", Tensor::from_vec(vec![2, 1, 1, 3, 2], tuples));
        let y = b.node("GatherND", &[c, idx], crate::ir::Attrs::new());
        let mut g = b.finish(&[y]);
        let input = Tensor::from_vec(vec![2, 3], vec![0.0f32, 1.0, 0.0, 2.0, 0.0, -1.0]);
        let feeds = BTreeMap::from([("x".to_string(), input)]);
        let before = crate::reference::execute(&g, &feeds).unwrap();
        narrow_broadcasts(&mut g).unwrap();
        let ops: Vec<&str> = g.nodes.iter().map(|n| n.op_type.as_str()).collect();
        assert_eq!(ops, ["Reshape", "Cast"]);
        crate::ir::verify(&g).unwrap();
        assert_eq!(g.value(g.nodes[0].outputs[0]).fact, ValueFact::new(crate::ir::DType::F32, vec![2, 1, 1, 3]));
        assert_eq!(crate::reference::execute(&g, &feeds).unwrap(), before);
    }
}
