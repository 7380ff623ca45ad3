//! The bounded directory walk shared by `glob` and `grep`.

use crate::ToolError;
use crate::sandbox::{PathRules, resolve_real_path};
use std::path::Path;
use std::time::Instant;
use tokio_util::sync::CancellationToken;

/// Why a walk stopped before visiting everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// The visitor asked to stop (it has enough).
    Enough,
    /// The deadline passed.
    Deadline,
}

/// Visits the files under `base` (or `base` itself when it is a file) in name order, so results
/// are deterministic. Dotfiles, `.gitignore`d paths and protected directories (`.polpo/`) are
/// skipped without being entered; symlinks are followed only when their target is a file that
/// `rules` permits. Stops at `deadline`, when `visit` returns `false`, or with `cancelled` when
/// the token fires. Blocking: call from `spawn_blocking`.
pub(crate) fn walk_files(
    base: &Path,
    rules: &PathRules,
    deadline: Instant,
    cancel: &CancellationToken,
    mut visit: impl FnMut(&Path) -> bool,
) -> Result<Option<Stop>, ToolError> {
    let walker = ignore::WalkBuilder::new(base)
        .hidden(true)
        .follow_links(false)
        .sort_by_file_name(|a, b| a.cmp(b))
        .filter_entry({
            let rules = rules.clone();
            move |entry| !rules.is_protected(entry.path())
        })
        .build();
    for entry in walker {
        if cancel.is_cancelled() {
            return Err(ToolError::new("cancelled", "the call was cancelled"));
        }
        if Instant::now() >= deadline {
            return Ok(Some(Stop::Deadline));
        }
        let Ok(entry) = entry else { continue };
        let Some(kind) = entry.file_type() else {
            continue;
        };
        let is_file = if kind.is_symlink() {
            match resolve_real_path(entry.path()) {
                Ok(target) => rules.permits(&target) && target.is_file(),
                Err(_) => false,
            }
        } else {
            kind.is_file()
        };
        if is_file && !visit(entry.path()) {
            return Ok(Some(Stop::Enough));
        }
    }
    Ok(None)
}
