//! Run events, typed: the names of everything the runtime reports ([`EventKind`], with the
//! reference's spelling on the journal, `run.completed`, and on the bus, `run:completed`) and
//! the entries of a durable run's journal with their payloads ([`JournalEvent`]).
//!
//! This module is the only place that spells an event name or a journal payload: the run
//! manager writes [`JournalEvent`]s, the bus publishes under [`EventKind::bus_name`], and the
//! server (chat answers, `GET /v1/runs/{id}/events`) and `polpo runs` read journal entries back
//! with [`JournalEvent::parse`] and match on variants, never on strings.

use super::sink::RunEvent;
use crate::request::{Failure, RunAnswer};
use crate::runs::spec::{RunSpec, SteerMode};
use polpo_core::message::{FinishReason, Usage};
use polpo_store::{NewRunEvent, RunEvent as StoredEvent};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Every event the runtime names, on the run journal, on the live bus, or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// A session was created (bus).
    SessionCreated,
    /// A message was stored (bus).
    MessageAdded,
    /// Model routing chose a model (bus).
    ModelRouted,
    /// The execution router chose a loop, or a direct answer, for a chat (bus).
    ExecutionRouted,
    /// A durable run was accepted, with its request (journal).
    RunAccepted,
    /// A run started executing.
    RunStarted,
    /// A durable run was taken over and resumed from its checkpoint (journal).
    RunResumed,
    /// A stopping server handed the run over to the next one (journal).
    RunReleased,
    /// An abort was asked for (journal).
    RunCancelling,
    /// The run ended cancelled (journal).
    RunCancelled,
    /// The run ended with an answer.
    RunCompleted,
    /// The run ended with an error.
    RunFailed,
    /// The run waits for a person's reconciliation (journal).
    RunPaused,
    /// A paused run's effect was reconciled (journal).
    RunReconciled,
    /// A steering message was queued (journal).
    SteeringQueued,
    /// A steering message was delivered to the model (journal).
    SteeringDelivered,
    /// A model call started (journal).
    TurnStarted,
    /// Answer text (journal).
    TextDelta,
    /// Reasoning summary text (journal).
    ReasoningDelta,
    /// A tool call being written by the model (journal).
    ToolArguments,
    /// A server tool call started.
    ToolStarted,
    /// A server tool call succeeded.
    ToolCompleted,
    /// A server tool call failed.
    ToolFailed,
    /// A model call finished, with its usage (journal).
    UsageCompleted,
    /// A runtime hook started (journal).
    HookStarted,
    /// A runtime hook finished (journal).
    HookCompleted,
    /// The termination gate changed state (journal).
    TerminationGate,
    /// A task was created (bus).
    TaskCreated,
    /// A task changed status or phase (bus).
    TaskTransition,
    /// A failed task was queued again (bus).
    TaskRetry,
    /// A failed assessment sent the task back to its agent with a fix prompt (bus).
    TaskFix,
    /// A failed task has no retry left (bus).
    TaskMaxRetries,
    /// A task ran past its `maxDuration` and was stopped (bus).
    TaskTimeout,
    /// A task whose worker died was taken over (bus).
    TaskRecovered,
    /// An assessment began (bus).
    AssessmentStarted,
    /// One check of an assessment began (bus).
    AssessmentCheckStarted,
    /// One check of an assessment finished (bus).
    AssessmentCheckComplete,
    /// An assessment finished (bus).
    AssessmentComplete,
    /// The orchestrator loop started (bus).
    OrchestratorStarted,
    /// One pass of the orchestrator loop (bus).
    OrchestratorTick,
    /// Pending tasks can never become ready (bus).
    OrchestratorDeadlock,
    /// A mission was created (bus).
    MissionSaved,
    /// A mission started (bus).
    MissionExecuted,
    /// A mission finished, completed or failed (bus).
    MissionCompleted,
    /// A paused mission went on (bus).
    MissionResumed,
    /// A mission reached a checkpoint and paused (bus).
    CheckpointReached,
    /// A mission's delay started (bus).
    DelayStarted,
    /// A mission's delay ran out and the mission went on (bus).
    DelayExpired,
    /// A mission quality gate's judged tasks reached its bar; the tasks it blocks may run (bus).
    QualityGatePassed,
    /// A mission quality gate's judged tasks missed its bar; the tasks it blocks fail (bus).
    QualityGateFailed,
    /// A mission's tasks all passed but their average score missed its quality threshold (bus).
    QualityThresholdFailed,
    /// A task's agent asked a question instead of doing the work (bus).
    TaskQuestion,
    /// The orchestrator's model answered a task's question and the agent went on (bus).
    TaskAnswered,
    /// A done or failed task was assessed again on request (bus).
    TaskReassessed,
    /// A task was deleted (bus).
    TaskRemoved,
    /// A schedule's occurrence started its invocation (bus).
    ScheduleFired,
    /// A schedule's occurrence was later than its grace and not caught up (bus).
    ScheduleMissed,
    /// A schedule's invocation could not start or ended with an error (bus).
    ScheduleFailed,
    /// A run stopped at an approval gate, or a hook asked about a tool call, and a person must
    /// decide (bus; a durable run also journals it).
    ApprovalRequested,
    /// A person approved or rejected an approval request (bus; a durable run resumed by the
    /// decision journals it).
    ApprovalResolved,
}

