//! `rewrite::channels_last` through model lowering, without a GPU: small models built in the
//! test (Whisper's Conv1d stem, conv → pool → conv, a DenseNet block's Concats, the end of a
//! ViT layer's attention) compile, their channels-last kernels (and a LayerNorm reading through
//! a row Transpose) replace the layout Transposes (counted in the program's steps), and
//! the compiled program run on the CPU executor matches the reference executor; every kernel
//! NVRTC-compiles.

use spartac::frontend::{load_model_bytes, LoadOptions};
use spartac::ir::{DType, Graph, Tensor};
use spartac::plan::{plan, PlanOptions};
use spartac::program::model::{lower_model, ModelOptions, ModelProgram};
use spartac::program::{Op, Operand};
use spartac::propagate::{propagate, PropagateOptions};
use spartac::rewrite::{prepare, RewriteOptions, RewriteReport};
use spartac::tesa::attrs::apply_attrs;
use spartac_tests::builder::{fixed, ModelBuilder, A};
use spartac_tests::compiled::{assert_compiled_matches, nvrtc_compiles};

/// `graph` through the rewrites, the plan and model lowering (dense, default options).
fn compile(mut graph: Graph) -> (RewriteReport, Graph, ModelProgram) {
    apply_attrs(&mut graph, None).unwrap();
    propagate(&mut graph, &PropagateOptions::default()).unwrap();
    let report = prepare(&mut graph, &RewriteOptions::default()).unwrap();
    let p = plan(&graph, &PlanOptions::default()).unwrap();
    let model = lower_model(&graph, &p, &ModelOptions::default(), &mut |_, _| {}).unwrap();
    (report, graph, model)
}

/// The op types of every node the program's steps compute, one list per step.
fn step_ops(model: &ModelProgram) -> Vec<Vec<String>> {
    model
        .program
        .steps
        .iter()
        .map(|s| match &s.op {
            Op::Nodes(nodes) => nodes.iter().map(|n| n.op_type.clone()).collect(),
            _ => vec![],
        })
        .collect()
}

/// Steps that move a layout and compute nothing else: only Transposes (and elementwise ops
/// fused with them do not count as such; a step that holds a Conv or a pool does not either).
fn transpose_steps(model: &ModelProgram) -> usize {
    step_ops(model)
        .iter()
        .filter(|ops| {
            ops.iter().any(|o| o == "Transpose")
                && !ops.iter().any(|o| o == "Conv" || o == "MaxPool" || o == "AveragePool")
        })
        .count()
}

fn weights(shape: &[usize], seed: usize) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_vec(shape.to_vec(), (0..n).map(|i| (((i * 7 + seed * 13) % 23) as f32 - 11.0) / 20.0).collect())
}

/// Appends GELU in the erf form torch exports (`x · 0.5 · (1 + erf(x / √2))`), `x` → `y`.
fn gelu(b: ModelBuilder, x: &str, y: &str) -> ModelBuilder {
    let (d, e, a, m) = (format!("{y}.div"), format!("{y}.erf"), format!("{y}.add"), format!("{y}.half"));
    b.node(&format!("{y}_div"), "Div", &[x, "sqrt2"], &[&d], vec![])
        .node(&format!("{y}_erf"), "Erf", &[&d], &[&e], vec![])
        .node(&format!("{y}_add"), "Add", &[&e, "one"], &[&a], vec![])
        .node(&format!("{y}_half"), "Mul", &["half", &a], &[&m], vec![])
        .node(&format!("{y}_mul"), "Mul", &[x, &m], &[y], vec![])
}

fn gelu_constants(b: ModelBuilder) -> ModelBuilder {
    let scalar = |v: f32| Tensor::from_vec(vec![], vec![v]);
    b.init("sqrt2", &scalar(std::f32::consts::SQRT_2)).init("one", &scalar(1.0)).init("half", &scalar(0.5))
}

