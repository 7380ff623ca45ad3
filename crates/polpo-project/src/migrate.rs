//! `polpo migrate`: the legacy aggregate layout (`polpo.json`, `agents.json`, `teams.json`)
//! → the directory layout.
//!
//! The project is loaded and validated first, so a migration never starts from a broken
//! project. New files are written, then the legacy files are renamed to `*.v1.json`
//! backups, then the result is loaded again. If any step fails, everything done so far is
//! undone in reverse order and the legacy project is left exactly as it was. A dry run
//! computes the same plan and writes nothing.

use crate::error::ProjectError;
use crate::fsx;
use crate::load::load_project;
use crate::paths::{self, AGENT_JSON, AGENTS_DIR, INSTRUCTIONS_MD, TEAMS_DIR};
use polpo_core::config::{Layout, SCHEMA_VERSION};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// One file the migration writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedWrite {
    /// Path relative to the project root (`.polpo/agents/x/agent.json`).
    pub path: String,
    /// Its full content.
    pub bytes: Vec<u8>,
}

/// Everything a migration does, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MigrationPlan {
    /// Files written.
    pub writes: Vec<PlannedWrite>,
    /// Legacy files renamed to backups: `(from, to)`, relative to the root.
    pub backups: Vec<(String, String)>,
}

const LEGACY_FILES: [&str; 3] = [paths::LEGACY_PROJECT_JSON, paths::LEGACY_AGENTS_JSON, paths::LEGACY_TEAMS_JSON];

/// Migrate the project at `root`; with `dry_run`, only return the plan.
pub fn migrate(root: &Path, dry_run: bool) -> Result<MigrationPlan, ProjectError> {
    let dot = paths::polpo_dir(root);
    if let Some(backup) = LEGACY_FILES.iter().map(|f| dot.join(paths::backup_name(f))).find(|p| p.exists()) {
        return Err(ProjectError::BackupExists(backup));
    }
    let plan = plan(root)?;
    if let Some(existing) = plan.writes.iter().map(|w| root.join(&w.path)).find(|p| p.exists()) {
        return Err(ProjectError::TargetExists(existing));
    }
    if dry_run {
        return Ok(plan);
    }
    let mut journal = Journal::default();
    match apply(root, &plan, &mut journal) {
        Ok(()) => Ok(plan),
        Err(e) => {
            journal.roll_back();
            Err(e)
        }
    }
}

fn plan(root: &Path) -> Result<MigrationPlan, ProjectError> {
    let project = load_project(root).map_err(ProjectError::Invalid)?;
    let dot = paths::polpo_dir(root);
    let present: Vec<&str> = LEGACY_FILES.into_iter().filter(|f| dot.join(f).is_file()).collect();
    if project.layout != Layout::Legacy || present.is_empty() {
        return Err(ProjectError::NothingToMigrate);
    }
    let mut writes = Vec::new();
    let mut add = |parts: &[&str], bytes: io::Result<Vec<u8>>| -> Result<(), ProjectError> {
        let path = paths::display(parts);
        let bytes = bytes.map_err(ProjectError::io("encode", &path))?;
        writes.push(PlannedWrite { path, bytes });
        Ok(())
    };
    if present.contains(&paths::LEGACY_PROJECT_JSON) {
        let mut manifest = project.manifest.clone();
        manifest.schema_version = Some(SCHEMA_VERSION);
        add(&[paths::PROJECT_JSON], fsx::to_json_bytes(&manifest))?;
    }
    if present.contains(&paths::LEGACY_AGENTS_JSON) {
        for agent in project.agents.values() {
            add(&[AGENTS_DIR, &agent.id, AGENT_JSON], fsx::to_json_bytes(&agent.config))?;
            add(&[AGENTS_DIR, &agent.id, INSTRUCTIONS_MD], Ok(agent.instructions.clone().into_bytes()))?;
        }
    }
    if present.contains(&paths::LEGACY_TEAMS_JSON) {
        for team in project.teams.values() {
            add(&[TEAMS_DIR, &format!("{}.json", team.id)], fsx::to_json_bytes(&team.config))?;
        }
    }
    let backups = present.iter().map(|f| (paths::display(&[f]), paths::display(&[&paths::backup_name(f)]))).collect();
    Ok(MigrationPlan { writes, backups })
}

fn apply(root: &Path, plan: &MigrationPlan, journal: &mut Journal) -> Result<(), ProjectError> {
    for write in &plan.writes {
        let path = root.join(&write.path);
        if let Some(parent) = path.parent() {
            journal.create_dirs(parent)?;
        }
        fsx::write_atomic(&path, &write.bytes).map_err(ProjectError::io("write", &path))?;
        journal.files.push(path);
    }
    for (from, to) in &plan.backups {
        let (from, to) = (root.join(from), root.join(to));
        fs::rename(&from, &to).map_err(ProjectError::io("rename", &from))?;
        journal.renames.push((from, to));
    }
    let dot = paths::polpo_dir(root);
    fsx::sync_dir(&dot).map_err(ProjectError::io("sync", &dot))?;
    load_project(root).map(|_| ()).map_err(ProjectError::Invalid)
}

/// What has been done so far, to undo on failure.
#[derive(Default)]
struct Journal {
    dirs: Vec<PathBuf>,
    files: Vec<PathBuf>,
    renames: Vec<(PathBuf, PathBuf)>,
}

impl Journal {
    fn create_dirs(&mut self, dir: &Path) -> Result<(), ProjectError> {
        let missing: Vec<&Path> = dir.ancestors().take_while(|d| !d.exists()).collect();
        for d in missing.into_iter().rev() {
            fs::create_dir(d).map_err(ProjectError::io("create", d))?;
            self.dirs.push(d.to_path_buf());
        }
        Ok(())
    }

    /// Undo in reverse order. Best effort: a failure here cannot be reported better than
    /// the error that caused the rollback, which the caller returns.
    fn roll_back(&self) {
        for (from, to) in self.renames.iter().rev() {
            let _ = fs::rename(to, from);
        }
        for file in self.files.iter().rev() {
            let _ = fs::remove_file(file);
        }
        for dir in self.dirs.iter().rev() {
            let _ = fs::remove_dir(dir);
        }
    }
}
