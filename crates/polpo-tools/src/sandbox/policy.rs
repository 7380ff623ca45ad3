//! What a confined process is allowed, and what this host can enforce.

use super::confine::{self, Containment};
use super::paths::PathRules;
use crate::{ToolContext, ToolError};
use polpo_core::config::SandboxSettings;
use std::path::PathBuf;
use std::sync::OnceLock;

/// A comma-separated list of features [`sandbox_support`] reports as missing — `landlock`,
/// `namespaces`, `network` (Landlock's network rules) — so tests can exercise the refusal, the fallbacks and the start-up notices on
/// a kernel that has them. Not meant for production.
pub const FORCE_UNAVAILABLE_ENV: &str = "POLPO_SANDBOX_FORCE_UNAVAILABLE";

/// Resource limits of a confined process (`setrlimit`, soft = hard). `0` leaves one unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceLimits {
    /// CPU seconds (`RLIMIT_CPU`); the process gets SIGKILL past it.
    pub cpu_seconds: u64,
    /// Address space in bytes (`RLIMIT_AS`); allocations fail past it.
    pub memory_bytes: u64,
    /// Processes of the process's user (`RLIMIT_NPROC`). It counts every process of that uid
    /// on the host, and the kernel does not enforce it for root: it bites with `run_as`.
    pub max_processes: u64,
    /// Largest file the process may write, in bytes (`RLIMIT_FSIZE`).
    pub file_size_bytes: u64,
}

impl Default for ResourceLimits {
    /// 600 CPU seconds (the longest `bash` timeout), 8 GiB of address space (runtimes such as
    /// the JVM reserve far more than they use), 512 processes, 2 GiB files.
    fn default() -> Self {
        Self { cpu_seconds: 600, memory_bytes: 8 << 30, max_processes: 512, file_size_bytes: 2 << 30 }
    }
}

/// How a command that runs agent-chosen code is confined (the `bash` tool). Command hooks are
/// project policy and run without it: they get the process containment, the environment
/// allow-list and the output and time bounds, but their own filesystem access.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Confinement {
    /// Real paths the process may write beneath (the workspace or the agent's allowed paths).
    pub writable: Vec<PathBuf>,
    /// Real paths it may neither read nor write even beneath `writable` (`.polpo/`).
    pub protected: Vec<PathBuf>,
    /// Real paths it may read and execute besides the system directories (an MCP server's
    /// own program, installed outside them); `bash` has none.
    pub readable: Vec<PathBuf>,
    /// Resource limits.
    pub limits: ResourceLimits,
    /// Run as this user (name) instead of the server's; the workspace must be writable by it.
    pub run_as: Option<String>,
}

impl Confinement {
    /// The confinement of agent-chosen code run for `ctx`: `bash`, and everything confined like
    /// it (custom tools, stdio MCP servers, task checks), built here once so they cannot drift
    /// apart. `ctx`'s allowed roots are writable (the workspace when it names none), its
    /// protected paths (`.polpo/`) closed, `readable` open besides the system directories,
    /// and the project's `settings.sandbox` limits and user apply. A caller that writes
    /// elsewhere (a custom tool's scratch directory) narrows `writable` afterwards.
    pub fn of(ctx: &ToolContext, readable: Vec<PathBuf>) -> Result<Self, ToolError> {
        let rules = PathRules::of(ctx)?;
        Ok(Self {
            writable: rules.roots().to_vec(),
            protected: rules.protected().to_vec(),
            readable,
            limits: ctx.sandbox.limits,
            run_as: ctx.sandbox.run_as.clone(),
        })
    }
}

/// The confinement settings of a project (`settings.sandbox`), as the runtime hands them to
/// the tools.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SandboxPolicy {
    /// Resource limits of `bash`.
    pub limits: ResourceLimits,
    /// Run `bash` as this user.
    pub run_as: Option<String>,
    /// Let `bash` run without filesystem confinement where Landlock is missing (otherwise it
    /// refuses with `sandbox_unavailable`).
    pub allow_unconfined: bool,
}

/// What the running kernel and privileges allow the sandbox to enforce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxSupport {
    /// Landlock ABI version; `None` means file-system confinement is unavailable.
    pub landlock_abi: Option<i32>,
    containment: Option<Containment>,
    /// Landlock network rules are usable (ABI ≥ 4 and not forced off).
    network: bool,
}

/// The oldest Landlock ABI with the signal and abstract-socket scopes.
const SCOPED_ABI: i32 = 6;
/// The oldest Landlock ABI with network (TCP connect) rules.
const NETWORK_ABI: i32 = 4;

impl SandboxSupport {
    /// The PID and mount namespaces commands run in; `None`: only their process group is
    /// killed, so `setsid` children can survive, and nothing can be hidden by a mount.
    pub(crate) fn containment(&self) -> Option<Containment> {
        self.containment
    }

    /// Whether `bash` can be kept off the server's own port (Landlock network rules).
    pub(crate) fn network_rules(&self) -> bool {
        self.network
    }

