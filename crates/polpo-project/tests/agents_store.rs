//! Agent writes: create, update with the revision read, conflicts on hand edits, delete.

mod common;
use common::*;
use polpo_core::config::AgentConfig;
use polpo_project::{ProjectEditor, ProjectError, Revision, load_project, read_agent};
use std::path::Path;

fn config(role: &str) -> AgentConfig {
    AgentConfig { role: Some(role.into()), ..Default::default() }
}

/// [`polpo_project::write_agent`] as an edit of its own.
fn write_agent(
    root: &Path,
    id: &str,
    config: &AgentConfig,
    instructions: &str,
    expected: Option<&Revision>,
) -> Result<Revision, ProjectError> {
    ProjectEditor::new(root)
        .edit(|edit| polpo_project::write_agent(edit, id, config, instructions, expected), |_| Ok(()))
}

/// [`polpo_project::delete_agent`] as an edit of its own.
fn delete_agent(root: &Path, id: &str, expected: &Revision) -> Result<(), ProjectError> {
    ProjectEditor::new(root).edit(|edit| polpo_project::delete_agent(edit, id, expected), |_| Ok(()))
}

#[test]
fn create_then_update_with_the_read_revision() {
    let dir = project(&[MANIFEST]);
    let root = dir.path();
    let created = write_agent(root, "support", &config("help"), "Be kind.\n", None).unwrap();
    let snap = read_agent(root, "support").unwrap();
    assert_eq!(snap.revision, created);
    assert_eq!(snap.agent.config.role.as_deref(), Some("help"));
    assert_eq!(
        std::fs::read_to_string(root.join(".polpo/agents/support/agent.json")).unwrap(),
        "{\n  \"role\": \"help\"\n}\n"
    );

    let updated = write_agent(root, "support", &config("triage"), "Be brief.\n", Some(&snap.revision)).unwrap();
    assert_ne!(updated, created);
    let project = load_project(root).unwrap();
    assert_eq!(project.agents["support"].instructions, "Be brief.\n");
}

#[test]
fn a_hand_edit_between_read_and_write_is_a_conflict() {
    let dir = project(&[MANIFEST]);
    let root = dir.path();
    let rev = write_agent(root, "a", &config("x"), "one", None).unwrap();
    std::fs::write(root.join(".polpo/agents/a/instructions.md"), "edited by hand").unwrap();
    let err = write_agent(root, "a", &config("y"), "two", Some(&rev)).unwrap_err();
    assert_eq!(err.code(), "conflict");
    assert_eq!(std::fs::read_to_string(root.join(".polpo/agents/a/instructions.md")).unwrap(), "edited by hand");
    let err = delete_agent(root, "a", &rev).unwrap_err();
    assert_eq!(err.code(), "conflict");
}

#[test]
fn create_refuses_existing_and_case_colliding_ids() {
    let dir = project(&[MANIFEST]);
    let root = dir.path();
    write_agent(root, "Support", &config("x"), "", None).unwrap();
    assert_eq!(write_agent(root, "Support", &config("x"), "", None).unwrap_err().code(), "agent_exists");
    assert_eq!(write_agent(root, "support", &config("x"), "", None).unwrap_err().code(), "agent_exists");
    assert_eq!(write_agent(root, "../evil", &config("x"), "", None).unwrap_err().code(), "invalid_value");
    let missing = write_agent(root, "ghost", &config("x"), "", Some(&Revision::new("0"))).unwrap_err();
    assert!(matches!(missing, ProjectError::AgentNotFound(_)));
}

#[test]
fn delete_removes_the_agent_directory() {
    let dir = project(&[MANIFEST]);
    let root = dir.path();
    let rev = write_agent(root, "a", &config("x"), "", None).unwrap();
    delete_agent(root, "a", &rev).unwrap();
    assert!(!root.join(".polpo/agents/a").exists());
    assert!(std::fs::read_dir(root.join(".polpo/agents")).unwrap().next().is_none(), "nothing left behind");
    assert!(load_project(root).unwrap().agents.is_empty());
}

#[test]
fn legacy_projects_must_migrate_before_agent_writes() {
    let dir = project(&[(".polpo/polpo.json", "{}"), (".polpo/agents.json", "[]")]);
    assert_eq!(write_agent(dir.path(), "a", &config("x"), "", None).unwrap_err().code(), "legacy_layout");
}

#[test]
fn a_create_that_crashed_half_way_can_be_redone() {
    // Only instructions.md made it to disk before the crash.
    let dir = project(&[MANIFEST, (".polpo/agents/a/instructions.md", "partial")]);
    write_agent(dir.path(), "a", &config("x"), "full", None).unwrap();
    assert_eq!(load_project(dir.path()).unwrap().agents["a"].instructions, "full");
}
