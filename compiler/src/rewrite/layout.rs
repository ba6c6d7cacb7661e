//! `channels_last`: the convolution part of a model moves from channels first (NCHW, and NCL
//! for 1-D convolutions) to channels last (NHWC, NLC).
//!
//! Channels last, a 1×1 convolution (or a 1-D one of width 1) with stride 1 and no padding is a
//! MatMul of the activation rows `[N·H·W, C_in]` by the weight `[C_in, C_out]`: the pass
//! rewrites it into exactly that (`MatMul` with the transposed weight, then `Add` of the bias),
//! so the planner, the sparse kernels and their fused bias + activation epilogues take
//! pointwise convolutions as they take any MatMul. A convolution whose windows tile its input
//! (kernel = stride, no padding: a patch embedding) is a MatMul too, of the input's patches
//! (`Rewriter::patchify`). Every other Conv becomes `Transpose(NHWC→
//! NCHW) → Conv → Transpose(NCHW→NHWC)` (for 1-D: `perm [0, 2, 1]` both ways), the form model
//! lowering runs as one NHWC convolution kernel (a 1-D convolution as a 2-D one of height 1).
//!
//! Between convolutions values stay channels last: a channel-wise elementwise op (its
//! constants permuted to match), a global pooling or reduction over the spatial axes (as a
//! Reduce over the channels-last axes) and a Concat (along the axis the concatenated one
//! became, the last for channels) take channels-last inputs and give channels-last outputs;
//! MaxPool and AveragePool go between Transposes like a convolution, which model lowering
//! runs as one channels-last pool kernel; a Transpose of a converted value
//! composes its permutation with the layout's, and becomes an Identity where they cancel
//! (Whisper's `permute(0, 2, 1)` after its convolutions); a Transpose to channels first of a
//! 4-D value the model itself keeps channels last (ConvNeXt's permute back after its MLP) makes
//! the value converted, its input being its channels-last form. Any other reader of a converted
//! value gets its channels-first form back through one Transpose, made once and only where
//! read; graph inputs and outputs keep their types. The graph computes exactly what it
//! computed before (the reference executor checks that), and TeSAs move with their elements.

use super::{fresh_name, gather_tensor, renumber, transpose_positions, ELEMENTWISE};
use crate::ir::{Attr, Attrs, Graph, Initializer, Node, NodeId, Tensor, ValueFact, ValueId, ValueKind};
use crate::Error;
use std::collections::HashMap;

/// Channels first → channels last for a value of `rank` (`[0, 2, 3, 1]` for NCHW, `[0, 2, 1]`
/// for NCL): axis `j` of the channels-last form is axis `to_last(rank)[j]` of the original.
fn to_last(rank: usize) -> Vec<usize> {
    let mut perm = vec![0];
    perm.extend(2..rank);
    perm.push(1);
    perm
}

/// Channels last → channels first, the inverse of [`to_last`].
fn to_first(rank: usize) -> Vec<usize> {
    let mut perm = vec![0, rank - 1];
    perm.extend(1..rank - 1);
    perm
}

/// The ranks the pass converts: 1-D (NCL) and 2-D (NCHW) convolutions and what lies between.
fn convertible_rank(rank: usize) -> bool {
    rank == 3 || rank == 4
}

/// What [`channels_last`] did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LayoutReport {
    /// 1×1 convolutions that became MatMuls.
    pub pointwise: usize,
    /// Convolutions whose windows tile the input (patch embeddings) that became MatMuls.
    pub patchify: usize,
    /// Other convolutions, now between transposes.
    pub convs: usize,
    /// MaxPools and AveragePools, now between transposes.
    pub pools: usize,
    /// Concats of channels-last values.
    pub concats: usize,
    /// Transposes of converted values that the layout's permutation cancels (now Identity),
    /// and Transposes to channels first whose input stands as their channels-last form.
    pub transposes_cancelled: usize,
    /// Transposes at the borders of the NHWC region (into it and out of it).
    pub border_transposes: usize,
}

struct Rewriter<'a> {
    graph: &'a mut Graph,
    nodes: Vec<Node>,
    /// The NHWC form of a (4-D) NCHW value.
    nhwc: HashMap<ValueId, ValueId>,
    /// Values whose NCHW form exists in the new graph.
    nchw: Vec<bool>,
    opset: i64,
    report: LayoutReport,
    /// Keep a pointwise convolution with no pruned weight element a convolution (the NHWC
    /// kernel) instead of a MatMul ([`channels_last_with`]).
    dense_pointwise_as_conv: bool,
}

