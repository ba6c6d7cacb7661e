//! `TensorProto` / `SparseTensorProto` <-> IR tensors: `raw_data`, every typed field,
//! external data files, and COO sparse tensors in both index layouts.

use crate::ir::{checked_numel, DType, Data, SparseTensor, Tensor};
use crate::Error;
use half::{bf16, f16};
use onnx_protobuf::{SparseTensorProto, TensorProto};
use std::path::Path;

/// Where external data files are looked up (the model's directory), if anywhere.
#[derive(Clone, Copy, Debug)]
pub struct DataDir<'a>(pub Option<&'a Path>);

fn shape_of(proto: &TensorProto, name: &str) -> Result<Vec<usize>, Error> {
    proto
        .dims
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| Error::tensor(name, format!("negative dimension {d}"))))
        .collect()
}

fn dtype_of(code: i32, name: &str) -> Result<DType, Error> {
    DType::from_onnx(code).ok_or_else(|| {
        Error::tensor(name, format!("data type {} ({code}) is not supported", DType::onnx_code_name(code)))
    })
}

/// Decodes a dense tensor.
pub fn tensor_from_proto(proto: &TensorProto, dir: DataDir) -> Result<Tensor, Error> {
    let name = if proto.name.is_empty() { "<unnamed>" } else { proto.name.as_str() };
    let dtype = dtype_of(proto.data_type, name)?;
    let shape = shape_of(proto, name)?;
    let n = shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| Error::tensor(name, format!("shape {shape:?} has too many elements")))?;
    let external = proto.data_location.value() == 1 || !proto.external_data.is_empty();
    let data = if external {
        let bytes = read_external(proto, name, dir)?;
        decode_raw(dtype, &bytes, n, name)?
    } else if !proto.raw_data.is_empty() || n == 0 && has_no_typed_data(proto) {
        decode_raw(dtype, &proto.raw_data, n, name)?
    } else {
        decode_typed(proto, dtype, name)?
    };
    if data.len() != n {
        return Err(Error::tensor(name, format!("holds {} elements but its shape {shape:?} needs {n}", data.len())));
    }
    Ok(Tensor::new(shape, data).expect("length checked"))
}

fn has_no_typed_data(p: &TensorProto) -> bool {
    p.float_data.is_empty()
        && p.int32_data.is_empty()
        && p.int64_data.is_empty()
        && p.double_data.is_empty()
        && p.uint64_data.is_empty()
}

fn decode_raw(dtype: DType, bytes: &[u8], n: usize, name: &str) -> Result<Data, Error> {
    let want = n * dtype.size_bytes();
    if bytes.len() != want {
        return Err(Error::tensor(
            name,
            format!("raw data has {} bytes but {n} elements of {dtype} need {want}", bytes.len()),
        ));
    }
    Ok(Data::from_le_bytes(dtype, bytes).expect("byte count checked"))
}

fn decode_typed(p: &TensorProto, dtype: DType, name: &str) -> Result<Data, Error> {
    let i32s = &p.int32_data;
    Ok(match dtype {
        DType::F32 => Data::F32(p.float_data.clone()),
        DType::F64 => Data::F64(p.double_data.clone()),
        DType::I64 => Data::I64(p.int64_data.clone()),
        DType::I32 => Data::I32(i32s.clone()),
        DType::I16 => Data::I16(i32s.iter().map(|&x| x as i16).collect()),
        DType::I8 => Data::I8(i32s.iter().map(|&x| x as i8).collect()),
        DType::U16 => Data::U16(i32s.iter().map(|&x| x as u16).collect()),
        DType::U8 => Data::U8(i32s.iter().map(|&x| x as u8).collect()),
        DType::Bool => Data::Bool(i32s.iter().map(|&x| x != 0).collect()),
        // Half types are stored as their bit patterns in int32_data.
        DType::F16 => Data::F16(i32s.iter().map(|&x| f16::from_bits(x as u16)).collect()),
        DType::BF16 => Data::BF16(i32s.iter().map(|&x| bf16::from_bits(x as u16)).collect()),
        DType::U32 => Data::U32(p.uint64_data.iter().map(|&x| x as u32).collect()),
        DType::U64 => Data::U64(p.uint64_data.clone()),
    })
    .and_then(|d: Data| {
        if d.is_empty() && !p.string_data.is_empty() {
            Err(Error::tensor(name, "string tensors are not supported"))
        } else {
            Ok(d)
        }
    })
}

