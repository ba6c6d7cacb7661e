//! Matrix products: MatMul (numpy semantics: 1-D operands promoted and the added axis
//! removed again, batch axes broadcast) and Gemm (transposes, alpha, beta, a C that
//! broadcasts to the output). Float types run through `matrixmultiply::dgemm` on f64
//! copies, so an f32 result is the f64 product rounded once; integer MatMul uses
//! wrapping i64 arithmetic, which gives every integer type's wrap-around exactly.
//!
//! [`dgemm`] is shared with the convolution family.

use super::{optional, required, FamilyRegistrar, InferInput, NodeCtx, OpResult};
use crate::bail_op;
use crate::ir::{broadcast_index_map, broadcast_shapes, numel, DType, Data, Element, Tensor, ValueFact};
use rayon::prelude::*;

pub(super) fn register(reg: &mut FamilyRegistrar) {
    reg.op("MatMul", infer_matmul, eval_matmul).op("Gemm", infer_gemm, eval_gemm);
}

/// `c = alpha * a · b + beta * c` for an `m×k` by `k×n` product, every matrix given by its
/// slice and its (row, column) strides in elements. With `beta == 0` the old `c` is not
/// read (NaN in it does not leak). Large products are threaded by `matrixmultiply`.
#[allow(clippy::too_many_arguments)]
pub(super) fn dgemm(
    (m, k, n): (usize, usize, usize),
    alpha: f64,
    (a, rsa, csa): (&[f64], usize, usize),
    (b, rsb, csb): (&[f64], usize, usize),
    beta: f64,
    (c, rsc, csc): (&mut [f64], usize, usize),
) {
    if m == 0 || n == 0 {
        return;
    }
    let last = |rows: usize, cols: usize, rs: usize, cs: usize| (rows - 1) * rs + (cols - 1) * cs;
    assert!(last(m, n, rsc, csc) < c.len(), "dgemm: c is too short");
    if k == 0 {
        for i in 0..m {
            for j in 0..n {
                let x = &mut c[i * rsc + j * csc];
                *x = if beta == 0.0 { 0.0 } else { beta * *x };
            }
        }
        return;
    }
    assert!(last(m, k, rsa, csa) < a.len(), "dgemm: a is too short");
    assert!(last(k, n, rsb, csb) < b.len(), "dgemm: b is too short");
    let s = |x: usize| x as isize;
    // SAFETY: the asserts above keep every index the kernel touches inside the slices.
    unsafe {
        matrixmultiply::dgemm(
            m,
            k,
            n,
            alpha,
            a.as_ptr(),
            s(rsa),
            s(csa),
            b.as_ptr(),
            s(rsb),
            s(csb),
            beta,
            c.as_mut_ptr(),
            s(rsc),
            s(csc),
        );
    }
}

/// Every element as f64, with a direct path for the common f32 case.
pub(super) fn f64_data(t: &Tensor) -> Vec<f64> {
    match t.as_slice::<f32>() {
        Some(v) => v.iter().map(|&x| x as f64).collect(),
        None => t.to_f64_vec(),
    }
}

/// Builds a tensor of `dtype` from f64 results (rounded once for float types).
pub(super) fn tensor_from_f64(dtype: DType, shape: Vec<usize>, v: Vec<f64>) -> Tensor {
    let data = match dtype {
        DType::F32 => Data::F32(v.iter().map(|&x| x as f32).collect()),
        DType::F64 => Data::F64(v),
        _ => Data::from_f64_iter(dtype, v.into_iter()),
    };
    Tensor::new(shape, data).expect("length computed from shape")
}

/// Per-thread f64 work buffers, kept between calls: large fresh allocations cost a page
/// fault per 4 KiB on first touch, which dominates a memory-bound kernel.
#[derive(Default)]
pub(super) struct Scratch {
    /// The f64 image of the output chunk being computed (zeroed, chunk-sized).
    pub out: Vec<f64>,
    /// Free for the caller (e.g. an f64 copy of an input block).
    pub a: Vec<f64>,
    /// Free for the caller (e.g. an im2col matrix).
    pub b: Vec<f64>,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
}

