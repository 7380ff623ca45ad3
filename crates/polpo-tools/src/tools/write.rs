//! `write {path, content}`: create or overwrite a file.

use crate::args::{io_error, spec};
use crate::sandbox::resolve_in_sandbox;
use crate::{ToolContext, ToolError, ToolOutput};
use polpo_core::tool::ToolEffect;
use serde::Deserialize;
use serde_json::json;
use std::path::Path;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    path: String,
    content: String,
}

builtin_tool! {
    /// Writes a whole file, creating parent directories. Idempotent: writing the same content
    /// twice leaves the same file, so crash recovery may replay it.
    WriteTool {
        spec: spec(
            "write",
            "Write a file with the given content, replacing it if it exists. Parent directories are created.",
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File path, relative to the workspace or absolute."},
                    "content": {"type": "string", "description": "The complete new file content."}
                },
                "required": ["path", "content"],
                "additionalProperties": false
            }),
        ),
        effect: ToolEffect::Idempotent,
        call: write,
    }
}

/// The body of [`WriteTool`]: `args` already decoded.
async fn write(ctx: &ToolContext, args: Args) -> Result<ToolOutput, ToolError> {
    let path = resolve_in_sandbox(ctx, &args.path)?;
    write_file(&path, args.content.as_bytes()).await?;
    let bytes = args.content.len();
    Ok(ToolOutput {
        text: format!("File written: {} ({bytes} bytes)", path.display()),
        details: json!({"path": path, "bytes": bytes}),
    })
}

/// Writes `content` to `path`, creating missing parent directories first.
pub(crate) async fn write_file(path: &Path, content: &[u8]) -> Result<(), ToolError> {
    if let Some(parent) = path.parent() {
        tokio::fs::create_dir_all(parent).await.map_err(|e| io_error("create directory", parent, &e))?;
    }
    tokio::fs::write(path, content).await.map_err(|e| io_error("write", path, &e))
}
