//! Pass tests: hand-built graphs, algebra vs scrambling agreement, and the invariant
//! that zeroing every pruned element leaves the outputs unchanged.

use super::rules::{rule_for, RuleCtx};
use super::scramble::{scramble_backward, scramble_forward, ScrambleInput, ScrambleOptions};
use super::*;
use crate::ir::{Attr, Attrs, DType, Data, Graph, Initializer, Node, Tensor, ValueFact, ValueId, ValueKind};
use crate::ops::{registry, InferInput, NodeCtx};
use crate::rng::SplitMix64;

/// A tiny graph builder on the IR itself (shape inference from the op registry).
pub(crate) struct G {
    pub g: Graph,
}

impl G {
    pub fn new() -> G {
        let mut g = Graph { name: "t".into(), ..Default::default() };
        g.opsets.insert(String::new(), 17);
        G { g }
    }
    pub fn input(&mut self, name: &str, shape: &[usize]) -> ValueId {
        let id = self.g.add_value(name.into(), ValueFact::new(DType::F32, shape.to_vec()), ValueKind::Input);
        self.g.inputs.push(id);
        id
    }
    pub fn init(&mut self, name: &str, t: Tensor) -> ValueId {
        let id = self.g.add_value(name.into(), ValueFact::of(&t), ValueKind::Initializer);
        self.g.values[id.index()].tesa = Some(crate::tesa::Tesa::from_zeros(&t));
        self.g.initializers.insert(id, Initializer::Dense(t));
        id
    }
    pub fn node(&mut self, op: &str, inputs: &[ValueId], attrs: Attrs) -> ValueId {
        let n = self.g.nodes.len();
        let name = format!("{op}_{n}");
        let ctx = NodeCtx { name: &name, attrs: &attrs, opset: 17, n_outputs: 1 };
        let consts: Vec<Option<Tensor>> =
            inputs.iter().map(|i| self.g.initializers.get(i).map(|t| t.to_dense())).collect();
        let infer_in: Vec<Option<InferInput>> = inputs
            .iter()
            .zip(&consts)
            .map(|(i, c)| Some(InferInput { fact: self.g.fact(*i), value: c.as_ref() }))
            .collect();
        let facts = (registry().get(op).unwrap().infer)(&ctx, &infer_in).unwrap();
        let out =
            self.g.add_value(format!("v{n}"), facts[0].clone(), ValueKind::NodeOutput(crate::ir::NodeId(n as u32)));
        self.g.nodes.push(Node {
            name,
            op_type: op.into(),
            domain: String::new(),
            opset: 17,
            attrs,
            inputs: inputs.iter().map(|i| Some(*i)).collect(),
            outputs: vec![out],
        });
        out
    }
    pub fn finish(mut self, outs: &[ValueId]) -> Graph {
        self.g.outputs = outs.to_vec();
        self.g
    }
}

pub(crate) fn random_tensor(rng: &mut SplitMix64, shape: &[usize], zero_p: f64) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> =
        (0..n).map(|_| if rng.next_f64() < zero_p { 0.0 } else { rng.uniform(-1.0, 1.0) as f32 }).collect();
    Tensor::from_vec(shape.to_vec(), v)
}

fn attrs(list: &[(&str, Attr)]) -> Attrs {
    let mut a = Attrs::new();
    for (k, v) in list {
        a.insert(*k, v.clone());
    }
    a
}

pub(crate) fn assert_invariant(graph: &Graph, seed: u64) {
    let inputs = crate::reference::random_inputs(graph, seed);
    let (gap, name) = super::invariant_gap(graph, &inputs).unwrap();
    assert!(gap <= 1e-6, "output {name}: relative difference {gap:e} after zeroing pruned elements");
}

fn density(g: &Graph, id: ValueId) -> f64 {
    g.value(id).tesa.as_ref().unwrap().density()
}

