//! `Idempotency-Key`: the same key with the same body gives the same response and never a
//! second run.
//!
//! Keys are kept in the project store (collection `idempotency`), so a retry after a server
//! restart is still recognised, and on PostgreSQL several servers share them. A key is
//! scoped to the caller's API key, so one tenant cannot replay another's response. The first
//! request claims the key with a create-only write; a concurrent duplicate gets `409
//! idempotency_in_progress`, a different body under the same key `422 idempotency_key_reused`.
//! Only successful completions are remembered: a failed attempt releases the key, so a retry
//! really retries (a provider outage must not be replayed forever). A claim left behind by a
//! crash expires after [`PENDING_TTL`].

use crate::error::ApiError;
use chrono::Utc;
use polpo_store::{Store, StoreError};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// Store collection of remembered responses.
pub const COLLECTION: &str = "idempotency";
/// Longest key accepted.
pub const MAX_KEY_LEN: usize = 255;
/// A pending claim older than this is considered abandoned (its server died).
pub const PENDING_TTL: chrono::Duration = chrono::Duration::minutes(15);

/// A claimed key, to be completed or released.
#[derive(Debug)]
pub struct Claim {
    id: String,
    request_hash: String,
}

/// What looking up a key found.
#[derive(Debug)]
pub enum Lookup {
    /// First use: run the request, then [`complete`] or [`release`].
    Claimed(Claim),
    /// Already answered: replay this stored response.
    Replay(Value),
}

/// Claim `key` for a request with `body`, or find its stored response.
pub async fn claim(store: &Store, caller: &str, key: &str, body: &[u8]) -> Result<Lookup, ApiError> {
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        return Err(ApiError::invalid(format!("Idempotency-Key must be 1-{MAX_KEY_LEN} characters")));
    }
    let id = hex::encode(Sha256::digest(format!("{caller}\n{key}")));
    let request_hash = hex::encode(Sha256::digest(body));
    let pending = json!({"state": "pending", "requestHash": request_hash, "claimedAt": Utc::now()});
    for _ in 0..2 {
        match store.records.put_record(COLLECTION, &id, pending.clone(), Some(0)).await {
            Ok(_) => return Ok(Lookup::Claimed(Claim { id, request_hash })),
            Err(StoreError::Conflict(_)) => {}
            Err(e) => return Err(e.into()),
        }
        let Some(existing) = store.records.get_record(COLLECTION, &id).await? else { continue };
        if existing.value["requestHash"] != request_hash.as_str() {
            return Err(ApiError::new("idempotency_key_reused", "this Idempotency-Key was used with a different request body"));
        }
        if existing.value["state"] == "done" {
            return Ok(Lookup::Replay(existing.value["response"].clone()));
        }
        let abandoned = serde_json::from_value::<chrono::DateTime<Utc>>(existing.value["claimedAt"].clone()).is_ok_and(|t| Utc::now() - t > PENDING_TTL);
        if !abandoned {
            return Err(ApiError::new("idempotency_in_progress", "a request with this Idempotency-Key is still running"));
        }
        // Take over an abandoned claim, but only at the revision we saw.
        if store.records.put_record(COLLECTION, &id, pending.clone(), Some(existing.revision)).await.is_ok() {
            return Ok(Lookup::Claimed(Claim { id, request_hash }));
        }
    }
    Err(ApiError::new("idempotency_in_progress", "a request with this Idempotency-Key is still running"))
}

/// Remember `response` (body and the headers a replay must repeat) for the claimed key.
pub async fn complete(store: &Store, claim: Claim, response: Value) -> Result<(), ApiError> {
    let done = json!({"state": "done", "requestHash": claim.request_hash, "response": response, "completedAt": Utc::now()});
    store.records.put_record(COLLECTION, &claim.id, done, None).await?;
    Ok(())
}

/// Give the key back after a failure, so a retry runs again.
pub async fn release(store: &Store, claim: Claim) {
    if let Err(e) = store.records.delete_record(COLLECTION, &claim.id, None).await {
        tracing::warn!(code = e.code(), "could not release an idempotency key; it expires on its own");
    }
}
