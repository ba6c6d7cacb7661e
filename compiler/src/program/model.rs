//! Lowering of a whole model: a planned graph becomes a [`Program`](super::Program) (what
//! `spartac compile` writes and `spartac run` executes).
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
//!   output strides (a Reshape after that is a view as ever); a Q, K or V made from a wider
//!   value by data movement alone (a Slice of the merged projection of
//!   `rewrite::merge_matmuls`; the heads split out of a packed projection by Reshapes,
//!   Transposes and scalar Gathers, the three operands sharing the top of the chain) is read
//!   in place through an offset and strides (`model/strided_views.rs`), those nodes joining
//!   the step; a Mul of Q or K by a one-element constant becomes a factor of the score
//!   expression (`model/attention.rs`);
//! - **data movement with constant indices** (GatherND, GatherElements, Slice, Split, Pad with
//!   zeros, Tile, DepthToSpace, SpaceToDepth whose only non-constant input is the data): one
//!   gather per output, in one step, through a source map traced at compile time with the op's
//!   own `eval` on the data's element numbers (Pad's padding traces past the input: a zero);
//! - **LayerNorm with its input's group** (`model/norm_fusion.rs`): an elementwise group whose
//!   output a LayerNormalization reads (the residual `Add` before it) runs inside the LayerNorm's
//!   kernel as a prologue, the sum never stored, or stored in the same pass when read elsewhere
//!   too (pre-LN transformers); a Transpose in it that permutes only the row axes (ViT's
//!   `[seq, batch] → [batch, seq]`) is read through its strides, as in a plain group;
//! - **LayerNorms between 16-bit block products** (`model/norm_defer.rs`): no step; the product
//!   before adds the residual and the rows' sums ([`SpmmNorm`]), the products after read the sum
//!   with their weight scaled by γ and normalize before their epilogue, and a skip connection is
//!   normalized where the next producer reads it (`--no-defer-norms` keeps them steps);
//! - **NHWC convolutions and pools** (`model/conv.rs`, `model/pool.rs`): a Conv, MaxPool or
//!   AveragePool between the Transposes `rewrite::channels_last` puts around it is one step and
//!   one channels-last kernel (a Conv with the activation after it in its epilogue), the
//!   Transposes never computed on the GPU;
//! - **chains of data movement** (`model/movement.rs`): Slices, zero Pads, Concats, lone
//!   Transposes and views between them, every value read only by the next and all of it from
//!   one tensor (Swin's shifted windows): one gather through the composed source map;
//! - **other ops** (Gather, LayerNormalization, Softmax, reductions, activation×activation
//!   MatMul, Concat, channels-first MaxPool and AveragePool through the reference's window
//!   tables): one step and one generated kernel each.
//!
//! Adding a GPU op, in the order the pool kernels took:
//! 1. its CPU reference (`ops/`, with `infer` and `eval`) exists: it is the oracle;
//! 2. its entry in the GPU op registry (`model/registry.rs`: op type → [`registry::GpuOp`]),
//!    registered beside its lowering: if it is elementwise, one row in `model/elementwise.rs`'s
//!    `register` (an `Expr` operator, or a function composing the existing ones where the
//!    reference's formula allows); if it only moves data with constant parameters, a `Remap`
//!    row in `model/ops.rs`'s `register`; a view, a row in `model/views.rs`: nothing else;
//! 3. otherwise a template `templates/op_*.cu.tera` (registered in `codegen/render.rs`), its
//!    kernel in `codegen/graph_ops/` returning an `OpKernel`, and a builder function with its
//!    row in `model/ops.rs`'s `register`: `lower_kernel` emits the one step, whose
//!    `Op::Nodes` holds the node, so the CPU executor computes the graph's op;
//! 4. a test in `tests/tests/compile.rs` that compiles a small model using it, compares the
//!    compiled model with the graph on the CPU executor and NVRTC-compiles its kernels; then a
//!    GPU `--check` of a model that uses it (`benches/zoo.sh RUN=1`).
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
//! This file is the driver (the `Lowering` state, the loop over nodes in graph order, graph
//! outputs); `model/` holds the rest: `registry.rs` the GPU op registry (each family registers
//! its op types in its own file), `fusions.rs` decides what runs inside what (the analysis the
//! loop follows), `views.rs`, `buffers.rs` the buffers and their reuse, `planned.rs` and
//! `epilogue.rs` the planned matmuls and the epilogue recognition, `attention.rs`,
//! `strided_views.rs` and `attention_mask.rs` the fused attention, its in-place operands and the
//! keys its mask hides, `norm_fusion.rs`, `norm_defer.rs`,
//! `conv.rs`, `pool.rs`, `elementwise.rs` (groups, `node_expr`), `ops.rs` (the other ops) and
//! `types.rs` (the options, the lowered model and its signatures).
//!
//! Invariants: the program's CPU execution (`runtime::exec::cpu`) computes what the graph's
//! reference execution computes with every pruned weight element zeroed (the planned kernels'
//! weights sum to the pruned weight, and the CSR the CPU multiplies is that sum); every graph
//! output has a buffer of storage `Output` of its own.

