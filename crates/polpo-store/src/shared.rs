//! What several servers on one database share beyond the store traits, so N `polpo serve`
//! processes behind a load balancer behave as one: commands for a run ([`RunCommands`]: steer,
//! follow up, abort) written by the server that was asked and delivered by the one executing
//! the run; the live event feed every server shows ([`EventFeed`]); and the wake-ups
//! ([`Signals`], PostgreSQL LISTEN/NOTIFY) that tell a server one of them changed, so nobody
//! polls. Only the PostgreSQL store has them ([`crate::Store::shared`]); the file and SQLite
//! stores serve one process, which sees everything in memory.

use std::sync::{Arc, Once};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio::sync::broadcast;

use crate::error::StoreError;

/// The shared parts of a store several servers use at once.
pub struct Shared {
    /// Commands for runs, delivered to their executors.
    pub commands: Arc<dyn RunCommands>,
    /// The live event feed of every server.
    pub feed: Arc<dyn EventFeed>,
    /// Wake-ups when commands, run events or feed events were written by any server.
    pub signals: Signals,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").finish_non_exhaustive()
    }
}

/// A command for a run, as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct RunCommand {
    /// The run it is for.
    pub run_id: String,
    /// The sender's idempotent id: sending the same id again is the same command.
    pub id: String,
    /// What to do, in the engine's shape (opaque to the store).
    pub body: Value,
    /// When it was first sent.
    pub created_at: DateTime<Utc>,
    /// What delivering it did, once it was delivered (or refused); `None` while pending.
    pub outcome: Option<Value>,
}

/// Commands for runs: written by any server, delivered by the run's executor, at least once
/// (the engine applies them idempotently by id).
#[async_trait]
pub trait RunCommands: Send + Sync {
    /// Store command `id` for run `run_id` unless one with that id is stored already, and wake
    /// the servers ([`Signal::RunCommands`]). Returns the stored command and whether this call
    /// created it. An unknown run is `not_found`.
    async fn send_run_command(&self, run_id: &str, id: &str, body: Value) -> Result<(RunCommand, bool), StoreError>;

    /// The command, or `None`.
    async fn run_command(&self, run_id: &str, id: &str) -> Result<Option<RunCommand>, StoreError>;

    /// The run's commands without an outcome, oldest first (at most 1000).
    async fn pending_run_commands(&self, run_id: &str) -> Result<Vec<RunCommand>, StoreError>;

    /// Record what delivering the command did, once: a settled command keeps its first
    /// outcome (returned either way). Wakes the sender waiting for it.
    async fn settle_run_command(&self, run_id: &str, id: &str, outcome: Value) -> Result<RunCommand, StoreError>;
}

/// One event of the shared live feed.
#[derive(Debug, Clone, PartialEq)]
pub struct FeedEvent {
    /// Position in the feed of all servers (the SSE `id:`), growing in commit order.
    pub id: u64,
    /// When it was published.
    pub ts: DateTime<Utc>,
    /// The event name, e.g. `run:completed`.
    pub event: String,
    /// The payload, a JSON object's text (kept as the bus writes it and SSE sends it).
    pub data: String,
}

/// An event to publish on the feed.
#[derive(Debug, Clone, PartialEq)]
pub struct NewFeedEvent {
    /// When it was published.
    pub ts: DateTime<Utc>,
    /// The event name.
    pub event: String,
    /// The payload, a JSON object's text.
    pub data: String,
}

/// Events kept in the feed; older ones are pruned as new ones arrive (a client resuming from
/// further back is told it lost events).
pub const FEED_KEEP: u64 = 10_000;

/// The live event feed every server writes and reads, so `/api/v1/events` on any server shows
/// every server's events, in one order, resumable by id on any of them.
#[async_trait]
pub trait EventFeed: Send + Sync {
    /// Append events in order, atomically. Ids are handed out so that they become visible in
    /// increasing order (a reader that has seen id n has seen every earlier id), then the
    /// servers are woken ([`Signal::Feed`]). Returns the last id.
    async fn publish_feed(&self, events: Vec<NewFeedEvent>) -> Result<u64, StoreError>;

    /// Up to `limit` (≤ 1000) events with `id > after`, oldest first.
    async fn feed_after(&self, after: u64, limit: u32) -> Result<Vec<FeedEvent>, StoreError>;

    /// The newest `limit` (≤ 1000) events, oldest first, and the newest id handed out (even
    /// when no event is kept).
    async fn feed_tail(&self, limit: u32) -> Result<(Vec<FeedEvent>, u64), StoreError>;
}

/// Something another server (or this one) wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signal {
    /// Events were appended to run `run_id`'s journal or its status changed.
    RunEvents {
        /// The run.
        run_id: String,
    },
    /// A command for run `run_id` was sent or settled.
    RunCommands {
        /// The run.
        run_id: String,
    },
    /// Events were published on the feed.
    Feed,
    /// Wake-ups may have been missed (the listening connection was lost and made again):
    /// whoever waits must read the store again.
    Resync,
}

/// Wake-ups from the database, fanned out to every waiter in this process over one listening
/// connection. A wake-up is a hint to read the store, never the data itself: a waiter reads
/// again on each one, on [`Signal::Resync`], and when it lagged behind the channel.
pub struct Signals {
    tx: broadcast::Sender<Signal>,
    listen: Box<dyn Fn(broadcast::Sender<Signal>) + Send + Sync>,
    started: Once,
}

impl std::fmt::Debug for Signals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signals").field("receivers", &self.tx.receiver_count()).finish_non_exhaustive()
    }
}

/// Wake-ups buffered per waiter before it lags (and must read the store again).
const SIGNAL_BUFFER: usize = 4096;

impl Signals {
    /// Wake-ups produced by `listen`, started on the first [`Signals::subscribe`] with the
    /// sender to publish into (it must send [`Signal::Resync`] each time it starts listening).
    pub fn new(listen: impl Fn(broadcast::Sender<Signal>) + Send + Sync + 'static) -> Self {
        let (tx, _) = broadcast::channel(SIGNAL_BUFFER);
        Self { tx, listen: Box::new(listen), started: Once::new() }
    }

    /// Every wake-up from now on. The first call starts listening (inside a Tokio runtime).
    pub fn subscribe(&self) -> broadcast::Receiver<Signal> {
        let rx = self.tx.subscribe();
        self.started.call_once(|| (self.listen)(self.tx.clone()));
        rx
    }
}
