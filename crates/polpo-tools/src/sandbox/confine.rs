//! What a sandboxed process does between `fork` and `exec`, and the kernel probes that say what
//! this host supports. This is the crate's only `unsafe` code.
//!
//! The child of `fork` in a multi-threaded server may only make async-signal-safe calls: no
//! allocation, no locks. So everything is prepared before the spawn ([`ChildSetup`]: numbers,
//! an already-built Landlock ruleset fd) and the closure below only issues system calls.
//!
//! The order matters:
//! 0. `setsid`: the process leads a new session and process group (the group the runner
//!    signals), and so has no controlling terminal — a command cannot push keystrokes into
//!    the terminal the server runs in (`TIOCSTI`), nor get its signals.
//! 1. Where the host allows it, `unshare` new PID and mount namespaces (and, without root, a
//!    user namespace to be allowed to). Then, in every mode, `fork` once more: the grandchild
//!    goes on to `exec` the command (in a namespace it is its PID 1, and when it exits the
//!    kernel kills every process left there — `setsid` and double-forked children included).
//!    The intermediate process closes every descriptor (so it holds no pipe open), restores
//!    default signal dispositions (so the runner's SIGTERM and SIGKILL to the process group
//!    end it), waits, and exits with the grandchild's status. The grandchild asks for SIGKILL
//!    when the intermediate dies, so killing the group kills the namespace.
//!
//!    The intermediate also makes the command die with the server, even a server killed with
//!    SIGKILL (whose own clean-up never runs): it asks for [`SERVER_GONE`] as its parent-death
//!    signal and, each time that signal or SIGCHLD wakes it, compares its parent with the
//!    server's pid; once they differ it SIGKILLs its whole process group. The comparison is
//!    what makes it safe: the kernel sends the parent-death signal when the *thread* that
//!    spawned the process exits (a blocking-pool thread retires after 10 s idle), and then
//!    re-parents the process to another thread of the server, so only a changed parent pid
//!    means the server is gone. An unconfirmed write therefore cannot complete behind the
//!    operator's back after a crash.
//! 2. In the private mount namespace (made private first, so nothing propagates back to the
//!    server's), an empty read-only tmpfs covers each hidden directory (`.polpo/`). Landlock
//!    later forbids the command to unmount it.
//! 3. Resource limits.
//! 4. Identity: switch to `run_as`, or, for root, empty the capability bounding, ambient and
//!    inheritable sets so that after `exec` uid 0 holds no capability (no DAC override, no
//!    ptrace or kill of other users' processes, no mounts).
//! 5. `no_new_privs`, then `landlock_restrict_self` with the prepared file-system ruleset and
//!    again with the shared network ruleset (stacked layers: both apply).
//! 6. Every descriptor above stderr is marked close-on-exec, so none the server holds without
//!    the flag (inherited from whoever started it) reaches the command.
#![allow(unsafe_code)]

use nix::libc;
use nix::sys::resource::{Resource, setrlimit};
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

/// `LANDLOCK_CREATE_RULESET_VERSION`: asks `landlock_create_ruleset` for the ABI version.
const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
/// `_LINUX_CAPABILITY_VERSION_3`: 64-bit capability sets in two 32-bit words.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;
/// Highest signal number whose disposition the intermediate process resets.
const LAST_SIGNAL: libc::c_int = 64;
/// `CLOSE_RANGE_CLOEXEC` (Linux 5.11): mark the range close-on-exec instead of closing it.
const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
/// Descriptors marked one by one where `close_range` is missing.
const FALLBACK_FD_LIMIT: libc::c_int = 1024;
/// Highest capability number dropped when the kernel does not say (`cap_last_cap`).
const FALLBACK_LAST_CAPABILITY: libc::c_ulong = 63;

/// The intermediate process's parent-death signal: it wakes the process to check whether
/// the server is still its parent (see the module documentation).
const SERVER_GONE: libc::c_int = libc::SIGUSR2;

/// Options of the tmpfs that hides a directory: empty, tiny, not writable by anyone.
const HIDING_TMPFS_OPTIONS: &CStr = c"mode=0555,size=4k";

