//! Typed memory items in the file backend.
//!
//! ```text
//! .polpo/memory-items/<id>.json     one item each, written atomically
//! .polpo/memory-vectors/<id>.json   its derived vector: identity, the item revision it describes, floats
//! ```
//!
//! Both folders are read whole on the first memory call (not at open), into the listing order
//! and an inverted index (term → item → count) that every write keeps up to date, so a search
//! scores only the items holding a query term (BM25), never every item. A vector file that
//! describes an older revision of its item (a crash between the item write and the vector's
//! removal) is ignored.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use polpo_core::embedding::EmbeddingIdentity;
use serde::{Deserialize, Serialize};

use super::ordered::{Listed, Ordered};
use super::{FileStore, Inner, fsio};
use crate::error::StoreError;
use crate::memory::{
    self as mem, MemoryFilter, MemoryItem, MemoryItemPatch, MemoryItemStore, NewMemoryItem, ScoredItem,
};
use crate::page::{Page, PageRequest};

const ITEMS: &str = "memory-items";
const VECTORS: &str = "memory-vectors";

/// BM25 parameters (the usual ones; SQLite's FTS5 uses the same).
const K1: f64 = 1.2;
const B: f64 = 0.75;

/// The memory part of the file store: nothing until first used.
#[derive(Debug, Default)]
pub(super) struct MemoryFiles {
    state: Mutex<Option<Loaded>>,
}

#[derive(Debug, Default)]
struct Loaded {
    items: Ordered<MemoryItem>,
    index: Inverted,
    vectors: HashMap<String, StoredVector>,
}

/// A vector file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StoredVector {
    identity: EmbeddingIdentity,
    /// The item revision whose content it was made from.
    item_revision: u64,
    vector: Vec<f32>,
}

impl Listed for MemoryItem {
    fn list_key(&self) -> (i64, String) {
        (self.created_at.timestamp_millis(), self.id.clone())
    }
}

/// The inverted index over item contents.
#[derive(Debug, Default)]
struct Inverted {
    /// term → item id → how often the term occurs in it.
    postings: HashMap<String, HashMap<String, u32>>,
    /// item id → its number of tokens.
    lengths: HashMap<String, u32>,
    total_tokens: u64,
}

impl Inverted {
    fn add(&mut self, id: &str, content: &str) {
        let mut length = 0u32;
        for token in mem::tokens(content) {
            length += 1;
            *self.postings.entry(token).or_default().entry(id.to_owned()).or_default() += 1;
        }
        self.lengths.insert(id.to_owned(), length);
        self.total_tokens += u64::from(length);
    }

    fn remove(&mut self, id: &str, content: &str) {
        for token in mem::tokens(content) {
            if let Some(items) = self.postings.get_mut(&token) {
                items.remove(id);
                if items.is_empty() {
                    self.postings.remove(&token);
                }
            }
        }
        if let Some(length) = self.lengths.remove(id) {
            self.total_tokens -= u64::from(length);
        }
    }

    /// BM25 of every item holding at least one of `terms`, for the items `keep` accepts.
    fn score(&self, terms: &[String], keep: impl Fn(&str) -> bool) -> HashMap<String, f64> {
        let n = self.lengths.len() as f64;
        let average = if n > 0.0 { self.total_tokens as f64 / n } else { 1.0 }.max(1.0);
        let mut scores: HashMap<String, f64> = HashMap::new();
        for term in terms {
            let Some(items) = self.postings.get(term) else { continue };
            let df = items.len() as f64;
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
            for (id, tf) in items {
                if !keep(id) {
                    continue;
                }
                let tf = f64::from(*tf);
                let length = f64::from(self.lengths.get(id).copied().unwrap_or(0));
                let weight = idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * length / average));
                *scores.entry(id.clone()).or_default() += weight;
            }
        }
        scores
    }
}

impl Inner {
    fn memory_path(&self, folder: &str, id: &str) -> PathBuf {
        self.dir.join(folder).join(format!("{id}.json"))
    }

