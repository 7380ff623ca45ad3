//! An `mcpServers` entry checked into what can be connected: a program to start, or a URL.

use polpo_core::config::agent::McpServer;
use polpo_core::config::enums::McpTransport;
use std::collections::BTreeMap;

/// How a secret is named in an `mcpServers` value: `${vault:service:key}`.
const VAULT_REFERENCE: &str = "${vault:";

/// How to reach one MCP server.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ServerSpec {
    /// A child process speaking JSON-RPC over stdin/stdout, started in the tool sandbox.
    Stdio {
        /// Program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Extra environment on top of the sandbox's allow-list.
        env: BTreeMap<String, String>,
    },
    /// A server reached over HTTP.
    Http {
        /// Endpoint: the streamable-HTTP URL, or the legacy SSE stream's.
        url: String,
        /// Headers sent with every request.
        headers: BTreeMap<String, String>,
        /// Which of the two HTTP transports the server speaks.
        wire: HttpWire,
    },
}

/// The MCP transports over HTTP: configs still name the legacy one (`"type": "sse"`), which
/// older servers are the only ones to speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HttpWire {
    /// Streamable HTTP (`"type": "http"`), spoken by rmcp's own client.
    Streamable,
    /// The 2024-11-05 HTTP+SSE transport (`"type": "sse"`): a GET stream plus POSTed messages.
    LegacySse,
}

/// Why an entry cannot be connected; `code` is stable snake_case.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct SpecError {
    /// `invalid_mcp_server`.
    pub code: &'static str,
    /// A sentence naming the server.
    pub message: String,
}

