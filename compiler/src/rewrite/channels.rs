//! `shrink_channels`: cut out the channels that propagation pruned, so channel and filter
//! pruning becomes physically smaller dense operators (SparTA's "pruned filters shrink the
//! tensor" case).
//!
//! Values that carry channels (4-D float activations, axis 1, and the `[N, C]` that a global
//! pool or a flattening of `[N, C, 1, 1]` leaves) are grouped into *channel classes*: the
//! values a channel-wise op connects (elementwise ops, BatchNormalization, depthwise Conv,
//! pooling and reductions over the spatial axes, that flattening) share one class, because
//! their channel `c` only ever meets channel `c`. A channel is cut from a class when every
//! value of the class has it pruned in its TeSA. That is exact: a pruned activation element is
//! zero or unused (propagation's invariant), channel-wise ops keep channel `c` to itself, and
//! the ops that read a class across channels are re-indexed with it: a Conv reading it loses
//! those input channels of its weight, the Conv producing it loses those filters and their
//! bias, a depthwise Conv its filters (and its `group` follows), a Gemm or MatMul reading the
//! flattened `[N, C]` loses those rows of its weight.
//!
//! A residual join (an Add of two classes) makes them one class, so a channel is cut from a
//! residual stream only where every block writing it pruned that channel. A Concat along the
//! channels does not join its inputs' classes: output channel `offset_i + c` *is* channel `c`
//! of input `i`, so the two are cut together or kept together, across the classes (a
//! fixpoint: a channel live on either side is kept on both; SqueezeNet's fire modules, a
//! DenseNet block's growing Concats). A Concat along another axis is channel-wise. A grouped
//! convolution (other than a depthwise one) is cut by whole groups: a group stays, input and
//! output channels, when any of its channels is live, and the kept groups keep their order
//! (RegNet's and ResNeXt's grouped 3×3 convolutions).
//!
//! A class is left whole (frozen) when one of its values is a graph input or output, is read
//! or written by an op this pass does not know, or when a weight to cut is not constant. A
//! weight to cut that other inputs read too is cut in a copy of its own. A class keeps at least one channel (an all-pruned class keeps channel 0, which
//! is zero).

use super::{gather_tensor, renumber, take_positions};
use crate::ir::{Attr, DType, Graph, Initializer, Tensor, ValueFact, ValueId, ValueKind};
use crate::Error;
use std::collections::{BTreeMap, HashMap};

/// What [`shrink_channels`] did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ShrinkReport {
    /// Channel classes found, and how many were cut.
    pub classes: usize,
    pub shrunk: usize,
    /// Channels summed over the classes, before and after.
    pub channels_before: usize,
    pub channels_after: usize,
    /// Elements of the weights that were cut, before and after.
    pub weight_elements_before: usize,
    pub weight_elements_after: usize,
}

/// A weight (or per-channel constant) input to cut along `axis` with the channels of the
/// class of `class_value`.
struct Cut {
    node: usize,
    input: usize,
    axis: usize,
    class_value: ValueId,
}

struct Classes {
    parent: Vec<usize>,
}

impl Classes {
    fn find(&mut self, v: usize) -> usize {
        let mut r = v;
        while self.parent[r] != r {
            r = self.parent[r];
        }
        let mut x = v;
        while self.parent[x] != r {
            let next = self.parent[x];
            self.parent[x] = r;
            x = next;
        }
        r
    }

    fn union(&mut self, a: usize, b: usize) {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra != rb {
            self.parent[ra.max(rb)] = ra.min(rb);
        }
    }
}

/// Pooling and reductions that keep the channel axis (checked per node).
const POOLS: &[&str] = &[
    "GlobalAveragePool",
    "GlobalMaxPool",
    "MaxPool",
    "AveragePool",
    "ReduceMean",
    "ReduceSum",
    "ReduceMax",
    "ReduceMin",
];

/// The channel structure of a graph: which values carry channels, their classes, what is
/// frozen, and the weights, groups and shapes to cut with them.
struct Analysis {
    chan: Vec<bool>,
    classes: Classes,
    frozen: Vec<bool>,
    cuts: Vec<Cut>,
    groups: Vec<(usize, ValueId)>,
    /// Grouped convolutions (not depthwise): node, input, output, groups.
    grouped: Vec<(usize, ValueId, ValueId, usize)>,
    reshapes: Vec<(usize, ValueId)>,
    concats: Vec<(Vec<ValueId>, ValueId)>,
}

