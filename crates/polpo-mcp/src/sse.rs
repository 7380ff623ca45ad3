//! The legacy HTTP+SSE transport of MCP (protocol 2024-11-05), which `rmcp` no longer ships:
//! the client GETs the server's SSE URL, the server names the URL to POST to in an `endpoint`
//! event, each JSON-RPC message is POSTed there, and every answer arrives on the stream.
//!
//! The stream is untrusted input: events go through the project's bounded `SseDecoder`, the
//! queue of unread messages is bounded (a server cannot outrun the client's memory), the
//! handshake and each POST have timeouts, and the POST endpoint must share the SSE URL's
//! origin, so the configured headers (credentials, often) never go to another host.

use polpo_llm::{SseDecoder, SseEvent};
use reqwest::Url;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderValue};
use rmcp::RoleClient;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::Transport;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// The stream's answer to the GET and its `endpoint` event, together.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(15);
/// One POSTed message, until the server acknowledges it (its answer comes on the stream).
const POST_TIMEOUT: Duration = Duration::from_secs(30);
/// Messages read from the stream and not yet taken by the client; the reader waits beyond.
const QUEUE: usize = 32;

/// Why the legacy SSE link failed; the text names no header value.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct SseError(String);

/// An open legacy SSE link: the stream read by its own task, messages POSTed to `endpoint`.
pub(crate) struct LegacySse {
    client: reqwest::Client,
    endpoint: Url,
    headers: HeaderMap,
    incoming: mpsc::Receiver<ServerJsonRpcMessage>,
    reader: JoinHandle<()>,
}

impl LegacySse {
    /// Open the stream at `url` with `headers` (sent on the GET and on every POST) and wait for
    /// the server to name its POST endpoint.
    pub async fn connect(client: reqwest::Client, url: &str, headers: HeaderMap) -> Result<Self, SseError> {
        let base = Url::parse(url).map_err(|e| SseError(format!("invalid SSE URL: {e}")))?;
        let request = client
            .get(base.clone())
            .headers(headers.clone())
            .header(ACCEPT, HeaderValue::from_static("text/event-stream"))
            .send();
        let response = tokio::time::timeout(HANDSHAKE_TIMEOUT, request)
            .await
            .map_err(|_| SseError(format!("no answer to the SSE request within {} s", HANDSHAKE_TIMEOUT.as_secs())))?
            .map_err(|e| SseError(format!("the SSE request failed: {}", e.without_url())))?;
        let status = response.status();
        if !status.is_success() {
            return Err(SseError(format!("the SSE request was answered HTTP {}", status.as_u16())));
        }
        let is_stream = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().to_ascii_lowercase().starts_with("text/event-stream"));
        if !is_stream {
            return Err(SseError("the SSE URL did not answer with text/event-stream".into()));
        }
        let (queue, incoming) = mpsc::channel(QUEUE);
        let (named, endpoint) = oneshot::channel();
        let reader = tokio::spawn(read_stream(response, base, named, queue));
        let endpoint = match tokio::time::timeout(HANDSHAKE_TIMEOUT, endpoint).await {
            Ok(Ok(Ok(endpoint))) => endpoint,
            Ok(Ok(Err(why))) => {
                reader.abort();
                return Err(SseError(why));
            }
            Ok(Err(_)) => return Err(SseError("the SSE stream ended before its `endpoint` event".into())),
            Err(_) => {
                reader.abort();
                return Err(SseError(format!("no `endpoint` event within {} s", HANDSHAKE_TIMEOUT.as_secs())));
            }
        };
        Ok(Self { client, endpoint, headers, incoming, reader })
    }
}

impl Drop for LegacySse {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl Transport<RoleClient> for LegacySse {
    type Error = SseError;

    fn send(&mut self, item: ClientJsonRpcMessage) -> impl Future<Output = Result<(), SseError>> + Send + 'static {
        let body = serde_json::to_vec(&item);
        let request = self
            .client
            .post(self.endpoint.clone())
            .headers(self.headers.clone())
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .timeout(POST_TIMEOUT);
        async move {
            let body = body.map_err(|e| SseError(format!("cannot encode the message: {e}")))?;
            let response = request
                .body(body)
                .send()
                .await
                .map_err(|e| SseError(format!("posting the message failed: {}", e.without_url())))?;
            let status = response.status();
            if !status.is_success() {
                return Err(SseError(format!("the message endpoint answered HTTP {}", status.as_u16())));
            }
            Ok(())
        }
    }

    async fn receive(&mut self) -> Option<ServerJsonRpcMessage> {
        self.incoming.recv().await
    }

    async fn close(&mut self) -> Result<(), SseError> {
        self.reader.abort();
        self.incoming.close();
        Ok(())
    }
}

/// Read the stream until it ends or breaks: the first `endpoint` event answers `named`, every
/// `message` event (or one without a name) goes to `queue`. Ending drops `queue`, which the
/// client sees as the transport closing.
async fn read_stream(
    mut response: reqwest::Response,
    base: Url,
    named: oneshot::Sender<Result<Url, String>>,
    queue: mpsc::Sender<ServerJsonRpcMessage>,
) {
    let mut named = Some(named);
    let mut decoder = SseDecoder::default();
    let mut events: Vec<SseEvent> = Vec::new();
    loop {
        let chunk = match response.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => break,
            Err(e) => {
                tracing::warn!(error = %e.without_url(), "legacy SSE stream broke");
                break;
            }
        };
        if let Err(e) = decoder.push(&chunk, &mut events) {
            tracing::warn!(error = %e, "legacy SSE stream refused");
            break;
        }
        for event in events.drain(..) {
            match event.event.as_deref() {
                Some("endpoint") => {
                    if let Some(named) = named.take() {
                        let _ = named.send(endpoint_of(&base, &event.data));
                    }
                }
                None | Some("message") => match serde_json::from_str::<ServerJsonRpcMessage>(&event.data) {
                    Ok(message) => {
                        if queue.send(message).await.is_err() {
                            return;
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "legacy SSE server sent a message that is not JSON-RPC"),
                },
                Some(_) => {}
            }
        }
    }
}

/// The POST endpoint an `endpoint` event names, resolved against the SSE URL; only on the same
/// origin, so the link's headers stay with the server they were configured for.
fn endpoint_of(base: &Url, data: &str) -> Result<Url, String> {
    let endpoint = base.join(data.trim()).map_err(|e| format!("the server's `endpoint` event is not a URL ({e})"))?;
    if endpoint.origin() != base.origin() {
        return Err("the server's `endpoint` event names another origin than its SSE URL".into());
    }
    Ok(endpoint)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_resolves_against_the_sse_url_and_stays_on_its_origin() {
        let base = Url::parse("http://127.0.0.1:8080/mcp/sse").unwrap_or_else(|e| panic!("{e}"));
        let found = |data: &str| endpoint_of(&base, data).map(|u| u.to_string());
        assert_eq!(found("/messages?sessionId=a1"), Ok("http://127.0.0.1:8080/messages?sessionId=a1".into()));
        assert_eq!(found("message?s=2"), Ok("http://127.0.0.1:8080/mcp/message?s=2".into()));
        assert_eq!(found("http://127.0.0.1:8080/m"), Ok("http://127.0.0.1:8080/m".into()));
        assert!(found("http://evil.test/steal").is_err());
        assert!(found("http://127.0.0.1:9999/m").is_err(), "another port is another origin");
        assert!(found("https://127.0.0.1:8080/m").is_err(), "another scheme is another origin");
    }
}
