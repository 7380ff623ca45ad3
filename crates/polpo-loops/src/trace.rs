//! `loop_trace` events (inventory §6.5): what a loop run did, in order. `stepKey` is the
//! canonical step id; `step` stays the legacy alias (`saveAs ?? tool` for tool steps, else the
//! id); transitions carry `fromStepKey`/`toStepKey`. Projection traces carry binding paths,
//! size, validation status and a hash — never the values.
//!
//! Every event is also announced on the runtime's live event bus (`GET /api/v1/events`, every
//! server's on a shared store) as [`LOOP_RUN_TRACE`], the event itself plus `loopRunId` and
//! `agent`; the run's turning points get a name of their own as well ([`LOOP_RUN_STARTED`] …
//! [`LOOP_RUN_FAILED`], payload `{loopRunId, loop, agent, traceId, step?, code?, error?}`), and
//! a checkpoint that could not store the trace is [`LOOP_RUN_TRACE_PERSIST_FAILED`] (the
//! reference's name). The payloads carry what the trace carries, so never a secret or a
//! projected value.

use crate::error::LoopError;
use polpo_engine::EventBus;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicU64, Ordering};

/// Bus event: one trace event of a loop run (the event's fields, `loopRunId`, `agent`).
pub const LOOP_RUN_TRACE: &str = "loop_run:trace";
/// Bus event: a run started (its `loop.start`).
pub const LOOP_RUN_STARTED: &str = "loop_run:started";
/// Bus event: a stored run continues from its checkpoint (its `loop.resume`).
pub const LOOP_RUN_RESUMED: &str = "loop_run:resumed";
/// Bus event: a human step waits for a person (its `human.request`; `step` names it).
pub const LOOP_RUN_AWAITING_HUMAN: &str = "loop_run:awaiting_human";
/// Bus event: a run reached `end` (its `loop.end`).
pub const LOOP_RUN_COMPLETED: &str = "loop_run:completed";
/// Bus event: a run stopped short (its `loop.error`; `code` says why: a failure, `aborted` when
/// cancelled, `loop_approval_required` at an approval gate). A run another server took over is
/// not announced as stopped by the one that let it go: the other announces `loop_run:resumed`.
pub const LOOP_RUN_FAILED: &str = "loop_run:failed";
/// Bus event (the reference's): a checkpoint could not store the run's trace (`code`, `error`).
pub const LOOP_RUN_TRACE_PERSIST_FAILED: &str = "loop_run:trace_persist_failed";

/// The trace event types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TraceKind {
    /// The run started.
    #[serde(rename = "loop.start")]
    LoopStart,
    /// A stored run continues from its checkpoint (after a restart).
    #[serde(rename = "loop.resume")]
    LoopResume,
    /// A permission was evaluated at a lifecycle point (matched: `completed`, else `skipped`).
    #[serde(rename = "permission.result")]
    PermissionResult,
    /// A policy was evaluated at a lifecycle point.
    #[serde(rename = "policy.result")]
    PolicyResult,
    /// A gate needs a reviewer: the run stops `awaiting_approval`.
    #[serde(rename = "approval.required")]
    ApprovalRequired,
    /// A step started.
    #[serde(rename = "step.start")]
    StepStart,
    /// A step ended.
    #[serde(rename = "step.end")]
    StepEnd,
    /// A step's `when` was false.
    #[serde(rename = "step.skip")]
    StepSkip,
    /// A tool step calls its tool.
    #[serde(rename = "tool.call")]
    ToolCall,
    /// A tool step's tool answered.
    #[serde(rename = "tool.result")]
    ToolResult,
    /// A human step waits for a person.
    #[serde(rename = "human.request")]
    HumanRequest,
    /// A person answered.
    #[serde(rename = "human.result")]
    HumanResult,
    /// The run moves from one step to the next.
    #[serde(rename = "transition")]
    Transition,
    /// The run ended.
    #[serde(rename = "loop.end")]
    LoopEnd,
    /// The run failed.
    #[serde(rename = "loop.error")]
    LoopError,
}

/// `status` of a trace event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceStatus {
    /// Begun.
    Started,
    /// Done.
    Completed,
    /// Not run.
    Skipped,
    /// Failed.
    Failed,
}

