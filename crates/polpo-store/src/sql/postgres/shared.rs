//! The PostgreSQL side of [`crate::shared`]: run commands and the event feed in tables, and
//! one LISTEN connection per process turning NOTIFYs into [`Signal`]s.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use sqlx::Row;
use sqlx::postgres::{PgListener, PgPool, PgRow};
use tokio::sync::broadcast;

use super::{PgStore, RUN_EVENTS_CHANNEL};
use crate::clock::{from_millis, now_ms};
use crate::error::StoreError;
use crate::page::PageRequest;
use crate::shared::{EventFeed, FEED_KEEP, FeedEvent, NewFeedEvent, RunCommand, RunCommands, Shared, Signal, Signals};
use crate::sql::{from_db, from_text, to_db, to_text};

/// The channel a sent or settled run command is announced on (payload: the run id).
pub const RUN_COMMANDS_CHANNEL: &str = "polpo_run_commands";

/// The channel published feed events are announced on (payload: the last id).
pub const FEED_CHANNEL: &str = "polpo_feed";

/// How long to wait before listening again after the connection failed.
const RELISTEN_AFTER: Duration = Duration::from_millis(500);

impl PgStore {
    /// The parts several servers share through this database (commands, feed, wake-ups).
    pub fn shared(&self) -> Shared {
        let pool = self.pool.clone();
        Shared {
            commands: std::sync::Arc::new(self.clone()),
            feed: std::sync::Arc::new(self.clone()),
            signals: Signals::new(move |tx| {
                tokio::spawn(listen(pool.clone(), tx));
            }),
        }
    }

    fn command_from_row(row: &PgRow) -> Result<RunCommand, StoreError> {
        let outcome: Option<String> = row.try_get("outcome")?;
        Ok(RunCommand {
            run_id: row.try_get("run_id")?,
            id: row.try_get("id")?,
            body: from_text(row.try_get::<&str, _>("body")?)?,
            created_at: from_millis(row.try_get("created_at")?),
            outcome: outcome.as_deref().map(from_text).transpose()?,
        })
    }
}

#[async_trait]
impl RunCommands for PgStore {
    async fn send_run_command(&self, run_id: &str, id: &str, body: Value) -> Result<(RunCommand, bool), StoreError> {
        if id.is_empty() || id.len() > 256 {
            return Err(StoreError::Invalid("a run command id must be 1-256 bytes".into()));
        }
        let mut tx = self.pool.begin().await?;
        let inserted = sqlx::query(
            "INSERT INTO run_commands (run_id, id, body, created_at) SELECT $1, $2, $3, $4 \
             WHERE EXISTS (SELECT 1 FROM runs WHERE id = $1) \
             ON CONFLICT (run_id, id) DO NOTHING RETURNING run_id, id, body, created_at, outcome",
        )
        .bind(run_id)
        .bind(id)
        .bind(to_text(&body)?)
        .bind(now_ms(self.clock.as_ref()).timestamp_millis())
        .fetch_optional(&mut *tx)
        .await?;
        let (command, created) = match inserted {
            Some(row) => (Self::command_from_row(&row)?, true),
            None => {
                let stored = sqlx::query(
                    "SELECT run_id, id, body, created_at, outcome FROM run_commands WHERE run_id = $1 AND id = $2",
                )
                .bind(run_id)
                .bind(id)
                .fetch_optional(&mut *tx)
                .await?
                .ok_or_else(|| StoreError::not_found("run", run_id))?;
                (Self::command_from_row(&stored)?, false)
            }
        };
        // Delivered at commit, so the executor never hears of a command it cannot read.
        sqlx::query("SELECT pg_notify('polpo_run_commands', $1)").bind(run_id).execute(&mut *tx).await?;
        tx.commit().await?;
        Ok((command, created))
    }

    async fn run_command(&self, run_id: &str, id: &str) -> Result<Option<RunCommand>, StoreError> {
        sqlx::query("SELECT run_id, id, body, created_at, outcome FROM run_commands WHERE run_id = $1 AND id = $2")
            .bind(run_id)
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(Self::command_from_row)
            .transpose()
    }

    async fn pending_run_commands(&self, run_id: &str) -> Result<Vec<RunCommand>, StoreError> {
        sqlx::query("SELECT run_id, id, body, created_at, outcome FROM run_commands WHERE run_id = $1 AND outcome IS NULL ORDER BY n LIMIT 1000")
        .bind(run_id)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(Self::command_from_row)
        .collect()
    }

    async fn settle_run_command(&self, run_id: &str, id: &str, outcome: Value) -> Result<RunCommand, StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "UPDATE run_commands SET outcome = $3, settled_at = $4 WHERE run_id = $1 AND id = $2 AND outcome IS NULL",
        )
        .bind(run_id)
        .bind(id)
        .bind(to_text(&outcome)?)
        .bind(now_ms(self.clock.as_ref()).timestamp_millis())
        .execute(&mut *tx)
        .await?;
        let stored =
            sqlx::query("SELECT run_id, id, body, created_at, outcome FROM run_commands WHERE run_id = $1 AND id = $2")
                .bind(run_id)
                .bind(id)
                .fetch_optional(&mut *tx)
                .await?
                .ok_or_else(|| StoreError::not_found("run command", id))?;
        sqlx::query("SELECT pg_notify('polpo_run_commands', $1)").bind(run_id).execute(&mut *tx).await?;
        tx.commit().await?;
        Self::command_from_row(&stored)
    }
}

