//! One MCP server as Polpo holds it: connected on first use, its tool listing kept, and
//! connected again when the link is found broken (a crashed stdio server, a dropped HTTP
//! session), so one failure costs one call, not the rest of the server's life.

use crate::spec::{HttpWire, ServerSpec};
use crate::sse::LegacySse;
use crate::tool::{Listing, Remote};
use polpo_tools::sandbox::{CommandSpec, Confinement, Program, Service, scrubbed_env, spawn_service};
use polpo_tools::{ToolContext, ToolError};
use polpo_vault::{Vault, VaultError};
use rmcp::model::{CallToolRequestParams, CallToolResult, JsonObject};
use rmcp::service::{Peer, RunningService, ServiceError};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::Mutex;

/// Starting a server, the MCP handshake and the tool listing, together.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// One tool call.
const CALL_TIMEOUT: Duration = Duration::from_secs(120);
/// Bytes of a stdio server's stderr kept for error messages.
const STDERR_CAP: usize = 4 * 1024;
/// Time a stopped stdio server gets between SIGTERM and SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(2);

/// A live link to the server.
struct Live {
    client: RunningService<RoleClient, ()>,
    /// The stdio server's process; dropping it kills its group.
    process: Option<Service>,
}

impl Live {
    fn is_broken(&self) -> bool {
        self.client.is_closed() || self.client.peer().is_transport_closed()
    }
}

#[derive(Default)]
struct State {
    live: Option<Live>,
    listing: Option<Arc<Listing>>,
    last_error: Option<String>,
    connects: u32,
}

/// Where a connection's `${vault:…}` references are filled from: the project's vault (or why
/// this process has none) and the agent whose own entries come before the project-wide ones.
#[derive(Debug, Clone)]
pub(crate) struct Secrets {
    pub vault: Result<Vault, VaultError>,
    pub agent: String,
}

/// A server shared by every agent and invocation that names it with the same settings.
pub(crate) struct Connection {
    /// The name in `mcpServers` (the `<server>` of `mcp__<server>__<tool>`).
    pub name: String,
    /// How to reach it.
    pub spec: ServerSpec,
    /// Set when `spec` names vault secrets; they are filled at each connection attempt.
    secrets: Option<Secrets>,
    state: Mutex<State>,
    /// This connection, for the tools it lists (they call back through it).
    me: Weak<Connection>,
}

/// What `polpo mcp list` shows of a connection.
pub(crate) struct Snapshot {
    pub connected: bool,
    pub connects: u32,
    pub last_error: Option<String>,
    pub tools: Vec<String>,
    pub skipped: Vec<String>,
}

impl Connection {
    pub fn new(name: String, spec: ServerSpec, secrets: Option<Secrets>) -> Arc<Self> {
        Arc::new_cyclic(|me| Self { name, spec, secrets, state: Mutex::new(State::default()), me: me.clone() })
    }

    /// The server's tools: the listing kept from an earlier connection, else connect now.
    pub async fn listing(&self, ctx: &ToolContext) -> Result<Arc<Listing>, ToolError> {
        let mut state = self.state.lock().await;
        if let Some(listing) = &state.listing {
            return Ok(listing.clone());
        }
        self.reconnect(&mut state, ctx).await?;
        state.listing.clone().ok_or_else(|| unavailable(&self.name, "no tool listing"))
    }