/// (kind, journal name, bus name): the one table of event names.
const NAMES: [(EventKind, Option<&str>, Option<&str>); 60] = [
    (EventKind::SessionCreated, None, Some("session:created")),
    (EventKind::MessageAdded, None, Some("message:added")),
    (EventKind::ModelRouted, None, Some("model:routed")),
    (EventKind::ExecutionRouted, None, Some("execution:routed")),
    (EventKind::RunAccepted, Some("run.accepted"), None),
    (EventKind::RunStarted, Some("run.started"), Some("run:started")),
    (EventKind::RunResumed, Some("run.resumed"), None),
    (EventKind::RunReleased, Some("run.released"), None),
    (EventKind::RunCancelling, Some("run.cancelling"), None),
    (EventKind::RunCancelled, Some("run.cancelled"), None),
    (EventKind::RunCompleted, Some("run.completed"), Some("run:completed")),
    (EventKind::RunFailed, Some("run.failed"), Some("run:failed")),
    (EventKind::RunPaused, Some("run.paused"), None),
    (EventKind::RunReconciled, Some("run.reconciled"), None),
    (EventKind::SteeringQueued, Some("run.steering.queued"), None),
    (EventKind::SteeringDelivered, Some("run.steering.delivered"), None),
    (EventKind::TurnStarted, Some("turn.started"), None),
    (EventKind::TextDelta, Some("output.text.delta"), None),
    (EventKind::ReasoningDelta, Some("output.reasoning.delta"), None),
    (EventKind::ToolArguments, Some("tool.arguments"), None),
    (EventKind::ToolStarted, Some("tool.started"), Some("tool:started")),
    (EventKind::ToolCompleted, Some("tool.completed"), Some("tool:completed")),
    (EventKind::ToolFailed, Some("tool.failed"), Some("tool:failed")),
    (EventKind::UsageCompleted, Some("usage.completed"), None),
    (EventKind::HookStarted, Some("hook.started"), None),
    (EventKind::HookCompleted, Some("hook.completed"), None),
    (EventKind::TerminationGate, Some("termination_gate"), None),
    (EventKind::TaskCreated, None, Some("task:created")),
    (EventKind::TaskTransition, None, Some("task:transition")),
    (EventKind::TaskRetry, None, Some("task:retry")),
    (EventKind::TaskFix, None, Some("task:fix")),
    (EventKind::TaskMaxRetries, None, Some("task:maxRetries")),
    (EventKind::TaskTimeout, None, Some("task:timeout")),
    (EventKind::TaskRecovered, None, Some("task:recovered")),
    (EventKind::AssessmentStarted, None, Some("assessment:started")),
    (EventKind::AssessmentCheckStarted, None, Some("assessment:check:started")),
    (EventKind::AssessmentCheckComplete, None, Some("assessment:check:complete")),
    (EventKind::AssessmentComplete, None, Some("assessment:complete")),
    (EventKind::OrchestratorStarted, None, Some("orchestrator:started")),
    (EventKind::OrchestratorTick, None, Some("orchestrator:tick")),
    (EventKind::OrchestratorDeadlock, None, Some("orchestrator:deadlock")),
    (EventKind::MissionSaved, None, Some("mission:saved")),
    (EventKind::MissionExecuted, None, Some("mission:executed")),
    (EventKind::MissionCompleted, None, Some("mission:completed")),
    (EventKind::MissionResumed, None, Some("mission:resumed")),
    (EventKind::CheckpointReached, None, Some("checkpoint:reached")),
    (EventKind::DelayStarted, None, Some("delay:started")),
    (EventKind::DelayExpired, None, Some("delay:expired")),
    (EventKind::QualityGatePassed, None, Some("quality:gate:passed")),
    (EventKind::QualityGateFailed, None, Some("quality:gate:failed")),
    (EventKind::QualityThresholdFailed, None, Some("quality:threshold:failed")),
    (EventKind::TaskQuestion, None, Some("task:question")),
    (EventKind::TaskAnswered, None, Some("task:answered")),
    (EventKind::TaskReassessed, None, Some("task:reassessed")),
    (EventKind::TaskRemoved, None, Some("task:removed")),
    (EventKind::ScheduleFired, None, Some("schedule:fired")),
    (EventKind::ScheduleMissed, None, Some("schedule:missed")),
    (EventKind::ScheduleFailed, None, Some("schedule:failed")),
    (EventKind::ApprovalRequested, Some("approval.requested"), Some("approval:requested")),
    (EventKind::ApprovalResolved, Some("approval.resolved"), Some("approval:resolved")),
];

