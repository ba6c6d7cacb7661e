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

/// The convnet with half the filters of every conv pruned by L1 norm, propagated.
fn pruned() -> Graph {
    let mut graph = load_model_bytes(&small_convnet(), "convnet.onnx", &LoadOptions::default()).unwrap();
    let attrs =
        TesaAttrs::parse(r#"{"tensors": {"*.weight": {"channel_magnitude": {"sparsity": 0.5}}, "fc.weight": {}}}"#)
            .unwrap();
    apply_attrs(&mut graph, Some(&attrs)).unwrap();
    zero_pruned_initializers(&mut graph);
    propagate(&mut graph, &PropagateOptions::default()).unwrap();
    zero_pruned_initializers(&mut graph);
    graph
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
        ["narrow_broadcasts", "fold_batchnorm", "shrink_channels", "channels_last", "merge_matmuls", "sink_transposes"]
    );
    assert!(records[2].result.contains("channel classes shrunk"), "{:?}", records[2]);
    assert_eq!(printed.iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>(), names);
    assert_eq!(printed.last().unwrap().1, print_graph(&graph), "the last text is the graph the rewrites leave");
    let text: String = printed.iter().map(|(pass, ir)| format!("// IR after {pass}\n{ir}\n")).collect();
    insta::assert_snapshot!("ir_after_each_rewrite_pass", text);
}
