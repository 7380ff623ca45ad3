//! `ls {path?}`: the entries of a directory.

use crate::args::{io_error, spec};
use crate::sandbox::{PathRules, resolve_in_sandbox};
use crate::{ToolContext, ToolError, ToolOutput};
use polpo_core::tool::ToolEffect;
use serde::Deserialize;
use serde_json::json;

/// Entries listed at most, so a huge directory cannot flood the context.
const MAX_ENTRIES: usize = 1000;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    path: Option<String>,
}

builtin_tool! {
    /// Lists a directory (default: the workspace), sorted, directories suffixed with `/`. Protected
    /// entries (the project's `.polpo/`) are left out, as they are for every other file tool.
    LsTool {
        spec: spec(
            "ls",
            "List a directory's entries, sorted; directories end with `/`.",
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "Directory, relative to the workspace or absolute (default: the workspace)."}
                },
                "additionalProperties": false
            }),
        ),
        effect: ToolEffect::Read,
        call: ls,
    }
}

/// The body of [`LsTool`]: `args` already decoded.
async fn ls(ctx: &ToolContext, args: Args) -> Result<ToolOutput, ToolError> {
    let dir = resolve_in_sandbox(ctx, args.path.as_deref().unwrap_or("."))?;
    let rules = PathRules::of(ctx)?;
    let mut reader = tokio::fs::read_dir(&dir).await.map_err(|e| io_error("list", &dir, &e))?;
    let mut entries = Vec::new();
    while let Some(entry) = reader.next_entry().await.map_err(|e| io_error("list", &dir, &e))? {
        if rules.is_protected(&entry.path()) {
            continue;
        }
        let mut name = entry.file_name().to_string_lossy().into_owned();
        // Follow symlinks for the suffix: a link to a directory is listed as one.
        if tokio::fs::metadata(entry.path()).await.map(|m| m.is_dir()).unwrap_or(false) {
            name.push('/');
        }
        entries.push(name);
    }
    entries.sort();
    let total = entries.len();
    entries.truncate(MAX_ENTRIES);
    let mut text = if entries.is_empty() { "(empty directory)".to_owned() } else { entries.join("\n") };
    if total > MAX_ENTRIES {
        text.push_str(&format!("\n... ({} more entries)", total - MAX_ENTRIES));
    }
    Ok(ToolOutput { text, details: json!({"path": dir, "entries": total}) })
}
