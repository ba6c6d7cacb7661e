//! From the execution plan to kernel specs: every sub-operator `X·Wₖ` of a planned
//! operator becomes one [`SpmmSpec`] (the parts that map to the fine-grained kernel
//! share one), the first writing the output and the others accumulating into it, the
//! fused epilogue (bias, activation) on the last. Launch order ([`super::fine_first`]): in
//! fp32 the fine kernel goes first and the block kernels accumulate onto it; other dtypes
//! the reverse.
//!
//! The plan's cover may use block shapes no kernel family takes as they are; they are
//! mapped, never dropped:
//! - a shape the family takes and that tiles the weight: as is;
//! - a larger square-ish block (64×64 for fp32, 128×128): split into 32×32 blocks, every
//!   one of them kept (the cover already paid for its zeros);
//! - the 2:4 part: the 2:4 sparse tensor-core kernel over exactly its elements
//!   ([`SpmmSpec::two_four`]) where that kernel applies (16-bit, K a multiple of 32, N of 16:
//!   [`crate::kernel_choice::two_four::supports`]), else the fine-grained kernel;
//! - vectors (1×k, k×1), small blocks and blocks clipped at a ragged edge: the fine-grained
//!   kernel over exactly the elements the sub-operator owns;
//! - the dense fallback: the block kernel with every block present.
//!
//! The operator's [`KernelChoice`] (`Auto` unless tuned) goes on the specs last
//! ([`apply_kernel_choice`]).
//!
//! Weight values travel beside the spec (the sub-operator's masked weight), so a kernel
//! can either embed them or read them from device memory.
//!
//! Quantized operators: a sub-operator whose hints say 8-bit `int` (dtype `i8`) runs on the
//! int8 tensor-core kernel when the activation operand is int8 too
//! ([`activation_format`], [`kernels_for_operator_with`]); the kernel then takes the
//! quantized operands and their scales (`codegen::quant`). An int8 weight beside a float
//! activation has no kernel (weight-only quantization is not built) and is an error, as
//! before.

use super::{Activation, CodegenError, Dtype, Epilogue, Mode, Orientation, SpmmSpec};
use crate::plan::suboperator::{SubOpKind, SubOperator};
use crate::plan::{KernelChoice, OperatorPlan};
use crate::sparse::Csr;

/// One kernel launch of a planned operator: its spec and the weight it multiplies with
/// (zero outside what the sub-operator owns): row-major `k × n` by default, a [`Csr`] on the
/// sparse path ([`kernels_for_sparse_operator`]).
#[derive(Clone, Debug)]
pub struct PlannedKernel<W = Vec<f32>> {
    pub spec: SpmmSpec,
    pub weight: W,
}

fn err(msg: String) -> CodegenError {
    CodegenError::Spec(msg)
}

/// Whether the block family of `dtype` takes `(bh, bw)` blocks on a `k × n` weight
/// (`left`: an `m × k` weight on the left, which the kernels run as `Wᵀ`, so the limit on
/// the block width applies to its height).
fn block_fits(dtype: Dtype, (bh, bw): (usize, usize), k: usize, n: usize, left: bool) -> bool {
    let limit = if left { bh } else { bw };
    let family = match dtype {
        Dtype::F32 => bh % 4 == 0 && bw % 4 == 0 && limit <= 128,
        Dtype::F16 | Dtype::Bf16 => bh % 16 == 0 && bw % 16 == 0 && limit <= 64,
        // The int8 kernel has the right orientation only.
        Dtype::I8 => !left && super::spmm::int8::int8_block_fits((bh, bw)),
    };
    family && k.is_multiple_of(bh) && n.is_multiple_of(bw)
}

