//! Data movement: ONNX Gather (`templates/op_gather.cu.tera`) and Concat
//! (`templates/op_concat.cu.tera`). Elements are copied in their storage type, never converted.

use super::{check_name, index_type, offset_expr, shape_text, spec_error, stride_grid, type_ctx};
use super::{OpKernel, TensorDesc, TypeCtx, MAX_STRIDE_CTAS, THREADS};
use crate::codegen::render::render;
use crate::codegen::CodegenError;
use crate::ir::DType;
use serde::Serialize;

#[derive(Serialize)]
struct GatherCtx {
    kernel_name: String,
    data_shape: String,
    idx_shape: String,
    axis: usize,
    t: TypeCtx,
    idx_st: &'static str,
    /// data = [outer, dim, inner], out = [outer, nidx, inner].
    dim: usize,
    inner: usize,
    nidx: usize,
    n: usize,
    idx_t: &'static str,
    threads: usize,
    /// C expressions of the out position `e`: the outer coordinate, the index position (as
    /// the offset into the indices through their strides) and the inner coordinate.
    outer_expr: String,
    index_offset: String,
    inner_expr: String,
    /// Four consecutive elements of one row per thread (inner is a multiple of 4).
    vec: bool,
    groups: usize,
}

/// ONNX Gather: `out = data.take(indices, axis)`, out of shape
/// `data[..axis] ++ indices ++ data[axis + 1..]`, contiguous, of data's type. Indices are I64 or
/// I32 (any strides); a negative index counts from the end; an index outside `[-d, d)` writes
/// zeros (the reference refuses it). `data` must be contiguous. Parameters: `(data, indices, out)`.
pub fn gather(name: &str, data: &TensorDesc, indices: &TensorDesc, axis: usize) -> Result<OpKernel, CodegenError> {
    let fail = |m: String| spec_error("gather", name, m);
    check_name(name).map_err(fail)?;
    data.check("data").map_err(fail)?;
    indices.check("indices").map_err(fail)?;
    if !data.is_contiguous() {
        return Err(fail(format!("data must be contiguous, got strides {:?}", data.strides)));
    }
    if axis >= data.shape.len() {
        return Err(fail(format!("axis {axis} is out of range for data of rank {}", data.shape.len())));
    }
    let idx_st = match indices.dtype {
        DType::I64 => "long long",
        DType::I32 => "int",
        d => return Err(fail(format!("indices must be i64 or i32, got {d}"))),
    };
    let dim = data.shape[axis];
    let inner: usize = data.shape[axis + 1..].iter().product();
    let nidx = indices.len();
    let n = data.shape[..axis].iter().product::<usize>() * nidx * inner;
    let vec = inner.is_multiple_of(4) && n > 0;
    let row = nidx * inner;
    let coord = |div: usize, size: Option<usize>| -> String {
        if n == 0 {
            return "0".into();
        }
        let mut c = if div == 1 { "e".to_string() } else { format!("e / {div}") };
        if let Some(s) = size {
            c = format!("{c} % {s}");
        }
        c
    };
    let outer_expr = if row == n { "0".into() } else { coord(row, None) };
    let position = coord(inner, (row != n).then_some(nidx));
    let index_offset =
        if n == 0 { "0".into() } else { offset_expr(&format!("({position})"), &indices.shape, &indices.strides) };
    let inner_expr = if inner == 1 { "0".into() } else { coord(1, Some(inner)) };
    let groups = if vec { n / 4 } else { n };
    let ctx = GatherCtx {
        kernel_name: name.to_string(),
        data_shape: shape_text(&data.shape),
        idx_shape: shape_text(&indices.shape),
        axis,
        t: type_ctx(data.dtype),
        idx_st,
        dim,
        inner,
        nidx,
        n,
        idx_t: index_type(n.max(data.len()).max(indices.max_offset()) + THREADS * MAX_STRIDE_CTAS),
        threads: THREADS,
        outer_expr,
        index_offset,
        inner_expr,
        vec,
        groups,
    };
    let source = render("op_gather.cu.tera", &ctx)?;
    Ok(OpKernel {
        name: name.to_string(),
        source,
        grid: (stride_grid(groups, THREADS), 1, 1),
        block: (THREADS as u32, 1, 1),
        smem_bytes: 0,
    })
}

