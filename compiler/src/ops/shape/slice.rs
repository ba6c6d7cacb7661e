//! Slice: a strided view of the input (negative steps read backwards), copied with
//! `strided_copy`. Bounds are attributes before opset 10 and inputs from then on.

use super::{distinct_axes, int_list, known_values, strided, tensor};
use crate::bail_op;
use crate::ir::{strides, Tensor, ValueFact};
use crate::ops::{optional, required, FamilyRegistrar, InferInput, NodeCtx, OpResult};

pub(super) fn register(reg: &mut FamilyRegistrar) {
    reg.op("Slice", infer_slice, eval_slice);
}

/// The view a Slice reads: output shape, flat offset of its first element and the
/// input stride (in elements, negative for negative steps) of every output axis.
#[derive(Debug, PartialEq)]
struct SliceView {
    shape: Vec<usize>,
    base: usize,
    strides: Vec<isize>,
}

/// starts, ends, axes (None: the leading axes) and steps (None: all 1).
type SliceParams = (Vec<i64>, Vec<i64>, Option<Vec<i64>>, Option<Vec<i64>>);

fn slice_params(ctx: &NodeCtx, values: &[Option<&Tensor>]) -> OpResult<SliceParams> {
    if ctx.opset < 10 {
        let attr = |name: &str| -> OpResult<Option<Vec<i64>>> { Ok(ctx.attrs.ints_opt(name)?.map(<[i64]>::to_vec)) };
        let starts = attr("starts")?.ok_or_else(|| crate::ops::OpError::new("missing required attribute 'starts'"))?;
        let ends = attr("ends")?.ok_or_else(|| crate::ops::OpError::new("missing required attribute 'ends'"))?;
        // An empty `axes` list means the default, as in the ONNX reference.
        let axes = attr("axes")?.filter(|a| !a.is_empty());
        return Ok((starts, ends, axes, None));
    }
    let starts = int_list(required(values, 1)?, "starts")?;
    let ends = int_list(required(values, 2)?, "ends")?;
    let axes = optional(values, 3).map(|t| int_list(t, "axes")).transpose()?;
    let steps = optional(values, 4).map(|t| int_list(t, "steps")).transpose()?;
    Ok((starts, ends, axes, steps))
}

/// Clamps start and end the way numpy and ONNX do: negative values count from the end,
/// then start lies in [0, dim] (step > 0) or [0, dim-1] (step < 0) and end in [0, dim]
/// or [-1, dim-1]. Returns the first index and the number of elements.
fn clamp_range(start: i64, end: i64, step: i64, dim: usize) -> (i128, usize) {
    let (start, end, step, dim) = (start as i128, end as i128, step as i128, dim as i128);
    let start = if start < 0 { start + dim } else { start };
    let end = if end < 0 { end + dim } else { end };
    if step > 0 {
        let (start, end) = (start.max(0).min(dim), end.max(0).min(dim));
        let len = if end > start { (end - start - 1) / step + 1 } else { 0 };
        (start, len as usize)
    } else {
        let (start, end) = (start.max(0).min(dim - 1), end.max(-1).min(dim - 1));
        let len = if start > end { (start - end - 1) / -step + 1 } else { 0 };
        (start, len as usize)
    }
}

fn slice_plan(ctx: &NodeCtx, in_shape: &[usize], values: &[Option<&Tensor>]) -> OpResult<SliceView> {
    let (starts, ends, axes, steps) = slice_params(ctx, values)?;
    let rank = in_shape.len();
    let n = starts.len();
    let axes = axes.unwrap_or_else(|| (0..n as i64).collect());
    let steps = steps.unwrap_or_else(|| vec![1; n]);
    if ends.len() != n || axes.len() != n || steps.len() != n {
        bail_op!(
            "starts, ends, axes and steps must have the same length, got {}, {}, {} and {}",
            n,
            ends.len(),
            axes.len(),
            steps.len()
        );
    }
    let axes = distinct_axes(&axes, rank, "axis")?;
    let in_strides = strides(in_shape);
    let mut view =
        SliceView { shape: in_shape.to_vec(), base: 0, strides: in_strides.iter().map(|&s| s as isize).collect() };
    for k in 0..n {
        let (a, step) = (axes[k], steps[k]);
        if step == 0 {
            bail_op!("step of axis {a} is 0");
        }
        let (start, len) = clamp_range(starts[k], ends[k], step, in_shape[a]);
        view.shape[a] = len;
        if len > 0 {
            view.base += start as usize * in_strides[a];
        }
        if len > 1 {
            // In range: (len - 1) * step stays inside the axis.
            view.strides[a] = in_strides[a] as isize * step as isize;
        }
    }
    Ok(view)
}

