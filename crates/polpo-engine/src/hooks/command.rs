//! `command` handlers: a real process in the agent's sandbox.
//!
//! The process runs through the same process runner as the `bash` tool (its own process group
//! and PID namespace, so even `setsid` children die with it; scrubbed environment; bounded
//! output; killed on timeout or abort). Hooks are project policy written by the project's
//! owner, not agent-chosen code, so they are not confined by the tool sandbox's Landlock
//! rules, limits or dropped privileges: a hook may write an audit log anywhere the server can.
//! The envelope goes to stdin; stdout must be one decision object. A non-zero exit is a handler
//! failure, with a short, redacted excerpt of stderr for the trace.

use polpo_core::hooks::limits::MAX_OUTPUT_BYTES;
use polpo_core::hooks::{FailureCause, HookFailure, HookOutcome, contains_token, parse_output};
use polpo_tools::ToolContext;
use polpo_tools::sandbox::{CommandSpec, Program, Termination, run_command, scrubbed_env};
use std::collections::BTreeMap;
use std::time::Duration;

/// Longest stderr excerpt kept in a failure.
const STDERR_EXCERPT: usize = 400;

/// Run `command` with `envelope` on stdin and read its decision.
pub(super) async fn run(
    ctx: &ToolContext,
    command: &str,
    env: &BTreeMap<String, String>,
    envelope: Vec<u8>,
    timeout: Duration,
) -> HookOutcome {
    let mut spec = CommandSpec::new(Program::Shell(command.to_string()), ctx.workspace.clone());
    spec.env = scrubbed_env(&ctx.env_allow);
    spec.env.extend(env.iter().map(|(k, v)| (k.clone(), v.clone())));
    spec.stdin = Some(envelope);
    spec.timeout = timeout;
    // Head half = the whole allowed output, so anything within the limit is read intact.
    spec.output_cap = MAX_OUTPUT_BYTES * 2;
    spec.kill_grace = Duration::from_millis(200);
    spec.cancel = ctx.cancel.child_token();
    let outcome = run_command(spec)
        .await
        .map_err(|e| HookFailure::new(FailureCause::HandlerError, format!("{}: {e}", e.code())))?;
    match outcome.termination {
        Termination::TimedOut => Err(HookFailure::new(
            FailureCause::Timeout,
            format!("the command did not finish within {} ms", timeout.as_millis()),
        )),
        Termination::Cancelled => Err(HookFailure::new(FailureCause::HandlerError, "the run was aborted")),
        Termination::Signaled { signal } => {
            Err(HookFailure::new(FailureCause::HandlerError, format!("the command was killed by signal {signal}")))
        }
        Termination::Exited { code } if code != 0 => {
            let stderr: String = outcome.stderr.render().chars().take(STDERR_EXCERPT).collect();
            let stderr = if contains_token(&stderr) { "[REDACTED]".to_string() } else { stderr };
            Err(HookFailure::new(
                FailureCause::HandlerError,
                format!("the command exited with code {code}: {}", stderr.trim()),
            ))
        }
        Termination::Exited { .. } => {
            if outcome.stdout.total_bytes() > MAX_OUTPUT_BYTES as u64 {
                return Err(HookFailure::new(
                    FailureCause::OutputTooLarge,
                    format!("the command printed more than {MAX_OUTPUT_BYTES} bytes"),
                ));
            }
            parse_output(outcome.stdout.render().as_bytes())
        }
    }
}
