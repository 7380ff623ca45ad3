//! API-key authentication, and who the caller is.
//!
//! Keys come from `POLPO_API_KEY` and the top-level `apiKeys`. Only SHA-256 digests are kept in
//! memory, configured keys may be written as `sha256:<hex>` so the project file need not hold
//! the key itself, and every check compares against every digest in constant time, so neither
//! timing nor the position of a match leaks anything.
//!
//! A request that passes is a [`Caller`]: the key's stable id (derived from its digest, never
//! the key) owns what the request creates, and a client key sees only what it owns. Keys marked
//! `admin` (and `POLPO_API_KEY`) see everything; without keys (local-only mode) the one local
//! user does.

use axum::http::HeaderMap;
use polpo_core::config::ApiKeyEntry;
use sha2::{Digest, Sha256};
use subtle::{ConditionallySelectable, ConstantTimeEq};

/// One accepted key.
#[derive(Clone)]
struct Known {
    digest: [u8; 32],
    admin: bool,
}

/// The set of accepted keys.
#[derive(Clone, Default)]
pub struct ApiKeys {
    known: Vec<Known>,
}

impl std::fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ApiKeys({} configured)", self.known.len())
    }
}

/// Who a request comes from, once authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The key id sessions and runs created by this caller are stored under; `None` without
    /// keys (local-only mode).
    pub owner: Option<String>,
    /// Sees every client's sessions and runs.
    pub admin: bool,
}

impl Caller {
    /// The one user of a server without keys: owns nothing in particular, sees everything.
    pub fn local() -> Self {
        Self { owner: None, admin: true }
    }

    /// Whether this caller may see something stored with `owner`: an admin sees everything,
    /// a client only what it created (so never what was created without a key).
    pub fn may_see(&self, owner: Option<&str>) -> bool {
        self.admin || (owner.is_some() && owner == self.owner.as_deref())
    }

    /// The owner a listing is narrowed to: none for an admin, the key id for a client.
    pub fn listing_owner(&self) -> Option<String> {
        if self.admin { None } else { self.owner.clone() }
    }
}

