//! The quantization rule (SparTA §3.2): lower the bit width of a tensor as long as the
//! output of the operator that reads it stays within an error threshold.
//!
//! The model runs once on calibration inputs through the reference executor, caching
//! the float activations every candidate operator reads (MatMul, Gemm, Conv). The
//! operators are then visited in topological order; for each candidate tensor (float
//! weights, and the activation operands when asked) the widths are tried from widest
//! to narrowest, and the narrowest whose operator output keeps
//! `‖y_q − y‖₂ / ‖y‖₂ ≤ threshold` wins (the other operands stay at full precision while
//! one is tried). Narrowing stops at the first width that fails.
//!
//! Widths and how a tensor is rounded to them:
//! - 16: IEEE half precision (format `float`);
//! - 8 and 4: symmetric integers, one scale per output channel for weights (the axis
//!   the operator does not reduce over), one per tensor for activations (format `int`).
//!
//! Pruned elements stay exactly zero under all of them. The result is written into the
//! TeSAs (uniform width and format); the propagation pass carries widths on through
//! ops that only move or select elements.

use crate::ir::{Data, Graph, Tensor, ValueId, ValueKind};
use crate::ops::{registry, NodeCtx};
use crate::tesa::{ElemAttr, Format, Tesa};
use crate::Error;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub struct QuantizeOptions {
    /// Candidate widths, any order; 16, 8 and 4 are supported.
    pub widths: Vec<u8>,
    /// Largest relative L2 error of an operator's output.
    pub threshold: f64,
    /// Also narrow the activation operands (not only weights).
    pub activations: bool,
}

impl Default for QuantizeOptions {
    fn default() -> QuantizeOptions {
        QuantizeOptions { widths: vec![16, 8, 4], threshold: 1e-2, activations: false }
    }
}

/// The width chosen for one tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct QuantChoice {
    pub tensor: String,
    pub node: String,
    pub bits: u8,
    pub format: Format,
    /// Relative output error at the chosen width (0 when kept at full width).
    pub error: f64,
}

#[derive(Clone, Debug)]
pub struct QuantizeReport {
    pub choices: Vec<QuantChoice>,
    pub elapsed: Duration,
}

fn candidate_op(op_type: &str) -> bool {
    matches!(op_type, "MatMul" | "Gemm" | "Conv")
}

/// The axis of input `slot` that is *not* reduced by the operator (per-channel scales),
/// or `None` for per-tensor scaling.
fn channel_axis(graph: &Graph, node: &crate::ir::Node, slot: usize) -> Option<usize> {
    let rank = graph.fact(node.inputs[slot]?).shape.len();
    match (node.op_type.as_str(), slot) {
        ("MatMul", 1) if rank >= 2 => Some(rank - 1),
        ("Gemm", 1) => Some(if node.attrs.int("transB", 0).unwrap_or(0) != 0 { 0 } else { 1 }),
        ("Conv", 1) => Some(0),
        _ => None,
    }
}

/// Rounds `t` to `bits` (see the module docs); `axis` selects per-channel scales.
pub fn round_to_width(t: &Tensor, bits: u8, axis: Option<usize>) -> Tensor {
    let v = t.to_f64_vec();
    let out: Vec<f64> = if bits >= 16 {
        v.iter().map(|x| half::f16::from_f64(*x).to_f64()).collect()
    } else {
        let levels = ((1u32 << (bits - 1)) - 1) as f64;
        let shape = t.shape();
        let (dim, inner) = match axis {
            Some(a) if a < shape.len() => (shape[a], shape[a + 1..].iter().product::<usize>()),
            _ => (1, v.len().max(1)),
        };
        let channel = |i: usize| (i / inner) % dim;
        let mut scale = vec![0.0f64; dim];
        for (i, x) in v.iter().enumerate() {
            let c = channel(i);
            scale[c] = scale[c].max(x.abs());
        }
        v.iter()
            .enumerate()
            .map(|(i, x)| {
                let s = scale[channel(i)] / levels;
                if s == 0.0 {
                    0.0
                } else {
                    (x / s).round().clamp(-levels, levels) * s
                }
            })
            .collect()
    };
    Tensor::new(t.shape().to_vec(), Data::from_f64_iter(t.dtype(), out.into_iter())).expect("same shape")
}

