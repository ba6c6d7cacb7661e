//! Elementwise machinery shared by the arith, activation and logic families:
//!
//! - [`Broadcast`]: how K operands broadcast to one output. Dimensions are collapsed so
//!   that the output is a list of rows whose innermost run has, per operand, stride 1
//!   (the operand varies along it) or stride 0 (it is broadcast). Same-shape operands,
//!   scalars, bias rows (`[32,128,384] + [384]`) and columns (`[32,128,384] - [32,128,1]`)
//!   all become one tight loop per row; only the row starts come from
//!   [`broadcast_index_map`], over the collapsed outer dimensions.
//! - Kernels ([`map`], [`zip2`], [`zip3`]) that fill the output chunk by chunk, on the
//!   rayon pool when the output is large.
//! - [`Num`]: ONNX arithmetic per element type (integers wrap, f16/bf16 go through f32).
//! - Macros that dispatch on element types: `numeric_pair!`, `any_pair!`, `numeric_one!`,
//!   `map_float!`.

use crate::ir::{broadcast_index_map, numel, Element, Tensor};
use crate::ops::{OpError, OpResult};
use half::{bf16, f16};
use rayon::prelude::*;

/// Outputs smaller than this are computed on the calling thread.
const PAR_MIN_ELEMENTS: usize = 1 << 16;
/// Output elements per parallel task.
const PAR_CHUNK: usize = 1 << 14;

/// Allocates `n` outputs and fills them with `fill(chunk, flat_start_of_chunk)`, split
/// into chunks across the rayon pool when `n` is large.
pub(in crate::ops) fn fill_chunked<O: Copy + Default + Send>(
    n: usize,
    fill: impl Fn(&mut [O], usize) + Sync,
) -> Vec<O> {
    let mut out = vec![O::default(); n];
    if n >= PAR_MIN_ELEMENTS {
        out.par_chunks_mut(PAR_CHUNK).enumerate().for_each(|(k, chunk)| fill(chunk, k * PAR_CHUNK));
    } else {
        fill(&mut out, 0);
    }
    out
}

/// `f` applied to every element.
pub(in crate::ops) fn map<A: Copy + Sync, O: Copy + Default + Send>(a: &[A], f: impl Fn(A) -> O + Sync) -> Vec<O> {
    fill_chunked(a.len(), |chunk, start| {
        for (o, &x) in chunk.iter_mut().zip(&a[start..]) {
            *o = f(x);
        }
    })
}

/// How K operand shapes broadcast (numpy rules) to one output shape, collapsed into
/// rows of `inner` elements.
#[derive(Clone, Debug)]
pub(in crate::ops) struct Broadcast<const K: usize> {
    pub out_shape: Vec<usize>,
    /// Length of the innermost collapsed run (0 only for an empty output).
    inner: usize,
    /// Per operand: 1 when it varies along the inner run, 0 when broadcast along it.
    steps: [usize; K],
    /// Per operand: the flat offset where each output row starts.
    row_starts: [Vec<usize>; K],
}

impl<const K: usize> Broadcast<K> {
    pub fn new(shapes: [&[usize]; K]) -> OpResult<Self> {
        let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
        let dim = |k: usize, i: usize| -> usize {
            let s = shapes[k];
            if i + s.len() >= rank {
                s[i + s.len() - rank]
            } else {
                1
            }
        };
        let mut out_shape = vec![1; rank];
        for (i, out) in out_shape.iter_mut().enumerate() {
            for k in 0..K {
                let d = dim(k, i);
                if d != 1 {
                    if *out != 1 && *out != d {
                        return Err(broadcast_error(&shapes));
                    }
                    *out = d;
                }
            }
        }
        if numel(&out_shape) == 0 {
            return Ok(Broadcast { out_shape, inner: 0, steps: [0; K], row_starts: std::array::from_fn(|_| vec![]) });
        }
        // Collapse: drop size-1 output axes, merge neighbours that every operand treats
        // alike (varies along both, or is broadcast along both).
        let mut merged: Vec<(usize, [bool; K])> = vec![];
        for (i, &size) in out_shape.iter().enumerate() {
            if size == 1 {
                continue;
            }
            let varies: [bool; K] = std::array::from_fn(|k| dim(k, i) != 1);
            match merged.last_mut() {
                Some((s, v)) if *v == varies => *s *= size,
                _ => merged.push((size, varies)),
            }
        }
        let Some(&(inner, inner_varies)) = merged.last() else {
            // Every operand holds one element.
            return Ok(Broadcast { out_shape, inner: 1, steps: [0; K], row_starts: std::array::from_fn(|_| vec![0]) });
        };
        let outer = &merged[..merged.len() - 1];
        let outer_out: Vec<usize> = outer.iter().map(|(s, _)| *s).collect();
        let steps: [usize; K] = std::array::from_fn(|k| inner_varies[k] as usize);
        let row_starts = std::array::from_fn(|k| {
            let in_outer: Vec<usize> = outer.iter().map(|(s, v)| if v[k] { *s } else { 1 }).collect();
            let row_len = if inner_varies[k] { inner } else { 1 };
            let mut starts = broadcast_index_map(&in_outer, &outer_out);
            starts.iter_mut().for_each(|s| *s *= row_len);
            starts
        });
        Ok(Broadcast { out_shape, inner, steps, row_starts })
    }

