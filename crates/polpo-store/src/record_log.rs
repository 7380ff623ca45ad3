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

    /// `value` (a JSON object) with one more member, `key`, whose value is `json`: JSON text
    /// its writer serialised already, copied as it is rather than escaped into a string (a loop
    /// checkpoint's trace events, written once when they happened). `json` must be compact JSON,
    /// which the caller writes with serde: one holding a newline is refused (an entry is one
    /// line). Bounded as [`LogEntry::of`].
    pub fn of_with<T: Serialize + ?Sized>(value: &T, key: &str, json: &str) -> Result<Self, StoreError> {
        let invalid = |e: serde_json::Error| StoreError::Invalid(e.to_string());
        let mut text = serde_json::to_string(value).map_err(invalid)?;
        if !text.ends_with('}') || json.is_empty() || json.contains('\n') {
            return Err(StoreError::Invalid(format!("log entry member `{key}`: not an object and compact JSON")));
        }
        text.pop();
        if !text.ends_with('{') {
            text.push(',');
        }
        text.push_str(&serde_json::to_string(key).map_err(invalid)?);
        text.push(':');
        text.push_str(json);
        text.push('}');
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::{Value, json};

    fn parsed(entry: &LogEntry) -> Value {
        serde_json::from_str(entry.as_str()).unwrap()
    }

    #[test]
    fn a_member_written_already_is_copied_in_as_json() {
        let entry = LogEntry::of_with(&json!({"seq": 1, "s": "a\"b"}), "trace", r#"[{"id":"t-1"},"x"]"#).unwrap();
        assert_eq!(parsed(&entry), json!({"seq": 1, "s": "a\"b", "trace": [{"id": "t-1"}, "x"]}));
        let alone = LogEntry::of_with(&json!({}), "trace", "[]").unwrap();
        assert_eq!(parsed(&alone), json!({"trace": []}));
        assert!(!entry.as_str().contains('\n'), "one line");
    }

    #[test]
    fn a_member_that_would_break_the_line_or_no_object_is_refused() {
        for (value, member) in [(json!({}), "[\n1]"), (json!({}), ""), (json!([1]), "[]"), (json!("s"), "[]")] {
            assert_eq!(
                LogEntry::of_with(&value, "trace", member).unwrap_err().code(),
                "invalid_input",
                "{value} {member:?}"
            );
        }
        let big = format!("\"{}\"", "x".repeat(MAX_RECORD_BYTES));
        assert_eq!(LogEntry::of_with(&json!({}), "trace", &big).unwrap_err().code(), "invalid_input");
    }
}
