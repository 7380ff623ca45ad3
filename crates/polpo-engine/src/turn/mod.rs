//! The agent turn loop.
//!
//! model call → tool calls → model call … until the model answers without tools (the
//! candidate final answer), a client tool must run in the caller, or `maxTurns` is used up.
//! Cancellation is checked between every step and raced against every model stream and tool
//! call, so an abort takes effect within one scheduler tick, not after the current turn.
//!
//! A candidate final answer is judged by `turn:stop` hooks or the termination gate
//! ([`Termination`]) before it counts; while they apply, the answer text is buffered and only
//! the accepted answer reaches the client as `TextDelta`. Tool events stay observable.

pub mod control;
pub mod outcome;

pub use control::{CheckpointError, RunControl};
pub use outcome::RunOutcome;

use crate::error::EngineError;
use crate::events::{EventSink, RunEvent};
use crate::hooks::InvocationHooks;
use crate::hooks::termination::{Judgement, Termination};
use crate::invocation::Invocation;
use futures::StreamExt;
use polpo_core::message::{Content, FinishReason, Message, Role, ToolCall, Usage};
use polpo_llm::{ModelEvent, ModelRequest, ToolChoice};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// What one model call produced.
struct ModelReply {
    text: String,
    tool_calls: Vec<ToolCall>,
    /// `None` when the provider reported no usage.
    usage: Option<Usage>,
    finish: FinishReason,
}

/// Run the loop for `inv` over `history` (the conversation so far, without system prompt).
pub async fn run_turns(
    inv: &Invocation,
    history: Vec<Message>,
    sink: EventSink<'_>,
    cancel: &CancellationToken,
) -> Result<RunOutcome, EngineError> {
    run_turns_controlled(inv, history, sink, cancel, None).await
}

