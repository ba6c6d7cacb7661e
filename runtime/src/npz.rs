//! Reading and writing `.npz` archives (a zip of `.npy` arrays), keyed by tensor name.
//! Writes go to a temporary file that is renamed into place, so a failed write never
//! leaves a partial file behind.

use anyhow::{anyhow, bail, Context, Result};
use spartac::ir::{DType, Data, Tensor};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;

fn descr_dtype(descr: &str) -> Result<DType> {
    let (order, code) = descr.split_at(1.min(descr.len()));
    if order == ">" && !matches!(code, "i1" | "u1" | "b1") {
        bail!("big-endian arrays ({descr}) are not supported");
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
        _ => bail!("array type {descr:?} is not supported"),
    })
}

fn dtype_descr(d: DType) -> Result<&'static str> {
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
        DType::BF16 => bail!("bf16 has no .npy type; cast the output first"),
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

/// Parses one `.npy` file.
pub fn parse_npy(bytes: &[u8]) -> Result<Tensor> {
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        bail!("not a .npy array (bad magic)");
    }
    let (header_len, offset) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize, 12),
        v => bail!("unsupported .npy version {v}"),
    };
    let header = bytes.get(offset..offset + header_len).ok_or_else(|| anyhow!("truncated .npy header"))?;
    let header = std::str::from_utf8(header).context(".npy header is not text")?;
    let descr = header_field(header, "descr").ok_or_else(|| anyhow!(".npy header has no descr"))?.trim_matches('\'');
    let dtype = descr_dtype(descr)?;
    if header_field(header, "fortran_order") == Some("True") {
        bail!("Fortran-order arrays are not supported (save with numpy.ascontiguousarray)");
    }
    let shape_text = header_field(header, "shape").ok_or_else(|| anyhow!(".npy header has no shape"))?;
    let shape: Vec<usize> = shape_text
        .trim_matches(|c| c == '(' || c == ')')
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<usize>().map_err(|_| anyhow!("bad dimension {s:?} in .npy shape")))
        .collect::<Result<_>>()?;
    let body = &bytes[offset + header_len..];
    let n: usize = shape.iter().product();
    let want = n * dtype.size_bytes();
    if body.len() != want {
        bail!("array data has {} bytes but shape {shape:?} of {dtype} needs {want}", body.len());
    }
    let data = Data::from_le_bytes(dtype, body).ok_or_else(|| anyhow!("array data does not fit its type"))?;
    Ok(Tensor::new(shape, data).expect("length checked"))
}

/// Serializes one tensor as `.npy` (version 1.0).
pub fn write_npy(t: &Tensor) -> Result<Vec<u8>> {
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

/// Reads every array of an `.npz` file.
pub fn read_npz(path: &Path) -> Result<BTreeMap<String, Tensor>> {
    let file = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut zip =
        zip::ZipArchive::new(file).map_err(|e| anyhow!("{} is not a valid .npz archive: {e}", path.display()))?;
    let mut out = BTreeMap::new();
    for i in 0..zip.len() {
        let mut entry = zip.by_index(i).map_err(|e| anyhow!("{}: {e}", path.display()))?;
        let name = entry.name().to_string();
        let key = name.strip_suffix(".npy").unwrap_or(&name).to_string();
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes).map_err(|e| anyhow!("{}: reading {name}: {e}", path.display()))?;
        let t = parse_npy(&bytes).map_err(|e| anyhow!("{}: array {key:?}: {e}", path.display()))?;
        out.insert(key, t);
    }
    Ok(out)
}

/// Writes arrays to an `.npz` file atomically (temporary file, then rename).
pub fn write_npz(path: &Path, arrays: &[(String, Tensor)]) -> Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let tmp =
        dir.join(format!(".{}.tmp-{}", path.file_name().and_then(|n| n.to_str()).unwrap_or("out"), std::process::id()));
    let result = (|| -> Result<()> {
        let file = std::fs::File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
        let mut zip = zip::ZipWriter::new(file);
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored)
            .large_file(true);
        for (name, t) in arrays {
            zip.start_file(format!("{name}.npy"), options)?;
            zip.write_all(&write_npy(t).with_context(|| format!("output {name:?}"))?)?;
        }
        zip.finish()?.sync_all()?;
        std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))?;
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
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
