//! A live durable run's state: its checkpoint (see [`super::spec`]), the steering inbox the
//! turn loop reads, and why it paused, behind one lock shared by the turn loop's sink, the
//! steering route and the effect ledger.

use super::spec::{CheckpointState, SteerMessage, SteerMode};
use super::writer::Journal;
use crate::events::journal::{JournalEvent, Steering};
use crate::hooks::gate::GateCheckpoint;
use crate::turn::control::{CheckpointError, RunControl};
use futures::future::BoxFuture;
use polpo_core::message::{Message, Role};
use serde_json::Value;
use std::sync::{Mutex, MutexGuard, PoisonError};

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
    /// The effect key of the call a person reconciled `not_applied`: it runs once more.
    rerun: Option<String>,
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
        Self {
            inner: Mutex::new(Inner {
                state,
                skip_appends: 0,
                current_call: None,
                paused: None,
                rerun: None,
                closed: false,
            }),
            journal,
        }
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
        assistants
            .enumerate()
            .filter_map(|(turn, m)| m.tool_calls.iter().position(|c| c.id == id).map(|p| (turn + 1, p)))
            .last()
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
        self.journal.event(JournalEvent::SteeringQueued(Steering { id: steer.id.clone(), mode: steer.mode }));
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

    /// Let the unconfirmed call keyed `key` run once under its key when it is replayed: a
    /// person said it did not happen. Kept in memory only, so a crash during the rerun leaves
    /// the effect unconfirmed again rather than running it a third time.
    pub(crate) fn allow_rerun(&self, key: String) {
        self.lock().rerun = Some(key);
    }

    /// True, once, for the call a person reconciled `not_applied`.
    pub(crate) fn take_rerun(&self, key: &str) -> bool {
        let mut inner = self.lock();
        inner.rerun.take_if(|k| k == key).is_some()
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
        let (take, keep): (Vec<SteerMessage>, Vec<SteerMessage>) =
            std::mem::take(&mut inner.state.pending).into_iter().partition(|s| pick(s));
        inner.state.pending = keep;
        if take.is_empty() {
            inner.closed |= finishing;
            return Vec::new();
        }
        let messages: Vec<Message> = take.iter().map(|s| s.message.clone()).collect();
        inner.state.produced.extend(messages.iter().cloned());
        inner.skip_appends += messages.len();
        for s in &take {
            self.journal.event(JournalEvent::SteeringDelivered(Steering { id: s.id.clone(), mode: s.mode }));
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
