//! Project Connections: how tools and hooks authenticate to outside services without a secret
//! ever appearing in a config file, a tool argument or the model's view.
//!
//! A Connection is `.polpo/connections/<id>.json` ([`config`]): a provider, the scopes it
//! grants, and an authentication kind whose secrets are `${vault:service:key}` references.
//! [`Connections::headers`] turns one into request headers right before a call (OAuth2 client
//! credentials fetch a token and fetch a new one once it expires); [`Connections::select`]
//! picks the Connection for a custom tool's logical slot from the invocation's identity.

pub mod config;

pub use config::{Auth, Connection};

use base64::Engine as _;
use polpo_project::fsx;
use polpo_tools::net::{NetworkPolicy, OutboundRequest, send_guarded};
use polpo_vault::{Vault, VaultError};
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};
use reqwest::{Method, Url};
use serde::Deserialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

pub use polpo_project::paths::CONNECTIONS_DIR;
/// Largest Connection file read.
const MAX_FILE_BYTES: u64 = 64 * 1024;
/// Largest token endpoint answer read.
const MAX_TOKEN_BYTES: usize = 64 * 1024;
/// A token is refreshed this long before the expiry its endpoint announced.
const EXPIRY_MARGIN: Duration = Duration::from_secs(30);
/// Longest a token endpoint may take.
const TOKEN_TIMEOUT: Duration = Duration::from_secs(15);

/// Why a Connection could not be used. No variant carries a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnectionError {
    /// No file `.polpo/connections/<id>.json`.
    #[error("connection_not_found: no Connection `{0}` (.polpo/connections/{0}.json)")]
    NotFound(String),
    /// A Connection file that does not pass its checks.
    #[error("connection_invalid: {file}:{pointer}: {message}")]
    Invalid {
        /// The file, relative to the project.
        file: String,
        /// JSON pointer of the bad value.
        pointer: String,
        /// What is wrong.
        message: String,
    },
    /// No Connection serves the slot.
    #[error("connection_missing: no Connection of provider `{provider}` with scopes {scopes:?} for this invocation")]
    Missing {
        /// The provider asked for.
        provider: String,
        /// The scopes asked for.
        scopes: Vec<String>,
    },
    /// More than one Connection serves the slot.
    #[error("connection_ambiguous: Connections {0:?} all serve this slot; narrow them with `users` or `agents`")]
    Ambiguous(Vec<String>),
    /// Connections serve the provider, but not for this agent.
    #[error("connection_denied: Connections {ids:?} are not available to agent `{agent}`")]
    Denied {
        /// The matching Connections.
        ids: Vec<String>,
        /// The agent.
        agent: String,
    },
    /// A vault reference could not be resolved.
    #[error("{0}")]
    Vault(VaultError),
    /// The OAuth2 token endpoint failed.
    #[error("connection_token_failed: {0}")]
    Token(String),
    /// Reading the Connections folder failed.
    #[error("connection_io: {0}")]
    Io(String),
}

impl ConnectionError {
    /// Stable snake_case code.
    pub fn code(&self) -> &'static str {
        match self {
            ConnectionError::NotFound(_) => "connection_not_found",
            ConnectionError::Invalid { .. } => "connection_invalid",
            ConnectionError::Missing { .. } => "connection_missing",
            ConnectionError::Ambiguous(_) => "connection_ambiguous",
            ConnectionError::Denied { .. } => "connection_denied",
            ConnectionError::Vault(e) => e.code(),
            ConnectionError::Token(_) => "connection_token_failed",
            ConnectionError::Io(_) => "connection_io",
        }
    }
}

/// A custom tool's logical Connection slot: what it needs, never which Connection.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Slot {
    /// The provider.
    pub provider: String,
    /// Scopes the Connection must grant.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// Served only by a Connection selected for the invocation's end user (one naming
    /// `users`), never by a project-level one: the tool acts as that user or not at all.
    #[serde(default)]
    pub strict: bool,
}

