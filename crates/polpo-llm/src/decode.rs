//! From an HTTP response to a [`ModelStream`]: the part both wires share.
//!
//! Each wire supplies a [`WireDecoder`] that turns SSE events into [`ModelEvent`]s; this module
//! feeds it, reassembles tool calls, and applies the stream rule: a failure after content was
//! delivered is always reported as `stream_interrupted`, never as something a caller could
//! retry or fall back from.

use crate::http::Transport;
use crate::sse::{SseDecoder, SseEvent};
use crate::{LlmError, LlmErrorKind, ModelEvent, ModelStream};
use futures::{StreamExt, stream};
use polpo_core::message::{FinishReason, ToolCall, Usage};
use std::collections::{BTreeMap, VecDeque};

/// Most tool calls one model turn may make.
const MAX_TOOL_CALLS: usize = 128;
/// Largest total of tool-call argument text in one turn.
const MAX_TOOL_ARGUMENT_BYTES: usize = 4 * 1024 * 1024;
/// Largest non-streamed response body.
const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;

/// Whether a decoder wants more events.
pub(crate) enum Step {
    /// Keep reading.
    More,
    /// The answer is complete; stop reading the body.
    Done,
}

/// One wire's streaming format.
pub(crate) trait WireDecoder: Send + 'static {
    /// Turn one SSE event into model events.
    fn event(&mut self, event: SseEvent, out: &mut Vec<ModelEvent>) -> Result<Step, LlmError>;
    /// The body ended without [`Step::Done`]: finish, or fail if the answer is incomplete.
    fn end(&mut self, out: &mut Vec<ModelEvent>) -> Result<(), LlmError>;
}

/// POST the request and return the model's events, streamed or from one JSON body, which
/// `from_body` (a wire's decoder, possibly holding what it needs of the request) turns into
/// events.
pub(crate) async fn call(
    transport: &Transport,
    url: &reqwest::Url,
    body: bytes::Bytes,
    streaming: Option<Box<dyn WireDecoder>>,
    from_body: impl FnOnce(serde_json::Value) -> Result<Vec<ModelEvent>, LlmError>,
) -> Result<ModelStream, LlmError> {
    let response = transport.post(url, body).await?;
    match streaming {
        Some(decoder) => Ok(drive(response, decoder, transport)),
        None => {
            let json = read_json(response, transport).await?;
            let events = from_body(json)?;
            Ok(Box::pin(stream::iter(events.into_iter().map(Ok))))
        }
    }
}

async fn read_json(mut response: reqwest::Response, transport: &Transport) -> Result<serde_json::Value, LlmError> {
    let mut body = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) if body.len() + chunk.len() > MAX_BODY_BYTES => {
                return Err(LlmError::new(
                    LlmErrorKind::InvalidResponse,
                    format!("response body larger than {MAX_BODY_BYTES} bytes"),
                ));
            }
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            Ok(None) => break,
            Err(e) => return Err(transport.transport_error(&e)),
        }
    }
    serde_json::from_slice(&body)
        .map_err(|e| LlmError::new(LlmErrorKind::InvalidResponse, format!("response is not valid JSON: {e}")))
}

/// The stream rule in one place: once content was delivered, a failure can no longer be
/// retried or handed to a fallback model, so it becomes `stream_interrupted`.
pub(crate) fn interrupted(error: LlmError) -> LlmError {
    match error.kind {
        LlmErrorKind::StreamInterrupted => error,
        kind => LlmError::new(
            LlmErrorKind::StreamInterrupted,
            format!("the answer broke off after content was delivered ({}: {})", kind.code(), error.message),
        ),
    }
}

/// Events that deliver content to the caller (after which fallback is no longer possible).
pub(crate) fn is_content(event: &ModelEvent) -> bool {
    matches!(
        event,
        ModelEvent::TextDelta(_)
            | ModelEvent::ReasoningDelta(_)
            | ModelEvent::ToolCallDelta { .. }
            | ModelEvent::ToolCall(_)
    )
}

struct Driver {
    body: stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    sse: SseDecoder,
    decoder: Box<dyn WireDecoder>,
    queue: VecDeque<Result<ModelEvent, LlmError>>,
    content_seen: bool,
    done: bool,
    transport_error: Box<dyn Fn(&reqwest::Error) -> LlmError + Send>,
}

impl Driver {
    fn enqueue(&mut self, events: Vec<ModelEvent>, result: Result<(), LlmError>) {
        for event in events {
            self.content_seen |= is_content(&event);
            self.queue.push_back(Ok(event));
        }
        if let Err(e) = result {
            self.done = true;
            self.queue.push_back(Err(if self.content_seen { interrupted(e) } else { e }));
        }
    }

