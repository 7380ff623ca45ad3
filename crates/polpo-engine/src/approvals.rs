//! Approval requests: the one store record (collection [`APPROVALS`]) for everything a person
//! approves before Polpo goes on — a Project Loop's approval gate, or a tool call a runtime
//! hook answered `ask` about — and what a hook's `ask` does to the call.
//!
//! Both kinds share the reviewer's part (status, reviewer, note, timeout) and say which they
//! are in `type` (`loop`, `tool_call`), so one listing, one pair of approve/reject routes and
//! one timeout enforcer serve both. The record lives here, below the loop executor, because
//! the engine writes tool-call requests itself; loop records written before `type` existed
//! read back as `loop` ([`ApprovalRecord::from_stored`]).
//!
//! A tool call's request is keyed by where the call is, so the same call finds its decision
//! again: in a durable run by (run, model turn, call position, input), and in inline chat by
//! (the request's `Idempotency-Key` binding, turn, tool, input). In a durable run an `ask`
//! pauses the run (`awaiting_approval`) until a reviewer decides; the resumed run re-executes
//! the call through every gate again, and the decision then lets it run or refuses it. Inline
//! chat cannot wait: the request fails `approval_required` with the request's id, and the same
//! request retried with the same `Idempotency-Key` after an approval runs the call — once.

use crate::error::EngineError;
use crate::events::bus::EventBus;
use crate::events::journal::EventKind;
use crate::events::{EventSink, RunEvent};
use chrono::{DateTime, Utc};
use polpo_core::hooks::AskTimeout;
use polpo_core::loops::config::TimeoutAction;
use polpo_core::loops::governance::Gate;
use polpo_store::{Clock, Record, RecordStore, StoreError};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use tokio::sync::Notify;

/// The store collection approval requests are kept in.
pub const APPROVALS: &str = "approvals";

/// The pause code of a durable run waiting for an approval (`run.paused`, the run's error).
pub const AWAITING_APPROVAL: &str = "awaiting_approval";

/// Where an approval request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    /// Waiting for a reviewer.
    Pending,
    /// Approved: the run may go past the gate, the call may run.
    Approved,
    /// Rejected: the loop run ended `approval_rejected`; the call is refused.
    Rejected,
}

/// An approval request: what waits, and what the reviewer saw and decided.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRecord {
    /// `approval-<id>`.
    pub id: String,
    /// The API client the run belongs to (`None`: local mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Where it is.
    pub status: ApprovalStatus,
    /// Why it was asked (the rule's or the hook's message).
    pub message: String,
    /// The reviewer (the key id, or `local`, or `timeout`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_by: Option<String>,
    /// The reviewer's note (a rejection's feedback).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The timeout, as written (`PT30M`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// When the server decides `timeout_action` if nobody has answered (store clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<DateTime<Utc>>,
    /// What the server decides then (`reject` by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_action: Option<TimeoutAction>,
    /// What waits: a loop gate or a tool call (`type`).
    #[serde(flatten)]
    pub subject: ApprovalSubject,
}

/// What an approval request holds up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ApprovalSubject {
    /// A Project Loop run stopped at an approval gate.
    Loop(LoopGateRequest),
    /// A tool call a runtime hook answered `ask` about.
    ToolCall(ToolCallRequest),
}

/// A loop run stopped at a gate: which run, which rule, and its context then.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoopGateRequest {
    /// The loop run stopped at the gate.
    pub loop_run_id: String,
    /// Its loop.
    #[serde(rename = "loop")]
    pub loop_id: String,
    /// Its agent.
    pub agent: String,
    /// The rule and the point that asked.
    pub gate: Gate,
    /// The run's context at its last checkpoint.
    pub context: Value,
}

/// A tool call waiting for a person: the proposed call as the reviewer sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallRequest {
    /// The agent that proposed it.
    pub agent: String,
    /// The run it belongs to (for inline chat, the attempt that asked).
    pub run_id: String,
    /// Its session.
    pub session_id: String,
    /// True for a durable run, which waits paused; false for inline chat, whose client retries.
    pub durable: bool,
    /// The tool.
    pub tool: String,
    /// The input it would run with (after the hooks' changes), secrets redacted.
    pub arguments: Value,
    /// `pack/id` of the hook that asked.
    pub hook: String,
    /// When an approved inline request was used by its retry (once only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumed_at: Option<DateTime<Utc>>,
}

