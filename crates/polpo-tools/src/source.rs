//! Tools that exist only at run time, per agent: the tools of an agent's MCP servers, found by
//! connecting to them. The runtime asks its [`ToolSource`] for an agent's extra tools when it
//! prepares an invocation and runs them exactly like the built-in ones (policy, hooks, schema
//! checks), so this crate only fixes the seam and knows nothing of MCP.

use crate::{Tool, ToolContext};
use polpo_core::config::project::Agent;
use std::sync::Arc;

/// Supplies an agent's run-time tools.
#[async_trait::async_trait]
pub trait ToolSource: Send + Sync {
    /// The extra tools of `agent`, in a stable order, for one invocation whose tools run in
    /// `ctx` (processes a source starts are confined like `bash` under it). A source that
    /// cannot reach one of its backends leaves that backend's tools out and says why where an
    /// operator looks (logs, `polpo mcp list`): one unreachable server must not take the
    /// agent down.
    async fn tools_for(&self, agent: &Agent, ctx: &ToolContext) -> Vec<Arc<dyn Tool>>;
}
