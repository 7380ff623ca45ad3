//! Approval requests of loop gates (collection `approvals`): reading and listing them,
//! approving or rejecting one (the run becomes `approval_approved` with the gate among its
//! `approvedGates`, or ends `approval_rejected`), and resuming an approved run from its last
//! checkpoint — the steps before the gate are not run again.

use crate::durable::{StoredLoopRun, get_record, scan};
use crate::error::LoopError;
use crate::executor::LoopExecutor;
use crate::record::{APPROVALS, ApprovalRecord, ApprovalStatus, ApprovedGate, LOOP_RUNS, LoopRunStatus, RunFailure};
use polpo_engine::events::EventKind;
use polpo_store::Cursor;
use serde::Serialize;
use std::sync::Arc;

/// A reviewer's decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Let the run go past the gate (an optional note).
    Approve(Option<String>),
    /// End the run `approval_rejected`, with the reviewer's feedback (required).
    Reject(String),
}

/// An approval request with its revision.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredApproval {
    /// The request.
    #[serde(flatten)]
    pub approval: ApprovalRecord,
    /// Bumped by every write.
    pub revision: u64,
    /// When it was requested.
    pub requested_at: chrono::DateTime<chrono::Utc>,
    /// When it was last written (resolved).
    pub updated_at: chrono::DateTime<chrono::Utc>,
}

fn parse(stored: polpo_store::Record) -> Result<StoredApproval, LoopError> {
    let approval = serde_json::from_value(stored.value)
        .map_err(|e| LoopError::RunRecordInvalid(format!("approval `{}`: {e}", stored.id)))?;
    Ok(StoredApproval {
        approval,
        revision: stored.revision,
        requested_at: stored.created_at,
        updated_at: stored.updated_at,
    })
}

fn to_value<T: Serialize>(value: &T) -> Result<serde_json::Value, LoopError> {
    serde_json::to_value(value).map_err(|e| LoopError::RunRecordInvalid(e.to_string()))
}

impl LoopExecutor {
    /// Approval request `id`, if API client `caller` sees its run (`None`: sees all).
    pub async fn approval(&self, id: &str, caller: Option<&str>) -> Result<StoredApproval, LoopError> {
        let store = &self.runs.runtime().store().records;
        get_record(store.as_ref(), APPROVALS, id)
            .await?
            .map(parse)
            .transpose()?
            .filter(|a| caller.is_none_or(|c| a.approval.owner.as_deref() == Some(c)))
            .ok_or_else(|| LoopError::ApprovalNotFound(id.to_owned()))
    }

    /// Approval requests `caller` sees, newest first, narrowed to `status`.
    pub async fn approvals(
        &self,
        caller: Option<&str>,
        status: Option<ApprovalStatus>,
        after: Option<Cursor>,
        limit: u32,
    ) -> Result<(Vec<StoredApproval>, Option<Cursor>), LoopError> {
        let store = self.runs.runtime().store().records.clone();
        let keep = |a: &StoredApproval| {
            caller.is_none_or(|c| a.approval.owner.as_deref() == Some(c))
                && status.is_none_or(|s| s == a.approval.status)
        };
        scan(store.as_ref(), APPROVALS, after, limit, parse, keep).await
    }

    /// Decide pending approval request `id` as `reviewer`: the request is stored resolved, and
    /// its run `approval_approved` (the gate approved) or `approval_rejected` (over).
    pub async fn resolve(
        &self,
        id: &str,
        caller: Option<&str>,
        reviewer: &str,
        decision: Decision,
    ) -> Result<StoredApproval, LoopError> {
        let store = self.runs.runtime().store().records.clone();
        let stored = self.approval(id, caller).await?;
        if stored.approval.status != ApprovalStatus::Pending {
            return Err(LoopError::NotResumable(format!("approval `{id}` is already resolved")));
        }
        let run = self.stored_run(&stored.approval.loop_run_id, caller).await?;
        if run.record.status != LoopRunStatus::AwaitingApproval || run.record.approval_request_id.as_deref() != Some(id)
        {
            return Err(LoopError::NotResumable(format!(
                "loop run `{}` does not wait on approval `{id}`",
                run.record.id
            )));
        }
        let mut approval = stored.approval;
        let mut record = run.record;
        approval.resolved_by = Some(reviewer.to_owned());
        match decision {
            Decision::Approve(note) => {
                approval.status = ApprovalStatus::Approved;
                approval.note = note;
                record.status = LoopRunStatus::ApprovalApproved;
                record.approved_gates.push(ApprovedGate {
                    gate: approval.gate.clone(),
                    approval_request_id: id.to_owned(),
                    resolved_by: reviewer.to_owned(),
                });
            }
            Decision::Reject(feedback) => {
                approval.status = ApprovalStatus::Rejected;
                record.status = LoopRunStatus::ApprovalRejected;
                record.error = Some(RunFailure {
                    code: "approval_rejected".into(),
                    message: format!("approval `{id}` was rejected by {reviewer}: {feedback}"),
                });
                approval.note = Some(feedback);
            }
        }
        // The approval first, by compare-and-set: of two reviewers racing, one wins.
        let written = store.put_record(APPROVALS, id, to_value(&approval)?, Some(stored.revision)).await?;
        store.put_record(LOOP_RUNS, &record.id, to_value(&record)?, Some(run.revision)).await?;
        approval.announce(self.runs.runtime().events(), EventKind::ApprovalResolved);
        Ok(StoredApproval {
            approval,
            revision: written.revision,
            requested_at: written.created_at,
            updated_at: written.updated_at,
        })
    }

    /// Resume approved run `id` in the background from its last checkpoint, past the
    /// approved gate; the run as it was when the resume started.
    pub async fn resume_approved(self: &Arc<Self>, id: &str, caller: Option<&str>) -> Result<StoredLoopRun, LoopError> {
        let run = self.stored_run(id, caller).await?;
        if run.record.status != LoopRunStatus::ApprovalApproved {
            return Err(LoopError::NotResumable(format!(
                "loop run `{id}` is {}, not approval_approved",
                serde_json::to_value(run.record.status).unwrap_or_default()
            )));
        }
        let config = self
            .runs
            .runtime()
            .loaded()
            .project
            .loops
            .get(&run.record.loop_id)
            .map(|l| l.config.clone())
            .ok_or_else(|| LoopError::NotFound(run.record.loop_id.clone()))?;
        let exec = self.clone();
        let (record, revision) = (run.record.clone(), run.revision);
        tokio::spawn(async move {
            let finished = exec.resume(record, revision, &config, &|_| {}).await;
            if let Err(e) = finished.result {
                tracing::warn!(run = finished.run_id, code = e.code(), "resumed loop run ended: {e}");
            }
        });
        Ok(run)
    }
}
