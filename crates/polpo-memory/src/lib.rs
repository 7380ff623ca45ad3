//! Typed memory above the store: writes that keep each item's vector in step with its content,
//! hybrid search (the store's lexical index plus nearest vectors, fused by reciprocal rank),
//! `reindex`, and the `memory_item_*` tools an agent gets only when its `allowedTools` names
//! them.
//!
//! The embedder is optional ([`Memory::new`] takes `Option<Arc<dyn Embedder>>`): without one,
//! search is lexical only. With one, a provider outage degrades search to lexical with a
//! [`MemoryWarning`] for the caller to announce (`embeddingFailureMode: fallback`, the default),
//! or fails it (`fail`); an aborted request always stops. Vectors are derived data: an item
//! whose vector could not be made is still stored, and `reindex` makes the missing ones.
//! Nothing here mounts routes or touches a prompt: a host wires what it wants.

mod fusion;
pub mod learning;
pub mod tools;

use std::sync::Arc;

use polpo_embed::{EmbedError, Embedder, EmbeddingIdentity};
use polpo_store::{
    MemoryFilter, MemoryItem, MemoryItemPatch, MemoryItemStore, NewMemoryItem, Page, PageRequest, StoreError,
};
use serde::Serialize;

pub use fusion::{RRF_K, SearchHit, fuse};
pub use tools::{MEMORY_ITEM_TOOLS, MemoryToolSource, memory_item_tools};

/// Default number of search results.
pub const DEFAULT_RESULTS: usize = 10;
/// Most search results one query returns.
pub const MAX_RESULTS: usize = 100;
/// Candidates taken from each retriever before fusion.
pub const CANDIDATES: usize = 50;
/// Largest search query, in bytes.
pub const MAX_QUERY_BYTES: usize = 4096;
/// Items embedded per provider call during `reindex`.
const REINDEX_BATCH: u32 = 32;

/// What search does when the embedder fails (`settings.memory.embeddingFailureMode`).
pub use polpo_core::config::settings::EmbeddingFailureMode;

/// Something the caller should announce (an event, a log line) without failing the request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemoryWarning {
    /// Stable code, e.g. `embedding_unavailable`.
    pub code: String,
    /// What happened and what was done instead.
    pub message: String,
}

impl MemoryWarning {
    fn embedding(e: &EmbedError, instead: &str) -> Self {
        MemoryWarning { code: e.code().to_owned(), message: format!("{e}; {instead}") }
    }
}

/// Why a memory operation failed.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// The store refused or failed (`not_found`, `conflict`, `invalid_input` …).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Embedding failed where it could not be worked around (aborted, or mode `fail`).
    #[error(transparent)]
    Embed(#[from] EmbedError),
    /// The request itself is not acceptable (empty or oversized query).
    #[error("invalid memory request: {0}")]
    Invalid(String),
}

impl MemoryError {
    /// The stable code (the store's or the embedder's).
    pub fn code(&self) -> &'static str {
        match self {
            MemoryError::Store(e) => e.code(),
            MemoryError::Embed(e) => e.code(),
            MemoryError::Invalid(_) => "invalid_input",
        }
    }
}

/// A write and what the caller should announce about it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Written {
    /// The item as stored.
    pub item: MemoryItem,
    /// Set when its vector could not be made (the item is stored; `reindex` makes it later).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<MemoryWarning>,
}

/// One search.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SearchRequest {
    /// The text to look for.
    pub query: String,
    /// Which items may be found.
    pub filter: MemoryFilter,
    /// How many results (default [`DEFAULT_RESULTS`], at most [`MAX_RESULTS`]).
    pub max_results: Option<usize>,
}

/// What a search found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchOutcome {
    /// Best first.
    pub results: Vec<SearchHit>,
    /// Set when semantic retrieval was skipped (the embedder failed and search fell back).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<MemoryWarning>,
}

/// What `reindex` did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ReindexReport {
    /// Items that got a fresh vector.
    pub embedded: usize,
    /// Items that changed while being embedded (their own write embeds them).
    pub skipped: usize,
}

/// Typed memory over one store, with an optional embedder.
#[derive(Clone)]
pub struct Memory {
    store: Arc<dyn MemoryItemStore>,
    embedder: Option<Arc<dyn Embedder>>,
    failure_mode: EmbeddingFailureMode,
}

impl std::fmt::Debug for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memory")
            .field("embedder", &self.embedder.as_ref().map(|e| e.identity().clone()))
            .field("failure_mode", &self.failure_mode)
            .finish_non_exhaustive()
    }
}

impl Memory {
    /// Memory over `store`; semantic retrieval only when `embedder` is given.
    pub fn new(store: Arc<dyn MemoryItemStore>, embedder: Option<Arc<dyn Embedder>>) -> Self {
        Memory { store, embedder, failure_mode: EmbeddingFailureMode::default() }
    }

    /// Choose what search does when the embedder fails.
    pub fn with_failure_mode(mut self, mode: EmbeddingFailureMode) -> Self {
        self.failure_mode = mode;
        self
    }

    /// The identity vectors are made and compared with, when there is an embedder.
    pub fn identity(&self) -> Option<&EmbeddingIdentity> {
        self.embedder.as_ref().map(|e| e.identity())
    }

    /// Store a new item and, with an embedder, its vector.
    pub async fn create(&self, new: NewMemoryItem) -> Result<Written, MemoryError> {
        let item = self.store.create_memory_item(new).await?;
        self.embedded(item).await
    }

    /// The item, or `None`.
    pub async fn get(&self, id: &str) -> Result<Option<MemoryItem>, MemoryError> {
        Ok(self.store.get_memory_item(id).await?)
    }