/// Finds the channel classes of `graph` and what reads and writes them (see the module docs).
/// Structural only: nothing here looks at TeSA.
fn analyze(graph: &Graph) -> Analysis {
    let n_values = graph.values.len();
    let mut chan = vec![false; n_values];
    for (i, v) in graph.values.iter().enumerate() {
        chan[i] = v.fact.shape.len() == 4 && v.fact.dtype.is_float() && v.kind != ValueKind::Initializer;
    }
    let mut classes = Classes { parent: (0..n_values).collect() };
    let mut frozen = vec![false; n_values];
    let mut cuts: Vec<Cut> = vec![];
    let mut groups: Vec<(usize, ValueId)> = vec![];
    let mut grouped: Vec<(usize, ValueId, ValueId, usize)> = vec![];
    let mut reshapes: Vec<(usize, ValueId)> = vec![];
    // Concats along the channels: (inputs, output); their classes are tied channel by channel.
    let mut concats: Vec<(Vec<ValueId>, ValueId)> = vec![];
    for &v in graph.inputs.iter().chain(&graph.outputs) {
        frozen[v.index()] = true;
    }
    let is_const = |graph: &Graph, v: Option<ValueId>| v.is_some_and(|v| graph.initializers.contains_key(&v));
    for (ni, node) in graph.nodes.iter().enumerate() {
        let ins: Vec<Option<ValueId>> = node.inputs.clone();
        let input = |i: usize| ins.get(i).copied().flatten();
        let touches = ins.iter().flatten().chain(&node.outputs).any(|v| chan[v.index()]);
        if !touches {
            continue;
        }
        let freeze_all = |frozen: &mut Vec<bool>| {
            for v in ins.iter().flatten().chain(&node.outputs) {
                frozen[v.index()] = true;
            }
        };
        let y = node.outputs[0];
        let op = node.op_type.as_str();
        match op {
            "Conv" => {
                let (Some(x), Some(w)) = (input(0), input(1)) else {
                    freeze_all(&mut frozen);
                    continue;
                };
                let bias = input(2);
                if !is_const(graph, Some(w)) || (bias.is_some() && !is_const(graph, bias)) || !chan[y.index()] {
                    freeze_all(&mut frozen);
                    continue;
                }
                let group = node.attrs.int("group", 1).unwrap_or(1) as usize;
                let (c_in, c_out) = (graph.fact(x).shape[1], graph.fact(w).shape[0]);
                if group == 1 {
                    if chan[x.index()] {
                        cuts.push(Cut { node: ni, input: 1, axis: 1, class_value: x });
                    }
                    cuts.push(Cut { node: ni, input: 1, axis: 0, class_value: y });
                    if bias.is_some() {
                        cuts.push(Cut { node: ni, input: 2, axis: 0, class_value: y });
                    }
                } else if group == c_in && c_out == c_in && chan[x.index()] && graph.fact(w).shape[1] == 1 {
                    classes.union(x.index(), y.index());
                    cuts.push(Cut { node: ni, input: 1, axis: 0, class_value: y });
                    if bias.is_some() {
                        cuts.push(Cut { node: ni, input: 2, axis: 0, class_value: y });
                    }
                    groups.push((ni, y));
                } else if group > 1 && c_in % group == 0 && c_out % group == 0 && chan[x.index()] {
                    // Cut by whole groups only (see `keep_whole_groups`): the filters go with
                    // the output class, each filter's inputs stay those of its group.
                    cuts.push(Cut { node: ni, input: 1, axis: 0, class_value: y });
                    if bias.is_some() {
                        cuts.push(Cut { node: ni, input: 2, axis: 0, class_value: y });
                    }
                    grouped.push((ni, x, y, group));
                } else {
                    freeze_all(&mut frozen);
                }
            }
            "BatchNormalization" => {
                let x = input(0).expect("a BatchNormalization reads its input");
                if node.outputs.len() != 1 || !(1..5).all(|i| is_const(graph, input(i))) || !chan[x.index()] {
                    freeze_all(&mut frozen);
                    continue;
                }
                classes.union(x.index(), y.index());
                for i in 1..5 {
                    cuts.push(Cut { node: ni, input: i, axis: 0, class_value: y });
                }
            }
            _ if super::ELEMENTWISE.contains(&op) || op == "Dropout" => {
                let rank = graph.fact(y).shape.len();
                if !chan[y.index()] || node.outputs.len() != 1 {
                    freeze_all(&mut frozen);
                    continue;
                }
                let mut ok = true;
                for (i, v) in ins.iter().enumerate() {
                    let Some(v) = *v else { continue };
                    if chan[v.index()] {
                        if graph.fact(v).shape.len() == rank {
                            classes.union(v.index(), y.index());
                        } else {
                            ok = false;
                        }
                        continue;
                    }
                    let f = graph.fact(v);
                    if !is_const(graph, Some(v)) {
                        ok = false;
                    } else if f.numel() > 1 {
                        // A constant broadcast along the channel axis is cut with the class.
                        let r = f.shape.len();
                        if r + 1 >= rank && f.shape[r + 1 - rank] > 1 {
                            cuts.push(Cut { node: ni, input: i, axis: r + 1 - rank, class_value: y });
                        }
                    }
                }
                if !ok {
                    freeze_all(&mut frozen);
                }
            }
            _ if POOLS.contains(&op) => {
                let x = input(0).expect("a pool reads its input");
                let keeps_channels = match op {
                    "GlobalAveragePool" | "GlobalMaxPool" | "MaxPool" | "AveragePool" => node.outputs.len() == 1,
                    _ => reduce_axes(graph, node)
                        .is_some_and(|axes| !axes.is_empty() && !axes.contains(&1) && !axes.contains(&0)),
                };
                let yf = graph.fact(y);
                let y_ok = chan[y.index()] || (yf.shape.len() == 2 && yf.shape[1] == graph.fact(x).shape[1]);
                if !keeps_channels || !chan[x.index()] || !y_ok {
                    freeze_all(&mut frozen);
                    continue;
                }
                chan[y.index()] = true;
                classes.union(x.index(), y.index());
            }
            "Concat" => {
                let xs: Vec<ValueId> = ins.iter().flatten().copied().collect();
                let rank = graph.fact(y).shape.len();
                let axis = node.attrs.int("axis", 0).ok().and_then(|a| crate::ir::normalize_axis(a, rank));
                let all_chan = chan[y.index()] && xs.len() == ins.len() && xs.iter().all(|x| chan[x.index()]);
                match axis {
                    Some(1) if all_chan => concats.push((xs, y)),
                    Some(_) if all_chan => {
                        for x in &xs {
                            classes.union(x.index(), y.index());
                        }
                    }
                    _ => freeze_all(&mut frozen),
                }
            }
            "Reshape" | "Flatten" | "Squeeze" => {
                let x = input(0).expect("a view reads its input");
                let (xs, ys) = (&graph.fact(x).shape, &graph.fact(y).shape);
                let flattens = chan[x.index()] && xs.len() == 4 && xs[2] == 1 && xs[3] == 1 && ys[..] == xs[..2];
                let shape_ok = op != "Reshape" || is_const(graph, input(1));
                if !flattens || !shape_ok {
                    freeze_all(&mut frozen);
                    continue;
                }
                chan[y.index()] = true;
                classes.union(x.index(), y.index());
                if op == "Reshape" {
                    reshapes.push((ni, y));
                }
            }
            "Gemm" | "MatMul" => {
                let (Some(x), Some(w)) = (input(0), input(1)) else {
                    freeze_all(&mut frozen);
                    continue;
                };
                let trans_a = node.attrs.int("transA", 0).unwrap_or(0) != 0;
                let trans_b = node.attrs.int("transB", 0).unwrap_or(0) != 0;
                let two_d = graph.fact(x).shape.len() == 2 && graph.fact(w).shape.len() == 2;
                if !chan[x.index()] || trans_a || !two_d || !is_const(graph, Some(w)) || chan[y.index()] {
                    freeze_all(&mut frozen);
                    continue;
                }
                cuts.push(Cut { node: ni, input: 1, axis: if trans_b { 1 } else { 0 }, class_value: x });
            }
            _ => freeze_all(&mut frozen),
        }
    }
    Analysis { chan, classes, frozen, cuts, groups, grouped, reshapes, concats }
}

