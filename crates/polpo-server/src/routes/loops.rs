//! Project Loops over HTTP: a chat request that runs a loop (`loop`, or the agent's
//! `defaultLoop`), and `POST /v1/loop-runs/{id}/human`, which answers a suspended human step.
//!
//! A loop chat answers like a chat completion whose content is the loop's last agent or human
//! output, plus `loop_run_id` and the whole `loop_trace[]`; streamed, every trace event is a
//! chunk with `loop_trace: [event]` as it happens, then the content, the final chunk and
//! `[DONE]`. A failure after the loop started is an error envelope (or error chunk) that still
//! carries the run id and the trace so far. The run is stored as it goes (`GET
//! /api/v1/loop-runs/{id}`); a client that goes away cancels it. A human step is stored as
//! `awaiting_human`, holding no lease: the request stays open until someone answers here; an
//! answer given on another server (or after a restart) is stored with the run and resumes it
//! there, and this request then ends with `lease_lost` (the run went on elsewhere).
//!
//! `/api/v1/loops` lists, reads, creates, replaces and deletes the `.polpo/loops/<id>.json`
//! definitions, each change one project edit like an agent's ([`super::agents`]): checked
//! against the loop schema, written, the whole project reloaded and served, or every file put
//! back. Reads return a `revision` (a hash of the file) that a change presents back as
//! `expectedRevision`. `.ts` loops are listed and read but only their source changes them.

use crate::auth::Caller;
use crate::chunks::Completion;
use crate::error::{ApiError, ErrorCode, RestError, ok};
use crate::routes::agents::{AgentError, blocking, edit, object};
use crate::sse::with_pings;
use crate::state::AppState;
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use polpo_core::config::Location;
use polpo_core::loops::router::ExecutionRoute;
use polpo_core::loops::{LoopConfig, parse_loop};
use polpo_core::message::{FinishReason, Usage};
use polpo_engine::runs::RUN_HANDED_OVER;
use polpo_engine::{ChatInput, RunEvent};
use polpo_loops::{LoopError, LoopFinished, LoopRequest, TraceEvent};
use polpo_project::loops::{LoopSource, delete_loop, read_loop_file, write_loop};
use polpo_project::paths::{LOOPS_DIR, display};
use polpo_project::{ProjectError, Revision};
use polpo_store::StoreError;
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

/// The loop a chat for `input.agent` runs, if any: the one named, the agent's `defaultLoop`, or
/// the one its execution router picks (`Ok(None)`: the agent answers directly). The router's
/// decision, either way, comes back with it so a loop run keeps it.
pub async fn selected_loop(
    state: &AppState,
    input: &ChatInput,
    named: Option<String>,
) -> Option<(Option<String>, Option<ExecutionRoute>)> {
    let has_default = state.runtime.loaded().agent(&input.agent).is_some_and(|a| a.config.default_loop.is_some());
    if named.is_some() || has_default {
        return Some((named, None));
    }
    // Dropping the request's future (client gone) drops the classifier call with it.
    let route = state.runtime.route_execution(input, None).await;
    route.and_then(|route| route.loop_id.clone().map(|id| (Some(id), Some(route))))
}

