//! The fake server itself: a real axum HTTP server on loopback that pops one scripted turn per
//! request and records what it received.

use crate::render::Render;
use crate::script::{Interruption, Turn};
use crate::strict::{self, Wire};
use crate::{anthropic, openai};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use axum::routing::post;
use futures::{Stream, StreamExt, stream};
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// Reads an environment variable; the same shape as `polpo_llm::EnvLookup` (testkit does not
/// depend on polpo-llm).
pub type EnvLookup = std::sync::Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;
/// What a fake received: one HTTP request.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// Request path, e.g. `/v1/chat/completions`.
    pub path: String,
    /// Headers, names lower-cased, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The JSON body (`Value::Null` if it was not JSON).
    pub body: Value,
    /// When it arrived; lets tests check that a client waited at least `Retry-After`.
    pub received_at: Instant,
}

impl RecordedRequest {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// How a fake behaves beyond its script.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Serve the script in a loop forever (for benchmarks) instead of running out.
    pub repeat: bool,
    /// Keep every request; turn off for benchmarks so memory stays flat.
    pub record: bool,
    /// Characters per streamed text or argument delta.
    pub chunk_chars: usize,
    /// Behave like real providers (see [`crate::strict`]'s rules, on by default): scripted JSON
    /// only when the request asks for JSON, 400 for requests real APIs refuse. Turn it off
    /// only for a test about what a runtime does with a model that ignores its request.
    pub strict: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self { repeat: false, record: true, chunk_chars: 4, strict: true }
    }
}

struct Shared {
    turns: Mutex<VecDeque<Turn>>,
    requests: Mutex<Vec<RecordedRequest>>,
    served: AtomicU64,
    options: Options,
    /// Response bodies still being sent; lets tests see that a dropped stream closed its call.
    open_bodies: AtomicUsize,
    body_closed: Notify,
}

/// Counts a response body as open until the body (and so this guard) is dropped.
struct OpenBody(Arc<Shared>);

impl OpenBody {
    fn new(shared: &Arc<Shared>) -> Self {
        shared.open_bodies.fetch_add(1, Ordering::SeqCst);
        Self(shared.clone())
    }
}

impl Drop for OpenBody {
    fn drop(&mut self) {
        self.0.open_bodies.fetch_sub(1, Ordering::SeqCst);
        self.0.body_closed.notify_waiters();
    }
}

/// A scripted fake LLM server speaking the OpenAI chat-completions wire
/// (`POST /v1/chat/completions`) and the Anthropic Messages wire (`POST /v1/messages`),
/// streaming or not as each request asks. Each request takes the next [`Turn`]; when the
/// script is empty it answers 500 `fake llm script exhausted`. Strict by default: JSON only
/// for requests that ask for it, 400 for requests real APIs refuse ([`crate::strict`]).
/// Stops when dropped.
pub struct FakeLlm {
    addr: SocketAddr,
    shared: Arc<Shared>,
    server: JoinHandle<()>,
}

impl FakeLlm {
    /// Start a fake on `127.0.0.1:0` that answers `turns` in order, then runs out.
    pub async fn start(turns: impl IntoIterator<Item = Turn>) -> std::io::Result<Self> {
        Self::start_with(TcpListener::bind("127.0.0.1:0").await?, turns, Options::default())
    }

    /// Start a benchmark fake on `127.0.0.1:0`: `turns` repeat forever, no delays are added
    /// and nothing is recorded.
    pub async fn start_repeating(turns: impl IntoIterator<Item = Turn>) -> std::io::Result<Self> {
        let options = Options { repeat: true, record: false, ..Options::default() };
        Self::start_with(TcpListener::bind("127.0.0.1:0").await?, turns, options)
    }

