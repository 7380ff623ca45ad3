//! `/api/v1/agents/{agent}/memory/candidates/…` (and `/v1/…`): reviewing what memory learning
//! proposed (inventory §3.2 "Candidates"): list one page at a time (`statuses`, `limit`,
//! opaque `cursor`), get, the audit trail, a decision (`approve` applies the candidate at once:
//! its memory item is created; `reject` closes it) and `apply` (an approved candidate whose
//! item is not made yet).
//!
//! The reviewer is the authenticated key (`local` on a server without keys), never a body
//! field. A candidate sits in its user's scope, so the same rules as the memory items hold: a
//! client key reaches its own user's candidates, an admin key every one; anything else is 404.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Extension, Path, Query, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use polpo_memory::learning::{Decision, Learner};
use polpo_store::{CandidateStatus, Cursor, MemoryCandidate, PageRequest};
use serde::Deserialize;
use serde_json::{Value, json};

use super::memory::{Access, parse};
use crate::auth::Caller;
use crate::error::{ApiError, ErrorCode, RestError, ok};
use crate::learning::LOCAL_USER;
use crate::state::AppState;

/// Every candidate route under `/api/v1` and `/v1` (the memory routes' paths: a client key may
/// use them, they check scopes themselves).
pub fn router() -> Router<Arc<AppState>> {
    let mut router = Router::new();
    for prefix in ["/api/v1", "/v1"] {
        router = router
            .route(&format!("{prefix}/agents/{{agent}}/memory/candidates"), get(list))
            .route(&format!("{prefix}/agents/{{agent}}/memory/candidates/{{candidate}}"), get(get_one))
            .route(&format!("{prefix}/agents/{{agent}}/memory/candidates/{{candidate}}/audit"), get(audit))
            .route(&format!("{prefix}/agents/{{agent}}/memory/candidates/{{candidate}}/decision"), post(decide))
            .route(&format!("{prefix}/agents/{{agent}}/memory/candidates/{{candidate}}/apply"), post(apply));
    }
    router
}

/// Default page size of a listing.
const DEFAULT_LIMIT: u32 = 50;
/// Largest page of a listing.
const MAX_LIMIT: u32 = 100;

fn learner(state: &AppState) -> Result<&Learner, ApiError> {
    state
        .learning
        .as_ref()
        .ok_or_else(|| ApiError::new(ErrorCode::MemoryReviewUnavailable, "memory learning does not run on this server"))
}

fn not_found(id: &str) -> ApiError {
    ApiError::new(ErrorCode::NotFound, format!("memory candidate `{id}` not found"))
}

/// The reviewer a decision is recorded under: the caller's key.
fn reviewer(caller: &Caller) -> String {
    caller.owner.clone().unwrap_or_else(|| LOCAL_USER.to_owned())
}

/// Candidate `id` of the path's agent, when the caller may read its scope.
async fn visible(access: &Access<'_>, learner: &Learner, id: &str) -> Result<MemoryCandidate, ApiError> {
    match learner.store().get(access.agent(), id).await? {
        Some(c) if access.may_read(&c.scope).await? => Ok(c),
        _ => Err(not_found(id)),
    }
}

/// Candidate `id` of the path's agent, when the caller may also decide on its scope (a
/// scope it may only read answers 404 like one it cannot see).
async fn decidable(access: &Access<'_>, learner: &Learner, id: &str) -> Result<MemoryCandidate, ApiError> {
    let candidate = visible(access, learner, id).await?;
    if !access.may_write(&candidate.scope).await? {
        return Err(not_found(id));
    }
    Ok(candidate)
}