/// Whisper's stem: Conv1d (k 3, pad 1) → GELU → Conv1d (k 3, stride 2, pad 1) → GELU →
/// `permute(0, 2, 1)`. Both convolutions run as NHWC conv kernels (height 1) with the GELU
/// in separate steps, the permute cancels against the layout (an Identity, no copy), and the
/// compiled model computes what the graph does. With a bias on the first conv and without.
#[test]
fn whisper_conv1d_stem_compiles_to_nhwc_conv_kernels_and_matches_the_reference() {
    let (n, c_in, c, l) = (2, 6, 8, 20);
    for with_bias in [false, true] {
        let mut b = ModelBuilder::new("conv1d_stem", 18)
            .input("x", DType::F32, &fixed(&[n, c_in, l]))
            .output("y", DType::F32, &fixed(&[n, l / 2, c]))
            .init("w1", &weights(&[c, c_in, 3], 1))
            .init("w2", &weights(&[c, c, 3], 2))
            .init("b1", &weights(&[c], 3));
        b = gelu_constants(b);
        let conv1_in: Vec<&str> = if with_bias { vec!["x", "w1", "b1"] } else { vec!["x", "w1"] };
        b = b.node(
            "conv1",
            "Conv",
            &conv1_in,
            &["c1"],
            vec![("kernel_shape", A::Is(vec![3])), ("pads", A::Is(vec![1, 1]))],
        );
        b = gelu(b, "c1", "g1");
        b = b.node(
            "conv2",
            "Conv",
            &["g1", "w2"],
            &["c2"],
            vec![("kernel_shape", A::Is(vec![3])), ("pads", A::Is(vec![1, 1])), ("strides", A::Is(vec![2]))],
        );
        b = gelu(b, "c2", "g2");
        b = b.node("permute", "Transpose", &["g2"], &["y"], vec![("perm", A::Is(vec![0, 2, 1]))]);
        let original = load_model_bytes(&b.bytes(), "conv1d_stem", &LoadOptions::default()).unwrap();
        let (report, graph, model) = compile(original.clone());
        assert_eq!((report.layout.convs, report.layout.transposes_cancelled), (2, 1), "bias {with_bias}");
        // One Transpose into NLC at the input; none back out.
        assert_eq!(report.layout.border_transposes, 1, "bias {with_bias}");
        assert!(graph.nodes.iter().any(|n| n.op_type == "Identity"), "bias {with_bias}");
        let convs = model.program.kernels.iter().filter(|k| k.name.starts_with("conv_")).count();
        assert_eq!(convs, 2, "bias {with_bias}");
        assert_eq!(transpose_steps(&model), 1, "bias {with_bias}: {:?}", step_ops(&model));
        assert_compiled_matches(&original, &model, &[1, 2], 1e-5, "");
        nvrtc_compiles(&model);
    }
}

/// A grouped, dilated Conv1d with `SAME_UPPER` padding and a width-1 Conv1d (a MatMul
/// channels last), the output read back channels first: the model matches the reference.
#[test]
fn grouped_dilated_and_pointwise_conv1d_match_the_reference() {
    let (n, c, l) = (2, 8, 17);
    let b = ModelBuilder::new("conv1d_mixed", 18)
        .input("x", DType::F32, &fixed(&[n, c, l]))
        .output("y", DType::F32, &fixed(&[n, 6, l]))
        .init("wg", &weights(&[c, c / 2, 3], 4))
        .init("bg", &weights(&[c], 5))
        .init("wp", &weights(&[6, c, 1], 6))
        .node(
            "grouped",
            "Conv",
            &["x", "wg", "bg"],
            &["g"],
            vec![
                ("kernel_shape", A::Is(vec![3])),
                ("group", A::I(2)),
                ("dilations", A::Is(vec![2])),
                ("auto_pad", A::S("SAME_UPPER")),
            ],
        )
        .node("relu", "Relu", &["g"], &["r"], vec![])
        .node("pointwise", "Conv", &["r", "wp"], &["y"], vec![]);
    let original = load_model_bytes(&b.bytes(), "conv1d_mixed", &LoadOptions::default()).unwrap();
    let (report, _, model) = compile(original.clone());
    assert_eq!((report.layout.convs, report.layout.pointwise), (1, 1));
    assert_compiled_matches(&original, &model, &[3, 4], 1e-5, "");
    nvrtc_compiles(&model);
}

/// A 3×3 convolution with `c_in` input and `c_out` output channels, padding 1, `x` → `y`.
fn conv3x3(b: ModelBuilder, name: &str, x: &str, w: &str, y: &str) -> ModelBuilder {
    b.node(name, "Conv", &[x, w], &[y], vec![("kernel_shape", A::Is(vec![3, 3])), ("pads", A::Is(vec![1, 1, 1, 1]))])
}

