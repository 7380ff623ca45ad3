//! Create, replace and delete one team file (`.polpo/teams/<id>.json`) as a step of an
//! [`Edit`]. Membership is each agent's `team` field, written with the agents.

use crate::edit::Edit;
use crate::error::ProjectError;
use crate::fsx;
use crate::paths::{self, TEAMS_DIR};
use polpo_core::config::{TeamConfig, check_id};
use std::path::{Path, PathBuf};

/// `.polpo/teams/<id>.json`, for a valid id of a directory-layout project.
pub fn team_file(root: &Path, id: &str) -> Result<PathBuf, ProjectError> {
    check_id(id).map_err(|reason| ProjectError::InvalidId { id: id.to_string(), reason })?;
    let dot = paths::polpo_dir(root);
    if dot.join(paths::LEGACY_TEAMS_JSON).exists() {
        return Err(ProjectError::LegacyLayout);
    }
    Ok(dot.join(TEAMS_DIR).join(format!("{id}.json")))
}

/// Write team `id`'s file (created or replaced) as a step of `edit`.
pub fn write_team(edit: &mut Edit<'_>, id: &str, config: &TeamConfig) -> Result<(), ProjectError> {
    let path = team_file(edit.root(), id)?;
    let bytes = fsx::to_json_bytes(config).map_err(ProjectError::io("encode", &path))?;
    edit.write(&path, &bytes)
}

/// Remove team `id`'s file as a step of `edit`.
pub fn delete_team(edit: &mut Edit<'_>, id: &str) -> Result<(), ProjectError> {
    let path = team_file(edit.root(), id)?;
    edit.remove(&path)
}
