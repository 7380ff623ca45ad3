//! A remote MCP tool as a Polpo [`Tool`]: its listing checked and bounded before the model
//! sees it, its results bounded before the model reads them.

use polpo_core::tool::{ToolEffect, ToolSpec};
use polpo_tools::{Tool, ToolContext, ToolError, ToolOutput};
use rmcp::model::{CallToolResult, JsonObject};
use serde_json::{Value, json};
use std::sync::{Arc, Weak};

/// Largest argument schema a remote tool may declare (serialised JSON); a larger one would
/// crowd every prompt of the agent.
pub const MAX_SCHEMA_BYTES: usize = 32 * 1024;
/// Largest result text shown to the model; longer results keep their beginning.
pub const MAX_RESULT_BYTES: usize = 32 * 1024;
/// Characters of a remote description kept.
const MAX_DESCRIPTION_CHARS: usize = 2048;
/// Tools taken from one server.
const MAX_TOOLS_PER_SERVER: usize = 128;
/// Longest tool name model providers accept.
const MAX_NAME_LEN: usize = 64;

/// The name an agent sees for `tool` of server `server`: `mcp__<server>__<tool>`.
pub fn tool_name(server: &str, tool: &str) -> String {
    format!("mcp__{server}__{tool}")
}

/// Where a tool's calls go: its server's connection, which keeps the link alive.
#[async_trait::async_trait]
pub(crate) trait Remote: Send + Sync {
    /// Call `tool` on the server.
    async fn call(&self, ctx: &ToolContext, tool: &str, arguments: JsonObject) -> Result<CallToolResult, ToolError>;
}

/// What a server offered when it was last listed.
pub(crate) struct Listing {
    /// Its tools, ready for an agent's tool set.
    pub tools: Vec<Arc<dyn Tool>>,
    /// Tools left out, each with why (bad name, schema too large or invalid, …).
    pub skipped: Vec<String>,
}

/// One tool of one server.
pub(crate) struct McpTool {
    spec: ToolSpec,
    effect: ToolEffect,
    /// The name on the server.
    remote: String,
    /// The server's name in `mcpServers`.
    server: String,
    /// Weak: the connection owns its listing, which holds this tool.
    connection: Weak<dyn Remote>,
}

/// The tools of `listed` that pass the checks, and a sentence for each one that does not.
pub(crate) fn listing(server: &str, connection: Weak<dyn Remote>, listed: Vec<rmcp::model::Tool>) -> Listing {
    let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
    let mut skipped = Vec::new();
    let total = listed.len();
    for tool in listed.into_iter().take(MAX_TOOLS_PER_SERVER) {
        let remote = tool.name.to_string();
        match McpTool::checked(server, connection.clone(), tool) {
            Ok(found) => tools.push(Arc::new(found)),
            Err(why) => skipped.push(format!("{remote}: {why}")),
        }
    }
    if total > MAX_TOOLS_PER_SERVER {
        skipped.push(format!("{} more tools past the first {MAX_TOOLS_PER_SERVER}", total - MAX_TOOLS_PER_SERVER));
    }
    for why in &skipped {
        tracing::warn!(%server, tool = %why, "MCP tool left out");
    }
    Listing { tools, skipped }
}

impl McpTool {
    fn checked(server: &str, connection: Weak<dyn Remote>, tool: rmcp::model::Tool) -> Result<Self, String> {
        let remote = tool.name.to_string();
        let name = tool_name(server, &remote);
        if remote.is_empty() || !remote.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
            return Err("the name must be letters, digits, `_` or `-`".into());
        }
        if name.len() > MAX_NAME_LEN {
            return Err(format!("`{name}` is longer than {MAX_NAME_LEN} characters"));
        }
        let parameters = Value::Object((*tool.input_schema).clone());
        let size = serde_json::to_vec(&parameters).map(|b| b.len()).unwrap_or(usize::MAX);
        if size > MAX_SCHEMA_BYTES {
            return Err(format!("its schema has {size} bytes, more than {MAX_SCHEMA_BYTES}"));
        }
        if parameters.get("type").and_then(Value::as_str) != Some("object") {
            return Err("its schema is not of type object".into());
        }
        if let Err(e) = jsonschema::draft202012::new(&parameters) {
            return Err(format!("its schema does not compile: {e}"));
        }
        let description: String =
            tool.description.as_deref().unwrap_or_default().chars().take(MAX_DESCRIPTION_CHARS).collect();
        let hints = tool.annotations.as_ref();
        let effect = match hints.map(|a| (a.read_only_hint, a.idempotent_hint)) {
            Some((Some(true), _)) => ToolEffect::Read,
            Some((_, Some(true))) => ToolEffect::Idempotent,
            _ => ToolEffect::Write,
        };
        Ok(Self {
            spec: ToolSpec { name, description, parameters },
            effect,
            remote,
            server: server.to_owned(),
            connection,
        })
    }
}

#[async_trait::async_trait]
impl Tool for McpTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn effect(&self) -> ToolEffect {
        self.effect
    }

    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let connection = self
            .connection
            .upgrade()
            .ok_or_else(|| ToolError::new("mcp_server_unavailable", "the MCP server was shut down"))?;
        let arguments = match args {
            Value::Object(map) => map,
            Value::Null => Default::default(),
            _ => return Err(ToolError::new("invalid_arguments", "arguments must be a JSON object")),
        };
        let result = connection.call(ctx, &self.remote, arguments).await?;
        let (text, truncated) = render(&result);
        if result.is_error == Some(true) {
            return Err(ToolError::new("mcp_tool_error", text));
        }
        Ok(ToolOutput { text, details: json!({"server": self.server, "tool": self.remote, "truncated": truncated}) })
    }
}

/// The model-visible text of a result: its text blocks (other kinds named, not inlined), or
/// its structured content when there is no text; at most [`MAX_RESULT_BYTES`].
fn render(result: &CallToolResult) -> (String, bool) {
    let blocks: Vec<String> = result
        .content
        .iter()
        .map(|block| {
            let value = serde_json::to_value(block).unwrap_or_default();
            match value.get("type").and_then(Value::as_str) {
                Some("text") => value.get("text").and_then(Value::as_str).unwrap_or_default().to_owned(),
                Some(kind) => format!("[{kind} content omitted]"),
                None => "[unknown content omitted]".to_owned(),
            }
        })
        .collect();
    let mut text = blocks.join("\n");
    if text.is_empty()
        && let Some(structured) = &result.structured_content
    {
        text = structured.to_string();
    }
    bound(text)
}

fn bound(mut text: String) -> (String, bool) {
    if text.len() <= MAX_RESULT_BYTES {
        return (text, false);
    }
    let mut cut = MAX_RESULT_BYTES;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let total = text.len();
    text.truncate(cut);
    text.push_str(&format!("\n[result truncated: {total} bytes, first {cut} shown]"));
    (text, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_results_keep_their_beginning_and_say_so() {
        let (text, truncated) = bound("é".repeat(MAX_RESULT_BYTES));
        assert!(truncated);
        assert!(text.starts_with("éé"));
        assert!(text.ends_with("shown]"), "{}", &text[text.len() - 40..]);
        assert!(text.len() < MAX_RESULT_BYTES + 100);
    }
}