    pub fn len(&self) -> usize {
        numel(&self.out_shape)
    }

    /// Visits output positions `start..start + len` as row segments:
    /// `segment(position_in_range, segment_len, operand_offsets)`.
    fn segments(&self, start: usize, len: usize, mut segment: impl FnMut(usize, usize, [usize; K])) {
        if len == 0 {
            return;
        }
        let (mut row, mut col) = (start / self.inner, start % self.inner);
        let mut pos = 0;
        while pos < len {
            let n = (self.inner - col).min(len - pos);
            let offsets = std::array::from_fn(|k| self.row_starts[k][row] + col * self.steps[k]);
            segment(pos, n, offsets);
            pos += n;
            row += 1;
            col = 0;
        }
    }

    /// Builds the output by calling `fill(out_segment, operand_offsets)` per row segment.
    fn fill<O: Copy + Default + Send>(&self, fill: impl Fn(&mut [O], [usize; K]) + Sync) -> Vec<O> {
        fill_chunked(self.len(), |chunk, start| {
            self.segments(start, chunk.len(), |pos, n, offsets| fill(&mut chunk[pos..pos + n], offsets))
        })
    }
}

fn broadcast_error(shapes: &[&[usize]]) -> OpError {
    let list: Vec<String> = shapes.iter().map(|s| format!("{s:?}")).collect();
    OpError::new(format!("cannot broadcast shapes {}", list.join(" and ")))
}

/// `f(a, b)` with broadcasting, as planned by `plan` (built from `a` and `b`'s shapes).
pub(in crate::ops) fn zip2<A: Copy + Sync, B: Copy + Sync, O: Copy + Default + Send>(
    plan: &Broadcast<2>,
    a: &[A],
    b: &[B],
    f: impl Fn(A, B) -> O + Sync,
) -> Vec<O> {
    let [step_a, step_b] = plan.steps;
    plan.fill(|out, [oa, ob]| {
        let n = out.len();
        match (step_a, step_b) {
            (1, 1) => {
                for ((o, &x), &y) in out.iter_mut().zip(&a[oa..oa + n]).zip(&b[ob..ob + n]) {
                    *o = f(x, y);
                }
            }
            (1, _) => {
                let y = b[ob];
                for (o, &x) in out.iter_mut().zip(&a[oa..oa + n]) {
                    *o = f(x, y);
                }
            }
            (_, 1) => {
                let x = a[oa];
                for (o, &y) in out.iter_mut().zip(&b[ob..ob + n]) {
                    *o = f(x, y);
                }
            }
            _ => out.fill(f(a[oa], b[ob])),
        }
    })
}

/// `f(a, b, c)` with broadcasting, as planned by `plan`.
pub(in crate::ops) fn zip3<A: Copy + Sync, B: Copy + Sync, C: Copy + Sync, O: Copy + Default + Send>(
    plan: &Broadcast<3>,
    a: &[A],
    b: &[B],
    c: &[C],
    f: impl Fn(A, B, C) -> O + Sync,
) -> Vec<O> {
    let [sa, sb, sc] = plan.steps;
    plan.fill(|out, [oa, ob, oc]| {
        let n = out.len();
        if (sa, sb, sc) == (1, 1, 1) {
            for (((o, &x), &y), &z) in out.iter_mut().zip(&a[oa..oa + n]).zip(&b[ob..ob + n]).zip(&c[oc..oc + n]) {
                *o = f(x, y, z);
            }
        } else {
            for (i, o) in out.iter_mut().enumerate() {
                *o = f(a[oa + i * sa], b[ob + i * sb], c[oc + i * sc]);
            }
        }
    })
}

/// A tensor of `shape` from a vector computed for it.
pub(in crate::ops) fn tensor_of<T: Element>(shape: &[usize], v: Vec<T>) -> Tensor {
    Tensor::from_vec(shape.to_vec(), v)
}

