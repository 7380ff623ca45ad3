//! `/api/v1/schedules`: the project's schedules with their next occurrences; create, patch
//! (a JSON merge patch onto the v2 definition), delete, pause and resume, each written to
//! `.polpo/schedules/<id>.json` through the project edit (the whole project checked, nothing
//! written on a problem) and compared with `expectedRevision` (or `If-Match`) → `409
//! conflict`; manual triggers once per `idempotencyKey`, and each schedule's runs by cursor.
//! The schedules of missions waiting `scheduled` or `recurring` (`mission-<id>`, made from
//! the mission's `schedule`) are listed and read here too, with their runs; they change with
//! their mission, not through these routes.

use crate::error::{ApiError, ErrorCode, RestError, ok};
use crate::routes::agents::{AgentError, edit, merge_patch, object};
use crate::state::AppState;
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use polpo_core::schedules::codes::LEGACY_SCHEDULE;
use polpo_core::schedules::config::is_legacy;
use polpo_core::schedules::{Schedule, ScheduleConfig, ScheduleStatus, parse_schedule};
use polpo_project::schedules::{read_schedule, remove_schedule, schedule_location, write_schedule};
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
    state.runtime.loaded().project.schedules.get(id).cloned().ok_or_else(|| not_found(id))
}

fn not_found(id: &str) -> ApiError {
    ApiError::new(ErrorCode::ScheduleNotFound, format!("schedule `{id}` not found"))
}

/// The schedule `id`: a project file's, else a mission's (`mission-<id>`): only while it
/// waits `scheduled` or `recurring` when `waiting`, else also once it has run (for its runs).
async fn find_any(state: &AppState, id: &str, waiting: bool) -> Result<Schedule, ApiError> {
    state.scheduler.schedule(id, waiting).await.map_err(ApiError::from)?.ok_or_else(|| not_found(id))
}

/// `GET /api/v1/schedules`: every schedule with its next occurrences (in its time zone), the
/// project's files' then the waiting missions'.
pub async fn list(State(state): State<Arc<AppState>>) -> Result<Json<Value>, RestError> {
    let now = state.runtime.clock().now();
    let loaded = state.runtime.loaded();
    let missions = state.scheduler.mission_schedules().await.map_err(ApiError::from)?;
    let files = loaded.project.schedules.values();
    Ok(ok(files.chain(missions.iter().map(|(s, _)| s)).map(|s| view(s, now)).collect::<Vec<_>>()))
}

/// `GET /api/v1/schedules/{id}`.
pub async fn get(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Result<Json<Value>, RestError> {
    Ok(ok(view(&find_any(&state, &id, true).await?, state.runtime.clock().now())))
}

/// `POST /api/v1/schedules {id, ...v2 definition}` → `201` with the schedule at revision 1;
/// `409 already_exists` when the id is taken; a legacy mission-shaped body is accepted and
/// written as its v2 translation, with a `legacy_schedule` warning.
pub async fn create(State(state): State<Arc<AppState>>, body: Bytes) -> Result<Response, AgentError> {
    let mut body = object(&body)?;
    let id = match body.get("id") {
        Some(Value::String(id)) => id.clone(),
        _ => return Err(ApiError::invalid("a new schedule needs its `id` (the file name)").into()),
    };
    if body.remove("revision").is_some() {
        return Err(ApiError::invalid("`revision` is set by the server").into());
    }
    let document = Value::Object(body);
    let legacy = is_legacy(&document);
    let (mut config, ..) = parse_schedule(&document, &schedule_location(&id))
        .map_err(|problems| AgentError::Problems { code: ErrorCode::InvalidConfig, problems })?;
    config.revision = Some(1);
    let created = id.clone();
    edit(&state, move |edit, served| {
        if read_schedule(edit.root(), &id)?.is_some() || served.schedules.contains_key(&id) {
            return Err(ApiError::new(ErrorCode::AlreadyExists, format!("schedule `{id}` already exists")).into());
        }
        Ok(write_schedule(edit, &id, &config)?)
    })
    .await?;
    let mut view = view(&find(&state, &created)?, state.runtime.clock().now());
    if legacy {
        view["warnings"] = json!([{"code": LEGACY_SCHEDULE,
            "message": "mission-shaped schedule: accepted and written in the v2 shape it is read as"}]);
    }
    Ok((StatusCode::CREATED, ok(view)).into_response())
}

/// `PATCH /api/v1/schedules/{id} {expectedRevision?, ...merge patch}`: the patch merged onto
/// the v2 definition (`null` removes a field), checked whole, written at the next revision.
pub async fn patch(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, AgentError> {
    let mut patch = object(&body)?;
    let expected = expected_revision(&headers, patch.remove("expectedRevision"))?;
    for fixed in ["id", "revision"] {
        if patch.contains_key(fixed) {
            return Err(ApiError::invalid(format!("`{fixed}` cannot be patched")).into());
        }
    }
    update(state, id, expected, move |id, current| {
        let mut document =
            serde_json::to_value(current).map_err(|e| ApiError::new(ErrorCode::Internal, e.to_string()))?;
        merge_patch(&mut document, Value::Object(patch));
        let (config, ..) = parse_schedule(&document, &schedule_location(id))
            .map_err(|problems| AgentError::Problems { code: ErrorCode::InvalidConfig, problems })?;
        Ok(config)
    })
    .await
}

/// `DELETE /api/v1/schedules/{id}` (`?expectedRevision=` or `If-Match`) → `{deleted: true, id}`.
/// Its runs stay in the store.
pub async fn delete(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Query(query): Query<DeleteQuery>,
) -> Result<Json<Value>, AgentError> {
    let expected = expected_revision(&headers, query.expected_revision.map(Value::from))?;
    let deleted = id.clone();
    edit(&state, move |edit, _| {
        current(edit.root(), &id, expected)?;
        Ok(remove_schedule(edit, &id)?)
    })
    .await?;
    Ok(ok(json!({"deleted": true, "id": deleted})))
}

/// The query of `DELETE /schedules/{id}`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeleteQuery {
    expected_revision: Option<u64>,
}

/// `If-Match: <revision>` or the body's `expectedRevision`: the revision the caller read.
fn expected_revision(headers: &HeaderMap, field: Option<Value>) -> Result<Option<u64>, ApiError> {
    if let Some(v) = headers.get(header::IF_MATCH) {
        let text = v.to_str().map_err(|_| ApiError::invalid("If-Match is not text"))?.trim();
        let text = text.strip_prefix("W/").unwrap_or(text).trim_matches('"');
        if text == "*" {
            return Ok(None);
        }
        return text.parse().map(Some).map_err(|_| ApiError::invalid("If-Match must be a schedule revision"));
    }
    match field {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| ApiError::invalid("`expectedRevision` must be an integer")),
    }
}