impl EventKind {
    fn names(self) -> (Option<&'static str>, Option<&'static str>) {
        NAMES.iter().find(|(k, ..)| *k == self).map_or((None, None), |(_, journal, bus)| (*journal, *bus))
    }

    /// The name on the run journal (`run.completed`); `None` for bus-only events.
    pub fn journal_name(self) -> Option<&'static str> {
        self.names().0
    }

    /// The name on the live bus (`run:completed`); `None` for journal-only events.
    pub fn bus_name(self) -> Option<&'static str> {
        self.names().1
    }

    /// The kind of a journal entry named `name`; `None` for a name this runtime does not write.
    pub fn from_journal_name(name: &str) -> Option<Self> {
        NAMES.iter().find(|(_, journal, _)| *journal == Some(name)).map(|(k, ..)| *k)
    }

    /// True for an event after which a run produces nothing more, so its stream ends there.
    /// `run.paused` is not one: a paused run waits for a person's decision and goes on after
    /// `POST /v1/runs/{id}/reconcile`, so its followers stay attached.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::RunCompleted | Self::RunFailed | Self::RunCancelled)
    }
}

/// What `run.accepted` carries: the request, so a run that crashes before its first
/// checkpoint can still be resumed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Accepted {
    /// The agent (also in `spec`).
    #[serde(default)]
    pub agent: String,
    /// The session the turn is stored in (also in `spec`).
    #[serde(default)]
    pub session_id: String,
    /// The request in its durable form.
    pub spec: RunSpec,
}

/// Which process executes the run (`run.started`, `run.resumed`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    /// The lease owner id of the executing process.
    pub owner: String,
}

/// A run given back by a stopping server (`run.released`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Released {
    /// The lease owner that released it.
    pub owner: String,
    /// Why (`shutdown`).
    pub reason: String,
}

/// Why a run is being, or was, cancelled (`run.cancelling`, `run.cancelled`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reason {
    /// The caller's reason, when it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Why a run waits for a person (`run.paused`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Paused {
    /// Stable code (`effect_unconfirmed` …).
    pub code: String,
    /// What to decide, e.g. `{key, tool}` of the unconfirmed effect.
    pub detail: Value,
}

/// A tool call a hook asked about and the request a person decides (`approval.requested`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalAsked {
    /// The approval request.
    pub approval_id: String,
    /// The call it holds up.
    pub call_id: String,
    /// Its tool.
    pub tool: String,
    /// `pack/id` of the hook that asked.
    pub hook: String,
    /// The hook's reason.
    pub message: String,
}

/// A decision that resumed a run paused for approval (`approval.resolved`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalDecided {
    /// The approval request.
    pub approval_id: String,
    /// `approved` or `rejected`.
    pub status: String,
    /// The reviewer.
    pub resolved_by: String,
}

/// How a paused run's effect was settled (`run.reconciled`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reconciled {
    /// The effect key.
    pub key: String,
    /// `applied`, `not_applied` (the call runs again) or `skip`.
    pub outcome: String,
}

/// A steering message's progress (`run.steering.queued`, `run.steering.delivered`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Steering {
    /// The message's idempotency key.
    pub id: String,
    /// Steer or follow up.
    pub mode: SteerMode,
}

