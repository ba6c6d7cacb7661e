//! The graph rewrites after propagation (`spartac::rewrite`) on a small EfficientNet-shaped
//! convnet (stem, an MBConv block with expand / depthwise / project and a residual, a head
//! conv, the global mean, the classifier): the IR after each pass (snapshots), and the
//! outputs of the reference executor before and after each pass on fresh random inputs.

use spartac::frontend::{load_model_bytes, LoadOptions};
use spartac::ir::{print_graph, Graph};
use spartac::propagate::{propagate, PropagateOptions};
use spartac::reference::{execute, random_inputs};
use spartac::rewrite::{channels_last, channels_last_with, shrink_channels};
use spartac::tesa::attrs::{apply_attrs, zero_pruned_initializers, TesaAttrs};
use spartac_tests::builder::small_convnet;

/// The model `bytes` with the attrs file `attrs` applied and propagated, pruned weights zeroed.
fn propagated(bytes: &[u8], attrs: &str) -> Graph {
    let mut graph = load_model_bytes(bytes, "model.onnx", &LoadOptions::default()).unwrap();
    apply_attrs(&mut graph, Some(&TesaAttrs::parse(attrs).unwrap())).unwrap();
    zero_pruned_initializers(&mut graph);
    propagate(&mut graph, &PropagateOptions::default()).unwrap();
    zero_pruned_initializers(&mut graph);
    graph
}

