//! The run journal: run events become numbered journal entries, written in batches by one
//! writer task per run, so streamed deltas cost one append (one fsync or commit) per batch,
//! not per token. Checkpoints go through the same writer, so a checkpoint is always written
//! after the events that precede it.

use crate::events::RunEvent;
use polpo_core::message::FinishReason;
use crate::turn::CheckpointError;
use polpo_store::{MAX_CHECKPOINT_BYTES, MAX_EVENT_BATCH, NewRunEvent, RunEvent as StoredEvent, Store};
use serde_json::{Value, json};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot, watch};

/// Journal types after which a run produces nothing more, so its stream ends there.
/// `run.paused` is not one of them: a paused run waits for a person's decision and goes on
/// after `POST /v1/runs/{id}/reconcile`, so its followers stay attached.
pub const TERMINAL_EVENTS: [&str; 3] = ["run.completed", "run.failed", "run.cancelled"];

/// True for an event that ends a run's stream (the run completed, failed or was cancelled).
pub fn is_terminal(event_type: &str) -> bool {
    TERMINAL_EVENTS.contains(&event_type)
}

/// Attempts after the first to append a batch before it is given up.
const APPEND_RETRIES: u32 = 3;

enum Item {
    Event(NewRunEvent),
    Checkpoint,
    Flush(oneshot::Sender<()>),
    /// A checkpoint whose writing the sender waits for, with its outcome.
    Commit(oneshot::Sender<Result<(), CheckpointError>>),
}

/// The state a checkpoint writes, taken when the writer gets to it (the newest state).
pub(crate) type Snapshot = Arc<dyn Fn() -> Value + Send + Sync>;

/// A handle to a run's journal writer. Cheap to clone; the writer stops when every handle
/// is dropped.
#[derive(Clone)]
pub(crate) struct Journal {
    tx: mpsc::UnboundedSender<Item>,
    seq: watch::Receiver<u64>,
}

impl Journal {
    /// Start the writer of `run_id`, whose journal already holds `last_seq` events.
    pub(crate) fn start(store: Store, run_id: String, last_seq: u64, snapshot: Snapshot) -> Self {
        let (tx, mut rx) = mpsc::unbounded_channel::<Item>();
        let (seq_tx, seq) = watch::channel(last_seq);
        tokio::spawn(async move {
            let mut last = last_seq;
            while let Some(first) = rx.recv().await {
                let (mut events, mut checkpoint, mut acks, mut commits) = (Vec::new(), false, Vec::new(), Vec::new());
                let mut next = Some(first);
                while let Some(item) = next.take() {
                    match item {
                        Item::Event(e) => events.push(e),
                        Item::Checkpoint => checkpoint = true,
                        Item::Flush(ack) => acks.push(ack),
                        Item::Commit(ack) => {
                            checkpoint = true;
                            commits.push(ack);
                        }
                    }
                    if events.len() < MAX_EVENT_BATCH {
                        next = rx.try_recv().ok();
                    }
                }
                if !events.is_empty() {
                    // A passing store hiccup (a dropped connection, a busy database) must not
                    // cost events: retry a few times before giving the batch up.
                    let mut attempt = 0;
                    loop {
                        match store.runs.append_events(&run_id, events.clone()).await {
                            Ok(range) => last = *range.end(),
                            Err(e) if attempt < APPEND_RETRIES && !matches!(e.code(), "invalid_input" | "not_found") => {
                                attempt += 1;
                                tokio::time::sleep(std::time::Duration::from_millis(50 << attempt)).await;
                                continue;
                            }
                            Err(e) => tracing::warn!(run = %run_id, code = e.code(), "run events could not be journaled: {e}"),
                        }
                        break;
                    }
                }
                let written = if checkpoint { write_checkpoint(&store, &run_id, last, &snapshot).await } else { Ok(()) };
                seq_tx.send_replace(last);
                acks.into_iter().for_each(|a| {
                    let _ = a.send(());
                });
                commits.into_iter().for_each(|a| {
                    let _ = a.send(written.clone());
                });
            }
        });
        Self { tx, seq }
    }

    /// Queue an event.
    pub(crate) fn event(&self, event_type: &str, data: Value) {
        let _ = self.tx.send(Item::Event(NewRunEvent::new(event_type, data)));
    }

    /// Queue a checkpoint of the run's current state.
    pub(crate) fn checkpoint(&self) {
        let _ = self.tx.send(Item::Checkpoint);
    }

    /// Write a checkpoint of the run's current state (after everything queued so far) and
    /// wait for the outcome: for state that must not be relied on unless it is durable.
    pub(crate) async fn commit(&self) -> Result<(), CheckpointError> {
        let (ack, done) = oneshot::channel();
        self.tx.send(Item::Commit(ack)).map_err(|_| CheckpointError::Failed("the run's journal writer has stopped".into()))?;
        done.await.unwrap_or_else(|_| Err(CheckpointError::Failed("the run's journal writer has stopped".into())))
    }