#[derive(Serialize)]
struct ConcatInputCtx {
    index: usize,
    /// Its elements are out positions `start .. start + n` of the flat walk over all inputs.
    start: usize,
    end: usize,
    /// Offset of its element `l` (row-major over its shape) through its strides.
    offset: String,
    /// Out offset of its element `l`: rows of `row` elements land `out_row` apart, from `base`.
    out_offset: String,
}

#[derive(Serialize)]
struct ConcatCtx {
    kernel_name: String,
    shape: String,
    axis: usize,
    st: &'static str,
    n: usize,
    idx_t: &'static str,
    threads: usize,
    /// Every input's parameter index (empty inputs too).
    params: Vec<usize>,
    /// The nonempty inputs.
    inputs: Vec<ConcatInputCtx>,
}

/// ONNX Concat along `axis`: the inputs (any strides, all of out's type and of out's shape but
/// along `axis`) one after the other into `out` (contiguous). Each thread copies one element per
/// step, walking the inputs in order so that reads and writes both run along rows.
/// Parameters: `(in0, ..., out)`.
pub fn concat(name: &str, inputs: &[TensorDesc], axis: usize, out: &TensorDesc) -> Result<OpKernel, CodegenError> {
    let fail = |m: String| spec_error("concat", name, m);
    check_name(name).map_err(fail)?;
    out.check("the output").map_err(fail)?;
    if !out.is_contiguous() {
        return Err(fail(format!("the output must be contiguous, got strides {:?}", out.strides)));
    }
    let rank = out.shape.len();
    if axis >= rank {
        return Err(fail(format!("axis {axis} is out of range for rank {rank}")));
    }
    if inputs.is_empty() {
        return Err(fail("no inputs".into()));
    }
    let inner: usize = out.shape[axis + 1..].iter().product();
    let out_row = out.shape[axis] * inner;
    let mut total_axis = 0;
    let mut start = 0;
    let mut ctx_inputs = vec![];
    for (i, t) in inputs.iter().enumerate() {
        t.check(&format!("input {i}")).map_err(fail)?;
        if t.dtype != out.dtype {
            return Err(fail(format!("input {i} is {} but the output is {}", t.dtype, out.dtype)));
        }
        let fits = t.shape.len() == rank && (0..rank).all(|d| d == axis || t.shape[d] == out.shape[d]);
        if !fits {
            return Err(fail(format!(
                "input {i} of shape {:?} does not fit output {:?} along axis {axis}",
                t.shape, out.shape
            )));
        }
        let row = t.shape[axis] * inner;
        let n = t.len();
        if n > 0 {
            let local = if start == 0 { "e".to_string() } else { format!("(e - {start})") };
            let base = total_axis * inner;
            let rows = match (row == n, row) {
                (true, _) => local.clone(),
                (false, 1) => format!("{local} * {out_row}"),
                (false, _) => format!("({local} / {row}) * {out_row} + {local} % {row}"),
            };
            let out_offset = if base == 0 { rows } else { format!("{rows} + {base}") };
            let offset = offset_expr(&local, &t.shape, &t.strides);
            ctx_inputs.push(ConcatInputCtx { index: i, start, end: start + n, offset, out_offset });
        }
        total_axis += t.shape[axis];
        start += n;
    }
    if total_axis != out.shape[axis] {
        return Err(fail(format!(
            "the inputs add up to {total_axis} along axis {axis} but the output has {}",
            out.shape[axis]
        )));
    }
    let max = inputs.iter().map(|t| t.max_offset()).max().unwrap_or(0).max(start);
    let ctx = ConcatCtx {
        kernel_name: name.to_string(),
        shape: shape_text(&out.shape),
        axis,
        st: super::storage_type(out.dtype),
        n: start,
        idx_t: index_type(max + THREADS * MAX_STRIDE_CTAS),
        threads: THREADS,
        params: (0..inputs.len()).collect(),
        inputs: ctx_inputs,
    };
    let source = render("op_concat.cu.tera", &ctx)?;
    Ok(OpKernel {
        name: name.to_string(),
        source,
        grid: (stride_grid(start, THREADS), 1, 1),
        block: (THREADS as u32, 1, 1),
        smem_bytes: 0,
    })
}
