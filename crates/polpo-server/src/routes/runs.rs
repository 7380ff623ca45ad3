//! Durable runs over HTTP: `GET /v1/runs/{id}`, the run's event journal as SSE
//! (`GET /v1/runs/{id}/events`, resumable from `Last-Event-ID` or `?after=N`), steering
//! (`POST /v1/runs/{id}/steer`), abort (`POST /v1/runs/{id}/abort`) and reconciliation of a
//! run paused on an unconfirmed effect (`POST /v1/runs/{id}/reconcile`). Mounted under `/v1`
//! and `/api/v1`, with the REST envelope `{ok, data}` for the JSON routes.
//!
//! A client that lost its connection reconnects to the events route with the last `id:` it
//! saw and gets every later event exactly once, then the live ones, until the terminal event
//! (`run.completed`, `run.failed`, `run.cancelled`). `run.paused` is not one: the stream stays
//! open (with `: ping` keep-alives) while the run waits for `POST /v1/runs/{id}/reconcile`, then
//! carries the resumed run to its end, so a follower never has to reconnect to see it finish.
//! A client that only wants to know the run paused stops reading at `run.paused`.
//!
//! A run belongs to whoever owns its session: with several API keys, another client key gets
//! `404 run_not_found` on every run route; admin keys reach every run.