/// Conv → Relu → MaxPool (3×3, stride 2, padded, ceil mode) → Conv → AveragePool (2×3,
/// padded, the padding not counted) → Conv: both pools run channels last inside the NHWC region
/// (one kernel each, no Transpose computed between the convolutions: the only layout steps are
/// the input's into NHWC and the output's back), and the model computes what the graph does.
#[test]
fn pools_between_convolutions_stay_nhwc_and_match_the_reference() {
    let b = ModelBuilder::new("conv_pool_conv", 18)
        .input("x", DType::F32, &fixed(&[2, 4, 13, 12]))
        .output("y", DType::F32, &fixed(&[2, 5, 4, 3]))
        .init("w1", &weights(&[8, 4, 3, 3], 1))
        .init("w2", &weights(&[6, 8, 3, 3], 2))
        .init("w3", &weights(&[5, 6, 3, 3], 3));
    let b = conv3x3(b, "conv1", "x", "w1", "c1").node("relu", "Relu", &["c1"], &["r1"], vec![]).node(
        "max",
        "MaxPool",
        &["r1"],
        &["m"],
        vec![
            ("kernel_shape", A::Is(vec![3, 3])),
            ("strides", A::Is(vec![2, 2])),
            ("pads", A::Is(vec![1, 1, 1, 1])),
            ("ceil_mode", A::I(1)),
        ],
    );
    let b = conv3x3(b, "conv2", "m", "w2", "c2").node(
        "avg",
        "AveragePool",
        &["c2"],
        &["a"],
        vec![("kernel_shape", A::Is(vec![2, 3])), ("strides", A::Is(vec![2, 2])), ("pads", A::Is(vec![1, 0, 0, 1]))],
    );
    let b = conv3x3(b, "conv3", "a", "w3", "y");
    let original = load_model_bytes(&b.bytes(), "conv_pool_conv", &LoadOptions::default()).unwrap();
    let (report, _, model) = compile(original.clone());
    assert_eq!((report.layout.convs, report.layout.pools), (3, 2));
    assert_eq!(report.layout.border_transposes, 2, "into NHWC at the input, back at the output");
    let pools = model.program.kernels.iter().filter(|k| k.name.contains("pool_nhwc_")).count();
    assert_eq!(pools, 2);
    assert_eq!(transpose_steps(&model), 2, "{:?}", step_ops(&model));
    assert_compiled_matches(&original, &model, &[1, 2], 1e-5, "");
    nvrtc_compiles(&model);
}

/// A DenseNet block in miniature: each layer (Relu → 1×1 conv → Relu → 3×3 conv) reads the
/// Concat of everything before it along the channels, then a transition (1×1 conv, 2×2
/// AveragePool) and a last 3×3 conv. The Concats stay NHWC (along the last axis), no
/// Transpose is computed between the convolutions, and the model computes what the graph does.
#[test]
fn a_densenet_block_concats_in_nhwc_and_matches_the_reference() {
    let original = load_model_bytes(&dense_block(), "dense_block", &LoadOptions::default()).unwrap();
    let (report, graph, model) = compile(original.clone());
    assert_eq!((report.layout.concats, report.layout.pools, report.layout.pointwise), (3, 1, 4));
    assert_eq!(report.layout.border_transposes, 2, "into NHWC at the input, back at the output");
    let last_axis = graph.nodes.iter().filter(|n| n.op_type == "Concat").all(|n| n.attrs.int("axis", 0).unwrap() == 3);
    assert!(last_axis, "the Concats run along the channels-last axis");
    assert_eq!(transpose_steps(&model), 2, "{:?}", step_ops(&model));
    assert_compiled_matches(&original, &model, &[1, 2], 1e-5, "");
    nvrtc_compiles(&model);
}

/// torchvision's DenseNet layer: each reads the Concat of ALL the features before it (the
/// block's input and every earlier layer's output), through a BatchNorm and a ReLU. No Concat
/// is formed: each one's only reader is the BatchNorm affine + ReLU step, which reads the parts
/// in place (`concats read in place`), so there are three fewer steps; the model still computes
/// what the graph does. Growth 4 takes the kernel's four-at-a-time path (every part a multiple
/// of 4 channels), growth 3 picks the part element by element.
#[test]
fn a_concat_read_only_by_a_batchnorm_and_relu_is_never_formed() {
    for growth in [4, 3] {
        let original = load_model_bytes(&dense_block_all(growth), "dense_all", &LoadOptions::default()).unwrap();
        let (report, _, model) = compile(original.clone());
        assert_eq!(report.layout.concats, 3, "growth {growth}");
        assert_eq!(model.stats.fused_concats, 3, "growth {growth}: {:?}", model.stats);
        // The CPU executor computes each Concat inside its reader's step.
        let ops = step_ops(&model);
        let alone = ops.iter().filter(|o| o.as_slice() == ["Concat"]).count();
        let inside = ops.iter().filter(|o| o.len() > 1 && o[0] == "Concat" && o.last().unwrap() == "Relu").count();
        assert_eq!((alone, inside), (0, 3), "growth {growth}: {ops:?}");
        assert_compiled_matches(&original, &model, &[1, 2], 1e-5, "");
        nvrtc_compiles(&model);
    }
}

