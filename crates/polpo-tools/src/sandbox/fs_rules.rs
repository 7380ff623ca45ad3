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
//! Every other grant — the read-only system directories, `/etc`, the devices — is built the
//! same way around a protected path that lies beneath it (a project under `/opt`, say).
//!
//! Renames and links across directories need `REFER`, which Landlock only allows when the
//! destination grants no more than the source — so nothing can be moved or linked into or out
//! of a protected directory either.

use super::SandboxError;
use landlock::{
    ABI, Access, AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreated, RulesetCreatedAttr, Scope,
};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The ABI whose rights are requested: 6 adds the signal and abstract-socket scopes. Rights a
/// kernel lacks are dropped (best effort); the start-up notice reports an older ABI.
const REQUESTED_ABI: ABI = ABI::V6;

/// System directories a command reads and executes from (missing ones are skipped). Not
/// `/dev`: uid 0 owns the disk devices, so reading them needs no capability; only the devices
/// below are granted.
const SYSTEM_READ: &[&str] = &["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt", "/proc", "/sys"];
/// Secrets in `/etc` that its owner, root, reads without any capability: password hashes,
/// sudo rules, SSH host keys, TLS private keys. Never granted; under a root server only the
/// world-readable rest of `/etc` is (see [`world_readable_etc`]), otherwise all the rest, the
/// kernel's own permissions keeping root's files from other users.
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
/// The devices a command may use (read and write). Not `/dev/tty`: a command has no
/// controlling terminal (it leads its own session), and the server's terminal is not its to
/// use (`TIOCSTI` would type into the user's shell).
const DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"];
/// Entries of `/etc` looked at, at most, when finding the world-readable ones; what lies past
/// the budget is not granted.
const ETC_WALK_BUDGET: usize = 50_000;

/// What a confined process may touch, as real paths.
#[derive(Debug, Clone)]
pub(crate) struct FsPolicy<'a> {
    /// Read, write, create and delete beneath these, except under `protected`.
    pub writable: &'a [PathBuf],
    /// Left out of every grant (only listable, as part of a granted directory's tree).
    pub protected: &'a [PathBuf],
    /// Read and execute beneath these too, except under `protected`.
    pub readable: &'a [PathBuf],
    /// A private scratch directory (TMPDIR and HOME of the process).
    pub scratch: &'a Path,
    /// Read only the world-readable entries of `/etc`: for a root server without `run_as`,
    /// whose command owns root's files and so would read every root-only secret there.
    pub etc_world_readable_only: bool,
}

/// Builds the ruleset for `policy`, scoped so the process cannot signal or reach abstract unix
/// sockets of processes outside it. `None` when the kernel has no Landlock.
pub(crate) fn build_ruleset(policy: &FsPolicy<'_>) -> Result<Option<OwnedFd>, SandboxError> {
    let all = AccessFs::from_all(REQUESTED_ABI);
    let read = AccessFs::from_read(REQUESTED_ABI);
    let ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)
        .and_then(|r| r.scope(Scope::from_all(REQUESTED_ABI)))
        .and_then(Ruleset::create)
        .map_err(landlock_error)?;
    let mut grants = Grants { ruleset, protected: policy.protected };
    for dir in SYSTEM_READ.iter().map(Path::new).chain(policy.readable.iter().map(PathBuf::as_path)) {
        grants.grant(dir, read)?;
    }
    let etc = Path::new("/etc");
    if policy.etc_world_readable_only {
        grants.grant_exact(etc, AccessFs::ReadDir.into())?;
        for (path, whole) in world_readable_etc() {
            let access = if *whole { read } else { AccessFs::ReadDir.into() };
            grants.grant(path, access)?;
        }
    } else {
        let etc_secrets: Vec<PathBuf> = ETC_SECRETS.iter().map(PathBuf::from).collect();
        grants.grant_except(etc, &etc_secrets, read)?;
    }
    // /etc/resolv.conf and friends are often symlinks into /run; grant their targets only
    // (under root, only world-readable ones).
    for entry in children(etc) {
        if let Ok(target) = std::fs::canonicalize(&entry)
            && !target.starts_with("/etc")
            && target.is_file()
            && (!policy.etc_world_readable_only || world_readable(&target))
        {
            grants.grant(&target, read)?;
        }
    }
    for device in DEVICES {
        grants.grant(Path::new(device), read | AccessFs::WriteFile | AccessFs::IoctlDev)?;
    }
    grants.grant(policy.scratch, all)?;
    for root in policy.writable {
        grants.grant(root, all)?;
    }
    Ok(Option::<OwnedFd>::from(grants.ruleset))
}

