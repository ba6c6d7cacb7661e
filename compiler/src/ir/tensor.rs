//! Dense host tensors: element types, typed storage and the small set of helpers
//! (strides, broadcasting, casts) that the ops and the frontend share.

use half::{bf16, f16};
use std::fmt;

/// Element type of a tensor. The names follow the IR text form (`f32`, `i64`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    Bool,
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    U64,
    I64,
    F16,
    BF16,
    F32,
    F64,
}

impl DType {
    pub const ALL: [DType; 13] = [
        DType::Bool,
        DType::U8,
        DType::I8,
        DType::U16,
        DType::I16,
        DType::U32,
        DType::I32,
        DType::U64,
        DType::I64,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
    ];

    /// Maps an ONNX `TensorProto.DataType` code; `None` for types the IR does not hold.
    pub fn from_onnx(code: i32) -> Option<DType> {
        Some(match code {
            1 => DType::F32,
            2 => DType::U8,
            3 => DType::I8,
            4 => DType::U16,
            5 => DType::I16,
            6 => DType::I32,
            7 => DType::I64,
            9 => DType::Bool,
            10 => DType::F16,
            11 => DType::F64,
            12 => DType::U32,
            13 => DType::U64,
            16 => DType::BF16,
            _ => return None,
        })
    }

    pub fn to_onnx(self) -> i32 {
        match self {
            DType::F32 => 1,
            DType::U8 => 2,
            DType::I8 => 3,
            DType::U16 => 4,
            DType::I16 => 5,
            DType::I32 => 6,
            DType::I64 => 7,
            DType::Bool => 9,
            DType::F16 => 10,
            DType::F64 => 11,
            DType::U32 => 12,
            DType::U64 => 13,
            DType::BF16 => 16,
        }
    }