#[test]
fn mlp_prunes_next_layer_rows_from_dead_columns() {
    let mut rng = SplitMix64::new(1);
    let mut b = G::new();
    let x = b.input("x", &[4, 8]);
    // W1: hidden units 0..8 of 16 have all-zero columns, and their bias is zero.
    let mut w1 = random_tensor(&mut rng, &[8, 16], 0.0).to_f64_vec();
    let mut b1 = random_tensor(&mut rng, &[16], 0.0).to_f64_vec();
    for r in 0..8 {
        for c in 0..8 {
            w1[r * 16 + c] = 0.0;
        }
    }
    b1[..8].iter_mut().for_each(|v| *v = 0.0);
    let w1 = b.init("w1", Tensor::new(vec![8, 16], Data::from_f64_iter(DType::F32, w1.into_iter())).unwrap());
    let b1 = b.init("b1", Tensor::new(vec![16], Data::from_f64_iter(DType::F32, b1.into_iter())).unwrap());
    let w2 = b.init("w2", random_tensor(&mut rng, &[16, 3], 0.0));
    let h = b.node("MatMul", &[x, w1], Attrs::new());
    let h = b.node("Add", &[h, b1], Attrs::new());
    let h = b.node("Relu", &[h], Attrs::new());
    let y = b.node("MatMul", &[h, w2], Attrs::new());
    let mut g = b.finish(&[y]);
    let report = propagate(&mut g, &PropagateOptions::default()).unwrap();
    assert_eq!(report.stop, StopReason::Converged);
    assert_eq!(density(&g, h), 0.5);
    assert_eq!(density(&g, w2), 0.5, "rows of w2 reading dead hidden units are pruned");
    assert_eq!(density(&g, y), 1.0);
    let (before, after) = report.weight_density();
    assert!(after < before, "{before} -> {after}");
    assert_invariant(&g, 3);
    let text = crate::ir::print_graph(&g);
    assert!(text.contains("#tesa(density 0.5, bits 32)"), "{text}");
}

#[test]
fn softmax_and_sigmoid_do_not_invent_sparsity() {
    let mut b = G::new();
    let x = b.input("x", &[2, 4]);
    let m = b.init("m", Tensor::from_vec(vec![2, 4], vec![0.0f32, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0]));
    let h = b.node("Mul", &[x, m], Attrs::new());
    let s = b.node("Softmax", &[h], attrs(&[("axis", Attr::Int(1))]));
    let t = b.node("Sigmoid", &[h], Attrs::new());
    let u = b.node("Exp", &[h], Attrs::new());
    let mut g = b.finish(&[s, t, u]);
    propagate(&mut g, &PropagateOptions::default()).unwrap();
    assert_eq!(density(&g, h), 0.5);
    for v in [s, t, u] {
        assert_eq!(density(&g, v), 1.0);
    }
    assert_invariant(&g, 5);
}

#[test]
fn conv_channel_pruning_flows_to_the_next_conv() {
    let mut rng = SplitMix64::new(9);
    let mut b = G::new();
    let x = b.input("x", &[1, 3, 6, 6]);
    let mut w1 = random_tensor(&mut rng, &[8, 3, 3, 3], 0.0).to_f64_vec();
    // Filters 0..4 of the first conv are pruned.
    w1[..4 * 27].iter_mut().for_each(|v| *v = 0.0);
    let w1 = b.init("w1", Tensor::new(vec![8, 3, 3, 3], Data::from_f64_iter(DType::F32, w1.into_iter())).unwrap());
    let w2 = b.init("w2", random_tensor(&mut rng, &[5, 8, 3, 3], 0.0));
    let pads = Attr::Ints(vec![1, 1, 1, 1]);
    let h = b.node("Conv", &[x, w1], attrs(&[("pads", pads.clone())]));
    let h = b.node("Relu", &[h], Attrs::new());
    let y = b.node("Conv", &[h, w2], attrs(&[("pads", pads)]));
    let p = b.node("GlobalAveragePool", &[y], Attrs::new());
    let mut g = b.finish(&[p]);
    propagate(&mut g, &PropagateOptions::default()).unwrap();
    assert_eq!(density(&g, h), 0.5);
    assert_eq!(density(&g, w2), 0.5, "input channels 0..4 of the second conv are unused");
    assert_invariant(&g, 11);
}