fn read_external(p: &TensorProto, name: &str, dir: DataDir) -> Result<Vec<u8>, Error> {
    let mut location = None;
    let mut offset = 0u64;
    let mut length = None;
    for entry in &p.external_data {
        match entry.key.as_str() {
            "location" => location = Some(entry.value.clone()),
            "offset" => offset = parse_u64(&entry.value, "offset", name)?,
            "length" => length = Some(parse_u64(&entry.value, "length", name)?),
            _ => {}
        }
    }
    let location = location.ok_or_else(|| Error::tensor(name, "external data without a location"))?;
    let base =
        dir.0.ok_or_else(|| Error::tensor(name, "external data needs the model's directory (load from a file)"))?;
    // Inside the model's folder once links are resolved, a regular file, exactly the range.
    let path = crate::contained::resolve(base, &location)
        .map_err(|e| Error::tensor(name, format!("external data {location:?}: {e}")))?;
    crate::contained::read_range(&path, offset, length).map_err(|e| Error::tensor(name, format!("external data: {e}")))
}

fn parse_u64(s: &str, what: &str, name: &str) -> Result<u64, Error> {
    s.parse().map_err(|_| Error::tensor(name, format!("external data {what} {s:?} is not a number")))
}

/// Decodes a COO sparse tensor (indices as `[nnz]` flat positions or `[nnz, rank]`
/// coordinates); the result has sorted, unique flat indices.
pub fn sparse_from_proto(proto: &SparseTensorProto, dir: DataDir) -> Result<SparseTensor, Error> {
    let name = if proto.values.name.is_empty() { "<unnamed sparse>" } else { proto.values.name.as_str() };
    let shape: Vec<usize> = proto
        .dims
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| Error::tensor(name, format!("negative dimension {d}"))))
        .collect::<Result<_, _>>()?;
    let values = tensor_from_proto(&proto.values, dir)?;
    if values.rank() != 1 {
        return Err(Error::tensor(name, format!("sparse values must be 1-D, got shape {:?}", values.shape())));
    }
    let nnz = values.len();
    let indices =
        if nnz == 0 && proto.indices.is_none() { vec![] } else { tensor_from_proto(&proto.indices, dir)?.to_i64_vec() };
    let total = checked_numel(&shape)
        .ok_or_else(|| Error::tensor(name, format!("shape {shape:?} has more elements than memory can address")))?;
    let rank = shape.len();
    let mut flat: Vec<usize> = Vec::with_capacity(nnz);
    if indices.len() == nnz {
        for &i in &indices {
            if i < 0 || i as usize >= total {
                return Err(Error::tensor(name, format!("sparse index {i} out of range for shape {shape:?}")));
            }
            flat.push(i as usize);
        }
    } else if rank > 0 && indices.len() == nnz * rank {
        for coords in indices.chunks_exact(rank) {
            let mut pos = 0usize;
            for (axis, (&c, &d)) in coords.iter().zip(shape.iter()).enumerate() {
                if c < 0 || c as usize >= d {
                    return Err(Error::tensor(
                        name,
                        format!("sparse coordinate {c} out of range on axis {axis} (size {d})"),
                    ));
                }
                pos = pos * d + c as usize;
            }
            flat.push(pos);
        }
    } else {
        return Err(Error::tensor(
            name,
            format!("{} sparse indices do not fit {nnz} values of rank {rank}", indices.len()),
        ));
    }
    // Sort by position, keeping values aligned; duplicates are an error.
    let mut order: Vec<usize> = (0..nnz).collect();
    order.sort_by_key(|&k| flat[k]);
    let sorted: Vec<usize> = order.iter().map(|&k| flat[k]).collect();
    if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
        return Err(Error::tensor(name, format!("sparse index {} appears twice", w[0])));
    }
    let values = values.data().gather_flat(&order);
    Ok(SparseTensor { shape, indices: sorted, values })
}