/// Cuts pruned channels out of `graph` (see the module docs). Run it after propagation.
pub fn shrink_channels(graph: &mut Graph) -> Result<ShrinkReport, Error> {
    let Analysis { chan, mut classes, frozen, cuts, groups, grouped, reshapes, concats } = analyze(graph);
    let before_width: HashMap<usize, usize> =
        grouped.iter().map(|&(ni, _, y, _)| (ni, graph.fact(y).shape[1])).collect();
    // A weight to cut that other inputs read too (exporters share equal constants, such as the
    // BatchNorm parameters of a freshly initialized model) is cut in a copy of its own.
    let mut readers: HashMap<ValueId, usize> = HashMap::new();
    for node in &graph.nodes {
        for v in node.inputs.iter().flatten() {
            *readers.entry(*v).or_default() += 1;
        }
    }
    // Classes: members, frozen, channel count, live channels.
    let mut members: BTreeMap<usize, Vec<ValueId>> = BTreeMap::new();
    for (i, &c) in chan.iter().enumerate() {
        if c {
            let r = classes.find(i);
            members.entry(r).or_default().push(ValueId(i as u32));
        }
    }
    let mut lives: HashMap<usize, Vec<bool>> = HashMap::new();
    for (&root, vals) in &members {
        let c = graph.fact(vals[0]).shape[1];
        let same = vals.iter().all(|v| graph.fact(*v).shape[1] == c);
        let mut live = vec![false; c];
        if !same || vals.iter().any(|v| frozen[v.index()]) {
            live = vec![true; c];
        }
        for v in vals {
            let value = graph.value(*v);
            let Some(tesa) = &value.tesa else {
                live = vec![true; c];
                break;
            };
            let shape = &value.fact.shape;
            let inner: usize = shape[2..].iter().product();
            for n in 0..shape[0] {
                for (ch, l) in live.iter_mut().enumerate() {
                    if !*l {
                        let base = (n * c + ch) * inner;
                        *l = (base..base + inner).any(|e| !tesa.is_pruned(e));
                    }
                }
            }
        }
        lives.insert(root, live);
    }
    // Concat ties and whole groups, until neither keeps another channel.
    loop {
        tie_concats(&concats, &mut classes, &mut lives);
        if !keep_whole_groups(&grouped, &mut classes, &mut lives) {
            break;
        }
    }
    let mut keep: HashMap<usize, Vec<usize>> = HashMap::new();
    let mut report = ShrinkReport { classes: members.len(), ..Default::default() };
    for &root in members.keys() {
        let live = &lives[&root];
        let c = live.len();
        let kept: Vec<usize> = (0..c).filter(|&ch| live[ch]).collect();
        report.channels_before += c;
        report.channels_after += kept.len();
        if kept.len() < c {
            report.shrunk += 1;
        }
        keep.insert(root, kept);
    }
    // Weights first (their cuts read the class's channel list), then the values.
    let mut copied: Vec<ValueId> = vec![];
    for cut in &cuts {
        let root = classes.find(cut.class_value.index());
        let kept = &keep[&root];
        let w = graph.nodes[cut.node].inputs[cut.input].expect("cut input");
        let t = graph.initializers[&w].to_dense();
        if kept.len() == t.shape()[cut.axis] {
            continue;
        }
        let (shape, positions) = take_positions(t.shape(), cut.axis, kept);
        report.weight_elements_before += t.len();
        report.weight_elements_after += positions.len();
        let w = if readers.get(&w).copied().unwrap_or(0) > 1 {
            copied.push(w);
            let name = super::fresh_name(graph, &format!("{}.cut", graph.value(w).name));
            let copy = graph.add_value(name, graph.fact(w).clone(), ValueKind::Initializer);
            graph.values[copy.index()].tesa = graph.value(w).tesa.clone();
            graph.nodes[cut.node].inputs[cut.input] = Some(copy);
            copy
        } else {
            w
        };
        let value = &mut graph.values[w.index()];
        value.tesa = value.tesa.as_ref().map(|tesa| tesa.gather(&shape, &positions));
        value.fact = ValueFact::new(t.dtype(), shape.clone());
        graph.initializers.insert(w, Initializer::Dense(gather_tensor(&t, shape, &positions)));
    }
    // A shared weight every reader of which got its own copy is gone.
    for w in copied {
        if !graph.nodes.iter().any(|n| n.inputs.contains(&Some(w))) {
            graph.initializers.remove(&w);
        }
    }
    for (&root, vals) in &members {
        let kept = &keep[&root];
        if kept.len() == graph.fact(vals[0]).shape[1] {
            continue;
        }
        for v in vals {
            let value = &mut graph.values[v.index()];
            value.tesa = value.tesa.as_ref().map(|tesa| tesa.take(1, kept));
            value.fact.shape[1] = kept.len();
        }
    }
    for (ni, y) in groups {
        let c = graph.fact(y).shape[1] as i64;
        graph.nodes[ni].attrs.insert("group", Attr::Int(c));
    }
    for &(ni, _, y, group) in &grouped {
        // The channels a group had before, over the whole groups kept.
        let c_before = before_width[&ni];
        let kept = graph.fact(y).shape[1] / (c_before / group);
        graph.nodes[ni].attrs.insert("group", Attr::Int(kept as i64));
    }
    for (ni, y) in reshapes {
        let shape: Vec<i64> = graph.fact(y).shape.iter().map(|&d| d as i64).collect();
        let old = graph.nodes[ni].inputs[1].expect("reshape shape");
        let name = super::fresh_name(graph, &format!("{}.shrunk", graph.value(old).name));
        let t = Tensor::from_vec(vec![shape.len()], shape);
        let id = graph.add_value(name, ValueFact::new(DType::I64, vec![t.len()]), ValueKind::Initializer);
        graph.values[id.index()].tesa = graph.value(old).tesa.clone();
        graph.initializers.insert(id, Initializer::Dense(t));
        graph.nodes[ni].inputs[1] = Some(id);
    }
    renumber(graph)?;
    Ok(report)
}