/// An approval request with its store revision and times.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredApproval {
    /// The request.
    #[serde(flatten)]
    pub approval: ApprovalRecord,
    /// Bumped by every write.
    pub revision: u64,
    /// When it was requested.
    pub requested_at: DateTime<Utc>,
    /// When it was last written (resolved).
    pub updated_at: DateTime<Utc>,
}

impl ApprovalRecord {
    /// A stored request. A loop request written before requests had a `type` reads as `loop`.
    pub fn from_stored(mut value: Value) -> Result<Self, serde_json::Error> {
        if let Value::Object(map) = &mut value {
            map.entry("type").or_insert_with(|| Value::String("loop".into()));
        }
        serde_json::from_value(value)
    }

    /// The loop run it holds up, for a loop gate's request.
    pub fn loop_gate(&self) -> Option<&LoopGateRequest> {
        match &self.subject {
            ApprovalSubject::Loop(gate) => Some(gate),
            ApprovalSubject::ToolCall(_) => None,
        }
    }

    /// The call it holds up, for a tool call's request.
    pub fn tool_call(&self) -> Option<&ToolCallRequest> {
        match &self.subject {
            ApprovalSubject::ToolCall(call) => Some(call),
            ApprovalSubject::Loop(_) => None,
        }
    }

    /// Tell the live bus (`/api/v1/events`) that this request was raised
    /// (`approval:requested`) or decided (`approval:resolved`), so a dashboard or a reviewer's
    /// client learns of it without polling. A loop run's context stays out: it may hold secrets.
    pub fn announce(&self, events: &EventBus, kind: EventKind) {
        let Some(name) = kind.bus_name() else { return };
        let mut data = json!({
            "approvalId": self.id,
            "status": self.status,
            "message": self.message,
            "resolvedBy": self.resolved_by,
        });
        let more = match &self.subject {
            ApprovalSubject::Loop(l) => json!({
                "type": "loop",
                "loopRunId": l.loop_run_id,
                "loop": l.loop_id,
                "agent": l.agent,
                "gate": l.gate,
            }),
            ApprovalSubject::ToolCall(c) => json!({
                "type": "tool_call",
                "runId": c.run_id,
                "sessionId": c.session_id,
                "agent": c.agent,
                "tool": c.tool,
                "arguments": c.arguments,
                "hook": c.hook,
            }),
        };
        if let (Value::Object(data), Value::Object(more)) = (&mut data, more) {
            data.extend(more);
        }
        events.publish(name, data);
    }
}

impl StoredApproval {
    /// A store record as a request.
    pub fn parse(stored: Record) -> Result<Self, serde_json::Error> {
        Ok(Self {
            approval: ApprovalRecord::from_stored(stored.value)?,
            revision: stored.revision,
            requested_at: stored.created_at,
            updated_at: stored.updated_at,
        })
    }
}

/// A durable run that can stop and wait for a decision: where its current call is, and how it
/// pauses (implemented by the run manager's live run state).
pub(crate) trait Pausable: Send + Sync {
    /// (model turn, position in the turn) of the call running now.
    fn call_position(&self) -> Option<(usize, usize)>;
    /// Stop the run as waiting for approval `approval_id` (the run is cancelled; its
    /// checkpoint keeps the call, which runs again when the run resumes).
    fn pause_for_approval(&self, detail: Value);
}

/// How this invocation waits for a decision.
#[derive(Clone)]
pub(crate) enum Waiting {
    /// A durable run: it pauses.
    Durable(Arc<dyn Pausable>),
    /// Inline chat bound to a request the client can retry (its `Idempotency-Key`).
    Inline(String),
    /// Inline chat with nothing to bind an approval to.
    Unbound,
}

/// Where a hook's `ask` goes for one invocation: the store, the bus, the run's identity.
#[derive(Clone)]
pub struct ApprovalDesk {
    pub(crate) store: Arc<dyn RecordStore>,
    pub(crate) events: EventBus,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) agent: String,
    pub(crate) run_id: String,
    pub(crate) session_id: String,
    pub(crate) owner: Option<String>,
    pub(crate) waiting: Waiting,
    /// Woken when a request with a deadline is stored, so the timeout enforcer looks again.
    pub(crate) deadlines: Arc<Notify>,
}

