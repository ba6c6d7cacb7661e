//! Row kernels over the last axis of a contiguous `rows × cols` tensor: LayerNormalization
//! (`templates/op_layernorm.cu.tera`) and Softmax / LogSoftmax (`templates/op_softmax.cu.tera`),
//! sharing the row walk of `templates/op_rows.cuh`. Rows of up to 1024 columns take one warp
//! each (eight per CTA) and live in registers, reduced by shuffles; longer rows take a CTA each,
//! in registers up to 32 values per thread, else reloaded by every pass. Math is f32.

use super::{check_name, spec_error, type_ctx, OpKernel, TypeCtx};
use crate::codegen::render::render;
use crate::codegen::CodegenError;
use crate::ir::DType;
use serde::Serialize;

/// Longest row that one warp handles.
const WARP_COLS: usize = 1024;
/// Rows (warps) per CTA on the warp path.
const WARPS_PER_CTA: usize = 8;
/// Most values a thread holds in registers.
const CACHED_VALUES: usize = 32;

/// The row walk: who handles a row and how its columns are split.
#[derive(Clone, Debug, Serialize)]
struct RowWalk {
    rows: usize,
    cols: usize,
    /// One warp per row (else one CTA per row).
    warp: bool,
    threads: usize,
    warps: usize,
    /// Threads on one row, elements per access (4 when `cols` allows, else 1), accesses per
    /// thread, columns per sweep of the row's threads (`lanes * vec`).
    lanes: usize,
    vec: usize,
    chunks: usize,
    step: usize,
    /// The last sweep runs past the row's end.
    guard: bool,
    /// The row's values stay in registers between passes.
    cached: bool,
}

fn row_walk(rows: usize, cols: usize) -> RowWalk {
    let vec = if cols.is_multiple_of(4) { 4 } else { 1 };
    let (warp, threads) = match cols {
        c if c <= WARP_COLS => (true, 32 * WARPS_PER_CTA),
        c if c <= 4096 => (false, 256),
        c if c <= 16384 => (false, 512),
        _ => (false, 1024),
    };
    let lanes = if warp { 32 } else { threads };
    let step = lanes * vec;
    let chunks = cols.div_ceil(step).max(1);
    RowWalk {
        rows,
        cols,
        warp,
        threads,
        warps: threads / 32,
        lanes,
        vec,
        chunks,
        step,
        guard: !cols.is_multiple_of(step),
        cached: chunks * vec <= CACHED_VALUES,
    }
}

impl RowWalk {
    fn grid(&self) -> (u32, u32, u32) {
        let blocks = if self.warp { self.rows.div_ceil(WARPS_PER_CTA) } else { self.rows };
        (blocks.max(1) as u32, 1, 1)
    }
}

fn check_rows(op: &str, name: &str, rows: usize, cols: usize, types: &[(&str, DType)]) -> Result<(), CodegenError> {
    let fail = |m: String| spec_error(op, name, m);
    check_name(name).map_err(fail)?;
    for (what, d) in types {
        if !matches!(d, DType::F16 | DType::BF16 | DType::F32) {
            return Err(fail(format!("{what} must be f32, f16 or bf16, got {d}")));
        }
    }
    if cols == 0 || rows > i32::MAX as usize {
        return Err(fail(format!("cannot walk {rows} rows of {cols} columns")));
    }
    Ok(())
}

#[derive(Serialize)]
struct LayerNormCtx {
    kernel_name: String,
    #[serde(flatten)]
    walk: RowWalk,
    x: TypeCtx,
    y: TypeCtx,
    scale: Option<TypeCtx>,
    bias: Option<TypeCtx>,
    eps: String,
}

/// ONNX LayerNormalization over the last `cols` of a contiguous `rows × cols` input (mean and
/// variance in f32, two passes over the row), with optional `scale` and `bias` of `cols`
/// elements: `y = (x - mean) / sqrt(var + epsilon) * scale + bias`. Types are f32, f16 or bf16.
/// Parameters: `(x, [scale], [bias], y)`, only the present ones.
#[allow(clippy::too_many_arguments)]
pub fn layer_norm(
    name: &str,
    rows: usize,
    cols: usize,
    epsilon: f32,
    x: DType,
    scale: Option<DType>,
    bias: Option<DType>,
    y: DType,
) -> Result<OpKernel, CodegenError> {
    let mut types = vec![("x", x), ("y", y)];
    types.extend(scale.map(|d| ("scale", d)));
    types.extend(bias.map(|d| ("bias", d)));
    check_rows("layer_norm", name, rows, cols, &types)?;
    if !epsilon.is_finite() || epsilon < 0.0 {
        return Err(spec_error("layer_norm", name, format!("epsilon {epsilon} is not a finite nonnegative number")));
    }
    let walk = row_walk(rows, cols);
    let grid = walk.grid();
    let threads = walk.threads as u32;
    let ctx = LayerNormCtx {
        kernel_name: name.to_string(),
        walk,
        x: type_ctx(x),
        y: type_ctx(y),
        scale: scale.map(type_ctx),
        bias: bias.map(type_ctx),
        eps: format!("{epsilon:?}f"),
    };
    let source = render("op_layernorm.cu.tera", &ctx)?;
    Ok(OpKernel { name: name.to_string(), source, grid, block: (threads, 1, 1), smem_bytes: 0 })
}

#[derive(Serialize)]
struct SoftmaxCtx {
    kernel_name: String,
    #[serde(flatten)]
    walk: RowWalk,
    x: TypeCtx,
    y: TypeCtx,
    log: bool,
    /// Read by the shared row walk (Softmax has no affine parameters).
    scale: Option<TypeCtx>,
    bias: Option<TypeCtx>,
}

/// Softmax (LogSoftmax when `log`) over the last axis of a contiguous `rows × cols` tensor of
/// f32, f16 or bf16, the row maximum subtracted, f32 math. A row of only `-inf` gives NaN, as
/// in the reference. Parameters: `(x, y)`.
pub fn softmax(name: &str, rows: usize, cols: usize, dtype: DType, log: bool) -> Result<OpKernel, CodegenError> {
    check_rows("softmax", name, rows, cols, &[("the element type", dtype)])?;
    let walk = row_walk(rows, cols);
    let grid = walk.grid();
    let threads = walk.threads as u32;
    let ctx = SoftmaxCtx {
        kernel_name: name.to_string(),
        walk,
        x: type_ctx(dtype),
        y: type_ctx(dtype),
        log,
        scale: None,
        bias: None,
    };
    let source = render("op_softmax.cu.tera", &ctx)?;
    Ok(OpKernel { name: name.to_string(), source, grid, block: (threads, 1, 1), smem_bytes: 0 })
}
