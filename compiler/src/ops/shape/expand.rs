//! Expand and Tile: copies of a view with zero strides on the repeated axes.

use super::{int_list, known_values, strided, tensor};
use crate::bail_op;
use crate::ir::{broadcast_shapes, strides, Tensor, ValueFact};
use crate::ops::{required, FamilyRegistrar, InferInput, NodeCtx, OpResult};

pub(super) fn register(reg: &mut FamilyRegistrar) {
    reg.op("Expand", infer_expand, eval_expand).op("Tile", infer_tile, eval_tile);
}

/// Expand broadcasts the input and the `shape` input together (numpy rules, so a 1 in
/// `shape` keeps the input's dim).
fn expand_plan(in_shape: &[usize], values: &[Option<&Tensor>]) -> OpResult<Vec<usize>> {
    let target = int_list(required(values, 1)?, "shape")?;
    if target.iter().any(|&d| d < 0) {
        bail_op!("shape {target:?} has a negative dim");
    }
    let target: Vec<usize> = target.into_iter().map(|d| d as usize).collect();
    match broadcast_shapes(in_shape, &target) {
        Some(out) => Ok(out),
        None => bail_op!("cannot broadcast input shape {in_shape:?} to {target:?}"),
    }
}

fn infer_expand(_ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    let x = required(inputs, 0)?.fact;
    let values = known_values(inputs, &[(1, "shape")])?;
    Ok(vec![ValueFact::new(x.dtype, expand_plan(&x.shape, &values)?)])
}

fn eval_expand(_ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    let x = *required(inputs, 0)?;
    let out = expand_plan(x.shape(), inputs)?;
    // Align the input to the output's rank; broadcast axes read with stride 0.
    let offset = out.len() - x.rank();
    let in_strides = strides(x.shape());
    let view: Vec<isize> = (0..out.len())
        .map(|i| match i.checked_sub(offset) {
            Some(j) if x.shape()[j] != 1 => in_strides[j] as isize,
            _ => 0,
        })
        .collect();
    let data = strided(x.data(), 0, &out, &view);
    Ok(vec![tensor(out, data)])
}

/// Tile's repeats (input 1, opset 6+), one non-negative count per axis.
fn tile_repeats(ctx: &NodeCtx, rank: usize, values: &[Option<&Tensor>]) -> OpResult<Vec<usize>> {
    if ctx.opset < 6 {
        bail_op!("Tile before opset 6 (tiles and axis inputs) is not supported");
    }
    let repeats = int_list(required(values, 1)?, "repeats")?;
    if repeats.len() != rank || repeats.iter().any(|&r| r < 0) {
        bail_op!("repeats {repeats:?} must hold one non-negative count per axis of the rank-{rank} input");
    }
    Ok(repeats.into_iter().map(|r| r as usize).collect())
}

fn infer_tile(ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    let x = required(inputs, 0)?.fact;
    let values = known_values(inputs, &[(1, "repeats")])?;
    let repeats = tile_repeats(ctx, x.shape.len(), &values)?;
    Ok(vec![ValueFact::new(x.dtype, x.shape.iter().zip(&repeats).map(|(d, r)| d * r).collect())])
}

fn eval_tile(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    let x = *required(inputs, 0)?;
    let repeats = tile_repeats(ctx, x.rank(), inputs)?;
    // Output axis i of length r_i·d_i is the pair (repeat, position): view the input as
    // [r0, d0, r1, d1, ...] with stride 0 on every repeat axis.
    let in_strides = strides(x.shape());
    let mut shape = Vec::with_capacity(2 * x.rank());
    let mut view = Vec::with_capacity(2 * x.rank());
    for ((&d, &r), &s) in x.shape().iter().zip(&repeats).zip(&in_strides) {
        shape.extend([r, d]);
        view.extend([0, s as isize]);
    }
    let data = strided(x.data(), 0, &shape, &view);
    let out = x.shape().iter().zip(&repeats).map(|(d, r)| d * r).collect();
    Ok(vec![tensor(out, data)])
}

#[cfg(test)]
mod tests {
    use super::super::test_util::{i64s, iota, run};
    use crate::ir::Tensor;

    #[test]
    fn expand_broadcasts_both_ways() {
        let x = Tensor::from_vec(vec![3, 1], vec![1i64, 2, 3]);
        let y = &run("Expand", 13, &[], &[Some(&x), Some(&i64s(&[2, 1, 2]))]).unwrap()[0];
        assert_eq!(y.shape(), &[2, 3, 2]);
        assert_eq!(y.to_i64_vec(), vec![1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3]);
        let row = iota(&[3]);
        let y = &run("Expand", 13, &[], &[Some(&row), Some(&i64s(&[2, 1]))]).unwrap()[0];
        assert_eq!(y.to_f64_vec(), vec![0.0, 1.0, 2.0, 0.0, 1.0, 2.0]);
        assert!(run("Expand", 13, &[], &[Some(&row), Some(&i64s(&[2]))]).is_err());
    }

    #[test]
    fn tile_repeats_every_axis() {
        let x = iota(&[2, 2]);
        let y = &run("Tile", 13, &[], &[Some(&x), Some(&i64s(&[2, 3]))]).unwrap()[0];
        assert_eq!(y.shape(), &[4, 6]);
        let v = y.to_f64_vec();
        for i in 0..4 {
            for j in 0..6 {
                assert_eq!(v[i * 6 + j], ((i % 2) * 2 + j % 2) as f64, "({i},{j})");
            }
        }
        let none = &run("Tile", 13, &[], &[Some(&x), Some(&i64s(&[0, 1]))]).unwrap()[0];
        assert_eq!(none.shape(), &[0, 2]);
    }
}
