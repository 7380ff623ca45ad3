//! Tool calls the runtime answers itself, before the agent's tools run: the progressive
//! loading tools, a malformed `ask_user_question`, and a call to a tool that progressive
//! loading has not shown yet. Everything else goes to [`tool_exec::execute_batch`]. Results
//! and events keep the model's order.

use crate::error::EngineError;
use crate::events::{EventSink, RunEvent};
use crate::hooks::InvocationHooks;
use crate::interaction::{ASK_USER_QUESTION, check_question};
use crate::invocation::Invocation;
use crate::tool_exec;
use crate::tool_loading::{self, TOOL_LOAD, is_disclosure_tool, is_progressive};
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
        return tool_exec::execute_batch(inv, hooks, turn, calls, sink).await;
    }
    let mut out = Vec::with_capacity(calls.len());
    let mut i = 0;
    while i < calls.len() {
        let Some(answer) = &answers[i] else {
            // Runs of agent tool calls keep their batch semantics (parallel read-only batches).
            let run = answers[i..].iter().take_while(|a| a.is_none()).count();
            out.extend(tool_exec::execute_batch(inv, hooks, turn, &calls[i..i + run], sink).await?);
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
        return Some(tool_loading::call(inv, call));
    }
    if call.name == ASK_USER_QUESTION && inv.interactions.ask_user_question {
        // Only a malformed question reaches here; a well-formed one went to the client.
        return Some(check_question(&call.arguments).map(|()| "The question was not shown to the user.".into()));
    }
    if tool_loading::not_loaded(inv, earlier, &call.name) {
        return Some(Err(format!(
            "tool_not_loaded: `{0}` is not loaded; call {TOOL_LOAD} with {{\"names\": [\"{0}\"]}} first, then call it in your next step",
            call.name
        )));
    }
    None
}
