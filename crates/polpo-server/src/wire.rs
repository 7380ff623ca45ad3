//! The OpenAI chat-completions wire, hand-written.
//!
//! Every object that may carry extensions keeps unknown fields in `extra`, so a request
//! with fields we do not know yet is accepted (never rejected) and Polpo's own extensions
//! (`agent`, `loop`, `polpo`, `metadata`) are read without a second parse. Output objects
//! skip absent fields instead of writing `null`, matching what OpenAI itself sends.

use polpo_core::message::{Content, FinishReason, Message, Role, ToolCall, Usage};
use polpo_core::tool::ToolSpec;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `POST /v1/chat/completions` body.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatRequest {
    /// The conversation as the client sends it.
    pub messages: Vec<WireMessage>,
    /// Accepted and ignored unless it names an agent (`agent/<name>`): the agent's model is used.
    #[serde(default)]
    pub model: Option<String>,
    /// Polpo extension: the agent to talk to.
    #[serde(default)]
    pub agent: Option<String>,
    /// Stream as SSE.
    #[serde(default)]
    pub stream: bool,
    /// Request-scoped client tools.
    #[serde(default)]
    pub tools: Vec<WireTool>,
    /// `auto`, `none`, `required` or `{type:"function", function:{name}}`.
    #[serde(default)]
    pub tool_choice: Option<Value>,
    /// Run read-only server tool batches concurrently.
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    /// `text`, `json_object` or `json_schema`.
    #[serde(default)]
    pub response_format: Option<Value>,
    /// String map stored on the session (bounded).
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
    /// Opaque end-user id.
    #[serde(default)]
    pub user: Option<String>,
    /// OpenAI's `store`: `false` runs the turn without storing anything (no session, no
    /// messages, no run record); absent or `true` stores it as usual.
    #[serde(default)]
    pub store: Option<bool>,
    /// Polpo extension: a Project Loop to run.
    #[serde(default, rename = "loop")]
    pub loop_name: Option<String>,
    /// Polpo extension object (`capabilities`, `skills`, `execution`, `delivery`).
    #[serde(default)]
    pub polpo: Option<PolpoExtension>,
    /// Every other field, kept.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The `polpo` request extension.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct PolpoExtension {
    /// `polpo.execution`.
    #[serde(default)]
    pub execution: Option<ExecutionExtension>,
    /// `polpo.skills`: assigned skills to activate for this request.
    #[serde(default)]
    pub skills: Vec<String>,
    /// `polpo.capabilities`.
    #[serde(default)]
    pub capabilities: Map<String, Value>,
    /// Every other field, kept.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `polpo.execution`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ExecutionExtension {
    /// An ephemeral restriction: can only narrow the agent's tools.
    #[serde(default, rename = "allowedTools")]
    pub allowed_tools: Option<Vec<String>>,
}

/// A message on the wire.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WireMessage {
    /// `system`, `developer`, `user`, `assistant` or `tool`.
    pub role: String,
    /// String, parts, or null.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Content>,
    /// Assistant tool calls.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<WireToolCall>,
    /// For `tool` messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Participant name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Every other field, kept.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A tool call on the wire.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WireToolCall {
    /// Position in a streamed delta.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<usize>,
    /// Call id.
    pub id: String,
    /// Always `function`.
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    /// Name and arguments.
    pub function: WireFunctionCall,
}

/// `{name, arguments}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WireFunctionCall {
    /// Tool name.
    pub name: String,
    /// Arguments JSON text.
    #[serde(default)]
    pub arguments: String,
}

fn function_type() -> String {
    "function".into()
}

/// A client tool declaration.
#[derive(Debug, Clone, Deserialize)]
pub struct WireTool {
    /// Must be `function`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The function.
    pub function: WireFunction,
}

/// A client function declaration.
#[derive(Debug, Clone, Deserialize)]
pub struct WireFunction {
    /// Name.
    pub name: String,
    /// Description.
    #[serde(default)]
    pub description: String,
    /// JSON Schema of the arguments.
    #[serde(default = "empty_object")]
    pub parameters: Value,
}

