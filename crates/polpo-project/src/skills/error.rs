//! What can go wrong with a skill bundle, its lock or its assignment; each with a stable code
//! that the CLI prints and the server maps to an HTTP status.

use crate::error::ProjectError;

/// A skill operation that could not be done.
#[derive(Debug, thiserror::Error)]
pub enum SkillError {
    /// `SKILL.md` is missing, has no valid front matter, or a name or description breaks the
    /// Agent Skills rules.
    #[error("invalid skill {at}: {reason}")]
    Invalid {
        /// Which bundle or file.
        at: String,
        /// What is wrong.
        reason: String,
    },
    /// The bundle holds a symbolic link; it is refused rather than followed.
    #[error("{0} is a symbolic link; skill bundles may not contain symlinks")]
    Symlink(String),
    /// A requested path leaves the bundle (absolute, `..`, hidden or empty component).
    #[error("path `{0}` is not a file inside the skill bundle")]
    PathOutsideBundle(String),
    /// The bundle or one of its files exceeds a bound.
    #[error("{0}")]
    TooLarge(String),
    /// No installed skill (or no file in it) by that name.
    #[error("{0} not found")]
    NotFound(String),
    /// The file is not UTF-8 text, so it cannot be shown to a model.
    #[error("{0} is not a text file")]
    NotText(String),
    /// The source could not be fetched (git failed, the path does not exist, timeout).
    #[error("{0}")]
    Source(String),
    /// The lock file cannot be read or parsed.
    #[error("{0}")]
    Lock(String),
    /// The project write failed or left a project that does not load.
    #[error(transparent)]
    Project(#[from] ProjectError),
}

impl SkillError {
    /// The stable snake_case code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Invalid { .. } => "invalid_skill",
            Self::Symlink(_) => "skill_symlink_refused",
            Self::PathOutsideBundle(_) => "path_outside_bundle",
            Self::TooLarge(_) => "skill_too_large",
            Self::NotFound(_) => "skill_not_found",
            Self::NotText(_) => "skill_file_not_text",
            Self::Source(_) => "skill_source_failed",
            Self::Lock(_) => "invalid_skills_lock",
            Self::Project(e) => e.code(),
        }
    }

    /// An `Invalid` error at `at`.
    pub fn invalid(at: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::Invalid { at: at.into(), reason: reason.into() }
    }

    /// Wrap an I/O error with what was being done and where.
    pub fn io(action: &'static str, path: &std::path::Path) -> impl FnOnce(std::io::Error) -> Self {
        let f = ProjectError::io(action, path);
        move |e| Self::Project(f(e))
    }
}
