//! Running a process so that it cannot outlive, outgrow or out-wait its caller.
//!
//! Used by the `bash` tool and by command hooks. Each process leads its own session and process
//! group (so it has no controlling terminal) and,
//! where the host allows it, is PID 1 of its own PID namespace; when the call ends — normal
//! exit, timeout, cancellation, or the caller dropping the future — the whole group is
//! terminated (SIGTERM, a short grace, then SIGKILL) and the namespace with it, so background
//! children (`sleep 300 &`, even `setsid`) never survive as orphans. Output is read
//! concurrently into bounded buffers. A [`Confinement`] adds Landlock file-system rules,
//! resource limits and dropped privileges (see [`super::confine`]).

use super::confine::{self, ChildSetup};
use super::fs_rules::{FsPolicy, build_ruleset};
use super::net_rules::connect_ruleset;
use super::{CappedOutput, Confinement, ResourceLimits, sandbox_support};
use nix::sys::resource::Resource;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How long the output pipes may stay open after the group is gone (a process that escaped the
/// group with `setsid` can hold them); after that the output read so far is returned.
const DRAIN_LIMIT: Duration = Duration::from_secs(2);
/// How often the group is probed during the grace period.
const GROUP_POLL: Duration = Duration::from_millis(20);

/// What to execute.
#[derive(Debug, Clone, PartialEq)]
pub enum Program {
    /// A shell command line, run as `sh -c <command>`.
    Shell(String),
    /// A program and its arguments, run without a shell (no word splitting, no expansion).
    Argv(Vec<String>),
}

/// One process run: what, where, with which environment and input, and within which bounds.
#[derive(Debug, Clone)]
pub struct CommandSpec {
    /// The command.
    pub program: Program,
    /// Working directory.
    pub cwd: PathBuf,
    /// The complete environment (the process starts from an empty one); see
    /// [`scrubbed_env`](super::scrubbed_env).
    pub env: Vec<(String, String)>,
    /// Bytes piped to stdin, then closed (hooks send a JSON envelope); `None` means stdin is null.
    pub stdin: Option<Vec<u8>>,
    /// Wall-clock limit; the group is killed when it passes.
    pub timeout: Duration,
    /// Bytes kept per output stream (head and tail halves).
    pub output_cap: usize,
    /// Send stderr into the stdout buffer, interleaved as a terminal would show it.
    pub merge_stderr: bool,
    /// Time between SIGTERM and SIGKILL when the group is terminated.
    pub kill_grace: Duration,
    /// Cancelling it kills the group and ends the run with [`Termination::Cancelled`].
    pub cancel: CancellationToken,
    /// File-system rules, limits and identity for agent-chosen commands; `None` for trusted
    /// commands (hooks), which still get the process containment.
    pub confinement: Option<Confinement>,
}

impl CommandSpec {
    /// A spec with an empty environment, no stdin, a 120 s timeout, a 30 KB output cap per
    /// stream, separate stderr, a 2 s kill grace, its own cancellation token and no
    /// confinement.
    pub fn new(program: Program, cwd: impl Into<PathBuf>) -> Self {
        Self {
            program,
            cwd: cwd.into(),
            env: Vec::new(),
            stdin: None,
            timeout: Duration::from_secs(120),
            output_cap: 30 * 1024,
            merge_stderr: false,
            kill_grace: Duration::from_secs(2),
            cancel: CancellationToken::new(),
            confinement: None,
        }
    }
}

/// How the run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Termination {
    /// The process exited with this code.
    Exited {
        /// Exit code.
        code: i32,
    },
    /// The process was killed by this signal (not by us).
    Signaled {
        /// Signal number.
        signal: i32,
    },
    /// The timeout passed; the group was killed.
    TimedOut,
    /// The cancellation token fired; the group was killed.
    Cancelled,
}

/// The result of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandOutcome {
    /// How it ended.
    pub termination: Termination,
    /// Standard output (and stderr when merged).
    pub stdout: CappedOutput,
    /// Standard error (empty when merged).
    pub stderr: CappedOutput,
    /// The process group that ran (and was cleaned up), for traces.
    pub pgid: i32,
    /// Wall-clock run time.
    pub duration: Duration,
    /// What was actually enforced, for traces and the tool's details.
    pub isolation: Isolation,
}

/// What a run was actually held to (the host may not support everything).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Isolation {
    /// Landlock file-system rules were enforced.
    pub filesystem: bool,
    /// The process tree ran in its own PID namespace.
    pub contained: bool,
}

impl CommandOutcome {
    /// The shell-style exit code: the code, or 128 + signal; `None` after a timeout or cancel.
    pub fn exit_code(&self) -> Option<i32> {
        match self.termination {
            Termination::Exited { code } => Some(code),
            Termination::Signaled { signal } => Some(128 + signal),
            Termination::TimedOut | Termination::Cancelled => None,
        }
    }
}

