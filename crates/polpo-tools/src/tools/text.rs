//! Text helpers shared by `edit` and `memory_update`.

use crate::ToolError;

/// Replaces the single occurrence of `old` in `content` with `new`. The exact-once rule means
/// the model must quote enough context to say *which* place it means: zero matches is
/// `not_found`, several is `not_unique` (with the count, so the model knows to widen the quote).
pub(crate) fn replace_unique(content: &str, old: &str, new: &str) -> Result<String, ToolError> {
    if old.is_empty() {
        return Err(ToolError::new("invalid_arguments", "old_text must not be empty"));
    }
    match content.matches(old).count() {
        0 => Err(ToolError::new("not_found", "old_text was not found")),
        1 => Ok(content.replacen(old, new, 1)),
        count => Err(ToolError::new(
            "not_unique",
            format!("old_text occurs {count} times; include more surrounding text so it matches exactly once"),
        )),
    }
}

/// The workspace as a real path, the base that [`display_path`] strips.
pub(crate) fn real_workspace(ctx: &crate::ToolContext) -> std::path::PathBuf {
    std::path::absolute(&ctx.workspace)
        .and_then(|abs| crate::sandbox::resolve_real_path(&abs))
        .unwrap_or_else(|_| ctx.workspace.clone())
}

/// Shows `path` relative to the (real) workspace when it lies inside it — the form the model
/// passes back to other tools — else absolute.
pub(crate) fn display_path(real_workspace: &std::path::Path, path: &std::path::Path) -> String {
    path.strip_prefix(real_workspace).unwrap_or(path).display().to_string()
}

/// Reads a whole text file that a tool will rewrite, refusing files above `max` bytes
/// (`file_too_large`) so one call cannot load an arbitrarily large file into memory.
pub(crate) async fn read_text_bounded(path: &std::path::Path, max: u64) -> Result<String, ToolError> {
    let meta = tokio::fs::metadata(path).await.map_err(|e| crate::args::io_error("read", path, &e))?;
    if meta.len() > max {
        return Err(ToolError::new(
            "file_too_large",
            format!("{} is {} bytes; the limit is {max}", path.display(), meta.len()),
        ));
    }
    tokio::fs::read_to_string(path).await.map_err(|e| crate::args::io_error("read", path, &e))
}
