//! `POST /v1/chat/completions`: the OpenAI wire in, one engine invocation, the OpenAI wire out.
//!
//! This route translates only: the request becomes a `ChatInput`, the engine's
//! `RunManager::invoke` decides how it runs (inline, steerable, or as a durable run that outlives
//! the connection, for `polpo.delivery.onDisconnect: "continue"`), and its progress becomes
//! chunks or one completion object.
//!
//! Everything that can fail before the model runs (bad body, unknown agent, unknown session,
//! a forced tool outside the policy) is answered with a proper HTTP status, also for
//! streaming requests; once streaming has started, failures arrive as an error chunk and
//! `[DONE]`. Responses carry `x-session-id` and `x-polpo-run-id`; a turn that runs in the
//! request also reports `x-polpo-overhead-ms` (the runtime's own time, model and tool waits
//! excluded), streamed as `polpo.overhead_ms` on the last chunk. A durable run's chunks carry
//! the run journal's sequence as SSE `id`, to be resumed on `GET /v1/runs/{id}/events`. If
//! this server stops meanwhile (SIGTERM), the run is handed over and the response says so: a
//! `run_handed_over` error frame without `[DONE]`, or `503 run_handed_over`, naming the run.

use crate::auth::{Caller, presented_key};
use crate::chunks::Completion;
use crate::error::{ApiError, ErrorCode};
use crate::idempotency::{self, Claim, Lookup, Settlement};
use crate::routes::{self, sessions};
use crate::sse::with_pings;
use crate::state::AppState;
use crate::wire::ChatRequest;
use axum::body::Bytes;
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, HeaderValue};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use polpo_core::message::{FinishReason, Message, ToolCall, Usage};
use polpo_engine::interaction::{Capabilities, Suggestion};
use polpo_engine::meter::{Meter, Overhead};
use polpo_engine::runs::{Finished, Invoked, Progress};
use polpo_engine::structured::ResponseFormat;
use polpo_engine::{ChatInput, DeliveryMode, Failure, RunAnswer, RunEvent};
use polpo_llm::ToolChoice;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::convert::Infallible;
use std::sync::Arc;
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};
use tokio::sync::oneshot;

/// `metadata` bounds (the reference's): keys, key length, value length.
pub const MAX_METADATA_KEYS: usize = 16;
const MAX_METADATA_KEY_CHARS: usize = 64;
const MAX_METADATA_VALUE_CHARS: usize = 512;

/// The handler.
pub async fn completions(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle(state, caller, headers, body).await.unwrap_or_else(IntoResponse::into_response)
}

/// A finished completion as remembered for `Idempotency-Key` replays.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Answer {
    id: String,
    created: i64,
    content: Option<String>,
    finish_reason: FinishReason,
    tool_calls: Vec<ToolCall>,
    usage: Usage,
    session_id: String,
    run_id: String,
    /// `polpo.suggestions`; absent in answers remembered before suggestions existed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    suggestions: Vec<Suggestion>,
}

impl Answer {
    fn new(completion: &Completion, answer: &RunAnswer, run_id: &str) -> Self {
        Self {
            id: completion.id.clone(),
            created: completion.created,
            content: answer.content.clone(),
            finish_reason: answer.finish_reason.clone(),
            tool_calls: answer.tool_calls.clone(),
            usage: answer.usage,
            session_id: answer.session_id.clone(),
            run_id: run_id.to_owned(),
            suggestions: answer.suggestions.clone(),
        }
    }

    fn completion(&self) -> Completion {
        Completion { id: self.id.clone(), created: self.created }
    }

    fn body(&self) -> Value {
        let mut body =
            self.completion().body(self.content.as_deref(), &self.finish_reason, &self.tool_calls, &self.usage);
        if !self.suggestions.is_empty() {
            body["polpo"] = json!({"suggestions": self.suggestions});
        }
        body
    }

    /// The root-level `polpo.suggestions` chunk that goes just before the final chunk.
    fn suggestions_chunk(&self) -> Option<Value> {
        (!self.suggestions.is_empty()).then(|| self.completion().suggestions_chunk(&self.suggestions))
    }

    /// The whole answer as the chunks a live stream would have sent.
    fn chunks(&self) -> Vec<Value> {
        let c = self.completion();
        let mut out = vec![c.role_chunk()];
        if let Some(text) = &self.content {
            out.extend(c.event_chunk(&RunEvent::TextDelta { text: text.clone() }));
        }
        out.extend(self.suggestions_chunk());
        out.push(c.final_chunk(&self.finish_reason, &self.tool_calls, &self.usage));
        out
    }
}

