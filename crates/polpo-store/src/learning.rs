//! Memory learning's durable state: the outbox of committed turns waiting for extraction and
//! the reviewable memory candidates extraction proposes, kept as revisioned records
//! ([`RecordStore`]) so every backend holds them with the same guarantees (atomic durable
//! writes, compare-and-set on `revision`, keyset pages).
//!
//! The outbox is what makes learning survive a crash: a job is written right after its turn is
//! committed and deleted only once its candidates are stored. Its id is derived from the turn,
//! the extractor revision and the policy revision, and each candidate's id from the job id and
//! its position, so a retried job (after a crash, or twice by two servers) never stores a
//! candidate twice.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::error::StoreError;
use crate::memory::MemoryScope;
use crate::model::Record;
use crate::page::{Page, PageRequest};
use crate::traits::RecordStore;

/// The outbox collection: one record per turn waiting for extraction.
pub const OUTBOX_COLLECTION: &str = "memory-learning-outbox";
/// Candidates of one agent live in `memory-candidates.<agent>`, so listing one agent's reads
/// nobody else's.
const CANDIDATE_PREFIX: &str = "memory-candidates.";
/// Most audit entries one candidate keeps (a candidate is decided a handful of times at most).
pub const MAX_AUDIT: usize = 32;

/// Where a candidate stands in review.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CandidateStatus {
    /// Waiting for a reviewer (or for the automatic policy, which left it here).
    Pending,
    /// A reviewer accepted it; `apply` turns it into a memory item.
    Approved,
    /// A reviewer refused it; it is never applied.
    Rejected,
    /// It became a memory item (`memory_id`).
    Applied,
}

impl CandidateStatus {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            CandidateStatus::Pending => "pending",
            CandidateStatus::Approved => "approved",
            CandidateStatus::Rejected => "rejected",
            CandidateStatus::Applied => "applied",
        }
    }

    /// Parse the wire spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "pending" => CandidateStatus::Pending,
            "approved" => CandidateStatus::Approved,
            "rejected" => CandidateStatus::Rejected,
            "applied" => CandidateStatus::Applied,
            _ => return None,
        })
    }
}

/// The committed turn a job or candidate came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SourceTurn {
    /// The session it was stored in.
    pub session_id: String,
    /// The run it reported under (one committed turn per run).
    pub run_id: String,
}

/// One thing that happened to a candidate, oldest first in [`MemoryCandidate::audit`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditEntry {
    /// When.
    pub at: DateTime<Utc>,
    /// `proposed`, `approved`, `rejected`, `applied`, `policy_applied`, `policy_held`.
    pub action: String,
    /// Who: a key id, `local` (no keys), or `policy` / `extractor:<revision>`.
    pub actor: String,
    /// Why, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A proposed memory item waiting for review.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryCandidate {
    /// Its id (derived from the job that proposed it).
    pub id: String,
    /// The agent whose turn it was learnt from.
    pub agent: String,
    /// Whose memory the item would join (the turn's trusted user).
    pub scope: MemoryScope,
    /// The proposed item's kind.
    pub kind: String,
    /// The proposed item's content.
    pub content: String,
    /// The turn it was learnt from.
    pub source_turn: SourceTurn,
    /// Where it stands.
    pub status: CandidateStatus,
    /// The memory item it became, once applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_id: Option<String>,
    /// Who decided it last (a key id, `local`, or `policy`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reviewer: Option<String>,
    /// What happened to it, oldest first (at most [`MAX_AUDIT`] entries).
    #[serde(default)]
    pub audit: Vec<AuditEntry>,
    /// Store revision; pass it back as `expectedRevision`.
    #[serde(default)]
    pub revision: u64,
    /// When it was proposed.
    #[serde(default = "epoch")]
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    #[serde(default = "epoch")]
    pub updated_at: DateTime<Utc>,
}

fn epoch() -> DateTime<Utc> {
    DateTime::UNIX_EPOCH
}

