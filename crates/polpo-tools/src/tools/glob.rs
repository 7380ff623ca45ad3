//! `glob {pattern, path?}`: find files by name pattern.

use super::text::{display_path, real_workspace};
use super::walk::{Stop, walk_files};
use crate::args::spec;
use crate::sandbox::{PathRules, resolve_in_sandbox};
use crate::{ToolContext, ToolError, ToolOutput};
use polpo_core::tool::ToolEffect;
use serde::Deserialize;
use serde_json::json;
use std::time::{Duration, Instant};

/// Paths returned at most.
const MAX_RESULTS: usize = 200;
/// Matches collected before sorting; past it the walk stops (the result says so).
const MAX_COLLECTED: usize = 10_000;
/// Wall-clock bound of one walk.
const TIME_LIMIT: Duration = Duration::from_secs(15);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    pattern: String,
    path: Option<String>,
}

builtin_tool! {
    /// Lists files whose path (relative to the search directory) matches a glob with `**`, `?`,
    /// `[]` and `{a,b}`; files only, no dotfiles, sorted, at most 200.
    GlobTool {
        spec: spec(
            "glob",
            "Find files matching a glob pattern (supports **, ?, [] and {a,b}), relative to the search directory. Files only, no dotfiles, sorted, at most 200.",
            json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "Glob such as `**/*.rs` or `src/*.{ts,tsx}`."},
                    "path": {"type": "string", "description": "Directory to search (default: the workspace)."}
                },
                "required": ["pattern"],
                "additionalProperties": false
            }),
        ),
        effect: ToolEffect::Read,
        call: glob,
    }
}

/// The body of [`GlobTool`]: `args` already decoded.
async fn glob(ctx: &ToolContext, args: Args) -> Result<ToolOutput, ToolError> {
    let base = resolve_in_sandbox(ctx, args.path.as_deref().unwrap_or("."))?;
    let rules = PathRules::of(ctx)?;
    let matcher = globset::GlobBuilder::new(&args.pattern)
        .literal_separator(true)
        .build()
        .map_err(|e| ToolError::new("invalid_pattern", format!("invalid glob pattern: {e}")))?
        .compile_matcher();
    let cancel = ctx.cancel.clone();
    let workspace = real_workspace(ctx);
    tokio::task::spawn_blocking(move || {
        let mut found = Vec::new();
        let stop = walk_files(&base, &rules, Instant::now() + TIME_LIMIT, &cancel, |file| {
            let relative = file.strip_prefix(&base).unwrap_or(file);
            if matcher.is_match(relative) {
                found.push(display_path(&workspace, file));
            }
            found.len() < MAX_COLLECTED
        })?;
        found.sort();
        let total = found.len();
        found.truncate(MAX_RESULTS);
        let mut text = if found.is_empty() { "No files found".to_owned() } else { found.join("\n") };
        if total > MAX_RESULTS {
            text.push_str(&format!("\n... ({} more files; narrow the pattern)", total - MAX_RESULTS));
        }
        if stop == Some(Stop::Deadline) {
            text.push_str("\n(search stopped at the time limit; results may be incomplete)");
        }
        Ok(ToolOutput { text, details: json!({"matches": total, "complete": stop.is_none()}) })
    })
    .await
    .map_err(|e| ToolError::new("internal", format!("glob task failed: {e}")))?
}
