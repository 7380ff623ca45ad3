//! `/mcp`: the project's agents as an MCP server (streamable HTTP), behind the same guards and
//! API keys as every other route. Each agent is a tool `ask_<agent>`; a call runs through
//! `RunManager::invoke` like a chat, and its session belongs to the caller's key.

use crate::auth::Caller;
use crate::state::AppState;
use axum::Router;
use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::Response;
use polpo_mcp::{McpCaller, PolpoMcpServer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use std::sync::Arc;

/// Largest JSON-RPC request accepted on `/mcp` (a prompt is at most 256 KB).
const MAX_MCP_BODY_BYTES: usize = 4 * 1024 * 1024;

/// The `/mcp` endpoint. Stateless (every request stands alone, so it survives a restart and
/// needs no session affinity) and answering in plain JSON where it can. `Host` and `Origin`
/// are checked by the server's own guards, before this service sees the request.
pub fn router(state: &Arc<AppState>) -> Router<Arc<AppState>> {
    let runs = state.runs.clone();
    let mut config = StreamableHttpServerConfig::default().disable_allowed_hosts();
    config.legacy_session_mode = false;
    config.json_response = true;
    config.max_request_body_bytes = MAX_MCP_BODY_BYTES;
    let service = StreamableHttpService::new(
        move || Ok(PolpoMcpServer::new(runs.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    Router::new().nest_service("/mcp", service).layer(middleware::from_fn(caller))
}

/// Hands the authenticated caller's key id to the MCP handler, which sees only the request.
async fn caller(mut request: Request, next: Next) -> Response {
    let owner = request.extensions().get::<Caller>().and_then(|c| c.owner.clone());
    request.extensions_mut().insert(McpCaller { owner });
    next.run(request).await
}