use super::{
    Arg, BufferId, Csr, Data, Elem, Launch, NodeOp, NormInput, NormResidual, NormStats, Op, Operand, ProgramBuilder,
    ProgramError, RowAffine, Rows, SpmmNorm, Storage,
};
use crate::codegen::graph_ops::{self, Binary, Expr, OpKernel, Reduce, TensorDesc, Unary};
use crate::codegen::{Activation, Epilogue, Family};
use crate::ir::{DType, Graph, Initializer, Node, Tensor, ValueId};
use crate::ops::{registry, NodeCtx};
use crate::plan::{OperatorPlan, Plan};
use std::collections::{BTreeMap, HashMap};

mod attention;
mod attention_mask;
mod buffers;
mod concat_reads;
mod conv;
mod elementwise;
mod epilogue;
mod fusions;
mod movement;
mod norm_defer;
mod norm_fusion;
mod ops;
mod planned;
mod pool;
mod registry;
mod strided_views;
mod types;
mod views;
use attention::AttentionFusion;
pub use conv::conv_shape;
use movement::Movement;
use norm_fusion::NormFusion;
use registry::{gpu_ops, is_elementwise, GpuOp};
use strided_views::ViewChain;
pub use types::{check_model_inputs, check_signature, LoweringStats, ModelOptions, ModelProgram, Signature};

fn invalid(message: String) -> ProgramError {
    ProgramError::Invalid { program: "model".into(), message }
}

/// The constant tensor of a value, when it is an initializer.
fn constant(graph: &Graph, v: ValueId) -> Option<Tensor> {
    graph.initializers.get(&v).map(Initializer::to_dense)
}

