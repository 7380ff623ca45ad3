//! `grep {pattern, path?, include?}`: search file contents with a regular expression.

use super::text::{display_path, real_workspace};
use super::walk::{Stop, walk_files};
use crate::args::spec;
use crate::sandbox::{PathRules, resolve_in_sandbox};
use crate::{ToolContext, ToolError, ToolOutput};
use polpo_core::tool::ToolEffect;
use serde::Deserialize;
use serde_json::json;
use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant};

/// Matching lines returned at most.
const MAX_LINES: usize = 100;
/// Wall-clock bound of one search.
const TIME_LIMIT: Duration = Duration::from_secs(15);
/// Files larger than this are skipped (logs, data dumps).
const MAX_FILE_BYTES: u64 = 10 * 1024 * 1024;
/// Longest line text shown per match.
const MAX_LINE_CHARS: usize = 500;
/// Compiled-regex size bound, so a pathological pattern fails fast instead of eating memory.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    pattern: String,
    path: Option<String>,
    include: Option<String>,
}

builtin_tool! {
    /// Prints `path:line:text` for lines matching a regex, at most 100 lines within 15 s. Binary
    /// and very large files are skipped; dotfiles and ignored files too, as in `glob`.
    GrepTool {
        spec: spec(
            "grep",
            "Search file contents with a regular expression. Prints `path:line:text` for each matching line (at most 100).",
            json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "Regular expression (Rust regex syntax, close to PCRE without look-around)."},
                    "path": {"type": "string", "description": "File or directory to search (default: the workspace)."},
                    "include": {"type": "string", "description": "Only search files matching this glob, e.g. `*.rs`."}
                },
                "required": ["pattern"],
                "additionalProperties": false
            }),
        ),
        effect: ToolEffect::Read,
        call: grep,
    }
}

/// The body of [`GrepTool`]: `args` already decoded.
async fn grep(ctx: &ToolContext, args: Args) -> Result<ToolOutput, ToolError> {
    let base = resolve_in_sandbox(ctx, args.path.as_deref().unwrap_or("."))?;
    let rules = PathRules::of(ctx)?;
    let regex = regex::RegexBuilder::new(&args.pattern)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| ToolError::new("invalid_pattern", format!("invalid regular expression: {e}")))?;
    let include = args
        .include
        .as_deref()
        .map(|glob| {
            globset::Glob::new(glob)
                .map(|g| g.compile_matcher())
                .map_err(|e| ToolError::new("invalid_pattern", format!("invalid include glob: {e}")))
        })
        .transpose()?;
    let cancel = ctx.cancel.clone();
    let workspace = real_workspace(ctx);
    tokio::task::spawn_blocking(move || {
        let mut lines = Vec::new();
        let stop = walk_files(&base, &rules, Instant::now() + TIME_LIMIT, &cancel, |file| {
            let relative = file.strip_prefix(&base).unwrap_or(file);
            let included = include
                .as_ref()
                .is_none_or(|m| m.is_match(relative) || file.file_name().is_some_and(|name| m.is_match(name)));
            if included {
                search_file(file, &regex, &display_path(&workspace, file), &mut lines);
            }
            lines.len() < MAX_LINES
        })?;
        let mut text = if lines.is_empty() { "No matches found".to_owned() } else { lines.join("\n") };
        match stop {
            Some(Stop::Enough) => text.push_str(&format!("\n(results truncated at {MAX_LINES} lines)")),
            Some(Stop::Deadline) => text.push_str("\n(search stopped at the time limit; results may be incomplete)"),
            None => {}
        }
        Ok(ToolOutput { text, details: json!({"matches": lines.len(), "complete": stop.is_none()}) })
    })
    .await
    .map_err(|e| ToolError::new("internal", format!("grep task failed: {e}")))?
}

/// Appends `shown:line:text` for each matching line of one file, up to [`MAX_LINES`] in all.
/// Unreadable, binary (NUL in the first 8 KiB) and oversized files are skipped silently.
fn search_file(path: &Path, regex: &regex::Regex, shown: &str, lines: &mut Vec<String>) {
    let Ok(file) = std::fs::File::open(path) else {
        return;
    };
    let mut content = Vec::new();
    if file.take(MAX_FILE_BYTES + 1).read_to_end(&mut content).is_err()
        || content.len() as u64 > MAX_FILE_BYTES
        || content.iter().take(8192).any(|&b| b == 0)
    {
        return;
    }
    let text = String::from_utf8_lossy(&content);
    for (number, line) in text.lines().enumerate() {
        if lines.len() >= MAX_LINES {
            return;
        }
        if regex.is_match(line) {
            let line: String = line.chars().take(MAX_LINE_CHARS).collect();
            lines.push(format!("{shown}:{}:{line}", number + 1));
        }
    }
}
