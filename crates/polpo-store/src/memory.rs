//! Typed memory items: what an agent or a person wants remembered, scoped (project, agent,
//! user, session), typed by kind, revisioned, and searchable through a lexical index on every
//! backend (SQLite FTS5, PostgreSQL full-text, an in-memory BM25 index for the file store).
//!
//! Vectors sit beside the items as derived data: each one with the [`EmbeddingIdentity`] that
//! made it, replaced when the item's content changes, and compared only with a query of the
//! same identity. The fusion of lexical and semantic candidates lives in `polpo-memory`; the
//! store only keeps items and vectors and answers the two candidate queries.

use std::collections::BTreeSet;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use polpo_core::embedding::EmbeddingIdentity;
use serde::{Deserialize, Serialize};

use crate::clock::IdGen;
use crate::error::StoreError;
use crate::page::{Cursor, Page, PageRequest};

/// The kinds of memory item (inventory §2.9); anything else is refused, so a typo never
/// becomes a kind nobody filters on.
pub const MEMORY_KINDS: [&str; 7] =
    ["fact", "preference", "style", "open_thread", "failure_pattern", "successful_episode", "procedure_hint"];
/// Largest item content in bytes: memory is recalled into prompts, so it stays small.
pub const MAX_MEMORY_CONTENT: usize = 16 * 1024;
/// Largest `source` (where the item came from) and scope subject, in bytes.
pub const MAX_MEMORY_LABEL: usize = 256;
/// Most candidates one search query returns.
pub const MAX_MEMORY_RESULTS: usize = 200;
/// Most query terms a lexical search uses; the rest are dropped (bounded work per query).
pub const MAX_QUERY_TERMS: usize = 32;
/// Largest vector the store keeps.
pub const MAX_VECTOR_DIMENSIONS: usize = 8192;

/// Whose memory an item is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScopeKind {
    /// Shared by every agent of the project.
    Project,
    /// One agent's (subject: the agent id).
    Agent,
    /// One end user's (subject: the user id).
    User,
    /// One session's (subject: the session id).
    Session,
}

impl ScopeKind {
    /// The wire and column spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ScopeKind::Project => "project",
            ScopeKind::Agent => "agent",
            ScopeKind::User => "user",
            ScopeKind::Session => "session",
        }
    }

    /// Parse the wire spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "project" => ScopeKind::Project,
            "agent" => ScopeKind::Agent,
            "user" => ScopeKind::User,
            "session" => ScopeKind::Session,
            _ => return None,
        })
    }
}

/// An item's scope: its kind and, except for `project`, whose it is. In a [`MemoryFilter`] a
/// scope without a subject selects every subject of that kind.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MemoryScope {
    /// Project, agent, user or session.
    pub kind: ScopeKind,
    /// The agent, user or session id; absent for `project`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject_id: Option<String>,
}

impl MemoryScope {
    /// The project-wide scope.
    pub fn project() -> Self {
        MemoryScope { kind: ScopeKind::Project, subject_id: None }
    }

    /// A scope of `kind` for `subject`.
    pub fn of(kind: ScopeKind, subject: impl Into<String>) -> Self {
        MemoryScope { kind, subject_id: Some(subject.into()) }
    }

    /// The subject as stored in a column (`""` for project).
    pub fn subject(&self) -> &str {
        self.subject_id.as_deref().unwrap_or("")
    }

    /// A stored item's scope must name its subject exactly when it is not `project`.
    pub fn check(&self) -> Result<(), StoreError> {
        match (&self.kind, &self.subject_id) {
            (ScopeKind::Project, None) => Ok(()),
            (ScopeKind::Project, Some(_)) => Err(StoreError::Invalid("a project scope has no subjectId".into())),
            (_, Some(s)) => check_label("scope subjectId", s),
            (kind, None) => Err(StoreError::Invalid(format!("a {} scope needs a subjectId", kind.as_str()))),
        }
    }

    /// Rebuild a scope from its two columns.
    pub(crate) fn from_columns(kind: &str, subject: &str) -> Result<Self, StoreError> {
        let kind =
            ScopeKind::parse(kind).ok_or_else(|| StoreError::Database(format!("unknown scope kind `{kind}`")))?;
        Ok(MemoryScope { kind, subject_id: (!subject.is_empty()).then(|| subject.to_owned()) })
    }