/// `GET …/memory/candidates?statuses=a,b&limit=&cursor=` → `{candidates, nextCursor}`
/// (newest first). Unknown query keys and statuses are refused.
async fn list(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(agent): Path<String>,
    Query(query): Query<Vec<(String, String)>>,
) -> Result<Json<Value>, RestError> {
    let access = Access::new(&state, caller, agent)?;
    let learner = learner(&state)?;
    let (mut statuses, mut limit, mut after) = (Vec::new(), DEFAULT_LIMIT, None);
    for (k, v) in query {
        match k.as_str() {
            "statuses" => {
                for s in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                    statuses.push(CandidateStatus::parse(s).ok_or_else(|| {
                        ApiError::invalid(format!("unknown status `{s}` (pending, approved, rejected, applied)"))
                    })?);
                }
            }
            "limit" => {
                limit = v
                    .parse::<u32>()
                    .ok()
                    .filter(|n| (1..=MAX_LIMIT).contains(n))
                    .ok_or_else(|| ApiError::invalid(format!("limit must be 1..={MAX_LIMIT}")))?
            }
            "cursor" => after = Some(Cursor::from_wire(v)).filter(|c| !c.as_str().is_empty()),
            _ => {
                return Err(
                    ApiError::invalid(format!("unknown query parameter `{k}` (statuses, limit, cursor)")).into()
                );
            }
        }
    }
    let page = learner
        .store()
        .list(access.agent(), &PageRequest { after, limit }, |c| {
            (statuses.is_empty() || statuses.contains(&c.status)) && access.reaches_user(&c.scope)
        })
        .await
        .map_err(ApiError::from)?;
    Ok(ok(json!({"candidates": page.items, "nextCursor": page.next.as_ref().map(Cursor::as_str)})))
}

/// `GET …/memory/candidates/{candidate}` → `{candidate}`.
async fn get_one(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path((agent, id)): Path<(String, String)>,
) -> Result<Json<Value>, RestError> {
    let access = Access::new(&state, caller, agent)?;
    let candidate = visible(&access, learner(&state)?, &id).await?;
    Ok(ok(json!({"candidate": candidate})))
}

/// `GET …/memory/candidates/{candidate}/audit` → `{candidateId, audit}` (oldest first).
async fn audit(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path((agent, id)): Path<(String, String)>,
) -> Result<Json<Value>, RestError> {
    let access = Access::new(&state, caller, agent)?;
    let candidate = visible(&access, learner(&state)?, &id).await?;
    Ok(ok(json!({"candidateId": candidate.id, "audit": candidate.audit})))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct DecisionBody {
    decision: Decision,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    expected_revision: Option<u64>,
}

/// `POST …/memory/candidates/{candidate}/decision {decision: approve|reject, reason?,
/// expectedRevision?}` → `{candidate, memoryId}` (`memoryId` once applied); 409 `conflict`
/// when the candidate moved on or was already decided.
async fn decide(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path((agent, id)): Path<(String, String)>,
    body: Bytes,
) -> Result<Json<Value>, RestError> {
    let access = Access::new(&state, caller.clone(), agent)?;
    let learner = learner(&state)?;
    let body: DecisionBody = parse(&body)?;
    if body.reason.as_ref().is_some_and(|r| r.len() > 500) {
        return Err(ApiError::invalid("reason must be at most 500 bytes").into());
    }
    decidable(&access, learner, &id).await?;
    let decided = learner
        .decide(access.agent(), &id, body.decision, &reviewer(&caller), body.reason, body.expected_revision)
        .await
        .map_err(ApiError::from)?;
    Ok(ok(json!({"memoryId": decided.memory_id, "candidate": decided})))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ApplyBody {
    #[serde(default)]
    expected_revision: Option<u64>,
}

/// `POST …/memory/candidates/{candidate}/apply {expectedRevision?}` → `{candidate, memoryId}`:
/// an approved candidate becomes its memory item (applying again returns the same item).
async fn apply(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path((agent, id)): Path<(String, String)>,
    body: Bytes,
) -> Result<Json<Value>, RestError> {
    let access = Access::new(&state, caller.clone(), agent)?;
    let learner = learner(&state)?;
    let body: ApplyBody = if body.is_empty() { ApplyBody { expected_revision: None } } else { parse(&body)? };
    decidable(&access, learner, &id).await?;
    let (applied, memory_id) =
        learner.apply(access.agent(), &id, &reviewer(&caller), body.expected_revision).await.map_err(ApiError::from)?;
    Ok(ok(json!({"candidate": applied, "memoryId": memory_id})))
}
