//! A planned MatMul/Gemm as one step: the plan's sub-operator kernels (`codegen::from_plan`,
//! then `specialize`), the first writing and the rest accumulating, its bias and activation in
//! the last kernel's epilogue; a dense 16-bit part on the library GEMM (its bias and a ReLU
//! applied by the call);
//! a weight pruned whole as its bias broadcast.

use super::elementwise::{gelu_erf_expr, gelu_tanh_expr};
use super::*;

/// `values` as a buffer of float type `dtype` (f32, f16 or bf16; rounded to nearest).
pub(super) fn float_data(dtype: DType, values: &[f32]) -> Data {
    match dtype {
        DType::F16 => Data::F16(values.iter().map(|&x| half::f16::from_f32(x).to_bits()).collect()),
        DType::BF16 => Data::BF16(values.iter().map(|&x| half::bf16::from_f32(x).to_bits()).collect()),
        _ => Data::F32(values.to_vec()),
    }
}

pub(super) fn transpose(w: &[f32], rows: usize, cols: usize) -> Vec<f32> {
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
pub(super) fn table(kernel: &crate::codegen::Kernel, ptr: bool) -> Vec<i32> {
    let t = if ptr { kernel.ptr.clone() } else { kernel.device_idx() };
    if kernel.mode == crate::codegen::Mode::IndexStream && !t.is_empty() {
        t
    } else {
        vec![0]
    }
}

impl Lowering<'_> {
    /// A planned MatMul/Gemm: its sub-operator kernels, with a bias and activation chain after
    /// it fused into the last one's epilogue (marked `done`).
    pub(super) fn lower_planned(&mut self, i: usize, op: &OperatorPlan, done: &mut [bool]) -> Result<(), ProgramError> {
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
        let mut bias_node = None;
        if self.options.fuse_epilogues {
            if bias.is_none() {
                if let Some((add_out, b, add_i)) = self.bias_after(out, n) {
                    bias = Some(b);
                    out = add_out;
                    done[add_i] = true;
                    bias_node = Some(add_i);
                    self.stats.fused_epilogues += 1;
                }
            }
            if let Some(rf) = self.residuals.get(&i).cloned() {
                for &d in &rf.members {
                    done[d] = true;
                }
                return self.lower_library_residual(i, (m, k, n), (&bias, bias_node), &rf);
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
        // A deferred LayerNorm's output as this product's rows (`model/norm_defer.rs`): the
        // product reads its sum and normalizes; or this product writes one's sum and statistics.
        let norm_input = match self.deferred_reads.get(&x) {
            Some(p) => {
                let bufs = *self
                    .deferred_bufs
                    .get(p)
                    .ok_or_else(|| self.node_err(node, "reads a deferred LayerNorm before its producer's step"))?;
                let d = &self.deferred[p];
                Some((bufs, d.gamma.clone(), d.beta.clone()))
            }
            None => None,
        };
        let deferred = self.deferred.get(&i).cloned();
        if let Some(d) = &deferred {
            out = d.sum;
        }
        let mut epilogue = Epilogue { bias: bias.is_some() || norm_input.is_some(), activation };
        let mut planned_op = op.clone();
        planned_op.m = m;
        // The kernels' epilogue is the lowering's own (set on the last part below); the plan's
        // note of an activation after the site (Sigmoid, Tanh, ... that no kernel fuses) must
        // not reach the kernel choice: such an activation runs as its own elementwise step.
        planned_op.epilogue.activation = None;
        let mut planned =
            crate::codegen::from_plan::kernels_for_operator(&planned_op, &w).map_err(|e| self.node_err(node, e))?;
        if (norm_input.is_some() || deferred.is_some()) && planned.len() != 1 {
            return Err(self.node_err(node, "a deferred LayerNorm needs a plan of one block-sparse part"));
        }
        if planned.is_empty() {
            // Every weight element pruned: the output is the epilogue of zero.
            return self.lower_all_pruned(node, x, out, (m, k, n), bias, activation);
        }
        // The weight the kernels compute with: the sum of the parts (pruned elements absent).
        let mut pruned = vec![0.0f32; k * n];
        for pk in &planned {
            pruned.iter_mut().zip(&pk.weight).for_each(|(a, b)| *a += b);
        }
        // Reading a deferred LayerNorm's sum: the weight becomes diag(γ)·W (rounded to the
        // activations' type, as the kernel reads it), the bias βᵀW + bias, and the columns' sums
        // of the new weight go to the kernel.
        let mut colsum = None;
        if let Some((_, gamma, beta)) = &norm_input {
            let mut shift: Vec<f64> = bias.as_ref().map_or(vec![0.0; n], |b| b.iter().map(|&x| x as f64).collect());
            for kk in 0..k {
                for (j, s) in shift.iter_mut().enumerate() {
                    *s += beta[kk] as f64 * pruned[kk * n + j] as f64;
                }
            }
            bias = Some(shift.into_iter().map(|x| x as f32).collect());
            let elem = if act_dtype == DType::BF16 { Elem::BF16 } else { Elem::F16 };
            let round = |x: f32| elem.round(x as f64) as f32;
            // Row kk of the weight (k × n, row-major) times γ[kk].
            let scale = |w: &mut [f32]| {
                for (row, &g) in w.chunks_mut(n).zip(gamma.iter()) {
                    row.iter_mut().for_each(|x| *x = round(g * *x));
                }
            };
            for pk in &mut planned {
                scale(&mut pk.weight);
                if let Some(v) = &mut pk.spec.values {
                    scale(v);
                }
            }
            pruned = planned[0].weight.clone();
            let mut sums = vec![0.0f64; n];
            for kk in 0..k {
                for (j, s) in sums.iter_mut().enumerate() {
                    *s += pruned[kk * n + j] as f64;
                }
            }
            colsum = Some(sums.into_iter().map(|x| x as f32).collect::<Vec<f32>>());
            epilogue.bias = true;
        }
        let csr = Csr::from_dense(&pruned, k, n);
        if csr.nnz() < k * n {
            self.stats.sparse_ops += 1;
        }
        self.stats.planned_ops += 1;
        self.stats.dense_weight_bytes += 4 * k * n;
        let a_buf = match &norm_input {
            Some((bufs, _, _)) => bufs.sum,
            None => self.buf(x)?,
        };
        let c_buf = self.buf(out)?;
        let bias_buf = match &bias {
            Some(b) => Some(self.b.constant(&format!("{}.bias", node.name), float_data(act_dtype, b), false)),
            None => None,
        };
        let norm = self.spmm_norm(node, c_buf, &norm_input, colsum, deferred.as_ref())?;
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
                if let Some(nm) = &norm {
                    let read = |st: crate::program::RowStats| crate::codegen::RowStatsIn { eps: st.eps };
                    spec.row_norm = crate::codegen::RowNorm {
                        input: nm.input.map(|i| read(i.stats)),
                        residual: nm.residual.is_some(),
                        residual_affine: nm.residual.and_then(|r| r.affine).map(|a| read(a.stats)),
                        stats: nm.stats.is_some(),
                    };
                }
            }
            let library = if self.options.stream_dense {
                crate::codegen::library_takes(&spec, self.options.library_epilogue)
            } else {
                crate::codegen::library_takes_dense(&spec)
            };
            if self.options.library_dense && library && !spec.row_norm.any() {
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
            if let Some(nm) = &norm {
                // The LayerNorm work's operands (an absent one as C, never read).
                let input = nm.input.map(|i| ((i.stats.sums, i.stats.at), (i.colsum, 0)));
                let affine = nm.residual.and_then(|r| r.affine);
                args.extend(
                    [
                        input.map(|i| i.0),
                        input.map(|i| i.1),
                        nm.residual.map(|r| (r.buf, 0)),
                        affine.map(|a| (a.stats.sums, a.stats.at)),
                        affine.map(|a| (a.gamma, 0)),
                        affine.map(|a| (a.beta, 0)),
                        nm.stats.map(|s| (s.sums, s.at)),
                    ]
                    .map(|b| {
                        let (buf, at) = b.unwrap_or((c_buf, 0));
                        Arg::Buf(buf, at)
                    }),
                );
            }
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
                norm: norm.map(Box::new),
            },
            launches,
        );
        Ok(())
    }

    /// The LayerNorm work of planned MatMul `node`'s step (`SpmmNorm`): reading a deferred
    /// LayerNorm's sum (`norm_input`, with its weight's column sums), and writing one's sum
    /// and statistics (`deferred`, this node its producer; its buffers recorded for the
    /// consumers).
    fn spmm_norm(
        &mut self,
        node: &Node,
        c_buf: BufferId,
        norm_input: &Option<(super::norm_defer::DeferredBufs, Vec<f32>, Vec<f32>)>,
        colsum: Option<Vec<f32>>,
        deferred: Option<&super::norm_defer::DeferredNorm>,
    ) -> Result<Option<SpmmNorm>, ProgramError> {
        let input = match (norm_input, colsum) {
            (Some((bufs, _, _)), Some(cs)) => Some(NormInput {
                stats: bufs.stats,
                colsum: self.b.constant(&format!("{}.colsum", node.name), Data::F32(cs), false),
            }),
            _ => None,
        };
        let (mut residual, mut stats) = (None, None);
        if let Some(d) = deferred {
            residual = match d.residual {
                Some(r) => Some(match self.deferred_reads.get(&r) {
                    Some(p) => {
                        let bufs = *self
                            .deferred_bufs
                            .get(p)
                            .ok_or_else(|| self.node_err(node, "a deferred residual before its producer's step"))?;
                        NormResidual {
                            buf: bufs.sum,
                            affine: Some(RowAffine { stats: bufs.stats, gamma: bufs.gamma, beta: bufs.beta }),
                        }
                    }
                    None => NormResidual { buf: self.buf(r)?, affine: None },
                }),
                None => None,
            };
            if !d.defer_ln {
                return Ok(residual.map(|r| SpmmNorm { input, residual: Some(r), stats: None }));
            }
            let (sums, at, first) = self.ln_sums_slot(d.producer);
            if first {
                // Every deferred LayerNorm's row sums to zero, once per run, before the first
                // producer's kernel adds into them.
                let len = self.b.program().buffer(sums).len;
                self.b.step("zero LayerNorm row sums", Op::Move, vec![Launch::Zero { dst: sums, at: 0, len }]);
            }
            let name = &node.name;
            let gamma = self.b.constant(&format!("{name}.ln_gamma"), Data::F32(d.gamma.clone()), false);
            let beta = self.b.constant(&format!("{name}.ln_beta"), Data::F32(d.beta.clone()), false);
            stats = Some(NormStats { sums, at });
            let row = crate::program::RowStats { sums, at, eps: d.eps };
            self.deferred_bufs
                .insert(d.producer, super::norm_defer::DeferredBufs { sum: c_buf, stats: row, gamma, beta });
        }
        Ok((input.is_some() || residual.is_some() || stats.is_some()).then_some(SpmmNorm { input, residual, stats }))
    }

    /// Part `p` of a planned operator as a library GEMM over its weight stored plainly
    /// (row-major `k × n` in the activations' type). The call applies the bias and a ReLU
    /// itself (`codegen::library_gemm_fused`); another activation follows in place. Without
    /// `library_epilogue`, the kernels `codegen::library_gemm` puts around it: the bias written
    /// into C before (the GEMM adds into it), the rest of the epilogue in place after.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn lower_library_part(
        &mut self,
        node: &Node,
        p: usize,
        spec: &crate::codegen::SpmmSpec,
        weight: &[f32],
        (a_buf, c_buf, bias_buf): (BufferId, BufferId, Option<BufferId>),
        launches: &mut Vec<Launch>,
        packed: &mut Vec<(BufferId, usize, u64)>,
    ) -> Result<(), ProgramError> {
        let gemm = if self.options.library_epilogue {
            crate::codegen::library_gemm_fused(spec)
        } else {
            crate::codegen::library_gemm(spec)
        }
        .map_err(|e| self.node_err(node, e))?;
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
            bias: if gemm.fused.bias() { bias_buf } else { None },
            relu: gemm.fused.relu(),
            residual: None,
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

    /// Planned MatMul `i` with the residual Add (and ReLU) `rf` after its bias
    /// ([`Lowering::residual_after`] chose it): one library call `c = relu(a·w + residual +
    /// bias)` (cuBLASLt: C is the residual, beta 1, D the output), reading the graph's own
    /// weight constant; the step's ops are the graph's nodes (MatMul, bias Add, residual Add,
    /// ReLU) for the CPU executor.
    fn lower_library_residual(
        &mut self,
        i: usize,
        (m, k, n): (usize, usize, usize),
        (bias, bias_node): (&Option<Vec<f32>>, Option<usize>),
        rf: &super::epilogue::ResidualFusion,
    ) -> Result<(), ProgramError> {
        let graph = self.graph;
        let node = &graph.nodes[i];
        let x = node.inputs[0].ok_or_else(|| self.node_err(node, "input 0 is missing"))?;
        let wv = node.inputs[1].ok_or_else(|| self.node_err(node, "weight missing"))?;
        let dt = graph.fact(rf.end).dtype;
        let bias_buf = match bias {
            Some(b) => Some(self.b.constant(&format!("{}.bias", node.name), float_data(dt, b), false)),
            None => None,
        };
        let mut members = vec![i];
        members.extend(bias_node);
        let n_core = members.len() + 1;
        members.extend(rf.members.iter().copied());
        let nodes = self.fused_nodes(&members, n_core, rf.end)?;
        let launch = Launch::Gemm {
            a: self.buf(x)?,
            w: self.buf(wv)?,
            c: self.buf(rf.end)?,
            m,
            k,
            n,
            accumulate: false,
            bias: bias_buf,
            relu: rf.relu,
            residual: Some(self.buf(rf.residual)?),
        };
        self.b.step(&node.name, Op::Nodes(nodes), vec![launch]);
        self.stats.planned_ops += 1;
        self.stats.library_gemms += 1;
        self.stats.fused_epilogues += rf.members.len();
        self.stats.dense_weight_bytes += 4 * k * n;
        Ok(())
    }

    /// A planned operator whose weight is entirely pruned: `C = act(bias)` on every row (zero
    /// without a bias), as one step of the same op (an empty weight) and one small kernel.
    pub(super) fn lower_all_pruned(
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
                    Activation::Gelu => gelu_tanh_expr(x, dt),
                    Activation::Clip { lo, hi } => {
                        let lo = Expr::Const(lo as f64, dt);
                        let hi = Expr::Const(hi as f64, dt);
                        let low = Expr::Binary(Binary::Max, Box::new(x), Box::new(lo));
                        Expr::Binary(Binary::Min, Box::new(low), Box::new(hi))
                    }
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
                norm: None,
            },
            vec![launch],
        );
        Ok(())
    }

    /// Where deferred LayerNorm `producer`'s row sums go: every deferred LayerNorm's sums share
    /// one f64 buffer (rows of the LayerNorm's input, a pair each, in producer order), which a
    /// step before the first producer's zeroes (the third value: this is that producer).
    fn ln_sums_slot(&mut self, producer: usize) -> (BufferId, usize, bool) {
        if self.ln_sums.is_none() {
            let graph = self.graph;
            let mut order: Vec<(usize, usize)> = self
                .deferred
                .values()
                .filter(|d| d.defer_ln)
                .map(|d| {
                    let f = graph.fact(d.sum);
                    (d.producer, f.numel() / f.shape.last().copied().unwrap_or(1).max(1))
                })
                .collect();
            order.sort_unstable();
            let mut at = HashMap::new();
            let mut total = 0;
            for &(p, rows) in &order {
                at.insert(p, total);
                total += 2 * rows;
            }
            let buf = self.b.buffer("layernorm_row_sums", Elem::F64, total.max(2), Storage::Scratch);
            self.ln_sums = Some((buf, at, order.first().map_or(usize::MAX, |o| o.0)));
        }
        let (buf, at, first) = self.ln_sums.as_ref().expect("made above");
        (*buf, at[&producer], producer == *first)
    }
}