    /// Name of an ONNX data type code, for error messages about types we do not hold.
    pub fn onnx_code_name(code: i32) -> &'static str {
        match code {
            0 => "UNDEFINED",
            8 => "STRING",
            14 => "COMPLEX64",
            15 => "COMPLEX128",
            17..=20 => "FLOAT8",
            21 => "UINT4",
            22 => "INT4",
            23 => "FLOAT4E2M1",
            _ => match DType::from_onnx(code) {
                Some(d) => d.name(),
                None => "unknown",
            },
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::U8 => "u8",
            DType::I8 => "i8",
            DType::U16 => "u16",
            DType::I16 => "i16",
            DType::U32 => "u32",
            DType::I32 => "i32",
            DType::U64 => "u64",
            DType::I64 => "i64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
        }
    }

    pub fn size_bytes(self) -> usize {
        match self {
            DType::Bool | DType::U8 | DType::I8 => 1,
            DType::U16 | DType::I16 | DType::F16 | DType::BF16 => 2,
            DType::U32 | DType::I32 | DType::F32 => 4,
            DType::U64 | DType::I64 | DType::F64 => 8,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
    }

    pub fn is_signed_int(self) -> bool {
        matches!(self, DType::I8 | DType::I16 | DType::I32 | DType::I64)
    }

    pub fn is_unsigned_int(self) -> bool {
        matches!(self, DType::U8 | DType::U16 | DType::U32 | DType::U64)
    }

    pub fn is_int(self) -> bool {
        self.is_signed_int() || self.is_unsigned_int()
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Typed element storage of a tensor, row-major.
#[derive(Clone, Debug, PartialEq)]
pub enum Data {
    Bool(Vec<bool>),
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
    F32(Vec<f32>),
    F64(Vec<f64>),
}

/// Runs `$body` with `$v` bound to the typed vector inside a `Data`, whatever its type.
#[macro_export]
macro_rules! with_data {
    ($data:expr, $v:ident => $body:expr) => {
        match $data {
            $crate::ir::Data::Bool($v) => $body,
            $crate::ir::Data::U8($v) => $body,
            $crate::ir::Data::I8($v) => $body,
            $crate::ir::Data::U16($v) => $body,
            $crate::ir::Data::I16($v) => $body,
            $crate::ir::Data::U32($v) => $body,
            $crate::ir::Data::I32($v) => $body,
            $crate::ir::Data::U64($v) => $body,
            $crate::ir::Data::I64($v) => $body,
            $crate::ir::Data::F16($v) => $body,
            $crate::ir::Data::BF16($v) => $body,
            $crate::ir::Data::F32($v) => $body,
            $crate::ir::Data::F64($v) => $body,
        }
    };
}

/// Like [`with_data!`] but builds a new `Data` of the same variant from `$body`'s `Vec`.
#[macro_export]
macro_rules! map_data {
    ($data:expr, $v:ident => $body:expr) => {
        match $data {
            $crate::ir::Data::Bool($v) => $crate::ir::Data::Bool($body),
            $crate::ir::Data::U8($v) => $crate::ir::Data::U8($body),
            $crate::ir::Data::I8($v) => $crate::ir::Data::I8($body),
            $crate::ir::Data::U16($v) => $crate::ir::Data::U16($body),
            $crate::ir::Data::I16($v) => $crate::ir::Data::I16($body),
            $crate::ir::Data::U32($v) => $crate::ir::Data::U32($body),
            $crate::ir::Data::I32($v) => $crate::ir::Data::I32($body),
            $crate::ir::Data::U64($v) => $crate::ir::Data::U64($body),
            $crate::ir::Data::I64($v) => $crate::ir::Data::I64($body),
            $crate::ir::Data::F16($v) => $crate::ir::Data::F16($body),
            $crate::ir::Data::BF16($v) => $crate::ir::Data::BF16($body),
            $crate::ir::Data::F32($v) => $crate::ir::Data::F32($body),
            $crate::ir::Data::F64($v) => $crate::ir::Data::F64($body),
        }
    };
}

impl Data {
    pub fn dtype(&self) -> DType {
        match self {
            Data::Bool(_) => DType::Bool,
            Data::U8(_) => DType::U8,
            Data::I8(_) => DType::I8,
            Data::U16(_) => DType::U16,
            Data::I16(_) => DType::I16,
            Data::U32(_) => DType::U32,
            Data::I32(_) => DType::I32,
            Data::U64(_) => DType::U64,
            Data::I64(_) => DType::I64,
            Data::F16(_) => DType::F16,
            Data::BF16(_) => DType::BF16,
            Data::F32(_) => DType::F32,
            Data::F64(_) => DType::F64,
        }
    }

    pub fn len(&self) -> usize {
        with_data!(self, v => v.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `n` zero (or `false`) elements of `dtype`.
    pub fn zeros(dtype: DType, n: usize) -> Data {
        Data::from_f64_iter(dtype, std::iter::repeat_n(0.0, n))
    }

    /// Builds storage of `dtype` from f64 values, converting as a C cast would
    /// (truncation toward zero for integers, `!= 0` for bool).
    pub fn from_f64_iter(dtype: DType, it: impl Iterator<Item = f64>) -> Data {
        match dtype {
            DType::Bool => Data::Bool(it.map(|x| x != 0.0).collect()),
            DType::U8 => Data::U8(it.map(|x| x as u8).collect()),
            DType::I8 => Data::I8(it.map(|x| x as i8).collect()),
            DType::U16 => Data::U16(it.map(|x| x as u16).collect()),
            DType::I16 => Data::I16(it.map(|x| x as i16).collect()),
            DType::U32 => Data::U32(it.map(|x| x as u32).collect()),
            DType::I32 => Data::I32(it.map(|x| x as i32).collect()),
            DType::U64 => Data::U64(it.map(|x| x as u64).collect()),
            DType::I64 => Data::I64(it.map(|x| x as i64).collect()),
            DType::F16 => Data::F16(it.map(f16::from_f64).collect()),
            DType::BF16 => Data::BF16(it.map(bf16::from_f64).collect()),
            DType::F32 => Data::F32(it.map(|x| x as f32).collect()),
            DType::F64 => Data::F64(it.collect()),
        }
    }

    /// Every element as f64 (exact for all types but 64-bit integers beyond 2^53).
    pub fn to_f64_vec(&self) -> Vec<f64> {
        with_data!(self, v => v.iter().map(|x| x.to_f64()).collect())
    }

    /// Every element as i64 (floats truncate toward zero).
    pub fn to_i64_vec(&self) -> Vec<i64> {
        with_data!(self, v => v.iter().map(|x| x.to_i64()).collect())
    }

    /// Number of elements that are exactly zero (`false` for bool).
    pub fn count_zeros(&self) -> usize {
        with_data!(self, v => v.iter().filter(|x| x.to_f64() == 0.0).count())
    }

    /// Picks the elements at `indices` (row-major flat positions).
    pub fn gather_flat(&self, indices: &[usize]) -> Data {
        map_data!(self, v => indices.iter().map(|&i| v[i]).collect())
    }

    /// Little-endian bytes of every element (bool as one byte).
    pub fn to_le_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len() * self.dtype().size_bytes());
        with_data!(self, v => for x in v { x.push_le(&mut out) });
        out
    }

    /// Decodes little-endian bytes; `None` when the byte count does not fit the type.
    pub fn from_le_bytes(dtype: DType, bytes: &[u8]) -> Option<Data> {
        let size = dtype.size_bytes();
        if !bytes.len().is_multiple_of(size) {
            return None;
        }
        fn decode<T: Element>(bytes: &[u8]) -> Vec<T> {
            bytes.chunks_exact(T::DTYPE.size_bytes()).map(T::read_le).collect()
        }
        Some(match dtype {
            DType::Bool => Data::Bool(decode(bytes)),
            DType::U8 => Data::U8(decode(bytes)),
            DType::I8 => Data::I8(decode(bytes)),
            DType::U16 => Data::U16(decode(bytes)),
            DType::I16 => Data::I16(decode(bytes)),
            DType::U32 => Data::U32(decode(bytes)),
            DType::I32 => Data::I32(decode(bytes)),
            DType::U64 => Data::U64(decode(bytes)),
            DType::I64 => Data::I64(decode(bytes)),
            DType::F16 => Data::F16(decode(bytes)),
            DType::BF16 => Data::BF16(decode(bytes)),
            DType::F32 => Data::F32(decode(bytes)),
            DType::F64 => Data::F64(decode(bytes)),
        })
    }

    /// Converts to `dtype` with ONNX `Cast` semantics for the numeric types.
    pub fn cast(&self, dtype: DType) -> Data {
        if self.dtype() == dtype {
            return self.clone();
        }
        // Integer to integer keeps exact values (two's-complement wrap like C).
        if self.dtype().is_int() && dtype.is_int() || self.dtype() == DType::Bool && dtype.is_int() {
            let v = self.to_i64_vec();
            return match dtype {
                DType::U8 => Data::U8(v.iter().map(|&x| x as u8).collect()),
                DType::I8 => Data::I8(v.iter().map(|&x| x as i8).collect()),
                DType::U16 => Data::U16(v.iter().map(|&x| x as u16).collect()),
                DType::I16 => Data::I16(v.iter().map(|&x| x as i16).collect()),
                DType::U32 => Data::U32(v.iter().map(|&x| x as u32).collect()),
                DType::I32 => Data::I32(v.iter().map(|&x| x as i32).collect()),
                DType::U64 => Data::U64(v.iter().map(|&x| x as u64).collect()),
                _ => Data::I64(v),
            };
        }
        if self.dtype() == DType::U64 {
            if let Data::U64(v) = self {
                return Data::from_f64_iter(dtype, v.iter().map(|&x| x as f64));
            }
        }
        Data::from_f64_iter(dtype, self.to_f64_vec().into_iter())
    }
}

/// A scalar type that a `Data` variant holds.
pub trait Element: Copy + Send + Sync + Default + PartialOrd + fmt::Debug + 'static {
    const DTYPE: DType;
    fn wrap(v: Vec<Self>) -> Data;
    fn slice(data: &Data) -> Option<&[Self]>;
    fn slice_mut(data: &mut Data) -> Option<&mut Vec<Self>>;
    fn into_vec(data: Data) -> Result<Vec<Self>, Data>;
    fn to_f64(self) -> f64;
    fn from_f64(x: f64) -> Self;
    fn to_i64(self) -> i64;
    fn push_le(self, out: &mut Vec<u8>);
    fn read_le(bytes: &[u8]) -> Self;
}

macro_rules! impl_element {
    ($t:ty, $variant:ident, $to_f64:expr, $from_f64:expr, $to_i64:expr, $to_bytes:expr, $from_bytes:expr) => {
        impl Element for $t {
            const DTYPE: DType = DType::$variant;
            fn wrap(v: Vec<Self>) -> Data {
                Data::$variant(v)
            }
            fn slice(data: &Data) -> Option<&[Self]> {
                match data {
                    Data::$variant(v) => Some(v),
                    _ => None,
                }
            }
            fn slice_mut(data: &mut Data) -> Option<&mut Vec<Self>> {
                match data {
                    Data::$variant(v) => Some(v),
                    _ => None,
                }
            }
            fn into_vec(data: Data) -> Result<Vec<Self>, Data> {
                match data {
                    Data::$variant(v) => Ok(v),
                    other => Err(other),
                }
            }
            fn to_f64(self) -> f64 {
                let f: fn($t) -> f64 = $to_f64;
                f(self)
            }
            fn from_f64(x: f64) -> Self {
                let f: fn(f64) -> $t = $from_f64;
                f(x)
            }
            fn to_i64(self) -> i64 {
                let f: fn($t) -> i64 = $to_i64;
                f(self)
            }
            fn push_le(self, out: &mut Vec<u8>) {
                let f: fn($t) -> Vec<u8> = $to_bytes;
                out.extend_from_slice(&f(self));
            }
            fn read_le(bytes: &[u8]) -> Self {
                let f: fn(&[u8]) -> $t = $from_bytes;
                f(bytes)
            }
        }
    };
}

macro_rules! impl_int_element {
    ($t:ty, $variant:ident) => {
        impl_element!($t, $variant, |x| x as f64, |x| x as $t, |x| x as i64, |x| x.to_le_bytes().to_vec(), |b| {
            <$t>::from_le_bytes(b.try_into().unwrap())
        });
    };
}

impl_int_element!(u8, U8);
impl_int_element!(i8, I8);
impl_int_element!(u16, U16);
impl_int_element!(i16, I16);
impl_int_element!(u32, U32);
impl_int_element!(i32, I32);
impl_int_element!(u64, U64);
impl_int_element!(i64, I64);
impl_element!(bool, Bool, |x| if x { 1.0 } else { 0.0 }, |x| x != 0.0, |x| x as i64, |x| vec![x as u8], |b| b[0] != 0);
impl_element!(f16, F16, |x| x.to_f64(), f16::from_f64, |x| x.to_f64() as i64, |x| x.to_le_bytes().to_vec(), |b| {
    f16::from_le_bytes(b.try_into().unwrap())
});
impl_element!(bf16, BF16, |x| x.to_f64(), bf16::from_f64, |x| x.to_f64() as i64, |x| x.to_le_bytes().to_vec(), |b| {
    bf16::from_le_bytes(b.try_into().unwrap())
});
impl_element!(
    f32,
    F32,
    |x| x as f64,
    |x| x as f32,
    |x| x as i64,
    |x| x.to_le_bytes().to_vec(),
    |b| f32::from_le_bytes(b.try_into().unwrap())
);
impl_element!(f64, F64, |x| x, |x| x, |x| x as i64, |x| x.to_le_bytes().to_vec(), |b| f64::from_le_bytes(
    b.try_into().unwrap()
));

/// A dense row-major tensor with a static shape.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    shape: Vec<usize>,
    data: Data,
}

