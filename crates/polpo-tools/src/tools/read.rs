//! `read {path, offset?, limit?}`: numbered lines of a text file.

use crate::args::{io_error, spec};
use crate::sandbox::resolve_in_sandbox;
use crate::{ToolContext, ToolError, ToolOutput};
use polpo_core::tool::ToolEffect;
use serde::Deserialize;
use serde_json::json;
use std::io::BufRead;
use std::path::Path;

/// Lines returned when the call does not say.
const DEFAULT_LIMIT: usize = 500;
/// Longest line shown; longer lines are cut so one minified file cannot flood the context.
const MAX_LINE_CHARS: usize = 2000;
/// Bytes of one line kept in memory (enough for [`MAX_LINE_CHARS`] characters of UTF-8).
const MAX_LINE_BYTES: usize = 4 * MAX_LINE_CHARS;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    path: String,
    offset: Option<usize>,
    limit: Option<usize>,
}

builtin_tool! {
    /// Reads a file as `N<TAB>line` rows, from a 1-based `offset`, at most `limit` lines.
    ReadTool {
        spec: spec(
            "read",
            "Read a text file. Returns lines numbered `N<TAB>line`; use offset/limit to page through large files.",
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File path, relative to the workspace or absolute."},
                    "offset": {"type": "integer", "minimum": 1, "description": "First line to return (1-based)."},
                    "limit": {"type": "integer", "minimum": 1, "description": "Maximum lines to return (default 500)."}
                },
                "required": ["path"],
                "additionalProperties": false
            }),
        ),
        effect: ToolEffect::Read,
        call: read,
    }
}

/// The body of [`ReadTool`]: `args` already decoded.
async fn read(ctx: &ToolContext, args: Args) -> Result<ToolOutput, ToolError> {
    let path = resolve_in_sandbox(ctx, &args.path)?;
    let offset = args.offset.unwrap_or(1).max(1);
    let limit = args.limit.unwrap_or(DEFAULT_LIMIT).max(1);
    let page_path = path.clone();
    let page = tokio::task::spawn_blocking(move || read_page(&page_path, offset, limit))
        .await
        .map_err(|e| ToolError::new("internal", format!("read task failed: {e}")))??;
    let mut text = page.rows.join("\n");
    let remaining = page.total.saturating_sub(offset - 1 + page.rows.len());
    if remaining > 0 {
        text.push_str(&format!("\n... ({remaining} more lines)"));
    }
    Ok(ToolOutput { text, details: json!({"path": path, "lines": page.rows.len(), "total": page.total}) })
}

struct Page {
    rows: Vec<String>,
    total: usize,
}

/// Streams the file once: keeps the requested rows, counts the rest. Memory stays bounded by
/// the page, however long the file or its lines.
fn read_page(path: &Path, offset: usize, limit: usize) -> Result<Page, ToolError> {
    let file = std::fs::File::open(path).map_err(|e| io_error("read", path, &e))?;
    if file.metadata().map(|m| m.is_dir()).unwrap_or(false) {
        return Err(ToolError::new("is_a_directory", format!("{} is a directory; use ls", path.display())));
    }
    let mut reader = std::io::BufReader::new(file);
    let mut rows = Vec::new();
    let mut total = 0usize;
    let mut line = Vec::new();
    loop {
        let wanted = total + 1 >= offset && rows.len() < limit;
        line.clear();
        let cap = if wanted { MAX_LINE_BYTES } else { 0 };
        let consumed = read_line_capped(&mut reader, &mut line, cap).map_err(|e| io_error("read", path, &e))?;
        if consumed == 0 {
            break;
        }
        total += 1;
        if wanted {
            let text = String::from_utf8_lossy(&line);
            let text = text.strip_suffix('\r').unwrap_or(&text);
            rows.push(format!("{total}\t{}", truncate_chars(text, MAX_LINE_CHARS)));
        }
    }
    Ok(Page { rows, total })
}

/// Reads one line (without its `\n`) keeping at most `cap` bytes of it; returns the bytes
/// consumed from the reader, 0 at end of file.
fn read_line_capped(reader: &mut impl BufRead, out: &mut Vec<u8>, cap: usize) -> std::io::Result<usize> {
    let mut consumed = 0;
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok(consumed);
        }
        let newline = buf.iter().position(|&b| b == b'\n');
        let content = &buf[..newline.unwrap_or(buf.len())];
        let room = cap.saturating_sub(out.len());
        out.extend_from_slice(&content[..content.len().min(room)]);
        let used = newline.map_or(buf.len(), |i| i + 1);
        reader.consume(used);
        consumed += used;
        if newline.is_some() {
            return Ok(consumed);
        }
    }
}

fn truncate_chars(line: &str, max: usize) -> String {
    match line.char_indices().nth(max) {
        Some((cut, _)) => format!("{}… [line truncated]", &line[..cut]),
        None => line.to_owned(),
    }
}