/// Larger of two values; NaN when either is NaN (numpy `maximum`).
#[inline]
pub(in crate::ops) fn max_nan<T: PartialOrd>(a: T, b: T) -> T {
    #[allow(clippy::eq_op)]
    if a >= b || a != a {
        a
    } else {
        b
    }
}

/// Smaller of two values; NaN when either is NaN (numpy `minimum`).
#[inline]
pub(in crate::ops) fn min_nan<T: PartialOrd>(a: T, b: T) -> T {
    #[allow(clippy::eq_op)]
    if a <= b || a != a {
        a
    } else {
        b
    }
}

/// Arithmetic on one element type with ONNX (numpy) semantics: integers wrap around,
/// integer division truncates toward zero, f16 and bf16 compute in f32.
pub(in crate::ops) trait Num: Element {
    fn add(self, other: Self) -> Self;
    fn sub(self, other: Self) -> Self;
    fn mul(self, other: Self) -> Self;
    /// Integer division by zero must be ruled out by the caller (see `is_int_zero`).
    fn div(self, other: Self) -> Self;
    fn neg(self) -> Self;
    fn abs(self) -> Self;
    /// True for an integer zero (a divisor integer division cannot take).
    fn is_int_zero(self) -> bool;
    /// `self` raised to an integer power (integers wrap; negative powers truncate).
    fn powi64(self, e: i64) -> Self;
}

macro_rules! impl_num_int {
    ($($t:ty, $abs:expr);*) => {$(
        impl Num for $t {
            #[inline] fn add(self, o: Self) -> Self { self.wrapping_add(o) }
            #[inline] fn sub(self, o: Self) -> Self { self.wrapping_sub(o) }
            #[inline] fn mul(self, o: Self) -> Self { self.wrapping_mul(o) }
            #[inline] fn div(self, o: Self) -> Self { if o == 0 { 0 } else { self.wrapping_div(o) } }
            #[inline] fn neg(self) -> Self { self.wrapping_neg() }
            #[inline] fn abs(self) -> Self { let f: fn($t) -> $t = $abs; f(self) }
            #[inline] fn is_int_zero(self) -> bool { self == 0 }
            fn powi64(self, e: i64) -> Self {
                if e < 0 {
                    // 1/x^|e| truncated toward zero: only 1 and -1 survive.
                    return match self as i64 {
                        1 => 1,
                        -1 => if e % 2 == 0 { 1 } else { self },
                        _ => 0,
                    };
                }
                let (mut base, mut e, mut acc) = (self, e as u64, 1 as $t);
                while e > 0 {
                    if e & 1 == 1 { acc = acc.wrapping_mul(base); }
                    base = base.wrapping_mul(base);
                    e >>= 1;
                }
                acc
            }
        }
    )*};
}

impl_num_int!(u8, |x| x; u16, |x| x; u32, |x| x; u64, |x| x;
    i8, |x: i8| x.wrapping_abs(); i16, |x: i16| x.wrapping_abs(); i32, |x: i32| x.wrapping_abs(); i64, |x: i64| x.wrapping_abs());

macro_rules! impl_num_float {
    ($($t:ty),*) => {$(
        impl Num for $t {
            #[inline] fn add(self, o: Self) -> Self { self + o }
            #[inline] fn sub(self, o: Self) -> Self { self - o }
            #[inline] fn mul(self, o: Self) -> Self { self * o }
            #[inline] fn div(self, o: Self) -> Self { self / o }
            #[inline] fn neg(self) -> Self { -self }
            #[inline] fn abs(self) -> Self { self.abs() }
            #[inline] fn is_int_zero(self) -> bool { false }
            fn powi64(self, e: i64) -> Self { self.powf(e as $t) }
        }
    )*};
}

impl_num_float!(f32, f64);

macro_rules! impl_num_half {
    ($($t:ty),*) => {$(
        impl Num for $t {
            #[inline] fn add(self, o: Self) -> Self { <$t>::from_f32(self.to_f32() + o.to_f32()) }
            #[inline] fn sub(self, o: Self) -> Self { <$t>::from_f32(self.to_f32() - o.to_f32()) }
            #[inline] fn mul(self, o: Self) -> Self { <$t>::from_f32(self.to_f32() * o.to_f32()) }
            #[inline] fn div(self, o: Self) -> Self { <$t>::from_f32(self.to_f32() / o.to_f32()) }
            #[inline] fn neg(self) -> Self { -self }
            #[inline] fn abs(self) -> Self { <$t>::from_f32(self.to_f32().abs()) }
            #[inline] fn is_int_zero(self) -> bool { false }
            fn powi64(self, e: i64) -> Self { <$t>::from_f32(self.to_f32().powf(e as f32)) }
        }
    )*};
}

