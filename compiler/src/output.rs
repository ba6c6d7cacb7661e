//! Writing output files so that a failure never leaves a partial file behind: every writer of
//! the project goes through [`write_atomic_with`]. The bytes go to a temporary file in the
//! target's folder under a name no other writer uses (`.NAME.PID-N.tmp`: process id and a
//! per-process counter, so a user's `plan.tmp` is never touched), are synced, and the file is
//! renamed over the target; on any failure the temporary file is removed and the target is left
//! as it was.
//!
//! A command that writes several files checks every target with [`check_target`] before it
//! does its work, so that a side output that cannot be written (a `--json` into a missing
//! folder) fails the command before the main output has replaced anything.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// The temporary name [`write_atomic_with`] uses for `path`.
fn temporary_for(path: &Path) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "out".into());
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    dir.join(format!(".{name}.{}-{n}.tmp", std::process::id()))
}

/// Whether an output file can be written at `path`, checked before any work is done: its folder
/// exists and is a folder, and `path` is not a directory (nor names one with a trailing `/`) or
/// another non-regular file (a FIFO, a device: renaming over it would replace the node). The
/// error says which, naming `path`.
pub fn check_target(path: &Path) -> std::io::Result<()> {
    use std::io::{Error, ErrorKind};
    let refuse =
        |kind: ErrorKind, why: String| Err(Error::new(kind, format!("cannot write {}: {why}", path.display())));
    let text = path.as_os_str().to_string_lossy();
    if text.is_empty() {
        return refuse(ErrorKind::InvalidInput, "an empty path".into());
    }
    if text.ends_with('/') || path.file_name().is_none() {
        return refuse(ErrorKind::InvalidInput, "the output path names a directory".into());
    }
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => return refuse(ErrorKind::InvalidInput, "the output path is a directory".into()),
        Ok(m) if !m.is_file() => {
            return refuse(ErrorKind::InvalidInput, "the output path exists and is not a regular file".into())
        }
        _ => {}
    }
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => refuse(ErrorKind::InvalidInput, format!("{} is not a folder", dir.display())),
        Err(e) if e.kind() == ErrorKind::NotFound => {
            refuse(ErrorKind::NotFound, format!("the folder {} does not exist", dir.display()))
        }
        Err(e) => refuse(e.kind(), format!("cannot reach the folder {}: {e}", dir.display())),
    }
}

/// Writes `path` by `write` (buffered), atomically: see the module docs. The error is the
/// first one met, with the path it concerns in its message.
pub fn write_atomic_with(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> std::io::Result<()> {
    check_target(path)?;
    let tmp = temporary_for(path);
    let result = (|| {
        let file = File::create(&tmp)?;
        let mut out = BufWriter::new(file);
        write(&mut out)?;
        let file = out.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(std::io::Error::new(e.kind(), format!("cannot write {}: {e}", path.display())));
    }
    Ok(())
}

/// [`write_atomic_with`] for bytes in memory.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_atomic_with(path, |out| out.write_all(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_write_leaves_the_target_and_no_temporary_and_spares_a_users_tmp_file() {
        let dir = std::env::temp_dir().join(format!("spartac-output-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("plan.json");
        let users = dir.join("plan.tmp");
        std::fs::write(&target, b"old").unwrap();
        std::fs::write(&users, b"mine").unwrap();
        // The writer fails half way: the old file stays, nothing else appears.
        let err = write_atomic_with(&target, |out| {
            out.write_all(b"half")?;
            Err(std::io::Error::other("disk full"))
        })
        .unwrap_err();
        assert!(err.to_string().contains("plan.json") && err.to_string().contains("disk full"), "{err}");
        assert_eq!(std::fs::read(&target).unwrap(), b"old");
        assert_eq!(std::fs::read(&users).unwrap(), b"mine");
        let names: Vec<String> =
            std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        assert_eq!(names.len(), 2, "{names:?}");
        // A good write replaces the target.
        write_atomic(&target, b"new").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
        // A folder that does not exist: an error naming the target.
        let err = write_atomic(&dir.join("missing/x.json"), b"x").unwrap_err();
        assert!(err.to_string().contains("missing/x.json"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn targets_are_checked_before_anything_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("file"), b"x").unwrap();
        assert!(check_target(&d.join("new.json")).is_ok());
        assert!(check_target(&d.join("file")).is_ok(), "an existing file is replaced");
        let why = |p: &Path| check_target(p).unwrap_err().to_string();
        assert!(why(d).contains("the output path is a directory"), "{}", why(d));
        let slash = PathBuf::from(format!("{}/sub/", d.display()));
        assert!(why(&slash).contains("names a directory"), "{}", why(&slash));
        let missing = d.join("nodir/r.json");
        assert!(why(&missing).contains("does not exist") && why(&missing).contains("nodir/r.json"));
        assert!(why(&d.join("file/r.json")).contains("is not a folder"));
        assert!(why(Path::new("/dev/null")).contains("not a regular file"));
        // The writer refuses a directory too, and leaves it as it was.
        assert!(write_atomic(d, b"x").unwrap_err().to_string().contains("is a directory"));
        assert!(d.is_dir());
    }
}