fn feed_from_row(row: &PgRow) -> Result<FeedEvent, StoreError> {
    Ok(FeedEvent {
        id: from_db(row.try_get("id")?),
        ts: from_millis(row.try_get("ts")?),
        event: row.try_get("event")?,
        data: row.try_get("data")?,
    })
}

#[async_trait]
impl EventFeed for PgStore {
    async fn publish_feed(&self, events: Vec<NewFeedEvent>) -> Result<u64, StoreError> {
        let n = to_db(events.len() as u64);
        let n_events = events.len();
        let mut ts = Vec::with_capacity(n_events);
        let mut names = Vec::with_capacity(n_events);
        let mut data = Vec::with_capacity(n_events);
        for event in events {
            ts.push(event.ts.timestamp_millis());
            names.push(event.event);
            data.push(event.data);
        }
        // One statement, so one implicit transaction the database itself runs to its end: the
        // counter row stays locked until commit (the next publisher waits, so ids become visible
        // in the order they were handed out), but never across a round trip to this process —
        // a publisher paused between statements (stopped, starved, swapped out) would otherwise
        // hold every other server's live events until its connection died. The feed is pruned
        // when the ids cross a multiple of 256, so the cost is spread thin; the NOTIFY is sent
        // at commit.
        let last: i64 = sqlx::query(
            "WITH counter AS (UPDATE feed_counter SET last_id = last_id + $1 RETURNING last_id),              added AS (INSERT INTO feed_events (id, ts, event, data)                 SELECT counter.last_id - $1 + e.n, e.ts, e.event, e.data FROM counter,                 unnest($2::BIGINT[], $3::TEXT[], $4::TEXT[]) WITH ORDINALITY AS e(ts, event, data, n)),              pruned AS (DELETE FROM feed_events WHERE id <= (SELECT last_id FROM counter) - $5                 AND (SELECT (last_id - $1) / 256 <> last_id / 256 FROM counter))              SELECT last_id, pg_notify('polpo_feed', last_id::TEXT) FROM counter",
        )
        .bind(n)
        .bind(ts)
        .bind(names)
        .bind(data)
        .bind(to_db(FEED_KEEP))
        .fetch_one(&self.pool)
        .await?
        .try_get("last_id")?;
        Ok(from_db(last))
    }

    async fn feed_after(&self, after: u64, limit: u32) -> Result<Vec<FeedEvent>, StoreError> {
        sqlx::query("SELECT id, ts, event, data FROM feed_events WHERE id > $1 ORDER BY id LIMIT $2")
            .bind(to_db(after))
            .bind(to_db(PageRequest::first(limit).size() as u64))
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(feed_from_row)
            .collect()
    }

    async fn feed_tail(&self, limit: u32) -> Result<(Vec<FeedEvent>, u64), StoreError> {
        let mut tx = self.pool.begin().await?;
        let last: i64 =
            sqlx::query("SELECT last_id FROM feed_counter").fetch_one(&mut *tx).await?.try_get("last_id")?;
        let mut events = sqlx::query("SELECT id, ts, event, data FROM feed_events ORDER BY id DESC LIMIT $1")
            .bind(to_db(PageRequest::first(limit).size() as u64))
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(feed_from_row)
            .collect::<Result<Vec<_>, _>>()?;
        tx.commit().await?;
        events.reverse();
        Ok((events, from_db(last)))
    }
}

/// Listen for every shared channel on one connection for as long as anyone may subscribe,
/// listening again after a lost connection; each (re)start sends [`Signal::Resync`], since
/// what was notified while not listening is gone.
async fn listen(pool: PgPool, tx: broadcast::Sender<Signal>) {
    loop {
        let mut listener = match PgListener::connect_with(&pool).await {
            Ok(listener) => listener,
            Err(e) => {
                tracing::warn!(error = %e, "could not listen for other servers' writes; retrying");
                tokio::time::sleep(RELISTEN_AFTER).await;
                continue;
            }
        };
        if let Err(e) = listener.listen_all([RUN_EVENTS_CHANNEL, RUN_COMMANDS_CHANNEL, FEED_CHANNEL]).await {
            tracing::warn!(error = %e, "could not listen for other servers' writes; retrying");
            tokio::time::sleep(RELISTEN_AFTER).await;
            continue;
        }
        let _ = tx.send(Signal::Resync);
        loop {
            match listener.try_recv().await {
                Ok(Some(n)) => {
                    let signal = match n.channel() {
                        RUN_EVENTS_CHANNEL => Signal::RunEvents {
                            run_id: n.payload().rsplit_once(':').map_or(n.payload(), |(run, _)| run).to_owned(),
                        },
                        RUN_COMMANDS_CHANNEL => Signal::RunCommands { run_id: n.payload().to_owned() },
                        _ => Signal::Feed,
                    };
                    let _ = tx.send(signal);
                }
                // The connection was lost: listen again on a fresh one, then resync.
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "lost the connection listening for other servers' writes");
                    tokio::time::sleep(RELISTEN_AFTER).await;
                    break;
                }
            }
        }
    }
}
