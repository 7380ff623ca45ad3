//! A fake OpenAI embeddings server (`POST /v1/embeddings`) over real HTTP, as strict as the real
//! API: an embedder that passes against it sends what OpenAI accepts and copes with what OpenAI
//! answers.
//!
//! By default every valid request gets one deterministic vector per input (words hashed into
//! buckets, unit length), so texts sharing words are close and runs are reproducible. A test
//! queues [`EmbeddingsReply`] faults to make the next requests fail: an HTTP status, a hang, one
//! vector too few, vectors out of order, or any body verbatim.
//!
//! Refused with OpenAI's error shape before any scripted reply is used, like the real API:
//! a missing bearer key (401); a missing or unknown `model` (400 / 404); `input` missing, empty,
//! not a string, an array of strings or an array of token arrays, an empty string, more than
//! 2,048 inputs, or an input over 8,192 tokens (counted here as 4 bytes a token); an
//! `encoding_format` other than `float` or `base64`; `dimensions` that is not a positive integer
//! no larger than the model's length, or given for `text-embedding-ada-002`; any unknown
//! parameter. `base64` answers are not implemented: such a request gets a 501.

use crate::server::{RecordedRequest, lock};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// The key the fake expects as `Authorization: Bearer …`.
pub const FAKE_EMBEDDINGS_KEY: &str = "sk-embed-test";
/// Most inputs in one request (OpenAI's limit).
pub const MAX_INPUTS: usize = 2048;
/// Most tokens in one input (OpenAI's models read 8,191).
const MAX_INPUT_TOKENS: usize = 8192;

/// The models the fake serves: name, vector length, whether `dimensions` may shorten it.
const MODELS: &[(&str, usize, bool)] = &[
    ("text-embedding-3-small", 1536, true),
    ("text-embedding-3-large", 3072, true),
    ("text-embedding-ada-002", 1536, false),
];

/// What the fake does with one valid request instead of answering it normally.
#[derive(Debug, Clone, PartialEq)]
pub enum EmbeddingsReply {
    /// Answer with this HTTP status and an OpenAI error envelope carrying `message`.
    Status(u16, String),
    /// Never answer (the connection stays open until the fake is dropped).
    Hang,
    /// Answer correctly but leave out the last vector.
    DropLast,
    /// Answer correctly with the `data` items in reverse order (valid: clients must use `index`).
    Reversed,
    /// Answer 200 with this body, verbatim.
    Raw(String),
}

struct Shared {
    replies: Mutex<VecDeque<EmbeddingsReply>>,
    requests: Mutex<Vec<RecordedRequest>>,
    stop: Notify,
}

/// The fake server; stops when dropped.
pub struct FakeEmbeddings {
    addr: SocketAddr,
    shared: Arc<Shared>,
    server: JoinHandle<()>,
}

impl FakeEmbeddings {
    /// Start on `127.0.0.1:0` with no faults queued.
    pub async fn start() -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared { replies: Mutex::default(), requests: Mutex::default(), stop: Notify::new() });
        let app = Router::new().route("/v1/embeddings", post(route)).with_state(shared.clone());
        let server = tokio::spawn(async move {
            // Ends only when the fake is dropped (task aborted) or the socket fails.
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { addr, shared, server })
    }

    /// `http://127.0.0.1:PORT/v1`, what `OPENAI_BASE_URL` or an embedder's base URL takes.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Make the next valid request meet `reply` (queued after earlier ones).
    pub fn push(&self, reply: EmbeddingsReply) {
        lock(&self.shared.replies).push_back(reply);
    }

    /// Every request received so far, refused ones included, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.requests).clone()
    }
}

impl Drop for FakeEmbeddings {
    fn drop(&mut self) {
        // Hanging requests end with the fake rather than with their connection's idle timeout.
        self.shared.stop.notify_waiters();
        self.server.abort();
    }
}

