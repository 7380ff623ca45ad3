//! A small real MCP server written with `rmcp`'s server side, for tests of Polpo's MCP client:
//! the `polpo-mcp-demo` binary serves it over stdio, [`demo_bin`] finds (or builds) that binary.
//!
//! Tools: `echo` (`{text}` → `echo: <text> (instance N)`, N telling which process answered, so
//! a test sees a restarted server; not the pid, which is 1 in the sandbox's PID namespace) and
//! `add` (`{a, b}` → the sum, read-only), and `env` (`{name}` → whether that environment
//! variable is set and its length in bytes, never its value: tests of secrets handed to a server).

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::LazyLock;
use std::time::{SystemTime, UNIX_EPOCH};

/// This process's instance number: its start time in nanoseconds.
static INSTANCE: LazyLock<u128> =
    LazyLock::new(|| SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or_default());

/// The demo server.
#[derive(Debug, Clone, Copy, Default)]
pub struct DemoServer;

impl ServerHandler for DemoServer {
    fn get_info(&self) -> ServerConfig {
        LazyLock::force(&INSTANCE);
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("polpo-mcp-demo", env!("CARGO_PKG_VERSION")))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = json!([
            {"name": "echo", "description": "Echo the text back.",
             "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}},
            {"name": "add", "description": "Add two numbers.", "annotations": {"readOnlyHint": true},
             "inputSchema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}},
            {"name": "env", "description": "Whether an environment variable is set, and its length.", "annotations": {"readOnlyHint": true},
             "inputSchema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}}
        ]);
        let tools = serde_json::from_value(tools).map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        let text = match request.name.as_ref() {
            "echo" => {
                let said = args.get("text").and_then(Value::as_str).unwrap_or_default();
                format!("echo: {said} (instance {})", *INSTANCE)
            }
            "add" => {
                let n = |k: &str| args.get(k).and_then(Value::as_f64).unwrap_or_default();
                (n("a") + n("b")).to_string()
            }
            "env" => {
                let name = args.get("name").and_then(Value::as_str).unwrap_or_default();
                match std::env::var_os(name) {
                    Some(value) => format!("{name} is set ({} bytes)", value.len()),
                    None => format!("{name} is not set"),
                }
            }
            other => return Err(ErrorData::invalid_params(format!("no tool `{other}`"), None)),
        };
        Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
    }
}

/// The `polpo-mcp-demo` binary, built next to the running test's executable (`cargo test
/// --workspace` builds it; a single-package run builds it here once).
pub fn demo_bin() -> std::io::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    // target/<profile>/deps/<test> → target/<profile>/polpo-mcp-demo
    let dir = exe.parent().and_then(|d| d.parent()).ok_or_else(|| std::io::Error::other("no target dir"))?;
    let bin = dir.join("polpo-mcp-demo");
    if !bin.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = std::process::Command::new(cargo)
            .args(["build", "-q", "-p", "polpo-testkit", "--bin", "polpo-mcp-demo"])
            .status()?;
        if !status.success() || !bin.exists() {
            return Err(std::io::Error::other(format!("cannot build {}", bin.display())));
        }
    }
    Ok(bin)
}