#[test]
fn random_graphs_keep_outputs_when_pruned_elements_are_zeroed() {
    for seed in 0..40u64 {
        let mut rng = SplitMix64::new(seed);
        let mut b = G::new();
        let x = b.input("x", &[4, 6]);
        let mut cur = x;
        let mut cur_shape = vec![4usize, 6];
        for step in 0..6 {
            let kind = rng.below(7);
            cur = match kind {
                0 => {
                    let n = 2 + rng.below(6) as usize;
                    let w = b.init(&format!("w{step}"), random_tensor(&mut rng, &[cur_shape[1], n], 0.5));
                    cur_shape[1] = n;
                    b.node("MatMul", &[cur, w], Attrs::new())
                }
                1 => {
                    let c = b.init(&format!("c{step}"), random_tensor(&mut rng, &[cur_shape[1]], 0.5));
                    b.node("Add", &[cur, c], Attrs::new())
                }
                2 => {
                    let c = b.init(&format!("m{step}"), random_tensor(&mut rng, &cur_shape, 0.4));
                    b.node("Mul", &[cur, c], Attrs::new())
                }
                3 => b.node("Relu", &[cur], Attrs::new()),
                4 => b.node("Sigmoid", &[cur], Attrs::new()),
                5 => {
                    cur_shape.reverse();
                    b.node("Transpose", &[cur], Attrs::new())
                }
                _ => {
                    let w = b.init(&format!("g{step}"), random_tensor(&mut rng, &[3, cur_shape[1]], 0.5));
                    cur_shape[1] = 3;
                    b.node("Gemm", &[cur, w], attrs(&[("transB", Attr::Int(1))]))
                }
            };
        }
        let mut g = b.finish(&[cur]);
        let report = propagate(&mut g, &PropagateOptions::default()).unwrap();
        assert_eq!(report.stop, StopReason::Converged);
        assert_invariant(&g, seed + 100);
    }
}

/// Forward masks from the algebra rule and from scrambling for one node.
fn both(g: &Graph, samples: usize) -> (Vec<bool>, Vec<bool>) {
    let node = &g.nodes[0];
    let tesa: Vec<crate::tesa::Tesa> = g
        .values
        .iter()
        .map(|v| v.tesa.clone().unwrap_or_else(|| crate::tesa::Tesa::for_dtype(&v.fact.shape, v.fact.dtype)))
        .collect();
    let consts: Vec<Option<Tensor>> =
        node.inputs.iter().map(|i| i.and_then(|i| g.initializers.get(&i)).map(|t| t.to_dense())).collect();
    let ctx = RuleCtx {
        node,
        in_facts: node.inputs.iter().map(|i| i.map(|i| g.fact(i))).collect(),
        ins: node.inputs.iter().map(|i| i.map(|i| &tesa[i.index()])).collect(),
        consts: consts.iter().map(|c| c.as_ref()).collect(),
        out_facts: node.outputs.iter().map(|o| g.fact(*o)).collect(),
        outs: node.outputs.iter().map(|o| &tesa[o.index()]).collect(),
        memo: None,
    };
    let algebra = rule_for(&node.op_type).unwrap()(&ctx).unwrap().outputs[0].clone().unwrap().to_bools();
    let inputs: Vec<Option<ScrambleInput>> = node
        .inputs
        .iter()
        .zip(&consts)
        .map(|(i, c)| i.map(|i| ScrambleInput { fact: g.fact(i), tesa: &tesa[i.index()], value: c.as_ref() }))
        .collect();
    let opts = ScrambleOptions { samples, ..Default::default() };
    let scrambled = scramble_forward(node, &inputs, &opts).unwrap().remove(0);
    (algebra, scrambled)
}

