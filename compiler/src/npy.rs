//! The `.npy` array format (numpy's single-array file, version 1.0 to 3.0, little endian,
//! C order): parsing into a [`Tensor`] and serializing one. `.npz` archives (a zip of
//! `.npy` files) live in the runtime crate, which reuses this parser.

use crate::ir::{DType, Data, Tensor};

/// Why bytes are not a readable `.npy` array.
#[derive(Debug, thiserror::Error)]
pub enum NpyError {
    #[error("not a .npy array (bad magic)")]
    BadMagic,
    #[error("unsupported .npy version {0}")]
    Version(u8),
    #[error("{0}")]
    Header(String),
    #[error("array type {0:?} is not supported")]
    Type(String),
    #[error("array data has {found} bytes but shape {shape:?} of {dtype} needs {want}")]
    Length { found: usize, shape: Vec<usize>, dtype: DType, want: usize },
}

fn header_err(msg: impl Into<String>) -> NpyError {
    NpyError::Header(msg.into())
}

fn descr_dtype(descr: &str) -> Result<DType, NpyError> {
    let (order, code) = descr.split_at(1.min(descr.len()));
    if order == ">" && !matches!(code, "i1" | "u1" | "b1") {
        return Err(header_err(format!("big-endian arrays ({descr}) are not supported")));
    }
    Ok(match code {
        "f4" => DType::F32,
        "f8" => DType::F64,
        "f2" => DType::F16,
        "i8" => DType::I64,
        "i4" => DType::I32,
        "i2" => DType::I16,
        "i1" => DType::I8,
        "u8" => DType::U64,
        "u4" => DType::U32,
        "u2" => DType::U16,
        "u1" => DType::U8,
        "b1" => DType::Bool,
        _ => return Err(NpyError::Type(descr.to_string())),
    })
}

fn dtype_descr(d: DType) -> Result<&'static str, NpyError> {
    Ok(match d {
        DType::F32 => "<f4",
        DType::F64 => "<f8",
        DType::F16 => "<f2",
        DType::I64 => "<i8",
        DType::I32 => "<i4",
        DType::I16 => "<i2",
        DType::I8 => "|i1",
        DType::U64 => "<u8",
        DType::U32 => "<u4",
        DType::U16 => "<u2",
        DType::U8 => "|u1",
        DType::Bool => "|b1",
        DType::BF16 => return Err(NpyError::Type("bf16 has no .npy type; cast it first".into())),
    })
}

/// Value of `'key': ...` in a numpy header dict (up to the next top-level comma).
fn header_field<'a>(header: &'a str, key: &str) -> Option<&'a str> {
    let start = header.find(&format!("'{key}':"))? + key.len() + 3;
    let rest = header[start..].trim_start();
    if rest.starts_with('(') {
        return rest.find(')').map(|e| &rest[..=e]);
    }
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    Some(rest[..end].trim())
}

/// What a `.npy` header declares: element type, shape, where the data starts and how many
/// bytes it must have (computed with checked arithmetic).
#[derive(Clone, Debug, PartialEq)]
pub struct NpyHeader {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub data_offset: usize,
    pub data_bytes: usize,
}

impl NpyHeader {
    /// The whole file's length: header and data.
    pub fn file_bytes(&self) -> usize {
        self.data_offset + self.data_bytes
    }
}

/// Bytes of the fixed part before the header dict: enough to know the header's length.
pub const NPY_PREAMBLE: usize = 12;