impl Tensor {
    /// Builds a tensor; `None` when the element count does not match the shape.
    pub fn new(shape: Vec<usize>, data: Data) -> Option<Tensor> {
        (numel(&shape) == data.len()).then_some(Tensor { shape, data })
    }

    /// Builds a tensor from a typed vector. Panics if the length does not match the
    /// shape: use it only where the length is computed from the shape.
    pub fn from_vec<T: Element>(shape: Vec<usize>, v: Vec<T>) -> Tensor {
        assert_eq!(numel(&shape), v.len(), "tensor length does not match shape {shape:?}");
        Tensor { shape, data: T::wrap(v) }
    }

    pub fn scalar<T: Element>(x: T) -> Tensor {
        Tensor { shape: vec![], data: T::wrap(vec![x]) }
    }

    pub fn zeros(dtype: DType, shape: Vec<usize>) -> Tensor {
        let n = numel(&shape);
        Tensor { shape, data: Data::zeros(dtype, n) }
    }

    pub fn dtype(&self) -> DType {
        self.data.dtype()
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    pub fn len(&self) -> usize {
        self.data.len()
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    pub fn data(&self) -> &Data {
        &self.data
    }

    pub fn into_data(self) -> Data {
        self.data
    }

    pub fn into_parts(self) -> (Vec<usize>, Data) {
        (self.shape, self.data)
    }

    /// The typed elements, or `None` when the tensor holds another type.
    pub fn as_slice<T: Element>(&self) -> Option<&[T]> {
        T::slice(&self.data)
    }

    /// Same elements, new shape; `None` when the element counts differ.
    pub fn reshaped(self, shape: Vec<usize>) -> Option<Tensor> {
        Tensor::new(shape, self.data)
    }

    pub fn cast(&self, dtype: DType) -> Tensor {
        Tensor { shape: self.shape.clone(), data: self.data.cast(dtype) }
    }

    pub fn to_f64_vec(&self) -> Vec<f64> {
        self.data.to_f64_vec()
    }

    pub fn to_i64_vec(&self) -> Vec<i64> {
        self.data.to_i64_vec()
    }

    /// Fraction of elements that are nonzero (1.0 for an empty tensor).
    pub fn density(&self) -> f64 {
        if self.is_empty() {
            return 1.0;
        }
        1.0 - self.data.count_zeros() as f64 / self.len() as f64
    }
}

/// Number of elements of a shape (1 for a scalar).
pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// [`numel`] for shapes that come from user data: `None` when the count overflows.
pub fn checked_numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

/// Row-major strides of a shape, in elements.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Multidirectional (numpy) broadcasting of two shapes.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let rank = a.len().max(b.len());
    let mut out = vec![0; rank];
    for i in 0..rank {
        let da = if i + a.len() >= rank { a[i + a.len() - rank] } else { 1 };
        let db = if i + b.len() >= rank { b[i + b.len() - rank] } else { 1 };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return None,
        };
    }
    Some(out)
}

