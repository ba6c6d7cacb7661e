//! Fused attention (`templates/op_attention.cu.tera`): `out = softmax(f(q·k, extra...))·v` in
//! one kernel, the scores never leaving the SM.
//!
//! Unfused, attention is a batched matmul writing the `[batch..., Sq, Sk]` scores, an
//! elementwise kernel (scale, mask), a softmax and a second batched matmul, each pass reading
//! and writing the scores through DRAM: for MiniLM (32 × 12 heads × 128 × 128 fp32 scores,
//! 25 MB a layer) that traffic is most of the attention's time. Here a CTA of 256 threads takes
//! one batch entry and 64 query rows: it stages the entry's Q rows (transposed), all of K
//! (transposed) and all of V in shared memory as f32; a warp owns 8 rows. Scores: a lane holds
//! every 32nd column of its warp's rows in registers (a step over `d` reads two broadcast Q
//! vectors and one K element per column: fewer shared-memory wavefronts than FMAs); the score
//! expression `f` (the elementwise group between the matmul and the softmax, an [`Expr`] whose
//! input 0 is the raw score and inputs 1.. the extra operands broadcast to the scores' shape);
//! the row softmax with warp shuffles; the probabilities to shared memory (rows padded against
//! bank conflicts). Then ·V: four lanes share a row, each owning a run of output columns read
//! from V four at a time, the row's probabilities read four at a time. Sums are in f32 whatever
//! the element types; the scores are not rounded to the storage type between the steps (the
//! unfused ops round them, so a 16-bit model is slightly more exact fused).
//!
//! 16-bit models take the tensor-core path instead (`templates/op_attention_mma.cu.tera`,
//! when every operand is f16, or every one bf16, with at most 128 keys): a warp owns 16 query
//! rows; Q, K and Vᵀ are staged as 16-bit with rows padded by 8 elements, so each lane's
//! 32-bit fragment loads fall in distinct banks; `mma.sync m16n8k16` computes the scores into
//! accumulator fragments, the score expression and the row softmax run on those fragments
//! (a row's 4 lanes reduce with shuffles), and the probabilities, rounded to the 16-bit type,
//! are the A fragments of the ·V products without passing through memory. About 16× fewer
//! instructions than the FFMA path for MiniLM's shapes.
//!
//! Every operand is read through its strides, so the transposes around attention (the heads
//! split out of the projections, `Kᵀ`, the heads merged back) fold into the kernel. The whole
//! of K and V for one batch entry must fit in shared memory with the query tile's scores:
//! [`attention`] refuses shapes that do not (the caller then lowers the ops one by one).

use super::expr::{render, Expr};
use super::{check_name, float_acc, offset_expr, shape_text, spec_error, type_ctx, OpKernel, TensorDesc, TypeCtx};
use crate::codegen::render::render as render_template;
use crate::codegen::CodegenError;
use serde::Serialize;

const THREADS: usize = 256;
const WARPS: usize = THREADS / 32;
/// Query rows of a CTA; each warp owns `BQ / WARPS` of them.
const BQ: usize = 64;
/// Lanes sharing one row in the ·V step (32 / rows per warp).
const LANES_PER_ROW: usize = 32 / (BQ / WARPS);

/// The padded extents the kernel stages: `(cpt, kp, ps, sk4, epl, vp)`: score columns per lane,
/// the row length of Kᵀ (columns padded to `32 · cpt`, plus one against bank conflicts), of the
/// probabilities (plus four), the rows of V (a multiple of 4), output columns per lane (a
/// multiple of 4) and the row length of V (`LANES_PER_ROW · epl`).
fn extents(sk: usize, dv: usize) -> (usize, usize, usize, usize, usize, usize) {
    let cpt = sk.div_ceil(32);
    let epl = dv.div_ceil(LANES_PER_ROW).div_ceil(4) * 4;
    (cpt, 32 * cpt + 1, 32 * cpt + 4, sk.div_ceil(4) * 4, epl, LANES_PER_ROW * epl)
}
/// Most dynamic shared memory a CTA may take (an H100 allows 227 KB).
pub const MAX_SMEM: usize = 200 * 1024;

