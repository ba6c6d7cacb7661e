//! Reductions (`templates/op_reduce.cu.tera`): ReduceSum, ReduceMean, ReduceMax, ReduceMin,
//! ReduceProd, ReduceSumSquare and ReduceL2 over any set of axes of a strided input.
//!
//! The walk follows the memory: when the input's fastest-moving dimension is kept, threads run
//! along the outputs (reads coalesce across them) and a CTA's 8 rows of threads split each
//! output's reduction; when it is reduced, a warp (or, for long reductions with few outputs,
//! a CTA) folds one output, its lanes running along the reduction.
//!
//! A long float reduction with too few outputs to fill the GPU (the global pooling of a
//! squeeze-excitation block: 1024 outputs of 12,544 elements each) splits its reduction into
//! chunks ([`reduce_kernels`]): a first kernel folds each chunk of each output into an f32
//! partial (grid `y` the chunk), a second folds an output's partials in chunk order and
//! finishes it, so the result is the same on every run.

use super::{check_name, float_acc, index_type, offset_expr, shape_text, spec_error, stride_grid, type_ctx};
use super::{OpKernel, TensorDesc, TypeCtx, MAX_STRIDE_CTAS, THREADS};
use crate::codegen::render::render;
use crate::codegen::CodegenError;
use crate::ir::DType;
use serde::Serialize;

/// The reduction of [`reduce`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduce {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
    SumSquare,
    /// `sqrt(sum of squares)`.
    L2,
}

/// Reductions at least this long with at most this many outputs take a CTA per output.
const BLOCK_MIN_RED: usize = 2048;
const BLOCK_MAX_OUT: usize = 132 * 4;

#[derive(Serialize)]
struct ReduceCtx {
    kernel_name: String,
    shape: String,
    kind: String,
    x: TypeCtx,
    y: TypeCtx,
    acc: String,
    init: String,
    /// Fold functor (`FoldAdd`, ...), the value folded (of the loaded `v`), and the result (of `acc`).
    fold: &'static str,
    map: String,
    finish: String,
    n_out: usize,
    n_red: usize,
    /// Offset of output `o`'s first element and of reduced element `r` from it.
    base: String,
    offset: String,
    idx_t: &'static str,
    /// `column`, `warp` or `block`; `finish` for the second kernel of a split reduction.
    mode: &'static str,
    /// Chunks the reduction is split into (1: not split) and elements per chunk.
    split: usize,
    chunk: usize,
    /// The statement storing an output's `acc`: the finished result, or the chunk's partial.
    emit: String,
    threads: usize,
    warps: usize,
    /// Column mode: outputs per CTA (threadIdx.x) and reduction slices (threadIdx.y).
    tx: usize,
    ty: usize,
}

fn int_limits(d: DType) -> (&'static str, &'static str) {
    match d {
        DType::I8 => ("-128", "127"),
        DType::U8 => ("0", "255"),
        DType::I16 => ("-32768", "32767"),
        DType::U16 => ("0", "65535"),
        DType::I32 => ("(-2147483647 - 1)", "2147483647"),
        DType::U32 => ("0u", "4294967295u"),
        DType::I64 => ("(-9223372036854775807LL - 1)", "9223372036854775807LL"),
        DType::U64 => ("0ull", "18446744073709551615ull"),
        _ => ("0", "1"),
    }
}

/// Reduces `input` (any strides) over `axes` (sorted, unique) with `kind`; `out` is contiguous
/// with those axes removed (keepdims is only a shape difference the caller handles), of type
/// `out` (the result converted as a C cast would). Floats accumulate in f32 (F64 in f64);
/// integer sums and products in 64 bits, wrapping; Max and Min compare in the element type
/// (NaN wins); Bool takes only Max and Min. An empty reduction gives the identity (Mean: NaN).
/// Parameters: `(x, y)`.
pub fn reduce(
    name: &str,
    input: &TensorDesc,
    axes: &[usize],
    kind: Reduce,
    out: DType,
) -> Result<OpKernel, CodegenError> {
    match reduce_with(name, input, axes, kind, out, false)? {
        ReduceKernels::One(k) => Ok(k),
        ReduceKernels::Split { .. } => unreachable!("not asked to split"),
    }
}

