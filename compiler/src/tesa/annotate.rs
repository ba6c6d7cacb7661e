//! Annotating a graph with the TeSA of an attrs file ([`super::attrs`]): every
//! initializer starts pruned at its zeros; each name or glob of the file picks its
//! tensors, and their specs are joined in (more pruning, fewer bits only). Exact names win
//! over globs; a name or glob that matches nothing is an error with the closest names
//! suggested.

use super::attrs::{ElementBits, PruneSpec, TensorSpec, TesaAttrs};
use super::masks::{block_grid, block_index, channel_magnitude_mask, line_mask};
use super::masks::{block_magnitude_mask, nm_mask};
use super::{ElemAttr, Tesa};
use crate::ir::{Graph, ValueId};
use crate::Error;
use std::collections::{BTreeMap, HashMap, HashSet};

fn bad(msg: impl Into<String>) -> Error {
    Error::TesaAttrs(msg.into())
}

/// Whether `name` matches `pattern`, where `*` matches any run of characters.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    // Greedy matching with backtracking to the last star.
    let (mut pi, mut ni, mut star, mut mark) = (0, 0, None, 0);
    while ni < n.len() {
        if pi < p.len() && p[pi] != '*' && p[pi] == n[ni] {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ni;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ni = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// Levenshtein distance.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for j in 0..b.len() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != b[j])).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// Up to three of `names` closest to `name` (for a glob, ignoring its stars).
fn suggestions<'a>(names: impl Iterator<Item = &'a str>, name: &str) -> Vec<String> {
    let literal = name.replace('*', "");
    let mut scored: Vec<(usize, &str)> = names.map(|n| (edit_distance(&literal, n), n)).collect();
    scored.sort();
    // A glob stands for longer names, so its distance may be as long as the names.
    let limit = if name.contains('*') { usize::MAX } else { (name.len() / 2).max(3) };
    scored.into_iter().filter(|(d, _)| *d <= limit).take(3).map(|(_, n)| n.to_string()).collect()
}

fn not_found(what: &str, name: &str, close: Vec<String>) -> Error {
    let close: Vec<String> = close.iter().map(|c| format!("{c:?}")).collect();
    if close.is_empty() {
        bad(format!("{what} {name:?} in the model"))
    } else {
        bad(format!("{what} {name:?} in the model; did you mean {}?", close.join(", ")))
    }
}

/// The selectors a key may start with `@` for (see [`super::attrs`]).
pub const SELECTORS: &[&str] = &["matmul_weights", "conv_weights", "mlp_out_weights"];

/// The initializers a selector names: `matmul_weights` every 2-D initializer read as the
/// weight of a MatMul (either operand, the other one not constant) or of a Gemm (input 1);
/// `conv_weights` every initializer read as a Conv's weight (input 1); `mlp_out_weights` the
/// second weight of every MLP (`crate::rewrite::hidden`: a product whose left operand only
/// elementwise ops compute from another product with a constant weight), whose rows are the
/// MLP's hidden units.
fn select_weights(graph: &Graph, selector: &str) -> Result<Vec<ValueId>, String> {
    if !SELECTORS.contains(&selector) {
        let known: Vec<String> = SELECTORS.iter().map(|s| format!("@{s}")).collect();
        return Err(format!("unknown selector \"@{selector}\" (known: {})", known.join(", ")));
    }
    if selector == "mlp_out_weights" {
        return Ok(crate::rewrite::hidden::mlp_out_weights(graph));
    }
    let is_init = |v: Option<ValueId>| v.filter(|v| graph.initializers.contains_key(v));
    let mut out = vec![];
    for node in &graph.nodes {
        let input = |i: usize| node.inputs.get(i).copied().flatten();
        let picked = match (selector, node.op_type.as_str()) {
            ("matmul_weights", "MatMul") => match (is_init(input(0)), is_init(input(1))) {
                (None, Some(w)) | (Some(w), None) => Some(w),
                _ => None,
            },
            ("matmul_weights", "Gemm") => is_init(input(1)),
            ("conv_weights", "Conv") => is_init(input(1)),
            ("matmul_weights" | "conv_weights", _) => None,
            _ => {
                return Err(format!(
                    "unknown selector \"@{selector}\" (known: {})",
                    SELECTORS.iter().map(|s| format!("@{s}")).collect::<Vec<_>>().join(", ")
                ))
            }
        };
        if let Some(w) = picked.filter(|w| selector != "matmul_weights" || graph.fact(*w).shape.len() == 2) {
            if !out.contains(&w) {
                out.push(w);
            }
        }
    }
    Ok(out)
}

/// Sets the TeSA of every initializer (zeros, plus the file's pruning and widths).
pub fn apply_attrs(graph: &mut Graph, attrs: Option<&TesaAttrs>) -> Result<(), Error> {
    for (id, init) in &graph.initializers {
        graph.values[id.index()].tesa = Some(Tesa::from_zeros(&init.to_dense()));
    }
    let Some(attrs) = attrs else { return Ok(()) };
    let init_ids: Vec<ValueId> = graph.initializers.keys().copied().collect();
    // The spec of each value: (key, spec, specificity); exact names rank above globs.
    let mut chosen: Vec<Option<(&str, &TensorSpec, usize)>> = vec![None; graph.values.len()];
    for (key, spec) in &attrs.tensors {
        if let Some(selector) = key.strip_prefix('@') {
            // Below every glob and exact name: they refine what a selector picks.
            let picked = select_weights(graph, selector).map_err(bad)?;
            if picked.is_empty() {
                return Err(bad(format!("{key:?}: the model has no such weight")));
            }
            for id in picked {
                let slot = &mut chosen[id.index()];
                if slot.is_none() {
                    *slot = Some((key, spec, 0));
                }
            }
        } else if key.contains('*') {
            let rank = key.chars().filter(|c| *c != '*').count();
            let mut matched = false;
            for id in &init_ids {
                if glob_match(key, &graph.values[id.index()].name) {
                    matched = true;
                    let slot = &mut chosen[id.index()];
                    if slot.is_none_or(|(_, _, r)| r < rank) {
                        *slot = Some((key, spec, rank));
                    }
                }
            }
            if !matched {
                let names = init_ids.iter().map(|id| graph.values[id.index()].name.as_str());
                return Err(not_found("no initializer matches the glob", key, suggestions(names, key)));
            }
        } else {
            let id = graph.find_value(key).ok_or_else(|| {
                let names = graph.values.iter().map(|v| v.name.as_str());
                not_found("no tensor named", key, suggestions(names, key))
            })?;
            chosen[id.index()] = Some((key, spec, usize::MAX));
        }
    }
    let coupled = coupled_channel_masks(graph, &chosen);
    for (index, choice) in chosen.into_iter().enumerate() {
        let Some((key, spec, _)) = choice else { continue };
        let v = &graph.values[index];
        let mut tesa = v.tesa.clone().unwrap_or_else(|| Tesa::for_dtype(&v.fact.shape, v.fact.dtype));
        let values =
            init_ids.iter().find(|id| id.index() == index).map(|id| graph.initializers[id].to_dense().to_f64_vec());
        let reduction = reduction_axis(graph, ValueId(index as u32));
        let dead_channels = coupled.get(&ValueId(index as u32)).map(Vec::as_slice);
        apply_spec(&mut tesa, spec, values.as_deref(), reduction, dead_channels).map_err(|msg| {
            let from = if key == v.name { String::new() } else { format!(" (from {key:?})") };
            bad(format!("{:?}{from}: {msg}", v.name))
        })?;
        graph.values[index].tesa = Some(tesa);
        if spec.prune.iter().any(|p| matches!(p, PruneSpec::ChannelMagnitude { bias: true, .. })) {
            prune_bias_of_dead_channels(graph, ValueId(index as u32));
        }
    }
    Ok(())
}

/// For every Conv or Gemm (weight `[out, ...]`, bias input 2) reading `weight`: prunes
/// the bias of each output channel whose weights are all pruned, and the shift of a
/// BatchNormalization right after such a Conv.
fn prune_bias_of_dead_channels(graph: &mut Graph, weight: ValueId) {
    let Some(w) = graph.value(weight).tesa.clone() else { return };
    let Some(&n_out) = w.shape().first() else { return };
    let per = w.numel() / n_out.max(1);
    let dead: Vec<bool> = (0..n_out).map(|o| (o * per..(o + 1) * per).all(|i| w.is_pruned(i))).collect();
    let biases: Vec<ValueId> = graph
        .nodes
        .iter()
        .filter(|n| {
            let weight_first = n.op_type == "Conv" || n.attrs.int("transB", 0).unwrap_or(0) != 0;
            matches!(n.op_type.as_str(), "Conv" | "Gemm") && weight_first && n.inputs.get(1) == Some(&Some(weight))
        })
        .filter_map(|n| n.inputs.get(2).copied().flatten())
        .collect();
    // A Conv whose output goes straight into a BatchNormalization: that channel's shift too
    // (its `B` and `input_mean`), so that the channel is zero after the normalization as well.
    // Parameters other inputs share stay whole (pruning them would change the other readers).
    let readers = |v: ValueId| graph.nodes.iter().flat_map(|n| &n.inputs).filter(|i| **i == Some(v)).count();
    let mut shifts = vec![];
    for conv in graph.nodes.iter().filter(|n| n.op_type == "Conv" && n.inputs.get(1) == Some(&Some(weight))) {
        let y = conv.outputs[0];
        let mut after = graph.nodes.iter().filter(|n| n.inputs.contains(&Some(y)));
        let (Some(bn), None) = (after.next(), after.next()) else { continue };
        if bn.op_type != "BatchNormalization" || bn.inputs.first() != Some(&Some(y)) {
            continue;
        }
        shifts.extend([2, 3].iter().filter_map(|&i| bn.inputs.get(i).copied().flatten()).filter(|&p| readers(p) == 1));
    }
    for b in biases.into_iter().chain(shifts) {
        let v = &mut graph.values[b.index()];
        if v.fact.numel() != n_out {
            continue;
        }
        let tesa = v.tesa.get_or_insert_with(|| Tesa::for_dtype(&v.fact.shape, v.fact.dtype));
        for (o, d) in dead.iter().enumerate() {
            if *d {
                tesa.prune(o);
            }
        }
    }
}

/// The axis a MatMul or Gemm reading `weight` as a 2-D operand reduces over: `MatMul(X, W)`
/// 0 (`W` is `K × N`), `MatMul(W, X)` 1, Gemm as its `transA`/`transB` say. `None` when no
/// such node reads it (or readers disagree).
pub fn reduction_axis(graph: &Graph, weight: ValueId) -> Option<usize> {
    if graph.value(weight).fact.shape.len() != 2 {
        return None;
    }
    let mut axes = graph.nodes.iter().filter_map(|node| {
        let at = node.inputs.iter().position(|i| *i == Some(weight))?;
        let flag = |name: &str| node.attrs.int(name, 0).unwrap_or(0) != 0;
        match (node.op_type.as_str(), at) {
            ("MatMul", 1) => Some(0),
            ("MatMul", 0) => Some(1),
            ("Gemm", 1) => Some(usize::from(flag("transB"))),
            ("Gemm", 0) => Some(usize::from(!flag("transA"))),
            _ => None,
        }
    });
    let first = axes.next()?;
    axes.all(|a| a == first).then_some(first)
}

/// Channels a coupled pruning keeps in a class of `n`: `(1 - sparsity) · n`, rounded up to a
/// multiple of [`CHANNEL_ALIGN`] (at most `n`) so that the cut layers keep tensor-core
/// friendly widths; fewer than [`CHANNEL_ALIGN`] stay as they are.
pub(crate) fn kept_channels(n: usize, sparsity: f64) -> usize {
    let k = ((1.0 - sparsity) * n as f64).round() as usize;
    if k < CHANNEL_ALIGN {
        return k;
    }
    k.div_ceil(CHANNEL_ALIGN).saturating_mul(CHANNEL_ALIGN).min(n)
}

/// The channel multiple a coupled pruning keeps (8 half-precision channels: one 16-byte row
/// chunk, one tensor-core k step).
pub const CHANNEL_ALIGN: usize = 8;

/// The output channels a coupled `channel_magnitude` prunes, per Conv weight it picks.
///
/// Each picked weight's filters are scored by their L1 norm over the weight's mean filter
/// norm (so that layers of different scales weigh alike); a coupled group
/// ([`crate::rewrite::coupled_channels`]: the same channel of every conv writing one channel
/// class, the parts of a Concat) scores the sum over the picked convs writing it. In each
/// class written by picked convs, the groups with the lowest scores are pruned in every
/// picked weight writing them, keeping [`kept_channels`] of the class (at the largest
/// `sparsity` among its weights). A weight that is not the single Conv weight of its reader,
/// or whose output carries no channel classes, is left out (it is ranked alone).
fn coupled_channel_masks(graph: &Graph, chosen: &[Option<(&str, &TensorSpec, usize)>]) -> HashMap<ValueId, Vec<bool>> {
    let picks: Vec<(ValueId, f64)> = chosen
        .iter()
        .enumerate()
        .filter_map(|(i, c)| {
            let (_, spec, _) = c.as_ref()?;
            spec.prune.iter().find_map(|p| match p {
                PruneSpec::ChannelMagnitude { sparsity, coupled: true, .. } => Some((ValueId(i as u32), *sparsity)),
                _ => None,
            })
        })
        .filter(|(w, _)| graph.initializers.contains_key(w))
        .collect();
    if picks.is_empty() {
        return HashMap::new();
    }
    let coupled = crate::rewrite::coupled_channels(graph);
    // Per weight: the group of each output channel. Per group: its score and class.
    let mut writes: Vec<(ValueId, Vec<usize>)> = vec![];
    let mut score: BTreeMap<usize, f64> = BTreeMap::new();
    let mut class_of: BTreeMap<usize, usize> = BTreeMap::new();
    let mut budget: BTreeMap<usize, f64> = BTreeMap::new();
    // Per class: its width and its channels in each group.
    let mut sizes: BTreeMap<usize, (usize, BTreeMap<usize, usize>)> = BTreeMap::new();
    for (w, sparsity) in picks {
        let mut readers = graph.nodes.iter().filter(|n| n.inputs.contains(&Some(w)));
        let (Some(node), None) = (readers.next(), readers.next()) else { continue };
        if node.op_type != "Conv" || node.inputs.get(1) != Some(&Some(w)) || node.inputs.first() == Some(&Some(w)) {
            continue;
        }
        let y = node.outputs[0];
        let Some((class, width)) = coupled.class(y) else { continue };
        let values = graph.initializers[&w].to_dense().to_f64_vec();
        let c_out = graph.fact(w).shape.first().copied().unwrap_or(0);
        let Some(groups) = (0..c_out).map(|o| coupled.group(y, o)).collect::<Option<Vec<usize>>>() else { continue };
        let per = values.len() / c_out.max(1);
        let norms: Vec<f64> = values.chunks(per.max(1)).map(|f| f.iter().map(|v| v.abs()).sum()).collect();
        let mean = norms.iter().sum::<f64>() / c_out.max(1) as f64;
        for (o, &g) in groups.iter().enumerate() {
            *score.entry(g).or_default() += if mean > 0.0 { norms[o] / mean } else { 0.0 };
            class_of.entry(g).or_insert(class);
        }
        let b = budget.entry(class).or_default();
        *b = b.max(sparsity);
        sizes.entry(class).or_insert_with(|| {
            let mut per_group: BTreeMap<usize, usize> = BTreeMap::new();
            for c in 0..width {
                *per_group.entry(coupled.group(y, c).expect("a channel of the class")).or_default() += 1;
            }
            (width, per_group)
        });
        writes.push((w, groups));
    }
    let mut by_class: BTreeMap<usize, Vec<(f64, usize)>> = BTreeMap::new();
    for (&g, &s) in &score {
        by_class.entry(class_of[&g]).or_default().push((s, g));
    }
    // The lowest-scoring groups go while the class keeps its share (a grouped convolution's
    // group takes all its channels of the class with it).
    let mut dead: HashSet<usize> = HashSet::new();
    for (class, mut groups) in by_class {
        groups.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let (width, per_group) = &sizes[&class];
        let target = kept_channels(*width, budget[&class]);
        let mut kept = *width;
        for (_, g) in groups {
            let n = per_group.get(&g).copied().unwrap_or(0);
            if kept >= target + n {
                kept -= n;
                dead.insert(g);
            }
        }
    }
    writes
        .into_iter()
        .map(|(w, groups)| {
            let per = graph.fact(w).numel() / groups.len().max(1);
            let mask = groups.iter().flat_map(|g| std::iter::repeat_n(dead.contains(g), per)).collect();
            (w, mask)
        })
        .collect()
}

/// Joins one spec into `tesa`; `values` are the initializer's (None for other tensors);
/// `reduction` the axis a MatMul/Gemm reading it reduces over (the default axis of `nm`);
/// `coupled` the element mask a coupled `channel_magnitude` decided for it, if any.
fn apply_spec(
    tesa: &mut Tesa,
    spec: &TensorSpec,
    values: Option<&[f64]>,
    reduction: Option<usize>,
    coupled: Option<&[bool]>,
) -> Result<(), String> {
    let shape = tesa.shape().to_vec();
    if spec.bits.is_some() || spec.format.is_some() {
        let u = tesa.uniform();
        tesa.set_uniform(ElemAttr::new(spec.bits.unwrap_or(u.bits()), spec.format.unwrap_or(u.format())));
    }
    for prune in &spec.prune {
        let mask = match (prune, values) {
            (p, None) if p.needs_values() => {
                return Err("magnitude pruning needs values, but it is not an initializer".into())
            }
            (PruneSpec::BlockMagnitude { block, sparsity }, Some(v)) => {
                block_magnitude_mask(v, &shape, block, *sparsity)
            }
            (PruneSpec::NM { n, m, axis }, Some(v)) => {
                let axis = axis.or(reduction).unwrap_or(shape.len().saturating_sub(1));
                if axis >= shape.len().max(1) {
                    return Err(format!("nm axis {axis} is out of range for shape {shape:?}"));
                }
                nm_mask(v, &shape, *n, *m, axis)
            }
            (PruneSpec::ChannelMagnitude { coupled: true, .. }, Some(_)) if coupled.is_some() => {
                coupled.expect("checked").to_vec()
            }
            (PruneSpec::ChannelMagnitude { sparsity, .. }, Some(v)) => channel_magnitude_mask(v, &shape, *sparsity),
            (PruneSpec::Mask(m), _) => {
                if m.shape != shape {
                    return Err(format!("mask has shape {:?} but the tensor has shape {shape:?}", m.shape));
                }
                m.keep.iter().map(|k| !k).collect()
            }
            (PruneSpec::BlockMask { block, grid }, _) => {
                let want = block_grid(&shape, *block).to_vec();
                if grid.shape != want {
                    return Err(format!(
                        "block_mask has shape {:?} but blocks {block:?} of shape {shape:?} form a grid {want:?}",
                        grid.shape
                    ));
                }
                block_index(&shape, *block).map(|b| !grid.keep[b]).collect()
            }
            (PruneSpec::Lines { line, indices }, _) => line_mask(&shape, *line, indices).map_err(|i| {
                format!(
                    "{} index {i} is out of range: shape {shape:?} has {} {}",
                    line.key(),
                    line.count(&shape),
                    line.key()
                )
            })?,
            _ => unreachable!("value-free specs matched above"),
        };
        tesa.join(&Tesa::from_mask(&shape, &mask));
    }
    if let Some(bb) = &spec.block_bits {
        let want = block_grid(&shape, bb.block).to_vec();
        if bb.grid != want {
            return Err(format!(
                "block_bits has shape {:?} but blocks {:?} of shape {shape:?} form a grid {want:?}",
                bb.grid, bb.block
            ));
        }
        for (i, b) in block_index(&shape, bb.block).enumerate() {
            lower(tesa, i, bb.bits[b], None);
        }
    }
    for ElementBits { index, bits, format } in &spec.element_bits {
        if index.len() != shape.len() || index.iter().zip(&shape).any(|(i, d)| i >= d) {
            return Err(format!("element_bits index {index:?} is out of range for shape {shape:?}"));
        }
        let flat = index.iter().zip(&shape).fold(0, |acc, (i, d)| acc * d + i);
        lower(tesa, flat, *bits, *format);
    }
    Ok(())
}

/// Lowers element `i` to `bits` wide (0 prunes it), never raising its width; `format`
/// replaces its format when given.
fn lower(tesa: &mut Tesa, i: usize, bits: u8, format: Option<super::Format>) {
    let cur = tesa.attr(i);
    if cur.is_pruned() {
        return;
    }
    if bits == 0 {
        tesa.prune(i);
    } else {
        tesa.set_attr(i, ElemAttr::new(bits.min(cur.bits()), format.unwrap_or(cur.format())));
    }
}

/// Writes zeros into every initializer where its TeSA is pruned, so that the model
/// computes what the TeSA claims (the reference for the invariant after user pruning).
pub fn zero_pruned_initializers(graph: &mut Graph) {
    let ids: Vec<_> = graph.initializers.keys().copied().collect();
    for id in ids {
        if let Some(tesa) = graph.values[id.index()].tesa.clone() {
            let t = tesa.apply_to(&graph.initializers[&id].to_dense());
            graph.initializers.insert(id, crate::ir::Initializer::Dense(t));
        }
    }
}
