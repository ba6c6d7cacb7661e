//! Lowering of a whole model: a planned graph becomes a [`Program`] (what `spartac compile`
//! writes and `spartac run` executes).
//!
//! Every node lands in one of these places, in graph order:
//! - **planned MatMul/Gemm** (constant 2-D weight on the right): one [`Op::Spmm`] step whose
//!   launches are the plan's sub-operator kernels (`codegen::from_plan`, then `specialize`), the
//!   first writing and the others accumulating. A bias `Add` of a 1-D constant and an activation
//!   chain after it are fused into the last kernel's epilogue when the matmul's output feeds
//!   nothing else; the activation is recognized by *evaluating* the chain of elementwise nodes
//!   with the reference ops on probe values and comparing it with each epilogue activation
//!   (`x·Φ(x)` GELU, ReLU), so any spelling of GELU an exporter picks is found. A dense 16-bit
//!   part (`codegen::library_takes`) is a [`Launch::Gemm`] on cuBLAS instead, its weight stored
//!   plainly, with the bias written into C before it and the activation applied after it;
//! - **views** (Reshape, Squeeze, Unsqueeze, Flatten, Identity, Dropout): no step; the output
//!   is the input's buffer seen with another shape;
//! - **elementwise groups**: an elementwise node whose input is produced by an elementwise node
//!   with no other consumer joins that node's group; a group is one step ([`Op::Nodes`], its
//!   inner values [`Operand::Temp`]s) and one generated kernel over an expression tree
//!   (`codegen::graph_ops::elementwise`). Transpose is an elementwise identity read through
//!   permuted strides, and joins groups like any other;
//! - **transposes folded into a matmul**: a Transpose read only by an activation×activation
//!   MatMul is read through the matmul's strides (one kernel; the step keeps both nodes for
//!   the CPU executor);
//! - **attention**: a Softmax over the last axis between two activation×activation MatMuls
//!   (the scores MatMul, through an elementwise group or directly, and the probabilities·V
//!   MatMul, each value read by the next alone) is one step and one kernel
//!   (`codegen::graph_ops::attention`): the group becomes the kernel's score expression, the
//!   transposes folded into either MatMul its operand strides, and a Transpose after it its
//!   output strides; a Q, K or V sliced out of a wider value (the merged projection of
//!   `rewrite::merge_matmuls`) is read in place through an offset and strides
//!   (`model/strided_views.rs`), the Slice and its views joining the step;
//! - **data movement with constant indices** (GatherND, GatherElements, Slice, Tile,
//!   DepthToSpace, SpaceToDepth whose only non-constant input is the data): one gather through
//!   a source map traced at compile time with the op's own `eval` on the data's element numbers;
//! - **LayerNorm with its input's group** (`model/norm_fusion.rs`): an elementwise group whose
//!   output a LayerNormalization reads (the residual `Add` before it) runs inside the LayerNorm's
//!   kernel as a prologue, the sum never stored, or stored in the same pass when read elsewhere
//!   too (pre-LN transformers);
//! - **other ops** (Gather, LayerNormalization, Softmax, reductions, activation×activation
//!   MatMul, Concat): one step and one generated kernel each.
//!
//! Unknown ops, and ops without a kernel (e.g. a GatherElements with run-time indices), are an
//! error naming the node, op type and opset. Constants that reach a kernel are device buffers;
//! one-element constants inside a group are literals in its code. `rewrite::to_half` makes a
//! model fp16/bf16 before lowering (`spartac compile --dtype`).
//!
//! Memory: a scratch buffer is reused (same element type; the smallest free one that fits, else
//! the largest, grown) once every value it held
//! has been read by its last reader, counted at the loop iteration that emits that reader's
//! step (a fused group at its last node, an absorbed epilogue with its matmul, a folded
//! transpose with its matmul). Reuse needs no extra care for ordering: the builder makes a
//! write wait for every earlier read of the range it writes.
//!
//! Invariants: the program's CPU execution (`runtime::exec::cpu`) computes what the graph's
//! reference execution computes with every pruned weight element zeroed (the planned kernels'
//! weights sum to the pruned weight, and the CSR the CPU multiplies is that sum); every graph
//! output has a buffer of storage `Output` of its own.

use super::{
    Arg, BufferId, Csr, Data, Elem, Launch, NodeOp, Op, Operand, Program, ProgramBuilder, ProgramError, Rows, Storage,
};
use crate::codegen::graph_ops::{self, Binary, Expr, OpKernel, Reduce, TensorDesc, Unary};
use crate::codegen::{Activation, Epilogue, Family};
use crate::ir::{DType, Graph, Initializer, Node, Tensor, ValueId};
use crate::ops::{registry, NodeCtx};
use crate::plan::{OperatorPlan, Plan};
use std::collections::{BTreeMap, HashMap};

mod norm_fusion;
mod strided_views;
use norm_fusion::NormFusion;
use strided_views::ViewChain;

/// What the lowering may choose.
#[derive(Clone, Debug)]
pub struct ModelOptions {
    /// Fuse bias and activation chains into planned matmul epilogues.
    pub fuse_epilogues: bool,
    /// Fuse chains of elementwise nodes into one kernel.
    pub fuse_elementwise: bool,
    /// The tile of every 3xTF32 fine kernel (`None`: the specializer's choice).
    pub fine_tile: Option<crate::codegen::Tile>,
    /// Run dense 16-bit sub-operators on the vendor library ([`Launch::Gemm`], see
    /// `codegen::library_takes`) instead of our dense kernel.
    pub library_dense: bool,
    /// Keep skinny dense 16-bit sub-operators on the streaming kernel
    /// (`kernel_choice::stream::auto_takes`); off, the library takes them too when
    /// `library_dense` is on (`codegen::library_takes_dense`; for ablations).
    pub stream_dense: bool,
}

impl Default for ModelOptions {
    fn default() -> ModelOptions {
        ModelOptions {
            fuse_epilogues: true,
            fuse_elementwise: true,
            fine_tile: None,
            library_dense: true,
            stream_dense: true,
        }
    }
}

/// An attention that runs as one kernel ([`graph_ops::attention`]): node indices of the
/// scores MatMul, the elementwise group between it and the Softmax (empty when there is none),
/// the Softmax, the probabilities·V MatMul and the Transpose after it whose permutation the
/// kernel's output strides take.
#[derive(Clone, Debug)]
struct AttentionFusion {
    scores: usize,
    group: Vec<usize>,
    softmax: usize,
    pv: usize,
    out_transpose: Option<usize>,
}

/// One model input or output: its name, type and buffer.
#[derive(Clone, Debug, PartialEq)]
pub struct Signature {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub buf: BufferId,
    /// Integer inputs: the exclusive bound of valid values (the rows of the table they index;
    /// 2 for masks), what random inputs are drawn below. 0 for floats and outputs.
    pub bound: u64,
}

/// Counts of what the lowering did, for the compile summary.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoweringStats {
    pub graph_nodes: usize,
    pub planned_ops: usize,
    /// Planned operators with a pruned weight element.
    pub sparse_ops: usize,
    pub fused_epilogues: usize,
    /// Nodes that run inside a fused step of two or more (elementwise groups, attentions,
    /// folded transposes, LayerNorms with their input's group).
    pub fused_nodes: usize,
    /// LayerNormalizations whose input (an elementwise group, e.g. a residual Add) is computed
    /// in their kernel.
    pub fused_norms: usize,
    pub views: usize,
    /// Bytes of the planned weights as dense f32, and as packed for the kernels (values and
    /// index tables).
    pub dense_weight_bytes: usize,
    pub packed_weight_bytes: usize,
    /// Sub-operators that run on the vendor library ([`Launch::Gemm`]).
    pub library_gemms: usize,
}

/// A lowered model.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelProgram {
    pub program: Program,
    pub inputs: Vec<Signature>,
    pub outputs: Vec<Signature>,
    pub stats: LoweringStats,
}

fn invalid(message: String) -> ProgramError {
    ProgramError::Invalid { program: "model".into(), message }
}

/// Ops whose output is their input seen with another shape.
const VIEWS: &[&str] = &["Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Dropout"];

/// Data-movement ops lowered to a gather through a compile-time source map when only their
/// data input is not constant.
const REMAPS: &[&str] = &["GatherND", "GatherElements", "Slice", "Tile", "DepthToSpace", "SpaceToDepth"];

/// Ops one elementwise kernel computes (Transpose through permuted strides).
const ELEMENTWISE: &[&str] = &[
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "Max",
    "Min",
    "Equal",
    "Less",
    "Greater",
    "LessOrEqual",
    "GreaterOrEqual",
    "And",
    "Or",
    "Neg",
    "Abs",
    "Exp",
    "Log",
    "Sqrt",
    "Reciprocal",
    "Erf",
    "Tanh",
    "Sigmoid",
    "Relu",
    "Not",
    "Floor",
    "Ceil",
    "Cast",
    "Where",
    "Clip",
    "Expand",
    "Gelu",
    "Transpose",
];

fn is_elementwise(op: &str) -> bool {
    ELEMENTWISE.contains(&op)
}

/// The constant tensor of a value, when it is an initializer.
fn constant(graph: &Graph, v: ValueId) -> Option<Tensor> {
    graph.initializers.get(&v).map(Initializer::to_dense)
}

/// A one-element constant's value.
fn scalar_constant(graph: &Graph, v: ValueId) -> Option<(DType, f64)> {
    let init = graph.initializers.get(&v)?;
    if init.fact().numel() != 1 {
        return None;
    }
    let t = init.to_dense();
    Some((t.dtype(), t.to_f64_vec()[0]))
}

/// Lowers `graph` with its `plan` (see the module docs). `progress(done, total)` is called
/// after each node.
pub fn lower_model(
    graph: &Graph,
    plan: &Plan,
    options: &ModelOptions,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<ModelProgram, ProgramError> {
    Lowering::new(graph, plan, options)?.run(progress)
}

struct Lowering<'a> {
    graph: &'a Graph,
    options: &'a ModelOptions,
    planned: HashMap<&'a str, &'a OperatorPlan>,
    consumers: Vec<Vec<usize>>,
    is_output: Vec<bool>,
    b: ProgramBuilder,
    /// Buffer of each value that has one (views share their input's).
    bufs: HashMap<ValueId, BufferId>,
    stats: LoweringStats,
    /// Activation×activation MatMuls that read an input through the permutation of the
    /// Transpose producing it (only consumer): matmul node → (input position, Transpose node).
    folded: HashMap<usize, Vec<(usize, usize)>>,
    /// NHWC convolutions: Conv node → (the Transpose into NCHW before it, the Transpose back
    /// to NHWC after it).
    convs: HashMap<usize, (usize, usize)>,
    /// Fused attentions, keyed by their probabilities·V MatMul.
    attention: HashMap<usize, AttentionFusion>,
    /// LayerNorms with their input's elementwise group, keyed by the LayerNorm.
    norms: HashMap<usize, NormFusion>,
    /// Attention operands read in place from a wider value (`model/strided_views.rs`), keyed
    /// by the operand (the value a folded Transpose reads, or the MatMul's input).
    views: HashMap<ValueId, ViewChain>,
    /// Memory reuse: the loop iteration after which each value is no longer read, the last
    /// such iteration of each scratch buffer (over the values it holds), the scratch buffers in
    /// use, and the freed ones.
    last_use: Vec<usize>,
    buf_last: HashMap<BufferId, usize>,
    in_use: Vec<BufferId>,
    free: Vec<BufferId>,
}

