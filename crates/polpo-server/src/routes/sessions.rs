//! Chat sessions: `/api/v1/chat/sessions…` as in the reference, with `/api/v1/sessions…` and
//! the `/v1/…` twins as aliases. List (newest first, cursor-paginated, filtered by agent,
//! user and `metadata.<k>=<v>`), read with messages, retitle, delete, and import a
//! conversation held elsewhere so a later chat continues from it.
//!
//! With several API keys, a client key sees only the sessions it created (any other is
//! `404 session_not_found`, as if it did not exist); admin keys see every session.

use crate::auth::Caller;
use crate::error::{ApiError, ErrorCode, RestError, ok};
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::{Extension, Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use polpo_core::message::{Content, Message, Role, ToolCall};
use polpo_engine::runtime::MAX_HISTORY_MESSAGES;
use polpo_store::page::{DEFAULT_PAGE, MAX_PAGE};
use polpo_store::{
    Cursor, MAX_MESSAGE_BYTES, MAX_TITLE_CHARS, PageRequest, Session, SessionFilter, SessionPatch, StoredMessage,
    TITLE_CHARS,
};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::sync::Arc;

/// Most sessions a metadata-filtered listing reads to fill one page; a sparse filter over a
/// huge store returns a short page with a cursor rather than scanning everything.
pub const MAX_SCANNED: usize = 10_000;

/// Most messages one import takes: no more than a chat replays as history, so an imported
/// conversation is continued whole.
pub const MAX_IMPORT_MESSAGES: usize = MAX_HISTORY_MESSAGES;

/// Every session route under `/api/v1` and `/v1`, at the reference's `/chat/sessions` and
/// the shorter `/sessions`.
pub fn router() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/v1/chat/sessions/import", post(import))
        .route("/v1/chat/sessions/import", post(import))
        .route("/api/v1/sessions/import", post(import))
        .route("/v1/sessions/import", post(import))
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
pub async fn list(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<Vec<(String, String)>>,
) -> Result<Json<Value>, RestError> {
    let mut filter = SessionFilter { owner: caller.listing_owner(), ..SessionFilter::default() };
    let mut limit = DEFAULT_PAGE;
    let mut after = None;
    let mut metadata = Vec::new();
    for (k, v) in query {
        match k.as_str() {
            "agent" => filter.agent = Some(v),
            "user" => filter.user = Some(v),
            "limit" => {
                limit = v
                    .parse::<u32>()
                    .ok()
                    .filter(|n| (1..=MAX_PAGE).contains(n))
                    .ok_or_else(|| ApiError::invalid(format!("limit must be 1..={MAX_PAGE}")))?
            }
            "cursor" => after = Some(Cursor::from_wire(v)).filter(|c| !c.as_str().is_empty()),
            _ => match k.strip_prefix("metadata.") {
                Some(key) => metadata.push((key.to_owned(), v)),
                None => {
                    return Err(ApiError::invalid(format!(
                        "unknown query parameter `{k}` (agent, user, limit, cursor, metadata.<key>)"
                    ))
                    .into());
                }
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
pub async fn get_one(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Value>, RestError> {
    let store = &state.runtime.store().sessions;
    let session = owned(&state, &caller, &id).await?;
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
pub async fn patch(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, RestError> {
    let body: Map<String, Value> =
        serde_json::from_slice(&body).map_err(|e| ApiError::invalid(format!("the body must be a JSON object: {e}")))?;
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
    owned(&state, &caller, &id).await?;
    let session =
        state.runtime.store().sessions.update_session(&id, SessionPatch { title, metadata }, revision).await?;
    Ok(ok(session))
}

/// `DELETE /chat/sessions/{id}` → `{removed: true}`; `404` when there was no such session.
pub async fn delete(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Value>, RestError> {
    owned(&state, &caller, &id).await?;
    if state.runtime.store().sessions.delete_session(&id).await? {
        Ok(ok(json!({"removed": true})))
    } else {
        Err(not_found(&id).into())
    }
}

/// `POST /chat/sessions/import {title?, agent, messages:[{role, content?, toolCalls?, toolCallId?, name?}]}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ImportRequest {
    title: Option<String>,
    agent: String,
    messages: Vec<ImportedMessage>,
}

/// One message of an imported conversation, in the reference's camelCase.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ImportedMessage {
    role: String,
    content: Option<Content>,
    #[serde(default)]
    tool_calls: Vec<ImportedToolCall>,
    tool_call_id: Option<String>,
    name: Option<String>,
}

/// `{id, name, arguments}`; `arguments` is the JSON text, or a JSON object (written as text).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ImportedToolCall {
    id: String,
    name: String,
    #[serde(default)]
    arguments: Value,
}

/// `POST /chat/sessions/import` → `201 {sessionId, imported}`: a new session of `agent` holding
/// these messages, written in one store operation (all of it or nothing). A chat sent with
/// `x-session-id: <sessionId>` then continues from the imported history.
pub async fn import(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    body: Bytes,
) -> Result<impl IntoResponse, RestError> {
    let request: ImportRequest = serde_json::from_slice(&body).map_err(|e| {
        ApiError::invalid(format!("the body must be {{title?, agent, messages:[{{role, content, toolCalls?}}]}}: {e}"))
    })?;
    if state.runtime.loaded().agent(&request.agent).is_none() {
        return Err(ApiError::new(ErrorCode::AgentNotFound, format!("agent `{}` does not exist", request.agent)).into());
    }
    if request.messages.is_empty() || request.messages.len() > MAX_IMPORT_MESSAGES {
        return Err(ApiError::invalid(format!("messages must hold 1..={MAX_IMPORT_MESSAGES} messages")).into());
    }
    let messages = request
        .messages
        .into_iter()
        .enumerate()
        .map(|(i, m)| imported(m).map_err(|e| ApiError::invalid(format!("messages[{i}]: {e}"))))
        .collect::<Result<Vec<Message>, _>>()?;
    let title = match request.title.as_deref().map(str::trim) {
        Some(t) if t.is_empty() || t.chars().count() > MAX_TITLE_CHARS => {
            return Err(ApiError::invalid(format!("`title` must be 1..={MAX_TITLE_CHARS} characters")).into());
        }
        Some(t) => t.to_owned(),
        None => messages
            .iter()
            .find(|m| m.role == Role::User)
            .map(|m| m.text_content().chars().take(TITLE_CHARS).collect())
            .unwrap_or_default(),
    };
    let (now, ids) = (state.runtime.clock().now(), state.runtime.ids());
    let id = ids.next_id();
    let count = messages.len();
    let stored: Vec<StoredMessage> = messages
        .into_iter()
        .zip(1u64..)
        .map(|(message, seq)| StoredMessage {
            id: format!("msg_{}", ids.next_id()),
            session_id: id.clone(),
            seq,
            ts: now,
            message,
            reasoning: None,
            reasoning_truncated: false,
            turn_id: None,
            usage: None,
        })
        .collect();
    let session = Session {
        id: id.clone(),
        agent: request.agent,
        title,
        user: None,
        metadata: json!({}),
        owner: caller.owner,
        created_at: now,
        updated_at: now,
        message_count: count as u64,
        revision: 1,
    };
    state.runtime.store().sessions.import_session(&session, &stored).await?;
    Ok((StatusCode::CREATED, ok(json!({"sessionId": id, "imported": count}))))
}

/// An imported message in the runtime's terms, checked as the model will need it: tool calls
/// only on assistant messages, a tool result names the call it answers, nothing empty.
fn imported(m: ImportedMessage) -> Result<Message, String> {
    let role = match m.role.as_str() {
        "system" => Role::System,
        "user" => Role::User,
        "assistant" => Role::Assistant,
        "tool" => Role::Tool,
        other => return Err(format!("role `{other}` is not system, user, assistant or tool")),
    };
    if !m.tool_calls.is_empty() && role != Role::Assistant {
        return Err("only assistant messages carry toolCalls".into());
    }
    let tool_call_id = m.tool_call_id.filter(|id| !id.is_empty());
    if (role == Role::Tool) != tool_call_id.is_some() {
        return Err("a tool message needs `toolCallId` (and only a tool message has one)".into());
    }
    if m.content.is_none() && m.tool_calls.is_empty() {
        return Err("a message needs `content` or `toolCalls`".into());
    }
    let tool_calls = m
        .tool_calls
        .into_iter()
        .enumerate()
        .map(|(j, c)| {
            let arguments = match c.arguments {
                Value::String(text) => text,
                Value::Null => "{}".to_owned(),
                v @ Value::Object(_) => v.to_string(),
                _ => return Err(format!("toolCalls[{j}].arguments must be JSON text or an object")),
            };
            if c.id.is_empty() || c.name.is_empty() {
                return Err(format!("toolCalls[{j}] needs a non-empty `id` and `name`"));
            }
            Ok(ToolCall { id: c.id, name: c.name, arguments })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let message = Message { role, content: m.content, tool_calls, tool_call_id, name: m.name };
    let size = serde_json::to_vec(&message).map_err(|e| e.to_string())?.len();
    if size > MAX_MESSAGE_BYTES {
        return Err(format!("the message exceeds {MAX_MESSAGE_BYTES} bytes"));
    }
    Ok(message)
}

/// Session `id` when `caller` may see it; `404 session_not_found` when it does not exist or
/// belongs to another client (the two are not told apart).
pub(crate) async fn owned(state: &AppState, caller: &Caller, id: &str) -> Result<Session, ApiError> {
    match state.runtime.store().sessions.get_session(id).await? {
        Some(session) if caller.may_see(session.owner.as_deref()) => Ok(session),
        _ => Err(not_found(id)),
    }
}

fn not_found(id: &str) -> ApiError {
    ApiError::new(ErrorCode::SessionNotFound, format!("session `{id}` does not exist"))
}

/// Every `metadata.<k>=<v>` filter holds (ANDed, string equality).
fn matches(session: &Session, filters: &[(String, String)]) -> bool {
    filters.iter().all(|(k, v)| session.metadata.get(k).and_then(Value::as_str) == Some(v.as_str()))
}
