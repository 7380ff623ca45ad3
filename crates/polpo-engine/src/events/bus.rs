//! Live runtime events (`session:created`, `message:added`, `run:*`, `tool:*` …) for anyone who
//! watches the runtime from outside: the dashboard over `GET /api/v1/events`, tests, tools.
//!
//! Three promises, because a dashboard that silently misses an event shows a wrong picture:
//! - **Ordered ids.** Every event gets the next `u64`; ids are contiguous within a process. The
//!   first id is the bus's creation time in microseconds, so ids also grow across restarts and
//!   a client holding an id from an earlier process is told it lost events instead of being
//!   handed unrelated events that happen to carry higher numbers.
//! - **Exact resume.** [`EventBus::subscribe_after`] returns the events after a given id from a
//!   bounded replay ring *and* a live subscription, taken under one lock: the replayed part and
//!   the live part meet with no gap and no duplicate.
//! - **Loss is said, not hidden.** When a client asks for ids that fell out of the ring, or a
//!   slow subscriber falls behind the live channel, it receives an [`EventsLost`] marker
//!   (`events_lost`) and then continues from the oldest event still kept.
//!
//! Publishing costs the payload's serialization, one short lock, a ring push and a channel send
//! that does nothing when no one listens. Payloads are kept as JSON text, written once when
//! published: most events are never read, and those that are leave as text (an SSE `data:`
//! line, a feed row), so a tree of `Value`s would only be built, kept in the ring and freed.
//!
//! **Shared by several servers** ([`EventBus::share`], PostgreSQL): events are published to
//! the store's feed instead, which numbers them for every server at once, and each server's
//! bus takes the feed's events (its own and the others') into its ring as NOTIFY announces
//! them. The three promises then hold across servers: one order, the same ids everywhere, so
//! a client resumes with `Last-Event-ID` on whichever server the load balancer picks. Payloads are bounded ([`MAX_PAYLOAD_BYTES`], with `"truncated": true`) so a
//! large tool result cannot make every subscriber copy megabytes.

use super::journal::EventKind;
use super::sink::RunEvent;
use crate::request::ChatError;
use crate::routing::ModelRoute;
use crate::turn::outcome::RunOutcome;
use chrono::{DateTime, Utc};
use polpo_store::{Clock, EventFeed, FeedEvent, NewFeedEvent, Signal, Signals, SystemClock};
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use tokio::sync::{broadcast, mpsc};

/// Events kept for replay by default (the reference keeps 1000).
pub const DEFAULT_REPLAY: usize = 1024;
/// Largest total of string bytes in one event's payload; longer strings are cut.
pub const MAX_PAYLOAD_BYTES: usize = 16 * 1024;
/// Name of the marker that tells a subscriber events were lost.
pub const EVENTS_LOST: &str = "events_lost";

/// One runtime event as subscribers see it.
#[derive(Debug, Clone, PartialEq)]
pub struct BusEvent {
    /// Position in this runtime's event order (the SSE `id:`).
    pub id: u64,
    /// When it was published.
    pub ts: DateTime<Utc>,
    /// The reference's event name, e.g. `session:created`.
    pub event: String,
    /// The payload: a JSON object's text, bounded in size.
    pub data: String,
}

impl BusEvent {
    /// The payload parsed (`Null` if it were not JSON, which [`EventBus::publish`] never
    /// stores): for the rare reader that looks inside.
    pub fn payload(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or(Value::Null)
    }
}

/// Events a subscriber will never see: the ids after `after` and before `next_id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventsLost {
    /// The last id the subscriber had.
    pub after: u64,
    /// The id delivery continues with.
    pub next_id: u64,
    /// How many were lost; `None` when `after` was not issued by this process (another
    /// process's id, a restart), so the count is unknown.
    pub missed: Option<u64>,
}

/// What a subscriber receives, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Delivery {
    /// An event.
    Event(Arc<BusEvent>),
    /// Some events were lost before the ones that follow.
    Lost(EventsLost),
}

/// The runtime's event bus; one per [`crate::Runtime`], shared by every subscriber (a clone
/// is the same bus, for a part of the runtime that publishes without holding the runtime).
#[derive(Clone)]
pub struct EventBus {
    inner: Arc<Inner>,
}

