//! `loop_trace` events (inventory §6.5): what a loop run did, in order. `stepKey` is the
//! canonical step id; `step` stays the legacy alias (`saveAs ?? tool` for tool steps, else the
//! id); transitions carry `fromStepKey`/`toStepKey`. Projection traces carry binding paths,
//! size, validation status and a hash — never the values.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::atomic::{AtomicU64, Ordering};

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
}

/// Where a run's trace goes as it happens (a stream, the CLI, a test).
pub type TraceSink<'a> = &'a (dyn Fn(&TraceEvent) + Send + Sync);

/// Numbers, stamps and forwards a run's trace events, and keeps them for the answer.
pub(crate) struct Tracer<'a> {
    loop_id: String,
    next: AtomicU64,
    clock: &'a (dyn Fn() -> i64 + Send + Sync),
    sink: TraceSink<'a>,
    kept: std::sync::Mutex<Vec<TraceEvent>>,
}

impl<'a> Tracer<'a> {
    pub(crate) fn new(loop_id: &str, clock: &'a (dyn Fn() -> i64 + Send + Sync), sink: TraceSink<'a>) -> Self {
        Self { loop_id: loop_id.to_owned(), next: AtomicU64::new(1), clock, sink, kept: Default::default() }
    }

    /// Record `event`.
    pub(crate) fn emit(&self, mut event: TraceEvent) {
        event.id = format!("trace-{}", self.next.fetch_add(1, Ordering::Relaxed));
        event.ts = (self.clock)();
        event.loop_id.clone_from(&self.loop_id);
        (self.sink)(&event);
        self.kept.lock().unwrap_or_else(|p| p.into_inner()).push(event);
    }

    /// Continue a stored run's trace: `events` are kept and numbering goes on after them.
    pub(crate) fn continue_after(&self, events: Vec<TraceEvent>) {
        self.next.store(events.len() as u64 + 1, Ordering::Relaxed);
        *self.kept.lock().unwrap_or_else(|p| p.into_inner()) = events;
    }

    /// The events after the first `n`, for a checkpoint.
    pub(crate) fn since(&self, n: usize) -> Vec<TraceEvent> {
        self.kept.lock().unwrap_or_else(|p| p.into_inner()).get(n..).map(<[_]>::to_vec).unwrap_or_default()
    }

    /// Every event recorded, in order.
    pub(crate) fn into_events(self) -> Vec<TraceEvent> {
        self.kept.into_inner().unwrap_or_else(|p| p.into_inner())
    }
}
