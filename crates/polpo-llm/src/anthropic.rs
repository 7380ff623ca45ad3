//! The Anthropic Messages wire: system text in `system`, tool calls as `tool_use` blocks,
//! tool results as `tool_result` blocks in the next user turn, thinking as reasoning.
//!
//! A `response_format` becomes Claude's native structured output: a tool whose
//! `input_schema` is the schema, forced with `tool_choice: {type: "tool"}`; its input comes
//! back as the answer text, as on the OpenAI wire.

use crate::config::{ApiKey, ProviderConfig};
use crate::decode::{self, Step, ToolCalls, WireDecoder};
use crate::http::{Transport, classify, provider_message};
use crate::sse::SseEvent;
use crate::{LlmError, LlmErrorKind, ModelEvent, ModelProvider, ModelRequest, ModelStream, ToolChoice};
use polpo_core::message::{Content, ContentPart, FinishReason, Message, Role, Usage};
use serde_json::{Value, json};
use std::collections::HashMap;

/// The API version this client speaks.
const ANTHROPIC_VERSION: &str = "2023-06-01";
/// `max_tokens` is mandatory on this wire; used when the request sets none.
const DEFAULT_MAX_TOKENS: u32 = 4096;

/// A model behind the Anthropic Messages API.
pub struct AnthropicProvider {
    transport: Transport,
    url: reqwest::Url,
    stream: bool,
}

impl AnthropicProvider {
    /// A provider for `config`, authenticating with `api_key` as `x-api-key` when given.
    pub fn new(config: &ProviderConfig, api_key: Option<ApiKey>) -> Result<Self, LlmError> {
        let mut config = config.clone();
        config.headers.entry("anthropic-version".into()).or_insert_with(|| ANTHROPIC_VERSION.into());
        let transport = Transport::new(&config, api_key, |key| vec![("x-api-key", key.expose().to_owned())])?;
        Ok(Self { transport, url: crate::http::endpoint(&config.base_url, "/v1/messages")?, stream: config.stream })
    }
}

#[async_trait::async_trait]
impl ModelProvider for AnthropicProvider {
    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, LlmError> {
        let body = request_body(&request, self.stream);
        let format = request.response_format.as_ref().and_then(FormatTool::new);
        let decoder: Option<Box<dyn WireDecoder>> =
            if self.stream { Some(Box::new(Decoder { format: format.clone(), ..Decoder::default() })) } else { None };
        decode::call(&self.transport, &self.url, crate::http::encode(&body)?, decoder, move |body| {
            events_from_body(body, format.as_ref())
        })
        .await
    }
}

/// The forced tool that carries a `response_format` on this wire.
#[derive(Debug, Clone, PartialEq)]
struct FormatTool {
    /// The `json_schema` name (`json_answer` for `json_object`).
    name: String,
    /// Its `input_schema`: the schema, wrapped in `{"value": …}` unless it describes an object
    /// (tool input is always an object).
    input_schema: Value,
    /// The answer is the `value` property of the input rather than the input itself.
    wrapped: bool,
}

impl FormatTool {
    /// `None` for a text format (or one this wire has no equivalent for).
    fn new(response_format: &Value) -> Option<Self> {
        let (name, schema) = match response_format["type"].as_str()? {
            "json_object" => ("json_answer", json!({"type": "object"})),
            "json_schema" => {
                let spec = &response_format["json_schema"];
                (spec["name"].as_str().unwrap_or("response"), spec.get("schema").cloned().unwrap_or_else(|| json!({})))
            }
            _ => return None,
        };
        let wrapped = schema["type"] != "object";
        let input_schema = if wrapped {
            json!({"type": "object", "properties": {"value": schema}, "required": ["value"], "additionalProperties": false})
        } else {
            schema
        };
        Some(Self { name: name.to_owned(), input_schema, wrapped })
    }

    /// The answer text from the tool's complete input JSON.
    fn answer(&self, input: &str) -> String {
        match serde_json::from_str::<Value>(input) {
            Ok(v) if self.wrapped => v.get("value").map_or_else(|| input.to_owned(), Value::to_string),
            // Sent as produced; the caller validates it against the schema.
            _ => input.to_owned(),
        }
    }
}

