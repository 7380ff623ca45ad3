//! Running one handler to one outcome, whatever its kind, within its timeout.

use super::{HookRuntime, command, http, verifier};
use crate::invocation::Invocation;
use futures::StreamExt;
use polpo_core::hooks::limits::{MAX_OUTPUT_BYTES, effective_timeout_ms};
use polpo_core::hooks::{Envelope, FailureCause, Handler, HookFailure, HookOutcome, parse_output};
use polpo_core::message::Message;
use polpo_llm::{ModelEvent, ModelRequest, ToolChoice};
use serde_json::{Map, Value};
use std::time::Duration;

/// Output tokens a `prompt` handler may spend on its one decision.
const PROMPT_MAX_OUTPUT_TOKENS: u32 = 512;

/// Run `handler` for `envelope`. Never fails: every problem is a [`HookFailure`].
pub(super) async fn run(
    inv: &Invocation,
    runtime: &HookRuntime,
    handler: &Handler,
    envelope: &Envelope,
) -> HookOutcome {
    let timeout = Duration::from_millis(effective_timeout_ms(handler, runtime.managed));
    let body = serde_json::to_vec(envelope)
        .map_err(|e| HookFailure::new(FailureCause::HandlerError, format!("cannot encode the envelope: {e}")))?;
    match handler {
        Handler::Command { command, env, .. } => command::run(&inv.tool_context, command, env, body, timeout).await,
        Handler::Http { url, connection, headers, .. } => {
            let auth = match connection {
                Some(id) => connection_headers(inv, id).await?,
                None => Vec::new(),
            };
            http::run(runtime, url, headers, auth, envelope, body, timeout).await
        }
        Handler::Tool { tool, input, .. } => with_timeout(timeout, run_tool(inv, tool, input, envelope)).await,
        Handler::McpTool { server, tool, input, .. } => {
            let name = format!("mcp__{server}__{tool}");
            with_timeout(timeout, run_tool(inv, &name, input, envelope)).await
        }
        Handler::Prompt { prompt, model, .. } => {
            with_timeout(timeout, run_prompt(inv, prompt, model.as_deref(), &body)).await
        }
        Handler::Verifier { agent, max_turns, .. } => match inv.hooks.as_ref().and_then(|h| h.verifiers.get(agent)) {
            Some(found) => with_timeout(timeout, verifier::run(inv, found, *max_turns, &body)).await,
            None => Err(HookFailure::new(
                FailureCause::Unavailable,
                format!("verifier agent `{agent}` was not resolved for this invocation"),
            )),
        },
    }
}

/// The auth headers of Connection `id` for the invocation's agent, resolved now (secrets from
/// the vault, OAuth2 tokens refreshed). Anything that cannot be resolved fails the hook.
async fn connection_headers(inv: &Invocation, id: &str) -> Result<Vec<(String, String)>, HookFailure> {
    let connections = inv.hooks.as_ref().and_then(|h| h.connections.as_ref()).ok_or_else(|| {
        HookFailure::new(FailureCause::Unavailable, format!("connection `{id}`: this host has no project Connections"))
    })?;
    connections
        .headers(id, &inv.agent)
        .await
        .map_err(|e| HookFailure::new(FailureCause::HandlerError, format!("connection `{id}`: {e}")))
}

/// Why `handler` cannot run in this runtime, if it cannot. A termination gate whose validator
/// cannot run blocks the invocation before inference instead of failing after it.
pub(super) fn unavailable(hooks: &super::InvocationHooks, handler: &Handler) -> Option<String> {
    let known = |id: &str| hooks.connections.as_ref().is_some_and(|c| c.get(id).is_ok());
    polpo_core::hooks::capabilities::unavailable(handler, &known)
}

async fn with_timeout(timeout: Duration, work: impl std::future::Future<Output = HookOutcome>) -> HookOutcome {
    tokio::time::timeout(timeout, work).await.unwrap_or_else(|_| {
        Err(HookFailure::new(
            FailureCause::Timeout,
            format!("the handler did not finish within {} ms", timeout.as_millis()),
        ))
    })
}

/// A tool of the agent, through the same policy and schema validation as a model's call.
/// Its arguments are the fixed `input` plus `hook` (the envelope); it does not trigger hooks
/// itself (recursion depth 1).
async fn run_tool(inv: &Invocation, tool: &str, input: &Map<String, Value>, envelope: &Envelope) -> HookOutcome {
    let fail = |cause, detail: String| HookFailure::new(cause, detail);
    let found = inv
        .tools
        .get(tool)
        .ok_or_else(|| fail(FailureCause::HandlerError, format!("unknown_tool: the agent has no tool `{tool}`")))?;
    if let Some(layer) = inv.policy.denied_by(tool) {
        return Err(fail(
            FailureCause::HandlerError,
            format!("tool_policy_denied: `{tool}` is not allowed by the {layer:?} tool policy"),
        ));
    }
    let mut args = input.clone();
    let hook = serde_json::to_value(envelope).map_err(|e| fail(FailureCause::HandlerError, e.to_string()))?;
    args.insert("hook".into(), hook);
    let args = Value::Object(args);
    inv.tools.check_arguments(tool, &args).map_err(|e| fail(FailureCause::HandlerError, e))?;
    let output =
        found.call(&inv.tool_context, args).await.map_err(|e| fail(FailureCause::HandlerError, e.to_string()))?;
    parse_output(output.text.as_bytes())
}

/// One bounded, tool-free model call that must answer with a decision object.
async fn run_prompt(inv: &Invocation, prompt: &str, model: Option<&str>, envelope: &[u8]) -> HookOutcome {
    let fail = |detail: String| HookFailure::new(FailureCause::HandlerError, detail);
    let system = format!(
        "{prompt}\n\nYou are a runtime hook. Reply with exactly one JSON object such as {{\"decision\":\"allow\"}}, \
         {{\"decision\":\"deny\",\"reason\":\"…\"}} or {{\"decision\":\"stop\",\"feedback\":\"…\"}} and nothing else."
    );
    let request = ModelRequest {
        model: model.unwrap_or(&inv.model).to_string(),
        messages: vec![Message::system(system), Message::user(String::from_utf8_lossy(envelope).into_owned())].into(),
        tools: Vec::new(),
        tool_choice: ToolChoice::None,
        // Asked for natively too: models answer in JSON reliably only when the request says so.
        response_format: Some(serde_json::json!({"type": "json_object"})),
        max_output_tokens: Some(PROMPT_MAX_OUTPUT_TOKENS),
        ..ModelRequest::default()
    };
    let mut stream = inv.provider.stream(request).await.map_err(|e| fail(e.to_string()))?;
    let mut text = String::new();
    while let Some(event) = stream.next().await {
        if let ModelEvent::TextDelta(t) = event.map_err(|e| fail(e.to_string()))? {
            text.push_str(&t);
            if text.len() > MAX_OUTPUT_BYTES {
                return Err(HookFailure::new(FailureCause::OutputTooLarge, "the prompt answer is too long"));
            }
        }
    }
    parse_output(verifier::strip_fence(&text).as_bytes())
}