impl MemoryCandidate {
    /// Record `action` by `actor` at `at`, keeping the newest [`MAX_AUDIT`] entries.
    pub fn audit(&mut self, at: DateTime<Utc>, action: &str, actor: &str, reason: Option<String>) {
        self.audit.push(AuditEntry { at, action: action.into(), actor: actor.into(), reason });
        let excess = self.audit.len().saturating_sub(MAX_AUDIT);
        self.audit.drain(..excess);
    }
}

/// A committed turn waiting for extraction: only its visible text, never tool payloads or
/// hidden reasoning.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LearningJob {
    /// `(turn, extractor revision, policy revision)` as one id ([`LearningJob::key`]).
    pub id: String,
    /// The agent.
    pub agent: String,
    /// The trusted user the turn belongs to (the authenticated key, or `local`).
    pub user: String,
    /// Where the turn is stored.
    pub turn: SourceTurn,
    /// What the user said in this turn (visible text only, bounded by the caller).
    pub user_text: String,
    /// The assistant's visible answer (bounded by the caller).
    pub answer: String,
    /// Which extractor the job is for.
    pub extractor_revision: String,
    /// Which policy the job is for.
    pub policy_revision: String,
    /// Failed extraction attempts so far.
    #[serde(default)]
    pub attempts: u32,
    /// The last failure's message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Store revision.
    #[serde(default)]
    pub revision: u64,
}

impl LearningJob {
    /// The job id of `run_id` for this extractor and policy revision: a digest, so any run id
    /// or revision string makes a valid record id of fixed length.
    pub fn key(run_id: &str, extractor_revision: &str, policy_revision: &str) -> String {
        let mut h = Sha256::new();
        for part in [run_id, extractor_revision, policy_revision] {
            h.update(part.len().to_le_bytes());
            h.update(part.as_bytes());
        }
        format!("lj-{}", &hex::encode(h.finalize())[..40])
    }

    /// The id of the job's `index`-th candidate: the same on every retry.
    pub fn candidate_id(&self, index: usize) -> String {
        format!("mc-{}-{index}", self.id.trim_start_matches("lj-"))
    }
}

/// The learning outbox and candidates over one [`RecordStore`]. Cheap to clone.
#[derive(Clone)]
pub struct LearningStore {
    records: Arc<dyn RecordStore>,
}

impl std::fmt::Debug for LearningStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LearningStore").finish_non_exhaustive()
    }
}

impl LearningStore {
    /// Learning state kept in `records`.
    pub fn new(records: Arc<dyn RecordStore>) -> Self {
        LearningStore { records }
    }

