//! `Idempotency-Key`: the same key with the same body gives the same response and never a
//! second run.
//!
//! Keys are kept in the project store (collection `idempotency`), so a retry after a server
//! restart is still recognised, and on PostgreSQL several servers share them. A key is
//! scoped to the caller's API key, so one tenant cannot replay another's response. The first
//! request claims the key with a create-only write; a concurrent duplicate gets `409
//! idempotency_in_progress`, a different body under the same key `422 idempotency_key_reused`.
//! Only successful completions are remembered: a failed attempt releases the key, so a retry
//! really retries (a provider outage must not be replayed forever). A [`Claim`] is settled
//! once, by how the request ended; one dropped unsettled (its request was cancelled) releases
//! itself. A claim left behind by a crash expires after [`PENDING_TTL`].

use crate::error::{ApiError, ErrorCode};
use chrono::{DateTime, Utc};
use polpo_store::{Clock, Store, StoreError};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::sync::Arc;

/// Store collection of remembered responses.
pub const COLLECTION: &str = "idempotency";
/// Longest key accepted.
pub const MAX_KEY_LEN: usize = 255;
/// A pending claim older than this is considered abandoned (its server died).
pub const PENDING_TTL: chrono::Duration = chrono::Duration::minutes(15);

/// A claimed key: [`Claim::settle`] it by how the request ended. Dropped unsettled — the
/// request was cancelled, its client went away — it releases the key on its own, so a retry
/// runs again.
#[derive(Debug)]
pub struct Claim {
    store: Store,
    clock: Arc<dyn Clock>,
    id: String,
    request_hash: String,
    settled: bool,
}

/// How a request that held a claim ended.
#[derive(Debug)]
pub enum Settlement {
    /// It was answered: replay this response for the same key and body.
    Answered(Value),
    /// It failed: give the key back, so a retry really retries.
    Failed,
    /// It goes on elsewhere (a durable run handed over by a stopping server): keep the key
    /// claimed, so a retry cannot start a second run; it expires after [`PENDING_TTL`].
    HandedOver,
}

/// What looking up a key found.
#[derive(Debug)]
pub enum Lookup {
    /// First use: run the request, then [`Claim::settle`].
    Claimed(Claim),
    /// Already answered: replay this stored response.
    Replay(Value),
}

/// Claim `key` for a request with `body`, or find its stored response; times come from
/// `clock`.
pub async fn claim(
    store: &Store,
    clock: &Arc<dyn Clock>,
    caller: &str,
    key: &str,
    body: &[u8],
) -> Result<Lookup, ApiError> {
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        return Err(ApiError::invalid(format!("Idempotency-Key must be 1-{MAX_KEY_LEN} characters")));
    }
    let id = hex::encode(Sha256::digest(format!("{caller}\n{key}")));
    let request_hash = hex::encode(Sha256::digest(body));
    let claimed = |id: String, request_hash: String| {
        Lookup::Claimed(Claim { store: store.clone(), clock: clock.clone(), id, request_hash, settled: false })
    };
    let pending = json!({"state": "pending", "requestHash": request_hash, "claimedAt": clock.now()});
    for _ in 0..2 {
        match store.records.put_record(COLLECTION, &id, pending.clone(), Some(0)).await {
            Ok(_) => return Ok(claimed(id, request_hash)),
            Err(StoreError::Conflict(_)) => {}
            Err(e) => return Err(e.into()),
        }
        let Some(existing) = store.records.get_record(COLLECTION, &id).await? else { continue };
        if existing.value["requestHash"] != request_hash.as_str() {
            return Err(ApiError::new(
                ErrorCode::IdempotencyKeyReused,
                "this Idempotency-Key was used with a different request body",
            ));
        }
        if existing.value["state"] == "done" {
            return Ok(Lookup::Replay(existing.value["response"].clone()));
        }
        let abandoned = serde_json::from_value::<DateTime<Utc>>(existing.value["claimedAt"].clone())
            .is_ok_and(|t| clock.now() - t > PENDING_TTL);
        if !abandoned {
            return Err(ApiError::new(
                ErrorCode::IdempotencyInProgress,
                "a request with this Idempotency-Key is still running",
            ));
        }
        // Take over an abandoned claim, but only at the revision we saw.
        if store.records.put_record(COLLECTION, &id, pending.clone(), Some(existing.revision)).await.is_ok() {
            return Ok(claimed(id, request_hash));
        }
    }
    Err(ApiError::new(ErrorCode::IdempotencyInProgress, "a request with this Idempotency-Key is still running"))
}

