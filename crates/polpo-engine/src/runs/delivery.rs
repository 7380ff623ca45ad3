//! The one way to run an agent: [`RunManager::invoke`]. Every surface — the chat route, and
//! next tasks, loop steps, schedules and channels — hands it a [`ChatInput`]. It prepares the
//! request (everything that can fail before the model runs fails here, so a server can still
//! answer with a status), decides how the answer is delivered ([`DeliveryMode`]), and hands
//! back an [`Invoked`]: the run's ids, then its [`Progress`] — renderable events, and how it
//! ended — the same whichever way it runs.
//!
//! - `Inline` and `Run` execute in a task of their own, attached to the caller: dropping the
//!   [`Invoked::attachment`] cancels them. `Run` is also steerable and abortable by run id
//!   while it executes.
//! - `Durable` starts a durable run and follows its journal: events carry their journal
//!   sequence, and the answer is the run's verdict. A run this process hands over because it
//!   is stopping ends its invocation with [`RUN_HANDED_OVER`]; the run goes on elsewhere.

use super::RunManager;
use super::inline::InlineRun;
use crate::approvals::AWAITING_APPROVAL;
use crate::events::RunEvent;
use crate::events::journal::{JournalEvent, Paused};
use crate::meter::{Meter, Overhead};
use crate::request::{ChatError, ChatInput, DeliveryMode, Failure, RunAnswer};
use crate::runtime::PreparedChat;
use futures::StreamExt;
use std::sync::Arc;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio_util::sync::{CancellationToken, DropGuard};

/// The code of an invocation whose durable run this server handed over because it is
/// stopping: the run goes on on the next server, to be followed with
/// `GET /v1/runs/{id}/events`.
pub const RUN_HANDED_OVER: &str = "run_handed_over";

/// What an invocation reports, in order.
#[derive(Debug)]
pub enum Progress {
    /// Something a client may render, with the journal sequence it was recorded under when
    /// the run is durable.
    Event(RunEvent, Option<u64>),
    /// How the invocation ended; nothing follows.
    Finished(Finished),
}

/// How an invocation ended.
#[derive(Debug)]
pub struct Finished {
    /// The answer, or why there is none.
    pub result: Result<RunAnswer, Failure>,
    /// The journal sequence of a durable run's verdict.
    pub seq: Option<u64>,
    /// The runtime's own time, for an invocation that ran in its caller's request (`None`
    /// for a durable run, which runs on its own).
    pub overhead: Option<Overhead>,
}

impl Finished {
    /// True when the run was handed over to another server and goes on there: the caller has
    /// no verdict, and must not retry it as if it had failed.
    pub fn handed_over(&self) -> bool {
        matches!(&self.result, Err(f) if f.code == RUN_HANDED_OVER)
    }
}

/// An invocation that passed every check and runs.
pub struct Invoked {
    run_id: String,
    session_id: String,
    mode: DeliveryMode,
    progress: UnboundedReceiver<Progress>,
    attached: Option<DropGuard>,
    followed: bool,
}

impl Invoked {
    /// The run id (`x-polpo-run-id`).
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The session the turn is stored in (`x-session-id`).
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// How the answer is delivered.
    pub fn mode(&self) -> DeliveryMode {
        self.mode
    }

    /// What the caller holds while it listens: dropping it cancels a run that does not outlive
    /// its caller. `None` for a durable run (and once taken).
    pub fn attachment(&mut self) -> Option<DropGuard> {
        self.attached.take()
    }

    /// True when this invocation follows a durable run started earlier under the same run id
    /// ([`RunManager::invoke_once`]) instead of starting it.
    pub fn followed(&self) -> bool {
        self.followed
    }

    /// The next progress; `None` after [`Progress::Finished`].
    pub async fn next(&mut self) -> Option<Progress> {
        self.progress.recv().await
    }
}

/// Forgets an inline run however its task ends (a cancelled one included).
struct Registered {
    manager: Arc<RunManager>,
    run_id: String,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.manager.inline().remove(&self.run_id);
    }
}

impl RunManager {
    /// Run an agent for `input`, delivered as the runtime decides ([`crate::Runtime::delivery_mode`]).
    /// `meter` counts the runtime's own time of a run in the caller's request. Fails before
    /// anything runs (unknown agent or session, a refused tool choice, a model that cannot be
    /// called …), leaving nothing behind.
    pub async fn invoke(self: &Arc<Self>, input: ChatInput, meter: Meter) -> Result<Invoked, ChatError> {
        let (tx, progress) = unbounded_channel();
        let mode = self.runtime.delivery_mode(&input);
        if mode == DeliveryMode::Durable {
            let started = self.start(input).await?;
            tokio::spawn(self.clone().follow(started.run_id.clone(), tx));
            return Ok(Invoked {
                run_id: started.run_id,
                session_id: started.session_id,
                mode,
                progress,
                attached: None,
                followed: false,
            });
        }
        let cancel = CancellationToken::new();
        let mut prepared = meter.scope(self.runtime.prepare(input, &cancel)).await?;
        let (run_id, session_id) = (prepared.run_id().to_owned(), prepared.session().id.clone());
        // Registered before the caller learns the run id, so steering it at once finds it.
        let mut registered = None;
        if mode == DeliveryMode::Run {
            let run = Arc::new(InlineRun::new(cancel.clone(), prepared.session().owner.clone()));
            self.inline().insert(run_id.clone(), run.clone());
            prepared = prepared.controlled_by(run);
            registered = Some(Registered { manager: self.clone(), run_id: run_id.clone() });
        }
        // Boxed before it is spawned: the run's future (its whole turn loop) is kilobytes, and
        // the spawn would otherwise copy it through every layer down to the task's cell.
        tokio::spawn(Box::pin(async move {
            let result = meter.scope(run_attached(prepared, &tx)).await;
            // No longer steerable once it has an answer (also when the task is dropped).
            drop(registered);
            let _ = tx.send(Progress::Finished(Finished { result, seq: None, overhead: Some(meter.read()) }));
        }));
        Ok(Invoked { run_id, session_id, mode, progress, attached: Some(cancel.drop_guard()), followed: false })
    }

