//! Missions (inventory §3.2): `/api/v1/missions…`. Create (a draft with its plan in
//! `data.tasks`; with a `schedule`, `scheduled` or `recurring` until the scheduler fires it),
//! list newest first with a cursor, read (a waiting mission with its `scheduleId` and
//! `nextOccurrenceAt`), and the controls `execute`, `pause`, `resume {retryFailed}`, `abort`,
//! and the `report`.

use crate::error::{ApiError, ErrorCode, RestError, ok};
use crate::routes::agents::AgentError;
use crate::routes::tasks::{object, page_of};
use crate::state::AppState;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use polpo_core::tasks::{Mission, MissionStatus};
use polpo_store::{Cursor, MissionFilter};
use serde_json::{Value, json};
use std::sync::Arc;

/// Every mission route, under `/api/v1` and its `/v1` twin.
pub fn router() -> Router<Arc<AppState>> {
    let mut router = Router::new();
    for prefix in ["/api/v1", "/v1"] {
        router = router
            .route(&format!("{prefix}/missions"), get(list).post(create))
            .route(&format!("{prefix}/missions/{{id}}"), get(get_one).patch(patch))
            .route(&format!("{prefix}/missions/{{id}}/execute"), post(execute))
            .route(&format!("{prefix}/missions/{{id}}/pause"), post(pause))
            .route(&format!("{prefix}/missions/{{id}}/resume"), post(resume))
            .route(&format!("{prefix}/missions/{{id}}/abort"), post(abort))
            .route(&format!("{prefix}/missions/{{id}}/report"), get(report));
    }
    router
}

/// `GET /api/v1/missions?status=&limit=&cursor=` → `{missions, nextCursor}`.
async fn list(
    State(state): State<Arc<AppState>>,
    Query(query): Query<Vec<(String, String)>>,
) -> Result<Json<Value>, RestError> {
    let mut filter = MissionFilter::default();
    for (k, v) in &query {
        match k.as_str() {
            "status" => {
                filter.status =
                    Some(MissionStatus::parse(v).ok_or_else(|| ApiError::invalid(format!("unknown status `{v}`")))?);
            }
            "limit" | "cursor" => {}
            _ => return Err(ApiError::invalid(format!("unknown query parameter `{k}` (status, limit, cursor)")).into()),
        }
    }
    let page = state.runtime.store().missions.list_missions(&filter, &page_of(&query)?).await?;
    let missions: Vec<&Mission> = page.items.iter().map(|m| &m.mission).collect();
    Ok(ok(json!({"missions": missions, "nextCursor": page.next.as_ref().map(Cursor::as_str)})))
}

/// `POST /api/v1/missions {name, data: {tasks, checkpoints?, delays?} (object or JSON
/// string), prompt?, deadline?, qualityThreshold?, user?, schedule?, endDate?}` → 201 the
/// mission: a draft, or with `schedule` (an ISO-8601 instant, or a cron expression in UTC
/// that recurs until `endDate`) `scheduled` / `recurring`. A schedule that cannot fire is
/// `400 invalid_request` with `problems: [{code, message, pointer: "/schedule"}]`.
/// Checkpoints and delays may also be given at the top level.
async fn create(State(state): State<Arc<AppState>>, body: axum::body::Bytes) -> Result<impl IntoResponse, AgentError> {
    let mut body = object(&body)?;
    let mut data = match body.remove("data") {
        Some(Value::String(s)) => {
            serde_json::from_str(&s).map_err(|e| ApiError::invalid(format!("`data` is not JSON: {e}")))?
        }
        Some(v @ Value::Object(_)) => v,
        _ => return Err(ApiError::invalid("`data` must be the plan, an object (or its JSON text) with `tasks`").into()),
    };
    for key in ["checkpoints", "delays", "qualityGates"] {
        if let Some(v) = data.as_object_mut().and_then(|d| d.remove(key)) {
            body.entry(key).or_insert(v);
        }
    }
    for fixed in ["id", "status", "executionCount", "createdAt", "updatedAt"] {
        if body.contains_key(fixed) {
            return Err(ApiError::invalid(format!("`{fixed}` is set by the server")).into());
        }
    }
    let now = state.runtime.clock().now();
    body.insert("id".into(), json!(""));
    body.insert("data".into(), data);
    body.insert("status".into(), json!("draft"));
    body.insert("createdAt".into(), json!(now));
    body.insert("updatedAt".into(), json!(now));
    let mission: Mission = serde_json::from_value(Value::Object(body)).map_err(|e| ApiError::invalid(e.to_string()))?;
    polpo_orchestrator::check_schedule(&mission, now)
        .map_err(|p| AgentError::Problems { code: ErrorCode::InvalidRequest, problems: vec![*p] })?;
    let stored = state.orchestrator.create_mission(mission).await.map_err(ApiError::from)?;
    if stored.mission.schedule.is_some() {
        // Its first occurrence may come before the scheduler's next full pass.
        state.scheduler.wake();
    }
    Ok((StatusCode::CREATED, ok(view(&stored.mission, now))))
}