/// One `loop_trace` event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TraceEvent {
    /// `trace-N`, N counting from 1 in the run.
    pub id: String,
    /// The event type.
    #[serde(rename = "type")]
    pub kind: TraceKind,
    /// Milliseconds since the Unix epoch (the runtime's clock).
    pub ts: i64,
    /// The loop id.
    #[serde(rename = "loop")]
    pub loop_id: String,
    /// The canonical step id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_key: Option<String>,
    /// Legacy alias: `saveAs ?? tool` for tool steps, else the step id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// The tool of a tool event.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The human step of a human event.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub human: Option<String>,
    /// A transition's source step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_step_key: Option<String>,
    /// A transition's target step (or `end`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to_step_key: Option<String>,
    /// Legacy alias of `fromStepKey`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Legacy alias of `toStepKey`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// How the thing the event reports went.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<TraceStatus>,
    /// The guard that decided (skips, transitions).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    /// The error code and sentence of a failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Extra facts (projection metadata, iteration numbers, the `label` of a transition).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl TraceEvent {
    /// An event of `kind` about `step_key` (if any), other fields empty.
    pub fn new(kind: TraceKind, step_key: Option<&str>) -> Self {
        Self {
            id: String::new(),
            kind,
            ts: 0,
            loop_id: String::new(),
            step_key: step_key.map(str::to_owned),
            step: step_key.map(str::to_owned),
            tool: None,
            human: None,
            from_step_key: None,
            to_step_key: None,
            from: None,
            to: None,
            status: None,
            when: None,
            error: None,
            data: None,
        }
    }

    /// With `status`.
    pub fn status(mut self, status: TraceStatus) -> Self {
        self.status = Some(status);
        self
    }

    /// With `data`.
    pub fn data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// The event's JSON text, member for member what its `Serialize` writes (a test holds the
    /// two equal), written without serde's per-member calls: a run writes five of these a step,
    /// and escaping member names that never change was most of their cost.
    fn json_text(&self) -> String {
        let mut out = String::with_capacity(160);
        out.push_str("{\"id\":");
        push_json_str(&mut out, &self.id);
        out.push_str(",\"type\":\"");
        out.push_str(self.kind.name());
        out.push_str("\",\"ts\":");
        out.push_str(itoa::Buffer::new().format(self.ts));
        out.push_str(",\"loop\":");
        push_json_str(&mut out, &self.loop_id);
        let optional = [
            (",\"stepKey\":", &self.step_key),
            (",\"step\":", &self.step),
            (",\"tool\":", &self.tool),
            (",\"human\":", &self.human),
            (",\"fromStepKey\":", &self.from_step_key),
            (",\"toStepKey\":", &self.to_step_key),
            (",\"from\":", &self.from),
            (",\"to\":", &self.to),
        ];
        for (name, value) in optional {
            if let Some(value) = value {
                out.push_str(name);
                push_json_str(&mut out, value);
            }
        }
        if let Some(status) = self.status {
            out.push_str(",\"status\":\"");
            out.push_str(status.name());
            out.push('"');
        }
        for (name, value) in [(",\"when\":", &self.when), (",\"error\":", &self.error)] {
            if let Some(value) = value {
                out.push_str(name);
                push_json_str(&mut out, value);
            }
        }
        if let Some(data) = &self.data {
            out.push_str(",\"data\":");
            out.push_str(&serde_json::to_string(data).unwrap_or_default());
        }
        out.push('}');
        out
    }
}

impl TraceKind {
    /// The wire name (`step.start`, …), as its `Serialize` writes it.
    fn name(self) -> &'static str {
        match self {
            TraceKind::LoopStart => "loop.start",
            TraceKind::LoopResume => "loop.resume",
            TraceKind::PermissionResult => "permission.result",
            TraceKind::PolicyResult => "policy.result",
            TraceKind::ApprovalRequired => "approval.required",
            TraceKind::StepStart => "step.start",
            TraceKind::StepEnd => "step.end",
            TraceKind::StepSkip => "step.skip",
            TraceKind::ToolCall => "tool.call",
            TraceKind::ToolResult => "tool.result",
            TraceKind::HumanRequest => "human.request",
            TraceKind::HumanResult => "human.result",
            TraceKind::Transition => "transition",
            TraceKind::LoopEnd => "loop.end",
            TraceKind::LoopError => "loop.error",
        }
    }
}