/// How the invocation ended, as the response needs it.
struct Delivered {
    answer: Result<Answer, Failure>,
    handed_over: bool,
    overhead: Option<Overhead>,
    /// Why a successful answer could not be remembered under its `Idempotency-Key`.
    unremembered: Option<ApiError>,
    /// The approval request the run asked for last (a hook's `ask`), named in its error.
    approval: Option<String>,
}

async fn handle(state: Arc<AppState>, caller: Caller, headers: HeaderMap, body: Bytes) -> Result<Response, ApiError> {
    let meter = Meter::start();
    let request: ChatRequest = serde_json::from_slice(&body)
        .map_err(|e| ApiError::invalid(format!("the body is not a valid chat completion request: {e}")))?;
    let mut input = chat_input(&state, &request, &headers)?;
    // Another client's session is answered as one that does not exist.
    if let Some(id) = input.session_id.as_deref().filter(|_| !caller.admin) {
        sessions::owned(&state, &caller, id).await?;
    }
    input.owner = caller.owner;
    let idempotent = headers.contains_key("idempotency-key");
    if !input.store && idempotent {
        return Err(ApiError::new(
            ErrorCode::StoreRequired,
            "`Idempotency-Key` keeps the answer for retries, which `store: false` forbids: drop one of them",
        ));
    }
    if let Some((named, route)) = routes::loops::selected_loop(&state, &input, request.loop_name.clone()).await {
        if !input.store {
            return Err(ApiError::new(
                ErrorCode::StoreRequired,
                "this request runs a Project Loop, whose run is stored, which `store: false` forbids",
            ));
        }
        return routes::loops::chat(state, input, named, route, request.stream, idempotent).await;
    }

    let claim = match headers.get("idempotency-key").map(|v| v.to_str().unwrap_or_default()) {
        None => None,
        Some(key) => match idempotency::claim(
            state.runtime.store(),
            state.runtime.clock(),
            presented_key(&headers).unwrap_or(""),
            key,
            &body,
        )
        .await?
        {
            Lookup::Replay(stored) => return replay(stored, request.stream),
            Lookup::Claimed(claim) => Some(claim),
        },
    };
    // The request id of an idempotent request is the same on every retry of it (same key, same
    // body), so an approval a hook asked for in one attempt is found by the retry, and only by it.
    if let Some(claim) = &claim {
        input.request_id = Some(claim.request_id());
    }
    let mut invoked = match state.runs.invoke(input, meter).await {
        Ok(invoked) => invoked,
        Err(e) => {
            settle(claim, Settlement::Failed).await;
            return Err(e.into());
        }
    };
    let completion = Completion {
        id: format!("chatcmpl-{}", state.runtime.ids().next_id()),
        created: state.runtime.clock().now().timestamp(),
    };
    // An unstored turn has no session to name.
    let ids: Vec<_> =
        [("x-session-id", invoked.session_id().to_owned()), ("x-polpo-run-id", invoked.run_id().to_owned())]
            .into_iter()
            .filter(|(_, id)| !id.is_empty())
            .collect();
    let (durable, run_id) = (invoked.mode() == DeliveryMode::Durable, invoked.run_id().to_owned());
    // Held while the client listens: a client that goes away cancels a turn that runs in its
    // request. The delivery below goes on either way, so the key is always settled.
    let attachment = invoked.attachment();
    let (done_tx, done) = oneshot::channel();
    let mut response = if request.stream {
        let (tx, rx) = unbounded_channel::<Event>();
        tokio::spawn(deliver(completion, invoked, claim, Some(tx), done_tx));
        let events = futures::stream::unfold((rx, attachment), |(mut rx, attachment)| async move {
            rx.recv().await.map(|e| (Ok::<_, Infallible>(e), (rx, attachment)))
        });
        with_pings(events).into_response()
    } else {
        tokio::spawn(deliver(completion, invoked, claim, None, done_tx));
        let delivered = done.await;
        drop(attachment);
        let Ok(delivered) = delivered else {
            return Err(ApiError::new(ErrorCode::Internal, "the run follower stopped"));
        };
        let mut response = match (delivered.answer, delivered.unremembered) {
            (Ok(_), Some(e)) => e.into_response(),
            (Ok(answer), None) => axum::Json(answer.body()).into_response(),
            (Err(failure), _) => {
                let mut error = ApiError::new(&failure.code, failure.message);
                if let Some(approval) = delivered.approval.as_deref() {
                    error = error.for_approval(approval);
                }
                let mut response = if durable { error.for_run(&run_id) } else { error }.into_response();
                if delivered.handed_over {
                    // A retry would start a second run while this one goes on (OpenAI SDKs
                    // retry 5xx unless told not to).
                    response.headers_mut().insert("x-should-retry", HeaderValue::from_static("false"));
                }
                response
            }
        };
        if let Some(overhead) = delivered.overhead {
            set_headers(response.headers_mut(), &[("x-polpo-overhead-ms", format!("{:.3}", millis(overhead)))]);
        }
        response
    };
    set_headers(response.headers_mut(), &ids);
    Ok(response)
}

