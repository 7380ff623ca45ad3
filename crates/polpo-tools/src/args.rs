//! Argument decoding and spec building shared by every built-in tool.

use crate::ToolError;
use polpo_core::tool::ToolSpec;
use serde::de::DeserializeOwned;

/// Decodes a call's JSON arguments into the tool's typed parameters, so each tool handles
/// typed data and every tool reports bad arguments the same way (`invalid_arguments`).
pub(crate) fn parse_args<T: DeserializeOwned>(args: serde_json::Value) -> Result<T, ToolError> {
    serde_json::from_value(args).map_err(|e| ToolError::new("invalid_arguments", format!("invalid arguments: {e}")))
}

/// Builds a [`ToolSpec`] from literals, keeping each tool's declaration to one expression.
pub(crate) fn spec(name: &str, description: &str, parameters: serde_json::Value) -> ToolSpec {
    ToolSpec { name: name.to_owned(), description: description.to_owned(), parameters }
}

/// Maps an I/O failure on `path` to a tool error with a stable code.
pub(crate) fn io_error(action: &str, path: &std::path::Path, err: &std::io::Error) -> ToolError {
    let code = match err.kind() {
        std::io::ErrorKind::NotFound => "file_not_found",
        std::io::ErrorKind::PermissionDenied => "permission_denied",
        std::io::ErrorKind::IsADirectory => "is_a_directory",
        std::io::ErrorKind::NotADirectory => "not_a_directory",
        _ => "io_error",
    };
    ToolError::new(code, format!("cannot {action} {}: {err}", path.display()))
}
