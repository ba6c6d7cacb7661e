//! `fold_scales`: a `Mul` by a constant that scales the output columns of a MatMul with a
//! constant weight (after its bias `Add`, if any) disappears into the weight and the bias:
//! with `γ` of one value per output column (or one value in all), `W'[k, n] = W[k, n] · γ[n]`
//! and `b'[n] = b[n] · γ[n]`, so `(x·W + b) · γ = x·W' + b'`. ConvNeXt's layer scale (a Mul by
//! `γ[C, 1, 1]` after its MLP, channels last once `channels_last` has run) is this pattern, as
//! is any per-channel scale an exporter leaves after a Linear; the residual Add after it can
//! then join the product (a library call adds it).
//!
//! A Mul folds when its constant, aligned to the product's last axes, is 1 everywhere but the
//! last axis (of length 1 or N), the product and the bias sum are read by nothing else and are
//! not graph outputs, the weight is a dense 2-D float initializer `[K, N]` and the bias a
//! dense float initializer along the last axis. A fold that would scale a column of the weight
//! below fp16's normal range (the root mean square of its nonzeros under 2⁻¹⁴), or any weight or
//! bias past fp16's largest finite value, is left as it is: the model may be compiled to 16
//! bits, and a Mul step costs less than weights that lost their precision (torchvision starts
//! ConvNeXt's layer scale at 10⁻⁶). The scaled weight keeps the weight's TeSA: a pruned element is zero
//! before and after.

use super::{drop_unread_initializers, fresh_name};
use crate::ir::{Graph, Initializer, Tensor, ValueFact, ValueId, ValueKind};
use crate::Error;

/// What [`fold_scales`] did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ScaleReport {
    /// Muls folded into the MatMul (and bias) before them.
    pub folded: usize,
    /// Muls of the folding form left as they are because the scaled weights would leave
    /// fp16's normal range.
    pub out_of_range: usize,
}

/// Smallest normal fp16 magnitude, and its largest finite one.
const F16_MIN_NORMAL: f64 = 6.103515625e-5;
const F16_MAX: f64 = 65504.0;

/// The per-column factors of constant `g` against a product of shape `[.., N]`: `N` values
/// (one repeated when `g` has one element), when `g` is 1 on every axis but the last.
fn column_factors(graph: &Graph, g: ValueId, rank: usize, n: usize) -> Option<Vec<f64>> {
    let Some(Initializer::Dense(t)) = graph.initializers.get(&g) else { return None };
    let shape = t.shape();
    if shape.len() > rank || !t.dtype().is_float() {
        return None;
    }
    let (last, lead) = match shape.split_last() {
        Some((&last, lead)) => (last, lead),
        None => (1, &[][..]),
    };
    if lead.iter().any(|&d| d != 1) || (last != 1 && last != n) {
        return None;
    }
    let v = t.to_f64_vec();
    Some(if last == 1 { vec![v[0]; n] } else { v })
}

/// Whether fp16 holds the scaled weights as well as it holds a weight (see the module docs):
/// every scaled value finite and at most fp16's largest, and in every column with a nonzero
/// weight the root mean square of the scaled nonzeros at least fp16's smallest normal number.
/// Below that, the subnormal spacing (2⁻²⁴) is no longer small against the column's typical
/// weight, and the column's sums lose more than fp16's own rounding; a single small weight
/// does not matter, a column scaled towards zero does.
fn in_range(w: &[f64], n: usize, gamma: &[f64], bias: &[f64]) -> bool {
    let mut squares = vec![(0.0f64, 0usize); n];
    for (i, &x) in w.iter().enumerate() {
        let y = x * gamma[i % n];
        if !y.is_finite() || y.abs() > F16_MAX {
            return false;
        }
        if x != 0.0 {
            squares[i % n].0 += y * y;
            squares[i % n].1 += 1;
        }
    }
    let columns_ok = squares.iter().all(|&(ss, c)| c == 0 || (ss / c as f64).sqrt() >= F16_MIN_NORMAL);
    columns_ok && bias.iter().zip(gamma).all(|(&b, &g)| (b * g).abs() <= F16_MAX)
}

/// A new dense initializer `base` (fresh name) holding `t`, with `tesa`.
fn add_constant(graph: &mut Graph, base: &str, t: Tensor, tesa: Option<crate::tesa::Tesa>) -> ValueId {
    let id = graph.add_value(fresh_name(graph, base), ValueFact::of(&t), ValueKind::Initializer);
    graph.values[id.index()].tesa = tesa;
    graph.initializers.insert(id, Initializer::Dense(t));
    id
}