impl_num_half!(f16, bf16);

/// Matches two `Data` holding the same numeric (non-bool) type, binding their vectors
/// to `$x` and `$y` for `$body`; evaluates `$fallback` for any other pair.
macro_rules! numeric_pair {
    ($pair:expr, |$x:ident, $y:ident| $body:expr, else $fallback:expr) => {{
        use $crate::ir::Data as D;
        match $pair {
            (D::U8($x), D::U8($y)) => $body,
            (D::I8($x), D::I8($y)) => $body,
            (D::U16($x), D::U16($y)) => $body,
            (D::I16($x), D::I16($y)) => $body,
            (D::U32($x), D::U32($y)) => $body,
            (D::I32($x), D::I32($y)) => $body,
            (D::U64($x), D::U64($y)) => $body,
            (D::I64($x), D::I64($y)) => $body,
            (D::F16($x), D::F16($y)) => $body,
            (D::BF16($x), D::BF16($y)) => $body,
            (D::F32($x), D::F32($y)) => $body,
            (D::F64($x), D::F64($y)) => $body,
            _ => $fallback,
        }
    }};
}

/// Like `numeric_pair!`, and bool pairs too.
macro_rules! any_pair {
    ($pair:expr, |$x:ident, $y:ident| $body:expr, else $fallback:expr) => {{
        match $pair {
            ($crate::ir::Data::Bool($x), $crate::ir::Data::Bool($y)) => $body,
            other => $crate::ops::arith::elementwise::numeric_pair!(other, |$x, $y| $body, else $fallback),
        }
    }};
}

/// Matches one `Data` of a numeric (non-bool) type, binding its vector to `$x`.
macro_rules! numeric_one {
    ($data:expr, |$x:ident| $body:expr, else $fallback:expr) => {{
        use $crate::ir::Data as D;
        match $data {
            D::U8($x) => $body,
            D::I8($x) => $body,
            D::U16($x) => $body,
            D::I16($x) => $body,
            D::U32($x) => $body,
            D::I32($x) => $body,
            D::U64($x) => $body,
            D::I64($x) => $body,
            D::F16($x) => $body,
            D::BF16($x) => $body,
            D::F32($x) => $body,
            D::F64($x) => $body,
            _ => $fallback,
        }
    }};
}

/// Maps a float tensor elementwise: `$body` sees `$x` as an f32 (for f16, bf16 and f32
/// tensors) or an f64, and `$F` names that type (`alpha as F`). Evaluates to
/// `OpResult<Tensor>`; non-float tensors are an error.
macro_rules! map_float {
    ($tensor:expr, |$x:ident: $F:ident| $body:expr) => {{
        use $crate::ir::Data as D;
        use $crate::ops::arith::elementwise::map;
        let t: &$crate::ir::Tensor = $tensor;
        let data = match t.data() {
            D::F32(v) => {
                #[allow(dead_code)]
                type $F = f32;
                Some(D::F32(map(v, |$x: f32| -> f32 { $body })))
            }
            D::F64(v) => {
                #[allow(dead_code)]
                type $F = f64;
                Some(D::F64(map(v, |$x: f64| -> f64 { $body })))
            }
            D::F16(v) => {
                #[allow(dead_code)]
                type $F = f32;
                Some(D::F16(map(v, |h: ::half::f16| {
                    let $x = h.to_f32();
                    ::half::f16::from_f32($body)
                })))
            }
            D::BF16(v) => {
                #[allow(dead_code)]
                type $F = f32;
                Some(D::BF16(map(v, |h: ::half::bf16| {
                    let $x = h.to_f32();
                    ::half::bf16::from_f32($body)
                })))
            }
            _ => None,
        };
        match data {
            Some(d) => Ok($crate::ir::Tensor::new(t.shape().to_vec(), d).expect("elementwise map keeps the length")),
            None => Err($crate::ops::OpError::new(format!("expects a float tensor, got {}", t.dtype()))),
        }
    }};
}