    /// Call `tool` with `arguments`. A link found broken before the call is connected again
    /// first; one that breaks during it is dropped (the next call reconnects) and the call is
    /// sent once more only when the request never left (the transport refused it).
    pub async fn call_tool(
        &self,
        ctx: &ToolContext,
        tool: &str,
        arguments: JsonObject,
    ) -> Result<CallToolResult, ToolError> {
        let mut attempt = 0;
        loop {
            let peer = self.peer(ctx).await?;
            let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments.clone());
            let sent = tokio::select! {
                sent = tokio::time::timeout(CALL_TIMEOUT, peer.call_tool(params)) => sent,
                () = ctx.cancel.cancelled() => return Err(ToolError::new("cancelled", "the call was cancelled")),
            };
            match sent {
                Ok(Ok(result)) => return Ok(result),
                Ok(Err(ServiceError::McpError(e))) => {
                    return Err(ToolError::new(
                        "mcp_error",
                        format!("MCP server `{}` refused the call: {}", self.name, e.message),
                    ));
                }
                Ok(Err(e @ ServiceError::TransportSend(_))) if attempt == 0 => {
                    self.drop_link(&e.to_string()).await;
                    attempt += 1;
                }
                Ok(Err(e)) => {
                    self.drop_link(&e.to_string()).await;
                    return Err(unavailable(&self.name, &e.to_string()));
                }
                Err(_) => {
                    return Err(ToolError::new(
                        "timeout",
                        format!("MCP server `{}` did not answer within {} s", self.name, CALL_TIMEOUT.as_secs()),
                    ));
                }
            }
        }
    }

    /// A usable peer: the live one, or a new connection when there is none or it broke.
    async fn peer(&self, ctx: &ToolContext) -> Result<Peer<RoleClient>, ToolError> {
        let mut state = self.state.lock().await;
        match &state.live {
            Some(live) if !live.is_broken() => Ok(live.client.peer().clone()),
            _ => {
                self.reconnect(&mut state, ctx).await?;
                state
                    .live
                    .as_ref()
                    .map(|l| l.client.peer().clone())
                    .ok_or_else(|| unavailable(&self.name, "not connected"))
            }
        }
    }

    /// Replace the link (and its process) with a new one and list the tools again.
    async fn reconnect(&self, state: &mut State, ctx: &ToolContext) -> Result<(), ToolError> {
        if let Some(old) = state.live.take() {
            stop(old).await;
        }
        state.connects += 1;
        let connected = tokio::time::timeout(CONNECT_TIMEOUT, self.connect(ctx)).await.unwrap_or_else(|_| {
            Err(unavailable(&self.name, &format!("no answer within {} s", CONNECT_TIMEOUT.as_secs())))
        });
        let (live, listing) = match connected {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(server = %self.name, error = %e, "MCP server unavailable");
                state.last_error = Some(e.to_string());
                return Err(e);
            }
        };
        state.live = Some(live);
        state.listing = Some(Arc::new(listing));
        state.last_error = None;
        Ok(())
    }

    async fn connect(&self, ctx: &ToolContext) -> Result<(Live, Listing), ToolError> {
        let live = match &self.filled_spec()? {
            ServerSpec::Stdio { command, args, env } => self.start_stdio(ctx, command, args, env).await?,
            ServerSpec::Http { url, headers, wire } => {
                Live { client: self.open_http(url, headers, *wire).await?, process: None }
            }
        };
        let listed = live.client.peer().list_all_tools().await.map_err(|e| unavailable(&self.name, &e.to_string()))?;
        let me: Weak<dyn Remote> = self.me.clone();
        Ok((live, crate::tool::listing(&self.name, me, listed)))
    }

    /// The spec with its vault secrets filled in, made afresh for each connection attempt (so an
    /// edited vault entry is used from the next reconnect) and dropped once connected.
    fn filled_spec(&self) -> Result<ServerSpec, ToolError> {
        let Some(Secrets { vault, agent }) = &self.secrets else { return Ok(self.spec.clone()) };
        let fill = |text: &str| vault.as_ref().map_err(Clone::clone).and_then(|v| v.interpolate(agent, text));
        // The vault's errors name the reference, never a value.
        self.spec.with_secrets(fill).map_err(|e| {
            ToolError::new(
                e.code(),
                format!("MCP server `{}` cannot fill its `${{vault:…}}` references: {e}", self.name),
            )
        })
    }

    /// Start the program in the `bash` sandbox and speak MCP over its stdin and stdout.
    async fn start_stdio(
        &self,
        ctx: &ToolContext,
        command: &str,
        args: &[String],
        env: &std::collections::BTreeMap<String, String>,
    ) -> Result<Live, ToolError> {
        ctx.sandbox.require_confinement(&format!("MCP server `{}` is not started", self.name))?;
        // The sandbox's allow-list, plus what the project's own config sets for this server.
        let mut environment = scrubbed_env(&ctx.env_allow);
        environment.extend(env.iter().map(|(k, v)| (k.clone(), v.clone())));
        let program = resolve_program(command, &ctx.workspace, &environment)
            .ok_or_else(|| unavailable(&self.name, &format!("program `{command}` not found")))?;
        let argv = std::iter::once(program.to_string_lossy().into_owned()).chain(args.iter().cloned()).collect();
        let mut spec = CommandSpec::new(Program::Argv(argv), &ctx.workspace);
        // Its own program, wherever it is installed; nothing else outside the system dirs.
        spec.confinement = Some(Confinement::of(ctx, vec![program])?);
        spec.env = environment;
        spec.output_cap = STDERR_CAP;
        spec.kill_grace = KILL_GRACE;
        let mut process = spawn_service(&spec).map_err(|e| ToolError::new(e.code(), e.to_string()))?;
        let (stdout, stdin) = process.take_io().ok_or_else(|| unavailable(&self.name, "no stdio pipes"))?;
        match ().serve((stdout, stdin)).await {
            Ok(client) => Ok(Live { client, process: Some(process) }),
            Err(e) => {
                let stderr = process.stderr();
                process.stop().await;
                Err(unavailable(&self.name, &format!("{e}; stderr: {}", stderr.trim())))
            }
        }
    }

    /// Connect over streamable HTTP (rmcp's client) or the legacy SSE transport ([`LegacySse`]).
    async fn open_http(
        &self,
        url: &str,
        headers: &std::collections::BTreeMap<String, String>,
        wire: HttpWire,
    ) -> Result<RunningService<RoleClient, ()>, ToolError> {
        polpo_tools::net::install_crypto_provider();
        let mut sent = HashMap::new();
        for (name, value) in headers {
            let name = http::HeaderName::try_from(name.as_str()).map_err(|_| {
                ToolError::new("invalid_mcp_server", format!("MCP server `{}`: bad header name `{name}`", self.name))
            })?;
            // The value is never echoed: it may hold a credential.
            let value = http::HeaderValue::try_from(value.as_str()).map_err(|_| {
                ToolError::new(
                    "invalid_mcp_server",
                    format!("MCP server `{}`: bad value for header `{name}`", self.name),
                )
            })?;
            sent.insert(name, value);
        }
        let client = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| unavailable(&self.name, &e.without_url().to_string()))?;
        let served = match wire {
            HttpWire::Streamable => {
                let config = StreamableHttpClientTransportConfig::with_uri(url.to_owned()).custom_headers(sent);
                ().serve(StreamableHttpClientTransport::with_client(client, config)).await
            }
            HttpWire::LegacySse => {
                let transport = LegacySse::connect(client, url, sent.into_iter().collect())
                    .await
                    .map_err(|e| unavailable(&self.name, &e.to_string()))?;
                ().serve(transport).await
            }
        };
        served.map_err(|e| unavailable(&self.name, &e.to_string()))
    }

    /// Forget a broken link; the next call connects again.
    async fn drop_link(&self, why: &str) {
        let mut state = self.state.lock().await;
        tracing::warn!(server = %self.name, error = %why, "MCP link lost; reconnecting on the next call");
        state.last_error = Some(why.to_owned());
        if let Some(live) = state.live.take() {
            stop(live).await;
        }
    }

    /// Stop the link and its process (Polpo shutting down).
    pub async fn shutdown(&self) {
        if let Some(live) = self.state.lock().await.live.take() {
            stop(live).await;
        }
    }

    pub async fn snapshot(&self) -> Snapshot {
        let state = self.state.lock().await;
        let listing = state.listing.as_deref();
        Snapshot {
            connected: state.live.as_ref().is_some_and(|l| !l.is_broken()),
            connects: state.connects,
            last_error: state.last_error.clone(),
            tools: listing.map(|l| l.tools.iter().map(|t| t.spec().name.clone()).collect()).unwrap_or_default(),
            skipped: listing.map(|l| l.skipped.clone()).unwrap_or_default(),
        }
    }

    /// The process id of a running stdio server (tests kill it to check reconnection).
    pub async fn pid(&self) -> Option<i32> {
        self.state.lock().await.live.as_ref().and_then(|l| l.process.as_ref()).map(Service::pid)
    }
}

/// The real path of `command`: as given when it names a path (relative to the workspace),
/// else the first executable file of that name on the process's `PATH`.
fn resolve_program(command: &str, workspace: &Path, env: &[(String, String)]) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    let found = if command.contains('/') {
        Some(workspace.join(command)).filter(|p| executable(p))
    } else {
        let path = env.iter().find(|(k, _)| k == "PATH").map(|(_, v)| v.as_str()).unwrap_or_default();
        std::env::split_paths(path).map(|dir| dir.join(command)).find(|p| executable(p))
    };
    found.and_then(|p| std::fs::canonicalize(p).ok())
}

async fn stop(live: Live) {
    let Live { client, process } = live;
    let _ = tokio::time::timeout(Duration::from_secs(2), client.cancel()).await;
    if let Some(process) = process {
        process.stop().await;
    }
}

#[async_trait::async_trait]
impl Remote for Connection {
    async fn call(&self, ctx: &ToolContext, tool: &str, arguments: JsonObject) -> Result<CallToolResult, ToolError> {
        self.call_tool(ctx, tool, arguments).await
    }
}

fn unavailable(server: &str, why: &str) -> ToolError {
    ToolError::new("mcp_server_unavailable", format!("MCP server `{server}` is unavailable: {why}"))
}
