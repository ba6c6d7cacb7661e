//! Graph rewrites between propagation and the plan, each a pass over the IR that keeps what
//! the graph computes (with every pruned element zeroed):
//! - [`narrow_broadcasts`]: an elementwise op with a constant identity operand (a mask `And`
//!   with all true) goes, its readers broadcasting the other operand instead; a GatherND that
//!   reads its data in order becomes a Reshape (a Cast before it moved after it);
//! - [`fold_batchnorm`]: a BatchNormalization after a Conv folds into its weights and bias;
//! - [`shrink_channels`]: channels that propagation pruned in every tensor that carries them
//!   are cut out, so pruned filters become physically smaller dense operators; with it
//!   [`shrink_hidden`], the same for the hidden units of an MLP (two matmuls and the
//!   elementwise ops between them);
//! - [`channels_last`]: the convolution part of a model (2-D and 1-D) moves to channels last,
//!   where a 1×1 convolution is the MatMul the planner and the sparse kernels already handle
//!   (and a convolution whose windows tile its input, a patch embedding, a MatMul of patch rows),
//!   and the other convolutions run as one NHWC kernel each;
//! - [`fold_scales`]: a Mul by per-column constants after a MatMul (and its bias) folds into
//!   the weight and the bias (ConvNeXt's layer scale);
//! - [`merge_matmuls`]: MatMuls that read one activation with constant weights (Q, K and V)
//!   become one MatMul over the concatenated weights (and biases), each original output a
//!   Slice of it;
//! - [`sink_transposes`]: a Transpose of the leading (row) axes before a projection whose
//!   product only attentions read moves below the projection and its bias, where the
//!   attention reads it in place.
//!
//! Each leaves a verified graph (`ir::verify`) with unreferenced values dropped and the
//! remaining values renumbered in a deterministic order.

pub mod channels;
pub mod fold_batchnorm;
pub mod fold_scales;
pub mod half;
pub mod hidden;
pub mod layout;
pub mod merge_matmuls;
pub mod narrow_broadcasts;
pub mod sink_transposes;

pub use channels::{coupled_channels, shrink_channels, CoupledChannels, ShrinkReport};
pub use fold_batchnorm::{fold_batchnorm, FoldReport};
pub use fold_scales::{fold_scales, ScaleReport};
pub use half::{to_half, HalfReport};
pub use hidden::{shrink_hidden, HiddenReport};
pub use layout::{channels_last, channels_last_with, LayoutReport};
pub use merge_matmuls::{merge_matmuls, MergeReport};
pub use narrow_broadcasts::{narrow_broadcasts, NarrowReport};
pub use sink_transposes::{sink_transposes, SinkReport};

use crate::ir::{Graph, NodeId, Tensor, ValueId, ValueKind};
use crate::pipeline::Pipeline;
use std::collections::BTreeMap;

/// Elementwise ops that map each element alone (so channel `c` to channel `c`, whatever the
/// layout): what both passes carry through.
pub(crate) const ELEMENTWISE: &[&str] = &[
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Max",
    "Min",
    "Relu",
    "Clip",
    "Neg",
    "Abs",
    "Identity",
    "Sigmoid",
    "Tanh",
    "Exp",
    "Sqrt",
    "Erf",
    "HardSigmoid",
    "HardSwish",
    "LeakyRelu",
];

/// What [`prepare_for_lowering`] did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RewriteReport {
    pub narrow: NarrowReport,
    pub batchnorm: FoldReport,
    pub shrink: ShrinkReport,
    pub hidden: HiddenReport,
    pub layout: LayoutReport,
    pub scales: ScaleReport,
    pub merge: MergeReport,
    pub sink: SinkReport,
}

/// Which of [`prepare`]'s rewrites run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RewriteOptions {
    /// [`shrink_channels`].
    pub shrink: bool,
    /// [`merge_matmuls`]: Q, K and V projections as one MatMul (on by default).
    pub merge_matmuls: bool,
    /// [`channels_last_with`]: dense pointwise convolutions stay convolutions (off by default).
    pub dense_pointwise_as_conv: bool,
}

impl Default for RewriteOptions {
    fn default() -> RewriteOptions {
        RewriteOptions { shrink: true, merge_matmuls: true, dense_pointwise_as_conv: false }
    }
}

