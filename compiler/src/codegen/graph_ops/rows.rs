//! Row kernels over the last axis of a contiguous `rows × cols` tensor: LayerNormalization
//! (`templates/op_layernorm.cu.tera`) and Softmax / LogSoftmax (`templates/op_softmax.cu.tera`),
//! sharing the row walk of `templates/op_rows.cuh`. Rows of up to 1024 columns take one warp
//! each (eight warps per CTA), or an aligned group of 16, 8, ... of its lanes where that covers
//! the row with fewer idle lanes (384 16-bit columns: 16 lanes × 3 chunks of 8, two rows a warp,
//! instead of 32 lanes with half of them idle in the second sweep), and live in registers,
//! reduced by shuffles within the group; longer rows take a CTA each,
//! in registers up to 32 values per thread, else reloaded by every pass. Accesses are 16 bytes
//! where the columns allow (8 elements of a 16-bit LayerNorm, 4 otherwise). Math is f32.
//!
//! A LayerNorm may take a prologue ([`layer_norm_fused`]): its input is not read from memory
//! but computed element by element from an elementwise [`Expr`] over other tensors (the
//! residual `Add` of a transformer), rounded to the input's type as an elementwise kernel
//! would store it, and optionally written out as a second output in the same pass.
//! Each prologue input reads as whole rows ([`RowOperand`]): laid out like the tensor, at
//! strided row starts (the leading axes permuted by a Transpose the kernel reads through, or
//! broadcast), one row repeated, or one element.

use super::expr::{render as render_expr, Expr};
use super::{check_name, index_type, offset_expr, spec_error, type_ctx, OpKernel, TensorDesc, TypeCtx};
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
    /// Warp path: rows per warp (`32 / lanes`), and whether the last warp has lanes past the
    /// last row (they walk the last row without storing).
    rpw: usize,
    ragged: bool,
}

/// The walk of `rows × cols` with accesses of `wide` elements where `cols` allows (else 4, else 1).
fn row_walk(rows: usize, cols: usize, wide: usize) -> RowWalk {
    let vec = [wide, 4].into_iter().find(|&v| cols.is_multiple_of(v)).unwrap_or(1);
    let (warp, threads) = match cols {
        c if c <= WARP_COLS => (true, 32 * WARPS_PER_CTA),
        c if c <= 4096 => (false, 256),
        c if c <= 16384 => (false, 512),
        _ => (false, 1024),
    };
    let lanes = if warp { warp_lanes(cols.div_ceil(vec), vec) } else { threads };
    let step = lanes * vec;
    let chunks = cols.div_ceil(step).max(1);
    let rpw = if warp { 32 / lanes } else { 1 };
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
        rpw,
        ragged: !rows.is_multiple_of(rpw),
    }
}

/// Lanes of a warp that walk one row of `units` accesses of `vec` elements: the group of 32,
/// 16, 8, 4, 2 or 1 lanes whose sweeps leave the fewest slots idle (`lanes · chunks - units`,
/// ties to the wider group), as long as the row stays in registers wherever the whole warp's
/// walk would keep it there. A narrower group takes several rows a warp.
fn warp_lanes(units: usize, vec: usize) -> usize {
    let slots = |lanes: usize| lanes * units.div_ceil(lanes).max(1);
    let cached = |lanes: usize| units.div_ceil(lanes) * vec <= CACHED_VALUES;
    let mut best = 32;
    for lanes in [16, 8, 4, 2, 1] {
        if slots(lanes) < slots(best) && (cached(lanes) || !cached(32)) {
            best = lanes;
        }
    }
    best
}