/// Threads of the tensor-core path: a warp per 16 of the `BQ` query rows.
const MMA_THREADS: usize = 32 * BQ / 16;

/// The tensor-core path's element type when it applies: every operand and the raw scores
/// 16-bit of one type (the probabilities are rounded to it for ·V, as the unfused ops do), at
/// most 128 keys (the scores of a warp's 16 rows live in 4 · ceil(Sk / 8) registers a lane),
/// q/k at most 128 wide and v at most 64.
fn mma_type(types: [crate::ir::DType; 5], sk: usize, d: usize, dv: usize) -> Option<&'static str> {
    use crate::ir::DType;
    let t = match types[0] {
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        _ => return None,
    };
    (types.iter().all(|&x| x == types[0]) && sk <= 128 && d <= 128 && dv <= 64).then_some(t)
}

/// Shared memory of the tensor-core path: Q tile, K and Vᵀ as 16-bit, rows padded by 8.
fn mma_smem(sk: usize, d: usize, dv: usize) -> usize {
    let (skp, dp, dvp) = (sk.div_ceil(16) * 16, d.div_ceil(16) * 16, dv.div_ceil(8) * 8);
    2 * ((BQ + skp) * (dp + 8) + dvp * (skp + 8))
}

/// Shared memory of the kernel for keys of length `sk`, `d`-wide queries and keys and
/// `dv`-wide values: the query tile, Kᵀ (padded), V and the tile's probabilities, all f32.
pub fn attention_smem(sk: usize, d: usize, dv: usize) -> usize {
    let (_, kp, ps, sk4, _, vp) = extents(sk, dv);
    4 * ((BQ + 4) * d + (d * kp).div_ceil(4) * 4 + sk4 * vp + BQ * ps)
}

#[derive(Serialize)]
struct ExtraCtx {
    index: usize,
    t: TypeCtx,
    used: bool,
    /// Offset of its element for the flat score position `e`.
    offset: String,
}

#[derive(Serialize)]
struct AttentionCtx {
    kernel_name: String,
    q_shape: String,
    k_shape: String,
    v_shape: String,
    out_shape: String,
    expr: String,
    q: TypeCtx,
    k: TypeCtx,
    v: TypeCtx,
    out: TypeCtx,
    score: TypeCtx,
    extras: Vec<ExtraCtx>,
    sq: usize,
    sk: usize,
    d: usize,
    dv: usize,
    bq: usize,
    rows_per_warp: usize,
    /// See [`extents`]; `qp` is the row length of the staged Qᵀ.
    cpt: usize,
    kp: usize,
    ps: usize,
    sk4: usize,
    epl: usize,
    vp: usize,
    qp: usize,
    /// Floats of the staged Kᵀ, rounded up to keep V 16-byte aligned.
    ks_len: usize,
    lanes_per_row: usize,
    threads: usize,
    /// Strides: q (row, column), k (d, j), v (j, e), out (row, column).
    q_rs: usize,
    q_cs: usize,
    k_rs: usize,
    k_cs: usize,
    v_rs: usize,
    v_cs: usize,
    o_rs: usize,
    o_cs: usize,
    /// The staging loops walk K along d (k is d-contiguous) and V along e.
    k_d_fast: bool,
    v_e_fast: bool,
    q_batch: String,
    k_batch: String,
    v_batch: String,
    o_batch: String,
    /// Tensor-core path (`op_attention_mma.cu.tera`): the element type of the mma (`f16` or
    /// `bf16`, empty for the FFMA path), the padded extents (keys and d to 16, v columns to 8)
    /// and the padded row lengths of Q/K and Vᵀ in shared memory.
    mma_t: &'static str,
    skp: usize,
    dp: usize,
    dvp: usize,
    qs: usize,
    vs: usize,
    /// `use_index`: the score expression reads an extra operand (the flat score index is formed,
    /// of type `idx_t`: 32-bit when it fits, which makes the constant divisions cheap).
    use_index: bool,
    idx_t: &'static str,
}

