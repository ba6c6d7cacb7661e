//! Pad in the modes constant, reflect, edge and wrap. Pads are the `paddings` (opset 1)
//! or `pads` (opset 2-10) attribute, then input 1 with the optional `constant_value`
//! (input 2) and `axes` (input 3, opset 18). Negative pads crop; the other side is then
//! padded relative to the cropped range.

use super::{distinct_axes, int_list, known_values, tensor};
use crate::bail_op;
use crate::ir::{numel, strides, DType, Data, Element, Tensor, ValueFact};
use crate::ops::{optional, required, FamilyRegistrar, InferInput, NodeCtx, OpResult};

pub(super) fn register(reg: &mut FamilyRegistrar) {
    reg.op("Pad", infer_pad, eval_pad);
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Constant,
    Reflect,
    Edge,
    Wrap,
}

/// The mode and the (begin, end) pad of every axis.
fn pad_plan(ctx: &NodeCtx, in_shape: &[usize], values: &[Option<&Tensor>]) -> OpResult<(Mode, Vec<(i64, i64)>)> {
    let mode = match ctx.attrs.string("mode", "constant")? {
        "constant" => Mode::Constant,
        "reflect" => Mode::Reflect,
        "edge" => Mode::Edge,
        "wrap" => Mode::Wrap,
        other => bail_op!("mode must be constant, reflect, edge or wrap, got {other:?}"),
    };
    let rank = in_shape.len();
    let (pads, axes): (Vec<i64>, Vec<usize>) = if ctx.opset < 11 {
        let name = if ctx.opset < 2 { "paddings" } else { "pads" };
        match ctx.attrs.ints_opt(name)? {
            Some(p) => (p.to_vec(), (0..rank).collect()),
            None => bail_op!("missing required attribute '{name}'"),
        }
    } else {
        let pads = int_list(required(values, 1)?, "pads")?;
        let axes = match optional(values, 3) {
            Some(t) => distinct_axes(&int_list(t, "axes")?, rank, "axis")?,
            None => (0..rank).collect(),
        };
        (pads, axes)
    };
    if pads.len() != 2 * axes.len() {
        bail_op!("pads has {} values but {} axes are padded (needs begin and end for each)", pads.len(), axes.len());
    }
    let mut per_axis = vec![(0, 0); rank];
    for (k, &a) in axes.iter().enumerate() {
        per_axis[a] = (pads[k], pads[k + axes.len()]);
    }
    for (a, (&dim, &(begin, end))) in in_shape.iter().zip(&per_axis).enumerate() {
        let kept = dim as i64 - (-begin).max(0) - (-end).max(0);
        if kept < 0 {
            bail_op!("pads ({begin}, {end}) crop more than the {dim} elements of axis {a}");
        }
        if kept == 0 && mode != Mode::Constant && (begin > 0 || end > 0) {
            bail_op!("{mode:?} padding of axis {a} needs at least one element to copy from");
        }
    }
    Ok((mode, per_axis))
}

fn out_shape(in_shape: &[usize], pads: &[(i64, i64)]) -> Vec<usize> {
    in_shape.iter().zip(pads).map(|(&d, &(b, e))| (d as i64 + b + e) as usize).collect()
}

/// For every output position along one axis, the input position it copies, or `None`
/// where the constant goes.
fn axis_map(dim: usize, (begin, end): (i64, i64), mode: Mode) -> Vec<Option<usize>> {
    let lo = (-begin).max(0);
    let kept = dim as i64 - lo - (-end).max(0);
    let out_len = dim as i64 + begin + end;
    (0..out_len)
        .map(|o| {
            let k = o - begin.max(0);
            let src = if (0..kept).contains(&k) {
                k
            } else {
                match mode {
                    Mode::Constant => return None,
                    Mode::Edge => k.clamp(0, kept - 1),
                    Mode::Wrap => k.rem_euclid(kept),
                    Mode::Reflect if kept == 1 => 0,
                    Mode::Reflect => {
                        let period = 2 * (kept - 1);
                        let m = k.rem_euclid(period);
                        if m < kept {
                            m
                        } else {
                            period - m
                        }
                    }
                }
            };
            Some((lo + src) as usize)
        })
        .collect()
}

/// Fills the output row by row: an outer index that lands in a pad gives a constant row,
/// otherwise the row is read through the last axis' map.
fn pad_typed<T: Element>(src: &[T], in_shape: &[usize], maps: &[Vec<Option<usize>>], fill: &Data) -> Data {
    let fill = T::slice(fill).expect("fill value cast to the data type")[0];
    let out_shape: Vec<usize> = maps.iter().map(Vec::len).collect();
    let Some((last_map, outer_maps)) = maps.split_last() else {
        return T::wrap(src.to_vec());
    };
    let total = numel(&out_shape);
    let mut out = Vec::with_capacity(total);
    if total == 0 {
        return T::wrap(out);
    }
    let in_strides = strides(in_shape);
    let row_len = in_shape[in_shape.len() - 1];
    let mut index = vec![0usize; outer_maps.len()];
    loop {
        let offset: Option<usize> =
            outer_maps.iter().zip(&index).zip(&in_strides).map(|((m, &i), &s)| m[i].map(|p| p * s)).sum();
        match offset {
            None => out.extend(std::iter::repeat_n(fill, last_map.len())),
            Some(off) => {
                let row = &src[off..off + row_len];
                out.extend(last_map.iter().map(|m| m.map_or(fill, |p| row[p])));
            }
        }
        let mut axis = index.len();
        loop {
            if axis == 0 {
                return T::wrap(out);
            }
            axis -= 1;
            index[axis] += 1;
            if index[axis] < outer_maps[axis].len() {
                break;
            }
            index[axis] = 0;
        }
    }
}