impl ServerSpec {
    /// The connectable form of entry `name`, or why there is none.
    pub fn from_config(name: &str, server: &McpServer) -> Result<Self, SpecError> {
        let invalid =
            |what: &str| SpecError { code: "invalid_mcp_server", message: format!("MCP server `{name}`: {what}") };
        match server.transport {
            McpTransport::Stdio => {
                let command = server.command.clone().filter(|c| !c.trim().is_empty());
                Ok(Self::Stdio {
                    command: command.ok_or_else(|| invalid("a stdio server needs `command`"))?,
                    args: server.args.clone().unwrap_or_default(),
                    env: server.env.clone().unwrap_or_default(),
                })
            }
            McpTransport::Http | McpTransport::Sse => {
                let url = server.url.clone().ok_or_else(|| invalid("an http or sse server needs `url`"))?;
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(invalid("`url` must be http:// or https://"));
                }
                let wire =
                    if server.transport == McpTransport::Sse { HttpWire::LegacySse } else { HttpWire::Streamable };
                Ok(Self::Http { url, headers: server.headers.clone().unwrap_or_default(), wire })
            }
        }
    }

    /// Whether any argument, environment value, URL or header holds a `${vault:…}` reference,
    /// so the connection depends on the agent whose vault entries fill it.
    pub fn uses_vault(&self) -> bool {
        let has = |v: &String| v.contains(VAULT_REFERENCE);
        match self {
            Self::Stdio { args, env, .. } => args.iter().chain(env.values()).any(has),
            Self::Http { url, headers, .. } => has(url) || headers.values().any(has),
        }
    }

    /// The spec with every `${vault:…}` reference replaced through `fill` (the vault's
    /// interpolation for one agent). Called only when connecting, so values live no longer than
    /// the connection attempt and never in the spec `polpo mcp list` shows.
    pub fn with_secrets<E>(&self, fill: impl Fn(&str) -> Result<String, E>) -> Result<Self, E> {
        let map = |m: &BTreeMap<String, String>| {
            m.iter().map(|(k, v)| Ok((k.clone(), fill(v)?))).collect::<Result<BTreeMap<_, _>, E>>()
        };
        Ok(match self {
            Self::Stdio { command, args, env } => Self::Stdio {
                command: command.clone(),
                args: args.iter().map(|a| fill(a)).collect::<Result<_, E>>()?,
                env: map(env)?,
            },
            Self::Http { url, headers, wire } => Self::Http { url: fill(url)?, headers: map(headers)?, wire: *wire },
        })
    }

    /// What `polpo mcp list` shows of it: the program or the URL, never env or header values.
    pub fn target(&self) -> String {
        match self {
            Self::Stdio { command, args, .. } => {
                std::iter::once(command.as_str()).chain(args.iter().map(String::as_str)).collect::<Vec<_>>().join(" ")
            }
            Self::Http { url, .. } => url.clone(),
        }
    }

    /// `stdio`, `http` or `sse`, as the config names it.
    pub fn transport(&self) -> &'static str {
        match self {
            Self::Stdio { .. } => "stdio",
            Self::Http { wire: HttpWire::Streamable, .. } => "http",
            Self::Http { wire: HttpWire::LegacySse, .. } => "sse",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(entry: serde_json::Value) -> Result<ServerSpec, SpecError> {
        ServerSpec::from_config("s", &serde_json::from_value(entry).unwrap_or_else(|e| panic!("{e}")))
    }

    #[test]
    fn stdio_and_http_entries_become_connectable_specs() {
        let stdio = spec(json!({"type": "stdio", "command": "srv", "args": ["-v"], "env": {"A": "1"}}));
        assert_eq!(stdio.as_ref().map(ServerSpec::target), Ok("srv -v".to_owned()));
        let http = spec(json!({"type": "http", "url": "https://mcp.test/mcp", "headers": {"X-Team": "a"}}));
        assert_eq!(http.as_ref().map(ServerSpec::transport), Ok("http"));
        let sse = spec(json!({"type": "sse", "url": "https://mcp.test/sse", "headers": {"X-Team": "a"}}));
        assert_eq!(sse.as_ref().map(ServerSpec::transport), Ok("sse"));
        assert_eq!(sse.as_ref().map(ServerSpec::target), Ok("https://mcp.test/sse".to_owned()));
    }

    #[test]
    fn what_cannot_be_connected_is_refused_with_a_code() {
        let code = |entry| spec(entry).err().map(|e| e.code);
        assert_eq!(code(json!({"type": "sse"})), Some("invalid_mcp_server"));
        assert_eq!(code(json!({"type": "sse", "url": "ws://mcp.test/sse"})), Some("invalid_mcp_server"));
        assert_eq!(code(json!({"type": "stdio"})), Some("invalid_mcp_server"));
        assert_eq!(code(json!({"type": "http", "url": "file:///etc/passwd"})), Some("invalid_mcp_server"));
    }

    #[test]
    fn vault_references_stay_unresolved_until_connect_time() {
        let entry = json!({"type": "stdio", "command": "gh", "args": ["--token=${vault:gh:token}"], "env": {"T": "${vault:gh:token}", "A": "1"}});
        let stdio = spec(entry).unwrap_or_else(|e| panic!("{e}"));
        assert!(stdio.uses_vault());
        assert_eq!(stdio.target(), "gh --token=${vault:gh:token}", "the listing never shows a value");
        let filled = stdio.with_secrets(|v| Ok::<_, ()>(v.replace("${vault:gh:token}", "s3cret")));
        let ServerSpec::Stdio { args, env, .. } = filled.unwrap_or_else(|()| panic!("filled")) else { panic!("stdio") };
        assert_eq!((args[0].as_str(), env["T"].as_str(), env["A"].as_str()), ("--token=s3cret", "s3cret", "1"));
        let http = spec(
            json!({"type": "http", "url": "https://mcp.test/mcp", "headers": {"Authorization": "Bearer ${vault:api:key}"}}),
        );
        assert!(http.is_ok_and(|s| s.uses_vault()));
        assert!(!spec(json!({"type": "stdio", "command": "srv"})).is_ok_and(|s| s.uses_vault()));
    }
}
