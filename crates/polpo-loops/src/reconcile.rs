//! Settling a loop run's unconfirmed effect, as the engine's durable runs do
//! (`POST /v1/runs/{id}/reconcile`). A run taken over after a crash that reaches a
//! side-effecting tool step whose intent is in the effect ledger but whose outcome is not
//! stops `failed` with `effect_unconfirmed` at its last checkpoint, the effect's key in its
//! `loop.error` event. A person checks what the tool did and says so
//! ([`LoopExecutor::reconcile`]): it happened (with the output the step saves), or it did not
//! (the step runs it now, once, under the same key). An effect whose outcome was recorded
//! since (its first server, paused past its lease, finished it late) is not settled again: the
//! run resumes with the recorded outcome. The run is claimed for this server in one
//! compare-and-set (`running`, its lease, the next fencing generation) and resumes here from
//! that checkpoint; steps whose outcomes are recorded are not run again.

use crate::durable::StoredLoopRun;
use crate::error::LoopError;
use crate::executor::LoopExecutor;
use crate::record::{LIVE, LOOP_RUNS, LoopRunStatus};
use polpo_store::{EffectStatus, StoreError};
use serde_json::json;
use std::sync::Arc;

/// What a person found an unconfirmed effect did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EffectDecision {
    /// It happened; `result` is the tool's output the step saves (JSON text is parsed, as the
    /// tool's own output is; a default sentence when `None`).
    Applied {
        /// The tool's output.
        result: Option<String>,
    },
    /// It did not: the resumed run runs the call now, once, under the same effect key.
    NotApplied,
}

impl LoopExecutor {
    /// Settle the unconfirmed effect `key` of run `run_id` (stored `failed` with
    /// `effect_unconfirmed`) as `decision` says and resume the run here, in the background,
    /// from its last checkpoint; the run as claimed. `caller` is the API client (`None`: one
    /// that sees every run). Any other run, or a key that is not that run's unconfirmed
    /// effect, is `loop_run_not_resumable`; of two decisions at once, one is taken.
    pub async fn reconcile(
        self: &Arc<Self>,
        run_id: &str,
        caller: Option<&str>,
        key: &str,
        decision: EffectDecision,
    ) -> Result<StoredLoopRun, LoopError> {
        let run = self.stored_record(run_id, caller).await?;
        let unconfirmed = run.record.status == LoopRunStatus::Failed
            && run.record.error.as_ref().is_some_and(|e| e.code == "effect_unconfirmed");
        if !unconfirmed || self.is_active(run_id) {
            let status = serde_json::to_value(run.record.status).unwrap_or_default();
            return Err(LoopError::NotResumable(format!(
                "loop run `{run_id}` is {status}, not failed with effect_unconfirmed"
            )));
        }
        let effects = self.runs.runtime().store().effects.clone();
        let effect = match key.starts_with(&format!("loop/{run_id}/")) {
            true => effects.get_effect(key).await?,
            false => None,
        };
        let Some(effect) = effect else {
            return Err(LoopError::NotResumable(format!("no unconfirmed effect `{key}` in loop run `{run_id}`")));
        };
        let mut record = run.record;
        record.error = None;
        self.claim_here(&mut record);
        let store = self.runs.runtime().store().records.clone();
        // Listed live before it runs again, so a crash before the resume is recovered.
        store.put_record_revision(LIVE, run_id, json!({}), None).await?;
        let value = serde_json::to_value(&record).map_err(|e| LoopError::RunRecordInvalid(e.to_string()))?;
        let written = match store.put_record(LOOP_RUNS, run_id, value, Some(run.revision)).await {
            Ok(written) => written,
            Err(StoreError::Conflict(_)) => {
                return Err(LoopError::NotResumable(format!("loop run `{run_id}` changed meanwhile; look again")));
            }
            Err(e) => return Err(e.into()),
        };
        // Settled once the run is this server's: a crash before the resume leaves the effect
        // unconfirmed, and the run taken over elsewhere stops there again.
        match decision {
            _ if effect.status != EffectStatus::Pending => {}
            EffectDecision::Applied { result } => {
                let text = result.unwrap_or_else(|| "(the effect was applied; confirmed during reconciliation)".into());
                effects.record_effect_result(key, json!({"ok": true, "text": text})).await?;
            }
            EffectDecision::NotApplied => {
                self.reruns.lock().unwrap_or_else(|p| p.into_inner()).insert(run_id.to_owned(), key.to_owned());
            }
        }
        let claimed = StoredLoopRun { record, revision: written.revision, ..run };
        self.resume_claimed(claimed.clone());
        self.with_whole_trace(claimed).await
    }
}