fn epilogue_of(op: &OperatorPlan) -> Result<Epilogue, CodegenError> {
    if !op.epilogue.fused {
        return Ok(Epilogue::NONE);
    }
    let activation = match op.epilogue.activation.as_deref() {
        None => Activation::None,
        Some("Relu") => Activation::Relu,
        Some("Gelu") => Activation::Gelu,
        Some(other) => return Err(err(format!("no fused {other} epilogue in the kernels yet"))),
    };
    Ok(Epilogue { bias: op.epilogue.bias.is_some(), activation })
}

/// Number format of an operator's activation operand, as far as the kernel choice cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActivationFormat {
    /// Float (the activation keeps the kernel dtype of the weight's float format).
    Float,
    /// Symmetric int8 (TeSA: at most 8 bits, format `int`), one scale per tensor.
    Int8,
}

/// The activation format of planned operator `op` in `graph`: the TeSA of its non-weight
/// input (int8 when every element is at most 8 bits wide in format `int`); float when the
/// input has no TeSA or the node is not found.
pub fn activation_format(graph: &crate::ir::Graph, op: &OperatorPlan) -> ActivationFormat {
    use crate::tesa::Format;
    let Some(node) = graph.nodes.iter().find(|nd| nd.name == op.node) else {
        return ActivationFormat::Float;
    };
    let activation = node.inputs.iter().flatten().find(|v| graph.value(**v).name != op.weight);
    match activation.and_then(|v| graph.value(*v).tesa.as_ref()) {
        Some(t) if t.max_bits() <= 8 && t.uniform().format() == Format::Int => ActivationFormat::Int8,
        _ => ActivationFormat::Float,
    }
}

/// The kernels of one planned operator. `weight` is its logical `rows × cols` weight
/// (row-major, as the plan sees it: transposed for Gemm with `transB`). A weight on the
/// left (`Y = W·X`, W `rows × cols` = `M × K`, X `K × op.m`) gives left-orientation specs.
/// The activation is taken as float: see [`kernels_for_operator_with`] for int8 activations.
pub fn kernels_for_operator(op: &OperatorPlan, weight: &[f32]) -> Result<Vec<PlannedKernel>, CodegenError> {
    kernels_for_operator_with(op, weight, ActivationFormat::Float)
}

/// [`kernels_for_operator`] with the activation's format: `i8` sub-operators map to the
/// int8 kernel ([`Dtype::I8`]) when the activation is int8, and are an error otherwise.
pub fn kernels_for_operator_with(
    op: &OperatorPlan,
    weight: &[f32],
    activation: ActivationFormat,
) -> Result<Vec<PlannedKernel>, CodegenError> {
    let (rows, cols) = (op.rows, op.cols);
    if weight.len() != rows * cols {
        return Err(err(format!("{}: weight holds {} elements, the plan says {rows}x{cols}", op.node, weight.len())));
    }
    let mut planned = planned_kernels(
        op,
        activation,
        &|sub| match sub.kind {
            SubOpKind::Dense => weight.to_vec(),
            _ => sub.masked_weight(weight),
        },
        &|merged, part| merged.iter_mut().zip(&part).for_each(|(a, b)| *a += b),
    )?;
    // Each kernel's spec states what its actual values allow (`SpmmSpec::w_tf32_exact`).
    planned.iter_mut().for_each(|pk| pk.spec.w_tf32_exact = crate::codegen::tf32_exact(&pk.weight));
    Ok(planned)
}

/// The kernels' specs of one planned operator without their weights (each [`PlannedKernel`]'s
/// `weight` is `()`): what tells candidates apart and prices them, at none of the cost of a
/// masked copy of the weight per sub-operator.
pub fn planned_specs(op: &OperatorPlan, activation: ActivationFormat) -> Result<Vec<PlannedKernel<()>>, CodegenError> {
    planned_kernels(op, activation, &|_| (), &|_, _| ())
}

