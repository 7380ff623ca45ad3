//! Problems a user can see, each with a stable code.
//!
//! A `Problem` is data, not an `Error` chain: loaders and validators collect *all* problems
//! in a project before reporting, so a user fixes three mistakes in one pass instead of three.

use serde::{Deserialize, Serialize};
use std::fmt;

/// One thing wrong, located as precisely as we can: the file, the JSON pointer inside it,
/// and (for syntax errors) the line and column.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Problem {
    /// Stable snake_case code, e.g. `unknown_field`; scripts and tests match on it.
    pub code: String,
    /// A human sentence saying what is wrong and, where possible, what was expected.
    pub message: String,
    /// The file the problem is in, relative to the project root when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// RFC 6901 JSON pointer into `file` (`""` is the whole document).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pointer: Option<String>,
    /// 1-based line, for syntax errors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    /// 1-based column, for syntax errors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column: Option<usize>,
}

impl Problem {
    /// A problem with a code and a sentence, not yet located.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self { code: code.into(), message: message.into(), file: None, pointer: None, line: None, column: None }
    }

    /// Locate the problem in a file.
    pub fn in_file(mut self, file: impl Into<String>) -> Self {
        self.file = Some(file.into());
        self
    }

    /// Locate the problem at a JSON pointer inside its file.
    pub fn at(mut self, pointer: impl Into<String>) -> Self {
        self.pointer = Some(pointer.into());
        self
    }

    /// Locate the problem at a line and column (syntax errors).
    pub fn at_line(mut self, line: usize, column: usize) -> Self {
        self.line = Some(line);
        self.column = Some(column);
        self
    }
}

impl fmt::Display for Problem {
    /// `path:pointer: code: sentence`, the format `polpo validate` prints.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{file}")?;
            if let (Some(l), Some(c)) = (self.line, self.column) {
                write!(f, ":{l}:{c}")?;
            }
            if let Some(p) = &self.pointer {
                write!(f, ":{}", if p.is_empty() { "/" } else { p })?;
            }
            write!(f, ": ")?;
        }
        write!(f, "{}: {}", self.code, self.message)
    }
}

/// Escape one reference token for a JSON pointer (RFC 6901: `~` → `~0`, `/` → `~1`).
pub fn pointer_token(token: &str) -> String {
    let mut escaped = String::with_capacity(token.len());
    escape_token(&mut escaped, token);
    escaped
}

/// Append a token to a JSON pointer.
pub fn pointer_push(base: &str, token: &str) -> String {
    let mut pointer = base.to_owned();
    pointer_append(&mut pointer, token);
    pointer
}

/// Append a token to the JSON pointer `pointer` in place: a walk over a tree keeps one buffer
/// and cuts it back after each child, instead of a new string per node.
pub fn pointer_append(pointer: &mut String, token: &str) {
    pointer.push('/');
    escape_token(pointer, token);
}

/// Write `token` escaped ([`pointer_token`]) at the end of `out`.
fn escape_token(out: &mut String, token: &str) {
    for c in token.chars() {
        match c {
            '~' => out.push_str("~0"),
            '/' => out.push_str("~1"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_path_pointer_code_sentence() {
        let p = Problem::new("unknown_field", "field `colour` is not known")
            .in_file(".polpo/project.json")
            .at("/settings/colour");
        assert_eq!(p.to_string(), ".polpo/project.json:/settings/colour: unknown_field: field `colour` is not known");
    }

    #[test]
    fn pointer_tokens_are_escaped() {
        assert_eq!(pointer_push("/a", "b/c~d"), "/a/b~1c~0d");
    }
}