async fn route(State(shared): State<Arc<Shared>>, headers: HeaderMap, raw: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&raw).unwrap_or(Value::Null);
    lock(&shared.requests).push(RecordedRequest {
        path: "/v1/embeddings".into(),
        headers: headers
            .iter()
            .map(|(k, v)| (k.as_str().to_owned(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
            .collect(),
        body: request.clone(),
        received_at: Instant::now(),
    });
    let bearer = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    if bearer != Some(&format!("Bearer {FAKE_EMBEDDINGS_KEY}")) {
        return error(401, "invalid_request_error", "Incorrect API key provided.", Some("invalid_api_key"));
    }
    let inputs = match check(&request) {
        Ok(inputs) => inputs,
        Err(r) => return error(r.status, r.kind, &r.message, r.code),
    };
    let reply = lock(&shared.replies).pop_front();
    let model = request["model"].as_str().unwrap_or_default();
    let length = request["dimensions"].as_u64().map_or_else(|| model_length(model), |d| d as usize);
    let mut data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(index, text)| json!({"object": "embedding", "index": index, "embedding": vector(text, length)}))
        .collect();
    match reply {
        None => {}
        Some(EmbeddingsReply::Status(status, message)) => return error(status, "server_error", &message, None),
        Some(EmbeddingsReply::Hang) => {
            shared.stop.notified().await;
            return error(503, "server_error", "fake embeddings server stopped", None);
        }
        Some(EmbeddingsReply::DropLast) => {
            data.pop();
        }
        Some(EmbeddingsReply::Reversed) => data.reverse(),
        Some(EmbeddingsReply::Raw(body)) => return respond(StatusCode::OK, body),
    }
    let tokens: usize = inputs.iter().map(|t| tokens(t)).sum();
    let body = json!({
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    });
    respond(StatusCode::OK, body.to_string())
}

/// Why the real API would refuse a request: the parts of its error answer.
#[derive(Debug)]
struct Refusal {
    status: u16,
    kind: &'static str,
    message: String,
    code: Option<&'static str>,
}

/// The texts of a request the real API accepts (token arrays stand for one text each), or why
/// it would refuse it.
fn check(request: &Value) -> Result<Vec<String>, Refusal> {
    let bad = |message: String| Err(Refusal { status: 400, kind: "invalid_request_error", message, code: None });
    let Some(fields) = request.as_object() else {
        return bad("We could not parse the JSON body of your request.".into());
    };
    if let Some(unknown) =
        fields.keys().find(|k| !["model", "input", "encoding_format", "dimensions", "user"].contains(&k.as_str()))
    {
        return bad(format!("Unrecognized request argument supplied: {unknown}"));
    }
    let Some(model) = request["model"].as_str() else {
        return bad("you must provide a model parameter".into());
    };
    let Some(&(_, native, shortens)) = MODELS.iter().find(|(name, ..)| *name == model) else {
        return Err(Refusal {
            status: 404,
            kind: "invalid_request_error",
            message: format!("The model `{model}` does not exist or you do not have access to it."),
            code: Some("model_not_found"),
        });
    };
    let inputs = match &request["input"] {
        Value::Null => return bad("'input' is a required property".into()),
        Value::String(s) => vec![s.clone()],
        Value::Array(items) if items.is_empty() => return bad("'$.input' is invalid: it must not be empty.".into()),
        Value::Array(items) if items.len() > MAX_INPUTS => {
            return bad(format!("'$.input' is too long. Maximum length is {MAX_INPUTS}, got {}.", items.len()));
        }
        Value::Array(items) => match items.iter().map(input_text).collect::<Option<Vec<_>>>() {
            Some(texts) => texts,
            None => return bad(
                "'$.input' is invalid. Please check the API reference: https://platform.openai.com/docs/api-reference."
                    .into(),
            ),
        },
        _ => {
            return bad(
                "'$.input' is invalid. Please check the API reference: https://platform.openai.com/docs/api-reference."
                    .into(),
            );
        }
    };
    if inputs.iter().any(String::is_empty) {
        return bad("'$.input' is invalid: an input cannot be an empty string.".into());
    }
    if let Some(long) = inputs.iter().map(|t| tokens(t)).find(|&n| n > MAX_INPUT_TOKENS) {
        return bad(format!(
            "This model's maximum context length is {MAX_INPUT_TOKENS} tokens, however you requested {long} tokens in your input."
        ));
    }
    match request.get("encoding_format") {
        None | Some(Value::Null) => {}
        Some(Value::String(f)) if f == "float" => {}
        Some(Value::String(f)) if f == "base64" => {
            return Err(Refusal {
                status: 501,
                kind: "server_error",
                message: "the fake embeddings server answers in float only".into(),
                code: None,
            });
        }
        Some(other) => {
            return bad(format!(
                "Invalid value for 'encoding_format': {other}. Supported values are: 'float' and 'base64'."
            ));
        }
    }
    if let Some(d) = request.get("dimensions").filter(|d| !d.is_null()) {
        if !shortens {
            return bad("This model does not support specifying dimensions.".into());
        }
        match d.as_u64() {
            Some(n) if (1..=native as u64).contains(&n) => {}
            _ => {
                return bad(format!(
                    "Invalid value for 'dimensions' = {d}. Must be an integer between 1 and {native}."
                ));
            }
        }
    }
    Ok(inputs)
}

/// One input as text: a string, or an array of token ids (shown as their numbers).
fn input_text(item: &Value) -> Option<String> {
    match item {
        Value::String(s) => Some(s.clone()),
        Value::Array(tokens) if !tokens.is_empty() => {
            tokens.iter().map(|t| t.as_u64().map(|n| n.to_string())).collect::<Option<Vec<_>>>().map(|t| t.join(" "))
        }
        _ => None,
    }
}

fn model_length(model: &str) -> usize {
    MODELS.iter().find(|(name, ..)| *name == model).map_or(1, |&(_, native, _)| native)
}

/// Tokens an input counts for: about 4 bytes a token, as OpenAI's tokenizer does on English.
fn tokens(text: &str) -> usize {
    text.len().div_ceil(4)
}

/// A unit vector of `length` numbers: each lower-cased word adds ±1 to a bucket chosen by its
/// FNV-1a hash. Shared words make close vectors; nothing else does.
fn vector(text: &str, length: usize) -> Vec<f32> {
    let mut v = vec![0.0f32; length.max(1)];
    for word in text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
        let hash = word
            .to_lowercase()
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
        let bucket = (hash % v.len() as u64) as usize;
        v[bucket] += if hash >> 63 == 0 { 1.0 } else { -1.0 };
    }
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    } else {
        v[0] = 1.0;
    }
    v
}

