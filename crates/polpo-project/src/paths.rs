//! Where things live under `.polpo/`, and how paths are shown to users.

use std::path::{Path, PathBuf};

/// The project folder inside the project root.
pub const POLPO_DIR: &str = ".polpo";
/// The directory-layout manifest.
pub const PROJECT_JSON: &str = "project.json";
/// The legacy manifest.
pub const LEGACY_PROJECT_JSON: &str = "polpo.json";
/// The legacy aggregate agents file.
pub const LEGACY_AGENTS_JSON: &str = "agents.json";
/// The legacy aggregate teams file.
pub const LEGACY_TEAMS_JSON: &str = "teams.json";
/// Per-agent directories live here.
pub const AGENTS_DIR: &str = "agents";
/// Team files live here.
pub const TEAMS_DIR: &str = "teams";
/// Project Loop files (`<id>.json`) live here.
pub const LOOPS_DIR: &str = "loops";
/// Connections: `connections/<id>.json` (read by `polpo-connections`; hook packs naming an
/// unknown one are refused at load).
pub const CONNECTIONS_DIR: &str = "connections";
/// Schedules: `schedules/<id>.json`.
pub const SCHEDULES_DIR: &str = "schedules";
/// An agent's config inside its directory.
pub const AGENT_JSON: &str = "agent.json";
/// An agent's instructions inside its directory.
pub const INSTRUCTIONS_MD: &str = "instructions.md";

/// The `.polpo/` folder of a project root.
pub fn polpo_dir(root: &Path) -> PathBuf {
    root.join(POLPO_DIR)
}

/// `.polpo/<name>` relative to the root, as shown in problems (always `/`-separated).
pub fn display(parts: &[&str]) -> String {
    std::iter::once(POLPO_DIR).chain(parts.iter().copied()).collect::<Vec<_>>().join("/")
}

/// The legacy file name → its backup name after migration (`agents.json` → `agents.v1.json`).
pub fn backup_name(legacy: &str) -> String {
    match legacy.strip_suffix(".json") {
        Some(stem) => format!("{stem}.v1.json"),
        None => format!("{legacy}.v1"),
    }
}

/// The project root for `start`: the nearest folder at or above it that contains `.polpo/`.
pub fn find_root(start: &Path) -> Option<PathBuf> {
    start.ancestors().find(|dir| polpo_dir(dir).is_dir()).map(Path::to_path_buf)
}
