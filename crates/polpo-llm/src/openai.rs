//! The OpenAI chat-completions wire: requests, streamed chunks and complete responses.
//!
//! Works for every server that speaks this wire (OpenAI, OpenRouter, Groq, Together, vLLM,
//! Ollama, LM Studio, llama.cpp …). Reasoning arrives as `reasoning_content` (DeepSeek, vLLM)
//! or `reasoning` (OpenRouter, Ollama); both become reasoning deltas.

use crate::config::{ApiKey, ProviderConfig};
use crate::decode::{self, Step, ToolCalls, WireDecoder};
use crate::http::{Transport, cannot_encode, classify, provider_message};
use crate::sse::SseEvent;
use crate::wire_tools::WireTools;
use crate::{LlmError, LlmErrorKind, ModelEvent, ModelProvider, ModelRequest, ModelStream, ToolChoice};
use polpo_core::message::{FinishReason, Message, Role, Usage};
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::borrow::Cow;

/// A model behind an OpenAI-compatible chat-completions endpoint.
pub struct OpenAiProvider {
    transport: Transport,
    url: reqwest::Url,
    stream: bool,
    tools: WireTools,
}

impl OpenAiProvider {
    /// A provider for `config`, authenticating with `api_key` as a bearer token when given.
    pub fn new(config: &ProviderConfig, api_key: Option<ApiKey>) -> Result<Self, LlmError> {
        let transport =
            Transport::new(config, api_key, |key| vec![("authorization", format!("Bearer {}", key.expose()))])?;
        Ok(Self {
            transport,
            url: crate::http::endpoint(&config.base_url, "/chat/completions")?,
            stream: config.stream,
            tools: WireTools::default(),
        })
    }
}

#[async_trait::async_trait]
impl ModelProvider for OpenAiProvider {
    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, LlmError> {
        let body = request_bytes(&request, self.stream, &self.tools).map_err(cannot_encode)?;
        let decoder: Option<Box<dyn WireDecoder>> = if self.stream { Some(Box::new(Decoder::default())) } else { None };
        decode::call(&self.transport, &self.url, body.into(), decoder, events_from_body).await
    }
}

/// The JSON body of a chat-completions request, borrowing the request: it is serialised
/// straight to bytes, without first copying every message and tool schema into a
/// `serde_json::Value` (that copy was the largest cost of a model call in the profile). The
/// tools are not in it: [`request_bytes`] appends their JSON, written once per spec.
#[derive(Serialize)]
pub(crate) struct RequestBody<'a> {
    model: &'a str,
    #[serde(serialize_with = "wire_messages")]
    messages: &'a [Message],
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<WireToolChoice<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_effort: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
}

/// Asks a streaming server for the usage in its last chunk.
#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

/// `{"type": "function", "function": {name, description, parameters}}`.
#[derive(Serialize)]
struct WireTool<'a> {
    r#type: &'static str,
    function: WireFunction<'a>,
}

#[derive(Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parameters: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    arguments: Option<&'a str>,
}

/// `"auto" | "none" | "required" | {"type": "function", "function": {"name"}}`.
#[derive(Serialize)]
#[serde(untagged)]
enum WireToolChoice<'a> {
    Mode(&'static str),
    Tool { r#type: &'static str, function: WireFunction<'a> },
}

/// A message on the wire: `content` always present (`null` for an assistant message that only
/// calls tools), the rest when set.
#[derive(Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    content: &'a Option<polpo_core::message::Content>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<WireCall<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
}

/// `{"id", "type": "function", "function": {name, arguments}}`.
#[derive(Serialize)]
struct WireCall<'a> {
    id: &'a str,
    r#type: &'static str,
    function: WireFunction<'a>,
}

/// A function named (and, for a call, given its raw arguments) with nothing else.
fn function<'a>(name: &'a str, arguments: Option<&'a str>) -> WireFunction<'a> {
    WireFunction { name, description: None, parameters: None, arguments }
}

fn wire_messages<S: serde::Serializer>(messages: &&[Message], serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_seq(messages.iter().map(wire_message))
}

