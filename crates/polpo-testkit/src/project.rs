//! A `.polpo/` project written to a real temporary folder, for tests that load projects the
//! way users keep them: as files. Raw JSON on purpose, so tests see exactly what a user wrote.

use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// A project folder being written.
#[derive(Debug)]
pub struct ProjectFixture {
    root: PathBuf,
}

impl ProjectFixture {
    /// A project in `root` with `settings` (e.g. `{"storage": "sqlite"}`).
    pub fn new(root: &Path, settings: Value) -> std::io::Result<Self> {
        let polpo = root.join(".polpo");
        std::fs::create_dir_all(&polpo)?;
        let manifest = json!({"schemaVersion": 2, "project": "fixture", "settings": settings});
        std::fs::write(polpo.join("project.json"), pretty(&manifest))?;
        Ok(Self { root: root.to_path_buf() })
    }

    /// Add agent `id` with this `agent.json` and `instructions.md`.
    pub fn agent(self, id: &str, config: Value, instructions: &str) -> std::io::Result<Self> {
        let dir = self.root.join(".polpo").join("agents").join(id);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("agent.json"), pretty(&config))?;
        std::fs::write(dir.join("instructions.md"), instructions)?;
        Ok(self)
    }

    /// Add hook pack `name` (`.polpo/hooks/<name>.json`).
    pub fn hook_pack(self, name: &str, pack: Value) -> std::io::Result<Self> {
        let dir = self.root.join(".polpo").join("hooks");
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join(format!("{name}.json")), pretty(&pack))?;
        Ok(self)
    }

    /// Add Project Loop `name` (`.polpo/loops/<name>.json`).
    pub fn project_loop(self, name: &str, config: Value) -> std::io::Result<Self> {
        let dir = self.root.join(".polpo").join("loops");
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join(format!("{name}.json")), pretty(&config))?;
        Ok(self)
    }

    /// The project root.
    pub fn root(&self) -> &Path {
        &self.root
    }
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}