    /// True when this (filter) scope selects `item`'s scope.
    fn selects(&self, item: &MemoryScope) -> bool {
        self.kind == item.kind && (self.subject_id.is_none() || self.subject_id == item.subject_id)
    }
}

/// One stored memory item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryItem {
    /// Its id.
    pub id: String,
    /// Whose it is.
    pub scope: MemoryScope,
    /// One of [`MEMORY_KINDS`].
    pub kind: String,
    /// What is remembered (at most [`MAX_MEMORY_CONTENT`] bytes).
    pub content: String,
    /// Where it came from (`user`, `agent:coder`, `import` …).
    pub source: String,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it was last changed.
    pub updated_at: DateTime<Utc>,
    /// 1 at creation, bumped on every change; pass it back as `expectedRevision`.
    pub revision: u64,
}

/// A memory item to create.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewMemoryItem {
    /// The id to use; a fresh one when absent (a taken id is a `conflict`).
    #[serde(default)]
    pub id: Option<String>,
    /// Whose it is.
    pub scope: MemoryScope,
    /// One of [`MEMORY_KINDS`].
    pub kind: String,
    /// What is remembered.
    pub content: String,
    /// Where it came from.
    pub source: String,
}

/// A change to an item; absent fields stay. The scope never changes: moving an item to
/// another user's memory would be a way around who may read it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryItemPatch {
    /// A new kind.
    #[serde(default)]
    pub kind: Option<String>,
    /// New content (the item's vector is dropped: it described the old content).
    #[serde(default)]
    pub content: Option<String>,
    /// A new source.
    #[serde(default)]
    pub source: Option<String>,
}

/// Which items a list or search sees: empty lists mean "any".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryFilter {
    /// Items in any of these scopes (a scope without subject: every subject of its kind).
    pub scopes: Vec<MemoryScope>,
    /// Items of any of these kinds.
    pub kinds: Vec<String>,
}

impl MemoryFilter {
    /// True when `item` passes the filter (the file store's check; SQL builds the same test).
    pub fn matches(&self, item: &MemoryItem) -> bool {
        (self.scopes.is_empty() || self.scopes.iter().any(|s| s.selects(&item.scope)))
            && (self.kinds.is_empty() || self.kinds.contains(&item.kind))
    }
}

/// A search candidate with its backend score (higher is better; only the order matters).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScoredItem {
    /// The item.
    pub item: MemoryItem,
    /// BM25-like relevance for lexical candidates, cosine similarity for semantic ones.
    pub score: f64,
}

/// Typed memory items and their derived vectors.
#[async_trait]
pub trait MemoryItemStore: Send + Sync {
    /// Store a new item (revision 1, times now).
    async fn create_memory_item(&self, new: NewMemoryItem) -> Result<MemoryItem, StoreError>;

    /// The item, or `None`.
    async fn get_memory_item(&self, id: &str) -> Result<Option<MemoryItem>, StoreError>;

    /// Change an item; with `expected_revision`, only if it is still at that revision
    /// (`conflict` otherwise). A content change drops the item's vector.
    async fn update_memory_item(
        &self,
        id: &str,
        patch: MemoryItemPatch,
        expected_revision: Option<u64>,
    ) -> Result<MemoryItem, StoreError>;

    /// Delete an item and its vector (only at `expected_revision` when given). `false` when it
    /// did not exist.
    async fn delete_memory_item(&self, id: &str, expected_revision: Option<u64>) -> Result<bool, StoreError>;

    /// Items newest first by (creation time, id), filtered, one page at a time: items created
    /// while a client pages never shift the pages it has not read yet.
    async fn list_memory_items_page(
        &self,
        filter: &MemoryFilter,
        page: &PageRequest,
    ) -> Result<Page<MemoryItem>, StoreError>;

    /// The newest `limit` (≤ 1000) items the filter passes: the plain list.
    async fn list_memory_items(&self, filter: &MemoryFilter, limit: u32) -> Result<Vec<MemoryItem>, StoreError> {
        Ok(self.list_memory_items_page(filter, &PageRequest::first(limit)).await?.items)
    }

