//! The `GET /v1/hooks/capabilities` (and `polpo hooks capabilities --json`) payload.
//!
//! Portable fields state what this runtime's contract supports; the `managed` block states
//! what is enabled on the target host, so a client can tell "not supported" from "switched
//! off here".

use super::limits::*;
use super::pack::{Handler, HookEvent, HookPack};
use crate::problem::Problem;
use serde_json::{Value, json};

/// Handler kinds this runtime executes. The capabilities payload lists exactly these, and a pack
/// using another kind is refused when the project loads, so nothing is accepted that would fail
/// every matching call at run time. `mcp_tool` calls `mcp__<server>__<tool>` of the agent's
/// MCP servers through the same tool gates as `tool`.
pub const RUNNABLE_HANDLERS: [&str; 6] = ["command", "http", "tool", "mcp_tool", "prompt", "verifier"];

/// Why this runtime cannot run `handler`, if it cannot: an `http` handler authenticating
/// through a Connection that `known_connection` does not know would fail every call, so it is
/// refused up front rather than called unauthenticated.
pub fn unavailable(handler: &Handler, known_connection: &dyn Fn(&str) -> bool) -> Option<String> {
    match handler {
        Handler::Http { connection: Some(id), .. } if !known_connection(id) => {
            Some(format!("connection `{id}` is not a project Connection (.polpo/connections/{id}.json)"))
        }
        _ => None,
    }
}

/// One `hook_handler_unavailable` problem, at the handler's JSON pointer, per hook of `pack`
/// whose handler this runtime cannot run, given the project's Connections (`known_connection`).
pub fn unrunnable_hooks(pack: &HookPack, known_connection: &dyn Fn(&str) -> bool) -> Vec<Problem> {
    pack.hooks
        .iter()
        .filter_map(|hook| {
            let why = unavailable(hook.action.handler(), known_connection)?;
            Some(Problem::new("hook_handler_unavailable", why).at(hook.handler_pointer()))
        })
        .collect()
}

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
        "handlers": RUNNABLE_HANDLERS,
        // `http` handlers may name a project Connection whose auth headers are added per call.
        "httpConnections": true,
        "terminationGate": {
            "supported": true,
            "validators": RUNNABLE_HANDLERS.iter().filter(|k| !matches!(**k, "prompt" | "verifier")).collect::<Vec<_>>(),
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

    #[test]
    fn lists_only_handlers_this_runtime_runs() {
        let c = capabilities(HostHooks { hooks_enabled: true, managed: false });
        assert!(c["handlers"].to_string().contains("mcp_tool"), "{c}");
        assert_eq!(c["httpConnections"], true);
        assert_eq!(c["terminationGate"]["validators"], json!(["command", "http", "tool", "mcp_tool"]));
    }

    #[test]
    fn an_http_handler_naming_an_unknown_connection_is_located_as_unrunnable() {
        let doc = json!({"version": 1, "hooks": {"tool:before": [
            {"handler": {"type": "http", "url": "https://hooks.example.com/a", "connection": "known"}},
            {"handler": {"type": "http", "url": "https://hooks.example.com/a", "connection": "audit"}}
        ]}});
        let (pack, problems) = crate::hooks::validate::check_document("p", &doc, &Default::default());
        assert!(problems.is_empty(), "{problems:?}");
        let found = unrunnable_hooks(&pack, &|id| id == "known");
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].code, "hook_handler_unavailable");
        assert_eq!(found[0].pointer.as_deref(), Some("/hooks/tool:before/1/handler"));
    }
}
