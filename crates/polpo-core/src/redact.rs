//! The redaction list: secret values (vault credentials) that must never leave the runtime in
//! a hook envelope, a tool result, an event or a log line.
//!
//! One [`Redactor`] is filled from the vault at start-up and refilled whenever the vault
//! changes; clones share the list, so every place that holds one sees the change at once.

use serde_json::Value;
use std::sync::{Arc, PoisonError, RwLock};

/// What replaces a secret value in redacted text.
pub const REDACTED_SECRET: &str = "[REDACTED]";

/// Values shorter than this are not redacted: a port number or a boolean flag stored next to a
/// password would otherwise blank unrelated text everywhere.
pub const MIN_SECRET_CHARS: usize = 4;

/// The shared list of secret values to cut out of outgoing text.
#[derive(Clone, Default)]
pub struct Redactor {
    secrets: Arc<RwLock<Arc<Vec<String>>>>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Redactor({} secrets)", self.secrets().len())
    }
}

impl Redactor {
    /// An empty list (nothing is redacted until [`Redactor::replace`] fills it).
    pub fn new() -> Self {
        Self::default()
    }

    /// Replace the list with `secrets` (short and duplicate values dropped, longest first, so
    /// a secret that contains another is cut whole).
    pub fn replace(&self, secrets: impl IntoIterator<Item = String>) {
        let mut list: Vec<String> = secrets.into_iter().filter(|s| s.chars().count() >= MIN_SECRET_CHARS).collect();
        list.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        list.dedup();
        *self.secrets.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(list);
    }

    /// The current list, longest first.
    pub fn secrets(&self) -> Arc<Vec<String>> {
        self.secrets.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// `text` with every secret replaced by [`REDACTED_SECRET`].
    pub fn redact_text(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for secret in self.secrets().iter() {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), REDACTED_SECRET);
            }
        }
        out
    }

    /// Every string inside `value` redacted in place (object keys included).
    pub fn redact_value(&self, value: &mut Value) {
        if self.secrets().is_empty() {
            return;
        }
        match value {
            Value::String(s) => *s = self.redact_text(s),
            Value::Array(items) => items.iter_mut().for_each(|v| self.redact_value(v)),
            Value::Object(map) => {
                let entries = std::mem::take(map);
                for (k, mut v) in entries {
                    self.redact_value(&mut v);
                    map.insert(self.redact_text(&k), v);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_cut_from_text_and_json_longest_first() {
        let r = Redactor::new();
        r.replace(["s3cret-token".to_string(), "s3cret".to_string(), "587".to_string()]);
        assert_eq!(r.redact_text("a s3cret-token b s3cret c 587"), "a [REDACTED] b [REDACTED] c 587");
        let mut v = serde_json::json!({"x": ["s3cret"], "s3cret": 1});
        r.redact_value(&mut v);
        assert_eq!(v, serde_json::json!({"x": ["[REDACTED]"], "[REDACTED]": 1}));
    }

    #[test]
    fn clones_share_the_list() {
        let r = Redactor::new();
        let clone = r.clone();
        r.replace(["hunter22".to_string()]);
        assert_eq!(clone.redact_text("pw hunter22"), "pw [REDACTED]");
    }
}