/// `GET /api/v1/missions/{{id}}` → the mission.
async fn get_one(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Result<Json<Value>, RestError> {
    let mission = state.orchestrator.mission(&id).await?.mission;
    Ok(ok(view(&mission, state.runtime.clock().now())))
}

/// `PATCH /api/v1/missions/{{id}} {schedule?, endDate?}` (each absent or `null` clears it) →
/// the mission: a draft given a schedule waits `scheduled` / `recurring`; a waiting mission may
/// move its schedule but keep its kind (else `409 invalid_transition`). A schedule that cannot
/// fire is `400` with `problems`, as on create.
async fn patch(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<Json<Value>, AgentError> {
    let body = object(&body)?;
    if let Some(key) = body.keys().find(|k| !matches!(k.as_str(), "schedule" | "endDate")) {
        return Err(ApiError::invalid(format!("`{key}` cannot be changed here (schedule, endDate)")).into());
    }
    let mut mission = state.orchestrator.mission(&id).await.map_err(ApiError::from)?.mission;
    let field = |k: &str| body.get(k).cloned().unwrap_or(Value::Null);
    mission.schedule =
        serde_json::from_value(field("schedule")).map_err(|e| ApiError::invalid(format!("schedule: {e}")))?;
    mission.end_date =
        serde_json::from_value(field("endDate")).map_err(|e| ApiError::invalid(format!("endDate: {e}")))?;
    let now = state.runtime.clock().now();
    polpo_orchestrator::check_schedule(&mission, now)
        .map_err(|p| AgentError::Problems { code: ErrorCode::InvalidRequest, problems: vec![*p] })?;
    let stored =
        state.orchestrator.reschedule_mission(&id, mission.schedule, mission.end_date).await.map_err(ApiError::from)?;
    state.scheduler.wake();
    Ok(ok(view(&stored.mission, now)))
}

/// A mission as answered: with its schedule's id in the scheduler (`scheduleId`, whose runs
/// `GET /api/v1/schedules/{scheduleId}/runs` lists) and, while it waits `scheduled` or
/// `recurring`, when it fires next (`nextOccurrenceAt`).
fn view(mission: &Mission, now: chrono::DateTime<chrono::Utc>) -> Value {
    let mut out = json!(mission);
    if let Ok(Some(schedule)) = polpo_orchestrator::mission_schedule(mission) {
        out["scheduleId"] = json!(schedule.id);
        if matches!(mission.status, MissionStatus::Scheduled | MissionStatus::Recurring) {
            out["nextOccurrenceAt"] = json!(schedule.timing.next_after(now));
        }
    }
    out
}

/// `POST /api/v1/missions/{{id}}/execute` → the mission, active; its plan's tasks are created.
async fn execute(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Result<Json<Value>, RestError> {
    Ok(ok(state.orchestrator.execute_mission(&id).await?.mission))
}

/// `POST /api/v1/missions/{{id}}/pause` → the mission, paused.
async fn pause(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Result<Json<Value>, RestError> {
    Ok(ok(state.orchestrator.pause_mission(&id).await?.mission))
}

/// `POST /api/v1/missions/{{id}}/resume {retryFailed?}` → the mission, active again.
async fn resume(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<Json<Value>, RestError> {
    let retry_failed = if body.is_empty() {
        false
    } else {
        match object(&body)?.get("retryFailed") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(ApiError::invalid("`retryFailed` must be a boolean").into()),
        }
    };
    Ok(ok(state.orchestrator.resume_mission(&id, retry_failed).await?.mission))
}

/// `POST /api/v1/missions/{{id}}/abort` → the mission, cancelled; its running tasks are killed.
async fn abort(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Result<Json<Value>, RestError> {
    Ok(ok(state.orchestrator.abort_mission(&id).await?.mission))
}

/// `GET /api/v1/missions/{{id}}/report` → the `MissionReport`.
async fn report(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Result<Json<Value>, RestError> {
    Ok(ok(state.orchestrator.mission_report(&id).await?))
}