/// SHA-256 of a key, as stored.
pub fn digest(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

/// The `sha256:<hex>` form to write into `apiKeys` instead of the key itself.
pub fn hashed_form(key: &str) -> String {
    format!("sha256:{}", hex::encode(digest(key)))
}

/// The stable id a key's sessions and runs are stored under: a hash of the digest under its
/// own label, so the stored id is neither the key nor the digest `apiKeys` may hold.
pub fn key_id(digest: &[u8; 32]) -> String {
    let mut h = Sha256::new();
    h.update(b"polpo key id\0");
    h.update(digest);
    format!("key_{}", hex::encode(&h.finalize()[..8]))
}

impl ApiKeys {
    /// Keys from the environment value (an admin key) and the configured entries
    /// (`sha256:<hex>` or plain, optionally `{key, admin}`). Returns the key set and one
    /// warning per configured entry that was written in plain text or is unreadable.
    pub fn load(env_key: Option<&str>, configured: &[ApiKeyEntry]) -> (Self, Vec<String>) {
        let mut known = Vec::new();
        let mut warnings = Vec::new();
        if let Some(k) = env_key.map(str::trim).filter(|k| !k.is_empty()) {
            known.push(Known { digest: digest(k), admin: true });
        }
        for (i, entry) in configured.iter().enumerate() {
            let admin = entry.admin();
            match entry.key().strip_prefix("sha256:").map(hex::decode) {
                Some(Ok(bytes)) if bytes.len() == 32 => {
                    let mut d = [0u8; 32];
                    d.copy_from_slice(&bytes);
                    known.push(Known { digest: d, admin });
                }
                Some(_) => warnings.push(format!("apiKeys[{i}] is not a valid sha256:<64 hex> digest and was ignored")),
                None => {
                    known.push(Known { digest: digest(entry.key()), admin });
                    warnings.push(format!(
                        "apiKeys[{i}] is a plain-text key; store its digest instead: `printf %s '<key>' | polpo keys hash` prints the sha256:<hex> to write"
                    ));
                }
            }
        }
        (Self { known }, warnings)
    }

    /// True when no key is configured (the server then binds to localhost only).
    pub fn is_empty(&self) -> bool {
        self.known.is_empty()
    }

    /// The caller a presented key identifies, or `None` when it is no accepted key. Every
    /// configured digest is compared, in constant time, whatever matches.
    pub fn caller(&self, presented: &str) -> Option<Caller> {
        let d = digest(presented);
        let mut found = subtle::Choice::from(0u8);
        let mut admin = subtle::Choice::from(0u8);
        for known in &self.known {
            let eq = known.digest.ct_eq(&d);
            found |= eq;
            admin.conditional_assign(&subtle::Choice::from(u8::from(known.admin)), eq);
        }
        bool::from(found).then(|| Caller { owner: Some(key_id(&d)), admin: admin.into() })
    }

    /// Decide a request: the local caller when no key is configured, the key's caller when a
    /// valid key is presented as `Authorization: Bearer <key>` or `X-API-Key: <key>`, else
    /// `None`.
    pub fn authenticate(&self, headers: &HeaderMap) -> Option<Caller> {
        if self.is_empty() {
            return Some(Caller::local());
        }
        presented_key(headers).and_then(|k| self.caller(k))
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

    fn plain(k: &str) -> ApiKeyEntry {
        ApiKeyEntry::Plain(k.into())
    }

    #[test]
    fn hashed_and_plain_keys_both_authorize() {
        let (keys, warnings) =
            ApiKeys::load(Some("env-key"), &[plain(&hashed_form("file-key")), plain("plain"), plain("sha256:zz")]);
        assert!(
            keys.caller("env-key").is_some() && keys.caller("file-key").is_some() && keys.caller("plain").is_some()
        );
        assert!(keys.caller("wrong").is_none() && keys.caller("").is_none());
        assert_eq!(warnings.len(), 2);
        assert!(warnings[0].contains("polpo keys hash"), "{}", warnings[0]);
        assert!(!format!("{keys:?}").contains("key"), "debug output must not show keys");
    }

    #[test]
    fn the_env_key_and_marked_entries_are_admins_and_ids_never_show_the_key() {
        let admin = ApiKeyEntry::Detailed { key: hashed_form("boss"), admin: true };
        let (keys, _) = ApiKeys::load(Some("env-key"), &[plain("client"), admin]);
        assert!(keys.caller("env-key").unwrap().admin && keys.caller("boss").unwrap().admin);
        let client = keys.caller("client").unwrap();
        assert!(!client.admin);
        let id = client.owner.clone().unwrap();
        assert!(id.starts_with("key_") && !id.contains(&hex::encode(digest("client"))[..16]));
        assert_eq!(keys.caller("client").unwrap().owner, Some(id), "the id is stable");
        assert!(client.may_see(client.owner.as_deref()) && !client.may_see(None) && !client.may_see(Some("key_other")));
        assert!(Caller::local().may_see(None));
    }

    #[test]
    fn bearer_and_x_api_key_headers() {
        let (keys, _) = ApiKeys::load(Some("k1"), &[]);
        let mut h = HeaderMap::new();
        assert!(keys.authenticate(&h).is_none());
        h.insert("authorization", "Bearer k1".parse().unwrap());
        assert!(keys.authenticate(&h).is_some());
        let mut h = HeaderMap::new();
        h.insert("x-api-key", "k1".parse().unwrap());
        assert!(keys.authenticate(&h).is_some());
        h.insert("x-api-key", "k2".parse().unwrap());
        assert!(keys.authenticate(&h).is_none());
        assert_eq!(ApiKeys::default().authenticate(&HeaderMap::new()), Some(Caller::local()));
    }
}