/// conv0, then three torchvision DenseNet layers (Concat of every feature so far →
/// BatchNormalization → Relu → 1×1 conv → Relu → 3×3 conv giving `growth` channels).
fn dense_block_all(growth: usize) -> Vec<u8> {
    let (n, c0, hw) = (2, 8, 6);
    let mut b = ModelBuilder::new("dense_all", 18)
        .input("x", DType::F32, &fixed(&[n, 3, hw, hw]))
        .output("n2", DType::F32, &fixed(&[n, growth, hw, hw]))
        .init("w0", &weights(&[c0, 3, 3, 3], 1));
    b = conv3x3(b, "conv0", "x", "w0", "f0");
    let mut features = vec!["f0".to_string()];
    let mut channels = c0;
    for layer in 0..3 {
        let l = |what: &str| format!("{what}{layer}");
        let stat = |k: usize, base: f32| {
            Tensor::from_vec(
                vec![channels],
                (0..channels).map(|c| base + ((c * 5 + k * 3 + layer) % 7) as f32 / 10.0).collect(),
            )
        };
        let refs: Vec<&str> = features.iter().map(String::as_str).collect();
        b = b
            .init(&l("scale"), &stat(0, 0.5))
            .init(&l("beta"), &stat(1, -0.3))
            .init(&l("mean"), &stat(2, -0.2))
            .init(&l("var"), &stat(3, 0.4))
            .init(&l("wb"), &weights(&[2 * growth, channels, 1, 1], 2 + layer))
            .init(&l("wn"), &weights(&[growth, 2 * growth, 3, 3], 5 + layer))
            .node(&l("concat"), "Concat", &refs, &[&l("cat")], vec![("axis", A::I(1))])
            .node(
                &l("bn"),
                "BatchNormalization",
                &[&l("cat"), &l("scale"), &l("beta"), &l("mean"), &l("var")],
                &[&l("nrm")],
                vec![],
            )
            .node(&l("relu"), "Relu", &[&l("nrm")], &[&l("r")], vec![])
            .node(&l("bottleneck"), "Conv", &[&l("r"), &l("wb")], &[&l("b")], vec![])
            .node(&l("relu_b"), "Relu", &[&l("b")], &[&l("rb")], vec![]);
        b = conv3x3(b, &l("conv"), &l("rb"), &l("wn"), &l("n"));
        features.push(l("n"));
        channels += growth;
    }
    b.bytes()
}

/// The DenseNet block of the test above: conv0, three layers each reading the Concat of
/// everything before it, a transition and a last 3×3 conv.
fn dense_block() -> Vec<u8> {
    let (n, c0, growth, hw) = (2, 8, 4, 8);
    let mut b = ModelBuilder::new("dense_block", 18)
        .input("x", DType::F32, &fixed(&[n, 3, hw, hw]))
        .output("y", DType::F32, &fixed(&[n, 6, hw / 2, hw / 2]))
        .init("w0", &weights(&[c0, 3, 3, 3], 1));
    b = conv3x3(b, "conv0", "x", "w0", "f0");
    let mut features = "f0".to_string();
    let mut channels = c0;
    for layer in 0..3 {
        let (r, bott, rb, new, cat) = (
            format!("r{layer}"),
            format!("b{layer}"),
            format!("rb{layer}"),
            format!("n{layer}"),
            format!("cat{layer}"),
        );
        let (wb, wn) = (format!("wb{layer}"), format!("wn{layer}"));
        b = b
            .init(&wb, &weights(&[2 * growth, channels, 1, 1], 2 + layer))
            .init(&wn, &weights(&[growth, 2 * growth, 3, 3], 5 + layer))
            .node(&format!("relu{layer}"), "Relu", &[&features], &[&r], vec![])
            .node(&format!("bottleneck{layer}"), "Conv", &[&r, &wb], &[&bott], vec![])
            .node(&format!("relu_b{layer}"), "Relu", &[&bott], &[&rb], vec![]);
        b = conv3x3(b, &format!("conv{layer}"), &rb, &wn, &new).node(
            &format!("concat{layer}"),
            "Concat",
            &[&features, &new],
            &[&cat],
            vec![("axis", A::I(1))],
        );
        features = cat;
        channels += growth;
    }
    b = b
        .init("wt", &weights(&[8, channels, 1, 1], 9))
        .init("wl", &weights(&[6, 8, 3, 3], 10))
        .node("transition", "Conv", &[&features, "wt"], &["t"], vec![])
        .node(
            "avg",
            "AveragePool",
            &["t"],
            &["p"],
            vec![("kernel_shape", A::Is(vec![2, 2])), ("strides", A::Is(vec![2, 2]))],
        );
    b = conv3x3(b, "last", "p", "wl", "y");
    b.bytes()
}

