//! The zero-latency model `polpo bench` runs against: OpenAI chat completions on loopback.
//!
//! It decides each answer from the request alone, never from a script played in order, so any
//! number of runs can interleave: a request whose last message is a tool result gets the final
//! text, any other request gets one `read` call for the bench file. It answers the wire the
//! OpenAI provider really sends (SSE chunks with a usage chunk when `stream_options.include_usage`
//! asks, or one `chat.completion` body) and refuses with a 400 in OpenAI's error shape what the
//! real API refuses, so the bench cannot pass on a request a real model would reject.

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::{Value, json};
use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use tokio::net::TcpListener;

/// The file every run asks to read, relative to the bench project.
pub const FILE: &str = "bench.txt";
/// What the file holds: the final answer quotes it only when the `read` tool really returned it.
pub const MARKER: &str = "polpo-bench-marker";
/// The final answer of a run whose tool result carried [`MARKER`].
pub const ANSWER: &str = "The file says polpo-bench-marker.";

/// Counts kept while the fake serves, read by the bench report.
#[derive(Debug, Default)]
pub struct Counters {
    /// Model calls answered (refusals excluded).
    pub calls: AtomicU64,
    /// Tool schemas in the last request answered (the bench says how many each call carried).
    pub tool_schemas: AtomicUsize,
}

/// A running fake; stops when the process ends (the bench is one command).
pub struct Fake {
    /// Where it listens.
    pub addr: SocketAddr,
    /// What it has served.
    pub counters: Arc<Counters>,
}

/// Start the fake on `127.0.0.1:0`.
pub async fn start() -> std::io::Result<Fake> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let counters = Arc::new(Counters::default());
    let app = Router::new().route("/v1/chat/completions", post(answer)).with_state(counters.clone());
    tokio::spawn(async move {
        // Serves until the command ends; a socket failure shows up as failed runs.
        let _ = axum::serve(listener, app).await;
    });
    Ok(Fake { addr, counters })
}

/// The parts of a chat completion request the fake reads. Tool schemas are skipped, not built
/// into trees: the fake shares the bench's CPU with the server it measures, so it must cost
/// little beside it (a real provider's parsing runs on its own machines).
#[derive(Deserialize)]
struct Request<'a> {
    #[serde(borrow, default)]
    model: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    messages: Option<Vec<MessageSpec<'a>>>,
    #[serde(borrow, default)]
    tools: Vec<ToolSpec<'a>>,
    #[serde(default)]
    tool_choice: Option<IgnoredAny>,
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
}

/// One entry of `messages`: what the checks and the answer read of it, typed (a field of
/// another type than the API's is refused as unparsable, as the real API refuses it).
#[derive(Deserialize)]
struct MessageSpec<'a> {
    #[serde(borrow, default)]
    role: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    tool_call_id: Option<Cow<'a, str>>,
    /// Text, parts or `null`: only a tool result's text is read.
    #[serde(default)]
    content: Option<Value>,
    #[serde(borrow, default)]
    tool_calls: Option<Vec<CallSpec<'a>>>,
}

/// One call of an assistant message: its id (the rest is skipped).
#[derive(Deserialize)]
struct CallSpec<'a> {
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
}

/// One entry of `tools`: its type and function name (the schema is skipped).
#[derive(Deserialize)]
struct ToolSpec<'a> {
    #[serde(borrow, rename = "type")]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    function: FunctionSpec<'a>,
}

#[derive(Deserialize)]
struct FunctionSpec<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
}

#[derive(Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

async fn answer(State(counters): State<Arc<Counters>>, body: Bytes) -> Response {
    let request: Request = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return refuse(&format!("We could not parse the JSON body of your request: {e}")),
    };
    if let Some(problem) = problem(&request) {
        return refuse(&problem);
    }
    let n = counters.calls.fetch_add(1, Ordering::Relaxed);
    counters.tool_schemas.store(request.tools.len(), Ordering::Relaxed);
    let messages = request.messages.as_deref().unwrap_or_default();
    let reply = match messages.last() {
        Some(last) if last.role.as_deref() == Some("tool") => {
            // The answer names the marker only when the tool result really carried it, so a
            // run whose `read` failed is counted as an error by the bench.
            let content = last.content.as_ref().and_then(Value::as_str).unwrap_or_default();
            Reply::Text(if content.contains(MARKER) { ANSWER.to_owned() } else { format!("read failed: {content}") })
        }
        _ => Reply::Read(format!("call_{n}")),
    };
    let model = request.model.as_deref().unwrap_or_default();
    if request.stream {
        let usage = request.stream_options.is_some_and(|o| o.include_usage);
        let body = frames(&reply, model, n, usage);
        ([(header::CONTENT_TYPE, "text/event-stream"), (header::CACHE_CONTROL, "no-cache")], body).into_response()
    } else {
        axum::Json(completion(&reply, model, n)).into_response()
    }
}

/// What the model says this turn.
enum Reply {
    /// Call `read` on the bench file, with this call id.
    Read(String),
    /// The final answer.
    Text(String),
}

impl Reply {
    fn finish_reason(&self) -> &'static str {
        match self {
            Reply::Read(_) => "tool_calls",
            Reply::Text(_) => "stop",
        }
    }
}