    /// The memory state, read from disk on first use.
    fn memory(&self) -> Result<MutexGuard<'_, Option<Loaded>>, StoreError> {
        let mut state = self.memory.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if state.is_none() {
            *state = Some(self.load_memory()?);
        }
        Ok(state)
    }

    fn load_memory(&self) -> Result<Loaded, StoreError> {
        let mut loaded = Loaded::default();
        for folder in [ITEMS, VECTORS] {
            fsio::create_dir_durable(&self.dir.join(folder))?;
        }
        for path in super::json_files(&self.dir.join(ITEMS))? {
            if let Some(item) = fsio::read_json::<MemoryItem>(&path)? {
                loaded.index.add(&item.id, &item.content);
                loaded.items.insert(item.id.clone(), item);
            }
        }
        for path in super::json_files(&self.dir.join(VECTORS))? {
            let Some(id) = path.file_stem().and_then(|s| s.to_str()).map(str::to_owned) else { continue };
            let Some(vector) = fsio::read_json::<StoredVector>(&path)? else { continue };
            if loaded.items.get(&id).is_some_and(|item| item.revision == vector.item_revision) {
                loaded.vectors.insert(id, vector);
            }
        }
        Ok(loaded)
    }

    fn remove_vector_file(&self, id: &str) -> Result<(), StoreError> {
        let path = self.memory_path(VECTORS, id);
        match std::fs::remove_file(&path) {
            Ok(()) => fsio::sync_dir(&self.dir.join(VECTORS)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(StoreError::io(&path, e)),
        }
    }

    fn create_memory_item(&self, new: NewMemoryItem) -> Result<MemoryItem, StoreError> {
        let item = mem::item_from_new(new, self.now(), self.ids())?;
        let mut guard = self.memory()?;
        let state = loaded(&mut guard)?;
        if state.items.contains_key(&item.id) {
            return Err(StoreError::Conflict(format!("memory item `{}` already exists", item.id)));
        }
        fsio::write_json(&self.memory_path(ITEMS, &item.id), &item)?;
        state.index.add(&item.id, &item.content);
        state.items.insert(item.id.clone(), item.clone());
        Ok(item)
    }

    fn update_memory_item(
        &self,
        id: &str,
        patch: MemoryItemPatch,
        expected: Option<u64>,
    ) -> Result<MemoryItem, StoreError> {
        let now = self.now();
        let mut guard = self.memory()?;
        let state = loaded(&mut guard)?;
        let current = state.items.get(id).ok_or_else(|| StoreError::not_found("memory item", id))?.clone();
        let (next, content_changed) = mem::patched(&current, patch, expected, now)?;
        fsio::write_json(&self.memory_path(ITEMS, id), &next)?;
        if content_changed {
            state.index.remove(id, &current.content);
            state.index.add(id, &next.content);
            state.vectors.remove(id);
            self.remove_vector_file(id)?;
        }
        state.items.insert(id.to_owned(), next.clone());
        Ok(next)
    }

    fn delete_memory_item(&self, id: &str, expected: Option<u64>) -> Result<bool, StoreError> {
        let mut guard = self.memory()?;
        let state = loaded(&mut guard)?;
        let Some(current) = state.items.get(id).cloned() else { return Ok(false) };
        crate::model::check_revision("memory item", id, expected, current.revision)?;
        self.remove_vector_file(id)?;
        let path = self.memory_path(ITEMS, id);
        std::fs::remove_file(&path).map_err(|e| StoreError::io(&path, e))?;
        fsio::sync_dir(&self.dir.join(ITEMS))?;
        state.vectors.remove(id);
        state.index.remove(id, &current.content);
        state.items.remove(id);
        Ok(true)
    }

    fn put_memory_vector(
        &self,
        id: &str,
        revision: u64,
        identity: EmbeddingIdentity,
        vector: Vec<f32>,
    ) -> Result<(), StoreError> {
        mem::check_vector(&identity, &vector)?;
        let mut guard = self.memory()?;
        let state = loaded(&mut guard)?;
        let current = state.items.get(id).ok_or_else(|| StoreError::not_found("memory item", id))?;
        crate::model::check_revision("memory item", id, Some(revision), current.revision)?;
        let stored = StoredVector { identity, item_revision: revision, vector };
        fsio::write_json(&self.memory_path(VECTORS, id), &stored)?;
        state.vectors.insert(id.to_owned(), stored);
        Ok(())
    }
}

fn loaded<'a>(guard: &'a mut MutexGuard<'_, Option<Loaded>>) -> Result<&'a mut Loaded, StoreError> {
    guard.as_mut().ok_or_else(|| StoreError::Invalid("memory items are not loaded".into()))
}