/// Broadcasts any number of shapes together.
pub fn broadcast_all(shapes: &[&[usize]]) -> Option<Vec<usize>> {
    let mut out: Vec<usize> = vec![];
    for s in shapes {
        out = broadcast_shapes(&out, s)?;
    }
    Some(out)
}

/// For every flat index of `out_shape`, the flat index into a tensor of `in_shape` that
/// broadcasts to it. `in_shape` must broadcast to `out_shape`.
pub fn broadcast_index_map(in_shape: &[usize], out_shape: &[usize]) -> Vec<usize> {
    let rank = out_shape.len();
    let offset = rank - in_shape.len();
    let in_strides = strides(in_shape);
    // Effective stride per output axis: 0 on broadcast axes.
    let eff: Vec<usize> =
        (0..rank).map(|i| if i < offset || in_shape[i - offset] == 1 { 0 } else { in_strides[i - offset] }).collect();
    let n = numel(out_shape);
    if in_shape == out_shape {
        return (0..n).collect();
    }
    let mut map = Vec::with_capacity(n);
    let mut idx = vec![0usize; rank];
    let mut pos = 0usize;
    for _ in 0..n {
        map.push(pos);
        for ax in (0..rank).rev() {
            idx[ax] += 1;
            pos += eff[ax];
            if idx[ax] < out_shape[ax] {
                break;
            }
            pos -= eff[ax] * idx[ax];
            idx[ax] = 0;
        }
    }
    map
}

