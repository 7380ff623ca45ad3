//! Approval requests of loop gates (inventory §3.2 Approvals, §6.6): `GET /api/v1/approvals
//! ?status=`, `GET /api/v1/approvals/{id}`, `POST /api/v1/approvals/{id}/approve|reject`, and
//! the same decisions by run, `POST /api/v1/loop-runs/{id}/approve|reject`, plus
//! `POST /api/v1/loop-runs/{id}/resume`. The reviewer is the authenticated key (`local`
//! without keys); a rejection needs `feedback`.

use crate::auth::Caller;
use crate::error::{ApiError, RestError, ok};
use crate::routes::loop_runs::{listing, viewer};
use crate::state::AppState;
use axum::Json;
use axum::extract::{Extension, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use polpo_loops::{ApprovalStatus, Decision, LoopError};
use polpo_store::Cursor;
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;

/// Longest note or feedback, in bytes.
const MAX_NOTE_BYTES: usize = 16 * 1024;

/// Who decides: the caller's key id, `local` without keys.
fn reviewer(caller: &Caller) -> String {
    caller.owner.clone().unwrap_or_else(|| "local".into())
}

/// `approve`/`reject` body: an optional `note`; a rejection's `feedback` (required).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct DecisionBody {
    note: Option<String>,
    feedback: Option<String>,
}

fn decision(body: &[u8], approve: bool) -> Result<Decision, ApiError> {
    let body: DecisionBody = if body.is_empty() {
        DecisionBody::default()
    } else {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::invalid(format!("body must be {{note?, feedback?}}: {e}")))?
    };
    let too_long = |t: &Option<String>| t.as_ref().is_some_and(|t| t.len() > MAX_NOTE_BYTES);
    if too_long(&body.note) || too_long(&body.feedback) {
        return Err(ApiError::invalid(format!("note and feedback are at most {MAX_NOTE_BYTES} bytes")));
    }
    if approve {
        return Ok(Decision::Approve(body.note));
    }
    match body.feedback.or(body.note).filter(|f| !f.trim().is_empty()) {
        Some(feedback) => Ok(Decision::Reject(feedback)),
        None => Err(ApiError::invalid("a rejection needs `feedback` saying why")),
    }
}

/// `GET /api/v1/approvals?status=&limit=&cursor=`: `{approvals, nextCursor}`.
pub async fn list(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<Vec<(String, String)>>,
) -> Result<Json<Value>, RestError> {
    let parse = |v: &str| serde_json::from_value::<ApprovalStatus>(Value::String(v.to_owned())).ok();
    let (status, limit, after) = listing(query, "pending, approved, rejected", parse)?;
    let (approvals, next) =
        state.loops.approvals(viewer(&caller), status, after, limit).await.map_err(ApiError::from)?;
    Ok(ok(json!({"approvals": approvals, "nextCursor": next.as_ref().map(Cursor::as_str)})))
}

/// `GET /api/v1/approvals/{id}`.
pub async fn get(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Value>, RestError> {
    Ok(ok(state.loops.approval(&id, viewer(&caller)).await.map_err(ApiError::from)?))
}

async fn decide(
    state: &AppState,
    caller: &Caller,
    id: &str,
    body: &[u8],
    approve: bool,
) -> Result<Json<Value>, RestError> {
    let decision = decision(body, approve)?;
    let resolved =
        state.loops.resolve(id, viewer(caller), &reviewer(caller), decision).await.map_err(ApiError::from)?;
    Ok(ok(resolved))
}

/// `POST /api/v1/approvals/{id}/approve` `{note?}`.
pub async fn approve(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<Json<Value>, RestError> {
    decide(&state, &caller, &id, &body, true).await
}

/// `POST /api/v1/approvals/{id}/reject` `{feedback}`.
pub async fn reject(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<Json<Value>, RestError> {
    decide(&state, &caller, &id, &body, false).await
}

/// The approval request loop run `id` waits on.
async fn waiting_on(state: &AppState, caller: &Caller, id: &str) -> Result<String, ApiError> {
    let run = state.loops.stored_run(id, viewer(caller)).await?;
    run.record
        .approval_request_id
        .ok_or_else(|| LoopError::NotResumable(format!("loop run `{id}` waits on no approval")).into())
}

/// `POST /api/v1/loop-runs/{id}/approve` `{note?}`.
pub async fn approve_run(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<Json<Value>, RestError> {
    let approval = waiting_on(&state, &caller, &id).await?;
    decide(&state, &caller, &approval, &body, true).await
}

/// `POST /api/v1/loop-runs/{id}/reject` `{feedback}`: the run ends `approval_rejected`.
pub async fn reject_run(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<Json<Value>, RestError> {
    let approval = waiting_on(&state, &caller, &id).await?;
    decide(&state, &caller, &approval, &body, false).await
}

/// `POST /api/v1/loop-runs/{id}/resume`: an approved run goes on from its last checkpoint
/// (202; follow it with `GET /api/v1/loop-runs/{id}`).
pub async fn resume(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Response, RestError> {
    let run = state.loops.resume_approved(&id, viewer(&caller)).await.map_err(ApiError::from)?;
    Ok((StatusCode::ACCEPTED, ok(json!({"id": run.record.id, "status": "resuming"}))).into_response())
}
