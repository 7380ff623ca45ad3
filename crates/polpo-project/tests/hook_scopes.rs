//! Project-scope hook packs (`settings.hooks`): checked like an agent's `hooks`, and resolved
//! before every agent's own packs.

mod common;
use common::*;
use polpo_core::hooks::Scope;
use polpo_project::hooks::resolve_agent_hooks;
use polpo_project::load_project;

const PACK: &str = r#"{"version": 1, "hooks": {"tool:before": [{"id": "guard", "handler": {"type": "command", "command": "./guard.sh"}}]}}"#;

#[test]
fn an_unknown_project_pack_is_a_problem_at_its_pointer_in_either_manifest() {
    for manifest in [
        (".polpo/project.json", r#"{"schemaVersion": 2, "settings": {"hooks": ["audit", "qualty"]}}"#),
        (".polpo/polpo.json", r#"{"settings": {"hooks": ["audit", "qualty"]}}"#),
    ] {
        let dir = project(&[manifest, (".polpo/hooks/audit.json", PACK)]);
        let problems = load_project(dir.path()).unwrap_err();
        assert_eq!(
            located(&problems),
            [("unknown_hook_pack".to_owned(), manifest.0.to_owned(), "/settings/hooks/1".to_owned())]
        );
        assert!(problems[0].message.contains(".polpo/hooks/qualty.json"), "{}", problems[0].message);
    }
}

#[test]
fn settings_hooks_must_be_a_list_of_names() {
    let dir = project(&[(".polpo/project.json", r#"{"schemaVersion": 2, "settings": {"hooks": "audit"}}"#)]);
    let problems = load_project(dir.path()).unwrap_err();
    assert_eq!(
        located(&problems).first().map(|(_, f, p)| (f.as_str(), p.as_str())),
        Some((".polpo/project.json", "/settings/hooks"))
    );
}

#[test]
fn project_packs_apply_to_every_agent_before_its_own() {
    let dir = project(&[
        (".polpo/project.json", r#"{"schemaVersion": 2, "settings": {"hooks": ["audit"]}}"#),
        (".polpo/hooks/audit.json", PACK),
        (".polpo/hooks/quality.json", PACK),
        (".polpo/agents/writer/agent.json", r#"{"hooks": ["quality", "audit"]}"#),
        (".polpo/agents/writer/instructions.md", "Write."),
        (".polpo/agents/reader/agent.json", "{}"),
        (".polpo/agents/reader/instructions.md", "Read."),
    ]);
    let p = load_project(dir.path()).unwrap();
    let order = |agent: &str| -> Vec<(Scope, String)> {
        let set = resolve_agent_hooks(&p, p.agent(agent).unwrap(), &[]).unwrap();
        set.hooks().iter().map(|h| (h.scope, h.hook.qualified_id())).collect()
    };
    // `audit`, assigned to the project and to the writer, runs once, at project scope.
    assert_eq!(
        order("writer"),
        [(Scope::Project, "audit/guard".to_owned()), (Scope::Agent, "quality/guard".to_owned())]
    );
    assert_eq!(order("reader"), [(Scope::Project, "audit/guard".to_owned())]);
}
