//! Record logs: append-only logs of JSON entries beside a collection's records
//! ([`RecordStore::append_log`](crate::RecordStore::append_log)), for state written at a high
//! rate — a loop run's checkpoint after every step — where rewriting a whole record each time
//! costs a temp file, a rename and a directory fsync on the file store.

use crate::error::StoreError;
use crate::model::validate_id;

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
