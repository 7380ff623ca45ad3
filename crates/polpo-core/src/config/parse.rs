//! Check a JSON document against its shape, then deserialize it: all problems or a value.

use super::codes;
use super::schema::{Shape, check};
use crate::problem::Problem;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Where a document sits: its file (relative to the project root) and, for entries of an
/// aggregate file, the pointer of the entry inside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// File relative to the project root, e.g. `.polpo/agents/support/agent.json`.
    pub file: String,
    /// Pointer prefix of the document inside `file` (`""` for a whole file).
    pub pointer: String,
}

impl Location {
    /// A whole file.
    pub fn file(file: impl Into<String>) -> Self {
        Self { file: file.into(), pointer: String::new() }
    }

    /// The entry at `pointer` of this location.
    pub fn child(&self, token: &str) -> Self {
        Self { file: self.file.clone(), pointer: crate::problem::pointer_push(&self.pointer, token) }
    }

    /// A problem at `pointer` (relative to this location).
    pub fn problem(&self, code: &str, message: impl Into<String>, pointer: &str) -> Problem {
        Problem::new(code, message).in_file(self.file.clone()).at(format!("{}{pointer}", self.pointer))
    }

    /// Move a problem found relative to this location into the file.
    pub fn locate(&self, p: Problem) -> Problem {
        let pointer = format!("{}{}", self.pointer, p.pointer.as_deref().unwrap_or(""));
        Problem { file: Some(self.file.clone()), pointer: Some(pointer), ..p }
    }
}

/// Every problem of `value` against `shape`, or the typed value. A serde failure after a
/// clean schema check (the two disagree, which tests guard against) is still reported as a
/// located `invalid_value` rather than lost.
pub fn parse_checked<T: DeserializeOwned>(value: &Value, shape: &Shape, at: &Location) -> Result<T, Vec<Problem>> {
    let problems = check(value, shape);
    if !problems.is_empty() {
        return Err(problems.into_iter().map(|p| at.locate(p)).collect());
    }
    serde_json::from_value(value.clone()).map_err(|e| vec![at.problem(codes::INVALID_VALUE, e.to_string(), "")])
}
