//! The one path check every file tool goes through.
//!
//! Paths are resolved the way the kernel would follow them — symlink by symlink, `..` applied
//! to the *resolved* parent — and the result must lie under an allowed root and outside every
//! protected path (the project's `.polpo/`, which holds the agent's own configuration, hooks,
//! sessions and keys: an agent that could write there could grant itself tools). Components that do
//! not exist yet (a file about to be written) are kept as written, so the check is decided by
//! the nearest existing ancestor. What remains is the usual check-then-use race: a process that
//! can swap a directory for a symlink between the check and the open can still escape; tools
//! resolve immediately before use to keep that window small.

use crate::{ToolContext, ToolError};
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// Symlink hops allowed in one resolution (the kernel's own limit).
const MAX_SYMLINK_HOPS: usize = 40;

/// Resolves `raw` (relative to the workspace, or absolute) to a real path inside the context's
/// allowed roots and outside its protected paths, or refuses it with `path_outside_sandbox`.
pub fn resolve_in_sandbox(ctx: &ToolContext, raw: &str) -> Result<PathBuf, ToolError> {
    if raw.is_empty() || raw.contains('\0') {
        return Err(ToolError::new("invalid_arguments", "path must be a non-empty string"));
    }
    let workspace = absolute(&ctx.workspace)?;
    let joined = workspace.join(raw);
    let resolved = resolve_real_path(&joined)
        .map_err(|e| ToolError::new("invalid_path", format!("cannot resolve path {raw}: {e}")))?;
    if PathRules::of(ctx)?.permits(&resolved) {
        Ok(resolved)
    } else {
        Err(ToolError::new("path_outside_sandbox", format!("path {raw} resolves outside the allowed paths")))
    }
}

/// Where a context's file tools may go, as real paths: under one of `roots` and not under any
/// of `protected`. Walkers (`glob`, `grep`) keep one to judge every entry they meet.
#[derive(Debug, Clone)]
pub struct PathRules {
    roots: Vec<PathBuf>,
    protected: Vec<PathBuf>,
}

impl PathRules {
    /// The context's rules: `allowed_paths` (or the workspace when empty) minus
    /// `protected_paths`, all resolved to real paths.
    pub fn of(ctx: &ToolContext) -> Result<Self, ToolError> {
        let roots: Vec<&Path> = if ctx.allowed_paths.is_empty() {
            vec![ctx.workspace.as_path()]
        } else {
            ctx.allowed_paths.iter().map(PathBuf::as_path).collect()
        };
        Ok(Self { roots: real_paths(roots)?, protected: real_paths(ctx.protected_paths.iter().map(PathBuf::as_path))? })
    }

    /// True when the real path `path` lies under an allowed root and under no protected path.
    pub fn permits(&self, path: &Path) -> bool {
        self.roots.iter().any(|root| lies_under(path, root)) && !self.is_protected(path)
    }

    /// The allowed roots, as real paths.
    pub fn roots(&self) -> &[PathBuf] {
        &self.roots
    }

    /// The protected paths, as real paths.
    pub fn protected(&self) -> &[PathBuf] {
        &self.protected
    }

    /// True when the real path `path` is a protected path or lies under one.
    pub fn is_protected(&self, path: &Path) -> bool {
        self.protected.iter().any(|p| lies_under(path, p))
    }
}

/// `Path::starts_with` (component by component) for a `root` that [`resolve_real_path`] made:
/// on a `path` written the same plain way — no `//`, no `.` component — a comparison of bytes
/// that ends at a separator says the same, without parsing either into components.
fn lies_under(path: &Path, root: &Path) -> bool {
    let (bytes, prefix) = (path.as_os_str().as_bytes(), root.as_os_str().as_bytes());
    if !is_plain(bytes) || !is_plain(prefix) {
        return path.starts_with(root);
    }
    match bytes.strip_prefix(prefix) {
        Some(rest) => prefix == b"/" || rest.is_empty() || rest[0] == b'/',
        None => false,
    }
}

/// True when `path` is absolute with no empty (`//`, a trailing `/`) or `.` component, so its
/// bytes between separators are its components.
fn is_plain(path: &[u8]) -> bool {
    path == b"/" || (path.first() == Some(&b'/') && path[1..].split(|&b| b == b'/').all(|c| !c.is_empty() && c != b"."))
}

fn real_paths<'a>(paths: impl IntoIterator<Item = &'a Path>) -> Result<Vec<PathBuf>, ToolError> {
    paths
        .into_iter()
        .map(|path| {
            let path = absolute(path)?;
            resolve_real_path(&path).map_err(|e| {
                ToolError::new("invalid_path", format!("cannot resolve sandbox path {}: {e}", path.display()))
            })
        })
        .collect()
}

fn absolute(path: &Path) -> Result<PathBuf, ToolError> {
    // The usual case, an absolute path written plainly, is already what `absolute` would make.
    if is_plain(path.as_os_str().as_bytes()) {
        return Ok(path.to_path_buf());
    }
    std::path::absolute(path)
        .map_err(|e| ToolError::new("invalid_path", format!("cannot make {} absolute: {e}", path.display())))
}

/// Follows every symlink in the absolute `path`, applying `..` to resolved parents, and keeps
/// non-existent trailing components as written. Unlike `fs::canonicalize` it works for files
/// that do not exist yet and for dangling symlinks (which resolve to their target's path, so a
/// write through them is checked where it would land).
pub fn resolve_real_path(path: &Path) -> io::Result<PathBuf> {
    if has_no_symlink(path) {
        return Ok(path.to_path_buf());
    }
    walk_real_path(path)
}

