//! `POST /v1/chat/completions`: the OpenAI wire in, one runtime turn, the OpenAI wire out.
//!
//! Everything that can fail before the model runs (bad body, unknown agent, unknown session,
//! a forced tool outside the policy) is answered with a proper HTTP status, also for
//! streaming requests; once streaming has started, failures arrive as an error chunk and
//! `[DONE]`. Responses carry `x-session-id` and `x-polpo-run-id`; non-streaming responses also
//! carry `x-polpo-overhead-ms` (the runtime's own time, model and tool waits excluded), and
//! the last streamed chunk carries the same figure as `polpo.overhead_ms`.
//!
//! With `polpo.delivery.onDisconnect: "continue"` (and `settings.chatExecution: "run"`, the
//! default) the turn runs as a durable run (`polpo_engine::runs`): it outlives the connection,
//! streamed chunks carry the run journal's sequence as SSE `id`, and `x-polpo-run-id` names
//! the run for `GET /v1/runs/{id}/events`, steering and abort. If this server stops meanwhile
//! (SIGTERM), the run is handed over and the response says so: a `run_handed_over` error frame
//! without `[DONE]`, or `503 run_handed_over`, naming the run to follow.

use crate::app::AppState;
use crate::auth::{Caller, presented_key};
use crate::chunks::Completion;
use crate::error::ApiError;
use crate::idempotency::{self, Lookup};
use crate::routes::sessions;
use crate::wire::ChatRequest;
use axum::body::Bytes;
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, HeaderValue};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::Stream;
use polpo_core::message::{FinishReason, Message, ToolCall, Usage};
use polpo_engine::meter::Meter;
use polpo_engine::structured::ResponseFormat;
use polpo_engine::interaction::{Capabilities, Suggestion};
use polpo_engine::{ChatInput, ChatOutput, RunEvent};
use polpo_engine::runs::stream_event;
use polpo_core::config::ChatExecution;
use futures::StreamExt;
use polpo_llm::ToolChoice;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The code of a durable chat whose run this server handed over because it is stopping
/// (503 `run_handed_over`, or the stream's last frame): the run goes on on the next server,
/// to be followed with `GET /v1/runs/{id}/events`.
pub const RUN_HANDED_OVER: &str = "run_handed_over";
/// SSE comment interval that keeps proxies from closing a quiet stream.
pub const PING_INTERVAL: Duration = Duration::from_secs(20);
/// `metadata` bounds (the reference's): keys, key length, value length.
pub const MAX_METADATA_KEYS: usize = 16;
const MAX_METADATA_KEY_CHARS: usize = 64;
const MAX_METADATA_VALUE_CHARS: usize = 512;

