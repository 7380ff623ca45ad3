//! The versioned, redacted event envelope every handler receives.
//!
//! The envelope's identity is derived, never random: the idempotency key hashes (run, turn,
//! event, hook, subject) — the subject being the tool call id or the termination attempt —
//! so a replayed or resumed run hands a handler the same key and the handler can refuse to
//! repeat an external effect. Credentials are removed before anything leaves the runtime,
//! and every string is bounded.

use super::limits::{MAX_ENVELOPE_BYTES, MAX_ENVELOPE_STRING_BYTES};
use super::pack::{ExecutionMode, HookEvent, Scope};
use super::secrets::{contains_token, is_secret_name};
use super::set::ScopedHook;
use crate::message::{Content, ContentPart, Message};
use crate::problem::pointer_append;
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::fmt::Write as _;

/// The envelope format version; bumped on any incompatible change.
pub const ENVELOPE_VERSION: u32 = 1;
/// What replaces a redacted value.
pub const REDACTED: &str = "[REDACTED]";

/// Who is running, as handlers see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InvocationInfo {
    /// Run id (for direct chat, the request's run id).
    pub run_id: String,
    /// Session id, when the conversation has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Agent id.
    pub agent: String,
    /// Surface.
    pub mode: ExecutionMode,
    /// Project Loop id, for loop nodes.
    #[serde(rename = "loop", skip_serializing_if = "Option::is_none")]
    pub loop_id: Option<String>,
    /// Loop step id, for loop nodes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
}

/// Which hook an envelope is for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HookRef {
    /// Pack name.
    pub pack: String,
    /// Hook id within the pack.
    pub id: String,
    /// Assignment scope.
    pub scope: Scope,
    /// True for observe-only hooks (their answer is ignored).
    pub observe: bool,
}

/// What a handler receives.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Envelope {
    /// [`ENVELOPE_VERSION`].
    pub version: u32,
    /// The event.
    pub event: HookEvent,
    /// Stable id of this hook execution, shown in traces.
    pub hook_execution_id: String,
    /// Stable key a handler uses to make its effects idempotent.
    pub idempotency_key: String,
    /// The hook.
    pub hook: HookRef,
    /// The invocation.
    pub invocation: InvocationInfo,
    /// 1-based model turn the event belongs to.
    pub turn: u32,
    /// Event data: `tool {name, input}`, `result`, `candidate`, `terminationAttempt`, `correctionCycle`.
    pub data: Value,
    /// JSON pointers (into `data`) of values replaced by `[REDACTED]`.
    pub redacted: Vec<String>,
    /// JSON pointers (into `data`) of strings cut to the envelope's string limit.
    pub truncated: Vec<String>,
}

/// The stable idempotency key of one hook execution: SHA-256 over its identity.
pub fn idempotency_key(run_id: &str, turn: u32, event: HookEvent, hook: &str, subject: &str) -> String {
    let mut h = Sha256::new();
    for part in [&format!("v{ENVELOPE_VERSION}"), run_id, &turn.to_string(), event.as_str(), hook, subject] {
        h.update(part.as_bytes());
        h.update([0u8]);
    }
    hex::encode(h.finalize())
}

/// Build the envelope for `scoped` at `turn`. `subject` distinguishes executions of the same
/// hook in the same turn (the tool call id, or `attempt-<n>`); `secrets` are vault values
/// that must never leave the runtime, wherever they appear.
pub fn build_envelope(
    info: &InvocationInfo,
    turn: u32,
    scoped: &ScopedHook,
    subject: &str,
    data: Value,
    secrets: &[String],
) -> Envelope {
    let hook = &scoped.hook;
    let key = idempotency_key(&info.run_id, turn, hook.event, &hook.qualified_id(), subject);
    let mut data = data;
    let (redacted, truncated) = redact(&mut data, secrets);
    let mut envelope = Envelope {
        version: ENVELOPE_VERSION,
        event: hook.event,
        hook_execution_id: format!("hx_{}", &key[..32]),
        idempotency_key: key,
        hook: HookRef { pack: hook.pack.clone(), id: hook.id.clone(), scope: scoped.scope, observe: hook.observe },
        invocation: info.clone(),
        turn,
        data,
        redacted,
        truncated,
    };
    if serde_json::to_vec(&envelope).map(|b| b.len()).unwrap_or(usize::MAX) > MAX_ENVELOPE_BYTES {
        envelope.data = serde_json::json!({ "omitted": "event data exceeded the envelope size limit" });
        envelope.truncated = vec![String::new()];
    }
    envelope
}