/// Node `n`'s first output computed by its reference op, its inputs taken from `vals` or, for
/// constants, from the graph (the analyses that probe a chain of nodes on chosen values).
fn eval_node(graph: &Graph, n: usize, vals: &HashMap<ValueId, Tensor>) -> Option<Tensor> {
    let node = &graph.nodes[n];
    let ins: Vec<Option<Tensor>> =
        node.inputs.iter().map(|v| v.and_then(|v| vals.get(&v).cloned().or_else(|| constant(graph, v)))).collect();
    let refs: Vec<Option<&Tensor>> = ins.iter().map(|t| t.as_ref()).collect();
    let def = registry().get(&node.op_type)?;
    let ctx = NodeCtx { name: &node.name, attrs: &node.attrs, opset: node.opset, n_outputs: 1 };
    (def.eval)(&ctx, &refs).ok()?.into_iter().next()
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

/// The nodes of one op type that have no GPU lowering: how many, the first one's name and opset.
#[derive(Clone, Debug)]
struct Gap {
    nodes: usize,
    first: String,
    opset: i64,
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
    /// Channels-last pools: MaxPool/AveragePool node → (the Transpose before it, the one
    /// after it).
    pools: HashMap<usize, (usize, usize)>,
    /// Fused attentions, keyed by their probabilities·V MatMul.
    attention: HashMap<usize, AttentionFusion>,
    /// LayerNorms with their input's elementwise group, keyed by the LayerNorm.
    norms: HashMap<usize, NormFusion>,
    /// Chains of data movement lowered as one gather, keyed by their last node.
    movements: HashMap<usize, Movement>,
    /// Residual Adds (and a ReLU) a planned MatMul's library call adds, keyed by the MatMul.
    residuals: HashMap<usize, epilogue::ResidualFusion>,
    /// LayerNorms the products around them do (`model/norm_defer.rs`), keyed by the producer;
    /// the values they leave unstored (the output, views of it), with their producer; and
    /// their buffers once the producer's step is made.
    deferred: HashMap<usize, norm_defer::DeferredNorm>,
    deferred_reads: HashMap<ValueId, usize>,
    deferred_bufs: HashMap<usize, norm_defer::DeferredBufs>,
    /// [`Lowering::ws_one_part`] per planned MatMul, once asked (as a producer, as a consumer).
    ws_one_part_memo: std::cell::RefCell<HashMap<usize, bool>>,
    /// The deferred LayerNorms' row sums: one buffer, each producer's offset, the first producer.
    ln_sums: Option<(BufferId, HashMap<usize, usize>, usize)>,
    /// Attention operands read in place from a wider value (`model/strided_views.rs`), keyed
    /// by the operand (the value a folded Transpose reads, or the MatMul's input).
    views: HashMap<ValueId, ViewChain>,
    /// Concats never formed, keyed by their output: the one elementwise group reading it
    /// reads the Concat node's parts (`model/concat_reads.rs`).
    concat_reads: HashMap<ValueId, usize>,
    /// The key ends of attentions already analysed, keyed by their computation's text
    /// (`model/attention_mask.rs`).
    key_ends_seen: HashMap<String, Option<Vec<usize>>>,
    /// Op types with no GPU lowering, keyed by (unknown to the registry, op type).
    gaps: BTreeMap<(bool, String), Gap>,
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
            pools: HashMap::new(),
            attention: HashMap::new(),
            norms: HashMap::new(),
            movements: HashMap::new(),
            residuals: HashMap::new(),
            deferred: HashMap::new(),
            deferred_reads: HashMap::new(),
            deferred_bufs: HashMap::new(),
            ws_one_part_memo: Default::default(),
            ln_sums: None,
            views: HashMap::new(),
            concat_reads: HashMap::new(),
            key_ends_seen: HashMap::new(),
            gaps: BTreeMap::new(),
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

    fn operand(&mut self, v: ValueId) -> Result<Operand, ProgramError> {
        let fact = self.graph.fact(v).clone();
        Ok(Operand::Buf { buf: self.buf(v)?, dtype: fact.dtype, shape: fact.shape })
    }

    fn desc(&self, v: ValueId) -> TensorDesc {
        let f = self.graph.fact(v);
        TensorDesc::contiguous(f.dtype, &f.shape)
    }

    /// `v` as a fused kernel reads it: through `perm` when it is a Transpose's input (the
    /// kernel never forms the Transpose's output; see `group_expr`), else as is.
    fn desc_through(&self, v: ValueId, perm: Option<&[usize]>) -> TensorDesc {
        match perm {
            Some(p) => self.desc(v).permuted(p),
            None => self.desc(v),
        }
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
        let (mut done, groups) = self.find_fusions();
        // Nodes a fused epilogue, group or matmul took over are skipped when reached.
        let total = graph.nodes.len();
        for i in 0..total {
            if done[i] {
                self.release(i);
                progress(i + 1, total);
                continue;
            }
            if let Err(e) = self.lower_node(i, &groups, &mut done) {
                // A node lowered after a gap may fail for the gap's sake: the gaps come first.
                return Err(self.gaps_error().unwrap_or(e));
            }
            done[i] = true;
            self.release(i);
            progress(i + 1, total);
        }
        if let Some(e) = self.gaps_error() {
            return Err(e);
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

    /// Node `i` (not taken by a fusion) as its step: the attention, LayerNorm fusion, planned
    /// matmul or NHWC conv it heads, a view, its elementwise group, or its own kernel.
    fn lower_node(
        &mut self,
        i: usize,
        groups: &HashMap<usize, Vec<usize>>,
        done: &mut [bool],
    ) -> Result<(), ProgramError> {
        let node = &self.graph.nodes[i];
        if let Some(mv) = self.movements.get(&i).cloned() {
            self.lower_movement(&mv)
        } else if let Some(f) = self.attention.get(&i).cloned() {
            self.lower_attention(&f)
        } else if let Some(f) = self.norms.get(&i).cloned() {
            self.lower_norm_fusion(&f)
        } else if let Some(op) = self.planned.get(node.name.as_str()).copied() {
            self.lower_planned(i, op, done)
        } else if let Some(&(t_in, t_out)) = self.convs.get(&i) {
            self.lower_conv(i, t_in, t_out)
        } else if let Some(&around) = self.pools.get(&i) {
            self.lower_pool(node, Some(around))
        } else {
            self.lower_registered(i, node, groups)
        }
    }

    /// Node `i` by its op type's entry in the GPU op registry ([`GpuOp`]): a view, a member
    /// of its elementwise group, a data movement with constant parameters, or its own step;
    /// an op type without an entry (or a data movement with run-time parameters) is a gap.
    fn lower_registered(
        &mut self,
        i: usize,
        node: &Node,
        groups: &HashMap<usize, Vec<usize>>,
    ) -> Result<(), ProgramError> {
        let graph = self.graph;
        match gpu_ops().get(&node.op_type) {
            Some(GpuOp::View) => self.lower_view(node),
            // A group is emitted at its last node; the members before it wait.
            Some(GpuOp::Elementwise(_)) => match groups.get(&i) {
                Some(members) => {
                    self.lower_group(members)?;
                    if members.len() > 1 {
                        self.stats.fused_nodes += members.len();
                    }
                    Ok(())
                }
                None if !self.options.fuse_elementwise => self.lower_group(&[i]),
                None => Ok(()),
            },
            Some(GpuOp::Remap)
                if node.inputs.iter().skip(1).flatten().all(|&v| graph.initializers.contains_key(&v)) =>
            {
                self.lower_remap(node)
            }
            Some(&GpuOp::Kernel(build)) => self.lower_kernel(node, build),
            Some(GpuOp::Remap) | None => {
                self.note_gap(node);
                Ok(())
            }
        }
    }

    /// Records that `node` has no GPU lowering; the lowering goes on, so that one error can
    /// name every gap of the model ([`Lowering::gaps_error`]).
    fn note_gap(&mut self, node: &Node) {
        let known = registry().get(&node.op_type).is_some();
        let gap = self.gaps.entry((!known, node.op_type.clone())).or_insert_with(|| Gap {
            nodes: 0,
            first: node.name.clone(),
            opset: node.opset,
        });
        gap.nodes += 1;
    }

    /// One error naming every op type without a GPU kernel (each with its node count, first
    /// node and opset), then the unknown ones; `None` when there is none.
    fn gaps_error(&self) -> Option<ProgramError> {
        if self.gaps.is_empty() {
            return None;
        }
        let list = |unknown: bool| -> Vec<String> {
            self.gaps
                .iter()
                .filter(|((u, _), _)| *u == unknown)
                .map(|((_, op), g)| {
                    let nodes = if g.nodes == 1 { "1 node".to_string() } else { format!("{} nodes", g.nodes) };
                    format!("{op} ({nodes}, first {}, opset {})", g.first, g.opset)
                })
                .collect()
        };
        let (cpu_only, unknown) = (list(false), list(true));
        let mut parts = vec![];
        if !cpu_only.is_empty() {
            parts.push(format!(
                "{} op type{} run{} on the CPU reference but {} no GPU kernel yet: {}",
                cpu_only.len(),
                if cpu_only.len() == 1 { "" } else { "s" },
                if cpu_only.len() == 1 { "s" } else { "" },
                if cpu_only.len() == 1 { "has" } else { "have" },
                cpu_only.join(", ")
            ));
        }
        if !unknown.is_empty() {
            parts.push(format!("unknown op type{}: {}", if unknown.len() == 1 { "" } else { "s" }, unknown.join(", ")));
        }
        Some(invalid(parts.join("; ")))
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
