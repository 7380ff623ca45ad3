//! A collection the file backend keeps in memory once read (tasks, missions, memory items), by
//! id and in listing order, so a page walks only the keys before its cursor instead of sorting
//! the whole collection for every page.

use std::collections::{BTreeSet, HashMap};
use std::ops::Bound;

use crate::error::StoreError;
use crate::page::{Cursor, Page, PageRequest};
use crate::work::{StoredMission, StoredTask};

/// What a collection is listed by: newest first by (creation time in ms, id).
pub(super) trait Listed {
    fn list_key(&self) -> (i64, String);
}

impl Listed for StoredTask {
    fn list_key(&self) -> (i64, String) {
        (self.task.created_at.timestamp_millis(), self.task.id.clone())
    }
}

impl Listed for StoredMission {
    fn list_key(&self) -> (i64, String) {
        (self.mission.created_at.timestamp_millis(), self.mission.id.clone())
    }
}

/// Items by id, with their listing keys in order.
#[derive(Debug)]
pub(super) struct Ordered<T> {
    by_id: HashMap<String, T>,
    order: BTreeSet<(i64, String)>,
}

impl<T> Default for Ordered<T> {
    fn default() -> Self {
        Ordered { by_id: HashMap::new(), order: BTreeSet::new() }
    }
}

impl<T: Listed> Ordered<T> {
    pub(super) fn insert(&mut self, id: String, item: T) {
        let key = item.list_key();
        if let Some(old) = self.by_id.insert(id, item) {
            let old_key = old.list_key();
            if old_key != key {
                self.order.remove(&old_key);
            }
        }
        self.order.insert(key);
    }

    pub(super) fn remove(&mut self, id: &str) -> Option<T> {
        let item = self.by_id.remove(id)?;
        self.order.remove(&item.list_key());
        Some(item)
    }

    pub(super) fn get(&self, id: &str) -> Option<&T> {
        self.by_id.get(id)
    }

    pub(super) fn contains_key(&self, id: &str) -> bool {
        self.by_id.contains_key(id)
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &T> {
        self.by_id.values()
    }

    /// A page newest first of the items `keep` accepts, resuming after the page's cursor.
    pub(super) fn page(&self, page: &PageRequest, keep: impl Fn(&T) -> bool) -> Result<Page<T>, StoreError>
    where
        T: Clone,
    {
        let after = page.after.as_ref().map(Cursor::time_key).transpose()?;
        let size = page.size();
        let items: Vec<T> = self
            .order
            .range((Bound::Unbounded, after.as_ref().map_or(Bound::Unbounded, Bound::Excluded)))
            .rev()
            .filter_map(|(_, id)| self.by_id.get(id))
            .filter(|item| keep(item))
            .take(size + 1)
            .cloned()
            .collect();
        Ok(Page::from_overfetch(items, size, |item| {
            let (ms, id) = item.list_key();
            Cursor::at_time(ms, &id)
        }))
    }
}
