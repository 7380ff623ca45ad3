//! Executing the tool calls of one model turn.
//!
//! Every call passes the same gates in the same order — exists, allowed by policy, arguments
//! parse, `tool:before` hooks (which may deny, ask or modify the input), policy again over
//! the hooks' verdict, arguments match the schema — and a failure at any gate becomes a
//! model-visible `Error: …` result rather than an aborted run, so the model can correct
//! itself. After a call, `tool:after` hooks may replace the model-visible result. Results
//! always come back in the model's order, even when a read-only batch ran concurrently.

use crate::approvals::{Asked, Proposal};
use crate::error::EngineError;
use crate::events::{EventSink, RunEvent};
use crate::hooks::InvocationHooks;
use crate::hooks::runner::{self, At};
use crate::invocation::Invocation;
use futures::StreamExt;
use polpo_core::hooks::{AskTimeout, Authorization, authorize};
use polpo_core::message::{Message, ToolCall};
use serde_json::Value;

/// Most calls of one read-only batch that run at once.
pub const MAX_PARALLEL_CALLS: usize = 8;
/// Longest model-written arguments text we parse.
pub const MAX_ARGUMENTS_BYTES: usize = 1024 * 1024;

/// Run the server tool calls of one turn and return one `tool` message per call, in order.
/// Fails only when a hook ends the run (`hook_stopped`).
pub async fn execute_batch(
    inv: &Invocation,
    hooks: Option<&InvocationHooks>,
    turn: u32,
    calls: &[ToolCall],
    sink: EventSink<'_>,
) -> Result<Vec<Message>, EngineError> {
    let all_read = calls.iter().all(|c| inv.tools.get(&c.name).is_some_and(|t| t.effect().is_read_only()));
    if inv.parallel_tool_calls && all_read && calls.len() > 1 {
        // Calls run concurrently, but each call's events are held and replayed in the model's
        // order once the batch is done, so observers see the same order as the history.
        let held: Vec<std::sync::Mutex<Vec<RunEvent>>> = calls.iter().map(|_| Default::default()).collect();
        let sinks: Vec<_> =
            held.iter().map(|h| move |e: RunEvent| h.lock().unwrap_or_else(|p| p.into_inner()).push(e)).collect();
        // The batch is one external wait: concurrent calls overlap, so their times must not add.
        // The futures are built before the await (not lazily by a closure inside the stream),
        // which keeps the batch future `Send` for callers that spawn it.
        let calls_futures: Vec<_> =
            calls.iter().zip(&sinks).map(|(c, s)| execute_one(inv, hooks, turn, c, s)).collect();
        let results = crate::meter::external(
            futures::stream::iter(calls_futures).buffered(MAX_PARALLEL_CALLS).collect::<Vec<_>>(),
        )
        .await;
        for events in held {
            events.into_inner().unwrap_or_else(|p| p.into_inner()).into_iter().for_each(sink);
        }
        results.into_iter().collect()
    } else {
        let mut out = Vec::with_capacity(calls.len());
        for c in calls {
            out.push(execute_one(inv, hooks, turn, c, sink).await?);
        }
        Ok(out)
    }
}

/// Why a direct call ([`call_direct`]) gave no result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DirectCallError {
    /// No such tool, the policy excludes it, or a `tool:before` hook refused it
    /// (`unknown_tool: …`, `tool_policy_denied: …`).
    Refused(String),
    /// The arguments do not match the tool's schema; the tool did not run.
    InvalidInput(String),
    /// The tool ran and failed (its `tool:after` verdict included), or a hook ended the run.
    Failed(String),
}

