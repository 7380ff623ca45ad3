//! Stored Project Loop runs (inventory §3.2, §6.6): `GET /api/v1/loop-runs` (newest first, a
//! cursor page, `?status=`), `GET /api/v1/loop-runs/{id}` (status, checkpoint, trace) and
//! `POST /api/v1/loop-runs/{id}/cancel`, `POST /api/v1/loop-runs/{id}/reconcile` (settle an
//! effect a crash left unconfirmed, then the run resumes). A client key sees its own runs; an
//! admin key all.

use super::runs::ReconcileBody;
use crate::auth::Caller;
use crate::error::{ApiError, RestError, ok};
use crate::state::AppState;
use axum::Json;
use axum::extract::{Extension, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use polpo_loops::{EffectDecision, LoopRunStatus};
use polpo_store::Cursor;
use serde_json::{Value, json};
use std::sync::Arc;

/// Runs per page unless `limit` says.
const DEFAULT_PAGE: u32 = 50;
/// Largest `limit`.
const MAX_PAGE: u32 = 200;

/// The client a caller's view is narrowed to (`None`: sees every run).
pub(crate) fn viewer(caller: &Caller) -> Option<&str> {
    if caller.admin { None } else { Some(caller.owner.as_deref().unwrap_or_default()) }
}

/// A listing's `status` (one of `statuses`, read by `parse`), `limit` and `cursor`.
pub(crate) fn listing<S>(
    query: Vec<(String, String)>,
    statuses: &str,
    parse: impl Fn(&str) -> Option<S>,
) -> Result<(Option<S>, u32, Option<Cursor>), ApiError> {
    let (mut status, mut limit, mut after) = (None, DEFAULT_PAGE, None);
    for (k, v) in query {
        match k.as_str() {
            "status" => {
                status = Some(parse(&v).ok_or_else(|| ApiError::invalid(format!("unknown status `{v}` ({statuses})")))?)
            }
            "limit" => {
                limit = v
                    .parse::<u32>()
                    .ok()
                    .filter(|n| (1..=MAX_PAGE).contains(n))
                    .ok_or_else(|| ApiError::invalid(format!("limit must be 1..={MAX_PAGE}")))?
            }
            "cursor" => after = Some(Cursor::from_wire(v)).filter(|c| !c.as_str().is_empty()),
            _ => return Err(ApiError::invalid(format!("unknown query parameter `{k}` (status, limit, cursor)"))),
        }
    }
    Ok((status, limit, after))
}

/// `GET /api/v1/loop-runs?status=&limit=&cursor=`: `{loopRuns, nextCursor}`, each run without
/// its context and trace (read one run for those).
pub async fn list(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<Vec<(String, String)>>,
) -> Result<Json<Value>, RestError> {
    let statuses = "running, awaiting_human, awaiting_approval, approval_approved, approval_rejected, completed, failed, cancelled";
    let (status, limit, after) = listing(query, statuses, LoopRunStatus::parse)?;
    let page = state.loops.stored_runs(viewer(&caller), status, after, limit).await.map_err(ApiError::from)?;
    let runs: Vec<Value> = page
        .runs
        .iter()
        .map(|run| {
            let r = &run.record;
            json!({"id": r.id, "loop": r.loop_id, "agent": r.agent, "status": r.status, "user": r.user,
                "frontier": r.state.frontier, "error": r.error, "revision": run.revision,
                "createdAt": run.created_at, "updatedAt": run.updated_at})
        })
        .collect();
    Ok(ok(json!({"loopRuns": runs, "nextCursor": page.next.as_ref().map(Cursor::as_str)})))
}

/// `GET /api/v1/loop-runs/{id}`: the stored run whole.
pub async fn get(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Value>, RestError> {
    let run = state.loops.stored_run(&id, viewer(&caller)).await.map_err(ApiError::from)?;
    Ok(ok(run))
}

/// `POST /api/v1/loop-runs/{id}/cancel`: the run stops (wherever it runs) and is stored
/// `cancelled`; 409 `loop_run_finished` when it already ended.
pub async fn cancel(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Value>, RestError> {
    let run = state.loops.cancel(&id, viewer(&caller)).await.map_err(ApiError::from)?;
    Ok(ok(run))
}

/// `POST /api/v1/loop-runs/{id}/reconcile` `{key, outcome: applied|not_applied, result?}`: a
/// run stopped `effect_unconfirmed` is settled — the effect happened (`result` is the step's
/// output) or did not (the step runs it now, once) — and resumes here from its last checkpoint
/// (202; follow it with `GET /api/v1/loop-runs/{id}`). 409 `loop_run_not_resumable` for a run
/// or key not waiting for that.
pub async fn reconcile(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<Response, RestError> {
    let shape = "reconcile body must be {key, outcome: applied|not_applied, result?}";
    let body: ReconcileBody = serde_json::from_slice(&body).map_err(|e| ApiError::invalid(format!("{shape}: {e}")))?;
    let decision = match body.outcome.as_str() {
        "applied" => EffectDecision::Applied { result: body.result },
        "not_applied" => EffectDecision::NotApplied,
        other => return Err(ApiError::invalid(format!("outcome `{other}` is not applied or not_applied")).into()),
    };
    let run = state.loops.reconcile(&id, viewer(&caller), &body.key, decision).await.map_err(ApiError::from)?;
    let status = json!({"id": run.record.id, "key": body.key, "status": "resuming"});
    Ok((StatusCode::ACCEPTED, ok(status)).into_response())
}