/// Drive an invocation to its end: its progress as chunks while a client streams, then the
/// verdict, the `Idempotency-Key` settled, and `[DONE]` — except for a run this server handed
/// over, whose stream ends with a `run_handed_over` error frame and no `[DONE]`, so no client
/// takes the text so far for the whole answer.
async fn deliver(
    completion: Completion,
    mut invoked: Invoked,
    claim: Option<Claim>,
    chunks: Option<UnboundedSender<Event>>,
    done: oneshot::Sender<Delivered>,
) {
    // Chunks are built only for a streamed answer: a non-streamed one is the `Answer` alone.
    let send = |chunk: &dyn Fn() -> Option<Value>, seq: Option<u64>| {
        if let Some(tx) = &chunks
            && let Some(v) = chunk()
        {
            let event = Event::default().data(v.to_string());
            let _ = tx.send(match seq {
                Some(seq) => event.id(seq.to_string()),
                None => event,
            });
        }
    };
    send(&|| Some(completion.role_chunk()), None);
    let mut approval = None;
    let finished = loop {
        match invoked.next().await {
            Some(Progress::Event(event, seq)) => {
                if let RunEvent::ApprovalRequested { approval_id, .. } = &event {
                    approval = Some(approval_id.clone());
                }
                send(&|| completion.event_chunk(&event), seq);
            }
            Some(Progress::Finished(finished)) => break finished,
            None => {
                break Finished {
                    result: Err(Failure { code: "internal".into(), message: "the run follower stopped".into() }),
                    seq: None,
                    overhead: None,
                };
            }
        }
    };
    let handed_over = finished.handed_over();
    let Finished { result, seq, overhead } = finished;
    let answer = result.map(|a| Answer::new(&completion, &a, invoked.run_id()));
    match &answer {
        Ok(answer) => send_answer(&completion, answer, overhead, seq, &send),
        Err(f) if handed_over => {
            send(&|| Some(completion.unfinished_chunk(&f.message, &f.code, invoked.run_id())), seq);
        }
        Err(f) => send(
            &|| {
                let mut chunk = completion.error_chunk(&f.message, &f.code);
                if let Some(approval) = &approval {
                    chunk["error"]["approval_id"] = approval.clone().into();
                }
                Some(chunk)
            },
            seq,
        ),
    }
    // The response kept for an idempotency key is built only when a key was claimed.
    let unremembered = match claim {
        Some(claim) => {
            let settlement = match &answer {
                Ok(answer) => Settlement::Answered(serde_json::to_value(answer).unwrap_or_default()),
                Err(_) if handed_over => Settlement::HandedOver,
                Err(_) => Settlement::Failed,
            };
            claim.settle(settlement).await.err()
        }
        None => None,
    };
    if let Some(e) = &unremembered {
        tracing::warn!(code = %e.code, "could not remember an idempotent response");
    }
    if let Some(tx) = chunks.as_ref().filter(|_| !handed_over) {
        let _ = tx.send(Event::default().data("[DONE]"));
    }
    let _ = done.send(Delivered { answer, handed_over, overhead, unremembered, approval });
}

/// The end of a streamed answer: suggestions, then the final chunk (with the overhead of a
/// turn that ran in the request).
fn send_answer(
    completion: &Completion,
    answer: &Answer,
    overhead: Option<Overhead>,
    seq: Option<u64>,
    send: &impl Fn(&dyn Fn() -> Option<Value>, Option<u64>),
) {
    send(&|| answer.suggestions_chunk(), seq);
    send(
        &|| {
            let mut last = completion.final_chunk(&answer.finish_reason, &answer.tool_calls, &answer.usage);
            if let Some(overhead) = overhead {
                last["polpo"] = json!({"overhead_ms": millis(overhead)});
            }
            Some(last)
        },
        seq,
    );
}

fn millis(overhead: Overhead) -> f64 {
    overhead.own().as_secs_f64() * 1000.0
}

/// Settle `claim`, if the request holds one.
async fn settle(claim: Option<Claim>, how: Settlement) {
    if let Some(claim) = claim
        && let Err(e) = claim.settle(how).await
    {
        tracing::warn!(code = %e.code, "could not settle an idempotency key");
    }
}