/// Run the loop a chat request selects and answer it (`stream` or one JSON body).
/// `idempotent`: the request carries an `Idempotency-Key`, which loop runs do not honour yet.
/// `route`: how the execution router chose the loop, kept with the run and in the answer.
pub async fn chat(
    state: Arc<AppState>,
    input: ChatInput,
    named: Option<String>,
    route: Option<ExecutionRoute>,
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
    request.route = route;
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
                // Taken over by another server: this answer is unfinished, not failed.
                // No `[DONE]` either, so no client takes the text so far for the whole answer.
                Err(e) if handed_over(e) => {
                    send(c.unfinished_chunk(&elsewhere(&id), RUN_HANDED_OVER, &id));
                    return;
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
        let route = request.route.clone();
        let running = tokio::spawn(async move { state.loops.run(&request, &id, &loop_id, &config, &|_| {}).await });
        let finished =
            running.await.map_err(|e| ApiError::new(ErrorCode::Internal, format!("the loop run task failed: {e}")))?;
        drop(stop);
        answer(&completion, finished, route.as_ref())
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

/// The non-streaming answer of a finished run: the completion with `loop_run_id`,
/// `loop_trace` and, when the router chose the loop, `execution_route`; or the error envelope
/// with the run id and trace.
fn answer(completion: &Completion, finished: LoopFinished, route: Option<&ExecutionRoute>) -> Response {
    let trace = serde_json::to_value(&finished.trace).unwrap_or_default();
    match finished.result {
        Ok(output) => {
            let text = output.as_ref().map(content);
            let mut body = completion.body(text.as_deref(), &FinishReason::Stop, &[], &Usage::default());
            body["loop_run_id"] = json!(finished.run_id);
            body["loop"] = json!(finished.loop_id);
            body["loop_trace"] = trace;
            if let Some(route) = route {
                body["execution_route"] = serde_json::to_value(route).unwrap_or_default();
            }
            axum::Json(body).into_response()
        }
        Err(e) => {
            let moved = handed_over(&e);
            let error = match moved {
                true => ApiError::new(ErrorCode::RunHandedOver, elsewhere(&finished.run_id)),
                false => ApiError::from(e),
            };
            let body = json!({"error": {"message": error.message, "type": "loop_error", "code": error.code}, "loop_run_id": finished.run_id, "loop_trace": trace});
            let mut response = (error.status, axum::Json(body)).into_response();
            if moved {
                // A retry would start a second run while this one goes on (OpenAI SDKs retry
                // 5xx unless told not to).
                response.headers_mut().insert("x-should-retry", HeaderValue::from_static("false"));
            }
            response
        }
    }
}

/// Whether a run ended here because another server took it over (the person answered there,
/// or this one was paused past its lease): it goes on there, so the chat is handed over, not
/// failed — as the engine's runs handed over (`run_handed_over`), with the run to follow.
fn handed_over(e: &LoopError) -> bool {
    matches!(e, LoopError::Store(StoreError::LeaseLost { .. }))
}

/// What a chat whose run `id` went on on another server says.
fn elsewhere(id: &str) -> String {
    format!("loop run `{id}` goes on on another server; follow it with GET /api/v1/loop-runs/{id}")
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

/// `POST /v1/loop-runs/{id}/human`: answer the run's waiting human step, on whichever server
/// the request reaches: the answer is checked against the step's `output.schema`, stored with
/// the run, and the run goes on exactly once (where it waited, or here; see
/// `polpo_loops::LoopExecutor::answer_human`).
pub async fn human(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<Response, RestError> {
    let body: HumanBody =
        serde_json::from_slice(&body).map_err(|e| ApiError::invalid(format!("human body must be {{output}}: {e}")))?;
    let owner = if caller.admin { None } else { Some(caller.owner.as_deref().unwrap_or_default()) };
    state.loops.answer_human(&id, owner, body.output).await.map_err(ApiError::from)?;
    Ok(ok(json!({"loopRunId": id, "accepted": true})).into_response())
}

/// `GET /api/v1/loops`: every loop the runtime serves, `[{id, name, label, description, source,
/// revision}]` (`source` `json` or `ts`; a `ts` loop is read-only here).
pub async fn list(State(state): State<Arc<AppState>>) -> Result<Json<Value>, AgentError> {
    let project = state.runtime.loaded().project.clone();
    let loops = blocking(move || {
        let mut rows = Vec::new();
        for l in project.loops.values() {
            let Some(file) = read_loop_file(&project.root, &l.id)? else { continue };
            rows.push(json!({"id": l.id, "name": l.config.name, "label": l.config.label,
                "description": l.config.description, "source": file.source.as_str(), "revision": file.revision.as_str()}));
        }
        Ok(rows)
    })
    .await?;
    Ok(ok(loops))
}

/// `GET /api/v1/loops/{id}`: `{id, config, source, revision, file}`, the config as served.
pub async fn get(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Result<Json<Value>, AgentError> {
    let project = state.runtime.loaded().project.clone();
    let found = project.loops.get(&id).cloned().ok_or_else(|| ProjectError::LoopNotFound(id.clone()))?;
    let file = blocking(move || Ok(read_loop_file(&project.root, &id)?)).await?;
    let file = file.ok_or_else(|| ProjectError::LoopNotFound(found.id.clone()))?;
    Ok(ok(view(&found.id, &found.config, file.source, &file.revision)))
}

/// `POST /api/v1/loops` with the canonical loop config (its `name` is the id) → `201`;
/// `409 already_exists` when the id is taken.
pub async fn create(State(state): State<Arc<AppState>>, body: Bytes) -> Result<Response, AgentError> {
    let body = object(&body)?;
    let id = body.get("name").and_then(Value::as_str).map(str::to_owned);
    let id = id.ok_or_else(|| ApiError::invalid("the loop config needs its `name` (the loop's id)"))?;
    let (config, revision) = save(&state, id.clone(), Value::Object(body), None).await?;
    Ok((StatusCode::CREATED, ok(view(&id, &config, LoopSource::Json, &revision))).into_response())
}

/// `PUT /api/v1/loops/{id}` with the whole new config (or `{config}`) and `expectedRevision`
/// from a read: `409 conflict` when the file changed since; without it, the file as it is now
/// is replaced.
pub async fn replace(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, AgentError> {
    let mut body = object(&body)?;
    let expected = match body.remove("expectedRevision") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(Revision::new(s)),
        Some(_) => return Err(ApiError::invalid("`expectedRevision` must be the string a read returned").into()),
    };
    let config = match body.remove("config") {
        Some(config) => config,
        None => Value::Object(body),
    };
    if let Some(other) = config.get("name").and_then(Value::as_str).filter(|other| *other != id) {
        return Err(ApiError::invalid(format!(
            "the config names loop `{other}` but the path names `{id}`; loops are renamed by creating a new one"
        ))
        .into());
    }
    let (config, revision) = save(&state, id.clone(), config, Some(expected)).await?;
    Ok(ok(view(&id, &config, LoopSource::Json, &revision)))
}

/// `DELETE /api/v1/loops/{id}` (optionally `?expectedRevision=`) → `{removed: true, id}`;
/// `409 loop_in_use` while an agent names it in `assignedLoops` or `defaultLoop`.
pub async fn delete(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    Query(query): Query<DeleteQuery>,
) -> Result<Json<Value>, AgentError> {
    let removed = id.clone();
    edit(&state, move |edit, served| {
        if let Some(agent) = served.agents.values().find(|a| {
            a.config.assigned_loops.iter().flatten().any(|l| *l == id) || a.config.default_loop.as_deref() == Some(&id)
        }) {
            return Err(ApiError::new(
                ErrorCode::LoopInUse,
                format!(
                    "agent `{}` uses loop `{id}`; remove it from the agent's assignedLoops/defaultLoop first",
                    agent.id
                ),
            )
            .into());
        }
        let expected = match query.expected_revision {
            Some(r) => Revision::new(r),
            None => current_revision(edit.root(), &id)?,
        };
        Ok(delete_loop(edit, &id, &expected)?)
    })
    .await?;
    Ok(ok(json!({"removed": true, "id": removed})))
}

/// The query of `DELETE /loops/{id}`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeleteQuery {
    expected_revision: Option<String>,
}

/// Check the config (`400 invalid_config` with pointers, nothing written), then write it as
/// one project edit. `expected`: `None` creates; `Some(None)` replaces the file as it is now.
async fn save(
    state: &AppState,
    id: String,
    value: Value,
    expected: Option<Option<Revision>>,
) -> Result<(LoopConfig, Revision), AgentError> {
    let at = Location::file(display(&[LOOPS_DIR, &format!("{id}.json")]));
    let config = parse_loop(&value, &at)
        .map_err(|problems| AgentError::Problems { code: ErrorCode::InvalidConfig, problems })?;
    edit(state, move |edit, _| {
        let expected = match expected {
            None => None,
            Some(Some(r)) => Some(r),
            Some(None) => Some(current_revision(edit.root(), &id)?),
        };
        let revision = write_loop(edit, &id, &config, expected.as_ref())?;
        Ok((config, revision))
    })
    .await
}

/// The revision of loop `id` as it is on disk now (`404 loop_not_found` without one).
fn current_revision(root: &std::path::Path, id: &str) -> Result<Revision, ProjectError> {
    Ok(read_loop_file(root, id)?.ok_or_else(|| ProjectError::LoopNotFound(id.to_owned()))?.revision)
}

fn view(id: &str, config: &LoopConfig, source: LoopSource, revision: &Revision) -> Value {
    let file = display(&[LOOPS_DIR, &format!("{id}.{}", source.as_str())]);
    json!({"id": id, "config": config, "source": source.as_str(), "revision": revision.as_str(), "file": file})
}