impl TraceStatus {
    /// The wire name (`started`, …), as its `Serialize` writes it.
    fn name(self) -> &'static str {
        match self {
            TraceStatus::Started => "started",
            TraceStatus::Completed => "completed",
            TraceStatus::Skipped => "skipped",
            TraceStatus::Failed => "failed",
        }
    }
}

/// `s` as a JSON string literal appended to `out`: as is between quotes when nothing in it
/// needs escaping (ids, step keys, tool names: nearly always), else as serde_json escapes it.
fn push_json_str(out: &mut String, s: &str) {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push('"');
        out.push_str(s);
        out.push('"');
    } else {
        out.push_str(&json_string(s));
    }
}

/// Where a run's trace goes as it happens (a stream, the CLI, a test).
pub type TraceSink<'a> = &'a (dyn Fn(&TraceEvent) + Send + Sync);

/// Where a run's trace is announced: the runtime's live event bus, and who the run is.
pub(crate) struct Announce {
    /// The runtime's bus.
    bus: EventBus,
    /// The loop run id.
    run_id: String,
    /// The agent whose loop runs.
    agent: String,
    /// `{"loopRunId":…,"agent":…,`: what every announced event's text starts with.
    ids: String,
}

impl Announce {
    /// Announce run `run_id` of `agent`'s loop on `bus`.
    pub(crate) fn new(bus: EventBus, run_id: String, agent: String) -> Self {
        let ids = format!("{{\"loopRunId\":{},\"agent\":{},", json_string(&run_id), json_string(&agent));
        Self { bus, run_id, agent, ids }
    }

    /// `event` (`json`: its JSON text) as [`LOOP_RUN_TRACE`], then as its turning point's own
    /// name if it is one.
    fn trace(&self, event: &TraceEvent, json: &str) {
        let lost = || event.data.as_ref().and_then(|d| d.get("code")) == Some(&json!("lease_lost"));
        if event.kind == TraceKind::LoopError && lost() {
            return;
        }
        let turn = match event.kind {
            TraceKind::LoopStart => LOOP_RUN_STARTED,
            TraceKind::LoopResume => LOOP_RUN_RESUMED,
            TraceKind::HumanRequest => LOOP_RUN_AWAITING_HUMAN,
            TraceKind::LoopEnd => LOOP_RUN_COMPLETED,
            TraceKind::LoopError => LOOP_RUN_FAILED,
            _ => "",
        };
        // The event's text after the run's ids, as [`Announced`] would write it; one too long
        // for the bus (or not written) goes through it, which cuts its strings.
        let published = json.strip_prefix('{').is_some_and(|fields| {
            let mut text = String::with_capacity(self.ids.len() + fields.len());
            text.push_str(&self.ids);
            text.push_str(fields);
            self.bus.publish_json(LOOP_RUN_TRACE, text).is_ok()
        });
        if !published {
            self.bus.publish(LOOP_RUN_TRACE, Announced { event, loop_run_id: &self.run_id, agent: &self.agent });
        }
        if !turn.is_empty() {
            let mut data = self.about(&event.loop_id);
            data["traceId"] = json!(event.id);
            if let Some(step) = &event.step_key {
                data["step"] = json!(step);
            }
            if let Some(code) = event.data.as_ref().and_then(|d| d.get("code")) {
                data["code"] = code.clone();
            }
            if let Some(error) = &event.error {
                data["error"] = json!(error);
            }
            self.bus.publish(turn, data);
        }
    }

    /// `{loopRunId, loop, agent}`.
    fn about(&self, loop_id: &str) -> Value {
        json!({"loopRunId": self.run_id, "loop": loop_id, "agent": self.agent})
    }
}

/// A trace event as the bus announces it: who its run is, then the event, written straight to
/// the bus's JSON text (a step announces several; no `Value` tree is built for them). The ids
/// come first so that the bus's size bound, which cuts strings in order, cuts a long error
/// message and never the run's ids.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Announced<'a> {
    loop_run_id: &'a str,
    agent: &'a str,
    #[serde(flatten)]
    event: &'a TraceEvent,
}

/// Numbers, stamps and forwards a run's trace events (to the sink and the bus), and keeps them
/// for the answer.
pub(crate) struct Tracer<'a> {
    loop_id: String,
    next: AtomicU64,
    clock: &'a (dyn Fn() -> i64 + Send + Sync),
    sink: TraceSink<'a>,
    announce: Option<Announce>,
    kept: std::sync::Mutex<Kept>,
}

