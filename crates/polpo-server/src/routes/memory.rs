//! `/api/v1/agents/{agent}/memory/…` (and `/v1/…`): typed memory items as an agent sees them
//! (inventory §3.2 "Typed memory"): list one page at a time (`limit`, opaque `cursor`), get,
//! create (201; 409 on a taken id), change with `expectedRevision` (409 `conflict` when stale),
//! delete, and hybrid search through `polpo-memory` (its warnings — the embedder failed and
//! search fell back to lexical — come back in `warnings`).
//!
//! What a caller reaches: the project scope and the agent's own scope, user-scope items of the
//! caller's own key (an admin key reaches every user's), and session-scope items of sessions
//! the caller owns. Changing project or agent memory needs an admin key: it shapes what the
//! agent tells every client. Anything else answers 404, so nobody learns another user's items
//! exist.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Extension, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use polpo_memory::{MemoryError, SearchRequest};
use polpo_store::{
    Cursor, MemoryFilter, MemoryItem, MemoryItemPatch, MemoryScope, NewMemoryItem, PageRequest, ScopeKind, StoreError,
};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::auth::Caller;
use crate::error::{ApiError, ErrorCode, RestError, ok};
use crate::state::AppState;

/// Default page size of a listing.
const DEFAULT_LIMIT: u32 = 50;
/// Largest page of a listing.
const MAX_LIMIT: u32 = 100;
/// Largest request body, in bytes.
const MAX_BODY: usize = 64 * 1024;

/// Every typed-memory route under `/api/v1` and `/v1`.
pub fn router() -> Router<Arc<AppState>> {
    let mut router = Router::new();
    for prefix in ["/api/v1", "/v1"] {
        router = router
            .route(&format!("{prefix}/agents/{{agent}}/memory/items"), get(list).post(create))
            .route(
                &format!("{prefix}/agents/{{agent}}/memory/items/{{item}}"),
                get(get_one).patch(update).delete(delete),
            )
            .route(&format!("{prefix}/agents/{{agent}}/memory/search"), post(search));
    }
    router
}

/// True for the typed-memory paths (without `/api`): they check who may touch which item
/// themselves, so a client key may use them without being an admin.
pub fn is_memory_path(path: &str) -> bool {
    path.strip_prefix("/v1/agents/").and_then(|rest| rest.split_once('/')).is_some_and(|(_, rest)| {
        rest == "memory/items"
            || rest == "memory/search"
            || rest.starts_with("memory/items/")
            || rest == "memory/candidates"
            || rest.starts_with("memory/candidates/")
    })
}

impl From<MemoryError> for ApiError {
    fn from(e: MemoryError) -> Self {
        match e {
            MemoryError::Store(e) => e.into(),
            MemoryError::Embed(polpo_embed::EmbedError::TooLarge(m)) => ApiError::new(ErrorCode::InvalidInput, m),
            MemoryError::Embed(e) => ApiError::new(ErrorCode::ProviderUnavailable, e.to_string()),
            MemoryError::Invalid(m) => ApiError::new(ErrorCode::InvalidInput, m),
        }
    }
}

/// Who is asking, about which agent's memory.
pub(super) struct Access<'a> {
    state: &'a AppState,
    caller: Caller,
    agent: String,
}

impl<'a> Access<'a> {
    /// Publish each of `warnings` (the embedder failed and lexical retrieval stood in) as a
    /// `memory:warning` bus event, so an operator watching `/api/v1/events` sees a provider
    /// outage, not only the client whose answer carried it.
    fn announce(&self, warnings: &[polpo_memory::MemoryWarning]) {
        for warning in warnings {
            let data = json!({"agent": self.agent, "code": warning.code, "message": warning.message});
            self.state.runtime.events().publish("memory:warning", data);
        }
    }

    pub(super) fn new(state: &'a AppState, caller: Caller, agent: String) -> Result<Self, ApiError> {
        if state.runtime.loaded().agent(&agent).is_none() {
            return Err(ApiError::new(ErrorCode::AgentNotFound, format!("agent `{agent}` not found")));
        }
        Ok(Access { state, caller, agent })
    }

    /// The path's agent.
    pub(super) fn agent(&self) -> &str {
        &self.agent
    }