impl<'a> Lowering<'a> {
    fn new(graph: &'a Graph, plan: &'a Plan, options: &'a ModelOptions) -> Result<Lowering<'a>, ProgramError> {
        let mut consumers = vec![vec![]; graph.values.len()];
        for (i, n) in graph.nodes.iter().enumerate() {
            for v in n.inputs.iter().flatten() {
                if !consumers[v.0 as usize].contains(&i) {
                    consumers[v.0 as usize].push(i);
                }
            }
        }
        let mut is_output = vec![false; graph.values.len()];
        for v in &graph.outputs {
            is_output[v.0 as usize] = true;
        }
        let planned = plan.operators.iter().map(|op| (op.node.as_str(), op)).collect();
        let name = if graph.name.is_empty() { "model".to_string() } else { graph.name.clone() };
        Ok(Lowering {
            graph,
            options,
            planned,
            consumers,
            is_output,
            b: ProgramBuilder::new(&name),
            bufs: HashMap::new(),
            stats: LoweringStats { graph_nodes: graph.nodes.len(), ..Default::default() },
            folded: HashMap::new(),
            convs: HashMap::new(),
            attention: HashMap::new(),
            norms: HashMap::new(),
            views: HashMap::new(),
            last_use: vec![],
            buf_last: HashMap::new(),
            in_use: vec![],
            free: vec![],
        })
    }

    fn node_err(&self, node: &Node, message: impl std::fmt::Display) -> ProgramError {
        invalid(format!("node {} ({}, opset {}): {message}", node.name, node.op_type, node.opset))
    }

    fn elem(&self, dtype: DType, what: &str) -> Result<Elem, ProgramError> {
        Elem::of_dtype(dtype).ok_or_else(|| invalid(format!("{what}: element type {} has no GPU buffer", dtype.name())))
    }

    /// The buffer of value `v`, made on first use (constants uploaded, others scratch).
    fn buf(&mut self, v: ValueId) -> Result<BufferId, ProgramError> {
        if let Some(&b) = self.bufs.get(&v) {
            return Ok(b);
        }
        let value = self.graph.value(v);
        let elem = self.elem(value.fact.dtype, &value.name)?;
        let id = match constant(self.graph, v) {
            Some(t) => {
                let data = Data::of_tensor(t.data())
                    .ok_or_else(|| invalid(format!("constant {}: no buffer form", value.name)))?;
                self.b.constant(&value.name, data, false)
            }
            None => {
                let len = value.fact.numel();
                // Best fit among the free buffers of this element type: the smallest that holds
                // the value, else the largest, grown. Graph outputs get a buffer of their own.
                let fits = |b: &BufferId| self.b.program().buffer(*b).len;
                let same: Vec<usize> = (0..self.free.len())
                    .filter(|&i| self.b.program().buffer(self.free[i]).elem == elem && !self.is_output[v.0 as usize])
                    .collect();
                let pick = same
                    .iter()
                    .copied()
                    .filter(|&i| fits(&self.free[i]) >= len)
                    .min_by_key(|&i| (fits(&self.free[i]), i))
                    .or_else(|| same.iter().copied().max_by_key(|&i| (fits(&self.free[i]), usize::MAX - i)));
                let id = match pick {
                    Some(i) => {
                        let id = self.free.remove(i);
                        self.b.grow(id, len);
                        id
                    }
                    None => self.b.buffer(&value.name, elem, len, Storage::Scratch),
                };
                self.in_use.push(id);
                id
            }
        };
        self.bufs.insert(v, id);
        self.note_use(v, id);
        Ok(id)
    }

    /// Records that buffer `id` holds value `v` until `v`'s last read.
    fn note_use(&mut self, v: ValueId, id: BufferId) {
        let last = self.last_use.get(v.0 as usize).copied().unwrap_or(usize::MAX);
        let e = self.buf_last.entry(id).or_insert(0);
        *e = (*e).max(last);
    }

    /// After loop iteration `i`: scratch buffers whose values are all read are free for reuse.
    /// Reuse is safe by construction: the builder orders a write after every earlier read of
    /// the range it writes.
    fn release(&mut self, i: usize) {
        let (done, keep): (Vec<BufferId>, Vec<BufferId>) =
            self.in_use.iter().partition(|b| self.buf_last.get(b).is_some_and(|&l| l <= i));
        self.in_use = keep;
        for b in done {
            self.buf_last.remove(&b);
            self.free.push(b);
        }
    }

    fn operand(&mut self, v: ValueId) -> Result<Operand, ProgramError> {
        let fact = self.graph.fact(v).clone();
        Ok(Operand::Buf { buf: self.buf(v)?, dtype: fact.dtype, shape: fact.shape })
    }

    fn desc(&self, v: ValueId) -> TensorDesc {
        let f = self.graph.fact(v);
        TensorDesc::contiguous(f.dtype, &f.shape)
    }

    fn only_consumer(&self, v: ValueId) -> Option<usize> {
        match self.consumers[v.0 as usize].as_slice() {
            [one] if !self.is_output[v.0 as usize] => Some(*one),
            _ => None,
        }
    }

    fn run(mut self, progress: &mut dyn FnMut(usize, usize)) -> Result<ModelProgram, ProgramError> {
        let graph = self.graph;
        let mut inputs = vec![];
        for &v in &graph.inputs {
            let value = graph.value(v);
            let elem = self.elem(value.fact.dtype, &value.name)?;
            let id = self.b.buffer(&value.name, elem, value.fact.numel(), Storage::Input);
            self.bufs.insert(v, id);
            inputs.push(Signature {
                name: value.name.clone(),
                dtype: value.fact.dtype,
                shape: value.fact.shape.clone(),
                buf: id,
                bound: if value.fact.dtype.is_float() { 0 } else { crate::reference::integer_bound(graph, v) },
            });
        }
        // Nodes that planned matmuls' epilogues absorb stay out of the elementwise groups.
        // `emit_at[n]`: the loop iteration whose step computes node n.
        let mut emit_at: Vec<usize> = (0..graph.nodes.len()).collect();
        let mut absorbed = vec![false; graph.nodes.len()];
        if self.options.fuse_epilogues {
            for (i, node) in graph.nodes.iter().enumerate() {
                if let Some(op) = self.planned.get(node.name.as_str()) {
                    for a in self.epilogue_nodes(node, op) {
                        absorbed[a] = true;
                        emit_at[a] = i;
                    }
                }
            }
        }
        // Transposes read only by an activation×activation MatMul fold into its strides.
        let mut done = vec![false; graph.nodes.len()];
        if self.options.fuse_elementwise {
            for (i, node) in graph.nodes.iter().enumerate() {
                if node.op_type != "MatMul" || self.planned.contains_key(node.name.as_str()) {
                    continue;
                }
                for (pos, v) in node.inputs.iter().enumerate().take(2) {
                    let Some(v) = *v else { continue };
                    let Some(t) = graph.nodes.iter().position(|n| n.outputs.contains(&v)) else { continue };
                    if graph.nodes[t].op_type == "Transpose"
                        && self.only_consumer(v) == Some(i)
                        && graph.fact(v).shape.len() >= 2
                    {
                        self.folded.entry(i).or_default().push((pos, t));
                        absorbed[t] = true;
                        done[t] = true;
                        emit_at[t] = i;
                    }
                }
            }
        }
        // NHWC convolutions (as `rewrite::channels_last` leaves them): the Transposes around a
        // Conv, and an activation after it, run inside the one conv kernel.
        for i in 0..graph.nodes.len() {
            let Some((t_in, t_out)) = self.nhwc_conv(i) else { continue };
            let mut members = vec![t_in, t_out];
            if self.options.fuse_epilogues {
                if let Some((_, _, act)) = self.activation_after(graph.nodes[t_out].outputs[0]) {
                    members.extend(act);
                }
            }
            for m in members {
                absorbed[m] = true;
                done[m] = true;
                emit_at[m] = i;
            }
            self.convs.insert(i, (t_in, t_out));
        }
        let mut groups =
            if self.options.fuse_elementwise { self.elementwise_groups(&absorbed) } else { HashMap::new() };
        // Attention (scores MatMul → score group → Softmax → ·V MatMul → Transpose) runs as one
        // kernel at its ·V MatMul.
        if self.options.fuse_elementwise {
            for f in self.find_attention(&groups) {
                let mut members = vec![f.scores, f.softmax];
                members.extend(&f.group);
                members.extend(self.folded.get(&f.scores).into_iter().flatten().map(|&(_, t)| t));
                members.extend(f.out_transpose);
                for g in f.group.last().into_iter().chain(&f.out_transpose) {
                    groups.remove(g);
                }
                // Q, K or V sliced out of a wider value: read in place.
                for v in self.attention_sources(&f) {
                    if let Some(chain) = strided_views::view_chain(&self, v) {
                        members.extend(&chain.nodes);
                        self.views.insert(v, chain);
                    }
                }
                for m in members {
                    absorbed[m] = true;
                    done[m] = true;
                    emit_at[m] = f.pv;
                }
                self.attention.insert(f.pv, f);
            }
        }
        // A group read by a LayerNorm alone (or before its other readers) runs in its kernel.
        if self.options.fuse_elementwise {
            for f in self.find_norm_fusions(&groups) {
                groups.remove(f.group.last().expect("a group has a node"));
                for &m in &f.group {
                    absorbed[m] = true;
                    done[m] = true;
                    emit_at[m] = f.norm;
                }
                self.norms.insert(f.norm, f);
            }
        }
        for (&last, members) in &groups {
            for &m in members {
                emit_at[m] = last;
            }
        }
        // A value is last read in the iteration that emits its last consumer (graph outputs:
        // never; values nothing reads: right after they are made).
        let mut last_use = vec![0usize; graph.values.len()];
        for (n, node) in graph.nodes.iter().enumerate() {
            for v in &node.outputs {
                last_use[v.0 as usize] = last_use[v.0 as usize].max(emit_at[n]);
            }
            for v in node.inputs.iter().flatten() {
                last_use[v.0 as usize] = last_use[v.0 as usize].max(emit_at[n]);
            }
        }
        for v in &graph.outputs {
            last_use[v.0 as usize] = usize::MAX;
        }
        self.last_use = last_use;
        // Nodes a fused epilogue, group or matmul took over are skipped when reached.
        let total = graph.nodes.len();
        for i in 0..total {
            if done[i] {
                self.release(i);
                progress(i + 1, total);
                continue;
            }
            let node = &graph.nodes[i];
            if let Some(f) = self.attention.get(&i).cloned() {
                self.lower_attention(&f)?;
            } else if let Some(f) = self.norms.get(&i).cloned() {
                self.lower_norm_fusion(&f)?;
            } else if let Some(op) = self.planned.get(node.name.as_str()).copied() {
                self.lower_planned(i, op, &mut done)?;
            } else if let Some(&(t_in, t_out)) = self.convs.get(&i) {
                self.lower_conv(i, t_in, t_out)?;
            } else if VIEWS.contains(&node.op_type.as_str()) {
                self.lower_view(node)?;
            } else if is_elementwise(&node.op_type) {
                // A group is emitted at its last node; the members before it wait.
                match groups.get(&i) {
                    Some(members) => {
                        self.lower_group(members)?;
                        if members.len() > 1 {
                            self.stats.fused_nodes += members.len();
                        }
                    }
                    None if !self.options.fuse_elementwise => self.lower_group(&[i])?,
                    None => {}
                }
            } else {
                self.lower_other(node)?;
            }
            done[i] = true;
            self.release(i);
            progress(i + 1, total);
        }
        let mut outputs = vec![];
        for &v in &graph.outputs {
            let value = graph.value(v);
            let elem = self.elem(value.fact.dtype, &value.name)?;
            let src = self.buf(v)?;
            let shared = graph.outputs.iter().filter(|&&o| self.bufs.get(&o) == Some(&src)).count() > 1;
            let exact = self.b.program().buffer(src).len == value.fact.numel();
            let own = matches!(self.b.program().buffer(src).storage, Storage::Scratch) && !shared && exact;
            let buf = if own {
                self.b.set_storage(src, Storage::Output);
                self.b.rename(src, &value.name);
                src
            } else {
                let dst = self.b.buffer(&format!("{}.out", value.name), elem, value.fact.numel(), Storage::Output);
                let len = value.fact.numel();
                self.b.step(
                    &format!("output {}", value.name),
                    Op::Move,
                    vec![Launch::Copy { src, src_at: 0, dst, dst_at: 0, len }],
                );
                dst
            };
            outputs.push(Signature {
                name: value.name.clone(),
                dtype: value.fact.dtype,
                shape: value.fact.shape.clone(),
                buf,
                bound: 0,
            });
        }
        let program = self.b.finish()?;
        Ok(ModelProgram { program, inputs, outputs, stats: self.stats })
    }

    /// Elementwise groups, keyed by the index of their last node; each lists its nodes in
    /// graph order.
    fn elementwise_groups(&self, absorbed: &[bool]) -> HashMap<usize, Vec<usize>> {
        let graph = self.graph;
        // group[i] = index of the last node of node i's group so far.
        let mut members: HashMap<usize, Vec<usize>> = HashMap::new();
        let mut group_of: HashMap<usize, usize> = HashMap::new();
        for (i, node) in graph.nodes.iter().enumerate() {
            if !is_elementwise(&node.op_type) || self.planned.contains_key(node.name.as_str()) || absorbed[i] {
                continue;
            }
            let mut mine = vec![];
            // A Transpose reads its input from memory (through permuted strides).
            let inputs = if node.op_type == "Transpose" { &[][..] } else { &node.inputs[..] };
            for v in inputs.iter().flatten() {
                let Some(p) = graph.nodes.iter().position(|n| n.outputs.contains(v)) else { continue };
                let Some(&head) = group_of.get(&p) else { continue };
                if self.only_consumer(*v) == Some(i) && graph.nodes[p].outputs.len() == 1 && !mine.contains(&head) {
                    mine.push(head);
                }
            }
            let mut list: Vec<usize> = mine.iter().flat_map(|h| members.remove(h).unwrap_or_default()).collect();
            list.push(i);
            list.sort_unstable();
            for &m in &list {
                group_of.insert(m, i);
            }
            members.insert(i, list);
        }
        members
    }

    fn lower_view(&mut self, node: &Node) -> Result<(), ProgramError> {
        let src = node.inputs.first().copied().flatten().ok_or_else(|| self.node_err(node, "no input"))?;
        let out = node.outputs[0];
        if self.graph.fact(src).numel() != self.graph.fact(out).numel() {
            return Err(self.node_err(node, "a view must keep the element count"));
        }
        let buf = self.buf(src)?;
        self.bufs.insert(out, buf);
        self.note_use(out, buf);
        self.stats.views += 1;
        Ok(())
    }

    fn kernel_step(&mut self, label: &str, op: Op, k: OpKernel, args: Vec<BufferId>) -> usize {
        let args = args.into_iter().map(|b| Arg::Buf(b, 0)).collect();
        self.kernel_step_args(label, op, k, args)
    }

    fn kernel_step_args(&mut self, label: &str, op: Op, k: OpKernel, args: Vec<Arg>) -> usize {
        let kid = self.b.kernel(&k.name, &k.source, k.smem_bytes);
        self.b.step(label, op, vec![Launch::Kernel { kernel: kid, grid: k.grid, block: k.block, args }])
    }

    fn node_op(&mut self, node: &Node, inputs: Vec<Option<Operand>>, outputs: Vec<Operand>) -> NodeOp {
        NodeOp {
            name: node.name.clone(),
            op_type: node.op_type.clone(),
            opset: node.opset,
            attrs: node.attrs.clone(),
            inputs,
            outputs,
        }
    }

    /// One step for the group `members` (graph order, the last one's output leaves the group).
    fn lower_group(&mut self, members: &[usize]) -> Result<(), ProgramError> {
        let graph = self.graph;
        let last = *members.last().expect("a group has a node");
        let out_v = graph.nodes[last].outputs[0];
        let mut ext = vec![];
        let out_operand = self.operand(out_v)?;
        let (expr, nodes) = self.group_expr(members, &mut ext, &HashMap::new(), out_operand, 0)?;
        // A Transpose reads its input through permuted strides.
        let descs: Vec<TensorDesc> = ext
            .iter()
            .map(|(v, perm)| match perm {
                Some(p) => self.desc(*v).permuted(p),
                None => self.desc(*v),
            })
            .collect();
        let out_desc = self.desc(out_v);
        let name = format!("ew_{}", sanitize(&graph.nodes[last].name));
        let k = graph_ops::elementwise(&name, &descs, &out_desc, &expr)
            .map_err(|e| self.node_err(&graph.nodes[last], e))?;
        let mut args: Vec<BufferId> = vec![];
        for (v, _) in &ext {
            args.push(self.buf(*v)?);
        }
        args.push(self.buf(out_v)?);
        let label = graph.nodes[last].name.clone();
        self.kernel_step(&label, Op::Nodes(nodes), k, args);
        Ok(())
    }

    /// The expression of the group `members` (graph order) and its nodes for the CPU
    /// executor. `ext` lists the kernel inputs, distinct outside values that are not
    /// one-element constants, each with the permutation it is read through (a Transpose's
    /// input); values already in it keep their position (`Expr::Input(i)` is `ext[i]`), new
    /// ones are appended. `temps` gives the operand of outside values that are temporaries of
    /// an enclosing fused step; the values made inside are temporaries numbered from
    /// `temp_base`, but for the last node's output, which is `out`.
    fn group_expr(
        &mut self,
        members: &[usize],
        ext: &mut Vec<(ValueId, Option<Vec<usize>>)>,
        temps: &HashMap<ValueId, Operand>,
        out: Operand,
        temp_base: u32,
    ) -> Result<(Expr, Vec<NodeOp>), ProgramError> {
        let graph = self.graph;
        let last = *members.last().expect("a group has a node");
        let inside: Vec<ValueId> = members.iter().flat_map(|&m| graph.nodes[m].outputs.clone()).collect();
        let out_v = graph.nodes[last].outputs[0];
        let temp_id = |v: ValueId| temp_base + inside.iter().position(|&x| x == v).expect("inside value") as u32;
        let mut exprs: HashMap<ValueId, Expr> = HashMap::new();
        let mut nodes = vec![];
        for &m in members {
            let node = &graph.nodes[m];
            let mut args = vec![];
            let mut operands = vec![];
            let perm = (node.op_type == "Transpose").then(|| transpose_perm(graph, node));
            for (pos, v) in node.inputs.iter().enumerate() {
                let Some(v) = *v else {
                    args.push(None);
                    operands.push(None);
                    continue;
                };
                if node.op_type == "Expand" && pos == 1 {
                    // The target shape: the broadcast happens at the inputs.
                    args.push(None);
                    operands.push(Some(self.operand(v)?));
                } else if let Some(e) = exprs.get(&v) {
                    args.push(Some(e.clone()));
                    let f = graph.fact(v);
                    operands.push(Some(Operand::Temp { id: temp_id(v), dtype: f.dtype, shape: f.shape.clone() }));
                } else if let Some((dtype, value)) = scalar_constant(graph, v).filter(|_| node.op_type != "Expand") {
                    args.push(Some(Expr::Const(value, dtype)));
                    operands.push(Some(Operand::Scalar { dtype, value }));
                } else {
                    let key = (v, perm.clone());
                    let at = match ext.iter().position(|x| *x == key) {
                        Some(at) => at,
                        None => {
                            ext.push(key);
                            ext.len() - 1
                        }
                    };
                    args.push(Some(Expr::Input(at)));
                    operands.push(Some(match temps.get(&v) {
                        Some(t) => t.clone(),
                        None => self.operand(v)?,
                    }));
                }
            }
            let expr = node_expr(graph, node, &args).map_err(|e| self.node_err(node, e))?;
            let o = node.outputs[0];
            let f = graph.fact(o);
            let operand = if o == out_v {
                out.clone()
            } else {
                Operand::Temp { id: temp_id(o), dtype: f.dtype, shape: f.shape.clone() }
            };
            exprs.insert(o, expr);
            let op = self.node_op(node, operands, vec![operand]);
            nodes.push(op);
        }
        let expr = exprs.remove(&out_v).expect("group output");
        Ok((expr, nodes))
    }

    /// The attentions to fuse (see [`AttentionFusion`]): a Softmax over the last axis read only
    /// by an activation×activation MatMul as its left operand, whose input is an activation
    /// MatMul's output, directly or through an elementwise group (no Transpose in it) that
    /// reads it and other values; every value on the way read by the next node alone; heads
    /// the kernel takes ([`graph_ops::attention_fits`]: any number of keys); float types.
    fn find_attention(&self, groups: &HashMap<usize, Vec<usize>>) -> Vec<AttentionFusion> {
        let graph = self.graph;
        let producer = |v: ValueId| graph.nodes.iter().position(|n| n.outputs.contains(&v));
        let act_matmul =
            |i: usize| graph.nodes[i].op_type == "MatMul" && !self.planned.contains_key(graph.nodes[i].name.as_str());
        let float = |v: ValueId| matches!(graph.fact(v).dtype, DType::F32 | DType::F16 | DType::BF16);
        let mut found = vec![];
        for (pv, node) in graph.nodes.iter().enumerate() {
            if !act_matmul(pv) {
                continue;
            }
            let (Some(p), Some(vv)) = (node.inputs.first().copied().flatten(), node.inputs.get(1).copied().flatten())
            else {
                continue;
            };
            let Some(sm) = producer(p) else { continue };
            let smn = &graph.nodes[sm];
            let rank = graph.fact(p).shape.len();
            let axis = smn.attrs.int("axis", if smn.opset >= 13 { -1 } else { 1 }).unwrap_or(0);
            if smn.op_type != "Softmax"
                || self.only_consumer(p) != Some(pv)
                || rank < 2
                || norm_axis(axis, rank) != Some(rank - 1)
            {
                continue;
            }
            let Some(x) = smn.inputs.first().copied().flatten() else { continue };
            let Some(g) = producer(x) else { continue };
            if self.only_consumer(x) != Some(sm) {
                continue;
            }
            let (scores, group) = if act_matmul(g) {
                (g, vec![])
            } else if let Some(members) = groups.get(&g) {
                if members.iter().any(|&m| graph.nodes[m].op_type == "Transpose") {
                    continue;
                }
                let inside: Vec<ValueId> = members.iter().flat_map(|&m| graph.nodes[m].outputs.clone()).collect();
                let mut matmuls: Vec<usize> = members
                    .iter()
                    .flat_map(|&m| graph.nodes[m].inputs.iter().flatten())
                    .filter(|v| !inside.contains(v))
                    .filter_map(|&v| producer(v).filter(|&pr| act_matmul(pr)))
                    .collect();
                matmuls.sort_unstable();
                matmuls.dedup();
                let [s] = matmuls[..] else { continue };
                (s, members.clone())
            } else {
                continue;
            };
            let sv = graph.nodes[scores].outputs[0];
            let readers_ok =
                self.consumers[sv.0 as usize].iter().all(|c| group.contains(c) || group.is_empty() && *c == sm);
            if self.is_output[sv.0 as usize] || !readers_ok {
                continue;
            }
            let snode = &graph.nodes[scores];
            let (Some(q), Some(k)) = (snode.inputs.first().copied().flatten(), snode.inputs.get(1).copied().flatten())
            else {
                continue;
            };
            let o = node.outputs[0];
            if ![q, k, vv, sv, x, p, o].into_iter().all(float) {
                continue;
            }
            let (kf, vf, of) = (graph.fact(k), graph.fact(vv), graph.fact(o));
            if kf.shape.len() < 2 || vf.shape.len() < 2 || of.shape.len() < 2 || graph.fact(q).shape.len() < 2 {
                continue;
            }
            let (d, sk) = (kf.shape[kf.shape.len() - 2], kf.shape[kf.shape.len() - 1]);
            let dv = vf.shape[vf.shape.len() - 1];
            let batch: usize = of.shape[..of.shape.len() - 2].iter().product();
            let sq = of.shape[of.shape.len() - 2];
            if [sq, sk, d, dv].contains(&0) || !graph_ops::attention_fits(batch, sq, d, dv) {
                continue;
            }
            // The Transpose after it, when nothing else reads the product, is the output's strides.
            let out_transpose = self
                .only_consumer(o)
                .filter(|&t| graph.nodes[t].op_type == "Transpose" && groups.get(&t).is_none_or(|m| m.len() == 1));
            found.push(AttentionFusion { scores, group, softmax: sm, pv, out_transpose });
        }
        found
    }

    /// One step for a fused attention: the [`graph_ops::attention`] kernel, its nodes (the
    /// folded Transposes, both MatMuls, the score group, the Softmax) for the CPU executor.
    fn lower_attention(&mut self, f: &AttentionFusion) -> Result<(), ProgramError> {
        let graph = self.graph;
        let pv_node = &graph.nodes[f.pv];
        let s_node = &graph.nodes[f.scores];
        let mut nodes = vec![];
        let mut next_temp = 0u32;
        let mut temp = |v: ValueId| {
            let fact = graph.fact(v);
            next_temp += 1;
            Operand::Temp { id: next_temp - 1, dtype: fact.dtype, shape: fact.shape.clone() }
        };
        // q and k (the scores MatMul's operands) and v, each through its folded Transpose.
        let mut descs = vec![];
        let mut args = vec![];
        let mut operands = vec![];
        for (at, pos) in [(f.scores, 0), (f.scores, 1), (f.pv, 1)] {
            let node = &graph.nodes[at];
            let v = node.inputs[pos].ok_or_else(|| self.node_err(node, format!("input {pos} is missing")))?;
            let transpose = self.folded.get(&at).and_then(|fs| fs.iter().find(|(p, _)| *p == pos)).map(|&(_, t)| t);
            let src = match transpose {
                Some(t) => graph.nodes[t].inputs[0].ok_or_else(|| self.node_err(&graph.nodes[t], "input 0 is missing"))?,
                None => v,
            };
            // The source as the kernel reads it, and as the CPU executor gets it.
            let (desc, arg, src_op) = match self.views.get(&src).cloned() {
                Some(chain) => {
                    let fact = graph.fact(src);
                    let desc = TensorDesc { dtype: fact.dtype, shape: fact.shape.clone(), strides: chain.strides.clone() };
                    let mut op = self.operand(chain.base)?;
                    for &n in &chain.nodes {
                        let cn = &graph.nodes[n];
                        let mut inputs = vec![Some(op)];
                        for c in cn.inputs.iter().skip(1) {
                            inputs.push(c.map(|c| self.operand(c)).transpose()?);
                        }
                        let out = temp(cn.outputs[0]);
                        nodes.push(self.node_op(cn, inputs, vec![out.clone()]));
                        op = out;
                    }
                    (desc, Arg::Buf(self.buf(chain.base)?, chain.offset), op)
                }
                None => (self.desc(src), Arg::Buf(self.buf(src)?, 0), self.operand(src)?),
            };
            match transpose {
                Some(t) => {
                    let tnode = &graph.nodes[t];
                    descs.push(desc.permuted(&transpose_perm(graph, tnode)));
                    let tmp = temp(v);
                    nodes.push(self.node_op(tnode, vec![Some(src_op)], vec![tmp.clone()]));
                    operands.push(tmp);
                }
                None => {
                    descs.push(desc);
                    operands.push(src_op);
                }
            }
            args.push(arg);
        }
        let sv = s_node.outputs[0];
        let s_temp = temp(sv);
        nodes.push(self.node_op(
            s_node,
            vec![Some(operands[0].clone()), Some(operands[1].clone())],
            vec![s_temp.clone()],
        ));
        let sm_node = &graph.nodes[f.softmax];
        let x = sm_node.inputs[0].ok_or_else(|| self.node_err(sm_node, "input 0 is missing"))?;
        let mut ext: Vec<(ValueId, Option<Vec<usize>>)> = vec![(sv, None)];
        let (expr, x_op) = if f.group.is_empty() {
            (Expr::Input(0), s_temp.clone())
        } else {
            let x_temp = temp(x);
            let temps = HashMap::from([(sv, s_temp.clone())]);
            let (expr, group_nodes) = self.group_expr(&f.group, &mut ext, &temps, x_temp.clone(), 1000)?;
            nodes.extend(group_nodes);
            (expr, x_temp)
        };
        let p_temp = temp(sm_node.outputs[0]);
        nodes.push(self.node_op(sm_node, vec![Some(x_op)], vec![p_temp.clone()]));
        let o = pv_node.outputs[0];
        let (out_desc, out_v) = match f.out_transpose {
            Some(t) => {
                let tnode = &graph.nodes[t];
                let perm = transpose_perm(graph, tnode);
                let mut inverse = vec![0; perm.len()];
                for (i, &p) in perm.iter().enumerate() {
                    inverse[p] = i;
                }
                (self.desc(tnode.outputs[0]).permuted(&inverse), tnode.outputs[0])
            }
            None => (self.desc(o), o),
        };
        let o_op = if f.out_transpose.is_some() { temp(o) } else { self.operand(o)? };
        nodes.push(self.node_op(pv_node, vec![Some(p_temp), Some(operands[2].clone())], vec![o_op.clone()]));
        if let Some(t) = f.out_transpose {
            let final_op = self.operand(out_v)?;
            nodes.push(self.node_op(&graph.nodes[t], vec![Some(o_op)], vec![final_op]));
        }
        let extras: Vec<TensorDesc> = ext[1..].iter().map(|(v, _)| self.desc(*v)).collect();
        for (v, _) in &ext[1..] {
            args.push(Arg::Buf(self.buf(*v)?, 0));
        }
        args.push(Arg::Buf(self.buf(out_v)?, 0));
        let name = format!("attention_{}", sanitize(&pv_node.name));
        let score_t = graph.fact(sv).dtype;
        let k = graph_ops::attention(&name, &descs[0], &descs[1], &descs[2], score_t, &extras, &expr, &out_desc)
            .map_err(|e| self.node_err(pv_node, e))?;
        self.stats.fused_nodes += nodes.len();
        self.kernel_step_args(&pv_node.name.clone(), Op::Nodes(nodes), k, args);
        Ok(())
    }

    /// The values a fused attention's Q, K and V are read from: each MatMul operand, or the
    /// input of the Transpose folded into it.
    fn attention_sources(&self, f: &AttentionFusion) -> Vec<ValueId> {
        let graph = self.graph;
        let mut out = vec![];
        for (at, pos) in [(f.scores, 0), (f.scores, 1), (f.pv, 1)] {
            let folded = self.folded.get(&at).and_then(|fs| fs.iter().find(|(p, _)| *p == pos));
            let v = match folded {
                Some(&(_, t)) => graph.nodes[t].inputs.first().copied().flatten(),
                None => graph.nodes[at].inputs.get(pos).copied().flatten(),
            };
            // Read by the Transpose or the MatMul alone (Q and K of one value are not in place).
            out.extend(v.filter(|&v| self.only_consumer(v).is_some()));
        }
        out
    }

    fn lower_other(&mut self, node: &Node) -> Result<(), ProgramError> {
        let graph = self.graph;
        let input = |i: usize| node.inputs.get(i).copied().flatten();
        let need = |i: usize| input(i).ok_or_else(|| self.node_err(node, format!("input {i} is missing")));
        let out = node.outputs[0];
        let ofact = graph.fact(out).clone();
        let name = format!("{}_{}", node.op_type.to_lowercase(), sanitize(&node.name));
        let attrs = &node.attrs;
        if REMAPS.contains(&node.op_type.as_str())
            && node.inputs.iter().skip(1).flatten().all(|&v| graph.initializers.contains_key(&v))
        {
            return self.lower_remap(node);
        }
        let kernel = match node.op_type.as_str() {
            "Gather" => {
                let (data, idx) = (need(0)?, need(1)?);
                let rank = graph.fact(data).shape.len();
                let axis = norm_axis(attrs.int("axis", 0).unwrap_or(0), rank)
                    .ok_or_else(|| self.node_err(node, "axis out of range"))?;
                graph_ops::gather(&name, &self.desc(data), &self.desc(idx), axis)
            }
            "LayerNormalization" => {
                let (shape, axis, eps) = norm_fusion::norm_geometry(self, node).map_err(|e| self.node_err(node, e))?;
                let x = need(0)?;
                let cols: usize = shape[axis..].iter().product();
                let rows: usize = shape[..axis].iter().product();
                graph_ops::layer_norm(
                    &name,
                    rows,
                    cols,
                    eps,
                    graph.fact(x).dtype,
                    input(1).map(|v| graph.fact(v).dtype),
                    input(2).map(|v| graph.fact(v).dtype),
                    ofact.dtype,
                )
            }
            "Softmax" | "LogSoftmax" => {
                let x = need(0)?;
                let shape = &graph.fact(x).shape;
                let default = if node.opset >= 13 { -1 } else { 1 };
                let axis = norm_axis(attrs.int("axis", default).unwrap_or(default), shape.len())
                    .ok_or_else(|| self.node_err(node, "axis out of range"))?;
                if node.opset >= 13 && axis + 1 != shape.len() {
                    return Err(self.node_err(node, "softmax over an axis other than the last is not built"));
                }
                let cols: usize = shape[axis..].iter().product();
                let rows = ofact.numel() / cols.max(1);
                graph_ops::softmax(&name, rows, cols, ofact.dtype, node.op_type == "LogSoftmax")
            }
            op @ ("ReduceSum" | "ReduceMean" | "ReduceMax" | "ReduceMin" | "ReduceProd" | "ReduceSumSquare"
            | "ReduceL2") => {
                let x = need(0)?;
                let rank = graph.fact(x).shape.len();
                let axes: Option<Vec<i64>> = match input(1) {
                    Some(a) => Some(
                        constant(graph, a).ok_or_else(|| self.node_err(node, "axes must be constant"))?.to_i64_vec(),
                    ),
                    None => attrs.ints_opt("axes").ok().flatten().map(|v| v.to_vec()),
                };
                let noop = attrs.int("noop_with_empty_axes", 0).unwrap_or(0) != 0;
                let mut axes: Vec<usize> = match axes {
                    Some(a) if !a.is_empty() => a
                        .iter()
                        .map(|&x| norm_axis(x, rank).ok_or_else(|| self.node_err(node, "axis out of range")))
                        .collect::<Result<_, _>>()?,
                    _ if noop => vec![],
                    _ => (0..rank).collect(),
                };
                axes.sort_unstable();
                axes.dedup();
                let kind = match op {
                    "ReduceSum" => Reduce::Sum,
                    "ReduceMean" => Reduce::Mean,
                    "ReduceMax" => Reduce::Max,
                    "ReduceMin" => Reduce::Min,
                    "ReduceProd" => Reduce::Prod,
                    "ReduceSumSquare" => Reduce::SumSquare,
                    _ => Reduce::L2,
                };
                if axes.is_empty() {
                    // Nothing reduced: an elementwise identity (or square) of the input.
                    return self.lower_group_single(node);
                }
                graph_ops::reduce(&name, &self.desc(x), &axes, kind, ofact.dtype)
            }
            "MatMul" if self.folded.contains_key(&self.node_index(node)) => return self.lower_folded_matmul(node),
            "MatMul" => {
                let (a, bv) = (need(0)?, need(1)?);
                let (mut da, mut db) = (self.desc(a), self.desc(bv));
                // 1-D operands: ONNX promotes them to matrices and drops the dim after.
                if da.shape.len() == 1 {
                    da = TensorDesc::contiguous(da.dtype, &[1, da.shape[0]]);
                }
                if db.shape.len() == 1 {
                    db = TensorDesc::contiguous(db.dtype, &[db.shape[0], 1]);
                }
                let mut oshape = ofact.shape.clone();
                if graph.fact(a).shape.len() == 1 {
                    oshape.insert(oshape.len().saturating_sub(1), 1);
                }
                if graph.fact(bv).shape.len() == 1 {
                    oshape.push(1);
                }
                graph_ops::matmul(&name, &da, &db, &TensorDesc::contiguous(ofact.dtype, &oshape))
            }
            "Concat" => {
                let ins: Vec<ValueId> = node.inputs.iter().flatten().copied().collect();
                let rank = ofact.shape.len();
                let axis = norm_axis(attrs.int("axis", 0).unwrap_or(0), rank)
                    .ok_or_else(|| self.node_err(node, "axis out of range"))?;
                let descs: Vec<TensorDesc> = ins.iter().map(|&v| self.desc(v)).collect();
                graph_ops::concat(&name, &descs, axis, &self.desc(out))
            }
            _ => {
                let known = registry().get(&node.op_type).is_some();
                return Err(self.node_err(
                    node,
                    if known { "runs on the CPU reference but has no GPU kernel yet" } else { "unknown op" },
                ));
            }
        }
        .map_err(|e| self.node_err(node, e))?;
        // Kernel parameters: the present inputs in order, then the output.
        let mut operands = vec![];
        let mut args = vec![];
        for v in &node.inputs {
            match v {
                Some(v) => {
                    operands.push(Some(self.operand(*v)?));
                    // A reduction's kernel reads the data only (the axes are in its code).
                    if !(node.op_type.starts_with("Reduce") && args.len() == 1) {
                        args.push(self.buf(*v)?);
                    }
                }
                None => operands.push(None),
            }
        }
        let mut outs = vec![self.operand(out)?];
        for v in &node.outputs[1..] {
            let f = graph.fact(*v);
            outs.push(Operand::Temp { id: 0, dtype: f.dtype, shape: f.shape.clone() });
        }
        args.push(self.buf(out)?);
        let op = self.node_op(node, operands, outs);
        self.kernel_step(&node.name.clone(), Op::Nodes(vec![op]), kernel, args);
        Ok(())
    }

    fn node_index(&self, node: &Node) -> usize {
        self.graph.nodes.iter().position(|n| std::ptr::eq(n, node)).expect("a node of the graph")
    }

    /// An activation×activation MatMul with the Transposes of [`Lowering::folded`] read through
    /// their permutations: one kernel; the step's nodes are the Transposes (into temporaries)
    /// and the MatMul, so the CPU executor computes exactly the graph's ops.
    fn lower_folded_matmul(&mut self, node: &Node) -> Result<(), ProgramError> {
        let graph = self.graph;
        let folds = self.folded[&self.node_index(node)].clone();
        let out = node.outputs[0];
        let mut nodes = vec![];
        let mut descs = vec![];
        let mut args = vec![];
        let mut operands = vec![];
        for pos in 0..2 {
            let v = node.inputs[pos].ok_or_else(|| self.node_err(node, format!("input {pos} is missing")))?;
            if graph.fact(v).shape.len() < 2 {
                return Err(self.node_err(node, "a folded transpose needs matrices"));
            }
            match folds.iter().find(|(p, _)| *p == pos) {
                Some(&(_, t)) => {
                    let tnode = &graph.nodes[t];
                    let src = tnode.inputs[0].ok_or_else(|| self.node_err(tnode, "input 0 is missing"))?;
                    let perm = transpose_perm(graph, tnode);
                    descs.push(self.desc(src).permuted(&perm));
                    args.push(self.buf(src)?);
                    let f = graph.fact(v);
                    let temp = Operand::Temp { id: pos as u32, dtype: f.dtype, shape: f.shape.clone() };
                    let src_op = self.operand(src)?;
                    let op = self.node_op(tnode, vec![Some(src_op)], vec![temp.clone()]);
                    nodes.push(op);
                    operands.push(Some(temp));
                }
                None => {
                    descs.push(self.desc(v));
                    args.push(self.buf(v)?);
                    operands.push(Some(self.operand(v)?));
                }
            }
        }
        let name = format!("matmul_{}", sanitize(&node.name));
        let k = graph_ops::matmul(&name, &descs[0], &descs[1], &self.desc(out)).map_err(|e| self.node_err(node, e))?;
        args.push(self.buf(out)?);
        let outs = vec![self.operand(out)?];
        let op = self.node_op(node, operands, outs);
        nodes.push(op);
        self.stats.fused_nodes += nodes.len();
        self.kernel_step(&node.name.clone(), Op::Nodes(nodes), k, args);
        Ok(())
    }

    /// A data-movement node whose only non-constant input is its data: the flat source index
    /// of every output element is found at compile time by running the op's reference `eval`
    /// on the data's element numbers, and one gather kernel reads through that map.
    fn lower_remap(&mut self, node: &Node) -> Result<(), ProgramError> {
        let graph = self.graph;
        let x = node.inputs[0].ok_or_else(|| self.node_err(node, "input 0 is missing"))?;
        let out = node.outputs[0];
        let xf = graph.fact(x).clone();
        let iota = Tensor::from_vec(xf.shape.clone(), (0..xf.numel() as i64).collect::<Vec<i64>>());
        let consts: Vec<Option<Tensor>> =
            node.inputs.iter().skip(1).map(|v| v.and_then(|v| constant(graph, v))).collect();
        let mut refs: Vec<Option<&Tensor>> = vec![Some(&iota)];
        refs.extend(consts.iter().map(|t| t.as_ref()));
        let def = registry().get(&node.op_type).ok_or_else(|| self.node_err(node, "unknown op"))?;
        let ctx = NodeCtx { name: &node.name, attrs: &node.attrs, opset: node.opset, n_outputs: 1 };
        let traced = (def.eval)(&ctx, &refs).map_err(|e| self.node_err(node, format!("tracing its sources: {e}")))?;
        let map = traced.into_iter().next().ok_or_else(|| self.node_err(node, "no output"))?;
        let ofact = graph.fact(out).clone();
        if map.len() != ofact.numel() || xf.numel() > i32::MAX as usize {
            return Err(self.node_err(node, "its source map does not fit"));
        }
        let idx: Vec<i32> = map.to_i64_vec().into_iter().map(|v| v as i32).collect();
        let name = format!("remap_{}", sanitize(&node.name));
        let k = graph_ops::gather(
            &name,
            &TensorDesc::contiguous(xf.dtype, &[xf.numel()]),
            &TensorDesc::contiguous(DType::I32, &[ofact.numel()]),
            0,
        )
        .map_err(|e| self.node_err(node, e))?;
        let map_buf = self.b.constant(&format!("{}.map", node.name), Data::I32(idx), false);
        let operands =
            node.inputs.iter().map(|v| v.map(|v| self.operand(v)).transpose()).collect::<Result<Vec<_>, _>>()?;
        let outs = vec![self.operand(out)?];
        let op = self.node_op(node, operands, outs);
        let args = vec![self.buf(x)?, map_buf, self.buf(out)?];
        self.kernel_step(&node.name.clone(), Op::Nodes(vec![op]), k, args);
        Ok(())
    }

    /// A non-elementwise node that reduces to an elementwise identity (e.g. a reduction over
    /// no axis): its own one-node group with the input read as is.
    fn lower_group_single(&mut self, node: &Node) -> Result<(), ProgramError> {
        let x = node.inputs[0].ok_or_else(|| self.node_err(node, "input 0 is missing"))?;
        let out = node.outputs[0];
        let expr = match node.op_type.as_str() {
            "ReduceSumSquare" => Expr::Binary(Binary::Mul, Box::new(Expr::Input(0)), Box::new(Expr::Input(0))),
            "ReduceL2" => Expr::Unary(Unary::Abs, Box::new(Expr::Input(0))),
            _ => Expr::Unary(Unary::Identity, Box::new(Expr::Input(0))),
        };
        let name = format!("ew_{}", sanitize(&node.name));
        let k = graph_ops::elementwise(&name, &[self.desc(x)], &self.desc(out), &expr)
            .map_err(|e| self.node_err(node, e))?;
        let operands =
            node.inputs.iter().map(|v| v.map(|v| self.operand(v)).transpose()).collect::<Result<Vec<_>, _>>()?;
        let outs = vec![self.operand(out)?];
        let op = self.node_op(node, operands, outs);
        let args = vec![self.buf(x)?, self.buf(out)?];
        self.kernel_step(&node.name.clone(), Op::Nodes(vec![op]), k, args);
        Ok(())
    }

    /// Whether node `i` is a Conv read through `Transpose(perm 0,3,1,2)` and written through
    /// `Transpose(perm 0,2,3,1)`, each its only neighbour: (the first, the second).
    fn nhwc_conv(&self, i: usize) -> Option<(usize, usize)> {
        let graph = self.graph;
        let node = &graph.nodes[i];
        if node.op_type != "Conv" || self.planned.contains_key(node.name.as_str()) || node.outputs.len() != 1 {
            return None;
        }
        let x = node.inputs.first().copied().flatten()?;
        if graph.fact(x).shape.len() != 4 || self.only_consumer(x) != Some(i) {
            return None;
        }
        let t_in = graph.nodes.iter().position(|n| n.outputs.contains(&x))?;
        let t_out = self.only_consumer(node.outputs[0])?;
        let is_transpose = |t: usize, perm: &[usize]| {
            graph.nodes[t].op_type == "Transpose" && transpose_perm(graph, &graph.nodes[t]) == perm
        };
        (is_transpose(t_in, &[0, 3, 1, 2]) && is_transpose(t_out, &[0, 2, 3, 1])).then_some((t_in, t_out))
    }

    /// An NHWC convolution ([`Lowering::nhwc_conv`]): one kernel reading the NHWC input and
    /// writing the NHWC output, with the bias and an activation chain after it in its epilogue.
    /// The step's nodes are the Transposes, the Conv and the chain, so the CPU executor computes
    /// exactly the graph's ops.
    fn lower_conv(&mut self, i: usize, t_in: usize, t_out: usize) -> Result<(), ProgramError> {
        let graph = self.graph;
        let node = &graph.nodes[i];
        let xh = graph.nodes[t_in].inputs[0].ok_or_else(|| self.node_err(node, "the input transpose reads nothing"))?;
        let w = node.inputs.get(1).copied().flatten().ok_or_else(|| self.node_err(node, "input 1 is missing"))?;
        let bias = node.inputs.get(2).copied().flatten();
        let yh = graph.nodes[t_out].outputs[0];
        let (xs, ws) = (graph.fact(node.inputs[0].expect("checked")).shape.clone(), graph.fact(w).shape.clone());
        if !matches!(graph.fact(xh).dtype, DType::F32 | DType::F16 | DType::BF16) || ws.len() != 4 {
            return Err(self.node_err(node, "only 2-D f32, f16 and bf16 convolutions are built"));
        }
        let wt = constant(graph, w).ok_or_else(|| self.node_err(node, "a non-constant weight is not built"))?;
        let bt = match bias {
            Some(b) => Some(constant(graph, b).ok_or_else(|| self.node_err(node, "a non-constant bias is not built"))?),
            None => None,
        };
        let attrs = &node.attrs;
        let pair = |name: &str| -> Result<(usize, usize), ProgramError> {
            match attrs.ints_opt(name).ok().flatten() {
                Some([a, b]) if *a > 0 && *b > 0 => Ok((*a as usize, *b as usize)),
                Some(v) => Err(self.node_err(node, format!("{name} {v:?} is not two positive integers"))),
                None => Ok((1, 1)),
            }
        };
        let (stride, dilation) = (pair("strides")?, pair("dilations")?);
        let (kh, kw) = (ws[2], ws[3]);
        let pads: [usize; 4] = match attrs.string("auto_pad", "NOTSET").unwrap_or("NOTSET") {
            "NOTSET" => match attrs.ints_opt("pads").ok().flatten() {
                Some(p) if p.len() == 4 && p.iter().all(|&x| x >= 0) => {
                    [p[0] as usize, p[1] as usize, p[2] as usize, p[3] as usize]
                }
                Some(p) => return Err(self.node_err(node, format!("pads {p:?} are not four non-negative integers"))),
                None => [0; 4],
            },
            "VALID" => [0; 4],
            mode @ ("SAME_UPPER" | "SAME_LOWER") => {
                let same = |size: usize, k: usize, s: usize, d: usize| {
                    let total = ((size.div_ceil(s) - 1) * s + (k - 1) * d + 1).saturating_sub(size);
                    if mode == "SAME_UPPER" {
                        (total / 2, total - total / 2)
                    } else {
                        (total - total / 2, total / 2)
                    }
                };
                let (t, b) = same(xs[2], kh, stride.0, dilation.0);
                let (l, r) = same(xs[3], kw, stride.1, dilation.1);
                [t, l, b, r]
            }
            other => return Err(self.node_err(node, format!("auto_pad {other} is not an ONNX mode"))),
        };
        let shape = graph_ops::ConvShape {
            n: xs[0],
            h: xs[2],
            w: xs[3],
            c_in: xs[1],
            c_out: ws[0],
            groups: attrs.int("group", 1).unwrap_or(1).max(1) as usize,
            kh,
            kw,
            stride,
            dilation,
            pads,
        };
        let ys = &graph.fact(yh).shape;
        if ys[..] != [shape.n, shape.oh(), shape.ow(), shape.c_out] {
            return Err(self.node_err(node, format!("output {ys:?} does not match the convolution's shape")));
        }
        let mut activation = Activation::None;
        let mut chain = vec![];
        let mut out = yh;
        if self.options.fuse_epilogues {
            if let Some((act, end, members)) = self.activation_after(yh) {
                (activation, out, chain) = (act, end, members);
                self.stats.fused_epilogues += 1;
            }
        }
        let w32: Vec<f32> = wt.to_f64_vec().into_iter().map(|x| x as f32).collect();
        let packed = graph_ops::pack_conv_weight(&shape, &w32).map_err(|e| self.node_err(node, e))?;
        let name = format!("conv_{}", sanitize(&node.name));
        let k = graph_ops::conv_nhwc(&name, &shape, graph.fact(xh).dtype, bt.is_some(), activation)
            .map_err(|e| self.node_err(node, e))?;
        let wb = self.b.constant(&format!("{}.packed", node.name), Data::F32(packed), false);
        let bb = match bt {
            Some(b) => self.b.constant(
                &format!("{}.bias", node.name),
                Data::F32(b.to_f64_vec().into_iter().map(|x| x as f32).collect()),
                false,
            ),
            None => wb,
        };
        // The step's nodes, inner values as temporaries.
        let members: Vec<usize> = [t_in, i, t_out].into_iter().chain(chain).collect();
        let inside: Vec<ValueId> = members.iter().map(|&m| graph.nodes[m].outputs[0]).collect();
        let mut nodes = vec![];
        for &m in &members {
            let mnode = &graph.nodes[m];
            let mut operands = vec![];
            for v in &mnode.inputs {
                operands.push(match *v {
                    None => None,
                    Some(v) => Some(match inside.iter().position(|&x| x == v) {
                        Some(id) => {
                            let f = graph.fact(v);
                            Operand::Temp { id: id as u32, dtype: f.dtype, shape: f.shape.clone() }
                        }
                        // One-element constants of the activation chain are literals.
                        None => match scalar_constant(graph, v).filter(|_| ![t_in, i, t_out].contains(&m)) {
                            Some((dtype, value)) => Operand::Scalar { dtype, value },
                            None => self.operand(v)?,
                        },
                    }),
                });
            }
            let o = mnode.outputs[0];
            let f = graph.fact(o);
            let result = if o == out {
                self.operand(o)?
            } else {
                let id = inside.iter().position(|&x| x == o).expect("inside value") as u32;
                Operand::Temp { id, dtype: f.dtype, shape: f.shape.clone() }
            };
            let op = self.node_op(mnode, operands, vec![result]);
            nodes.push(op);
        }
        let args = vec![self.buf(xh)?, wb, bb, self.buf(out)?];
        self.kernel_step(&node.name.clone(), Op::Nodes(nodes), k, args);
        Ok(())
    }

    /// A planned MatMul/Gemm: its sub-operator kernels, with a bias and activation chain after
    /// it fused into the last one's epilogue (marked `done`).
    fn lower_planned(&mut self, i: usize, op: &OperatorPlan, done: &mut [bool]) -> Result<(), ProgramError> {
        let graph = self.graph;
        let node = &graph.nodes[i];
        if op.orientation != crate::plan::suboperator::Orientation::WeightRight {
            return Err(self.node_err(node, "a constant weight on the left is not built into models yet"));
        }
        let (k, n) = (op.rows, op.cols);
        let x = node.inputs[0].ok_or_else(|| self.node_err(node, "input 0 is missing"))?;
        let act_dtype = graph.fact(x).dtype;
        if !matches!(act_dtype, DType::F32 | DType::F16 | DType::BF16) {
            return Err(self.node_err(node, format!("{} activations are not built into models yet", act_dtype.name())));
        }
        let m = graph.fact(x).numel() / k.max(1);
        if m * k != graph.fact(x).numel() {
            return Err(self.node_err(node, format!("input of {} elements is not rows of {k}", graph.fact(x).numel())));
        }
        let wv = node.inputs[1].ok_or_else(|| self.node_err(node, "weight missing"))?;
        let wt = constant(graph, wv).ok_or_else(|| self.node_err(node, "weight is not constant"))?;
        let mut w: Vec<f32> = wt.to_f64_vec().into_iter().map(|x| x as f32).collect();
        if op.transposed {
            w = transpose(&w, n, k);
        }
        let mut bias: Option<Vec<f32>> = None;
        let mut out = node.outputs[0];
        if node.op_type == "Gemm" {
            let alpha = node.attrs.float("alpha", 1.0).unwrap_or(1.0);
            let beta = node.attrs.float("beta", 1.0).unwrap_or(1.0);
            if node.attrs.int("transA", 0).unwrap_or(0) != 0 {
                return Err(self.node_err(node, "transA is not built"));
            }
            w.iter_mut().for_each(|x| *x *= alpha);
            if let Some(c) = node.inputs.get(2).copied().flatten() {
                let ct = constant(graph, c).ok_or_else(|| self.node_err(node, "a non-constant C is not built"))?;
                let cv: Vec<f32> = ct.to_f64_vec().into_iter().map(|x| (x * beta as f64) as f32).collect();
                bias = Some(match cv.len() {
                    1 => vec![cv[0]; n],
                    l if l == n => cv,
                    _ => return Err(self.node_err(node, "C must broadcast along rows")),
                });
            }
        }
        let mut activation = Activation::None;
        if self.options.fuse_epilogues {
            if bias.is_none() {
                if let Some((add_out, b, add_i)) = self.bias_after(out, n) {
                    bias = Some(b);
                    out = add_out;
                    done[add_i] = true;
                    self.stats.fused_epilogues += 1;
                }
            }
            if let Some((act, end, members)) = self.activation_after(out) {
                activation = act;
                out = end;
                for m in members {
                    done[m] = true;
                }
                self.stats.fused_epilogues += 1;
            }
        }
        let epilogue = Epilogue { bias: bias.is_some(), activation };
        let mut planned_op = op.clone();
        planned_op.m = m;
        let planned =
            crate::codegen::from_plan::kernels_for_operator(&planned_op, &w).map_err(|e| self.node_err(node, e))?;
        if planned.is_empty() {
            // Every weight element pruned: the output is the epilogue of zero.
            return self.lower_all_pruned(node, x, out, (m, k, n), bias, activation);
        }
        // The weight the kernels compute with: the sum of the parts (pruned elements absent).
        let mut pruned = vec![0.0f32; k * n];
        for pk in &planned {
            pruned.iter_mut().zip(&pk.weight).for_each(|(a, b)| *a += b);
        }
        let csr = Csr::from_dense(&pruned, k, n);
        if csr.nnz() < k * n {
            self.stats.sparse_ops += 1;
        }
        self.stats.planned_ops += 1;
        self.stats.dense_weight_bytes += 4 * k * n;
        let a_buf = self.buf(x)?;
        let c_buf = self.buf(out)?;
        let bias_buf = match &bias {
            Some(b) => Some(self.b.constant(&format!("{}.bias", node.name), float_data(act_dtype, b), false)),
            None => None,
        };
        let last = planned.len() - 1;
        let mut launches = vec![];
        let mut packed = vec![];
        for (p, pk) in planned.into_iter().enumerate() {
            let mut spec = pk.spec;
            spec.m = m;
            if spec.block == (1, 1) && spec.dtype == crate::codegen::Dtype::F32 {
                if let Some(t) = self.options.fine_tile {
                    spec.tile = Some(t);
                    spec.engine = crate::codegen::Engine::Tf32x3;
                }
            }
            if p == last {
                spec.epilogue = epilogue;
            }
            let library = if self.options.stream_dense {
                crate::codegen::library_takes(&spec)
            } else {
                crate::codegen::library_takes_dense(&spec)
            };
            if self.options.library_dense && library {
                self.lower_library_part(
                    node,
                    p,
                    &spec,
                    &pk.weight,
                    (a_buf, c_buf, bias_buf),
                    &mut launches,
                    &mut packed,
                )?;
                continue;
            }
            let kernel = crate::codegen::specialize(&spec).map_err(|e| self.node_err(node, e))?;
            if kernel.family == Family::Epilogue {
                return Err(
                    self.node_err(node, format!("kernel family {} is not built into models", kernel.family.name()))
                );
            }
            // A fine kernel's prepass writes its dense operand (Aᵀ in fp32) into a scratch of
            // this operator's own, launched just before it in the same step.
            let mut a_arg = a_buf;
            if let Some(pre) = &kernel.prepass {
                let scratch = self.b.buffer(
                    &format!("{}.p{p}.at", node.name),
                    Elem::F32,
                    pre.scratch_bytes.div_ceil(4),
                    Storage::Scratch,
                );
                let pid = self.b.kernel(&pre.name, &pre.source, pre.launch.smem_bytes);
                launches.push(Launch::Kernel {
                    kernel: pid,
                    grid: pre.launch.grid,
                    block: pre.launch.block,
                    args: vec![Arg::Buf(a_buf, 0), Arg::Buf(scratch, 0)],
                });
                a_arg = scratch;
            }
            let wdata = if kernel.values_embedded { vec![0.0] } else { kernel.pack_weight(&pk.weight) };
            let ptr = table(&kernel, true);
            let idx = table(&kernel, false);
            self.stats.packed_weight_bytes += act_dtype.size_bytes()
                * (if kernel.values_embedded { 0 } else { wdata.len() })
                + 4 * (ptr.len() + idx.len());
            let wl = wdata.len();
            let (pl, il) = (ptr.len(), idx.len());
            let kernel_dtype = match kernel.dtype {
                crate::codegen::Dtype::F32 => DType::F32,
                crate::codegen::Dtype::F16 => DType::F16,
                crate::codegen::Dtype::Bf16 => DType::BF16,
                crate::codegen::Dtype::I8 => DType::I8,
            };
            if kernel_dtype != act_dtype {
                return Err(self.node_err(
                    node,
                    format!(
                        "the planned kernel is {} but the activations are {}",
                        kernel_dtype.name(),
                        act_dtype.name()
                    ),
                ));
            }
            let wdata = float_data(act_dtype, &wdata);
            let wb = self.b.constant(&format!("{}.p{p}.w", node.name), wdata.clone(), false);
            let pb = self.b.constant(&format!("{}.p{p}.ptr", node.name), Data::I32(ptr.clone()), false);
            let ib = self.b.constant(&format!("{}.p{p}.idx", node.name), Data::I32(idx.clone()), false);
            packed.push((wb, wl, wdata.checksum()));
            packed.push((pb, pl, Data::I32(ptr).checksum()));
            packed.push((ib, il, Data::I32(idx).checksum()));
            let kid = self.b.kernel(&kernel.name, &kernel.source, kernel.launch.smem_bytes);
            let mut args = vec![
                Arg::Buf(a_arg, 0),
                Arg::Buf(wb, 0),
                Arg::Buf(pb, 0),
                Arg::Buf(ib, 0),
                Arg::Buf(bias_buf.unwrap_or(wb), 0),
                Arg::Buf(c_buf, 0),
            ];
            if let Some(tma) = kernel.tma_a {
                args.push(Arg::TensorMap { buf: a_buf, rows: m, cols: k, tma });
            }
            launches.push(Launch::Kernel { kernel: kid, grid: kernel.launch.grid, block: kernel.launch.block, args });
        }
        let matrix = self.b.matrix(csr);
        self.b.step(
            &node.name,
            Op::Spmm {
                a: a_buf,
                c: c_buf,
                rows: Rows::All(m),
                weight: matrix,
                packed,
                bias: bias_buf,
                epilogue,
                accumulate: false,
            },
            launches,
        );
        Ok(())
    }

    /// Part `p` of a planned operator as a library GEMM over its weight stored plainly
    /// (row-major `k × n` in the activations' type), with the kernels `codegen::library_gemm`
    /// puts around it: the bias written into C before (the GEMM adds into it), the rest of
    /// the epilogue in place after.
    #[allow(clippy::too_many_arguments)]
    fn lower_library_part(
        &mut self,
        node: &Node,
        p: usize,
        spec: &crate::codegen::SpmmSpec,
        weight: &[f32],
        (a_buf, c_buf, bias_buf): (BufferId, BufferId, Option<BufferId>),
        launches: &mut Vec<Launch>,
        packed: &mut Vec<(BufferId, usize, u64)>,
    ) -> Result<(), ProgramError> {
        let gemm = crate::codegen::library_gemm(spec).map_err(|e| self.node_err(node, e))?;
        let dtype = match spec.dtype {
            crate::codegen::Dtype::F16 => DType::F16,
            crate::codegen::Dtype::Bf16 => DType::BF16,
            other => return Err(self.node_err(node, format!("no library GEMM for {} weights", other.name()))),
        };
        let wdata = float_data(dtype, weight);
        self.stats.packed_weight_bytes += wdata.len() * dtype.size_bytes();
        self.stats.library_gemms += 1;
        let wb = self.b.constant(&format!("{}.p{p}.w", node.name), wdata.clone(), false);
        packed.push((wb, wdata.len(), wdata.checksum()));
        // The row kernels take the spmm kernels' arguments; they read only bias and C.
        let rows_args = vec![
            Arg::Buf(a_buf, 0),
            Arg::Buf(wb, 0),
            Arg::Buf(wb, 0),
            Arg::Buf(wb, 0),
            Arg::Buf(bias_buf.unwrap_or(wb), 0),
            Arg::Buf(c_buf, 0),
        ];
        if let Some(fill) = gemm.prefill {
            let kid = self.b.kernel(&fill.name, &fill.source, fill.launch.smem_bytes);
            let (grid, block) = (fill.launch.grid, fill.launch.block);
            launches.push(Launch::Kernel { kernel: kid, grid, block, args: rows_args.clone() });
        }
        launches.push(Launch::Gemm {
            a: a_buf,
            w: wb,
            c: c_buf,
            m: gemm.m,
            k: gemm.k,
            n: gemm.n,
            accumulate: gemm.accumulate,
        });
        if let Some(ep) = gemm.epilogue {
            let kid = self.b.kernel(&ep.name, &ep.source, ep.launch.smem_bytes);
            launches.push(Launch::Kernel {
                kernel: kid,
                grid: ep.launch.grid,
                block: ep.launch.block,
                args: rows_args,
            });
        }
        Ok(())
    }

    /// A planned operator whose weight is entirely pruned: `C = act(bias)` on every row (zero
    /// without a bias), as one step of the same op (an empty weight) and one small kernel.
    fn lower_all_pruned(
        &mut self,
        node: &Node,
        x: ValueId,
        out: ValueId,
        (m, k, n): (usize, usize, usize),
        bias: Option<Vec<f32>>,
        activation: Activation,
    ) -> Result<(), ProgramError> {
        self.stats.planned_ops += 1;
        self.stats.sparse_ops += 1;
        self.stats.dense_weight_bytes += 4 * k * n;
        let a_buf = self.buf(x)?;
        let c_buf = self.buf(out)?;
        // act(0) ≠ 0 (a Clip above zero) needs the kernel even without a bias.
        let zero_out = Epilogue { bias: false, activation }.apply(0.0, 0.0) == 0.0;
        let bias = if bias.is_none() && !zero_out { Some(vec![0.0; n]) } else { bias };
        let dt = self.graph.fact(out).dtype;
        let bias_buf = bias.map(|b| self.b.constant(&format!("{}.bias", node.name), float_data(dt, &b), false));
        let matrix = self.b.matrix(Csr { rows: k, cols: n, offsets: vec![0; k + 1], indices: vec![], values: vec![] });
        let epilogue = Epilogue { bias: bias_buf.is_some(), activation };
        let launch = match bias_buf {
            Some(bb) => {
                let x = Expr::Input(0);
                let expr = match activation {
                    Activation::None => Expr::Unary(Unary::Identity, Box::new(x)),
                    Activation::Relu => Expr::Unary(Unary::Relu, Box::new(x)),
                    Activation::GeluErf => gelu_erf_expr(x, dt),
                    Activation::Clip { lo, hi } => {
                        let lo = Expr::Const(lo as f64, dt);
                        let hi = Expr::Const(hi as f64, dt);
                        let low = Expr::Binary(Binary::Max, Box::new(x), Box::new(lo));
                        Expr::Binary(Binary::Min, Box::new(low), Box::new(hi))
                    }
                    other => return Err(self.node_err(node, format!("no kernel for an all-pruned {other:?} epilogue"))),
                };
                let name = format!("pruned_{}", sanitize(&node.name));
                let k = graph_ops::elementwise(
                    &name,
                    &[TensorDesc::contiguous(dt, &[n])],
                    &TensorDesc::contiguous(dt, &[m, n]),
                    &expr,
                )
                .map_err(|e| self.node_err(node, e))?;
                let kid = self.b.kernel(&k.name, &k.source, k.smem_bytes);
                Launch::Kernel {
                    kernel: kid,
                    grid: k.grid,
                    block: k.block,
                    args: vec![Arg::Buf(bb, 0), Arg::Buf(c_buf, 0)],
                }
            }
            None => Launch::Zero { dst: c_buf, at: 0, len: m * n },
        };
        self.b.step(
            &node.name,
            Op::Spmm {
                a: a_buf,
                c: c_buf,
                rows: Rows::All(m),
                weight: matrix,
                packed: vec![],
                bias: bias_buf,
                epilogue,
                accumulate: false,
            },
            vec![launch],
        );
        Ok(())
    }

    /// The nodes after planned `node` that its epilogue absorbs (the same choice
    /// [`Lowering::lower_planned`] makes).
    fn epilogue_nodes(&self, node: &Node, op: &OperatorPlan) -> Vec<usize> {
        let mut out = node.outputs[0];
        let mut nodes = vec![];
        let gemm_bias = node.op_type == "Gemm" && node.inputs.get(2).copied().flatten().is_some();
        if !gemm_bias {
            if let Some((add_out, _, add_i)) = self.bias_after(out, op.cols) {
                out = add_out;
                nodes.push(add_i);
            }
        }
        if let Some((_, _, members)) = self.activation_after(out) {
            nodes.extend(members);
        }
        nodes
    }

    /// `Add(y, b)` / `Add(b, y)` with `b` a constant of `n` elements (or one), when it is the
    /// only consumer of `y`: its output, the bias and the node index.
    fn bias_after(&self, y: ValueId, n: usize) -> Option<(ValueId, Vec<f32>, usize)> {
        let graph = self.graph;
        let c = self.only_consumer(y)?;
        let add = &graph.nodes[c];
        if add.op_type != "Add" || add.inputs.len() != 2 {
            return None;
        }
        let other = add.inputs.iter().flatten().find(|&&v| v != y).copied()?;
        let t = constant(graph, other)?;
        if t.dtype() != graph.fact(y).dtype || graph.fact(add.outputs[0]).shape != graph.fact(y).shape {
            return None;
        }
        let vals: Vec<f32> = t.to_f64_vec().into_iter().map(|x| x as f32).collect();
        let shape = t.shape();
        let row_vector = shape.iter().rev().skip(1).all(|&d| d == 1);
        let bias = match vals.len() {
            1 => vec![vals[0]; n],
            l if l == n && row_vector && shape.last() == Some(&n) => vals,
            _ => return None,
        };
        Some((add.outputs[0], bias, c))
    }

    /// The chain of elementwise nodes after `z` that computes one epilogue activation of `z`:
    /// (activation, the chain's output, its nodes). Found by growing the region of nodes that
    /// read only `z`, region values and one-element constants, then evaluating it with the
    /// reference ops on probe values.
    fn activation_after(&self, z: ValueId) -> Option<(Activation, ValueId, Vec<usize>)> {
        let graph = self.graph;
        if self.is_output[z.0 as usize] {
            return None;
        }
        let start = graph.nodes.iter().position(|n| n.outputs.contains(&z)).map_or(0, |p| p + 1);
        let mut region: Vec<usize> = vec![];
        let mut values = vec![z];
        for (i, node) in graph.nodes.iter().enumerate().skip(start) {
            if region.len() >= 8 {
                break;
            }
            if !is_elementwise(&node.op_type) || node.op_type == "Transpose" || node.outputs.len() != 1 {
                continue;
            }
            let ins: Vec<ValueId> = node.inputs.iter().flatten().copied().collect();
            let reads_region = ins.iter().any(|v| values.contains(v));
            let rest_scalar = ins.iter().all(|v| values.contains(v) || scalar_constant(graph, *v).is_some());
            if reads_region && rest_scalar && graph.fact(node.outputs[0]).shape == graph.fact(z).shape {
                region.push(i);
                values.push(node.outputs[0]);
            }
        }
        // Try each prefix ending where exactly one value leaves, longest first.
        for end in (0..region.len()).rev() {
            let members = &region[..=end];
            let outs: Vec<ValueId> = members.iter().map(|&m| graph.nodes[m].outputs[0]).collect();
            let internal = std::iter::once(z).chain(outs[..outs.len() - 1].iter().copied());
            let escapes = internal.into_iter().any(|v| {
                self.is_output[v.0 as usize] || self.consumers[v.0 as usize].iter().any(|c| !members.contains(c))
            });
            if escapes {
                continue;
            }
            let end_v = outs[outs.len() - 1];
            // A Clip with constant bounds (ReLU6) is a candidate of its own.
            let mut candidates = vec![Activation::GeluErf, Activation::Relu];
            if let [one] = members {
                if let Some(clip) = self.clip_bounds(&graph.nodes[*one]) {
                    candidates.push(clip);
                }
            }
            for act in candidates {
                if self.chain_computes(z, members, end_v, act) {
                    return Some((act, end_v, members.to_vec()));
                }
            }
        }
        None
    }

    /// The epilogue of a Clip node whose bounds are constants (absent: unbounded).
    fn clip_bounds(&self, node: &Node) -> Option<Activation> {
        if node.op_type != "Clip" {
            return None;
        }
        let bound = |i: usize, default: f32| -> Option<f32> {
            match node.inputs.get(i).copied().flatten() {
                Some(v) => scalar_constant(self.graph, v).map(|(_, x)| x as f32),
                None => Some(default),
            }
        };
        let (lo, hi) = if node.opset < 11 {
            (node.attrs.float("min", f32::MIN).ok()?, node.attrs.float("max", f32::MAX).ok()?)
        } else {
            (bound(1, f32::MIN)?, bound(2, f32::MAX)?)
        };
        Some(Activation::Clip { lo, hi })
    }

    /// Whether running `members` on probe values of `z` gives `act(z)` (relative 1e-6; 16-bit
    /// types within their rounding).
    fn chain_computes(&self, z: ValueId, members: &[usize], end: ValueId, act: Activation) -> bool {
        let graph = self.graph;
        // Probes in z's own type (a 16-bit model's chain computes in 16 bits).
        let dtype = graph.fact(z).dtype;
        let raw: Vec<f32> = (-40..=40).map(|i| i as f32 * 0.173).collect();
        let probe_t = Tensor::from_vec(vec![raw.len()], raw).cast(dtype);
        let probes = probe_t.to_f64_vec();
        let tolerance = match dtype {
            DType::F16 => 2e-3,
            DType::BF16 => 1e-2,
            _ => 1e-6,
        };
        let mut vals: HashMap<ValueId, Tensor> = HashMap::new();
        vals.insert(z, probe_t);
        for &m in members {
            let node = &graph.nodes[m];
            let ins: Vec<Option<Tensor>> = node
                .inputs
                .iter()
                .map(|v| v.and_then(|v| vals.get(&v).cloned().or_else(|| constant(graph, v))))
                .collect();
            let refs: Vec<Option<&Tensor>> = ins.iter().map(|t| t.as_ref()).collect();
            let Some(def) = registry().get(&node.op_type) else { return false };
            let ctx = NodeCtx { name: &node.name, attrs: &node.attrs, opset: node.opset, n_outputs: 1 };
            let Ok(mut outs) = (def.eval)(&ctx, &refs) else { return false };
            if outs.is_empty() {
                return false;
            }
            vals.insert(node.outputs[0], outs.swap_remove(0));
        }
        let Some(got) = vals.get(&end) else { return false };
        if got.len() != probes.len() {
            return false;
        }
        let e = Epilogue { bias: false, activation: act };
        got.to_f64_vec().iter().zip(&probes).all(|(g, &x)| {
            let want = e.apply(x, 0.0);
            (g - want).abs() <= tolerance * want.abs().max(1.0)
        })
    }
}

/// Normalizes an ONNX axis (negative counts from the end).
fn norm_axis(axis: i64, rank: usize) -> Option<usize> {
    crate::ir::normalize_axis(axis, rank)
}

/// A C identifier made from a node name.
fn sanitize(name: &str) -> String {
    let mut s: String = name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    if s.len() > 48 {
        let h = super::checksum(name.as_bytes());
        s = format!("{}_{h:08x}", &s[s.len() - 40..]);
        s = s.trim_start_matches('_').to_string();
    }
    s
}

/// `values` as a buffer of float type `dtype` (f32, f16 or bf16; rounded to nearest).
fn float_data(dtype: DType, values: &[f32]) -> Data {
    match dtype {
        DType::F16 => Data::F16(values.iter().map(|&x| half::f16::from_f32(x).to_bits()).collect()),
        DType::BF16 => Data::BF16(values.iter().map(|&x| half::bf16::from_f32(x).to_bits()).collect()),
        _ => Data::F32(values.to_vec()),
    }
}

fn transpose(w: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut t = vec![0.0; rows * cols];
    for r in 0..rows {
        for c in 0..cols {
            t[c * rows + r] = w[r * cols + c];
        }
    }
    t
}

/// A kernel's `ptr` (or `idx`) table as its launch reads it (one unread word when the pattern
/// is in the code).
fn table(kernel: &crate::codegen::Kernel, ptr: bool) -> Vec<i32> {
    let t = if ptr { kernel.ptr.clone() } else { kernel.device_idx() };
    if kernel.mode == crate::codegen::Mode::IndexStream && !t.is_empty() {
        t
    } else {
        vec![0]
    }
}

/// A Transpose node's permutation (reversed axes by default).
fn transpose_perm(graph: &Graph, node: &Node) -> Vec<usize> {
    match node.attrs.ints_opt("perm").ok().flatten() {
        Some(p) => p.iter().map(|&a| a as usize).collect(),
        None => {
            let rank = node.inputs[0].map_or(0, |x| graph.fact(x).shape.len());
            (0..rank).rev().collect()
        }
    }
}

/// `0.5·x·(1 + erf(x/√2))` in element type `t`.
fn gelu_erf_expr(x: Expr, t: DType) -> Expr {
    let c = |v: f64| Box::new(Expr::Const(v, t));
    let erf = Expr::Unary(
        Unary::Erf,
        Box::new(Expr::Binary(Binary::Mul, Box::new(x.clone()), c(std::f64::consts::FRAC_1_SQRT_2))),
    );
    let one_plus = Expr::Binary(Binary::Add, c(1.0), Box::new(erf));
    Expr::Binary(Binary::Mul, Box::new(Expr::Binary(Binary::Mul, c(0.5), Box::new(x))), Box::new(one_plus))
}

/// The expression of one elementwise node over its inputs' expressions.
fn node_expr(graph: &Graph, node: &Node, args: &[Option<Expr>]) -> Result<Expr, String> {
    let arg = |i: usize| -> Result<Expr, String> {
        args.get(i).cloned().flatten().ok_or_else(|| format!("input {i} is missing"))
    };
    let un = |u: Unary| -> Result<Expr, String> { Ok(Expr::Unary(u, Box::new(arg(0)?))) };
    let bin = |b: Binary| -> Result<Expr, String> {
        let mut e = arg(0)?;
        for i in 1..args.len() {
            e = Expr::Binary(b, Box::new(e), Box::new(arg(i)?));
        }
        Ok(e)
    };
    let dtype = |i: usize| node.inputs.get(i).copied().flatten().map(|v| graph.fact(v).dtype);
    Ok(match node.op_type.as_str() {
        "Add" => bin(Binary::Add)?,
        "Sub" => bin(Binary::Sub)?,
        "Mul" => bin(Binary::Mul)?,
        "Div" => bin(Binary::Div)?,
        "Pow" => {
            // ONNX lets the exponent have another type: it is cast to the base's.
            let base = dtype(0).ok_or("input 0 is missing")?;
            let mut e = arg(1)?;
            if dtype(1) != Some(base) {
                e = Expr::Cast(base, Box::new(e));
            }
            Expr::Binary(Binary::Pow, Box::new(arg(0)?), Box::new(e))
        }
        "Max" => bin(Binary::Max)?,
        "Min" => bin(Binary::Min)?,
        "Equal" => bin(Binary::Equal)?,
        "Less" => bin(Binary::Less)?,
        "Greater" => bin(Binary::Greater)?,
        "LessOrEqual" => bin(Binary::LessOrEqual)?,
        "GreaterOrEqual" => bin(Binary::GreaterOrEqual)?,
        "And" => bin(Binary::And)?,
        "Or" => bin(Binary::Or)?,
        "Neg" => un(Unary::Neg)?,
        "Abs" => un(Unary::Abs)?,
        "Exp" => un(Unary::Exp)?,
        "Log" => un(Unary::Log)?,
        "Sqrt" => un(Unary::Sqrt)?,
        "Reciprocal" => un(Unary::Reciprocal)?,
        "Erf" => un(Unary::Erf)?,
        "Tanh" => un(Unary::Tanh)?,
        "Sigmoid" => un(Unary::Sigmoid)?,
        "Relu" => un(Unary::Relu)?,
        "Not" => un(Unary::Not)?,
        "Floor" => un(Unary::Floor)?,
        "Ceil" => un(Unary::Ceil)?,
        // The permutation is in the input's description (see `lower_group`).
        "Transpose" => arg(0)?,
        // The broadcast to the output shape happens at the inputs.
        "Expand" => un(Unary::Identity)?,
        "Cast" => {
            let to = node.attrs.int("to", 0).map_err(|e| e.to_string())?;
            let to = DType::from_onnx(to as i32).ok_or_else(|| format!("Cast to type {to} is not built"))?;
            Expr::Cast(to, Box::new(arg(0)?))
        }
        "Where" => Expr::Where(Box::new(arg(0)?), Box::new(arg(1)?), Box::new(arg(2)?)),
        "Clip" => {
            let t = dtype(0).ok_or("input 0 is missing")?;
            let mut e = arg(0)?;
            let (lo, hi) = if node.opset < 11 {
                let lo = node.attrs.float("min", f32::MIN).map_err(|e| e.to_string())?;
                let hi = node.attrs.float("max", f32::MAX).map_err(|e| e.to_string())?;
                (Some(Expr::Const(lo as f64, t)), Some(Expr::Const(hi as f64, t)))
            } else {
                (args.get(1).cloned().flatten(), args.get(2).cloned().flatten())
            };
            if let Some(lo) = lo {
                e = Expr::Binary(Binary::Max, Box::new(e), Box::new(lo));
            }
            if let Some(hi) = hi {
                e = Expr::Binary(Binary::Min, Box::new(e), Box::new(hi));
            }
            e
        }
        "Gelu" => {
            let t = dtype(0).ok_or("input 0 is missing")?;
            let x = arg(0)?;
            if node.attrs.string("approximate", "none").map_err(|e| e.to_string())? != "none" {
                return Err("Gelu with approximate=tanh is not built".into());
            }
            gelu_erf_expr(x, t)
        }
        other => return Err(format!("{other} is not an elementwise op")),
    })
}

/// Inputs of a lowered model by name, checked against its signature.
pub fn check_model_inputs(inputs: &[Signature], given: &BTreeMap<String, Tensor>) -> Result<(), String> {
    for name in given.keys() {
        if !inputs.iter().any(|s| &s.name == name) {
            let names: Vec<&str> = inputs.iter().map(|s| s.name.as_str()).collect();
            return Err(format!("{name} is not an input of the model (inputs: {})", names.join(", ")));
        }
    }
    for s in inputs {
        let t = given.get(&s.name).ok_or_else(|| format!("input {} is missing", s.name))?;
        if t.dtype() != s.dtype || t.shape() != s.shape.as_slice() {
            return Err(format!(
                "input {} expects {}{:?} but got {}{:?}",
                s.name,
                s.dtype.name(),
                s.shape,
                t.dtype().name(),
                t.shape()
            ));
        }
    }
    Ok(())
}