/// [`run_turns`] for a durable run: `control` delivers steering at safe boundaries, and a
/// history that ends with tool calls still unanswered (a run resumed from a checkpoint taken
/// mid-batch) first executes the missing server calls.
pub async fn run_turns_controlled(
    inv: &Invocation,
    history: Vec<Message>,
    sink: EventSink<'_>,
    cancel: &CancellationToken,
    control: Option<&dyn RunControl>,
) -> Result<RunOutcome, EngineError> {
    inv.check()?;
    // Turns are numbered over the whole run, so a resumed run's hooks see the same keys.
    let base_turn = control.map_or(0, RunControl::model_calls_before);
    let mut termination = Termination::prepare(inv, control)?;
    let hooks = termination.hooks();
    let mut conversation = Vec::with_capacity(history.len() + 8);
    conversation.push(Message::system(match inv.response_format.instructions() {
        Some(format) => format!("{}\n\n{format}", inv.system_prompt),
        None => inv.system_prompt.clone(),
    }));
    conversation.extend(history);
    // Shared with each model request, which holds a pointer instead of a copy. The request is
    // dropped when its call returns, so the appends below find the list unshared and grow it
    // in place; `make_mut` would copy only if a provider still held it.
    let mut conversation = Arc::new(conversation);
    let base_len = conversation.len();
    let buffer_text = inv.response_format.is_structured() || termination.buffers_text();
    let mut usage = Usage::default();
    // Structured output: a final answer given while tools were offered (so without the
    // provider's output constraint) that is not valid yet is formatted by one tool-free call
    // that carries the response format; an answer given under the constraint that is still
    // invalid gets one repair turn. Both come after the answer was judged, and neither is
    // judged again.
    let mut formatting = false;
    let mut repaired = false;
    let mut constrained = false;
    if control.is_some() {
        for result in answer_pending_calls(inv, hooks, base_turn.max(1), &conversation, sink, cancel).await? {
            Arc::make_mut(&mut conversation).push(result.clone());
            sink(RunEvent::MessageAppended { message: result });
        }
    }
    // A gated run resumed after its last candidate was produced judges that candidate (or
    // replays the decision recorded for it) instead of asking the model again.
    let mut candidate =
        if control.is_some() && termination.is_gate() { checkpointed_candidate(&conversation) } else { None };
    let mut turn = 0;

    loop {
        let text = match candidate.take() {
            Some(text) => text,
            None => {
                // The formatting call renders an answer already given: it is not an agent turn.
                if turn >= inv.max_turns && !formatting {
                    break;
                }
                turn += 1;
                for message in control.map(RunControl::take_steering).unwrap_or_default() {
                    Arc::make_mut(&mut conversation).push(message.clone());
                    sink(RunEvent::MessageAppended { message });
                }
                let output_cap = termination.before_model_call().await?;
                let tool_free = formatting || repaired || termination.tool_free();
                let tools =
                    if tool_free { Vec::new() } else { crate::tools::loading::visible_tools(inv, &conversation) };
                let tool_choice = if tool_free {
                    ToolChoice::None
                } else if turn == 1 {
                    inv.tool_choice.clone()
                } else {
                    ToolChoice::Auto
                };
                // With no tool the model may call, the call that answers can carry the format.
                constrained =
                    inv.response_format.is_structured() && (tools.is_empty() || tool_choice == ToolChoice::None);
                let shape = CallShape {
                    tools,
                    tool_choice,
                    response_format: if constrained { inv.response_format.wire() } else { None },
                    max_output_tokens: output_cap,
                };
                sink(RunEvent::TurnStarted { turn });
                let reply = call_model(inv, &conversation, shape, buffer_text, sink, cancel).await?;
                usage.add(reply.usage.unwrap_or_default());
                sink(RunEvent::TurnCompleted {
                    turn,
                    usage: reply.usage.unwrap_or_default(),
                    finish_reason: reply.finish.clone(),
                });

                let assistant = Message {
                    role: Role::Assistant,
                    content: (!reply.text.is_empty()).then(|| Content::Text(reply.text.clone())),
                    tool_calls: reply.tool_calls.clone(),
                    tool_call_id: None,
                    name: None,
                };
                Arc::make_mut(&mut conversation).push(assistant.clone());
                sink(RunEvent::MessageAppended { message: assistant });
                termination.after_model_call(reply.usage)?;
                if reply.tool_calls.is_empty() {
                    reply.text
                } else {
                    let (client, server): (Vec<ToolCall>, Vec<ToolCall>) =
                        reply.tool_calls.into_iter().partition(|c| inv.runs_in_client(c));
                    if !server.is_empty() {
                        if cancel.is_cancelled() {
                            return Err(EngineError::Aborted);
                        }
                        // Boxed (as in `answer_pending_calls`): the calls' future (gates, hooks,
                        // tools) is kilobytes, and every turn's would otherwise carry and copy it.
                        let executed =
                            crate::tools::execute(inv, hooks, base_turn + turn, &server, &conversation, sink);
                        for result in Box::pin(executed).await? {
                            Arc::make_mut(&mut conversation).push(result.clone());
                            sink(RunEvent::MessageAppended { message: result });
                        }
                    }
                    if cancel.is_cancelled() {
                        return Err(EngineError::Aborted);
                    }
                    if !client.is_empty() {
                        return Ok(outcome(
                            None,
                            crate::interaction::finish_reason(&client),
                            client,
                            usage,
                            turn,
                            &conversation[base_len..],
                        ));
                    }
                    continue;
                }
            }
        };

        let rendering = formatting || repaired;
        // Boxed: the gate's judgement (hooks, a verifier's model call) is kilobytes of future.
        let judged =
            if rendering { None } else { Some(Box::pin(termination.judge(inv, base_turn + turn, &text, sink)).await?) };
        if let Some(Judgement::Retry(feedback)) = judged {
            // The rejected candidate stays in the history (the model needs it), but it
            // was never streamed; the feedback is model-visible.
            Arc::make_mut(&mut conversation).push(feedback.clone());
            sink(RunEvent::MessageAppended { message: feedback });
            continue;
        }
        match inv.response_format.check(&text) {
            Ok(content) => {
                if buffer_text {
                    sink(RunEvent::TextDelta { text: content.clone() });
                }
                let follow_ups = control.map(RunControl::take_follow_ups).unwrap_or_default();
                if !follow_ups.is_empty() {
                    // A new question: its answer gets the tools phase and formatting again.
                    (formatting, repaired) = (false, false);
                    for message in follow_ups {
                        Arc::make_mut(&mut conversation).push(message.clone());
                        sink(RunEvent::MessageAppended { message });
                    }
                    continue;
                }
                return Ok(outcome(
                    Some(content),
                    FinishReason::Stop,
                    Vec::new(),
                    usage,
                    turn,
                    &conversation[base_len..],
                ));
            }
            Err(diagnostics) if !repaired => {
                // Unconstrained: one tool-free formatting call under the provider's constraint.
                // Constrained and still invalid: one bounded repair turn showing the errors
                // and the schema.
                let fix = if constrained {
                    repaired = true;
                    Message::user(inv.response_format.repair_request(&diagnostics))
                } else {
                    formatting = true;
                    Message::user(inv.response_format.formatting_request())
                };
                Arc::make_mut(&mut conversation).push(fix.clone());
                sink(RunEvent::MessageAppended { message: fix });
                continue;
            }
            Err(diagnostics) => return Err(EngineError::StructuredOutputInvalid(diagnostics)),
        }
    }
    Err(termination.out_of_turns(inv.max_turns, Arc::make_mut(&mut conversation).split_off(base_len)))
}

