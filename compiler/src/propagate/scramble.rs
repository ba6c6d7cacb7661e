//! Tensor scrambling (SparTA §3.2) for ops without an algebra rule: run the op's
//! reference `eval` on random values with the pruned input elements zeroed; output
//! elements that are exactly zero in every sample are pruned.
//!
//! Non-constant float inputs get values uniform in [-1, 1); constants keep their real
//! values (with their pruned elements zeroed), so shape and index operands stay valid.
//! A non-constant non-float input (e.g. token ids) makes scrambling give up: `None`.

use crate::ir::{Data, Node, Tensor, ValueFact};
use crate::ops::{registry, NodeCtx};
use crate::rng::SplitMix64;
use crate::tesa::Tesa;

/// Scrambling settings.
#[derive(Clone, Debug)]
pub struct ScrambleOptions {
    pub samples: usize,
    pub seed: u64,
    /// Skip nodes whose inputs hold more elements than this (cost guard).
    pub max_elements: usize,
}

impl Default for ScrambleOptions {
    fn default() -> ScrambleOptions {
        ScrambleOptions { samples: 256, seed: 0x5eed, max_elements: 1 << 20 }
    }
}

/// One input as scrambling sees it.
pub struct ScrambleInput<'a> {
    pub fact: &'a ValueFact,
    pub tesa: &'a Tesa,
    pub value: Option<&'a Tensor>,
}

/// Forward scrambling of one node: per output, a mask of always-zero elements.
pub fn scramble_forward(
    node: &Node,
    inputs: &[Option<ScrambleInput>],
    opts: &ScrambleOptions,
) -> Option<Vec<Vec<bool>>> {
    let def = registry().get(&node.op_type)?;
    let total: usize = inputs.iter().flatten().map(|i| i.fact.numel()).sum();
    if total > opts.max_elements {
        return None;
    }
    let consts: Vec<Option<Tensor>> =
        inputs.iter().map(|i| i.as_ref().and_then(|i| i.value.map(|v| i.tesa.apply_to(v)))).collect();
    if inputs.iter().flatten().any(|i| i.value.is_none() && !i.fact.dtype.is_float()) {
        return None;
    }
    let ctx = NodeCtx { name: &node.name, attrs: &node.attrs, opset: node.opset, n_outputs: node.outputs.len() };
    let mut rng = SplitMix64::new(opts.seed);
    let mut zero: Option<Vec<Vec<bool>>> = None;
    for _ in 0..opts.samples.max(1) {
        let sampled: Vec<Option<Tensor>> = inputs
            .iter()
            .zip(&consts)
            .map(|(i, c)| {
                let i = i.as_ref()?;
                if let Some(c) = c {
                    return Some(c.clone());
                }
                let n = i.fact.numel();
                let vals = (0..n).map(|k| if i.tesa.is_pruned(k) { 0.0 } else { rng.uniform(-1.0, 1.0) });
                Tensor::new(i.fact.shape.clone(), Data::from_f64_iter(i.fact.dtype, vals))
            })
            .collect();
        let refs: Vec<Option<&Tensor>> = sampled.iter().map(|t| t.as_ref()).collect();
        let outs = (def.eval)(&ctx, &refs).ok()?;
        let now: Vec<Vec<bool>> = outs.iter().map(|t| t.to_f64_vec().iter().map(|v| *v == 0.0).collect()).collect();
        zero = Some(match zero {
            None => now,
            Some(z) => z.iter().zip(&now).map(|(a, b)| a.iter().zip(b).map(|(x, y)| *x && *y).collect()).collect(),
        });
        if zero.as_ref().is_some_and(|z| z.iter().all(|o| o.iter().all(|x| !x))) {
            break;
        }
    }
    zero
}
