//! Fused attention in `nn.MultiheadAttention`'s export (torchvision's ViT): sequence first, one
//! packed Q/K/V projection whose heads are split out by Reshape, Unsqueeze, Transpose, Squeeze
//! and three scalar Gathers, `1/⁴√d` on each of Q and Kᵀ, the heads merged back by a Transpose
//! and a Reshape before the output projection. The sequence-first Transpose moves below the
//! projection (`rewrite::sink_transposes`), the attention reads Q, K and V in place from the
//! projection's output and takes the scales into its score expression: no copy step is left
//! between the LayerNorm and the attention, and the program computes what the graph computes
//! on the CPU executor, in f32 and f16.

use spartac::frontend::{load_model_bytes, LoadOptions};
use spartac::ir::{print_graph, DType, Graph, Tensor};
use spartac::plan::{plan, PlanOptions};
use spartac::program::model::{lower_model, ModelOptions, ModelProgram};
use spartac::program::{Arg, BufferId, Launch, Op};
use spartac::propagate::{propagate, PropagateOptions};
use spartac::reference::{execute, random_inputs};
use spartac::rewrite::{prepare, prepare_for_lowering, sink_transposes, RewriteOptions};
use spartac::tesa::attrs::apply_attrs;
use spartac_tests::builder::{fixed, ModelBuilder, A};
use spartac_tests::compiled::{assert_compiled_matches, nvrtc_compiles};

/// Batch, sequence, embedding, heads (head width `E / H`).
const B: usize = 3;
const S: usize = 7;
const E: usize = 32;
const H: usize = 2;

fn seeded(shape: &[usize], seed: usize, scale: f32) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_vec(shape.to_vec(), (0..n).map(|i| ((i * seed % 61) as f32 - 30.0) * scale).collect())
}

fn ints(v: &[i64]) -> Tensor {
    Tensor::from_vec(vec![v.len()], v.to_vec())
}

/// One encoder attention as torch exports `nn.MultiheadAttention(batch_first=False)` inside a
/// batch-first model: `y = x + out_proj(mha(LN(x)ᵀ))ᵀ`.
fn mha_block() -> Graph {
    mha_block_with(false)
}

