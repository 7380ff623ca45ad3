//! Tasks (inventory §3.2): `/api/v1/tasks…`. Create (a draft, or pending and run by the
//! orchestrator as soon as its dependencies are done), list newest first with a cursor, read,
//! edit while not running, delete while not running, and the actions `queue`, `retry`,
//! `kill`, `reassess`, `approve`, `reject`.
//! Every move goes through the orchestrator, so it follows the task state machine.

use crate::error::{ApiError, ErrorCode, RestError, ok};
use crate::state::AppState;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use polpo_core::tasks::{Task, TaskStatus};
use polpo_store::page::{DEFAULT_PAGE, MAX_PAGE};
use polpo_store::{Cursor, PageRequest, TaskFilter};
use serde_json::{Map, Value, json};
use std::sync::Arc;

/// Every task route, under `/api/v1` and its `/v1` twin.
pub fn router() -> Router<Arc<AppState>> {
    let mut router = Router::new();
    for prefix in ["/api/v1", "/v1"] {
        router = router
            .route(&format!("{prefix}/tasks"), get(list).post(create))
            .route(&format!("{prefix}/tasks/{{id}}"), get(get_one).patch(patch).delete(remove))
            .route(&format!("{prefix}/tasks/{{id}}/queue"), post(queue))
            .route(&format!("{prefix}/tasks/{{id}}/retry"), post(retry))
            .route(&format!("{prefix}/tasks/{{id}}/kill"), post(kill))
            .route(&format!("{prefix}/tasks/{{id}}/reassess"), post(reassess))
            .route(&format!("{prefix}/tasks/{{id}}/approve"), post(approve))
            .route(&format!("{prefix}/tasks/{{id}}/reject"), post(reject));
    }
    router
}

/// The body as a JSON object, or `invalid_request`.
pub(crate) fn object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::invalid(format!("the body must be a JSON object: {e}")))
}

/// `limit` and `cursor` of a listing; `Err` on a bad limit.
pub(crate) fn page_of(query: &[(String, String)]) -> Result<PageRequest, ApiError> {
    let mut page = PageRequest::first(DEFAULT_PAGE);
    for (k, v) in query {
        match k.as_str() {
            "limit" => {
                page.limit = v
                    .parse::<u32>()
                    .ok()
                    .filter(|n| (1..=MAX_PAGE).contains(n))
                    .ok_or_else(|| ApiError::invalid(format!("limit must be 1..={MAX_PAGE}")))?;
            }
            "cursor" => page.after = Some(Cursor::from_wire(v.clone())).filter(|c| !c.as_str().is_empty()),
            _ => {}
        }
    }
    Ok(page)
}

/// `GET /api/v1/tasks?status=&missionId=&limit=&cursor=` → `{tasks, nextCursor}`.
async fn list(
    State(state): State<Arc<AppState>>,
    Query(query): Query<Vec<(String, String)>>,
) -> Result<Json<Value>, RestError> {
    let mut filter = TaskFilter::default();
    for (k, v) in &query {
        match k.as_str() {
            "status" => {
                filter.status = Some(TaskStatus::parse(v).ok_or_else(|| {
                    ApiError::invalid(format!("unknown status `{v}` (draft, pending, awaiting_approval, assigned, in_progress, review, done, failed)"))
                })?);
            }
            "missionId" => filter.mission_id = Some(v.clone()),
            "limit" | "cursor" => {}
            _ => {
                return Err(ApiError::invalid(format!(
                    "unknown query parameter `{k}` (status, missionId, limit, cursor)"
                ))
                .into());
            }
        }
    }
    let page = state.runtime.store().tasks.list_tasks(&filter, &page_of(&query)?).await?;
    let tasks: Vec<&Task> = page.items.iter().map(|t| &t.task).collect();
    Ok(ok(json!({"tasks": tasks, "nextCursor": page.next.as_ref().map(Cursor::as_str)})))
}

/// `POST /api/v1/tasks {title, description, assignTo, dependsOn?, expectations?, draft?, …}`
/// → 201 the task (`draft: true` creates it as a draft, to be queued later).
async fn create(State(state): State<Arc<AppState>>, body: axum::body::Bytes) -> Result<impl IntoResponse, RestError> {
    let mut body = object(&body)?;
    let draft = match body.remove("draft") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => false,
        Some(Value::Bool(true)) => true,
        Some(_) => return Err(ApiError::invalid("`draft` must be a boolean").into()),
    };
    for field in ["title", "description"] {
        if body.get(field).and_then(Value::as_str).is_none_or(|s| s.trim().is_empty()) {
            return Err(ApiError::invalid(format!("`{field}` must be a non-empty string")).into());
        }
    }
    for fixed in ["id", "status", "phase", "retries", "result", "outcomes", "createdAt", "updatedAt"] {
        if body.contains_key(fixed) {
            return Err(ApiError::invalid(format!("`{fixed}` is set by the server")).into());
        }
    }
    let now = state.runtime.clock().now();
    body.insert("id".into(), json!(""));
    body.insert("status".into(), json!(if draft { "draft" } else { "pending" }));
    body.insert("createdAt".into(), json!(now));
    body.insert("updatedAt".into(), json!(now));
    let task: Task = serde_json::from_value(Value::Object(body)).map_err(|e| ApiError::invalid(e.to_string()))?;
    let stored = state.orchestrator.create_task(task).await?;
    Ok((StatusCode::CREATED, ok(stored.task)))
}

