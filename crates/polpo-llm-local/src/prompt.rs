//! Turning a provider-neutral request into the role/content turns a chat template renders.
//!
//! Small local models have no native tool API, so tools are described Hermes-style (the framing
//! Qwen2.5 and SmolLM2 were tuned on): JSON schemas inside `<tools>` in the system prompt, calls
//! written back as `<tool_call>{…}</tool_call>`, results passed as `<tool_response>` user turns
//! (templates applied by llama.cpp have no `tool` role).

use polpo_core::message::{Message, Role};
use polpo_core::tool::ToolSpec;
use polpo_llm::{ModelRequest, ToolChoice};

/// One rendered turn: a template role (`system`, `user`, `assistant`) and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Turn {
    /// Template role.
    pub role: &'static str,
    /// Text of the turn.
    pub content: String,
}

/// The tools the model may call for this request, after `tool_choice`.
pub fn offered_tools(request: &ModelRequest) -> Vec<&ToolSpec> {
    match &request.tool_choice {
        ToolChoice::None => Vec::new(),
        ToolChoice::Tool(name) => request.tools.iter().filter(|t| &t.name == name).collect(),
        ToolChoice::Auto | ToolChoice::Required => request.tools.iter().collect(),
    }
}

/// The conversation as template turns: every system message merged into one leading turn, the
/// tool block appended to it, assistant tool calls and tool results in Hermes framing.
pub fn turns(request: &ModelRequest) -> Vec<Turn> {
    let tools = offered_tools(request);
    let mut system: Vec<String> = request
        .messages
        .iter()
        .filter(|m| m.role == Role::System)
        .map(Message::text_content)
        .filter(|t| !t.trim().is_empty())
        .collect();
    if !tools.is_empty() {
        system.push(tool_block(&tools));
    }
    let mut out = Vec::with_capacity(request.messages.len() + 1);
    if !system.is_empty() {
        out.push(Turn {
            role: "system",
            content: system.join("\n\n"),
        });
    }
    for message in &request.messages {
        match message.role {
            Role::System => {}
            Role::User => out.push(Turn {
                role: "user",
                content: message.text_content(),
            }),
            Role::Assistant => out.push(Turn {
                role: "assistant",
                content: assistant_text(message),
            }),
            Role::Tool => out.push(Turn {
                role: "user",
                content: format!(
                    "<tool_response>\n{}\n</tool_response>",
                    message.text_content()
                ),
            }),
        }
    }
    out
}

fn tool_block(tools: &[&ToolSpec]) -> String {
    let signatures: Vec<String> = tools
        .iter()
        .map(|t| {
            serde_json::json!({
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
            })
            .to_string()
        })
        .collect();
    format!(
        "# Tools\n\nYou may call a function to assist with the user query.\n\n\
         You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{}\n</tools>\n\n\
         To call a function, return a json object with the function name and arguments within \
         <tool_call></tool_call> XML tags:\n<tool_call>\n{{\"name\": <function-name>, \"arguments\": <args-json-object>}}\n</tool_call>",
        signatures.join("\n")
    )
}

fn assistant_text(message: &Message) -> String {
    let mut parts = vec![message.text_content()];
    parts.extend(message.tool_calls.iter().map(|call| {
        let arguments: serde_json::Value = serde_json::from_str(&call.arguments)
            .unwrap_or_else(|_| serde_json::Value::String(call.arguments.clone()));
        format!(
            "<tool_call>\n{}\n</tool_call>",
            serde_json::json!({"name": call.name, "arguments": arguments})
        )
    }));
    parts.retain(|p| !p.is_empty());
    parts.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use polpo_core::message::ToolCall;

    fn read_tool() -> ToolSpec {
        ToolSpec {
            name: "read".into(),
            description: "Read a file".into(),
            parameters: serde_json::json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        }
    }

    #[test]
    fn systems_merge_and_carry_the_tool_schemas() {
        let request = ModelRequest {
            messages: vec![
                Message::system("Be brief."),
                Message::user("hi"),
                Message::system("Be kind."),
            ],
            tools: vec![read_tool()],
            ..Default::default()
        };
        let t = turns(&request);
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].role, "system");
        assert!(t[0].content.starts_with("Be brief.\n\nBe kind.\n\n# Tools"));
        assert!(t[0].content.contains(r#""name":"read""#));
        assert_eq!(
            t[1],
            Turn {
                role: "user",
                content: "hi".into()
            }
        );
    }

    #[test]
    fn tool_history_is_written_in_hermes_framing() {
        let mut call = Message::assistant("");
        call.tool_calls.push(ToolCall {
            id: "c1".into(),
            name: "read".into(),
            arguments: r#"{"path":"a"}"#.into(),
        });
        let request = ModelRequest {
            messages: vec![
                Message::user("read a"),
                call,
                Message::tool_result("c1", "hello"),
            ],
            tools: vec![read_tool()],
            tool_choice: ToolChoice::None,
            ..Default::default()
        };
        let t = turns(&request);
        assert_eq!(
            t.len(),
            3,
            "no system turn when no tools are offered and none is given"
        );
        assert_eq!(
            t[1].content,
            "<tool_call>\n{\"name\":\"read\",\"arguments\":{\"path\":\"a\"}}\n</tool_call>"
        );
        assert_eq!(
            t[2],
            Turn {
                role: "user",
                content: "<tool_response>\nhello\n</tool_response>".into()
            }
        );
    }

    #[test]
    fn tool_choice_narrows_the_offer() {
        let mut request = ModelRequest {
            tools: vec![read_tool()],
            ..Default::default()
        };
        request.tools.push(ToolSpec {
            name: "write".into(),
            ..read_tool()
        });
        request.tool_choice = ToolChoice::Tool("write".into());
        assert_eq!(
            offered_tools(&request)
                .iter()
                .map(|t| t.name.as_str())
                .collect::<Vec<_>>(),
            ["write"]
        );
        request.tool_choice = ToolChoice::Required;
        assert_eq!(offered_tools(&request).len(), 2);
    }
}