impl std::fmt::Debug for ApprovalDesk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApprovalDesk").field("run_id", &self.run_id).finish_non_exhaustive()
    }
}

/// What a hook's `ask` on one call came to.
pub(crate) enum Asked {
    /// A reviewer approved this very call: run it (after the schema check).
    Run,
    /// Do not run it; the model sees this error.
    Refuse(String),
}

/// The proposed call a hook asked about.
pub(crate) struct Proposal<'a> {
    /// The call's id in the model's message.
    pub call_id: &'a str,
    /// The tool.
    pub tool: &'a str,
    /// The input after the hooks' changes (not redacted).
    pub input: &'a Value,
    /// The redacted input, for the record.
    pub shown: Value,
    /// `pack/id`.
    pub hook: &'a str,
    /// The hook's reason.
    pub reason: &'a str,
    /// What the server decides if nobody answers in time (`None`: the request waits).
    pub timeout: Option<AskTimeout>,
    /// The model turn.
    pub turn: u32,
}

fn digest(parts: &[&str]) -> String {
    let mut hash = Sha256::new();
    for part in parts {
        hash.update(part.as_bytes());
        hash.update([0]);
    }
    hex::encode(&hash.finalize()[..16])
}

/// A store failure while asking: the call is refused (fail closed) and the run goes on.
fn unavailable(tool: &str, e: impl std::fmt::Display) -> Asked {
    Asked::Refuse(format!(
        "approval_unavailable: approval requests cannot be read or written ({e}), so `{tool}` did not run"
    ))
}

impl ApprovalDesk {
    /// Decide what a hook's `ask` on `call` means here; `Err` ends the turn: a durable run
    /// paused (`aborted`, the run manager records the pause) or an inline request that must be
    /// approved first (`approval_required`).
    pub(crate) async fn ask(&self, call: Proposal<'_>, sink: EventSink<'_>) -> Result<Asked, EngineError> {
        let input = call.input.to_string();
        let id = match &self.waiting {
            Waiting::Durable(run) => {
                let (turn, position) = run.call_position().unwrap_or((call.turn as usize, 0));
                let at = format!("{turn}/{position}");
                format!("approval-{}", digest(&["run", &self.run_id, &at, call.tool, &input]))
            }
            Waiting::Inline(binding) => {
                format!("approval-{}", digest(&["request", binding, &call.turn.to_string(), call.tool, &input]))
            }
            Waiting::Unbound => {
                return Err(EngineError::ApprovalRequired(format!(
                    "{} (hook {}): `{}` needs a person's approval; send the request with an Idempotency-Key (or as a durable run) so it can be approved and retried",
                    call.reason, call.hook, call.tool
                )));
            }
        };
        let stored = match self.store.get_record(APPROVALS, &id).await {
            Ok(Some(record)) => StoredApproval::parse(record).map_err(|e| e.to_string()),
            Ok(None) => self.request(&id, &call).await,
            Err(e) => Err(e.to_string()),
        };
        let stored = match stored {
            Ok(stored) => stored,
            Err(e) => return Ok(unavailable(call.tool, e)),
        };
        let approval = &stored.approval;
        let note = approval.note.as_deref().map(|n| format!(": {n}")).unwrap_or_default();
        let reviewer = approval.resolved_by.as_deref().unwrap_or("a reviewer");
        match approval.status {
            ApprovalStatus::Rejected => Ok(Asked::Refuse(format!(
                "approval_rejected: {reviewer} rejected the call to `{}` (approval {id}){note}",
                call.tool
            ))),
            ApprovalStatus::Approved => match &self.waiting {
                Waiting::Inline(_) => Ok(self.consume(stored).await),
                _ => Ok(Asked::Run),
            },
            ApprovalStatus::Pending => {
                // The caller learns which request to approve (a durable run's journal keeps it).
                sink(RunEvent::ApprovalRequested {
                    approval_id: id.clone(),
                    call_id: call.call_id.to_owned(),
                    tool: call.tool.to_owned(),
                    hook: call.hook.to_owned(),
                    message: call.reason.to_owned(),
                });
                self.wait(&id, &call)
            }
        }
    }

