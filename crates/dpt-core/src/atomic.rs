//! The one way dpt-tui writes a file that must never be seen half-written (weights,
//! checkpoints, `server.json`, pictures): a temporary file in the same folder, flushed to disk,
//! renamed over the target, then the folder flushed so the rename itself survives a crash. A
//! failure leaves the previous file as it was and no temporary file behind.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The temporary file `path` is written through (same folder, so the rename is atomic).
fn temporary(path: &Path) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    path.with_file_name(format!(".{name}.{}.tmp", std::process::id()))
}

/// Writes `path` atomically; `write` fills the temporary file it is given.
pub fn write_with(path: &Path, write: impl FnOnce(&Path) -> std::io::Result<()>) -> std::io::Result<()> {
    let tmp = temporary(path);
    let result = (|| {
        write(&tmp)?;
        std::fs::File::open(&tmp)?.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Writes `bytes` to `path` atomically.
pub fn write_bytes(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_with(path, |tmp| {
        let mut f = std::fs::File::create(tmp)?;
        f.write_all(bytes)?;
        f.flush()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_write_keeps_the_old_file_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.json");
        write_bytes(&path, b"old").unwrap();
        let err = write_with(&path, |tmp| {
            std::fs::write(tmp, b"half")?;
            Err(std::io::Error::other("disk full"))
        });
        assert!(err.is_err());
        assert_eq!(std::fs::read(&path).unwrap(), b"old");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "no temporary left");
        write_bytes(&path, b"new").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
    }
}
