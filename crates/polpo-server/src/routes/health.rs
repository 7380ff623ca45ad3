//! Liveness and what this host supports.

use crate::error::{RestError, ok};
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use polpo_core::hooks::capabilities::{HostHooks, capabilities};
use polpo_store::{Lease, PageRequest, RunFilter};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Longest the health check waits for the store: a hung database reads as not answering
/// instead of hanging the probe of a load balancer.
const STORE_PROBE: std::time::Duration = std::time::Duration::from_secs(2);

/// `GET /api/v1/health` (no auth): `{ok, data:{status, version, uptime}}` as in the reference,
/// plus what an operator of several servers needs: the store's kind and whether it answers
/// (`status` turns `degraded` when it does not), this server's worker id (the owner of its
/// run leases) and how many run leases it holds now.
pub async fn health(State(state): State<Arc<AppState>>) -> Json<Value> {
    let store = state.runtime.store();
    let (filter, page) = (RunFilter::default(), PageRequest { after: None, limit: 1 });
    let probe = store.runs.list_runs(&filter, &page);
    let answers = matches!(tokio::time::timeout(STORE_PROBE, probe).await, Ok(Ok(_)));
    ok(json!({
        "status": if answers { "ok" } else { "degraded" },
        "version": env!("CARGO_PKG_VERSION"),
        "uptime": state.started.elapsed().as_secs(),
        "store": {"kind": store.kind.as_str(), "ok": answers},
        "worker": {"id": state.runs.owner(), "leases": state.runs.leases_held()},
    }))
}

/// Most leases `GET /api/v1/workers` reads: the store's page cap.
const WORKER_LEASES: u32 = 1000;

/// `GET /api/v1/workers` (admin): the workers seen in the store — the distinct owners of the
/// leases on running runs, each with how many runs it holds and its newest lease expiry (an
/// expiry in the past is a worker that stopped renewing: a crash, until another takes over).
pub async fn workers(State(state): State<Arc<AppState>>) -> Result<Json<Value>, RestError> {
    let leases = state.runtime.store().runs.running_leases(WORKER_LEASES).await?;
    Ok(ok(workers_of(&leases)))
}

/// Group `leases` by owner, in owner order.
fn workers_of(leases: &[Lease]) -> Vec<Value> {
    let mut by_owner: BTreeMap<&str, (u64, &Lease)> = BTreeMap::new();
    for lease in leases {
        let entry = by_owner.entry(&lease.owner).or_insert((0, lease));
        entry.0 += 1;
        if lease.expires_at > entry.1.expires_at {
            entry.1 = lease;
        }
    }
    by_owner
        .into_iter()
        .map(|(id, (runs, newest))| json!({"id": id, "runs": runs, "leaseExpiresAt": newest.expires_at}))
        .collect()
}

/// `GET /v1/hooks/capabilities`: the hook contract this host implements, the same document
/// as `polpo hooks capabilities --json`, read from the runtime that actually runs the hooks.
pub async fn hook_capabilities(State(state): State<Arc<AppState>>) -> Json<Value> {
    let runtime = state.runtime.hook_runtime();
    Json(capabilities(HostHooks { hooks_enabled: runtime.enabled, managed: runtime.managed }))
}
