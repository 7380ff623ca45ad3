//! Turning a provider-neutral request into the role/content turns a chat template renders.
//!
//! Small local models have no native tool API, so tools are described Hermes-style (the framing
//! Qwen2.5 and SmolLM2 were tuned on): JSON schemas inside `<tools>` in the system prompt, calls
//! written back as `<tool_call>{…}</tool_call>`, results passed back the way the model's own chat
//! template does ([`ToolResults`]): a model that reads a result in an unfamiliar framing takes it
//! for a new request and calls the same tool again instead of answering.

use polpo_core::message::{Message, Role, ToolCall};
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

/// How a chat template passes tool results back to the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolResults {
    /// Qwen2.5's template: consecutive results in one `user` turn, each inside
    /// `<tool_response>` tags.
    UserTurn,
    /// A template that writes any role as is (ChatML without tool support, e.g. SmolLM2's):
    /// each result is a turn of its own with the `tool` role.
    ToolRole,
}

impl ToolResults {
    /// The framing a template's source asks for: it wraps results in `<tool_response>` itself
    /// when the model was tuned on that, and otherwise has no opinion, so the role says it.
    pub fn for_template(source: &str) -> Self {
        if source.contains("<tool_response>") { Self::UserTurn } else { Self::ToolRole }
    }
}

/// The tools the model may call for this request, after `tool_choice`.
pub fn offered_tools(request: &ModelRequest) -> Vec<&ToolSpec> {
    match &request.tool_choice {
        ToolChoice::None => Vec::new(),
        ToolChoice::Tool(name) => request.tools.iter().filter(|t| &t.name == name).map(AsRef::as_ref).collect(),
        ToolChoice::Auto | ToolChoice::Required => request.tools.iter().map(AsRef::as_ref).collect(),
    }
}

/// True when the conversation holds tool calls or results, which a small model tends to imitate.
pub fn has_tool_history(request: &ModelRequest) -> bool {
    request.messages.iter().any(|m| m.role == Role::Tool || !m.tool_calls.is_empty())
}

/// The calls of the last assistant turn when only their results follow it: what the model just
/// asked for and got, so asking again with the same arguments cannot tell it anything new.
pub fn just_answered(request: &ModelRequest) -> &[ToolCall] {
    let messages = &request.messages;
    let results = messages.iter().rev().take_while(|m| m.role == Role::Tool).count();
    match messages.len().checked_sub(results + 1) {
        Some(i) if results > 0 && messages[i].role == Role::Assistant => &messages[i].tool_calls,
        _ => &[],
    }
}

/// The conversation as template turns: every system message merged into one leading turn, the
/// tool block appended to it, assistant tool calls in Hermes framing, tool results as `results`.
pub fn turns(request: &ModelRequest, results: ToolResults) -> Vec<Turn> {
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
        out.push(Turn { role: "system", content: system.join("\n\n") });
    }
    let mut previous = None;
    for message in request.messages.iter() {
        let after_result = previous == Some(Role::Tool);
        previous = Some(message.role);
        match message.role {
            Role::System => {}
            Role::User => out.push(Turn { role: "user", content: message.text_content() }),
            Role::Assistant => out.push(Turn { role: "assistant", content: assistant_text(message) }),
            Role::Tool => {
                let result = message.text_content();
                let response = format!("{RESPONSE_OPEN}\n{result}\n{RESPONSE_CLOSE}");
                match (results, out.last_mut()) {
                    (ToolResults::ToolRole, _) => out.push(Turn { role: "tool", content: result }),
                    // A result right after another result joins its turn, as Qwen's template does.
                    (ToolResults::UserTurn, Some(last)) if after_result => {
                        last.content.push('\n');
                        last.content.push_str(&response);
                    }
                    (ToolResults::UserTurn, _) => out.push(Turn { role: "user", content: response }),
                }
            }
        }
    }
    out
}

const RESPONSE_OPEN: &str = "<tool_response>";
const RESPONSE_CLOSE: &str = "</tool_response>";