/// The handler.
pub async fn completions(State(state): State<Arc<AppState>>, Extension(caller): Extension<Caller>, headers: HeaderMap, body: Bytes) -> Response {
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
    fn new(completion: &Completion, out: &ChatOutput, run_id: &str) -> Self {
        Self {
            id: completion.id.clone(),
            created: completion.created,
            content: out.outcome.content.clone(),
            finish_reason: out.outcome.finish_reason.clone(),
            tool_calls: out.outcome.client_tool_calls.clone(),
            usage: out.outcome.usage,
            session_id: out.session.id.clone(),
            run_id: run_id.to_owned(),
            suggestions: out.suggestions.clone(),
        }
    }

    /// The answer a durable run recorded in its `run.completed` event.
    fn from_run(completion: &Completion, data: &Value, run_id: &str) -> Self {
        let field = |k: &str| data.get(k).cloned().unwrap_or_default();
        Self {
            id: completion.id.clone(),
            created: completion.created,
            content: data.get("content").and_then(Value::as_str).map(str::to_owned),
            finish_reason: serde_json::from_value(field("finishReason")).unwrap_or(FinishReason::Stop),
            tool_calls: serde_json::from_value(field("toolCalls")).unwrap_or_default(),
            usage: serde_json::from_value(field("usage")).unwrap_or_default(),
            session_id: data.get("sessionId").and_then(Value::as_str).unwrap_or_default().to_owned(),
            run_id: run_id.to_owned(),
            suggestions: serde_json::from_value(field("suggestions")).unwrap_or_default(),
        }
    }

    fn completion(&self) -> Completion {
        Completion { id: self.id.clone(), created: self.created }
    }

    fn body(&self) -> Value {
        let mut body = self.completion().body(self.content.as_deref(), &self.finish_reason, &self.tool_calls, &self.usage);
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

async fn handle(state: Arc<AppState>, caller: Caller, headers: HeaderMap, body: Bytes) -> Result<Response, ApiError> {
    let meter = Meter::start();
    let request: ChatRequest = serde_json::from_slice(&body).map_err(|e| ApiError::invalid(format!("the body is not a valid chat completion request: {e}")))?;
    let mut input = chat_input(&state, &request, &headers)?;
    // Another client's session is answered as one that does not exist.
    if let Some(id) = input.session_id.as_deref().filter(|_| !caller.admin) {
        sessions::owned(&state, &caller, id).await?;
    }
    input.owner = caller.owner;
    let stream = request.stream;

    let claim = match headers.get("idempotency-key").map(|v| v.to_str().unwrap_or_default()) {
        None => None,
        Some(key) => match idempotency::claim(state.runtime.store(), presented_key(&headers).unwrap_or(""), key, &body).await? {
            Lookup::Replay(stored) => return replay(stored, stream),
            Lookup::Claimed(claim) => Some(claim),
        },
    };
    if durable_delivery(&state, &request) {
        return durable(state, input, claim, stream).await;
    }

    let cancel = CancellationToken::new();
    let prepared = match meter.scope(state.runtime.prepare(input, &cancel)).await {
        Ok(p) => p,
        Err(e) => {
            if let Some(claim) = claim {
                idempotency::release(state.runtime.store(), claim).await;
            }
            return Err(e.into());
        }
    };
    let completion = Completion { id: format!("chatcmpl-{}", uuid::Uuid::now_v7().simple()), created: chrono::Utc::now().timestamp() };
    let session_id = prepared.session().id.clone();
    let run_id = prepared.run_id().to_owned();
    let ids = [("x-session-id", session_id), ("x-polpo-run-id", run_id.clone())];

    if stream {
        let events = streamed(state, completion, prepared, claim, meter, cancel);
        let mut response = Sse::new(events).keep_alive(KeepAlive::new().interval(PING_INTERVAL).text("ping")).into_response();
        set_headers(response.headers_mut(), &ids);
        return Ok(response);
    }

    // A client that disconnects drops this future; the guard then cancels model and tools.
    let _disconnect = cancel.drop_guard();
    let result = meter.scope(run_prepared(&state, prepared, &|_| {})).await;
    let mut response = match result {
        Ok(out) => {
            let answer = Answer::new(&completion, &out, &run_id);
            if let Some(claim) = claim {
                idempotency::complete(state.runtime.store(), claim, serde_json::to_value(&answer).unwrap_or_default()).await?;
            }
            axum::Json(answer.body()).into_response()
        }
        Err(e) => {
            if let Some(claim) = claim {
                idempotency::release(state.runtime.store(), claim).await;
            }
            ApiError::from(e).into_response()
        }
    };
    set_headers(response.headers_mut(), &ids);
    let overhead = format!("{:.3}", meter.read().own().as_secs_f64() * 1000.0);
    set_headers(response.headers_mut(), &[("x-polpo-overhead-ms", overhead)]);
    Ok(response)
}

/// Run the turn in its own task and stream its chunks. The task ends early only when the
/// client goes away (the stream is dropped, which cancels the run: plain chat is not
/// durable; durable run-backed chat keeps going without its subscriber).
fn streamed(
    state: Arc<AppState>,
    completion: Completion,
    prepared: polpo_engine::PreparedChat,
    claim: Option<idempotency::Claim>,
    meter: Meter,
    cancel: CancellationToken,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Event>();
    let run_id = prepared.run_id().to_owned();
    let send = move |tx: &tokio::sync::mpsc::UnboundedSender<Event>, v: &Value| {
        let _ = tx.send(Event::default().data(v.to_string()));
    };
    tokio::spawn(async move {
        send(&tx, &completion.role_chunk());
        let sink = |event: RunEvent| {
            if let Some(chunk) = completion.event_chunk(&event) {
                send(&tx, &chunk);
            }
        };
        let result = meter.scope(run_prepared(&state, prepared, &sink)).await;
        match result {
            Ok(out) => {
                let answer = Answer::new(&completion, &out, &run_id);
                if let Some(chunk) = answer.suggestions_chunk() {
                    send(&tx, &chunk);
                }
                let mut last = completion.final_chunk(&answer.finish_reason, &answer.tool_calls, &answer.usage);
                last["polpo"] = json!({"overhead_ms": meter.read().own().as_secs_f64() * 1000.0});
                send(&tx, &last);
                if let Some(claim) = claim
                    && let Err(e) = idempotency::complete(state.runtime.store(), claim, serde_json::to_value(&answer).unwrap_or_default()).await
                {
                    tracing::warn!(code = %e.code, "could not remember an idempotent response");
                }
            }
            Err(e) => {
                send(&tx, &completion.error_chunk(&e.to_string(), e.code()));
                if let Some(claim) = claim {
                    idempotency::release(state.runtime.store(), claim).await;
                }
            }
        }
        let _ = tx.send(Event::default().data("[DONE]"));
    });
    let guard = cancel.drop_guard();
    futures::stream::unfold((rx, guard), |(mut rx, guard)| async move { rx.recv().await.map(|e| (Ok(e), (rx, guard))) })
}

/// Run a prepared turn in this request: steerable and abortable by its run id
/// (`/v1/runs/{id}/steer|abort`) with `settings.chatExecution: "run"`, plain with `inline`.
async fn run_prepared(state: &AppState, prepared: polpo_engine::PreparedChat, sink: polpo_engine::EventSink<'_>) -> Result<ChatOutput, polpo_engine::ChatError> {
    if state.runtime.loaded().project.settings().chat_execution() == ChatExecution::Run {
        /// Forgets the run's owner however the turn ends (a client disconnect drops it).
        struct Registered<'a>(&'a AppState, String);
        impl Drop for Registered<'_> {
            fn drop(&mut self) {
                self.0.inline_owners.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&self.1);
            }
        }
        let run_id = prepared.run_id().to_owned();
        state.inline_owners.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(run_id.clone(), prepared.session().owner.clone());
        let _registered = Registered(state, run_id);
        state.runs.run_inline(prepared, sink).await
    } else {
        prepared.run(sink).await
    }
}