/// One random single-node graph per op with random input masks (inputs are graph
/// inputs with pre-set TeSAs, so scrambling randomizes them).
fn single_op(op: &str, rng: &mut SplitMix64) -> Graph {
    let mut b = G::new();
    let mask_input = |b: &mut G, name: &str, shape: &[usize], rng: &mut SplitMix64, structured: bool| {
        let id = b.input(name, shape);
        let n: usize = shape.iter().product();
        let mask: Vec<bool> = if structured {
            // Whole leading-axis-1 channels pruned.
            let per: usize = shape[2..].iter().product::<usize>().max(1) * if shape.len() > 1 { 1 } else { n };
            let chans: Vec<bool> = (0..n / per).map(|_| rng.next_f64() < 0.4).collect();
            (0..n).map(|i| chans[i / per]).collect()
        } else {
            (0..n).map(|_| rng.next_f64() < 0.5).collect()
        };
        b.g.values[id.index()].tesa = Some(crate::tesa::Tesa::from_mask(shape, &mask));
        id
    };
    match op {
        "Mul" | "Add" | "Sub" => {
            let a = mask_input(&mut b, "a", &[3, 4], rng, false);
            let c = mask_input(&mut b, "b", &[4], rng, false);
            let y = b.node(op, &[a, c], Attrs::new());
            b.finish(&[y])
        }
        "Relu" | "Tanh" | "Neg" | "Abs" => {
            let a = mask_input(&mut b, "a", &[3, 5], rng, false);
            let y = b.node(op, &[a], Attrs::new());
            b.finish(&[y])
        }
        "MatMul" => {
            let a = mask_input(&mut b, "a", &[2, 3, 6], rng, false);
            let c = mask_input(&mut b, "b", &[6, 4], rng, false);
            let y = b.node(op, &[a, c], Attrs::new());
            b.finish(&[y])
        }
        "Gemm" => {
            let a = mask_input(&mut b, "a", &[6, 3], rng, false);
            let c = mask_input(&mut b, "b", &[5, 6], rng, false);
            let y = b.node(op, &[a, c], attrs(&[("transA", Attr::Int(1)), ("transB", Attr::Int(1))]));
            b.finish(&[y])
        }
        "Transpose" => {
            let a = mask_input(&mut b, "a", &[2, 3, 4], rng, false);
            let y = b.node(op, &[a], attrs(&[("perm", Attr::Ints(vec![2, 0, 1]))]));
            b.finish(&[y])
        }
        "Concat" => {
            let a = mask_input(&mut b, "a", &[2, 3], rng, false);
            let c = mask_input(&mut b, "b", &[2, 2], rng, false);
            let y = b.node(op, &[a, c], attrs(&[("axis", Attr::Int(1))]));
            b.finish(&[y])
        }
        "Conv" => {
            let x = mask_input(&mut b, "x", &[1, 4, 5, 5], rng, true);
            let w = mask_input(&mut b, "w", &[6, 2, 3, 3], rng, true);
            let y = b.node(op, &[x, w], attrs(&[("group", Attr::Int(2)), ("pads", Attr::Ints(vec![1, 1, 1, 1]))]));
            b.finish(&[y])
        }
        "GlobalAveragePool" => {
            let x = mask_input(&mut b, "x", &[2, 3, 2, 2], rng, true);
            let y = b.node(op, &[x], Attrs::new());
            b.finish(&[y])
        }
        "MaxPool" | "AveragePool" => {
            let x = mask_input(&mut b, "x", &[1, 2, 5, 5], rng, false);
            let a = attrs(&[
                ("kernel_shape", Attr::Ints(vec![3, 2])),
                ("strides", Attr::Ints(vec![2, 1])),
                ("pads", Attr::Ints(vec![1, 0, 1, 1])),
            ]);
            let y = b.node(op, &[x], a);
            b.finish(&[y])
        }
        "ReduceSum" | "ReduceMax" | "ReduceProd" => {
            let x = mask_input(&mut b, "x", &[3, 2, 4], rng, false);
            let y = if op == "ReduceSum" {
                let axes = b.init("axes", Tensor::from_vec(vec![2], vec![0i64, 2]));
                b.node(op, &[x, axes], attrs(&[("keepdims", Attr::Int(0))]))
            } else {
                b.node(op, &[x], attrs(&[("axes", Attr::Ints(vec![1]))]))
            };
            b.finish(&[y])
        }
        "Slice" => {
            let x = mask_input(&mut b, "x", &[4, 6], rng, false);
            let starts = b.init("starts", Tensor::from_vec(vec![2], vec![1i64, 5]));
            let ends = b.init("ends", Tensor::from_vec(vec![2], vec![4i64, 0]));
            let axes = b.init("axes", Tensor::from_vec(vec![2], vec![0i64, 1]));
            let steps = b.init("steps", Tensor::from_vec(vec![2], vec![2i64, -2]));
            let y = b.node(op, &[x, starts, ends, axes, steps], Attrs::new());
            b.finish(&[y])
        }
        "Gather" => {
            let x = mask_input(&mut b, "x", &[5, 3], rng, false);
            let idx = b.init("idx", Tensor::from_vec(vec![2, 2], vec![4i64, 0, 0, -2]));
            let y = b.node(op, &[x, idx], attrs(&[("axis", Attr::Int(0))]));
            b.finish(&[y])
        }
        "Expand" | "Tile" => {
            let x = mask_input(&mut b, "x", &[3, 1], rng, false);
            let shape = if op == "Expand" {
                b.init("shape", Tensor::from_vec(vec![3], vec![2i64, 3, 4]))
            } else {
                b.init("repeats", Tensor::from_vec(vec![2], vec![2i64, 4]))
            };
            let y = b.node(op, &[x, shape], Attrs::new());
            b.finish(&[y])
        }
        "Pad" => {
            let x = mask_input(&mut b, "x", &[2, 3], rng, false);
            let pads = b.init("pads", Tensor::from_vec(vec![4], vec![1i64, 0, 0, 2]));
            let y = b.node(op, &[x, pads], attrs(&[("mode", Attr::String("reflect".into()))]));
            b.finish(&[y])
        }
        _ => unreachable!(),
    }
}

