//! Transpose, DepthToSpace and SpaceToDepth: each is a permuted copy of a (reshaped)
//! input, done by one `strided_copy`.

use super::{axis_in, strided, tensor};
use crate::bail_op;
use crate::ir::{strides, Data, Tensor, ValueFact};
use crate::ops::{required, FamilyRegistrar, InferInput, NodeCtx, OpResult};

pub(super) fn register(reg: &mut FamilyRegistrar) {
    reg.op("Transpose", infer_transpose, eval_transpose)
        .op("DepthToSpace", infer_depth_to_space, eval_depth_to_space)
        .op("SpaceToDepth", infer_space_to_depth, eval_space_to_depth);
}

/// Copies `data` (row-major over `shape`) with its axes reordered: output axis `k` is
/// input axis `perm[k]`.
fn permute(data: &Data, shape: &[usize], perm: &[usize]) -> Data {
    let st = strides(shape);
    let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let out_strides: Vec<isize> = perm.iter().map(|&p| st[p] as isize).collect();
    strided(data, 0, &out_shape, &out_strides)
}

/// The `perm` attribute (default: reverse the axes), checked to be a permutation.
fn perm_of(ctx: &NodeCtx, rank: usize) -> OpResult<Vec<usize>> {
    let Some(perm) = ctx.attrs.ints_opt("perm")? else {
        return Ok((0..rank).rev().collect());
    };
    if perm.len() != rank {
        bail_op!("perm {perm:?} has {} entries but the input has rank {rank}", perm.len());
    }
    let mut seen = vec![false; rank];
    let mut out = Vec::with_capacity(rank);
    for &p in perm {
        let a = axis_in(p, rank, "perm entry")?;
        if std::mem::replace(&mut seen[a], true) {
            bail_op!("perm {perm:?} is not a permutation");
        }
        out.push(a);
    }
    Ok(out)
}

fn infer_transpose(ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    let x = required(inputs, 0)?.fact;
    let perm = perm_of(ctx, x.shape.len())?;
    Ok(vec![ValueFact::new(x.dtype, perm.iter().map(|&p| x.shape[p]).collect())])
}

fn eval_transpose(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    let x = *required(inputs, 0)?;
    let perm = perm_of(ctx, x.rank())?;
    let out_shape = perm.iter().map(|&p| x.shape()[p]).collect();
    Ok(vec![tensor(out_shape, permute(x.data(), x.shape(), &perm))])
}

/// A rearrangement of blocks between depth and space: the input viewed as `view`, then
/// permuted by `perm`, gives the output (of shape `out`) in row-major order.
struct BlockPlan {
    view: Vec<usize>,
    perm: [usize; 6],
    out: Vec<usize>,
}

/// `blocksize`, `mode` and the NCHW dims, checked.
fn block_params(ctx: &NodeCtx, shape: &[usize]) -> OpResult<(usize, bool, [usize; 4])> {
    let &[n, c, h, w] = shape else {
        bail_op!("input must be 4-D (NCHW), got shape {shape:?}");
    };
    let b = ctx.attrs.req_int("blocksize")?;
    if b < 1 {
        bail_op!("blocksize must be positive, got {b}");
    }
    let crd = match ctx.attrs.string("mode", "DCR")? {
        "DCR" => false,
        "CRD" => true,
        other => bail_op!("mode must be DCR or CRD, got {other:?}"),
    };
    Ok((b as usize, crd, [n, c, h, w]))
}

fn depth_to_space_plan(ctx: &NodeCtx, shape: &[usize]) -> OpResult<BlockPlan> {
    let (b, crd, [n, c, h, w]) = block_params(ctx, shape)?;
    if c % (b * b) != 0 {
        bail_op!("channels {c} are not divisible by blocksize² = {}", b * b);
    }
    let c_out = c / (b * b);
    let (view, perm) = if crd {
        (vec![n, c_out, b, b, h, w], [0, 1, 4, 2, 5, 3])
    } else {
        (vec![n, b, b, c_out, h, w], [0, 3, 4, 1, 5, 2])
    };
    Ok(BlockPlan { view, perm, out: vec![n, c_out, h * b, w * b] })
}

fn space_to_depth_plan(ctx: &NodeCtx, shape: &[usize]) -> OpResult<BlockPlan> {
    let (b, crd, [n, c, h, w]) = block_params(ctx, shape)?;
    if h % b != 0 || w % b != 0 {
        bail_op!("spatial dims {h}x{w} are not divisible by blocksize {b}");
    }
    let perm = if crd { [0, 1, 3, 5, 2, 4] } else { [0, 3, 5, 1, 2, 4] };
    Ok(BlockPlan { view: vec![n, c, h / b, b, w / b, b], perm, out: vec![n, c * b * b, h / b, w / b] })
}

