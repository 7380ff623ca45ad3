//! The Landlock ruleset a confined process runs under: what it may read, execute and write.
//!
//! Landlock only grants, beneath a path, and has no "deny" rule. A protected directory inside
//! a writable root (`.polpo/` in a workspace that is the project root) is normally hidden by
//! the process runner — an empty read-only tmpfs over it in the command's private mount
//! namespace — and the root is granted whole. Where mount namespaces are unavailable, "the
//! root minus `.polpo/`" is built here by granting each entry of the root except the
//! protected one (descending when it lies deeper). The price: the root itself gets no create
//! or delete right (a right on a directory covers everything beneath it, `.polpo/` included),
//! so a command can change existing top-level files and anything inside the existing
//! top-level directories, but cannot create or remove entries directly at the top level.
//!
//! Renames and links across directories need `REFER`, which Landlock only allows when the
//! destination grants no more than the source — so nothing can be moved or linked into or out
//! of a protected directory either.

use super::SandboxError;
use landlock::{
    ABI, Access, AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreated, RulesetCreatedAttr, Scope,
};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// The ABI whose rights are requested: 6 adds the signal and abstract-socket scopes. Rights a
/// kernel lacks are dropped (best effort); the start-up notice reports an older ABI.
const REQUESTED_ABI: ABI = ABI::V6;

/// System directories a command reads and executes from (missing ones are skipped). Not
/// `/dev`: uid 0 owns the disk devices, so reading them needs no capability; only the devices
/// below are granted.
const SYSTEM_READ: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt", "/proc", "/sys",
];
/// Secrets in `/etc` that its owner, root, reads without any capability: password hashes,
/// sudo rules, SSH host keys, TLS private keys. The rest of `/etc` is readable.
const ETC_SECRETS: &[&str] = &[
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssh",
    "/etc/ssl/private",
];
/// The devices a command may use (read and write).
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
];

/// What a confined process may touch, as real paths.
#[derive(Debug, Clone)]
pub(crate) struct FsPolicy<'a> {
    /// Read, write, create and delete beneath these, except under `protected`.
    pub writable: &'a [PathBuf],
    /// Left out of `writable` (only listable, as part of a writable root's tree).
    pub protected: &'a [PathBuf],
    /// A private scratch directory (TMPDIR and HOME of the process).
    pub scratch: &'a Path,
}

/// Builds the ruleset for `policy`, scoped so the process cannot signal or reach abstract unix
/// sockets of processes outside it. `None` when the kernel has no Landlock.
pub(crate) fn build_ruleset(policy: &FsPolicy<'_>) -> Result<Option<OwnedFd>, SandboxError> {
    let all = AccessFs::from_all(REQUESTED_ABI);
    let read = AccessFs::from_read(REQUESTED_ABI);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)
        .and_then(|r| r.scope(Scope::from_all(REQUESTED_ABI)))
        .and_then(Ruleset::create)
        .map_err(landlock_error)?;
    let mut grant = |path: &Path, access: BitFlags<AccessFs>| -> Result<(), SandboxError> {
        // Paths that do not exist on this host (no /lib32, say) are simply not granted.
        let Ok(fd) = PathFd::new(path) else {
            return Ok(());
        };
        let access = if path.is_dir() {
            access
        } else {
            access & AccessFs::from_file(REQUESTED_ABI)
        };
        add_rule(&mut ruleset, PathBeneath::new(fd, access))
    };
    for dir in SYSTEM_READ {
        grant(Path::new(dir), read)?;
    }
    let etc_secrets: Vec<PathBuf> = ETC_SECRETS.iter().map(PathBuf::from).collect();
    grant_except(Path::new("/etc"), &etc_secrets, read, &mut grant)?;
    // /etc/resolv.conf and friends are often symlinks into /run; grant their targets only.
    for entry in children(Path::new("/etc")) {
        if let Ok(target) = std::fs::canonicalize(&entry)
            && !target.starts_with("/etc")
            && target.is_file()
        {
            grant(&target, read)?;
        }
    }
    for device in DEVICES {
        grant(
            Path::new(device),
            read | AccessFs::WriteFile | AccessFs::IoctlDev,
        )?;
    }
    grant(policy.scratch, all)?;
    for root in policy.writable {
        grant_except(root, policy.protected, all, &mut grant)?;
    }
    Ok(Option::<OwnedFd>::from(ruleset))
}

/// Grants `access` beneath `root` but not beneath any `protected` path: a root that holds a
/// protected path gets only `ReadDir` itself and its entries are handled one by one (so
/// entries created there later get no rule).
fn grant_except(
    root: &Path,
    protected: &[PathBuf],
    access: BitFlags<AccessFs>,
    grant: &mut impl FnMut(&Path, BitFlags<AccessFs>) -> Result<(), SandboxError>,
) -> Result<(), SandboxError> {
    if protected.iter().any(|p| root.starts_with(p)) {
        return Ok(());
    }
    if !protected.iter().any(|p| p.starts_with(root)) {
        return grant(root, access);
    }
    grant(root, AccessFs::ReadDir.into())?;
    for entry in children(root) {
        // Entries are real paths unless they are symlinks; a symlink needs no rule of its own
        // (Landlock checks the path it resolves to).
        if entry.is_symlink() {
            continue;
        }
        grant_except(&entry, protected, access, grant)?;
    }
    Ok(())
}

fn children(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| entries.flatten().map(|e| e.path()).collect())
        .unwrap_or_default()
}

fn add_rule(ruleset: &mut RulesetCreated, rule: PathBeneath<PathFd>) -> Result<(), SandboxError> {
    ruleset.add_rule(rule).map(drop).map_err(landlock_error)
}

fn landlock_error(e: landlock::RulesetError) -> SandboxError {
    SandboxError::Confine(std::io::Error::other(e.to_string()))
}