struct Inner {
    state: Mutex<State>,
    max_payload: usize,
    clock: Arc<dyn Clock>,
    /// Set once the bus is shared: where published events go (the feed's writer).
    feed: OnceLock<mpsc::UnboundedSender<NewFeedEvent>>,
}

struct State {
    /// The id the next event gets.
    next_id: u64,
    /// The first id this bus issued.
    first_id: u64,
    capacity: usize,
    ring: VecDeque<Arc<BusEvent>>,
    live: broadcast::Sender<Arc<BusEvent>>,
}

impl Default for EventBus {
    fn default() -> Self {
        Self::new(DEFAULT_REPLAY)
    }
}

impl std::fmt::Debug for EventBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventBus").field("last_id", &self.last_id()).finish()
    }
}

impl EventBus {
    /// A bus that keeps the last `replay` events (at least 1) for resuming subscribers, on the
    /// machine's clock.
    pub fn new(replay: usize) -> Self {
        Self::with_clock(replay, Arc::new(SystemClock))
    }

    /// A bus whose first id and event times come from `clock`.
    pub fn with_clock(replay: usize, clock: Arc<dyn Clock>) -> Self {
        let first = u64::try_from(clock.now().timestamp_micros()).unwrap_or(0).max(1);
        Self::build(replay, first, clock)
    }

    /// A bus whose first event gets id `first_id` (≥ 1); [`EventBus::new`] picks the clock.
    pub fn starting_at(replay: usize, first_id: u64) -> Self {
        Self::build(replay, first_id, Arc::new(SystemClock))
    }

    fn build(replay: usize, first_id: u64, clock: Arc<dyn Clock>) -> Self {
        let capacity = replay.max(1);
        let first_id = first_id.max(1);
        let (live, _) = broadcast::channel(capacity);
        let state =
            State { next_id: first_id, first_id, capacity, ring: VecDeque::with_capacity(capacity.min(64)), live };
        let inner = Inner { state: Mutex::new(state), max_payload: MAX_PAYLOAD_BYTES, clock, feed: OnceLock::new() };
        Self { inner: Arc::new(inner) }
    }

    /// Publish `data` (anything that serializes as a JSON object: a `Value`, a typed event)
    /// as event `name` and return its id; `None` on a shared bus, where the feed numbers it
    /// (it reaches subscribers, here too, once the feed has it). Strings in `data` beyond the
    /// payload bound are cut and the payload gets `"truncated": true`.
    pub fn publish(&self, name: &str, data: impl Serialize) -> Option<u64> {
        self.publish_text(name, payload_text(&data, self.inner.max_payload))
    }

    /// [`EventBus::publish`] of a payload written already: `json` is the text of a JSON object
    /// (the caller's to vouch for; a loop run's trace event serialised once for the bus and its
    /// checkpoint). One beyond the payload bound is handed back, to go through
    /// [`EventBus::publish`], which cuts its strings.
    pub fn publish_json(&self, name: &str, json: String) -> Result<Option<u64>, String> {
        if json.len() > self.inner.max_payload {
            return Err(json);
        }
        Ok(self.publish_text(name, json))
    }

    /// Publish payload text `data` as event `name`.
    fn publish_text(&self, name: &str, data: String) -> Option<u64> {
        let ts = self.inner.clock.now();
        if let Some(feed) = self.inner.feed.get() {
            let _ = feed.send(NewFeedEvent { ts, event: name.to_owned(), data });
            return None;
        }
        let mut state = self.inner.lock();
        let id = state.next_id;
        state.next_id += 1;
        state.push(Arc::new(BusEvent { id, ts, event: name.to_owned(), data }));
        Some(id)
    }