/// Schedule `id` on disk now, checked against the caller's `expected` revision.
fn current(root: &std::path::Path, id: &str, expected: Option<u64>) -> Result<ScheduleConfig, AgentError> {
    let config = read_schedule(root, id)?
        .ok_or_else(|| ApiError::new(ErrorCode::ScheduleNotFound, format!("schedule `{id}` not found")))?;
    let revision = config.revision();
    if let Some(expected) = expected
        && expected != revision
    {
        let message = format!("schedule `{id}` is at revision {revision}, not {expected}");
        return Err(ApiError::new(ErrorCode::Conflict, message).into());
    }
    Ok(config)
}

/// Rewrite schedule `id` with `change` applied, at the next revision, in one project edit (a
/// legacy file is written in the v2 shape it was read as).
async fn update(
    state: Arc<AppState>,
    id: String,
    expected: Option<u64>,
    change: impl FnOnce(&str, &ScheduleConfig) -> Result<ScheduleConfig, AgentError> + Send + 'static,
) -> Result<Json<Value>, AgentError> {
    let written = id.clone();
    edit(&state, move |edit, _| {
        let current = current(edit.root(), &id, expected)?;
        let mut config = change(&id, &current)?;
        config.revision = Some(current.revision() + 1);
        Ok(write_schedule(edit, &id, &config)?)
    })
    .await?;
    Ok(ok(view(&find(&state, &written)?, state.runtime.clock().now())))
}

/// Body of pause and resume.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RevisionBody {
    /// The revision the caller read; a different one on disk is `409 conflict`.
    expected_revision: Option<u64>,
}

/// `POST /api/v1/schedules/{id}/pause {expectedRevision?}`.
pub async fn pause(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Option<Json<RevisionBody>>,
) -> Result<Json<Value>, AgentError> {
    set_status(state, id, ScheduleStatus::Paused, &headers, body.map(|b| b.0).unwrap_or_default()).await
}

/// `POST /api/v1/schedules/{id}/resume {expectedRevision?}`.
pub async fn resume(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Option<Json<RevisionBody>>,
) -> Result<Json<Value>, AgentError> {
    set_status(state, id, ScheduleStatus::Active, &headers, body.map(|b| b.0).unwrap_or_default()).await
}

async fn set_status(
    state: Arc<AppState>,
    id: String,
    status: ScheduleStatus,
    headers: &HeaderMap,
    body: RevisionBody,
) -> Result<Json<Value>, AgentError> {
    let expected = expected_revision(headers, body.expected_revision.map(Value::from))?;
    update(state, id, expected, move |_, current| Ok(ScheduleConfig { status: Some(status), ..current.clone() })).await
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
    find_any(&state, &id, false).await?;
    let limit = query.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::invalid(format!("limit must be 1..={MAX_PAGE}")).into());
    }
    let page = PageRequest { after: query.cursor.filter(|c| !c.is_empty()).map(Cursor::from_wire), limit };
    let runs = state.scheduler.runs(&id, &page).await.map_err(ApiError::from)?;
    Ok(ok(json!({"runs": runs.items, "nextCursor": runs.next.as_ref().map(Cursor::as_str)})))
}