fn relative_error(a: &Tensor, reference: &Tensor) -> f64 {
    let (a, r) = (a.to_f64_vec(), reference.to_f64_vec());
    let num: f64 = a.iter().zip(&r).map(|(x, y)| (x - y) * (x - y)).sum();
    let den: f64 = r.iter().map(|y| y * y).sum();
    if den == 0.0 {
        if num == 0.0 {
            0.0
        } else {
            f64::INFINITY
        }
    } else {
        (num / den).sqrt()
    }
}

/// Runs the rule on `calib` inputs and lowers the widths in the graph's TeSAs.
pub fn quantize(
    graph: &mut Graph,
    calib: &BTreeMap<String, Tensor>,
    opts: &QuantizeOptions,
) -> Result<QuantizeReport, Error> {
    let started = Instant::now();
    let mut widths: Vec<u8> = opts.widths.iter().copied().filter(|w| matches!(w, 4 | 8 | 16)).collect();
    widths.sort_unstable_by(|a, b| b.cmp(a));
    widths.dedup();
    // Values the candidate operators read: cache them during one calibration run.
    let wanted: BTreeSet<ValueId> = graph
        .nodes
        .iter()
        .filter(|n| candidate_op(&n.op_type))
        .flat_map(|n| n.inputs.iter().flatten().copied())
        .collect();
    let cache: Mutex<BTreeMap<ValueId, Tensor>> = Mutex::new(BTreeMap::new());
    let zero_pruned = |id: ValueId, t: Tensor| {
        let t = match &graph.value(id).tesa {
            Some(tesa) if tesa.n_pruned() > 0 => tesa.apply_to(&t),
            _ => t,
        };
        if wanted.contains(&id) {
            cache.lock().expect("cache lock").insert(id, t.clone());
        }
        t
    };
    crate::reference::execute_transformed(graph, calib, &zero_pruned)?;
    let cache = cache.into_inner().expect("cache lock");
    let mut choices = vec![];
    let mut decided: BTreeMap<ValueId, (u8, Format)> = BTreeMap::new();
    for node in graph.nodes.iter().filter(|n| candidate_op(&n.op_type)) {
        let def = registry().get(&node.op_type).expect("candidate ops are registered");
        let ctx = NodeCtx { name: &node.name, attrs: &node.attrs, opset: node.opset, n_outputs: node.outputs.len() };
        let operands: Vec<Option<&Tensor>> = node.inputs.iter().map(|i| i.and_then(|i| cache.get(&i))).collect();
        let reference = (def.eval)(&ctx, &operands).map_err(|e| Error::op(node, e))?.remove(0);
        for (slot, id) in node.inputs.iter().enumerate() {
            let Some(id) = *id else { continue };
            let v = graph.value(id);
            let is_weight = v.kind == ValueKind::Initializer;
            if slot == 2 || !v.fact.dtype.is_float() || (!is_weight && !opts.activations) || decided.contains_key(&id) {
                continue;
            }
            let Some(original) = operands[slot] else { continue };
            let axis = if is_weight { channel_axis(graph, node, slot) } else { None };
            let mut best: Option<(u8, f64)> = None;
            for &bits in &widths {
                let rounded = round_to_width(original, bits, axis);
                let mut trial = operands.clone();
                trial[slot] = Some(&rounded);
                let y = (def.eval)(&ctx, &trial).map_err(|e| Error::op(node, e))?.remove(0);
                let err = relative_error(&y, &reference);
                if err <= opts.threshold {
                    best = Some((bits, err));
                } else {
                    break;
                }
            }
            let current = v.tesa.as_ref().map_or(v.fact.dtype.size_bytes() as u8 * 8, |t| t.uniform().bits());
            let (bits, format, error) = match best {
                Some((b, e)) if b < current => (b, if b >= 16 { Format::Float } else { Format::Int }, e),
                _ => (current, v.tesa.as_ref().map_or(Format::Float, |t| t.uniform().format()), 0.0),
            };
            decided.insert(id, (bits, format));
            choices.push(QuantChoice { tensor: v.name.clone(), node: node.name.clone(), bits, format, error });
        }
    }
    for (id, (bits, format)) in decided {
        let v = &mut graph.values[id.index()];
        let tesa = v.tesa.get_or_insert_with(|| Tesa::for_dtype(&v.fact.shape, v.fact.dtype));
        if bits < tesa.uniform().bits() {
            tesa.set_uniform(ElemAttr::new(bits, format));
        }
    }
    Ok(QuantizeReport { choices, elapsed: started.elapsed() })
}