    /// Share this bus with every server on `feed`: from now on events are published to the
    /// feed, and the feed's events — every server's — fill the ring and reach subscribers,
    /// woken by `signals`. The ring starts with the feed's newest events, so a client that
    /// was connected to another server resumes here. Call once, before anything is
    /// published (events published earlier keep this process's ids and are replaced).
    pub async fn share(&self, feed: Arc<dyn EventFeed>, signals: &Signals) -> Result<(), polpo_store::StoreError> {
        let mut wake = signals.subscribe();
        let capacity = self.inner.lock().capacity;
        let (tail, last) = feed.feed_tail(u32::try_from(capacity).unwrap_or(u32::MAX)).await?;
        let (tx, rx) = mpsc::unbounded_channel();
        if self.inner.feed.set(tx).is_err() {
            return Ok(());
        }
        {
            let mut state = self.inner.lock();
            let newest = tail.last().map_or(last, |e| e.id.max(last));
            state.first_id = tail.first().map_or(newest + 1, |e| e.id);
            state.next_id = newest + 1;
            state.ring.clear();
            for event in tail {
                state.push(Arc::new(bus_event(event)));
            }
        }
        tokio::spawn(write_feed(feed.clone(), rx));
        let inner = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            loop {
                let Some(bus) = inner.upgrade() else { return };
                loop {
                    let after = bus.lock().next_id - 1;
                    match feed.feed_after(after, 1000).await {
                        Ok(events) if events.is_empty() => break,
                        Ok(events) => {
                            let mut state = bus.lock();
                            for event in events {
                                if event.id >= state.next_id {
                                    state.next_id = event.id + 1;
                                    state.push(Arc::new(bus_event(event)));
                                }
                            }
                        }
                        Err(e) => {
                            tracing::warn!(code = e.code(), "the shared event feed could not be read: {e}");
                            break;
                        }
                    }
                }
                drop(bus);
                loop {
                    match wake.recv().await {
                        Ok(Signal::Feed | Signal::Resync) | Err(broadcast::error::RecvError::Lagged(_)) => break,
                        Ok(_) => {}
                        Err(broadcast::error::RecvError::Closed) => return,
                    }
                }
            }
        });
        Ok(())
    }

    /// The events after `after` still in the ring (preceded by an [`EventsLost`] marker when
    /// some are gone), and a subscription that delivers every later event. `None`: live only.
    pub fn subscribe_after(&self, after: Option<u64>) -> (Vec<Delivery>, Subscription) {
        let (backlog, rx, last) = self.inner.resume(after);
        (backlog, Subscription { inner: Arc::downgrade(&self.inner), rx, last, pending: VecDeque::new() })
    }

    /// The id of the newest event (one less than the first id when none was published).
    pub fn last_id(&self) -> u64 {
        self.inner.lock().next_id - 1
    }

    /// Subscribers currently attached.
    pub fn subscribers(&self) -> usize {
        self.inner.lock().live.receiver_count()
    }
}

impl State {
    /// Keep `event` in the ring and send it to live subscribers. Sent under the lock, so a
    /// concurrent `subscribe_after` sees each event exactly once: either in the ring it
    /// copies or on the channel it joined. No receiver: a no-op.
    fn push(&mut self, event: Arc<BusEvent>) {
        if self.ring.len() == self.capacity {
            self.ring.pop_front();
        }
        self.ring.push_back(event.clone());
        let _ = self.live.send(event);
    }
}

fn bus_event(e: FeedEvent) -> BusEvent {
    BusEvent { id: e.id, ts: e.ts, event: e.event, data: e.data }
}

/// Events published per feed write at most.
const FEED_BATCH: usize = 256;

/// Write published events to the shared feed in order, a batch per write; a batch the store
/// keeps refusing is dropped (and logged) rather than blocking every later event.
async fn write_feed(feed: Arc<dyn EventFeed>, mut rx: mpsc::UnboundedReceiver<NewFeedEvent>) {
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < FEED_BATCH
            && let Ok(next) = rx.try_recv()
        {
            batch.push(next);
        }
        for attempt in 0..4u32 {
            match feed.publish_feed(batch.clone()).await {
                Ok(_) => break,
                Err(e) if attempt == 3 => {
                    tracing::warn!(
                        code = e.code(),
                        dropped = batch.len(),
                        "events could not be published to the shared feed: {e}"
                    );
                }
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(50 << attempt)).await,
            }
        }
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Backlog after `after`, a receiver for what follows, and the id the backlog ends at.
    fn resume(&self, after: Option<u64>) -> (Vec<Delivery>, broadcast::Receiver<Arc<BusEvent>>, u64) {
        let state = self.lock();
        let rx = state.live.subscribe();
        let newest = state.next_id - 1;
        let Some(after) = after else {
            return (Vec::new(), rx, newest);
        };
        let oldest = state.ring.front().map_or(state.next_id, |e| e.id);
        let mut backlog = Vec::new();
        let skip = if after > newest || after + 1 < oldest {
            // Unknown id (another process, the future) or fallen out of the ring: say so and
            // replay everything kept.
            let known = after + 1 >= state.first_id && after <= newest;
            backlog.push(Delivery::Lost(EventsLost {
                after,
                next_id: oldest,
                missed: known.then(|| oldest - after - 1),
            }));
            0
        } else {
            usize::try_from(after + 1 - oldest).unwrap_or(usize::MAX)
        };
        backlog.extend(state.ring.iter().skip(skip).cloned().map(Delivery::Event));
        (backlog, rx, newest)
    }
}

