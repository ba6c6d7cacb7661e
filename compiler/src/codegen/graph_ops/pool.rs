//! MaxPool and AveragePool (`templates/op_pool.cu.tera`) over any window geometry: the host
//! lists, per output position of one plane, the flat input positions inside its window (the
//! CPU reference's own geometry: pads, auto_pad, strides, dilations, ceil mode, any number of
//! spatial axes), and the kernel reduces them, one output element per thread. Channels first a
//! plane is one `(n, c)` of one channel; channels last a plane is one `n`, its channels
//! interleaved (position `p`, channel `c` at `p · C + c`), so that neighbouring threads read
//! neighbouring channels.

use super::{check_name, spec_error, stride_grid, type_ctx, OpKernel, TypeCtx, THREADS};
use crate::codegen::render::render;
use crate::codegen::CodegenError;
use crate::ir::DType;
use serde::Serialize;

#[derive(Serialize)]
struct PoolCtx {
    kernel_name: String,
    t: TypeCtx,
    max: bool,
    planes: usize,
    channels: usize,
    in_px: usize,
    out_px: usize,
    n: usize,
    threads: usize,
}

/// A pooling kernel over `planes` planes of `in_px` input and `out_px` output positions, of
/// `dtype` (f32, f16 or bf16). Parameters: `(x, starts, taps, [divisors,] y)`: output position
/// `o` of a plane reduces `x[plane · in_px + taps[t]]` for `t` in `starts[o] .. starts[o + 1]`
/// (i32 tables); AveragePool divides the f32 sum by `divisors[o]` (f32), MaxPool keeps the
/// largest value that is not NaN (-inf for a window of padding or NaNs only, as the reference).
pub fn pool(
    name: &str,
    dtype: DType,
    planes: usize,
    channels: usize,
    in_px: usize,
    out_px: usize,
    max: bool,
) -> Result<OpKernel, CodegenError> {
    let fail = |m: String| spec_error("pool", name, m);
    check_name(name).map_err(fail)?;
    if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
        return Err(fail(format!("pools take f32, f16 or bf16, not {dtype}")));
    }
    if channels == 0 {
        return Err(fail("a pool needs at least one channel".to_string()));
    }
    let n = planes * out_px * channels;
    if in_px.max(out_px) * channels > i32::MAX as usize {
        return Err(fail(format!("planes of {in_px} positions × {channels} channels exceed 32-bit offsets")));
    }
    let ctx = PoolCtx {
        kernel_name: name.to_string(),
        t: type_ctx(dtype),
        max,
        planes,
        channels,
        in_px,
        out_px,
        n,
        threads: THREADS,
    };
    let source = render("op_pool.cu.tera", &ctx)?;
    Ok(OpKernel {
        name: name.to_string(),
        source,
        grid: (stride_grid(n, THREADS), 1, 1),
        block: (THREADS as u32, 1, 1),
        smem_bytes: 0,
    })
}