/// Ops with both an algebra rule and scrambling, compared on random masks.
const AGREEMENT_OPS: [&str; 23] = [
    "Mul",
    "Add",
    "Sub",
    "Relu",
    "Tanh",
    "Neg",
    "Abs",
    "MatMul",
    "Gemm",
    "Transpose",
    "Concat",
    "Conv",
    "GlobalAveragePool",
    "MaxPool",
    "AveragePool",
    "ReduceSum",
    "ReduceMax",
    "ReduceProd",
    "Slice",
    "Gather",
    "Expand",
    "Tile",
    "Pad",
];

#[test]
fn algebra_and_scrambling_agree_on_random_masks() {
    let ops = AGREEMENT_OPS;
    let mut needed_max = 0;
    let mut per_op = vec![];
    for op in ops {
        let mut op_max = 0;
        let mut rng = SplitMix64::new(op.len() as u64 * 31);
        for _ in 0..20 {
            let g = single_op(op, &mut rng);
            let (algebra, scrambled) = both(&g, 256);
            assert_eq!(algebra, scrambled, "{op}: algebra vs 256-sample scrambling");
            // Fewest samples that already agree.
            let needed = (1..=256).find(|&s| both(&g, s).1 == algebra).unwrap();
            op_max = op_max.max(needed);
        }
        needed_max = needed_max.max(op_max);
        per_op.push(format!("{op}={op_max}"));
    }
    // Relu-like ops need several samples: a negative sample also yields 0.
    eprintln!("samples scrambling needs to agree with the algebra: {}", per_op.join(" "));
    assert!(needed_max <= 32, "needed {needed_max}");
}

/// Backward masks from the algebra rule and from backward scrambling, for every input
/// of the node that is not a constant, with a random mask on the output (whole
/// channels for the ops whose rules work per channel). Already-pruned input elements
/// count as pruned in both.
fn both_backward(g: &Graph, out_mask: &[bool], samples: usize) -> Vec<(Vec<bool>, Vec<bool>)> {
    let node = &g.nodes[0];
    let mut tesa: Vec<crate::tesa::Tesa> = g
        .values
        .iter()
        .map(|v| v.tesa.clone().unwrap_or_else(|| crate::tesa::Tesa::for_dtype(&v.fact.shape, v.fact.dtype)))
        .collect();
    let o = node.outputs[0].index();
    tesa[o] = crate::tesa::Tesa::from_mask(&g.values[o].fact.shape, out_mask);
    let consts: Vec<Option<Tensor>> =
        node.inputs.iter().map(|i| i.and_then(|i| g.initializers.get(&i)).map(|t| t.to_dense())).collect();
    let ctx = RuleCtx {
        node,
        in_facts: node.inputs.iter().map(|i| i.map(|i| g.fact(i))).collect(),
        ins: node.inputs.iter().map(|i| i.map(|i| &tesa[i.index()])).collect(),
        consts: consts.iter().map(|c| c.as_ref()).collect(),
        out_facts: node.outputs.iter().map(|o| g.fact(*o)).collect(),
        outs: node.outputs.iter().map(|o| &tesa[o.index()]).collect(),
        memo: None,
    };
    let algebra = rule_for(&node.op_type).unwrap()(&ctx).unwrap().inputs;
    let inputs: Vec<Option<ScrambleInput>> = node
        .inputs
        .iter()
        .zip(&consts)
        .map(|(i, c)| i.map(|i| ScrambleInput { fact: g.fact(i), tesa: &tesa[i.index()], value: c.as_ref() }))
        .collect();
    let opts = ScrambleOptions { backward_samples: samples, ..Default::default() };
    let outs: Vec<&crate::tesa::Tesa> = node.outputs.iter().map(|o| &tesa[o.index()]).collect();
    let scrambled = scramble_backward(node, &inputs, &outs, &opts).unwrap();
    let mut pairs = vec![];
    for (s, i) in node.inputs.iter().enumerate() {
        let Some(i) = i else { continue };
        if consts[s].is_some() {
            continue;
        }
        let have = tesa[i.index()].mask();
        let alg = algebra[s].as_ref().map_or_else(|| vec![false; have.len()], |m| m.to_bools());
        let alg: Vec<bool> = alg.iter().zip(&have).map(|(a, h)| *a || *h).collect();
        pairs.push((alg, scrambled[s].clone().unwrap()));
    }
    pairs
}

