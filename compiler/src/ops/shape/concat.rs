//! Concat and Split. Both see a tensor as `outer` rows of `dim × inner` elements around
//! the axis and move whole `k × inner` runs per row.

use super::{axis_in, int_list, known_values, tensor};
use crate::bail_op;
use crate::ir::{numel, DType, Data, Element, Tensor, ValueFact};
use crate::ops::{optional, required, FamilyRegistrar, InferInput, NodeCtx, OpResult};

pub(super) fn register(reg: &mut FamilyRegistrar) {
    reg.op("Concat", infer_concat, eval_concat).op("Split", infer_split, eval_split);
}

/// Concat's axis (opset 1 defaults it to 1) and output shape, from the input types.
fn concat_plan(ctx: &NodeCtx, facts: &[(DType, &[usize])]) -> OpResult<(usize, Vec<usize>)> {
    let Some(&(dtype, first)) = facts.first() else {
        bail_op!("needs at least one input");
    };
    let axis = if ctx.opset < 4 { ctx.attrs.int("axis", 1)? } else { ctx.attrs.req_int("axis")? };
    let axis = axis_in(axis, first.len(), "axis")?;
    let mut out = first.to_vec();
    for (k, &(dt, shape)) in facts.iter().enumerate().skip(1) {
        if dt != dtype {
            bail_op!("input {k} is {dt} but input 0 is {dtype}");
        }
        let same_elsewhere =
            shape.len() == first.len() && shape.iter().zip(first).enumerate().all(|(i, (a, b))| i == axis || a == b);
        if !same_elsewhere {
            bail_op!("input {k} has shape {shape:?}, which does not match {first:?} outside axis {axis}");
        }
        out[axis] += shape[axis];
    }
    Ok((axis, out))
}

fn infer_concat(ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    let facts: Vec<(DType, &[usize])> = inputs.iter().flatten().map(|i| (i.fact.dtype, &i.fact.shape[..])).collect();
    let (_, shape) = concat_plan(ctx, &facts)?;
    Ok(vec![ValueFact::new(facts[0].0, shape)])
}

fn eval_concat(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    let parts: Vec<&Tensor> = inputs.iter().flatten().copied().collect();
    let facts: Vec<(DType, &[usize])> = parts.iter().map(|t| (t.dtype(), t.shape())).collect();
    let (axis, shape) = concat_plan(ctx, &facts)?;
    let outer = numel(&shape[..axis]);
    // Per input, the run it contributes to every outer row.
    let runs: Vec<usize> = parts.iter().map(|t| numel(&t.shape()[axis..])).collect();
    let data = crate::with_data!(parts[0].data(), first => concat_typed(first, &parts, outer, &runs));
    Ok(vec![tensor(shape, data)])
}

/// Interleaves the inputs' runs row by row; `_first` only fixes the element type.
fn concat_typed<T: Element>(_first: &[T], parts: &[&Tensor], outer: usize, runs: &[usize]) -> Data {
    let slices: Vec<&[T]> = parts.iter().map(|t| t.as_slice::<T>().expect("dtypes checked by the plan")).collect();
    let mut out = Vec::with_capacity(outer * runs.iter().sum::<usize>());
    for row in 0..outer {
        for (src, &run) in slices.iter().zip(runs) {
            out.extend_from_slice(&src[row * run..(row + 1) * run]);
        }
    }
    T::wrap(out)
}

/// Split's axis and the size of every part along it. Sizes come from the `split` input
/// (opset 13+; also accepted as input 1 before) or attribute; otherwise the axis is cut
/// into `num_outputs` (opset 18) or as many parts as the node has outputs, each of
/// ceil(dim / parts) elements but the last.
fn split_plan(ctx: &NodeCtx, shape: &[usize], values: &[Option<&Tensor>]) -> OpResult<(usize, Vec<usize>)> {
    let axis = axis_in(ctx.attrs.int("axis", 0)?, shape.len(), "axis")?;
    let dim = shape[axis];
    let given: Option<Vec<i64>> = match optional(values, 1) {
        Some(t) => Some(int_list(t, "split")?),
        None if ctx.opset < 13 => ctx.attrs.ints_opt("split")?.map(<[i64]>::to_vec),
        None => None,
    };
    let sizes = match given {
        Some(split) => {
            if split.iter().any(|&s| s < 0) || split.iter().sum::<i64>() != dim as i64 {
                bail_op!("split sizes {split:?} do not add up to dim {dim} of axis {axis}");
            }
            split.into_iter().map(|s| s as usize).collect()
        }
        None => {
            let num_outputs = ctx.attrs.int_opt("num_outputs")?;
            let parts = num_outputs.unwrap_or(ctx.n_outputs as i64);
            if parts < 1 {
                bail_op!("cannot split into {parts} parts");
            }
            let parts = parts as usize;
            let each = dim.div_ceil(parts);
            if num_outputs.is_none() && !dim.is_multiple_of(parts) {
                bail_op!("dim {dim} of axis {axis} does not split evenly into {parts} outputs; give split sizes");
            }
            if each * (parts - 1) > dim {
                bail_op!("dim {dim} of axis {axis} cannot be cut into {parts} parts of {each}");
            }
            let mut sizes = vec![each; parts];
            sizes[parts - 1] = dim - each * (parts - 1);
            sizes
        }
    };
    if sizes.len() < ctx.n_outputs {
        bail_op!("the node has {} outputs but the split makes {} parts", ctx.n_outputs, sizes.len());
    }
    Ok((axis, sizes))
}