/// How a process tree is kept inside its own PID and mount namespaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Containment {
    /// `unshare(CLONE_NEWPID | CLONE_NEWNS)`: needs `CAP_SYS_ADMIN` (the server runs as root).
    Namespaces,
    /// The same plus `CLONE_NEWUSER`: for an unprivileged server where user namespaces are
    /// enabled. No id mapping is written; files keep the server's owner.
    UserNamespaces,
}

impl Containment {
    fn flags(self) -> libc::c_int {
        match self {
            Containment::Namespaces => libc::CLONE_NEWPID | libc::CLONE_NEWNS,
            Containment::UserNamespaces => libc::CLONE_NEWUSER | libc::CLONE_NEWPID | libc::CLONE_NEWNS,
        }
    }
}

/// Everything the child does before `exec`, computed before the spawn.
#[derive(Debug)]
pub(crate) struct ChildSetup {
    /// The server's pid: when the intermediate process's parent is another one, the server is
    /// gone and the command is killed.
    pub server: libc::pid_t,
    /// Run the command as PID 1 of fresh PID and mount namespaces.
    pub contain: Option<Containment>,
    /// Directories to cover with an empty read-only tmpfs (needs `contain`).
    pub hide: Vec<CString>,
    /// `(resource, limit)` pairs; soft and hard limit are both set to the value.
    pub rlimits: Vec<(Resource, libc::rlim_t)>,
    /// Switch to this uid and gid (supplementary groups: just the gid).
    pub run_as: Option<(libc::uid_t, libc::gid_t)>,
    /// Empty every capability set (for a root server without `run_as`).
    pub drop_capabilities: bool,
    /// Highest capability number of this kernel.
    pub last_capability: libc::c_ulong,
    /// Set `no_new_privs` (required by Landlock; also stops setuid binaries regaining root).
    pub no_new_privs: bool,
    /// A created Landlock ruleset to enforce on the command.
    pub landlock: Option<OwnedFd>,
    /// A second ruleset stacked on the first: the process-wide network rules.
    pub net_landlock: Option<BorrowedFd<'static>>,
}

impl ChildSetup {
    /// Arranges for [`ChildSetup::apply`] to run in the child of `command`'s spawn.
    pub fn install(self, command: &mut tokio::process::Command) {
        // SAFETY: `apply` runs in the forked child before `exec`. It only issues system calls
        // (setsid, unshare, fork, waitpid, close_range, sigaction via `signal`, prctl, setrlimit,
        // setgroups/setgid/setuid, capget/capset, landlock_restrict_self, _exit) on data
        // prepared before the fork; it allocates nothing and takes no lock, so it is
        // async-signal-safe even though the server is multi-threaded. `io::Error` values built
        // from an errno do not allocate.
        unsafe {
            command.pre_exec(move || self.apply());
        }
    }

    fn apply(&self) -> io::Result<()> {
        // SAFETY: plain system call. The child of the spawn is not a group leader yet (the
        // runner sets no process group), so this cannot fail with EPERM.
        check(unsafe { libc::setsid() })?;
        if let Some(contain) = self.contain {
            // SAFETY: plain system calls on integers; see `install`.
            check(unsafe { libc::unshare(contain.flags()) })?;
        } else if !self.hide.is_empty() {
            // Hiding is only ever planned with a private mount namespace; without one the
            // directory would stay writable, so refuse to run at all.
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let unwatched = watch_server(self.server)?;
        // SAFETY: fork in the (single-threaded) child; the parent branch never returns.
        let pid = check(unsafe { libc::fork() })?;
        if pid > 0 {
            mirror_child(pid, self.server);
        }
        // SAFETY: plain system call on a mask on this stack frame: the command starts with the
        // signal mask the server spawned it with.
        check(unsafe { libc::sigprocmask(libc::SIG_SETMASK, &unwatched, std::ptr::null_mut()) })?;
        if !self.hide.is_empty() {
            make_mounts_private()?;
            for dir in &self.hide {
                hide_directory(dir)?;
            }
        }
        for &(resource, limit) in &self.rlimits {
            setrlimit(resource, limit, limit).map_err(io::Error::from)?;
        }
        if let Some((uid, gid)) = self.run_as {
            // SAFETY: plain system calls; `gid` lives on this stack frame during the call.
            check(unsafe { libc::setgroups(1, &gid) })?;
            check(unsafe { libc::setgid(gid) })?;
            check(unsafe { libc::setuid(uid) })?;
        } else if self.drop_capabilities {
            drop_all_capabilities(self.last_capability)?;
        }
        if self.no_new_privs {
            // SAFETY: plain system call.
            check(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) })?;
        }
        if let Some(ruleset) = &self.landlock {
            // SAFETY: plain system call on a valid, open ruleset descriptor.
            check_long(unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0) })?;
        }
        if let Some(ruleset) = self.net_landlock {
            // SAFETY: plain system call on a valid, open ruleset descriptor (kept open by the
            // process for its whole life).
            check_long(unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0) })?;
        }
        // SIGKILL when the intermediate process dies. Set after the identity switch, which
        // would clear it.
        // SAFETY: plain system call.
        check(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) })?;
        close_inherited_on_exec();
        Ok(())
    }
}