    fn feed(&mut self, bytes: &[u8]) {
        let mut sse_events = Vec::new();
        let mut out = Vec::new();
        let mut result = self.sse.push(bytes, &mut sse_events);
        for event in sse_events {
            match self.decoder.event(event, &mut out) {
                Ok(Step::More) => {}
                Ok(Step::Done) => {
                    self.done = true;
                    break;
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        self.enqueue(out, result);
    }

    fn end(&mut self) {
        self.done = true;
        let mut sse_events = Vec::new();
        let mut out = Vec::new();
        let mut result = self.sse.finish(&mut sse_events);
        for event in sse_events {
            if let Err(e) = self.decoder.event(event, &mut out) {
                result = Err(e);
            }
        }
        let result = result.and_then(|()| self.decoder.end(&mut out));
        self.enqueue(out, result);
    }
}

fn drive(response: reqwest::Response, decoder: Box<dyn WireDecoder>, transport: &Transport) -> ModelStream {
    let driver = Driver {
        body: response.bytes_stream().boxed(),
        sse: SseDecoder::default(),
        decoder,
        queue: VecDeque::new(),
        content_seen: false,
        done: false,
        transport_error: Box::new(transport.error_classifier()),
    };
    Box::pin(stream::unfold(driver, |mut d| async move {
        loop {
            if let Some(item) = d.queue.pop_front() {
                return Some((item, d));
            }
            if d.done {
                return None;
            }
            match d.body.next().await {
                Some(Ok(bytes)) => d.feed(&bytes),
                Some(Err(e)) => {
                    let error = (d.transport_error)(&e);
                    d.enqueue(Vec::new(), Err(error));
                }
                None => d.end(),
            }
        }
    }))
}

/// Reassembles streamed tool-call fragments by index, within bounds.
#[derive(Debug, Default)]
pub(crate) struct ToolCalls {
    calls: BTreeMap<usize, ToolCall>,
    argument_bytes: usize,
}

impl ToolCalls {
    /// Record one fragment and return it as a [`ModelEvent::ToolCallDelta`].
    pub fn delta(
        &mut self,
        index: usize,
        id: Option<String>,
        name: Option<String>,
        arguments: &str,
    ) -> Result<ModelEvent, LlmError> {
        if !self.calls.contains_key(&index) && self.calls.len() >= MAX_TOOL_CALLS {
            return Err(LlmError::new(
                LlmErrorKind::InvalidResponse,
                format!("more than {MAX_TOOL_CALLS} tool calls in one answer"),
            ));
        }
        self.argument_bytes += arguments.len();
        if self.argument_bytes > MAX_TOOL_ARGUMENT_BYTES {
            return Err(LlmError::new(
                LlmErrorKind::InvalidResponse,
                format!("tool-call arguments larger than {MAX_TOOL_ARGUMENT_BYTES} bytes"),
            ));
        }
        let call = self.calls.entry(index).or_insert_with(|| ToolCall {
            id: String::new(),
            name: String::new(),
            arguments: String::new(),
        });
        if let Some(id) = id.as_ref().filter(|_| call.id.is_empty()) {
            call.id.clone_from(id);
        }
        if let Some(name) = name.as_ref().filter(|_| call.name.is_empty()) {
            call.name.clone_from(name);
        }
        call.arguments.push_str(arguments);
        Ok(ModelEvent::ToolCallDelta { index, id, name, arguments: arguments.to_owned() })
    }

    /// Number of calls seen so far (the next free index).
    pub fn len(&self) -> usize {
        self.calls.len()
    }

    /// The closing events of a turn: complete tool calls in order, usage, and the finish
    /// reason (`tool_calls` whenever calls were made, whatever the provider said).
    pub fn finish(
        &mut self,
        usage: Option<Usage>,
        reason: FinishReason,
        out: &mut Vec<ModelEvent>,
    ) -> Result<(), LlmError> {
        let calls = std::mem::take(&mut self.calls);
        let any = !calls.is_empty();
        for (index, mut call) in calls {
            if call.name.is_empty() {
                return Err(LlmError::new(LlmErrorKind::InvalidResponse, format!("tool call {index} has no name")));
            }
            if call.id.is_empty() {
                call.id = format!("call_{index}");
            }
            if call.arguments.trim().is_empty() {
                call.arguments = "{}".to_owned();
            }
            out.push(ModelEvent::ToolCall(call));
        }
        out.extend(usage.map(ModelEvent::Usage));
        out.push(ModelEvent::Finish(if any && reason == FinishReason::Stop {
            FinishReason::ToolCalls
        } else {
            reason
        }));
        Ok(())
    }
}

/// Parse one SSE `data` payload as JSON.
pub(crate) fn json(data: &str) -> Result<serde_json::Value, LlmError> {
    serde_json::from_str(data)
        .map_err(|e| LlmError::new(LlmErrorKind::InvalidResponse, format!("stream event is not valid JSON: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fragments_reassemble_by_index_in_order() {
        let mut t = ToolCalls::default();
        t.delta(1, Some("b".into()), Some("grep".into()), "").unwrap();
        t.delta(0, Some("a".into()), Some("read".into()), "{\"pa").unwrap();
        t.delta(0, None, None, "th\":1}").unwrap();
        let mut out = Vec::new();
        t.finish(None, FinishReason::Stop, &mut out).unwrap();
        assert_eq!(
            out,
            vec![
                ModelEvent::ToolCall(ToolCall {
                    id: "a".into(),
                    name: "read".into(),
                    arguments: "{\"path\":1}".into()
                }),
                ModelEvent::ToolCall(ToolCall { id: "b".into(), name: "grep".into(), arguments: "{}".into() }),
                ModelEvent::Finish(FinishReason::ToolCalls),
            ]
        );
    }
}