/// A live feed of events; see [`EventBus::subscribe_after`].
pub struct Subscription {
    inner: Weak<Inner>,
    rx: broadcast::Receiver<Arc<BusEvent>>,
    /// The last id delivered (or covered by the backlog).
    last: u64,
    pending: VecDeque<Delivery>,
}

impl Subscription {
    /// The next delivery; `None` once the bus is gone. A subscriber that fell behind the live
    /// channel is resumed from the ring, with an [`EventsLost`] marker for what the ring no
    /// longer holds.
    pub async fn recv(&mut self) -> Option<Delivery> {
        loop {
            if let Some(d) = self.pending.pop_front() {
                if let Delivery::Event(e) = &d {
                    self.last = e.id;
                }
                return Some(d);
            }
            match self.rx.recv().await {
                Ok(event) => {
                    self.last = event.id;
                    return Some(Delivery::Event(event));
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    let inner = self.inner.upgrade()?;
                    let (backlog, rx, _) = inner.resume(Some(self.last));
                    self.rx = rx;
                    self.pending.extend(backlog);
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }
}

/// `data` as JSON text, its strings cut so their bytes total at most `max` (and then flagged
/// `"truncated": true`). Written straight to text; the writing stops at `max` bytes, and only
/// a payload whose text outgrows `max` (its strings may still fit: keys, numbers and escapes
/// count in the text) is then built as a `Value` to be cut — a whole copy of it, so a huge
/// tool result costs its size once more here (a serializer that cuts strings as it writes
/// would not).
fn payload_text(data: &impl Serialize, max: usize) -> String {
    let mut text = Capped { buf: Vec::with_capacity(256), max };
    if serde_json::to_writer(&mut text, data).is_ok()
        && let Ok(text) = String::from_utf8(text.buf)
    {
        return text;
    }
    let mut value = serde_json::to_value(data).unwrap_or_else(|_| json!({}));
    if bound(&mut value, max)
        && let Value::Object(map) = &mut value
    {
        map.insert("truncated".into(), Value::Bool(true));
    }
    value.to_string()
}

/// A buffer that refuses to grow past `max` bytes.
struct Capped {
    buf: Vec<u8>,
    max: usize,
}

impl std::io::Write for Capped {
    #[inline]
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.write_all(bytes).map(|()| bytes.len())
    }

    // The serializer writes token by token: one inlined check and copy each.
    #[inline]
    fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        if self.buf.len() + bytes.len() > self.max {
            return Err(std::io::ErrorKind::FileTooLarge.into());
        }
        self.buf.extend_from_slice(bytes);
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Cut strings in `v` so their bytes total at most `budget`; true when something was cut.
fn bound(v: &mut Value, budget: usize) -> bool {
    fn walk(v: &mut Value, left: &mut usize) -> bool {
        match v {
            Value::String(s) => {
                if s.len() <= *left {
                    *left -= s.len();
                    return false;
                }
                let mut cut = *left;
                while !s.is_char_boundary(cut) {
                    cut -= 1;
                }
                s.truncate(cut);
                *left = 0;
                true
            }
            Value::Array(items) => items.iter_mut().fold(false, |cut, item| walk(item, left) | cut),
            Value::Object(map) => map.values_mut().fold(false, |cut, item| walk(item, left) | cut),
            _ => false,
        }
    }
    let mut left = budget;
    walk(v, &mut left)
}

/// Secret-free copy of model-visible data (tool arguments, results, messages): secret-named
/// fields and token-shaped strings become `[REDACTED]`, as in hook envelopes.
fn scrubbed(mut v: Value) -> Value {
    polpo_core::hooks::redact(&mut v, &[]);
    v
}

/// What the runtime reports about one chat run: the ids every event of the run carries, and
/// one function per lifecycle point, so the runtime calls one line where something happens.
pub(crate) struct RunEvents<'a> {
    bus: &'a EventBus,
    ids: RunIds,
}

/// The ids every event of a chat run carries.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RunIds {
    run_id: String,
    session_id: String,
    agent: String,
}

/// A run event's payload: the run's ids, then the event's own fields (written in one go to the
/// bus's text, with no merged map built per event).
#[derive(Serialize)]
struct RunPayload<'a, F> {
    #[serde(flatten)]
    ids: &'a RunIds,
    #[serde(flatten)]
    fields: F,
}