impl RowWalk {
    fn grid(&self) -> (u32, u32, u32) {
        let blocks = if self.warp { self.rows.div_ceil(WARPS_PER_CTA * self.rpw) } else { self.rows };
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

/// How a LayerNorm prologue input reads when broadcast to the normalized `rows × cols` tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowOperand {
    /// Laid out like the tensor: element `(r, c)` at `r * cols + c`.
    Rows,
    /// Whole dense rows at their own places: element `(r, c)` at `start(r) + c`, `start(r)` the
    /// sum over the row axes of `r`'s coordinate times the axis's stride (a Transpose of the
    /// leading axes, such as ViT's `[seq, batch] → [batch, seq]`, or a broadcast along some of
    /// them). Every such stride is a multiple of `cols`, so a row starts on a vector boundary
    /// wherever the base pointer does.
    StridedRows,
    /// One row repeated (a bias): element `(r, c)` at `c`.
    Cols,
    /// One element for all.
    Scalar,
}

/// How `t` reads when broadcast (numpy rules) to the tensor of `shape` normalized over the
/// axes from `axis` on; `None` when it reads some other way (the normalized axes not dense
/// and last, a row-axis stride that is not a multiple of the row), which a prologue does not
/// take.
pub fn row_operand(t: &TensorDesc, shape: &[usize], axis: usize) -> Option<RowOperand> {
    if axis > shape.len() || t.check("the input").is_err() {
        return None;
    }
    let strides = t.broadcast_strides(shape)?;
    let full = crate::ir::strides(shape);
    let cols: usize = shape[axis..].iter().product();
    let matters = |d: usize| shape[d] != 1;
    if (0..shape.len()).all(|d| !matters(d) || strides[d] == 0) {
        return Some(RowOperand::Scalar);
    }
    let cols_dense = (axis..shape.len()).all(|d| !matters(d) || strides[d] == full[d]);
    if !cols_dense {
        return None;
    }
    if (0..axis).all(|d| !matters(d) || strides[d] == 0) {
        Some(RowOperand::Cols)
    } else if (0..axis).all(|d| !matters(d) || strides[d] == full[d]) {
        Some(RowOperand::Rows)
    } else if (0..axis).all(|d| !matters(d) || strides[d].is_multiple_of(cols)) {
        Some(RowOperand::StridedRows)
    } else {
        None
    }
}

/// The C expression of the element offset where row `var` of a [`RowOperand::StridedRows`]
/// input starts: `var` decomposed over the row axes `shape[..axis]` (row-major), each
/// coordinate times the input's broadcast stride along it, e.g. `(rw0 / 197) * 768 +
/// (rw0 % 197) * 24576` for ViT's `[197, 32, 768]` read as `[32, 197, 768]`. Constant
/// divisors and strides; axes of size 1 or stride 0 drop out.
fn row_start(t: &TensorDesc, shape: &[usize], axis: usize, var: &str) -> Option<String> {
    let strides = t.broadcast_strides(shape)?;
    Some(offset_expr(var, &shape[..axis], &strides[..axis]))
}

/// A LayerNorm's input computed instead of read ([`layer_norm_fused`]).
#[derive(Clone, Copy, Debug)]
pub struct NormPrologue<'a> {
    /// The tensors the expression reads, each broadcast to the normalized tensor's shape as
    /// [`row_operand`] allows.
    pub inputs: &'a [TensorDesc],
    /// The normalized tensor element by element (`Expr::Input(i)` is `inputs[i]`); its type
    /// is the tensor's.
    pub expr: &'a Expr,
    /// Also write the computed tensor out (a parameter before `y`).
    pub write_x: bool,
    /// Inputs whose rows are gathered from a table ([`GatherRows`]); their `inputs` entry is
    /// the table.
    pub gathers: &'a [GatherRows],
    /// The LayerNorm's own output type when `y` is its Cast to another float type (the
    /// model's last LayerNorm in 16-bit feeding an fp32 output): each value is rounded to it
    /// before `y`'s store, as the LayerNorm then the Cast would give.
    pub y_rounded: Option<DType>,
}

/// A prologue input read through a Gather along axis 0 of a `rows × cols` table (an
/// embedding lookup): row `r` of the normalized tensor reads table row `index[r]` (a negative
/// index counts from the end; one outside the table reads zeros, as the Gather kernel gives).
/// The index tensor holds one index per normalized row, contiguous, of type `index` (i64 or
/// i32); it is a kernel parameter right after the table's.
#[derive(Clone, Copy, Debug)]
pub struct GatherRows {
    pub input: usize,
    pub index: DType,
}

#[derive(Serialize)]
struct PrologueInputCtx {
    index: usize,
    t: TypeCtx,
    used: bool,
    /// `rows`, `strided`, `cols` or `scalar` ([`RowOperand`]).
    mode: &'static str,
    /// `strided` only: the row's start ([`row_start`] of `rw{index}`), and the C type that
    /// holds it and the row index.
    row_start: String,
    idx_t: &'static str,
    /// `gathered` only: the table's rows and the index type's C name.
    gather_rows: usize,
    gather_st: &'static str,
}

/// What the row walk reads: `x` itself (no `inputs`), or a prologue.
#[derive(Serialize, Default)]
struct RowInputs {
    inputs: Vec<PrologueInputCtx>,
    /// The prologue's C expression over `v0, v1, ...`, and the rounding to x's type around it.
    expr: String,
    round: &'static str,
    /// Write x out to `xs`.
    sum: bool,
    /// Rounding of each output value to the LayerNorm's own type before y's store (`rnd_f16`,
    /// `rnd_bf16`), or empty.
    y_round: &'static str,
    /// The C test that every vector-accessed pointer is aligned to a vector.
    aligned: String,
}

