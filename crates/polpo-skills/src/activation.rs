//! `polpo.skills: [..]` on one request: each name must be among the skills the agent (or the
//! loop step) has; their `SKILL.md` go into the system prompt of that request only. Nothing is
//! persisted and no configuration changes.

use polpo_project::skills::{SKILL_MD, SkillError, read_text};
use std::path::Path;

/// Most skills one request may activate.
pub const MAX_ACTIVATED: usize = 16;

/// Why a request's activation was refused.
#[derive(Debug, thiserror::Error)]
pub enum ActivationError {
    /// A name that is not among the agent's assigned skills (or is not installed).
    #[error("skill `{skill}` is not assigned to agent `{agent}`")]
    NotAssigned {
        /// The agent.
        agent: String,
        /// The skill asked for.
        skill: String,
    },
    /// More names than [`MAX_ACTIVATED`].
    #[error("a request activates at most {MAX_ACTIVATED} skills")]
    TooMany,
    /// The bundle is assigned but cannot be read.
    #[error(transparent)]
    Read(#[from] SkillError),
}

impl ActivationError {
    /// The stable snake_case code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::NotAssigned { .. } => "skill_not_assigned",
            Self::TooMany => "invalid_request",
            Self::Read(e) => e.code(),
        }
    }
}

/// The prompt section activating `requested` for `agent`, whose skills are `assigned`
/// (`None` when nothing is requested). Each `SKILL.md` appears once, in request order.
pub fn activation_prompt(
    root: &Path,
    agent: &str,
    assigned: &[String],
    requested: &[String],
) -> Result<Option<String>, ActivationError> {
    if requested.is_empty() {
        return Ok(None);
    }
    if requested.len() > MAX_ACTIVATED {
        return Err(ActivationError::TooMany);
    }
    let mut sections = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    for name in requested {
        if !assigned.contains(name) {
            return Err(ActivationError::NotAssigned { agent: agent.to_owned(), skill: name.clone() });
        }
        if seen.contains(&name.as_str()) {
            continue;
        }
        seen.push(name);
        let text = read_text(root, name, SKILL_MD).map_err(|e| match e {
            SkillError::NotFound(_) => ActivationError::NotAssigned { agent: agent.to_owned(), skill: name.clone() },
            other => ActivationError::Read(other),
        })?;
        sections.push(format!("<skill name=\"{name}\">\n{}\n</skill>", text.trim_end()));
    }
    Ok(Some(format!(
        "# Active skills\n\nThe request activated these skills; follow their instructions.\n\n{}",
        sections.join("\n\n")
    )))
}