/// A `message:added` event's own fields; `message` is the stored message itself when
/// scrubbing would not change it (no `Value` tree built per message), else its scrubbed `Value`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct MessageAdded<'a, M> {
    message_id: &'a str,
    seq: u64,
    role: polpo_core::message::Role,
    message: M,
}

impl<'a> RunEvents<'a> {
    /// Events of run `run_id` of `agent` in session `session_id`.
    pub(crate) fn new(bus: &'a EventBus, run_id: &str, session_id: &str, agent: &str) -> Self {
        let ids = RunIds { run_id: run_id.to_owned(), session_id: session_id.to_owned(), agent: agent.to_owned() };
        Self { bus, ids }
    }

    /// `fields` (an object) with the run's ids, as `kind`'s bus event.
    fn publish(&self, kind: EventKind, fields: impl Serialize) {
        self.bus.publish(kind.bus_name().unwrap_or_default(), RunPayload { ids: &self.ids, fields });
    }

    /// `session:created` for a session made by this request.
    pub(crate) fn session_created(&self, session: &polpo_store::Session) {
        self.publish(EventKind::SessionCreated, json!({"title": session.title, "createdAt": session.created_at}));
    }

    /// `model:routed`: which way model routing sent this request (opted-in agents only).
    pub(crate) fn model_routed(&self, route: &ModelRoute) {
        self.publish(EventKind::ModelRouted, serde_json::to_value(route).unwrap_or_default());
    }

    /// `run:started`.
    pub(crate) fn started(&self) {
        self.publish(EventKind::RunStarted, json!({}));
    }

    /// `tool:started` / `tool:completed` / `tool:failed` for server tool calls; other run
    /// events stay on the caller's sink (text deltas would flood every subscriber).
    pub(crate) fn forward(&self, event: &RunEvent) {
        match event {
            RunEvent::ToolCalling { id, name, arguments } => {
                self.publish(
                    EventKind::ToolStarted,
                    json!({"callId": id, "tool": name, "arguments": scrubbed(arguments.clone())}),
                );
            }
            RunEvent::ToolCompleted { id, name, result, is_error } => {
                let kind = if *is_error { EventKind::ToolFailed } else { EventKind::ToolCompleted };
                self.publish(kind, json!({"callId": id, "tool": name, "result": scrubbed(Value::String(result.clone())), "isError": is_error}));
            }
            _ => {}
        }
    }

    /// `message:added` for each message the store accepted, in order.
    pub(crate) fn messages_added(&self, stored: &[polpo_store::StoredMessage]) {
        for m in stored {
            let (message_id, seq, role) = (m.id.as_str(), m.seq, m.message.role);
            if polpo_core::hooks::message_needs_redaction(&m.message) {
                let message = scrubbed(serde_json::to_value(&m.message).unwrap_or(Value::Null));
                self.publish(EventKind::MessageAdded, MessageAdded { message_id, seq, role, message });
            } else {
                self.publish(EventKind::MessageAdded, MessageAdded { message_id, seq, role, message: &m.message });
            }
        }
    }

    /// `run:completed` with the finish reason, usage and number of model calls.
    pub(crate) fn completed(&self, outcome: &RunOutcome) {
        let usage = json!({"inputTokens": outcome.usage.input_tokens, "outputTokens": outcome.usage.output_tokens});
        self.publish(
            EventKind::RunCompleted,
            json!({"finishReason": outcome.finish_reason, "usage": usage, "turns": outcome.turns}),
        );
    }

