//! Tools as the turn loop sees them: [`set`] holds an agent's server tools (schemas compiled
//! once), [`loading`] decides which of them the model is shown (progressive disclosure and the
//! `polpo_tool_*` tools), [`exec`] runs a batch of calls through policy, hooks and schema.
//!
//! [`execute`] is the one entry for the server-side calls of a turn. Calls the runtime answers
//! itself come first — the progressive loading tools, a malformed `ask_user_question`, a call
//! to a tool progressive loading has not shown yet; everything else goes to
//! [`exec::execute_batch`]. Results and events keep the model's order.

pub mod exec;
pub mod loading;
pub mod set;

use crate::error::EngineError;
use crate::events::{EventSink, RunEvent};
use crate::hooks::InvocationHooks;
use crate::interaction::{ASK_USER_QUESTION, check_question};
use crate::invocation::Invocation;
use exec::execute_batch;
use loading::{TOOL_LOAD, is_disclosure_tool, is_progressive};
use polpo_core::message::{Message, ToolCall};
use serde_json::Value;

/// Run the server-side calls of one turn. `conversation` ends with the assistant message that
/// made `calls`; a tool loaded by that same message is not callable until the next one.
pub async fn execute(
    inv: &Invocation,
    hooks: Option<&InvocationHooks>,
    turn: u32,
    calls: &[ToolCall],
    conversation: &[Message],
    sink: EventSink<'_>,
) -> Result<Vec<Message>, EngineError> {
    let earlier = &conversation[..conversation.len().saturating_sub(1)];
    let answers: Vec<Option<Result<String, String>>> = calls.iter().map(|c| answer(inv, c, earlier)).collect();
    if answers.iter().all(Option::is_none) {
        return execute_batch(inv, hooks, turn, calls, sink).await;
    }
    let mut out = Vec::with_capacity(calls.len());
    let mut i = 0;
    while i < calls.len() {
        let Some(answer) = &answers[i] else {
            // Runs of agent tool calls keep their batch semantics (parallel read-only batches).
            let run = answers[i..].iter().take_while(|a| a.is_none()).count();
            out.extend(execute_batch(inv, hooks, turn, &calls[i..i + run], sink).await?);
            i += run;
            continue;
        };
        let call = &calls[i];
        let (text, is_error) = match answer {
            Ok(text) => (text.clone(), false),
            Err(e) => (format!("Error: {e}"), true),
        };
        let arguments = serde_json::from_str(&call.arguments).unwrap_or_else(|_| Value::String(call.arguments.clone()));
        sink(RunEvent::ToolCalling { id: call.id.clone(), name: call.name.clone(), arguments });
        sink(RunEvent::ToolCompleted { id: call.id.clone(), name: call.name.clone(), result: text.clone(), is_error });
        out.push(Message::tool_result(call.id.clone(), text));
        i += 1;
    }
    Ok(out)
}

/// The runtime's own answer to `call`, or `None` when the agent's tool runs.
fn answer(inv: &Invocation, call: &ToolCall, earlier: &[Message]) -> Option<Result<String, String>> {
    if is_disclosure_tool(&call.name) && is_progressive(inv) {
        return Some(loading::call(inv, call));
    }
    if call.name == ASK_USER_QUESTION && inv.interactions.ask_user_question {
        // Only a malformed question reaches here; a well-formed one went to the client.
        return Some(check_question(&call.arguments).map(|()| "The question was not shown to the user.".into()));
    }
    if loading::not_loaded(inv, earlier, &call.name) {
        return Some(Err(format!(
            "tool_not_loaded: `{0}` is not loaded; call {TOOL_LOAD} with {{\"names\": [\"{0}\"]}} first, then call it in your next step",
            call.name
        )));
    }
    None
}