/// The body of a chat-completions request for `request`.
pub(crate) fn request_body(request: &ModelRequest, stream: bool) -> RequestBody<'_> {
    let with_tools = !request.tools.is_empty();
    RequestBody {
        model: &request.model,
        messages: &request.messages,
        stream,
        stream_options: stream.then_some(StreamOptions { include_usage: true }),
        tool_choice: with_tools.then(|| match &request.tool_choice {
            ToolChoice::Auto => WireToolChoice::Mode("auto"),
            ToolChoice::None => WireToolChoice::Mode("none"),
            ToolChoice::Required => WireToolChoice::Mode("required"),
            ToolChoice::Tool(name) => WireToolChoice::Tool { r#type: "function", function: function(name, None) },
        }),
        response_format: request.response_format.as_ref(),
        reasoning_effort: request.reasoning.as_deref().filter(|e| *e != "off"),
        max_tokens: request.max_output_tokens,
        temperature: request.temperature,
    }
}

/// The bytes of a chat-completions request: [`request_body`], then `"tools"`, each spec's JSON
/// taken from `cache` (written on first use).
pub(crate) fn request_bytes(request: &ModelRequest, stream: bool, cache: &WireTools) -> serde_json::Result<Vec<u8>> {
    let mut body = serde_json::to_vec(&request_body(request, stream))?;
    if !request.tools.is_empty() {
        // The body is a JSON object: its last byte is the closing brace the tools go before.
        body.pop();
        body.extend_from_slice(br#","tools":["#);
        cache.write_all(&request.tools, &mut body, |t| {
            serde_json::to_vec(&WireTool {
                r#type: "function",
                function: WireFunction {
                    name: &t.name,
                    description: Some(&t.description),
                    parameters: Some(&t.parameters),
                    arguments: None,
                },
            })
        })?;
        body.extend_from_slice(b"]}");
    }
    Ok(body)
}

fn wire_message(m: &Message) -> WireMessage<'_> {
    let role = match m.role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    };
    WireMessage {
        role,
        content: &m.content,
        tool_calls: m
            .tool_calls
            .iter()
            .map(|c| WireCall { id: &c.id, r#type: "function", function: function(&c.name, Some(&c.arguments)) })
            .collect(),
        tool_call_id: m.tool_call_id.as_deref(),
        name: m.name.as_deref(),
    }
}

fn finish_reason(reason: &str) -> FinishReason {
    match reason {
        "stop" => FinishReason::Stop,
        "length" => FinishReason::Length,
        "tool_calls" | "function_call" => FinishReason::ToolCalls,
        "content_filter" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_owned()),
    }
}

fn usage(v: &Value) -> Option<Usage> {
    let u = v.get("usage").filter(|u| u.is_object())?;
    Some(Usage {
        input_tokens: u["prompt_tokens"].as_u64().unwrap_or(0),
        output_tokens: u["completion_tokens"].as_u64().unwrap_or(0),
    })
}

/// An `{"error": …}` object some servers send inside a 200 stream or body.
fn embedded_error(v: &Value) -> Option<LlmError> {
    let error = v.get("error").filter(|e| !e.is_null())?;
    let text = error.to_string();
    Some(LlmError::new(
        classify(None, &text),
        format!("provider reported an error: {}", provider_message(&v.to_string())),
    ))
}

fn reasoning_text(v: &Value) -> Option<&str> {
    v["reasoning_content"].as_str().or(v["reasoning"].as_str()).filter(|t| !t.is_empty())
}

/// Streamed `chat.completion.chunk` events.
#[derive(Default)]
struct Decoder {
    tools: ToolCalls,
    usage: Option<Usage>,
    finish: Option<FinishReason>,
}

impl Decoder {
    fn close(&mut self, out: &mut Vec<ModelEvent>) -> Result<(), LlmError> {
        let reason = self.finish.take().unwrap_or(FinishReason::Stop);
        self.tools.finish(self.usage.take(), reason, out)
    }
}

impl WireDecoder for Decoder {
    fn event(&mut self, event: SseEvent, out: &mut Vec<ModelEvent>) -> Result<Step, LlmError> {
        if event.data.trim() == "[DONE]" {
            self.close(out)?;
            return Ok(Step::Done);
        }
        // A model streams a chunk per token, so this runs per token: the typed read below
        // builds no map of every field (a `Value` tree cost ≈ 10 k instructions a chunk). A
        // chunk it cannot read (an error object, a field of another type than OpenAI's) is read
        // as a `Value`, as leniently as before.
        match serde_json::from_str::<WireChunk>(&event.data) {
            Ok(chunk) if chunk.error.is_none() => self.apply(ChunkFields::of_wire(&chunk), out)?,
            _ => {
                let chunk = decode::json(&event.data)?;
                if let Some(error) = embedded_error(&chunk) {
                    return Err(error);
                }
                self.apply(ChunkFields::of_value(&chunk), out)?;
            }
        }
        Ok(Step::More)
    }