/// Thinking budget for a reasoning effort; `None` leaves thinking off.
fn thinking_budget(effort: Option<&str>) -> Option<u32> {
    match effort? {
        "minimal" => Some(1024),
        "low" => Some(2048),
        "medium" => Some(8192),
        "high" => Some(16384),
        "xhigh" => Some(32000),
        _ => None,
    }
}

/// The JSON body of a Messages request.
pub(crate) fn request_body(request: &ModelRequest, stream: bool) -> Value {
    let (system, messages) = wire_messages(&request.messages);
    let format = request.response_format.as_ref().and_then(FormatTool::new);
    // Anthropic refuses thinking together with a forced tool, which a response format is.
    let budget = thinking_budget(request.reasoning.as_deref()).filter(|_| format.is_none());
    let requested = request.max_output_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
    // The thinking budget counts against max_tokens, which must stay larger than it.
    let max_tokens = budget.map_or(requested, |b| requested.max(b + DEFAULT_MAX_TOKENS));
    let mut body = json!({"model": request.model, "max_tokens": max_tokens, "messages": messages, "stream": stream});
    if let Some(system) = system {
        body["system"] = json!(system);
    }
    let mut tools: Vec<Value> = request
        .tools
        .iter()
        .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
        .collect();
    if let Some(format) = format {
        tools.push(json!({"name": format.name, "description": "Give your final answer as this tool's input.", "input_schema": format.input_schema}));
        body["tool_choice"] = json!({"type": "tool", "name": format.name});
    } else if !tools.is_empty() {
        body["tool_choice"] = match &request.tool_choice {
            ToolChoice::Auto => json!({"type": "auto"}),
            ToolChoice::None => json!({"type": "none"}),
            ToolChoice::Required => json!({"type": "any"}),
            ToolChoice::Tool(name) => json!({"type": "tool", "name": name}),
        };
    }
    if !tools.is_empty() {
        body["tools"] = json!(tools);
    }
    match budget {
        Some(b) => body["thinking"] = json!({"type": "enabled", "budget_tokens": b}),
        // Anthropic rejects a temperature together with thinking.
        None => {
            if let Some(t) = request.temperature {
                body["temperature"] = json!(t);
            }
        }
    }
    body
}

/// System messages joined into `system`; the rest as alternating user/assistant turns, with
/// consecutive same-role blocks merged (tool results all go in one user turn, as required).
fn wire_messages(messages: &[Message]) -> (Option<String>, Vec<Value>) {
    let mut system = Vec::new();
    let mut turns: Vec<(&str, Vec<Value>)> = Vec::new();
    for m in messages {
        let (role, blocks) = match m.role {
            Role::System => {
                system.push(m.text_content());
                continue;
            }
            Role::User => ("user", content_blocks(m.content.as_ref())),
            Role::Tool => (
                "user",
                vec![
                    json!({"type": "tool_result", "tool_use_id": m.tool_call_id.clone().unwrap_or_default(), "content": m.text_content()}),
                ],
            ),
            Role::Assistant => {
                let mut blocks = content_blocks(m.content.as_ref());
                blocks.extend(m.tool_calls.iter().map(|c| {
                    let input = serde_json::from_str::<Value>(&c.arguments)
                        .ok()
                        .filter(Value::is_object)
                        .unwrap_or_else(|| json!({}));
                    json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input})
                }));
                ("assistant", blocks)
            }
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last, existing)) if *last == role => existing.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    let system = (!system.is_empty()).then(|| system.join("\n\n"));
    (system, turns.into_iter().map(|(role, content)| json!({"role": role, "content": content})).collect())
}

fn content_blocks(content: Option<&Content>) -> Vec<Value> {
    let text = |t: &str| (!t.is_empty()).then(|| json!({"type": "text", "text": t}));
    match content {
        None => Vec::new(),
        Some(Content::Text(t)) => text(t).into_iter().collect(),
        Some(Content::Parts(parts)) => parts
            .iter()
            .filter_map(|p| match p {
                ContentPart::Text { text: t } => text(t),
                ContentPart::ImageUrl { image_url } => Some(image_block(&image_url.url)),
                // Files have no portable Messages equivalent; the text parts still go through.
                ContentPart::File { .. } => None,
            })
            .collect(),
    }
}