/// `@conv_weights` pruned by `channel_magnitude` with these settings.
fn conv_channels(settings: &str) -> String {
    format!(r#"{{"tensors": {{"@conv_weights": {{"channel_magnitude": {settings}}}}}}}"#)
}

/// The convnet with half the filters of every conv pruned by L1 norm, propagated.
fn pruned() -> Graph {
    let attrs = r#"{"tensors": {"*.weight": {"channel_magnitude": {"sparsity": 0.5}}, "fc.weight": {}}}"#;
    propagated(&small_convnet(), attrs)
}

/// Worst relative difference of the outputs of `a` and `b` over three random inputs.
fn worst_gap(a: &Graph, b: &Graph) -> f64 {
    let mut worst = 0.0f64;
    for seed in 0..3 {
        let inputs = random_inputs(a, seed);
        let (ya, yb) = (execute(a, &inputs).unwrap(), execute(b, &inputs).unwrap());
        for ((na, ta), (nb, tb)) in ya.iter().zip(&yb) {
            assert_eq!(na, nb);
            assert_eq!(ta.shape(), tb.shape());
            for (x, y) in ta.to_f64_vec().iter().zip(tb.to_f64_vec()) {
                worst = worst.max((x - y).abs() / (1.0 + x.abs()));
            }
        }
    }
    worst
}

#[test]
fn shrink_cuts_pruned_channels_and_keeps_outputs() {
    let before = pruned();
    let mut graph = before.clone();
    let report = shrink_channels(&mut graph).unwrap();
    assert!(report.shrunk >= 2, "{report:?}");
    assert!(report.channels_after < report.channels_before, "{report:?}");
    assert!(report.weight_elements_after * 10 <= report.weight_elements_before * 7, "{report:?}");
    let gap = worst_gap(&before, &graph);
    assert!(gap <= 1e-6, "outputs moved by {gap:e}");
    // A second run finds nothing left to cut.
    let again = shrink_channels(&mut graph.clone()).unwrap();
    assert_eq!(again.shrunk, 0, "{again:?}");
    insta::assert_snapshot!(print_graph(&graph));
}

#[test]
fn channels_last_makes_pointwise_convs_matmuls_and_keeps_outputs() {
    let mut before = pruned();
    shrink_channels(&mut before).unwrap();
    let mut graph = before.clone();
    let report = channels_last(&mut graph).unwrap();
    assert_eq!((report.pointwise, report.convs), (3, 2), "{report:?}");
    let ops: Vec<&str> = graph.nodes.iter().map(|n| n.op_type.as_str()).collect();
    assert_eq!(ops.iter().filter(|o| **o == "MatMul").count(), 3, "{ops:?}");
    assert!(!ops.contains(&"GlobalAveragePool"));
    let gap = worst_gap(&before, &graph);
    assert!(gap <= 1e-5, "outputs moved by {gap:e}");
    insta::assert_snapshot!(print_graph(&graph));
}

#[test]
fn dense_pointwise_convs_can_stay_convolutions() {
    // With nothing pruned, every pointwise conv stays a Conv (an NHWC kernel) when asked.
    let dense = load_model_bytes(&small_convnet(), "convnet.onnx", &LoadOptions::default()).unwrap();
    let mut graph = dense.clone();
    let report = channels_last_with(&mut graph, true).unwrap();
    assert_eq!((report.pointwise, report.convs), (0, 5), "{report:?}");
    assert!(!graph.nodes.iter().any(|n| n.op_type == "MatMul"));
    assert!(worst_gap(&dense, &graph) <= 1e-5);
    // Weights with pruned elements keep the MatMul, where the planner's sparse kernels take them.
    // (Unshrunk: once shrink_channels cuts the pruned channels, nothing pruned is left.)
    let before = pruned();
    let mut graph = before.clone();
    let report = channels_last_with(&mut graph, true).unwrap();
    assert_eq!((report.pointwise, report.convs), (3, 2), "{report:?}");
    assert!(worst_gap(&before, &graph) <= 1e-5);
}

#[test]
fn a_graph_output_keeps_its_channels() {
    // The stem's output is also a graph output: its class may not shrink, and the graph stays
    // right.
    let mut graph = pruned();
    let s6 = graph.find_value("s6").unwrap();
    graph.outputs.push(s6);
    let before = graph.clone();
    shrink_channels(&mut graph).unwrap();
    let s6 = graph.find_value("s6").unwrap();
    assert_eq!(graph.fact(s6).shape, vec![2, 8, 8, 8]);
    assert!(worst_gap(&before, &graph) <= 1e-6);
    let mut nhwc = graph.clone();
    channels_last(&mut nhwc).unwrap();
    assert!(worst_gap(&graph, &nhwc) <= 1e-5);
}

/// The rewrites as pipeline passes (`spartac compile --print-ir-after all`): each pass, in
/// order, hands the IR it leaves to the printer, and the texts are a snapshot; the records
/// carry each pass's one-line result.
#[test]
fn the_pipeline_prints_the_ir_after_every_rewrite_pass() {
    use spartac::pipeline::{Pipeline, PrintIrAfter};
    use spartac::rewrite::{prepare_in, RewriteOptions};
    let mut graph = pruned();
    let mut printed: Vec<(String, String)> = vec![];
    let records = {
        let mut pipeline =
            Pipeline::new(PrintIrAfter::All, |pass, ir| printed.push((pass.to_string(), ir.to_string())));
        prepare_in(&mut graph, &RewriteOptions::default(), &mut pipeline).unwrap();
        pipeline.records
    };
    let names: Vec<&str> = records.iter().map(|r| r.name).collect();
    assert_eq!(
        names,
        [
            "narrow_broadcasts",
            "fold_batchnorm",
            "shrink_channels",
            "channels_last",
            "fold_scales",
            "merge_matmuls",
            "sink_transposes"
        ]
    );
    assert!(records[2].result.contains("channel classes shrunk"), "{:?}", records[2]);
    assert_eq!(printed.iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>(), names);
    assert_eq!(printed.last().unwrap().1, print_graph(&graph), "the last text is the graph the rewrites leave");
    let text: String = printed.iter().map(|(pass, ir)| format!("// IR after {pass}\n{ir}\n")).collect();
    insta::assert_snapshot!("ir_after_each_rewrite_pass", text);
}

/// A ResNet-style block on `x[2,3,8,8]`: stem 3×3 conv → BatchNorm (its own parameters, with a
/// nonzero shift) → Relu = `s`; conv `a` 1×1 → BatchNorm → Relu → conv `b` 3×3 → BatchNorm,
/// added to `s` → Relu → head 1×1 conv (6 channels). The two BatchNorms of the block share their
/// parameter tensors, as an exporter shares equal constants (zero shift).
fn residual_block() -> Vec<u8> {
    use spartac::ir::{DType, Tensor};
    use spartac_tests::builder::{fixed, ModelBuilder, A};
    let w = |shape: &[usize], seed: usize| {
        let n: usize = shape.iter().product();
        Tensor::from_vec(shape.to_vec(), (0..n).map(|i| (((i * 7 + seed * 13) % 23) as f32 - 11.0) / 20.0).collect())
    };
    let per_channel = |f: &dyn Fn(usize) -> f32| Tensor::from_vec(vec![8], (0..8).map(f).collect());
    let pad = || vec![("pads", A::Is(vec![1, 1, 1, 1]))];
    let bn = |name: &str, x: &str, p: [&str; 4], y: &str| {
        (name.to_string(), x.to_string(), p.map(String::from), y.to_string())
    };
    let mut b = ModelBuilder::new("residual", 18)
        .input("x", DType::F32, &fixed(&[2, 3, 8, 8]))
        .output("y", DType::F32, &fixed(&[2, 6, 8, 8]))
        .init("ws", &w(&[8, 3, 3, 3], 1))
        .init("wa", &w(&[8, 8, 1, 1], 2))
        .init("wb", &w(&[8, 8, 3, 3], 3))
        .init("wh", &w(&[6, 8, 1, 1], 4))
        .init("st.scale", &per_channel(&|c| 0.8 + c as f32 / 10.0))
        .init("st.beta", &per_channel(&|c| 0.3 - c as f32 / 20.0))
        .init("st.mean", &per_channel(&|c| 0.1 * c as f32 - 0.2))
        .init("st.var", &per_channel(&|c| 0.5 + c as f32 / 8.0))
        .init("sh.scale", &per_channel(&|c| 1.2 - c as f32 / 16.0))
        .init("sh.zero", &per_channel(&|_| 0.0))
        .init("sh.var", &per_channel(&|c| 0.9 + c as f32 / 16.0))
        .node("stem", "Conv", &["x", "ws"], &["c0"], pad())
        .node("a", "Conv", &["s", "wa"], &["c1"], vec![])
        .node("b", "Conv", &["a1", "wb"], &["c2"], pad());
    for (name, x, p, y) in [
        bn("bn_stem", "c0", ["st.scale", "st.beta", "st.mean", "st.var"], "n0"),
        bn("bn_a", "c1", ["sh.scale", "sh.zero", "sh.zero", "sh.var"], "n1"),
        bn("bn_b", "c2", ["sh.scale", "sh.zero", "sh.zero", "sh.var"], "n2"),
    ] {
        let ins = [x.as_str(), &p[0], &p[1], &p[2], &p[3]];
        b = b.node(&name, "BatchNormalization", &ins, &[&y], vec![]);
    }
    b.node("relu_s", "Relu", &["n0"], &["s"], vec![])
        .node("relu_a", "Relu", &["n1"], &["a1"], vec![])
        .node("residual", "Add", &["n2", "s"], &["r"], vec![])
        .node("relu_r", "Relu", &["r"], &["rr"], vec![])
        .node("head", "Conv", &["rr", "wh"], &["y"], vec![])
        .bytes()
}

/// The block with half the channels of every conv pruned by `tesa`, propagated.
fn pruned_block(channel_magnitude: &str) -> Graph {
    propagated(&residual_block(), &conv_channels(channel_magnitude))
}

/// The output channels of weight `name` whose filters are all pruned.
fn dead_filters(graph: &Graph, name: &str) -> Vec<usize> {
    let v = graph.value(graph.find_value(name).unwrap());
    let tesa = v.tesa.as_ref().unwrap();
    let per = v.fact.numel() / v.fact.shape[0];
    (0..v.fact.shape[0]).filter(|o| (o * per..(o + 1) * per).all(|i| tesa.is_pruned(i))).collect()
}

/// Independent filter pruning leaves a residual stream mostly whole (a channel is cut only where
/// the stem and conv `b` both pruned it); coupled pruning picks the same channels for both, so
/// half the stream is cut. Either way a pruned filter's BatchNorm shift is pruned with it (the
/// stem's is nonzero: without that its channels would stay live), the BatchNorms sharing their
/// parameters are cut in copies of their own, and the outputs do not move.
#[test]
fn coupled_channel_pruning_cuts_a_residual_stream() {
    let stream_width = |graph: &Graph| graph.fact(graph.find_value("wh").unwrap()).shape[1];
    let independent = pruned_block(r#"{"sparsity": 0.5}"#);
    let coupled = pruned_block(r#"{"sparsity": 0.5, "coupled": true}"#);
    assert_ne!(dead_filters(&independent, "ws"), dead_filters(&independent, "wb"));
    assert_eq!(dead_filters(&coupled, "ws"), dead_filters(&coupled, "wb"));
    assert_eq!(dead_filters(&coupled, "ws").len(), 4);
    // Coupling does not reach conv `a` (its channels are its own class): ranked alone.
    assert_eq!(dead_filters(&coupled, "wa"), dead_filters(&independent, "wa"));
    let mut widths = vec![];
    for before in [independent, coupled] {
        let mut graph = before.clone();
        let report = shrink_channels(&mut graph).unwrap();
        assert!(worst_gap(&before, &graph) <= 1e-6, "{report:?}");
        // The shared parameters were copied per BatchNorm and cut: conv a's class is halved.
        assert_eq!(graph.fact(graph.find_value("wa").unwrap()).shape[0], 4);
        widths.push(stream_width(&graph));
        // The whole pipeline (BatchNorms folded into the convs first) cuts the same.
        let mut prepared = before.clone();
        let r = spartac::rewrite::prepare_for_lowering(&mut prepared, true).unwrap();
        assert_eq!(r.shrink.channels_after, report.channels_after, "{r:?}");
        assert!(worst_gap(&before, &prepared) <= 1e-5);
    }
    assert_eq!(widths[1], 4, "coupled pruning cuts half the residual stream");
    assert!(widths[0] > widths[1], "independent pruning cuts less of it: {widths:?}");
}

/// `x[2,3,8,8]` → conv `a` 1×1 (16) → Relu → grouped 3×3 conv (16 → 16, 4 groups) → Relu →
/// conv `c` 1×1 (8), the output: RegNet's and ResNeXt's bottleneck without its residual.
fn grouped_block() -> Vec<u8> {
    use spartac::ir::{DType, Tensor};
    use spartac_tests::builder::{fixed, ModelBuilder, A};
    let w = |shape: &[usize], seed: usize| {
        let n: usize = shape.iter().product();
        Tensor::from_vec(shape.to_vec(), (0..n).map(|i| (((i * 5 + seed * 11) % 19) as f32 - 9.0) / 16.0).collect())
    };
    ModelBuilder::new("grouped", 18)
        .input("x", DType::F32, &fixed(&[2, 3, 8, 8]))
        .output("y", DType::F32, &fixed(&[2, 8, 8, 8]))
        .init("wa", &w(&[16, 3, 1, 1], 1))
        .init("wg", &w(&[16, 4, 3, 3], 2))
        .init("wc", &w(&[8, 16, 1, 1], 3))
        .node("a", "Conv", &["x", "wa"], &["ca"], vec![])
        .node("relu_a", "Relu", &["ca"], &["ra"], vec![])
        .node("g", "Conv", &["ra", "wg"], &["cg"], vec![("group", A::I(4)), ("pads", A::Is(vec![1, 1, 1, 1]))])
        .node("relu_g", "Relu", &["cg"], &["rg"], vec![])
        .node("c", "Conv", &["rg", "wc"], &["y"], vec![])
        .bytes()
}

/// Coupled pruning drops whole groups of a grouped convolution (its inputs, from conv `a`, and
/// its outputs together); the shrink keeps the groups left, in order, and the outputs do not
/// move. Filters pruned one by one (not coupled) leave every group live: nothing is cut there.
#[test]
fn grouped_convolutions_are_cut_by_whole_groups() {
    let load = |tesa: &str| propagated(&grouped_block(), &conv_channels(tesa));
    let coupled = load(r#"{"sparsity": 0.5, "coupled": true}"#);
    // Two of the four groups, each as its 4 filters of `a` and its 4 filters of the grouped conv.
    let (dead_a, dead_g) = (dead_filters(&coupled, "wa"), dead_filters(&coupled, "wg"));
    assert_eq!(dead_a, dead_g);
    assert_eq!(dead_a.len(), 8);
    assert!(dead_a.chunks(4).all(|g| g[0] % 4 == 0 && g.windows(2).all(|p| p[1] == p[0] + 1)), "{dead_a:?}");
    let mut graph = coupled.clone();
    shrink_channels(&mut graph).unwrap();
    let g = graph.nodes.iter().find(|n| n.name == "g").unwrap();
    assert_eq!(g.attrs.int("group", 1).unwrap(), 2);
    assert_eq!(graph.fact(g.inputs[1].unwrap()).shape, vec![8, 4, 3, 3]);
    assert_eq!(graph.fact(graph.find_value("wc").unwrap()).shape, vec![8, 8, 1, 1]);
    assert!(worst_gap(&coupled, &graph) <= 1e-6);
    let alone = load(r#"{"sparsity": 0.5}"#);
    let mut graph = alone.clone();
    shrink_channels(&mut graph).unwrap();
    let g = graph.nodes.iter().find(|n| n.name == "g").unwrap();
    assert_eq!(g.attrs.int("group", 1).unwrap(), 4);
    assert!(worst_gap(&alone, &graph) <= 1e-6);
}

/// A transformer FFN on `x[2,4,8]`: MatMul (8 → 16) → + bias → GELU (erf form, as torch
/// exports it) → MatMul (16 → 8) → + bias, the output.
fn ffn() -> Vec<u8> {
    use spartac::ir::{DType, Tensor};
    use spartac_tests::builder::{fixed, ModelBuilder};
    let w = |shape: &[usize], seed: usize| {
        let n: usize = shape.iter().product();
        Tensor::from_vec(shape.to_vec(), (0..n).map(|i| (((i * 7 + seed * 5) % 17) as f32 - 8.0) / 12.0).collect())
    };
    ModelBuilder::new("ffn", 18)
        .input("x", DType::F32, &fixed(&[2, 4, 8]))
        .output("y", DType::F32, &fixed(&[2, 4, 8]))
        .init("w1", &w(&[8, 16], 1))
        .init("b1", &w(&[16], 2))
        .init("w2", &w(&[16, 8], 3))
        .init("b2", &w(&[8], 4))
        .init("sqrt2", &Tensor::scalar(std::f32::consts::SQRT_2))
        .init("one", &Tensor::scalar(1.0f32))
        .init("half", &Tensor::scalar(0.5f32))
        .node("fc1", "MatMul", &["x", "w1"], &["h0"], vec![])
        .node("bias1", "Add", &["h0", "b1"], &["h"], vec![])
        .node("gelu_div", "Div", &["h", "sqrt2"], &["g0"], vec![])
        .node("gelu_erf", "Erf", &["g0"], &["g1"], vec![])
        .node("gelu_add", "Add", &["g1", "one"], &["g2"], vec![])
        .node("gelu_mul", "Mul", &["h", "g2"], &["g3"], vec![])
        .node("gelu_half", "Mul", &["g3", "half"], &["a"], vec![])
        .node("fc2", "MatMul", &["a", "w2"], &["o0"], vec![])
        .node("bias2", "Add", &["o0", "b2"], &["y"], vec![])
        .bytes()
}

/// Half the FFN's hidden units pruned as rows of its second weight (their outgoing weights):
/// propagation finds them unused back through the GELU and the bias to the first weight's
/// columns, and `shrink_hidden` cuts them from both weights, the bias and every value between;
/// the outputs do not move. With the hidden values also a graph output nothing is cut.
#[test]
fn pruned_ffn_units_are_cut_from_both_matmuls() {
    use spartac::rewrite::shrink_hidden;
    let load = |extra_output: bool| {
        let mut graph = load_model_bytes(&ffn(), "ffn.onnx", &LoadOptions::default()).unwrap();
        if extra_output {
            let a = graph.find_value("a").unwrap();
            graph.outputs.push(a);
        }
        let attrs = TesaAttrs::parse(r#"{"tensors": {"w2": {"channel_magnitude": {"sparsity": 0.5}}}}"#).unwrap();
        apply_attrs(&mut graph, Some(&attrs)).unwrap();
        zero_pruned_initializers(&mut graph);
        propagate(&mut graph, &PropagateOptions::default()).unwrap();
        zero_pruned_initializers(&mut graph);
        graph
    };
    // The selector `@mlp_out_weights` finds the FFN's second weight, and only it.
    let plain = load_model_bytes(&ffn(), "ffn.onnx", &LoadOptions::default()).unwrap();
    assert_eq!(spartac::rewrite::hidden::mlp_out_weights(&plain), [plain.find_value("w2").unwrap()]);
    let before = load(false);
    let mut graph = before.clone();
    let report = shrink_hidden(&mut graph).unwrap();
    assert_eq!((report.chains, report.shrunk, report.units_before, report.units_after), (1, 1, 16, 8));
    let shape = |g: &Graph, name: &str| g.fact(g.find_value(name).unwrap()).shape.clone();
    assert_eq!(shape(&graph, "w1"), [8, 8]);
    assert_eq!(shape(&graph, "b1"), [8]);
    assert_eq!(shape(&graph, "w2"), [8, 8]);
    assert_eq!(shape(&graph, "a"), [2, 4, 8]);
    assert!(worst_gap(&before, &graph) <= 1e-6);
    // A second run finds nothing left to cut.
    assert_eq!(shrink_hidden(&mut graph.clone()).unwrap().shrunk, 0);
    let exposed = load(true);
    let mut graph = exposed.clone();
    assert_eq!(shrink_hidden(&mut graph).unwrap().shrunk, 0);
    assert_eq!(shape(&graph, "w1"), [8, 16]);
}

/// A ConvNeXt block on `x[2,8,6,6]` with layer scale `gamma` (one value per channel, all
/// `gamma`-sized): depthwise 3×3 conv → permute to channels last → MatMul (8 → 16) + bias →
/// Relu → MatMul (16 → 8) + bias → permute back → Mul by `γ[8,1,1]` → Add of `x`.
fn convnext_block(gamma: f32) -> Vec<u8> {
    use spartac::ir::{DType, Tensor};
    use spartac_tests::builder::{fixed, ModelBuilder, A};
    let w = |shape: &[usize], seed: usize| {
        let n: usize = shape.iter().product();
        Tensor::from_vec(shape.to_vec(), (0..n).map(|i| (((i * 7 + seed * 5) % 17) as f32 - 8.0) / 12.0).collect())
    };
    let scale = Tensor::from_vec(vec![8, 1, 1], (0..8).map(|c| gamma * (1.0 + c as f32 / 8.0)).collect());
    ModelBuilder::new("convnext_block", 18)
        .input("x", DType::F32, &fixed(&[2, 8, 6, 6]))
        .output("y", DType::F32, &fixed(&[2, 8, 6, 6]))
        .init("wd", &w(&[8, 1, 3, 3], 1))
        .init("w1", &w(&[8, 16], 2))
        .init("b1", &w(&[16], 3))
        .init("w2", &w(&[16, 8], 4))
        .init("b2", &w(&[8], 5))
        .init("gamma", &scale)
        .node("dw", "Conv", &["x", "wd"], &["d"], vec![("group", A::I(8)), ("pads", A::Is(vec![1, 1, 1, 1]))])
        .node("to_last", "Transpose", &["d"], &["dl"], vec![("perm", A::Is(vec![0, 2, 3, 1]))])
        .node("fc1", "MatMul", &["dl", "w1"], &["h0"], vec![])
        .node("bias1", "Add", &["h0", "b1"], &["h1"], vec![])
        .node("relu", "Relu", &["h1"], &["h"], vec![])
        .node("fc2", "MatMul", &["h", "w2"], &["o0"], vec![])
        .node("bias2", "Add", &["o0", "b2"], &["o1"], vec![])
        .node("to_first", "Transpose", &["o1"], &["of"], vec![("perm", A::Is(vec![0, 3, 1, 2]))])
        .node("scale", "Mul", &["gamma", "of"], &["s"], vec![])
        .node("residual", "Add", &["s", "x"], &["y"], vec![])
        .bytes()
}

/// ConvNeXt's permute back to channels first, read by the layer scale and the residual Add,
/// leaves the block channels last (the Transpose's input is the value's channels-last form),
/// and the layer scale then folds into the second product's weight and bias; the outputs do
/// not move. A scale that would push the weights below fp16's normal range (torchvision's
/// starting 1e-6) stays a Mul.
#[test]
fn convnext_layer_scale_stays_channels_last_and_folds_into_the_product() {
    use spartac::rewrite::fold_scales;
    let load = |gamma: f32| load_model_bytes(&convnext_block(gamma), "block.onnx", &LoadOptions::default()).unwrap();
    let before = load(0.3);
    let mut graph = before.clone();
    let layout = channels_last(&mut graph).unwrap();
    assert_eq!((layout.convs, layout.transposes_cancelled), (1, 2), "{layout:?}");
    let mul = graph.nodes.iter().find(|n| n.op_type == "Mul").expect("the layer scale");
    let read = mul.inputs.iter().flatten().find(|v| !graph.initializers.contains_key(v)).unwrap();
    assert_eq!(graph.fact(*read).shape, [2, 6, 6, 8], "the layer scale reads the product channels last");
    // Around the depthwise conv, the input into channels last and the output back: nothing else.
    let transposes = graph.nodes.iter().filter(|n| n.op_type == "Transpose").count();
    assert_eq!(transposes, 4, "{}", print_graph(&graph));
    assert!(worst_gap(&before, &graph) <= 1e-5);
    let laid_out = graph.clone();
    let report = fold_scales(&mut graph).unwrap();
    assert_eq!((report.folded, report.out_of_range), (1, 0));
    assert!(!graph.nodes.iter().any(|n| n.op_type == "Mul"), "{}", print_graph(&graph));
    assert!(worst_gap(&laid_out, &graph) <= 1e-5);
    assert!(worst_gap(&before, &graph) <= 1e-5);
    // A second run finds nothing.
    assert_eq!(fold_scales(&mut graph.clone()).unwrap().folded, 0);

    let mut tiny = load(1e-6);
    channels_last(&mut tiny).unwrap();
    let report = fold_scales(&mut tiny).unwrap();
    assert_eq!((report.folded, report.out_of_range), (0, 1));
    assert!(tiny.nodes.iter().any(|n| n.op_type == "Mul"));
}

/// Two FFNs side by side whose first biases are one shared constant (as an exporter shares equal
/// constants: torchvision starts ConvNeXt's biases at zero): with half the units of each pruned,
/// both chains are cut, each through its own copy of the bias, and the outputs do not move.
#[test]
fn hidden_units_are_cut_through_a_shared_bias() {
    use spartac::ir::{DType, Tensor};
    use spartac::rewrite::shrink_hidden;
    use spartac_tests::builder::{fixed, ModelBuilder};
    let w = |shape: &[usize], seed: usize| {
        let n: usize = shape.iter().product();
        Tensor::from_vec(shape.to_vec(), (0..n).map(|i| (((i * 7 + seed * 5) % 17) as f32 - 8.0) / 12.0).collect())
    };
    let bytes = ModelBuilder::new("ffn2", 18)
        .input("x", DType::F32, &fixed(&[2, 4, 8]))
        .output("y", DType::F32, &fixed(&[2, 4, 8]))
        .init("w1a", &w(&[8, 16], 1))
        .init("w2a", &w(&[16, 8], 2))
        .init("w1b", &w(&[8, 16], 3))
        .init("w2b", &w(&[16, 8], 4))
        .init("b1", &w(&[16], 5))
        .node("fc1a", "MatMul", &["x", "w1a"], &["ha0"], vec![])
        .node("bias1a", "Add", &["ha0", "b1"], &["ha1"], vec![])
        .node("relua", "Relu", &["ha1"], &["ha"], vec![])
        .node("fc2a", "MatMul", &["ha", "w2a"], &["ya"], vec![])
        .node("fc1b", "MatMul", &["x", "w1b"], &["hb0"], vec![])
        .node("bias1b", "Add", &["hb0", "b1"], &["hb1"], vec![])
        .node("relub", "Relu", &["hb1"], &["hb"], vec![])
        .node("fc2b", "MatMul", &["hb", "w2b"], &["yb"], vec![])
        .node("sum", "Add", &["ya", "yb"], &["y"], vec![])
        .bytes();
    let attrs = r#"{"tensors": {"@mlp_out_weights": {"channel_magnitude": {"sparsity": 0.5}}}}"#;
    let before = propagated(&bytes, attrs);
    let mut graph = before.clone();
    let report = shrink_hidden(&mut graph).unwrap();
    assert_eq!((report.chains, report.shrunk, report.units_before, report.units_after), (2, 2, 32, 16));
    for add in ["bias1a", "bias1b"] {
        let node = graph.nodes.iter().find(|n| n.name == add).unwrap();
        let b = node.inputs[1].unwrap();
        assert_eq!(graph.fact(b).shape, [8], "{add} reads a bias cut to its chain's units");
    }
    assert!(worst_gap(&before, &graph) <= 1e-6);
}
