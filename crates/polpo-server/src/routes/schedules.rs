//! `/api/v1/schedules`: the project's schedules with their next occurrences, pause and resume
//! (written to `.polpo/schedules/<id>.json` through the project edit, compared with
//! `expectedRevision` → `409 conflict`), manual triggers once per `idempotencyKey`, and each
//! schedule's runs by cursor. Creating, replacing and deleting a schedule over the API is not
//! built yet: those answer `400 feature_unavailable`; edit the files.

use crate::error::{ApiError, ErrorCode, RestError, ok};
use crate::routes::agents::{AgentError, edit};
use crate::state::AppState;
use axum::Json;
use axum::extract::{Path, Query, State};
use polpo_core::schedules::{Schedule, ScheduleStatus};
use polpo_project::paths::{SCHEDULES_DIR, polpo_dir};
use polpo_store::{Cursor, PageRequest};
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;

/// A page of runs when `limit` is absent, and the largest one.
const DEFAULT_PAGE: u32 = 50;
const MAX_PAGE: u32 = 1000;
/// Occurrences previewed per schedule in a listing.
const PREVIEW: usize = 3;

fn view(schedule: &Schedule, now: chrono::DateTime<chrono::Utc>) -> Value {
    let config = &schedule.config;
    let next: Vec<String> = schedule
        .timing
        .preview(now, PREVIEW)
        .iter()
        .map(|t| t.with_timezone(&schedule.timing.zone()).to_rfc3339())
        .collect();
    json!({
        "id": schedule.id,
        "name": config.name,
        "description": config.description,
        "status": if config.is_active() { "active" } else { "paused" },
        "revision": config.revision(),
        "timing": config.timing,
        "invocation": config.invocation,
        "policy": config.policy,
        "legacy": schedule.legacy,
        "nextOccurrenceAt": if config.is_active() { next.first().cloned() } else { None },
        "nextOccurrences": next,
    })
}

fn find(state: &AppState, id: &str) -> Result<Schedule, ApiError> {
    state
        .runtime
        .loaded()
        .project
        .schedules
        .get(id)
        .cloned()
        .ok_or_else(|| ApiError::new(ErrorCode::ScheduleNotFound, format!("schedule `{id}` not found")))
}

/// `GET /api/v1/schedules`: every schedule with its next occurrences (in its time zone).
pub async fn list(State(state): State<Arc<AppState>>) -> Json<Value> {
    let now = state.runtime.clock().now();
    let loaded = state.runtime.loaded();
    ok(loaded.project.schedules.values().map(|s| view(s, now)).collect::<Vec<_>>())
}

/// `GET /api/v1/schedules/{id}`.
pub async fn get(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Result<Json<Value>, RestError> {
    Ok(ok(view(&find(&state, &id)?, state.runtime.clock().now())))
}

/// `POST`, `PATCH`, `DELETE`: not built yet (`400 feature_unavailable`), never ignored.
pub async fn unavailable() -> RestError {
    ApiError::new(
        ErrorCode::FeatureUnavailable,
        "creating, changing and deleting schedules over the API is not built yet; edit .polpo/schedules/<id>.json",
    )
    .into()
}

/// Body of pause and resume.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RevisionBody {
    /// The revision the caller read; a different one on disk is `409 conflict`.
    expected_revision: Option<u64>,
}

/// `POST /api/v1/schedules/{id}/pause`.
pub async fn pause(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    body: Option<Json<RevisionBody>>,
) -> Result<Json<Value>, AgentError> {
    set_status(state, id, ScheduleStatus::Paused, body.map(|b| b.0).unwrap_or_default()).await
}

/// `POST /api/v1/schedules/{id}/resume`.
pub async fn resume(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    body: Option<Json<RevisionBody>>,
) -> Result<Json<Value>, AgentError> {
    set_status(state, id, ScheduleStatus::Active, body.map(|b| b.0).unwrap_or_default()).await
}

/// Write the schedule's file with `status` and the next revision, in one project edit (a
/// legacy file is written in the v2 shape it was read as).
async fn set_status(
    state: Arc<AppState>,
    id: String,
    status: ScheduleStatus,
    body: RevisionBody,
) -> Result<Json<Value>, AgentError> {
    let now = state.runtime.clock().now();
    let schedule = edit(&state, move |edit, served| {
        let schedule = served
            .schedules
            .get(&id)
            .ok_or_else(|| ApiError::new(ErrorCode::ScheduleNotFound, format!("schedule `{id}` not found")))?;
        let current = schedule.config.revision();
        if let Some(expected) = body.expected_revision
            && expected != current
        {
            let message = format!("schedule `{id}` is at revision {current}, not {expected}");
            return Err(ApiError::new(ErrorCode::Conflict, message).into());
        }
        let mut config = schedule.config.clone();
        config.status = Some(status);
        config.revision = Some(current + 1);
        let mut bytes =
            serde_json::to_vec_pretty(&config).map_err(|e| ApiError::new(ErrorCode::Internal, e.to_string()))?;
        bytes.push(b'\n');
        let path = polpo_dir(edit.root()).join(SCHEDULES_DIR).join(format!("{id}.json"));
        edit.write(&path, &bytes)?;
        Ok(Schedule { config, legacy: false, ..schedule.clone() })
    })
    .await?;
    Ok(ok(view(&schedule, now)))
}

/// Body of a trigger.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TriggerBody {
    /// The same key never fires twice; absent, each trigger fires.
    idempotency_key: Option<String>,
}

/// `POST /api/v1/schedules/{id}/trigger {idempotencyKey?}` → the schedule-run record.
pub async fn trigger(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    body: Option<Json<TriggerBody>>,
) -> Result<Json<Value>, RestError> {
    let key = body.and_then(|b| b.0.idempotency_key).unwrap_or_else(|| state.runtime.ids().next_id());
    let run = state.scheduler.trigger(&id, &key).await.map_err(ApiError::from)?;
    Ok(ok(run))
}

/// Query of the runs listing.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunsQuery {
    /// Page size, 1..=1000.
    limit: Option<u32>,
    /// `nextCursor` of the previous page.
    cursor: Option<String>,
}

/// `GET /api/v1/schedules/{id}/runs?limit=&cursor=` → `{runs, nextCursor}`, newest first.
pub async fn runs(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    Query(query): Query<RunsQuery>,
) -> Result<Json<Value>, RestError> {
    find(&state, &id)?;
    let limit = query.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::invalid(format!("limit must be 1..={MAX_PAGE}")).into());
    }
    let page = PageRequest { after: query.cursor.filter(|c| !c.is_empty()).map(Cursor::from_wire), limit };
    let runs = state.scheduler.runs(&id, &page).await.map_err(ApiError::from)?;
    Ok(ok(json!({"runs": runs.items, "nextCursor": runs.next.as_ref().map(Cursor::as_str)})))
}
