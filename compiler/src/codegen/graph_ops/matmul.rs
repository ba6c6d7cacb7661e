//! Batched matmul of two activations (`templates/op_matmul.cu.tera`): attention's `Q·Kᵀ` and
//! `P·V`, and any MatMul whose operands are both computed. numpy broadcasting of the batch
//! dimensions, operands read through their strides (a folded transpose is just strides).
//!
//! Shared-memory tiled SIMT: a CTA of 256 threads computes a `BM × BN` tile of one batch
//! entry, each thread a 4 × 4 block of it, over `BK = 16` deep slices of K that are staged in
//! registers one slice ahead (double-buffered shared memory, one barrier per slice). The tile
//! is 64 × 64, or 128 × 32 / 32 × 128 when N / M is at most 32. Plain f32 FMAs (f64 for F64),
//! never TF32. Each operand's slice is read along whichever of its two inner dimensions has
//! stride 1, so transposed operands stay coalesced.

use super::{check_name, float_acc, offset_expr, shape_text, spec_error, type_ctx, OpKernel, TensorDesc, TypeCtx};
use crate::codegen::render::render;
use crate::codegen::CodegenError;
use serde::Serialize;

const BK: usize = 16;
const THREADS: usize = 256;
/// Register block of each thread (rows × columns of C).
const TM: usize = 4;
const TN: usize = 4;
/// Shared-memory row padding (elements): keeps rows 16-byte aligned, breaks bank conflicts.
const PAD: usize = 4;

#[derive(Serialize)]
struct MatmulCtx {
    kernel_name: String,
    a_shape: String,
    b_shape: String,
    c_shape: String,
    t: TypeCtx,
    acc: &'static str,
    fma: &'static str,
    m: usize,
    n: usize,
    k: usize,
    mn: usize,
    bm: usize,
    bn: usize,
    bk: usize,
    tm: usize,
    tn: usize,
    pad: usize,
    threads: usize,
    /// Threads across a tile's columns (BN / TN).
    tcols: usize,
    /// Elements of the A and B slices each thread stages.
    a_loads: usize,
    b_loads: usize,
    /// Row and column strides of A (`m`, `k`) and B (`k`, `n`).
    a_rs: usize,
    a_cs: usize,
    b_rs: usize,
    b_cs: usize,
    /// A slice is read down M (A is m-contiguous), B's down K (B is k-contiguous).
    a_m_fast: bool,
    b_k_fast: bool,
    /// Per staged element: tile-coordinate steps (one of each pair is 0) and the offset step in
    /// the operand; per slice: the operand offset step (BK along K).
    a_dm: usize,
    a_dk: usize,
    b_dk: usize,
    b_dn: usize,
    a_step: usize,
    b_step: usize,
    a_kstep: usize,
    b_kstep: usize,
    /// Offsets of batch entry `z` in A and B.
    a_batch: String,
    b_batch: String,
    k_tiles: usize,
    /// Tiles along N and M (and their product); `folded`: every tile of every batch entry on
    /// grid.x (more than 65535 batch entries or row tiles).
    tiles_n: usize,
    tiles_m: usize,
    tiles_mn: usize,
    folded: bool,
    /// 4-wide stores of C (N is a multiple of 4).
    vec_store: bool,
}

