//! The TeSA propagation pass (SparTA Algorithm 1): a worklist fixpoint over the nodes.
//!
//! `PropOneNode` = run the node's algebra rule (`rules/`, Table 2) forward and
//! backward, or tensor scrambling (`scramble.rs`) forward when the op has no rule. New
//! facts are joined into the values' TeSAs (monotone: only more pruned elements, fewer
//! bits); any change re-queues the producer and the consumers of the value. Scrambling
//! runs backward too, on nodes small enough for it. A backward
//! proposal for a value is applied only where every consumer agrees, and never to a
//! graph output. Nodes whose tensors are all dense are skipped (except the few ops that can
//! prune from nothing: fills, slices, gathers, strided windows), and the outputs of ops that
//! only move or select elements get no more bits than their data inputs. The loop stops when
//! the worklist is empty or at the visit cap, and the report says which ([`StopReason`]).
//! Masks travel as bits ([`BitMask`]); what rules keep between visits (source traces) lives in
//! one [`RuleMemo`] per run, so a visit costs word operations, not per-element work.
//!
//! The pass is sound when forcing every pruned element (weights and activations) to zero
//! leaves the outputs unchanged: [`execute_zeroing_pruned`] runs a graph that way and
//! [`invariant_gap`] measures how far it moves the outputs (the tests, and
//! `spartac propagate --check-invariant SEED`).
//!
//! `cache.rs` keeps the result between runs (every value's TeSA, keyed by the graph, the attrs
//! and the options): `compile` and `tune` propagate a model again only when one of them changed.

pub mod cache;
pub mod quantize;
pub mod rules;
pub mod scramble;

use crate::ir::{Graph, ValueKind};
use crate::tesa::{BitMask, Tesa};
use crate::Error;
use rules::{never_scramble, rule_for, RuleCtx, RuleMemo};
use scramble::{scramble_backward, scramble_forward, ScrambleInput, ScrambleOptions};
use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub struct PropagateOptions {
    /// Node visits allowed, as a multiple of the node count.
    pub max_visits_per_node: usize,
    pub scramble: ScrambleOptions,
}