/// Half the filters of every conv pruned (`@conv_weights`, by L1 norm), then the rewrites, the
/// plan and lowering.
fn compile_pruned(mut graph: Graph) -> (RewriteReport, Graph, ModelProgram) {
    let tesa = r#"{"tensors": {"@conv_weights": {"channel_magnitude": {"sparsity": 0.5}}}}"#;
    let attrs = spartac::tesa::attrs::TesaAttrs::parse(tesa).unwrap();
    apply_attrs(&mut graph, Some(&attrs)).unwrap();
    propagate(&mut graph, &PropagateOptions::default()).unwrap();
    let report = prepare(&mut graph, &RewriteOptions::default()).unwrap();
    let p = plan(&graph, &PlanOptions::default()).unwrap();
    let model = lower_model(&graph, &p, &ModelOptions::default(), &mut |_, _| {}).unwrap();
    (report, graph, model)
}

/// The channels (NHWC: the last axis) of the Concats' outputs, in graph order.
fn concat_widths(graph: &Graph) -> Vec<usize> {
    let concats = graph.nodes.iter().filter(|n| n.op_type == "Concat");
    concats.map(|n| *graph.fact(n.outputs[0]).shape.last().unwrap()).collect()
}

/// The DenseNet block with half of every conv's filters pruned: the pruned channels of each
/// layer's output are cut through every Concat that carries them (a Concat's output channel is
/// its input's channel, cut with it), so the Concats narrow and the convs reading them lose
/// those input channels; the program equals the reference with the pruned weights zeroed.
#[test]
fn pruned_channels_are_cut_through_the_concats_of_a_densenet_block() {
    let original = load_model_bytes(&dense_block(), "dense_block", &LoadOptions::default()).unwrap();
    let (_, dense, _) = compile(original.clone());
    assert_eq!(concat_widths(&dense), [12, 16, 20]);
    let (report, graph, model) = compile_pruned(original.clone());
    // conv0 keeps 4 of 8, each layer 2 of 4: the Concats carry 4 + 2, 4 + 2 + 2, 4 + 2 + 2 + 2.
    assert_eq!(concat_widths(&graph), [6, 8, 10], "{:?}", report.shrink);
    assert!(report.shrink.channels_after < report.shrink.channels_before, "{:?}", report.shrink);
    let mut pruned = original;
    let tesa = r#"{"tensors": {"@conv_weights": {"channel_magnitude": {"sparsity": 0.5}}}}"#;
    apply_attrs(&mut pruned, Some(&spartac::tesa::attrs::TesaAttrs::parse(tesa).unwrap())).unwrap();
    assert_compiled_matches(&pruned, &model, &[1, 2], 1e-5, "");
    nvrtc_compiles(&model);
}

/// SqueezeNet's fire module twice: squeeze 1×1 → Relu → (expand 1×1, expand 3×3) → Relu →
/// Concat, the second fire reading the first's Concat, and one of the Concats also a residual
/// (an Add of two Concats: one class on the Add's side, tied channel by channel to both
/// Concats' inputs). Pruned channels are cut on both sides of every Concat; the program equals
/// the reference of the pruned model.
#[test]
fn pruned_fire_modules_cut_channels_through_their_concats_and_a_residual_join() {
    let (n, hw) = (2, 6);
    let mut b = ModelBuilder::new("fire", 18)
        .input("x", DType::F32, &fixed(&[n, 3, hw, hw]))
        .output("y", DType::F32, &fixed(&[n, 5, hw, hw]))
        .init("w0", &weights(&[16, 3, 3, 3], 1));
    b = conv3x3(b, "conv0", "x", "w0", "c0");
    b = b.node("relu0", "Relu", &["c0"], &["f0"], vec![]);
    let mut input = "f0".to_string();
    for fire in 0..2 {
        let name = |s: &str| format!("{s}{fire}");
        b = b
            .init(&name("ws"), &weights(&[4, 16, 1, 1], 2 + 3 * fire))
            .init(&name("we1_"), &weights(&[8, 4, 1, 1], 3 + 3 * fire))
            .init(&name("we3_"), &weights(&[8, 4, 3, 3], 4 + 3 * fire))
            .node(&name("squeeze"), "Conv", &[&input, &name("ws")], &[&name("s")], vec![])
            .node(&name("relu_s"), "Relu", &[&name("s")], &[&name("rs")], vec![])
            .node(&name("expand1_"), "Conv", &[&name("rs"), &name("we1_")], &[&name("e1_")], vec![])
            .node(&name("relu_e1_"), "Relu", &[&name("e1_")], &[&name("r1_")], vec![]);
        b = conv3x3(b, &name("expand3_"), &name("rs"), &name("we3_"), &name("e3_"))
            .node(&name("relu_e3_"), "Relu", &[&name("e3_")], &[&name("r3_")], vec![])
            .node(&name("concat"), "Concat", &[&name("r1_"), &name("r3_")], &[&name("cat")], vec![("axis", A::I(1))]);
        input = name("cat");
    }
    b = b.node("residual", "Add", &["cat0", "cat1"], &["sum"], vec![]).init("wl", &weights(&[5, 16, 3, 3], 9));
    b = conv3x3(b, "last", "sum", "wl", "y");
    let original = load_model_bytes(&b.bytes(), "fire", &LoadOptions::default()).unwrap();
    let (report, graph, model) = compile_pruned(original.clone());
    let widths = concat_widths(&graph);
    assert!(widths.iter().all(|&w| w < 16), "the Concats narrow: {widths:?} ({:?})", report.shrink);
    assert_eq!(widths[0], widths[1], "the residual join ties both Concats");
    let mut pruned = original;
    let tesa = r#"{"tensors": {"@conv_weights": {"channel_magnitude": {"sparsity": 0.5}}}}"#;
    apply_attrs(&mut pruned, Some(&spartac::tesa::attrs::TesaAttrs::parse(tesa).unwrap())).unwrap();
    assert_compiled_matches(&pruned, &model, &[1, 2], 1e-5, "");
    nvrtc_compiles(&model);
}

