//! One test per layout problem code, each asserting code, file and pointer (or line/column).

mod common;
use common::*;

#[test]
fn ambiguous_layout_when_agents_json_and_agent_directories_coexist() {
    let dir = project(&[
        MANIFEST,
        (".polpo/agents/a/agent.json", "{}"),
        (".polpo/agents/a/instructions.md", "hi"),
        (".polpo/agents.json", r#"[{"name": "b"}]"#),
    ]);
    assert_eq!(problems(dir.path()), vec![at("ambiguous_layout", ".polpo/agents.json", "")]);
}

#[test]
fn ambiguous_layout_for_teams_and_manifests_too() {
    let dir = project(&[
        MANIFEST,
        (".polpo/polpo.json", "{}"),
        (".polpo/teams/t.json", "{}"),
        (".polpo/teams.json", r#"[{"name": "t"}]"#),
    ]);
    assert_eq!(
        problems(dir.path()),
        vec![at("ambiguous_layout", ".polpo/polpo.json", ""), at("ambiguous_layout", ".polpo/teams.json", ""),]
    );
}

#[test]
fn an_id_that_looks_like_another_is_id_confusable() {
    // "hеlper" with U+0435 CYRILLIC SMALL LETTER IE reads as "helper" and mixes two scripts.
    let dir = project(&[
        MANIFEST,
        (".polpo/agents/helper/agent.json", "{}"),
        (".polpo/agents/helper/instructions.md", ""),
        (".polpo/agents/h\u{0435}lper/agent.json", "{}"),
        (".polpo/agents/h\u{0435}lper/instructions.md", ""),
    ]);
    assert_eq!(problems(dir.path()), vec![at("id_confusable", ".polpo/agents/h\u{0435}lper/agent.json", "")]);
}

#[test]
fn case_collision_after_nfkc_and_lowercase() {
    // The directory layout: "Support" and "support" would be one folder on macOS.
    let dir = project(&[
        MANIFEST,
        (".polpo/agents/Support/agent.json", "{}"),
        (".polpo/agents/Support/instructions.md", ""),
        (".polpo/agents/support/agent.json", "{}"),
        (".polpo/agents/support/instructions.md", ""),
    ]);
    assert_eq!(problems(dir.path()), vec![at("case_collision", ".polpo/agents/support/agent.json", "")]);

    // The legacy layout: U+FF22 FULLWIDTH B is "b" under NFKC.
    let dir = project(&[(".polpo/polpo.json", "{}"), (".polpo/agents.json", r#"[{"name": "b"}, {"name": "Ｂ"}]"#)]);
    assert_eq!(problems(dir.path()), vec![at("case_collision", ".polpo/agents.json", "/1")]);
}

#[test]
fn invalid_json_reports_line_and_column() {
    let dir = project(&[
        MANIFEST,
        (".polpo/agents/a/agent.json", "{\n  \"role\": \"x\",\n}"),
        (".polpo/agents/a/instructions.md", ""),
    ]);
    let p = polpo_project::load_project(dir.path()).unwrap_err();
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].code, "invalid_json");
    assert_eq!(p[0].file.as_deref(), Some(".polpo/agents/a/agent.json"));
    assert_eq!((p[0].line, p[0].column), (Some(3), Some(1)));
    assert!(p[0].to_string().starts_with(".polpo/agents/a/agent.json:3:1: invalid_json: "), "{}", p[0]);
}

#[test]
fn missing_agent_file_for_each_absent_file() {
    let dir = project(&[MANIFEST, (".polpo/agents/a/agent.json", "{}"), (".polpo/agents/b/instructions.md", "")]);
    assert_eq!(
        problems(dir.path()),
        vec![
            at("missing_agent_file", ".polpo/agents/a/instructions.md", ""),
            at("missing_agent_file", ".polpo/agents/b/agent.json", ""),
        ]
    );
}

#[test]
fn unknown_field_with_file_and_pointer() {
    let dir = project(&[
        (".polpo/project.json", r#"{"schemaVersion": 2, "settings": {"colour": "red"}}"#),
        (".polpo/agents/a/agent.json", r#"{"chat": {"allowedTool": []}}"#),
        (".polpo/agents/a/instructions.md", ""),
    ]);
    assert_eq!(
        problems(dir.path()),
        vec![
            at("unknown_field", ".polpo/agents/a/agent.json", "/chat/allowedTool"),
            at("unknown_field", ".polpo/project.json", "/settings/colour"),
        ]
    );
}

#[test]
fn invalid_value_says_what_was_expected() {
    let dir = project(&[
        (".polpo/project.json", r#"{"schemaVersion": 2, "settings": {"storage": "mysql"}}"#),
        (".polpo/agents/a/agent.json", r#"{"maxTurns": 0, "toolLoading": {"mode": "lazy"}}"#),
        (".polpo/agents/a/instructions.md", ""),
    ]);
    let p = polpo_project::load_project(dir.path()).unwrap_err();
    assert_eq!(
        located(&p),
        vec![
            at("invalid_value", ".polpo/agents/a/agent.json", "/maxTurns"),
            at("invalid_value", ".polpo/agents/a/agent.json", "/toolLoading/mode"),
            at("invalid_value", ".polpo/project.json", "/settings/storage"),
        ]
    );
    let storage = p.iter().find(|p| p.pointer.as_deref() == Some("/settings/storage")).unwrap();
    assert!(storage.message.contains("`file`, `sqlite`, `postgres`"), "{}", storage.message);
}

#[test]
fn invalid_legacy_layout_when_aggregate_files_have_the_wrong_structure() {
    let dir = project(&[
        (".polpo/polpo.json", "{}"),
        (".polpo/agents.json", r#"{"a": {}}"#),
        (".polpo/teams.json", r#"[{"name": "t"}, "oops"]"#),
    ]);
    assert_eq!(
        problems(dir.path()),
        vec![
            at("invalid_legacy_layout", ".polpo/agents.json", ""),
            at("invalid_legacy_layout", ".polpo/teams.json", "/1"),
        ]
    );
}

#[test]
fn forbidden_fields_in_agent_json() {
    let dir = project(&[
        MANIFEST,
        (".polpo/agents/a/agent.json", r#"{"name": "a", "systemPrompt": "p", "createdAt": "2026-01-01"}"#),
        (".polpo/agents/a/instructions.md", ""),
    ]);
    assert_eq!(
        problems(dir.path()),
        vec![
            at("forbidden_field", ".polpo/agents/a/agent.json", "/createdAt"),
            at("forbidden_field", ".polpo/agents/a/agent.json", "/name"),
            at("forbidden_field", ".polpo/agents/a/agent.json", "/systemPrompt"),
        ]
    );
}

#[test]
fn cross_agent_rules_point_into_the_right_file() {
    let dir = project(&[
        MANIFEST,
        (".polpo/agents/a/agent.json", r#"{"reportsTo": "b"}"#),
        (".polpo/agents/a/instructions.md", ""),
        (".polpo/agents/b/agent.json", r#"{"reportsTo": "a", "assignedLoops": ["x"], "defaultLoop": "y"}"#),
        (".polpo/agents/b/instructions.md", ""),
    ]);
    assert_eq!(
        problems(dir.path()),
        vec![
            at("invalid_reference", ".polpo/agents/b/agent.json", "/assignedLoops/0"),
            at("invalid_reference", ".polpo/agents/b/agent.json", "/defaultLoop"),
            at("reports_to_cycle", ".polpo/agents/a/agent.json", "/reportsTo"),
        ]
    );
}

#[test]
fn no_project_folder_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(polpo_project::load_project(dir.path()).unwrap_err()[0].code, "missing_project_file");
}

#[test]
fn exact_duplicates_in_legacy_files_are_collisions_too() {
    let dir = project(&[(".polpo/polpo.json", "{}"), (".polpo/agents.json", r#"[{"name": "a"}, {"name": "a"}]"#)]);
    assert_eq!(problems(dir.path()), vec![at("case_collision", ".polpo/agents.json", "/1")]);
}