/// The text of the candidate final answer a resumed run's conversation ends with (an
/// assistant message without tool calls), if it does. A new request always ends with the
/// user's message, so only a checkpoint taken after a candidate ends like this.
fn checkpointed_candidate(conversation: &[Message]) -> Option<String> {
    conversation.last().filter(|m| m.role == Role::Assistant && m.tool_calls.is_empty()).map(Message::text_content)
}

/// Results for the server tool calls of the last assistant message that have none yet (a
/// resumed run whose checkpoint was taken between tool results).
async fn answer_pending_calls(
    inv: &Invocation,
    hooks: Option<&InvocationHooks>,
    turn: u32,
    conversation: &[Message],
    sink: EventSink<'_>,
    cancel: &CancellationToken,
) -> Result<Vec<Message>, EngineError> {
    let Some(last) = conversation.iter().rposition(|m| m.role == Role::Assistant) else { return Ok(Vec::new()) };
    let after = &conversation[last + 1..];
    if after.iter().any(|m| m.role != Role::Tool) {
        return Ok(Vec::new());
    }
    let missing: Vec<ToolCall> = conversation[last]
        .tool_calls
        .iter()
        .filter(|c| {
            !inv.is_client_tool(&c.name) && !after.iter().any(|m| m.tool_call_id.as_deref() == Some(c.id.as_str()))
        })
        .cloned()
        .collect();
    if missing.is_empty() {
        return Ok(Vec::new());
    }
    if cancel.is_cancelled() {
        return Err(EngineError::Aborted);
    }
    // Through the runtime's own tools too (a resumed `polpo_tool_load`), judged against the
    // conversation up to the assistant message that made the calls.
    Box::pin(crate::tools::execute(inv, hooks, turn, &missing, &conversation[..=last], sink)).await
}

fn outcome(
    content: Option<String>,
    finish_reason: FinishReason,
    client_tool_calls: Vec<ToolCall>,
    usage: Usage,
    turns: u32,
    added: &[Message],
) -> RunOutcome {
    RunOutcome { content, finish_reason, client_tool_calls, usage, turns, messages: added.to_vec() }
}

/// What one model call may do: which tools, which tool choice, how much output.
struct CallShape {
    tools: Vec<Arc<polpo_core::tool::ToolSpec>>,
    tool_choice: ToolChoice,
    /// The response format the provider must constrain this call's answer to.
    response_format: Option<serde_json::Value>,
    max_output_tokens: Option<u32>,
}

/// One streamed model call, forwarding deltas to the sink as they arrive.
async fn call_model(
    inv: &Invocation,
    conversation: &Arc<Vec<Message>>,
    shape: CallShape,
    buffer_text: bool,
    sink: EventSink<'_>,
    cancel: &CancellationToken,
) -> Result<ModelReply, EngineError> {
    let request = ModelRequest {
        model: inv.model.clone(),
        messages: Arc::clone(conversation),
        tools: shape.tools,
        tool_choice: shape.tool_choice,
        response_format: shape.response_format,
        reasoning: inv.reasoning.clone(),
        max_output_tokens: shape.max_output_tokens,
        temperature: inv.temperature,
    };
    let mut stream = tokio::select! {
        biased;
        _ = cancel.cancelled() => return Err(EngineError::Aborted),
        s = crate::meter::external(inv.provider.stream(request)) => s?,
    };
    let mut reply = ModelReply { text: String::new(), tool_calls: Vec::new(), usage: None, finish: FinishReason::Stop };
    // Per streamed call index: (id, name, arguments so far), for `preparing` events.
    let mut preparing: Vec<(String, String, String)> = Vec::new();
    loop {
        let event = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(EngineError::Aborted),
            e = crate::meter::external(stream.next()) => e,
        };
        let Some(event) = event else { break };
        match event? {
            ModelEvent::TextDelta(t) => {
                if !buffer_text {
                    sink(RunEvent::TextDelta { text: t.clone() });
                }
                reply.text.push_str(&t);
            }
            ModelEvent::ReasoningDelta(t) => sink(RunEvent::ReasoningDelta { text: t }),
            ModelEvent::ToolCallDelta { index, id, name, arguments } => {
                if preparing.len() <= index {
                    preparing.resize(index + 1, Default::default());
                }
                let slot = &mut preparing[index];
                if let Some(id) = id {
                    slot.0 = id;
                }
                if let Some(name) = name {
                    slot.1 = name;
                }
                slot.2.push_str(&arguments);
                sink(RunEvent::ToolPreparing {
                    id: slot.0.clone(),
                    name: slot.1.clone(),
                    arguments_text: slot.2.clone(),
                });
            }
            ModelEvent::ToolCall(call) => reply.tool_calls.push(call),
            ModelEvent::Usage(u) => reply.usage = Some(u),
            ModelEvent::Finish(f) => reply.finish = f,
        }
    }
    Ok(reply)
}