/// Why a process could not be run at all.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The argv was empty.
    #[error("the command is empty")]
    EmptyCommand,
    /// The output pipe could not be created.
    #[error("cannot create output pipe: {0}")]
    Pipe(std::io::Error),
    /// The process could not be started (missing program, bad cwd, …).
    #[error("cannot start process: {0}")]
    Spawn(std::io::Error),
    /// Waiting for the process failed.
    #[error("cannot wait for process: {0}")]
    Wait(std::io::Error),
    /// The confinement could not be prepared (Landlock ruleset, scratch directory).
    #[error("cannot prepare the sandbox: {0}")]
    Confine(std::io::Error),
    /// `run_as` names no user of this host.
    #[error("no such user to run as: {0}")]
    UnknownUser(String),
}

impl SandboxError {
    /// Stable snake_case code.
    pub fn code(&self) -> &'static str {
        match self {
            SandboxError::EmptyCommand => "empty_command",
            SandboxError::Pipe(_) => "pipe_failed",
            SandboxError::Spawn(_) => "spawn_failed",
            SandboxError::Wait(_) => "wait_failed",
            SandboxError::Confine(_) => "sandbox_setup_failed",
            SandboxError::UnknownUser(_) => "unknown_user",
        }
    }
}

/// Runs one process inside the sandbox and returns once it and its whole process group are gone.
pub async fn run_command(spec: CommandSpec) -> Result<CommandOutcome, SandboxError> {
    let started = Instant::now();
    let mut command = build_command(&spec)?;
    let (setup, scratch, isolation) = prepare_child(&spec, &mut command)?;
    setup.install(&mut command);
    let merged = if spec.merge_stderr { Some(attach_merged_pipe(&mut command)?) } else { None };
    let mut child = command.spawn().map_err(SandboxError::Spawn)?;
    // Close our copies of the merged pipe's write end, so EOF arrives when the group is gone
    // (and the Landlock ruleset descriptor, which the child holds now).
    drop(command);
    let pgid = child.id().and_then(|id| i32::try_from(id).ok()).unwrap_or(0);
    let guard = GroupGuard { pgid };

    let stdin_task = spawn_stdin_writer(&mut child, spec.stdin.clone());
    let stdout = Arc::new(Mutex::new(CappedOutput::new(spec.output_cap)));
    let stderr = Arc::new(Mutex::new(CappedOutput::new(spec.output_cap)));
    let mut readers = Vec::new();
    match merged {
        Some(reader) => readers.push(spawn_reader(reader, stdout.clone())),
        None => {
            if let Some(out) = child.stdout.take() {
                readers.push(spawn_reader(out, stdout.clone()));
            }
            if let Some(err) = child.stderr.take() {
                readers.push(spawn_reader(err, stderr.clone()));
            }
        }
    }

    let termination = tokio::select! {
        status = child.wait() => {
            let status = status.map_err(SandboxError::Wait)?;
            match (status.code(), status.signal()) {
                (Some(code), _) => Termination::Exited { code },
                (None, Some(signal)) => Termination::Signaled { signal },
                (None, None) => Termination::Signaled { signal: 0 },
            }
        }
        () = tokio::time::sleep(spec.timeout) => Termination::TimedOut,
        () = spec.cancel.cancelled() => Termination::Cancelled,
    };
    terminate_group(pgid, &mut child, spec.kill_grace).await;
    // The group is gone; disarm the guard so it never signals a later group with a reused id.
    std::mem::forget(guard);

    let drain_deadline = Instant::now() + DRAIN_LIMIT;
    for reader in readers {
        finish_within(reader, drain_deadline).await;
    }
    if let Some(task) = stdin_task {
        task.abort();
    }
    drop(scratch);
    Ok(CommandOutcome {
        termination,
        stdout: take(&stdout),
        stderr: take(&stderr),
        pgid,
        duration: started.elapsed(),
        isolation,
    })
}