fn empty_object() -> Value {
    Value::Object(Map::new())
}

impl WireMessage {
    /// Into the runtime's message; `developer` is treated as `system`.
    pub fn into_message(self) -> Result<Message, String> {
        let role = match self.role.as_str() {
            "system" | "developer" => Role::System,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "tool" => Role::Tool,
            other => return Err(format!("unknown message role `{other}`")),
        };
        Ok(Message {
            role,
            content: self.content,
            tool_calls: self
                .tool_calls
                .into_iter()
                .map(|c| ToolCall { id: c.id, name: c.function.name, arguments: c.function.arguments })
                .collect(),
            tool_call_id: self.tool_call_id,
            name: self.name,
        })
    }
}

impl WireTool {
    /// Into a tool spec; only `function` tools exist.
    pub fn into_spec(self) -> Result<ToolSpec, String> {
        if self.kind != "function" {
            return Err(format!("tool type `{}` is not supported (function)", self.kind));
        }
        Ok(ToolSpec {
            name: self.function.name,
            description: self.function.description,
            parameters: self.function.parameters,
        })
    }
}

/// Wire tool calls from runtime tool calls.
pub fn wire_tool_calls(calls: &[ToolCall], with_index: bool) -> Vec<WireToolCall> {
    calls
        .iter()
        .enumerate()
        .map(|(i, c)| WireToolCall {
            index: with_index.then_some(i),
            id: c.id.clone(),
            kind: function_type(),
            function: WireFunctionCall { name: c.name.clone(), arguments: c.arguments.clone() },
        })
        .collect()
}

/// `finish_reason` string on the wire.
pub fn finish_reason(f: &FinishReason) -> String {
    match f {
        FinishReason::Stop => "stop".into(),
        FinishReason::Length => "length".into(),
        FinishReason::ToolCalls => "tool_calls".into(),
        FinishReason::ContentFilter => "content_filter".into(),
        FinishReason::Other(s) => s.clone(),
    }
}

/// `usage` on the wire.
pub fn wire_usage(u: &Usage) -> Value {
    serde_json::json!({"prompt_tokens": u.input_tokens, "completion_tokens": u.output_tokens, "total_tokens": u.total()})
}

/// The OpenAI error envelope: `{"error": {message, type, code, param}}`.
pub fn error_body(message: &str, kind: &str, code: &str) -> Value {
    serde_json::json!({"error": {"message": message, "type": kind, "code": code, "param": null}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_and_extension_fields_are_kept_not_rejected() {
        let r: ChatRequest = serde_json::from_str(
            r#"{"agent":"support","messages":[{"role":"user","content":"hi","x_trace":1}],"polpo":{"execution":{"allowedTools":["read"]},"future":true},"temperature":0.2,"seed":7}"#,
        )
        .unwrap();
        assert_eq!(r.agent.as_deref(), Some("support"));
        assert_eq!(r.extra.get("seed"), Some(&serde_json::json!(7)));
        let p = r.polpo.unwrap();
        assert_eq!(p.execution.unwrap().allowed_tools.unwrap(), vec!["read"]);
        assert!(p.extra.contains_key("future"));
        assert!(r.messages[0].extra.contains_key("x_trace"));
    }

    #[test]
    fn tool_calls_round_trip_without_nulls() {
        let m = WireMessage {
            role: "assistant".into(),
            content: None,
            tool_calls: wire_tool_calls(
                &[ToolCall { id: "c1".into(), name: "read".into(), arguments: "{}".into() }],
                false,
            ),
            tool_call_id: None,
            name: None,
            extra: Map::new(),
        };
        let s = serde_json::to_string(&m).unwrap();
        assert_eq!(
            s,
            r#"{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"read","arguments":"{}"}}]}"#
        );
        assert_eq!(m.into_message().unwrap().tool_calls[0].name, "read");
    }
}