/// [`mha_block`], with the packed projection `qkv` a graph output too when `qkv_out`.
fn mha_block_with(qkv_out: bool) -> Graph {
    let d = E / H;
    let c = 1.0 / (d as f32).sqrt().sqrt();
    let mut b = ModelBuilder::new("mha_export", 17)
        .input("x", DType::F32, &fixed(&[B, S, E]))
        .output("y", DType::F32, &fixed(&[B, S, E]))
        .init("ln_g", &seeded(&[E], 7, 0.02))
        .init("ln_b", &seeded(&[E], 5, 0.01))
        .init("w_qkv", &seeded(&[E, 3 * E], 11, 0.01))
        .init("b_qkv", &seeded(&[3 * E], 13, 0.01))
        .init("w_out", &seeded(&[E, E], 17, 0.01))
        .init("b_out", &seeded(&[E], 19, 0.01))
        .init("shape_packed", &ints(&[S as i64, B as i64, 3, E as i64]))
        .init("axis0", &ints(&[0]))
        .init("axis3", &ints(&[3]))
        .init("shape_heads", &ints(&[S as i64, (B * H) as i64, d as i64]))
        .init("shape_q", &ints(&[B as i64, H as i64, S as i64, d as i64]))
        .init("shape_kt", &ints(&[B as i64, H as i64, d as i64, S as i64]))
        .init("shape_rows", &ints(&[(S * B) as i64, E as i64]))
        .init("shape_seq", &ints(&[S as i64, B as i64, E as i64]))
        .init("scale", &Tensor::from_vec(vec![1], vec![c]))
        .node("ln", "LayerNormalization", &["x", "ln_g", "ln_b"], &["n"], vec![("axis", A::I(-1))])
        .node("seq_first", "Transpose", &["n"], &["ns"], vec![("perm", A::Is(vec![1, 0, 2]))])
        .node("mm_qkv", "MatMul", &["ns", "w_qkv"], &["qkv0"], vec![])
        .node("bias_qkv", "Add", &["qkv0", "b_qkv"], &["qkv"], vec![])
        .node("packed", "Reshape", &["qkv", "shape_packed"], &["p4"], vec![])
        .node("unsqueeze", "Unsqueeze", &["p4", "axis0"], &["p5"], vec![])
        .node("split_t", "Transpose", &["p5"], &["p5t"], vec![("perm", A::Is(vec![3, 1, 2, 0, 4]))])
        .node("squeeze", "Squeeze", &["p5t", "axis3"], &["parts"], vec![]);
    if qkv_out {
        b = b.output("qkv", DType::F32, &fixed(&[S, B, 3 * E]));
    }
    for (i, p) in ["q", "k", "v"].into_iter().enumerate() {
        b = b
            .init(&format!("idx_{p}"), &Tensor::from_vec(vec![], vec![i as i64]))
            .node(
                &format!("select_{p}"),
                "Gather",
                &["parts", &format!("idx_{p}")],
                &[&format!("{p}0")],
                vec![("axis", A::I(0))],
            )
            .node(&format!("heads_{p}"), "Reshape", &[&format!("{p}0"), "shape_heads"], &[&format!("{p}1")], vec![])
            .node(
                &format!("batch_first_{p}"),
                "Transpose",
                &[&format!("{p}1")],
                &[&format!("{p}2")],
                vec![("perm", A::Is(vec![1, 0, 2]))],
            );
    }
    let bytes = b
        .node("view_q", "Reshape", &["q2", "shape_q"], &["q3"], vec![])
        .node("view_v", "Reshape", &["v2", "shape_q"], &["v3"], vec![])
        .node("k_t", "Transpose", &["k2"], &["k3"], vec![("perm", A::Is(vec![0, 2, 1]))])
        .node("view_kt", "Reshape", &["k3", "shape_kt"], &["k4"], vec![])
        .node("scale_q", "Mul", &["q3", "scale"], &["qs"], vec![])
        .node("scale_k", "Mul", &["k4", "scale"], &["ks"], vec![])
        .node("scores", "MatMul", &["qs", "ks"], &["s"], vec![])
        .node("softmax", "Softmax", &["s"], &["pr"], vec![("axis", A::I(-1))])
        .node("pv", "MatMul", &["pr", "v3"], &["o"], vec![])
        .node("merge", "Transpose", &["o"], &["om"], vec![("perm", A::Is(vec![2, 0, 1, 3]))])
        .node("rows", "Reshape", &["om", "shape_rows"], &["or"], vec![])
        .node("out_proj", "Gemm", &["or", "w_out", "b_out"], &["op"], vec![("transB", A::I(1))])
        .node("seq", "Reshape", &["op", "shape_seq"], &["os"], vec![])
        .node("batch_first", "Transpose", &["os"], &["ob"], vec![("perm", A::Is(vec![1, 0, 2]))])
        .node("residual", "Add", &["ob", "x"], &["y"], vec![])
        .bytes();
    load_model_bytes(&bytes, "mha_export", &LoadOptions::default()).unwrap()
}

fn compile_f32(mut graph: Graph) -> ModelProgram {
    apply_attrs(&mut graph, None).unwrap();
    propagate(&mut graph, &PropagateOptions::default()).unwrap();
    prepare(&mut graph, &RewriteOptions::default()).unwrap();
    let p = plan(&graph, &PlanOptions::default()).unwrap();
    lower_model(&graph, &p, &ModelOptions::default(), &mut |_, _| {}).unwrap()
}

/// The pipeline of `spartac compile --dtype f16`.
fn compile_f16(mut graph: Graph) -> ModelProgram {
    apply_attrs(&mut graph, None).unwrap();
    propagate(&mut graph, &PropagateOptions::default()).unwrap();
    prepare_for_lowering(&mut graph, true).unwrap();
    spartac::rewrite::to_half(&mut graph, DType::F16).unwrap();
    let p = plan(&graph, &PlanOptions::default()).unwrap();
    lower_model(&graph, &p, &ModelOptions::default(), &mut |_, _| {}).unwrap()
}