fn infer_depth_to_space(ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    let x = required(inputs, 0)?.fact;
    Ok(vec![ValueFact::new(x.dtype, depth_to_space_plan(ctx, &x.shape)?.out)])
}

fn eval_depth_to_space(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    let x = *required(inputs, 0)?;
    let plan = depth_to_space_plan(ctx, x.shape())?;
    Ok(vec![tensor(plan.out, permute(x.data(), &plan.view, &plan.perm))])
}

fn infer_space_to_depth(ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    let x = required(inputs, 0)?.fact;
    Ok(vec![ValueFact::new(x.dtype, space_to_depth_plan(ctx, &x.shape)?.out)])
}

fn eval_space_to_depth(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    let x = *required(inputs, 0)?;
    let plan = space_to_depth_plan(ctx, x.shape())?;
    Ok(vec![tensor(plan.out, permute(x.data(), &plan.view, &plan.perm))])
}

#[cfg(test)]
mod tests {
    use super::super::test_util::{ints, iota, run};
    use crate::ir::{Attr, DType, Tensor};

    #[test]
    fn transpose_default_reverses_axes() {
        let x = iota(&[2, 3]);
        let y = &run("Transpose", 13, &[], &[Some(&x)]).unwrap()[0];
        assert_eq!(y.shape(), &[3, 2]);
        assert_eq!(y.to_f64_vec(), vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    }

    #[test]
    fn transpose_attention_heads_keeps_every_element() {
        // [B, S, H, D] -> [B, H, S, D]: the inner D rows move as blocks.
        let (b, s, h, d) = (2, 3, 4, 5);
        let x = Tensor::from_vec(vec![b, s, h, d], (0..(b * s * h * d) as i64).collect::<Vec<_>>());
        let y = &run("Transpose", 13, &[("perm", ints(&[0, 2, 1, 3]))], &[Some(&x)]).unwrap()[0];
        assert_eq!(y.shape(), &[b, h, s, d]);
        let v = y.to_i64_vec();
        for (bi, hi, si, di) in (0..b)
            .flat_map(|bi| (0..h).flat_map(move |hi| (0..s).flat_map(move |si| (0..d).map(move |di| (bi, hi, si, di)))))
        {
            let got = v[((bi * h + hi) * s + si) * d + di];
            assert_eq!(got, (((bi * s + si) * h + hi) * d + di) as i64);
        }
    }

    #[test]
    fn transpose_moves_any_dtype() {
        let x = Tensor::from_vec(vec![2, 2], vec![true, false, false, false]);
        let y = &run("Transpose", 13, &[], &[Some(&x)]).unwrap()[0];
        assert_eq!(y.dtype(), DType::Bool);
        assert_eq!(y.to_i64_vec(), vec![1, 0, 0, 0]);
        let x = Tensor::from_vec(vec![1, 3], vec![half::f16::from_f32(1.5), half::f16::ZERO, half::f16::ONE]);
        let y = &run("Transpose", 13, &[], &[Some(&x)]).unwrap()[0];
        assert_eq!((y.shape(), y.to_f64_vec()), (&[3usize, 1][..], vec![1.5, 0.0, 1.0]));
    }

    #[test]
    fn transpose_rejects_a_bad_perm() {
        let x = iota(&[2, 3]);
        let err = run("Transpose", 13, &[("perm", ints(&[0, 0]))], &[Some(&x)]).unwrap_err();
        assert!(err.0.contains("not a permutation"), "{err}");
    }

    #[test]
    fn depth_to_space_round_trips_with_space_to_depth() {
        let x = iota(&[1, 8, 2, 3]);
        for mode in ["DCR", "CRD"] {
            let attrs = [("blocksize", Attr::Int(2)), ("mode", Attr::String(mode.into()))];
            let y = &run("DepthToSpace", 13, &attrs, &[Some(&x)]).unwrap()[0];
            assert_eq!(y.shape(), &[1, 2, 4, 6]);
            let z = &run("SpaceToDepth", 13, &attrs, &[Some(y)]).unwrap()[0];
            assert_eq!(z, &x, "{mode}");
        }
    }

    #[test]
    fn depth_to_space_dcr_matches_the_onnx_example() {
        // From the ONNX operator docs: x = arange(48).reshape(1, 8, 2, 3), blocksize 2.
        let x = iota(&[1, 8, 2, 3]);
        let y = &run("DepthToSpace", 13, &[("blocksize", Attr::Int(2))], &[Some(&x)]).unwrap()[0];
        let first_row: Vec<f64> = y.to_f64_vec()[..6].to_vec();
        assert_eq!(first_row, vec![0.0, 12.0, 1.0, 13.0, 2.0, 14.0]);
    }
}