/// [`kernels_for_operator`] for a weight held as CSR (the plan of
/// [`crate::plan::plan_sparse_weight`]): each kernel's weight is the CSR of the elements its
/// sub-operators own, and nothing of the dense size is built.
pub fn kernels_for_sparse_operator(op: &OperatorPlan, weight: &Csr) -> Result<Vec<PlannedKernel<Csr>>, CodegenError> {
    if (weight.rows, weight.cols) != (op.rows, op.cols) {
        return Err(err(format!(
            "{}: the weight is {}x{}, the plan says {}x{}",
            op.node, weight.rows, weight.cols, op.rows, op.cols
        )));
    }
    let mut planned = planned_kernels(
        op,
        ActivationFormat::Float,
        &|sub| match sub.kind {
            SubOpKind::Dense => weight.clone(),
            _ => weight.restricted_to(&sub.owned),
        },
        &|merged, part| {
            let mut keep = merged.flat_indices();
            keep.extend(part.flat_indices());
            keep.sort_unstable();
            *merged = weight.restricted_to(&keep);
        },
    )?;
    planned.iter_mut().for_each(|pk| pk.spec.w_tf32_exact = crate::codegen::tf32_exact(&pk.weight.values));
    Ok(planned)
}

/// The kernels of `op`, whatever holds the weight: `part` gives a sub-operator's weight,
/// `merge` adds one part's weight into another's (parts that share the fine kernel).
fn planned_kernels<W>(
    op: &OperatorPlan,
    activation: ActivationFormat,
    part: &dyn Fn(&SubOperator) -> W,
    merge: &dyn Fn(&mut W, W),
) -> Result<Vec<PlannedKernel<W>>, CodegenError> {
    let (rows, cols) = (op.rows, op.cols);
    let left = op.orientation == crate::plan::suboperator::Orientation::WeightLeft;
    let epilogue = epilogue_of(op)?;
    let count = op.suboperators.len();
    let mut out = Vec::with_capacity(count);
    for (i, sub) in op.suboperators.iter().enumerate() {
        let dtype: Dtype = sub.hints.dtype.parse().map_err(|e| err(format!("{}: {e}", op.node)))?;
        if dtype == Dtype::I8 && activation != ActivationFormat::Int8 {
            return Err(err(format!(
                "{}: int8 weight with a float activation has no kernel (weight-only int8 is not built)",
                op.node
            )));
        }
        let stream_ok = op.kernel == KernelChoice::Auto;
        let (block, blocks) = kernel_blocks(sub, dtype, rows, cols, left, stream_ok);
        let mut spec = if left {
            SpmmSpec::new(rows, cols, op.m, dtype, block, blocks)
        } else {
            SpmmSpec::new(op.m, rows, cols, dtype, block, blocks)
        };
        spec.orientation = if left { Orientation::Left } else { Orientation::Right };
        spec.mode = Mode::Auto;
        spec.two_four = sub.kind == SubOpKind::TwoFour
            && crate::kernel_choice::two_four::supports(dtype, spec.orientation, rows, cols);
        let weight = part(sub);
        // Parts that all landed on the fine kernel run as one launch.
        let fine = |s: &SpmmSpec| s.block == (1, 1) && !s.two_four;
        if let Some(prev) = out.iter_mut().find(|p: &&mut PlannedKernel<W>| fine(&p.spec) && fine(&spec)) {
            prev.spec.blocks.extend(spec.blocks);
            merge(&mut prev.weight, weight);
            if i + 1 == count {
                prev.spec.epilogue = spec.epilogue;
            }
            continue;
        }
        out.push(PlannedKernel { spec, weight });
    }
    if out.first().is_some_and(|pk| super::fine_first(pk.spec.dtype)) {
        out.sort_by_key(|pk| pk.spec.block != (1, 1));
    } else {
        // A 2:4 part first: the Hopper 2:4 kernel writes C and does not accumulate onto it.
        out.sort_by_key(|pk| !pk.spec.two_four);
    }
    // The epilogue belongs to the last launch, and only the first one overwrites.
    let last = out.len().saturating_sub(1);
    for (i, pk) in out.iter_mut().enumerate() {
        apply_kernel_choice(op.kernel, &mut pk.spec);
        pk.spec.accumulate = i > 0;
        if i != last {
            pk.spec.epilogue = Epilogue::NONE;
        } else {
            pk.spec.epilogue = epilogue;
        }
    }
    Ok(out)
}

