//! Approval requests (collection `approvals`, the engine's `ApprovalRecord`): reading and
//! listing them, approving or rejecting one, and what the decision does. A loop gate's run
//! becomes `approval_approved` with the gate among its `approvedGates` (resumed from its last
//! checkpoint by `resume_approved` — the steps before the gate are not run again), or ends
//! `approval_rejected`. A hook-asked tool call's durable run resumes at once, and the call
//! runs or is refused as decided; an inline chat's request waits for its client's retry. A
//! request with a `timeout` is decided by the server (`timeoutAction`) once its deadline
//! passes, also when it passed while no server ran.

use crate::durable::{StoredLoopRun, get_record, scan};
use crate::error::LoopError;
use crate::executor::LoopExecutor;
use crate::record::{APPROVALS, ApprovalStatus, ApprovedGate, LOOP_RUNS, LoopRunStatus, RunFailure};
use chrono::{DateTime, Utc};
use polpo_core::loops::config::TimeoutAction;
use polpo_engine::events::EventKind;
use polpo_store::Cursor;
use serde::Serialize;
use std::sync::Arc;

/// The reviewer recorded on an approval the server decided because its time ran out.
pub const TIMEOUT_REVIEWER: &str = "timeout";

/// Approvals one page of the timeout pass reads.
const TIMEOUT_PAGE: u32 = 200;

/// How long the timeout enforcer waits before trying again after the store failed.
const TIMEOUT_RETRY: std::time::Duration = std::time::Duration::from_secs(5);

/// A reviewer's decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Let the run go past the gate (an optional note).
    Approve(Option<String>),
    /// End the run `approval_rejected`, with the reviewer's feedback (required).
    Reject(String),
}

pub use polpo_engine::approvals::StoredApproval;

fn parse(stored: polpo_store::Record) -> Result<StoredApproval, LoopError> {
    let id = stored.id.clone();
    StoredApproval::parse(stored).map_err(|e| LoopError::RunRecordInvalid(format!("approval `{id}`: {e}")))
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
        let Some(gate) = stored.approval.loop_gate() else {
            return self.resolve_tool_call(stored, reviewer, decision).await;
        };
        let run = self.stored_record(&gate.loop_run_id, caller).await?;
        if run.record.status != LoopRunStatus::AwaitingApproval || run.record.approval_request_id.as_deref() != Some(id)
        {
            return Err(LoopError::NotResumable(format!(
                "loop run `{}` does not wait on approval `{id}`",
                run.record.id
            )));
        }
        let gate = gate.gate.clone();
        let mut approval = stored.approval;
        let mut record = run.record;
        approval.resolved_by = Some(reviewer.to_owned());
        match decision {
            Decision::Approve(note) => {
                approval.status = ApprovalStatus::Approved;
                approval.note = note;
                record.status = LoopRunStatus::ApprovalApproved;
                record.approved_gates.push(ApprovedGate {
                    gate,
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

    /// Decide a hook-asked tool call's request: stored resolved (by compare-and-set, so of two
    /// reviewers one wins), announced, and its durable run — paused waiting for it — resumed,
    /// where the call runs (approved) or the model is told it was refused (rejected).
    async fn resolve_tool_call(
        &self,
        stored: StoredApproval,
        reviewer: &str,
        decision: Decision,
    ) -> Result<StoredApproval, LoopError> {
        let store = self.runs.runtime().store().records.clone();
        let mut approval = stored.approval;
        approval.resolved_by = Some(reviewer.to_owned());
        let status = match decision {
            Decision::Approve(note) => {
                approval.note = note;
                approval.status = ApprovalStatus::Approved;
                "approved"
            }
            Decision::Reject(feedback) => {
                approval.note = Some(feedback);
                approval.status = ApprovalStatus::Rejected;
                "rejected"
            }
        };
        let written = store.put_record(APPROVALS, &approval.id, to_value(&approval)?, Some(stored.revision)).await?;
        approval.announce(self.runs.runtime().events(), EventKind::ApprovalResolved);
        if let Some(call) = approval.tool_call().filter(|c| c.durable)
            && let Err(e) = self.runs.approval_decided(&call.run_id, &approval.id, status, reviewer).await
        {
            // The decision is stored: a run whose lease is still held (its server died while
            // pausing) is resumed by the next recovery pass once the lease lapses.
            tracing::warn!(run = call.run_id, approval = approval.id, code = e.code(), "run not resumed: {e}");
        }
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
        let run = self.stored_record(id, caller).await?;
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
        self.with_whole_trace(run).await
    }

    /// Decide every pending approval whose deadline has passed (by the store's clock) as its
    /// rule's `timeoutAction` says — a rejection ends the run `approval_rejected` with a note
    /// that it timed out, an approval resumes the run — and return the earliest deadline
    /// still ahead.
    pub async fn expire_approvals(self: &Arc<Self>) -> Result<Option<DateTime<Utc>>, LoopError> {
        let store = self.runs.runtime().store().records.clone();
        let now = self.runs.runtime().clock().now();
        let (mut after, mut next) = (None, None::<DateTime<Utc>>);
        loop {
            let waiting = |a: &StoredApproval| a.approval.status == ApprovalStatus::Pending;
            let (page, cursor) = scan(store.as_ref(), APPROVALS, after, TIMEOUT_PAGE, parse, waiting).await?;
            for approval in page.into_iter().map(|a| a.approval) {
                let Some(deadline) = approval.deadline else { continue };
                if deadline > now {
                    next = Some(next.map_or(deadline, |n| n.min(deadline)));
                    continue;
                }
                let within = approval.timeout.as_deref().unwrap_or("its timeout");
                let approve = approval.timeout_action == Some(TimeoutAction::Approve);
                let decision = if approve {
                    Decision::Approve(Some(format!("approved when it timed out: nobody answered within {within}")))
                } else {
                    Decision::Reject(format!("timed out: nobody answered within {within}"))
                };
                // A reviewer or a cancel that got there first wins; the pass goes on.
                let decided = match self.resolve(&approval.id, None, TIMEOUT_REVIEWER, decision).await {
                    Ok(_) if approve && let Some(gate) = approval.loop_gate() => {
                        self.resume_approved(&gate.loop_run_id, None).await.map(|_| ())
                    }
                    other => other.map(|_| ()),
                };
                if let Err(e) = decided {
                    tracing::warn!(approval = approval.id, code = e.code(), "timed-out approval not decided: {e}");
                }
            }
            match cursor {
                Some(c) => after = Some(c),
                None => return Ok(next),
            }
        }
    }

    /// The server's timeout enforcer: a pass at once (deadlines that ran out while no server
    /// was up), then one when the earliest pending deadline comes or a new one is requested.
    pub async fn enforce_approval_timeouts(self: Arc<Self>) {
        loop {
            let wait = match self.expire_approvals().await {
                Ok(next) => next.map(|at| (at - self.runs.runtime().clock().now()).to_std().unwrap_or_default()),
                Err(e) => {
                    tracing::error!(code = e.code(), "approval timeouts could not be checked: {e}");
                    Some(TIMEOUT_RETRY)
                }
            };
            match wait {
                Some(wait) => {
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        () = self.runs.runtime().approval_deadlines().notified() => {}
                    }
                }
                None => self.runs.runtime().approval_deadlines().notified().await,
            }
        }
    }
}