    /// Serve on an already bound listener with explicit options.
    pub fn start_with(
        listener: TcpListener,
        turns: impl IntoIterator<Item = Turn>,
        options: Options,
    ) -> std::io::Result<Self> {
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            turns: Mutex::new(turns.into_iter().collect()),
            requests: Mutex::default(),
            served: AtomicU64::new(0),
            options,
            open_bodies: AtomicUsize::new(0),
            body_closed: Notify::new(),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(openai_route))
            .route("/v1/messages", post(anthropic_route))
            .with_state(shared.clone());
        let server = tokio::spawn(async move {
            // The server ends only when the fake is dropped (task aborted) or the socket fails.
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { addr, shared, server })
    }

    /// The OpenAI-style base URL, `http://127.0.0.1:PORT/v1` (what `OPENAI_BASE_URL` takes).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// An environment in which the built-in `openai` provider talks to this server:
    /// `OPENAI_BASE_URL` is [`FakeLlm::base_url`], `OPENAI_API_KEY` is `sk-test`, nothing else
    /// is set. The shape of `polpo_llm::EnvLookup`, so tests never touch the process env.
    pub fn openai_env(&self) -> EnvLookup {
        let base = self.base_url();
        std::sync::Arc::new(move |name| match name {
            "OPENAI_BASE_URL" => Some(base.clone()),
            "OPENAI_API_KEY" => Some("sk-test".into()),
            _ => None,
        })
    }

    /// An environment in which both built-in providers talk to this server:
    /// [`FakeLlm::openai_env`] plus `ANTHROPIC_BASE_URL` ([`FakeLlm::anthropic_base_url`]) and
    /// `ANTHROPIC_API_KEY` (`sk-ant-test`), so an agent on `anthropic/…` is served by the fake
    /// over the Anthropic wire.
    pub fn provider_env(&self) -> EnvLookup {
        let openai = self.openai_env();
        let base = self.anthropic_base_url();
        std::sync::Arc::new(move |name| match name {
            "ANTHROPIC_BASE_URL" => Some(base.clone()),
            "ANTHROPIC_API_KEY" => Some("sk-ant-test".into()),
            other => openai(other),
        })
    }

    /// The Anthropic-style base URL, `http://127.0.0.1:PORT` (what `ANTHROPIC_BASE_URL` takes).
    pub fn anthropic_base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The socket address the fake listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Append a turn to the script.
    pub fn push(&self, turn: Turn) {
        lock(&self.shared.turns).push_back(turn);
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.requests).clone()
    }

    /// Wait until no response body is being sent (a client that dropped its stream has been
    /// noticed), up to `deadline`; `false` if some body is still open then.
    pub async fn wait_until_bodies_closed(&self, deadline: std::time::Duration) -> bool {
        let wait = async {
            loop {
                let closed = self.shared.body_closed.notified();
                if self.shared.open_bodies.load(Ordering::SeqCst) == 0 {
                    return;
                }
                closed.await;
            }
        };
        tokio::time::timeout(deadline, wait).await.is_ok()
    }

    /// Turns not yet served.
    pub fn remaining(&self) -> usize {
        lock(&self.shared.turns).len()
    }
}

impl Drop for FakeLlm {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// Lock a mutex, recovering from poisoning: a panicking test must not cascade into others.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn openai_route(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    answer(shared, Wire::OpenAi, "/v1/chat/completions", headers, body).await
}

async fn anthropic_route(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    answer(shared, Wire::Anthropic, "/v1/messages", headers, body).await
}