/// The kernels of a reduction: one, or a split one's two (see the module docs).
#[derive(Clone, Debug, PartialEq)]
pub enum ReduceKernels {
    One(OpKernel),
    /// `partial(x, part)` writes `partials` f32 values; `finish(part, y)` reads them.
    Split {
        partial: OpKernel,
        finish: OpKernel,
        partials: usize,
    },
}

/// Least CTAs a reduction should run on (two per SM of an H100 or H200) before it splits.
const SPLIT_BELOW_CTAS: usize = 2 * 132;
/// Fewest elements a split chunk folds.
const MIN_CHUNK: usize = 256;
/// Most chunks.
const MAX_SPLIT: usize = 64;

/// [`reduce`], split into two kernels when a long float reduction has too few outputs to fill
/// the GPU.
pub fn reduce_kernels(
    name: &str,
    input: &TensorDesc,
    axes: &[usize],
    kind: Reduce,
    out: DType,
) -> Result<ReduceKernels, CodegenError> {
    reduce_with(name, input, axes, kind, out, true)
}

fn reduce_with(
    name: &str,
    input: &TensorDesc,
    axes: &[usize],
    kind: Reduce,
    out: DType,
    may_split: bool,
) -> Result<ReduceKernels, CodegenError> {
    let fail = |m: String| spec_error("reduce", name, m);
    check_name(name).map_err(fail)?;
    input.check("the input").map_err(fail)?;
    let rank = input.shape.len();
    if axes.windows(2).any(|w| w[0] >= w[1]) || axes.last().is_some_and(|&a| a >= rank) {
        return Err(fail(format!("axes {axes:?} must be sorted, unique and below the rank {rank}")));
    }
    let d = input.dtype;
    let extremum = matches!(kind, Reduce::Max | Reduce::Min);
    if d == DType::Bool && !extremum {
        return Err(fail(format!("{kind:?} does not take bool")));
    }
    let acc = match (float_acc(d), d) {
        (Some(f), _) => f,
        (None, DType::Bool | DType::I8 | DType::U8 | DType::I16 | DType::U16) if extremum => "int",
        (None, _) if extremum => super::compute_type(d),
        (None, DType::U64) => "unsigned long long",
        (None, _) => "long long",
    };
    let float = float_acc(d).is_some();
    let infinity =
        if acc == "double" { "__longlong_as_double(0x7ff0000000000000LL)" } else { "__int_as_float(0x7f800000)" };
    let (lo, hi) = int_limits(d);
    let init = match kind {
        Reduce::Sum | Reduce::Mean | Reduce::SumSquare | Reduce::L2 => format!("({acc})0"),
        Reduce::Prod => format!("({acc})1"),
        Reduce::Max if float => format!("-{infinity}"),
        Reduce::Min if float => infinity.to_string(),
        Reduce::Max => format!("({acc}){lo}"),
        Reduce::Min => format!("({acc}){hi}"),
    };
    let fold = match kind {
        Reduce::Prod => "FoldMul",
        Reduce::Max => "FoldMax",
        Reduce::Min => "FoldMin",
        _ => "FoldAdd",
    };
    let map = match kind {
        Reduce::SumSquare | Reduce::L2 => format!("(({acc})v * ({acc})v)"),
        _ => format!("({acc})v"),
    };
    let finish = match kind {
        Reduce::Mean if float => format!("acc / {}", input.reduced_len(axes)),
        Reduce::Mean => format!("(double)acc / {}", input.reduced_len(axes)),
        Reduce::L2 if acc == "float" => "sqrtf(acc)".into(),
        Reduce::L2 if acc == "double" => "sqrt(acc)".into(),
        Reduce::L2 => "sqrt((double)acc)".into(),
        _ => "acc".into(),
    };
    let dims = |reduced: bool| -> Vec<(usize, usize)> {
        (0..rank)
            .filter(|a| axes.contains(a) == reduced)
            .map(|a| (input.shape[a], input.strides[a]))
            .filter(|&(size, _)| size != 1)
            .collect()
    };
    let kept = dims(false);
    let mut red = dims(true);
    // The reduction's order is free: walk its smallest stride innermost.
    red.sort_by_key(|d| std::cmp::Reverse(d.1));
    let n_out: usize = kept.iter().map(|d| d.0).product();
    let n_red: usize = red.iter().map(|d| d.0).product();
    let min_stride = |ds: &[(usize, usize)]| ds.iter().map(|d| d.1).min();
    let reduction_fast = match (min_stride(&red), min_stride(&kept)) {
        (Some(r), Some(k)) => r < k,
        (Some(_), None) => true,
        (None, _) => false,
    };
    let (mode, tx, ty) = if !reduction_fast || n_red < 32 {
        if n_red >= 64 {
            ("column", 32, 8)
        } else {
            ("column", THREADS, 1)
        }
    } else if n_red >= BLOCK_MIN_RED && n_out <= BLOCK_MAX_OUT {
        ("block", THREADS, 1)
    } else {
        ("warp", THREADS, 1)
    };
    let grid = match mode {
        "column" => stride_grid(n_out, tx),
        "warp" => stride_grid(n_out, THREADS / 32),
        _ => n_out.clamp(1, MAX_STRIDE_CTAS) as u32,
    };
    let split = if may_split && acc == "float" && (grid as usize) < SPLIT_BELOW_CTAS {
        SPLIT_BELOW_CTAS.div_ceil(grid as usize).min(n_red / MIN_CHUNK).clamp(1, MAX_SPLIT)
    } else {
        1
    };
    let chunk = n_red.div_ceil(split);
    let done = format!("y[o] = {}(({})({finish}))", type_ctx(out).store, type_ctx(out).ct);
    let emit = if split > 1 { format!("part[(idx_t)blockIdx.y * {n_out} + o] = acc") } else { done.clone() };
    let unzip = |ds: &[(usize, usize)]| -> (Vec<usize>, Vec<usize>) { ds.iter().copied().unzip() };
    let (kept_sizes, kept_strides) = unzip(&kept);
    let (red_sizes, red_strides) = unzip(&red);
    let ctx = ReduceCtx {
        kernel_name: name.to_string(),
        shape: shape_text(&input.shape),
        kind: format!("{kind:?} over axes {axes:?}"),
        x: type_ctx(d),
        y: type_ctx(out),
        acc: acc.to_string(),
        init,
        fold,
        map,
        finish,
        n_out,
        n_red,
        base: offset_expr("o", &kept_sizes, &kept_strides),
        offset: offset_expr("r", &red_sizes, &red_strides),
        idx_t: index_type(input.max_offset().max(n_out).max(n_red) + THREADS * MAX_STRIDE_CTAS),
        mode,
        split,
        chunk,
        emit,
        threads: THREADS,
        warps: THREADS / 32,
        tx,
        ty,
    };
    let source = render("op_reduce.cu.tera", &ctx)?;
    let first = OpKernel {
        name: name.to_string(),
        source,
        grid: (grid, split as u32, 1),
        block: (tx as u32, ty as u32, 1),
        smem_bytes: 0,
    };
    if split == 1 {
        return Ok(ReduceKernels::One(first));
    }
    let finish_name = format!("{name}_finish");
    let finish_ctx = ReduceCtx {
        kernel_name: finish_name.clone(),
        mode: "finish",
        emit: done,
        idx_t: index_type(split * n_out + THREADS * MAX_STRIDE_CTAS),
        tx: THREADS,
        ty: 1,
        ..ctx
    };
    let finish = OpKernel {
        name: finish_name,
        source: render("op_reduce.cu.tera", &finish_ctx)?,
        grid: (stride_grid(n_out, THREADS), 1, 1),
        block: (THREADS as u32, 1, 1),
        smem_bytes: 0,
    };
    Ok(ReduceKernels::Split { partial: first, finish, partials: split * n_out })
}

impl TensorDesc {
    /// Elements folded into each output when reducing over `axes`.
    fn reduced_len(&self, axes: &[usize]) -> usize {
        axes.iter().map(|&a| self.shape[a]).product()
    }
}