    /// Put `job` in the outbox; `false` when a job with its id is already there (the same
    /// turn for the same revisions: nothing to add).
    pub async fn enqueue(&self, job: &LearningJob) -> Result<bool, StoreError> {
        match self.records.put_record(OUTBOX_COLLECTION, &job.id, to_value(job)?, Some(0)).await {
            Ok(_) => Ok(true),
            Err(StoreError::Conflict(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Up to `limit` jobs waiting, oldest last (newest first, as records list).
    pub async fn pending(&self, limit: u32) -> Result<Vec<LearningJob>, StoreError> {
        let page = self.records.list_records(OUTBOX_COLLECTION, &PageRequest::first(limit)).await?;
        page.items.iter().map(job_of).collect()
    }

    /// The job, or `None` once it is done.
    pub async fn job(&self, id: &str) -> Result<Option<LearningJob>, StoreError> {
        self.records.get_record(OUTBOX_COLLECTION, id).await?.as_ref().map(job_of).transpose()
    }

    /// Count a failed attempt on `job` (at its revision; a `conflict` means another worker
    /// moved it).
    pub async fn failed(&self, job: &LearningJob, error: &str) -> Result<LearningJob, StoreError> {
        let mut next = job.clone();
        next.attempts += 1;
        next.last_error = Some(error.chars().take(500).collect());
        let record = self.records.put_record(OUTBOX_COLLECTION, &job.id, to_value(&next)?, Some(job.revision)).await?;
        job_of(&record)
    }

    /// Take `job` out of the outbox once its candidates are stored; `false` when it was gone.
    pub async fn done(&self, job_id: &str) -> Result<bool, StoreError> {
        self.records.delete_record(OUTBOX_COLLECTION, job_id, None).await
    }

    /// Store a new candidate (status as given, revision 1); `None` when its id is taken (a
    /// retried job proposing again).
    pub async fn propose(&self, candidate: &MemoryCandidate) -> Result<Option<MemoryCandidate>, StoreError> {
        let collection = candidates_of(&candidate.agent)?;
        match self.records.put_record(&collection, &candidate.id, to_value(candidate)?, Some(0)).await {
            Ok(record) => candidate_of(&record).map(Some),
            Err(StoreError::Conflict(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The candidate `id` of `agent`, or `None`.
    pub async fn get(&self, agent: &str, id: &str) -> Result<Option<MemoryCandidate>, StoreError> {
        self.records.get_record(&candidates_of(agent)?, id).await?.as_ref().map(candidate_of).transpose()
    }

    /// Write `candidate` back, only if it is still at `expected_revision` (`conflict`
    /// otherwise); returns it with its new revision.
    pub async fn save(
        &self,
        candidate: &MemoryCandidate,
        expected_revision: u64,
    ) -> Result<MemoryCandidate, StoreError> {
        let collection = candidates_of(&candidate.agent)?;
        let record =
            self.records.put_record(&collection, &candidate.id, to_value(candidate)?, Some(expected_revision)).await?;
        candidate_of(&record)
    }

    /// One page of `agent`'s candidates, newest first. A page may hold fewer items than asked
    /// when `keep` filters some out; `next` still says where the listing goes on.
    pub async fn list(
        &self,
        agent: &str,
        page: &PageRequest,
        keep: impl Fn(&MemoryCandidate) -> bool,
    ) -> Result<Page<MemoryCandidate>, StoreError> {
        let records = self.records.list_records(&candidates_of(agent)?, page).await?;
        let mut items = Vec::with_capacity(records.items.len());
        for record in &records.items {
            let candidate = candidate_of(record)?;
            if keep(&candidate) {
                items.push(candidate);
            }
        }
        Ok(Page { items, next: records.next })
    }
}

fn candidates_of(agent: &str) -> Result<String, StoreError> {
    let collection = format!("{CANDIDATE_PREFIX}{agent}");
    crate::model::validate_id("collection", &collection)?;
    Ok(collection)
}

fn to_value<T: Serialize>(v: &T) -> Result<Value, StoreError> {
    serde_json::to_value(v).map_err(|e| StoreError::Invalid(e.to_string()))
}

fn job_of(record: &Record) -> Result<LearningJob, StoreError> {
    let mut job: LearningJob = serde_json::from_value(record.value.clone())
        .map_err(|e| StoreError::Database(format!("a learning job is unreadable: {e}")))?;
    job.revision = record.revision;
    Ok(job)
}

fn candidate_of(record: &Record) -> Result<MemoryCandidate, StoreError> {
    let mut c: MemoryCandidate = serde_json::from_value(record.value.clone())
        .map_err(|e| StoreError::Database(format!("a memory candidate is unreadable: {e}")))?;
    c.revision = record.revision;
    c.created_at = record.created_at;
    c.updated_at = record.updated_at;
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_keys_are_stable_distinct_and_valid_record_ids() {
        let a = LearningJob::key("run-1", "model-1", "1");
        assert_eq!(a, LearningJob::key("run-1", "model-1", "1"));
        assert_ne!(a, LearningJob::key("run-1", "model-2", "1"));
        assert_ne!(a, LearningJob::key("run-1m", "odel-1", "1"), "parts are length-prefixed");
        assert!(crate::model::validate_id("record", &a).is_ok());
    }
}
