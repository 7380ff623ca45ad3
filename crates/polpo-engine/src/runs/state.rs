//! What a durable run keeps in its checkpoint, and the steering inbox the turn loop reads.
//!
//! A checkpoint holds only what this run added — the request's new messages, the messages
//! produced since (assistant turns, tool results, delivered steering) and the steering not
//! yet delivered — never the session history, which the session store already has. So it
//! grows with the run's new content only.

use super::journal::Journal;
use crate::runtime::ChatInput;
use crate::structured::ResponseFormat;
use crate::hooks::GateCheckpoint;
use crate::turn::{CheckpointError, RunControl};
use futures::future::BoxFuture;
use polpo_core::message::{Message, Role};
use polpo_core::tool::ToolSpec;
use polpo_llm::ToolChoice;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// How a steering message is delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SteerMode {
    /// Before the next model call, at a safe boundary.
    Steer,
    /// When the run would otherwise finish; starts another turn.
    FollowUp,
}

/// A message sent to a running run. `id` is an idempotency key: a repeated id is ignored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SteerMessage {
    /// Caller-chosen id (idempotency key).
    pub id: String,
    /// Steer or follow up.
    pub mode: SteerMode,
    /// The user message to add (text and attachments).
    pub message: Message,
}

/// The request a run answers, in a form that survives a restart.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunSpec {
    /// The agent.
    pub agent: String,
    /// The session the turn is stored in.
    pub session_id: String,
    /// The request's new messages (what follows the stored history).
    pub messages: Vec<Message>,
    /// Request-scoped client tools.
    #[serde(default)]
    pub client_tools: Vec<ToolSpec>,
    /// Tool choice: `auto`, `none`, `required` or `{"tool": name}`.
    #[serde(default)]
    pub tool_choice: Value,
    /// Run read-only batches concurrently.
    #[serde(default)]
    pub parallel_tool_calls: bool,
    /// The OpenAI wire `response_format` (null: text).
    #[serde(default)]
    pub response_format: Value,
    /// `polpo.execution.allowedTools`.
    #[serde(default)]
    pub allowed_tools: Option<Vec<String>>,
    /// The loop node this run executes, so a resumed node keeps its mode, step and
    /// loop/step hook packs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loop_context: Option<crate::hooks::LoopContext>,
    /// `polpo.capabilities` (questions, suggestions), so a resumed run offers the same.
    #[serde(default)]
    pub capabilities: crate::interaction::Capabilities,
    /// The run is an agent node in a parallel loop branch (a resumed run is refused a gate too).
    #[serde(default)]
    pub parallel_branch: bool,
    /// The profile model routing chose when the run was accepted, so a resumed run answers
    /// with it again instead of routing (and paying a classifier) a second time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_profile: Option<String>,
}

impl RunSpec {
    /// The durable form of `input` (session and messages are filled in once prepared).
    pub fn from_input(input: &ChatInput) -> Self {
        Self {
            agent: input.agent.clone(),
            session_id: String::new(),
            messages: Vec::new(),
            client_tools: input.client_tools.clone(),
            tool_choice: match &input.tool_choice {
                ToolChoice::Auto => json!("auto"),
                ToolChoice::None => json!("none"),
                ToolChoice::Required => json!("required"),
                ToolChoice::Tool(name) => json!({"tool": name}),
            },
            parallel_tool_calls: input.parallel_tool_calls,
            // As the client sent it, so a resumed run asks the provider for the same thing.
            response_format: input.response_format.wire().unwrap_or(Value::Null),
            allowed_tools: input.allowed_tools.clone(),
            loop_context: input.loop_context.clone(),
            model_profile: None,
            capabilities: input.capabilities,
            parallel_branch: input.parallel_branch,
        }
    }

    /// The request again, to resume run `run_id`.
    pub fn to_input(&self, run_id: &str) -> Result<ChatInput, String> {
        let mut input = ChatInput::new(self.agent.clone(), self.messages.clone());
        input.session_id = Some(self.session_id.clone());
        input.client_tools = self.client_tools.clone();
        input.tool_choice = match &self.tool_choice {
            Value::String(s) if s == "none" => ToolChoice::None,
            Value::String(s) if s == "required" => ToolChoice::Required,
            v => v.get("tool").and_then(Value::as_str).map_or(ToolChoice::Auto, |n| ToolChoice::Tool(n.to_owned())),
        };
        input.parallel_tool_calls = self.parallel_tool_calls;
        input.response_format = if self.response_format.is_null() { ResponseFormat::Text } else { ResponseFormat::from_wire(&self.response_format)? };
        input.allowed_tools = self.allowed_tools.clone();
        input.loop_context = self.loop_context.clone();
        input.capabilities = self.capabilities;
        input.parallel_branch = self.parallel_branch;
        input.run_id = run_id.to_owned();
        Ok(input)
    }
}

/// A durable run's resumable state (the checkpoint's `state`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointState {
    /// The request.
    pub spec: RunSpec,
    /// Messages this run produced so far, in order.
    #[serde(default)]
    pub produced: Vec<Message>,
    /// Steering received and not yet delivered.
    #[serde(default)]
    pub pending: Vec<SteerMessage>,
    /// Every steering id received (delivered or not): the idempotency keys.
    #[serde(default)]
    pub steering_ids: Vec<String>,
    /// The termination gate's budgets and latest validation, when the agent has a gate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<GateCheckpoint>,
}

/// Why a run stopped without finishing.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Pause {
    /// Stable code (`effect_unconfirmed`).
    pub code: &'static str,
    /// Details for the journal.
    pub data: Value,
}

