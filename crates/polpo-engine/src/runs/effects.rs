//! The effect ledger around a durable run's `write` tools: each call's effect is recorded
//! before it runs and its result after, under a key of (run, model turn, call position,
//! hash of the arguments). A call that already has a result returns it instead of running
//! again; a call with an intent but no result may or may not have happened, so the run
//! pauses (`effect_unconfirmed`, or `termination_gate_effect_unconfirmed` inside a termination
//! gate's correction cycle) for a hook or a person to decide. The pause names the call itself
//! (tool, arguments with secrets redacted and bounded, effect key, when its intent was
//! recorded), so the person can tell what to check. A call reconciled `not_applied` runs once
//! when the resumed run replays it, under the same key.

use super::state::{Pause, RunState};
use polpo_core::tool::{ToolEffect, ToolSpec};
use polpo_store::{EffectClaim, Lease, Store};
use polpo_tools::{Tool, ToolContext, ToolError, ToolOutput};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Bytes of a paused call's arguments (as JSON text) the pause shows; longer ones are cut.
const SHOWN_ARGUMENTS_BYTES: usize = 4096;

/// A `write` (or undeclared) tool whose calls go through the effect ledger.
pub(crate) struct Ledgered {
    pub(crate) inner: Arc<dyn Tool>,
    pub(crate) run_id: String,
    pub(crate) state: Arc<RunState>,
    pub(crate) store: Store,
    pub(crate) cancel: CancellationToken,
    /// The run's lease: the ledger refuses this executor's intents and results once another
    /// process was granted the run.
    pub(crate) fence: Lease,
    /// Cancelled when the ledger refuses a write because the lease is lost: the run stops
    /// here, writing nothing more (see `RunManager::drive`).
    pub(crate) lost: CancellationToken,
}

/// The ledger key of a call: stable across a restart, different for different arguments.
pub fn effect_key(run_id: &str, turn: usize, position: usize, arguments: &Value) -> String {
    let digest = Sha256::digest(arguments.to_string().as_bytes());
    format!("run/{run_id}/turn/{turn}/call/{position}/{}", hex::encode(&digest[..16]))
}

fn encode(result: &Result<ToolOutput, ToolError>) -> Value {
    match result {
        Ok(out) => json!({"ok": true, "text": out.text, "details": out.details}),
        Err(e) => json!({"ok": false, "code": e.code, "message": e.message}),
    }
}

/// `arguments` as a paused call shows them: every secret the runtime knows replaced, and at
/// most [`SHOWN_ARGUMENTS_BYTES`] of JSON (longer ones become a cut string ending in `…`).
fn shown_arguments(arguments: &Value, redactor: &polpo_core::redact::Redactor) -> Value {
    let mut shown = arguments.clone();
    redactor.redact_value(&mut shown);
    let text = shown.to_string();
    if text.len() <= SHOWN_ARGUMENTS_BYTES {
        return shown;
    }
    let end = (0..=SHOWN_ARGUMENTS_BYTES).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0);
    Value::String(format!("{}…", &text[..end]))
}

fn decode(recorded: &Value) -> Result<ToolOutput, ToolError> {
    let s = |k: &str| recorded.get(k).and_then(Value::as_str).unwrap_or_default().to_owned();
    if recorded.get("ok").and_then(Value::as_bool).unwrap_or(false) {
        Ok(ToolOutput { text: s("text"), details: recorded.get("details").cloned().unwrap_or_default() })
    } else {
        Err(ToolError::new(s("code"), s("message")))
    }
}

impl Ledgered {
    /// Run the call whose intent `key` is recorded, and record its result.
    async fn perform(&self, ctx: &ToolContext, args: Value, key: &str) -> Result<ToolOutput, ToolError> {
        let result = self.inner.call(ctx, args).await;
        if let Err(e) = self.store.effects.record_effect_result_fenced(key, Some(&self.fence), encode(&result)).await {
            self.stop_if_fenced_off(&e);
            tracing::warn!(key = %key, code = e.code(), "effect result could not be recorded: {e}");
        }
        result
    }