/// Decides what the child does before `exec`: always the PID namespace where the host allows
/// it; for a confined spec also limits, identity, a private scratch directory (its `TMPDIR` and
/// `HOME`) and the Landlock ruleset. Everything is computed here, before the fork.
pub(super) fn prepare_child(
    spec: &CommandSpec,
    command: &mut Command,
) -> Result<(ChildSetup, Option<Scratch>, Isolation), SandboxError> {
    let support = sandbox_support();
    let mut setup = ChildSetup {
        server: nix::unistd::getpid().as_raw(),
        contain: support.containment(),
        hide: Vec::new(),
        rlimits: Vec::new(),
        run_as: None,
        drop_capabilities: false,
        last_capability: 0,
        no_new_privs: false,
        landlock: None,
        net_landlock: None,
    };
    let mut isolation = Isolation { filesystem: false, contained: setup.contain.is_some() };
    let Some(confinement) = &spec.confinement else {
        return Ok((setup, None, isolation));
    };
    setup.rlimits = rlimits(&confinement.limits);
    setup.run_as = confinement.run_as.as_deref().map(lookup_user).transpose()?;
    setup.drop_capabilities = setup.run_as.is_none() && confine::is_root();
    setup.last_capability = confine::last_capability();
    setup.no_new_privs = true;
    let scratch = Scratch::create(setup.run_as)?;
    command.env("TMPDIR", &scratch.0).env("HOME", &scratch.0);
    // With a private mount namespace, every protected directory is covered by an empty
    // read-only tmpfs, wherever it lies — in a writable root (which can then be granted whole,
    // new top-level files included) or under a read-granted system directory. Without one (or
    // for a protected file), Landlock alone must leave it out of every grant (see `fs_rules`).
    let (hidden, left_out): (Vec<PathBuf>, Vec<PathBuf>) =
        confinement.protected.iter().cloned().partition(|path| setup.contain.is_some() && path.is_dir());
    setup.hide = hidden
        .into_iter()
        .map(|path| CString::new(path.into_os_string().into_encoded_bytes()))
        .collect::<Result<_, _>>()
        .map_err(|e| SandboxError::Confine(std::io::Error::other(e)))?;
    if support.landlock_abi.is_some() {
        setup.landlock = build_ruleset(&FsPolicy {
            writable: &confinement.writable,
            protected: &left_out,
            readable: &confinement.readable,
            scratch: &scratch.0,
            etc_world_readable_only: setup.drop_capabilities,
        })?;
        isolation.filesystem = setup.landlock.is_some();
        if support.network_rules() {
            setup.net_landlock = connect_ruleset()?;
        }
    }
    Ok((setup, Some(scratch), isolation))
}

fn rlimits(limits: &ResourceLimits) -> Vec<(Resource, nix::libc::rlim_t)> {
    [
        (Resource::RLIMIT_CPU, limits.cpu_seconds),
        (Resource::RLIMIT_AS, limits.memory_bytes),
        (Resource::RLIMIT_NPROC, limits.max_processes),
        (Resource::RLIMIT_FSIZE, limits.file_size_bytes),
        // No core dumps: one could hold whatever the process read.
        (Resource::RLIMIT_CORE, 0),
    ]
    .into_iter()
    .filter(|&(resource, value)| value > 0 || resource == Resource::RLIMIT_CORE)
    .collect()
}

fn lookup_user(name: &str) -> Result<(nix::libc::uid_t, nix::libc::gid_t), SandboxError> {
    match nix::unistd::User::from_name(name) {
        Ok(Some(user)) => Ok((user.uid.as_raw(), user.gid.as_raw())),
        _ => Err(SandboxError::UnknownUser(name.to_owned())),
    }
}

/// A private temporary directory for one confined run, removed with everything in it when
/// the run ends.
pub(super) struct Scratch(PathBuf);

/// Number of the next scratch directory this process names.
static NEXT_SCRATCH: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many taken names a new scratch directory steps over before giving up.
const SCRATCH_ATTEMPTS: u32 = 1024;

impl Scratch {
    fn create(owner: Option<(nix::libc::uid_t, nix::libc::gid_t)>) -> Result<Self, SandboxError> {
        use std::os::unix::fs::DirBuilderExt;
        // A process killed before its scratch directories were removed leaves them behind under
        // its pid, which a later process may get again: a taken name is stepped over (the
        // directory is created, never reused, so a planted one or a symlink is never entered).
        let mut attempts = 0;
        let path = loop {
            let n = NEXT_SCRATCH.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let path = std::env::temp_dir().join(format!("polpo-sandbox-{}-{n}", std::process::id()));
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => break path,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempts < SCRATCH_ATTEMPTS => attempts += 1,
                Err(e) => return Err(SandboxError::Confine(e)),
            }
        };
        let scratch = Self(path);
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(&scratch.0, Some(uid), Some(gid)).map_err(SandboxError::Confine)?;
        }
        Ok(scratch)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // Best effort: a leftover directory in the temp dir is harmless.
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(super) fn build_command(spec: &CommandSpec) -> Result<Command, SandboxError> {
    let mut command = match &spec.program {
        Program::Shell(line) => {
            let mut command = Command::new("sh");
            command.arg("-c").arg(line);
            command
        }
        Program::Argv(argv) => {
            let (program, args) = argv.split_first().ok_or(SandboxError::EmptyCommand)?;
            let mut command = Command::new(program);
            command.args(args);
            command
        }
    };
    command
        .current_dir(&spec.cwd)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(if spec.stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // No `process_group`: the child calls `setsid` itself (see `confine`), which makes it
        // the leader of a new group as well as of a session without a controlling terminal.
        .kill_on_drop(true);
    Ok(command)
}

/// Points stdout and stderr at one pipe and returns its read end.
fn attach_merged_pipe(command: &mut Command) -> Result<tokio::net::unix::pipe::Receiver, SandboxError> {
    let (reader, writer) = std::io::pipe().map_err(SandboxError::Pipe)?;
    let writer_copy = writer.try_clone().map_err(SandboxError::Pipe)?;
    command.stdout(writer_copy).stderr(writer);
    tokio::net::unix::pipe::Receiver::from_owned_fd(OwnedFd::from(reader)).map_err(SandboxError::Pipe)
}

fn spawn_stdin_writer(child: &mut Child, input: Option<Vec<u8>>) -> Option<JoinHandle<()>> {
    let (mut stdin, input) = (child.stdin.take()?, input?);
    Some(tokio::spawn(async move {
        // A process that exits without reading its input is not an error of ours.
        let _ = stdin.write_all(&input).await;
        let _ = stdin.shutdown().await;
    }))
}

pub(super) fn spawn_reader<R>(mut source: R, sink: Arc<Mutex<CappedOutput>>) -> JoinHandle<()>
where
    R: AsyncRead + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        let mut buf = vec![0u8; 16 * 1024];
        while let Ok(n @ 1..) = source.read(&mut buf).await {
            lock(&sink).push(&buf[..n]);
        }
    })
}