use crate::auth::Caller;
use crate::error::{ApiError, ErrorCode, RestError, ok};
use crate::sse::with_pings;
use crate::state::AppState;
use axum::extract::{Extension, Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use polpo_core::message::{Content, ContentPart, Message};
use polpo_engine::events::journal::{FRAME_EVENT, Paused, stream_frame};
use polpo_engine::runs::{Queued, Reconcile, SteerMessage, SteerMode};
use polpo_store::{Run, RunStatus};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::convert::Infallible;
use std::sync::Arc;

/// Stored run `id` (`None` for an inline chat's run, which executes here without a record)
/// when `caller` may reach it: it owns the run's session, or is an admin. `404 run_not_found`
/// otherwise, the same as for a run that does not exist; an admin gets `None` for an unknown
/// id too and meets the route's own answer for it.
async fn owned(state: &AppState, caller: &Caller, id: &str) -> Result<Option<Run>, ApiError> {
    let not_found = || ApiError::new(ErrorCode::RunNotFound, format!("no run `{id}`"));
    let Some(run) = state.runs.get(id).await? else {
        // An inline chat's run is not stored; it is steerable while it executes here.
        return match state.runs.inline_owner(id) {
            _ if caller.admin => Ok(None),
            Some(owner) if caller.may_see(owner.as_deref()) => Ok(None),
            _ => Err(not_found()),
        };
    };
    if caller.admin {
        return Ok(Some(run));
    }
    let session = match &run.session_id {
        Some(session) => state.runtime.store().sessions.get_session(session).await?,
        None => None,
    };
    match session {
        Some(session) if caller.may_see(session.owner.as_deref()) => Ok(Some(run)),
        _ => Err(not_found()),
    }
}

/// `GET /v1/runs/{id}`: the run (status, agent, session, last sequence number) and, while it
/// is paused, why (`pause`: the latest `run.paused` — for an unconfirmed effect, the call
/// itself: tool, arguments with secrets redacted, effect key, when it started).
pub async fn get_run(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Response, RestError> {
    let run = owned(&state, &caller, &id)
        .await?
        .ok_or_else(|| ApiError::new(ErrorCode::RunNotFound, format!("no run `{id}`")))?;
    let pause = match run.status {
        RunStatus::Paused => state.runs.latest_pause(&id, run.last_seq).await?,
        _ => None,
    };
    Ok(ok(RunView { run, pause }).into_response())
}

/// A stored run as `GET /v1/runs/{id}` shows it.
#[derive(Debug, Serialize)]
struct RunView {
    #[serde(flatten)]
    run: Run,
    /// Why a paused run waits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pause: Option<Paused>,
}

/// Where to resume the journal.
#[derive(Debug, Deserialize)]
pub struct EventsQuery {
    /// Events with a sequence number above this one.
    after: Option<u64>,
}

/// `GET /v1/runs/{id}/events`: the journal after `Last-Event-ID` (or `?after=N`, else from
/// the start), then live, ending after the run's terminal event (through a pause and its
/// reconciliation; early when this server stops and hands the run over). Frames are
/// `event: run.event`, `id: <sequence>`, `data: RunStreamEvent`.
pub async fn events(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    Query(query): Query<EventsQuery>,
    headers: HeaderMap,
) -> Result<Response, RestError> {
    let last_event_id =
        headers.get("last-event-id").and_then(|v| v.to_str().ok()).map(str::trim).filter(|s| !s.is_empty());
    let after = match last_event_id {
        Some(v) => {
            v.parse::<u64>().map_err(|_| ApiError::invalid("Last-Event-ID must be a run event sequence number"))?
        }
        None => query.after.unwrap_or(0),
    };
    if owned(&state, &caller, &id).await?.is_none() {
        return Err(ApiError::new(ErrorCode::RunNotFound, format!("no run `{id}`")).into());
    }
    let frames = state.runs.events(&id, after).map(|e| {
        Ok::<_, Infallible>(match e {
            Ok(e) => Event::default().event(FRAME_EVENT).id(e.seq.to_string()).data(stream_frame(&e).to_string()),
            Err(e) => {
                Event::default().event("error").data(json!({"code": e.code(), "message": e.to_string()}).to_string())
            }
        })
    });
    Ok(with_pings(frames).into_response())
}

/// `POST /v1/runs/{id}/steer` body.
#[derive(Debug, Deserialize)]
pub struct SteerBody {
    /// Idempotency key: a repeated id is ignored.
    id: String,
    /// `steer` (before the next model call) or `follow_up` (after the run would finish).
    mode: SteerMode,
    /// A string, `{text, attachments?}` or OpenAI content parts.
    content: Value,
}

/// `POST /v1/runs/{id}/steer`: add information to a running run, or queue a follow-up.
pub async fn steer(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<Response, RestError> {
    owned(&state, &caller, &id).await?;
    let body: SteerBody = serde_json::from_slice(&body)
        .map_err(|e| ApiError::invalid(format!("steer body must be {{id, mode: steer|follow_up, content}}: {e}")))?;
    let message = steer_message(&body.content)?;
    let queued = state.runs.steer(&id, SteerMessage { id: body.id.clone(), mode: body.mode, message }).await?;
    let duplicate = queued == Queued::Duplicate;
    Ok(ok(json!({"runId": id, "id": body.id, "mode": body.mode, "accepted": !duplicate, "duplicate": duplicate}))
        .into_response())
}

/// `POST /v1/runs/{id}/abort` body (optional).
#[derive(Debug, Default, Deserialize)]
pub struct AbortBody {
    /// Why, for the journal.
    #[serde(default)]
    reason: Option<String>,
}

/// `POST /v1/runs/{id}/abort`: cancel the run's model call and tools.
pub async fn abort(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<Response, RestError> {
    owned(&state, &caller, &id).await?;
    let body: AbortBody = if body.is_empty() {
        AbortBody::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| ApiError::invalid(format!("abort body must be {{reason?}}: {e}")))?
    };
    state.runs.abort(&id, body.reason).await?;
    Ok(ok(json!({"runId": id, "status": "cancelling"})).into_response())
}

/// `POST /v1/runs/{id}/reconcile` body, and a loop run's (`POST /v1/loop-runs/{id}/reconcile`,
/// which has no `skip`: a tool step has no model to tell).
#[derive(Debug, Deserialize)]
pub struct ReconcileBody {
    /// The effect key: a run's `run.paused` event's `data.detail.key`, a loop run's
    /// `loop.error` event's `data.effect.key`.
    pub(crate) key: String,
    /// `applied`, `not_applied` (run it now) or `skip` (do not run it).
    pub(crate) outcome: String,
    /// For `applied`: the tool result the model sees (a loop run: the output the step saves).
    #[serde(default)]
    pub(crate) result: Option<String>,
}

/// `POST /v1/runs/{id}/reconcile`: decide an effect a crash left unconfirmed and resume the
/// paused run: `applied` (it happened; `result` is what the model sees), `not_applied` (it did
/// not: the resumed run executes the call once, under the same effect key, through every
/// gate) or `skip` (do not run it: the model is told it was not run).
pub async fn reconcile(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<Response, RestError> {
    owned(&state, &caller, &id).await?;
    let body: ReconcileBody = serde_json::from_slice(&body).map_err(|e| {
        ApiError::invalid(format!("reconcile body must be {{key, outcome: applied|not_applied|skip, result?}}: {e}"))
    })?;
    let decision = match body.outcome.as_str() {
        "applied" => Reconcile::Applied { result: body.result },
        "not_applied" => Reconcile::NotApplied,
        "skip" => Reconcile::Skip,
        other => {
            return Err(ApiError::invalid(format!("outcome `{other}` is not applied, not_applied or skip")).into());
        }
    };
    state.runs.reconcile(&id, &body.key, decision).await?;
    Ok(ok(json!({"runId": id, "key": body.key, "status": "running"})).into_response())
}

/// Steering content as a user message: a string, `{text, attachments?}` (attachments are
/// content parts: images, audio, files) or a content-parts array.
fn steer_message(content: &Value) -> Result<Message, ApiError> {
    let invalid = |e: serde_json::Error| ApiError::invalid(format!("steering content: {e}"));
    match content {
        Value::String(text) if !text.is_empty() => Ok(Message::user(text.clone())),
        Value::Array(_) => {
            let parts: Vec<ContentPart> = serde_json::from_value(content.clone()).map_err(invalid)?;
            Ok(Message { content: Some(Content::Parts(parts)), ..Message::user("") })
        }
        Value::Object(o) => {
            let text = o.get("text").and_then(Value::as_str).unwrap_or_default().to_owned();
            let attachments: Vec<ContentPart> = match o.get("attachments") {
                Some(a) => serde_json::from_value(a.clone()).map_err(invalid)?,
                None => Vec::new(),
            };
            if attachments.is_empty() {
                if text.is_empty() {
                    return Err(ApiError::invalid("steering content needs text or attachments"));
                }
                return Ok(Message::user(text));
            }
            let parts = (!text.is_empty()).then(|| ContentPart::Text { text }).into_iter().chain(attachments).collect();
            Ok(Message { content: Some(Content::Parts(parts)), ..Message::user("") })
        }
        _ => Err(ApiError::invalid("steering content must be a string, {text, attachments?} or content parts")),
    }
}
