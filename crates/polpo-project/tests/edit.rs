//! The project edit transaction: a change that leaves the project unloadable, or that the
//! caller refuses to serve, puts every touched file back; edits of one editor never overlap.

#![allow(clippy::unwrap_used)] // test helpers: a failed setup should panic loudly

mod common;
use common::*;
use polpo_core::config::{AgentConfig, TeamConfig};
use polpo_project::teams::{delete_team, write_team};
use polpo_project::{ProjectEditor, ProjectError, delete_agent, read_agent, write_agent};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

const FILES: [(&str, &str); 5] = [
    MANIFEST,
    (".polpo/agents/lead/agent.json", r#"{"role": "lead"}"#),
    (".polpo/agents/lead/instructions.md", "Lead."),
    (".polpo/agents/dev/agent.json", r#"{"team": "core", "reportsTo": "lead"}"#),
    (".polpo/agents/dev/instructions.md", "Build."),
];

/// Every file and folder under `.polpo/` with its bytes (folders: empty).
fn tree(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.join(".polpo")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let shown = path.strip_prefix(root).unwrap().display().to_string();
            if path.is_dir() {
                stack.push(path);
                out.insert(shown, Vec::new());
            } else {
                out.insert(shown, std::fs::read(&path).unwrap());
            }
        }
    }
    out
}

fn with_team(team: &str) -> AgentConfig {
    AgentConfig { team: Some(team.into()), ..Default::default() }
}

#[test]
fn a_change_the_project_does_not_load_with_puts_every_file_back_and_is_not_swapped() {
    let dir = project(&[FILES.as_slice(), &[(".polpo/teams/core.json", "{}\n")]].concat());
    let before = tree(dir.path());
    let editor = ProjectEditor::new(dir.path());
    let mut swapped = false;
    let err = editor
        .edit(
            |edit| {
                // A new agent (new folder), a replaced one, a removed team and a deleted agent
                // that another agent still reports to: the last makes the project invalid.
                write_agent(edit, "ops", &with_team("core"), "Run.", None)?;
                let dev = read_agent(edit.root(), "dev")?;
                write_agent(edit, "dev", &dev.agent.config, "Changed.", Some(&dev.revision))?;
                write_team(edit, "infra", &TeamConfig::default())?;
                delete_team(edit, "core")?;
                let lead = read_agent(edit.root(), "lead")?;
                delete_agent(edit, "lead", &lead.revision)
            },
            |_| {
                swapped = true;
                Ok(())
            },
        )
        .unwrap_err();
    let ProjectError::Invalid(problems) = &err else { panic!("{err}") };
    assert_eq!(err.code(), "invalid_project");
    assert!(!problems.is_empty());
    assert!(!swapped, "a project that does not load is never handed to swap");
    assert_eq!(tree(dir.path()), before, "every file and folder is as it was");
}

#[test]
fn a_project_swap_refuses_is_undone_and_a_served_one_stays() {
    let dir = project(&FILES);
    let before = tree(dir.path());
    let editor = ProjectEditor::new(dir.path());
    let refusal = vec![polpo_core::problem::Problem::new("unknown_hook_pack", "refused")];
    let err = editor
        .edit(|edit| write_agent(edit, "ops", &AgentConfig::default(), "Run.", None), |_| Err(refusal.clone()))
        .unwrap_err();
    assert!(matches!(err, ProjectError::Invalid(p) if p == refusal));
    assert_eq!(tree(dir.path()), before);

    let mut served = None;
    editor
        .edit(
            |edit| {
                let dev = read_agent(edit.root(), "dev")?;
                delete_agent(edit, "dev", &dev.revision)
            },
            |project| {
                served = Some(project);
                Ok(())
            },
        )
        .unwrap();
    let served = served.unwrap();
    assert_eq!(served.agents.keys().collect::<Vec<_>>(), ["lead"], "swap gets the project as now on disk");
    let left: Vec<String> = tree(dir.path()).into_keys().filter(|p| p.starts_with(".polpo/agents/")).collect();
    assert_eq!(
        left,
        [".polpo/agents/lead", ".polpo/agents/lead/agent.json", ".polpo/agents/lead/instructions.md"],
        "no hidden leftovers"
    );
}

#[test]
fn edits_of_one_editor_run_one_at_a_time() {
    let dir = project(&FILES);
    let editor = ProjectEditor::new(dir.path());
    let (entered_tx, entered) = mpsc::channel();
    std::thread::scope(|s| {
        editor
            .edit(
                |edit| {
                    let second = entered_tx.clone();
                    s.spawn(|| {
                        editor
                            .edit(
                                move |edit| {
                                    write_team(edit, "second", &TeamConfig::default())
                                        .map(|()| second.send(()).unwrap())
                                },
                                |_| Ok(()),
                            )
                            .unwrap()
                    });
                    // The second edit cannot start while this one holds the editor, however
                    // long it waits.
                    assert!(
                        entered.recv_timeout(Duration::from_millis(300)).is_err(),
                        "an edit started inside another"
                    );
                    write_team(edit, "first", &TeamConfig::default())
                },
                |_| Ok(()),
            )
            .unwrap();
        entered.recv().unwrap();
    });
    let project = polpo_project::load_project(dir.path()).unwrap();
    assert_eq!(project.teams.keys().collect::<Vec<_>>(), ["first", "second"]);
}
