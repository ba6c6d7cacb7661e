//! Fused elementwise kernels (`templates/op_elementwise.cu.tera`): one [`Expr`] over inputs
//! broadcast to the output by numpy rules and read through their strides.
//!
//! The output and every input's broadcast strides are collapsed together (size-1 dimensions
//! dropped, neighbours every operand walks as one merged), then each input's offset is a C
//! expression of the flat output position `e`: `e` for an input laid out like the output,
//! `e % inner` for one repeated along leading dimensions (a bias row), `0` for a scalar, a sum
//! of `(e / div % size) * stride` terms otherwise. When the last collapsed dimension is a
//! multiple of 4, each thread handles four consecutive elements per step: inputs that run
//! along it with stride 1 are loaded four at a time, inputs constant along it once, others
//! element by element.

use super::expr::{render, Expr};
use super::{check_name, collapse, index_type, offset_expr, shape_text, spec_error, stride_grid, type_ctx};
use super::{OpKernel, TensorDesc, TypeCtx, THREADS};
use crate::codegen::render::render as render_template;
use crate::codegen::CodegenError;
use serde::Serialize;

#[derive(Serialize)]
struct InputCtx {
    index: usize,
    t: TypeCtx,
    /// The expression reads it (unread inputs stay parameters but are never loaded).
    used: bool,
    /// Offset of its element for output position `e` (the first of four in the vector path).
    offset: String,
    /// `scalar`: one element, loaded once. Vector path only: `vec` (four consecutive, one
    /// access), `bcast` (one element for all four), `each` (four loads `vstride` apart).
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
    /// Four elements per thread per step; `groups` = n / 4.
    vec: bool,
    groups: usize,
    inputs: Vec<InputCtx>,
    out: TypeCtx,
}

/// `out = expr` over the inputs, each broadcast to `out`'s shape by numpy rules (aligned right;
/// a size-1 or missing dimension repeats) and read through its strides. `out` must be
/// contiguous and of the expression's type. Parameters: `(const T0* in0, ..., TOut* out)`, one
/// per input whether the expression reads it or not.
pub fn elementwise(name: &str, inputs: &[TensorDesc], out: &TensorDesc, expr: &Expr) -> Result<OpKernel, CodegenError> {
    let fail = |m: String| spec_error("elementwise", name, m);
    check_name(name).map_err(fail)?;
    out.check("the output").map_err(fail)?;
    if !out.is_contiguous() {
        return Err(fail(format!("the output must be contiguous, got strides {:?}", out.strides)));
    }
    let dtypes: Vec<_> = inputs.iter().map(|t| t.dtype).collect();
    let (expr_c, dtype) = render(expr, &dtypes).map_err(fail)?;
    if dtype != out.dtype {
        return Err(fail(format!("the expression is {dtype} but the output is {}", out.dtype)));
    }
    let mut strides = vec![];
    for (i, t) in inputs.iter().enumerate() {
        t.check(&format!("input {i}")).map_err(fail)?;
        let s = t.broadcast_strides(&out.shape).ok_or_else(|| {
            fail(format!("input {i} of shape {:?} does not broadcast to the output shape {:?}", t.shape, out.shape))
        })?;
        strides.push(s);
    }
    let n = out.len();
    let (sizes, collapsed) = collapse(&out.shape, &strides);
    // Four consecutive positions (from a multiple of 4) differ only in the last collapsed
    // coordinate when that dimension's size is a multiple of 4.
    let vec = n >= 4 && sizes.last().is_some_and(|s| s % 4 == 0);
    let max_offset = inputs.iter().map(|t| t.max_offset()).max().unwrap_or(0);
    let mut ctx_inputs = vec![];
    for (i, t) in inputs.iter().enumerate() {
        let s = &collapsed[i];
        let offset = offset_expr("e", &sizes, s);
        let (mode, vstride) = if s.iter().all(|&x| x == 0) {
            ("scalar", 0)
        } else if !vec {
            ("load", 0)
        } else {
            let last = *s.last().expect("vector path has a dimension");
            let others_aligned = s[..s.len() - 1].iter().all(|x| x % 4 == 0);
            match last {
                0 => ("bcast", 0),
                1 if others_aligned => ("vec", 0),
                l => ("each", l),
            }
        };
        ctx_inputs.push(InputCtx { index: i, t: type_ctx(t.dtype), used: expr.reads(i), offset, mode, vstride });
    }
    let groups = if vec { n / 4 } else { n };
    let ctx = ElementwiseCtx {
        kernel_name: name.to_string(),
        shape: shape_text(&out.shape),
        expr: expr_c,
        n,
        idx_t: index_type(n.max(max_offset) + THREADS * super::MAX_STRIDE_CTAS),
        threads: THREADS,
        vec,
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