/// A grouped convolution is cut by whole groups: group `g` (its input channels
/// `g·cin_g..(g+1)·cin_g` and its output channels `g·cout_g..`) stays when any of those
/// channels is live, and then all of them are; the groups kept keep their order, so each kept
/// filter still reads its own group's inputs. Returns true when a channel came back to life.
fn keep_whole_groups(
    grouped: &[(usize, ValueId, ValueId, usize)],
    classes: &mut Classes,
    lives: &mut HashMap<usize, Vec<bool>>,
) -> bool {
    let mut changed = false;
    for &(_, x, y, group) in grouped {
        let (rx, ry) = (classes.find(x.index()), classes.find(y.index()));
        let (wi, wo) = (lives[&rx].len() / group, lives[&ry].len() / group);
        for g in 0..group {
            let live =
                lives[&rx][g * wi..(g + 1) * wi].contains(&true) || lives[&ry][g * wo..(g + 1) * wo].contains(&true);
            if !live {
                continue;
            }
            for (r, w) in [(rx, wi), (ry, wo)] {
                for l in &mut lives.get_mut(&r).expect("a class")[g * w..(g + 1) * w] {
                    changed |= !*l;
                    *l = true;
                }
            }
        }
    }
    changed
}

/// Ties the classes a Concat along the channels joins: channel `c` of input `i` and channel
/// `offset_i + c` of the output are live together (either one live keeps both), and a class
/// with no live channel keeps channel 0 (tied too). A fixpoint over the Concats: liveness only
/// grows, so it ends. A Concat whose output class is one of its inputs' (a cycle through
/// channel-wise ops) or whose widths do not add up keeps every channel of them all.
fn tie_concats(concats: &[(Vec<ValueId>, ValueId)], classes: &mut Classes, lives: &mut HashMap<usize, Vec<bool>>) {
    let tied: Vec<(Vec<usize>, usize)> = concats
        .iter()
        .map(|(xs, y)| (xs.iter().map(|x| classes.find(x.index())).collect(), classes.find(y.index())))
        .collect();
    for (xs, y) in &tied {
        let width: usize = xs.iter().map(|x| lives[x].len()).sum();
        if xs.contains(y) || width != lives[y].len() {
            for r in xs.iter().chain([y]) {
                lives.get_mut(r).expect("a class").iter_mut().for_each(|l| *l = true);
            }
        }
    }
    loop {
        let mut changed = true;
        while changed {
            changed = false;
            for (xs, y) in &tied {
                let mut offset = 0;
                for x in xs {
                    let n = lives[x].len();
                    for c in 0..n {
                        let (a, b) = (lives[x][c], lives[y][offset + c]);
                        if a != b {
                            lives.get_mut(x).expect("a class")[c] = true;
                            lives.get_mut(y).expect("a class")[offset + c] = true;
                            changed = true;
                        }
                    }
                    offset += n;
                }
            }
        }
        let empty: Vec<usize> =
            lives.iter().filter(|(_, l)| !l.is_empty() && !l.contains(&true)).map(|(r, _)| *r).collect();
        if empty.is_empty() {
            return;
        }
        for r in empty {
            lives.get_mut(&r).expect("a class")[0] = true;
        }
    }
}

