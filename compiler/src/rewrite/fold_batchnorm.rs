//! `fold_batchnorm`: an inference-mode `BatchNormalization` right after a `Conv` with constant
//! weights disappears into that Conv. Per output channel `c`, with `s = scale / sqrt(var + ε)`,
//! `W'[c] = W[c] · s[c]` and `B'[c] = (B[c] − mean[c]) · s[c] + bias[c]` (`B` = 0 when the Conv
//! has none), so the Conv computes what the pair computed, up to rounding, and the GPU runs one
//! kernel where a BatchNorm had none.
//!
//! A pair folds when the Conv (default domain) has a dense float weight, an optional dense
//! bias of one element per output channel, its output read by the BatchNorm alone and not a
//! graph output; the BatchNorm has one output (inference form, `training_mode` 0), dense
//! parameters of one element per channel in the Conv's type. The folded weight keeps the
//! weight's TeSA: a pruned element is zero before and after the scaling, so the propagated
//! sparsity stays sound. The BatchNorm's output becomes the Conv's output (same name, same
//! readers).
//!
//! A BatchNorm that does not fold (DenseNet's BatchNorm → Relu → Conv order, a BatchNorm after
//! a Concat or a pool) but has constant parameters becomes the channel affine it is:
//! `Mul(x, a) → Add(·, b)` with `a = scale / sqrt(var + ε)`, `b = bias − mean · a` as constants of
//! shape `[C, 1, …, 1]`, which the GPU runs as a fused elementwise kernel (with what surrounds
//! it).

use super::{drop_unread_initializers, fresh_name};
use crate::ir::{Graph, Initializer, Tensor, ValueFact, ValueId, ValueKind};
use crate::Error;

/// What [`fold_batchnorm`] did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FoldReport {
    /// BatchNorms folded into the Conv before them.
    pub folded: usize,
    /// BatchNorms rewritten as a channel affine (Mul, Add).
    pub affine: usize,
}

/// A dense initializer's values as f64, when `v` is one with `len` elements.
fn dense(graph: &Graph, v: ValueId, len: usize) -> Option<Vec<f64>> {
    match graph.initializers.get(&v) {
        Some(Initializer::Dense(t)) if t.len() == len => Some(t.to_f64_vec()),
        _ => None,
    }
}

/// Folds every BatchNorm that follows a Conv (see the module docs); the graph stays verified.
pub fn fold_batchnorm(graph: &mut Graph) -> Result<FoldReport, Error> {
    let mut readers = vec![0usize; graph.values.len()];
    for n in &graph.nodes {
        for v in n.inputs.iter().flatten() {
            readers[v.index()] += 1;
        }
    }
    let producer = |graph: &Graph, v: ValueId| graph.nodes.iter().position(|n| n.outputs.contains(&v));
    let mut removed = vec![];
    let mut report = FoldReport::default();
    for bn in 0..graph.nodes.len() {
        let node = &graph.nodes[bn];
        if node.op_type != "BatchNormalization" || !node.domain.is_empty() || node.outputs.len() != 1 {
            continue;
        }
        if node.attrs.int("training_mode", 0).unwrap_or(1) != 0 {
            continue;
        }
        let ins: Vec<Option<ValueId>> = node.inputs.clone();
        let [Some(x), Some(scale), Some(beta), Some(mean), Some(var)] = ins[..] else { continue };
        let eps = node.attrs.float("epsilon", 1e-5).unwrap_or(f32::NAN) as f64;
        let y = node.outputs[0];
        let Some(conv) = producer(graph, x) else { continue };
        let cn = &graph.nodes[conv];
        if cn.op_type != "Conv" || !cn.domain.is_empty() || readers[x.index()] != 1 || graph.outputs.contains(&x) {
            continue;
        }
        let Some(w) = cn.inputs.get(1).copied().flatten() else { continue };
        let Some(Initializer::Dense(wt)) = graph.initializers.get(&w) else { continue };
        let (dtype, wshape) = (wt.dtype(), wt.shape().to_vec());
        let c = wshape.first().copied().unwrap_or(0);
        if !dtype.is_float() || c == 0 || graph.fact(x).dtype != dtype || !eps.is_finite() {
            continue;
        }
        let params: Option<Vec<Vec<f64>>> = [scale, beta, mean, var]
            .iter()
            .map(|&p| (graph.fact(p).dtype == dtype).then(|| dense(graph, p, c)).flatten())
            .collect();
        let Some(params) = params else { continue };
        let bias = match cn.inputs.get(2).copied().flatten() {
            Some(b) => match dense(graph, b, c) {
                Some(v) => v,
                None => continue,
            },
            None => vec![0.0; c],
        };
        let (s, beta, mean, var) = (&params[0], &params[1], &params[2], &params[3]);
        let factor: Vec<f64> = (0..c).map(|i| s[i] / (var[i] + eps).sqrt()).collect();
        let per_channel = wt.len() / c;
        let w_new: Vec<f64> =
            wt.to_f64_vec().iter().enumerate().map(|(i, &v)| v * factor[i / per_channel.max(1)]).collect();
        let b_new: Vec<f64> = (0..c).map(|i| (bias[i] - mean[i]) * factor[i] + beta[i]).collect();
        let w_tensor = Tensor::new(wshape, crate::ir::Data::from_f64_iter(dtype, w_new.into_iter()))
            .expect("one value per weight element");
        let b_tensor =
            Tensor::new(vec![c], crate::ir::Data::from_f64_iter(dtype, b_new.into_iter())).expect("one per channel");
        let (conv_name, w_tesa) = (cn.name.clone(), graph.value(w).tesa.clone());
        let w_id = graph.add_value(
            fresh_name(graph, &format!("{conv_name}.folded_weight")),
            ValueFact::of(&w_tensor),
            ValueKind::Initializer,
        );
        graph.values[w_id.index()].tesa = w_tesa;
        graph.initializers.insert(w_id, Initializer::Dense(w_tensor));
        let b_id = graph.add_value(
            fresh_name(graph, &format!("{conv_name}.folded_bias")),
            ValueFact::of(&b_tensor),
            ValueKind::Initializer,
        );
        graph.initializers.insert(b_id, Initializer::Dense(b_tensor));
        let cn = &mut graph.nodes[conv];
        cn.inputs.resize(3, None);
        cn.inputs[1] = Some(w_id);
        cn.inputs[2] = Some(b_id);
        cn.outputs[0] = y;
        removed.push(bn);
        report.folded += 1;
    }
    if report.folded == 0 {
        report.affine = batchnorm_to_affine(graph)?;
        return Ok(report);
    }
    let mut i = 0;
    graph.nodes.retain(|_| {
        i += 1;
        !removed.contains(&(i - 1))
    });
    // The old weights and the BatchNorms' parameters.
    drop_unread_initializers(graph)?;
    report.affine = batchnorm_to_affine(graph)?;
    Ok(report)
}