/// [`prepare`] with every rewrite but, when `shrink` is false, [`shrink_channels`].
pub fn prepare_for_lowering(graph: &mut Graph, shrink: bool) -> Result<RewriteReport, crate::Error> {
    prepare(graph, &RewriteOptions { shrink, ..RewriteOptions::default() })
}

/// The rewrites `spartac compile` runs between propagation and the plan: pruned weight
/// elements become zero (the compiled model computes the pruned model), then
/// [`narrow_broadcasts`], [`fold_batchnorm`], [`shrink_channels`], [`channels_last`],
/// [`fold_scales`], [`merge_matmuls`] (each as `options` say; the merge after the others, so it sees the shrunk
/// weights and the pointwise convolutions' MatMuls) and [`sink_transposes`].
pub fn prepare(graph: &mut Graph, options: &RewriteOptions) -> Result<RewriteReport, crate::Error> {
    prepare_in(graph, options, &mut Pipeline::quiet())
}

/// [`prepare`], each rewrite a pass of `pipeline` (timed, verified, its IR printed where asked).
pub fn prepare_in(
    graph: &mut Graph,
    options: &RewriteOptions,
    pipeline: &mut Pipeline,
) -> Result<RewriteReport, crate::Error> {
    crate::tesa::attrs::zero_pruned_initializers(graph);
    let narrow = pipeline.run("narrow_broadcasts", graph, |g| {
        let r = narrow_broadcasts(g)?;
        let line = format!(
            "{} identity ops dropped, {} values narrowed, {} constant Adds unsplit, {} in-order GatherNDs as views",
            r.dropped, r.narrowed, r.unsplit, r.gathers_as_views
        );
        Ok((r, line))
    })?;
    let batchnorm = pipeline.run("fold_batchnorm", graph, |g| {
        let r = fold_batchnorm(g)?;
        let line = format!("{} BatchNorms folded, {} as channel affines", r.folded, r.affine);
        Ok((r, line))
    })?;
    let (shrink, hidden) = pipeline.run("shrink_channels", graph, |g| {
        if !options.shrink {
            return Ok(((ShrinkReport::default(), HiddenReport::default()), "off (--no-shrink)".to_string()));
        }
        let r = shrink_channels(g)?;
        let h = shrink_hidden(g)?;
        let line = format!(
            "{} of {} channel classes shrunk, {} -> {} channels; {} of {} MLP hidden chains shrunk, {} -> {} units",
            r.shrunk, r.classes, r.channels_before, r.channels_after, h.shrunk, h.chains, h.units_before, h.units_after
        );
        Ok(((r, h), line))
    })?;
    let layout = pipeline.run("channels_last", graph, |g| {
        let r = channels_last_with(g, options.dense_pointwise_as_conv)?;
        let line = format!(
            "{} 1x1 convolutions and {} patch embeddings as MatMuls, {} NHWC convolutions, {} NHWC pools, {} NHWC concats, {} layout transposes ({} cancelled)",
            r.pointwise, r.patchify, r.convs, r.pools, r.concats, r.border_transposes, r.transposes_cancelled
        );
        Ok((r, line))
    })?;
    let scales = pipeline.run("fold_scales", graph, |g| {
        let r = fold_scales(g)?;
        let line =
            format!("{} column scales folded into their MatMuls, {} kept (fp16 range)", r.folded, r.out_of_range);
        Ok((r, line))
    })?;
    let merge = pipeline.run("merge_matmuls", graph, |g| {
        if !options.merge_matmuls {
            return Ok((MergeReport::default(), "off (--no-merge-qkv)".to_string()));
        }
        let r = merge_matmuls(g)?;
        let line = format!("{} MatMuls into {}", r.matmuls, r.sets);
        Ok((r, line))
    })?;
    let sink = pipeline.run("sink_transposes", graph, |g| {
        let r = sink_transposes(g)?;
        let line = format!(
            "{} row transposes moved below their projections ({} with the bias), {} above output projections",
            r.sunk, r.with_bias, r.hoisted
        );
        Ok((r, line))
    })?;
    Ok(RewriteReport { narrow, batchnorm, shrink, hidden, layout, scales, merge, sink })
}

