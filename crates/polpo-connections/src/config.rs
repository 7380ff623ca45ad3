//! The shape of `.polpo/connections/<id>.json` and its checks: secrets may only be vault
//! references, so a Connection file can be committed and shown without leaking anything.

use crate::ConnectionError;
use serde::Deserialize;

/// One Connection as written in its file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Connection {
    /// The file name without `.json` (set by the loader).
    #[serde(skip)]
    pub id: String,
    /// The logical provider custom tools ask for (`sitoinchat`, `github`, …).
    pub provider: String,
    /// The scopes this Connection grants; a slot asking for more does not get it.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// How requests are authenticated.
    pub auth: Auth,
    /// Agents that may use it; absent: every agent of the project.
    #[serde(default)]
    pub agents: Option<Vec<String>>,
    /// End users (`invocation.user`) it is selected for; absent: every user.
    #[serde(default)]
    pub users: Option<Vec<String>>,
    /// A URL `polpo connections test` requests (GET) with the headers.
    #[serde(default)]
    pub test_url: Option<String>,
}

/// The authentication kinds. Fields named as secrets hold `${vault:service:key}` references.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Auth {
    /// `Authorization: Bearer <token>`.
    Bearer {
        /// Vault reference of the token.
        token: String,
    },
    /// One header, `name: value`.
    Header {
        /// Header name.
        name: String,
        /// Vault reference of the value.
        value: String,
    },
    /// `Authorization: Basic base64(username:password)`.
    Basic {
        /// User name (literal or a vault reference).
        username: String,
        /// Vault reference of the password.
        password: String,
    },
    /// OAuth2 client credentials: a bearer token fetched from `tokenUrl`, refreshed when it
    /// expires.
    #[serde(rename = "oauth2_client_credentials", rename_all = "camelCase")]
    OAuth2ClientCredentials {
        /// The token endpoint.
        token_url: String,
        /// Client id (literal or a vault reference).
        client_id: String,
        /// Vault reference of the client secret.
        client_secret: String,
        /// Scopes requested with the token.
        #[serde(default)]
        scopes: Vec<String>,
    },
}

impl Connection {
    /// Parse and check `bytes` as the Connection `id` (`file` names it in errors).
    pub fn parse(id: &str, file: &str, bytes: &[u8]) -> Result<Self, ConnectionError> {
        let invalid = |pointer: &str, message: String| ConnectionError::Invalid {
            file: file.into(),
            pointer: pointer.into(),
            message,
        };
        let mut connection: Connection = serde_json::from_slice(bytes).map_err(|e| invalid("", e.to_string()))?;
        connection.id = id.into();
        if connection.provider.trim().is_empty() {
            return Err(invalid("/provider", "must not be empty".into()));
        }
        let secrets: Vec<(&str, &str)> = match &connection.auth {
            Auth::Bearer { token } => vec![("/auth/token", token)],
            Auth::Header { name, value } => {
                if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
                    return Err(invalid("/auth/name", format!("`{name}` is not a header name")));
                }
                vec![("/auth/value", value)]
            }
            Auth::Basic { password, .. } => vec![("/auth/password", password)],
            Auth::OAuth2ClientCredentials { client_secret, token_url, .. } => {
                if reqwest::Url::parse(token_url).is_err() {
                    return Err(invalid("/auth/tokenUrl", "must be an absolute URL".into()));
                }
                vec![("/auth/clientSecret", client_secret)]
            }
        };
        for (pointer, value) in secrets {
            if !is_reference(value) {
                return Err(invalid(pointer, "secrets must be a vault reference `${vault:service:key}`".into()));
            }
        }
        Ok(connection)
    }

    /// Whether `agent` may use this Connection.
    pub fn allows_agent(&self, agent: &str) -> bool {
        self.agents.as_ref().is_none_or(|list| list.iter().any(|a| a == agent))
    }

    /// Whether it is selected for the end user `user`.
    pub fn serves_user(&self, user: Option<&str>) -> bool {
        match (&self.users, user) {
            (None, _) => true,
            (Some(list), Some(user)) => list.iter().any(|u| u == user),
            (Some(_), None) => false,
        }
    }
}

/// A value that is exactly one `${vault:service:key}` reference.
fn is_reference(value: &str) -> bool {
    value
        .strip_prefix("${vault:")
        .and_then(|rest| rest.strip_suffix('}'))
        .is_some_and(|inner| !inner.contains('}') && polpo_vault::parse_reference(inner).is_ok())
}
