//! Markdown memory tools: `memory_get`, `memory_save`, `memory_append`, `memory_update`.
//!
//! They operate on the agent's memory file chosen by the runtime ([`ToolContext::memory_file`]),
//! never on a path the model names, so they need no sandbox check.

use super::text::{read_text_bounded, replace_unique};
use super::write::write_file;
use crate::args::spec;
use crate::{ToolContext, ToolError, ToolOutput};
use polpo_core::tool::ToolEffect;
use serde::Deserialize;
use serde_json::json;
use std::path::Path;

/// Largest memory file the tools accept, so memory stays something a prompt can hold.
const MAX_MEMORY_BYTES: usize = 256 * 1024;

fn memory_path(ctx: &ToolContext) -> Result<&Path, ToolError> {
    ctx.memory_file.as_deref().ok_or_else(|| ToolError::new("memory_unavailable", "this agent has no memory file"))
}

/// The memory content; a missing file is empty memory.
async fn load(path: &Path) -> Result<String, ToolError> {
    match read_text_bounded(path, MAX_MEMORY_BYTES as u64).await {
        Err(e) if e.code == "file_not_found" => Ok(String::new()),
        other => other,
    }
}

async fn store(path: &Path, content: &str) -> Result<ToolOutput, ToolError> {
    if content.len() > MAX_MEMORY_BYTES {
        return Err(ToolError::new(
            "memory_too_large",
            format!("memory would be {} bytes; the limit is {MAX_MEMORY_BYTES}", content.len()),
        ));
    }
    write_file(path, content.as_bytes()).await?;
    Ok(ToolOutput {
        text: format!("Memory saved ({} bytes)", content.len()),
        details: json!({"path": path, "bytes": content.len()}),
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SaveArgs {
    content: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AppendArgs {
    text: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateArgs {
    old_text: String,
    new_text: String,
}

builtin_tool! {
    /// `memory_get {}`: the whole memory file.
    MemoryGetTool {
        spec: spec(
            "memory_get",
            "Read your persistent memory (markdown).",
            json!({"type": "object", "properties": {}, "additionalProperties": false}),
        ),
        effect: ToolEffect::Read,
        call: memory_get,
    }
}

/// The body of [`MemoryGetTool`]: `args` already decoded.
async fn memory_get(ctx: &ToolContext, _: NoArgs) -> Result<ToolOutput, ToolError> {
    let path = memory_path(ctx)?;
    let content = load(path).await?;
    let text = if content.is_empty() { "(memory is empty)".to_owned() } else { content.clone() };
    Ok(ToolOutput { text, details: json!({"path": path, "bytes": content.len()}) })
}

builtin_tool! {
    /// `memory_save {content}`: replace the whole memory (idempotent).
    MemorySaveTool {
        spec: spec(
            "memory_save",
            "Overwrite your persistent memory with new markdown content.",
            json!({
                "type": "object",
                "properties": {"content": {"type": "string", "description": "The complete new memory."}},
                "required": ["content"],
                "additionalProperties": false
            }),
        ),
        effect: ToolEffect::Idempotent,
        call: memory_save,
    }
}

/// The body of [`MemorySaveTool`]: `args` already decoded.
async fn memory_save(ctx: &ToolContext, args: SaveArgs) -> Result<ToolOutput, ToolError> {
    store(memory_path(ctx)?, &args.content).await
}

builtin_tool! {
    /// `memory_append {text}`: add one timestamped line (not idempotent: twice adds two lines).
    MemoryAppendTool {
        spec: spec(
            "memory_append",
            "Append a timestamped line to your persistent memory.",
            json!({
                "type": "object",
                "properties": {"text": {"type": "string", "description": "What to remember."}},
                "required": ["text"],
                "additionalProperties": false
            }),
        ),
        effect: ToolEffect::Write,
        call: memory_append,
    }
}

/// The body of [`MemoryAppendTool`]: `args` already decoded.
async fn memory_append(ctx: &ToolContext, args: AppendArgs) -> Result<ToolOutput, ToolError> {
    let path = memory_path(ctx)?;
    let mut content = load(path).await?;
    if !content.is_empty() && !content.ends_with('\n') {
        content.push('\n');
    }
    let stamp = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ");
    let line = args.text.replace('\n', " ");
    content.push_str(&format!("- [{stamp}] {line}\n"));
    store(path, &content).await
}

builtin_tool! {
    /// `memory_update {old_text, new_text}`: replace one exact, unique passage.
    MemoryUpdateTool {
        spec: spec(
            "memory_update",
            "Replace an exact passage of your persistent memory; old_text must occur exactly once.",
            json!({
                "type": "object",
                "properties": {
                    "old_text": {"type": "string", "description": "Exact text to replace (must match once)."},
                    "new_text": {"type": "string", "description": "Replacement text."}
                },
                "required": ["old_text", "new_text"],
                "additionalProperties": false
            }),
        ),
        effect: ToolEffect::Write,
        call: memory_update,
    }
}

/// The body of [`MemoryUpdateTool`]: `args` already decoded.
async fn memory_update(ctx: &ToolContext, args: UpdateArgs) -> Result<ToolOutput, ToolError> {
    let path = memory_path(ctx)?;
    let updated = replace_unique(&load(path).await?, &args.old_text, &args.new_text)?;
    store(path, &updated).await
}