/// Redact secret-named fields, vault values (`secrets`) and token-shaped strings in `value`,
/// and cut long strings. Returns the JSON pointers of (redacted, truncated) values. Used for
/// envelopes and for hook feedback and diagnostics before they reach the model.
pub fn redact(value: &mut Value, secrets: &[String]) -> (Vec<String>, Vec<String>) {
    let mut redacted = Vec::new();
    let mut truncated = Vec::new();
    scrub(value, &mut String::new(), secrets, &mut redacted, &mut truncated);
    (redacted, truncated)
}

/// Whether [`redact`] without vault values would change `message` as it serialises: a
/// token-shaped string, one longer than the envelope bound, or (in a file part) a secret-named
/// field. A caller that publishes every stored message writes the ones it would not change as
/// they are, and builds and scrubs a `Value` only for the others. The message's own field
/// names are fixed and none is secret-named.
pub fn message_needs_redaction(message: &Message) -> bool {
    let text = |s: &str| s.len() > MAX_ENVELOPE_STRING_BYTES || contains_token(s);
    let content = match &message.content {
        None => false,
        Some(Content::Text(t)) => text(t),
        Some(Content::Parts(parts)) => parts.iter().any(|part| match part {
            ContentPart::Text { text: t } => text(t),
            ContentPart::ImageUrl { image_url } => {
                text(&image_url.url) || image_url.detail.as_deref().is_some_and(text)
            }
            ContentPart::File { file } => value_needs_redaction(file),
        }),
    };
    content
        || message.tool_calls.iter().any(|c| text(&c.id) || text(&c.name) || text(&c.arguments))
        || message.tool_call_id.as_deref().is_some_and(text)
        || message.name.as_deref().is_some_and(text)
}

/// [`message_needs_redaction`] for a free-form value, as [`scrub`] walks it.
fn value_needs_redaction(v: &Value) -> bool {
    match v {
        Value::Object(map) => {
            map.iter().any(|(k, child)| (is_secret_name(k) && !child.is_null()) || value_needs_redaction(child))
        }
        Value::Array(items) => items.iter().any(value_needs_redaction),
        Value::String(s) => s.len() > MAX_ENVELOPE_STRING_BYTES || contains_token(s),
        _ => false,
    }
}