/// The op types of each step's nodes (a planned matmul: `Spmm`).
fn step_ops(model: &ModelProgram) -> Vec<(String, Vec<String>)> {
    let ops = |op: &Op| match op {
        Op::Nodes(nodes) => nodes.iter().map(|n| n.op_type.clone()).collect(),
        _ => vec!["Spmm".to_string()],
    };
    model.program.steps.iter().map(|s| (s.label.clone(), ops(&s.op))).collect()
}

/// Asserts that the attention step `pv` reads Q, K and V from one buffer at the offsets of the
/// three packed parts (0, E, 2E); its kernel.
fn assert_reads_packed_qkv(model: &ModelProgram, what: &str) -> spartac::program::KernelId {
    let step = model.program.steps.iter().find(|s| s.label == "pv").unwrap();
    let Launch::Kernel { kernel, args, .. } = &step.launches[0] else { panic!("{what}: a kernel") };
    let parts: Vec<(BufferId, usize)> = args[..3]
        .iter()
        .map(|a| match a {
            Arg::Buf(b, at) => (*b, *at),
            other => panic!("{what}: {other:?}"),
        })
        .collect();
    assert_eq!(parts, [(parts[0].0, 0), (parts[0].0, E), (parts[0].0, 2 * E)], "{what}");
    *kernel
}

#[test]
fn a_multihead_attention_export_reads_q_k_and_v_in_place_with_its_scales() {
    for (what, model) in [("f32", compile_f32(mha_block())), ("f16", compile_f16(mha_block()))] {
        let text = model.program.to_text();
        let steps = step_ops(&model);
        let attention: Vec<_> = steps.iter().filter(|(_, ops)| ops.contains(&"Softmax".to_string())).collect();
        assert_eq!(attention.len(), 1, "{what}: one step has the softmax\n{text}");
        assert_eq!(model.program.kernels.iter().filter(|k| k.name.starts_with("attention_")).count(), 1, "{what}");
        // The attention step holds the head split, the scales and the merge for the CPU executor.
        let inside = &attention[0].1;
        for op in ["Gather", "Mul", "Squeeze", "Unsqueeze", "Reshape", "Transpose", "MatMul"] {
            assert!(inside.contains(&op.to_string()), "{what}: the attention step runs no {op}: {inside:?}");
        }
        // Outside it: no copy of Q, K or V (no Gather, Mul or Transpose step; the sequence-first
        // Transpose moved below the projection, into the attention's chains); the last
        // Transpose is read through strides by the residual Add's kernel.
        for (label, ops) in steps.iter().filter(|(_, ops)| !ops.contains(&"Softmax".to_string())) {
            for op in ops {
                assert!(!["Gather", "Mul", "Squeeze"].contains(&op.as_str()), "{what}: step {label} runs {op}\n{text}");
            }
            assert!(ops.iter().any(|op| op != "Transpose"), "{what}: step {label} is a copy\n{text}");
        }
        // LN (with the input's cast in f16), the QKV projection, the attention, the output
        // projection, the residual Add with the last Transpose (and the output's cast in f16).
        let labels: Vec<&str> = steps.iter().map(|(label, _)| label.as_str()).collect();
        assert_eq!(labels[..4], ["ln", "mm_qkv", "pv", "out_proj"], "{what}: {steps:?}");
        assert_eq!(labels.len(), 5, "{what}: {steps:?}");
        // Its kernel reads Q, K and V from the projection's one buffer, at the offsets of the
        // three packed parts, and scales the raw scores by both constants (1/⁴√16 = 0.5).
        let kernel = assert_reads_packed_qkv(&model, what);
        let source = &model.program.kernels[kernel.0 as usize].source;
        assert!(source.contains("((float)(((float)(v0 * (0.5f))) * (0.5f)))"), "{what}: the scales\n{source}");
        let reference = mha_block();
        let tolerance = if what == "f32" { 1e-5 } else { 1e-2 };
        let worst = assert_compiled_matches(&reference, &model, &[1, 2, 3], tolerance, what);
        eprintln!("{what}: worst relative error {worst:.3e}");
        nvrtc_compiles(&model);
    }
}