/// The end of a ViT encoder layer's attention, as torchvision exports it: the output projection
/// runs in `[seq, batch]` row order, `Transpose[1, 0, 2]` brings it back to batch first, the
/// residual Add (and here a position-embedding-like constant broadcast over the batch) and the
/// LayerNorm follow; the sum is read after the LayerNorm too (an output).
fn vit_residual_norm() -> Vec<u8> {
    let (batch, seq, d) = (3, 5, 64);
    let row = |scale: f32| Tensor::from_vec(vec![d], (0..d).map(|i| scale * (i as f32 / d as f32 - 0.5)).collect());
    ModelBuilder::new("vit_residual_norm", 17)
        .input("attn", DType::F32, &fixed(&[seq, batch, d]))
        .input("x", DType::F32, &fixed(&[batch, seq, d]))
        .output("y", DType::F32, &fixed(&[batch, seq, d]))
        .output("r", DType::F32, &fixed(&[batch, seq, d]))
        .init("w", &weights(&[d, d], 3))
        .init("pos", &weights(&[1, seq, d], 5))
        .init("g", &row(1.5))
        .init("b", &row(0.2))
        .node("proj", "MatMul", &["attn", "w"], &["h"], vec![])
        .node("back", "Transpose", &["h"], &["t"], vec![("perm", A::Is(vec![1, 0, 2]))])
        .node("res", "Add", &["t", "x"], &["s"], vec![])
        .node("embed", "Add", &["s", "pos"], &["r"], vec![])
        .node("ln", "LayerNormalization", &["r", "g", "b"], &["y"], vec![("axis", A::I(-1)), ("epsilon", A::F(1e-6))])
        .bytes()
}

/// A Transpose of the row axes before a LayerNorm's residual Add runs in the LayerNorm's kernel:
/// one step for the Transpose, both Adds and the LayerNorm, whose kernel reads the projection
/// through the permuted row strides (row `(b, s)` at `b·64 + s·192`) and the constant at
/// `s·64`, and writes the sum out; the CPU executor computes the graph's nodes and matches the
/// reference, and the kernel compiles.
#[test]
fn a_row_transpose_before_the_residual_add_runs_in_the_layernorm_kernel() {
    let original = load_model_bytes(&vit_residual_norm(), "vit_residual_norm", &LoadOptions::default()).unwrap();
    let (_, _, model) = compile(original.clone());
    let text = model.program.to_text();
    assert_eq!(model.stats.fused_norms, 1, "{text}");
    assert_eq!(model.program.steps.len(), 2, "the projection, then the LayerNorm with its group:\n{text}");
    let ops = step_ops(&model);
    assert_eq!(ops[1], ["Transpose", "Add", "Add", "LayerNormalization"], "{text}");
    let Op::Nodes(nodes) = &model.program.steps[1].op else { panic!("the fused LayerNorm runs its nodes") };
    assert!(matches!(nodes[2].outputs[0], Operand::Buf { .. }), "the sum is written out");
    let kernel = model.program.kernels.iter().find(|k| k.name == "layernorm_fused_ln").expect("the fused kernel");
    let src = &kernel.source;
    assert!(src.contains("in0r = in0 + ((rw0 / 5) * 64 + (rw0 % 5) * 192);"), "the projection, transposed:\n{src}");
    assert!(src.contains("in1r = in1 + row * 64;"), "the residual, in place:\n{src}");
    assert!(src.contains("in2r = in2 + ((rw2 % 5) * 64);"), "the constant, broadcast over the batch:\n{src}");
    assert_compiled_matches(&original, &model, &[1, 2], 1e-5, "");
    nvrtc_compiles(&model);
}