/// The constant to pad with, as a one-element `Data` of the input's type.
fn fill_value(ctx: &NodeCtx, dtype: DType, values: &[Option<&Tensor>]) -> OpResult<Data> {
    if ctx.opset < 11 {
        let value = ctx.attrs.float("value", 0.0)?;
        return Ok(Data::from_f64_iter(dtype, std::iter::once(value as f64)));
    }
    match optional(values, 2) {
        None => Ok(Data::zeros(dtype, 1)),
        Some(t) if t.len() == 1 => Ok(t.data().cast(dtype)),
        Some(t) => bail_op!("constant_value must hold one element, got shape {:?}", t.shape()),
    }
}

fn infer_pad(ctx: &NodeCtx, inputs: &[Option<InferInput>]) -> OpResult<Vec<ValueFact>> {
    let x = required(inputs, 0)?.fact;
    let values = known_values(inputs, &[(1, "pads"), (3, "axes")])?;
    let (_, pads) = pad_plan(ctx, &x.shape, &values)?;
    Ok(vec![ValueFact::new(x.dtype, out_shape(&x.shape, &pads))])
}

fn eval_pad(ctx: &NodeCtx, inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
    let x = *required(inputs, 0)?;
    let (mode, pads) = pad_plan(ctx, x.shape(), inputs)?;
    let fill = fill_value(ctx, x.dtype(), inputs)?;
    let maps: Vec<Vec<Option<usize>>> = x.shape().iter().zip(&pads).map(|(&d, &p)| axis_map(d, p, mode)).collect();
    let data = crate::with_data!(x.data(), v => pad_typed(v, x.shape(), &maps, &fill));
    Ok(vec![tensor(out_shape(x.shape(), &pads), data)])
}

#[cfg(test)]
mod tests {
    use super::super::test_util::{i64s, ints, iota, run};
    use super::{axis_map, Mode};
    use crate::ir::{Attr, Tensor};

    fn pad(x: &Tensor, mode: &str, pads: &[i64], value: Option<f32>, axes: Option<&[i64]>) -> Tensor {
        let p = i64s(pads);
        let v = value.map(Tensor::scalar);
        let a = axes.map(i64s);
        run("Pad", 18, &[("mode", Attr::String(mode.into()))], &[Some(x), Some(&p), v.as_ref(), a.as_ref()])
            .unwrap()
            .remove(0)
    }

    fn some(v: &[usize]) -> Vec<Option<usize>> {
        v.iter().map(|&x| Some(x)).collect()
    }

    #[test]
    fn axis_maps_follow_numpy_modes() {
        assert_eq!(axis_map(3, (2, 1), Mode::Constant), vec![None, None, Some(0), Some(1), Some(2), None]);
        assert_eq!(axis_map(3, (2, 2), Mode::Edge), some(&[0, 0, 0, 1, 2, 2, 2]));
        assert_eq!(axis_map(3, (2, 2), Mode::Reflect), some(&[2, 1, 0, 1, 2, 1, 0]));
        assert_eq!(axis_map(3, (4, 0), Mode::Reflect), some(&[0, 1, 2, 1, 0, 1, 2]));
        assert_eq!(axis_map(3, (2, 2), Mode::Wrap), some(&[1, 2, 0, 1, 2, 0, 1]));
        assert_eq!(axis_map(4, (-1, -2), Mode::Constant), some(&[1]));
        assert_eq!(axis_map(4, (-1, 2), Mode::Edge), some(&[1, 2, 3, 3, 3]));
    }

    #[test]
    fn constant_pad_with_value_and_axes() {
        let x = iota(&[2, 2]);
        let y = pad(&x, "constant", &[1, 0, 0, 1], Some(9.0), None);
        assert_eq!(y.shape(), &[3, 3]);
        assert_eq!(y.to_f64_vec(), vec![9.0, 9.0, 9.0, 0.0, 1.0, 9.0, 2.0, 3.0, 9.0]);
        let y = pad(&x, "constant", &[1, 1], None, Some(&[-1]));
        assert_eq!(y.to_f64_vec(), vec![0.0, 0.0, 1.0, 0.0, 0.0, 2.0, 3.0, 0.0]);
    }

    #[test]
    fn reflect_and_edge_on_integers() {
        let x = Tensor::from_vec(vec![1, 3], vec![1i32, 2, 3]);
        let p = i64s(&[0, 2, 0, 1]);
        let reflect = run("Pad", 13, &[("mode", Attr::String("reflect".into()))], &[Some(&x), Some(&p)]).unwrap();
        assert_eq!(reflect[0].to_i64_vec(), vec![3, 2, 1, 2, 3, 2]);
        let edge = run("Pad", 13, &[("mode", Attr::String("edge".into()))], &[Some(&x), Some(&p)]).unwrap();
        assert_eq!(edge[0].to_i64_vec(), vec![1, 1, 1, 2, 3, 3]);
    }

    #[test]
    fn pads_attribute_before_opset_11() {
        let x = iota(&[2]);
        let y = run("Pad", 2, &[("pads", ints(&[1, 1])), ("value", Attr::Float(-1.0))], &[Some(&x)]).unwrap();
        assert_eq!(y[0].to_f64_vec(), vec![-1.0, 0.0, 1.0, -1.0]);
    }

    #[test]
    fn pad_rejects_bad_pads() {
        let x = iota(&[2, 2]);
        let p = i64s(&[1, 1]);
        assert!(run("Pad", 13, &[], &[Some(&x), Some(&p)]).is_err());
        let crop = i64s(&[-3, 0, 0, 0]);
        assert!(run("Pad", 13, &[], &[Some(&x), Some(&crop)]).is_err());
    }
}
