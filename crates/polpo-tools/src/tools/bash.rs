//! `bash {command, timeout?}`: run a shell command in the workspace.

use crate::args::spec;
use crate::sandbox::{CommandSpec, Confinement, Program, Termination, run_command, scrubbed_env};
use crate::{ToolContext, ToolError, ToolOutput};
use polpo_core::tool::ToolEffect;
use serde::Deserialize;
use serde_json::json;
use std::time::Duration;

/// Timeout when the call gives none (ms).
pub const DEFAULT_TIMEOUT_MS: u64 = 120_000;
/// Longest timeout a call may ask for (ms); longer requests are clamped.
pub const MAX_TIMEOUT_MS: u64 = 600_000;
/// Output bytes kept (head and tail halves), as in the reference.
pub const OUTPUT_CAP: usize = 30 * 1024;

/// SIGTERM-to-SIGKILL grace: short, so a cancelled run stops well within a second.
const KILL_GRACE: Duration = Duration::from_millis(500);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    command: String,
    timeout: Option<u64>,
}

builtin_tool! {
    /// Runs `sh -c <command>` in the workspace through [`run_command`], confined: Landlock lets it
    /// write only beneath the allowed roots minus the protected paths (and its private TMPDIR),
    /// read the system and the workspace, and neither signal nor ptrace (read `/proc/<pid>/environ`
    /// of) the server; its PID namespace dies with it; limits and dropped privileges apply. Where
    /// Landlock is missing it refuses with `sandbox_unavailable` unless the policy allows running
    /// unconfined. Scrubbed environment, null stdin, stdout and stderr interleaved and capped. The
    /// text starts with `Exit code: N`. Its effect is `Write`: a command may change anything it
    /// may reach.
    BashTool {
        spec: spec(
            "bash",
            "Run a shell command (sh -c) in the workspace. Returns `Exit code: N` followed by combined stdout and stderr (long output keeps its beginning and end). Background processes are stopped when the command ends.",
            json!({
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "The shell command line."},
                    "timeout": {"type": "integer", "minimum": 1, "maximum": MAX_TIMEOUT_MS, "description": "Timeout in milliseconds (default 120000, max 600000)."}
                },
                "required": ["command"],
                "additionalProperties": false
            }),
        ),
        effect: ToolEffect::Write,
        call: bash,
    }
}

/// The body of [`BashTool`]: `args` already decoded.
async fn bash(ctx: &ToolContext, args: Args) -> Result<ToolOutput, ToolError> {
    let timeout_ms = args.timeout.unwrap_or(DEFAULT_TIMEOUT_MS).clamp(1, MAX_TIMEOUT_MS);
    ctx.sandbox.require_confinement("bash is disabled")?;
    let mut run = CommandSpec::new(Program::Shell(args.command), &ctx.workspace);
    run.confinement = Some(Confinement::of(ctx, Vec::new())?);
    run.env = scrubbed_env(&ctx.env_allow);
    run.timeout = Duration::from_millis(timeout_ms);
    run.output_cap = OUTPUT_CAP;
    run.merge_stderr = true;
    run.kill_grace = KILL_GRACE;
    run.cancel = ctx.cancel.child_token();
    let outcome = run_command(run).await.map_err(|e| ToolError::new(e.code(), e.to_string()))?;
    let output = outcome.stdout.render();
    let details = json!({
        "exitCode": outcome.exit_code(),
        "outputBytes": outcome.stdout.total_bytes(),
        "truncated": outcome.stdout.is_truncated(),
        "durationMs": u64::try_from(outcome.duration.as_millis()).unwrap_or(u64::MAX),
        "sandbox": {
            "filesystem": outcome.isolation.filesystem,
            "contained": outcome.isolation.contained,
        },
    });
    match (outcome.termination, outcome.exit_code()) {
        (Termination::TimedOut, _) => Err(ToolError::new(
            "timeout",
            format!("command timed out after {timeout_ms} ms and was killed. Output so far:\n{output}"),
        )),
        (Termination::Cancelled, _) => Err(ToolError::new("cancelled", "command cancelled and killed")),
        (_, code) => Ok(ToolOutput { text: format!("Exit code: {}\n{output}", code.unwrap_or(-1)), details }),
    }
}