fn image_block(url: &str) -> Value {
    let inline = url.strip_prefix("data:").and_then(|rest| rest.split_once(";base64,"));
    match inline {
        Some((media_type, data)) => {
            json!({"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}})
        }
        None => json!({"type": "image", "source": {"type": "url", "url": url}}),
    }
}

fn stop_reason(reason: &str) -> FinishReason {
    match reason {
        "end_turn" | "stop_sequence" => FinishReason::Stop,
        "max_tokens" => FinishReason::Length,
        "tool_use" => FinishReason::ToolCalls,
        "refusal" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_owned()),
    }
}

/// Input tokens include cache reads and writes: they all fill the context window.
fn input_tokens(u: &Value) -> u64 {
    ["input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"]
        .iter()
        .filter_map(|k| u[*k].as_u64())
        .sum()
}

fn error_event(v: &Value) -> LlmError {
    let text = v["error"].to_string();
    LlmError::new(classify(None, &text), format!("provider reported an error: {}", provider_message(&v.to_string())))
}

/// Streamed Messages events.
#[derive(Default)]
struct Decoder {
    /// The request's response format; its tool's input is the answer, not a tool call.
    format: Option<FormatTool>,
    /// The content block holding the format tool's input, and the input so far.
    format_block: Option<(u64, String)>,
    tools: ToolCalls,
    /// Content-block index → tool-call index.
    tool_blocks: HashMap<u64, usize>,
    usage: Option<Usage>,
    stop: Option<FinishReason>,
}

impl WireDecoder for Decoder {
    fn event(&mut self, event: SseEvent, out: &mut Vec<ModelEvent>) -> Result<Step, LlmError> {
        let v = decode::json(&event.data)?;
        let block_index = v["index"].as_u64().unwrap_or(0);
        match v["type"].as_str().unwrap_or_default() {
            "message_start" => {
                let u = &v["message"]["usage"];
                self.usage = Some(Usage {
                    input_tokens: input_tokens(u),
                    output_tokens: u["output_tokens"].as_u64().unwrap_or(0),
                });
            }
            "content_block_start" => {
                let block = &v["content_block"];
                match block["type"].as_str().unwrap_or_default() {
                    "text" => out.extend(
                        block["text"].as_str().filter(|t| !t.is_empty()).map(|t| ModelEvent::TextDelta(t.to_owned())),
                    ),
                    "thinking" => out.extend(
                        block["thinking"]
                            .as_str()
                            .filter(|t| !t.is_empty())
                            .map(|t| ModelEvent::ReasoningDelta(t.to_owned())),
                    ),
                    "tool_use" if self.format.as_ref().is_some_and(|f| block["name"] == f.name.as_str()) => {
                        self.format_block = Some((block_index, String::new()));
                    }
                    "tool_use" => {
                        let index = self.tools.len();
                        self.tool_blocks.insert(block_index, index);
                        let id = block["id"].as_str().map(str::to_owned);
                        let name = block["name"].as_str().map(str::to_owned);
                        out.push(self.tools.delta(index, id, name, "")?);
                    }
                    _ => {}
                }
            }
            "content_block_delta" => {
                let delta = &v["delta"];
                match delta["type"].as_str().unwrap_or_default() {
                    "text_delta" => out.extend(delta["text"].as_str().map(|t| ModelEvent::TextDelta(t.to_owned()))),
                    "thinking_delta" => {
                        out.extend(delta["thinking"].as_str().map(|t| ModelEvent::ReasoningDelta(t.to_owned())))
                    }
                    "input_json_delta" if self.format_block.as_ref().is_some_and(|(b, _)| *b == block_index) => {
                        if let Some((_, input)) = &mut self.format_block {
                            input.push_str(delta["partial_json"].as_str().unwrap_or(""));
                        }
                    }
                    "input_json_delta" => {
                        let index = *self.tool_blocks.get(&block_index).ok_or_else(|| {
                            LlmError::new(
                                LlmErrorKind::InvalidResponse,
                                "input_json_delta for a block that is not a tool_use",
                            )
                        })?;
                        out.push(self.tools.delta(index, None, None, delta["partial_json"].as_str().unwrap_or(""))?);
                    }
                    _ => {}
                }
            }
            // The answer is whole once its block closes (partial JSON of a wrapped value cannot
            // be unwrapped piecewise, and a structured answer is validated whole anyway).
            "content_block_stop" if self.format_block.as_ref().is_some_and(|(b, _)| *b == block_index) => {
                if let (Some(format), Some((_, input))) = (&self.format, self.format_block.take()) {
                    out.push(ModelEvent::TextDelta(format.answer(&input)));
                }
            }
            "message_delta" => {
                if let Some(reason) = v["delta"]["stop_reason"].as_str() {
                    self.stop = Some(answered(stop_reason(reason), self.format.is_some()));
                }
                if let Some(output) = v["usage"]["output_tokens"].as_u64() {
                    let usage = self.usage.get_or_insert_with(Usage::default);
                    usage.output_tokens = output;
                    if v["usage"]["input_tokens"].is_u64() {
                        usage.input_tokens = input_tokens(&v["usage"]);
                    }
                }
            }
            "message_stop" => {
                self.tools.finish(self.usage.take(), self.stop.take().unwrap_or(FinishReason::Stop), out)?;
                return Ok(Step::Done);
            }
            "error" => return Err(error_event(&v)),
            _ => {}
        }
        Ok(Step::More)
    }

    fn end(&mut self, out: &mut Vec<ModelEvent>) -> Result<(), LlmError> {
        match self.stop.take() {
            Some(reason) => self.tools.finish(self.usage.take(), reason, out),
            None => Err(LlmError::new(
                LlmErrorKind::ProviderUnavailable,
                "the stream ended before the model finished its answer",
            )),
        }
    }
}

/// A response-format answer ends with `tool_use` on the wire; for the caller it is a stop.
fn answered(reason: FinishReason, formatted: bool) -> FinishReason {
    if formatted && reason == FinishReason::ToolCalls { FinishReason::Stop } else { reason }
}

/// A complete `message` body as the same events a stream would give.
fn events_from_body(body: Value, format: Option<&FormatTool>) -> Result<Vec<ModelEvent>, LlmError> {
    if body["type"] == "error" {
        return Err(error_event(&body));
    }
    let blocks = body["content"]
        .as_array()
        .ok_or_else(|| LlmError::new(LlmErrorKind::InvalidResponse, "response has no content array"))?;
    let mut out = Vec::new();
    let mut tools = ToolCalls::default();
    for block in blocks {
        match block["type"].as_str().unwrap_or_default() {
            "text" => out
                .extend(block["text"].as_str().filter(|t| !t.is_empty()).map(|t| ModelEvent::TextDelta(t.to_owned()))),
            "thinking" => out.extend(
                block["thinking"].as_str().filter(|t| !t.is_empty()).map(|t| ModelEvent::ReasoningDelta(t.to_owned())),
            ),
            "tool_use" => match format.filter(|f| block["name"] == f.name.as_str()) {
                Some(format) => out.push(ModelEvent::TextDelta(format.answer(&block["input"].to_string()))),
                None => {
                    let index = tools.len();
                    let id = block["id"].as_str().map(str::to_owned);
                    let name = block["name"].as_str().map(str::to_owned);
                    out.push(tools.delta(index, id, name, &block["input"].to_string())?);
                }
            },
            _ => {}
        }
    }
    let u = &body["usage"];
    let usage = u
        .is_object()
        .then(|| Usage { input_tokens: input_tokens(u), output_tokens: u["output_tokens"].as_u64().unwrap_or(0) });
    let reason = answered(body["stop_reason"].as_str().map_or(FinishReason::Stop, stop_reason), format.is_some());
    tools.finish(usage, reason, &mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use polpo_core::message::ToolCall;

    #[test]
    fn system_goes_to_the_system_field_and_tool_results_merge_into_one_user_turn() {
        let mut assistant = Message::assistant("Reading both.");
        assistant.tool_calls = vec![
            ToolCall { id: "t1".into(), name: "read".into(), arguments: r#"{"path":"a"}"#.into() },
            ToolCall { id: "t2".into(), name: "read".into(), arguments: "not json".into() },
        ];
        let messages = vec![
            Message::system("Be brief."),
            Message::user("Read a and b"),
            assistant,
            Message::tool_result("t1", "A"),
            Message::tool_result("t2", "B"),
            Message::user("Now?"),
        ];
        let (system, turns) = wire_messages(&messages);
        assert_eq!(system.as_deref(), Some("Be brief."));
        assert_eq!(
            json!(turns),
            json!([
                {"role": "user", "content": [{"type": "text", "text": "Read a and b"}]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Reading both."},
                    {"type": "tool_use", "id": "t1", "name": "read", "input": {"path": "a"}},
                    {"type": "tool_use", "id": "t2", "name": "read", "input": {}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "A"},
                    {"type": "tool_result", "tool_use_id": "t2", "content": "B"},
                    {"type": "text", "text": "Now?"}
                ]}
            ])
        );
    }

    #[test]
    fn thinking_raises_max_tokens_above_the_budget_and_drops_temperature() {
        let request = ModelRequest {
            model: "m".into(),
            reasoning: Some("high".into()),
            temperature: Some(0.2),
            max_output_tokens: Some(1000),
            ..ModelRequest::default()
        };
        let body = request_body(&request, true);
        assert_eq!(body["thinking"], json!({"type": "enabled", "budget_tokens": 16384}));
        assert!(body["max_tokens"].as_u64().unwrap() > 16384);
        assert!(body.get("temperature").is_none());
    }

    #[test]
    fn a_response_format_is_a_forced_tool_whose_input_is_the_answer() {
        let schema = json!({"type": "object", "properties": {"tier": {"type": "string"}}, "required": ["tier"]});
        let format = json!({"type": "json_schema", "json_schema": {"name": "tier", "strict": true, "schema": schema}});
        let request = ModelRequest {
            model: "m".into(),
            reasoning: Some("high".into()),
            response_format: Some(format.clone()),
            ..ModelRequest::default()
        };
        let body = request_body(&request, true);
        assert_eq!(
            body["tools"],
            json!([{"name": "tier", "description": "Give your final answer as this tool's input.", "input_schema": schema}])
        );
        assert_eq!(body["tool_choice"], json!({"type": "tool", "name": "tier"}));
        assert!(body.get("thinking").is_none(), "Anthropic refuses thinking with a forced tool");

        let mut d = Decoder { format: FormatTool::new(&format), ..Decoder::default() };
        let mut out = Vec::new();
        for data in [
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"tier","input":{}}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"tier\":"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"\"paid\"}"}}"#,
            r#"{"type":"content_block_stop","index":0}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":5}}"#,
            r#"{"type":"message_stop"}"#,
        ] {
            d.event(SseEvent { data: data.into(), ..SseEvent::default() }, &mut out).unwrap();
        }
        assert_eq!(out[0], ModelEvent::TextDelta(r#"{"tier":"paid"}"#.into()));
        assert_eq!(out.last(), Some(&ModelEvent::Finish(FinishReason::Stop)));
        assert!(!out.iter().any(|e| matches!(e, ModelEvent::ToolCall(_))));

        let list = FormatTool::new(&json!({"type": "json_schema", "json_schema": {"name": "tags", "schema": {"type": "array", "items": {"type": "string"}}}})).unwrap();
        assert_eq!(
            list.input_schema["properties"]["value"]["type"], "array",
            "tool input is an object, so other roots are wrapped"
        );
        let body = json!({"content": [{"type": "tool_use", "id": "t", "name": "tags", "input": {"value": ["a", "b"]}}], "stop_reason": "tool_use"});
        assert_eq!(events_from_body(body, Some(&list)).unwrap()[0], ModelEvent::TextDelta(r#"["a","b"]"#.into()));
    }

    #[test]
    fn in_stream_error_events_are_classified() {
        let mut d = Decoder::default();
        let data = r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        let Err(error) = d
            .event(SseEvent { event: Some("error".into()), data: data.into(), ..SseEvent::default() }, &mut Vec::new())
        else {
            panic!("an error event must fail the stream")
        };
        assert_eq!(error.kind, LlmErrorKind::ProviderUnavailable);
        assert!(error.message.contains("Overloaded"));
    }

    #[test]
    fn data_url_images_become_base64_sources() {
        assert_eq!(
            image_block("data:image/png;base64,AAAA")["source"],
            json!({"type": "base64", "media_type": "image/png", "data": "AAAA"})
        );
        assert_eq!(image_block("https://x/y.png")["source"]["type"], "url");
    }
}
