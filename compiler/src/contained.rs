//! Files that a model or an attrs file names (external tensor data, `.npy` masks): resolved
//! inside the naming file's folder, regular files only, read in a bounded range.
//!
//! A model from the internet must not read what the user never pointed at: a location is
//! relative, has no `..`, and still lies inside the folder once every symbolic link on the way
//! is resolved (a link to `/etc/passwd` inside the folder is refused, not followed). Only
//! regular files are opened, after their type is checked, so a FIFO or `/dev/zero` cannot block
//! the process or feed it forever. A read takes exactly the range asked for, checked against the
//! file's size before anything is allocated, so a 1 GiB data file holding many tensors is read
//! once in pieces, not once per tensor.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Component, Path, PathBuf};

/// `rel` inside `base`, with every link resolved; an error names what was refused.
pub fn resolve(base: &Path, rel: &str) -> Result<PathBuf, String> {
    let relative = Path::new(rel);
    if relative.is_absolute() || relative.components().any(|c| !matches!(c, Component::Normal(_) | Component::CurDir)) {
        return Err(format!("{rel:?} must be a relative path inside {}", base.display()));
    }
    let root = std::fs::canonicalize(base).map_err(|e| format!("cannot open folder {}: {e}", base.display()))?;
    let joined = base.join(relative);
    let full = std::fs::canonicalize(&joined).map_err(|e| format!("cannot open {}: {e}", joined.display()))?;
    if !full.starts_with(&root) {
        return Err(format!("{} leads outside {} (to {})", joined.display(), root.display(), full.display()));
    }
    let meta = std::fs::metadata(&full).map_err(|e| format!("cannot open {}: {e}", full.display()))?;
    if !meta.is_file() {
        return Err(format!("{} is not a regular file", joined.display()));
    }
    Ok(full)
}

/// Bytes `offset .. offset + length` of the regular file `path` (to its end without a length),
/// the range checked against the file's size before it is read.
pub fn read_range(path: &Path, offset: u64, length: Option<u64>) -> Result<Vec<u8>, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!("{} is not a regular file", path.display()));
    }
    let size = meta.len();
    let end = match length {
        Some(l) => offset.checked_add(l),
        None => Some(size),
    };
    let end = match end {
        Some(end) if offset <= end && end <= size => end,
        _ => {
            let shown = length.map_or("end".to_string(), |l| format!("+{l}"));
            return Err(format!("range {offset}..{shown} is beyond the end of {} ({size} bytes)", path.display()));
        }
    };
    let len = usize::try_from(end - offset).map_err(|_| format!("{} bytes do not fit in memory", end - offset))?;
    let mut file = std::fs::File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    file.seek(SeekFrom::Start(offset)).map_err(|e| format!("cannot seek in {}: {e}", path.display()))?;
    let mut out = Vec::new();
    out.try_reserve_exact(len).map_err(|_| format!("{len} bytes of {} do not fit in memory", path.display()))?;
    file.take(len as u64).read_to_end(&mut out).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if out.len() != len {
        return Err(format!("{} ended after {} of {len} bytes (changed while read?)", path.display(), out.len()));
    }
    Ok(out)
}

/// The whole of a file the user named (a model, an attrs file, an input archive), refused with
/// an I/O error unless it is a regular file: a FIFO or a device would block or never end.
pub fn read_regular(path: &Path) -> std::io::Result<Vec<u8>> {
    check_regular(path)?;
    std::fs::read(path)
}

/// [`read_regular`] as UTF-8 text.
pub fn read_regular_text(path: &Path) -> std::io::Result<String> {
    String::from_utf8(read_regular(path)?)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8 text"))
}

/// An I/O error unless `path` is a regular file (links followed).
pub fn check_regular(path: &Path) -> std::io::Result<()> {
    if std::fs::metadata(path)?.is_file() {
        Ok(())
    } else {
        Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_inside_their_folder_after_links_are_resolved() {
        let dir = tempfile::tempdir().unwrap();
        let inner = dir.path().join("model");
        std::fs::create_dir(&inner).unwrap();
        std::fs::write(inner.join("w.bin"), [1u8, 2, 3, 4, 5]).unwrap();
        std::fs::write(dir.path().join("secret"), b"outside").unwrap();
        assert!(resolve(&inner, "w.bin").unwrap().ends_with("w.bin"));
        assert!(resolve(&inner, "./w.bin").is_ok());
        for bad in ["../secret", "/etc/passwd", "sub/../../secret"] {
            let e = resolve(&inner, bad).unwrap_err();
            assert!(e.contains("relative path inside"), "{bad}: {e}");
        }
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(dir.path().join("secret"), inner.join("link")).unwrap();
            let e = resolve(&inner, "link").unwrap_err();
            assert!(e.contains("leads outside"), "{e}");
            std::os::unix::fs::symlink("/dev/zero", inner.join("zero")).unwrap();
            assert!(resolve(&inner, "zero").is_err(), "a device is refused");
            // A link that stays inside is fine.
            std::os::unix::fs::symlink(inner.join("w.bin"), inner.join("alias")).unwrap();
            assert!(resolve(&inner, "alias").is_ok());
            // A FIFO would block on open: it is refused by its type, before any open.
            let fifo = inner.join("fifo");
            let made = std::process::Command::new("mkfifo").arg(&fifo).status().is_ok_and(|s| s.success());
            assert!(made, "mkfifo is needed for this test");
            let e = resolve(&inner, "fifo").unwrap_err();
            assert!(e.contains("not a regular file"), "{e}");
            assert!(read_range(&fifo, 0, Some(4)).unwrap_err().contains("not a regular file"));
            assert!(read_regular(&fifo).is_err() && read_regular(Path::new("/dev/zero")).is_err());
            assert_eq!(read_regular(&inner.join("alias")).unwrap(), [1, 2, 3, 4, 5]);
        }
        assert!(resolve(&inner, "missing.bin").unwrap_err().contains("cannot open"));
    }

    #[test]
    fn ranges_are_read_exactly_and_checked_against_the_size() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("d.bin");
        std::fs::write(&f, (0u8..10).collect::<Vec<_>>()).unwrap();
        assert_eq!(read_range(&f, 2, Some(3)).unwrap(), [2, 3, 4]);
        assert_eq!(read_range(&f, 7, None).unwrap(), [7, 8, 9]);
        assert_eq!(read_range(&f, 10, Some(0)).unwrap(), Vec::<u8>::new());
        for (offset, length) in [(8, Some(3)), (11, None), (u64::MAX, Some(2)), (0, Some(u64::MAX))] {
            let e = read_range(&f, offset, length).unwrap_err();
            assert!(e.contains("beyond the end"), "{offset} {length:?}: {e}");
        }
    }
}