/// Largest normwise relative difference of the outputs of `a` and `b` on random inputs.
fn gap(a: &Graph, b: &Graph) -> f64 {
    let mut worst: f64 = 0.0;
    for seed in 0..3 {
        let inputs = random_inputs(a, seed);
        let (ya, yb) = (execute(a, &inputs).unwrap(), execute(b, &inputs).unwrap());
        for ((_, ta), (_, tb)) in ya.iter().zip(&yb) {
            assert_eq!(ta.shape(), tb.shape());
            worst = worst.max(spartac_runtime::exec::model::relative_error(ta, tb));
        }
    }
    worst
}

/// The node that writes value `name`.
fn producer<'a>(graph: &'a Graph, name: &str) -> &'a spartac::ir::Node {
    let v = graph.find_value(name).unwrap();
    graph.nodes.iter().find(|n| n.outputs.contains(&v)).unwrap()
}

#[test]
fn the_sequence_first_transpose_moves_below_the_projection_an_attention_reads() {
    let before = mha_block();
    let mut graph = before.clone();
    let report = sink_transposes(&mut graph).unwrap();
    assert_eq!((report.sunk, report.with_bias), (1, 1), "{report:?}");
    // The projection reads the LayerNorm's rows; the bias Add's output goes through the moved
    // Transpose to the head split, which reads the value it read before.
    let mm = graph.nodes.iter().find(|n| n.name == "mm_qkv").unwrap();
    assert_eq!(mm.inputs[0], graph.find_value("n"));
    assert_eq!(graph.fact(mm.outputs[0]).shape, [B, S, 3 * E]);
    let moved = producer(&graph, "qkv");
    assert_eq!((moved.op_type.as_str(), moved.name.as_str()), ("Transpose", "seq_first.sunk"));
    assert_eq!(graph.fact(moved.inputs[0].unwrap()).shape, [B, S, 3 * E]);
    assert!(graph.find_value("ns").is_none(), "the sequence-first activation is gone");
    assert_eq!(gap(&before, &graph), 0.0, "the same sums in the same order");
    assert_eq!(sink_transposes(&mut graph).unwrap().sunk, 0, "nothing left to move");
}

#[test]
fn a_transpose_before_a_projection_read_by_anything_else_stays() {
    // The packed projection is a graph output too: the moved Transpose would be a copy of it.
    let mut graph = mha_block_with(true);
    assert_eq!(sink_transposes(&mut graph).unwrap().sunk, 0);
    // The projection still reads the sequence-first Transpose of the LayerNorm's rows.
    let mm = graph.nodes.iter().find(|n| n.name == "mm_qkv").unwrap();
    assert_eq!(mm.inputs[0], graph.find_value("ns"));
    assert_eq!(producer(&graph, "ns").name, "seq_first");
}

#[test]
fn the_batch_first_transpose_after_the_output_projection_moves_into_the_head_merge() {
    let before = mha_block();
    let mut graph = before.clone();
    let report = sink_transposes(&mut graph).unwrap();
    assert_eq!(report.hoisted, 1, "{report:?}");
    // The heads merge straight to batch-first rows, the projection runs on them, and its
    // Reshape gives the residual Add the batch-first value: no Transpose after the projection.
    let merge = producer(&graph, "om");
    assert_eq!(merge.attrs.ints_opt("perm").unwrap(), Some(&[0i64, 2, 1, 3][..]));
    assert_eq!(graph.fact(graph.find_value("om").unwrap()).shape, [B, S, H, E / H]);
    assert!(graph.nodes.iter().all(|n| n.name != "batch_first"), "{}", print_graph(&graph));
    let to_residual = producer(&graph, "ob");
    assert_eq!((to_residual.op_type.as_str(), to_residual.name.as_str()), ("Reshape", "seq"));
    assert_eq!(graph.fact(graph.find_value("ob").unwrap()).shape, [B, S, E]);
    assert_eq!(gap(&before, &graph), 0.0, "each row's sums as before, the rows in another order");
    assert_eq!(sink_transposes(&mut graph).unwrap().hoisted, 0, "nothing left to move");
    // Where the projection's output has another reader, nothing moves.
    let mut kept = mha_block();
    let op = kept.find_value("op").unwrap();
    kept.outputs.push(op);
    assert_eq!(sink_transposes(&mut kept).unwrap().hoisted, 0);
}