/// Run-backed delivery: `polpo.delivery.onDisconnect: "continue"` with `settings.chatExecution`
/// `run` (the default). The turn executes as a durable run that outlives this connection.
fn durable_delivery(state: &AppState, r: &ChatRequest) -> bool {
    let on_disconnect = r.polpo.as_ref().and_then(|p| p.extra.get("delivery")).and_then(|d| d.get("onDisconnect")).and_then(Value::as_str);
    on_disconnect == Some("continue") && state.runtime.loaded().project.settings().chat_execution() == ChatExecution::Run
}

/// Start the turn as a durable run and answer from its journal: streamed chunks carry the
/// journal sequence as their SSE `id`, so a client that loses the stream continues with
/// `GET /v1/runs/{id}/events` and `Last-Event-ID`. The run and the follower that completes
/// an `Idempotency-Key` keep going when the client disconnects.
async fn durable(state: Arc<AppState>, input: ChatInput, claim: Option<idempotency::Claim>, stream: bool) -> Result<Response, ApiError> {
    let started = match state.runs.start(input).await {
        Ok(s) => s,
        Err(e) => {
            if let Some(claim) = claim {
                idempotency::release(state.runtime.store(), claim).await;
            }
            return Err(e.into());
        }
    };
    let completion = Completion { id: format!("chatcmpl-{}", uuid::Uuid::now_v7().simple()), created: chrono::Utc::now().timestamp() };
    let ids = [("x-session-id", started.session_id.clone()), ("x-polpo-run-id", started.run_id.clone())];
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Event>();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(follow_run(state, completion, started.run_id.clone(), claim, tx, done_tx));
    let mut response = if stream {
        let events = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|e| (Ok::<_, Infallible>(e), rx)) });
        Sse::new(events).keep_alive(KeepAlive::new().interval(PING_INTERVAL).text("ping")).into_response()
    } else {
        match done_rx.await {
            Ok(Ok(answer)) => axum::Json(answer.body()).into_response(),
            Ok(Err((code, message))) => {
                let mut response = ApiError::new(&code, message).for_run(&started.run_id).into_response();
                if code == RUN_HANDED_OVER {
                    // A retry would start a second run while this one goes on (OpenAI SDKs
                    // retry 5xx unless told not to).
                    response.headers_mut().insert("x-should-retry", HeaderValue::from_static("false"));
                }
                response
            }
            Err(_) => ApiError::new("internal", "the run follower stopped").into_response(),
        }
    };
    set_headers(response.headers_mut(), &ids);
    Ok(response)
}