async fn finish_within(task: JoinHandle<()>, deadline: Instant) {
    let abort = task.abort_handle();
    if tokio::time::timeout_at(deadline, task).await.is_err() {
        abort.abort();
    }
}

fn lock(sink: &Mutex<CappedOutput>) -> std::sync::MutexGuard<'_, CappedOutput> {
    sink.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn take(sink: &Mutex<CappedOutput>) -> CappedOutput {
    std::mem::take(&mut *lock(sink))
}

/// True while a live process is left in the group. Zombies do not count: once killed, a
/// background child is re-parented to init, and an init that does not reap (common in
/// containers) would otherwise keep the group "alive" for the whole grace period.
fn group_alive(pgid: i32) -> bool {
    if pgid <= 0 || killpg(Pid::from_raw(pgid), None).is_err() {
        return false;
    }
    live_members_in_proc(pgid).unwrap_or(true)
}

/// Whether `/proc` lists a non-zombie process in group `pgid`; `None` when `/proc` is not
/// readable (then the signal probe above is all we know).
fn live_members_in_proc(pgid: i32) -> Option<bool> {
    let entries = std::fs::read_dir("/proc").ok()?;
    let live = entries.flatten().any(|entry| {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            return false;
        };
        // After the parenthesised command name: state, ppid, pgrp, …
        let Some((_, rest)) = stat.rsplit_once(')') else {
            return false;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next();
        let pgrp = fields.nth(1).and_then(|f| f.parse::<i32>().ok());
        pgrp == Some(pgid) && !matches!(state, Some("Z" | "X"))
    });
    Some(live)
}

pub(super) fn signal_group(pgid: i32, signal: Signal) {
    if pgid > 0 {
        // ESRCH (group already gone) is the outcome we want.
        let _ = killpg(Pid::from_raw(pgid), signal);
    }
}

/// SIGTERM the group, reap the leader, wait up to `grace` for the rest, then SIGKILL.
pub(super) async fn terminate_group(pgid: i32, child: &mut Child, grace: Duration) {
    if !group_alive(pgid) {
        let _ = child.wait().await;
        return;
    }
    signal_group(pgid, Signal::SIGTERM);
    let deadline = Instant::now() + grace;
    let _ = tokio::time::timeout_at(deadline, child.wait()).await;
    while group_alive(pgid) && Instant::now() < deadline {
        tokio::time::sleep(GROUP_POLL).await;
    }
    signal_group(pgid, Signal::SIGKILL);
    let _ = child.wait().await;
}

/// Kills the group if the run is abandoned mid-way (its future dropped), so even then nothing
/// is left running.
struct GroupGuard {
    pgid: i32,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        signal_group(self.pgid, Signal::SIGKILL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scratch_name_left_by_a_killed_process_with_the_same_pid_is_stepped_over() {
        let next = NEXT_SCRATCH.load(std::sync::atomic::Ordering::Relaxed);
        let left: Vec<PathBuf> = (next..next + 3)
            .map(|n| std::env::temp_dir().join(format!("polpo-sandbox-{}-{n}", std::process::id())))
            .collect();
        for dir in &left {
            std::fs::create_dir_all(dir).unwrap();
        }
        let scratch = Scratch::create(None).expect("a free name is found");
        assert!(!left.contains(&scratch.0), "{:?} was left by another process", scratch.0);
        assert!(scratch.0.is_dir());
        for dir in &left {
            std::fs::remove_dir(dir).unwrap();
        }
    }
}