    /// Up to `limit` items matching any term of `query`, best first, from the backend's
    /// full-text index (ties by id). A query without terms finds nothing.
    async fn search_memory_lexical(
        &self,
        filter: &MemoryFilter,
        query: &str,
        limit: usize,
    ) -> Result<Vec<ScoredItem>, StoreError>;

    /// Keep `vector` (made by `identity`) for item `id` as it is at `revision`, replacing any
    /// vector it had: a `conflict` when the item has moved on (the vector would describe old
    /// content), `not_found` when it is gone.
    async fn put_memory_vector(
        &self,
        id: &str,
        revision: u64,
        identity: &EmbeddingIdentity,
        vector: &[f32],
    ) -> Result<(), StoreError>;

    /// Up to `limit` items whose vector was made by `identity`, most similar (cosine) to
    /// `query` first, ties by id. Vectors of other identities are never compared.
    async fn nearest_memory_items(
        &self,
        filter: &MemoryFilter,
        identity: &EmbeddingIdentity,
        query: &[f32],
        limit: usize,
    ) -> Result<Vec<ScoredItem>, StoreError>;
}

/// Check a new item and make it, with a fresh id unless one is given.
pub(crate) fn item_from_new(new: NewMemoryItem, now: DateTime<Utc>, ids: &dyn IdGen) -> Result<MemoryItem, StoreError> {
    let id = crate::model::id_or_new("memory item", new.id, ids)?;
    let item = MemoryItem {
        id,
        scope: new.scope,
        kind: new.kind,
        content: new.content,
        source: new.source,
        created_at: now,
        updated_at: now,
        revision: 1,
    };
    check_item(&item)?;
    Ok(item)
}

/// `current` after `patch`, honouring `expected_revision`; the second value says whether the
/// content changed (and the vector must go).
pub(crate) fn patched(
    current: &MemoryItem,
    patch: MemoryItemPatch,
    expected_revision: Option<u64>,
    now: DateTime<Utc>,
) -> Result<(MemoryItem, bool), StoreError> {
    crate::model::check_revision("memory item", &current.id, expected_revision, current.revision)?;
    let mut next = current.clone();
    if let Some(kind) = patch.kind {
        next.kind = kind;
    }
    if let Some(content) = patch.content {
        next.content = content;
    }
    if let Some(source) = patch.source {
        next.source = source;
    }
    next.updated_at = now;
    next.revision += 1;
    check_item(&next)?;
    let content_changed = next.content != current.content;
    Ok((next, content_changed))
}

fn check_item(item: &MemoryItem) -> Result<(), StoreError> {
    item.scope.check()?;
    if !MEMORY_KINDS.contains(&item.kind.as_str()) {
        return Err(StoreError::Invalid(format!(
            "memory kind `{}` is not one of {}",
            item.kind.chars().take(64).collect::<String>(),
            MEMORY_KINDS.join(", ")
        )));
    }
    if item.content.trim().is_empty() || item.content.len() > MAX_MEMORY_CONTENT {
        return Err(StoreError::Invalid(format!("memory content must be 1-{MAX_MEMORY_CONTENT} bytes")));
    }
    if item.source.len() > MAX_MEMORY_LABEL {
        return Err(StoreError::Invalid(format!("memory source must be at most {MAX_MEMORY_LABEL} bytes")));
    }
    Ok(())
}

fn check_label(what: &str, s: &str) -> Result<(), StoreError> {
    if s.is_empty() || s.len() > MAX_MEMORY_LABEL || s.chars().any(char::is_control) {
        return Err(StoreError::Invalid(format!(
            "{what} must be 1-{MAX_MEMORY_LABEL} bytes without control characters"
        )));
    }
    Ok(())
}

