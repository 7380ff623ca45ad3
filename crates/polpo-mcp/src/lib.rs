//! The Model Context Protocol for Polpo, on the official `rmcp` SDK.
//!
//! As a client ([`McpClients`]): the servers an agent lists in `mcpServers` are connected on
//! first use, shared by every invocation and agent naming the same server, reconnected after a
//! failure (stdio, streamable HTTP, and the legacy HTTP+SSE transport in `sse`, which rmcp no
//! longer ships), and their tools enter the agent's tool set as `mcp__<server>__<tool>` — under the
//! same policy, hooks and schema checks as built-in tools. stdio servers run in the `bash`
//! sandbox and stop with Polpo.
//!
//! As a server ([`PolpoMcpServer`]): each agent of the project is a tool `ask_<agent>` that runs
//! through `RunManager::invoke`, served on `/mcp` by `polpo serve` and over stdio by
//! `polpo mcp serve --stdio`.

mod clients;
mod connection;
mod server;
mod spec;
mod sse;
mod tool;

pub use clients::{McpClients, ServerStatus};
pub use server::{McpCaller, PolpoMcpServer};
pub use spec::{HttpWire, ServerSpec, SpecError};
pub use tool::{MAX_RESULT_BYTES, MAX_SCHEMA_BYTES, tool_name};