/// Puts a planned operator's kernel choice (the tuner's) on one of its specs: an engine on
/// every spec, a 3xTF32 fine tile on the fp32 element-sparse one (right orientation; the block
/// specs keep the specializer's choice). `KernelChoice::Auto` leaves the spec as it is.
pub fn apply_kernel_choice(choice: KernelChoice, spec: &mut SpmmSpec) {
    match choice {
        KernelChoice::Auto => {}
        KernelChoice::Engine(engine) => spec.engine = engine,
        KernelChoice::FineTf32(tile) => {
            if spec.block == (1, 1) && spec.dtype == Dtype::F32 && spec.orientation == Orientation::Right {
                spec.engine = super::Engine::Tf32x3;
                spec.tile = Some(tile);
            }
        }
    }
}

/// Plans `Y = X·W` for one `k × n` weight (pruned where `w` is zero, `m` rows of `X`,
/// elements of `dtype`) with the default planner and returns its kernels: the path a
/// MatMul of a model takes, for tests and benchmarks of single weights.
pub fn plan_single_weight(
    m: usize,
    k: usize,
    n: usize,
    w: &[f32],
    dtype: Dtype,
) -> Result<Vec<PlannedKernel>, CodegenError> {
    plan_single_weight_oriented(m, k, n, w, dtype, Orientation::Right)
}

/// [`plan_single_weight`] for either side: `Right` plans `MatMul(X, W)` with `W` `k × n`;
/// `Left` plans `MatMul(W, X)` with `W` `m × k` (row-major in `w`) and `X` `k × n`.
pub fn plan_single_weight_oriented(
    m: usize,
    k: usize,
    n: usize,
    w: &[f32],
    dtype: Dtype,
    orientation: Orientation,
) -> Result<Vec<PlannedKernel>, CodegenError> {
    let g = single_weight_graph(m, k, n, w, dtype, orientation)?;
    let plan = crate::plan::plan(&g, &crate::plan::PlanOptions::default()).map_err(|e| err(e.to_string()))?;
    let op = plan.operators.first().ok_or_else(|| err("the planner found no operator".into()))?;
    kernels_for_operator_with(op, w, activation_format(&g, op))
}

/// The one-MatMul graph [`plan_single_weight_oriented`] plans: input `x`, initializer `w`
/// pruned where zero and marked with `dtype`'s width and format (int8: the activation too).
pub fn single_weight_graph(
    m: usize,
    k: usize,
    n: usize,
    w: &[f32],
    dtype: Dtype,
    orientation: Orientation,
) -> Result<crate::ir::Graph, CodegenError> {
    use crate::ir::{Attrs, DType, Graph, Initializer, Node, NodeId, Tensor, ValueFact, ValueKind};
    use crate::tesa::{ElemAttr, Format, Tesa};
    let left = orientation == Orientation::Left;
    let ((w_rows, w_cols), x_shape) = if left { ((m, k), vec![k, n]) } else { ((k, n), vec![m, k]) };
    if w.len() != w_rows * w_cols {
        return Err(err(format!("weight holds {} elements, not {w_rows}x{w_cols}", w.len())));
    }
    let mut g = Graph { name: "single_weight".into(), ..Default::default() };
    g.opsets.insert(String::new(), 17);
    let x = g.add_value("x".into(), ValueFact::new(DType::F32, x_shape), ValueKind::Input);
    g.inputs.push(x);
    let wt = Tensor::from_vec(vec![w_rows, w_cols], w.to_vec());
    let wid = g.add_value("w".into(), ValueFact::of(&wt), ValueKind::Initializer);
    let mut tesa = Tesa::from_zeros(&wt);
    match dtype {
        Dtype::F32 => {}
        Dtype::F16 => tesa.set_uniform(ElemAttr::new(16, Format::Float)),
        Dtype::Bf16 => tesa.set_uniform(ElemAttr::new(16, Format::BFloat)),
        Dtype::I8 => {
            // Both operands int8: the weight's TeSA and the activation's.
            tesa.set_uniform(ElemAttr::new(8, Format::Int));
            g.values[x.index()].tesa = Some(Tesa::dense(&[m, k], 8, Format::Int));
        }
    }
    g.values[wid.index()].tesa = Some(tesa);
    g.initializers.insert(wid, Initializer::Dense(wt));
    let y = g.add_value("y".into(), ValueFact::new(DType::F32, vec![m, n]), ValueKind::NodeOutput(NodeId(0)));
    g.nodes.push(Node {
        name: "mm".into(),
        op_type: "MatMul".into(),
        domain: String::new(),
        opset: 17,
        attrs: Attrs::new(),
        inputs: if left { vec![Some(wid), Some(x)] } else { vec![Some(x), Some(wid)] },
        outputs: vec![y],
    });
    g.outputs.push(y);
    Ok(g)
}

