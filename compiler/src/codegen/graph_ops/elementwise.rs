//! Fused elementwise kernels (`templates/op_elementwise.cu.tera`): one [`Expr`] over inputs
//! broadcast to the output by numpy rules and read through their strides.
//!
//! The output and every input's broadcast strides are collapsed together (size-1 dimensions
//! dropped, neighbours every operand walks as one merged), then each input's offset is a C
//! expression of the flat output position `e`: `e` for an input laid out like the output,
//! `e % inner` for one repeated along leading dimensions (a bias row), `0` for a scalar, a sum
//! of `(e / div % size) * stride` terms otherwise. When the last collapsed dimension is a
//! multiple of 8 (else 4), each thread handles that many consecutive elements per step
//! ([`width`]): inputs that run along it with stride 1 are loaded in one access (16 bytes of a
//! 16-bit type: twice the bytes in flight of four, which a full GPU needs to reach the memory
//! rate), inputs constant along it once, others element by element.
//!
//! An input may be a Concat that is never formed ([`ConcatRead`], DenseNet's concatenated
//! features read by the BatchNorm and ReLU after them): element `e`'s coordinate along the
//! concat axis picks the part, read at its own offset. A vector's elements come from one part,
//! in one access, when the dimensions after the axis are a multiple of the width or every
//! part's extent along a last axis is.

use super::expr::{render, Expr};
use super::{check_name, collapse, index_type, offset_expr, shape_text, spec_error, stride_grid, type_ctx};
use super::{OpKernel, TensorDesc, TypeCtx, THREADS};
use crate::codegen::render::render as render_template;
use crate::codegen::CodegenError;
use serde::Serialize;

/// An elementwise input read from the parts of a Concat along `axis` that is never formed:
/// the parts are contiguous, of one type, and together of the output's shape.
#[derive(Clone, Debug, PartialEq)]
pub struct ConcatRead {
    pub axis: usize,
    pub parts: Vec<TensorDesc>,
}

/// An elementwise kernel input: a tensor read through its (broadcast) strides, or a Concat's
/// parts.
#[derive(Clone, Debug, PartialEq)]
pub enum EwInput {
    Tensor(TensorDesc),
    Concat(ConcatRead),
}

#[derive(Serialize)]
struct PartCtx {
    index: usize,
    /// Its coordinates along the axis: `start..end` of the output's, `size` of its own.
    start: usize,
    end: usize,
    size: usize,
}

/// How a Concat input picks its part: `o` the position before the axis (`e / outer_div`), `c`
/// the coordinate along it (`e / inner % ax`), `r` the one after it (`e % inner`).
#[derive(Serialize)]
struct ConcatCtx {
    outer_div: usize,
    inner: usize,
    ax: usize,
    parts: Vec<PartCtx>,
}

#[derive(Serialize)]
struct InputCtx {
    index: usize,
    concat: Option<ConcatCtx>,
    t: TypeCtx,
    /// The expression reads it (unread inputs stay parameters but are never loaded).
    used: bool,
    /// Offset of its element for output position `e` (the first of a vector in the vector path).
    offset: String,
    /// `scalar`: one element, loaded once. Vector path only: `vec` (`width` consecutive, one
    /// access), `bcast` (one element for all), `each` (`width` loads `vstride` apart). A
    /// Concat input is `load` (scalar path), `vec` or `each` (`vstride` 1).
    mode: &'static str,
    vstride: usize,
}

#[derive(Serialize)]
struct ElementwiseCtx {
    kernel_name: String,
    shape: String,
    expr: String,
    n: usize,
    idx_t: &'static str,
    threads: usize,
    /// `width` elements per thread per step; `groups` = n / width.
    vec: bool,
    width: usize,
    groups: usize,
    inputs: Vec<InputCtx>,
    out: TypeCtx,
}

/// `out = expr` over the inputs, each broadcast to `out`'s shape by numpy rules (aligned right;
/// a size-1 or missing dimension repeats) and read through its strides. `out` must be
/// contiguous and of the expression's type. Parameters: `(const T0* in0, ..., TOut* out)`, one
/// per input whether the expression reads it or not.
pub fn elementwise(name: &str, inputs: &[TensorDesc], out: &TensorDesc, expr: &Expr) -> Result<OpKernel, CodegenError> {
    let inputs: Vec<EwInput> = inputs.iter().cloned().map(EwInput::Tensor).collect();
    elementwise_inputs(name, &inputs, out, expr)
}

/// Elements per thread per step for a last collapsed dimension of `last`: 8 when it allows and
/// no operand is wider than 4 bytes (`wide`), else 4 when it allows, else 1 (the scalar path).
fn width(last: usize, wide: bool) -> usize {
    match last {
        l if wide && l >= 8 && l.is_multiple_of(8) => 8,
        l if l >= 4 && l.is_multiple_of(4) => 4,
        _ => 1,
    }
}

/// Checks a Concat input against the output and returns its pick (see [`ConcatCtx`]).
fn concat_ctx(c: &ConcatRead, out: &TensorDesc) -> Result<ConcatCtx, String> {
    let rank = out.shape.len();
    if c.axis >= rank || c.parts.is_empty() {
        return Err(format!("a concat of {} parts along axis {} does not fit rank {rank}", c.parts.len(), c.axis));
    }
    let mut parts = vec![];
    let mut start = 0;
    for (j, p) in c.parts.iter().enumerate() {
        p.check(&format!("part {j}"))?;
        let fits = p.shape.len() == rank && (0..rank).all(|d| d == c.axis || p.shape[d] == out.shape[d]);
        if !fits || !p.is_contiguous() || p.dtype != c.parts[0].dtype {
            return Err(format!(
                "concat part {j} ({} {:?}) does not fit the output {:?} along axis {}",
                p.dtype, p.shape, out.shape, c.axis
            ));
        }
        parts.push(PartCtx { index: j, start, end: start + p.shape[c.axis], size: p.shape[c.axis] });
        start += p.shape[c.axis];
    }
    if start != out.shape[c.axis] {
        return Err(format!(
            "the concat's parts cover {start} of the output's {} along axis {}",
            out.shape[c.axis], c.axis
        ));
    }
    let inner: usize = out.shape[c.axis + 1..].iter().product();
    Ok(ConcatCtx { outer_div: inner * out.shape[c.axis], inner, ax: out.shape[c.axis], parts })
}