/// One GPT-2 block's data path as the zoo's export has it: the packed Q/K/V `Gemm` on rows,
/// `Reshape` back to `[B, S, 3E]`, a `Split` into Q, K and V, the heads split by `Reshape` and
/// `Transpose`, a scaled and additively masked (causal) attention, the heads merged, and the MLP's
/// first `Gemm` followed by a `Reshape` and GELU in its tanh form, spelled with `Pow(x, 3)`;
/// `S` tokens.
fn gpt2_block(s: usize) -> Graph {
    let d = E / H;
    let (rows, f) = ((B * s) as i64, 4 * E);
    let mask: Vec<f32> = (0..s * s).map(|i| if i % s <= i / s { 0.0 } else { -1e4 }).collect();
    let scalar = |v: f32| Tensor::from_vec(vec![], vec![v]);
    let mut b = ModelBuilder::new("gpt2_block", 18)
        .input("x", DType::F32, &fixed(&[B, s, E]))
        .output("y", DType::F32, &fixed(&[B, s, f]))
        .init("w_attn", &seeded(&[E, 3 * E], 11, 0.01))
        .init("b_attn", &seeded(&[3 * E], 13, 0.01))
        .init("w_fc", &seeded(&[E, f], 17, 0.01))
        .init("b_fc", &seeded(&[f], 19, 0.01))
        .init("mask", &Tensor::from_vec(vec![1, 1, s, s], mask))
        .init("shape_rows", &ints(&[rows, E as i64]))
        .init("shape_packed", &ints(&[B as i64, s as i64, 3 * E as i64]))
        .init("shape_heads", &ints(&[B as i64, s as i64, H as i64, d as i64]))
        .init("shape_wide", &ints(&[B as i64, s as i64, f as i64]))
        .init("scale", &scalar(1.0 / (d as f32).sqrt()))
        .init("half", &scalar(0.5))
        .init("three", &scalar(3.0))
        .init("c", &scalar(0.044715))
        .init("k", &scalar((2.0 / std::f32::consts::PI).sqrt()))
        .init("one", &scalar(1.0))
        .node("rows", "Reshape", &["x", "shape_rows"], &["xr"], vec![])
        .node("c_attn", "Gemm", &["xr", "w_attn", "b_attn"], &["qkv"], vec![])
        .node("packed", "Reshape", &["qkv", "shape_packed"], &["qkv3"], vec![])
        .node("split", "Split", &["qkv3"], &["q0", "k0", "v0"], vec![("axis", A::I(2)), ("num_outputs", A::I(3))]);
    for p in ["q", "k", "v"] {
        let perm = if p == "k" { vec![0, 2, 3, 1] } else { vec![0, 2, 1, 3] };
        b = b
            .node(&format!("heads_{p}"), "Reshape", &[&format!("{p}0"), "shape_heads"], &[&format!("{p}1")], vec![])
            .node(
                &format!("t_{p}"),
                "Transpose",
                &[&format!("{p}1")],
                &[&format!("{p}2")],
                vec![("perm", A::Is(perm))],
            );
    }
    let bytes = b
        .node("scores", "MatMul", &["q2", "k2"], &["s"], vec![])
        .node("scaled", "Mul", &["s", "scale"], &["ss"], vec![])
        .node("masked", "Add", &["ss", "mask"], &["sm"], vec![])
        .node("softmax", "Softmax", &["sm"], &["pr"], vec![("axis", A::I(-1))])
        .node("pv", "MatMul", &["pr", "v2"], &["o"], vec![])
        .node("merge", "Transpose", &["o"], &["om"], vec![("perm", A::Is(vec![0, 2, 1, 3]))])
        .node("merged_rows", "Reshape", &["om", "shape_rows"], &["or"], vec![])
        .node("c_fc", "Gemm", &["or", "w_fc", "b_fc"], &["h"], vec![])
        .node("wide", "Reshape", &["h", "shape_wide"], &["hw"], vec![])
        .node("g_half", "Mul", &["hw", "half"], &["g1"], vec![])
        .node("g_cube", "Pow", &["hw", "three"], &["g2"], vec![])
        .node("g_c", "Mul", &["g2", "c"], &["g3"], vec![])
        .node("g_sum", "Add", &["hw", "g3"], &["g4"], vec![])
        .node("g_k", "Mul", &["g4", "k"], &["g5"], vec![])
        .node("g_tanh", "Tanh", &["g5"], &["g6"], vec![])
        .node("g_one", "Add", &["g6", "one"], &["g7"], vec![])
        .node("g_out", "Mul", &["g1", "g7"], &["y"], vec![])
        .bytes();
    load_model_bytes(&bytes, "gpt2_block", &LoadOptions::default()).unwrap()
}

