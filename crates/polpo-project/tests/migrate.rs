//! Legacy → directory layout: round trip, dry run, backups, rollback.

mod common;
use common::*;
use polpo_project::{load_project, migrate};

const LEGACY: &[(&str, &str)] = &[
    (".polpo/polpo.json", r#"{"project": "old", "settings": {"storage": "file", "maxRetries": 3}}"#),
    (
        ".polpo/agents.json",
        r#"[{"name": "alice", "role": "lead", "systemPrompt": "You lead.", "createdAt": "2025-01-01T00:00:00Z"},
            {"agent": {"name": "bob", "reportsTo": "alice", "allowedTools": ["read"]}, "teamName": "ops"}]"#,
    ),
    (".polpo/teams.json", r#"[{"name": "ops", "description": "Operations"}]"#),
];

#[test]
fn migration_round_trips_a_legacy_project() {
    let dir = project(LEGACY);
    let root = dir.path();
    let before = load_project(root).unwrap();
    let plan = migrate(root, false).unwrap();
    assert_eq!(plan.backups.len(), 3);
    let after = load_project(root).unwrap();
    assert_eq!(after.layout, polpo_core::config::Layout::Directory);
    assert_eq!(after.manifest.schema_version, Some(2));
    assert_eq!(after.settings(), before.settings());
    for (id, agent) in &before.agents {
        assert_eq!(after.agents[id].config, agent.config, "{id}");
        assert_eq!(after.agents[id].instructions, agent.instructions, "{id}");
    }
    assert_eq!(after.teams["ops"].config, before.teams["ops"].config);
    for (legacy, backup) in
        [("polpo.json", "polpo.v1.json"), ("agents.json", "agents.v1.json"), ("teams.json", "teams.v1.json")]
    {
        assert!(!root.join(".polpo").join(legacy).exists());
        assert!(root.join(".polpo").join(backup).exists());
    }
    let project_json = std::fs::read_to_string(root.join(".polpo/project.json")).unwrap();
    assert!(project_json.starts_with("{\n  \"schemaVersion\": 2,\n"), "{project_json}");
    assert!(project_json.ends_with("}\n"));
    // A second migration finds the backups and refuses.
    assert_eq!(migrate(root, false).unwrap_err().code(), "backup_exists");
}

#[test]
fn dry_run_changes_nothing_on_disk() {
    let dir = project(LEGACY);
    let before = tree_fingerprint(dir.path());
    let plan = migrate(dir.path(), true).unwrap();
    let paths: Vec<&str> = plan.writes.iter().map(|w| w.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            ".polpo/project.json",
            ".polpo/agents/alice/agent.json",
            ".polpo/agents/alice/instructions.md",
            ".polpo/agents/bob/agent.json",
            ".polpo/agents/bob/instructions.md",
            ".polpo/teams/ops.json",
        ]
    );
    assert_eq!(tree_fingerprint(dir.path()), before);
}

#[test]
fn refuses_when_a_backup_already_exists() {
    let dir = project(LEGACY);
    write_files(dir.path(), &[(".polpo/agents.v1.json", "[]")]);
    let before = tree_fingerprint(dir.path());
    assert_eq!(migrate(dir.path(), false).unwrap_err().code(), "backup_exists");
    assert_eq!(tree_fingerprint(dir.path()), before);
}

#[test]
fn a_failure_midway_rolls_everything_back() {
    let dir = project(LEGACY);
    // A plain file where bob's directory must go: alice is written, then bob fails.
    write_files(dir.path(), &[(".polpo/agents/bob", "in the way")]);
    let before = tree_fingerprint(dir.path());
    let err = migrate(dir.path(), false).unwrap_err();
    assert_eq!(err.code(), "io_error");
    assert_eq!(tree_fingerprint(dir.path()), before);
}

#[test]
fn invalid_or_modern_projects_are_not_migrated() {
    let dir = project(&[(".polpo/polpo.json", r#"{"settings": {"storage": "mysql"}}"#)]);
    assert_eq!(migrate(dir.path(), false).unwrap_err().code(), "invalid_project");
    let dir = project(&[MANIFEST]);
    assert_eq!(migrate(dir.path(), true).unwrap_err().code(), "nothing_to_migrate");
}
