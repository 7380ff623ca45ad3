//! The OpenAI chat-completions wire: requests, streamed chunks and complete responses.
//!
//! Works for every server that speaks this wire (OpenAI, OpenRouter, Groq, Together, vLLM,
//! Ollama, LM Studio, llama.cpp …). Reasoning arrives as `reasoning_content` (DeepSeek, vLLM)
//! or `reasoning` (OpenRouter, Ollama); both become reasoning deltas.

use crate::config::{ApiKey, ProviderConfig};
use crate::decode::{self, Step, ToolCalls, WireDecoder};
use crate::http::{Transport, classify, provider_message};
use crate::sse::SseEvent;
use crate::{LlmError, LlmErrorKind, ModelEvent, ModelProvider, ModelRequest, ModelStream, ToolChoice};
use polpo_core::message::{FinishReason, Message, Role, Usage};
use serde_json::{Value, json};

/// A model behind an OpenAI-compatible chat-completions endpoint.
pub struct OpenAiProvider {
    transport: Transport,
    url: String,
    stream: bool,
}

impl OpenAiProvider {
    /// A provider for `config`, authenticating with `api_key` as a bearer token when given.
    pub fn new(config: &ProviderConfig, api_key: Option<ApiKey>) -> Result<Self, LlmError> {
        let transport =
            Transport::new(config, api_key, |key| vec![("authorization", format!("Bearer {}", key.expose()))])?;
        Ok(Self {
            transport,
            url: format!("{}/chat/completions", config.base_url.trim_end_matches('/')),
            stream: config.stream,
        })
    }
}

#[async_trait::async_trait]
impl ModelProvider for OpenAiProvider {
    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, LlmError> {
        let body = request_body(&request, self.stream);
        let decoder: Option<Box<dyn WireDecoder>> = if self.stream { Some(Box::new(Decoder::default())) } else { None };
        decode::call(&self.transport, &self.url, &body, decoder, events_from_body).await
    }
}

/// The JSON body of a chat-completions request.
pub(crate) fn request_body(request: &ModelRequest, stream: bool) -> Value {
    let mut body = json!({
        "model": request.model,
        "messages": request.messages.iter().map(wire_message).collect::<Vec<_>>(),
        "stream": stream,
    });
    if stream {
        body["stream_options"] = json!({"include_usage": true});
    }
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}))
            .collect();
        body["tools"] = json!(tools);
        body["tool_choice"] = match &request.tool_choice {
            ToolChoice::Auto => json!("auto"),
            ToolChoice::None => json!("none"),
            ToolChoice::Required => json!("required"),
            ToolChoice::Tool(name) => json!({"type": "function", "function": {"name": name}}),
        };
    }
    if let Some(format) = &request.response_format {
        body["response_format"] = format.clone();
    }
    if let Some(effort) = request.reasoning.as_deref().filter(|e| *e != "off") {
        body["reasoning_effort"] = json!(effort);
    }
    if let Some(max) = request.max_output_tokens {
        body["max_tokens"] = json!(max);
    }
    if let Some(t) = request.temperature {
        body["temperature"] = json!(t);
    }
    body
}

fn wire_message(m: &Message) -> Value {
    let role = match m.role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    };
    let mut v = json!({"role": role, "content": m.content});
    if !m.tool_calls.is_empty() {
        let calls: Vec<Value> = m
            .tool_calls
            .iter()
            .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
            .collect();
        v["tool_calls"] = json!(calls);
    }
    if let Some(id) = &m.tool_call_id {
        v["tool_call_id"] = json!(id);
    }
    if let Some(name) = &m.name {
        v["name"] = json!(name);
    }
    v
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
        let chunk = decode::json(&event.data)?;
        if let Some(error) = embedded_error(&chunk) {
            return Err(error);
        }
        if let Some(u) = usage(&chunk) {
            self.usage = Some(u);
        }
        let Some(choice) = chunk["choices"].get(0) else { return Ok(Step::More) };
        let delta = &choice["delta"];
        if let Some(r) = reasoning_text(delta) {
            out.push(ModelEvent::ReasoningDelta(r.to_owned()));
        }
        if let Some(t) = delta["content"].as_str().filter(|t| !t.is_empty()) {
            out.push(ModelEvent::TextDelta(t.to_owned()));
        }
        for (position, call) in delta["tool_calls"].as_array().into_iter().flatten().enumerate() {
            let index = call["index"].as_u64().map_or(position, |i| i as usize);
            let id = call["id"].as_str().map(str::to_owned);
            let name = call["function"]["name"].as_str().map(str::to_owned);
            let arguments = call["function"]["arguments"].as_str().unwrap_or("");
            out.push(self.tools.delta(index, id, name, arguments)?);
        }
        if let Some(reason) = choice["finish_reason"].as_str() {
            self.finish = Some(finish_reason(reason));
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
            wire_message(&m),
            json!({"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"read","arguments":"{}"}}]})
        );
    }
}
