//! Shape family: ops that move elements without computing on them. Transpose,
//! DepthToSpace and SpaceToDepth (`transpose`), Reshape, Flatten, Squeeze and Unsqueeze
//! (`reshape`), Concat and Split (`concat`), Slice (`slice`), Pad (`pad`), Expand and
//! Tile (`expand`).
//!
//! Every op works for every element type: the kernels are generic over the element and
//! dispatched with `map_data!`. Most of them are one [`strided_copy`]: a row-major walk
//! of a strided view of the input that copies contiguous runs with `extend_from_slice`.
//!
//! Shape inference and evaluation share one "plan" function per op, which takes the input
//! shape and the values of the parameter inputs (target shape, slice bounds, pads, ...).
//! Under inference those values come from constant inputs ([`known_values`]), so every
//! output shape is exact and static.

mod concat;
mod expand;
mod pad;
mod reshape;
mod slice;
mod transpose;

use super::{constant_input, optional, FamilyRegistrar, InferInput, OpResult};
use crate::bail_op;
use crate::ir::{normalize_axis, numel, DType, Data, Tensor};

pub(super) fn register(reg: &mut FamilyRegistrar) {
    transpose::register(reg);
    reshape::register(reg);
    concat::register(reg);
    slice::register(reg);
    pad::register(reg);
    expand::register(reg);
}

/// The input values an op's plan sees under shape inference: the constant value of every
/// input that has one. The inputs named in `needed` (index, what) must be constant
/// when they are present, since the output shape depends on them.
fn known_values<'a>(
    inputs: &'a [Option<InferInput<'a>>],
    needed: &[(usize, &str)],
) -> OpResult<Vec<Option<&'a Tensor>>> {
    let mut values: Vec<Option<&Tensor>> = inputs.iter().map(|i| i.and_then(|i| i.value)).collect();
    for &(index, what) in needed {
        if optional(inputs, index).is_some() {
            values[index] = Some(constant_input(inputs, index, what)?);
        }
    }
    Ok(values)
}

/// The elements of an integer tensor of rank 0 or 1 (a shape, axes, pads, ...).
fn int_list(t: &Tensor, what: &str) -> OpResult<Vec<i64>> {
    if !matches!(t.dtype(), DType::I64 | DType::I32) {
        bail_op!("{what} must be an int64 or int32 tensor, got {}", t.dtype());
    }
    if t.rank() > 1 {
        bail_op!("{what} must be 1-D, got shape {:?}", t.shape());
    }
    Ok(t.to_i64_vec())
}

/// Normalizes a possibly negative axis against `rank`, naming the op's attribute in errors.
fn axis_in(axis: i64, rank: usize, what: &str) -> OpResult<usize> {
    match normalize_axis(axis, rank) {
        Some(a) => Ok(a),
        None => bail_op!("{what} {axis} is out of range for rank {rank}"),
    }
}

/// Normalizes a list of axes against `rank` and rejects duplicates.
fn distinct_axes(axes: &[i64], rank: usize, what: &str) -> OpResult<Vec<usize>> {
    let mut seen = vec![false; rank];
    let mut out = Vec::with_capacity(axes.len());
    for &axis in axes {
        let a = axis_in(axis, rank, what)?;
        if std::mem::replace(&mut seen[a], true) {
            bail_op!("{what} {axis} is given twice");
        }
        out.push(a);
    }
    Ok(out)
}

/// Builds the output tensor; `data` was produced for exactly `shape`.
fn tensor(shape: Vec<usize>, data: Data) -> Tensor {
    Tensor::new(shape, data).expect("kernel output length matches the planned shape")
}

/// Copies the strided view `src[base + Σ i_k · strides[k]]`, `i` ranging over `shape`,
/// into a new row-major vector. Strides may be zero (broadcast) or negative (reversed),
/// as long as every addressed element lies inside `src`.
///
/// Unit axes are dropped and neighbouring axes that address memory as one axis are
/// merged first, so that the innermost loop is as long as possible; when its stride is 1
/// (a transpose that keeps the last axis, e.g. the [0,2,1,3] of attention heads, a slice
/// with step 1 on the last axis, an expand of leading axes) whole runs are copied at once.
fn strided_copy<T: Copy>(src: &[T], base: usize, shape: &[usize], strides: &[isize]) -> Vec<T> {
    debug_assert_eq!(shape.len(), strides.len());
    let n = numel(shape);
    if n == 0 {
        return vec![];
    }
    // (length, stride) per axis, outermost first.
    let mut dims: Vec<(usize, isize)> = Vec::with_capacity(shape.len());
    for (&len, &stride) in shape.iter().zip(strides) {
        if len == 1 {
            continue;
        }
        match dims.last_mut() {
            Some(outer) if outer.1 == stride * len as isize => *outer = (outer.0 * len, stride),
            _ => dims.push((len, stride)),
        }
    }
    let mut out = Vec::with_capacity(n);
    let Some((&(inner_len, inner_stride), outer)) = dims.split_last() else {
        out.push(src[base]);
        return out;
    };
    let mut index = vec![0usize; outer.len()];
    let mut pos = base as isize;
    loop {
        let start = pos as usize;
        if inner_stride == 1 {
            out.extend_from_slice(&src[start..start + inner_len]);
        } else {
            out.extend((0..inner_len as isize).map(|j| src[(pos + j * inner_stride) as usize]));
        }
        // Advance the outer index like an odometer, innermost axis first.
        let mut axis = outer.len();
        loop {
            if axis == 0 {
                return out;
            }
            axis -= 1;
            index[axis] += 1;
            pos += outer[axis].1;
            if index[axis] < outer[axis].0 {
                break;
            }
            pos -= outer[axis].1 * outer[axis].0 as isize;
            index[axis] = 0;
        }
    }
}