    fn end(&mut self, out: &mut Vec<ModelEvent>) -> Result<(), LlmError> {
        if self.finish.is_none() {
            return Err(LlmError::new(
                LlmErrorKind::ProviderUnavailable,
                "the stream ended before the model finished its answer",
            ));
        }
        self.close(out)
    }
}

impl Decoder {
    /// What one chunk adds: usage, reasoning and text deltas, tool-call fragments, the reason
    /// the answer ends.
    fn apply(&mut self, chunk: ChunkFields<'_>, out: &mut Vec<ModelEvent>) -> Result<(), LlmError> {
        if let Some(usage) = chunk.usage {
            self.usage = Some(usage);
        }
        if let Some(r) = chunk.reasoning.filter(|t| !t.is_empty()) {
            out.push(ModelEvent::ReasoningDelta(r.to_owned()));
        }
        if let Some(t) = chunk.content.filter(|t| !t.is_empty()) {
            out.push(ModelEvent::TextDelta(t.to_owned()));
        }
        for (position, call) in chunk.calls.into_iter().enumerate() {
            let index = call.index.map_or(position, |i| i as usize);
            out.push(self.tools.delta(
                index,
                call.id.map(str::to_owned),
                call.name.map(str::to_owned),
                call.arguments,
            )?);
        }
        if let Some(reason) = chunk.finish {
            self.finish = Some(finish_reason(reason));
        }
        Ok(())
    }
}

/// The fields of a streamed chunk the decoder acts on, read from its first choice.
#[derive(Default)]
struct ChunkFields<'a> {
    usage: Option<Usage>,
    /// `reasoning_content`, else `reasoning`, of the delta.
    reasoning: Option<&'a str>,
    content: Option<&'a str>,
    calls: Vec<CallFields<'a>>,
    finish: Option<&'a str>,
}

/// One tool-call fragment of a delta.
struct CallFields<'a> {
    index: Option<u64>,
    id: Option<&'a str>,
    name: Option<&'a str>,
    arguments: &'a str,
}

impl<'a> ChunkFields<'a> {
    fn of_value(chunk: &'a Value) -> Self {
        let usage = usage(chunk);
        let Some(choice) = chunk["choices"].get(0) else { return ChunkFields { usage, ..ChunkFields::default() } };
        let delta = &choice["delta"];
        ChunkFields {
            usage,
            reasoning: reasoning_text(delta),
            content: delta["content"].as_str(),
            calls: delta["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|call| CallFields {
                    index: call["index"].as_u64(),
                    id: call["id"].as_str(),
                    name: call["function"]["name"].as_str(),
                    arguments: call["function"]["arguments"].as_str().unwrap_or(""),
                })
                .collect(),
            finish: choice["finish_reason"].as_str(),
        }
    }

    fn of_wire(chunk: &'a WireChunk<'a>) -> Self {
        let usage = chunk.usage.as_ref().map(|u| Usage {
            input_tokens: u.prompt_tokens.unwrap_or(0),
            output_tokens: u.completion_tokens.unwrap_or(0),
        });
        let Some(choice) = chunk.choices.as_deref().and_then(<[_]>::first) else {
            return ChunkFields { usage, ..ChunkFields::default() };
        };
        let delta = choice.delta.as_ref();
        let text = |field: fn(&'a WireDelta<'a>) -> &'a Option<Cow<'a, str>>| delta.and_then(|d| field(d).as_deref());
        ChunkFields {
            usage,
            reasoning: text(|d| &d.reasoning_content).or(text(|d| &d.reasoning)),
            content: text(|d| &d.content),
            calls: delta
                .and_then(|d| d.tool_calls.as_deref())
                .unwrap_or_default()
                .iter()
                .map(|call| {
                    let function = call.function.as_ref();
                    CallFields {
                        index: call.index,
                        id: call.id.as_deref(),
                        name: function.and_then(|f| f.name.as_deref()),
                        arguments: function.and_then(|f| f.arguments.as_deref()).unwrap_or(""),
                    }
                })
                .collect(),
            finish: choice.finish_reason.as_deref(),
        }
    }
}