fn aligned_test(vec: usize, pointers: &[String]) -> String {
    pointers.iter().map(|p| format!("aligned_n<{vec}>({p})")).collect::<Vec<_>>().join(" && ")
}

#[derive(Serialize)]
struct LayerNormCtx {
    kernel_name: String,
    #[serde(flatten)]
    walk: RowWalk,
    #[serde(flatten)]
    io: RowInputs,
    x: TypeCtx,
    y: TypeCtx,
    scale: Option<TypeCtx>,
    bias: Option<TypeCtx>,
    eps: String,
    /// Load the lane's scale and bias chunks with the row, before the folds (a second round
    /// trip after them otherwise): on the warp walk with the row in registers, 16-bit affine
    /// rows, at most [`EARLY_AFFINE_VALUES`] values a lane (their registers beside the row's).
    early: bool,
}

/// Most values of a row a lane holds with its scale and bias chunks loaded early.
const EARLY_AFFINE_VALUES: usize = 24;

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
    layer_norm_kernel(name, &[rows, cols], 1, epsilon, x, None, scale, bias, y)
}

/// [`layer_norm`] of the tensor of `shape` over the axes from `axis` on, whose input `x` is
/// computed by `prologue` (see the module docs); `x`'s type is the expression's. Parameters:
/// `(in0, ..., [scale], [bias], [x], y)`: the prologue's inputs, then the present ones.
#[allow(clippy::too_many_arguments)]
pub fn layer_norm_fused(
    name: &str,
    shape: &[usize],
    axis: usize,
    epsilon: f32,
    prologue: &NormPrologue,
    scale: Option<DType>,
    bias: Option<DType>,
    y: DType,
) -> Result<OpKernel, CodegenError> {
    let dtypes: Vec<DType> = prologue.inputs.iter().map(|t| t.dtype).collect();
    let (_, x) = render_expr(prologue.expr, &dtypes).map_err(|e| spec_error("layer_norm", name, e))?;
    layer_norm_kernel(name, shape, axis, epsilon, x, Some(prologue), scale, bias, y)
}