/// The project's Connections, with the vault their secrets come from.
pub struct Connections {
    dir: PathBuf,
    vault: Result<Vault, VaultError>,
    network: NetworkPolicy,
    tokens: Mutex<HashMap<String, (String, Instant)>>,
}

impl std::fmt::Debug for Connections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connections").field("dir", &self.dir).finish_non_exhaustive()
    }
}

impl Connections {
    /// The Connections of the project whose folder is `polpo_dir`; secrets resolve through
    /// `vault` (its error when there is no key), token endpoints are reached under `network`.
    pub fn new(polpo_dir: &Path, vault: Result<Vault, VaultError>, network: NetworkPolicy) -> Self {
        Self { dir: polpo_dir.join(CONNECTIONS_DIR), vault, network, tokens: Mutex::default() }
    }

    /// Every Connection, by id. A bad file fails the listing with its file and pointer.
    pub fn list(&self) -> Result<Vec<Connection>, ConnectionError> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(ConnectionError::Io(e.to_string())),
        };
        let mut ids: Vec<String> = entries
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().to_str().and_then(|n| n.strip_suffix(".json")).map(str::to_owned))
            .filter(|id| !id.starts_with('.'))
            .collect();
        ids.sort();
        ids.iter().map(|id| self.get(id)).collect()
    }

    /// The Connection `id`.
    pub fn get(&self, id: &str) -> Result<Connection, ConnectionError> {
        let valid = !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        if !valid || id.starts_with('.') {
            return Err(ConnectionError::NotFound(id.into()));
        }
        let path = self.dir.join(format!("{id}.json"));
        let bytes = match fsx::read_bounded(&path, MAX_FILE_BYTES) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(ConnectionError::NotFound(id.into())),
            Err(e) => return Err(ConnectionError::Io(format!("{}: {e}", path.display()))),
        };
        Connection::parse(id, &format!(".polpo/{CONNECTIONS_DIR}/{id}.json"), &bytes)
    }

    /// The Connection serving `slot` for `agent` and the invocation's end user: the one of the
    /// slot's provider granting all its scopes and selected for the user (for a strict slot,
    /// selected for that user by name). None, several, or only ones the agent may not use fail
    /// before any tool code runs.
    pub fn select(&self, slot: &Slot, agent: &str, user: Option<&str>) -> Result<Connection, ConnectionError> {
        let matching: Vec<Connection> = self
            .list()?
            .into_iter()
            .filter(|c| c.provider == slot.provider && slot.scopes.iter().all(|s| c.scopes.contains(s)))
            .filter(|c| c.serves_user(user))
            .filter(|c| !slot.strict || c.users.is_some())
            .collect();
        let (allowed, denied): (Vec<_>, Vec<_>) = matching.into_iter().partition(|c| c.allows_agent(agent));
        match <[Connection; 1]>::try_from(allowed) {
            Ok([one]) => Ok(one),
            Err(allowed) if allowed.is_empty() && !denied.is_empty() => {
                Err(ConnectionError::Denied { ids: denied.into_iter().map(|c| c.id).collect(), agent: agent.into() })
            }
            Err(allowed) if allowed.is_empty() => {
                Err(ConnectionError::Missing { provider: slot.provider.clone(), scopes: slot.scopes.clone() })
            }
            Err(allowed) => Err(ConnectionError::Ambiguous(allowed.into_iter().map(|c| c.id).collect())),
        }
    }

    /// The request headers of Connection `id` used by `agent`, secrets resolved now.
    pub async fn headers(&self, id: &str, agent: &str) -> Result<Vec<(String, String)>, ConnectionError> {
        let connection = self.get(id)?;
        if !connection.allows_agent(agent) {
            return Err(ConnectionError::Denied { ids: vec![id.into()], agent: agent.into() });
        }
        self.headers_of(&connection, agent).await
    }

    /// [`Connections::headers`] of an already selected Connection.
    pub async fn headers_of(
        &self,
        connection: &Connection,
        agent: &str,
    ) -> Result<Vec<(String, String)>, ConnectionError> {
        let secret = |reference: &str| -> Result<String, ConnectionError> {
            let vault = self.vault.as_ref().map_err(|e| ConnectionError::Vault(e.clone()))?;
            vault.interpolate(agent, reference).map_err(ConnectionError::Vault)
        };
        Ok(match &connection.auth {
            Auth::Bearer { token } => vec![(AUTHORIZATION.to_string(), format!("Bearer {}", secret(token)?))],
            Auth::Header { name, value } => vec![(name.to_ascii_lowercase(), secret(value)?)],
            Auth::Basic { username, password } => {
                vec![(AUTHORIZATION.to_string(), basic(&secret(username)?, &secret(password)?))]
            }
            Auth::OAuth2ClientCredentials { token_url, client_id, client_secret, scopes } => {
                let cached = self.tokens.lock().unwrap_or_else(PoisonError::into_inner).get(&connection.id).cloned();
                let token = match cached {
                    Some((token, expires)) if Instant::now() < expires => token,
                    _ => {
                        let credentials = basic(&secret(client_id)?, &secret(client_secret)?);
                        let (token, lifetime) = self.fetch_token(token_url, credentials, scopes).await?;
                        let expires = Instant::now() + lifetime.saturating_sub(EXPIRY_MARGIN);
                        let mut tokens = self.tokens.lock().unwrap_or_else(PoisonError::into_inner);
                        tokens.insert(connection.id.clone(), (token.clone(), expires));
                        token
                    }
                };
                vec![(AUTHORIZATION.to_string(), format!("Bearer {token}"))]
            }
        })
    }

    /// POST the client-credentials grant; the token and how long it lives.
    async fn fetch_token(
        &self,
        token_url: &str,
        credentials: String,
        scopes: &[String],
    ) -> Result<(String, Duration), ConnectionError> {
        let fail = |m: String| ConnectionError::Token(m);
        let url = Url::parse(token_url).map_err(|e| fail(format!("invalid token URL: {e}")))?;
        let mut form = Url::parse("http://form.invalid/").map_err(|e| fail(e.to_string()))?;
        form.query_pairs_mut().append_pair("grant_type", "client_credentials");
        if !scopes.is_empty() {
            form.query_pairs_mut().append_pair("scope", &scopes.join(" "));
        }
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/x-www-form-urlencoded"));
        let mut auth =
            HeaderValue::from_str(&credentials).map_err(|_| fail("client credentials are not a header".into()))?;
        auth.set_sensitive(true);
        headers.insert(AUTHORIZATION, auth);
        let body = form.query().unwrap_or_default().as_bytes().to_vec();
        let request = OutboundRequest { method: Method::POST, url, headers, body: Some(body) };
        let exchange = async {
            let mut response = send_guarded(request, &self.network).await.map_err(|e| fail(e.message))?;
            let status = response.status();
            let mut raw = Vec::new();
            while let Some(chunk) = response.chunk().await.map_err(|e| fail(e.without_url().to_string()))? {
                raw.extend_from_slice(&chunk);
                if raw.len() > MAX_TOKEN_BYTES {
                    return Err(fail("the token endpoint answered more than 64 KiB".into()));
                }
            }
            if !status.is_success() {
                return Err(fail(format!("the token endpoint answered HTTP {}", status.as_u16())));
            }
            #[derive(Deserialize)]
            struct TokenAnswer {
                access_token: String,
                expires_in: Option<u64>,
            }
            let answer: TokenAnswer = serde_json::from_slice(&raw)
                .map_err(|_| fail("the token endpoint's answer has no access_token".into()))?;
            Ok((answer.access_token, Duration::from_secs(answer.expires_in.unwrap_or(3600))))
        };
        tokio::time::timeout(TOKEN_TIMEOUT, exchange)
            .await
            .unwrap_or_else(|_| Err(fail("the token endpoint timed out".into())))
    }
}

/// `Basic base64(user:password)`.
fn basic(user: &str, password: &str) -> String {
    format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}")))
}