/// A run's trace events, each with its JSON text: written once when the event happens, then
/// copied to the bus and to the checkpoint delta that stores it (a step's five events are not
/// serialised again for each).
#[derive(Default)]
struct Kept {
    events: Vec<TraceEvent>,
    /// `texts[i]` is `events[i]`'s JSON text.
    texts: Vec<String>,
}

/// `s` as a JSON string literal.
fn json_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned())
}

impl<'a> Tracer<'a> {
    pub(crate) fn new(loop_id: &str, clock: &'a (dyn Fn() -> i64 + Send + Sync), sink: TraceSink<'a>) -> Self {
        let (next, kept) = (AtomicU64::new(1), Default::default());
        Self { loop_id: loop_id.to_owned(), next, clock, sink, announce: None, kept }
    }

    /// Also announce every event on the live bus, as `announce` says.
    pub(crate) fn announced(mut self, announce: Announce) -> Self {
        self.announce = Some(announce);
        self
    }

    /// Record `event`.
    pub(crate) fn emit(&self, mut event: TraceEvent) {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let mut id = String::with_capacity(12);
        id.push_str("trace-");
        id.push_str(itoa::Buffer::new().format(n));
        event.id = id;
        event.ts = (self.clock)();
        event.loop_id.clone_from(&self.loop_id);
        (self.sink)(&event);
        let json = event.json_text();
        if let Some(announce) = &self.announce {
            announce.trace(&event, &json);
        }
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        kept.events.push(event);
        kept.texts.push(json);
    }

    /// Announce that a checkpoint could not store the trace: [`LOOP_RUN_TRACE_PERSIST_FAILED`],
    /// unless `error` only says the run stopped (cancelled, taken over elsewhere).
    pub(crate) fn persist_failed(&self, error: &LoopError) {
        let Some(announce) = &self.announce else { return };
        if matches!(error, LoopError::Aborted | LoopError::Store(polpo_store::StoreError::LeaseLost { .. })) {
            return;
        }
        let mut data = announce.about(&self.loop_id);
        data["code"] = json!(error.code());
        data["error"] = json!(error.to_string());
        announce.bus.publish(LOOP_RUN_TRACE_PERSIST_FAILED, data);
    }

    /// Continue a stored run's trace: `events` are kept and numbering goes on after them.
    pub(crate) fn continue_after(&self, events: Vec<TraceEvent>) {
        self.next.store(events.len() as u64 + 1, Ordering::Relaxed);
        let texts = events.iter().map(TraceEvent::json_text).collect();
        *self.kept.lock().unwrap_or_else(|p| p.into_inner()) = Kept { events, texts };
    }

    /// The text of the JSON array of the events after the first `n`, and how many they are,
    /// for a checkpoint (its delta, its record, a trace chunk): the texts [`Tracer::emit`]
    /// wrote, joined.
    pub(crate) fn json_text_since(&self, n: usize) -> (String, usize) {
        let kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        let texts = kept.texts.get(n..).unwrap_or_default();
        let mut array = String::with_capacity(texts.iter().map(|t| t.len() + 1).sum::<usize>() + 2);
        array.push('[');
        for (i, text) in texts.iter().enumerate() {
            if i > 0 {
                array.push(',');
            }
            array.push_str(text);
        }
        array.push(']');
        (array, texts.len())
    }