/// `GET /api/v1/tasks/{{id}}` → the task, with `runId`, the run of its latest attempt, once
/// one has started (so a client can open that run's journal).
async fn get_one(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Result<Json<Value>, RestError> {
    let task = state.orchestrator.task(&id).await?.task;
    let started = !matches!(task.status, TaskStatus::Draft | TaskStatus::Pending | TaskStatus::AwaitingApproval);
    let run_id = started.then(|| polpo_orchestrator::task_run_id(&task));
    let mut body = serde_json::to_value(&task).map_err(|e| ApiError::new(ErrorCode::Internal, e.to_string()))?;
    if let (Some(run_id), Some(fields)) = (run_id, body.as_object_mut()) {
        fields.insert("runId".into(), json!(run_id));
    }
    Ok(ok(body))
}

/// `PATCH /api/v1/tasks/{{id}} {description?, assignTo?, expectations?, metrics?, maxRetries?,
/// maxDuration?, priority?, sideEffects?, deadline?}` → the task; only while it is not
/// running (draft, pending, awaiting approval, failed). A `status` is refused: statuses move
/// through the actions only.
async fn patch(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<Json<Value>, RestError> {
    const EDITABLE: [&str; 9] = [
        "description",
        "assignTo",
        "expectations",
        "metrics",
        "maxRetries",
        "maxDuration",
        "priority",
        "sideEffects",
        "deadline",
    ];
    let body = object(&body)?;
    if let Some(k) = body.keys().find(|k| !EDITABLE.contains(&k.as_str())) {
        return Err(ApiError::invalid(format!("`{k}` cannot be edited (editable: {})", EDITABLE.join(", "))).into());
    }
    let stored = state.orchestrator.task(&id).await?;
    let running = matches!(stored.task.status, TaskStatus::Assigned | TaskStatus::InProgress | TaskStatus::Review);
    if running {
        return Err(ApiError::new(
            "invalid_transition",
            format!("task `{id}` is {}: edit it once it stops", stored.task.status),
        )
        .into());
    }
    let mut merged = serde_json::to_value(&stored.task).map_err(|e| ApiError::new("internal", e.to_string()))?;
    if let Value::Object(m) = &mut merged {
        m.extend(body);
    }
    let task: Task = serde_json::from_value(merged).map_err(|e| ApiError::invalid(e.to_string()))?;
    let updated = state.runtime.store().tasks.update_task(task, stored.revision).await?;
    state.orchestrator.wake();
    Ok(ok(updated.task))
}

/// `DELETE /api/v1/tasks/{{id}}` → `{removed: true}` (`task:removed` on the event bus). A task
/// being worked on is a `conflict` (kill it first), and so is a task others depend on.
async fn remove(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Result<Json<Value>, RestError> {
    state.orchestrator.delete_task(&id).await?;
    Ok(ok(json!({"removed": true})))
}

/// `POST /api/v1/tasks/{{id}}/queue` → `{queued: true, task}` (draft → pending).
async fn queue(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Result<Json<Value>, RestError> {
    let t = state.orchestrator.queue(&id).await?;
    Ok(ok(json!({"queued": true, "task": t.task})))
}

/// `POST /api/v1/tasks/{{id}}/retry` → `{retried: true, task}` (failed → pending).
async fn retry(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Result<Json<Value>, RestError> {
    let t = state.orchestrator.retry(&id).await?;
    Ok(ok(json!({"retried": true, "task": t.task})))
}

/// `POST /api/v1/tasks/{{id}}/kill` → `{killed: true}`: its run is aborted and it fails.
async fn kill(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Result<Json<Value>, RestError> {
    state.orchestrator.kill(&id).await?;
    Ok(ok(json!({"killed": true})))
}

/// `POST /api/v1/tasks/{{id}}/reassess` → `{reassessed: true, task}`: a done or failed task's
/// checks run again on the answer it kept; the verdict decides its status, the earlier
/// assessment moves to `assessmentHistory`.
async fn reassess(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Result<Json<Value>, RestError> {
    let t = state.orchestrator.reassess(&id).await?;
    Ok(ok(json!({"reassessed": true, "task": t.task})))
}

/// `POST /api/v1/tasks/{{id}}/approve` → `{approved: true, task}`: a task waiting for approval
/// runs again.
async fn approve(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Result<Json<Value>, RestError> {
    let t = state.orchestrator.approve(&id).await?;
    Ok(ok(json!({"approved": true, "task": t.task})))
}

/// `POST /api/v1/tasks/{{id}}/reject` → `{rejected: true, task}`: it fails.
async fn reject(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Result<Json<Value>, RestError> {
    let t = state.orchestrator.reject(&id).await?;
    Ok(ok(json!({"rejected": true, "task": t.task})))
}