/// [`resolve_real_path`], component by component.
fn walk_real_path(path: &Path) -> io::Result<PathBuf> {
    // Walked as bytes: `rest` is what is left to follow (a symlink's target is put in front of
    // it), `resolved` the real path so far, which never holds `.`, `..`, `//` or a trailing `/`.
    let mut rest = path.as_os_str().as_bytes().to_vec();
    let mut at = 0;
    let mut resolved = Vec::with_capacity(rest.len() + 1);
    resolved.push(b'/');
    let mut hops = 0usize;
    while at < rest.len() {
        let end = rest[at..].iter().position(|&b| b == b'/').map_or(rest.len(), |i| at + i);
        let start = at;
        at = end + 1;
        match &rest[start..end] {
            b"" | b"." => {}
            b".." => {
                let parent = resolved.iter().rposition(|&b| b == b'/').unwrap_or(0);
                resolved.truncate(parent.max(1));
            }
            name => {
                let before = resolved.len();
                if before > 1 {
                    resolved.push(b'/');
                }
                resolved.extend_from_slice(name);
                let candidate = Path::new(OsStr::from_bytes(&resolved));
                match std::fs::symlink_metadata(candidate) {
                    Ok(meta) if meta.file_type().is_symlink() => {
                        hops += 1;
                        if hops > MAX_SYMLINK_HOPS {
                            return Err(io::Error::other("too many levels of symbolic links"));
                        }
                        let mut target = std::fs::read_link(candidate)?.into_os_string().into_vec();
                        // A relative target is relative to the link's directory, which is
                        // `resolved` without the link; an absolute one starts again at `/`.
                        resolved.truncate(if target.first() == Some(&b'/') { 1 } else { before });
                        target.push(b'/');
                        target.extend_from_slice(rest.get(at..).unwrap_or_default());
                        (rest, at) = (target, 0);
                    }
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }
    Ok(PathBuf::from(OsString::from_vec(resolved)))
}

/// True when `path` is already its own real path: written plainly (absolute, no `.`, `..` or
/// empty component) and existing with no symlink anywhere on it, which one `openat2` with
/// `RESOLVE_NO_SYMLINKS` tells in a single walk, where [`resolve_real_path`]'s walk asks the
/// kernel once per component (each time from the root). `false` — the walk decides — when
/// the path is not plain, a part of it is missing or a symlink, or `openat2` is unavailable.
fn has_no_symlink(path: &Path) -> bool {
    use nix::errno::Errno;
    use nix::fcntl::{AT_FDCWD, OFlag, OpenHow, ResolveFlag, openat2};
    use std::sync::atomic::{AtomicBool, Ordering};
    // Set once the kernel answers that it has no `openat2` (before Linux 5.6, or filtered out):
    // every path is then walked, without a failing call first.
    static UNAVAILABLE: AtomicBool = AtomicBool::new(false);
    let bytes = path.as_os_str().as_bytes();
    if UNAVAILABLE.load(Ordering::Relaxed) || !is_plain(bytes) || bytes.split(|&b| b == b'/').any(|c| c == b"..") {
        return false;
    }
    let how = OpenHow::new().flags(OFlag::O_PATH | OFlag::O_CLOEXEC).resolve(ResolveFlag::RESOLVE_NO_SYMLINKS);
    match openat2(AT_FDCWD, path, how) {
        Ok(_) => true,
        Err(Errno::ENOSYS) => {
            UNAVAILABLE.store(true, Ordering::Relaxed);
            false
        }
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::{has_no_symlink, lies_under};
    use std::path::{Path, PathBuf};

    /// The one-call answer is taken only for a path that is its own real path; every other
    /// goes to the walk (`tests/real_paths.rs` holds the two to the same results).
    #[test]
    fn only_a_plain_existing_path_without_symlinks_skips_the_walk() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir(root.join("d")).unwrap();
        std::fs::write(root.join("d/f"), "x").unwrap();
        std::os::unix::fs::symlink(root.join("d"), root.join("link")).unwrap();
        assert!(has_no_symlink(&root.join("d/f")));
        assert!(has_no_symlink(&root.join("d")));
        for other in ["link", "link/f", "d/missing", "d/../d/f", "d/./f", "d//f", "d/f/"] {
            let path = PathBuf::from(format!("{}/{other}", root.display()));
            assert!(!has_no_symlink(&path), "{other}");
        }
        assert!(!has_no_symlink(Path::new("d/f")), "a relative path");
    }

    #[test]
    fn lying_under_a_root_is_decided_by_whole_components() {
        let cases = [
            ("/ws/x", "/ws", true),
            ("/ws", "/ws", true),
            ("/wsx", "/ws", false),
            ("/w", "/ws", false),
            ("/anything", "/", true),
            ("/", "/", true),
            ("/ws/x", "/ws/x/y", false),
            // Not written plainly: decided component by component, as `Path::starts_with` does.
            ("/ws/./x", "/ws", true),
            ("/ws//x", "/ws", true),
            ("/p/./.polpo/hooks", "/p/.polpo", true),
            ("/p/.polpo/", "/p/.polpo", true),
            ("/ws/x", "/ws/", true),
            ("ws/x", "/ws", false),
        ];
        for (path, root, under) in cases {
            assert_eq!(lies_under(Path::new(path), Path::new(root)), under, "{path} under {root}");
            assert_eq!(Path::new(path).starts_with(root), under, "{path} under {root} (std)");
        }
    }
}