/// Answer a repeated `Idempotency-Key` with the remembered response, in the shape asked for.
fn replay(stored: Value, stream: bool) -> Result<Response, ApiError> {
    let answer: Answer = serde_json::from_value(stored)
        .map_err(|e| ApiError::new(ErrorCode::Internal, format!("a remembered response is unreadable: {e}")))?;
    let ids = [
        ("x-session-id", answer.session_id.clone()),
        ("x-polpo-run-id", answer.run_id.clone()),
        ("idempotent-replayed", "true".into()),
    ];
    let mut response = if stream {
        let mut events: Vec<Result<Event, Infallible>> =
            answer.chunks().iter().map(|c| Ok(Event::default().data(c.to_string()))).collect();
        events.push(Ok(Event::default().data("[DONE]")));
        Sse::new(futures::stream::iter(events)).into_response()
    } else {
        axum::Json(answer.body()).into_response()
    };
    set_headers(response.headers_mut(), &ids);
    Ok(response)
}

fn set_headers(headers: &mut HeaderMap, values: &[(&'static str, String)]) {
    for (name, value) in values {
        if let Ok(v) = HeaderValue::from_str(value) {
            headers.insert(*name, v);
        }
    }
}

/// The wire request in the runtime's terms, with every field checked.
fn chat_input(state: &AppState, r: &ChatRequest, headers: &HeaderMap) -> Result<ChatInput, ApiError> {
    let agent = pick_agent(state, r)?;
    let messages = r
        .messages
        .iter()
        .cloned()
        .map(|m| m.into_message())
        .collect::<Result<Vec<Message>, _>>()
        .map_err(ApiError::invalid)?;
    if messages.is_empty() {
        return Err(ApiError::invalid("messages must contain at least one message"));
    }
    sampling(&r.extra)?;
    let mut input = ChatInput::new(agent, messages);
    input.session_id = headers
        .get("x-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned);
    input.client_tools =
        r.tools.iter().cloned().map(|t| t.into_spec()).collect::<Result<_, _>>().map_err(ApiError::invalid)?;
    input.tool_choice = tool_choice(r.tool_choice.as_ref())?;
    input.parallel_tool_calls = r.parallel_tool_calls.unwrap_or(false);
    input.response_format = match &r.response_format {
        Some(v) => ResponseFormat::from_wire(v).map_err(ApiError::invalid)?,
        None => ResponseFormat::Text,
    };
    input.allowed_tools = r.polpo.as_ref().and_then(|p| p.execution.as_ref()).and_then(|e| e.allowed_tools.clone());
    input.user = r.user.clone();
    input.metadata = metadata(r.metadata.as_ref())?;
    input.routing_labels = routing_labels(r.extra.get("routing"))?;
    input.capabilities = capabilities(r.polpo.as_ref().map(|p| &p.capabilities));
    // `polpo.delivery.onDisconnect: "continue"`: the answer outlives this connection (the
    // engine runs it as a durable run when the project allows).
    let on_disconnect = r
        .polpo
        .as_ref()
        .and_then(|p| p.extra.get("delivery"))
        .and_then(|d| d.get("onDisconnect"))
        .and_then(Value::as_str);
    input.outlive_caller = on_disconnect == Some("continue");
    // Checked against the agent's skills by the engine (`skill_not_assigned`).
    input.skills = r.polpo.as_ref().map(|p| p.skills.clone()).unwrap_or_default();
    input.store = r.store.unwrap_or(true);
    Ok(input)
}

/// `agent`, else `model` as `agent/<id>` or a bare agent id, else the only agent.
fn pick_agent(state: &AppState, r: &ChatRequest) -> Result<String, ApiError> {
    if let Some(agent) = &r.agent {
        return Ok(agent.clone());
    }
    if let Some(agent) = r.model.as_deref().and_then(|m| m.strip_prefix("agent/")) {
        return Ok(agent.to_owned());
    }
    let loaded = state.runtime.loaded();
    if let Some(model) = r.model.as_ref().filter(|m| loaded.agent(m).is_some()) {
        return Ok(model.clone());
    }
    let mut ids = loaded.project.agents.keys();
    match (ids.next(), ids.next()) {
        (Some(only), None) => Ok(only.clone()),
        _ => Err(ApiError::new(
            ErrorCode::AgentRequired,
            "name the agent: `\"agent\": \"<id>\"` or `\"model\": \"agent/<id>\"` (see GET /v1/models)",
        )),
    }
}

fn tool_choice(v: Option<&Value>) -> Result<ToolChoice, ApiError> {
    Ok(match v {
        None => ToolChoice::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "auto" => ToolChoice::Auto,
            "none" => ToolChoice::None,
            "required" => ToolChoice::Required,
            other => return Err(ApiError::invalid(format!("tool_choice `{other}` is not auto, none or required"))),
        },
        Some(v) => match v.pointer("/function/name").and_then(Value::as_str) {
            Some(name) => ToolChoice::Tool(name.to_owned()),
            None => {
                return Err(ApiError::invalid(
                    "tool_choice must be a string or {\"type\":\"function\",\"function\":{\"name\":…}}",
                ));
            }
        },
    })
}

/// `polpo.capabilities`: what the client can render; anything but `true` is off.
fn capabilities(c: Option<&Map<String, Value>>) -> Capabilities {
    let on = |k: &str| c.and_then(|c| c.get(k)).and_then(Value::as_bool).unwrap_or(false);
    Capabilities { ask_user_question: on("ask_user_question"), suggestions: on("suggestions") }
}

/// `routing: {"labels": [...]}` (Polpo extension): bounded labels that model routing rules
/// may match; ignored for agents that did not opt in to routing.
fn routing_labels(routing: Option<&Value>) -> Result<Vec<String>, ApiError> {
    use polpo_core::routing::{MAX_REQUEST_LABEL_CHARS, MAX_REQUEST_LABELS};
    let Some(routing) = routing.filter(|v| !v.is_null()) else { return Ok(Vec::new()) };
    let labels =
        routing.get("labels").and_then(Value::as_array).filter(|_| routing.as_object().is_some_and(|o| o.len() == 1));
    let labels: Option<Vec<String>> = labels.and_then(|l| l.iter().map(|v| v.as_str().map(str::to_owned)).collect());
    match labels {
        Some(labels)
            if labels.len() <= MAX_REQUEST_LABELS
                && labels.iter().all(|l| !l.is_empty() && l.chars().count() <= MAX_REQUEST_LABEL_CHARS) =>
        {
            Ok(labels)
        }
        _ => Err(ApiError::invalid(format!(
            "routing must be {{\"labels\": [...]}} with at most {MAX_REQUEST_LABELS} non-empty strings of at most {MAX_REQUEST_LABEL_CHARS} characters"
        ))),
    }
}

/// Most output tokens a request may ask for; more is a client bug, not a model's limit.
pub const MAX_OUTPUT_TOKENS: u64 = 1_000_000;

/// The OpenAI sampling parameters, checked against their documented ranges so a nonsense value
/// (`-1`, `1e30`, `"NaN"`) is `400 invalid_value` naming the field instead of silently ignored.
/// `null` means "not given".
fn sampling(extra: &Map<String, Value>) -> Result<(), ApiError> {
    let invalid = |field: &str, expected: &str, got: &Value| {
        ApiError::new(ErrorCode::InvalidValue, format!("`{field}` must be {expected} (got {got})"))
    };
    for field in ["max_tokens", "max_completion_tokens"] {
        match extra.get(field) {
            None | Some(Value::Null) => {}
            Some(v) if v.as_u64().is_some_and(|n| (1..=MAX_OUTPUT_TOKENS).contains(&n)) => {}
            Some(v) => return Err(invalid(field, &format!("an integer from 1 to {MAX_OUTPUT_TOKENS}"), v)),
        }
    }
    for (field, max) in [("temperature", 2.0), ("top_p", 1.0)] {
        match extra.get(field) {
            None | Some(Value::Null) => {}
            Some(v) if v.as_f64().is_some_and(|x| x.is_finite() && (0.0..=max).contains(&x)) => {}
            Some(v) => return Err(invalid(field, &format!("a number from 0 to {max}"), v)),
        }
    }
    Ok(())
}

/// `metadata`: a string map of bounded size, stored on the session.
fn metadata(m: Option<&Map<String, Value>>) -> Result<Value, ApiError> {
    let Some(m) = m else { return Ok(Value::Null) };
    if m.len() > MAX_METADATA_KEYS {
        return Err(ApiError::invalid(format!("metadata has more than {MAX_METADATA_KEYS} keys")));
    }
    for (k, v) in m {
        let ok = k.chars().count() <= MAX_METADATA_KEY_CHARS
            && v.as_str().is_some_and(|s| s.chars().count() <= MAX_METADATA_VALUE_CHARS);
        if !ok {
            return Err(ApiError::invalid(format!(
                "metadata.{k}: keys are at most {MAX_METADATA_KEY_CHARS} characters and values strings of at most {MAX_METADATA_VALUE_CHARS}"
            )));
        }
    }
    Ok(Value::Object(m.clone()))
}
