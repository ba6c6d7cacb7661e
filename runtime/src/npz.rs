//! Reading and writing `.npz` archives (a zip of `.npy` arrays), keyed by tensor name.
//! Writes go to a temporary file that is renamed into place, so a failed write never
//! leaves a partial file behind. The `.npy` arrays inside are parsed by `spartac::npy`.

use anyhow::{anyhow, Context, Result};
use spartac::ir::Tensor;
pub use spartac::npy::{parse_npy, write_npy};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;

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