    /// What is *not* enforced on this host (empty when all is), for the operator: printed at
    /// start-up and reported by `polpo validate`.
    pub fn notices(&self) -> Vec<SandboxNotice> {
        let mut notices = Vec::new();
        match self.landlock_abi {
            None => notices.push(SandboxNotice {
                code: "sandbox_unavailable",
                message: "tool sandbox: Landlock is not available on this kernel; `bash` is refused (sandbox_unavailable) unless settings.sandbox.allowUnconfined is true, and then runs without file-system confinement".to_owned(),
            }),
            Some(abi) if abi < SCOPED_ABI => notices.push(SandboxNotice {
                code: "sandbox_partial",
                message: format!(
                    "tool sandbox: Landlock ABI {abi} lacks signal scoping (ABI {SCOPED_ABI}); `bash` could signal other processes of the server's user"
                ),
            }),
            Some(_) => {}
        }
        if self.landlock_abi.is_some() && !self.network {
            notices.push(SandboxNotice {
                code: "sandbox_partial",
                message: format!(
                    "tool sandbox: Landlock network rules (ABI {NETWORK_ABI}) are not available; `bash` can connect to this server's own port and, without an API key, drive its API (set POLPO_API_KEY)"
                ),
            });
        }
        if self.containment.is_none() {
            notices.push(SandboxNotice {
                code: "sandbox_partial",
                message: "tool sandbox: cannot create PID and mount namespaces here; setsid children of `bash` and command hooks are not contained (only their process group is killed), and `bash` cannot create entries at the top level of a workspace that holds .polpo/".to_owned(),
            });
        }
        notices
    }
}

/// One thing the sandbox cannot enforce on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxNotice {
    /// `sandbox_unavailable` (no file-system confinement) or `sandbox_partial`.
    pub code: &'static str,
    /// A sentence for the operator.
    pub message: String,
}

impl From<&SandboxSettings> for SandboxPolicy {
    /// The project's `settings.sandbox`, absent fields taking the defaults (MB become bytes).
    fn from(settings: &SandboxSettings) -> Self {
        let defaults = ResourceLimits::default();
        let mb = |value: Option<u64>, default: u64| value.map_or(default, |mb| mb.saturating_mul(1 << 20));
        Self {
            limits: ResourceLimits {
                cpu_seconds: settings.cpu_seconds.unwrap_or(defaults.cpu_seconds),
                memory_bytes: mb(settings.memory_mb, defaults.memory_bytes),
                max_processes: settings.max_processes.unwrap_or(defaults.max_processes),
                file_size_bytes: mb(settings.file_size_mb, defaults.file_size_bytes),
            },
            run_as: settings.run_as.clone(),
            allow_unconfined: settings.allow_unconfined.unwrap_or(false),
        }
    }
}

impl SandboxPolicy {
    /// Refuse to start `what` (`"bash is disabled"`, `"MCP server `x` is not started"`) with
    /// `sandbox_unavailable` where this host cannot confine its files (no Landlock), unless the
    /// project allows running unconfined: agent-chosen code never runs with the server's file
    /// access by accident.
    pub fn require_confinement(&self, what: &str) -> Result<(), ToolError> {
        if sandbox_support().landlock_abi.is_none() && !self.allow_unconfined {
            return Err(ToolError::new(
                "sandbox_unavailable",
                format!(
                    "{what}: this host has no Landlock file-system sandbox (set settings.sandbox.allowUnconfined to run it unconfined)"
                ),
            ));
        }
        Ok(())
    }
}

/// What this host supports, probed once (the probe starts one short process).
pub fn sandbox_support() -> &'static SandboxSupport {
    static SUPPORT: OnceLock<SandboxSupport> = OnceLock::new();
    SUPPORT.get_or_init(|| {
        let forced = std::env::var(FORCE_UNAVAILABLE_ENV).unwrap_or_default();
        let off = |feature: &str| forced.split(',').any(|f| f.trim() == feature);
        let landlock_abi = confine::landlock_abi().filter(|_| !off("landlock"));
        SandboxSupport {
            landlock_abi,
            containment: confine::probe_containment().filter(|_| !off("namespaces")),
            network: landlock_abi.is_some_and(|abi| abi >= NETWORK_ABI) && !off("network"),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kernel_without_network_rules_is_reported() {
        let support = |abi: i32, network: bool| SandboxSupport {
            landlock_abi: Some(abi),
            containment: Some(Containment::Namespaces),
            network,
        };
        assert_eq!(support(7, true).notices(), Vec::new());
        let notices = support(7, false).notices();
        assert_eq!(notices.len(), 1, "{notices:?}");
        assert_eq!(notices[0].code, "sandbox_partial");
        assert!(notices[0].message.contains("own port"), "{notices:?}");
    }

    #[test]
    fn settings_fill_in_defaults_and_scale_megabytes() {
        let policy = SandboxPolicy::from(&SandboxSettings::default());
        assert_eq!(policy, SandboxPolicy::default());
        let settings = SandboxSettings {
            memory_mb: Some(256),
            cpu_seconds: Some(0),
            run_as: Some("nobody".into()),
            allow_unconfined: Some(true),
            ..SandboxSettings::default()
        };
        let policy = SandboxPolicy::from(&settings);
        assert_eq!(policy.limits.memory_bytes, 256 << 20);
        assert_eq!(policy.limits.cpu_seconds, 0);
        assert_eq!(policy.limits.file_size_bytes, ResourceLimits::default().file_size_bytes);
        assert_eq!(policy.run_as.as_deref(), Some("nobody"));
        assert!(policy.allow_unconfined);
    }
}
