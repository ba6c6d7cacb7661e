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
pub const SELECTORS: &[&str] = &["matmul_weights", "conv_weights"];

/// The initializers a selector names: `matmul_weights` every 2-D initializer read as the
/// weight of a MatMul (either operand, the other one not constant) or of a Gemm (input 1);
/// `conv_weights` every initializer read as a Conv's weight (input 1).
fn select_weights(graph: &Graph, selector: &str) -> Result<Vec<ValueId>, String> {
    if !SELECTORS.contains(&selector) {
        let known: Vec<String> = SELECTORS.iter().map(|s| format!("@{s}")).collect();
        return Err(format!("unknown selector \"@{selector}\" (known: {})", known.join(", ")));
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
    for (index, choice) in chosen.into_iter().enumerate() {
        let Some((key, spec, _)) = choice else { continue };
        let v = &graph.values[index];
        let mut tesa = v.tesa.clone().unwrap_or_else(|| Tesa::for_dtype(&v.fact.shape, v.fact.dtype));
        let values =
            init_ids.iter().find(|id| id.index() == index).map(|id| graph.initializers[id].to_dense().to_f64_vec());
        let reduction = reduction_axis(graph, ValueId(index as u32));
        apply_spec(&mut tesa, spec, values.as_deref(), reduction).map_err(|msg| {
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
/// the bias of each output channel whose weights are all pruned.
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
    for b in biases {
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

/// Joins one spec into `tesa`; `values` are the initializer's (None for other tensors);
/// `reduction` the axis a MatMul/Gemm reading it reduces over (the default axis of `nm`).
fn apply_spec(
    tesa: &mut Tesa,
    spec: &TensorSpec,
    values: Option<&[f64]>,
    reduction: Option<usize>,
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