/// Does nothing: a signal handled by it interrupts `sigsuspend`.
extern "C" fn wake(_: libc::c_int) {}

/// Prepares the process that is about to become the intermediate one: [`SERVER_GONE`] and
/// SIGCHLD are handled by [`wake`] and blocked (the intermediate waits for them with
/// `sigsuspend`, so none is lost between a check and the wait), [`SERVER_GONE`] is its
/// parent-death signal, and `server` must still be its parent (else it already died).
/// Returns the signal mask to restore in the command.
fn watch_server(server: libc::pid_t) -> io::Result<libc::sigset_t> {
    // SAFETY: plain system calls on signal sets and a handler on this stack frame.
    unsafe {
        let mut handler: libc::sigaction = std::mem::zeroed();
        handler.sa_sigaction = wake as extern "C" fn(libc::c_int) as libc::sighandler_t;
        libc::sigemptyset(&mut handler.sa_mask);
        let mut watched: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut watched);
        for signal in [SERVER_GONE, libc::SIGCHLD] {
            check(libc::sigaction(signal, &handler, std::ptr::null_mut()))?;
            libc::sigaddset(&mut watched, signal);
        }
        let mut unwatched: libc::sigset_t = std::mem::zeroed();
        check(libc::sigprocmask(libc::SIG_BLOCK, &watched, &mut unwatched))?;
        check(libc::prctl(libc::PR_SET_PDEATHSIG, SERVER_GONE as libc::c_ulong, 0, 0, 0))?;
        if libc::getppid() != server {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        Ok(unwatched)
    }
}

/// Marks every descriptor above stderr close-on-exec (std's own error pipe already is, so it
/// still reports a failed `exec`).
fn close_inherited_on_exec() {
    // SAFETY: plain system calls on integers.
    unsafe {
        if libc::syscall(libc::SYS_close_range, 3, libc::c_uint::MAX, CLOSE_RANGE_CLOEXEC) != 0 {
            for fd in 3..FALLBACK_FD_LIMIT {
                libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
            }
        }
    }
}

/// Stops mount events of this (new) namespace from propagating to the server's.
fn make_mounts_private() -> io::Result<()> {
    // SAFETY: plain system call with static C strings and null pointers where allowed.
    check(unsafe {
        libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    })
    .map(drop)
}

/// Covers `dir` with an empty, read-only tmpfs.
fn hide_directory(dir: &CStr) -> io::Result<()> {
    // SAFETY: plain system call; every pointer is a valid NUL-terminated string.
    check(unsafe {
        libc::mount(
            c"tmpfs".as_ptr(),
            dir.as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            HIDING_TMPFS_OPTIONS.as_ptr().cast(),
        )
    })
    .map(drop)
}

