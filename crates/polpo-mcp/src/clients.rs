//! Every MCP server of the project, shared: two invocations, or two agents, naming the same
//! server with the same settings use one connection (and one stdio process).

use crate::connection::{Connection, Secrets};
use crate::spec::ServerSpec;
use polpo_core::config::project::Agent;
use polpo_tools::{Tool, ToolContext, ToolSource};
use polpo_vault::{Vault, VaultError};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// The project's MCP connections; the runtime's [`ToolSource`].
#[derive(Default)]
pub struct McpClients {
    connections: Mutex<HashMap<ConnectionKey, Arc<Connection>>>,
    /// The project's vault; none set means this process has no vault key.
    vault: Mutex<Option<Result<Vault, VaultError>>>,
}

/// Server name, spec, and — for a spec naming vault secrets — the agent they are read for.
type ConnectionKey = (String, ServerSpec, Option<String>);

/// One server of an agent, as `polpo mcp list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerStatus {
    /// Its name in `mcpServers`.
    pub name: String,
    /// `stdio`, `http`, or the configured type when it cannot be used.
    pub transport: String,
    /// The program or URL (never env or header values).
    pub target: String,
    /// `connected`, `error`, or `not_connected` (not used yet).
    pub status: &'static str,
    /// Why it is not usable, when it is not.
    pub error: Option<String>,
    /// The tools agents see (`mcp__<server>__<tool>`).
    pub tools: Vec<String>,
    /// Tools left out, with why.
    pub skipped: Vec<String>,
}

impl McpClients {
    /// No connection yet: each is made on first use.
    pub fn new() -> Self {
        Self::default()
    }

    /// The vault that fills `${vault:…}` references in `mcpServers` (or why there is none, the
    /// error each such server then reports), for connections made from now on.
    pub fn use_vault(&self, vault: Result<Vault, VaultError>) {
        *self.vault.lock().unwrap_or_else(PoisonError::into_inner) = Some(vault);
    }

    /// The agent's servers that can be connected, each with its shared connection, and the
    /// entries that cannot, each with why.
    fn servers_of(&self, agent: &Agent) -> Vec<(String, Result<Arc<Connection>, String>)> {
        let entries = agent.config.mcp_servers.iter().flatten();
        entries
            .map(|(name, server)| {
                let found = check_name(name)
                    .and_then(|()| ServerSpec::from_config(name, server).map_err(|e| e.to_string()))
                    .map(|spec| self.connection(name, spec, &agent.id));
                (name.clone(), found)
            })
            .collect()
    }

    /// The shared connection for `spec`; one per agent when it names vault secrets, since each
    /// agent's own entries come first.
    fn connection(&self, name: &str, spec: ServerSpec, agent: &str) -> Arc<Connection> {
        let secrets = spec.uses_vault().then(|| Secrets {
            vault: self
                .vault
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
                .unwrap_or(Err(VaultError::KeyMissing)),
            agent: agent.to_owned(),
        });
        let key = (name.to_owned(), spec.clone(), secrets.as_ref().map(|s| s.agent.clone()));
        let mut connections = self.connections.lock().unwrap_or_else(PoisonError::into_inner);
        connections.entry(key).or_insert_with(|| Connection::new(name.to_owned(), spec, secrets)).clone()
    }

    /// The agent's servers, connecting those not connected yet when `connect` is set.
    pub async fn status(&self, agent: &Agent, ctx: &ToolContext, connect: bool) -> Vec<ServerStatus> {
        let mut out = Vec::new();
        for (name, found) in self.servers_of(agent) {
            let configured = agent.config.mcp_servers.as_ref().and_then(|m| m.get(&name));
            let connection = match found {
                Ok(connection) => connection,
                Err(error) => {
                    out.push(ServerStatus {
                        transport: configured.map(|s| s.transport.as_str().to_owned()).unwrap_or_default(),
                        target: configured
                            .and_then(|s| s.command.clone().or_else(|| s.url.clone()))
                            .unwrap_or_default(),
                        name,
                        status: "error",
                        error: Some(error),
                        tools: Vec::new(),
                        skipped: Vec::new(),
                    });
                    continue;
                }
            };
            let listed = if connect { connection.listing(ctx).await.err().map(|e| e.to_string()) } else { None };
            let snapshot = connection.snapshot().await;
            let error = listed.or(snapshot.last_error);
            let status = match (&error, snapshot.connected, snapshot.connects) {
                (Some(_), false, _) => "error",
                (_, true, _) => "connected",
                (None, false, 0) => "not_connected",
                (None, false, _) => "disconnected",
            };
            out.push(ServerStatus {
                name,
                transport: connection.spec.transport().to_owned(),
                target: connection.spec.target(),
                status,
                error,
                tools: snapshot.tools,
                skipped: snapshot.skipped,
            });
        }
        out
    }

    /// The process id of the running stdio server `name` of `agent`, if it runs.
    pub async fn server_pid(&self, agent: &Agent, name: &str) -> Option<i32> {
        let (_, found) = self.servers_of(agent).into_iter().find(|(n, _)| n == name)?;
        found.ok()?.pid().await
    }

    /// Stop every server (their processes included); called when Polpo shuts down.
    pub async fn shutdown(&self) {
        let all: Vec<Arc<Connection>> =
            self.connections.lock().unwrap_or_else(PoisonError::into_inner).values().cloned().collect();
        for connection in all {
            connection.shutdown().await;
        }
    }
}

/// Server names become part of tool names: letters, digits, `-`, single `_`.
fn check_name(name: &str) -> Result<(), String> {
    let fine = !name.is_empty()
        && !name.contains("__")
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if fine {
        Ok(())
    } else {
        Err(format!(
            "invalid_mcp_server: MCP server name `{name}` must be letters, digits, `-` or `_` (no `__`): it becomes part of `mcp__<server>__<tool>`"
        ))
    }
}

#[async_trait::async_trait]
impl ToolSource for McpClients {
    async fn tools_for(&self, agent: &Agent, ctx: &ToolContext) -> Vec<Arc<dyn Tool>> {
        let mut tools = Vec::new();
        for (name, found) in self.servers_of(agent) {
            let listed = match found {
                Ok(connection) => connection.listing(ctx).await.map_err(|e| e.to_string()),
                Err(e) => Err(e),
            };
            match listed {
                Ok(listing) => tools.extend(listing.tools.iter().cloned()),
                Err(error) => {
                    tracing::warn!(agent = %agent.id, server = %name, %error, "MCP server left out of this invocation")
                }
            }
        }
        tools
    }
}
