//! One fire: the schedule's invocation started through the engine's one entry,
//! `RunManager::invoke`, with surface `schedule`.

use crate::record::RunError;
use chrono::{DateTime, SecondsFormat, Utc};
use polpo_core::message::Message;
use polpo_core::schedules::Schedule;
use polpo_core::schedules::config::{AgentInput, Invocation};
use polpo_engine::meter::Meter;
use polpo_engine::runs::{Invoked, RunManager};
use polpo_engine::{ChatInput, Surface};
use serde_json::json;
use std::sync::Arc;

/// Start `schedule`'s invocation for the occurrence `scheduled_for`; `request_id` names the
/// claim, so the run can be traced back to its schedule-run record, and `run_id` is the
/// occurrence's durable run id (a run by that id already there is followed instead:
/// [`Invoked::followed`]).
pub(crate) async fn start(
    runs: &Arc<RunManager>,
    schedule: &Schedule,
    scheduled_for: DateTime<Utc>,
    request_id: String,
    run_id: &str,
) -> Result<Invoked, RunError> {
    let input = match &schedule.config.invocation {
        Invocation::Agent { agent_name, input, session, execution } => {
            if let Some(execution) = execution.as_ref().filter(|e| e.as_object().is_some_and(|m| !m.is_empty())) {
                return Err(unavailable(&format!("`invocation.execution` ({execution}) on a schedule")));
            }
            let user = match session {
                None => None,
                Some(s)
                    if s.get("mode").and_then(|m| m.as_str()).is_none_or(|m| m == "new")
                        && s.get("sessionId").is_none() =>
                {
                    s.get("userId").and_then(|u| u.as_str()).map(str::to_owned)
                }
                Some(_) => return Err(unavailable("reusing a session from a schedule")),
            };
            let mut chat = ChatInput::new(agent_name.clone(), messages(input)?);
            chat.user = user;
            chat
        }
        other => return Err(unavailable(&format!("schedules with surface `{}`", other.surface()))),
    };
    let input = ChatInput {
        surface: Surface::Schedule,
        outlive_caller: true,
        request_id: Some(request_id),
        metadata: json!({
            "scheduleId": schedule.id,
            "scheduledFor": scheduled_for.to_rfc3339_opts(SecondsFormat::Millis, true),
        }),
        ..input
    };
    runs.invoke_once(input, run_id, Meter::start())
        .await
        .map_err(|e| RunError { code: e.code().to_owned(), message: e.to_string() })
}

/// The conversation an agent or loop invocation starts with: its messages, then its prompt.
pub(crate) fn messages(input: &AgentInput) -> Result<Vec<Message>, RunError> {
    let mut out: Vec<Message> = input
        .messages
        .iter()
        .flatten()
        .map(|m| match m.role.as_str() {
            "assistant" => Message::assistant(&m.content),
            "system" => Message::system(&m.content),
            _ => Message::user(&m.content),
        })
        .collect();
    out.extend(input.prompt.as_deref().map(Message::user));
    if out.is_empty() {
        return Err(RunError {
            code: "invalid_input".into(),
            message: "the schedule's input has no prompt and no messages".into(),
        });
    }
    Ok(out)
}

fn unavailable(what: &str) -> RunError {
    RunError {
        code: polpo_core::config::codes::FEATURE_UNAVAILABLE.into(),
        message: format!("{what} is not supported by this runtime yet"),
    }
}
