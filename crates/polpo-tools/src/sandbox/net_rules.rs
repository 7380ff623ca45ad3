//! The Landlock network layer of `bash`: it may connect to every TCP port except the ones the
//! process's own server listens on, so a command cannot call the server's API over loopback
//! (without an API key the server trusts every local process, and the API can rewrite the
//! agent that runs the command).
//!
//! Landlock network rules are an allow-list (`LANDLOCK_ACCESS_NET_CONNECT_TCP`, ABI 4): a
//! ruleset that handles the right forbids every port without a rule. So this layer is one
//! ruleset holding a rule for each of the 65,535 ports but the denied ones. Building it takes
//! that many `landlock_add_rule` calls, so it is built once, on first use, and its descriptor
//! kept for the life of the process; each confined child stacks it (`landlock_restrict_self`
//! once more) on top of its per-call file-system ruleset.
//!
//! The denied ports are a process-wide setting: one process serves one project on one listener
//! (`polpo serve`/`dev`), the port is only known once that listener is bound, and every `bash`
//! call of the process must be kept off it, whichever runtime or request started it.

use super::SandboxError;
use landlock::{AccessNet, CompatLevel, Compatible, NetPort, Ruleset, RulesetAttr, RulesetCreatedAttr};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::OnceLock;

/// The ports confined commands may not connect to; set once.
static DENIED_PORTS: OnceLock<Vec<u16>> = OnceLock::new();
/// The connect ruleset for [`DENIED_PORTS`], built on first use (or why it could not be).
static RULESET: OnceLock<Result<OwnedFd, String>> = OnceLock::new();

/// Forbids every confined command of this process to open a TCP connection to `ports` (on
/// any address): the server calls it with its own port once its listener is bound, so that
/// `bash` cannot drive the server's API. Process-wide because a process runs one server; the
/// set is fixed by the first call — a later call with other ports is refused (the ruleset may
/// already be built and in force), one with the same ports is a no-op. Where the kernel has no
/// Landlock network rules (ABI < 4) the ports stay reachable and [`super::sandbox_support`]'s
/// notices say so.
pub fn deny_connect_ports(ports: &[u16]) -> Result<(), SandboxError> {
    let mut wanted = ports.to_vec();
    wanted.sort_unstable();
    wanted.dedup();
    let set = DENIED_PORTS.get_or_init(|| wanted.clone());
    if *set == wanted {
        Ok(())
    } else {
        Err(SandboxError::Confine(std::io::Error::other(format!("the denied ports are already set to {set:?}"))))
    }
}

/// The ports [`deny_connect_ports`] set (empty when none).
pub fn denied_connect_ports() -> &'static [u16] {
    DENIED_PORTS.get().map_or(&[], Vec::as_slice)
}

/// The connect ruleset to stack on a confined command, `None` when no port is denied. Built on
/// the first call after the ports are set; the descriptor stays open for the process's life.
pub(crate) fn connect_ruleset() -> Result<Option<BorrowedFd<'static>>, SandboxError> {
    let ports = denied_connect_ports();
    if ports.is_empty() {
        return Ok(None);
    }
    match RULESET.get_or_init(|| build(ports)) {
        Ok(fd) => Ok(Some(fd.as_fd())),
        Err(message) => Err(SandboxError::Confine(std::io::Error::other(message.clone()))),
    }
}

/// A ruleset handling TCP connect that allows every port but `denied`. A hard requirement: the
/// caller only asks on a kernel with network rules, and a silently partial ruleset would let
/// the denied ports through.
fn build(denied: &[u16]) -> Result<OwnedFd, String> {
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessNet::ConnectTcp)
        .and_then(Ruleset::create)
        .map_err(|e| e.to_string())?;
    for port in (0..=u16::MAX).filter(|port| !denied.contains(port)) {
        ruleset = ruleset.add_rule(NetPort::new(port, AccessNet::ConnectTcp)).map_err(|e| e.to_string())?;
    }
    Option::<OwnedFd>::from(ruleset).ok_or_else(|| "Landlock network rules are unavailable".to_owned())
}