/// Encodes a dense tensor with `raw_data`.
pub fn tensor_to_proto(name: &str, t: &Tensor) -> TensorProto {
    let mut p = TensorProto::new();
    p.name = name.to_string();
    p.dims = t.shape().iter().map(|&d| d as i64).collect();
    p.data_type = t.dtype().to_onnx();
    p.raw_data = t.data().to_le_bytes();
    p
}

/// Encodes a sparse tensor in COO form with flat `[nnz]` indices.
pub fn sparse_to_proto(name: &str, s: &SparseTensor) -> SparseTensorProto {
    let mut p = SparseTensorProto::new();
    let values = Tensor::new(vec![s.nnz()], s.values.clone()).expect("values are 1-D");
    p.values = protobuf::MessageField::some(tensor_to_proto(name, &values));
    let idx: Vec<i64> = s.indices.iter().map(|&i| i as i64).collect();
    p.indices = protobuf::MessageField::some(tensor_to_proto("", &Tensor::from_vec(vec![idx.len()], idx)));
    p.dims = s.shape.iter().map(|&d| d as i64).collect();
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_fields_and_raw_data_decode_the_same() {
        let t = Tensor::from_vec(vec![2, 2], vec![1.5f32, -2.0, 0.0, 4.25]);
        let raw = tensor_to_proto("w", &t);
        let mut typed = TensorProto::new();
        typed.dims = vec![2, 2];
        typed.data_type = 1;
        typed.float_data = vec![1.5, -2.0, 0.0, 4.25];
        assert_eq!(tensor_from_proto(&raw, DataDir(None)).unwrap(), t);
        assert_eq!(tensor_from_proto(&typed, DataDir(None)).unwrap(), t);
    }

    #[test]
    fn half_bits_come_from_int32_data() {
        let mut p = TensorProto::new();
        p.dims = vec![2];
        p.data_type = 10;
        p.int32_data = vec![f16::from_f32(1.0).to_bits() as i32, f16::from_f32(-0.5).to_bits() as i32];
        assert_eq!(tensor_from_proto(&p, DataDir(None)).unwrap().to_f64_vec(), vec![1.0, -0.5]);
    }

    #[test]
    fn sparse_coordinates_and_flat_indices_agree() {
        let mut p = SparseTensorProto::new();
        p.dims = vec![2, 3];
        p.values = protobuf::MessageField::some(tensor_to_proto("s", &Tensor::from_vec(vec![2], vec![7.0f32, 9.0])));
        // Coordinates (1,2) and (0,1), unsorted: flat 5 and 1.
        p.indices =
            protobuf::MessageField::some(tensor_to_proto("", &Tensor::from_vec(vec![2, 2], vec![1i64, 2, 0, 1])));
        let s = sparse_from_proto(&p, DataDir(None)).unwrap();
        assert_eq!(s.indices, vec![1, 5]);
        assert_eq!(s.to_dense().to_f64_vec(), vec![0.0, 9.0, 0.0, 0.0, 0.0, 7.0]);
        let back = sparse_from_proto(&sparse_to_proto("s", &s), DataDir(None)).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn short_raw_data_is_an_error_naming_the_tensor() {
        let mut p = tensor_to_proto("bias", &Tensor::from_vec(vec![3], vec![1.0f32, 2.0, 3.0]));
        p.raw_data.truncate(7);
        let err = tensor_from_proto(&p, DataDir(None)).unwrap_err().to_string();
        assert!(err.contains("\"bias\"") && err.contains("7 bytes"), "{err}");
    }
}