fn infer_slice(ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    let x = required(inputs, 0)?.fact;
    let values = known_values(inputs, &[(1, "starts"), (2, "ends"), (3, "axes"), (4, "steps")])?;
    Ok(vec![ValueFact::new(x.dtype, slice_plan(ctx, &x.shape, &values)?.shape)])
}

fn eval_slice(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    let x = *required(inputs, 0)?;
    let view = slice_plan(ctx, x.shape(), inputs)?;
    let data = strided(x.data(), view.base, &view.shape, &view.strides);
    Ok(vec![tensor(view.shape, data)])
}

#[cfg(test)]
mod tests {
    use super::super::test_util::{i64s, ints, iota, run};
    use super::clamp_range;

    fn slice(
        x: &crate::ir::Tensor,
        starts: &[i64],
        ends: &[i64],
        axes: Option<&[i64]>,
        steps: Option<&[i64]>,
    ) -> (Vec<usize>, Vec<f64>) {
        let (s, e) = (i64s(starts), i64s(ends));
        let a = axes.map(i64s);
        let st = steps.map(i64s);
        let mut inputs = vec![Some(x), Some(&s), Some(&e), a.as_ref()];
        if st.is_some() {
            inputs.push(st.as_ref());
        }
        let y = run("Slice", 13, &[], &inputs).unwrap().remove(0);
        (y.shape().to_vec(), y.to_f64_vec())
    }

    #[test]
    fn clamping_follows_numpy() {
        assert_eq!(clamp_range(1, 1000, 1, 5), (1, 4));
        assert_eq!(clamp_range(-1000, 2, 1, 5), (0, 2));
        assert_eq!(clamp_range(10, 20, 1, 5), (5, 0));
        assert_eq!(clamp_range(-1, i64::MIN, -1, 5), (4, 5));
        assert_eq!(clamp_range(i64::MAX, -1000, -2, 5), (4, 3));
        assert_eq!(clamp_range(0, i64::MAX, i64::MAX, 5), (0, 1));
        assert_eq!(clamp_range(3, 1, 1, 5), (3, 0));
        assert_eq!(clamp_range(0, 5, -1, 0), (-1, 0));
    }

    #[test]
    fn slice_with_steps_negative_steps_and_axes() {
        let x = iota(&[3, 4]);
        assert_eq!(slice(&x, &[0, 1], &[2, 3], None, None), (vec![2, 2], vec![1.0, 2.0, 5.0, 6.0]));
        assert_eq!(
            slice(&x, &[-1], &[i64::MIN], Some(&[1]), Some(&[-2])),
            (vec![3, 2], vec![3.0, 1.0, 7.0, 5.0, 11.0, 9.0])
        );
        assert_eq!(slice(&x, &[1], &[1000], Some(&[-2]), None), (vec![2, 4], (4..12).map(f64::from).collect()));
        assert_eq!(slice(&x, &[5], &[10], Some(&[0]), None).0, vec![0, 4]);
    }

    #[test]
    fn slice_opset_1_reads_attributes() {
        let x = iota(&[3, 4]);
        let attrs = [("starts", ints(&[1])), ("ends", ints(&[2])), ("axes", ints(&[1]))];
        let y = run("Slice", 1, &attrs, &[Some(&x)]).unwrap().remove(0);
        assert_eq!((y.shape().to_vec(), y.to_f64_vec()), (vec![3, 1], vec![1.0, 5.0, 9.0]));
    }

    #[test]
    fn slice_rejects_zero_steps_and_repeated_axes() {
        let x = iota(&[3, 4]);
        let (s, e) = (i64s(&[0, 0]), i64s(&[1, 1]));
        assert!(run("Slice", 13, &[], &[Some(&x), Some(&s), Some(&e), Some(&i64s(&[0, 0]))]).is_err());
        let zero = i64s(&[0, 0]);
        assert!(run("Slice", 13, &[], &[Some(&x), Some(&s), Some(&e), None, Some(&zero)]).is_err());
    }
}
