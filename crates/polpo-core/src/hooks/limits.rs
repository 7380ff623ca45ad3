//! Every bound of the hook contract in one place, so validation, the runner and
//! `GET /v1/hooks/capabilities` cannot disagree.

use super::pack::Handler;

/// Largest pack file.
pub const MAX_PACK_BYTES: usize = 256 * 1024;
/// Most hooks in one pack.
pub const MAX_HOOKS_PER_PACK: usize = 64;
/// Longest `command` line.
pub const MAX_COMMAND_BYTES: usize = 8 * 1024;
/// Longest `prompt`.
pub const MAX_PROMPT_BYTES: usize = 16 * 1024;
/// Longest timeout an `ask` may give its approval request (30 days): a request nobody can
/// answer for longer is better refused now than kept as a paused run forever.
pub const MAX_ASK_TIMEOUT_SECS: u64 = 30 * 24 * 3600;
/// Longest explicit handler timeout (ten minutes).
pub const MAX_TIMEOUT_MS: u64 = 600_000;
/// Portable default for command hooks without `timeoutMs`.
pub const DEFAULT_COMMAND_TIMEOUT_MS: u64 = 5_000;
/// Default for command hooks on a managed host, where a cold sandbox must start first.
pub const MANAGED_COMMAND_TIMEOUT_MS: u64 = 60_000;
/// Default for `http`, `tool` and `mcp_tool` handlers.
pub const DEFAULT_CALL_TIMEOUT_MS: u64 = 5_000;
/// Default for `prompt` handlers.
pub const DEFAULT_PROMPT_TIMEOUT_MS: u64 = 30_000;
/// Default for `verifier` handlers.
pub const DEFAULT_VERIFIER_TIMEOUT_MS: u64 = 60_000;
/// Most model calls one `prompt` handler makes.
pub const MAX_PROMPT_CALLS: u32 = 1;
/// Most turns a verifier agent may be given.
pub const MAX_VERIFIER_TURNS: u32 = 10;
/// Largest `maxCycles` of a termination gate.
pub const MAX_GATE_CYCLES: u32 = 20;
/// Largest `maxDurationMs` of a termination gate (one hour).
pub const MAX_GATE_DURATION_MS: u64 = 3_600_000;
/// Largest `maxTokens` of a termination gate.
pub const MAX_GATE_TOKENS: u64 = 10_000_000;
/// Largest handler output read (stdout, HTTP body, tool text); more is a failure.
pub const MAX_OUTPUT_BYTES: usize = 64 * 1024;
/// Largest serialized envelope sent to a handler.
pub const MAX_ENVELOPE_BYTES: usize = 256 * 1024;
/// Longest single string inside an envelope; longer ones are truncated and listed.
pub const MAX_ENVELOPE_STRING_BYTES: usize = 32 * 1024;
/// Largest `diagnostics` or `feedback` a hook may send back to the model.
pub const MAX_FEEDBACK_BYTES: usize = 16 * 1024;
/// How deep hooks may nest: a tool run *by* a hook does not trigger hooks again.
pub const MAX_HOOK_DEPTH: u32 = 1;

/// The timeout a handler gets: its explicit `timeoutMs`, else the default for its kind
/// (for commands, the managed default on a managed host). An explicit timeout always wins.
pub fn effective_timeout_ms(handler: &Handler, managed: bool) -> u64 {
    handler.timeout_ms().unwrap_or(match handler {
        Handler::Command { .. } if managed => MANAGED_COMMAND_TIMEOUT_MS,
        Handler::Command { .. } => DEFAULT_COMMAND_TIMEOUT_MS,
        Handler::Http { .. } | Handler::Tool { .. } | Handler::McpTool { .. } => DEFAULT_CALL_TIMEOUT_MS,
        Handler::Prompt { .. } => DEFAULT_PROMPT_TIMEOUT_MS,
        Handler::Verifier { .. } => DEFAULT_VERIFIER_TIMEOUT_MS,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_timeouts_win_and_managed_commands_get_sixty_seconds() {
        let cmd = |t| Handler::Command { command: "true".into(), env: Default::default(), timeout_ms: t };
        assert_eq!(effective_timeout_ms(&cmd(None), false), 5_000);
        assert_eq!(effective_timeout_ms(&cmd(None), true), 60_000);
        assert_eq!(effective_timeout_ms(&cmd(Some(1_500)), true), 1_500);
    }
}