/// Ops whose output elements are copies or selections of input elements: an output
/// needs no more bits than its widest data input (the width part of the rule).
pub fn keeps_width(op_type: &str) -> bool {
    matches!(
        op_type,
        "Relu"
            | "Identity"
            | "Transpose"
            | "Reshape"
            | "Flatten"
            | "Squeeze"
            | "Unsqueeze"
            | "Slice"
            | "Gather"
            | "Expand"
            | "Tile"
            | "Concat"
            | "Split"
            | "MaxPool"
            | "GlobalMaxPool"
            | "ReduceMax"
            | "ReduceMin"
            | "DepthToSpace"
            | "SpaceToDepth"
    )
}

/// Width and format an output of a width-keeping op may be narrowed to: the widest
/// data input (input 0, or all inputs for Concat), when they agree on the format.
pub fn width_limit(op_type: &str, inputs: &[Option<&Tesa>]) -> Option<ElemAttr> {
    if !keeps_width(op_type) {
        return None;
    }
    let data: Vec<&Tesa> = if op_type == "Concat" {
        inputs.iter().flatten().copied().collect()
    } else {
        inputs.first().copied().flatten().into_iter().collect()
    };
    let first = data.first()?.uniform();
    if data.iter().any(|t| t.uniform().format() != first.format()) {
        return None;
    }
    let bits = data.iter().map(|t| t.max_bits().max(t.uniform().bits())).max()?;
    Some(ElemAttr::new(bits, first.format()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Attrs;
    use crate::propagate::tests::{random_tensor, G};
    use crate::rng::SplitMix64;

    fn mlp(seed: u64) -> Graph {
        let mut rng = SplitMix64::new(seed);
        let mut b = G::new();
        let x = b.input("x", &[8, 16]);
        let w1 = b.init("w1", random_tensor(&mut rng, &[16, 12], 0.3));
        let h = b.node("MatMul", &[x, w1], Attrs::new());
        let r = b.node("Relu", &[h], Attrs::new());
        let w2 = b.init("w2", random_tensor(&mut rng, &[12, 4], 0.0));
        let y = b.node("MatMul", &[r, w2], Attrs::new());
        b.finish(&[y])
    }

    fn bits_of(g: &Graph, name: &str) -> u8 {
        g.value(g.find_value(name).unwrap()).tesa.as_ref().map_or(32, |t| t.uniform().bits())
    }

    #[test]
    fn widths_follow_the_threshold_monotonically() {
        let mut last = (32, 32);
        for (i, threshold) in [1e-12, 1e-4, 1e-3, 1e-2, 5e-2, 1.0].into_iter().enumerate() {
            let mut g = mlp(3);
            crate::tesa::attrs::apply_attrs(&mut g, None).unwrap();
            let calib = crate::reference::random_inputs(&g, 9);
            let opts = QuantizeOptions { threshold, ..Default::default() };
            let report = quantize(&mut g, &calib, &opts).unwrap();
            let now = (bits_of(&g, "w1"), bits_of(&g, "w2"));
            assert!(now.0 <= last.0 && now.1 <= last.1, "threshold {threshold}: {now:?} after {last:?}");
            if i == 0 {
                assert_eq!(now, (32, 32), "no width keeps a 1e-12 error");
            }
            if threshold >= 1.0 {
                assert_eq!(now, (4, 4), "any width keeps a relative error of 1");
            }
            for c in &report.choices {
                assert!(c.error <= threshold, "{c:?}");
                assert_eq!(c.format, if c.bits == 16 || c.bits == 32 { Format::Float } else { Format::Int });
            }
            last = now;
        }
        assert!(last.0 < 32);
    }

    #[test]
    fn the_chosen_width_is_the_narrowest_that_passes() {
        let mut g = mlp(5);
        crate::tesa::attrs::apply_attrs(&mut g, None).unwrap();
        let calib = crate::reference::random_inputs(&g, 2);
        let threshold = 2e-2;
        let report = quantize(&mut g, &calib, &QuantizeOptions { threshold, ..Default::default() }).unwrap();
        // Recompute the first operator's error one width narrower: it must fail.
        let c = &report.choices[0];
        let narrower = match c.bits {
            32 => 16,
            16 => 8,
            8 => 4,
            _ => return,
        };
        let x = &calib["x"];
        let w = g.initializers[&g.find_value("w1").unwrap()].to_dense();
        let run = |w: &Tensor| {
            let def = registry().get("MatMul").unwrap();
            let ctx = NodeCtx { name: "m", attrs: &Attrs::new(), opset: 17, n_outputs: 1 };
            (def.eval)(&ctx, &[Some(x), Some(w)]).unwrap().remove(0)
        };
        let err = relative_error(&run(&round_to_width(&w, narrower, Some(1))), &run(&w));
        assert!(err > threshold, "{narrower} bits would also pass ({err})");
    }

    #[test]
    fn rounding_keeps_pruned_zeros_and_uses_per_channel_scales() {
        let t = Tensor::from_vec(vec![2, 3], vec![0.0f32, 100.0, -0.01, 0.0, 1.0, 0.02]);
        for bits in [16, 8, 4] {
            let r = round_to_width(&t, bits, Some(1)).to_f64_vec();
            assert_eq!((r[0], r[3]), (0.0, 0.0));
        }
        // Column 2 has its own scale: its small values survive 8 bits.
        let r = round_to_width(&t, 8, Some(1)).to_f64_vec();
        assert!((r[2] + 0.01).abs() < 1e-3 && (r[5] - 0.02).abs() < 1e-3, "{r:?}");
    }

    #[test]
    fn activation_widths_flow_through_relu() {
        let mut g = mlp(7);
        crate::tesa::attrs::apply_attrs(&mut g, None).unwrap();
        let calib = crate::reference::random_inputs(&g, 4);
        let opts = QuantizeOptions { threshold: 1.0, activations: true, ..Default::default() };
        let report = quantize(&mut g, &calib, &opts).unwrap();
        assert_eq!(bits_of(&g, "x"), 4, "{report:?}");
        crate::propagate::propagate(&mut g, &Default::default()).unwrap();
        // The MatMul accumulates: its output keeps 32 bits although x has 4; the Relu
        // output is itself an operand of the second MatMul, so it was narrowed.
        let h = g.nodes[0].outputs[0];
        assert_eq!(g.value(h).tesa.as_ref().unwrap().uniform().bits(), 32);
        assert_eq!(g.value(g.nodes[1].outputs[0]).tesa.as_ref().unwrap().uniform().bits(), 4);
        let mut b = G::new();
        let x = b.input("x", &[4, 4]);
        let r = b.node("Relu", &[x], Attrs::new());
        let t = b.node("Transpose", &[r], Attrs::new());
        let mut g2 = b.finish(&[t]);
        g2.values[x.index()].tesa = Some({
            let mut t = Tesa::dense(&[4, 4], 32, Format::Float);
            t.set_uniform(ElemAttr::new(8, Format::Int));
            t
        });
        crate::propagate::propagate(&mut g2, &Default::default()).unwrap();
        for v in [r, t] {
            let u = g2.value(v).tesa.as_ref().unwrap().uniform();
            assert_eq!((u.bits(), u.format()), (8, Format::Int));
        }
    }
}
