//! Record logs: append-only logs of JSON entries beside a collection's records
//! ([`RecordStore::append_log`](crate::RecordStore::append_log)), for state written at a high
//! rate — a loop run's checkpoint after every step — where rewriting a whole record each time
//! costs a temp file, a rename and a directory fsync on the file store.

use serde::Serialize;

use crate::error::StoreError;
use crate::model::{MAX_RECORD_BYTES, validate_id};

/// One entry of a record log: the compact JSON text of a value, converted once by its writer
/// (the file store appends it as one line, SQL binds it as the row's value). Compact JSON never
/// holds a raw newline, so an entry is always exactly one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry(String);

impl LogEntry {
    /// `value` as an entry; `invalid_input` when it cannot be converted to JSON or exceeds
    /// [`MAX_RECORD_BYTES`], as a record would.
    pub fn of<T: Serialize + ?Sized>(value: &T) -> Result<Self, StoreError> {
        let text = serde_json::to_string(value).map_err(|e| StoreError::Invalid(e.to_string()))?;
        if text.len() > MAX_RECORD_BYTES {
            return Err(StoreError::Invalid(format!("log entry exceeds {MAX_RECORD_BYTES} bytes")));
        }
        Ok(Self(text))
    }

    /// The entry's JSON text (one line, no newline).
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Check a log's collection and name before they name a file or a row.
pub(crate) fn check_log(collection: &str, log: &str) -> Result<(), StoreError> {
    validate_id("collection", collection)?;
    validate_id("log", log)
}

/// The record id SQL keeps entry `seq` of `log` under, in the log's collection (so a copy of
/// the store carries it like any record): the log's name, a dot, the number zero-padded so the
/// ids sort in order.
pub(crate) fn sql_entry_id(log: &str, seq: u64) -> String {
    format!("{}{seq:020}", sql_entry_prefix(log))
}

/// What every id of `log`'s entries starts with (see [`sql_entry_id`]).
pub(crate) fn sql_entry_prefix(log: &str) -> String {
    format!("{log}.")
}