#[test]
fn backward_algebra_and_backward_scrambling_agree_on_random_masks() {
    // ReduceProd prunes an output when any input is: its backward has no
    // exact single-element counterpart to compare with.
    let ops = AGREEMENT_OPS.iter().copied().filter(|op| *op != "ReduceProd");
    let mut per_op = vec![];
    let mut needed_max = 0;
    for op in ops {
        let mut rng = SplitMix64::new(op.len() as u64 * 17 + 5);
        let mut op_max = 0;
        for _ in 0..10 {
            let g = single_op(op, &mut rng);
            let shape = g.values[g.outputs[0].index()].fact.shape.clone();
            let n: usize = shape.iter().product();
            let out_mask: Vec<bool> = if matches!(op, "Conv" | "GlobalAveragePool") {
                let per: usize = shape[2..].iter().product::<usize>().max(1);
                let chans: Vec<bool> = (0..n / per).map(|_| rng.next_f64() < 0.4).collect();
                (0..n).map(|i| chans[i / per]).collect()
            } else {
                (0..n).map(|_| rng.next_f64() < 0.5).collect()
            };
            for (s, (alg, scr)) in both_backward(&g, &out_mask, 8).into_iter().enumerate() {
                assert_eq!(alg, scr, "{op}: input {s}: backward algebra vs 8-sample backward scrambling");
            }
            let needed = (1..=8).find(|&k| both_backward(&g, &out_mask, k).iter().all(|(a, s)| a == s)).unwrap();
            op_max = op_max.max(needed);
        }
        needed_max = needed_max.max(op_max);
        per_op.push(format!("{op}={op_max}"));
    }
    eprintln!("base points backward scrambling needs to agree with the algebra: {}", per_op.join(" "));
    assert!(needed_max <= 4, "needed {needed_max}");
}