/// Follow a durable run's journal to its end, sending chat chunks while the client listens,
/// then settle the `Idempotency-Key` and report the answer (or `(code, message)`).
///
/// The answer ends with the run's verdict (completed, failed, cancelled or paused) and then
/// `[DONE]`. A run this server hands over because it is stopping (`run.released`) has no
/// verdict here: the stream ends with a [`RUN_HANDED_OVER`] error frame and no `[DONE]`, so
/// no client takes the text so far for the whole answer, and the `Idempotency-Key` stays
/// claimed, since the run goes on on the next server and a retry must not start a second one.
async fn follow_run(
    state: Arc<AppState>,
    completion: Completion,
    run_id: String,
    claim: Option<idempotency::Claim>,
    tx: tokio::sync::mpsc::UnboundedSender<Event>,
    done: tokio::sync::oneshot::Sender<Result<Answer, (String, String)>>,
) {
    let send = |v: &Value, seq: Option<u64>| {
        let event = Event::default().data(v.to_string());
        let _ = tx.send(match seq {
            Some(seq) => event.id(seq.to_string()),
            None => event,
        });
    };
    send(&completion.role_chunk(), None);
    let mut journal = Box::pin(state.runs.events(&run_id, 0));
    let mut result: Result<Answer, (String, String)> = Err(("internal".into(), "the run ended without a terminal event".into()));
    let mut verdict = false;
    while let Some(event) = journal.next().await {
        let event = match event {
            Ok(e) => e,
            Err(e) => {
                result = Err((e.code().into(), e.to_string()));
                break;
            }
        };
        if event.event_type == "run.released" {
            let message = format!("{RUN_HANDED_OVER}: this server is stopping and handed run `{run_id}` over to the next one, where it goes on: follow it with GET /v1/runs/{run_id}/events (Last-Event-ID resumes)");
            send(&completion.unfinished_chunk(&message, RUN_HANDED_OVER, &run_id), Some(event.seq));
            let _ = done.send(Err((RUN_HANDED_OVER.into(), message)));
            return;
        }
        let seq = Some(event.seq);
        if let Some(chunk) = stream_event(&event).and_then(|e| completion.event_chunk(&e)) {
            send(&chunk, seq);
        }
        let text = |k: &str| event.data.get(k).and_then(Value::as_str).unwrap_or_default().to_owned();
        result = match event.event_type.as_str() {
            "run.completed" => {
                let answer = Answer::from_run(&completion, &event.data, &run_id);
                if let Some(chunk) = answer.suggestions_chunk() {
                    send(&chunk, seq);
                }
                send(&completion.final_chunk(&answer.finish_reason, &answer.tool_calls, &answer.usage), seq);
                Ok(answer)
            }
            "run.failed" => Err((text("code"), text("message"))),
            "run.cancelled" => Err(("aborted".into(), "aborted: the run was aborted".into())),
            "run.paused" => Err((text("code"), format!("{}: the run is paused for reconciliation", text("code")))),
            _ => continue,
        };
        if let Err((code, message)) = &result {
            send(&completion.error_chunk(message, code), seq);
        }
        // The journal goes on past a pause (for the run's own followers); this answer ends.
        verdict = true;
        break;
    }
    if !verdict && let Err((code, message)) = &result {
        send(&completion.error_chunk(message, code), None);
    }
    let _ = tx.send(Event::default().data("[DONE]"));
    if let Some(claim) = claim {
        match &result {
            Ok(answer) => {
                if let Err(e) = idempotency::complete(state.runtime.store(), claim, serde_json::to_value(answer).unwrap_or_default()).await {
                    tracing::warn!(code = %e.code, "could not remember an idempotent response");
                }
            }
            Err(_) => idempotency::release(state.runtime.store(), claim).await,
        }
    }
    let _ = done.send(result);
}