    /// Whether the caller reaches a user scope (`may_read` for a user scope, without a
    /// lookup); any other scope only with an admin key.
    pub(super) fn reaches_user(&self, scope: &MemoryScope) -> bool {
        self.caller.admin || (scope.kind == ScopeKind::User && self.caller.owner.as_deref() == Some(scope.subject()))
    }

    /// Whether the caller may read items in `scope` (a concrete one, with its subject).
    pub(super) async fn may_read(&self, scope: &MemoryScope) -> Result<bool, ApiError> {
        Ok(match scope.kind {
            ScopeKind::Project => true,
            ScopeKind::Agent => scope.subject() == self.agent,
            ScopeKind::User => self.caller.admin || self.caller.owner.as_deref() == Some(scope.subject()),
            ScopeKind::Session => {
                self.caller.admin
                    || match self.state.runtime.store().sessions.get_session(scope.subject()).await? {
                        Some(session) => self.caller.may_see(session.owner.as_deref()),
                        None => false,
                    }
            }
        })
    }

    /// Whether the caller may change items in `scope`: project and agent memory only with an
    /// admin key; otherwise what it may read.
    pub(super) async fn may_write(&self, scope: &MemoryScope) -> Result<bool, ApiError> {
        match scope.kind {
            ScopeKind::Project | ScopeKind::Agent => Ok(self.caller.admin && self.may_read(scope).await?),
            ScopeKind::User | ScopeKind::Session => self.may_read(scope).await,
        }
    }

    /// The scopes a listing or search covers: the one asked for (checked), or every scope
    /// the caller reaches without naming a subject (session memory is listed per session).
    async fn filter(
        &self,
        kind: Option<ScopeKind>,
        subject: Option<String>,
        kinds: Vec<String>,
    ) -> Result<MemoryFilter, ApiError> {
        let scopes = match kind {
            Some(kind) => {
                let scope = self.concrete(kind, subject)?;
                match scope {
                    Some(scope) if self.may_read(&scope).await? => vec![scope],
                    Some(_) => return Err(forbidden()),
                    // An admin asking for every subject of a kind.
                    None => vec![MemoryScope { kind, subject_id: None }],
                }
            }
            None => {
                let mut scopes = vec![MemoryScope::project(), MemoryScope::of(ScopeKind::Agent, &self.agent)];
                if self.caller.admin {
                    scopes.push(MemoryScope { kind: ScopeKind::User, subject_id: None });
                    scopes.push(MemoryScope { kind: ScopeKind::Session, subject_id: None });
                } else if let Some(owner) = &self.caller.owner {
                    scopes.push(MemoryScope::of(ScopeKind::User, owner));
                }
                scopes
            }
        };
        Ok(MemoryFilter { scopes, kinds })
    }

    /// A scope of `kind` with its subject filled in where the request may leave it out: the
    /// path's agent, the caller's own user. `None`: every subject (admins only).
    fn concrete(&self, kind: ScopeKind, subject: Option<String>) -> Result<Option<MemoryScope>, ApiError> {
        Ok(match (kind, subject) {
            (ScopeKind::Project, None) => Some(MemoryScope::project()),
            (ScopeKind::Project, Some(_)) => return Err(ApiError::invalid("a project scope has no subjectId")),
            (ScopeKind::Agent, None) => Some(MemoryScope::of(ScopeKind::Agent, &self.agent)),
            (ScopeKind::Agent, Some(s)) if s != self.agent => {
                return Err(ApiError::invalid(format!("agent memory here is `{}`'s", self.agent)));
            }
            (_, Some(s)) => Some(MemoryScope::of(kind, s)),
            (ScopeKind::User, None) if !self.caller.admin => {
                self.caller.owner.as_ref().map(|o| MemoryScope::of(ScopeKind::User, o))
            }
            (_, None) if self.caller.admin => None,
            (_, None) => return Err(ApiError::invalid("name the scope's subjectId")),
        })
    }

    /// Item `id` when the caller may read it and it belongs to this agent's view.
    async fn item(&self, id: &str) -> Result<MemoryItem, ApiError> {
        let item = self.state.memory.get(id).await?;
        match item {
            Some(item) if self.may_read(&item.scope).await? => Ok(item),
            _ => Err(not_found(id)),
        }
    }
}

