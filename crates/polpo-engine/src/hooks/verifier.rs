//! The `verifier` handler: another agent of the project judges the event and answers with a
//! decision (seed 000: "invoke a bounded verifier agent").
//!
//! The verifier runs with its own instructions and model, on the envelope as its one user
//! message, and may only *look*: it gets the read-only tools its own `allowedTools` grant (read,
//! glob, grep, ls …) in the invoking agent's workspace, never a tool that changes anything. It is
//! bounded in model calls (`maxTurns`, at most 10), output tokens per call, and time (the
//! handler's timeout); every call asks for JSON natively and the last one is tool-free. Anything but a
//! valid decision object fails the hook, closed like every other handler failure. Verifiers are
//! model-backed, so they are never termination-gate validators, and they run no hooks of their
//! own (recursion depth 1).

use super::VerifierAgent;
use crate::invocation::Invocation;
use crate::tools::set::ToolSet;
use futures::StreamExt;
use polpo_core::hooks::limits::MAX_OUTPUT_BYTES;
use polpo_core::hooks::{FailureCause, HookFailure, HookOutcome, parse_output};
use polpo_core::message::{Message, ToolCall};
use polpo_core::policy::ToolPolicy;
use polpo_core::tool::ToolSpec;
use polpo_llm::{ModelEvent, ModelProvider, ModelRequest, ToolChoice};
use std::sync::Arc;

/// Output tokens one verifier model call may spend.
const VERIFIER_MAX_OUTPUT_TOKENS: u32 = 1024;

/// What the verifier is told on top of its own instructions.
const BRIEF: &str = "You are verifying another agent's work for a runtime hook. The user message is the hook \
envelope as JSON (the event, the agent, and its data such as a proposed tool call or a candidate answer). \
You may look at files with the tools offered, but you cannot change anything. Finish with exactly one JSON \
object and nothing else: {\"decision\":\"allow\"}, {\"decision\":\"deny\",\"reason\":\"…\"} or \
{\"decision\":\"stop\",\"feedback\":\"…\"}.";

/// Runs `verifier` on `envelope` for at most `max_turns` model calls and parses its decision.
pub(super) async fn run(inv: &Invocation, verifier: &VerifierAgent, max_turns: u32, envelope: &[u8]) -> HookOutcome {
    let fail = |detail: String| {
        HookFailure::new(FailureCause::HandlerError, format!("verifier `{}`: {detail}", verifier.agent))
    };
    let tools = read_only_tools(&inv.tools, &verifier.policy);
    let mut messages = vec![
        Message::system(format!("{}\n\n{BRIEF}", verifier.system_prompt.trim())),
        Message::user(String::from_utf8_lossy(envelope).into_owned()),
    ];
    for turn in 1..=max_turns.max(1) {
        let last = turn == max_turns.max(1) || tools.is_empty();
        let request = ModelRequest {
            messages: Arc::new(messages.clone()),
            tools: if last { Vec::new() } else { tools.clone() },
            tool_choice: if last { ToolChoice::None } else { ToolChoice::Auto },
            // Asked for natively on every call: models answer in JSON reliably only when the
            // request says so, and a call may end with the decision at any turn.
            response_format: Some(serde_json::json!({"type": "json_object"})),
            max_output_tokens: Some(VERIFIER_MAX_OUTPUT_TOKENS),
            ..ModelRequest::default()
        };
        let (text, calls) = answer(verifier.provider.as_ref(), request).await.map_err(fail)?;
        if calls.is_empty() {
            return parse_output(strip_fence(&text).as_bytes());
        }
        let mut said = Message::assistant(text);
        said.tool_calls = calls.clone();
        messages.push(said);
        for call in calls {
            let result = look(inv, &verifier.policy, &call).await;
            messages.push(Message::tool_result(call.id, result));
        }
    }
    Err(fail(format!("no decision within {max_turns} model calls")))
}

/// The specs of the tools the verifier may use: allowed by its own policy and read-only.
fn read_only_tools(tools: &ToolSet, policy: &ToolPolicy) -> Vec<Arc<ToolSpec>> {
    tools
        .specs()
        .filter(|spec| policy.allows(&spec.name) && tools.get(&spec.name).is_some_and(|t| t.effect().is_read_only()))
        .cloned()
        .collect()
}

/// One model call's text and tool calls, bounded.
async fn answer(provider: &dyn ModelProvider, request: ModelRequest) -> Result<(String, Vec<ToolCall>), String> {
    let mut stream = provider.stream(request).await.map_err(|e| e.to_string())?;
    let (mut text, mut calls) = (String::new(), Vec::new());
    while let Some(event) = stream.next().await {
        match event.map_err(|e| e.to_string())? {
            ModelEvent::TextDelta(t) => {
                text.push_str(&t);
                if text.len() > MAX_OUTPUT_BYTES {
                    return Err("the answer is too long".into());
                }
            }
            ModelEvent::ToolCall(call) => calls.push(call),
            _ => {}
        }
    }
    Ok((text, calls))
}

/// Runs one read-only tool call of the verifier in the invoking agent's workspace; any refusal
/// or failure is the verifier's to read, as a tool result.
async fn look(inv: &Invocation, policy: &ToolPolicy, call: &ToolCall) -> String {
    let Some(tool) = inv.tools.get(&call.name).filter(|t| t.effect().is_read_only() && policy.allows(&call.name))
    else {
        return format!("tool_policy_denied: the verifier may not use `{}`", call.name);
    };
    let args: serde_json::Value = match serde_json::from_str(&call.arguments) {
        Ok(args) => args,
        Err(e) => return format!("invalid_arguments: {e}"),
    };
    if let Err(e) = inv.tools.check_arguments(&call.name, &args) {
        return e;
    }
    let mut text = match tool.call(&inv.tool_context, args).await {
        Ok(output) => output.text,
        Err(e) => format!("{}: {}", e.code, e.message),
    };
    if text.len() > MAX_OUTPUT_BYTES {
        let mut cut = MAX_OUTPUT_BYTES;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    text
}

/// Models often wrap JSON in a Markdown fence.
pub(super) fn strip_fence(text: &str) -> &str {
    let t = text.trim();
    t.strip_prefix("```json")
        .or_else(|| t.strip_prefix("```"))
        .and_then(|s| s.strip_suffix("```"))
        .map(str::trim)
        .unwrap_or(t)
}
