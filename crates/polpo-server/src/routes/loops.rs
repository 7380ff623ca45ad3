//! Project Loops over HTTP: a chat request that runs a loop (`loop`, or the agent's
//! `defaultLoop`), and `POST /v1/loop-runs/{id}/human`, which answers a suspended human step.
//!
//! A loop chat answers like a chat completion whose content is the loop's last agent or human
//! output, plus `loop_run_id` and the whole `loop_trace[]`; streamed, every trace event is a
//! chunk with `loop_trace: [event]` as it happens, then the content, the final chunk and
//! `[DONE]`. A failure after the loop started is an error envelope (or error chunk) that still
//! carries the run id and the trace so far. The run is stored as it goes (`GET
//! /api/v1/loop-runs/{id}`); a client that goes away cancels it. A human step is stored as
//! `awaiting_human`: the request stays open until someone answers, and after a restart the
//! resumed run waits for the answer again.

use crate::auth::Caller;
use crate::chunks::Completion;
use crate::error::{ApiError, ErrorCode, RestError, ok};
use crate::sse::with_pings;
use crate::state::AppState;
use axum::extract::{Extension, Path, State};
use axum::http::HeaderValue;
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use polpo_core::message::{FinishReason, Usage};
use polpo_engine::{ChatInput, RunEvent};
use polpo_loops::{LoopError, LoopFinished, LoopRequest, TraceEvent};
use serde::Deserialize;
use serde_json::{Value, json};
use std::convert::Infallible;
use std::sync::Arc;
use tokio::sync::mpsc::unbounded_channel;

impl From<LoopError> for ApiError {
    fn from(e: LoopError) -> Self {
        ApiError::new(e.code(), e.to_string())
    }
}

/// Whether a chat for `input.agent` runs a loop: `loop` named, or the agent has a `defaultLoop`.
pub fn runs_a_loop(state: &AppState, input: &ChatInput, named: Option<&str>) -> bool {
    named.is_some() || state.runtime.loaded().agent(&input.agent).is_some_and(|a| a.config.default_loop.is_some())
}

/// Run the loop a chat request selects and answer it (`stream` or one JSON body).
/// `idempotent`: the request carries an `Idempotency-Key`, which loop runs do not honour yet.
pub async fn chat(
    state: Arc<AppState>,
    input: ChatInput,
    named: Option<String>,
    stream: bool,
    idempotent: bool,
) -> Result<Response, ApiError> {
    if input.session_id.is_some() {
        return Err(LoopError::Unsupported(
            "`x-session-id` does not apply to a loop: each run starts its own sessions".into(),
        )
        .into());
    }
    if idempotent {
        return Err(LoopError::Unsupported(
            "`Idempotency-Key` is not honoured for loop runs yet; send the request without it".into(),
        )
        .into());
    }
    let mut request = LoopRequest::new(input.agent, named, input.messages);
    request.metadata = input.metadata;
    request.user = input.user;
    request.owner = input.owner;
    request.allowed_tools = input.allowed_tools;
    request.response_format = input.response_format;
    request.client_tools = input.client_tools;
    request.capabilities = input.capabilities;
    let (loop_id, config) = state.loops.select(&request)?;
    let run_id = state.loops.new_run_id();
    let completion = Completion {
        id: format!("chatcmpl-{}", state.runtime.ids().next_id()),
        created: state.runtime.clock().now().timestamp(),
    };
    // The run is a task of its own, stopped (and stored `cancelled`) when the client goes away.
    let stop = StopOnDrop(state.clone(), run_id.clone());
    let mut response = if stream {
        let (tx, rx) = unbounded_channel::<Event>();
        let (c, id) = (completion.clone(), run_id.clone());
        tokio::spawn(async move {
            let send_data = |data: String| {
                let _ = tx.send(Event::default().data(data));
            };
            let send = |v: Value| send_data(v.to_string());
            send(c.role_chunk());
            let sink = |e: &TraceEvent| send(c.loop_trace_chunk(&id, serde_json::to_value(e).unwrap_or_default()));
            let finished = state.loops.run(&request, &id, &loop_id, &config, &sink).await;
            match &finished.result {
                Ok(output) => {
                    if let Some(chunk) =
                        output.as_ref().and_then(|o| c.event_chunk(&RunEvent::TextDelta { text: content(o) }))
                    {
                        send(chunk);
                    }
                    send(c.final_chunk(&FinishReason::Stop, &[], &Usage::default()));
                }
                Err(e) => send(c.error_chunk(&e.to_string(), e.code())),
            }
            send_data("[DONE]".into());
        });
        let events = futures::stream::unfold((rx, stop), |(mut rx, stop)| async move {
            rx.recv().await.map(|e| (Ok::<_, Infallible>(e), (rx, stop)))
        });
        with_pings(events).into_response()
    } else {
        let id = run_id.clone();
        let running = tokio::spawn(async move { state.loops.run(&request, &id, &loop_id, &config, &|_| {}).await });
        let finished =
            running.await.map_err(|e| ApiError::new(ErrorCode::Internal, format!("the loop run task failed: {e}")))?;
        drop(stop);
        answer(&completion, finished)
    };
    if let Ok(v) = HeaderValue::from_str(&run_id) {
        response.headers_mut().insert("x-polpo-loop-run-id", v);
    }
    Ok(response)
}

/// Stops a loop run when dropped (a no-op once it ended).
struct StopOnDrop(Arc<AppState>, String);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.loops.stop(&self.1);
    }
}

/// The non-streaming answer of a finished run: the completion with `loop_run_id` and
/// `loop_trace`, or the error envelope with both.
fn answer(completion: &Completion, finished: LoopFinished) -> Response {
    let trace = serde_json::to_value(&finished.trace).unwrap_or_default();
    match finished.result {
        Ok(output) => {
            let text = output.as_ref().map(content);
            let mut body = completion.body(text.as_deref(), &FinishReason::Stop, &[], &Usage::default());
            body["loop_run_id"] = json!(finished.run_id);
            body["loop"] = json!(finished.loop_id);
            body["loop_trace"] = trace;
            axum::Json(body).into_response()
        }
        Err(e) => {
            let error = ApiError::from(e);
            let body = json!({"error": {"message": error.message, "type": "loop_error", "code": error.code}, "loop_run_id": finished.run_id, "loop_trace": trace});
            (error.status, axum::Json(body)).into_response()
        }
    }
}

/// A step output as answer text: a string as is, anything else as JSON.
fn content(output: &Value) -> String {
    match output {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// `POST /v1/loop-runs/{id}/human` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HumanBody {
    /// The person's answer, valid against the step's `output.schema`.
    output: Value,
}

/// `POST /v1/loop-runs/{id}/human`: answer the run's waiting human step; the run goes on.
pub async fn human(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<Response, RestError> {
    let body: HumanBody =
        serde_json::from_slice(&body).map_err(|e| ApiError::invalid(format!("human body must be {{output}}: {e}")))?;
    let owner = if caller.admin { None } else { Some(caller.owner.as_deref().unwrap_or_default()) };
    state.loops.humans().answer(&id, owner, body.output).map_err(ApiError::from)?;
    Ok(ok(json!({"loopRunId": id, "accepted": true})).into_response())
}