/// Folds every column-scaling Mul after a MatMul (see the module docs); the graph stays
/// verified.
pub fn fold_scales(graph: &mut Graph) -> Result<ScaleReport, Error> {
    let mut readers = vec![0usize; graph.values.len()];
    for n in &graph.nodes {
        for v in n.inputs.iter().flatten() {
            readers[v.index()] += 1;
        }
    }
    let mut producer = vec![None; graph.values.len()];
    for (i, n) in graph.nodes.iter().enumerate() {
        for v in &n.outputs {
            producer[v.index()] = Some(i);
        }
    }
    // A value read by one node alone and not a graph output.
    let single = |graph: &Graph, v: ValueId| readers[v.index()] == 1 && !graph.outputs.contains(&v);
    let plain = |graph: &Graph, i: usize, op: &str| {
        let n = &graph.nodes[i];
        n.op_type == op && n.domain.is_empty() && n.outputs.len() == 1 && n.inputs.len() == 2
    };
    let mut removed = vec![];
    let mut report = ScaleReport::default();
    for mul in 0..graph.nodes.len() {
        if !plain(graph, mul, "Mul") {
            continue;
        }
        let ins = [graph.nodes[mul].inputs[0], graph.nodes[mul].inputs[1]];
        let [Some(a), Some(b)] = ins else { continue };
        let (g, p) = if graph.initializers.contains_key(&a) { (a, b) } else { (b, a) };
        let Some(last) = producer[p.index()] else { continue };
        if !single(graph, p) || graph.initializers.contains_key(&p) {
            continue;
        }
        // The bias Add (a constant along the last axis) and the MatMul before it, or the MatMul.
        let (matmul, bias) = if plain(graph, last, "Add") {
            let [Some(x0), Some(x1)] = [graph.nodes[last].inputs[0], graph.nodes[last].inputs[1]] else { continue };
            let (bias, m) = if graph.initializers.contains_key(&x0) { (x0, x1) } else { (x1, x0) };
            match producer[m.index()] {
                Some(mm) if single(graph, m) && graph.initializers.contains_key(&bias) => (mm, Some(bias)),
                _ => continue,
            }
        } else {
            (last, None)
        };
        if !plain(graph, matmul, "MatMul") {
            continue;
        }
        let Some(w) = graph.nodes[matmul].inputs[1] else { continue };
        let Some(Initializer::Dense(wt)) = graph.initializers.get(&w) else { continue };
        let (dtype, wshape) = (wt.dtype(), wt.shape().to_vec());
        let pf = graph.fact(p).clone();
        if wshape.len() != 2 || !dtype.is_float() || graph.fact(g).dtype != dtype || pf.dtype != dtype {
            continue;
        }
        let n = wshape[1];
        let Some(gamma) = column_factors(graph, g, pf.shape.len(), n) else { continue };
        let bias_values = match bias {
            Some(bv) => match column_factors(graph, bv, pf.shape.len(), n) {
                Some(v) if graph.fact(bv).dtype == dtype => Some(v),
                _ => continue,
            },
            None => None,
        };
        let wv = wt.to_f64_vec();
        if !in_range(&wv, n, &gamma, bias_values.as_deref().unwrap_or(&[])) {
            report.out_of_range += 1;
            continue;
        }
        let scaled = wv.iter().enumerate().map(|(i, &x)| x * gamma[i % n]);
        let w_tensor = Tensor::new(wshape, crate::ir::Data::from_f64_iter(dtype, scaled)).expect("one per element");
        let w_tesa = graph.value(w).tesa.clone();
        let w_name = format!("{}.scaled", graph.value(w).name);
        let w_new = add_constant(graph, &w_name, w_tensor, w_tesa);
        graph.nodes[matmul].inputs[1] = Some(w_new);
        if let (Some(bv), Some(values)) = (bias, bias_values) {
            let scaled = values.iter().zip(&gamma).map(|(b, g)| b * g);
            let t = Tensor::new(vec![n], crate::ir::Data::from_f64_iter(dtype, scaled)).expect("one per column");
            let b_name = format!("{}.scaled", graph.value(bv).name);
            let b_new = add_constant(graph, &b_name, t, None);
            let add = &mut graph.nodes[last];
            for v in add.inputs.iter_mut() {
                if *v == Some(bv) {
                    *v = Some(b_new);
                }
            }
        }
        // The product (or its bias sum) is now the Mul's output: same name, same readers.
        graph.nodes[last].outputs[0] = graph.nodes[mul].outputs[0];
        removed.push(mul);
        report.folded += 1;
    }
    if report.folded > 0 {
        let mut i = 0;
        graph.nodes.retain(|_| {
            i += 1;
            !removed.contains(&(i - 1))
        });
        drop_unread_initializers(graph)?;
    }
    Ok(report)
}