/// Parses the header of a `.npy` file from its first bytes. `Ok(None)`: `bytes` holds too
/// little of the file to tell yet (give it at least the header's length, which the first
/// [`NPY_PREAMBLE`] bytes name).
pub fn parse_npy_header(bytes: &[u8]) -> Result<Option<NpyHeader>, NpyError> {
    if bytes.len() < 10 {
        return if b"\x93NUMPY".starts_with(&bytes[..bytes.len().min(6)]) { Ok(None) } else { Err(NpyError::BadMagic) };
    }
    if &bytes[..6] != b"\x93NUMPY" {
        return Err(NpyError::BadMagic);
    }
    let (header_len, offset) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize, 12),
        2 | 3 => return Ok(None),
        v => return Err(NpyError::Version(v)),
    };
    let Some(header) = bytes.get(offset..offset + header_len) else { return Ok(None) };
    let header = std::str::from_utf8(header).map_err(|_| header_err(".npy header is not text"))?;
    let descr = header_field(header, "descr").ok_or_else(|| header_err(".npy header has no descr"))?.trim_matches('\'');
    let dtype = descr_dtype(descr)?;
    if header_field(header, "fortran_order") == Some("True") {
        return Err(header_err("fortran-order arrays are not supported (save with numpy.ascontiguousarray)"));
    }
    let shape_text = header_field(header, "shape").ok_or_else(|| header_err(".npy header has no shape"))?;
    let shape: Vec<usize> = shape_text
        .trim_matches(|c| c == '(' || c == ')')
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<usize>().map_err(|_| header_err(format!("bad dimension {s:?} in .npy shape"))))
        .collect::<Result<_, _>>()?;
    let data_bytes = shape
        .iter()
        .try_fold(dtype.size_bytes(), |acc, &d| acc.checked_mul(d))
        .filter(|&b| b.checked_add(offset + header_len).is_some())
        .ok_or_else(|| header_err(format!("shape {shape:?} of {dtype} is too large to address")))?;
    Ok(Some(NpyHeader { dtype, shape, data_offset: offset + header_len, data_bytes }))
}

/// Parses one `.npy` file.
pub fn parse_npy(bytes: &[u8]) -> Result<Tensor, NpyError> {
    let h = parse_npy_header(bytes)?.ok_or_else(|| {
        if bytes.len() < 10 {
            NpyError::BadMagic
        } else {
            header_err("truncated .npy header")
        }
    })?;
    let body = &bytes[h.data_offset..];
    if body.len() != h.data_bytes {
        return Err(NpyError::Length { found: body.len(), shape: h.shape, dtype: h.dtype, want: h.data_bytes });
    }
    let data = Data::from_le_bytes(h.dtype, body).ok_or_else(|| header_err("array data does not fit its type"))?;
    Ok(Tensor::new(h.shape, data).expect("length checked"))
}

/// Serializes one tensor as `.npy` (version 1.0).
pub fn write_npy(t: &Tensor) -> Result<Vec<u8>, NpyError> {
    let dims: Vec<String> = t.shape().iter().map(|d| d.to_string()).collect();
    let shape = if dims.len() == 1 { format!("({},)", dims[0]) } else { format!("({})", dims.join(", ")) };
    let mut header = format!("{{'descr': '{}', 'fortran_order': False, 'shape': {shape}, }}", dtype_descr(t.dtype())?);
    // Pad so that the data starts on a 64-byte boundary; the header ends with '\n'.
    let total = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - total % 64) % 64));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + t.len() * t.dtype().size_bytes());
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&t.data().to_le_bytes());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npy_round_trip_keeps_type_shape_and_values() {
        let t = Tensor::from_vec(vec![2, 3], vec![1.5f32, -2.0, 0.0, 3.25, 1e-8, 7.0]);
        assert_eq!(parse_npy(&write_npy(&t).unwrap()).unwrap(), t);
        let s = Tensor::scalar(42i64);
        assert_eq!(parse_npy(&write_npy(&s).unwrap()).unwrap(), s);
        let v = Tensor::from_vec(vec![3], vec![true, false, true]);
        assert_eq!(parse_npy(&write_npy(&v).unwrap()).unwrap(), v);
    }

    #[test]
    fn truncated_npy_is_a_clear_error() {
        let t = Tensor::from_vec(vec![4], vec![1i32, 2, 3, 4]);
        let mut bytes = write_npy(&t).unwrap();
        bytes.truncate(bytes.len() - 3);
        let err = parse_npy(&bytes).unwrap_err().to_string();
        assert!(err.contains("needs 16"), "{err}");
    }
}