fn error(status: u16, kind: &str, message: &str, code: Option<&str>) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = json!({"error": {"message": message, "type": kind, "param": null, "code": code}});
    respond(status, body.to_string())
}

fn respond(status: StatusCode, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn refused(request: Value) -> u16 {
        check(&request).err().map_or(200, |r| r.status)
    }

    #[test]
    fn requests_the_real_api_refuses_are_refused() {
        let ok = json!({"model": "text-embedding-3-small", "input": ["a", "b"], "encoding_format": "float"});
        assert_eq!(check(&ok).unwrap(), ["a", "b"]);
        assert_eq!(check(&json!({"model": "text-embedding-3-small", "input": "one"})).unwrap(), ["one"]);
        assert_eq!(check(&json!({"model": "text-embedding-3-small", "input": [[1, 2]]})).unwrap(), ["1 2"]);
        assert_eq!(refused(json!({"input": ["a"]})), 400, "missing model");
        assert_eq!(refused(json!({"model": "gpt-4o", "input": ["a"]})), 404, "not an embedding model");
        assert_eq!(refused(json!({"model": "text-embedding-3-small"})), 400, "missing input");
        assert_eq!(refused(json!({"model": "text-embedding-3-small", "input": []})), 400);
        assert_eq!(refused(json!({"model": "text-embedding-3-small", "input": [""]})), 400);
        assert_eq!(refused(json!({"model": "text-embedding-3-small", "input": [1, 2]})), 400, "bare numbers");
        assert_eq!(refused(json!({"model": "text-embedding-3-small", "input": ["a", {"text": "b"}]})), 400);
        assert_eq!(refused(json!({"model": "text-embedding-3-small", "input": {"a": 1}})), 400);
        let many: Vec<&str> = vec!["x"; MAX_INPUTS + 1];
        assert_eq!(refused(json!({"model": "text-embedding-3-small", "input": many})), 400, "over-long batch");
        let long = "word ".repeat(MAX_INPUT_TOKENS);
        assert_eq!(refused(json!({"model": "text-embedding-3-small", "input": [long]})), 400, "over-long input");
        assert_eq!(refused(json!({"model": "text-embedding-3-small", "input": ["a"], "encoding_format": "int8"})), 400);
        assert_eq!(refused(json!({"model": "text-embedding-3-small", "input": ["a"], "dimensions": 0})), 400);
        assert_eq!(refused(json!({"model": "text-embedding-3-small", "input": ["a"], "dimensions": 4000})), 400);
        assert_eq!(refused(json!({"model": "text-embedding-3-small", "input": ["a"], "dimensions": 64})), 200);
        assert_eq!(refused(json!({"model": "text-embedding-ada-002", "input": ["a"], "dimensions": 64})), 400);
        assert_eq!(refused(json!({"model": "text-embedding-3-small", "input": ["a"], "temperature": 1})), 400);
    }

    #[test]
    fn vectors_are_unit_length_deterministic_and_closer_for_shared_words() {
        let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
        let a = vector("the cat sat on the mat", 64);
        assert_eq!(a, vector("the cat sat on the mat", 64));
        assert!((dot(&a, &a) - 1.0).abs() < 1e-5);
        assert!(dot(&a, &vector("a cat on a mat", 64)) > dot(&a, &vector("quarterly revenue report", 64)));
        assert_eq!(
            vector("", 8).iter().filter(|x| **x != 0.0).count(),
            1,
            "a text without words still gets a unit vector"
        );
    }
}
