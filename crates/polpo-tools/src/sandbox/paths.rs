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
use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf};

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
        self.roots.iter().any(|root| path.starts_with(root)) && !self.is_protected(path)
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
        self.protected.iter().any(|p| path.starts_with(p))
    }
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
    std::path::absolute(path)
        .map_err(|e| ToolError::new("invalid_path", format!("cannot make {} absolute: {e}", path.display())))
}

/// Follows every symlink in the absolute `path`, applying `..` to resolved parents, and keeps
/// non-existent trailing components as written. Unlike `fs::canonicalize` it works for files
/// that do not exist yet and for dangling symlinks (which resolve to their target's path, so a
/// write through them is checked where it would land).
pub fn resolve_real_path(path: &Path) -> io::Result<PathBuf> {
    let mut pending: Vec<OsString> = Vec::new();
    push_components(&mut pending, path);
    let mut resolved = PathBuf::from("/");
    let mut hops = 0usize;
    while let Some(part) = pending.pop() {
        match part.to_str() {
            Some("/") => resolved = PathBuf::from("/"),
            Some(".") => {}
            Some("..") => {
                resolved.pop();
            }
            _ => {
                let candidate = resolved.join(&part);
                match std::fs::symlink_metadata(&candidate) {
                    Ok(meta) if meta.file_type().is_symlink() => {
                        hops += 1;
                        if hops > MAX_SYMLINK_HOPS {
                            return Err(io::Error::other("too many levels of symbolic links"));
                        }
                        // A relative target is relative to the link's directory, which is `resolved`.
                        push_components(&mut pending, &std::fs::read_link(&candidate)?);
                    }
                    Ok(_) => resolved = candidate,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => resolved = candidate,
                    Err(e) => return Err(e),
                }
            }
        }
    }
    Ok(resolved)
}

/// Pushes `path`'s components so that the first one is popped first.
fn push_components(pending: &mut Vec<OsString>, path: &Path) {
    let parts: Vec<OsString> = path
        .components()
        .map(|c| match c {
            Component::RootDir | Component::Prefix(_) => OsString::from("/"),
            Component::CurDir => OsString::from("."),
            Component::ParentDir => OsString::from(".."),
            Component::Normal(name) => name.to_owned(),
        })
        .collect();
    pending.extend(parts.into_iter().rev());
}