    /// A write refused because another process was granted the run (this one was paused past
    /// its lease): stop the run before it does anything else — above all, before it asks the
    /// model again with a result the new owner will never see.
    fn stop_if_fenced_off(&self, e: &polpo_store::StoreError) {
        if e.code() == "lease_lost" {
            self.lost.cancel();
            self.cancel.cancel();
        }
    }
}

#[async_trait::async_trait]
impl Tool for Ledgered {
    fn spec(&self) -> &ToolSpec {
        self.inner.spec()
    }

    fn effect(&self) -> ToolEffect {
        self.inner.effect()
    }

    fn call_effect(&self, args: &Value) -> ToolEffect {
        self.inner.call_effect(args)
    }

    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        if self.inner.call_effect(&args).is_replayable() {
            return self.inner.call(ctx, args).await;
        }
        let Some((turn, position)) = self.state.current_call_position() else {
            return Err(ToolError::new("effect_unconfirmed", "the call is not part of the run's checkpoint"));
        };
        let key = effect_key(&self.run_id, turn, position, &args);
        // The assistant message that asked for this call must be durable before the effect
        // happens, or a restart would ask the model again and key a different call.
        self.state.journal().flush().await;
        match self.store.effects.record_effect_intent_fenced(&key, Some(&self.fence)).await {
            Ok(EffectClaim::Fresh) => self.perform(ctx, args, &key).await,
            Ok(EffectClaim::Done(effect)) => decode(&effect.result.unwrap_or_default()),
            // A person said it did not happen: it runs now, once, under its key.
            Ok(EffectClaim::Pending(_)) if self.state.take_rerun(&key) => self.perform(ctx, args, &key).await,
            Ok(EffectClaim::Pending(effect)) => {
                // Inside a gate's correction cycle the gate's own code says which contract
                // stopped the run; reconciling works the same either way.
                let code = if self.state.in_gate_correction_cycle() {
                    "termination_gate_effect_unconfirmed"
                } else {
                    "effect_unconfirmed"
                };
                let data = json!({
                    "key": key,
                    "tool": self.inner.spec().name,
                    "arguments": shown_arguments(&args, &ctx.redactor),
                    "startedAt": effect.created_at,
                });
                self.state.pause(Pause { code, data });
                self.cancel.cancel();
                Err(ToolError::new(
                    code,
                    format!("`{}` may already have run (effect {key}); the run is paused", self.inner.spec().name),
                ))
            }
            Err(e) => {
                self.stop_if_fenced_off(&e);
                Err(ToolError::new(
                    e.code(),
                    format!("the effect ledger is unavailable, so `{}` did not run: {e}", self.inner.spec().name),
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_differ_by_turn_position_and_arguments() {
        let a = effect_key("r", 1, 0, &json!({"path": "a"}));
        assert_eq!(a, effect_key("r", 1, 0, &json!({"path": "a"})));
        assert_ne!(a, effect_key("r", 1, 0, &json!({"path": "b"})));
        assert_ne!(a, effect_key("r", 1, 1, &json!({"path": "a"})));
        assert_ne!(a, effect_key("r", 2, 0, &json!({"path": "a"})));
    }

    #[test]
    fn a_paused_call_shows_its_arguments_without_secrets_and_bounded() {
        let redactor = polpo_core::redact::Redactor::new();
        redactor.replace(["sk-secret-value".to_owned()]);
        let shown = shown_arguments(&json!({"command": "curl -H 'key: sk-secret-value' x"}), &redactor);
        assert_eq!(shown, json!({"command": "curl -H 'key: [REDACTED]' x"}));
        let long = json!({"content": "é".repeat(SHOWN_ARGUMENTS_BYTES)});
        let Value::String(cut) = shown_arguments(&long, &redactor) else { panic!("a long call is cut") };
        assert!(cut.len() <= SHOWN_ARGUMENTS_BYTES + '…'.len_utf8() && cut.ends_with('…'), "{}", cut.len());
    }
}
