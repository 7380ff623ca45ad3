//! Writing a brand-new project.
//!
//! The whole `.polpo/` folder is assembled under a hidden temp name in the root and renamed
//! into place in one step, so an interrupted `polpo create` leaves no half project behind.

use crate::error::ProjectError;
use crate::fsx;
use crate::paths::{self, AGENT_JSON, AGENTS_DIR, INSTRUCTIONS_MD, PROJECT_JSON, TEAMS_DIR};
use polpo_core::config::{AgentConfig, ProjectFile, TeamConfig, check_id};
use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

/// Empty folders a new project starts with, so users see where things go.
const EMPTY_DIRS: [&str; 3] = ["loops", "skills", "tools"];

/// An agent to write into a new project.
#[derive(Debug, Clone, PartialEq)]
pub struct NewAgent {
    /// Its id (directory name).
    pub id: String,
    /// `agent.json`.
    pub config: AgentConfig,
    /// `instructions.md`.
    pub instructions: String,
}

/// Create `<root>/.polpo/` with a manifest, agents and teams. Refuses when `.polpo/` exists.
pub fn create_project(
    root: &Path,
    manifest: &ProjectFile,
    agents: &[NewAgent],
    teams: &BTreeMap<String, TeamConfig>,
) -> Result<(), ProjectError> {
    let target = paths::polpo_dir(root);
    if target.exists() {
        return Err(ProjectError::ProjectExists(root.to_path_buf()));
    }
    for id in agents.iter().map(|a| a.id.as_str()).chain(teams.keys().map(String::as_str)) {
        check_id(id).map_err(|reason| ProjectError::InvalidId { id: id.to_string(), reason })?;
    }
    fs::create_dir_all(root).map_err(ProjectError::io("create", root))?;
    let staging = root.join(format!("{}.tmp-{}", paths::POLPO_DIR, std::process::id()));
    let result = write_tree(&staging, manifest, agents, teams).and_then(|()| {
        fs::rename(&staging, &target).map_err(ProjectError::io("rename", &staging))?;
        fsx::sync_dir(root).map_err(ProjectError::io("sync", root))
    });
    if result.is_err() {
        let _ = fs::remove_dir_all(&staging);
    }
    result
}

fn write_tree(
    dot: &Path,
    manifest: &ProjectFile,
    agents: &[NewAgent],
    teams: &BTreeMap<String, TeamConfig>,
) -> Result<(), ProjectError> {
    let mkdir = |dir: &Path| fs::create_dir_all(dir).map_err(ProjectError::io("create", dir));
    let write = |path: &Path, bytes: &[u8]| fsx::write_atomic(path, bytes).map_err(ProjectError::io("write", path));
    let json =
        |path: &Path, bytes: std::io::Result<Vec<u8>>| write(path, &bytes.map_err(ProjectError::io("encode", path))?);
    mkdir(dot)?;
    json(&dot.join(PROJECT_JSON), fsx::to_json_bytes(manifest))?;
    for agent in agents {
        let dir = dot.join(AGENTS_DIR).join(&agent.id);
        mkdir(&dir)?;
        json(&dir.join(AGENT_JSON), fsx::to_json_bytes(&agent.config))?;
        write(&dir.join(INSTRUCTIONS_MD), agent.instructions.as_bytes())?;
    }
    mkdir(&dot.join(TEAMS_DIR))?;
    for (id, team) in teams {
        json(&dot.join(TEAMS_DIR).join(format!("{id}.json")), fsx::to_json_bytes(team))?;
    }
    for dir in EMPTY_DIRS {
        mkdir(&dot.join(dir))?;
    }
    Ok(())
}
