//! Loading valid projects in both layouts.

mod common;
use common::*;
use polpo_core::config::{Layout, StorageKind};
use polpo_project::load_project;

#[test]
fn directory_layout_loads_agents_instructions_and_teams() {
    let dir = project(&[
        (".polpo/project.json", r#"{"schemaVersion": 2, "project": "demo", "settings": {"storage": "sqlite"}}"#),
        (".polpo/agents/support/agent.json", r#"{"role": "help", "model": "openai/gpt-4o-mini", "team": "default"}"#),
        (".polpo/agents/support/instructions.md", "Be kind.\n"),
        (".polpo/agents/.support.deleted-1/agent.json", "not json"),
        (".polpo/agents/.tmp-x", "ignored"),
        (".polpo/teams/default.json", r#"{"description": "everyone"}"#),
        (".polpo/teams/README.md", "not a team"),
    ]);
    let p = load_project(dir.path()).unwrap();
    assert_eq!(p.layout, Layout::Directory);
    assert_eq!(p.settings().storage(), StorageKind::Sqlite);
    let support = p.agent("support").unwrap();
    assert_eq!(support.instructions, "Be kind.\n");
    assert_eq!(support.config.max_turns(), 150);
    assert_eq!(p.teams["default"].config.description.as_deref(), Some("everyone"));
    assert_eq!(p.team_members("default").map(|a| a.id.as_str()).collect::<Vec<_>>(), ["support"]);
}

#[test]
fn legacy_layout_reads_both_agent_entry_forms() {
    let dir = project(&[
        (".polpo/polpo.json", r#"{"project": "old", "settings": {"maxRetries": 3}}"#),
        (
            ".polpo/agents.json",
            r#"[{"name": "a", "role": "r", "systemPrompt": "You are A.", "createdAt": "2025-01-01T00:00:00Z"},
                {"agent": {"name": "b", "maxTurns": 9}, "teamName": "ops"},
                {"agent": {"name": "c"}}]"#,
        ),
        (".polpo/teams.json", r#"[{"name": "ops", "description": "Operations"}]"#),
    ]);
    let p = load_project(dir.path()).unwrap();
    assert_eq!(p.layout, Layout::Legacy);
    assert_eq!(p.agents["a"].instructions, "You are A.");
    assert_eq!(p.agents["a"].config.team, None);
    assert_eq!(p.agents["b"].config.team.as_deref(), Some("ops"));
    assert_eq!(p.agents["b"].config.max_turns(), 9);
    assert_eq!(p.agents["c"].config.team.as_deref(), Some("default"));
    assert_eq!(p.teams["ops"].config.description.as_deref(), Some("Operations"));
}

#[test]
fn legacy_entries_are_located_by_index() {
    let dir = project(&[
        (".polpo/polpo.json", "{}"),
        (
            ".polpo/agents.json",
            r#"[{"name": "a"}, {"agent": {"name": "b", "colour": 1}, "teamName": "t"}, {"role": "x"}]"#,
        ),
    ]);
    assert_eq!(
        problems(dir.path()),
        vec![
            at("invalid_value", ".polpo/agents.json", "/2/name"),
            at("unknown_field", ".polpo/agents.json", "/1/agent/colour"),
        ]
    );
}