fn infer_split(ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    let x = required(inputs, 0)?.fact;
    let values = known_values(inputs, &[(1, "split")])?;
    let (axis, sizes) = split_plan(ctx, &x.shape, &values)?;
    Ok(sizes
        .iter()
        .map(|&s| {
            let mut shape = x.shape.clone();
            shape[axis] = s;
            ValueFact::new(x.dtype, shape)
        })
        .collect())
}

fn eval_split(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    let x = *required(inputs, 0)?;
    let (axis, sizes) = split_plan(ctx, x.shape(), inputs)?;
    let outer = numel(&x.shape()[..axis]);
    let inner = numel(&x.shape()[axis + 1..]);
    let row = x.shape()[axis] * inner;
    let mut offset = 0;
    let mut outs = Vec::with_capacity(sizes.len());
    for &size in &sizes {
        let (start, run) = (offset * inner, size * inner);
        let data = crate::map_data!(x.data(), v => {
            let mut part = Vec::with_capacity(outer * run);
            for r in 0..outer {
                part.extend_from_slice(&v[r * row + start..r * row + start + run]);
            }
            part
        });
        let mut shape = x.shape().to_vec();
        shape[axis] = size;
        outs.push(tensor(shape, data));
        offset += size;
    }
    Ok(outs)
}

#[cfg(test)]
mod tests {
    use super::super::test_util::{i64s, iota, run, run_n};
    use crate::ir::{Attr, Tensor};

    #[test]
    fn concat_interleaves_rows_on_inner_axes() {
        let a = iota(&[2, 2]);
        let b = Tensor::from_vec(vec![2, 1], vec![10.0f32, 11.0]);
        let y = &run("Concat", 13, &[("axis", Attr::Int(-1))], &[Some(&a), Some(&b)]).unwrap()[0];
        assert_eq!(y.shape(), &[2, 3]);
        assert_eq!(y.to_f64_vec(), vec![0.0, 1.0, 10.0, 2.0, 3.0, 11.0]);
    }

    #[test]
    fn concat_accepts_empty_parts_and_rejects_mismatches() {
        let a = Tensor::from_vec(vec![1, 2], vec![1i32, 2]);
        let empty = Tensor::from_vec::<i32>(vec![0, 2], vec![]);
        let y = &run("Concat", 13, &[("axis", Attr::Int(0))], &[Some(&empty), Some(&a)]).unwrap()[0];
        assert_eq!((y.shape(), y.to_i64_vec()), (&[1usize, 2][..], vec![1, 2]));
        let c = Tensor::from_vec(vec![1, 3], vec![1i32, 2, 3]);
        assert!(run("Concat", 13, &[("axis", Attr::Int(0))], &[Some(&a), Some(&c)]).is_err());
        let f = Tensor::from_vec(vec![1, 2], vec![1.0f32, 2.0]);
        assert!(run("Concat", 13, &[("axis", Attr::Int(0))], &[Some(&a), Some(&f)]).is_err());
    }

    fn split_shapes(
        opset: i64,
        attrs: &[(&str, Attr)],
        x: &Tensor,
        split: Option<&Tensor>,
        n: usize,
    ) -> Vec<Vec<usize>> {
        let mut inputs = vec![Some(x)];
        if split.is_some() {
            inputs.push(split);
        }
        run_n("Split", opset, attrs, &inputs, n).unwrap().iter().map(|t| t.shape().to_vec()).collect()
    }

    #[test]
    fn split_sizes_from_input_attribute_or_output_count() {
        let x = iota(&[2, 6]);
        let axis1 = [("axis", Attr::Int(1))];
        assert_eq!(split_shapes(13, &axis1, &x, Some(&i64s(&[2, 4])), 2), vec![vec![2, 2], vec![2, 4]]);
        assert_eq!(
            split_shapes(11, &[("axis", Attr::Int(1)), ("split", Attr::Ints(vec![1, 5]))], &x, None, 2),
            vec![vec![2, 1], vec![2, 5]]
        );
        assert_eq!(split_shapes(13, &axis1, &x, None, 3), vec![vec![2, 2]; 3]);
        assert_eq!(split_shapes(13, &[], &x, Some(&i64s(&[0, 2])), 2), vec![vec![0, 6], vec![2, 6]]);
    }

    #[test]
    fn split_uneven_with_num_outputs() {
        let x = iota(&[7]);
        let outs = run_n("Split", 18, &[("num_outputs", Attr::Int(4))], &[Some(&x)], 4).unwrap();
        let lens: Vec<usize> = outs.iter().map(|t| t.len()).collect();
        assert_eq!(lens, vec![2, 2, 2, 1]);
        assert_eq!(outs[3].to_f64_vec(), vec![6.0]);
        assert!(run_n("Split", 13, &[], &[Some(&x)], 4).is_err());
    }

    #[test]
    fn split_moves_the_right_elements() {
        let x = iota(&[2, 3]);
        let outs = run_n("Split", 13, &[("axis", Attr::Int(1))], &[Some(&x), Some(&i64s(&[1, 2]))], 2).unwrap();
        assert_eq!(outs[0].to_f64_vec(), vec![0.0, 3.0]);
        assert_eq!(outs[1].to_f64_vec(), vec![1.0, 2.0, 4.0, 5.0]);
    }
}
