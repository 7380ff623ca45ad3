//! Steering, follow-ups and aborts for a durable run executing in another process, when
//! several servers share one PostgreSQL store ([`polpo_store::Shared`]).
//!
//! The server that was asked writes a [`RunCommand`](polpo_store::RunCommand) under an
//! idempotent id (the steering message's id; one abort per run) and waits for its outcome. The
//! server executing the run is woken by NOTIFY, applies every pending command of the run
//! through the same path as a local call ([`RunState::queue`](super::state::RunState), the run's
//! cancellation) and settles it; a run taken over by another server gets the commands still
//! pending when it is launched there. Delivery is at least once, and applying a command twice
//! changes nothing: a steering id is kept in the run's checkpoint, an abort cancels once.

use super::{Queued, RunError, RunManager, SteerMessage};
use crate::events::journal::{JournalEvent, Reason};
use polpo_store::{RunStatus, Shared, Signal};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;

/// What a command asks of the run.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Command {
    /// Queue a steering message or follow-up.
    Steer {
        /// The message.
        steer: SteerMessage,
    },
    /// Abort the run.
    Abort {
        /// Why, for the journal.
        reason: Option<String>,
    },
}

/// What delivering a command did, as the sender reports it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
enum Outcome {
    /// Queued (steering) or done (abort).
    Accepted,
    /// The steering id was seen before; nothing was queued.
    Duplicate,
    /// The run no longer takes commands.
    NotActive {
        /// Why (finishing, its status).
        detail: String,
    },
}

/// The one abort command id of a run: aborting twice is one abort.
const ABORT_ID: &str = "abort";

/// The command id of a steering message (its own id, kept apart from the abort id).
fn steer_id(id: &str) -> String {
    format!("steer:{id}")
}

/// Wait until run `run_id` may have changed: its journal or status, a command for it, or
/// wake-ups that were missed (resync, a waiter that fell behind). Returns at once when the
/// wake-ups have stopped (the store is closing).
pub(super) async fn wait_for_run(rx: &mut broadcast::Receiver<Signal>, run_id: &str) {
    loop {
        match rx.recv().await {
            Ok(Signal::RunEvents { run_id: id } | Signal::RunCommands { run_id: id }) if id == run_id => return,
            Ok(Signal::Resync) | Err(broadcast::error::RecvError::Lagged(_) | broadcast::error::RecvError::Closed) => {
                return;
            }
            Ok(_) => {}
        }
    }
}

impl RunManager {
    /// How long a sender waits for the executing server to settle a command before answering
    /// that it was accepted: the command is durable, and a run between owners (its server
    /// died) gets it when the next one takes it over, within about a lease.
    fn delivery_wait(&self) -> Duration {
        self.options.lease_ttl * 2 + Duration::from_secs(5)
    }

    /// Steer run `id` that does not execute here: through the store when it is shared,
    /// `run_not_active` otherwise (one server: nobody else can execute it).
    pub(super) async fn steer_elsewhere(&self, id: &str, steer: SteerMessage) -> Result<Queued, RunError> {
        let Some(shared) = self.runtime.store().shared.clone() else { return Err(self.not_active(id).await) };
        let command_id = steer_id(&steer.id);
        match self.send(&shared, id, &command_id, Command::Steer { steer }).await? {
            (_, false) => Ok(Queued::Duplicate),
            (Outcome::Accepted, true) => Ok(Queued::Accepted),
            (Outcome::Duplicate, true) => Ok(Queued::Duplicate),
            (Outcome::NotActive { detail }, true) => Err(RunError::NotActive(id.to_owned(), detail)),
        }
    }

    /// Abort running run `id` that executes on another server (the store is shared).
    pub(super) async fn abort_elsewhere(&self, id: &str, reason: Option<String>) -> Result<(), RunError> {
        let Some(shared) = self.runtime.store().shared.clone() else { return Err(self.not_active(id).await) };
        match self.send(&shared, id, ABORT_ID, Command::Abort { reason }).await?.0 {
            Outcome::Accepted | Outcome::Duplicate => Ok(()),
            Outcome::NotActive { detail } => Err(RunError::NotActive(id.to_owned(), detail)),
        }
    }