/// The tool block in the words and JSON spacing of the Hermes chat template (Qwen2.5's own, which
/// writes tools with Jinja's `tojson`). A small model recognises the system prompt it was tuned on
/// token for token: given a paraphrase, Qwen2.5-Coder-0.5B left to choose (`auto`) described a
/// call in a Markdown block under a made-up name instead of calling `read`.
fn tool_block(tools: &[&ToolSpec]) -> String {
    let signatures: Vec<String> = tools
        .iter()
        .map(|t| {
            tojson(&serde_json::json!({
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
            }))
        })
        .collect();
    format!(
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n\
         You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{}\n</tools>\n\n\
         For each function call, return a json object with function name and arguments within \
         <tool_call></tool_call> XML tags:\n<tool_call>\n{{\"name\": <function-name>, \"arguments\": <args-json-object>}}\n</tool_call>",
        signatures.join("\n")
    )
}

/// `value` on one line with `", "` and `": "` between items, as the templates' `tojson` writes it.
fn tojson(value: &serde_json::Value) -> String {
    let mut out = Vec::new();
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, TojsonFormatter);
    // Writing a `Value` to a Vec cannot fail, and serde_json writes only UTF-8.
    let _ = serde::Serialize::serialize(value, &mut serializer);
    String::from_utf8(out).unwrap_or_default()
}

/// Compact JSON with a space after every `,` and `:` (Python's `json.dumps` defaults).
struct TojsonFormatter;

/// `, ` before every array value or object key but the first.
fn separator<W: ?Sized + std::io::Write>(writer: &mut W, first: bool) -> std::io::Result<()> {
    if first { Ok(()) } else { writer.write_all(b", ") }
}

impl serde_json::ser::Formatter for TojsonFormatter {
    fn begin_array_value<W: ?Sized + std::io::Write>(&mut self, writer: &mut W, first: bool) -> std::io::Result<()> {
        separator(writer, first)
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(&mut self, writer: &mut W, first: bool) -> std::io::Result<()> {
        separator(writer, first)
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        writer.write_all(b": ")
    }
}

fn assistant_text(message: &Message) -> String {
    let mut parts = vec![message.text_content()];
    parts.extend(message.tool_calls.iter().map(|call| {
        let arguments: serde_json::Value =
            serde_json::from_str(&call.arguments).unwrap_or_else(|_| serde_json::Value::String(call.arguments.clone()));
        format!("<tool_call>\n{}\n</tool_call>", serde_json::json!({"name": call.name, "arguments": arguments}))
    }));
    parts.retain(|p| !p.is_empty());
    parts.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

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
            messages: vec![Message::system("Be brief."), Message::user("hi"), Message::system("Be kind.")].into(),
            tools: vec![read_tool().into()],
            ..Default::default()
        };
        let t = turns(&request, ToolResults::UserTurn);
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].role, "system");
        assert!(t[0].content.starts_with("Be brief.\n\nBe kind.\n\n# Tools"));
        assert!(t[0].content.contains(r#""name": "read""#));
        assert_eq!(t[1], Turn { role: "user", content: "hi".into() });
    }

    #[test]
    fn auto_offers_the_tools_in_the_words_of_the_hermes_template() {
        let mut request = ModelRequest {
            messages: vec![Message::user("Read notes.txt.")].into(),
            tools: vec![read_tool().into()],
            ..Default::default()
        };
        assert_eq!(request.tool_choice, ToolChoice::Auto);
        let system = turns(&request, ToolResults::UserTurn).remove(0);
        assert_eq!(system.role, "system");
        assert_eq!(
            system.content,
            "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n\
             You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n\
             {\"type\": \"function\", \"function\": {\"name\": \"read\", \"description\": \"Read a file\", \
             \"parameters\": {\"type\": \"object\", \"properties\": {\"path\": {\"type\": \"string\"}}, \"required\": [\"path\"]}}}\n\
             </tools>\n\nFor each function call, return a json object with function name and arguments within \
             <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>"
        );
        request.tool_choice = ToolChoice::None;
        assert_eq!(turns(&request, ToolResults::UserTurn)[0].role, "user", "`none` offers nothing");
    }

    /// A call to `read` answered by two results (a model may call twice in one turn).
    fn answered_call() -> ModelRequest {
        let mut call = Message::assistant("");
        call.tool_calls.push(ToolCall { id: "c1".into(), name: "read".into(), arguments: r#"{"path":"a"}"#.into() });
        ModelRequest {
            messages: vec![
                Message::user("read a"),
                call,
                Message::tool_result("c1", "hello"),
                Message::tool_result("c2", "world"),
            ]
            .into(),
            tools: vec![read_tool().into()],
            tool_choice: ToolChoice::None,
            ..Default::default()
        }
    }

    #[test]
    fn tool_history_is_written_in_hermes_framing() {
        let t = turns(&answered_call(), ToolResults::UserTurn);
        assert_eq!(t.len(), 3, "no system turn when no tools are offered and none is given");
        assert_eq!(t[1].content, "<tool_call>\n{\"name\":\"read\",\"arguments\":{\"path\":\"a\"}}\n</tool_call>");
        assert_eq!(
            t[2],
            Turn {
                role: "user",
                content: "<tool_response>\nhello\n</tool_response>\n<tool_response>\nworld\n</tool_response>".into()
            },
            "consecutive results share one user turn"
        );
    }

    #[test]
    fn the_last_round_of_calls_is_just_answered_until_someone_speaks() {
        let mut request = answered_call();
        assert!(has_tool_history(&request));
        assert_eq!(just_answered(&request)[0].name, "read");
        Arc::make_mut(&mut request.messages).push(Message::user("and now?"));
        assert!(just_answered(&request).is_empty(), "a new question is not a repeat");
        Arc::make_mut(&mut request.messages).truncate(2);
        assert!(just_answered(&request).is_empty(), "the call has no result yet");
        let chat = ModelRequest {
            messages: vec![Message::user("hi"), Message::assistant("hello")].into(),
            ..Default::default()
        };
        assert!(!has_tool_history(&chat) && just_answered(&chat).is_empty());
    }

    #[test]
    fn a_template_without_tool_framing_gets_tool_turns() {
        let t = turns(&answered_call(), ToolResults::ToolRole);
        let results: Vec<_> = t.iter().skip(2).map(|t| (t.role, t.content.as_str())).collect();
        assert_eq!(results, [("tool", "hello"), ("tool", "world")]);
        // Qwen2.5's template wraps results itself; SmolLM2's (plain ChatML) writes roles as given.
        let qwen = "{%- elif message.role == \"tool\" %}{{- '<|im_start|>user' }}{{- '\\n<tool_response>\\n' }}";
        assert_eq!(ToolResults::for_template(qwen), ToolResults::UserTurn);
        let smollm = "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}";
        assert_eq!(ToolResults::for_template(smollm), ToolResults::ToolRole);
        assert_eq!(ToolResults::for_template("chatml"), ToolResults::ToolRole);
    }

    #[test]
    fn tool_choice_narrows_the_offer() {
        let mut request = ModelRequest { tools: vec![read_tool().into()], ..Default::default() };
        request.tools.push(ToolSpec { name: "write".into(), ..read_tool() }.into());
        request.tool_choice = ToolChoice::Tool("write".into());
        assert_eq!(offered_tools(&request).iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["write"]);
        request.tool_choice = ToolChoice::Required;
        assert_eq!(offered_tools(&request).len(), 2);
    }
}
