//! A long-lived sandboxed process that a caller talks to over its stdin and stdout (an MCP
//! stdio server), held to the same containment as [`run_command`](super::run_command): its own
//! session, group and PID namespace, the spec's confinement, an empty-based environment, and
//! killed with its whole group when stopped, dropped, or when this process dies.

use super::process::{Scratch, build_command, prepare_child, signal_group, spawn_reader, terminate_group};
use super::{CappedOutput, CommandSpec, Isolation, SandboxError};
use nix::sys::signal::Signal;
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use tokio::process::{Child, ChildStdin, ChildStdout};

/// A running service process. Its stdin and stdout are handed out once by [`Service::take_io`];
/// stderr is kept, bounded, for error messages.
pub struct Service {
    child: Child,
    pgid: i32,
    io: Option<(ChildStdout, ChildStdin)>,
    stderr: Arc<Mutex<CappedOutput>>,
    isolation: Isolation,
    kill_grace: std::time::Duration,
    // Dropped after the process group is gone (field order: `child` is killed first in `Drop`).
    _scratch: Option<Scratch>,
}

/// Start `spec` as a service: stdin and stdout piped to the caller, stderr captured up to
/// `spec.output_cap` bytes. `spec.stdin`, `timeout` and `cancel` do not apply (a service lives
/// until stopped); its confinement, environment and working directory do.
pub fn spawn_service(spec: &CommandSpec) -> Result<Service, SandboxError> {
    let mut command = build_command(spec)?;
    command.stdin(Stdio::piped());
    let (setup, scratch, isolation) = prepare_child(spec, &mut command)?;
    setup.install(&mut command);
    let mut child = command.spawn().map_err(SandboxError::Spawn)?;
    drop(command);
    let pgid = child.id().and_then(|id| i32::try_from(id).ok()).unwrap_or(0);
    let stderr = Arc::new(Mutex::new(CappedOutput::new(spec.output_cap)));
    if let Some(err) = child.stderr.take() {
        // Detached: it ends at EOF, when the group is gone.
        drop(spawn_reader(err, stderr.clone()));
    }
    let io = match (child.stdout.take(), child.stdin.take()) {
        (Some(out), Some(input)) => Some((out, input)),
        _ => None,
    };
    Ok(Service { child, pgid, io, stderr, isolation, kill_grace: spec.kill_grace, _scratch: scratch })
}

impl Service {
    /// The process's stdout (to read) and stdin (to write); `None` after the first call.
    pub fn take_io(&mut self) -> Option<(ChildStdout, ChildStdin)> {
        self.io.take()
    }

    /// What the process wrote to stderr so far (head and tail when long).
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap_or_else(PoisonError::into_inner).render()
    }

    /// What the process is actually held to.
    pub fn isolation(&self) -> Isolation {
        self.isolation
    }

    /// The process id of its leader (for status displays and tests).
    pub fn pid(&self) -> i32 {
        self.pgid
    }

    /// Stop the whole group: SIGTERM, the grace, then SIGKILL; returns once it is gone.
    pub async fn stop(mut self) {
        terminate_group(self.pgid, &mut self.child, self.kill_grace).await;
        // Gone: nothing for `Drop` to signal (the id may be reused).
        self.pgid = 0;
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        signal_group(self.pgid, Signal::SIGKILL);
    }
}
