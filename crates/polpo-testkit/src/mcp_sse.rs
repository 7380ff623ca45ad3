//! A legacy HTTP+SSE MCP server (protocol 2024-11-05) over real HTTP, for tests of Polpo's
//! client of that transport: `GET /sse` opens a session whose first event (`endpoint`) names
//! `/message?sessionId=<n>`; each JSON-RPC message POSTed there is answered `202` and handled
//! by the demo server ([`crate::mcp_demo::DemoServer`], run by `rmcp`'s server side), whose
//! replies arrive on the session's stream as `message` events. The Authorization header of
//! every request is kept, so a test sees that configured headers reach the server.

use crate::mcp_demo::DemoServer;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, Sse};
use axum::routing::{get, post};
use futures::{Stream, StreamExt};
use rmcp::ServiceExt;
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, WriteHalf};

/// Bytes buffered between the HTTP side and one session's MCP server.
const PIPE_BYTES: usize = 64 * 1024;

type Writer = Arc<tokio::sync::Mutex<WriteHalf<DuplexStream>>>;

#[derive(Clone, Default)]
struct Shared {
    sessions: Arc<Mutex<HashMap<u64, Writer>>>,
    next: Arc<AtomicU64>,
    authorization: Arc<Mutex<Vec<String>>>,
}

impl Shared {
    fn record(&self, headers: &HeaderMap) {
        let auth = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).unwrap_or_default();
        self.authorization.lock().unwrap_or_else(PoisonError::into_inner).push(auth.to_owned());
    }
}

/// The running server.
pub struct LegacySseMcp {
    url: String,
    shared: Shared,
}

impl LegacySseMcp {
    /// Serve on a free local port until the test's runtime ends.
    pub async fn start() -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/sse", listener.local_addr()?);
        let shared = Shared::default();
        let app =
            axum::Router::new().route("/sse", get(open)).route("/message", post(message)).with_state(shared.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(Self { url, shared })
    }

    /// The SSE URL a client configures (`http://127.0.0.1:<port>/sse`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The Authorization header of every request so far, in order (empty strings for none).
    pub fn authorization(&self) -> Vec<String> {
        self.shared.authorization.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

/// `GET /sse`: a new session with its own demo server; the stream carries its replies.
async fn open(State(shared): State<Shared>, headers: HeaderMap) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    shared.record(&headers);
    let id = shared.next.fetch_add(1, Ordering::Relaxed);
    let (server_side, client_side) = tokio::io::duplex(PIPE_BYTES);
    tokio::spawn(async move {
        if let Ok(running) = DemoServer.serve(server_side).await {
            let _ = running.waiting().await;
        }
    });
    let (read, write) = tokio::io::split(client_side);
    shared.sessions.lock().unwrap_or_else(PoisonError::into_inner).insert(id, Arc::new(tokio::sync::Mutex::new(write)));
    let endpoint = Event::default().event("endpoint").data(format!("/message?sessionId={id}"));
    let replies = futures::stream::unfold(BufReader::new(read).lines(), |mut lines| async move {
        let line = lines.next_line().await.ok().flatten()?;
        Some((Ok(Event::default().event("message").data(line)), lines))
    });
    Sse::new(futures::stream::once(async move { Ok(endpoint) }).chain(replies))
}

/// `POST /message?sessionId=<n>`: hand one JSON-RPC message to the session's server.
async fn message(
    State(shared): State<Shared>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: String,
) -> StatusCode {
    shared.record(&headers);
    let id = query.get("sessionId").and_then(|s| s.parse::<u64>().ok());
    let writer = id.and_then(|id| shared.sessions.lock().unwrap_or_else(PoisonError::into_inner).get(&id).cloned());
    let Some(writer) = writer else { return StatusCode::NOT_FOUND };
    // One message per line on the server's side, whatever whitespace the client sent.
    let Ok(message) = serde_json::from_str::<serde_json::Value>(&body) else { return StatusCode::BAD_REQUEST };
    let mut writer = writer.lock().await;
    let written = writer.write_all(format!("{message}\n").as_bytes()).await;
    if written.is_ok() && writer.flush().await.is_ok() { StatusCode::ACCEPTED } else { StatusCode::GONE }
}