/// Batched matmul with numpy broadcasting of the batch dimensions: `a` is `[..., m, k]`, `b`
/// `[..., k, n]` (any strides: transposes are folded into them), `out` contiguous
/// `[batch..., m, n]`. One element type for all three, F32, F16, BF16 or F64; accumulation in f32
/// (f64) with plain FMAs. 1-D operands must be unsqueezed by the caller (rank ≥ 2).
/// Parameters: `(a, b, c)`.
pub fn matmul(name: &str, a: &TensorDesc, b: &TensorDesc, out: &TensorDesc) -> Result<OpKernel, CodegenError> {
    let fail = |m: String| spec_error("matmul", name, m);
    check_name(name).map_err(fail)?;
    a.check("a").map_err(fail)?;
    b.check("b").map_err(fail)?;
    out.check("the output").map_err(fail)?;
    if a.dtype != b.dtype || a.dtype != out.dtype {
        return Err(fail(format!("operand types differ: {} · {} -> {}", a.dtype, b.dtype, out.dtype)));
    }
    let Some(acc) = float_acc(a.dtype) else {
        return Err(fail(format!("matmul takes float operands, got {}", a.dtype)));
    };
    let (ra, rb, rc) = (a.shape.len(), b.shape.len(), out.shape.len());
    if ra < 2 || rb < 2 {
        return Err(fail(format!("operands need rank 2 or more, got {:?} and {:?}", a.shape, b.shape)));
    }
    let (m, k, n) = (a.shape[ra - 2], a.shape[ra - 1], b.shape[rb - 1]);
    if b.shape[rb - 2] != k {
        return Err(fail(format!("inner dimensions differ: {:?} · {:?}", a.shape, b.shape)));
    }
    if !out.is_contiguous() {
        return Err(fail(format!("the output must be contiguous, got strides {:?}", out.strides)));
    }
    let batch_rank = (ra - 2).max(rb - 2);
    let batch_dim = |t: &TensorDesc, i: usize| {
        let r = t.shape.len() - 2;
        if i + r >= batch_rank {
            t.shape[i + r - batch_rank]
        } else {
            1
        }
    };
    let batch: Option<Vec<usize>> = (0..batch_rank)
        .map(|i| match (batch_dim(a, i), batch_dim(b, i)) {
            (x, y) if x == y || y == 1 => Some(x),
            (1, y) => Some(y),
            _ => None,
        })
        .collect();
    let expected = batch.map(|mut s| {
        s.extend([m, n]);
        s
    });
    if rc != batch_rank + 2 || expected.as_deref() != Some(&out.shape[..]) {
        return Err(fail(format!("{:?} · {:?} does not give the output shape {:?}", a.shape, b.shape, out.shape)));
    }
    let batch_shape = &out.shape[..batch_rank];
    let batch_strides = |t: &TensorDesc| -> Vec<usize> {
        let r = t.shape.len() - 2;
        let view = TensorDesc { dtype: t.dtype, shape: t.shape[..r].to_vec(), strides: t.strides[..r].to_vec() };
        view.broadcast_strides(batch_shape).expect("checked against the broadcast shape")
    };
    let n_batch: usize = batch_shape.iter().product();
    let (bm, bn) = match (m, n) {
        (m, n) if n <= 32 && m > 32 => (128, 32),
        (m, n) if m <= 32 && n > 32 => (32, 128),
        _ => (64, 64),
    };
    let (tiles_m, tiles_n) = (m.div_ceil(bm), n.div_ceil(bn));
    let folded = n_batch > 65535 || tiles_m > 65535;
    let grid = if folded {
        let tiles = tiles_m * tiles_n * n_batch;
        if tiles > i32::MAX as usize {
            return Err(fail(format!("{tiles} tiles do not fit one grid")));
        }
        (tiles.max(1) as u32, 1, 1)
    } else {
        (tiles_n.max(1) as u32, tiles_m.max(1) as u32, n_batch.max(1) as u32)
    };
    let (a_rs, a_cs) = (a.strides[ra - 2], a.strides[ra - 1]);
    let (b_rs, b_cs) = (b.strides[rb - 2], b.strides[rb - 1]);
    let a_m_fast = a_rs == 1 && a_cs != 1 && m > 1;
    let b_k_fast = b_rs == 1 && b_cs != 1 && n > 1;
    // THREADS is a multiple of BM, BN and BK: a thread's fast coordinate is fixed, the slow one
    // steps by THREADS / (fast extent) per staged element.
    let (a_dm, a_dk) = if a_m_fast { (0, THREADS / bm) } else { (THREADS / BK, 0) };
    let (b_dk, b_dn) = if b_k_fast { (0, THREADS / BK) } else { (THREADS / bn, 0) };
    let ctx = MatmulCtx {
        kernel_name: name.to_string(),
        a_shape: shape_text(&a.shape),
        b_shape: shape_text(&b.shape),
        c_shape: shape_text(&out.shape),
        t: type_ctx(a.dtype),
        acc,
        fma: if acc == "double" { "fma" } else { "fmaf" },
        m,
        n,
        k,
        mn: m * n,
        bm,
        bn,
        bk: BK,
        tm: TM,
        tn: TN,
        pad: PAD,
        threads: THREADS,
        tcols: bn / TN,
        a_loads: bm * BK / THREADS,
        b_loads: bn * BK / THREADS,
        a_rs,
        a_cs,
        b_rs,
        b_cs,
        a_m_fast,
        b_k_fast,
        a_dm,
        a_dk,
        b_dk,
        b_dn,
        a_step: a_dm * a_rs + a_dk * a_cs,
        b_step: b_dk * b_rs + b_dn * b_cs,
        a_kstep: BK * a_cs,
        b_kstep: BK * b_rs,
        a_batch: offset_expr("z", batch_shape, &batch_strides(a)),
        b_batch: offset_expr("z", batch_shape, &batch_strides(b)),
        k_tiles: k.div_ceil(BK),
        tiles_n,
        tiles_m,
        tiles_mn: tiles_m * tiles_n,
        folded,
        vec_store: n.is_multiple_of(4),
    };
    let source = render("op_matmul.cu.tera", &ctx)?;
    Ok(OpKernel { name: name.to_string(), source, grid, block: (THREADS as u32, 1, 1), smem_bytes: 0 })
}