/// Fills `out` chunk by chunk: `compute(i, scratch)` writes chunk `i` in f64 into
/// `scratch.out`, which is then rounded into `out`. Chunks run in parallel when asked.
pub(super) fn compute_chunks<T: Element>(
    out: &mut [T],
    chunk: usize,
    parallel: bool,
    compute: impl Fn(usize, &mut Scratch) + Sync + Send,
) {
    if out.is_empty() || chunk == 0 {
        return;
    }
    let run = |(i, dst): (usize, &mut [T])| {
        SCRATCH.with(|cell| {
            let mut fresh = Scratch::default();
            let mut borrowed = cell.try_borrow_mut();
            let scratch = match borrowed.as_deref_mut() {
                Ok(s) => s,
                Err(_) => &mut fresh,
            };
            scratch.out.clear();
            scratch.out.resize(dst.len(), 0.0);
            compute(i, scratch);
            for (d, &v) in dst.iter_mut().zip(&scratch.out) {
                *d = T::from_f64(v);
            }
        })
    };
    if parallel {
        out.par_chunks_mut(chunk).enumerate().for_each(run);
    } else {
        out.chunks_mut(chunk).enumerate().for_each(run);
    }
}

/// Converts `src` into `dst` as f64, reusing `dst`'s allocation.
pub(super) fn load_f64<T: Element>(dst: &mut Vec<f64>, src: &[T]) {
    dst.clear();
    dst.extend(src.iter().map(|&x| x.to_f64()));
}

/// Runs `$body` with `$t` bound to the element type of a float dtype.
macro_rules! with_float_type {
    ($dtype:expr, $t:ident => $body:expr) => {
        match $dtype {
            $crate::ir::DType::F32 => {
                type $t = f32;
                $body
            }
            $crate::ir::DType::F64 => {
                type $t = f64;
                $body
            }
            $crate::ir::DType::F16 => {
                type $t = half::f16;
                $body
            }
            $crate::ir::DType::BF16 => {
                type $t = half::bf16;
                $body
            }
            other => $crate::bail_op!("expected a float type, got {other}"),
        }
    };
}
pub(super) use with_float_type;

fn check_matmul_dtype(a: DType, b: DType, op: &str) -> OpResult<()> {
    if a != b {
        bail_op!("{op} inputs must have the same type, got {a} and {b}");
    }
    if a == DType::Bool {
        bail_op!("{op} does not take bool tensors");
    }
    Ok(())
}

/// The shape bookkeeping of one MatMul.
#[derive(Debug)]
struct MatMulShape {
    m: usize,
    k: usize,
    n: usize,
    /// Batch axes of each operand (after 1-D promotion) and their broadcast.
    a_batch: Vec<usize>,
    b_batch: Vec<usize>,
    batch: Vec<usize>,
    out: Vec<usize>,
}

fn matmul_shape(a: &[usize], b: &[usize]) -> OpResult<MatMulShape> {
    if a.is_empty() || b.is_empty() {
        bail_op!("MatMul inputs must have rank at least 1, got ranks {} and {}", a.len(), b.len());
    }
    let a2: Vec<usize> = if a.len() == 1 { vec![1, a[0]] } else { a.to_vec() };
    let b2: Vec<usize> = if b.len() == 1 { vec![b[0], 1] } else { b.to_vec() };
    let (ra, rb) = (a2.len(), b2.len());
    let (m, k, kb, n) = (a2[ra - 2], a2[ra - 1], b2[rb - 2], b2[rb - 1]);
    if k != kb {
        bail_op!("MatMul inner dimensions differ: {a:?} times {b:?}");
    }
    let (a_batch, b_batch) = (a2[..ra - 2].to_vec(), b2[..rb - 2].to_vec());
    let Some(batch) = broadcast_shapes(&a_batch, &b_batch) else {
        bail_op!("MatMul batch dimensions do not broadcast: {a:?} times {b:?}");
    };
    let mut out = batch.clone();
    if a.len() > 1 {
        out.push(m);
    }
    if b.len() > 1 {
        out.push(n);
    }
    Ok(MatMulShape { m, k, n, a_batch, b_batch, batch, out })
}

fn infer_matmul(_ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    let (a, b) = (required(inputs, 0)?.fact, required(inputs, 1)?.fact);
    check_matmul_dtype(a.dtype, b.dtype, "MatMul")?;
    Ok(vec![ValueFact::new(a.dtype, matmul_shape(&a.shape, &b.shape)?.out)])
}

/// Per output batch entry, the matrix index into each operand.
fn batch_maps(s: &MatMulShape) -> (Vec<usize>, Vec<usize>) {
    (broadcast_index_map(&s.a_batch, &s.batch), broadcast_index_map(&s.b_batch, &s.batch))
}