pub(in crate::ops) use {any_pair, map_float, numeric_one, numeric_pair};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{broadcast_shapes, strides};

    /// Broadcasting the slow way: one multi-index per output element.
    fn naive(a: &[usize], b: &[usize]) -> Vec<(usize, usize)> {
        let out = broadcast_shapes(a, b).unwrap();
        let (ma, mb) = (broadcast_index_map(a, &out), broadcast_index_map(b, &out));
        ma.into_iter().zip(mb).collect()
    }

    fn check(a: &[usize], b: &[usize]) {
        let (na, nb) = (numel(a), numel(b));
        let va: Vec<usize> = (0..na).collect();
        let vb: Vec<usize> = (0..nb).collect();
        let plan = Broadcast::new([a, b]).unwrap();
        let got = zip2(&plan, &va, &vb, |x, y| (x, y));
        assert_eq!(got, naive(a, b), "{a:?} with {b:?}");
        assert_eq!(plan.out_shape, broadcast_shapes(a, b).unwrap());
    }

    #[test]
    fn plans_agree_with_the_index_map() {
        let cases: &[(&[usize], &[usize])] = &[
            (&[2, 3, 4], &[2, 3, 4]),
            (&[2, 3, 4], &[]),
            (&[], &[2, 3, 4]),
            (&[2, 3, 4], &[4]),
            (&[2, 3, 4], &[3, 1]),
            (&[2, 3, 1], &[2, 3, 4]),
            (&[2, 1, 4], &[1, 3, 1]),
            (&[5, 1], &[1, 6]),
            (&[1, 1, 1], &[1]),
            (&[3, 1, 2, 1], &[3, 4, 1, 5]),
            (&[2, 0, 3], &[3]),
            (&[1, 3, 1, 4], &[2, 1, 5, 4]),
        ];
        for (a, b) in cases {
            check(a, b);
        }
    }

    #[test]
    fn plans_agree_with_the_index_map_on_random_shapes() {
        let mut rng = crate::rng::SplitMix64::new(7);
        for _ in 0..300 {
            let rank = rng.below(5) as usize;
            let out: Vec<usize> = (0..rank).map(|_| 1 + rng.below(4) as usize).collect();
            // Each operand: a suffix of the output shape with some dims set to 1.
            let mut operand = || -> Vec<usize> {
                let keep = rng.below(rank as u64 + 1) as usize;
                out[rank - keep..].iter().map(|&d| if rng.below(3) == 0 { 1 } else { d }).collect()
            };
            let (a, b) = (operand(), operand());
            check(&a, &b);
        }
    }

    #[test]
    fn large_outputs_split_across_chunks_correctly() {
        // Rows of 384 straddle the 16384-element chunks; 100 * 384 > PAR_MIN_ELEMENTS.
        check(&[100, 2, 384], &[384]);
        check(&[100, 2, 384], &[100, 2, 1]);
        check(&[3, 70000], &[3, 1]);
        check(&[2, 1, 50000], &[1, 3, 1]);
        let n = 200_000;
        let v: Vec<f32> = (0..n).map(|i| i as f32).collect();
        assert_eq!(map(&v, |x| x * 2.0)[n - 1], 2.0 * (n - 1) as f32);
    }

    #[test]
    fn three_way_broadcast() {
        let (a, b, c): (&[usize], &[usize], &[usize]) = (&[2, 1, 3], &[4, 1], &[]);
        let plan = Broadcast::new([a, b, c]).unwrap();
        assert_eq!(plan.out_shape, vec![2, 4, 3]);
        let got = zip3(&plan, &[0, 1, 2, 3, 4, 5], &[10, 20, 30, 40], &[100], |x, y, z| x + y + z);
        let st = strides(&[2, 4, 3]);
        for (flat, g) in got.iter().enumerate() {
            let (i, j, k) = (flat / st[0], flat % st[0] / st[1], flat % st[1]);
            assert_eq!(*g, (i * 3 + k) + (j + 1) * 10 + 100);
        }
    }

    #[test]
    fn incompatible_shapes_are_an_error() {
        let err = Broadcast::new([&[2, 3][..], &[3, 2][..]]).unwrap_err();
        assert_eq!(err.to_string(), "cannot broadcast shapes [2, 3] and [3, 2]");
    }

    #[test]
    fn integer_arithmetic_wraps_and_truncates() {
        assert_eq!(Num::add(250u8, 10), 4);
        assert_eq!(Num::div(-7i32, 2), -3);
        assert_eq!(Num::div(i32::MIN, -1), i32::MIN);
        assert_eq!(Num::abs(i8::MIN), i8::MIN);
        assert_eq!(3i64.powi64(4), 81);
        assert_eq!(2i32.powi64(-1), 0);
        assert_eq!((-1i32).powi64(-3), -1);
        assert!(max_nan(f32::NAN, 1.0).is_nan() && max_nan(1.0, f32::NAN).is_nan());
        assert!(min_nan(f32::NAN, 1.0).is_nan() && min_nan(1.0, f32::NAN).is_nan());
    }
}