    /// Wait for pending request `id`: pause the durable run, or fail the inline request.
    fn wait(&self, id: &str, call: &Proposal<'_>) -> Result<Asked, EngineError> {
        match &self.waiting {
            Waiting::Durable(run) => {
                run.pause_for_approval(json!({"approvalId": id, "tool": call.tool, "hook": call.hook}));
                Err(EngineError::Aborted)
            }
            _ => Err(EngineError::ApprovalRequired(format!(
                "{} (hook {}): `{}` waits for approval {id}; approve it (POST /api/v1/approvals/{id}/approve), then retry the request with the same Idempotency-Key",
                call.reason, call.hook, call.tool
            ))),
        }
    }

    /// Store a new pending request for `call` under `id` and announce it; a request another
    /// attempt stored first stands. With the hook's timeout, its deadline is on the record (the
    /// store's clock) and the timeout enforcer is woken. `Err`: why the store could not say.
    async fn request(&self, id: &str, call: &Proposal<'_>) -> Result<StoredApproval, String> {
        let deadline = match call.timeout {
            Some(t) => {
                let after = chrono::Duration::from_std(t.after).map_err(|e| e.to_string())?;
                Some(self.clock.now() + after)
            }
            None => None,
        };
        let record = ApprovalRecord {
            id: id.to_owned(),
            owner: self.owner.clone(),
            status: ApprovalStatus::Pending,
            message: call.reason.to_owned(),
            resolved_by: None,
            note: None,
            timeout: call.timeout.map(|t| polpo_core::tasks::format_duration(t.after)),
            deadline,
            timeout_action: call.timeout.map(|t| t.action),
            subject: ApprovalSubject::ToolCall(ToolCallRequest {
                agent: self.agent.clone(),
                run_id: self.run_id.clone(),
                session_id: self.session_id.clone(),
                durable: matches!(self.waiting, Waiting::Durable(_)),
                tool: call.tool.to_owned(),
                arguments: call.shown.clone(),
                hook: call.hook.to_owned(),
                consumed_at: None,
            }),
        };
        let value = serde_json::to_value(&record).map_err(|e| e.to_string())?;
        let written = match self.store.put_record(APPROVALS, id, value, Some(0)).await {
            Ok(written) => written,
            Err(StoreError::Conflict(_)) => {
                let again = self.store.get_record(APPROVALS, id).await.map_err(|e| e.to_string())?;
                let again = again.ok_or_else(|| format!("approval {id} vanished while it was asked for"))?;
                return StoredApproval::parse(again).map_err(|e| e.to_string());
            }
            Err(e) => return Err(e.to_string()),
        };
        record.announce(&self.events, EventKind::ApprovalRequested);
        if deadline.is_some() {
            self.deadlines.notify_one();
        }
        Ok(StoredApproval {
            approval: record,
            revision: written.revision,
            requested_at: written.created_at,
            updated_at: written.updated_at,
        })
    }

    /// Use an approved inline request: once, by compare-and-set, so two retries racing run the
    /// call at most once.
    async fn consume(&self, mut stored: StoredApproval) -> Asked {
        let id = stored.approval.id.clone();
        let ApprovalSubject::ToolCall(call) = &mut stored.approval.subject else {
            return Asked::Refuse(format!("approval_consumed: approval {id} is not a tool call's"));
        };
        if call.consumed_at.is_some() {
            return Asked::Refuse(format!(
                "approval_consumed: approval {id} was already used by an earlier attempt of this request; the call did not run again"
            ));
        }
        call.consumed_at = Some(self.clock.now());
        let tool = call.tool.clone();
        let value = match serde_json::to_value(&stored.approval) {
            Ok(value) => value,
            Err(e) => return unavailable(&tool, e),
        };
        match self.store.put_record(APPROVALS, &id, value, Some(stored.revision)).await {
            Ok(_) => Asked::Run,
            Err(StoreError::Conflict(_)) => Asked::Refuse(format!(
                "approval_consumed: approval {id} was used by another attempt of this request at the same time"
            )),
            Err(e) => unavailable(&tool, e),
        }
    }
}