/// Rows per output block of one large `rows×n` product. Blocks run on rayon threads, each
/// a single `dgemm` call: small enough for a few blocks per thread (load balance) and at
/// most about 4 MiB of f64, large enough that packing B again per block stays cheap.
fn rows_per_block(rows: usize, n: usize) -> usize {
    let balanced = rows.div_ceil(4 * rayon::current_num_threads());
    let cap = ((1 << 19) / n.max(1)).max(1);
    balanced.max(32).min(cap).min(rows.max(1))
}

fn matmul_float<T: Element>(s: &MatMulShape, a: &[T], b: &[T]) -> Vec<T> {
    let (m, k, n) = (s.m, s.k, s.n);
    let mut out = vec![T::default(); numel(&s.batch) * m * n];
    let bv: Vec<f64> = b.iter().map(|x| x.to_f64()).collect();
    if numel(&s.b_batch) == 1 {
        // B is one matrix: A's batch stacks into the rows of one large product.
        let rb = rows_per_block(numel(&s.a_batch) * m, n);
        compute_chunks(&mut out, rb * n, true, |i, sc| {
            let rows = sc.out.len() / n;
            load_f64(&mut sc.a, &a[i * rb * k..(i * rb + rows) * k]);
            dgemm((rows, k, n), 1.0, (&sc.a, k, 1), (&bv, n, 1), 0.0, (&mut sc.out, n, 1));
        });
    } else {
        let (a_map, b_map) = batch_maps(s);
        compute_chunks(&mut out, m * n, true, |i, sc| {
            load_f64(&mut sc.a, &a[a_map[i] * m * k..(a_map[i] + 1) * m * k]);
            let b = &bv[b_map[i] * k * n..(b_map[i] + 1) * k * n];
            dgemm((m, k, n), 1.0, (&sc.a, k, 1), (b, n, 1), 0.0, (&mut sc.out, n, 1));
        });
    }
    out
}

fn matmul_i64(s: &MatMulShape, a: &[i64], b: &[i64]) -> Vec<i64> {
    let (m, k, n) = (s.m, s.k, s.n);
    let mut out = vec![0i64; numel(&s.batch) * m * n];
    if out.is_empty() {
        return out;
    }
    let (a_map, b_map) = batch_maps(s);
    out.par_chunks_mut(m * n).enumerate().for_each(|(i, c)| {
        let a = &a[a_map[i] * m * k..];
        let b = &b[b_map[i] * k * n..];
        for row in 0..m {
            let c_row = &mut c[row * n..(row + 1) * n];
            for p in 0..k {
                let x = a[row * k + p];
                for (y, &w) in c_row.iter_mut().zip(&b[p * n..(p + 1) * n]) {
                    *y = y.wrapping_add(x.wrapping_mul(w));
                }
            }
        }
    });
    out
}

fn eval_matmul(_ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    let (a, b) = (*required(inputs, 0)?, *required(inputs, 1)?);
    check_matmul_dtype(a.dtype(), b.dtype(), "MatMul")?;
    let s = matmul_shape(a.shape(), b.shape())?;
    let dtype = a.dtype();
    let out = if dtype.is_float() {
        with_float_type!(dtype, T => {
            let (av, bv) = (a.as_slice::<T>().expect("dtype checked"), b.as_slice::<T>().expect("dtype checked"));
            Tensor::from_vec(s.out.clone(), matmul_float(&s, av, bv))
        })
    } else {
        let v = matmul_i64(&s, &a.to_i64_vec(), &b.to_i64_vec());
        Tensor::new(s.out.clone(), Data::I64(v).cast(dtype)).expect("length computed from shape")
    };
    Ok(vec![out])
}

