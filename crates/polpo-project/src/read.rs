//! Reading one project file into bytes, text or JSON, turning every failure into a located
//! [`Problem`] (in a `Vec`, like every loader result) instead of an early return, so the loader can keep going and report them all.

use crate::fsx::{MAX_FILE_BYTES, read_bounded};
use polpo_core::config::codes;
use polpo_core::problem::Problem;
use serde_json::Value;
use std::io;
use std::path::Path;

/// The bytes of `path` (shown to users as `shown`), or a problem.
pub fn bytes(path: &Path, shown: &str) -> Result<Vec<u8>, Vec<Problem>> {
    read_bounded(path, MAX_FILE_BYTES).map_err(|e| {
        vec![match e.kind() {
            io::ErrorKind::NotFound => Problem::new(codes::MISSING_AGENT_FILE, "file not found").in_file(shown),
            io::ErrorKind::InvalidData => Problem::new(codes::FILE_TOO_LARGE, format!("file is {e}")).in_file(shown),
            _ => Problem::new(codes::UNREADABLE_FILE, format!("cannot read file: {e}")).in_file(shown),
        }]
    })
}

/// UTF-8 text of `path`, or a problem.
pub fn text(path: &Path, shown: &str) -> Result<String, Vec<Problem>> {
    utf8(bytes(path, shown)?, shown)
}

/// Bytes of the file `shown` as UTF-8 text, or a problem.
pub fn utf8(bytes: Vec<u8>, shown: &str) -> Result<String, Vec<Problem>> {
    String::from_utf8(bytes).map_err(|_| vec![Problem::new(codes::INVALID_VALUE, "expected UTF-8 text").in_file(shown)])
}

/// Parse JSON, reporting syntax errors with line and column.
pub fn json_from(bytes: &[u8], shown: &str) -> Result<Value, Vec<Problem>> {
    serde_json::from_slice(bytes).map_err(|e| {
        let full = e.to_string();
        let suffix = format!(" at line {} column {}", e.line(), e.column());
        let message = full.strip_suffix(&suffix).unwrap_or(&full);
        vec![
            Problem::new(codes::INVALID_JSON, format!("not valid JSON: {message}"))
                .in_file(shown)
                .at_line(e.line(), e.column()),
        ]
    })
}

/// JSON of `path`, or a problem.
pub fn json(path: &Path, shown: &str) -> Result<Value, Vec<Problem>> {
    json_from(&bytes(path, shown)?, shown)
}