/// Run one call that no model made (a loop's tool step) through the same gates and hooks as
/// a model's call — exists, policy, `tool:before`, policy again, schema, the tool,
/// `tool:after` — with `sink` seeing the hooks' events.
pub async fn call_direct(
    inv: &Invocation,
    name: &str,
    arguments: Value,
    sink: EventSink<'_>,
) -> Result<String, DirectCallError> {
    let call = ToolCall { id: format!("direct-{name}"), name: name.to_owned(), arguments: String::new() };
    let at = inv.hooks.as_ref().map(|hooks| At { inv, hooks, turn: 0, subject: call.id.clone(), sink });
    match call_gated(inv, at.as_ref(), &call, Ok(arguments)).await {
        Ok(Called::Done { text, is_error: false }) => Ok(text),
        Ok(Called::Done { text, is_error: true }) => Err(DirectCallError::Failed(text)),
        Ok(Called::Refused(e)) => Err(DirectCallError::Refused(e)),
        Ok(Called::InvalidInput(e)) => Err(DirectCallError::InvalidInput(e)),
        Err(e) => Err(DirectCallError::Failed(e.to_string())),
    }
}

/// How one call ended after every gate and the `tool:after` hooks.
enum Called {
    /// Refused before running (unknown, policy, a `tool:before` hook).
    Refused(String),
    /// Arguments that do not match the schema; not run.
    InvalidInput(String),
    /// Ran: the result as the model sees it.
    Done { text: String, is_error: bool },
}

/// One call through every gate, then `tool:after`; `Err` only when a hook ends the run.
async fn call_gated(
    inv: &Invocation,
    at: Option<&At<'_>>,
    call: &ToolCall,
    arguments: Result<Value, String>,
) -> Result<Called, EngineError> {
    let (input, result) = match run_gated(inv, at, call, arguments).await? {
        Gated::Refused(e) => return Ok(Called::Refused(e)),
        Gated::Invalid(e) => return Ok(Called::InvalidInput(e)),
        Gated::Ran { input, result } => (input, result),
    };
    let (text, is_error) = match result {
        Ok(text) => (text, false),
        Err(e) => (format!("Error: {e}"), true),
    };
    let Some(at) = at else { return Ok(Called::Done { text, is_error }) };
    let verdict = runner::tool_after(at, &call.name, &input, text, is_error).await;
    if let Some((hook, reason)) = verdict.stop {
        return Err(EngineError::HookStopped(format!("{reason} (hook {hook})")));
    }
    Ok(Called::Done { text: verdict.result, is_error: verdict.is_error })
}

/// What the gates before execution decided.
enum Gated {
    /// Refused before running; the model sees this error.
    Refused(String),
    /// Arguments that do not match the schema; the model sees this error.
    Invalid(String),
    /// The tool ran (successfully or not) with this input.
    Ran { input: Value, result: Result<String, String> },
}

/// One call through every gate; a failure is the model-visible result, except a hook `stop`.
async fn execute_one(
    inv: &Invocation,
    hooks: Option<&InvocationHooks>,
    turn: u32,
    call: &ToolCall,
    sink: EventSink<'_>,
) -> Result<Message, EngineError> {
    let arguments = parse_arguments(&call.arguments);
    sink(RunEvent::ToolCalling {
        id: call.id.clone(),
        name: call.name.clone(),
        arguments: arguments.clone().unwrap_or_else(|_| Value::String(call.arguments.clone())),
    });
    let at = hooks.map(|hooks| At { inv, hooks, turn, subject: call.id.clone(), sink });
    let (text, is_error) = match call_gated(inv, at.as_ref(), call, arguments).await? {
        Called::Refused(e) | Called::InvalidInput(e) => (format!("Error: {e}"), true),
        Called::Done { text, is_error } => (text, is_error),
    };
    sink(RunEvent::ToolCompleted { id: call.id.clone(), name: call.name.clone(), result: text.clone(), is_error });
    Ok(Message::tool_result(call.id.clone(), text))
}