/// Why the real API would refuse `request` (the checks that matter for this scenario).
fn problem(request: &Request) -> Option<String> {
    if request.model.as_deref().is_none_or(str::is_empty) {
        return Some("you must provide a model parameter".into());
    }
    let messages = request.messages.as_ref().filter(|m| !m.is_empty());
    let Some(messages) = messages else { return Some("'messages' must be a non-empty array".into()) };
    if let Some((i, _)) = messages
        .iter()
        .enumerate()
        .find(|(_, m)| !matches!(m.role.as_deref(), Some("system" | "user" | "assistant" | "tool" | "developer")))
    {
        return Some(format!("Invalid value for 'messages[{i}].role'"));
    }
    // A tool result must answer a call the assistant made just before.
    for (i, m) in messages.iter().enumerate().filter(|(_, m)| m.role.as_deref() == Some("tool")) {
        let id = m.tool_call_id.as_deref().unwrap_or_default();
        let called = messages[..i]
            .iter()
            .rev()
            .find(|p| p.role.as_deref() == Some("assistant"))
            .is_some_and(|p| p.tool_calls.iter().flatten().any(|c| c.id.as_deref() == Some(id)));
        if !called {
            return Some(format!(
                "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls' (messages[{i}])."
            ));
        }
    }
    let tools = &request.tools;
    if request.tool_choice.is_some() && tools.is_empty() {
        return Some(
            "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.".into(),
        );
    }
    if !tools.iter().any(|t| t.kind == "function" && t.function.name == "read") {
        return Some("the bench scenario needs the `read` tool among 'tools'".into());
    }
    None
}

/// A 400 in OpenAI's error shape.
fn refuse(message: &str) -> Response {
    let body = json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": null}});
    (StatusCode::BAD_REQUEST, axum::Json(body)).into_response()
}

fn usage() -> Value {
    json!({"prompt_tokens": 900, "completion_tokens": 12, "total_tokens": 912})
}

/// The whole answer as one `chat.completion` (providers configured with `stream: false`).
fn completion(reply: &Reply, model: &str, n: u64) -> Value {
    let message = match reply {
        Reply::Read(id) => json!({"role": "assistant", "content": null, "tool_calls": [read_call(id)]}),
        Reply::Text(text) => json!({"role": "assistant", "content": text}),
    };
    json!({
        "id": format!("chatcmpl-bench-{n}"), "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason()}],
        "usage": usage(),
    })
}

fn read_call(id: &str) -> Value {
    json!({"id": id, "type": "function", "function": {"name": "read", "arguments": json!({"path": FILE}).to_string()}})
}

/// The answer as SSE `chat.completion.chunk`s, usage chunk when asked, then `[DONE]`.
fn frames(reply: &Reply, model: &str, n: u64, include_usage: bool) -> Vec<u8> {
    let chunk = |choices: Value| json!({"id": format!("chatcmpl-bench-{n}"), "object": "chat.completion.chunk", "created": 0, "model": model, "choices": choices});
    let delta = |delta: Value, finish: Value| chunk(json!([{"index": 0, "delta": delta, "finish_reason": finish}]));
    let mut out = vec![delta(json!({"role": "assistant", "content": ""}), Value::Null)];
    match reply {
        Reply::Read(id) => {
            let mut call = read_call(id);
            call["index"] = json!(0);
            out.push(delta(json!({"tool_calls": [call]}), Value::Null));
        }
        Reply::Text(text) => out.push(delta(json!({"content": text}), Value::Null)),
    }
    out.push(delta(json!({}), json!(reply.finish_reason())));
    if include_usage {
        let mut last = chunk(json!([]));
        last["usage"] = usage();
        out.push(last);
    }
    // Written straight as JSON bytes (not through `Display`, a formatter call per piece).
    let mut body = Vec::with_capacity(256 * (out.len() + 1));
    for chunk in &out {
        body.extend_from_slice(b"data: ");
        // Writing a `Value` into a `Vec` cannot fail.
        let _ = serde_json::to_writer(&mut body, chunk);
        body.extend_from_slice(b"\n\n");
    }
    body.extend_from_slice(b"data: [DONE]\n\n");
    body
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn request(messages: Value) -> Value {
        json!({"model": "m", "messages": messages, "stream": true, "stream_options": {"include_usage": true},
               "tools": [{"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}], "tool_choice": "auto"})
    }

    /// What the fake finds wrong with `body`, parsed as it parses requests.
    fn problem_of(body: &Value) -> Option<String> {
        let text = body.to_string();
        problem(&serde_json::from_str(&text).unwrap())
    }

    #[test]
    fn refuses_what_the_real_api_refuses() {
        assert!(problem_of(&request(json!([{"role": "user", "content": "hi"}]))).is_none());
        let orphan = json!([{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "x", "content": "c"}]);
        assert!(problem_of(&request(orphan)).unwrap().contains("role 'tool'"));
        let no_tools = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "tool_choice": "auto"});
        assert!(problem_of(&no_tools).unwrap().contains("tool_choice"));
        let null_choice = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "tool_choice": null});
        assert!(problem_of(&null_choice).unwrap().contains("`read` tool"), "a null tool_choice is no choice");
        assert!(problem_of(&json!({"messages": [{"role": "user", "content": "hi"}]})).unwrap().contains("model"));
    }

    #[test]
    fn a_streamed_tool_call_then_usage_then_done() {
        let body = String::from_utf8(frames(&Reply::Read("call_1".into()), "m", 1, true)).unwrap();
        let data: Vec<&str> = body.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
        assert_eq!(data.last(), Some(&"[DONE]"));
        let chunks: Vec<Value> = data[..data.len() - 1].iter().map(|d| serde_json::from_str(d).unwrap()).collect();
        assert_eq!(chunks[1]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"], "read");
        assert_eq!(chunks[2]["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(chunks[3]["usage"]["total_tokens"], 912);
        let text = String::from_utf8(frames(&Reply::Text(ANSWER.into()), "m", 2, false)).unwrap();
        assert!(!text.contains("usage"));
    }
}
