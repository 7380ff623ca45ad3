//! One vault entry: a named set of credentials for one agent (or `*`, the whole project) and
//! one service, and the metadata every listing shows instead of it.

use crate::VaultError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The agent name of entries every agent of the project may use (Connections, for instance).
pub const PROJECT_SCOPE: &str = "*";

/// Credentials with their values. `Debug` shows only the keys.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The agent the entry belongs to, or [`PROJECT_SCOPE`].
    pub agent: String,
    /// The service name (`github`, `smtp`, `site-api`…), unique per agent.
    pub service: String,
    /// `api_key`, `login`, `oauth`, `smtp`, `imap` or `custom`; decides the required keys.
    #[serde(rename = "type")]
    pub kind: String,
    /// A human label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// The secret values by key.
    pub credentials: BTreeMap<String, String>,
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry").field("agent", &self.agent).field("service", &self.service).finish_non_exhaustive()
    }
}

/// What may be shown of an entry: everything but the values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EntryMeta {
    /// The agent (or `*`).
    pub agent: String,
    /// The service.
    pub service: String,
    /// The entry type.
    #[serde(rename = "type")]
    pub kind: String,
    /// The label, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// The credential keys (never their values).
    pub keys: Vec<String>,
}

/// Required credential keys per entry type.
const REQUIRED: &[(&str, &[&str])] = &[
    ("api_key", &["key"]),
    ("login", &["username", "password"]),
    ("oauth", &["access_token"]),
    ("smtp", &["host", "port", "user", "pass", "from"]),
    ("imap", &["host", "port", "user", "pass"]),
    ("custom", &[]),
];

/// Longest name (agent, service, credential key) accepted.
const MAX_NAME_CHARS: usize = 128;
/// Largest single credential value accepted, in bytes.
const MAX_VALUE_BYTES: usize = 64 * 1024;

impl Entry {
    /// The listing form.
    pub fn meta(&self) -> EntryMeta {
        EntryMeta {
            agent: self.agent.clone(),
            service: self.service.clone(),
            kind: self.kind.clone(),
            label: self.label.clone(),
            keys: self.credentials.keys().cloned().collect(),
        }
    }

    /// Checks names, the type, its required keys and sizes. The error never quotes a value.
    pub fn check(&self) -> Result<(), VaultError> {
        let bad = |m: String| Err(VaultError::InvalidEntry(m));
        for (what, name) in [("agent", &self.agent), ("service", &self.service)] {
            let project_wide = what == "agent" && name == PROJECT_SCOPE;
            if !(valid_name(name) || project_wide) {
                return bad(format!("{what} must match [A-Za-z0-9_.-]{{1,{MAX_NAME_CHARS}}}"));
            }
        }
        let Some((_, required)) = REQUIRED.iter().find(|(k, _)| *k == self.kind) else {
            let kinds: Vec<&str> = REQUIRED.iter().map(|(k, _)| *k).collect();
            return bad(format!("type `{}` is not one of {}", self.kind, kinds.join(", ")));
        };
        if self.credentials.is_empty() {
            return bad("credentials must not be empty".into());
        }
        if let Some(missing) = required.iter().find(|k| self.credentials.get(**k).is_none_or(|v| v.is_empty())) {
            return bad(format!("type `{}` requires the credential `{missing}`", self.kind));
        }
        for (key, value) in &self.credentials {
            if !valid_name(key) {
                return bad(format!("credential key `{key}` must match [A-Za-z0-9_.-]{{1,{MAX_NAME_CHARS}}}"));
            }
            if value.is_empty() || value.len() > MAX_VALUE_BYTES {
                return bad(format!("credential `{key}` must be 1 to {MAX_VALUE_BYTES} bytes"));
            }
        }
        Ok(())
    }
}

/// A name usable as agent, service or credential key.
pub(crate) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_CHARS
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}