/// Answer a repeated `Idempotency-Key` with the remembered response, in the shape asked for.
fn replay(stored: Value, stream: bool) -> Result<Response, ApiError> {
    let answer: Answer = serde_json::from_value(stored).map_err(|e| ApiError::new("internal", format!("a remembered response is unreadable: {e}")))?;
    let ids = [("x-session-id", answer.session_id.clone()), ("x-polpo-run-id", answer.run_id.clone()), ("idempotent-replayed", "true".into())];
    let mut response = if stream {
        let mut events: Vec<Result<Event, Infallible>> = answer.chunks().iter().map(|c| Ok(Event::default().data(c.to_string()))).collect();
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
    let messages = r.messages.iter().cloned().map(|m| m.into_message()).collect::<Result<Vec<Message>, _>>().map_err(ApiError::invalid)?;
    if messages.is_empty() {
        return Err(ApiError::invalid("messages must contain at least one message"));
    }
    sampling(&r.extra)?;
    let mut input = ChatInput::new(agent, messages);
    input.session_id = headers.get("x-session-id").and_then(|v| v.to_str().ok()).map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned);
    input.client_tools = r.tools.iter().cloned().map(|t| t.into_spec()).collect::<Result<_, _>>().map_err(ApiError::invalid)?;
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
    // Parsed but not acted on yet: refused with a stable code rather than silently ignored.
    if r.loop_name.is_some() {
        return Err(ApiError::new("feature_unavailable", "`loop` (running a Project Loop) is not available in this runtime yet"));
    }
    if r.polpo.as_ref().is_some_and(|p| !p.skills.is_empty()) {
        return Err(ApiError::new("feature_unavailable", "`polpo.skills` (activating Agent Skills) is not available in this runtime yet"));
    }
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
        _ => Err(ApiError::new("agent_required", "name the agent: `\"agent\": \"<id>\"` or `\"model\": \"agent/<id>\"` (see GET /v1/models)")),
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
            None => return Err(ApiError::invalid("tool_choice must be a string or {\"type\":\"function\",\"function\":{\"name\":…}}")),
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
    let labels = routing.get("labels").and_then(Value::as_array).filter(|_| routing.as_object().is_some_and(|o| o.len() == 1));
    let labels: Option<Vec<String>> = labels.and_then(|l| l.iter().map(|v| v.as_str().map(str::to_owned)).collect());
    match labels {
        Some(labels) if labels.len() <= MAX_REQUEST_LABELS && labels.iter().all(|l| !l.is_empty() && l.chars().count() <= MAX_REQUEST_LABEL_CHARS) => Ok(labels),
        _ => Err(ApiError::invalid(format!("routing must be {{\"labels\": [...]}} with at most {MAX_REQUEST_LABELS} non-empty strings of at most {MAX_REQUEST_LABEL_CHARS} characters"))),
    }
}

/// Most output tokens a request may ask for; more is a client bug, not a model's limit.
pub const MAX_OUTPUT_TOKENS: u64 = 1_000_000;

/// The OpenAI sampling parameters, checked against their documented ranges so a nonsense value
/// (`-1`, `1e30`, `"NaN"`) is `400 invalid_value` naming the field instead of silently ignored.
/// `null` means "not given".
fn sampling(extra: &Map<String, Value>) -> Result<(), ApiError> {
    let invalid = |field: &str, expected: &str, got: &Value| ApiError::new("invalid_value", format!("`{field}` must be {expected} (got {got})"));
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
        let ok = k.chars().count() <= MAX_METADATA_KEY_CHARS && v.as_str().is_some_and(|s| s.chars().count() <= MAX_METADATA_VALUE_CHARS);
        if !ok {
            return Err(ApiError::invalid(format!("metadata.{k}: keys are at most {MAX_METADATA_KEY_CHARS} characters and values strings of at most {MAX_METADATA_VALUE_CHARS}")));
        }
    }
    Ok(Value::Object(m.clone()))
}
