//! The run journal's writer: [`JournalEvent`]s become numbered journal entries, written in
//! batches by one writer task per run, so streamed deltas cost one append (one fsync or commit) per batch,
//! not per token. Checkpoints go through the same writer, so a checkpoint is always written
//! after the events that precede it.

use crate::events::journal::JournalEvent;
use crate::turn::control::CheckpointError;
use polpo_store::{Lease, MAX_CHECKPOINT_BYTES, MAX_EVENT_BATCH, NewRunEvent, Store};
use serde_json::Value;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

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
    /// Start the writer of `run_id`, whose journal already holds `last_seq` events. Every
    /// write carries `fence`; the first one refused because another process was granted the
    /// run since cancels `lost`, and nothing is written from then on.
    pub(crate) fn start(
        store: Store,
        run_id: String,
        last_seq: u64,
        snapshot: Snapshot,
        fence: Lease,
        lost: CancellationToken,
    ) -> Self {
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
                if lost.is_cancelled() {
                    events.clear();
                    checkpoint = false;
                }
                if !events.is_empty() {
                    // A passing store hiccup (a dropped connection, a busy database) must not
                    // cost events: retry a few times before giving the batch up.
                    let mut attempt = 0;
                    loop {
                        match store.runs.append_events_fenced(&run_id, Some(&fence), events.clone()).await {
                            Ok(range) => last = *range.end(),
                            Err(e) if e.code() == "lease_lost" => {
                                tracing::warn!(run = %run_id, "lost the run's lease: another process holds the run now; its journal is no longer written here");
                                lost.cancel();
                            }
                            Err(e)
                                if attempt < APPEND_RETRIES && !matches!(e.code(), "invalid_input" | "not_found") =>
                            {
                                attempt += 1;
                                tokio::time::sleep(std::time::Duration::from_millis(50 << attempt)).await;
                                continue;
                            }
                            Err(e) => {
                                tracing::warn!(run = %run_id, code = e.code(), "run events could not be journaled: {e}")
                            }
                        }
                        break;
                    }
                }
                let written = if checkpoint {
                    write_checkpoint(&store, &run_id, &fence, last, &snapshot, &lost).await
                } else {
                    Ok(())
                };
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
    pub(crate) fn event(&self, event: JournalEvent) {
        let _ = self.tx.send(Item::Event(event.to_stored()));
    }

    /// Queue a checkpoint of the run's current state.
    pub(crate) fn checkpoint(&self) {
        let _ = self.tx.send(Item::Checkpoint);
    }

    /// Write a checkpoint of the run's current state (after everything queued so far) and
    /// wait for the outcome: for state that must not be relied on unless it is durable.
    pub(crate) async fn commit(&self) -> Result<(), CheckpointError> {
        let (ack, done) = oneshot::channel();
        self.tx
            .send(Item::Commit(ack))
            .map_err(|_| CheckpointError::Failed("the run's journal writer has stopped".into()))?;
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

/// Write one checkpoint as the holder of `fence`; a failure is logged and returned (only a
/// commit waits for it), a lost lease also cancels `lost`.
async fn write_checkpoint(
    store: &Store,
    run_id: &str,
    fence: &Lease,
    seq: u64,
    snapshot: &Snapshot,
    lost: &CancellationToken,
) -> Result<(), CheckpointError> {
    if lost.is_cancelled() {
        return Err(CheckpointError::Failed("lease_lost: another process holds the run now".into()));
    }
    let Err(e) = store.runs.put_checkpoint_fenced(run_id, Some(fence), seq, snapshot()).await else { return Ok(()) };
    if e.code() == "lease_lost" {
        lost.cancel();
        return Err(CheckpointError::Failed(format!("{}: {e}", e.code())));
    }
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
