//! A durable run and the approval requests of its tool calls: the run pauses
//! (`awaiting_approval`) when a hook asks about a call nobody decided yet, and a reviewer's
//! decision resumes it from its checkpoint — the call is executed again through every gate,
//! and the stored decision lets it run (once: a `write` tool goes through the effect ledger)
//! or refuses it, so the model sees the refusal and the run goes on.

use super::state::{Pause, RunState};
use super::{RunError, RunManager};
use crate::approvals::{APPROVALS, AWAITING_APPROVAL, ApprovalStatus, Pausable, StoredApproval};
use crate::events::journal::{ApprovalDecided, JournalEvent};
use polpo_store::RunStatus;
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
        if !waiting || self.is_active(id) {
            return Ok(false);
        }
        self.starting().insert(id.to_owned());
        let resumed = async {
            let lease = store.runs.claim_run(id, &self.owner, self.options.lease_ttl).await?;
            let decided = JournalEvent::ApprovalResolved(ApprovalDecided {
                approval_id: approval_id.to_owned(),
                status: status.to_owned(),
                resolved_by: reviewer.to_owned(),
            });
            store.runs.append_events_fenced(id, Some(&lease), vec![decided.to_stored()]).await?;
            store.runs.update_run_status_fenced(id, Some(&lease), RunStatus::Running, None, Some(run.revision)).await?;
            self.resume(id, lease).await
        }
        .await;
        self.starting().remove(id);
        resumed.map(|()| true)
    }

    /// After run `id` paused: when it waits for an approval a reviewer decided meanwhile (between
    /// the request and the pause), resume it now — nobody would otherwise wake it.
    pub(super) async fn resume_if_decided(self: &Arc<Self>, id: &str, pause: &Pause) {
        let Some(approval_id) =
            pause.data.get("approvalId").and_then(Value::as_str).filter(|_| pause.code == AWAITING_APPROVAL)
        else {
            return;
        };
        let stored = match self.runtime.store().records.get_record(APPROVALS, approval_id).await {
            Ok(Some(record)) => StoredApproval::parse(record).ok(),
            _ => None,
        };
        let Some(approval) = stored.map(|s| s.approval).filter(|a| a.status != ApprovalStatus::Pending) else { return };
        let status = if approval.status == ApprovalStatus::Approved { "approved" } else { "rejected" };
        let reviewer = approval.resolved_by.as_deref().unwrap_or_default();
        if let Err(e) = self.approval_decided(id, approval_id, status, reviewer).await {
            tracing::warn!(run = %id, code = e.code(), "run decided while pausing could not be resumed: {e}");
        }
    }
}