impl Rewriter<'_> {
    fn new_value(&mut self, base: &str, fact: ValueFact) -> ValueId {
        let name = fresh_name(self.graph, base);
        let id = self.graph.add_value(name, fact, ValueKind::NodeOutput(NodeId(0)));
        self.nchw.push(false);
        id
    }

    fn constant(&mut self, base: &str, t: Tensor, tesa: Option<crate::tesa::Tesa>) -> ValueId {
        let name = fresh_name(self.graph, base);
        let id = self.graph.add_value(name, ValueFact::of(&t), ValueKind::Initializer);
        self.graph.values[id.index()].tesa = tesa;
        self.graph.initializers.insert(id, Initializer::Dense(t));
        self.nchw.push(true);
        id
    }

    fn push(&mut self, name: String, op: &str, attrs: Attrs, inputs: Vec<Option<ValueId>>, outputs: Vec<ValueId>) {
        let name = self.unique_node_name(name);
        self.nodes.push(Node {
            name,
            op_type: op.to_string(),
            domain: String::new(),
            opset: self.opset,
            attrs,
            inputs,
            outputs,
        });
    }

    fn unique_node_name(&self, base: String) -> String {
        let taken = |n: &str| self.nodes.iter().chain(&self.graph.nodes).any(|x| x.name == n);
        if !taken(&base) {
            return base;
        }
        (1..).map(|i| format!("{base}.{i}")).find(|n| !taken(n)).expect("a free node name")
    }

    fn transpose(&mut self, x: ValueId, perm: &[usize], out: ValueId) {
        let mut attrs = Attrs::new();
        attrs.insert("perm", Attr::Ints(perm.iter().map(|&p| p as i64).collect()));
        let name = format!("{}.transpose", self.graph.value(out).name);
        self.push(name, "Transpose", attrs, vec![Some(x)], vec![out]);
    }

    /// The value with `v`'s TeSA permuted by `perm`.
    fn permuted_tesa(&self, v: ValueId, perm: &[usize]) -> Option<crate::tesa::Tesa> {
        self.graph.value(v).tesa.as_ref().map(|t| t.transpose(perm))
    }

    /// `v` channels-last, made with a Transpose the first time it is asked for.
    fn nhwc_of(&mut self, v: ValueId) -> ValueId {
        if let Some(&h) = self.nhwc.get(&v) {
            return h;
        }
        let h = self.nhwc_value(v);
        let perm = to_last(self.graph.fact(v).shape.len());
        self.transpose(v, &perm, h);
        self.report.border_transposes += 1;
        h
    }

    /// `v` channels-first: itself when it exists, else a Transpose of its channels-last form
    /// into it.
    fn nchw_of(&mut self, v: ValueId) -> ValueId {
        if !self.nchw[v.index()] {
            let h = self.nhwc[&v];
            let perm = to_first(self.graph.fact(v).shape.len());
            self.transpose(h, &perm, v);
            self.report.border_transposes += 1;
            self.nchw[v.index()] = true;
        }
        v
    }

    /// A new value standing for `y` (channels first) in channels-last order, with `y`'s TeSA
    /// permuted; recorded as `y`'s form, to be computed by the caller.
    fn nhwc_value(&mut self, y: ValueId) -> ValueId {
        let f = self.graph.fact(y).clone();
        let perm = to_last(f.shape.len());
        let shape = perm.iter().map(|&p| f.shape[p]).collect();
        let base = format!("{}.nhwc", self.graph.value(y).name);
        let h = self.new_value(&base, ValueFact::new(f.dtype, shape));
        self.graph.values[h.index()].tesa = self.permuted_tesa(y, &perm);
        self.nhwc.insert(y, h);
        h
    }

    fn keep(&mut self, node: &Node) {
        let inputs = node.inputs.iter().map(|v| v.map(|v| self.nchw_of(v))).collect();
        for v in &node.outputs {
            self.nchw[v.index()] = true;
        }
        self.nodes.push(Node { inputs, ..node.clone() });
    }

    /// A constant of rank at most `rank` broadcast against a channels-first value: padded to
    /// `rank` and permuted channels-last.
    fn permuted_constant(&mut self, v: ValueId, rank: usize) -> ValueId {
        let f = self.graph.fact(v).clone();
        let mut padded = vec![1; rank - f.shape.len()];
        padded.extend(&f.shape);
        let t = self.graph.initializers[&v].to_dense();
        let (shape, positions) = transpose_positions(&padded, &to_last(rank));
        let base = format!("{}.nhwc", self.graph.value(v).name);
        let tesa = self.graph.value(v).tesa.as_ref().map(|t| {
            let flat = t.gather(&padded, &(0..f.numel()).collect::<Vec<_>>());
            flat.gather(&shape, &positions)
        });
        let t = gather_tensor(&t, shape, &positions);
        self.constant(&base, t, tesa)
    }

    /// `node` (one input `x`, one output) between Transposes: the channels-last `x` back to
    /// channels first, the node as it was, its output to channels last. Model lowering runs the
    /// three as one channels-last kernel (convolutions, pools).
    fn between_transposes(&mut self, node: &Node, x: ValueId) {
        let xh = self.nhwc_of(x);
        let rank = self.graph.fact(x).shape.len();
        let xf = self.graph.fact(x).clone();
        let xt = self.new_value(&format!("{}.nchw", self.graph.value(x).name), xf);
        self.graph.values[xt.index()].tesa = self.graph.value(x).tesa.clone();
        self.transpose(xh, &to_first(rank), xt);
        let y = node.outputs[0];
        let yf = self.graph.fact(y).clone();
        let yt = self.new_value(&format!("{}.nchw", self.graph.value(y).name), yf);
        self.graph.values[yt.index()].tesa = self.graph.value(y).tesa.clone();
        let mut inputs = node.inputs.clone();
        inputs[0] = Some(xt);
        self.nodes.push(Node { inputs, outputs: vec![yt], ..node.clone() });
        let yh = self.nhwc_value(y);
        self.transpose(yt, &to_last(rank), yh);
    }

    fn conv(&mut self, node: &Node) -> bool {
        let (Some(x), Some(w)) = (node.inputs[0], node.inputs.get(1).copied().flatten()) else { return false };
        let bias = node.inputs.get(2).copied().flatten();
        let wf = self.graph.fact(w).clone();
        let rank = self.graph.fact(x).shape.len();
        if !convertible_rank(rank)
            || wf.shape.len() != rank
            || node.outputs.len() != 1
            || !self.graph.initializers.contains_key(&w)
        {
            return false;
        }
        let y = node.outputs[0];
        let ones = |name: &str, unit: i64| -> bool {
            node.attrs.ints_opt(name).ok().flatten().is_none_or(|v| v.iter().all(|&x| x == unit))
        };
        let auto_pad = node.attrs.string("auto_pad", "NOTSET").unwrap_or("NOTSET");
        let pointwise = wf.shape[2..].iter().all(|&k| k == 1)
            && node.attrs.int("group", 1).unwrap_or(1) == 1
            && ones("strides", 1)
            && ones("pads", 0)
            && (auto_pad == "NOTSET" || auto_pad == "VALID")
            && bias.is_none_or(|b| self.graph.initializers.contains_key(&b))
            && !(self.dense_pointwise_as_conv && self.graph.value(w).tesa.as_ref().is_none_or(|t| t.n_pruned() == 0));
        if !pointwise && self.patchify(node, x, w, bias) {
            return true;
        }
        if !pointwise {
            self.between_transposes(node, x);
            self.report.convs += 1;
            return true;
        }
        // y = x·Wᵀ (+ b) over the rows of the channels-last x.
        let xh = self.nhwc_of(x);
        let (c_out, c_in) = (wf.shape[0], wf.shape[1]);
        let t = self.graph.initializers[&w].to_dense();
        let (shape, positions) = transpose_positions(&[c_out, c_in], &[1, 0]);
        let wt = gather_tensor(&t, shape.clone(), &positions);
        let tesa = self.graph.value(w).tesa.as_ref().map(|t| {
            let flat = t.gather(&[c_out, c_in], &(0..c_out * c_in).collect::<Vec<_>>());
            flat.gather(&shape, &positions)
        });
        let base = format!("{}.kc", self.graph.value(w).name);
        let wt = self.constant(&base, wt, tesa);
        let yh = self.nhwc_value(y);
        let name = node.name.clone();
        match bias {
            Some(b) => {
                let f = self.graph.fact(yh).clone();
                let base = format!("{}.matmul", self.graph.value(y).name);
                let mm = self.new_value(&base, f);
                self.push(format!("{name}.matmul"), "MatMul", Attrs::new(), vec![Some(xh), Some(wt)], vec![mm]);
                self.push(format!("{name}.bias"), "Add", Attrs::new(), vec![Some(mm), Some(b)], vec![yh]);
            }
            None => self.push(format!("{name}.matmul"), "MatMul", Attrs::new(), vec![Some(xh), Some(wt)], vec![yh]),
        }
        self.report.pointwise += 1;
        true
    }

    /// A 2-D convolution whose windows tile its input (kernel = stride, no padding, no
    /// dilation, one group, sizes divisible: a ViT or Swin patch embedding, ConvNeXt's stem and
    /// downsampling) as the MatMul it is: the input cut into patch rows (a Reshape, a
    /// Transpose and a Reshape, which model lowering runs as one gather) times the weight
    /// flattened to `[patch, C_out]`, plus the bias. From a channels-first input (a graph
    /// input) a patch row is `(c, kh, kw)` ordered, its runs `kw` elements long; from a
    /// channels-last one `(kh, kw, c)`, runs of `kw·C`. The output is channels last.
    fn patchify(&mut self, node: &Node, x: ValueId, w: ValueId, bias: Option<ValueId>) -> bool {
        let wf = self.graph.fact(w).clone();
        let xf = self.graph.fact(x).clone();
        if xf.shape.len() != 4 || wf.shape.len() != 4 {
            return false;
        }
        let (c_out, c_in, kh, kw) = (wf.shape[0], wf.shape[1], wf.shape[2], wf.shape[3]);
        let (n, c, h, wd) = (xf.shape[0], xf.shape[1], xf.shape[2], xf.shape[3]);
        let ints = |name: &str| node.attrs.ints_opt(name).ok().flatten().map(|v| v.to_vec());
        let auto_pad = node.attrs.string("auto_pad", "NOTSET").unwrap_or("NOTSET");
        let dense = |v: ValueId| self.graph.value(v).tesa.as_ref().is_none_or(|t| t.n_pruned() == 0);
        let tiles = c == c_in
            && kh * kw > 1
            && node.attrs.int("group", 1).unwrap_or(1) == 1
            && ints("strides").is_some_and(|s| s == [kh as i64, kw as i64])
            && ints("pads").is_none_or(|p| p.iter().all(|&x| x == 0))
            && ints("dilations").is_none_or(|d| d.iter().all(|&x| x == 1))
            && ints("kernel_shape").is_none_or(|k| k == [kh as i64, kw as i64])
            && (auto_pad == "NOTSET" || auto_pad == "VALID")
            && h % kh == 0
            && wd % kw == 0
            && bias.is_none_or(|b| self.graph.initializers.contains_key(&b))
            && dense(x);
        if !tiles {
            return false;
        }
        let (ho, wo, k) = (h / kh, wd / kw, c * kh * kw);
        let from_first = self.nchw[x.index()];
        // The weight as [patch, C_out], its patch axis in the rows' order.
        let perm: &[usize] = if from_first { &[1, 2, 3, 0] } else { &[2, 3, 1, 0] };
        let (_, positions) = transpose_positions(&wf.shape, perm);
        let t = self.graph.initializers[&w].to_dense();
        let wk = gather_tensor(&t, vec![k, c_out], &positions);
        let tesa = self.graph.value(w).tesa.as_ref().map(|t| t.gather(&[k, c_out], &positions));
        let wk = self.constant(&format!("{}.patches", self.graph.value(w).name), wk, tesa);
        let (src, split, perm6, row): (ValueId, [usize; 6], [usize; 6], usize) = if from_first {
            (x, [n, c, ho, kh, wo, kw], [0, 2, 4, 1, 3, 5], c * kh * kw)
        } else {
            (self.nhwc_of(x), [n, ho, kh, wo, kw, c], [0, 1, 3, 2, 4, 5], kh * kw * c)
        };
        let dtype = xf.dtype;
        let name = node.name.clone();
        let base = self.graph.value(x).name.clone();
        let split_v = self.new_value(&format!("{base}.windows"), ValueFact::new(dtype, split.to_vec()));
        self.reshape(&format!("{name}.windows"), src, &split, split_v);
        let moved: Vec<usize> = perm6.iter().map(|&p| split[p]).collect();
        let moved_v = self.new_value(&format!("{base}.patches"), ValueFact::new(dtype, moved));
        let mut attrs = Attrs::new();
        attrs.insert("perm", Attr::Ints(perm6.iter().map(|&p| p as i64).collect()));
        self.push(format!("{name}.patches"), "Transpose", attrs, vec![Some(split_v)], vec![moved_v]);
        let rows = [n, ho, wo, row];
        let rows_v = self.new_value(&format!("{base}.patch_rows"), ValueFact::new(dtype, rows.to_vec()));
        self.reshape(&format!("{name}.patch_rows"), moved_v, &rows, rows_v);
        let y = node.outputs[0];
        let yh = self.nhwc_value(y);
        match bias {
            Some(b) => {
                let f = self.graph.fact(yh).clone();
                let mm = self.new_value(&format!("{}.matmul", self.graph.value(y).name), f);
                self.push(format!("{name}.matmul"), "MatMul", Attrs::new(), vec![Some(rows_v), Some(wk)], vec![mm]);
                self.push(format!("{name}.bias"), "Add", Attrs::new(), vec![Some(mm), Some(b)], vec![yh]);
            }
            None => self.push(format!("{name}.matmul"), "MatMul", Attrs::new(), vec![Some(rows_v), Some(wk)], vec![yh]),
        }
        self.report.patchify += 1;
        true
    }

    /// `out = Reshape(x, shape)` with the shape as a new constant.
    fn reshape(&mut self, name: &str, x: ValueId, shape: &[usize], out: ValueId) {
        let dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
        let s = self.constant(&format!("{name}.shape"), Tensor::from_vec(vec![dims.len()], dims), None);
        self.push(name.to_string(), "Reshape", Attrs::new(), vec![Some(x), Some(s)], vec![out]);
    }

    /// Whether every input of `node` can be read channels-last at `rank`: converted (at that
    /// rank), an activation of that rank, or (when `constants_of_lower_rank`) a constant of at
    /// most that rank; and at least one is converted.
    fn inputs_convertible(&self, node: &Node, rank: usize, constants_of_lower_rank: bool) -> bool {
        let reads_nhwc = node.inputs.iter().flatten().any(|v| self.nhwc.contains_key(v));
        reads_nhwc
            && node.inputs.iter().flatten().all(|v| {
                let r = self.graph.fact(*v).shape.len();
                let constant = self.graph.initializers.contains_key(v);
                r == rank || (constants_of_lower_rank && constant && r < rank)
            })
    }

    fn elementwise(&mut self, node: &Node) -> bool {
        if node.outputs.len() != 1 {
            return false;
        }
        let y = node.outputs[0];
        let rank = self.graph.fact(y).shape.len();
        if !convertible_rank(rank) || !self.inputs_convertible(node, rank, true) {
            return false;
        }
        let mut inputs = vec![];
        for v in &node.inputs {
            let Some(v) = *v else {
                inputs.push(None);
                continue;
            };
            let f = self.graph.fact(v).clone();
            let conv = if self.nhwc.contains_key(&v) || !self.graph.initializers.contains_key(&v) {
                self.nhwc_of(v)
            } else if f.numel() <= 1 || node.op_type == "Clip" {
                v
            } else {
                self.permuted_constant(v, rank)
            };
            inputs.push(Some(conv));
        }
        let yh = self.nhwc_value(y);
        self.nodes.push(Node { inputs, outputs: vec![yh], ..node.clone() });
        true
    }

    /// MaxPool (without its Indices output) and AveragePool of a converted value: between
    /// Transposes, which model lowering runs as one channels-last pool kernel.
    fn window_pool(&mut self, node: &Node) -> bool {
        let Some(x) = node.inputs.first().copied().flatten() else { return false };
        if !self.nhwc.contains_key(&x) || node.outputs.len() != 1 {
            return false;
        }
        self.between_transposes(node, x);
        self.report.pools += 1;
        true
    }

    /// A Concat whose inputs can all be read channels-last: the same Concat of the channels-last
    /// forms, along the axis the concatenated one became (channels: the last).
    fn concat(&mut self, node: &Node) -> bool {
        let y = node.outputs[0];
        let rank = self.graph.fact(y).shape.len();
        if node.outputs.len() != 1 || !convertible_rank(rank) || !self.inputs_convertible(node, rank, false) {
            return false;
        }
        let Some(axis) = node.attrs.int("axis", 0).ok().and_then(|a| crate::ir::normalize_axis(a, rank)) else {
            return false;
        };
        let new_axis = to_last(rank).iter().position(|&p| p == axis).expect("a permutation") as i64;
        let mut inputs = vec![];
        for v in &node.inputs {
            inputs.push(match *v {
                None => None,
                Some(v) if self.nhwc.contains_key(&v) || !self.graph.initializers.contains_key(&v) => {
                    Some(self.nhwc_of(v))
                }
                Some(v) => Some(self.permuted_constant(v, rank)),
            });
        }
        let mut attrs = node.attrs.clone();
        attrs.insert("axis", Attr::Int(new_axis));
        let yh = self.nhwc_value(y);
        self.nodes.push(Node { inputs, outputs: vec![yh], attrs, ..node.clone() });
        self.report.concats += 1;
        true
    }

    /// A Transpose of a converted value: one Transpose of its channels-last form, its
    /// permutation composed with the layout's; an Identity when they cancel (Whisper's
    /// `permute(0, 2, 1)` after its convolutions).
    fn transpose_of_converted(&mut self, node: &Node) -> bool {
        let Some(x) = node.inputs.first().copied().flatten() else { return false };
        let Some(&xh) = self.nhwc.get(&x) else { return false };
        let rank = self.graph.fact(x).shape.len();
        let perm: Vec<usize> = match node.attrs.ints_opt("perm").ok().flatten() {
            Some(p) => match p.iter().map(|&a| usize::try_from(a).ok().filter(|&a| a < rank)).collect() {
                Some(p) => p,
                None => return false,
            },
            None => (0..rank).rev().collect(),
        };
        if perm.len() != rank {
            return false;
        }
        let last = to_last(rank);
        let composed: Vec<usize> =
            perm.iter().map(|&a| last.iter().position(|&p| p == a).expect("a permutation")).collect();
        let y = node.outputs[0];
        if composed.iter().enumerate().all(|(i, &p)| i == p) {
            self.push(node.name.clone(), "Identity", Attrs::new(), vec![Some(xh)], vec![y]);
            self.report.transposes_cancelled += 1;
        } else {
            self.transpose(xh, &composed, y);
        }
        self.nchw[y.index()] = true;
        true
    }

    /// A Transpose to channels first (`perm [0, 3, 1, 2]`) of a 4-D value that is not converted
    /// (a model's own channels-last part: ConvNeXt's permute back after its MLP, an NHWC graph
    /// input): its input is already the result's channels-last form, so readers that take
    /// channels last read it directly and the Transpose is made again, once, only for a reader
    /// that needs channels first. ConvNeXt's layer scale and residual Add then stay channels
    /// last instead of reading a permuted copy.
    fn transpose_to_first(&mut self, node: &Node) -> bool {
        let (Some(x), [y]) = (node.inputs.first().copied().flatten(), node.outputs.as_slice()) else { return false };
        let rank = self.graph.fact(x).shape.len();
        let perm = node.attrs.ints_opt("perm").ok().flatten();
        let first: Vec<i64> = to_first(rank).iter().map(|&p| p as i64).collect();
        if rank != 4 || perm != Some(first.as_slice()) || self.nhwc.contains_key(y) {
            return false;
        }
        self.nhwc.insert(*y, x);
        self.report.transposes_cancelled += 1;
        true
    }

    fn pool(&mut self, node: &Node) -> bool {
        let Some(x) = node.inputs[0] else { return false };
        if !self.nhwc.contains_key(&x) || node.outputs.len() != 1 {
            return false;
        }
        let y = node.outputs[0];
        let rank = self.graph.fact(x).shape.len();
        let (axes, keepdims, op) = match node.op_type.as_str() {
            "GlobalAveragePool" => ((2..rank).collect(), true, "ReduceMean"),
            "GlobalMaxPool" => ((2..rank).collect(), true, "ReduceMax"),
            op @ ("ReduceMean" | "ReduceSum" | "ReduceMax" | "ReduceMin") => {
                let raw: Vec<i64> = match node.inputs.get(1).copied().flatten() {
                    Some(a) => match self.graph.initializers.get(&a) {
                        Some(t) => t.to_dense().to_i64_vec(),
                        None => return false,
                    },
                    None => node.attrs.ints_opt("axes").ok().flatten().map(|a| a.to_vec()).unwrap_or_default(),
                };
                if raw.is_empty() || node.attrs.int("noop_with_empty_axes", 0).unwrap_or(0) != 0 {
                    return false;
                }
                let Some(axes) = raw.iter().map(|&a| crate::ir::normalize_axis(a, rank)).collect::<Option<Vec<_>>>()
                else {
                    return false;
                };
                (axes, node.attrs.int("keepdims", 1).unwrap_or(1) != 0, op)
            }
            _ => return false,
        };
        let mut sorted: Vec<usize> = axes.clone();
        sorted.sort_unstable();
        // Without keepdims only a reduction over every spatial axis leaves the same [N, C] in
        // both layouts.
        if !keepdims && sorted != (2..rank).collect::<Vec<_>>() {
            return false;
        }
        let xh = self.nhwc[&x];
        let last = to_last(rank);
        let mut nhwc_axes: Vec<i64> =
            axes.iter().map(|&a| last.iter().position(|&p| p == a).expect("a permutation") as i64).collect();
        nhwc_axes.sort_unstable();
        let out = if keepdims { self.nhwc_value(y) } else { y };
        let mut attrs = Attrs::new();
        attrs.insert("keepdims", Attr::Int(keepdims as i64));
        let mut inputs = vec![Some(xh)];
        if self.opset >= 18 {
            let t = Tensor::from_vec(vec![nhwc_axes.len()], nhwc_axes);
            let base = format!("{}.axes", node.name);
            inputs.push(Some(self.constant(&base, t, None)));
        } else {
            attrs.insert("axes", Attr::Ints(nhwc_axes));
        }
        self.push(format!("{}.nhwc", node.name), op, attrs, inputs, vec![out]);
        if !keepdims {
            self.nchw[y.index()] = true;
        }
        true
    }
}

