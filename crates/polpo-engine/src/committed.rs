//! The port a host sets to hear about every turn the runtime durably committed (memory
//! learning writes its outbox from it): called after the session append succeeded, before the
//! caller is answered, so what the observer writes is on disk whenever the answer is.

use std::sync::Arc;

use async_trait::async_trait;
use polpo_core::message::{FinishReason, Message, Role};
use polpo_store::Session;

use crate::request::Surface;
use crate::turn::RunOutcome;

/// A committed turn: only its visible text, never hidden reasoning or tool payloads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedTurn {
    /// The agent.
    pub agent: String,
    /// The session the turn was appended to.
    pub session_id: String,
    /// The run it reported under.
    pub run_id: String,
    /// The API key the session belongs to (the authenticated caller; `None` without keys).
    pub owner: Option<String>,
    /// Where the request came from (a loop step says `loop`).
    pub surface: Surface,
    /// It ended with a final visible answer: not handing client tool calls back, not asking
    /// the user, not cut short.
    pub answered: bool,
    /// The text of the user messages this turn added.
    pub user_text: String,
    /// The final answer's text.
    pub answer: String,
}

/// Told about each committed turn (see the module doc).
#[async_trait]
pub trait TurnObserver: Send + Sync {
    /// Whether turns of `agent` are wanted at all: asked first, so a stored turn of an agent
    /// nobody observes costs no copy of its text.
    fn observes(&self, agent: &str) -> bool;

    /// `turn` is stored; return once whatever must survive a crash is written.
    async fn committed(&self, turn: CommittedTurn);
}

/// Tell `observer` about the successful turn `outcome` stored in `session`.
pub(crate) async fn notify(
    observer: &Arc<dyn TurnObserver>,
    agent: &str,
    session: &Session,
    run_id: &str,
    surface: Surface,
    new_messages: &[Message],
    outcome: &RunOutcome,
) {
    if !observer.observes(agent) {
        return;
    }
    let user_text = new_messages
        .iter()
        .filter(|m| m.role == Role::User)
        .filter_map(|m| m.content.as_ref().map(|c| c.text()))
        .collect::<Vec<_>>()
        .join("\n");
    let answer = outcome.content.clone().unwrap_or_default();
    let turn = CommittedTurn {
        agent: agent.to_owned(),
        session_id: session.id.clone(),
        run_id: run_id.to_owned(),
        owner: session.owner.clone(),
        surface,
        answered: outcome.finish_reason == FinishReason::Stop && outcome.client_tool_calls.is_empty(),
        user_text,
        answer,
    };
    observer.committed(turn).await;
}