impl Default for PropagateOptions {
    fn default() -> PropagateOptions {
        PropagateOptions { max_visits_per_node: 50, scramble: ScrambleOptions::default() }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    Converged,
    IterationCap,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TensorReport {
    pub name: String,
    pub shape: Vec<usize>,
    pub is_weight: bool,
    pub density_before: f64,
    pub density_after: f64,
    pub bits: u8,
}

#[derive(Clone, Debug)]
pub struct PropagateReport {
    pub stop: StopReason,
    pub visits: usize,
    pub elapsed: Duration,
    /// Nodes whose output facts came from scrambling, and nodes scrambling skipped.
    pub scrambled: usize,
    pub unhandled: BTreeMap<String, usize>,
    pub tensors: Vec<TensorReport>,
}

impl PropagateReport {
    /// (before, after) density over all weight elements.
    pub fn weight_density(&self) -> (f64, f64) {
        let (mut n, mut b, mut a) = (0.0, 0.0, 0.0);
        for t in self.tensors.iter().filter(|t| t.is_weight) {
            let k = t.shape.iter().product::<usize>() as f64;
            n += k;
            b += k * t.density_before;
            a += k * t.density_after;
        }
        if n == 0.0 {
            (1.0, 1.0)
        } else {
            (b / n, a / n)
        }
    }
}

/// Ops whose rule can prune something even when no input or output element is pruned:
/// fills (Pad) and input elements that no output reads (slices, gathers, strided
/// windows). Every other node is skipped while all its tensors are dense.
fn may_prune_dense(op_type: &str) -> bool {
    matches!(op_type, "Pad" | "Slice" | "Gather" | "GatherElements" | "MaxPool" | "AveragePool")
}

/// Runs the pass; every value ends with `tesa: Some(..)`. Values without a TeSA start
/// dense at their dtype's natural width.
pub fn propagate(graph: &mut Graph, opts: &PropagateOptions) -> Result<PropagateReport, Error> {
    let started = Instant::now();
    let mut tesa: Vec<Tesa> = graph
        .values
        .iter()
        .map(|v| v.tesa.clone().unwrap_or_else(|| Tesa::for_dtype(&v.fact.shape, v.fact.dtype)))
        .collect();
    let before: Vec<f64> = tesa.iter().map(|t| t.density()).collect();
    let consts: BTreeMap<usize, crate::ir::Tensor> =
        graph.initializers.iter().map(|(id, init)| (id.index(), init.to_dense())).collect();
    // Uses of every value: (node, input slot).
    let mut uses: Vec<Vec<(usize, usize)>> = vec![vec![]; graph.values.len()];
    for (n, node) in graph.nodes.iter().enumerate() {
        for (s, i) in node.inputs.iter().enumerate() {
            if let Some(i) = i {
                uses[i.index()].push((n, s));
            }
        }
    }
    let mut is_output = vec![false; graph.values.len()];
    for o in &graph.outputs {
        is_output[o.index()] = true;
    }
    let mut back: BTreeMap<(usize, usize), BitMask> = BTreeMap::new();
    let mut queue: VecDeque<usize> = (0..graph.nodes.len()).collect();
    let mut queued = vec![true; graph.nodes.len()];
    let cap = opts.max_visits_per_node.max(1) * graph.nodes.len().max(1);
    let (mut visits, mut scrambled) = (0, 0);
    let mut unhandled: BTreeMap<String, usize> = BTreeMap::new();
    let mut stop = StopReason::Converged;
    let mut first_visit = vec![true; graph.nodes.len()];
    let memo = RuleMemo::default();
    while let Some(n) = queue.pop_front() {
        queued[n] = false;
        if visits >= cap {
            stop = StopReason::IterationCap;
            break;
        }
        visits += 1;
        let node = &graph.nodes[n];
        let (out_props, in_props) = {
            let ctx = RuleCtx {
                node,
                in_facts: node.inputs.iter().map(|i| i.map(|i| graph.fact(i))).collect(),
                ins: node.inputs.iter().map(|i| i.map(|i| &tesa[i.index()])).collect(),
                consts: node.inputs.iter().map(|i| i.and_then(|i| consts.get(&i.index()))).collect(),
                out_facts: node.outputs.iter().map(|o| graph.fact(*o)).collect(),
                outs: node.outputs.iter().map(|o| &tesa[o.index()]).collect(),
                memo: Some((&memo, n)),
            };
            let any_pruned = ctx.ins.iter().flatten().chain(ctx.outs.iter()).any(|t| t.n_pruned() > 0);
            if !any_pruned && !may_prune_dense(&node.op_type) {
                (vec![], vec![])
            } else if let Some(rule) = rule_for(&node.op_type) {
                let p = rule(&ctx).map_err(|e| Error::op(node, e))?;
                (p.outputs, p.inputs)
            } else if never_scramble(&node.op_type) || !any_pruned {
                (vec![], vec![])
            } else {
                let inputs: Vec<Option<ScrambleInput>> = node
                    .inputs
                    .iter()
                    .map(|i| {
                        i.map(|i| ScrambleInput {
                            fact: graph.fact(i),
                            tesa: &tesa[i.index()],
                            value: consts.get(&i.index()),
                        })
                    })
                    .collect();
                let backward = scramble_backward(node, &inputs, &ctx.outs, &opts.scramble).unwrap_or_default();
                match scramble_forward(node, &inputs, &opts.scramble) {
                    Some(masks) => {
                        scrambled += 1;
                        let bits = |m: Option<Vec<bool>>| m.map(|m| BitMask::from_bools(&m));
                        (masks.into_iter().map(|m| bits(Some(m))).collect(), backward.into_iter().map(bits).collect())
                    }
                    None => {
                        if first_visit[n] {
                            *unhandled.entry(node.op_type.clone()).or_insert(0) += 1;
                        }
                        (vec![], vec![])
                    }
                }
            }
        };
        first_visit[n] = false;
        let mut changed_values = vec![];
        // Widths: outputs of ops that only move or select elements need no more bits
        // than their data inputs (the width half of the quantization rule).
        let ins: Vec<Option<&Tesa>> = node.inputs.iter().map(|i| i.map(|i| &tesa[i.index()])).collect();
        if let Some(limit) = quantize::width_limit(&node.op_type, &ins) {
            for &o in &node.outputs {
                let t = &mut tesa[o.index()];
                if limit.bits() < t.uniform().bits() && graph.values[o.index()].fact.dtype.is_float() {
                    t.set_uniform(limit);
                    changed_values.push(o.index());
                }
            }
        }
        for (j, prop) in out_props.into_iter().enumerate() {
            let (Some(mask), Some(&o)) = (prop, node.outputs.get(j)) else { continue };
            if mask.len() != tesa[o.index()].numel() {
                continue;
            }
            if tesa[o.index()].prune_bits(&mask) {
                changed_values.push(o.index());
            }
        }
        let inputs = node.inputs.clone();
        for (s, prop) in in_props.into_iter().enumerate() {
            match prop {
                Some(mask) => back.insert((n, s), mask),
                None => back.remove(&(n, s)),
            };
            let Some(Some(v)) = inputs.get(s) else { continue };
            let v = v.index();
            if is_output[v] {
                continue;
            }
            // Prune where every consumer agrees (and every proposal fits the value).
            let numel = tesa[v].numel();
            let mut agreed: Option<BitMask> = None;
            for u in &uses[v] {
                match back.get(u) {
                    Some(m) if m.len() == numel => match &mut agreed {
                        None => agreed = Some(m.clone()),
                        Some(a) => a.and_assign(m),
                    },
                    _ => {
                        agreed = None;
                        break;
                    }
                }
            }
            if let Some(mask) = agreed {
                if tesa[v].prune_bits(&mask) {
                    changed_values.push(v);
                }
            }
        }
        for v in changed_values {
            if let ValueKind::NodeOutput(p) = graph.values[v].kind {
                if !queued[p.index()] {
                    queued[p.index()] = true;
                    queue.push_back(p.index());
                }
            }
            for &(u, _) in &uses[v] {
                if !queued[u] {
                    queued[u] = true;
                    queue.push_back(u);
                }
            }
        }
    }
    let tensors = graph
        .values
        .iter()
        .enumerate()
        .map(|(i, v)| TensorReport {
            name: v.name.clone(),
            shape: v.fact.shape.clone(),
            is_weight: v.kind == ValueKind::Initializer && v.fact.dtype.is_float(),
            density_before: before[i],
            density_after: tesa[i].density(),
            bits: tesa[i].max_bits(),
        })
        .collect();
    for (v, t) in graph.values.iter_mut().zip(tesa) {
        v.tesa = Some(t);
    }
    Ok(PropagateReport { stop, visits, elapsed: started.elapsed(), scrambled, unhandled, tensors })
}

/// Runs the graph on the reference ops with every pruned element forced to zero:
/// initializers and inputs before the run, each node's outputs right after it runs. The
/// invariant of the pass: this gives the same outputs as [`crate::reference::execute`].
pub fn execute_zeroing_pruned(
    graph: &Graph,
    inputs: &BTreeMap<String, crate::ir::Tensor>,
) -> Result<Vec<(String, crate::ir::Tensor)>, Error> {
    let mask = |id: crate::ir::ValueId, t: crate::ir::Tensor| match &graph.value(id).tesa {
        Some(tesa) if tesa.n_pruned() > 0 => tesa.apply_to(&t),
        _ => t,
    };
    crate::reference::execute_transformed(graph, inputs, &mask)
}

/// The propagation invariant, measured: the largest `|y − y'| / (1 + |y|)` over every
/// output element between the plain run and [`execute_zeroing_pruned`] on `inputs`
/// (0 when the pass is sound), with the name of the output where it occurs.
pub fn invariant_gap(graph: &Graph, inputs: &BTreeMap<String, crate::ir::Tensor>) -> Result<(f64, String), Error> {
    let plain = crate::reference::execute(graph, inputs)?;
    let masked = execute_zeroing_pruned(graph, inputs)?;
    let mut worst = (0.0f64, String::new());
    for ((name, a), (_, b)) in plain.iter().zip(&masked) {
        for (x, y) in a.to_f64_vec().iter().zip(b.to_f64_vec()) {
            let d = (x - y).abs() / (1.0 + x.abs());
            if d > worst.0 || d.is_nan() {
                worst = (if d.is_nan() { f64::INFINITY } else { d }, name.clone());
            }
        }
    }
    Ok(worst)
}

#[cfg(test)]
pub(crate) mod tests;