/// The axes a Reduce* node reduces (attribute or, from opset 18, the constant second input);
/// `None` when they are not known at compile time. No axes means all of them.
fn reduce_axes(graph: &Graph, node: &crate::ir::Node) -> Option<Vec<usize>> {
    let rank = graph.fact(node.inputs[0]?).shape.len();
    let keepdims = node.attrs.int("keepdims", 1).unwrap_or(1) != 0;
    let raw: Vec<i64> = match node.inputs.get(1).copied().flatten() {
        Some(a) => graph.initializers.get(&a)?.to_dense().to_i64_vec(),
        None => node.attrs.ints_opt("axes").ok().flatten().map(|a| a.to_vec()).unwrap_or_default(),
    };
    let mut axes: Vec<usize> =
        raw.iter().map(|&a| crate::ir::normalize_axis(a, rank)).collect::<Option<Vec<usize>>>()?;
    if axes.is_empty() {
        axes = (0..rank).collect();
    }
    // Without keepdims only a reduction of the trailing spatial axes keeps `[N, C]`.
    if !keepdims && axes != [2, 3] {
        return None;
    }
    Some(axes)
}

/// The channels that [`shrink_channels`] can only cut together (structured pruning's coupled
/// groups): channel `c` of every value of a channel class is one unit, and a Concat along the
/// channels joins channel `c` of its input `i` with channel `offset_i + c` of its output, and a
/// grouped convolution the input and output channels of each of its groups. A group is the
/// set of units so joined. Structural only, like the classes.
pub struct CoupledChannels {
    /// Per value: its class's first unit (which names the class) and width (values that carry
    /// no channels: `None`).
    unit0: Vec<Option<(usize, usize)>>,
    /// Per unit: its group (a representative unit).
    group: Vec<usize>,
}