async fn answer(shared: Arc<Shared>, wire: Wire, path: &str, headers: HeaderMap, raw: Bytes) -> Response {
    let options = shared.options;
    let request: Value = serde_json::from_slice(&raw).unwrap_or(Value::Null);
    if options.record {
        let headers = headers
            .iter()
            .map(|(k, v)| (k.as_str().to_owned(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
            .collect();
        lock(&shared.requests).push(RecordedRequest {
            path: path.to_owned(),
            headers,
            body: request.clone(),
            received_at: Instant::now(),
        });
    }
    // Refused before any model runs, so the scripted turn stays for the next request.
    if let Some(error) = strict::rejection(wire, &request).filter(|_| options.strict) {
        return respond(StatusCode::BAD_REQUEST, "application/json", Body::from(error.to_string()));
    }
    let turn = {
        let mut turns = lock(&shared.turns);
        let turn = turns.pop_front();
        if let (Some(t), true) = (&turn, options.repeat) {
            turns.push_back(t.clone());
        }
        turn
    };
    let Some(turn) = turn else {
        let body = json!({"error": {"message": "fake llm script exhausted", "type": "server_error"}});
        return respond(StatusCode::INTERNAL_SERVER_ERROR, "application/json", Body::from(body.to_string()));
    };
    if let Some(delay) = turn.delay {
        tokio::time::sleep(delay).await;
    }
    if let Some(error) = &turn.error {
        let status = StatusCode::from_u16(error.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = respond(status, "application/json", Body::from(error.body.clone()));
        for (name, value) in &error.headers {
            // A name or value HTTP cannot carry is skipped: the fake answers, it never panics.
            if let (Ok(name), Ok(value)) =
                (header::HeaderName::from_bytes(name.as_bytes()), header::HeaderValue::from_str(value))
            {
                response.headers_mut().append(name, value);
            }
        }
        return response;
    }
    let turn = if options.strict { strict::adapt(wire, &request, turn) } else { turn };
    let render = Render {
        model: request["model"].as_str().unwrap_or("fake").to_owned(),
        turn_no: shared.served.fetch_add(1, Ordering::Relaxed) + 1,
        chunk_chars: options.chunk_chars,
        include_usage: request["stream_options"]["include_usage"] == json!(true),
        request_bytes: raw.len(),
    };
    if request["stream"] == json!(true) {
        let frames = match wire {
            Wire::OpenAi => openai::frames(&turn, &render),
            Wire::Anthropic => anthropic::frames(&turn, &render),
        };
        respond(
            StatusCode::OK,
            "text/event-stream",
            Body::from_stream(interrupt(frames, turn.interruption, OpenBody::new(&shared))),
        )
    } else {
        let body = match wire {
            Wire::OpenAi => openai::body(&turn, &render),
            Wire::Anthropic => anthropic::body(&turn, &render),
        }
        .to_string();
        // A non-streamed body "interrupted" after N events is cut in half instead.
        let parts = match turn.interruption {
            Some(_) => {
                let half = body.char_indices().nth(body.chars().count() / 2).map_or(0, |(i, _)| i);
                vec![body[..half].to_owned()]
            }
            None => vec![body],
        };
        let interruption = turn.interruption.map(|i| match i {
            Interruption::DisconnectAfter(_) => Interruption::DisconnectAfter(1),
            Interruption::StallAfter(_) => Interruption::StallAfter(1),
        });
        respond(
            StatusCode::OK,
            "application/json",
            Body::from_stream(interrupt(parts, interruption, OpenBody::new(&shared))),
        )
    }
}

/// The body as a stream of frames, broken off as scripted; `open` lives as long as the body.
fn interrupt(
    frames: Vec<String>,
    interruption: Option<Interruption>,
    open: OpenBody,
) -> impl Stream<Item = Result<String, std::io::Error>> + Send {
    let (keep, tail): (usize, Option<Interruption>) = match interruption {
        None => (frames.len(), None),
        Some(i @ (Interruption::DisconnectAfter(n) | Interruption::StallAfter(n))) => (n, Some(i)),
    };
    let head = stream::iter(frames.into_iter().take(keep).map(Ok));
    let tail = match tail {
        None => stream::empty().boxed(),
        // Yield once first: hyper flushes what it buffered only when the body is pending, and
        // the frames already sent must reach the client before the connection drops.
        Some(Interruption::DisconnectAfter(_)) => stream::once(async {
            tokio::task::yield_now().await;
            Err(std::io::Error::other("fake llm disconnect"))
        })
        .boxed(),
        Some(Interruption::StallAfter(_)) => stream::pending().boxed(),
    };
    head.chain(tail).map(move |frame| {
        let _alive = &open;
        frame
    })
}

fn respond(status: StatusCode, content_type: &'static str, body: Body) -> Response {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static(content_type));
    response
}
