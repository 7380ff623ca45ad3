//! `edit {path, old_text, new_text}`: replace one exact occurrence in a file.

use super::text::{read_text_bounded, replace_unique};
use super::write::write_file;
use crate::args::spec;
use crate::sandbox::resolve_in_sandbox;
use crate::{ToolContext, ToolError, ToolOutput};
use polpo_core::tool::ToolEffect;
use serde::Deserialize;
use serde_json::json;

/// Largest file `edit` rewrites.
const MAX_EDIT_BYTES: u64 = 10 * 1024 * 1024;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    path: String,
    old_text: String,
    new_text: String,
}

builtin_tool! {
    /// Replaces `old_text`, which must occur exactly once, with `new_text`. Its effect is `Write`:
    /// replaying an edit after the text changed may fail or hit a different place.
    EditTool {
        spec: spec(
            "edit",
            "Edit a file by replacing an exact string. old_text must occur exactly once in the file; include enough surrounding context to make it unique.",
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File path, relative to the workspace or absolute."},
                    "old_text": {"type": "string", "description": "Exact text to replace (must match once)."},
                    "new_text": {"type": "string", "description": "Replacement text."}
                },
                "required": ["path", "old_text", "new_text"],
                "additionalProperties": false
            }),
        ),
        effect: ToolEffect::Write,
        call: edit,
    }
}

/// The body of [`EditTool`]: `args` already decoded.
async fn edit(ctx: &ToolContext, args: Args) -> Result<ToolOutput, ToolError> {
    let path = resolve_in_sandbox(ctx, &args.path)?;
    let content = read_text_bounded(&path, MAX_EDIT_BYTES).await?;
    let updated = replace_unique(&content, &args.old_text, &args.new_text)?;
    write_file(&path, updated.as_bytes()).await?;
    Ok(ToolOutput {
        text: format!("File edited: {} (1 replacement)", path.display()),
        details: json!({"path": path, "bytes": updated.len()}),
    })
}