/// `out = softmax(expr(q·k, extra...), last axis)·v`. `q` is `[batch..., Sq, D]`, `k`
/// `[batch..., D, Sk]`, `v` `[batch..., Sk, Dv]`, `out` `[batch..., Sq, Dv]`, each with any strides
/// (batch dimensions broadcast by numpy rules against `out`'s); `score` is the element type of
/// the raw scores (`expr`'s input 0), `extra[i]` is `expr`'s input `i + 1`, broadcast to the
/// scores' shape `[batch..., Sq, Sk]`. Float element types; `expr` must give a float.
/// Parameters: `(q, k, v, extra..., out)`.
#[allow(clippy::too_many_arguments)] // the operands of one formula, each with its own role
pub fn attention(
    name: &str,
    q: &TensorDesc,
    k: &TensorDesc,
    v: &TensorDesc,
    score: crate::ir::DType,
    extra: &[TensorDesc],
    expr: &Expr,
    out: &TensorDesc,
) -> Result<OpKernel, CodegenError> {
    let fail = |m: String| spec_error("attention", name, m);
    check_name(name).map_err(fail)?;
    for (t, what) in [(q, "q"), (k, "k"), (v, "v"), (out, "the output")] {
        t.check(what).map_err(fail)?;
        if float_acc(t.dtype).is_none() || t.dtype == crate::ir::DType::F64 {
            return Err(fail(format!("{what} is {}, attention takes f32, f16 or bf16", t.dtype)));
        }
        if t.shape.len() < 2 {
            return Err(fail(format!("{what} needs rank 2 or more, got {:?}", t.shape)));
        }
    }
    let r = out.shape.len();
    let batch_shape = &out.shape[..r - 2];
    let (sq, dv) = (out.shape[r - 2], out.shape[r - 1]);
    let inner = |t: &TensorDesc| (t.shape[t.shape.len() - 2], t.shape[t.shape.len() - 1]);
    let (q_rows, d) = inner(q);
    let (k_d, sk) = inner(k);
    let (v_rows, v_cols) = inner(v);
    if q_rows != sq || k_d != d || v_rows != sk || v_cols != dv {
        return Err(fail(format!(
            "softmax({:?} · {:?}) · {:?} does not give {:?}",
            q.shape, k.shape, v.shape, out.shape
        )));
    }
    if [sq, sk, d, dv].contains(&0) {
        return Err(fail("an empty dimension".into()));
    }
    let batch_strides = |t: &TensorDesc, what: &str| -> Result<Vec<usize>, String> {
        let rt = t.shape.len() - 2;
        let view = TensorDesc { dtype: t.dtype, shape: t.shape[..rt].to_vec(), strides: t.strides[..rt].to_vec() };
        view.broadcast_strides(batch_shape).ok_or_else(|| {
            format!("{what}'s batch dimensions {:?} do not broadcast to {batch_shape:?}", &t.shape[..rt])
        })
    };
    let (qb, kb, vb) = (
        batch_strides(q, "q").map_err(fail)?,
        batch_strides(k, "k").map_err(fail)?,
        batch_strides(v, "v").map_err(fail)?,
    );
    let ob = out.strides[..r - 2].to_vec();
    let n_batch: usize = batch_shape.iter().product();
    if n_batch > 65535 {
        return Err(fail(format!("{n_batch} batch entries do not fit one grid's y dimension")));
    }
    let mut scores_shape = batch_shape.to_vec();
    scores_shape.extend([sq, sk]);
    let mut dtypes = vec![score];
    dtypes.extend(extra.iter().map(|t| t.dtype));
    let (expr_c, expr_t) = render(expr, &dtypes).map_err(fail)?;
    if float_acc(expr_t).is_none() {
        return Err(fail(format!("the score expression gives {expr_t}, not a float")));
    }
    let mut extras = vec![];
    for (i, t) in extra.iter().enumerate() {
        t.check(&format!("extra input {i}")).map_err(fail)?;
        let s = t.broadcast_strides(&scores_shape).ok_or_else(|| {
            fail(format!("extra input {i} of shape {:?} does not broadcast to the scores {scores_shape:?}", t.shape))
        })?;
        extras.push(ExtraCtx {
            index: i + 1,
            t: type_ctx(t.dtype),
            used: expr.reads(i + 1),
            offset: offset_expr("e", &scores_shape, &s),
        });
    }
    let (cpt, kp, ps, sk4, epl, vp) = extents(sk, dv);
    let mma = mma_type([q.dtype, k.dtype, v.dtype, out.dtype, score], sk, d, dv);
    let smem = if mma.is_some() { mma_smem(sk, d, dv) } else { attention_smem(sk, d, dv) };
    if smem > MAX_SMEM {
        return Err(fail(format!(
            "K and V of one batch entry ({sk} × {d} and {sk} × {dv}) need {smem} bytes of shared memory, over {MAX_SMEM}"
        )));
    }
    let rs = |t: &TensorDesc| (t.strides[t.shape.len() - 2], t.strides[t.shape.len() - 1]);
    let (q_rs, q_cs) = rs(q);
    let (k_rs, k_cs) = rs(k);
    let (v_rs, v_cs) = rs(v);
    let (o_rs, o_cs) = rs(out);
    let ctx = AttentionCtx {
        kernel_name: name.to_string(),
        q_shape: shape_text(&q.shape),
        k_shape: shape_text(&k.shape),
        v_shape: shape_text(&v.shape),
        out_shape: shape_text(&out.shape),
        expr: expr_c,
        q: type_ctx(q.dtype),
        k: type_ctx(k.dtype),
        v: type_ctx(v.dtype),
        out: type_ctx(out.dtype),
        score: type_ctx(score),
        mma_t: mma.unwrap_or(""),
        skp: sk.div_ceil(16) * 16,
        dp: d.div_ceil(16) * 16,
        dvp: dv.div_ceil(8) * 8,
        qs: d.div_ceil(16) * 16 + 8,
        vs: sk.div_ceil(16) * 16 + 8,
        use_index: extras.iter().any(|x| x.used),
        idx_t: super::index_type(n_batch * sq * sk + extra.iter().map(|t| t.max_offset()).max().unwrap_or(0)),
        extras,
        sq,
        sk,
        d,
        dv,
        bq: BQ,
        rows_per_warp: BQ / WARPS,
        cpt,
        kp,
        ps,
        sk4,
        epl,
        vp,
        qp: BQ + 4,
        ks_len: (d * kp).div_ceil(4) * 4,
        lanes_per_row: LANES_PER_ROW,
        threads: THREADS,
        q_rs,
        q_cs,
        k_rs,
        k_cs,
        v_rs,
        v_cs,
        o_rs,
        o_cs,
        k_d_fast: k_rs == 1 && k_cs != 1,
        v_e_fast: v_cs == 1 || v_rs != 1,
        q_batch: offset_expr("z", batch_shape, &qb),
        k_batch: offset_expr("z", batch_shape, &kb),
        v_batch: offset_expr("z", batch_shape, &vb),
        o_batch: offset_expr("z", batch_shape, &ob),
    };
    let (template, threads) = match mma {
        Some(_) => ("op_attention_mma.cu.tera", MMA_THREADS),
        None => ("op_attention.cu.tera", THREADS),
    };
    let ctx = AttentionCtx { threads, ..ctx };
    let source = render_template(template, &ctx)?;
    Ok(OpKernel {
        name: name.to_string(),
        source,
        grid: (sq.div_ceil(BQ) as u32, n_batch.max(1) as u32, 1),
        block: (threads as u32, 1, 1),
        smem_bytes: smem as u32,
    })
}