/// GPT-2's block: the attention reads Q, K and V in place from the packed projection through
/// the Split (no copy step), and the tanh GELU behind a Reshape is the MLP matmul's epilogue
/// (no elementwise step), in f32 and f16; the program computes what the graph computes.
#[test]
fn gpt2_reads_its_split_projection_in_place_and_fuses_the_tanh_gelu_behind_a_reshape() {
    for (what, model) in [("f32", compile_f32(gpt2_block(S))), ("f16", compile_f16(gpt2_block(S)))] {
        let text = model.program.to_text();
        let steps = step_ops(&model);
        let labels: Vec<&str> = steps.iter().map(|(label, _)| label.as_str()).collect();
        // The projection, the attention (with the Split for the CPU executor), the MLP matmul
        // with its GELU; in f16 also the casts of the input and the output.
        let core: Vec<&str> = labels.iter().copied().filter(|l| !l.contains("cast")).collect();
        assert_eq!(core, ["c_attn", "pv", "c_fc"], "{what}: {steps:?}");
        let attention = &steps.iter().find(|(l, _)| l == "pv").unwrap().1;
        assert!(attention.contains(&"Split".to_string()), "{what}: {attention:?}");
        for (label, ops) in &steps {
            for op in ["Tanh", "Pow"] {
                assert!(!ops.contains(&op.to_string()), "{what}: step {label} runs {op}\n{text}");
            }
        }
        // Q, K and V at the offsets of their parts of the one projection buffer.
        assert_reads_packed_qkv(&model, what);
        let tolerance = if what == "f32" { 1e-5 } else { 1e-2 };
        let worst = assert_compiled_matches(&gpt2_block(S), &model, &[1, 2, 3], tolerance, what);
        eprintln!("{what}: worst relative error {worst:.3e}");
        nvrtc_compiles(&model);
    }
}

/// A causal mask of 130 tokens: the f16 attention (the wgmma kernel, key tiles of 128, query
/// tiles of 64) walks one key tile for the first two query tiles and both for the last, the
/// mask found by evaluating its score expression; the program still computes the graph.
#[test]
fn a_causal_attention_walks_only_the_key_tiles_its_queries_see() {
    let s = 130;
    let model = compile_f16(gpt2_block(s));
    let attention = model.program.kernels.iter().find(|k| k.name.starts_with("attention_")).unwrap();
    assert!(attention.source.contains("KT_END[QT] = { 1, 1, 2 }"), "{}", attention.source);
    assert_compiled_matches(&gpt2_block(s), &model, &[1], 1e-2, "f16");
    nvrtc_compiles(&model);
    // f32 runs the 3xTF32 kernel, which walks every key.
    let model = compile_f32(gpt2_block(s));
    let attention = model.program.kernels.iter().find(|k| k.name.starts_with("attention_")).unwrap();
    assert!(!attention.source.contains("KT_END"));
}

/// Self-attention over `x`'s heads (no projections) with a mask made as GPT-2's export makes
/// it: `Where(And(causal, pad), 0, lowest)` with `pad` a run-time bool input `[B, 1, 1, S]`
/// (`runtime_float`: the additive mask itself a run-time f32 input `[B, 1, S, S]`).
fn masked_attention(s: usize, runtime_float: bool) -> Graph {
    masked_attention_with(s, runtime_float, false)
}

