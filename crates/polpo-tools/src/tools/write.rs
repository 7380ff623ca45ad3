//! `write {path, content}`: create or overwrite a file.

use crate::args::{io_error, parse_args, spec};
use crate::sandbox::resolve_in_sandbox;
use crate::{Tool, ToolContext, ToolError, ToolOutput};
use polpo_core::tool::{ToolEffect, ToolSpec};
use serde::Deserialize;
use serde_json::json;
use std::path::Path;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    path: String,
    content: String,
}

/// Writes a whole file, creating parent directories. Idempotent: writing the same content
/// twice leaves the same file, so crash recovery may replay it.
pub struct WriteTool {
    spec: ToolSpec,
}

impl WriteTool {
    /// The tool with its spec.
    pub fn new() -> Self {
        Self {
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
        }
    }
}

impl Default for WriteTool {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait::async_trait]
impl Tool for WriteTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::Idempotent
    }

    async fn call(
        &self,
        ctx: &ToolContext,
        args: serde_json::Value,
    ) -> Result<ToolOutput, ToolError> {
        let args: Args = parse_args(args)?;
        let path = resolve_in_sandbox(ctx, &args.path)?;
        write_file(&path, args.content.as_bytes()).await?;
        let bytes = args.content.len();
        Ok(ToolOutput {
            text: format!("File written: {} ({bytes} bytes)", path.display()),
            details: json!({"path": path, "bytes": bytes}),
        })
    }
}

/// Writes `content` to `path`, creating missing parent directories first.
pub(crate) async fn write_file(path: &Path, content: &[u8]) -> Result<(), ToolError> {
    if let Some(parent) = path.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(|e| io_error("create directory", parent, &e))?;
    }
    tokio::fs::write(path, content)
        .await
        .map_err(|e| io_error("write", path, &e))
}
