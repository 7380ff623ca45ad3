//! The files a task's runs wrote and the outcomes they registered, read back from its
//! session: every successful call of a built-in file-writing tool (`write` and
//! `http_download` create or replace a file, `edit` changes one) and of `register_outcome`
//! (a deliverable the agent declares: file, text, url, json or media). What a `bash` command
//! writes cannot be known from its call, so it is not counted; neither is a call whose tool
//! answered with an error (an outcome the tool refused is not registered).

use std::collections::{BTreeSet, HashSet};

use polpo_core::message::{Role, ToolCall};
use polpo_core::tasks::{TaskOutcome, TaskResult};
use serde_json::{Value, json};

use crate::context::Ctx;
use crate::error::OrchestratorError;

/// Tools that create (or replace) the file named by their `path` argument.
const CREATING_TOOLS: &[&str] = &["write", "http_download"];
/// Tools that change the file named by their `path` argument.
const EDITING_TOOLS: &[&str] = &["edit"];
/// The tool by which an agent declares a deliverable of its task.
const OUTCOME_TOOL: &str = "register_outcome";
/// Most messages of a session read back (the store's bound on a tail).
const MAX_MESSAGES: u32 = 1000;

/// Add to `result` the files written by the tool calls of session `session_id` (the run
/// that just ended, and the earlier attempts a fix phase shares the session with), and to
/// `outcomes` the outcomes its `register_outcome` calls declared (each once, by call id),
/// produced by `agent`. A file both created and edited counts as created.
pub(crate) async fn record_work(
    ctx: &Ctx,
    session_id: &str,
    agent: Option<&str>,
    result: &mut TaskResult,
    outcomes: &mut Vec<TaskOutcome>,
) -> Result<(), OrchestratorError> {
    let messages = ctx.store().sessions.recent_messages(session_id, MAX_MESSAGES).await?;
    // Calls whose tool answered with an error wrote nothing.
    let failed: HashSet<&str> = messages
        .iter()
        .filter(|m| m.message.role == Role::Tool && m.message.text_content().starts_with("Error: "))
        .filter_map(|m| m.message.tool_call_id.as_deref())
        .collect();
    let mut created: BTreeSet<String> = result.files_created.iter().cloned().collect();
    let mut edited: BTreeSet<String> = result.files_edited.iter().cloned().collect();
    let calls = messages.iter().flat_map(|m| m.message.tool_calls.iter().map(move |c| (m.ts, c)));
    for (at, call) in calls.filter(|(_, c)| !failed.contains(c.id.as_str())) {
        if call.name == OUTCOME_TOOL {
            if !outcomes.iter().any(|o| o.id == call.id)
                && let Some(outcome) = outcome_of(call, agent, at)
            {
                outcomes.push(outcome);
            }
            continue;
        }
        let target = if CREATING_TOOLS.contains(&call.name.as_str()) {
            &mut created
        } else if EDITING_TOOLS.contains(&call.name.as_str()) {
            &mut edited
        } else {
            continue;
        };
        let path = serde_json::from_str::<serde_json::Value>(&call.arguments)
            .ok()
            .and_then(|args| args["path"].as_str().map(str::to_owned));
        if let Some(path) = path {
            target.insert(path);
        }
    }
    edited.retain(|p| !created.contains(p));
    result.files_created = created.into_iter().collect();
    result.files_edited = edited.into_iter().collect();
    Ok(())
}

/// The outcome a successful `register_outcome` call declared, from its arguments (the tool
/// checked them before answering); `None` for arguments that do not read as one.
fn outcome_of(call: &ToolCall, agent: Option<&str>, at: chrono::DateTime<chrono::Utc>) -> Option<TaskOutcome> {
    let args: Value = serde_json::from_str(&call.arguments).ok()?;
    let field = |name: &str| args.get(name).cloned().unwrap_or(Value::Null);
    serde_json::from_value(json!({
        "id": call.id,
        "type": field("type"),
        "label": field("label"),
        "path": field("path"),
        "mimeType": field("mimeType"),
        "text": field("text"),
        "url": field("url"),
        "data": field("data"),
        "tags": args.get("tags").cloned().unwrap_or_else(|| json!([])),
        "producedBy": agent,
        "producedAt": at,
    }))
    .ok()
}