    /// [`Self::invoke`] for a surface that derives the run id from what it runs (a task's
    /// attempt, a schedule's occurrence) and may come back to it after a restart, its claim
    /// taken over: delivered durably, the run is started once under `run_id`, and a run by
    /// that id already there is followed to its verdict instead of started again
    /// ([`Invoked::followed`]). Delivered otherwise, nothing outlives a process, and the
    /// input runs under an id of its own.
    pub async fn invoke_once(
        self: &Arc<Self>,
        mut input: ChatInput,
        run_id: &str,
        meter: Meter,
    ) -> Result<Invoked, ChatError> {
        if self.runtime.delivery_mode(&input) != DeliveryMode::Durable {
            return self.invoke(input, meter).await;
        }
        if let Some(run) = self.get(run_id).await? {
            let (tx, progress) = unbounded_channel();
            tokio::spawn(self.clone().follow(run.id.clone(), tx));
            return Ok(Invoked {
                run_id: run.id,
                session_id: run.session_id.unwrap_or_default(),
                mode: DeliveryMode::Durable,
                progress,
                attached: None,
                followed: true,
            });
        }
        input.run_id = Some(run_id.to_owned());
        self.invoke(input, meter).await
    }

    /// Follow durable run `run_id`'s journal to its verdict, reporting what a client renders.
    async fn follow(self: Arc<Self>, run_id: String, tx: UnboundedSender<Progress>) {
        let mut journal = Box::pin(self.events(&run_id, 0));
        let mut result =
            Err(Failure { code: "internal".into(), message: "the run ended without a terminal event".into() });
        let mut seq = None;
        while let Some(event) = journal.next().await {
            let event = match event {
                Ok(event) => event,
                Err(e) => {
                    result = Err(Failure { code: e.code().into(), message: e.to_string() });
                    break;
                }
            };
            let Some(entry) = JournalEvent::from_stored(&event) else { continue };
            if let Some(streamed) = entry.stream_event() {
                let _ = tx.send(Progress::Event(streamed, Some(event.seq)));
                continue;
            }
            result = match entry {
                JournalEvent::Completed(answer) => Ok(answer),
                JournalEvent::Failed(failure) => Err(failure),
                JournalEvent::Cancelled(_) => {
                    Err(Failure { code: "aborted".into(), message: "aborted: the run was aborted".into() })
                }
                // The journal goes on past a pause (for the run's own followers); this answer ends.
                JournalEvent::Paused(paused) => {
                    Err(Failure { message: paused_message(&run_id, &paused), code: paused.code })
                }
                JournalEvent::Released(_) => Err(Failure {
                    code: RUN_HANDED_OVER.into(),
                    message: format!(
                        "{RUN_HANDED_OVER}: this server is stopping and handed run `{run_id}` over to the next one, where it goes on: follow it with GET /v1/runs/{run_id}/events (Last-Event-ID resumes)"
                    ),
                }),
                _ => continue,
            };
            seq = Some(event.seq);
            break;
        }
        let _ = tx.send(Progress::Finished(Finished { result, seq, overhead: None }));
    }
}

/// What a caller is told about a run that paused: what it waits for, and how it goes on.
fn paused_message(run_id: &str, paused: &Paused) -> String {
    match paused.detail.get("approvalId").and_then(serde_json::Value::as_str) {
        Some(approval) if paused.code == AWAITING_APPROVAL => format!(
            "{AWAITING_APPROVAL}: run `{run_id}` waits for approval {approval}; approve or reject it (POST /api/v1/approvals/{approval}/approve or /reject) and the run goes on: follow it with GET /v1/runs/{run_id}/events"
        ),
        _ => format!("{}: the run is paused for reconciliation", paused.code),
    }
}

/// Run a prepared turn in the caller's stead, forwarding its events.
async fn run_attached(prepared: PreparedChat, tx: &UnboundedSender<Progress>) -> Result<RunAnswer, Failure> {
    let sink = |event: RunEvent| {
        let _ = tx.send(Progress::Event(event, None));
    };
    match prepared.run(&sink).await {
        Ok(out) => Ok(out.answer()),
        Err(e) => Err(Failure::from(&e)),
    }
}