/// The intermediate process: hold nothing open, die on the runner's signals, wait for the
/// command and exit as it did — or, once `server` is no longer its parent (the server died),
/// SIGKILL its process group, the command included. Never returns.
fn mirror_child(pid: libc::pid_t, server: libc::pid_t) -> ! {
    // SAFETY: only system calls on integers and stack variables; `_exit` ends the process
    // without running any destructor or atexit handler of the forked server image.
    unsafe {
        if libc::syscall(libc::SYS_close_range, 0, libc::c_uint::MAX, 0) != 0 {
            for fd in 0..1024 {
                libc::close(fd);
            }
        }
        for signal in 1..=LAST_SIGNAL {
            if ![libc::SIGKILL, libc::SIGSTOP, libc::SIGCHLD, SERVER_GONE].contains(&signal) {
                libc::signal(signal, libc::SIG_DFL);
            }
        }
        let mut unblocked: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut unblocked);
        let mut status: libc::c_int = 0;
        loop {
            if libc::getppid() != server {
                libc::kill(0, libc::SIGKILL);
            }
            match libc::waitpid(pid, &mut status, libc::WNOHANG) {
                done if done == pid => break,
                // Still running: sleep until SIGCHLD or the parent-death signal (both blocked
                // outside this call, so neither can slip in between the checks and the wait).
                0 => {
                    libc::sigsuspend(&unblocked);
                }
                _ if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) => {}
                _ => libc::_exit(127),
            }
        }
        if libc::WIFEXITED(status) {
            libc::_exit(libc::WEXITSTATUS(status));
        }
        let signal = libc::WTERMSIG(status);
        libc::kill(libc::getpid(), signal);
        libc::_exit(128 + signal)
    }
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Empties the bounding and ambient sets and the inheritable set, so `exec` leaves uid 0 with
/// no capability at all (the effective and permitted sets after `exec` are computed from them).
fn drop_all_capabilities(last: libc::c_ulong) -> io::Result<()> {
    for cap in 0..=last {
        // SAFETY: plain system call; EINVAL for a number the kernel does not know is harmless.
        unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) };
    }
    // SAFETY: plain system call.
    check(unsafe { libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong, 0, 0, 0) })?;
    let mut header = CapHeader { version: CAPABILITY_VERSION_3, pid: 0 };
    let mut data = [CapData::default(); 2];
    // SAFETY: header and data are valid, correctly laid-out stack buffers for version 3.
    check_long(unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) })?;
    for word in &mut data {
        word.inheritable = 0;
    }
    // SAFETY: as above.
    check_long(unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) })?;
    Ok(())
}

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 { Err(io::Error::last_os_error()) } else { Ok(ret) }
}

fn check_long(ret: libc::c_long) -> io::Result<libc::c_long> {
    if ret < 0 { Err(io::Error::last_os_error()) } else { Ok(ret) }
}

/// The Landlock ABI version of the running kernel, `None` when Landlock is missing or disabled.
pub(crate) fn landlock_abi() -> Option<i32> {
    // SAFETY: the documented version query: null attributes, size 0, flag VERSION.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    i32::try_from(abi).ok().filter(|abi| *abi > 0)
}

/// Which containment this host allows, found by starting `sh -c :` after doing what a
/// contained run does first: `unshare`, make the mounts private, and hide a directory (the
/// temp dir, in the probe's own mount namespace). Container runtimes often forbid these.
pub(crate) fn probe_containment() -> Option<Containment> {
    let probe_dir = CString::new(std::env::temp_dir().into_os_string().into_encoded_bytes()).ok()?;
    [Containment::Namespaces, Containment::UserNamespaces].into_iter().find(|&contain| {
        let mut command = std::process::Command::new("sh");
        command
            .args(["-c", ":"])
            .env_clear()
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        let flags = contain.flags();
        let probe_dir = probe_dir.clone();
        // SAFETY: the closure only issues system calls on an integer and on a C string
        // built before the fork (async-signal-safe).
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut command, move || {
                check(libc::unshare(flags))?;
                make_mounts_private()?;
                hide_directory(&probe_dir)
            });
        }
        command.status().is_ok_and(|status| status.success())
    })
}

/// Highest capability number of the running kernel.
pub(crate) fn last_capability() -> libc::c_ulong {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(FALLBACK_LAST_CAPABILITY)
}

/// True when the server runs with effective uid 0.
pub(crate) fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}
