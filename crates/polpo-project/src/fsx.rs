//! Crash-safe file writes and bounded reads.
//!
//! A config file is either the old complete content or the new complete content, never a
//! prefix: bytes go to a temp file in the same directory (same file system, so the rename
//! is atomic), the file is fsynced, renamed over the target, and the directory is fsynced so
//! the rename itself survives a power cut. Temp files are hidden (`.name.tmp-…`), so a crash
//! that leaves one behind never makes it look like part of the project.

use serde::Serialize;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Largest config or instructions file we read; anything bigger is a mistake, not a config.
pub const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// Replace `path` with `bytes` atomically (temp file, fsync, rename, fsync dir).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?
        .to_string_lossy();
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let tmp = dir.join(format!(".{name}.tmp-{}-{}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed)));
    let result = write_then_rename(&tmp, path, bytes).and_then(|()| sync_dir(dir));
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

fn write_then_rename(tmp: &Path, path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut file = OpenOptions::new().write(true).create_new(true).open(tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    fs::rename(tmp, path)
}

/// fsync a directory so renames and creations in it are durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// `value` as the project writes JSON: 2-space indentation and a trailing newline.
pub fn to_json_bytes<T: Serialize + ?Sized>(value: &T) -> io::Result<Vec<u8>> {
    let mut bytes = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// [`write_atomic`] of [`to_json_bytes`].
pub fn write_json_atomic<T: Serialize + ?Sized>(path: &Path, value: &T) -> io::Result<()> {
    write_atomic(path, &to_json_bytes(value)?)
}

/// Read a whole file, failing with `InvalidData` when it exceeds `max` bytes.
pub fn read_bounded(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    File::open(path)?.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("larger than {max} bytes")));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_two_space_indented_with_trailing_newline() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.json");
        write_json_atomic(&path, &serde_json::json!({"a": [1]})).unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "{\n  \"a\": [\n    1\n  ]\n}\n");
        let leftovers: Vec<_> = fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(leftovers, vec![std::ffi::OsString::from("a.json")], "no temp file is left behind");
    }

    #[test]
    fn oversized_reads_fail() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big");
        fs::write(&path, vec![b'x'; 11]).unwrap();
        assert_eq!(read_bounded(&path, 10).unwrap_err().kind(), io::ErrorKind::InvalidData);
        assert_eq!(read_bounded(&path, 11).unwrap().len(), 11);
    }
}
