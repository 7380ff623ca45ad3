//! Chat sessions: `/api/v1/chat/sessions…` as in the reference, with `/api/v1/sessions…` and
//! the `/v1/…` twins as aliases. List (newest first, cursor-paginated, filtered by agent,
//! user and `metadata.<k>=<v>`), read with messages, retitle, delete.

use crate::app::AppState;
use crate::error::{ApiError, RestError, ok};
use axum::body::Bytes;
use axum::routing::get;
use axum::{Json, Router};
use axum::extract::{Path, Query, State};
use polpo_store::page::{DEFAULT_PAGE, MAX_PAGE};
use polpo_store::{Cursor, PageRequest, Session, SessionFilter, SessionPatch, StoredMessage};
use serde_json::{Map, Value, json};
use std::sync::Arc;

/// Most sessions a metadata-filtered listing reads to fill one page; a sparse filter over a
/// huge store returns a short page with a cursor rather than scanning everything.
pub const MAX_SCANNED: usize = 10_000;

/// Every session route under `/api/v1` and `/v1`, at the reference's `/chat/sessions` and
/// the shorter `/sessions`.
pub fn router() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/v1/chat/sessions", get(list))
        .route("/v1/chat/sessions", get(list))
        .route("/api/v1/sessions", get(list))
        .route("/v1/sessions", get(list))
        .route("/api/v1/chat/sessions/{id}", get(get_one).patch(patch).delete(delete))
        .route("/v1/chat/sessions/{id}", get(get_one).patch(patch).delete(delete))
        .route("/api/v1/sessions/{id}", get(get_one).patch(patch).delete(delete))
        .route("/v1/sessions/{id}", get(get_one).patch(patch).delete(delete))
        .route("/api/v1/chat/sessions/{id}/messages", get(get_one))
        .route("/v1/chat/sessions/{id}/messages", get(get_one))
        .route("/api/v1/sessions/{id}/messages", get(get_one))
        .route("/v1/sessions/{id}/messages", get(get_one))
}

/// `GET /chat/sessions?agent=&user=&limit=&cursor=&metadata.<k>=<v>` →
/// `{sessions, nextCursor}`; `nextCursor` is `null` on the last page.
pub async fn list(State(state): State<Arc<AppState>>, Query(query): Query<Vec<(String, String)>>) -> Result<Json<Value>, RestError> {
    let mut filter = SessionFilter::default();
    let mut limit = DEFAULT_PAGE;
    let mut after = None;
    let mut metadata = Vec::new();
    for (k, v) in query {
        match k.as_str() {
            "agent" => filter.agent = Some(v),
            "user" => filter.user = Some(v),
            "limit" => limit = v.parse::<u32>().ok().filter(|n| (1..=MAX_PAGE).contains(n)).ok_or_else(|| ApiError::invalid(format!("limit must be 1..={MAX_PAGE}")))?,
            "cursor" => after = Some(Cursor::from_wire(v)).filter(|c| !c.as_str().is_empty()),
            _ => match k.strip_prefix("metadata.") {
                Some(key) => metadata.push((key.to_owned(), v)),
                None => return Err(ApiError::invalid(format!("unknown query parameter `{k}` (agent, user, limit, cursor, metadata.<key>)")).into()),
            },
        }
    }
    let store = &state.runtime.store().sessions;
    let mut sessions: Vec<Session> = Vec::new();
    let mut scanned = 0;
    // Each page read asks only for what is still missing and is consumed whole, so the
    // store's cursor is exactly where the next listing resumes.
    let next = loop {
        let want = limit - sessions.len() as u32;
        let page = store.list_sessions(&filter, &PageRequest { after, limit: want }).await?;
        scanned += page.items.len();
        sessions.extend(page.items.into_iter().filter(|s| matches(s, &metadata)));
        match page.next {
            Some(c) if sessions.len() < limit as usize && scanned < MAX_SCANNED => after = Some(c),
            next => break next,
        }
    };
    Ok(ok(json!({"sessions": sessions, "nextCursor": next.as_ref().map(Cursor::as_str)})))
}

/// `GET /chat/sessions/{id}` and `…/{id}/messages` → `{session, messages}` (oldest first).
pub async fn get_one(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Result<Json<Value>, RestError> {
    let store = &state.runtime.store().sessions;
    let session = store.get_session(&id).await?.ok_or_else(|| not_found(&id))?;
    let mut messages: Vec<StoredMessage> = Vec::new();
    let mut page = PageRequest::first(MAX_PAGE);
    loop {
        let got = store.list_messages(&id, &page).await?;
        messages.extend(got.items);
        match got.next {
            Some(c) => page = PageRequest::after(c, MAX_PAGE),
            None => break,
        }
    }
    Ok(ok(json!({"session": session, "messages": messages})))
}

/// `PATCH /chat/sessions/{id} {title?, metadata?, revision?}` → the session.
pub async fn patch(State(state): State<Arc<AppState>>, Path(id): Path<String>, body: Bytes) -> Result<Json<Value>, RestError> {
    let body: Map<String, Value> = serde_json::from_slice(&body).map_err(|e| ApiError::invalid(format!("the body must be a JSON object: {e}")))?;
    let title = match body.get("title") {
        None | Some(Value::Null) => None,
        Some(Value::String(t)) if !t.trim().is_empty() => Some(t.trim().to_owned()),
        Some(_) => return Err(ApiError::invalid("`title` must be a non-empty string").into()),
    };
    let metadata = match body.get("metadata") {
        None | Some(Value::Null) => None,
        Some(m @ Value::Object(_)) => Some(m.clone()),
        Some(_) => return Err(ApiError::invalid("`metadata` must be an object").into()),
    };
    let revision = match body.get("revision") {
        None | Some(Value::Null) => None,
        Some(r) => Some(r.as_u64().ok_or_else(|| ApiError::invalid("`revision` must be the number a read returned"))?),
    };
    let store = &state.runtime.store().sessions;
    store.get_session(&id).await?.ok_or_else(|| not_found(&id))?;
    let session = store.update_session(&id, SessionPatch { title, metadata }, revision).await?;
    Ok(ok(session))
}

/// `DELETE /chat/sessions/{id}` → `{removed: true}`; `404` when there was no such session.
pub async fn delete(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Result<Json<Value>, RestError> {
    if state.runtime.store().sessions.delete_session(&id).await? {
        Ok(ok(json!({"removed": true})))
    } else {
        Err(not_found(&id).into())
    }
}

fn not_found(id: &str) -> ApiError {
    ApiError::new("session_not_found", format!("session `{id}` does not exist"))
}

/// Every `metadata.<k>=<v>` filter holds (ANDed, string equality).
fn matches(session: &Session, filters: &[(String, String)]) -> bool {
    filters.iter().all(|(k, v)| session.metadata.get(k).and_then(Value::as_str) == Some(v.as_str()))
}