/// A RegNetY-style residual block, each conv followed by a BatchNorm with nonzero shifts: stem
/// 3×3 (16) → BN → Relu = `s`; 1×1 (16) → BN → Relu → grouped 3×3 (16, 4 groups) → BN → Relu →
/// 1×1 (16) → BN, added to `s` → Relu → a last 3×3 conv (5).
fn grouped_residual_block() -> Vec<u8> {
    let (n, c, hw) = (2, 16, 6);
    let stat = |k: usize, base: f32| {
        Tensor::from_vec(vec![c], (0..c).map(|i| base + ((i * 3 + k) % 7) as f32 / 10.0).collect())
    };
    let mut b = ModelBuilder::new("grouped_residual", 18)
        .input("x", DType::F32, &fixed(&[n, 3, hw, hw]))
        .output("y", DType::F32, &fixed(&[n, 5, hw, hw]))
        .init("w_stem", &weights(&[c, 3, 3, 3], 1))
        .init("w_a", &weights(&[c, c, 1, 1], 2))
        .init("w_g", &weights(&[c, c / 4, 3, 3], 3))
        .init("w_c", &weights(&[c, c, 1, 1], 4))
        .init("w_last", &weights(&[5, c, 3, 3], 5));
    for (i, bn) in ["stem", "a", "g", "c"].iter().enumerate() {
        b = b
            .init(&format!("{bn}.scale"), &stat(i, 0.6))
            .init(&format!("{bn}.beta"), &stat(i + 1, -0.2))
            .init(&format!("{bn}.mean"), &stat(i + 2, -0.1))
            .init(&format!("{bn}.var"), &stat(i + 3, 0.5));
    }
    let bn = |b: ModelBuilder, name: &str, x: &str, y: &str| {
        let p = |what: &str| format!("{name}.{what}");
        b.node(
            &format!("bn_{name}"),
            "BatchNormalization",
            &[x, &p("scale"), &p("beta"), &p("mean"), &p("var")],
            &[y],
            vec![],
        )
    };
    b = conv3x3(b, "stem", "x", "w_stem", "c_stem");
    b = bn(b, "stem", "c_stem", "n_stem").node("relu_stem", "Relu", &["n_stem"], &["s"], vec![]);
    b = b.node("a", "Conv", &["s", "w_a"], &["c_a"], vec![]);
    b = bn(b, "a", "c_a", "n_a").node("relu_a", "Relu", &["n_a"], &["r_a"], vec![]);
    b = b.node(
        "g",
        "Conv",
        &["r_a", "w_g"],
        &["c_g"],
        vec![("group", A::I(4)), ("kernel_shape", A::Is(vec![3, 3])), ("pads", A::Is(vec![1, 1, 1, 1]))],
    );
    b = bn(b, "g", "c_g", "n_g").node("relu_g", "Relu", &["n_g"], &["r_g"], vec![]);
    b = b.node("c", "Conv", &["r_g", "w_c"], &["c_c"], vec![]);
    b = bn(b, "c", "c_c", "n_c").node("residual", "Add", &["n_c", "s"], &["r"], vec![]).node(
        "relu_r",
        "Relu",
        &["r"],
        &["rr"],
        vec![],
    );
    conv3x3(b, "last", "rr", "w_last", "y").bytes()
}

