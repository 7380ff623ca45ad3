//! The order in which cached sessions (or runs, records, record orders) were last used, so the
//! file store can drop the least recently used ones and keep its caches bounded over long runs.

use std::collections::{BTreeMap, HashMap};

/// Ids by last use: a tick per id and the ids by tick (oldest first).
#[derive(Debug, Default)]
pub(super) struct Recency {
    tick: u64,
    by_id: HashMap<String, u64>,
    order: BTreeMap<u64, String>,
}

impl Recency {
    /// Mark `id` as just used.
    pub(super) fn touch(&mut self, id: &str) {
        self.tick += 1;
        if let Some(old) = self.by_id.insert(id.to_owned(), self.tick) {
            self.order.remove(&old);
        }
        self.order.insert(self.tick, id.to_owned());
    }

    /// Stop tracking `id` (evicted or deleted).
    pub(super) fn forget(&mut self, id: &str) {
        if let Some(tick) = self.by_id.remove(id) {
            self.order.remove(&tick);
        }
    }

    /// How many ids are tracked.
    pub(super) fn len(&self) -> usize {
        self.by_id.len()
    }

    /// The tracked ids, least recently used first.
    pub(super) fn oldest_first(&self) -> impl Iterator<Item = &str> {
        self.order.values().map(String::as_str)
    }
}
