//! Keyset pagination: a page of items and an opaque cursor that resumes right after the last
//! one. Keyset (not offset) so that inserts between two page reads cause neither duplicates
//! nor gaps.

use serde::{Deserialize, Serialize};

use crate::error::StoreError;

/// Default page size.
pub const DEFAULT_PAGE: u32 = 100;
/// Largest page a store returns.
pub const MAX_PAGE: u32 = 1000;

/// An opaque position in a listing. Only pass back what a store returned.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Cursor(String);

impl Cursor {
    /// The wire form (for query strings and JSON).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Wrap a cursor received from a client; it is validated when used.
    pub fn from_wire(s: impl Into<String>) -> Self {
        Cursor(s.into())
    }

    /// Cursor after an item sorted by (creation time, id).
    pub(crate) fn at_time(created_ms: i64, id: &str) -> Self {
        Cursor(hex::encode(format!("t{created_ms}:{id}")))
    }

    /// Decode a (creation time, id) cursor.
    pub(crate) fn time_key(&self) -> Result<(i64, String), StoreError> {
        let raw = self.decoded()?;
        let rest = raw.strip_prefix('t').ok_or(StoreError::InvalidCursor)?;
        let (ms, id) = rest.split_once(':').ok_or(StoreError::InvalidCursor)?;
        Ok((ms.parse().map_err(|_| StoreError::InvalidCursor)?, id.to_owned()))
    }

    /// Cursor after an item sorted by a string key.
    pub(crate) fn at_key(key: &str) -> Self {
        Cursor(hex::encode(format!("k{key}")))
    }

    /// Decode a string-key cursor.
    pub(crate) fn key(&self) -> Result<String, StoreError> {
        self.decoded()?.strip_prefix('k').map(str::to_owned).ok_or(StoreError::InvalidCursor)
    }

    /// Cursor after an item with position `seq`.
    pub(crate) fn at_seq(seq: u64) -> Self {
        Cursor(hex::encode(format!("s{seq}")))
    }

    /// Decode a position cursor.
    pub(crate) fn seq(&self) -> Result<u64, StoreError> {
        let raw = self.decoded()?;
        raw.strip_prefix('s').and_then(|s| s.parse().ok()).ok_or(StoreError::InvalidCursor)
    }

    fn decoded(&self) -> Result<String, StoreError> {
        let bytes = hex::decode(&self.0).map_err(|_| StoreError::InvalidCursor)?;
        String::from_utf8(bytes).map_err(|_| StoreError::InvalidCursor)
    }
}

/// Which page to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageRequest {
    /// Resume after this cursor; `None` starts at the beginning.
    pub after: Option<Cursor>,
    /// Page size, clamped to 1..=1000.
    pub limit: u32,
}

impl Default for PageRequest {
    fn default() -> Self {
        Self { after: None, limit: DEFAULT_PAGE }
    }
}

impl PageRequest {
    /// The first page of `limit` items.
    pub fn first(limit: u32) -> Self {
        Self { after: None, limit }
    }

    /// The page after `cursor`.
    pub fn after(cursor: Cursor, limit: u32) -> Self {
        Self { after: Some(cursor), limit }
    }

    /// The effective page size.
    pub fn size(&self) -> usize {
        self.limit.clamp(1, MAX_PAGE) as usize
    }
}

/// One page of a listing.
#[derive(Debug, Clone, PartialEq)]
pub struct Page<T> {
    /// The items, in listing order.
    pub items: Vec<T>,
    /// Where the next page starts; `None` on the last page.
    pub next: Option<Cursor>,
}

impl<T> Page<T> {
    /// Build a page from up to `size + 1` items read in order: the extra item only proves
    /// there is a next page.
    pub(crate) fn from_overfetch(mut items: Vec<T>, size: usize, cursor_of: impl Fn(&T) -> Cursor) -> Self {
        let more = items.len() > size;
        items.truncate(size);
        let next = if more { items.last().map(cursor_of) } else { None };
        Page { items, next }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_foreign_ones_are_refused() {
        assert_eq!(Cursor::at_time(42, "a:b").time_key().unwrap(), (42, "a:b".to_owned()));
        assert_eq!(Cursor::at_seq(7).seq().unwrap(), 7);
        assert_eq!(Cursor::from_wire("zz").seq().unwrap_err().code(), "invalid_cursor");
        assert_eq!(Cursor::at_seq(7).time_key().unwrap_err().code(), "invalid_cursor");
    }
}