    /// Change an item (compare-and-set on `expected_revision` when given); new content gets a
    /// new vector.
    pub async fn update(
        &self,
        id: &str,
        patch: MemoryItemPatch,
        expected_revision: Option<u64>,
    ) -> Result<Written, MemoryError> {
        let content_changes = patch.content.is_some();
        let item = self.store.update_memory_item(id, patch, expected_revision).await?;
        if content_changes { self.embedded(item).await } else { Ok(Written { item, warnings: Vec::new() }) }
    }

    /// Delete an item and its vector; `false` when it did not exist.
    pub async fn delete(&self, id: &str, expected_revision: Option<u64>) -> Result<bool, MemoryError> {
        Ok(self.store.delete_memory_item(id, expected_revision).await?)
    }

    /// One page of items, newest first.
    pub async fn list_page(&self, filter: &MemoryFilter, page: &PageRequest) -> Result<Page<MemoryItem>, MemoryError> {
        Ok(self.store.list_memory_items_page(filter, page).await?)
    }

    /// Lexical candidates plus, with an embedder, semantic ones, fused by reciprocal rank.
    pub async fn search(&self, request: &SearchRequest) -> Result<SearchOutcome, MemoryError> {
        let query = request.query.trim();
        if query.is_empty() || query.len() > MAX_QUERY_BYTES {
            return Err(MemoryError::Invalid(format!("query must be 1-{MAX_QUERY_BYTES} bytes")));
        }
        let limit = request.max_results.unwrap_or(DEFAULT_RESULTS).clamp(1, MAX_RESULTS);
        let lexical = self.store.search_memory_lexical(&request.filter, query, CANDIDATES.max(limit)).await?;
        let mut warnings = Vec::new();
        let semantic = match &self.embedder {
            None => Vec::new(),
            Some(embedder) => match embedder.embed(&[query.to_owned()]).await.and_then(one_vector) {
                // A vector pointing nowhere near the query (cosine ≤ 0) is no candidate.
                Ok(vector) => self
                    .store
                    .nearest_memory_items(&request.filter, embedder.identity(), &vector, CANDIDATES.max(limit))
                    .await?
                    .into_iter()
                    .filter(|c| c.score > 0.0)
                    .collect(),
                Err(EmbedError::Aborted) => return Err(EmbedError::Aborted.into()),
                Err(e) if self.failure_mode == EmbeddingFailureMode::Fail => return Err(e.into()),
                Err(e) => {
                    tracing::warn!(code = e.code(), error = %e, "memory search fell back to lexical retrieval");
                    warnings.push(MemoryWarning::embedding(&e, "search used lexical retrieval only"));
                    Vec::new()
                }
            },
        };
        Ok(SearchOutcome { results: fuse(lexical, semantic, limit), warnings })
    }

    /// Make the vector of every item the filter passes with the current embedder, replacing
    /// vectors of any other identity. Without an embedder there is nothing to do. Stops at
    /// the first embedding failure (nothing is half-written: each vector is its own write).
    pub async fn reindex(&self, filter: &MemoryFilter) -> Result<ReindexReport, MemoryError> {
        let Some(embedder) = &self.embedder else { return Ok(ReindexReport::default()) };
        let mut report = ReindexReport::default();
        let mut page = PageRequest::first(REINDEX_BATCH);
        loop {
            let batch = self.store.list_memory_items_page(filter, &page).await?;
            let texts: Vec<String> = batch.items.iter().map(|i| i.content.clone()).collect();
            if !texts.is_empty() {
                let vectors = embedder.embed(&texts).await?;
                if vectors.len() != texts.len() {
                    return Err(
                        EmbedError::Invalid(format!("{} vectors for {} texts", vectors.len(), texts.len())).into()
                    );
                }
                for (item, vector) in batch.items.iter().zip(vectors) {
                    match self.store.put_memory_vector(&item.id, item.revision, embedder.identity(), &vector).await {
                        Ok(()) => report.embedded += 1,
                        Err(StoreError::Conflict(_) | StoreError::NotFound { .. }) => report.skipped += 1,
                        Err(e) => return Err(e.into()),
                    }
                }
            }
            match batch.next {
                Some(cursor) => page = PageRequest::after(cursor, REINDEX_BATCH),
                None => return Ok(report),
            }
        }
    }

    /// Give `item` its vector when there is an embedder; a failure leaves a warning, not an
    /// error: the item is stored, and `reindex` makes the vector later.
    async fn embedded(&self, item: MemoryItem) -> Result<Written, MemoryError> {
        let mut warnings = Vec::new();
        if let Some(embedder) = &self.embedder {
            let made = embedder.embed(std::slice::from_ref(&item.content)).await.and_then(one_vector);
            match made {
                Ok(vector) => {
                    match self.store.put_memory_vector(&item.id, item.revision, embedder.identity(), &vector).await {
                        // A newer write got there first and embeds its own content.
                        Ok(()) | Err(StoreError::Conflict(_) | StoreError::NotFound { .. }) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                Err(e) => {
                    tracing::warn!(item = %item.id, code = e.code(), error = %e, "memory item stored without a vector");
                    warnings.push(MemoryWarning::embedding(&e, "the item is stored without a vector; reindex later"));
                }
            }
        }
        Ok(Written { item, warnings })
    }
}

fn one_vector(mut vectors: Vec<Vec<f32>>) -> Result<Vec<f32>, EmbedError> {
    match (vectors.pop(), vectors.is_empty()) {
        (Some(v), true) => Ok(v),
        _ => Err(EmbedError::Invalid("expected exactly one vector".into())),
    }
}
