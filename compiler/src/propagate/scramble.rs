//! Tensor scrambling (SparTA §3.2) for ops without an algebra rule: run the op's
//! reference `eval` on random values with the pruned input elements zeroed; output
//! elements that are exactly zero in every sample are pruned.
//!
//! Non-constant float inputs get values uniform in [-1, 1); constants keep their real
//! values (with their pruned elements zeroed), so shape and index operands stay valid.
//! A non-constant non-float input (e.g. token ids) makes scrambling give up: `None`.
//!
//! Backward scrambling asks the dual question: which input elements can change an
//! unpruned output? From random base points it perturbs one unpruned float input
//! element at a time to a value outside the base range (alternately large positive and
//! large negative, so that max- and min-like ops let it win; constants included: their
//! pruned elements are zero, the others keep their real values at the base point) and
//! marks the element needed when any
//! unpruned output moves. Elements never seen to matter are pruned. It costs one op
//! evaluation per element and sample, so it runs only on small nodes.

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
    /// Base points of backward scrambling.
    pub backward_samples: usize,
    /// Backward scrambling only for nodes whose inputs hold at most this many elements.
    pub max_backward_elements: usize,
}

impl Default for ScrambleOptions {
    fn default() -> ScrambleOptions {
        ScrambleOptions {
            samples: 256,
            seed: 0x5eed,
            max_elements: 1 << 20,
            backward_samples: 8,
            max_backward_elements: 4096,
        }
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

/// Backward scrambling of one node: per input, the elements that never moved an
/// unpruned output (already-pruned elements included), or `None` for inputs that are
/// not float. `None` overall when the node is too large or cannot be evaluated.
pub fn scramble_backward(
    node: &Node,
    inputs: &[Option<ScrambleInput>],
    outs: &[&Tesa],
    opts: &ScrambleOptions,
) -> Option<Vec<Option<Vec<bool>>>> {
    let def = registry().get(&node.op_type)?;
    let total: usize = inputs.iter().flatten().map(|i| i.fact.numel()).sum();
    if total > opts.max_backward_elements {
        return None;
    }
    if inputs.iter().flatten().any(|i| i.value.is_none() && !i.fact.dtype.is_float()) {
        return None;
    }
    let ctx = NodeCtx { name: &node.name, attrs: &node.attrs, opset: node.opset, n_outputs: node.outputs.len() };
    let mut rng = SplitMix64::new(opts.seed ^ 0xbac4);
    let mut needed: Vec<Vec<bool>> =
        inputs.iter().map(|i| vec![false; i.as_ref().map_or(0, |i| i.fact.numel())]).collect();
    let live_differs = |a: &[Tensor], b: &[Tensor]| {
        a.iter().zip(b).zip(outs).any(|((x, y), t)| {
            let (x, y) = (x.to_f64_vec(), y.to_f64_vec());
            x.iter().zip(&y).enumerate().any(|(k, (u, v))| !t.is_pruned(k) && u != v && !(u.is_nan() && v.is_nan()))
        })
    };
    for sample in 0..opts.backward_samples.max(1) {
        // Base point: f64 values per input, pruned elements zero.
        let base: Vec<Option<(Vec<f64>, &ScrambleInput)>> = inputs
            .iter()
            .map(|i| {
                let i = i.as_ref()?;
                let vals = match i.value {
                    Some(c) => i.tesa.apply_to(c).to_f64_vec(),
                    None => (0..i.fact.numel())
                        .map(|k| if i.tesa.is_pruned(k) { 0.0 } else { rng.uniform(-1.0, 1.0) })
                        .collect(),
                };
                Some((vals, i))
            })
            .collect();
        let build = |slot: usize, elem: usize, new: f64| -> Option<Vec<Option<Tensor>>> {
            base.iter()
                .enumerate()
                .map(|(j, b)| match b {
                    None => Some(None),
                    Some((vals, i)) => {
                        let it = vals.iter().enumerate().map(|(k, v)| if j == slot && k == elem { new } else { *v });
                        Tensor::new(i.fact.shape.clone(), Data::from_f64_iter(i.fact.dtype, it)).map(Some)
                    }
                })
                .collect()
        };
        let eval = |t: &[Option<Tensor>]| {
            let refs: Vec<Option<&Tensor>> = t.iter().map(|x| x.as_ref()).collect();
            (def.eval)(&ctx, &refs).ok()
        };
        let y0 = eval(&build(usize::MAX, 0, 0.0)?)?;
        for (slot, b) in base.iter().enumerate() {
            let Some((vals, i)) = b else { continue };
            if !i.fact.dtype.is_float() {
                continue;
            }
            // `needed` is written inside the loop: an index, not an iterator over it.
            #[allow(clippy::needless_range_loop)]
            for elem in 0..vals.len() {
                if needed[slot][elem] || i.tesa.is_pruned(elem) {
                    continue;
                }
                // Outside the base range, alternating sign, so that max- and min-like
                // ops see the element win.
                let sign = if sample % 2 == 0 { 1.0 } else { -1.0 };
                let new = sign * rng.uniform(2.0, 4.0);
                let y = eval(&build(slot, elem, new)?)?;
                if live_differs(&y0, &y) {
                    needed[slot][elem] = true;
                }
            }
        }
    }
    Some(
        inputs
            .iter()
            .zip(needed)
            .map(|(i, n)| {
                let i = i.as_ref()?;
                if !i.fact.dtype.is_float() {
                    return None;
                }
                Some(n.into_iter().map(|x| !x).collect())
            })
            .collect(),
    )
}