/// Normalizes a possibly negative axis against `rank`; `None` when out of range.
pub fn normalize_axis(axis: i64, rank: usize) -> Option<usize> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    (0..r).contains(&a).then_some(a as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_rules() {
        assert_eq!(broadcast_shapes(&[2, 1, 3], &[4, 1]), Some(vec![2, 4, 3]));
        assert_eq!(broadcast_shapes(&[], &[5]), Some(vec![5]));
        assert_eq!(broadcast_shapes(&[2, 3], &[3, 2]), None);
    }

    #[test]
    fn broadcast_map_repeats_rows_and_columns() {
        assert_eq!(broadcast_index_map(&[2, 1], &[2, 3]), vec![0, 0, 0, 1, 1, 1]);
        assert_eq!(broadcast_index_map(&[3], &[2, 3]), vec![0, 1, 2, 0, 1, 2]);
        assert_eq!(broadcast_index_map(&[], &[2]), vec![0, 0]);
    }

    #[test]
    fn cast_truncates_and_wraps_like_onnx() {
        let t = Tensor::from_vec(vec![3], vec![-1.7f32, 2.9, 300.0]);
        assert_eq!(t.cast(DType::I32).to_i64_vec(), vec![-1, 2, 300]);
        let i = Tensor::from_vec(vec![2], vec![-1i64, 256]);
        assert_eq!(i.cast(DType::U8).to_i64_vec(), vec![255, 0]);
        assert_eq!(t.cast(DType::Bool).to_i64_vec(), vec![1, 1, 1]);
    }

    #[test]
    fn le_bytes_round_trip_every_type() {
        for dtype in DType::ALL {
            let d = Data::from_f64_iter(dtype, [0.0, 1.0, 2.0].into_iter());
            let back = Data::from_le_bytes(dtype, &d.to_le_bytes()).unwrap();
            assert_eq!(back, d, "{dtype}");
        }
    }
}
