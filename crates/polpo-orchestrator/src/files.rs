//! The files a task's runs wrote, read back from its session: every successful call of a
//! built-in file-writing tool (`write` and `http_download` create or replace a file, `edit`
//! changes one). What a `bash` command writes cannot be known from its call, so it is not
//! counted; neither is a call whose tool answered with an error.

use std::collections::{BTreeSet, HashSet};

use polpo_core::message::Role;
use polpo_core::tasks::TaskResult;

use crate::context::Ctx;
use crate::error::OrchestratorError;

/// Tools that create (or replace) the file named by their `path` argument.
const CREATING_TOOLS: &[&str] = &["write", "http_download"];
/// Tools that change the file named by their `path` argument.
const EDITING_TOOLS: &[&str] = &["edit"];
/// Most messages of a session read back (the store's bound on a tail).
const MAX_MESSAGES: u32 = 1000;

/// Add to `result` the files written by the tool calls of session `session_id` (the run
/// that just ended, and the earlier attempts a fix phase shares the session with). A file
/// both created and edited counts as created.
pub(crate) async fn record_files(
    ctx: &Ctx,
    session_id: &str,
    result: &mut TaskResult,
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
    for call in messages.iter().flat_map(|m| &m.message.tool_calls).filter(|c| !failed.contains(c.id.as_str())) {
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