/// [`masked_attention`]; `pad_int`: the padding a run-time i64 input `[B, 1, 1, S]` cast to
/// bool (the exporters' `attention_mask.bool()`).
fn masked_attention_with(s: usize, runtime_float: bool, pad_int: bool) -> Graph {
    let d = E / H;
    let tri: Vec<bool> = (0..s * s).map(|i| i % s <= i / s).collect();
    let scalar = |v: f32| Tensor::from_vec(vec![], vec![v]);
    let mut b = ModelBuilder::new("masked_attention", 18)
        .input("x", DType::F32, &fixed(&[B, s, E]))
        .output("y", DType::F32, &fixed(&[B, s, E]))
        .init("shape_heads", &ints(&[B as i64, s as i64, H as i64, d as i64]))
        .init("shape_out", &ints(&[B as i64, s as i64, E as i64]))
        .init("scale", &scalar(1.0 / (d as f32).sqrt()));
    if runtime_float {
        b = b.input("m", DType::F32, &fixed(&[B, 1, s, s]));
    } else {
        b = if pad_int {
            b.input("pad_i", DType::I64, &fixed(&[B, 1, 1, s])).node(
                "pad_bool",
                "Cast",
                &["pad_i"],
                &["pad"],
                vec![("to", A::I(9))],
            )
        } else {
            b.input("pad", DType::Bool, &fixed(&[B, 1, 1, s]))
        };
        b = b
            .init("tri", &Tensor::from_vec(vec![1, 1, s, s], tri))
            .init("zero", &scalar(0.0))
            .init("lowest", &scalar(f32::MIN))
            .node("visible", "And", &["tri", "pad"], &["vis"], vec![])
            .node("mask", "Where", &["vis", "zero", "lowest"], &["m"], vec![]);
    }
    let bytes = b
        .node("heads", "Reshape", &["x", "shape_heads"], &["xh"], vec![])
        .node("t_q", "Transpose", &["xh"], &["q"], vec![("perm", A::Is(vec![0, 2, 1, 3]))])
        .node("t_k", "Transpose", &["xh"], &["k"], vec![("perm", A::Is(vec![0, 2, 3, 1]))])
        .node("scores", "MatMul", &["q", "k"], &["sc"], vec![])
        .node("scaled", "Mul", &["sc", "scale"], &["ss"], vec![])
        .node("masked", "Add", &["ss", "m"], &["sm"], vec![])
        .node("softmax", "Softmax", &["sm"], &["pr"], vec![("axis", A::I(-1))])
        .node("pv", "MatMul", &["pr", "q"], &["o"], vec![])
        .node("merge", "Transpose", &["o"], &["om"], vec![("perm", A::Is(vec![0, 2, 1, 3]))])
        .node("rows", "Reshape", &["om", "shape_out"], &["y"], vec![])
        .bytes();
    load_model_bytes(&bytes, "masked_attention", &LoadOptions::default()).unwrap()
}

/// The causal structure is found through a run-time bool input (every assignment of it is
/// tried): the key walk ends as for a constant mask, and the program computes the graph on
/// random padding. A run-time float mask could hide anything: every key is walked.
#[test]
fn a_causal_mask_anded_with_runtime_padding_still_ends_the_key_walk() {
    let s = 130;
    let model = compile_f16(masked_attention(s, false));
    let attention = model.program.kernels.iter().find(|k| k.name.starts_with("attention_")).unwrap();
    assert!(attention.source.contains("KT_END[QT] = { 1, 1, 2 }"), "{}", attention.source);
    assert_compiled_matches(&masked_attention(s, false), &model, &[1, 2], 1e-2, "f16 bool padding");
    let model = compile_f16(masked_attention(s, true));
    let attention = model.program.kernels.iter().find(|k| k.name.starts_with("attention_")).unwrap();
    assert!(!attention.source.contains("KT_END"), "a run-time float mask");
    // An integer padding input cast to bool is any bool per element too: the walk still ends.
    let graph = masked_attention_with(s, false, true);
    let model = compile_f16(graph.clone());
    let attention = model.program.kernels.iter().find(|k| k.name.starts_with("attention_")).unwrap();
    assert!(attention.source.contains("KT_END[QT] = { 1, 1, 2 }"), "{}", attention.source);
    assert_compiled_matches(&graph, &model, &[1, 2], 1e-2, "f16 i64 padding cast to bool");
}