    /// Write a command for run `id` and wait for its outcome; with whether this call created
    /// it (a repeated id is the command sent before). A run that stops taking commands
    /// (finished, paused) before an executor settled it gets it settled `NotActive` here.
    async fn send(
        &self,
        shared: &Shared,
        id: &str,
        command_id: &str,
        command: Command,
    ) -> Result<(Outcome, bool), RunError> {
        let store = self.runtime.store();
        let run = store.runs.get_run(id).await?.ok_or_else(|| RunError::NotFound(id.to_owned()))?;
        if run.status != RunStatus::Running {
            return Err(RunError::NotActive(id.to_owned(), format!("status {}", run.status.as_str())));
        }
        let mut rx = shared.signals.subscribe();
        let body = serde_json::to_value(&command).map_err(|e| RunError::Invalid(e.to_string()))?;
        let (mut current, created) = shared.commands.send_run_command(id, command_id, body).await?;
        let deadline = tokio::time::Instant::now() + self.delivery_wait();
        loop {
            if let Some(outcome) = current.outcome.take() {
                let outcome = serde_json::from_value(outcome)
                    .map_err(|e| RunError::Invalid(format!("unreadable command outcome: {e}")))?;
                return Ok((outcome, created));
            }
            let status = store.runs.get_run(id).await?.map(|r| r.status);
            if status != Some(RunStatus::Running) {
                let detail = status.map_or_else(|| "deleted".to_owned(), |s| format!("status {}", s.as_str()));
                let outcome = serde_json::to_value(Outcome::NotActive { detail }).unwrap_or_default();
                current = shared.commands.settle_run_command(id, command_id, outcome).await?;
                continue;
            }
            if tokio::time::timeout_at(deadline, wait_for_run(&mut rx, id)).await.is_err() {
                // Durable, delivered when the run is next executed.
                return Ok((Outcome::Accepted, created));
            }
            current =
                shared.commands.run_command(id, command_id).await?.ok_or_else(|| RunError::NotFound(id.to_owned()))?;
        }
    }

    /// Apply run `id`'s pending commands if it executes here, and settle each.
    async fn deliver_commands(&self, id: &str) {
        let Some(shared) = self.runtime.store().shared.clone() else { return };
        let Some(active) = self.active().get(id).cloned() else { return };
        let pending = match shared.commands.pending_run_commands(id).await {
            Ok(pending) => pending,
            Err(e) => {
                tracing::warn!(run = %id, code = e.code(), "run commands could not be read: {e}");
                return;
            }
        };
        for command in pending {
            let outcome = match serde_json::from_value::<Command>(command.body) {
                Ok(Command::Steer { steer }) => match active.state.queue(steer) {
                    Some(queued) => {
                        // Settled once durable in the checkpoint, like a local steer.
                        active.state.journal().flush().await;
                        if queued == Queued::Accepted { Outcome::Accepted } else { Outcome::Duplicate }
                    }
                    None => Outcome::NotActive { detail: "finishing".into() },
                },
                Ok(Command::Abort { reason }) => {
                    if !active.cancel.is_cancelled() {
                        active.state.journal().event(JournalEvent::Cancelling(Reason { reason }));
                        active.cancel.cancel();
                    }
                    Outcome::Accepted
                }
                Err(e) => Outcome::NotActive { detail: format!("unreadable command: {e}") },
            };
            let outcome = serde_json::to_value(outcome).unwrap_or_default();
            if let Err(e) = shared.commands.settle_run_command(id, &command.id, outcome).await {
                tracing::warn!(run = %id, code = e.code(), "run command could not be settled: {e}");
            }
        }
    }

    /// Deliver run `id`'s pending commands in the background (a run just launched here).
    pub(super) fn deliver_commands_later(self: &Arc<Self>, id: &str) {
        if self.runtime.store().shared.is_none() {
            return;
        }
        let (manager, id) = (self.clone(), id.to_owned());
        tokio::spawn(async move { manager.deliver_commands(&id).await });
    }

    /// On a shared store, join the other servers: the runtime's event bus moves onto the
    /// shared feed ([`crate::EventBus::share`]), and commands are delivered to the runs
    /// executing here as their wake-ups arrive (after a resync or lag: to every such run),
    /// for as long as the manager lives.
    pub(super) fn spawn_shared(self: &Arc<Self>) {
        let Some(shared) = self.runtime.store().shared.clone() else { return };
        let runtime = self.runtime.clone();
        let feed = shared.clone();
        tokio::spawn(async move {
            if let Err(e) = runtime.events().share(feed.feed.clone(), &feed.signals).await {
                tracing::warn!(code = e.code(), "the shared event feed could not be joined; events stay local: {e}");
            }
        });
        let mut rx = shared.signals.subscribe();
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let signal = rx.recv().await;
                let Some(manager) = weak.upgrade() else { return };
                match signal {
                    Ok(Signal::RunCommands { run_id }) => manager.deliver_commands(&run_id).await,
                    Ok(Signal::Resync) | Err(broadcast::error::RecvError::Lagged(_)) => {
                        let ids: Vec<String> = manager.active().keys().cloned().collect();
                        for id in ids {
                            manager.deliver_commands(&id).await;
                        }
                    }
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        });
    }
}