#[test]
fn channel_pruning_takes_the_bias_along_and_kills_the_output_channel() {
    let mut rng = SplitMix64::new(21);
    let mut b = G::new();
    let x = b.input("x", &[1, 2, 3, 3]);
    let w = b.init("w", random_tensor(&mut rng, &[4, 2, 1, 1], 0.0));
    let bias = b.init("bias", random_tensor(&mut rng, &[4], 0.0));
    let y = b.node("Conv", &[x, w, bias], Attrs::new());
    let r = b.node("Relu", &[y], Attrs::new());
    let mut g = b.finish(&[r]);
    for (with_bias, want) in [(false, 1.0), (true, 0.5)] {
        let text =
            format!(r#"{{"tensors": {{"w": {{"channel_magnitude": {{"sparsity": 0.5, "bias": {with_bias}}}}}}}}}"#);
        let attrs = crate::tesa::attrs::TesaAttrs::parse(&text).unwrap();
        crate::tesa::attrs::apply_attrs(&mut g, Some(&attrs)).unwrap();
        assert_eq!(density(&g, bias), want);
        propagate(&mut g, &PropagateOptions::default()).unwrap();
        assert_eq!(density(&g, y), want, "bias {with_bias}");
        crate::tesa::attrs::zero_pruned_initializers(&mut g);
        assert_invariant(&g, 3);
        for v in &mut g.values {
            v.tesa = None;
        }
    }
}

#[test]
fn where_prunes_only_when_both_candidates_are_pruned() {
    let mut b = G::new();
    let c = b.init("c", Tensor::from_vec(vec![4], vec![true, false, true, false]));
    let x = b.input("x", &[2, 4]);
    let z = b.input("z", &[4]);
    let y = b.node("Where", &[c, x, z], Attrs::new());
    let mut g = b.finish(&[y]);
    g.values[x.index()].tesa =
        Some(crate::tesa::Tesa::from_mask(&[2, 4], &[true, true, false, false, true, false, true, false]));
    g.values[z.index()].tesa = Some(crate::tesa::Tesa::from_mask(&[4], &[true, true, true, false]));
    propagate(&mut g, &PropagateOptions::default()).unwrap();
    let got = g.value(y).tesa.as_ref().unwrap().mask();
    assert_eq!(got, vec![true, true, false, false, true, false, true, false]);
}

/// The proposal of node 0's rule, with `memo` kept between calls (as the pass does) or none.
fn rule_proposal(g: &Graph, memo: Option<&super::rules::RuleMemo>) -> (Vec<Option<BitMask>>, Vec<Option<BitMask>>) {
    let node = &g.nodes[0];
    let tesa: Vec<crate::tesa::Tesa> = g
        .values
        .iter()
        .map(|v| v.tesa.clone().unwrap_or_else(|| crate::tesa::Tesa::for_dtype(&v.fact.shape, v.fact.dtype)))
        .collect();
    let consts: Vec<Option<Tensor>> =
        node.inputs.iter().map(|i| i.and_then(|i| g.initializers.get(&i)).map(|t| t.to_dense())).collect();
    let ctx = RuleCtx {
        node,
        in_facts: node.inputs.iter().map(|i| i.map(|i| g.fact(i))).collect(),
        ins: node.inputs.iter().map(|i| i.map(|i| &tesa[i.index()])).collect(),
        consts: consts.iter().map(|c| c.as_ref()).collect(),
        out_facts: node.outputs.iter().map(|o| g.fact(*o)).collect(),
        outs: node.outputs.iter().map(|o| &tesa[o.index()]).collect(),
        memo: memo.map(|m| (m, 0)),
    };
    let p = rule_for(&node.op_type).unwrap()(&ctx).unwrap();
    (p.outputs, p.inputs)
}

#[test]
fn traced_rules_reuse_a_trace_only_for_equal_operands() {
    // Gather rows of x [4, 6] whose rows 0 and 3 are pruned: indices [3, 0] give a pruned
    // output, [1, 2] a live one. One memo sees both graphs as node 0, as a pass would see a
    // node whose constant operand changed between visits.
    let gather = |indices: Vec<i64>| {
        let mut b = G::new();
        let x = b.input("x", &[4, 6]);
        let mask: Vec<bool> = (0..24).map(|i| i / 6 == 0 || i / 6 == 3).collect();
        b.g.values[x.index()].tesa = Some(crate::tesa::Tesa::from_mask(&[4, 6], &mask));
        let idx = b.init("idx", Tensor::from_vec(vec![2], indices));
        let y = b.node("Gather", &[x, idx], attrs(&[("axis", Attr::Int(0))]));
        b.finish(&[y])
    };
    let (dead, live) = (gather(vec![3, 0]), gather(vec![1, 2]));
    let memo = super::rules::RuleMemo::default();
    let first = rule_proposal(&dead, Some(&memo));
    assert_eq!(first, rule_proposal(&dead, None), "a fresh trace is the unmemoized one");
    assert!(first.0[0].as_ref().unwrap().all_run(0, 12), "rows 3 and 0 are pruned");
    assert_eq!(rule_proposal(&dead, Some(&memo)), first, "equal operands reuse the trace");
    let other = rule_proposal(&live, Some(&memo));
    assert_eq!(other, rule_proposal(&live, None), "other operands trace anew");
    assert!(!other.0[0].as_ref().unwrap().any(), "rows 1 and 2 are live");
}