/// A vector the store can keep for `identity`.
pub(crate) fn check_vector(identity: &EmbeddingIdentity, vector: &[f32]) -> Result<(), StoreError> {
    if identity.dimensions == 0 || identity.dimensions > MAX_VECTOR_DIMENSIONS || vector.len() != identity.dimensions {
        return Err(StoreError::Invalid(format!(
            "a vector must have the identity's 1-{MAX_VECTOR_DIMENSIONS} dimensions ({} given, {} declared)",
            vector.len(),
            identity.dimensions
        )));
    }
    if vector.iter().any(|x| !x.is_finite()) {
        return Err(StoreError::Invalid("a vector holds a value that is not a finite number".into()));
    }
    Ok(())
}

/// The cursor after `item` in the newest-first listing.
pub(crate) fn cursor_of(item: &MemoryItem) -> Cursor {
    Cursor::at_time(item.created_at.timestamp_millis(), &item.id)
}

/// The search terms of a text: lower-cased runs of letters and digits, the same on every
/// backend (SQLite's `unicode61` and PostgreSQL's `simple` split the same way), distinct,
/// at most [`MAX_QUERY_TERMS`] for a query.
pub fn terms(text: &str) -> Vec<String> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for token in tokens(text) {
        if out.len() == MAX_QUERY_TERMS {
            break;
        }
        if seen.insert(token.clone()) {
            out.push(token);
        }
    }
    out
}

/// Every token of a text, in order, repeated ones included (what the BM25 index counts).
pub(crate) fn tokens(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric()).filter(|t| !t.is_empty()).map(str::to_lowercase)
}

/// Vector bytes as stored in SQL (little-endian `f32`s).
pub(crate) fn vector_bytes(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Stored vector bytes back into floats.
pub(crate) fn vector_from_bytes(bytes: &[u8]) -> Result<Vec<f32>, StoreError> {
    if !bytes.len().is_multiple_of(4) {
        return Err(StoreError::Database("a stored vector is not a whole number of floats".into()));
    }
    Ok(bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
}

/// Order candidates best first, ties by id, and keep `limit`: the same rule on every backend.
pub(crate) fn rank(mut scored: Vec<ScoredItem>, limit: usize) -> Vec<ScoredItem> {
    scored.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| a.item.id.cmp(&b.item.id)));
    scored.truncate(limit.min(MAX_MEMORY_RESULTS));
    scored
}

/// Build a page from items read newest first (one extra proving a next page).
pub(crate) fn page_of(items: Vec<MemoryItem>, page: &PageRequest) -> Page<MemoryItem> {
    Page::from_overfetch(items, page.size(), cursor_of)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terms_are_lowercased_distinct_and_bounded() {
        assert_eq!(terms("Dark-mode, DARK theme; café!"), vec!["dark", "mode", "theme", "café"]);
        let many: String = (0..100).map(|i| format!("w{i} ")).collect();
        assert_eq!(terms(&many).len(), MAX_QUERY_TERMS);
        assert!(terms("  ,;!  ").is_empty());
    }

    #[test]
    fn scopes_need_their_subject_and_filters_select_by_kind_and_subject() {
        assert!(MemoryScope::project().check().is_ok());
        assert_eq!(
            MemoryScope { kind: ScopeKind::User, subject_id: None }.check().unwrap_err().code(),
            "invalid_input"
        );
        let item = MemoryItem {
            id: "a".into(),
            scope: MemoryScope::of(ScopeKind::User, "u1"),
            kind: "fact".into(),
            content: "x".into(),
            source: String::new(),
            created_at: DateTime::UNIX_EPOCH,
            updated_at: DateTime::UNIX_EPOCH,
            revision: 1,
        };
        let any_user =
            MemoryFilter { scopes: vec![MemoryScope { kind: ScopeKind::User, subject_id: None }], kinds: vec![] };
        assert!(any_user.matches(&item));
        let other = MemoryFilter { scopes: vec![MemoryScope::of(ScopeKind::User, "u2")], kinds: vec![] };
        assert!(!other.matches(&item));
        let styles = MemoryFilter { scopes: vec![], kinds: vec!["style".into()] };
        assert!(!styles.matches(&item));
    }

    #[test]
    fn vectors_round_trip_through_bytes() {
        let v = vec![0.5f32, -1.25, 3.0];
        assert_eq!(vector_from_bytes(&vector_bytes(&v)).unwrap(), v);
        assert!(vector_from_bytes(&[1, 2, 3]).is_err());
    }
}