/// Gemm's `(M, K, N)` after the transposes; checks ranks, inner sizes and C's shape.
fn gemm_dims(ctx: &NodeCtx, a: &[usize], b: &[usize], c: Option<&[usize]>) -> OpResult<(usize, usize, usize)> {
    if a.len() != 2 || b.len() != 2 {
        bail_op!("Gemm inputs A and B must be 2-D, got {a:?} and {b:?}");
    }
    let (trans_a, trans_b) = (ctx.attrs.int("transA", 0)? != 0, ctx.attrs.int("transB", 0)? != 0);
    let (m, k) = if trans_a { (a[1], a[0]) } else { (a[0], a[1]) };
    let (kb, n) = if trans_b { (b[1], b[0]) } else { (b[0], b[1]) };
    if k != kb {
        bail_op!("Gemm inner dimensions differ: A {a:?} (transA {trans_a}), B {b:?} (transB {trans_b})");
    }
    if let Some(c) = c {
        if broadcast_shapes(c, &[m, n]).as_deref() != Some(&[m, n][..]) {
            bail_op!("Gemm C of shape {c:?} does not broadcast to [{m}, {n}]");
        }
    }
    Ok((m, k, n))
}

fn infer_gemm(ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    let (a, b) = (required(inputs, 0)?.fact, required(inputs, 1)?.fact);
    check_matmul_dtype(a.dtype, b.dtype, "Gemm")?;
    let c = optional(inputs, 2).map(|c| c.fact);
    if let Some(c) = c {
        check_matmul_dtype(a.dtype, c.dtype, "Gemm")?;
    }
    let (m, _, n) = gemm_dims(ctx, &a.shape, &b.shape, c.map(|c| c.shape.as_slice()))?;
    Ok(vec![ValueFact::new(a.dtype, vec![m, n])])
}