/// A model call's number within the run (`turn.started`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Turn {
    /// 1-based turn number.
    pub turn: u32,
}

/// Streamed text (`output.text.delta`, `output.reasoning.delta`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Text {
    /// The text.
    pub text: String,
}

/// A tool call being written (`tool.arguments`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolArguments {
    /// Call id.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Arguments text so far.
    pub arguments_text: String,
}

/// A server tool call about to run (`tool.started`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolStarted {
    /// Call id.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Parsed arguments (or the raw text when they did not parse).
    pub arguments: Value,
}

/// A server tool call's model-visible result (`tool.completed`, `tool.failed`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolResult {
    /// Call id.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Model-visible result.
    pub result: String,
    /// True when the call failed.
    pub is_error: bool,
}

/// A model call's usage (`usage.completed`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageCompleted {
    /// Turn number.
    pub turn: u32,
    /// Tokens this call used.
    pub usage: Usage,
    /// Why the model stopped.
    pub finish_reason: FinishReason,
}

/// Declares [`JournalEvent`]: one variant per journal kind with its payload type, and the
/// two conversions between a variant and its stored `(type, data)`.
macro_rules! journal_events {
    ($($(#[$doc:meta])* $variant:ident($payload:ty) = $kind:ident,)*) => {
        /// One entry of a durable run's journal, with its payload.
        #[derive(Debug, Clone, PartialEq)]
        pub enum JournalEvent {
            $($(#[$doc])* $variant($payload),)*
        }

        impl JournalEvent {
            /// Which event this is.
            pub fn kind(&self) -> EventKind {
                match self {
                    $(Self::$variant(_) => EventKind::$kind,)*
                }
            }

            /// The payload as stored (`data`).
            pub fn data(&self) -> Value {
                match self {
                    $(Self::$variant(payload) => serde_json::to_value(payload).unwrap_or_default(),)*
                }
            }

            /// The entry of `kind` with stored payload `data`; `None` when `kind` is not a
            /// journal kind or the payload does not have its shape.
            fn from_data(kind: EventKind, data: &Value) -> Option<Self> {
                match kind {
                    $(EventKind::$kind => payload(data).map(Self::$variant),)*
                    _ => None,
                }
            }
        }
    };
}

fn payload<T: DeserializeOwned>(data: &Value) -> Option<T> {
    T::deserialize(data).ok()
}

journal_events! {
    /// `run.accepted` (boxed: the request is far larger than any other entry).
    Accepted(Box<Accepted>) = RunAccepted,
    /// `run.started`.
    Started(Owner) = RunStarted,
    /// `run.resumed`.
    Resumed(Owner) = RunResumed,
    /// `run.released`.
    Released(Released) = RunReleased,
    /// `run.cancelling`.
    Cancelling(Reason) = RunCancelling,
    /// `run.cancelled`.
    Cancelled(Reason) = RunCancelled,
    /// `run.completed`.
    Completed(RunAnswer) = RunCompleted,
    /// `run.failed`.
    Failed(Failure) = RunFailed,
    /// `run.paused`.
    Paused(Paused) = RunPaused,
    /// `run.reconciled`.
    Reconciled(Reconciled) = RunReconciled,
    /// `approval.requested`: a hook asked about a tool call.
    ApprovalRequested(ApprovalAsked) = ApprovalRequested,
    /// `approval.resolved`: the decision that resumed the paused run.
    ApprovalResolved(ApprovalDecided) = ApprovalResolved,
    /// `run.steering.queued`.
    SteeringQueued(Steering) = SteeringQueued,
    /// `run.steering.delivered`.
    SteeringDelivered(Steering) = SteeringDelivered,
    /// `turn.started`.
    TurnStarted(Turn) = TurnStarted,
    /// `output.text.delta`.
    TextDelta(Text) = TextDelta,
    /// `output.reasoning.delta`.
    ReasoningDelta(Text) = ReasoningDelta,
    /// `tool.arguments`.
    ToolArguments(ToolArguments) = ToolArguments,
    /// `tool.started`.
    ToolStarted(ToolStarted) = ToolStarted,
    /// `tool.completed`.
    ToolCompleted(ToolResult) = ToolCompleted,
    /// `tool.failed`.
    ToolFailed(ToolResult) = ToolFailed,
    /// `usage.completed`.
    UsageCompleted(UsageCompleted) = UsageCompleted,
    /// `hook.started`: the runtime event as traced.
    HookStarted(Value) = HookStarted,
    /// `hook.completed`: the runtime event as traced.
    HookCompleted(Value) = HookCompleted,
    /// `termination_gate`: the runtime event as traced.
    TerminationGate(Value) = TerminationGate,
}

impl JournalEvent {
    /// The entry named `name` with payload `data`, as a stored event or a `RunStreamEvent`
    /// frame carries them; `None` for a name this runtime does not write or a payload that
    /// does not have its kind's shape.
    pub fn parse(name: &str, data: &Value) -> Option<Self> {
        Self::from_data(EventKind::from_journal_name(name)?, data)
    }

    /// A stored journal entry, typed.
    pub fn from_stored(event: &StoredEvent) -> Option<Self> {
        Self::parse(&event.event_type, &event.data)
    }

    /// A `RunStreamEvent` frame (`{type, data, sequence …}`, see [`stream_frame`]), typed.
    pub fn from_frame(frame: &Value) -> Option<Self> {
        Self::parse(frame.get("type")?.as_str()?, frame.get("data")?)
    }

    /// The entry as the store appends it.
    pub fn to_stored(&self) -> NewRunEvent {
        NewRunEvent::new(self.kind().journal_name().unwrap_or_default(), self.data())
    }

    /// True when the run produces nothing after this entry ([`EventKind::is_terminal`]).
    pub fn is_terminal(&self) -> bool {
        self.kind().is_terminal()
    }

    /// The journal entry for a runtime event (the reference's run stream types where it has
    /// one); `None` for what the checkpoint keeps instead (whole messages).
    pub fn from_run_event(event: &RunEvent) -> Option<Self> {
        Some(match event {
            RunEvent::TurnStarted { turn } => Self::TurnStarted(Turn { turn: *turn }),
            RunEvent::TextDelta { text } => Self::TextDelta(Text { text: text.clone() }),
            RunEvent::ReasoningDelta { text } => Self::ReasoningDelta(Text { text: text.clone() }),
            RunEvent::ToolPreparing { id, name, arguments_text } => Self::ToolArguments(ToolArguments {
                id: id.clone(),
                name: name.clone(),
                arguments_text: arguments_text.clone(),
            }),
            RunEvent::ToolCalling { id, name, arguments } => {
                Self::ToolStarted(ToolStarted { id: id.clone(), name: name.clone(), arguments: arguments.clone() })
            }
            RunEvent::ToolCompleted { id, name, result, is_error } => {
                let result =
                    ToolResult { id: id.clone(), name: name.clone(), result: result.clone(), is_error: *is_error };
                if *is_error { Self::ToolFailed(result) } else { Self::ToolCompleted(result) }
            }
            RunEvent::TurnCompleted { turn, usage, finish_reason } => Self::UsageCompleted(UsageCompleted {
                turn: *turn,
                usage: *usage,
                finish_reason: finish_reason.clone(),
            }),
            RunEvent::MessageAppended { .. } => return None,
            RunEvent::HookStarted { .. } => Self::HookStarted(serde_json::to_value(event).unwrap_or_default()),
            RunEvent::HookCompleted { .. } => Self::HookCompleted(serde_json::to_value(event).unwrap_or_default()),
            RunEvent::TerminationGate { .. } => Self::TerminationGate(serde_json::to_value(event).unwrap_or_default()),
            RunEvent::ApprovalRequested { approval_id, call_id, tool, hook, message } => {
                Self::ApprovalRequested(ApprovalAsked {
                    approval_id: approval_id.clone(),
                    call_id: call_id.clone(),
                    tool: tool.clone(),
                    hook: hook.clone(),
                    message: message.clone(),
                })
            }
        })
    }

    /// The runtime event this entry stands for, for clients that render the journal as a chat
    /// stream (the inverse of [`JournalEvent::from_run_event`] for the streamed kinds).
    pub fn stream_event(&self) -> Option<RunEvent> {
        Some(match self {
            Self::TextDelta(t) => RunEvent::TextDelta { text: t.text.clone() },
            Self::ReasoningDelta(t) => RunEvent::ReasoningDelta { text: t.text.clone() },
            Self::ToolArguments(t) => RunEvent::ToolPreparing {
                id: t.id.clone(),
                name: t.name.clone(),
                arguments_text: t.arguments_text.clone(),
            },
            Self::ToolStarted(t) => {
                RunEvent::ToolCalling { id: t.id.clone(), name: t.name.clone(), arguments: t.arguments.clone() }
            }
            Self::ToolCompleted(t) | Self::ToolFailed(t) => RunEvent::ToolCompleted {
                id: t.id.clone(),
                name: t.name.clone(),
                result: t.result.clone(),
                is_error: t.is_error,
            },
            Self::UsageCompleted(u) => {
                RunEvent::TurnCompleted { turn: u.turn, usage: u.usage, finish_reason: u.finish_reason.clone() }
            }
            Self::ApprovalRequested(a) => RunEvent::ApprovalRequested {
                approval_id: a.approval_id.clone(),
                call_id: a.call_id.clone(),
                tool: a.tool.clone(),
                hook: a.hook.clone(),
                message: a.message.clone(),
            },
            _ => return None,
        })
    }
}

/// The SSE `event:` name of every run stream frame.
pub const FRAME_EVENT: &str = "run.event";

/// The run stream frame of the reference (`RunStreamEvent`): the stored event plus its id and
/// schema version.
pub fn stream_frame(event: &StoredEvent) -> Value {
    json!({
        "id": format!("{}:{}", event.run_id, event.seq),
        "runId": event.run_id,
        "sequence": event.seq,
        "schemaVersion": 1,
        "type": event.event_type,
        "data": event.data,
        "createdAt": event.created_at,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn every_kind_has_a_name_and_names_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for (kind, journal, bus) in NAMES {
            assert!(journal.is_some() || bus.is_some(), "{kind:?} has no name");
            assert_eq!(kind.journal_name(), journal);
            assert_eq!(kind.bus_name(), bus);
            for name in [journal, bus].into_iter().flatten() {
                assert!(seen.insert(name), "{name} is used twice");
            }
            if let Some(journal) = journal {
                assert_eq!(EventKind::from_journal_name(journal), Some(kind));
            }
        }
        assert_eq!(EventKind::from_journal_name("session:created"), None, "bus names are not journal names");
    }

    #[test]
    fn entries_round_trip_through_their_stored_form() {
        let answer = RunAnswer {
            content: Some("done".into()),
            finish_reason: FinishReason::Stop,
            tool_calls: Vec::new(),
            usage: Usage::default(),
            turns: 2,
            session_id: "s1".into(),
            suggestions: Vec::new(),
        };
        let entries = [
            JournalEvent::Completed(answer),
            JournalEvent::Failed(Failure { code: "max_turns_exhausted".into(), message: "…".into() }),
            JournalEvent::Cancelled(Reason::default()),
            JournalEvent::ToolFailed(ToolResult {
                id: "c1".into(),
                name: "read".into(),
                result: "Error: x".into(),
                is_error: true,
            }),
            JournalEvent::Released(Released { owner: "polpo-1".into(), reason: "shutdown".into() }),
        ];
        for entry in entries {
            let stored = entry.to_stored();
            assert_eq!(
                JournalEvent::parse(&stored.event_type, &stored.data).as_ref(),
                Some(&entry),
                "{}",
                stored.event_type
            );
        }
    }

    #[test]
    fn the_wire_names_and_payloads_are_the_references() {
        let stored = JournalEvent::Failed(Failure { code: "aborted".into(), message: "m".into() }).to_stored();
        assert_eq!(
            (stored.event_type.as_str(), stored.data),
            ("run.failed", json!({"code": "aborted", "message": "m"}))
        );
        let stored = JournalEvent::from_run_event(&RunEvent::ToolPreparing {
            id: "c".into(),
            name: "n".into(),
            arguments_text: "{".into(),
        })
        .unwrap()
        .to_stored();
        assert_eq!(
            (stored.event_type.as_str(), stored.data),
            ("tool.arguments", json!({"id": "c", "name": "n", "argumentsText": "{"}))
        );
        assert!(
            JournalEvent::Completed(RunAnswer {
                content: None,
                finish_reason: FinishReason::ToolCalls,
                tool_calls: Vec::new(),
                usage: Usage::default(),
                turns: 1,
                session_id: String::new(),
                suggestions: Vec::new(),
            })
            .is_terminal()
        );
        assert!(!JournalEvent::Paused(Paused { code: "effect_unconfirmed".into(), detail: json!({}) }).is_terminal());
        assert_eq!(
            JournalEvent::parse("run.completed", &json!({"content": 3})),
            None,
            "a payload of the wrong shape is not an entry"
        );
    }
}
