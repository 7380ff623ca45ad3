//! API-key authentication.
//!
//! Keys come from `POLPO_API_KEY` and `settings.apiKeys`. Only SHA-256 digests are kept in
//! memory, configured keys may be written as `sha256:<hex>` so the project file need not hold
//! the key itself, and every check compares against every digest in constant time, so neither
//! timing nor the position of a match leaks anything.

use axum::http::HeaderMap;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The set of accepted keys.
#[derive(Clone, Default)]
pub struct ApiKeys {
    digests: Vec<[u8; 32]>,
}

impl std::fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ApiKeys({} configured)", self.digests.len())
    }
}

/// SHA-256 of a key, as stored.
pub fn digest(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

/// The `sha256:<hex>` form to write into `settings.apiKeys` instead of the key itself.
pub fn hashed_form(key: &str) -> String {
    format!("sha256:{}", hex::encode(digest(key)))
}

impl ApiKeys {
    /// Keys from the environment value and the configured entries (`sha256:<hex>` or plain).
    /// Returns the key set and one warning per configured entry that was written in plain text.
    pub fn load(env_key: Option<&str>, configured: &[String]) -> (Self, Vec<String>) {
        let mut digests = Vec::new();
        let mut warnings = Vec::new();
        if let Some(k) = env_key.map(str::trim).filter(|k| !k.is_empty()) {
            digests.push(digest(k));
        }
        for (i, entry) in configured.iter().enumerate() {
            match entry.strip_prefix("sha256:").map(hex::decode) {
                Some(Ok(bytes)) if bytes.len() == 32 => {
                    let mut d = [0u8; 32];
                    d.copy_from_slice(&bytes);
                    digests.push(d);
                }
                Some(_) => warnings.push(format!("settings.apiKeys[{i}] is not a valid sha256:<64 hex> digest and was ignored")),
                None => {
                    digests.push(digest(entry));
                    warnings.push(format!("settings.apiKeys[{i}] is a plain-text key; store `{}` instead", "sha256:<hex> (see `polpo keys hash`)"));
                }
            }
        }
        (Self { digests }, warnings)
    }

    /// True when no key is configured (the server then binds to localhost only).
    pub fn is_empty(&self) -> bool {
        self.digests.is_empty()
    }

    /// Constant-time check of a presented key against every configured digest.
    pub fn accepts(&self, presented: &str) -> bool {
        let d = digest(presented);
        let mut ok = subtle::Choice::from(0u8);
        for known in &self.digests {
            ok |= known.ct_eq(&d);
        }
        ok.into()
    }

    /// Decide a request: `true` when no key is configured or a valid key is presented as
    /// `Authorization: Bearer <key>` or `X-API-Key: <key>`.
    pub fn authorizes(&self, headers: &HeaderMap) -> bool {
        if self.is_empty() {
            return true;
        }
        presented_key(headers).is_some_and(|k| self.accepts(k))
    }
}

/// The key a request presents, if any.
pub fn presented_key(headers: &HeaderMap) -> Option<&str> {
    if let Some(v) = headers.get(axum::http::header::AUTHORIZATION).and_then(|v| v.to_str().ok()) {
        let v = v.trim();
        if v.len() > 7 && v[..7].eq_ignore_ascii_case("bearer ") {
            return Some(v[7..].trim());
        }
    }
    headers.get("x-api-key").and_then(|v| v.to_str().ok()).map(str::trim)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashed_and_plain_keys_both_authorize() {
        let (keys, warnings) = ApiKeys::load(Some("env-key"), &[hashed_form("file-key"), "plain".into(), "sha256:zz".into()]);
        assert!(keys.accepts("env-key") && keys.accepts("file-key") && keys.accepts("plain"));
        assert!(!keys.accepts("wrong") && !keys.accepts(""));
        assert_eq!(warnings.len(), 2);
        assert!(!format!("{keys:?}").contains("key"), "debug output must not show keys");
    }

    #[test]
    fn bearer_and_x_api_key_headers() {
        let (keys, _) = ApiKeys::load(Some("k1"), &[]);
        let mut h = HeaderMap::new();
        assert!(!keys.authorizes(&h));
        h.insert("authorization", "Bearer k1".parse().unwrap());
        assert!(keys.authorizes(&h));
        let mut h = HeaderMap::new();
        h.insert("x-api-key", "k1".parse().unwrap());
        assert!(keys.authorizes(&h));
        h.insert("x-api-key", "k2".parse().unwrap());
        assert!(!keys.authorizes(&h));
        assert!(ApiKeys::default().authorizes(&HeaderMap::new()));
    }
}