fn eval_gemm(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    let (a, b) = (*required(inputs, 0)?, *required(inputs, 1)?);
    let c = optional(inputs, 2);
    check_matmul_dtype(a.dtype(), b.dtype(), "Gemm")?;
    let (m, k, n) = gemm_dims(ctx, a.shape(), b.shape(), c.map(|c| c.shape()))?;
    let alpha = ctx.attrs.float("alpha", 1.0)? as f64;
    let beta = ctx.attrs.float("beta", 1.0)? as f64;
    let (trans_a, trans_b) = (ctx.attrs.int("transA", 0)? != 0, ctx.attrs.int("transB", 0)? != 0);
    let a_strides = if trans_a { (1, m) } else { (k, 1) };
    let b_strides = if trans_b { (1, k) } else { (n, 1) };
    let (av, bv) = (f64_data(a), f64_data(b));
    let cv = c.map(|c| (f64_data(c), c.shape().to_vec()));
    let rb = rows_per_block(m, n);
    let compute = |i: usize, sc: &mut Scratch| {
        let (r0, rows) = (i * rb, sc.out.len() / n);
        let mut c_beta = 0.0;
        if let Some((cv, shape)) = &cv {
            // C is [], [n], [1|m, 1|n] or [1|m, 1|n] with a leading 1: right-aligned to [m, n].
            let (cr, cc) = match shape.as_slice() {
                [] => (1, 1),
                [cc] => (1, *cc),
                [cr, cc] => (*cr, *cc),
                _ => unreachable!("C's shape was checked"),
            };
            for (r, y) in sc.out.chunks_mut(n).enumerate() {
                let row = if cr == 1 { 0 } else { (r0 + r) * cc };
                for (j, y) in y.iter_mut().enumerate() {
                    *y = beta * cv[row + if cc == 1 { 0 } else { j }];
                }
            }
            c_beta = 1.0;
        }
        let a_block = &av[if trans_a { r0 } else { r0 * k }..];
        dgemm(
            (rows, k, n),
            alpha,
            (a_block, a_strides.0, a_strides.1),
            (&bv, b_strides.0, b_strides.1),
            c_beta,
            (&mut sc.out, n, 1),
        );
    };
    let out = with_float_type!(a.dtype(), T => {
        let mut out = vec![T::default(); m * n];
        compute_chunks(&mut out, rb * n, true, compute);
        Tensor::from_vec(vec![m, n], out)
    });
    Ok(vec![out])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Attr, Attrs};
    use crate::rng::SplitMix64;

    fn run(op: &str, attrs: &Attrs, inputs: &[Option<&Tensor>]) -> OpResult<Tensor> {
        let def = crate::ops::registry().get(op).unwrap();
        let ctx = NodeCtx { name: "t", attrs, opset: 13, n_outputs: 1 };
        Ok((def.eval)(&ctx, inputs)?.remove(0))
    }

    fn random(shape: &[usize], seed: u64) -> Tensor {
        let mut r = SplitMix64::new(seed);
        let v: Vec<f32> = (0..numel(shape)).map(|_| r.uniform(-1.0, 1.0) as f32).collect();
        Tensor::from_vec(shape.to_vec(), v)
    }

    /// Naive reference product of row-major `[.., m, k]` and `[.., k, n]` with numpy batching.
    fn naive(a: &Tensor, b: &Tensor) -> Vec<f64> {
        let s = matmul_shape(a.shape(), b.shape()).unwrap();
        let (av, bv) = (a.to_f64_vec(), b.to_f64_vec());
        let (a_map, b_map) = batch_maps(&s);
        let mut out = vec![];
        for i in 0..numel(&s.batch) {
            for r in 0..s.m {
                for c in 0..s.n {
                    let dot: f64 = (0..s.k)
                        .map(|p| av[a_map[i] * s.m * s.k + r * s.k + p] * bv[b_map[i] * s.k * s.n + p * s.n + c])
                        .sum();
                    out.push(dot);
                }
            }
        }
        out
    }

    #[test]
    fn matmul_shapes_follow_numpy() {
        let cases: [(&[usize], &[usize], &[usize]); 6] = [
            (&[3], &[3], &[]),
            (&[3], &[2, 3, 4], &[2, 4]),
            (&[2, 3, 4], &[4], &[2, 3]),
            (&[2, 1, 3, 4], &[5, 4, 2], &[2, 5, 3, 2]),
            (&[3, 4], &[4, 2], &[3, 2]),
            (&[0, 4], &[4, 2], &[0, 2]),
        ];
        for (k, (a, b, want)) in cases.into_iter().enumerate() {
            let (ta, tb) = (random(a, k as u64), random(b, 100 + k as u64));
            let got = run("MatMul", &Attrs::new(), &[Some(&ta), Some(&tb)]).unwrap();
            assert_eq!(got.shape(), want);
            for (x, y) in got.to_f64_vec().iter().zip(naive(&ta, &tb)) {
                assert!((x - y).abs() < 1e-5, "{a:?}x{b:?}: {x} vs {y}");
            }
        }
        let bad = run("MatMul", &Attrs::new(), &[Some(&random(&[2, 3], 0)), Some(&random(&[2, 3], 1))]);
        assert!(bad.unwrap_err().0.contains("inner dimensions"));
    }

    #[test]
    fn integer_matmul_wraps() {
        let a = Tensor::from_vec(vec![1, 2], vec![i32::MAX, 2]);
        let b = Tensor::from_vec(vec![2, 1], vec![2i32, 3]);
        let got = run("MatMul", &Attrs::new(), &[Some(&a), Some(&b)]).unwrap();
        assert_eq!(got.as_slice::<i32>().unwrap(), &[i32::MAX.wrapping_mul(2).wrapping_add(6)]);
        let a = Tensor::from_vec(vec![2, 2], vec![1u64, 2, 3, 4]);
        let got = run("MatMul", &Attrs::new(), &[Some(&a), Some(&a)]).unwrap();
        assert_eq!(got.as_slice::<u64>().unwrap(), &[7, 10, 15, 22]);
    }

    #[test]
    fn gemm_transposes_scales_and_broadcasts_c() {
        let a = random(&[4, 3], 1); // transA: op(A) is 3x4
        let b = random(&[5, 4], 2); // transB: op(B) is 4x5
        let c = random(&[5], 3);
        let mut attrs = Attrs::new();
        attrs.insert("transA", Attr::Int(1));
        attrs.insert("transB", Attr::Int(1));
        attrs.insert("alpha", Attr::Float(0.5));
        attrs.insert("beta", Attr::Float(2.0));
        let got = run("Gemm", &attrs, &[Some(&a), Some(&b), Some(&c)]).unwrap();
        assert_eq!(got.shape(), &[3, 5]);
        let (av, bv, cv) = (a.to_f64_vec(), b.to_f64_vec(), c.to_f64_vec());
        for i in 0..3 {
            for j in 0..5 {
                let dot: f64 = (0..4).map(|p| av[p * 3 + i] * bv[j * 4 + p]).sum();
                let want = 0.5 * dot + 2.0 * cv[j];
                assert!((got.to_f64_vec()[i * 5 + j] - want).abs() < 1e-5);
            }
        }
        let no_c = run("Gemm", &Attrs::new(), &[Some(&random(&[2, 3], 4)), Some(&random(&[3, 2], 5))]).unwrap();
        assert_eq!(no_c.shape(), &[2, 2]);
    }
}