/// The new shape and the flat source positions of `shape` with only the indices `keep` (in
/// that order) of `axis` kept.
pub(crate) fn take_positions(shape: &[usize], axis: usize, keep: &[usize]) -> (Vec<usize>, Vec<usize>) {
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let mut positions = Vec::with_capacity(outer * keep.len() * inner);
    for o in 0..outer {
        for &k in keep {
            let base = (o * shape[axis] + k) * inner;
            positions.extend(base..base + inner);
        }
    }
    let mut new_shape = shape.to_vec();
    new_shape[axis] = keep.len();
    (new_shape, positions)
}

/// The flat source positions of a transpose of `shape` by `perm` (ONNX Transpose).
pub(crate) fn transpose_positions(shape: &[usize], perm: &[usize]) -> (Vec<usize>, Vec<usize>) {
    let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let in_strides = crate::ir::strides(shape);
    let n: usize = shape.iter().product();
    let mut positions = Vec::with_capacity(n);
    let mut idx = vec![0usize; perm.len()];
    for _ in 0..n {
        positions.push(idx.iter().zip(perm).map(|(&i, &p)| i * in_strides[p]).sum());
        for d in (0..idx.len()).rev() {
            idx[d] += 1;
            if idx[d] < out_shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    (out_shape, positions)
}

/// `t`'s elements at `positions`, as a tensor of `shape`.
pub(crate) fn gather_tensor(t: &Tensor, shape: Vec<usize>, positions: &[usize]) -> Tensor {
    Tensor::new(shape, t.data().gather_flat(positions)).expect("one position per element")
}

/// Drops the values nothing refers to, renumbers the rest in order of first reference (inputs,
/// initializers by old id, node outputs and inputs in node order, outputs), fixes every
/// value's kind and verifies the graph.
pub(crate) fn renumber(graph: &mut Graph) -> Result<(), crate::Error> {
    let mut order: Vec<ValueId> = vec![];
    let mut new_id: BTreeMap<ValueId, ValueId> = BTreeMap::new();
    let mut visit = |v: ValueId, order: &mut Vec<ValueId>| {
        if let std::collections::btree_map::Entry::Vacant(e) = new_id.entry(v) {
            e.insert(ValueId(order.len() as u32));
            order.push(v);
        }
    };
    for &v in &graph.inputs {
        visit(v, &mut order);
    }
    for &v in graph.initializers.keys() {
        visit(v, &mut order);
    }
    for node in &graph.nodes {
        for v in node.inputs.iter().flatten() {
            visit(*v, &mut order);
        }
        for &v in &node.outputs {
            visit(v, &mut order);
        }
    }
    for &v in &graph.outputs {
        visit(v, &mut order);
    }
    let map = |v: &ValueId| new_id[v];
    let mut values: Vec<_> = order.iter().map(|v| graph.values[v.index()].clone()).collect();
    graph.inputs = graph.inputs.iter().map(map).collect();
    graph.outputs = graph.outputs.iter().map(map).collect();
    graph.initializers = std::mem::take(&mut graph.initializers).into_iter().map(|(k, v)| (map(&k), v)).collect();
    for (i, node) in graph.nodes.iter_mut().enumerate() {
        for v in node.inputs.iter_mut().flatten() {
            *v = map(v);
        }
        for v in node.outputs.iter_mut() {
            *v = map(v);
            values[v.index()].kind = ValueKind::NodeOutput(NodeId(i as u32));
        }
    }
    for &v in &graph.inputs {
        values[v.index()].kind = ValueKind::Input;
    }
    for v in graph.initializers.keys() {
        values[v.index()].kind = ValueKind::Initializer;
    }
    graph.values = values;
    crate::ir::verify(graph)
}

/// A value name not yet in `graph`, from `base`.
pub(crate) fn fresh_name(graph: &Graph, base: &str) -> String {
    if graph.find_value(base).is_none() {
        return base.to_string();
    }
    (1..).map(|i| format!("{base}.{i}")).find(|n| graph.find_value(n).is_none()).expect("a free name")
}

/// Removes the initializers no node reads and that are not graph outputs, then renumbers the
/// values densely.
pub(crate) fn drop_unread_initializers(graph: &mut Graph) -> Result<(), crate::Error> {
    let mut used = vec![false; graph.values.len()];
    for v in graph.nodes.iter().flat_map(|n| n.inputs.iter().flatten()) {
        used[v.index()] = true;
    }
    graph.initializers.retain(|v, _| used[v.index()] || graph.outputs.contains(v));
    renumber(graph)
}