#[allow(clippy::too_many_arguments)]
fn layer_norm_kernel(
    name: &str,
    shape: &[usize],
    axis: usize,
    epsilon: f32,
    x: DType,
    prologue: Option<&NormPrologue>,
    scale: Option<DType>,
    bias: Option<DType>,
    y: DType,
) -> Result<OpKernel, CodegenError> {
    let fail = |m: String| spec_error("layer_norm", name, m);
    if axis > shape.len() {
        return Err(fail(format!("axis {axis} of a rank-{} tensor", shape.len())));
    }
    let rows: usize = shape[..axis].iter().product();
    let cols: usize = shape[axis..].iter().product();
    let mut types = vec![("x", x), ("y", y)];
    types.extend(scale.map(|d| ("scale", d)));
    types.extend(bias.map(|d| ("bias", d)));
    for (i, t) in prologue.map_or(&[][..], |p| p.inputs).iter().enumerate() {
        if !matches!(t.dtype, DType::F16 | DType::BF16 | DType::F32) {
            return Err(fail(format!("prologue input {i} must be f32, f16 or bf16, got {}", t.dtype)));
        }
    }
    check_rows("layer_norm", name, rows, cols, &types)?;
    if !epsilon.is_finite() || epsilon < 0.0 {
        return Err(fail(format!("epsilon {epsilon} is not a finite nonnegative number")));
    }
    // 16-byte accesses: 8 elements when every tensor the row walk touches is 16-bit.
    let input_types = prologue.map_or(vec![x], |p| p.inputs.iter().map(|t| t.dtype).collect());
    let all_16 = types.iter().map(|(_, d)| *d).chain(input_types).all(|d| d.size_bytes() == 2);
    let walk = row_walk(rows, cols, if all_16 { 8 } else { 4 });
    let grid = walk.grid();
    let threads = walk.threads as u32;
    let mut pointers: Vec<String> = vec![];
    let mut io = RowInputs::default();
    match prologue {
        None => pointers.push("x".into()),
        Some(p) => {
            let dtypes: Vec<DType> = p.inputs.iter().map(|t| t.dtype).collect();
            let (expr, _) = render_expr(p.expr, &dtypes).map_err(fail)?;
            for (i, t) in p.inputs.iter().enumerate() {
                t.check(&format!("prologue input {i}")).map_err(fail)?;
                // A gathered input's rows come from its table; any other reads as rows, a row or
                // a scalar of the normalized tensor.
                let (mode, row_start, idx_t, gather_rows, gather_st) = match p.gathers.iter().find(|g| g.input == i) {
                    Some(g) => {
                        if !(t.shape.len() == 2 && t.shape[1] == cols && t.strides == [cols, 1]) {
                            return Err(fail(format!(
                                "prologue input {i} is gathered from a table of shape {:?}, not a contiguous [rows, {cols}]",
                                t.shape
                            )));
                        }
                        let gather_st = match g.index {
                            DType::I64 => "long long",
                            DType::I32 => "int",
                            d => return Err(fail(format!("gather indices must be i64 or i32, got {d}"))),
                        };
                        ("gathered", String::new(), "", t.shape[0], gather_st)
                    }
                    None => {
                        let mode = row_operand(t, shape, axis).ok_or_else(|| {
                            fail(format!(
                                "prologue input {i} (shape {:?}, strides {:?}) does not read as rows, a row or a scalar",
                                t.shape, t.strides
                            ))
                        })?;
                        let (mode, row_start, idx_t) = match mode {
                            RowOperand::Rows => ("rows", String::new(), ""),
                            RowOperand::StridedRows => {
                                let start = row_start(t, shape, axis, &format!("rw{i}")).ok_or_else(|| {
                                    fail(format!(
                                        "prologue input {i} (shape {:?}) does not broadcast to {shape:?}",
                                        t.shape
                                    ))
                                })?;
                                ("strided", start, index_type(rows.max(t.max_offset())))
                            }
                            RowOperand::Cols => ("cols", String::new(), ""),
                            RowOperand::Scalar => ("scalar", String::new(), ""),
                        };
                        (mode, row_start, idx_t, 0, "")
                    }
                };
                let used = p.expr.reads(i);
                if used && mode != "scalar" {
                    pointers.push(format!("in{i}"));
                }
                let t = type_ctx(t.dtype);
                io.inputs.push(PrologueInputCtx { index: i, t, used, mode, row_start, idx_t, gather_rows, gather_st });
            }
            io.expr = expr;
            io.round = match x {
                DType::F16 => "rnd_f16",
                DType::BF16 => "rnd_bf16",
                _ => "",
            };
            io.sum = p.write_x;
            io.y_round = match p.y_rounded {
                None => "",
                Some(d) if d == y => "",
                Some(DType::F16) => "rnd_f16",
                Some(DType::BF16) => "rnd_bf16",
                // An f32 value stored as f32 or rounded by a 16-bit store anyway.
                Some(DType::F32) => "",
                Some(d) => return Err(fail(format!("a LayerNorm output of {d} is not a float type"))),
            };
            if p.write_x {
                pointers.push("xs".into());
            }
        }
    }
    pointers.push("y".into());
    pointers.extend(scale.map(|_| "scale".to_string()));
    pointers.extend(bias.map(|_| "bias".to_string()));
    io.aligned = aligned_test(walk.vec, &pointers);
    let early = walk.warp
        && walk.cached
        && walk.vec > 1
        && walk.chunks * walk.vec <= EARLY_AFFINE_VALUES
        && scale.into_iter().chain(bias).all(|d| d.size_bytes() == 2);
    let ctx = LayerNormCtx {
        kernel_name: name.to_string(),
        early,
        walk,
        io,
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
    #[serde(flatten)]
    io: RowInputs,
    /// Read by the shared row walk (Softmax has no affine parameters).
    scale: Option<TypeCtx>,
    bias: Option<TypeCtx>,
}

/// Softmax (LogSoftmax when `log`) over the last axis of a contiguous `rows × cols` tensor of
/// f32, f16 or bf16, the row maximum subtracted, f32 math. A row of only `-inf` gives NaN, as
/// in the reference. Parameters: `(x, y)`.
pub fn softmax(name: &str, rows: usize, cols: usize, dtype: DType, log: bool) -> Result<OpKernel, CodegenError> {
    check_rows("softmax", name, rows, cols, &[("the element type", dtype)])?;
    let walk = row_walk(rows, cols, 4);
    let io = RowInputs { aligned: aligned_test(walk.vec, &["x".into(), "y".into()]), ..RowInputs::default() };
    let grid = walk.grid();
    let threads = walk.threads as u32;
    let ctx = SoftmaxCtx {
        kernel_name: name.to_string(),
        walk,
        x: type_ctx(dtype),
        y: type_ctx(dtype),
        log,
        io,
        scale: None,
        bias: None,
    };
    let source = render("op_softmax.cu.tera", &ctx)?;
    Ok(OpKernel { name: name.to_string(), source, grid, block: (threads, 1, 1), smem_bytes: 0 })
}