/// Moves the convolutions of `graph` and what lies between them to channels-last (see the
/// module docs). A graph without a 1-D or 2-D Conv is left as it is.
pub fn channels_last(graph: &mut Graph) -> Result<LayoutReport, Error> {
    channels_last_with(graph, false)
}

/// [`channels_last`]; with `dense_pointwise_as_conv`, a pointwise convolution with no pruned
/// weight element (nothing for the planner's sparse kernels) stays a convolution, which runs
/// as an NHWC kernel (the implicit GEMM, bias and activation in its epilogue) rather than as a
/// planned dense MatMul.
pub fn channels_last_with(graph: &mut Graph, dense_pointwise_as_conv: bool) -> Result<LayoutReport, Error> {
    let has_conv = graph
        .nodes
        .iter()
        .any(|n| n.op_type == "Conv" && n.inputs[0].is_some_and(|x| convertible_rank(graph.fact(x).shape.len())));
    if !has_conv {
        return Ok(LayoutReport::default());
    }
    let opset = graph.opsets.get("").copied().unwrap_or(13);
    let old_nodes = std::mem::take(&mut graph.nodes);
    let n_values = graph.values.len();
    let mut nchw = vec![false; n_values];
    for &v in graph.inputs.iter().chain(graph.initializers.keys()) {
        nchw[v.index()] = true;
    }
    let mut rw = Rewriter {
        graph,
        nodes: vec![],
        nhwc: HashMap::new(),
        nchw,
        opset,
        report: LayoutReport::default(),
        dense_pointwise_as_conv,
    };
    for node in &old_nodes {
        let done = node.domain.is_empty()
            && match node.op_type.as_str() {
                "Conv" => rw.conv(node),
                op if ELEMENTWISE.contains(&op) => rw.elementwise(node),
                "MaxPool" | "AveragePool" => rw.window_pool(node),
                "Concat" => rw.concat(node),
                "Transpose" => rw.transpose_of_converted(node) || rw.transpose_to_first(node),
                "GlobalAveragePool" | "GlobalMaxPool" | "ReduceMean" | "ReduceSum" | "ReduceMax" | "ReduceMin" => {
                    rw.pool(node)
                }
                _ => false,
            };
        if !done {
            rw.keep(node);
        }
    }
    let outputs = rw.graph.outputs.clone();
    for v in outputs {
        rw.nchw_of(v);
    }
    let (nodes, report) = (rw.nodes, rw.report);
    graph.nodes = nodes;
    renumber(graph)?;
    Ok(report)
}
