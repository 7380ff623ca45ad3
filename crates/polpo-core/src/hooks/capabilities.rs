//! The `GET /v1/hooks/capabilities` (and `polpo hooks capabilities --json`) payload.
//!
//! Portable fields state what this runtime's contract supports; the `managed` block states
//! what is enabled on the target host, so a client can tell "not supported" from "switched
//! off here".

use super::limits::*;
use super::pack::HookEvent;
use serde_json::{Value, json};

/// What the host running the hooks has switched on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostHooks {
    /// False when `POLPO_RUNTIME_HOOKS=off`.
    pub hooks_enabled: bool,
    /// True on a managed host (command hooks default to 60 s).
    pub managed: bool,
}

/// The capabilities payload.
pub fn capabilities(host: HostHooks) -> Value {
    let mode = if host.hooks_enabled { "enforce" } else { "off" };
    json!({
        "version": super::envelope::ENVELOPE_VERSION,
        "packVersion": super::pack::PACK_VERSION,
        "events": HookEvent::ALL.iter().map(|e| e.as_str()).collect::<Vec<_>>(),
        "decisions": ["allow", "deny", "ask", "defer", "modify", "stop", "continue", "accept"],
        "handlers": ["command", "http", "tool", "mcp_tool", "prompt", "verifier"],
        "terminationGate": {
            "supported": true,
            "validators": ["command", "http", "tool", "mcp_tool"],
            "limits": { "maxCycles": [1, MAX_GATE_CYCLES], "maxDurationMs": MAX_GATE_DURATION_MS, "maxTokens": MAX_GATE_TOKENS },
            "states": ["validating", "continuing", "accepted"],
        },
        "defaults": {
            "commandTimeoutMs": DEFAULT_COMMAND_TIMEOUT_MS,
            "callTimeoutMs": DEFAULT_CALL_TIMEOUT_MS,
            "promptTimeoutMs": DEFAULT_PROMPT_TIMEOUT_MS,
            "verifierTimeoutMs": DEFAULT_VERIFIER_TIMEOUT_MS,
        },
        "bounds": {
            "maxTimeoutMs": MAX_TIMEOUT_MS,
            "maxOutputBytes": MAX_OUTPUT_BYTES,
            "maxEnvelopeBytes": MAX_ENVELOPE_BYTES,
            "maxFeedbackBytes": MAX_FEEDBACK_BYTES,
            "maxHookDepth": MAX_HOOK_DEPTH,
            "maxPromptCalls": MAX_PROMPT_CALLS,
            "maxVerifierTurns": MAX_VERIFIER_TURNS,
            "maxHooksPerPack": MAX_HOOKS_PER_PACK,
        },
        "managed": {
            "managed": host.managed,
            "commandTimeoutMs": MANAGED_COMMAND_TIMEOUT_MS,
            "hooks": { "mode": mode },
            "terminationGate": { "enabled": host.hooks_enabled },
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_contract_support_and_the_managed_command_default() {
        let c = capabilities(HostHooks { hooks_enabled: false, managed: true });
        assert_eq!(c["terminationGate"]["supported"], true);
        assert_eq!(c["managed"]["terminationGate"]["enabled"], false);
        assert_eq!(c["managed"]["commandTimeoutMs"], 60_000);
        assert_eq!(c["defaults"]["commandTimeoutMs"], 5_000);
        assert_eq!(c["managed"]["hooks"]["mode"], "off");
    }
}