/// [`redact`] at `ptr`, the pointer of `v`: one buffer for the whole walk, grown by each
/// child's token and cut back after it (a pointer is copied only when something is reported).
fn scrub(v: &mut Value, ptr: &mut String, secrets: &[String], redacted: &mut Vec<String>, truncated: &mut Vec<String>) {
    let parent = ptr.len();
    match v {
        Value::Object(map) => {
            for (k, child) in map.iter_mut() {
                pointer_append(ptr, k);
                if is_secret_name(k) && !child.is_null() {
                    *child = Value::String(REDACTED.into());
                    redacted.push(ptr.clone());
                } else {
                    scrub(child, ptr, secrets, redacted, truncated);
                }
                ptr.truncate(parent);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter_mut().enumerate() {
                // An index needs no escaping; writing into a `String` cannot fail.
                let _ = write!(ptr, "/{i}");
                scrub(child, ptr, secrets, redacted, truncated);
                ptr.truncate(parent);
            }
        }
        Value::String(s) => {
            let mut changed = false;
            for secret in secrets.iter().filter(|s| s.len() >= 4) {
                if s.contains(secret.as_str()) {
                    *s = s.replace(secret.as_str(), REDACTED);
                    changed = true;
                }
            }
            if contains_token(s) {
                *s = REDACTED.into();
                changed = true;
            }
            if changed {
                redacted.push(ptr.clone());
            }
            if s.len() > MAX_ENVELOPE_STRING_BYTES {
                let mut cut = MAX_ENVELOPE_STRING_BYTES;
                while !s.is_char_boundary(cut) {
                    cut -= 1;
                }
                s.truncate(cut);
                truncated.push(ptr.clone());
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::pack::*;
    use serde_json::json;

    fn scoped(id: &str) -> ScopedHook {
        ScopedHook {
            scope: Scope::Agent,
            hook: Hook {
                pack: "quality".into(),
                id: id.into(),
                description: None,
                event: HookEvent::ToolBefore,
                declaration: 0,
                priority: 100,
                observe: false,
                matcher: Matcher::default(),
                action: HookAction::Handler(Handler::Command {
                    command: "true".into(),
                    env: Default::default(),
                    timeout_ms: None,
                }),
                on_failure: OnFailure::Fail,
            },
        }
    }

    fn info() -> InvocationInfo {
        InvocationInfo {
            run_id: "run_1".into(),
            session_id: None,
            agent: "writer".into(),
            mode: ExecutionMode::Chat,
            loop_id: None,
            step: None,
        }
    }

    #[test]
    fn keys_are_stable_and_distinguish_every_part() {
        let a = build_envelope(&info(), 2, &scoped("h"), "call_1", json!({}), &[]);
        let b = build_envelope(&info(), 2, &scoped("h"), "call_1", json!({"other": true}), &[]);
        assert_eq!(a.idempotency_key, b.idempotency_key, "a replay gets the same key");
        assert_eq!(a.hook_execution_id, b.hook_execution_id);
        let keys = [
            idempotency_key("run_1", 2, HookEvent::ToolBefore, "quality/h", "call_1"),
            idempotency_key("run_2", 2, HookEvent::ToolBefore, "quality/h", "call_1"),
            idempotency_key("run_1", 3, HookEvent::ToolBefore, "quality/h", "call_1"),
            idempotency_key("run_1", 2, HookEvent::ToolAfter, "quality/h", "call_1"),
            idempotency_key("run_1", 2, HookEvent::ToolBefore, "quality/g", "call_1"),
            idempotency_key("run_1", 2, HookEvent::ToolBefore, "quality/h", "call_2"),
        ];
        let unique: std::collections::HashSet<_> = keys.iter().collect();
        assert_eq!(unique.len(), keys.len());
        assert_eq!(a.idempotency_key, keys[0]);
    }

    #[test]
    fn secrets_never_reach_a_handler() {
        let data = json!({"tool": {"name": "http", "input": {"url": "https://x", "apiKey": "abc", "body": "vault-value-123 and more",
            "note": "Authorization: Bearer zzz", "list": ["vault-value-123"]}}});
        let e = build_envelope(&info(), 1, &scoped("h"), "c", data, &["vault-value-123".into()]);
        let text = serde_json::to_string(&e).unwrap();
        assert!(!text.contains("abc\""), "{text}");
        assert!(!text.contains("vault-value-123"), "{text}");
        assert!(!text.contains("zzz"), "{text}");
        assert!(e.redacted.contains(&"/tool/input/apiKey".to_string()));
        assert!(e.redacted.contains(&"/tool/input/list/0".to_string()));
        assert_eq!(e.version, ENVELOPE_VERSION);
    }

    #[test]
    fn reported_pointers_are_exact_after_siblings_and_escaped() {
        let mut v = json!({"a/b": [{"x": 1}, {"m~n": "ghp_0123456789abcdefABCDEF"}], "next": {"token": "t", "ok": "fine"},
                           "long": "é".repeat(MAX_ENVELOPE_STRING_BYTES)});
        let (redacted, truncated) = redact(&mut v, &[]);
        assert_eq!(redacted, ["/a~1b/1/m~0n", "/next/token"]);
        assert_eq!(truncated, ["/long"]);
        assert_eq!(v["next"]["ok"], "fine");
    }

    #[test]
    fn long_strings_are_cut_and_listed() {
        let e = build_envelope(
            &info(),
            1,
            &scoped("h"),
            "c",
            json!({"result": "é".repeat(MAX_ENVELOPE_STRING_BYTES)}),
            &[],
        );
        assert!(e.data["result"].as_str().unwrap().len() <= MAX_ENVELOPE_STRING_BYTES);
        assert_eq!(e.truncated, vec!["/result".to_string()]);
    }
}