impl CoupledChannels {
    /// The group of channel `channel` of `value`; `None` when it carries no channels.
    pub fn group(&self, value: ValueId, channel: usize) -> Option<usize> {
        let (first, width) = self.unit0.get(value.index()).copied().flatten()?;
        (channel < width).then(|| self.group[first + channel])
    }

    /// The channel class of `value` (an id shared by the values of one class) and its width.
    pub fn class(&self, value: ValueId) -> Option<(usize, usize)> {
        self.unit0.get(value.index()).copied().flatten()
    }
}

/// The coupled channel groups of `graph` (see [`CoupledChannels`]).
pub fn coupled_channels(graph: &Graph) -> CoupledChannels {
    let Analysis { chan, mut classes, concats, grouped, .. } = analyze(graph);
    let mut unit0 = vec![None; graph.values.len()];
    let mut first: BTreeMap<usize, (usize, usize)> = BTreeMap::new();
    let mut n_units = 0;
    for (i, c) in chan.iter().enumerate() {
        if !*c {
            continue;
        }
        let root = classes.find(i);
        let width = graph.values[root].fact.shape.get(1).copied().unwrap_or(0);
        let at = *first.entry(root).or_insert_with(|| {
            n_units += width;
            (n_units - width, width)
        });
        // A member wider than its class's root (the pass keeps such a class whole) has no units.
        if graph.values[i].fact.shape.get(1) == Some(&width) {
            unit0[i] = Some(at);
        }
    }
    let mut units = Classes { parent: (0..n_units).collect() };
    for (xs, y) in &concats {
        let Some((y0, y_width)) = unit0[y.index()] else { continue };
        let parts: Option<Vec<(usize, usize)>> = xs.iter().map(|x| unit0[x.index()]).collect();
        let Some(parts) = parts else { continue };
        let width: usize = parts.iter().map(|p| p.1).sum();
        if width != y_width || parts.iter().any(|p| p.0 == y0) {
            continue;
        }
        let mut offset = 0;
        for (x0, n) in &parts {
            for c in 0..*n {
                units.union(x0 + c, y0 + offset + c);
            }
            offset += n;
        }
    }
    // A grouped convolution's group is one unit of cutting, its inputs and outputs together.
    for &(_, x, y, groups) in &grouped {
        let (Some((x0, wx)), Some((y0, wy))) = (unit0[x.index()], unit0[y.index()]) else { continue };
        let (wi, wo) = (wx / groups, wy / groups);
        for g in 0..groups {
            let anchor = x0 + g * wi;
            for u in (x0 + g * wi..x0 + (g + 1) * wi).chain(y0 + g * wo..y0 + (g + 1) * wo) {
                units.union(anchor, u);
            }
        }
    }
    let group = (0..n_units).map(|u| units.find(u)).collect();
    CoupledChannels { unit0, group }
}