impl Claim {
    /// The request's id: the same for every attempt of this request (the caller's key and
    /// body), different for any other request, so what one attempt leaves for the request
    /// (an approval a hook asked for) only its retries find.
    pub fn request_id(&self) -> String {
        format!("idem-{}", hex::encode(&Sha256::digest(format!("{}\n{}", self.id, self.request_hash))[..16]))
    }

    /// Settle the key by how its request ended. Fails only when an answer could not be
    /// remembered (the key is then left to expire).
    pub async fn settle(mut self, how: Settlement) -> Result<(), ApiError> {
        self.settled = true;
        match how {
            Settlement::Answered(response) => {
                let done = json!({"state": "done", "requestHash": self.request_hash, "response": response, "completedAt": self.clock.now()});
                self.store.records.put_record(COLLECTION, &self.id, done, None).await?;
            }
            Settlement::Failed => release(&self.store, &self.id).await,
            Settlement::HandedOver => {}
        }
        Ok(())
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (store, id) = (self.store.clone(), std::mem::take(&mut self.id));
            runtime.spawn(async move { release(&store, &id).await });
        }
    }
}

/// Give key `id` back, so a retry runs again.
async fn release(store: &Store, id: &str) {
    if let Err(e) = store.records.delete_record(COLLECTION, id, None).await {
        tracing::warn!(code = e.code(), "could not release an idempotency key; it expires on its own");
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use polpo_store::{StoreKind, SystemClock, open_store};
    use std::time::Duration;

    async fn lookup(store: &Store, key: &str) -> Result<Lookup, ApiError> {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        claim(store, &clock, "client", key, b"{\"same\":\"body\"}").await
    }

    fn claimed(found: Result<Lookup, ApiError>) -> Claim {
        match found {
            Ok(Lookup::Claimed(claim)) => claim,
            other => panic!("expected a fresh claim, got {other:?}"),
        }
    }

    fn in_progress(found: Result<Lookup, ApiError>) -> bool {
        matches!(found, Err(e) if e.code == "idempotency_in_progress")
    }

    #[tokio::test]
    async fn a_claim_is_settled_by_how_its_request_ended_and_released_when_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let store = open_store(StoreKind::File, dir.path(), None, Arc::new(SystemClock)).await.unwrap();

        // Answered: the same key and body replay the response.
        claimed(lookup(&store, "answered").await)
            .settle(Settlement::Answered(json!({"id": "chatcmpl-1"})))
            .await
            .unwrap();
        assert!(matches!(lookup(&store, "answered").await, Ok(Lookup::Replay(v)) if v == json!({"id": "chatcmpl-1"})));

        // Failed: the key is free again at once.
        claimed(lookup(&store, "failed").await).settle(Settlement::Failed).await.unwrap();
        claimed(lookup(&store, "failed").await).settle(Settlement::Failed).await.unwrap();

        // Handed over: the run goes on elsewhere, so the key stays claimed.
        claimed(lookup(&store, "handed-over").await).settle(Settlement::HandedOver).await.unwrap();
        assert!(in_progress(lookup(&store, "handed-over").await));

        // Dropped unsettled (its client went away): the key comes back on its own.
        let dropped = claimed(lookup(&store, "dropped").await);
        assert!(in_progress(lookup(&store, "dropped").await));
        drop(dropped);
        let again = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                match lookup(&store, "dropped").await {
                    Ok(Lookup::Claimed(claim)) => return claim,
                    other => assert!(in_progress(other), "only the pending release may stand in the way"),
                }
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the dropped claim is released");
        again.settle(Settlement::Failed).await.unwrap();
    }
}
