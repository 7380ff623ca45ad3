//! `register_outcome {type, label, path?, text?, url?, data?, mimeType?, tags?}`: declare a
//! deliverable of the task run.
//!
//! The tool validates the outcome (a file outcome must name an existing file inside the
//! sandbox, whose size it records) and returns it in `details.outcome`; the engine appends it
//! to the run's outcomes. Its effect is `Write`: registering twice declares two deliverables.

use crate::args::{io_error, spec};
use crate::sandbox::resolve_in_sandbox;
use crate::{ToolContext, ToolError, ToolOutput};
use polpo_core::tool::ToolEffect;
use serde::Deserialize;
use serde_json::json;

/// Longest inline text outcome accepted.
const MAX_TEXT_BYTES: usize = 64 * 1024;

/// Kinds of deliverable, as in the reference's `TaskOutcome.type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
enum OutcomeType {
    File,
    Text,
    Url,
    Json,
    Media,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Args {
    #[serde(rename = "type")]
    kind: OutcomeType,
    label: String,
    path: Option<String>,
    text: Option<String>,
    url: Option<String>,
    data: Option<serde_json::Value>,
    mime_type: Option<String>,
    #[serde(default)]
    tags: Vec<String>,
}

builtin_tool! {
    /// Declares a task deliverable; see the module docs.
    RegisterOutcomeTool {
        spec: spec(
            "register_outcome",
            "Declare a deliverable of this task: a file you produced (path), a text, a URL, or JSON data.",
            json!({
                "type": "object",
                "properties": {
                    "type": {"type": "string", "enum": ["file", "text", "url", "json", "media"]},
                    "label": {"type": "string", "description": "Short human name of the deliverable."},
                    "path": {"type": "string", "description": "For file and media outcomes: the file."},
                    "text": {"type": "string", "description": "For text outcomes."},
                    "url": {"type": "string", "description": "For url outcomes."},
                    "data": {"description": "For json outcomes: any JSON value."},
                    "mimeType": {"type": "string"},
                    "tags": {"type": "array", "items": {"type": "string"}}
                },
                "required": ["type", "label"],
                "additionalProperties": false
            }),
        ),
        effect: ToolEffect::Write,
        call: register_outcome,
    }
}

/// The body of [`RegisterOutcomeTool`]: `args` already decoded.
async fn register_outcome(ctx: &ToolContext, args: Args) -> Result<ToolOutput, ToolError> {
    if args.label.trim().is_empty() {
        return Err(ToolError::new("invalid_arguments", "label must not be empty"));
    }
    let mut outcome = json!({"type": args.kind, "label": args.label, "tags": args.tags});
    match args.kind {
        OutcomeType::File | OutcomeType::Media => {
            let kind = if args.kind == OutcomeType::File { "file" } else { "media" };
            let raw = args.path.as_deref().ok_or_else(|| missing("path", kind))?;
            let path = resolve_in_sandbox(ctx, raw)?;
            let meta = tokio::fs::metadata(&path).await.map_err(|e| io_error("register", &path, &e))?;
            if !meta.is_file() {
                return Err(ToolError::new("not_a_file", format!("{} is not a file", path.display())));
            }
            outcome["path"] = json!(path);
            outcome["size"] = json!(meta.len());
        }
        OutcomeType::Text => {
            let text = args.text.ok_or_else(|| missing("text", "text"))?;
            if text.len() > MAX_TEXT_BYTES {
                return Err(ToolError::new(
                    "outcome_too_large",
                    "text outcomes are limited to 64 KiB; write a file instead",
                ));
            }
            outcome["text"] = json!(text);
        }
        OutcomeType::Url => {
            let url = args.url.ok_or_else(|| missing("url", "url"))?;
            reqwest::Url::parse(&url).map_err(|e| ToolError::new("invalid_arguments", format!("invalid url: {e}")))?;
            outcome["url"] = json!(url);
        }
        OutcomeType::Json => outcome["data"] = args.data.ok_or_else(|| missing("data", "json"))?,
    }
    if let Some(mime) = args.mime_type {
        outcome["mimeType"] = json!(mime);
    }
    Ok(ToolOutput {
        text: format!("Outcome registered: {}", outcome["label"].as_str().unwrap_or_default()),
        details: json!({"outcome": outcome}),
    })
}

fn missing(field: &str, kind: &str) -> ToolError {
    ToolError::new("invalid_arguments", format!("a {kind} outcome needs `{field}`"))
}