/// Block shape and live blocks a kernel family takes for one sub-operator of a `k × n`
/// weight (`left`: the weight is on the left; `stream_ok`: the specializer chooses the engine,
/// so a skinny dense 16-bit part may take the streaming kernel).
fn kernel_blocks(
    sub: &SubOperator,
    dtype: Dtype,
    k: usize,
    n: usize,
    left: bool,
    stream_ok: bool,
) -> ((usize, usize), Vec<(usize, usize)>) {
    let block_fits = |dtype, block, k, n| block_fits(dtype, block, k, n, left);
    let fine = |owned: &[u32]| -> ((usize, usize), Vec<(usize, usize)>) {
        let blocks = owned.iter().map(|&i| (i as usize / n, i as usize % n)).collect();
        ((1, 1), blocks)
    };
    match sub.kind {
        SubOpKind::TwoFour => fine(&sub.owned),
        SubOpKind::Dense
            if stream_ok && !left && crate::kernel_choice::stream::auto_takes(dtype, Orientation::Right, k, n) =>
        {
            // The streaming kernel takes any shape (one block, the whole weight), where the
            // block kernels' 16 × 16 tiles would leave a 24-, 40- or 43-wide weight to the fine
            // kernel. A 1 × 1 weight stays a fine one (block (1, 1) selects that kernel).
            if (k, n) == (1, 1) {
                ((1, 1), vec![(0, 0)])
            } else {
                ((k, n), vec![(0, 0)])
            }
        }
        SubOpKind::Dense => {
            // int8 dense runs twice as fast on 64×64 tiles as on 32×32 (run 7, 4096³:
            // 0.369 vs 0.760 ms): half the A re-reads and twice the math per pipeline step.
            let int8_first: &[(usize, usize)] = if dtype == Dtype::I8 { &[(64, 64)] } else { &[] };
            let block = int8_first
                .iter()
                .copied()
                .chain([(32, 32), (16, 16), (32, 16), (16, 32), (8, 8), (4, 4)])
                .find(|b| block_fits(dtype, *b, k, n));
            match block {
                Some((bh, bw)) => ((bh, bw), (0..k / bh).flat_map(|r| (0..n / bw).map(move |c| (r, c))).collect()),
                None => fine(&(0..(k * n) as u32).collect::<Vec<_>>()),
            }
        }
        SubOpKind::BlockSparse => {
            let (h, w) = sub.hints.block;
            if block_fits(dtype, (h, w), k, n) {
                return ((h, w), sub.blocks.iter().map(|&(r, c)| (r as usize, c as usize)).collect());
            }
            let (th, tw) = (h.min(32), w.min(32));
            if h % th == 0 && w % tw == 0 && block_fits(dtype, (th, tw), k, n) && (th, tw) != (h, w) {
                let (sh, sw) = (h / th, w / tw);
                let mut blocks = vec![];
                for &(r, c) in &sub.blocks {
                    for i in 0..sh {
                        for j in 0..sw {
                            let (br, bc) = (r as usize * sh + i, c as usize * sw + j);
                            if br < k / th && bc < n / tw {
                                blocks.push((br, bc));
                            }
                        }
                    }
                }
                return ((th, tw), blocks);
            }
            fine(&sub.owned)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;
    use crate::tesa::patterns::Pattern;

    #[test]
    fn planned_kernels_cover_exactly_the_weight_and_specialize() {
        let patterns = [
            Pattern::Mixed { bh: 32, bw: 32, block_sparsity: 0.8, scattered: 0.01 },
            Pattern::Block { bh: 32, bw: 32, sparsity: 0.9 },
            Pattern::Unstructured { sparsity: 0.95 },
            Pattern::Block { bh: 64, bw: 64, sparsity: 0.5 },
            Pattern::NM { n: 2, m: 4 },
            Pattern::Unstructured { sparsity: 0.2 },
        ];
        let mut families = std::collections::BTreeSet::new();
        for (s, pattern) in patterns.iter().enumerate() {
            let mask = pattern.mask(256, 256, s as u64);
            let mut rng = SplitMix64::new(s as u64 + 1);
            let w: Vec<f32> = mask.iter().map(|p| if *p { 0.0 } else { rng.uniform(-1.0, 1.0) as f32 }).collect();
            let kernels = plan_single_weight(512, 256, 256, &w, Dtype::F32).unwrap();
            assert!(!kernels.is_empty());
            // The kernels' weights add up to the weight, and each kernel's blocks hold
            // every nonzero of its own weight.
            let mut sum = vec![0.0f32; w.len()];
            for (i, pk) in kernels.iter().enumerate() {
                assert_eq!(pk.spec.accumulate, i > 0);
                let (bh, bw) = pk.spec.block;
                let live: std::collections::BTreeSet<(usize, usize)> = pk.spec.blocks.iter().copied().collect();
                for (e, v) in pk.weight.iter().enumerate() {
                    sum[e] += v;
                    if *v != 0.0 {
                        assert!(
                            live.contains(&(e / 256 / bh, (e % 256) / bw)),
                            "{}: element {e} outside its blocks",
                            pattern.label()
                        );
                    }
                }
                let kernel = super::super::specialize(&pk.spec).unwrap_or_else(|e| panic!("{}: {e}", pattern.label()));
                assert!(kernel.source.contains("__global__"));
                families.insert(kernel.name.clone());
            }
            assert_eq!(sum, w, "{}", pattern.label());
        }
        assert!(families.len() >= 2, "{families:?}");
    }

    /// The CSR path (plan on the sparse mask, kernels over CSR parts, packing by lookup) gives
    /// the graph path's plan, specs and packed device weights, on patterns that plan to blocks,
    /// to 1×1 and to a mix.
    #[test]
    fn the_sparse_path_equals_the_dense_one() {
        let patterns = [
            Pattern::Mixed { bh: 32, bw: 32, block_sparsity: 0.8, scattered: 0.01 },
            Pattern::Unstructured { sparsity: 0.97 },
            Pattern::Block { bh: 32, bw: 32, sparsity: 0.9 },
        ];
        for (s, pattern) in patterns.iter().enumerate() {
            let (m, k, n) = (512, 256, 384);
            let mask = pattern.mask(k, n, s as u64 + 7);
            let mut rng = SplitMix64::new(s as u64 + 11);
            let w: Vec<f32> = mask.iter().map(|p| if *p { 0.0 } else { rng.uniform(-1.0, 1.0) as f32 }).collect();
            let g = single_weight_graph(m, k, n, &w, Dtype::F32, Orientation::Right).unwrap();
            let mut graph_op = crate::plan::plan(&g, &crate::plan::PlanOptions::default()).unwrap().operators.remove(0);
            let csr = Csr::from_dense(&w, k, n);
            let mut sparse_op = crate::plan::plan_sparse_weight(
                "mm",
                &csr,
                m,
                Default::default(),
                &crate::plan::PlanOptions::default(),
            )
            .unwrap();
            (graph_op.cover_s, sparse_op.cover_s) = (0.0, 0.0);
            sparse_op.weight = graph_op.weight.clone();
            assert_eq!(sparse_op, graph_op, "{}", pattern.label());
            let dense = kernels_for_operator(&graph_op, &w).unwrap();
            let sparse = kernels_for_sparse_operator(&sparse_op, &csr).unwrap();
            assert_eq!(dense.len(), sparse.len());
            for (d, sp) in dense.iter().zip(&sparse) {
                assert_eq!(format!("{:?}", d.spec), format!("{:?}", sp.spec), "{}", pattern.label());
                assert_eq!(Csr::from_dense(&d.weight, k, n), sp.weight);
                let kernel = super::super::specialize(&d.spec).unwrap();
                assert_eq!(kernel.pack_weight(&d.weight), kernel.pack_weight(&sp.weight), "{}", kernel.name);
            }
            // Random values are not TF32 numbers; the same pattern at 1/16 is, on both paths.
            assert!(dense.iter().all(|d| !d.spec.w_tf32_exact));
            let w16: Vec<f32> = w.iter().map(|&v| if v == 0.0 { 0.0 } else { 0.0625 }).collect();
            let csr16 = Csr::from_dense(&w16, k, n);
            let dense16 = kernels_for_operator(&graph_op, &w16).unwrap();
            let sparse16 = kernels_for_sparse_operator(&sparse_op, &csr16).unwrap();
            let specs = dense16.iter().map(|pk| &pk.spec).chain(sparse16.iter().map(|pk| &pk.spec));
            assert!(specs.clone().all(|s| s.w_tf32_exact) && specs.count() > 0, "{}", pattern.label());
        }
    }

    #[test]
    fn int8_operands_map_to_the_int8_kernel_and_an_int8_weight_alone_is_an_error() {
        let mask = Pattern::Block { bh: 32, bw: 32, sparsity: 0.9 }.mask(256, 256, 3);
        let mut rng = SplitMix64::new(4);
        let w: Vec<f32> = mask.iter().map(|p| if *p { 0.0 } else { rng.uniform(-1.0, 1.0) as f32 }).collect();
        let kernels = plan_single_weight(512, 256, 256, &w, Dtype::I8).unwrap();
        assert!(!kernels.is_empty());
        let mut sum = vec![0.0f32; w.len()];
        for pk in &kernels {
            assert_eq!(pk.spec.dtype, Dtype::I8);
            let kernel = super::super::specialize(&pk.spec).unwrap();
            assert_eq!(kernel.family, super::super::Family::BlockInt8);
            pk.weight.iter().enumerate().for_each(|(i, v)| sum[i] += v);
        }
        assert_eq!(sum, w);
        // The same plan with a float activation: no kernel takes an int8 weight alone.
        let op = {
            let mut g = single_weight_graph(512, 256, 256, &w, Dtype::I8, Orientation::Right).unwrap();
            let x = g.inputs[0];
            g.values[x.index()].tesa = None;
            let plan = crate::plan::plan(&g, &crate::plan::PlanOptions::default()).unwrap();
            assert_eq!(activation_format(&g, &plan.operators[0]), ActivationFormat::Float);
            plan.operators[0].clone()
        };
        let e = kernels_for_operator(&op, &w).unwrap_err().to_string();
        assert!(e.contains("weight-only int8"), "{e}");
    }

    /// A 16-bit 2:4 sub-operator (the weight 2:4 along K) runs on the sparse tensor cores (the
    /// Hopper kernel: K is whole 64-deep stages); the same weight in fp32 stays off them. (The
    /// plan's operator gets its 2:4 part here, whatever the cost model would choose.)
    #[test]
    fn a_two_four_part_runs_on_the_two_four_kernel_in_16_bit() {
        use crate::plan::suboperator::{split_two_four, SubOperator};
        let (k, n) = (256, 256);
        let (w, _) = crate::codegen::spmm::two_four::tests::two_four_weight(k, n, 5);
        let g = single_weight_graph(1024, k, n, &w, Dtype::F16, Orientation::Right).unwrap();
        let plan = crate::plan::plan(&g, &crate::plan::PlanOptions::default()).unwrap();
        let mut op = plan.operators[0].clone();
        let pruned: Vec<bool> = w.iter().map(|&v| v == 0.0).collect();
        let (owned, rest) = split_two_four(&pruned, k, n).expect("a 2:4 weight");
        assert!(rest.iter().all(|&p| p), "nothing left beside the 2:4 part");
        let cm = crate::plan::cost::CostModel::sm_90();
        let nf = cm.hw.number_format(16, crate::tesa::Format::Float);
        op.suboperators = vec![SubOperator::two_four(owned, nf, op.orientation, 0.0)];
        let kernels = kernels_for_operator_with(&op, &w, activation_format(&g, &op)).unwrap();
        let families: Vec<_> = kernels.iter().map(|pk| super::super::specialize(&pk.spec).unwrap().family).collect();
        assert_eq!(
            families,
            vec![super::super::Family::TwoFourWgmma],
            "{:?}",
            kernels.iter().map(|p| &p.spec.block).collect::<Vec<_>>()
        );
        assert_eq!(kernels[0].weight, w);
        let f32_kernels = plan_single_weight(1024, k, n, &w, Dtype::F32).unwrap();
        assert!(f32_kernels.iter().all(|pk| !pk.spec.two_four));
    }

    /// `MatMul(W, X)` with W the initializer plans left-orientation specs over W (`m × k`),
    /// with N = the columns of X, and the block parts specialize into left kernels.
    #[test]
    fn weight_on_the_left_gives_left_specs() {
        let (m, k, n) = (256, 512, 384);
        for (dtype, pattern) in [
            (Dtype::F32, Pattern::Block { bh: 32, bw: 32, sparsity: 0.9 }),
            (Dtype::F16, Pattern::Block { bh: 32, bw: 32, sparsity: 0.8 }),
        ] {
            let mask = pattern.mask(m, k, 3);
            let mut rng = SplitMix64::new(9);
            let w: Vec<f32> = mask.iter().map(|p| if *p { 0.0 } else { rng.uniform(-1.0, 1.0) as f32 }).collect();
            let kernels = plan_single_weight_oriented(m, k, n, &w, dtype, Orientation::Left).unwrap();
            assert!(!kernels.is_empty());
            let mut sum = vec![0.0f32; w.len()];
            let mut block_parts = 0;
            for pk in &kernels {
                assert_eq!(pk.spec.orientation, Orientation::Left);
                assert_eq!((pk.spec.m, pk.spec.k, pk.spec.n), (m, k, n));
                let (bh, bw) = pk.spec.block;
                let live: std::collections::BTreeSet<(usize, usize)> = pk.spec.blocks.iter().copied().collect();
                for (e, v) in pk.weight.iter().enumerate() {
                    sum[e] += v;
                    if *v != 0.0 {
                        assert!(live.contains(&(e / k / bh, (e % k) / bw)), "element {e} outside its blocks");
                    }
                }
                if pk.spec.block != (1, 1) {
                    let kernel = super::super::specialize(&pk.spec).unwrap();
                    assert_eq!(kernel.orientation, Orientation::Left);
                    block_parts += 1;
                }
            }
            assert_eq!(sum, w);
            assert!(block_parts > 0, "{}: no block part planned", pattern.label());
        }
    }
}