fn forbidden() -> ApiError {
    ApiError::new(ErrorCode::Forbidden, "this key may not reach that memory")
}

fn not_found(id: &str) -> ApiError {
    ApiError::new(ErrorCode::NotFound, format!("memory item `{id}` not found"))
}

pub(super) fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    if body.len() > MAX_BODY {
        return Err(ApiError::invalid(format!("the body is over {MAX_BODY} bytes")));
    }
    serde_json::from_slice(body).map_err(|e| ApiError::invalid(format!("invalid memory request: {e}")))
}

fn scope_kind(s: &str) -> Result<ScopeKind, ApiError> {
    ScopeKind::parse(s)
        .ok_or_else(|| ApiError::invalid(format!("unknown scope kind `{s}` (project, agent, user, session)")))
}

fn kinds(list: &str) -> Vec<String> {
    list.split(',').map(str::trim).filter(|k| !k.is_empty()).map(str::to_owned).collect()
}

/// `GET …/memory/items?kinds=a,b&scopeKind=&scopeSubjectId=&limit=&cursor=` →
/// `{items, nextCursor}` (newest first; `nextCursor` is `null` on the last page). Unknown
/// query keys are refused.
async fn list(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(agent): Path<String>,
    Query(query): Query<Vec<(String, String)>>,
) -> Result<Json<Value>, RestError> {
    let access = Access::new(&state, caller, agent)?;
    let (mut kind, mut subject, mut wanted, mut limit, mut after) = (None, None, Vec::new(), DEFAULT_LIMIT, None);
    for (k, v) in query {
        match k.as_str() {
            "kinds" => wanted = kinds(&v),
            "scopeKind" => kind = Some(scope_kind(&v)?),
            "scopeSubjectId" => subject = Some(v).filter(|s| !s.is_empty()),
            "limit" => {
                limit = v
                    .parse::<u32>()
                    .ok()
                    .filter(|n| (1..=MAX_LIMIT).contains(n))
                    .ok_or_else(|| ApiError::invalid(format!("limit must be 1..={MAX_LIMIT}")))?
            }
            "cursor" => after = Some(Cursor::from_wire(v)).filter(|c| !c.as_str().is_empty()),
            _ => {
                return Err(ApiError::invalid(format!(
                    "unknown query parameter `{k}` (kinds, scopeKind, scopeSubjectId, limit, cursor)"
                ))
                .into());
            }
        }
    }
    if subject.is_some() && kind.is_none() {
        return Err(ApiError::invalid("scopeSubjectId needs scopeKind").into());
    }
    let filter = access.filter(kind, subject, wanted).await?;
    let page = state.memory.list_page(&filter, &PageRequest { after, limit }).await?;
    Ok(ok(json!({"items": page.items, "nextCursor": page.next.as_ref().map(Cursor::as_str)})))
}

