//! The ops without a fusion of their own, one step and one generated kernel each, registered
//! by op type ([`register`]: Gather, LayerNorm, Softmax, reductions, activation×activation
//! MatMul, Concat; pools in `pool.rs`); activation×activation MatMuls with their folded
//! Transposes; data movement with constant indices as a gather through a traced source map.

use super::registry::{GpuOp, Registry};
use super::*;
use crate::codegen::CodegenError;

/// What a registered builder makes of its node: the kernel of the node's own step, or
/// nothing more to do (the builder emitted the step itself: a folded MatMul, a reduction over
/// no axes, a pool).
pub(super) enum Built {
    Kernel(OpKernel),
    /// Two kernels through an f32 scratch of `partials` values: `first(inputs.., scratch)`,
    /// then `second(scratch, output)` (a split reduction).
    TwoPass {
        first: OpKernel,
        second: OpKernel,
        partials: usize,
    },
    Done,
}

/// A kernel builder: the node and its kernel's name (op type and node name, sanitized).
pub(super) type Builder = fn(&mut Lowering<'_>, &Node, &str) -> Result<Built, ProgramError>;

/// Registers the ops lowered as one step and one generated kernel each (a builder here and
/// its row below: the step, its operands and arguments are [`Lowering::lower_kernel`]'s), and
/// the data movements lowered as a gather through a traced source map
/// ([`Lowering::lower_remap`]).
pub(super) fn register(registry: &mut Registry) {
    let kernels: &[(&[&'static str], Builder)] = &[
        (&["Gather"], gather),
        (&["LayerNormalization"], layer_norm),
        (&["Softmax", "LogSoftmax"], softmax),
        (&["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare", "ReduceL2"], reduce),
        (&["MatMul"], matmul),
        (&["Concat"], concat),
    ];
    for &(ops, build) in kernels {
        for op in ops {
            registry.insert(op, GpuOp::Kernel(build));
        }
    }
    for op in ["GatherND", "GatherElements", "Slice", "Split", "Pad", "Tile", "DepthToSpace", "SpaceToDepth"] {
        registry.insert(op, GpuOp::Remap);
    }
}

fn input(node: &Node, i: usize) -> Option<ValueId> {
    node.inputs.get(i).copied().flatten()
}

fn need(l: &Lowering<'_>, node: &Node, i: usize) -> Result<ValueId, ProgramError> {
    input(node, i).ok_or_else(|| l.node_err(node, format!("input {i} is missing")))
}

fn kernel(l: &Lowering<'_>, node: &Node, k: Result<OpKernel, CodegenError>) -> Result<Built, ProgramError> {
    k.map(Built::Kernel).map_err(|e| l.node_err(node, e))
}

fn gather(l: &mut Lowering<'_>, node: &Node, name: &str) -> Result<Built, ProgramError> {
    let (data, idx) = (need(l, node, 0)?, need(l, node, 1)?);
    let rank = l.graph.fact(data).shape.len();
    let axis =
        norm_axis(node.attrs.int("axis", 0).unwrap_or(0), rank).ok_or_else(|| l.node_err(node, "axis out of range"))?;
    kernel(l, node, graph_ops::gather(name, &l.desc(data), &l.desc(idx), axis))
}

fn layer_norm(l: &mut Lowering<'_>, node: &Node, name: &str) -> Result<Built, ProgramError> {
    let graph = l.graph;
    let (shape, axis, eps) = norm_fusion::norm_geometry(l, node).map_err(|e| l.node_err(node, e))?;
    let x = need(l, node, 0)?;
    let cols: usize = shape[axis..].iter().product();
    let rows: usize = shape[..axis].iter().product();
    let k = graph_ops::layer_norm(
        name,
        rows,
        cols,
        eps,
        graph.fact(x).dtype,
        input(node, 1).map(|v| graph.fact(v).dtype),
        input(node, 2).map(|v| graph.fact(v).dtype),
        graph.fact(node.outputs[0]).dtype,
    );
    kernel(l, node, k)
}

fn softmax(l: &mut Lowering<'_>, node: &Node, name: &str) -> Result<Built, ProgramError> {
    let x = need(l, node, 0)?;
    let shape = &l.graph.fact(x).shape;
    let default = if node.opset >= 13 { -1 } else { 1 };
    let axis = norm_axis(node.attrs.int("axis", default).unwrap_or(default), shape.len())
        .ok_or_else(|| l.node_err(node, "axis out of range"))?;
    if node.opset >= 13 && axis + 1 != shape.len() {
        return Err(l.node_err(node, "softmax over an axis other than the last is not built"));
    }
    let cols: usize = shape[axis..].iter().product();
    let ofact = l.graph.fact(node.outputs[0]);
    let rows = ofact.numel() / cols.max(1);
    kernel(l, node, graph_ops::softmax(name, rows, cols, ofact.dtype, node.op_type == "LogSoftmax"))
}

fn reduce(l: &mut Lowering<'_>, node: &Node, name: &str) -> Result<Built, ProgramError> {
    let graph = l.graph;
    let attrs = &node.attrs;
    let x = need(l, node, 0)?;
    let rank = graph.fact(x).shape.len();
    let axes: Option<Vec<i64>> = match input(node, 1) {
        Some(a) => Some(constant(graph, a).ok_or_else(|| l.node_err(node, "axes must be constant"))?.to_i64_vec()),
        None => attrs.ints_opt("axes").ok().flatten().map(|v| v.to_vec()),
    };
    let noop = attrs.int("noop_with_empty_axes", 0).unwrap_or(0) != 0;
    let mut axes: Vec<usize> = match axes {
        Some(a) if !a.is_empty() => a
            .iter()
            .map(|&x| norm_axis(x, rank).ok_or_else(|| l.node_err(node, "axis out of range")))
            .collect::<Result<_, _>>()?,
        _ if noop => vec![],
        _ => (0..rank).collect(),
    };
    axes.sort_unstable();
    axes.dedup();
    let kind = match node.op_type.as_str() {
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
        l.lower_group_single(node)?;
        return Ok(Built::Done);
    }
    match graph_ops::reduce_kernels(name, &l.desc(x), &axes, kind, graph.fact(node.outputs[0]).dtype) {
        Ok(graph_ops::ReduceKernels::One(k)) => Ok(Built::Kernel(k)),
        Ok(graph_ops::ReduceKernels::Split { partial, finish, partials }) => {
            Ok(Built::TwoPass { first: partial, second: finish, partials })
        }
        Err(e) => Err(l.node_err(node, e)),
    }
}

fn matmul(l: &mut Lowering<'_>, node: &Node, name: &str) -> Result<Built, ProgramError> {
    if l.folded.contains_key(&l.node_index(node)) {
        l.lower_folded_matmul(node)?;
        return Ok(Built::Done);
    }
    let graph = l.graph;
    let (a, bv) = (need(l, node, 0)?, need(l, node, 1)?);
    let (mut da, mut db) = (l.desc(a), l.desc(bv));
    // 1-D operands: ONNX promotes them to matrices and drops the dim after.
    if da.shape.len() == 1 {
        da = TensorDesc::contiguous(da.dtype, &[1, da.shape[0]]);
    }
    if db.shape.len() == 1 {
        db = TensorDesc::contiguous(db.dtype, &[db.shape[0], 1]);
    }
    let ofact = graph.fact(node.outputs[0]);
    let mut oshape = ofact.shape.clone();
    if graph.fact(a).shape.len() == 1 {
        oshape.insert(oshape.len().saturating_sub(1), 1);
    }
    if graph.fact(bv).shape.len() == 1 {
        oshape.push(1);
    }
    kernel(l, node, graph_ops::matmul(name, &da, &db, &TensorDesc::contiguous(ofact.dtype, &oshape)))
}

fn concat(l: &mut Lowering<'_>, node: &Node, name: &str) -> Result<Built, ProgramError> {
    let ins: Vec<ValueId> = node.inputs.iter().flatten().copied().collect();
    let out = node.outputs[0];
    let rank = l.graph.fact(out).shape.len();
    let axis =
        norm_axis(node.attrs.int("axis", 0).unwrap_or(0), rank).ok_or_else(|| l.node_err(node, "axis out of range"))?;
    let descs: Vec<TensorDesc> = ins.iter().map(|&v| l.desc(v)).collect();
    kernel(l, node, graph_ops::concat(name, &descs, axis, &l.desc(out)))
}

impl Lowering<'_> {
    /// A node of a registered kernel builder ([`register`]): the builder's kernel becomes the
    /// node's step (its present inputs in order, then the output, as parameters).
    pub(super) fn lower_kernel(&mut self, node: &Node, build: Builder) -> Result<(), ProgramError> {
        let graph = self.graph;
        let name = format!("{}_{}", node.op_type.to_lowercase(), sanitize(&node.name));
        let (kernel, second) = match build(self, node, &name)? {
            Built::Kernel(k) => (k, None),
            Built::TwoPass { first, second, partials } => (first, Some((second, partials))),
            Built::Done => return Ok(()),
        };
        let out = node.outputs[0];
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
        let op = self.node_op(node, operands, outs);
        let Some((second, partials)) = second else {
            args.push(self.buf(out)?);
            self.kernel_step(&node.name.clone(), Op::Nodes(vec![op]), kernel, args);
            return Ok(());
        };
        // Two kernels in one step, through a scratch of this node's own.
        let scratch = self.b.buffer(&format!("{}.partials", node.name), Elem::F32, partials, Storage::Scratch);
        let mut launches = vec![];
        for (k, args) in [(kernel, [args, vec![scratch]].concat()), (second, vec![scratch, self.buf(out)?])] {
            let kid = self.b.kernel(&k.name, &k.source, k.smem_bytes);
            let args = args.into_iter().map(|b| Arg::Buf(b, 0)).collect();
            launches.push(Launch::Kernel { kernel: kid, grid: k.grid, block: k.block, args });
        }
        self.b.step(&node.name.clone(), Op::Nodes(vec![op]), launches);
        Ok(())
    }

    pub(super) fn node_index(&self, node: &Node) -> usize {
        self.graph.nodes.iter().position(|n| std::ptr::eq(n, node)).expect("a node of the graph")
    }

    /// An activation×activation MatMul with the Transposes of [`Lowering::folded`] read through
    /// their permutations: one kernel; the step's nodes are the Transposes (into temporaries)
    /// and the MatMul, so the CPU executor computes exactly the graph's ops.
    pub(super) fn lower_folded_matmul(&mut self, node: &Node) -> Result<(), ProgramError> {
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
    /// Data movement with constant parameters (Slice, Split, Pad with zeros, Tile, ...): the op
    /// evaluated on the element indices of its input gives, per output, where each element
    /// comes from; each output is a gather through that map, all in one step. Pad's padding
    /// traces to an index past the input, which the gather writes as zero (so only zero
    /// constant padding is built). Where the map moves whole runs of elements ([`run_length`]:
    /// a channels-last Slice, Pad or Split of spatial axes moves rows of channels), it names
    /// runs and the gather copies them, so the map costs a word per run, not per element.
    pub(super) fn lower_remap(&mut self, node: &Node) -> Result<(), ProgramError> {
        let graph = self.graph;
        let x = node.inputs[0].ok_or_else(|| self.node_err(node, "input 0 is missing"))?;
        let xf = graph.fact(x).clone();
        if xf.numel() >= i32::MAX as usize {
            return Err(self.node_err(node, "its source map does not fit 32-bit indices"));
        }
        let iota = Tensor::from_vec(xf.shape.clone(), (0..xf.numel() as i64).collect::<Vec<i64>>());
        let mut consts: Vec<Option<Tensor>> =
            node.inputs.iter().skip(1).map(|v| v.and_then(|v| constant(graph, v))).collect();
        if node.op_type == "Pad" {
            let mode = node.attrs.string("mode", "constant").unwrap_or("?");
            let zero = consts.get(1).cloned().flatten().is_none_or(|t| t.to_f64_vec().iter().all(|&v| v == 0.0));
            if mode != "constant" || !zero {
                return Err(self.node_err(node, "only Pad with mode constant and value 0 is built"));
            }
            // Padding traces to index numel(x): out of range, a zero in the gather.
            consts.resize(consts.len().max(2), None);
            consts[1] = Some(Tensor::from_vec(vec![], vec![xf.numel() as i64]));
        }
        let mut refs: Vec<Option<&Tensor>> = vec![Some(&iota)];
        refs.extend(consts.iter().map(|t| t.as_ref()));
        let def = registry().get(&node.op_type).ok_or_else(|| self.node_err(node, "unknown op"))?;
        let n_outputs = node.outputs.len();
        let ctx = NodeCtx { name: &node.name, attrs: &node.attrs, opset: node.opset, n_outputs };
        let traced = (def.eval)(&ctx, &refs).map_err(|e| self.node_err(node, format!("tracing its sources: {e}")))?;
        if traced.len() != n_outputs {
            return Err(self.node_err(node, "tracing gave another number of outputs"));
        }
        let mut launches = vec![];
        for (j, (map, &out)) in traced.iter().zip(&node.outputs).enumerate() {
            let ofact = graph.fact(out).clone();
            if map.len() != ofact.numel() {
                return Err(self.node_err(node, "its source map does not fit"));
            }
            let suffix = if n_outputs == 1 { String::new() } else { format!("_{j}") };
            let name = format!("remap_{}{suffix}", sanitize(&node.name));
            let map_name = format!("{}.map{suffix}", node.name);
            launches.push(self.gather_launch(node, &name, &map_name, x, out, &map.to_i64_vec())?);
        }
        let operands =
            node.inputs.iter().map(|v| v.map(|v| self.operand(v)).transpose()).collect::<Result<Vec<_>, _>>()?;
        let outs = node.outputs.iter().map(|&o| self.operand(o)).collect::<Result<Vec<_>, _>>()?;
        let op = self.node_op(node, operands, outs);
        self.b.step(&node.name.clone(), Op::Nodes(vec![op]), launches);
        Ok(())
    }
}

impl Lowering<'_> {
    /// The gather that makes `out` from `src` through `map` (the source element of each output
    /// element, outside `src` for a zero): by runs ([`run_length`]), the map of runs a constant
    /// named `map_name`, the kernel `name`; errors name `node`.
    pub(super) fn gather_launch(
        &mut self,
        node: &Node,
        name: &str,
        map_name: &str,
        src: ValueId,
        out: ValueId,
        map: &[i64],
    ) -> Result<Launch, ProgramError> {
        let (sf, of) = (self.graph.fact(src).clone(), self.graph.fact(out).clone());
        let n_in = sf.numel();
        if map.len() != of.numel() {
            return Err(self.node_err(node, "its source map does not fit"));
        }
        // Whole runs of `run` elements move together (rows of channels, mostly): the map names
        // source runs, the gather copies them.
        let run = run_length(map, &of.shape, n_in);
        let rows = (n_in / run) as i32;
        let idx: Vec<i32> = map
            .iter()
            .step_by(run)
            .map(|&v| if (0..n_in as i64).contains(&v) { (v / run as i64) as i32 } else { rows })
            .collect();
        let k = graph_ops::gather(
            name,
            &TensorDesc::contiguous(sf.dtype, &[n_in / run, run]),
            &TensorDesc::contiguous(DType::I32, &[idx.len()]),
            0,
        )
        .map_err(|e| self.node_err(node, e))?;
        let map_buf = self.b.constant(map_name, Data::I32(idx), false);
        let args = vec![Arg::Buf(self.buf(src)?, 0), Arg::Buf(map_buf, 0), Arg::Buf(self.buf(out)?, 0)];
        let kid = self.b.kernel(&k.name, &k.source, k.smem_bytes);
        Ok(Launch::Kernel { kernel: kid, grid: k.grid, block: k.block, args })
    }
}

/// The longest run length `L` that `map` (the source element of each output element, outside
/// `0..n_in` for padding) moves whole: every `L` consecutive outputs read `L` consecutive inputs
/// starting at a multiple of `L`, or are all padding. Candidates: the products of the trailing
/// output dims, then the power-of-two divisors of the last dim (a Slice of channels); 1 when
/// none holds.
pub(super) fn run_length(map: &[i64], out_shape: &[usize], n_in: usize) -> usize {
    let whole = |l: usize| -> bool {
        if l == 0 || !n_in.is_multiple_of(l) || !map.len().is_multiple_of(l) {
            return false;
        }
        let inside = |v: i64| (0..n_in as i64).contains(&v);
        map.chunks(l).all(|r| {
            if !inside(r[0]) {
                return r.iter().all(|&v| !inside(v));
            }
            r[0] % l as i64 == 0 && r.iter().enumerate().all(|(k, &v)| v == r[0] + k as i64)
        })
    };
    let mut best = 1;
    let mut l = 1;
    for &d in out_shape.iter().rev() {
        l *= d;
        if !whole(l) {
            break;
        }
        best = l;
    }
    if best == 1 {
        let last = out_shape.last().copied().unwrap_or(1);
        let mut p = 1usize << (usize::BITS - 1 - last.max(1).leading_zeros());
        while p > 1 {
            if last.is_multiple_of(p) && whole(p) {
                return p;
            }
            p /= 2;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::run_length;

    /// The source map of a Slice of axis `axis` to `start..end` of a contiguous tensor.
    fn slice_map(shape: &[usize], axis: usize, start: usize, end: usize) -> (Vec<i64>, Vec<usize>) {
        let mut out_shape = shape.to_vec();
        out_shape[axis] = end - start;
        let n: usize = out_shape.iter().product();
        let map = (0..n)
            .map(|mut i| {
                let mut src = 0;
                let mut stride = 1;
                for a in (0..shape.len()).rev() {
                    let c = i % out_shape[a] + if a == axis { start } else { 0 };
                    i /= out_shape[a];
                    src += c * stride;
                    stride *= shape[a];
                }
                src as i64
            })
            .collect();
        (map, out_shape)
    }

    #[test]
    fn runs_are_the_rows_a_map_moves_whole() {
        // NHWC, a Slice of H: rows of W × C move whole, but not whole images.
        let (map, out) = slice_map(&[2, 4, 3, 8], 1, 1, 3);
        assert_eq!(run_length(&map, &out, 2 * 4 * 3 * 8), 24);
        // A Slice of W: rows of C.
        let (map, out) = slice_map(&[2, 4, 3, 8], 2, 1, 3);
        assert_eq!(run_length(&map, &out, 2 * 4 * 3 * 8), 8);
        // The first half of the channels: runs of 4 starting at multiples of 4.
        let (map, out) = slice_map(&[2, 4, 3, 8], 3, 0, 4);
        assert_eq!(run_length(&map, &out, 2 * 4 * 3 * 8), 4);
        // Channels 2..6: runs of 4 that start off a multiple of 4, runs of 2 that do not.
        let (map, out) = slice_map(&[2, 4, 3, 8], 3, 2, 6);
        assert_eq!(run_length(&map, &out, 2 * 4 * 3 * 8), 2);
        // Channels 1..4: single elements.
        let (map, out) = slice_map(&[2, 4, 3, 8], 3, 1, 4);
        assert_eq!(run_length(&map, &out, 2 * 4 * 3 * 8), 1);
        // Padding rows (sources past the input) move as whole runs too; a run that mixes
        // padding and input does not.
        let n_in = 6 * 4;
        let mut map: Vec<i64> = (0..n_in as i64).collect();
        map.extend([n_in as i64; 4]);
        assert_eq!(run_length(&map, &[7, 4], n_in), 4);
        map[n_in] = 0;
        assert_eq!(run_length(&map, &[7, 4], n_in), 1);
    }
}
