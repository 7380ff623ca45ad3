//! The legacy HTTP+SSE transport against a real legacy server (polpo-testkit's, the demo tools
//! served by rmcp's server side behind a GET stream and POSTed messages): the tools are listed
//! and called with the configured headers on every request, and a URL that is no SSE stream is
//! reported at once instead of hanging.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use polpo_core::config::Location;
use polpo_core::config::project::Agent;
use polpo_mcp::McpClients;
use polpo_testkit::mcp_sse::LegacySseMcp;
use polpo_tools::{ToolContext, ToolSource};
use serde_json::json;

/// Agent `a`, whose server `legacy` is the legacy SSE server at `url`.
fn agent(url: &str) -> Agent {
    let servers = json!({"legacy": {"type": "sse", "url": url, "headers": {"Authorization": "Bearer team-token"}}});
    let config = serde_json::from_value(json!({"model": "openai/gpt-4o-mini", "mcpServers": servers})).unwrap();
    Agent { id: "a".into(), config, instructions: String::new(), source: Location::file(".polpo/agents/a/agent.json") }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_legacy_sse_transport_lists_and_calls_the_servers_tools() {
    let server = LegacySseMcp::start().await.unwrap();
    let agent = agent(server.url());
    let clients = McpClients::new();
    let ctx = ToolContext::new(std::env::temp_dir());
    let status = clients.status(&agent, &ctx, true).await;
    assert_eq!((status[0].transport.as_str(), status[0].status), ("sse", "connected"), "{status:?}");
    assert_eq!(status[0].tools, ["mcp__legacy__echo", "mcp__legacy__add", "mcp__legacy__env"]);

    let tools = clients.tools_for(&agent, &ctx).await;
    let add = tools.iter().find(|t| t.spec().name == "mcp__legacy__add").unwrap();
    assert_eq!(add.call(&ctx, json!({"a": 2, "b": 40})).await.unwrap().text, "42");
    let echo = tools.iter().find(|t| t.spec().name == "mcp__legacy__echo").unwrap();
    let said = echo.call(&ctx, json!({"text": "over sse"})).await.unwrap().text;
    assert!(said.starts_with("echo: over sse (instance "), "{said}");
    // The stream's GET and every POSTed message (initialize, initialized, list, two calls).
    let seen = server.authorization();
    assert!(seen.len() >= 6, "{seen:?}");
    assert!(seen.iter().all(|a| a == "Bearer team-token"), "{seen:?}");
    clients.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_url_that_is_no_sse_stream_is_reported_at_once() {
    let plain = polpo_testkit::site::SiteApi::start().await.unwrap();
    let agent = agent(&format!("{}/sse", plain.url()));
    let status = McpClients::new().status(&agent, &ToolContext::new(std::env::temp_dir()), true).await;
    assert_eq!(status[0].status, "error", "{status:?}");
    let error = status[0].error.as_deref().unwrap();
    assert!(error.contains("mcp_server_unavailable") && error.contains("text/event-stream"), "{error}");
    assert!(!error.contains("team-token"), "a header value is never echoed: {error}");
}