async fn run_gated(
    inv: &Invocation,
    at: Option<&At<'_>>,
    call: &ToolCall,
    arguments: Result<Value, String>,
) -> Result<Gated, EngineError> {
    let Some(tool) = inv.tools.get(&call.name) else {
        return Ok(Gated::Refused(format!("unknown_tool: no tool named `{}`", call.name)));
    };
    if let Some(layer) = inv.policy.denied_by(&call.name) {
        return Ok(Gated::Refused(format!(
            "tool_policy_denied: `{}` is not allowed by the {layer:?} tool policy",
            call.name
        )));
    }
    let mut arguments = match arguments {
        Ok(a) => a,
        Err(e) => return Ok(Gated::Refused(format!("invalid_arguments: {e}"))),
    };
    if let Some(at) = at {
        // Hooks may reshape or refuse the call; the policy is applied again over their verdict
        // and the schema check below runs on whatever input they produced.
        match authorize(&inv.policy, &call.name, runner::tool_before(at, &call.name, arguments).await) {
            Authorization::Execute { input } => arguments = input,
            Authorization::Refuse { code, message } => {
                return Ok(Gated::Refused(format!("{code}: {}", at.hooks.redact_text(message))));
            }
            Authorization::Ask { hook, reason, timeout, input } => {
                match ask(inv, at, call, &hook, &reason, timeout, &input).await? {
                    Asked::Run => arguments = input,
                    Asked::Refuse(e) => return Ok(Gated::Refused(at.hooks.redact_text(e))),
                }
            }
            Authorization::EndRun { message, .. } => {
                return Err(EngineError::HookStopped(at.hooks.redact_text(message)));
            }
        }
    }
    if let Err(e) = inv.tools.check_arguments(&call.name, &arguments) {
        return Ok(Gated::Invalid(e));
    }
    let result = tokio::select! {
        biased;
        _ = inv.tool_context.cancel.cancelled() => Err("aborted: the run was aborted".into()),
        r = crate::meter::external(tool.call(&inv.tool_context, arguments.clone())) => r.map(|o| o.text).map_err(|e| e.to_string()),
    };
    // A tool may print a credential it was given (a custom tool echoing its headers): the
    // vault's values are cut before the model, the session, events or hooks see the result.
    let redactor = &inv.tool_context.redactor;
    let result = result.map(|text| redactor.redact_text(&text)).map_err(|e: String| redactor.redact_text(&e));
    Ok(Gated::Ran { input: arguments, result })
}

/// A hook asked a person to approve `call` with `input`: the invocation's approval desk decides
/// (a stored decision lets it run or refuses it; otherwise a durable run pauses and inline chat
/// fails `approval_required`). Without a desk — a loop's tool step, which nobody could retry —
/// the call is refused.
async fn ask(
    inv: &Invocation,
    at: &At<'_>,
    call: &ToolCall,
    hook: &str,
    reason: &str,
    timeout: Option<AskTimeout>,
    input: &Value,
) -> Result<Asked, EngineError> {
    let reason = at.hooks.redact_text(reason.to_owned());
    let Some(desk) = &inv.approvals else {
        return Ok(Asked::Refuse(format!(
            "approval_required: {reason} (hook {hook}); nobody can approve a call here, so it was not run"
        )));
    };
    // What the reviewer sees: the input without credentials or vault values.
    let mut shown = input.clone();
    polpo_core::hooks::redact(&mut shown, &at.hooks.secrets);
    let proposal =
        Proposal { call_id: &call.id, tool: &call.name, input, shown, hook, reason: &reason, timeout, turn: at.turn };
    desk.ask(proposal, at.sink).await
}

/// Arguments must be one JSON object of bounded size; an empty string means `{}`.
fn parse_arguments(text: &str) -> Result<Value, String> {
    if text.len() > MAX_ARGUMENTS_BYTES {
        return Err(format!("arguments are larger than {MAX_ARGUMENTS_BYTES} bytes"));
    }
    if text.trim().is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    match serde_json::from_str::<Value>(text) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(_) => Err("arguments must be a JSON object".into()),
        Err(e) => Err(format!("arguments are not valid JSON: {e}")),
    }
}
