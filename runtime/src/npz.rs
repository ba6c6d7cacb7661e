//! Reading and writing `.npz` archives (a zip of `.npy` arrays), keyed by tensor name.
//! Writes go to a temporary file that is renamed into place, so a failed write never
//! leaves a partial file behind. The `.npy` arrays inside are parsed by `spartac::npy`; a
//! member is read no further than its header's shape declares (a small archive that inflates
//! to gigabytes is refused before it does).

use anyhow::{anyhow, Context, Result};
use spartac::ir::Tensor;
pub use spartac::npy::{parse_npy, write_npy};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;

/// Reads every array of an `.npz` file.
pub fn read_npz(path: &Path) -> Result<BTreeMap<String, Tensor>> {
    spartac::contained::check_regular(path).with_context(|| format!("cannot open {}", path.display()))?;
    let file = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut zip =
        zip::ZipArchive::new(file).map_err(|e| anyhow!("{} is not a valid .npz archive: {e}", path.display()))?;
    let mut out = BTreeMap::new();
    for i in 0..zip.len() {
        let mut entry = zip.by_index(i).map_err(|e| anyhow!("{}: {e}", path.display()))?;
        let name = entry.name().to_string();
        let key = name.strip_suffix(".npy").unwrap_or(&name).to_string();
        let bytes = read_bounded(&mut entry).map_err(|e| anyhow!("{}: array {key:?}: {e}", path.display()))?;
        let t = parse_npy(&bytes).map_err(|e| anyhow!("{}: array {key:?}: {e}", path.display()))?;
        out.insert(key, t);
    }
    Ok(out)
}

/// Reads one `.npy` member no further than its header says it extends: the header first (in
/// pieces, never more than it names), then exactly the data its shape declares, and one byte
/// more to tell a member that holds extra data. A member that inflates past its declared
/// shape is an error before the excess is read; memory grows only with data that arrives.
fn read_bounded(entry: &mut impl Read) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    let mut want = spartac::npy::NPY_PREAMBLE;
    let header = loop {
        let got = (&mut *entry).take((want - bytes.len()) as u64).read_to_end(&mut bytes)?;
        match spartac::npy::parse_npy_header(&bytes)? {
            Some(h) => break h,
            None if got == 0 => return Err(anyhow!("truncated .npy header")),
            // The header's length is known from the preamble: read up to its end.
            None => want = header_end(&bytes).unwrap_or(want).max(bytes.len() + 1),
        }
    };
    let total = header.file_bytes();
    (&mut *entry).take((total + 1).saturating_sub(bytes.len()) as u64).read_to_end(&mut bytes)?;
    if bytes.len() > total {
        return Err(anyhow!(
            "holds more data than its header's shape {:?} of {} ({} bytes)",
            header.shape,
            header.dtype,
            header.data_bytes
        ));
    }
    Ok(bytes)
}

/// Where the header dict of a `.npy` file ends, from its preamble.
fn header_end(bytes: &[u8]) -> Option<usize> {
    match *bytes.get(6)? {
        1 => Some(10 + u16::from_le_bytes([*bytes.get(8)?, *bytes.get(9)?]) as usize),
        _ => Some(12 + u32::from_le_bytes(bytes.get(8..12)?.try_into().ok()?) as usize),
    }
}

/// Writes arrays to an `.npz` file atomically (temporary file, then rename).
pub fn write_npz(path: &Path, arrays: &[(String, Tensor)]) -> Result<()> {
    // The archive is built in memory (outputs are already in memory), then written atomically.
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored).large_file(true);
    for (name, t) in arrays {
        zip.start_file(format!("{name}.npy"), options).with_context(|| format!("output {name:?}"))?;
        zip.write_all(&write_npy(t).with_context(|| format!("output {name:?}"))?)?;
    }
    let bytes = zip.finish().context("building the .npz archive")?.into_inner();
    spartac::output::write_atomic(path, &bytes)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn npz_with(member: &[u8], deflate: bool) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("spartac-npz-{}-{deflate}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("m{}.npz", member.len()));
        let mut zip = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
        let method = if deflate { zip::CompressionMethod::Deflated } else { zip::CompressionMethod::Stored };
        zip.start_file("x.npy", zip::write::SimpleFileOptions::default().compression_method(method)).unwrap();
        zip.write_all(member).unwrap();
        zip.finish().unwrap();
        path
    }

    #[test]
    fn a_member_that_inflates_past_its_shape_is_refused_unread() {
        // A header for 8 x 64 f32 (2 KiB), followed by 64 MiB of zeros that deflate to ~64 KiB.
        let t = Tensor::from_vec(vec![8, 64], vec![0.0f32; 8 * 64]);
        let mut member = write_npy(&t).unwrap();
        member.resize(member.len() + (64 << 20), 0);
        let path = npz_with(&member, true);
        assert!(std::fs::metadata(&path).unwrap().len() < 1 << 20, "the archive is small");
        let e = read_npz(&path).unwrap_err().to_string();
        assert!(e.contains("more data than its header's shape [8, 64]"), "{e}");
    }

    #[test]
    fn exact_members_read_back_and_short_ones_fail() {
        let t = Tensor::from_vec(vec![3, 5], (0..15).map(|i| i as f32).collect::<Vec<_>>());
        let member = write_npy(&t).unwrap();
        for deflate in [false, true] {
            let back = read_npz(&npz_with(&member, deflate)).unwrap();
            assert_eq!(back["x"], t);
        }
        let short = npz_with(&member[..member.len() - 4], false);
        let e = read_npz(&short).unwrap_err().to_string();
        assert!(e.contains("needs 60"), "{e}");
        let header_only = npz_with(&member[..20], false);
        assert!(read_npz(&header_only).unwrap_err().to_string().contains("truncated .npy header"));
    }

    #[test]
    fn a_shape_too_large_to_address_is_an_error_not_an_overflow() {
        let header = "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }";
        let mut member = b"\x93NUMPY\x01\x00".to_vec();
        let mut h = header.as_bytes().to_vec();
        while !(10 + h.len() + 1).is_multiple_of(64) {
            h.push(b' ');
        }
        h.push(b'\n');
        member.extend_from_slice(&(h.len() as u16).to_le_bytes());
        member.extend_from_slice(&h);
        let e = read_npz(&npz_with(&member, false)).unwrap_err().to_string();
        assert!(e.contains("too large to address"), "{e}");
    }
}