/// [`elementwise`] over inputs that may be Concats never formed: parameters
/// `(const T0* in0, ..., TOut* out)` where a Concat input `i` of `p` parts takes `p` of them,
/// `in{i}_0 .. in{i}_{p-1}`, in order.
pub fn elementwise_inputs(
    name: &str,
    inputs: &[EwInput],
    out: &TensorDesc,
    expr: &Expr,
) -> Result<OpKernel, CodegenError> {
    let fail = |m: String| spec_error("elementwise", name, m);
    check_name(name).map_err(fail)?;
    out.check("the output").map_err(fail)?;
    if !out.is_contiguous() {
        return Err(fail(format!("the output must be contiguous, got strides {:?}", out.strides)));
    }
    let dtypes: Vec<_> = inputs
        .iter()
        .map(|t| match t {
            EwInput::Tensor(t) => t.dtype,
            EwInput::Concat(c) => c.parts.first().map_or(out.dtype, |p| p.dtype),
        })
        .collect();
    let (expr_c, dtype) = render(expr, &dtypes).map_err(fail)?;
    if dtype != out.dtype {
        return Err(fail(format!("the expression is {dtype} but the output is {}", out.dtype)));
    }
    // A Concat input walks like the output as far as collapsing goes; its pick is separate.
    let mut strides = vec![];
    let mut concats = vec![];
    for (i, t) in inputs.iter().enumerate() {
        match t {
            EwInput::Tensor(t) => {
                t.check(&format!("input {i}")).map_err(fail)?;
                let s = t.broadcast_strides(&out.shape).ok_or_else(|| {
                    fail(format!(
                        "input {i} of shape {:?} does not broadcast to the output shape {:?}",
                        t.shape, out.shape
                    ))
                })?;
                strides.push(s);
                concats.push(None);
            }
            EwInput::Concat(c) => {
                strides.push(out.strides.clone());
                concats.push(Some(concat_ctx(c, out).map_err(|m| fail(format!("input {i}: {m}")))?));
            }
        }
    }
    let n = out.len();
    let (sizes, collapsed) = collapse(&out.shape, &strides);
    // `width` consecutive positions (from a multiple of it) differ only in the last collapsed
    // coordinate when that dimension's size is a multiple of 4.
    let wide = dtypes.iter().chain([&out.dtype]).all(|d| d.size_bytes() <= 4);
    let width = width(sizes.last().copied().unwrap_or(0), wide);
    let vec = n >= 4 && width > 1;
    let max_offset = inputs
        .iter()
        .map(|t| match t {
            EwInput::Tensor(t) => t.max_offset(),
            EwInput::Concat(_) => n,
        })
        .max()
        .unwrap_or(0);
    let mut ctx_inputs = vec![];
    for (i, concat) in concats.into_iter().enumerate() {
        let s = &collapsed[i];
        let offset = offset_expr("e", &sizes, s);
        let t_type = type_ctx(dtypes[i]);
        if let Some(concat) = concat {
            // A vector's positions share the part when they share the axis coordinate (`inner`
            // a multiple of the width) or no part boundary falls among them.
            let whole = concat.inner.is_multiple_of(width)
                || (concat.inner == 1 && concat.parts.iter().all(|p| p.size.is_multiple_of(width)));
            let mode = match (vec, whole) {
                (false, _) => "load",
                (true, true) => "vec",
                (true, false) => "each",
            };
            let used = expr.reads(i);
            ctx_inputs.push(InputCtx { index: i, concat: Some(concat), t: t_type, used, offset, mode, vstride: 1 });
            continue;
        }
        let (mode, vstride) = if s.iter().all(|&x| x == 0) {
            ("scalar", 0)
        } else if !vec {
            ("load", 0)
        } else {
            let last = *s.last().expect("vector path has a dimension");
            let others_aligned = s[..s.len() - 1].iter().all(|x| x.is_multiple_of(width));
            match last {
                0 => ("bcast", 0),
                1 if others_aligned => ("vec", 0),
                l => ("each", l),
            }
        };
        ctx_inputs.push(InputCtx { index: i, concat: None, t: t_type, used: expr.reads(i), offset, mode, vstride });
    }
    let groups = if vec { n / width } else { n };
    let ctx = ElementwiseCtx {
        kernel_name: name.to_string(),
        shape: shape_text(&out.shape),
        expr: expr_c,
        n,
        idx_t: index_type(n.max(max_offset) + THREADS * super::MAX_STRIDE_CTAS),
        threads: THREADS,
        vec,
        width,
        groups,
        inputs: ctx_inputs,
        out: type_ctx(out.dtype),
    };
    let source = render_template("op_elementwise.cu.tera", &ctx)?;
    Ok(OpKernel {
        name: name.to_string(),
        source,
        grid: (stride_grid(groups, THREADS), 1, 1),
        block: (THREADS as u32, 1, 1),
        smem_bytes: 0,
    })
}