#[async_trait]
impl MemoryItemStore for FileStore {
    async fn create_memory_item(&self, new: NewMemoryItem) -> Result<MemoryItem, StoreError> {
        self.blocking(move |s| s.create_memory_item(new)).await
    }

    async fn get_memory_item(&self, id: &str) -> Result<Option<MemoryItem>, StoreError> {
        let id = id.to_owned();
        self.blocking(move |s| Ok(loaded(&mut s.memory()?)?.items.get(&id).cloned())).await
    }

    async fn update_memory_item(
        &self,
        id: &str,
        patch: MemoryItemPatch,
        expected_revision: Option<u64>,
    ) -> Result<MemoryItem, StoreError> {
        let id = id.to_owned();
        self.blocking(move |s| s.update_memory_item(&id, patch, expected_revision)).await
    }

    async fn delete_memory_item(&self, id: &str, expected_revision: Option<u64>) -> Result<bool, StoreError> {
        let id = id.to_owned();
        self.blocking(move |s| s.delete_memory_item(&id, expected_revision)).await
    }

    async fn list_memory_items_page(
        &self,
        filter: &MemoryFilter,
        page: &PageRequest,
    ) -> Result<Page<MemoryItem>, StoreError> {
        let (filter, page) = (filter.clone(), page.clone());
        self.blocking(move |s| loaded(&mut s.memory()?)?.items.page(&page, |item| filter.matches(item))).await
    }

    async fn search_memory_lexical(
        &self,
        filter: &MemoryFilter,
        query: &str,
        limit: usize,
    ) -> Result<Vec<ScoredItem>, StoreError> {
        let terms = mem::terms(query);
        if terms.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        let filter = filter.clone();
        self.blocking(move |s| {
            let mut guard = s.memory()?;
            let state = loaded(&mut guard)?;
            let keep = |id: &str| state.items.get(id).is_some_and(|item| filter.matches(item));
            let scored = state
                .index
                .score(&terms, keep)
                .into_iter()
                .filter_map(|(id, score)| state.items.get(&id).map(|item| ScoredItem { item: item.clone(), score }))
                .collect();
            Ok(mem::rank(scored, limit))
        })
        .await
    }

    async fn put_memory_vector(
        &self,
        id: &str,
        revision: u64,
        identity: &EmbeddingIdentity,
        vector: &[f32],
    ) -> Result<(), StoreError> {
        let (id, identity, vector) = (id.to_owned(), identity.clone(), vector.to_vec());
        self.blocking(move |s| s.put_memory_vector(&id, revision, identity, vector)).await
    }

    async fn nearest_memory_items(
        &self,
        filter: &MemoryFilter,
        identity: &EmbeddingIdentity,
        query: &[f32],
        limit: usize,
    ) -> Result<Vec<ScoredItem>, StoreError> {
        mem::check_vector(identity, query)?;
        let (filter, identity, query) = (filter.clone(), identity.clone(), query.to_vec());
        self.blocking(move |s| {
            let mut guard = s.memory()?;
            let state = loaded(&mut guard)?;
            let scored = state
                .vectors
                .iter()
                .filter(|(_, v)| v.identity == identity)
                .filter_map(|(id, v)| state.items.get(id).map(|item| (item, v)))
                .filter(|(item, _)| filter.matches(item))
                .map(|(item, v)| ScoredItem {
                    item: item.clone(),
                    score: f64::from(polpo_core::embedding::cosine(&query, &v.vector)),
                })
                .collect();
            Ok(mem::rank(scored, limit))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bm25_prefers_rarer_terms_and_forgets_removed_items() {
        let mut index = Inverted::default();
        index.add("a", "the cat sat on the mat");
        index.add("b", "the dog sat");
        index.add("c", "the bird");
        let terms = |q: &str| mem::terms(q);
        let scores = index.score(&terms("cat the"), |_| true);
        assert!(scores["a"] > scores["b"], "the rare term `cat` lifts a: {scores:?}");
        index.remove("a", "the cat sat on the mat");
        assert!(index.score(&terms("cat"), |_| true).is_empty());
        assert_eq!(index.lengths.len(), 2);
        assert_eq!(index.total_tokens, 5);
    }
}