    /// Wait until everything queued so far is durable.
    pub(crate) async fn flush(&self) {
        let (ack, done) = oneshot::channel();
        if self.tx.send(Item::Flush(ack)).is_ok() {
            let _ = done.await;
        }
    }

    /// The last durable sequence number, watched: followers wait on it.
    pub(crate) fn watch(&self) -> watch::Receiver<u64> {
        self.seq.clone()
    }
}

/// Write one checkpoint; a failure is logged and returned (only a commit waits for it).
async fn write_checkpoint(store: &Store, run_id: &str, seq: u64, snapshot: &Snapshot) -> Result<(), CheckpointError> {
    let Err(e) = store.runs.put_checkpoint(run_id, seq, snapshot()).await else { return Ok(()) };
    tracing::warn!(run = %run_id, code = e.code(), "run checkpoint could not be written: {e}");
    // Measured only after a failure (on a fresh snapshot), so the common path neither copies
    // nor serializes the state twice.
    let bytes = serde_json::to_vec(&snapshot()).map_or(0, |b| b.len());
    Err(if bytes > MAX_CHECKPOINT_BYTES {
        CheckpointError::TooLarge(format!("{bytes} bytes, more than the store's limit of {MAX_CHECKPOINT_BYTES}"))
    } else {
        CheckpointError::Failed(format!("{}: {e}", e.code()))
    })
}

/// The journal entry for a runtime event (the reference's run stream types where it has one);
/// `None` for what the checkpoint keeps instead (whole messages).
pub fn journal_entry(event: &RunEvent) -> Option<(&'static str, Value)> {
    Some(match event {
        RunEvent::TurnStarted { turn } => ("turn.started", json!({"turn": turn})),
        RunEvent::TextDelta { text } => ("output.text.delta", json!({"text": text})),
        RunEvent::ReasoningDelta { text } => ("output.reasoning.delta", json!({"text": text})),
        RunEvent::ToolPreparing { id, name, arguments_text } => {
            ("tool.arguments", json!({"id": id, "name": name, "argumentsText": arguments_text}))
        }
        RunEvent::ToolCalling { id, name, arguments } => ("tool.started", json!({"id": id, "name": name, "arguments": arguments})),
        RunEvent::ToolCompleted { id, name, result, is_error } => {
            let kind = if *is_error { "tool.failed" } else { "tool.completed" };
            (kind, json!({"id": id, "name": name, "result": result, "isError": is_error}))
        }
        RunEvent::TurnCompleted { turn, usage, finish_reason } => {
            ("usage.completed", json!({"turn": turn, "usage": usage, "finishReason": finish_reason}))
        }
        RunEvent::MessageAppended { .. } => return None,
        RunEvent::HookStarted { .. } => ("hook.started", serde_json::to_value(event).unwrap_or_default()),
        RunEvent::HookCompleted { .. } => ("hook.completed", serde_json::to_value(event).unwrap_or_default()),
        RunEvent::TerminationGate { .. } => ("termination_gate", serde_json::to_value(event).unwrap_or_default()),
    })
}

/// The runtime event a journal entry stands for, for clients that render the journal as a
/// chat stream (the inverse of [`journal_entry`] for the streamed kinds).
pub fn stream_event(event: &StoredEvent) -> Option<RunEvent> {
    let d = &event.data;
    let s = |k: &str| d.get(k).and_then(Value::as_str).unwrap_or_default().to_owned();
    Some(match event.event_type.as_str() {
        "output.text.delta" => RunEvent::TextDelta { text: s("text") },
        "output.reasoning.delta" => RunEvent::ReasoningDelta { text: s("text") },
        "tool.arguments" => RunEvent::ToolPreparing { id: s("id"), name: s("name"), arguments_text: s("argumentsText") },
        "tool.started" => RunEvent::ToolCalling { id: s("id"), name: s("name"), arguments: d.get("arguments").cloned().unwrap_or_default() },
        "tool.completed" | "tool.failed" => RunEvent::ToolCompleted {
            id: s("id"),
            name: s("name"),
            result: s("result"),
            is_error: event.event_type == "tool.failed",
        },
        "usage.completed" => RunEvent::TurnCompleted {
            turn: d.get("turn").and_then(Value::as_u64).unwrap_or_default() as u32,
            usage: serde_json::from_value(d.get("usage").cloned().unwrap_or_default()).unwrap_or_default(),
            finish_reason: serde_json::from_value(d.get("finishReason").cloned().unwrap_or_default()).unwrap_or(FinishReason::Stop),
        },
        _ => return None,
    })
}

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
