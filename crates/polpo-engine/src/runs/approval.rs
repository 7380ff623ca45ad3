//! A durable run and the approval requests of its tool calls: the run pauses
//! (`awaiting_approval`) when a hook asks about a call nobody decided yet, and a reviewer's
//! decision resumes it from its checkpoint — the call is executed again through every gate,
//! and the stored decision lets it run (once: a `write` tool goes through the effect ledger)
//! or refuses it, so the model sees the refusal and the run goes on.
//!
//! A decision can find the run's lease still held: a server killed between storing the pause
//! and giving its lease back leaves a paused run leased to a dead owner. Every recovery pass
//! ([`RunManager::resume_decided_pauses`]) therefore resumes paused runs whose approval is
//! decided once their lease is free; claiming the lease and moving the run out of `paused`
//! by compare-and-set makes each decision applied at most once.

use super::state::{Pause, RunState};
use super::{RunError, RunManager};
use crate::approvals::{APPROVALS, AWAITING_APPROVAL, ApprovalStatus, Pausable, StoredApproval};
use crate::events::journal::{ApprovalDecided, JournalEvent};
use polpo_store::{PageRequest, RunFilter, RunStatus, StoreError};
use serde_json::Value;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The live run a hook's `ask` pauses.
pub(crate) struct PauseHere {
    pub(crate) state: Arc<RunState>,
    pub(crate) cancel: CancellationToken,
}

impl Pausable for PauseHere {
    fn call_position(&self) -> Option<(usize, usize)> {
        self.state.current_call_position()
    }

    fn pause_for_approval(&self, detail: Value) {
        self.state.pause(Pause { code: AWAITING_APPROVAL, data: detail });
        self.cancel.cancel();
    }
}

impl RunManager {
    /// Approval request `approval_id` of run `id` was decided (`approved` or `rejected`, by
    /// `reviewer`): resume the run if it is paused waiting for approval. `false` when it is not
    /// (it has not paused yet, or it is over): a run that asks again finds the decision itself.
    pub async fn approval_decided(
        self: &Arc<Self>,
        id: &str,
        approval_id: &str,
        status: &str,
        reviewer: &str,
    ) -> Result<bool, RunError> {
        let store = self.runtime.store().clone();
        let run = store.runs.get_run(id).await?.ok_or_else(|| RunError::NotFound(id.to_owned()))?;
        let waiting = run.status == RunStatus::Paused && run.error.as_deref() == Some(AWAITING_APPROVAL);
        // Of a reviewer's request and a recovery pass in this process, one resumes the run.
        if !waiting || self.is_active(id) || !self.starting().insert(id.to_owned()) {
            return Ok(false);
        }
        let decided = JournalEvent::ApprovalResolved(ApprovalDecided {
            approval_id: approval_id.to_owned(),
            status: status.to_owned(),
            resolved_by: reviewer.to_owned(),
        });
        let resumed = self.resume_paused(id, run.revision, decided).await;
        self.starting().remove(id);
        resumed
    }

    /// After run `id` paused: when it waits for an approval a reviewer decided meanwhile (between
    /// the request and the pause), resume it now — nobody would otherwise wake it.
    pub(super) async fn resume_if_decided(self: &Arc<Self>, id: &str, pause: &Pause) {
        let Some(approval_id) =
            pause.data.get("approvalId").and_then(Value::as_str).filter(|_| pause.code == AWAITING_APPROVAL)
        else {
            return;
        };
        if let Err(e) = self.apply_decision(id, approval_id).await {
            tracing::warn!(run = %id, code = e.code(), "run decided while pausing could not be resumed: {e}");
        }
    }

    /// Resume every run paused for an approval that is already decided: its decision could
    /// not be applied when it was made (the run's lease was still held by a server that died
    /// between storing the pause and releasing the lease). A lease still held is left for a
    /// later pass, once it has lapsed.
    pub(super) async fn resume_decided_pauses(self: &Arc<Self>) -> Result<(), StoreError> {
        let store = self.runtime.store().clone();
        let filter = RunFilter { status: Some(RunStatus::Paused), ..Default::default() };
        let mut page = PageRequest::first(100);
        loop {
            let runs = store.runs.list_runs(&filter, &page).await?;
            for run in runs.items.iter().filter(|r| r.error.as_deref() == Some(AWAITING_APPROVAL)) {
                if self.closing.is_cancelled() {
                    return Ok(());
                }
                let Some(approval_id) = self.awaited_approval(&run.id, run.last_seq).await? else { continue };
                match self.apply_decision(&run.id, &approval_id).await {
                    Ok(_) | Err(RunError::Store(StoreError::LeaseHeld { .. })) => {}
                    Err(e) => tracing::warn!(run = %run.id, code = e.code(), "decided run could not be resumed: {e}"),
                }
            }
            match runs.next {
                Some(next) => page = PageRequest::after(next, 100),
                None => return Ok(()),
            }
        }
    }

    /// The approval paused run `id` waits for: the one its latest `run.paused` names.
    async fn awaited_approval(&self, id: &str, last_seq: u64) -> Result<Option<String>, StoreError> {
        let pause = self.latest_pause(id, last_seq).await?;
        Ok(pause.and_then(|paused| paused.detail.get("approvalId").and_then(Value::as_str).map(str::to_owned)))
    }

    /// Resume run `id` with the decision on approval `approval_id`, if one was made (`false`:
    /// still pending, or the run does not wait any more).
    async fn apply_decision(self: &Arc<Self>, id: &str, approval_id: &str) -> Result<bool, RunError> {
        let Some(record) = self.runtime.store().records.get_record(APPROVALS, approval_id).await? else {
            return Ok(false);
        };
        let Ok(stored) = StoredApproval::parse(record) else { return Ok(false) };
        let approval = stored.approval;
        let status = match approval.status {
            ApprovalStatus::Pending => return Ok(false),
            ApprovalStatus::Approved => "approved",
            ApprovalStatus::Rejected => "rejected",
        };
        let reviewer = approval.resolved_by.as_deref().unwrap_or_default();
        self.approval_decided(id, approval_id, status, reviewer).await
    }
}
