//! An `mcpServers` entry checked into what can be connected: a program to start, or a URL.

use polpo_core::config::agent::McpServer;
use polpo_core::config::enums::McpTransport;
use std::collections::BTreeMap;

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
    /// Streamable HTTP.
    Http {
        /// Endpoint.
        url: String,
        /// Headers sent with every request.
        headers: BTreeMap<String, String>,
    },
}

/// Why an entry cannot be connected; `code` is stable snake_case.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct SpecError {
    /// `feature_unavailable` (legacy SSE, vault references) or `invalid_mcp_server`.
    pub code: &'static str,
    /// A sentence naming the server.
    pub message: String,
}

impl ServerSpec {
    /// The connectable form of entry `name`, or why there is none.
    pub fn from_config(name: &str, server: &McpServer) -> Result<Self, SpecError> {
        let invalid =
            |what: &str| SpecError { code: "invalid_mcp_server", message: format!("MCP server `{name}`: {what}") };
        let values = server.env.iter().chain(server.headers.iter()).flat_map(|m| m.values());
        if values.into_iter().any(|v| v.contains("${vault:")) {
            return Err(SpecError {
                code: "feature_unavailable",
                message: format!(
                    "MCP server `{name}` uses a `${{vault:…}}` reference, which needs the vault, which this runtime does not have yet"
                ),
            });
        }
        match server.transport {
            McpTransport::Stdio => {
                let command = server.command.clone().filter(|c| !c.trim().is_empty());
                Ok(Self::Stdio {
                    command: command.ok_or_else(|| invalid("a stdio server needs `command`"))?,
                    args: server.args.clone().unwrap_or_default(),
                    env: server.env.clone().unwrap_or_default(),
                })
            }
            McpTransport::Http => {
                let url = server.url.clone().ok_or_else(|| invalid("an http server needs `url`"))?;
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(invalid("`url` must be http:// or https://"));
                }
                Ok(Self::Http { url, headers: server.headers.clone().unwrap_or_default() })
            }
            McpTransport::Sse => Err(SpecError {
                code: "feature_unavailable",
                message: format!(
                    "MCP server `{name}` uses the legacy `sse` transport, which the MCP SDK no longer speaks: use `\"type\": \"http\"` (streamable HTTP)"
                ),
            }),
        }
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

    /// `stdio` or `http`.
    pub fn transport(&self) -> &'static str {
        match self {
            Self::Stdio { .. } => "stdio",
            Self::Http { .. } => "http",
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
    }

    #[test]
    fn what_cannot_be_connected_is_refused_with_a_code() {
        let code = |entry| spec(entry).err().map(|e| e.code);
        assert_eq!(code(json!({"type": "sse", "url": "https://mcp.test/sse"})), Some("feature_unavailable"));
        assert_eq!(
            code(json!({"type": "stdio", "env": {"T": "${vault:gh:token}"}, "command": "gh"})),
            Some("feature_unavailable")
        );
        assert_eq!(code(json!({"type": "stdio"})), Some("invalid_mcp_server"));
        assert_eq!(code(json!({"type": "http", "url": "file:///etc/passwd"})), Some("invalid_mcp_server"));
    }
}
