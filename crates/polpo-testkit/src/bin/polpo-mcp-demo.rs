//! `polpo-mcp-demo`: the testkit's demo MCP server ([`polpo_testkit::mcp_demo::DemoServer`])
//! over stdio, until its input closes.

use polpo_testkit::mcp_demo::DemoServer;
use rmcp::ServiceExt;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let running = DemoServer.serve(rmcp::transport::stdio()).await?;
    running.waiting().await?;
    Ok(())
}