/// A streamed `chat.completion.chunk` as OpenAI types it: only the fields the decoder reads
/// (the rest is skipped), strings borrowed from the event when they hold no escapes. `null`
/// reads as absent, as in the `Value` path.
#[derive(Deserialize)]
struct WireChunk<'a> {
    #[serde(default, borrow)]
    choices: Option<Vec<WireChoice<'a>>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    /// Present and not `null`: the chunk is read as a `Value` for its error.
    #[serde(default)]
    error: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct WireChoice<'a> {
    #[serde(default, borrow)]
    delta: Option<WireDelta<'a>>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct WireDelta<'a> {
    #[serde(default, borrow)]
    content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<WireCallDelta<'a>>>,
}

#[derive(Deserialize)]
struct WireCallDelta<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    function: Option<WireFunctionDelta<'a>>,
}

#[derive(Deserialize)]
struct WireFunctionDelta<'a> {
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    arguments: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
}

/// A complete `chat.completion` body as the same events a stream would give.
fn events_from_body(body: Value) -> Result<Vec<ModelEvent>, LlmError> {
    if let Some(error) = embedded_error(&body) {
        return Err(error);
    }
    let choice = body["choices"]
        .get(0)
        .ok_or_else(|| LlmError::new(LlmErrorKind::InvalidResponse, "response has no choices"))?;
    let message = &choice["message"];
    let mut out = Vec::new();
    if let Some(r) = reasoning_text(message) {
        out.push(ModelEvent::ReasoningDelta(r.to_owned()));
    }
    if let Some(t) = message["content"].as_str().filter(|t| !t.is_empty()) {
        out.push(ModelEvent::TextDelta(t.to_owned()));
    }
    let mut tools = ToolCalls::default();
    for (index, call) in message["tool_calls"].as_array().into_iter().flatten().enumerate() {
        let id = call["id"].as_str().map(str::to_owned);
        let name = call["function"]["name"].as_str().map(str::to_owned);
        out.push(tools.delta(index, id, name, call["function"]["arguments"].as_str().unwrap_or(""))?);
    }
    let reason = choice["finish_reason"].as_str().map_or(FinishReason::Stop, finish_reason);
    tools.finish(usage(&body), reason, &mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn feed(lines: &[&str]) -> Vec<ModelEvent> {
        let mut d = Decoder::default();
        let mut out = Vec::new();
        for data in lines {
            d.event(SseEvent { data: (*data).to_owned(), ..SseEvent::default() }, &mut out).unwrap();
        }
        out
    }

    #[test]
    fn both_reasoning_field_names_become_reasoning_deltas() {
        let out = feed(&[
            r#"{"choices":[{"index":0,"delta":{"reasoning":"think "}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"reasoning_content":"more"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":"stop"}]}"#,
            "[DONE]",
        ]);
        assert_eq!(
            out,
            vec![
                ModelEvent::ReasoningDelta("think ".into()),
                ModelEvent::ReasoningDelta("more".into()),
                ModelEvent::TextDelta("ok".into()),
                ModelEvent::Finish(FinishReason::Stop)
            ]
        );
    }

    /// The typed read of a chunk and the `Value` read give the same events, chunk by chunk,
    /// for every shape providers send: escapes, empty and missing fields, `null`s, unknown
    /// fields, fragments without an index, and fields of another type (which the typed read
    /// leaves to the `Value` read).
    #[test]
    fn typed_and_value_reads_of_a_chunk_agree() {
        let chunks = [
            r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","system_fingerprint":"fp","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"say \"hi\"\n\u00e9 ✓"}}]}"#,
            r#"{"choices":[{"delta":{"reasoning_content":"","reasoning":"ignored: the first field is a string"}}]}"#,
            r#"{"choices":[{"delta":{"reasoning_content":null,"reasoning":"think"}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"id":"b","type":"function","function":{"name":"grep","arguments":""}},{"id":null,"function":{"name":null,"arguments":"{\"q\":"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"function":{"arguments":"1}"}}]},"finish_reason":"tool_calls"}]}"#,
            r#"{"choices":[{"delta":{"content":[{"type":"text","text":"parts"}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":2.0,"function":{"name":"x"}}]}}]}"#,
            r#"{"choices":[{"delta":{}},{"delta":{"content":"second choice"}}]}"#,
            r#"{"choices":[{"finish_reason":"length"}],"usage":null}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12,"prompt_tokens_details":{"cached_tokens":0}}}"#,
            r#"{"choices":null,"usage":{"prompt_tokens":-1}}"#,
            r#"{"choices":[{"delta":"not an object","finish_reason":7}],"error":null}"#,
        ];
        let (mut typed, mut valued) = (Decoder::default(), Decoder::default());
        for data in chunks {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            typed.event(SseEvent { data: data.to_owned(), ..SseEvent::default() }, &mut a).unwrap();
            let value: Value = serde_json::from_str(data).unwrap();
            valued.apply(ChunkFields::of_value(&value), &mut b).unwrap();
            assert_eq!(a, b, "{data}");
            assert_eq!(typed.usage, valued.usage, "{data}");
            assert_eq!(typed.finish, valued.finish, "{data}");
        }
        let (mut a, mut b) = (Vec::new(), Vec::new());
        typed.close(&mut a).unwrap();
        valued.close(&mut b).unwrap();
        assert_eq!(a, b);
        assert!(
            a.iter().any(|e| matches!(e, ModelEvent::ToolCall(c) if c.name == "grep" && c.arguments == "{\"q\":1}"))
        );
    }

    #[test]
    fn an_error_object_inside_the_stream_is_classified() {
        let mut d = Decoder::default();
        let data = r#"{"error":{"message":"Rate limit reached","code":"rate_limit_exceeded"}}"#;
        let Err(error) = d.event(SseEvent { data: data.into(), ..SseEvent::default() }, &mut Vec::new()) else {
            panic!("an error chunk must fail the stream")
        };
        assert_eq!(error.kind, LlmErrorKind::RateLimited);
    }

    #[test]
    fn assistant_tool_calls_use_the_function_shape() {
        let mut m = Message::assistant("");
        m.content = None;
        m.tool_calls.push(polpo_core::message::ToolCall {
            id: "c1".into(),
            name: "read".into(),
            arguments: "{}".into(),
        });
        assert_eq!(
            serde_json::to_value(wire_message(&m)).unwrap(),
            json!({"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"read","arguments":"{}"}}]})
        );
    }

    #[test]
    fn a_request_body_has_the_chat_completions_shape() {
        let tool = polpo_core::tool::ToolSpec {
            name: "read".into(),
            description: "Read a file.".into(),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        };
        let tool_message = Message::tool_result("c1", "hello");
        let request = ModelRequest {
            model: "gpt-x".into(),
            messages: std::sync::Arc::new(vec![Message::system("Be brief."), tool_message]),
            tools: vec![std::sync::Arc::new(tool)],
            tool_choice: ToolChoice::Tool("read".into()),
            response_format: Some(json!({"type": "json_object"})),
            reasoning: Some("low".into()),
            max_output_tokens: Some(50),
            temperature: Some(0.25),
        };
        let cache = WireTools::default();
        let bytes = |request: &ModelRequest, stream| {
            serde_json::from_slice::<Value>(&request_bytes(request, stream, &cache).unwrap()).unwrap()
        };
        let expected = json!({
                "model": "gpt-x",
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "tool", "content": "hello", "tool_call_id": "c1"},
                ],
                "stream": true,
                "stream_options": {"include_usage": true},
                "tools": [{"type": "function", "function": {"name": "read", "description": "Read a file.",
                    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}],
                "tool_choice": {"type": "function", "function": {"name": "read"}},
                "response_format": {"type": "json_object"},
                "reasoning_effort": "low",
                "max_tokens": 50,
                "temperature": 0.25,
        });
        assert_eq!(bytes(&request, true), expected);
        assert_eq!(bytes(&request, true), expected, "the same again, its tool's JSON from the cache");
        let bare = ModelRequest { tools: Vec::new(), reasoning: Some("off".into()), temperature: None, ..request };
        let body = bytes(&bare, false);
        for absent in ["stream_options", "tools", "tool_choice", "reasoning_effort", "temperature"] {
            assert!(body.get(absent).is_none(), "{absent} in {body}");
        }
    }
}