/// Every inference-mode BatchNorm left (see the module docs) with dense parameters of one
/// element per channel, a float input of rank ≥ 2 in their type and a finite epsilon, as
/// `Mul(x, a) → Add(·, b)`; returns how many.
fn batchnorm_to_affine(graph: &mut Graph) -> Result<usize, Error> {
    let mut rewritten = 0;
    let mut bn = 0;
    while bn < graph.nodes.len() {
        let node = &graph.nodes[bn];
        let eps = node.attrs.float("epsilon", 1e-5).unwrap_or(f32::NAN) as f64;
        let training = node.attrs.int("training_mode", 0).unwrap_or(1) != 0;
        let (ins, y) = (node.inputs.clone(), node.outputs.first().copied());
        let is_bn = node.op_type == "BatchNormalization" && node.domain.is_empty() && node.outputs.len() == 1;
        let (Some(y), [Some(x), Some(scale), Some(beta), Some(mean), Some(var)]) = (y, &ins[..]) else {
            bn += 1;
            continue;
        };
        let (x, xf) = (*x, graph.fact(*x).clone());
        let c = xf.shape.get(1).copied().unwrap_or(0);
        if !is_bn || training || !eps.is_finite() || !xf.dtype.is_float() || xf.shape.len() < 2 || c == 0 {
            bn += 1;
            continue;
        }
        let params: Option<Vec<Vec<f64>>> = [*scale, *beta, *mean, *var]
            .iter()
            .map(|&p| (graph.fact(p).dtype == xf.dtype).then(|| dense(graph, p, c)).flatten())
            .collect();
        let Some(params) = params else {
            bn += 1;
            continue;
        };
        let (s, beta, mean, var) = (&params[0], &params[1], &params[2], &params[3]);
        let a: Vec<f64> = (0..c).map(|i| s[i] / (var[i] + eps).sqrt()).collect();
        let b: Vec<f64> = (0..c).map(|i| beta[i] - mean[i] * a[i]).collect();
        let mut shape = vec![c];
        shape.resize(xf.shape.len() - 1, 1);
        let name = graph.nodes[bn].name.clone();
        let constant = |graph: &mut Graph, what: &str, v: Vec<f64>| {
            let t = Tensor::new(shape.clone(), crate::ir::Data::from_f64_iter(xf.dtype, v.into_iter()))
                .expect("one value per channel");
            let id = graph.add_value(
                fresh_name(graph, &format!("{name}.{what}")),
                ValueFact::of(&t),
                ValueKind::Initializer,
            );
            graph.initializers.insert(id, Initializer::Dense(t));
            id
        };
        let (a_id, b_id) = (constant(graph, "affine_scale", a), constant(graph, "affine_shift", b));
        let scaled = graph.add_value(
            fresh_name(graph, &format!("{name}.scaled")),
            ValueFact::new(xf.dtype, xf.shape.clone()),
            ValueKind::NodeOutput(crate::ir::NodeId(bn as u32)),
        );
        // `x · a` is zero wherever `x` is pruned (so `shrink_channels` still sees the channel
        // pruned through the affine).
        graph.values[scaled.index()].tesa = graph.value(x).tesa.as_ref().map(|t| {
            let mut tesa = crate::ir::tesa::Tesa::for_dtype(&xf.shape, xf.dtype);
            tesa.prune_bits(&t.pruned_bits());
            tesa
        });
        let node = &mut graph.nodes[bn];
        let mut mul = node.clone();
        (mul.name, mul.op_type, mul.attrs) = (format!("{name}.mul"), "Mul".into(), Default::default());
        (mul.inputs, mul.outputs) = (vec![Some(x), Some(a_id)], vec![scaled]);
        (node.name, node.op_type, node.attrs) = (format!("{name}.add"), "Add".into(), Default::default());
        node.inputs = vec![Some(scaled), Some(b_id)];
        node.outputs = vec![y];
        graph.nodes.insert(bn, mul);
        rewritten += 1;
        bn += 2;
    }
    if rewritten > 0 {
        drop_unread_initializers(graph)?;
    }
    Ok(rewritten)
}
