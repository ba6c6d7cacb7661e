//! Output paths checked before a command does its work: a side output that cannot be written
//! (`--json` into a missing folder, `-o` naming a directory) fails the command first, so the
//! main output is never replaced by a run that then fails. The writes themselves stay atomic
//! (`spartac::output`).

use anyhow::{anyhow, Result};
use std::path::Path;

/// Checks every given output path (flag name, path) with [`spartac::output::check_target`];
/// the error names the flag.
pub fn check_outputs<'a>(targets: impl IntoIterator<Item = (&'a str, Option<&'a Path>)>) -> Result<()> {
    for (flag, path) in targets {
        if let Some(path) = path {
            spartac::output::check_target(path).map_err(|e| anyhow!("{flag}: {e}"))?;
        }
    }
    Ok(())
}

/// Writes `path` atomically ([`spartac::output::write_atomic`]).
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    Ok(spartac::output::write_atomic(path, bytes)?)
}