/// [`strided_copy`] on untyped storage.
fn strided(data: &Data, base: usize, shape: &[usize], strides: &[isize]) -> Data {
    crate::map_data!(data, v => strided_copy(v, base, shape, strides))
}

#[cfg(test)]
pub(super) mod test_util {
    //! Running one node of the shape and index families in unit tests.
    use crate::ir::{Attr, Attrs, Tensor, ValueFact};
    use crate::ops::{registry, InferInput, NodeCtx, OpResult};

    /// Runs `op` on `inputs` through both hooks: infer with every input constant, then
    /// eval, and checks that eval produced what infer promised.
    pub fn run(op: &str, opset: i64, attrs: &[(&str, Attr)], inputs: &[Option<&Tensor>]) -> OpResult<Vec<Tensor>> {
        run_n(op, opset, attrs, inputs, 1)
    }

    pub fn run_n(
        op: &str,
        opset: i64,
        attrs: &[(&str, Attr)],
        inputs: &[Option<&Tensor>],
        n_outputs: usize,
    ) -> OpResult<Vec<Tensor>> {
        let def = registry().get(op).expect("op is registered");
        let mut a = Attrs::new();
        for (name, value) in attrs {
            a.insert(*name, value.clone());
        }
        let ctx = NodeCtx { name: "test", attrs: &a, opset, n_outputs };
        let facts: Vec<Option<ValueFact>> = inputs.iter().map(|t| t.map(ValueFact::of)).collect();
        let infer_inputs: Vec<Option<InferInput>> =
            inputs.iter().zip(&facts).map(|(t, f)| f.as_ref().map(|fact| InferInput { fact, value: *t })).collect();
        let inferred = (def.infer)(&ctx, &infer_inputs)?;
        let out = (def.eval)(&ctx, inputs)?;
        assert!(out.len() >= n_outputs && inferred.len() >= n_outputs, "{op}: too few outputs");
        for (t, f) in out.iter().zip(&inferred).take(n_outputs) {
            assert_eq!(&ValueFact::of(t), f, "{op}: eval disagrees with infer");
        }
        Ok(out)
    }

    pub fn i64s(v: &[i64]) -> Tensor {
        Tensor::from_vec(vec![v.len()], v.to_vec())
    }

    /// 0, 1, 2, ... as f32 in `shape`.
    pub fn iota(shape: &[usize]) -> Tensor {
        let n: usize = shape.iter().product();
        Tensor::from_vec(shape.to_vec(), (0..n).map(|x| x as f32).collect())
    }

    pub fn ints(v: &[i64]) -> Attr {
        Attr::Ints(v.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::strides;
    use proptest::prelude::*;

    /// The obvious element-by-element walk that `strided_copy` must agree with.
    fn naive(src: &[u32], base: usize, shape: &[usize], st: &[isize]) -> Vec<u32> {
        let n = numel(shape);
        let out_strides = strides(shape);
        (0..n)
            .map(|flat| {
                let off: isize = (0..shape.len()).map(|k| ((flat / out_strides[k]) % shape[k]) as isize * st[k]).sum();
                src[(base as isize + off) as usize]
            })
            .collect()
    }

    proptest! {
        /// Random permutations of random shapes (with unit axes), read through
        /// `strided_copy`, equal the naive walk.
        #[test]
        fn strided_copy_matches_naive_permutation(
            shape in proptest::collection::vec(1usize..5, 0..6),
            seed in any::<u64>(),
        ) {
            let rank = shape.len();
            let mut perm: Vec<usize> = (0..rank).collect();
            let mut s = seed;
            for i in (1..rank).rev() {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                perm.swap(i, (s >> 33) as usize % (i + 1));
            }
            let src: Vec<u32> = (0..numel(&shape) as u32).collect();
            let st = strides(&shape);
            let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
            let out_st: Vec<isize> = perm.iter().map(|&p| st[p] as isize).collect();
            prop_assert_eq!(strided_copy(&src, 0, &out_shape, &out_st), naive(&src, 0, &out_shape, &out_st));
        }

        /// Reversed and broadcast (zero-stride) axes as well.
        #[test]
        fn strided_copy_matches_naive_reverse_and_broadcast(
            shape in proptest::collection::vec(1usize..4, 1..5),
            mode in proptest::collection::vec(0u8..3, 5),
        ) {
            let src: Vec<u32> = (0..numel(&shape) as u32).collect();
            let st = strides(&shape);
            let mut base = 0usize;
            let mut view = vec![];
            for (k, &d) in shape.iter().enumerate() {
                view.push(match mode[k] {
                    0 => st[k] as isize,
                    1 => { base += (d - 1) * st[k]; -(st[k] as isize) }
                    _ => 0,
                });
            }
            prop_assert_eq!(strided_copy(&src, base, &shape, &view), naive(&src, base, &shape, &view));
        }
    }

    #[test]
    fn strided_copy_of_a_scalar_and_of_nothing() {
        assert_eq!(strided_copy(&[7u8], 0, &[], &[]), vec![7]);
        assert_eq!(strided_copy::<u8>(&[], 0, &[0, 3], &[3, 1]), Vec::<u8>::new());
    }
}