/// Coupled pruning of half the channels through the whole compile: the BatchNorms' shifts go
/// with their pruned filters (else the channels would stay live), the residual stream and the
/// grouped conv's class are halved (the grouped conv keeps 2 of its 4 groups), and the program
/// equals the reference of the pruned model; every kernel NVRTC-compiles.
#[test]
fn coupled_pruning_halves_a_grouped_residual_block() {
    let original = load_model_bytes(&grouped_residual_block(), "grouped_residual", &LoadOptions::default()).unwrap();
    let tesa = r#"{"tensors": {"@conv_weights": {"channel_magnitude": {"sparsity": 0.5, "coupled": true}}}}"#;
    let attrs = spartac::tesa::attrs::TesaAttrs::parse(tesa).unwrap();
    let mut graph = original.clone();
    apply_attrs(&mut graph, Some(&attrs)).unwrap();
    let pruned = graph.clone();
    propagate(&mut graph, &PropagateOptions::default()).unwrap();
    let report = prepare(&mut graph, &RewriteOptions::default()).unwrap();
    // Stem/residual, `a`/grouped input and grouped output classes: 16 → 8 each; the input (3)
    // and output (5) classes stay.
    assert_eq!((report.shrink.shrunk, report.shrink.channels_before, report.shrink.channels_after), (3, 56, 32));
    let g = graph.nodes.iter().find(|n| n.attrs.int("group", 1).unwrap_or(1) > 1).expect("the grouped conv");
    assert_eq!(g.attrs.int("group", 1).unwrap(), 2);
    let p = plan(&graph, &PlanOptions::default()).unwrap();
    let model = lower_model(&graph, &p, &ModelOptions::default(), &mut |_, _| {}).unwrap();
    assert_compiled_matches(&pruned, &model, &[1, 2], 1e-5, "");
    nvrtc_compiles(&model);
}

/// A ViT / Swin / ConvNeXt front in miniature: a 4×4-stride-4 patch embedding of the graph
/// input (with bias), GELU-free Relu, a 2×2-stride-2 downsampling of the channels-last result
/// (no bias), and ViT's token readout (`flatten(2).transpose(1, 2)`) as the graph output. Both
/// convolutions become MatMuls of patch rows (none is left a Conv), read from channels first
/// (rows `(c, kh, kw)`) and channels last (`(kh, kw, c)`), and the model computes what the graph
/// does; a padded or strided-apart convolution is left a convolution.
#[test]
fn patch_embeddings_become_matmuls_of_patch_rows_and_match_the_reference() {
    let shape = |v: &[i64]| Tensor::from_vec(vec![v.len()], v.to_vec());
    let b = ModelBuilder::new("patches", 18)
        .input("x", DType::F32, &fixed(&[2, 3, 16, 24]))
        .output("tokens", DType::F32, &fixed(&[2, 6, 5]))
        .init("wp", &weights(&[6, 3, 4, 4], 1))
        .init("bp", &weights(&[6], 2))
        .init("wd", &weights(&[5, 6, 2, 2], 3))
        .init("flat", &shape(&[2, 5, 6]))
        .node(
            "patch",
            "Conv",
            &["x", "wp", "bp"],
            &["p"],
            vec![("kernel_shape", A::Is(vec![4, 4])), ("strides", A::Is(vec![4, 4]))],
        )
        .node("relu", "Relu", &["p"], &["r"], vec![])
        .node(
            "down",
            "Conv",
            &["r", "wd"],
            &["d"],
            vec![("kernel_shape", A::Is(vec![2, 2])), ("strides", A::Is(vec![2, 2]))],
        )
        .node("flatten", "Reshape", &["d", "flat"], &["f"], vec![])
        .node("tokens_t", "Transpose", &["f"], &["tokens"], vec![("perm", A::Is(vec![0, 2, 1]))]);
    let original = load_model_bytes(&b.bytes(), "patches", &LoadOptions::default()).unwrap();
    let (report, graph, model) = compile(original.clone());
    assert_eq!((report.layout.patchify, report.layout.convs), (2, 0), "{:?}", report.layout);
    assert!(!graph.nodes.iter().any(|n| n.op_type == "Conv"));
    assert_compiled_matches(&original, &model, &[1, 2], 1e-5, "");
    nvrtc_compiles(&model);

    // Padding, or a stride other than the kernel, keeps the NHWC convolution kernel.
    for (attrs, out) in [
        (
            vec![
                ("kernel_shape", A::Is(vec![4, 4])),
                ("strides", A::Is(vec![4, 4])),
                ("pads", A::Is(vec![1, 1, 1, 1])),
            ],
            [2, 6, 4, 6],
        ),
        (vec![("kernel_shape", A::Is(vec![4, 4])), ("strides", A::Is(vec![2, 2]))], [2, 6, 7, 11]),
    ] {
        let b = ModelBuilder::new("not_patches", 18)
            .input("x", DType::F32, &fixed(&[2, 3, 16, 24]))
            .output("p", DType::F32, &fixed(&out))
            .init("wp", &weights(&[6, 3, 4, 4], 1))
            .node("patch", "Conv", &["x", "wp"], &["p"], attrs);
        let original = load_model_bytes(&b.bytes(), "not_patches", &LoadOptions::default()).unwrap();
        let (report, _, model) = compile(original.clone());
        assert_eq!((report.layout.patchify, report.layout.convs), (0, 1));
        assert_compiled_matches(&original, &model, &[3], 1e-5, "");
    }
}