    /// `run:failed` with the stable error code; hands the error back for the caller to return.
    pub(crate) fn failed(&self, error: ChatError) -> ChatError {
        self.publish(
            EventKind::RunFailed,
            json!({"code": error.code(), "message": scrubbed(Value::String(error.to_string()))}),
        );
        error
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::time::Duration;

    fn ids(backlog: &[Delivery]) -> Vec<u64> {
        backlog.iter().filter_map(|d| if let Delivery::Event(e) = d { Some(e.id) } else { None }).collect()
    }

    async fn next(sub: &mut Subscription) -> Delivery {
        tokio::time::timeout(Duration::from_secs(5), sub.recv())
            .await
            .expect("a delivery within 5 s")
            .expect("bus alive")
    }

    /// A stored message is announced as its scrubbed `Value` would be, byte for byte: written
    /// straight from the message when scrubbing changes nothing, scrubbed when a string is
    /// token-shaped or too long, or a file part has a secret-named field; no token reaches the
    /// bus either way.
    #[test]
    fn message_added_is_the_scrubbed_message_whichever_way_it_is_written() {
        use polpo_core::message::{Content, ContentPart, ImageUrl, Message, ToolCall};
        let token = "sk-abcdefghijklmnopqrstuvwx";
        let call = |arguments: &str| ToolCall { id: "call_1".into(), name: "read".into(), arguments: arguments.into() };
        let parts = |part: ContentPart| Message { content: Some(Content::Parts(vec![part])), ..Message::user("") };
        let file = |file: Value| parts(ContentPart::File { file });
        let messages = [
            Message::user("plain \"quoted\" text\n with é"),
            Message::user(format!("line\n{token}")),
            Message::user("x".repeat(polpo_core::hooks::limits::MAX_ENVELOPE_STRING_BYTES + 1)),
            Message { tool_calls: vec![call(r#"{"path":"f.txt"}"#)], ..Message::assistant("") },
            Message {
                content: None,
                tool_calls: vec![call(&format!(r#"{{"key":"{token}"}}"#))],
                ..Message::assistant("")
            },
            Message::tool_result("call_1", "Bearer abc"),
            Message { name: Some("bob".into()), ..Message::user("hi") },
            parts(ContentPart::ImageUrl {
                image_url: ImageUrl { url: "https://x/y.png".into(), detail: Some("low".into()) },
            }),
            file(json!({"file_id": "f1", "meta": {"n": [1, null]}})),
            file(json!({"file_id": "f1", "api_token": "t"})),
            file(json!({"file_id": "f1", "password": null})),
        ];
        let bus = EventBus::starting_at(64, 1);
        let events = RunEvents::new(&bus, "run-1", "s-1", "coder");
        for (i, message) in messages.into_iter().enumerate() {
            let stored = polpo_store::StoredMessage {
                id: format!("m{i}"),
                session_id: "s-1".into(),
                seq: i as u64 + 1,
                ts: chrono::Utc::now(),
                message,
                reasoning: None,
                reasoning_truncated: false,
                turn_id: None,
                usage: None,
            };
            events.messages_added(std::slice::from_ref(&stored));
            let scrubbed = scrubbed(serde_json::to_value(&stored.message).unwrap());
            let fields =
                json!({"messageId": stored.id, "seq": stored.seq, "role": stored.message.role, "message": scrubbed});
            let expected = payload_text(&RunPayload { ids: &events.ids, fields }, MAX_PAYLOAD_BYTES);
            let (backlog, _) = bus.subscribe_after(Some(i as u64));
            let published = backlog.into_iter().next().expect("published").event();
            assert_eq!(published.data, expected, "message {i}");
            assert!(!published.data.contains(token) && !published.data.contains("Bearer abc"), "message {i}");
        }
    }

    #[tokio::test]
    async fn resume_replays_what_was_missed_then_continues_live() {
        let bus = EventBus::starting_at(8, 1);
        for i in 0..3 {
            bus.publish("message:added", json!({"i": i}));
        }
        let (backlog, mut sub) = bus.subscribe_after(Some(1));
        assert_eq!(ids(&backlog), [2, 3]);
        bus.publish("run:completed", json!({}));
        let Delivery::Event(e) = next(&mut sub).await else { panic!("expected an event") };
        assert_eq!((e.id, e.event.as_str()), (4, "run:completed"));

        // No id: live only. Up to date: nothing to replay, nothing lost.
        assert!(bus.subscribe_after(None).0.is_empty());
        assert!(bus.subscribe_after(Some(4)).0.is_empty());
    }

    #[tokio::test]
    async fn an_id_that_fell_out_of_the_ring_is_reported_lost() {
        let bus = EventBus::starting_at(4, 1);
        for _ in 0..10 {
            bus.publish("tick", json!({}));
        }
        let (backlog, _) = bus.subscribe_after(Some(2));
        assert_eq!(backlog[0], Delivery::Lost(EventsLost { after: 2, next_id: 7, missed: Some(4) }));
        assert_eq!(ids(&backlog), [7, 8, 9, 10]);

        // An id this process never issued (a restart, the future): count unknown, whole ring.
        let (backlog, _) = bus.subscribe_after(Some(99));
        assert_eq!(backlog[0], Delivery::Lost(EventsLost { after: 99, next_id: 7, missed: None }));
        assert_eq!(ids(&backlog).len(), 4);
        let restarted = EventBus::starting_at(4, 1000);
        restarted.publish("tick", json!({}));
        let (backlog, _) = restarted.subscribe_after(Some(10));
        assert_eq!(backlog[0], Delivery::Lost(EventsLost { after: 10, next_id: 1000, missed: None }));
        assert_eq!(ids(&backlog), [1000]);
    }

    impl Delivery {
        fn event(self) -> Arc<BusEvent> {
            match self {
                Delivery::Event(e) => e,
                Delivery::Lost(l) => panic!("expected an event, got {l:?}"),
            }
        }
    }

    #[tokio::test]
    async fn a_slow_subscriber_is_told_what_it_lost_and_resumes_from_the_ring() {
        let bus = EventBus::starting_at(4, 1);
        let (_, mut sub) = bus.subscribe_after(None);
        for _ in 0..10 {
            bus.publish("tick", json!({}));
        }
        assert_eq!(next(&mut sub).await, Delivery::Lost(EventsLost { after: 0, next_id: 7, missed: Some(6) }));
        for want in 7..=10 {
            assert_eq!(next(&mut sub).await.event().id, want);
        }
    }

    /// Publishers race subscribers that join at random points. Each subscriber's backlog plus
    /// live feed must be contiguous ids, except across an `events_lost` marker that accounts
    /// for exactly the ids skipped. With a ring that holds everything, nothing may be lost.
    async fn hammer(replay: usize) -> usize {
        const PUBLISHERS: u64 = 4;
        const PER_PUBLISHER: u64 = 2000;
        let bus = Arc::new(EventBus::starting_at(replay, 1));
        let (joined_tx, mut joined) = tokio::sync::mpsc::unbounded_channel::<()>();
        let mut checkers = Vec::new();
        for k in 0..32u64 {
            let bus = bus.clone();
            let joined_tx = joined_tx.clone();
            checkers.push(tokio::spawn(async move {
                for _ in 0..(k % 7) * 10 {
                    tokio::task::yield_now().await;
                }
                // Half resume from an id already issued, half join live.
                let from = (k % 2 == 0).then(|| bus.last_id().saturating_sub(k * 3));
                let (backlog, mut sub) = bus.subscribe_after(from);
                joined_tx.send(()).unwrap();
                let mut deliveries: VecDeque<Delivery> = backlog.into();
                let (mut last, mut lost) = (from, 0);
                let end = PUBLISHERS * PER_PUBLISHER + 1;
                while last != Some(end) {
                    let d = match deliveries.pop_front() {
                        Some(d) => d,
                        None => tokio::time::timeout(Duration::from_secs(20), sub.recv())
                            .await
                            .expect("progress")
                            .expect("alive"),
                    };
                    match d {
                        Delivery::Event(e) => {
                            if let Some(l) = last {
                                assert_eq!(e.id, l + 1, "gap or duplicate after {l}");
                            }
                            last = Some(e.id);
                        }
                        Delivery::Lost(l) => {
                            assert_eq!(Some(l.after), last.or(Some(l.after)), "marker starts where delivery stopped");
                            assert_eq!(l.missed, Some(l.next_id - l.after - 1));
                            last = Some(l.next_id - 1);
                            lost += 1;
                        }
                    }
                }
                lost
            }));
        }
        let mut publishers = Vec::new();
        for p in 0..PUBLISHERS {
            let bus = bus.clone();
            publishers.push(tokio::spawn(async move {
                for i in 0..PER_PUBLISHER {
                    bus.publish("tick", json!({"p": p, "i": i}));
                    if i % 64 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
            }));
        }
        for p in publishers {
            p.await.unwrap();
        }
        // Once every subscriber has joined, each one must see this last event.
        drop(joined_tx);
        for _ in 0..32 {
            joined.recv().await.unwrap();
        }
        bus.publish("end", json!({}));
        let mut lost = 0;
        for c in checkers {
            lost += c.await.unwrap();
        }
        assert_eq!(bus.last_id(), PUBLISHERS * PER_PUBLISHER + 1);
        lost
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn replay_and_live_meet_without_gap_or_duplicate_under_concurrent_publishing() {
        assert_eq!(hammer(10_000).await, 0, "a ring that holds every event loses none");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn slow_subscribers_of_a_small_ring_lose_only_what_markers_account_for() {
        // Whether markers occur depends on scheduling (about 800 in a typical run here); the
        // checks inside `hammer` hold either way.
        hammer(16).await;
    }

    #[test]
    fn payloads_are_bounded_and_flagged() {
        let bus = EventBus::starting_at(4, 1);
        bus.publish("tool:completed", json!({"tool": "read", "result": "é".repeat(20_000)}));
        let (backlog, _) = bus.subscribe_after(Some(0));
        let e = backlog[0].clone().event();
        assert_eq!(e.payload()["truncated"], true);
        assert!(e.payload()["result"].as_str().unwrap().len() <= MAX_PAYLOAD_BYTES);
        bus.publish("tick", json!({"small": "x"}));
        assert!(bus.subscribe_after(Some(1)).0[0].clone().event().payload().get("truncated").is_none());
        // Text beyond the bound whose strings fit (numbers, keys) is kept whole, not flagged.
        let numbers: Vec<u64> = (0..4_000).map(|i| 1_000_000 + i).collect();
        bus.publish("tick", json!({"numbers": numbers}));
        let whole = bus.subscribe_after(Some(2)).0[0].clone().event();
        assert!(whole.data.len() > MAX_PAYLOAD_BYTES);
        assert_eq!(whole.payload(), json!({"numbers": numbers}));
    }

    #[test]
    fn typed_payloads_are_published_as_their_json() {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Step<'a> {
            step_key: &'a str,
            output: &'a str,
        }
        let bus = EventBus::starting_at(4, 1);
        bus.publish("loop:trace", Step { step_key: "fetch", output: "ok" });
        bus.publish("loop:trace", Step { step_key: "big", output: &"x".repeat(MAX_PAYLOAD_BYTES * 2) });
        let (backlog, _) = bus.subscribe_after(Some(0));
        let events: Vec<Arc<BusEvent>> = backlog.into_iter().map(Delivery::event).collect();
        assert_eq!(events[0].data, r#"{"stepKey":"fetch","output":"ok"}"#);
        let big = events[1].payload();
        assert_eq!((big["stepKey"].as_str(), big["truncated"].as_bool()), (Some("big"), Some(true)));
        assert_eq!(big["output"].as_str().map(str::len), Some(MAX_PAYLOAD_BYTES - 3));
    }

    #[test]
    fn run_events_carry_ids_and_never_secrets() {
        let bus = EventBus::starting_at(16, 1);
        let run = RunEvents::new(&bus, "chat-1", "s-1", "coder");
        run.forward(&RunEvent::ToolCalling {
            id: "c1".into(),
            name: "http".into(),
            arguments: json!({"url": "https://x", "apiKey": "k-123456"}),
        });
        run.forward(&RunEvent::ToolCompleted {
            id: "c1".into(),
            name: "http".into(),
            result: "got sk-abcdefghijklmnopqrstuvwxyz".into(),
            is_error: false,
        });
        run.forward(&RunEvent::TextDelta { text: "not an event".into() });
        run.failed(ChatError::InvalidRequest("Authorization: Bearer abc".into()));
        let (backlog, _) = bus.subscribe_after(Some(0));
        let events: Vec<Arc<BusEvent>> = backlog.into_iter().map(Delivery::event).collect();
        let names: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
        assert_eq!(names, ["tool:started", "tool:completed", "run:failed"]);
        assert_eq!(events[0].payload()["runId"], "chat-1");
        assert_eq!(events[0].payload()["sessionId"], "s-1");
        let all: String = events.iter().map(|e| e.data.as_str()).collect();
        assert!(!all.contains("k-123456") && !all.contains("sk-abc") && !all.contains("Bearer abc"), "{all}");
        assert_eq!(events[2].payload()["code"], "invalid_request");
    }
}