    /// Every event recorded, in order.
    pub(crate) fn into_events(self) -> Vec<TraceEvent> {
        self.kept.into_inner().unwrap_or_else(|p| p.into_inner()).events
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use polpo_engine::Delivery;
    use polpo_engine::events::bus::MAX_PAYLOAD_BYTES;
    use proptest::strategy::Strategy;

    #[test]
    fn an_announced_trace_event_keeps_its_run_ids_when_its_error_is_cut() {
        let bus = EventBus::starting_at(8, 1);
        let announce = Announce::new(bus.clone(), "lr-1".into(), "coder".into());
        let mut event = TraceEvent::new(TraceKind::StepEnd, Some("fetch")).status(TraceStatus::Failed);
        event.loop_id = "flow".into();
        event.error = Some("x".repeat(MAX_PAYLOAD_BYTES * 2));
        announce.trace(&event, &event.json_text());
        let data = announced_after(&bus, 0);
        assert_eq!((data["loopRunId"].as_str(), data["agent"].as_str()), (Some("lr-1"), Some("coder")));
        assert_eq!((data["stepKey"].as_str(), data["truncated"].as_bool()), (Some("fetch"), Some(true)));
        assert!(data["error"].as_str().unwrap().len() < MAX_PAYLOAD_BYTES);
    }

    /// The payload written from the event's own text is the one the typed form would give:
    /// the run's ids first, then every field of the event, strings escaped.
    #[test]
    fn an_announced_trace_event_is_its_text_after_the_run_ids() {
        let bus = EventBus::starting_at(8, 1);
        let announce = Announce::new(bus.clone(), "lr-\"1".into(), "co\\der".into());
        let mut event = TraceEvent::new(TraceKind::ToolResult, Some("fetch")).status(TraceStatus::Completed);
        event.loop_id = "flow".into();
        event.data = Some(serde_json::json!({"effect": "recorded", "n": [1, 2]}));
        announce.trace(&event, &event.json_text());
        let typed = Announced { loop_run_id: &announce.run_id, agent: &announce.agent, event: &event };
        assert_eq!(announced_after(&bus, 0), serde_json::to_value(&typed).unwrap());
        // An event whose text could not be written is announced from the event itself.
        announce.trace(&event, "");
        assert_eq!(announced_after(&bus, 1), serde_json::to_value(&typed).unwrap());
    }

    const KINDS: [TraceKind; 15] = [
        TraceKind::LoopStart,
        TraceKind::LoopResume,
        TraceKind::PermissionResult,
        TraceKind::PolicyResult,
        TraceKind::ApprovalRequired,
        TraceKind::StepStart,
        TraceKind::StepEnd,
        TraceKind::StepSkip,
        TraceKind::ToolCall,
        TraceKind::ToolResult,
        TraceKind::HumanRequest,
        TraceKind::HumanResult,
        TraceKind::Transition,
        TraceKind::LoopEnd,
        TraceKind::LoopError,
    ];
    const STATUSES: [TraceStatus; 4] =
        [TraceStatus::Started, TraceStatus::Completed, TraceStatus::Skipped, TraceStatus::Failed];

    /// Strings as a trace meets them: plain names, and ones with quotes, backslashes, control
    /// characters and non-ASCII, which must be escaped exactly as serde_json escapes them.
    fn text() -> impl Strategy<Value = String> {
        proptest::prop_oneof![
            "[a-z0-9_.-]{0,12}",
            "\\PC{0,12}",
            proptest::collection::vec(0u8..0x80, 0..12).prop_map(|b| b.into_iter().map(char::from).collect::<String>()),
        ]
    }

    fn optional() -> impl Strategy<Value = Option<String>> {
        proptest::option::of(text())
    }

    proptest::proptest! {
        /// The hand-written text is byte for byte what the derived `Serialize` writes (member
        /// order, omitted members, names, escaping), for every kind, status and field.
        #[test]
        fn an_event_text_is_what_serde_writes(
            kind in 0..KINDS.len(), status in proptest::option::of(0..STATUSES.len()),
            id in text(), ts in proptest::num::i64::ANY, loop_id in text(),
            steps in (optional(), optional(), optional(), optional()),
            moves in (optional(), optional(), optional(), optional()),
            guards in (optional(), optional()), data in proptest::option::of(text()),
        ) {
            let mut event = TraceEvent::new(KINDS[kind], None);
            (event.id, event.ts, event.loop_id, event.status) = (id, ts, loop_id, status.map(|s| STATUSES[s]));
            (event.step_key, event.step, event.tool, event.human) = steps;
            (event.from_step_key, event.to_step_key, event.from, event.to) = moves;
            (event.when, event.error) = guards;
            event.data = data.map(|d| serde_json::json!({"label": d, "n": [1, null, 2.5], "k": {"x": true}}));
            proptest::prop_assert_eq!(event.json_text(), serde_json::to_string(&event).unwrap());
        }
    }

    /// The payload of the first event `bus` published after id `after`.
    fn announced_after(bus: &EventBus, after: u64) -> Value {
        let (backlog, _) = bus.subscribe_after(Some(after));
        let Some(Delivery::Event(e)) = backlog.first() else { panic!("announced: {backlog:?}") };
        e.payload()
    }
}
