//! JSON text written once: a value a writer converted to compact JSON, which a store keeps as
//! it is instead of converting a tree of it again.

use serde::Serialize;

use crate::error::StoreError;
use crate::model::MAX_RECORD_BYTES;

/// The compact JSON text of a value, converted once by its writer and stored as it is: an
/// entry of a record log (the file store appends it as one line, SQL binds it as the row's
/// value), or a record written whole from text ([`RecordStore::put_record_text`]). Compact
/// JSON never holds a raw newline, so it is always exactly one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonText(String);

impl JsonText {
    /// `value` as text; `invalid_input` when it cannot be converted to JSON or exceeds
    /// [`MAX_RECORD_BYTES`], as a record would.
    pub fn of<T: Serialize + ?Sized>(value: &T) -> Result<Self, StoreError> {
        let text = serde_json::to_string(value).map_err(|e| StoreError::Invalid(e.to_string()))?;
        if text.len() > MAX_RECORD_BYTES {
            return Err(StoreError::Invalid(format!("JSON text exceeds {MAX_RECORD_BYTES} bytes")));
        }
        Ok(Self(text))
    }

    /// `value` (a JSON object) with one more member, `key`, whose value is `json`: JSON text
    /// its writer serialised already, copied as it is rather than escaped into a string (a loop
    /// checkpoint's trace events, written once when they happened). `json` must be compact JSON,
    /// which the caller writes with serde: one holding a newline is refused (the text is one
    /// line). Bounded as [`JsonText::of`].
    pub fn of_with<T: Serialize + ?Sized>(value: &T, key: &str, json: &str) -> Result<Self, StoreError> {
        let object = serde_json::to_string(value).map_err(|e| StoreError::Invalid(e.to_string()))?;
        Self::object_with(object, key, json)
    }

    /// [`JsonText::of_with`] for an object its caller serialised with serde already (and then
    /// cut a member off: a loop run's record without its trace), given as its compact text.
    pub fn object_with(mut object: String, key: &str, json: &str) -> Result<Self, StoreError> {
        if !object.starts_with('{') || !object.ends_with('}') || json.is_empty() || json.contains('\n') {
            return Err(StoreError::Invalid(format!("JSON text member `{key}`: not an object and compact JSON")));
        }
        object.pop();
        if !object.ends_with('{') {
            object.push(',');
        }
        object.push_str(&serde_json::to_string(key).map_err(|e| StoreError::Invalid(e.to_string()))?);
        object.push(':');
        object.push_str(json);
        object.push('}');
        if object.len() > MAX_RECORD_BYTES {
            return Err(StoreError::Invalid(format!("JSON text exceeds {MAX_RECORD_BYTES} bytes")));
        }
        Ok(Self(object))
    }

    /// The JSON text (one line, no newline).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The JSON text, owned (what a store binds or writes).
    pub fn into_string(self) -> String {
        self.0
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::{Value, json};

    fn parsed(entry: &JsonText) -> Value {
        serde_json::from_str(entry.as_str()).unwrap()
    }

    #[test]
    fn a_member_written_already_is_copied_in_as_json() {
        let entry = JsonText::of_with(&json!({"seq": 1, "s": "a\"b"}), "trace", r#"[{"id":"t-1"},"x"]"#).unwrap();
        assert_eq!(parsed(&entry), json!({"seq": 1, "s": "a\"b", "trace": [{"id": "t-1"}, "x"]}));
        let alone = JsonText::of_with(&json!({}), "trace", "[]").unwrap();
        let cut = JsonText::object_with(r#"{"a":1}"#.into(), "trace", "[2]").unwrap();
        assert_eq!(parsed(&cut), json!({"a": 1, "trace": [2]}));
        assert_eq!(parsed(&alone), json!({"trace": []}));
        assert!(!entry.as_str().contains('\n'), "one line");
    }

    #[test]
    fn a_member_that_would_break_the_line_or_no_object_is_refused() {
        for (value, member) in [(json!({}), "[\n1]"), (json!({}), ""), (json!([1]), "[]"), (json!("s"), "[]")] {
            assert_eq!(
                JsonText::of_with(&value, "trace", member).unwrap_err().code(),
                "invalid_input",
                "{value} {member:?}"
            );
        }
        for object in ["[1]", "\"s\"", "{\"a\":1", ""] {
            assert_eq!(
                JsonText::object_with(object.into(), "trace", "[]").unwrap_err().code(),
                "invalid_input",
                "{object}"
            );
        }
        let big = format!("\"{}\"", "x".repeat(MAX_RECORD_BYTES));
        assert_eq!(JsonText::of_with(&json!({}), "trace", &big).unwrap_err().code(), "invalid_input");
    }
}