/// The ruleset being filled, and the paths no rule may cover.
struct Grants<'a> {
    ruleset: RulesetCreated,
    protected: &'a [PathBuf],
}

impl Grants<'_> {
    /// Grants `access` beneath `path` minus the protected paths: a system directory that holds
    /// a project's `.polpo/` is granted around it like a workspace is.
    fn grant(&mut self, path: &Path, access: BitFlags<AccessFs>) -> Result<(), SandboxError> {
        let protected = self.protected;
        self.grant_except(path, protected, access)
    }

    /// Grants `access` beneath `root` but not beneath any `excluded` path (nor any protected
    /// one): a root that holds one gets only `ReadDir` itself and its entries are handled one
    /// by one (so entries created there later get no rule).
    fn grant_except(
        &mut self,
        root: &Path,
        excluded: &[PathBuf],
        access: BitFlags<AccessFs>,
    ) -> Result<(), SandboxError> {
        let covers = |p: &PathBuf| root.starts_with(p);
        let inside = |p: &PathBuf| p.starts_with(root);
        if excluded.iter().any(covers) || self.protected.iter().any(covers) {
            return Ok(());
        }
        if !excluded.iter().any(inside) && !self.protected.iter().any(inside) {
            return self.grant_exact(root, access);
        }
        self.grant_exact(root, AccessFs::ReadDir.into())?;
        for entry in children(root) {
            // Entries are real paths unless they are symlinks; a symlink needs no rule of its
            // own (Landlock checks the path it resolves to).
            if entry.is_symlink() {
                continue;
            }
            self.grant_except(&entry, excluded, access)?;
        }
        Ok(())
    }

    /// One rule: `access` beneath `path` (file rights only, for a file).
    fn grant_exact(&mut self, path: &Path, access: BitFlags<AccessFs>) -> Result<(), SandboxError> {
        // Paths that do not exist on this host (no /lib32, say) are simply not granted.
        let Ok(fd) = PathFd::new(path) else {
            return Ok(());
        };
        let access = if path.is_dir() { access } else { access & AccessFs::from_file(REQUESTED_ABI) };
        (&mut self.ruleset).add_rule(PathBeneath::new(fd, access)).map(drop).map_err(landlock_error)
    }
}

/// The read grants that make up "what of `/etc` any user may read", found by one walk of
/// `/etc` per process (on first use) and kept: `(path, whole)` — `whole` grants reading the
/// subtree, otherwise only listing the directory (its readable entries follow in the list).
/// A directory is granted whole when everything beneath it is world-readable (directories
/// world-readable and searchable) and none of it is a named secret; `/etc` itself never is,
/// so a file created at its top level later gets no rule. Symlinks get no rule of their own.
fn world_readable_etc() -> &'static [(PathBuf, bool)] {
    static GRANTS: OnceLock<Vec<(PathBuf, bool)>> = OnceLock::new();
    GRANTS.get_or_init(|| {
        let mut grants = Vec::new();
        let mut budget = ETC_WALK_BUDGET;
        for entry in children(Path::new("/etc")) {
            walk_world_readable(&entry, &mut budget, &mut grants);
        }
        grants
    })
}

/// Appends the grants for `path` to `out` and says whether `path` was granted whole (or
/// needs no rule: a symlink).
fn walk_world_readable(path: &Path, budget: &mut usize, out: &mut Vec<(PathBuf, bool)>) -> bool {
    let Some(left) = budget.checked_sub(1) else {
        return false;
    };
    *budget = left;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return false;
    };
    if meta.file_type().is_symlink() {
        return true;
    }
    if ETC_SECRETS.iter().any(|secret| path == Path::new(secret)) || !readable_by_anyone(&meta) {
        return false;
    }
    if !meta.is_dir() {
        out.push((path.to_path_buf(), true));
        return true;
    }
    let mut parts = Vec::new();
    let mut whole = true;
    for entry in children(path) {
        whole &= walk_world_readable(&entry, budget, &mut parts);
    }
    if whole {
        out.push((path.to_path_buf(), true));
    } else {
        out.push((path.to_path_buf(), false));
        out.extend(parts);
    }
    whole
}

/// Readable by any user: `o+r`, and `o+x` too for a directory.
fn readable_by_anyone(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let mode = meta.permissions().mode();
    let needed = if meta.is_dir() { 0o005 } else { 0o004 };
    mode & needed == needed
}

fn world_readable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|meta| readable_by_anyone(&meta))
}

fn children(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir).map(|entries| entries.flatten().map(|e| e.path()).collect()).unwrap_or_default()
}

fn landlock_error(e: landlock::RulesetError) -> SandboxError {
    SandboxError::Confine(std::io::Error::other(e.to_string()))
}
