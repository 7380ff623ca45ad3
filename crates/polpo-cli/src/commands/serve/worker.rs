//! `polpo serve --worker-id`: one live server per worker id on a shared store.
//!
//! A worker id names the leases of the runs a server executes, so two live servers with one
//! id would renew each other's leases and write under each other's fences. A server started
//! with `--worker-id` therefore holds the record `workers/<id>` in the store, its heartbeat
//! renewed every third of the run lease time by compare-and-set on the record's revision:
//! while the heartbeat is fresher than one lease time, another server refuses the id
//! (`worker_id_in_use`); once it is older (its server died), the next server takes it over.
//! A clean stop deletes the record, so a restart takes the id at once.

use anyhow::anyhow;
use chrono::{DateTime, Utc};
use polpo_engine::Runtime;
use polpo_store::{Record, StoreError};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::{CancellationToken, DropGuard};

/// The store collection of held worker ids.
const WORKERS: &str = "workers";

/// What `workers/<id>` says about the server holding the id.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Holder {
    /// The holding server's process id (for the operator reading the refusal).
    pid: u32,
    /// When it took the id.
    started_at: DateTime<Utc>,
    /// Its last heartbeat, by the store's clock.
    heartbeat_at: DateTime<Utc>,
}

/// The held worker id: heartbeats go on until it is released (or dropped).
pub struct HeldWorkerId {
    stop: DropGuard,
    heartbeat: tokio::task::JoinHandle<Option<Record>>,
    runtime: Arc<Runtime>,
    id: String,
}

/// Take worker id `id` for this process, or refuse with `worker_id_in_use` while another
/// server's heartbeat on it is fresher than `ttl` (the run lease time).
pub async fn hold(runtime: Arc<Runtime>, id: &str, ttl: Duration) -> anyhow::Result<HeldWorkerId> {
    let records = &runtime.store().records;
    let now = runtime.clock().now();
    let stale = chrono::Duration::from_std(ttl)?;
    let expected = match records.get_record(WORKERS, id).await.map_err(coded)? {
        None => 0,
        Some(record) => {
            let holder: Option<Holder> = serde_json::from_value(record.value.clone()).ok();
            if let Some(holder) = holder.filter(|h| now < h.heartbeat_at + stale) {
                let age = (now - holder.heartbeat_at).num_milliseconds().max(0);
                return Err(anyhow!(
                    "worker_id_in_use: worker id `{id}` is held by a live server (pid {}, started {}, last \
                     heartbeat {age} ms ago); give this server another --worker-id, or stop that one",
                    holder.pid,
                    holder.started_at.to_rfc3339()
                ));
            }
            record.revision
        }
    };
    let holder = Holder { pid: std::process::id(), started_at: now, heartbeat_at: now };
    let record = match records.put_record(WORKERS, id, to_value(&holder), Some(expected)).await {
        Ok(record) => record,
        Err(StoreError::Conflict(_)) => {
            return Err(anyhow!("worker_id_in_use: another server took worker id `{id}` at the same moment"));
        }
        Err(e) => return Err(coded(e)),
    };
    let stop = CancellationToken::new();
    let heartbeat = tokio::spawn(beat(runtime.clone(), id.to_owned(), holder, record, ttl / 3, stop.clone()));
    Ok(HeldWorkerId { stop: stop.drop_guard(), heartbeat, runtime, id: id.to_owned() })
}

impl HeldWorkerId {
    /// Stop the heartbeat and give the id up (a clean stop), so a restart takes it at once.
    pub async fn release(self) {
        drop(self.stop);
        let Ok(Some(record)) = self.heartbeat.await else { return };
        let records = &self.runtime.store().records;
        if let Err(e) = records.delete_record(WORKERS, &self.id, Some(record.revision)).await {
            eprintln!("warning: worker id `{}` not released: {}: {e}", self.id, e.code());
        }
    }
}

/// Renew the heartbeat every `every` until `stop`; the record last written when still ours,
/// `None` once another server took the id over (this one was presumed dead: paused too long).
async fn beat(
    runtime: Arc<Runtime>,
    id: String,
    mut holder: Holder,
    mut record: Record,
    every: Duration,
    stop: CancellationToken,
) -> Option<Record> {
    loop {
        tokio::select! {
            () = stop.cancelled() => return Some(record),
            () = tokio::time::sleep(every) => {}
        }
        holder.heartbeat_at = runtime.clock().now();
        let records = &runtime.store().records;
        match records.put_record(WORKERS, &id, to_value(&holder), Some(record.revision)).await {
            Ok(next) => record = next,
            Err(StoreError::Conflict(_)) => {
                eprintln!(
                    "warning: worker id `{id}` was taken over by another server (this one missed its heartbeats); \
                     its run leases fence this server's writes"
                );
                return None;
            }
            Err(e) => eprintln!("warning: worker id `{id}` heartbeat failed: {}: {e}", e.code()),
        }
    }
}

fn to_value(holder: &Holder) -> Value {
    serde_json::to_value(holder).unwrap_or_default()
}

fn coded(e: StoreError) -> anyhow::Error {
    anyhow!("{}: {e}", e.code())
}