struct Inner {
    state: CheckpointState,
    /// Steering messages already moved into `produced` whose `MessageAppended` is still to come.
    skip_appends: usize,
    /// The server tool call being executed now.
    current_call: Option<String>,
    paused: Option<Pause>,
    /// The run takes no more steering: it is finishing.
    closed: bool,
}

/// A live run's state, shared by the turn loop's sink, the steering inbox and the effect
/// ledger. One lock, so a checkpoint never sees steering both pending and delivered.
pub(crate) struct RunState {
    inner: Mutex<Inner>,
    journal: Journal,
}

/// What queueing a steering message did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Queued {
    /// Queued for delivery.
    Accepted,
    /// The id was seen before; nothing was queued.
    Duplicate,
}

impl RunState {
    pub(crate) fn new(state: CheckpointState, journal: Journal) -> Self {
        Self { inner: Mutex::new(Inner { state, skip_appends: 0, current_call: None, paused: None, closed: false }), journal }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn journal(&self) -> &Journal {
        &self.journal
    }

    /// The checkpoint state as JSON.
    pub(crate) fn snapshot(&self) -> Value {
        serde_json::to_value(&self.lock().state).unwrap_or_default()
    }

    /// A message the turn loop added: kept for the checkpoint (unless already moved there).
    pub(crate) fn on_message(&self, message: &Message) {
        let mut inner = self.lock();
        if inner.paused.is_some() {
            return;
        }
        if inner.skip_appends > 0 && message.role == Role::User {
            inner.skip_appends -= 1;
            return;
        }
        inner.state.produced.push(message.clone());
        drop(inner);
        self.journal.checkpoint();
    }

    /// A server tool call is about to run.
    pub(crate) fn on_tool_calling(&self, id: &str) {
        self.lock().current_call = Some(id.to_owned());
    }

    /// (model turn within the run, 1-based; position of the call in its turn, 0-based) of
    /// the call running now.
    pub(crate) fn current_call_position(&self) -> Option<(usize, usize)> {
        let inner = self.lock();
        let id = inner.current_call.as_deref()?;
        let assistants = inner.state.produced.iter().filter(|m| m.role == Role::Assistant);
        assistants.enumerate().filter_map(|(turn, m)| m.tool_calls.iter().position(|c| c.id == id).map(|p| (turn + 1, p))).last()
    }

    /// Queue steering; a seen id is a duplicate; `None` once the run is finishing.
    pub(crate) fn queue(&self, steer: SteerMessage) -> Option<Queued> {
        let mut inner = self.lock();
        if inner.closed {
            return None;
        }
        if inner.state.steering_ids.contains(&steer.id) {
            return Some(Queued::Duplicate);
        }
        inner.state.steering_ids.push(steer.id.clone());
        self.journal.event("run.steering.queued", json!({"id": steer.id, "mode": steer.mode}));
        inner.state.pending.push(steer);
        drop(inner);
        self.journal.checkpoint();
        Some(Queued::Accepted)
    }

    /// Take no more steering (the run is ending).
    pub(crate) fn close(&self) {
        self.lock().closed = true;
    }

    /// Stop the run for reconciliation; the turn loop's later messages are not kept.
    pub(crate) fn pause(&self, pause: Pause) {
        self.lock().paused.get_or_insert(pause);
    }

    pub(crate) fn paused(&self) -> Option<Pause> {
        self.lock().paused.clone()
    }

    /// True while a termination gate's correction cycle runs: an effect it cannot confirm
    /// then carries the gate's code.
    pub(crate) fn in_gate_correction_cycle(&self) -> bool {
        self.lock().state.gate.as_ref().is_some_and(GateCheckpoint::in_correction_cycle)
    }

    /// Model calls made so far (one assistant message each).
    pub(crate) fn turns_used(&self) -> u32 {
        self.lock().state.produced.iter().filter(|m| m.role == Role::Assistant).count() as u32
    }

    /// Move the picked pending steering into the conversation. `finishing`: the run ends
    /// unless something is delivered, so when nothing is, steering closes in the same step —
    /// a message accepted later would never be delivered.
    fn deliver(&self, pick: impl Fn(&SteerMessage) -> bool, finishing: bool) -> Vec<Message> {
        let mut inner = self.lock();
        let (take, keep): (Vec<SteerMessage>, Vec<SteerMessage>) = std::mem::take(&mut inner.state.pending).into_iter().partition(|s| pick(s));
        inner.state.pending = keep;
        if take.is_empty() {
            inner.closed |= finishing;
            return Vec::new();
        }
        let messages: Vec<Message> = take.iter().map(|s| s.message.clone()).collect();
        inner.state.produced.extend(messages.iter().cloned());
        inner.skip_appends += messages.len();
        for s in &take {
            self.journal.event("run.steering.delivered", json!({"id": s.id, "mode": s.mode}));
        }
        drop(inner);
        self.journal.checkpoint();
        messages
    }
}

impl RunControl for RunState {
    fn take_steering(&self) -> Vec<Message> {
        self.deliver(|s| s.mode == SteerMode::Steer, false)
    }

    fn take_follow_ups(&self) -> Vec<Message> {
        self.deliver(|_| true, true)
    }

    fn model_calls_before(&self) -> u32 {
        self.turns_used()
    }

    fn gate_checkpoint(&self) -> Option<GateCheckpoint> {
        self.lock().state.gate.clone()
    }

    fn keep_gate(&self, gate: &GateCheckpoint) {
        self.lock().state.gate = Some(gate.clone());
        self.journal.checkpoint();
    }

    fn commit(&self) -> BoxFuture<'_, Result<(), CheckpointError>> {
        Box::pin(self.journal.commit())
    }
}
