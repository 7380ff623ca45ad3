//! Schedule files (`.polpo/schedules/<id>.json`) written as steps of an [`Edit`]: the v2
//! definition as the REST API hands it over (its integer `revision`, bumped by every write, is
//! what `expectedRevision` is compared with), and the migration of legacy mission-shaped files
//! to the v2 shape they are read as (`polpo schedules migrate`), all files in one edit.

use crate::edit::{Edit, ProjectEditor, read_optional};
use crate::error::ProjectError;
use crate::fsx;
use crate::paths::{self, SCHEDULES_DIR};
use polpo_core::config::parse::Location;
use polpo_core::config::{Project, check_id};
use polpo_core::schedules::{ScheduleConfig, parse_schedule};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// `.polpo/schedules/<id>.json`, for a valid id.
pub fn schedule_path(root: &Path, id: &str) -> Result<PathBuf, ProjectError> {
    check_id(id).map_err(|reason| ProjectError::InvalidId { id: id.to_string(), reason })?;
    Ok(paths::polpo_dir(root).join(SCHEDULES_DIR).join(format!("{id}.json")))
}

/// Where problems of schedule `id`'s file are reported (`schedules/<id>.json`).
pub fn schedule_location(id: &str) -> Location {
    Location::file(paths::display(&[SCHEDULES_DIR, &format!("{id}.json")]))
}

/// Schedule `id` as it is on disk now (a legacy file as its v2 translation), `None` when there
/// is no file; a file that does not parse is [`ProjectError::Invalid`] with its problems.
pub fn read_schedule(root: &Path, id: &str) -> Result<Option<ScheduleConfig>, ProjectError> {
    let path = schedule_path(root, id)?;
    let Some(bytes) = read_optional(&path)? else { return Ok(None) };
    let at = schedule_location(id);
    let value: Value = serde_json::from_slice(&bytes).map_err(|e| {
        ProjectError::Invalid(vec![at.problem(
            polpo_core::config::codes::INVALID_JSON,
            format!("not valid JSON: {e}"),
            "",
        )])
    })?;
    parse_schedule(&value, &at).map(|(config, ..)| Some(config)).map_err(ProjectError::Invalid)
}

/// Write schedule `id`'s file in the v2 shape as a step of `edit` (atomic and durable when the
/// edit commits; the project is loaded and checked whole before that).
pub fn write_schedule(edit: &mut Edit<'_>, id: &str, config: &ScheduleConfig) -> Result<(), ProjectError> {
    let path = schedule_path(edit.root(), id)?;
    let bytes = fsx::to_json_bytes(config).map_err(ProjectError::io("encode", &path))?;
    edit.write(&path, &bytes)
}

/// Remove schedule `id`'s file as a step of `edit`.
pub fn remove_schedule(edit: &mut Edit<'_>, id: &str) -> Result<(), ProjectError> {
    let path = schedule_path(edit.root(), id)?;
    edit.remove(&path)
}

/// One legacy mission-shaped file and the v2 text `polpo schedules migrate` writes for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleMigration {
    /// The schedule id.
    pub id: String,
    /// The file, as `schedules/<id>.json`.
    pub file: String,
    /// Its text now.
    pub before: String,
    /// Its text after the migration: the v2 definition it is read as.
    pub after: String,
}

/// What migrating `project`'s legacy schedule files would write, one entry per file, without
/// writing anything (the dry run prints it).
pub fn plan_schedule_migration(project: &Project) -> Result<Vec<ScheduleMigration>, ProjectError> {
    let mut out = Vec::new();
    for schedule in project.schedules.values().filter(|s| s.legacy) {
        let path = schedule_path(&project.root, &schedule.id)?;
        let before = read_optional(&path)?.unwrap_or_default();
        let after = fsx::to_json_bytes(&schedule.config).map_err(ProjectError::io("encode", &path))?;
        out.push(ScheduleMigration {
            id: schedule.id.clone(),
            file: schedule.source.file.clone(),
            before: String::from_utf8_lossy(&before).into_owned(),
            after: String::from_utf8_lossy(&after).into_owned(),
        });
    }
    Ok(out)
}

/// Rewrite every planned file in its v2 shape, in one edit: the project must still load with
/// all of them, or every file keeps its previous bytes.
pub fn migrate_schedules(editor: &ProjectEditor, plan: &[ScheduleMigration]) -> Result<(), ProjectError> {
    editor.edit(
        |edit| {
            for step in plan {
                let path = schedule_path(edit.root(), &step.id)?;
                edit.write(&path, step.after.as_bytes())?;
            }
            Ok::<_, ProjectError>(())
        },
        |_| Ok(()),
    )
}