/// `GET …/memory/items/{item}` → `{item}`.
async fn get_one(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path((agent, id)): Path<(String, String)>,
) -> Result<Json<Value>, RestError> {
    let access = Access::new(&state, caller, agent)?;
    Ok(ok(json!({"item": access.item(&id).await?})))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CreateBody {
    #[serde(default)]
    id: Option<String>,
    scope: ScopeBody,
    kind: String,
    content: String,
    #[serde(default)]
    source: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ScopeBody {
    kind: String,
    #[serde(default)]
    subject_id: Option<String>,
}

/// `POST …/memory/items {id?, scope: {kind, subjectId?}, kind, content, source?}` → 201
/// `{item, warnings}`; 409 `conflict` when the id is taken. An agent scope's subject is the
/// path's agent; a client key's user scope is its own.
async fn create(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(agent): Path<String>,
    body: Bytes,
) -> Result<Response, RestError> {
    let access = Access::new(&state, caller, agent)?;
    let body: CreateBody = parse(&body)?;
    let kind = scope_kind(&body.scope.kind)?;
    let scope =
        access.concrete(kind, body.scope.subject_id)?.ok_or_else(|| ApiError::invalid("name the scope's subjectId"))?;
    if !access.may_write(&scope).await? {
        return Err(forbidden().into());
    }
    let source = body.source.unwrap_or_else(|| "api".to_owned());
    let new = NewMemoryItem { id: body.id, scope, kind: body.kind, content: body.content, source };
    let written = state.memory.create(new).await?;
    access.announce(&written.warnings);
    Ok((StatusCode::CREATED, ok(json!({"item": written.item, "warnings": written.warnings}))).into_response())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct UpdateBody {
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    source: Option<String>,
    #[serde(default)]
    expected_revision: Option<u64>,
}

/// `PATCH …/memory/items/{item} {kind?, content?, source?, expectedRevision?}` →
/// `{item, warnings}`; 409 `conflict` when `expectedRevision` is stale.
async fn update(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path((agent, id)): Path<(String, String)>,
    body: Bytes,
) -> Result<Json<Value>, RestError> {
    let access = Access::new(&state, caller, agent)?;
    let body: UpdateBody = parse(&body)?;
    let item = access.item(&id).await?;
    if !access.may_write(&item.scope).await? {
        return Err(forbidden().into());
    }
    let patch = MemoryItemPatch { kind: body.kind, content: body.content, source: body.source };
    let written = state.memory.update(&id, patch, body.expected_revision).await.map_err(gone(&id))?;
    access.announce(&written.warnings);
    Ok(ok(json!({"item": written.item, "warnings": written.warnings})))
}

/// `DELETE …/memory/items/{item}?expectedRevision=` → `{forgotten: true, itemId}`.
async fn delete(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path((agent, id)): Path<(String, String)>,
    Query(query): Query<Vec<(String, String)>>,
) -> Result<Json<Value>, RestError> {
    let access = Access::new(&state, caller, agent)?;
    let mut expected = None;
    for (k, v) in query {
        match k.as_str() {
            "expectedRevision" => {
                expected = Some(v.parse::<u64>().map_err(|_| ApiError::invalid("expectedRevision must be a number"))?)
            }
            _ => return Err(ApiError::invalid(format!("unknown query parameter `{k}` (expectedRevision)")).into()),
        }
    }
    let item = access.item(&id).await?;
    if !access.may_write(&item.scope).await? {
        return Err(forbidden().into());
    }
    if !state.memory.delete(&id, expected).await? {
        return Err(not_found(&id).into());
    }
    Ok(ok(json!({"forgotten": true, "itemId": id})))
}

/// An item deleted between the check and the write is a 404 like any missing item.
fn gone(id: &str) -> impl FnOnce(MemoryError) -> ApiError + '_ {
    move |e| match e {
        MemoryError::Store(StoreError::NotFound { .. }) => not_found(id),
        other => other.into(),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SearchBody {
    query: String,
    #[serde(default)]
    kinds: Vec<String>,
    #[serde(default)]
    scope: Option<ScopeBody>,
    #[serde(default)]
    max_results: Option<usize>,
}

/// `POST …/memory/search {query, kinds?, scope?, maxResults?}` → `{results: [{item, score,
/// lexicalRank?, semanticRank?}], warnings}`.
async fn search(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(agent): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, RestError> {
    let access = Access::new(&state, caller, agent)?;
    let body: SearchBody = parse(&body)?;
    let (kind, subject) = match body.scope {
        Some(scope) => (Some(scope_kind(&scope.kind)?), scope.subject_id),
        None => (None, None),
    };
    let filter = access.filter(kind, subject, body.kinds).await?;
    let request = SearchRequest { query: body.query, filter, max_results: body.max_results };
    let found = state.memory.search(&request).await?;
    access.announce(&found.warnings);
    Ok(ok(json!({"results": found.results, "warnings": found.warnings})))
}

#[cfg(test)]
mod tests {
    use super::is_memory_path;

    #[test]
    fn memory_paths_are_told_from_agent_edits() {
        assert!(is_memory_path("/v1/agents/coder/memory/items"));
        assert!(is_memory_path("/v1/agents/coder/memory/items/abc"));
        assert!(is_memory_path("/v1/agents/coder/memory/search"));
        assert!(is_memory_path("/v1/agents/coder/memory/candidates"));
        assert!(is_memory_path("/v1/agents/coder/memory/candidates/mc-1/decision"));
        assert!(!is_memory_path("/v1/agents/coder"));
        assert!(!is_memory_path("/v1/agents/coder/skills"));
        assert!(!is_memory_path("/v1/agents/coder/memory"));
    }
}
