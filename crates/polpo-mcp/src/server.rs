//! Polpo's agents as an MCP server: each agent is a tool `ask_<agent>` (`prompt`, optional
//! `sessionId`), so Claude Desktop, Cursor or another agent framework can call them. A call is
//! a chat like any other: a `ChatInput` sent to `RunManager::invoke`.

use polpo_core::message::Message;
use polpo_engine::meter::Meter;
use polpo_engine::runs::{Progress, RunManager};
use polpo_engine::{ChatInput, Surface};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};
use std::sync::Arc;

/// Largest `prompt` accepted, in bytes.
const MAX_PROMPT_BYTES: usize = 256 * 1024;
/// Tool-name prefix of an agent.
const PREFIX: &str = "ask_";

/// Who is calling, put into the HTTP request's extensions by the server's authentication, so
/// a session made through `/mcp` belongs to the same key as one made through the chat API.
#[derive(Debug, Clone, Default)]
pub struct McpCaller {
    /// The key id new sessions are stored under (`None` in local-only mode and over stdio).
    pub owner: Option<String>,
}

/// The MCP server of one Polpo runtime.
#[derive(Clone)]
pub struct PolpoMcpServer {
    runs: Arc<RunManager>,
}

impl PolpoMcpServer {
    /// A server whose tools are the agents of `runs`' runtime, as loaded at each request.
    pub fn new(runs: Arc<RunManager>) -> Self {
        Self { runs }
    }

    fn tools(&self) -> Vec<rmcp::model::Tool> {
        let loaded = self.runs.runtime().loaded();
        loaded
            .project
            .agents
            .values()
            .filter_map(|agent| {
                let about = agent.config.role.clone().unwrap_or_else(|| format!("the Polpo agent `{}`", agent.id));
                serde_json::from_value(json!({
                    "name": format!("{PREFIX}{}", agent.id),
                    "description": format!("Ask {about}. Returns its answer and the sessionId to continue the conversation."),
                    "inputSchema": {
                        "type": "object",
                        "properties": {
                            "prompt": {"type": "string", "description": "What to ask the agent."},
                            "sessionId": {"type": "string", "description": "Continue this session (from an earlier answer)."}
                        },
                        "required": ["prompt"],
                        "additionalProperties": false
                    }
                }))
                .ok()
            })
            .collect()
    }

    /// Run one `ask_<agent>` call to its answer; a failure of the agent is a tool error the
    /// caller can read, a malformed call a protocol error.
    async fn ask(&self, params: CallToolRequestParams, owner: Option<String>) -> Result<CallToolResult, ErrorData> {
        let agent = params
            .name
            .strip_prefix(PREFIX)
            .filter(|id| self.runs.runtime().loaded().agent(id).is_some())
            .ok_or_else(|| ErrorData::invalid_params(format!("unknown tool `{}`", params.name), None))?;
        let args = params.arguments.unwrap_or_default();
        let prompt = args
            .get("prompt")
            .and_then(Value::as_str)
            .ok_or_else(|| ErrorData::invalid_params("`prompt` (a string) is required", None))?;
        if prompt.len() > MAX_PROMPT_BYTES {
            return Err(ErrorData::invalid_params(format!("`prompt` is longer than {MAX_PROMPT_BYTES} bytes"), None));
        }
        let session_id = match args.get("sessionId") {
            None | Some(Value::Null) => None,
            Some(Value::String(id)) => Some(id.clone()),
            Some(_) => return Err(ErrorData::invalid_params("`sessionId` must be a string", None)),
        };
        let mut input = ChatInput::new(agent, vec![Message::user(prompt)]);
        input.session_id = session_id;
        input.owner = owner;
        input.surface = Surface::Chat;
        let mut invoked = match self.runs.invoke(input, Meter::start()).await {
            Ok(invoked) => invoked,
            Err(e) => return Ok(CallToolResult::error(vec![ContentBlock::text(e.to_string())])),
        };
        let _attached = invoked.attachment();
        let session = invoked.session_id().to_owned();
        while let Some(progress) = invoked.next().await {
            let Progress::Finished(finished) = progress else { continue };
            return Ok(match finished.result {
                Ok(answer) => {
                    let text = answer.content.unwrap_or_default();
                    let mut result = CallToolResult::success(vec![ContentBlock::text(text.clone())]);
                    result.structured_content = Some(json!({"answer": text, "sessionId": session}));
                    result
                }
                Err(failure) => {
                    CallToolResult::error(vec![ContentBlock::text(format!("{}: {}", failure.code, failure.message))])
                }
            });
        }
        Ok(CallToolResult::error(vec![ContentBlock::text("run_interrupted: the run ended without a verdict")]))
    }
}

impl ServerHandler for PolpoMcpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("polpo", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Each tool asks one Polpo agent; pass sessionId from an answer to continue its conversation.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let owner = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<McpCaller>())
            .and_then(|caller| caller.owner.clone());
        self.ask(request, owner).await.map(Into::into)
    }
}
