//! `.polpo/loops/<id>.json` is loaded with the project; every problem in it is reported with
//! its file and pointer, next to the problems of the agents that assign it.

#![allow(clippy::unwrap_used)]

mod common;
use common::*;

const AGENT: (&str, &str) =
    (".polpo/agents/router/agent.json", r#"{"assignedLoops": ["flow"], "defaultLoop": "flow"}"#);
const INSTRUCTIONS: (&str, &str) = (".polpo/agents/router/instructions.md", "Route.");

#[test]
fn a_loop_file_is_loaded_under_its_file_name() {
    let dir = project(&[
        MANIFEST,
        AGENT,
        INSTRUCTIONS,
        (".polpo/loops/flow.json", r#"{"start": "a", "steps": {"a": {"systemPrompt": "hi", "next": "end"}}}"#),
        (".polpo/loops/notes.md", "not a loop"),
    ]);
    let project = polpo_project::load_project(dir.path()).unwrap();
    assert_eq!(project.loops.keys().collect::<Vec<_>>(), ["flow"]);
    assert_eq!(project.loops["flow"].source.file, ".polpo/loops/flow.json");
    assert_eq!(project.loops["flow"].config.start, "a");
}

const TS_FLOW: &str = r#"import { defineProjectLoop, agentStep, when, otherwise } from "@polpo-ai/core/loop-code";

export default defineProjectLoop({
  start: "a",
  steps: {
    a: agentStep({ systemPrompt: "hi", next: [when("a.ok == true", "b"), otherwise("end")] }),
    b: agentStep({ systemPrompt: "done" }),
  },
});
"#;

#[test]
fn a_ts_loop_is_loaded_as_the_json_it_compiles_to() {
    let dir = project(&[MANIFEST, AGENT, INSTRUCTIONS, (".polpo/loops/flow.ts", TS_FLOW)]);
    let project = polpo_project::load_project(dir.path()).unwrap();
    let written = serde_json::json!({"version": "1", "kind": "graph", "context": "shared", "start": "a", "steps": {
        "a": {"type": "agent", "systemPrompt": "hi", "next": [{"when": "a.ok == true", "to": "b"}, {"to": "end"}]},
        "b": {"type": "agent", "systemPrompt": "done"}}});
    assert_eq!(serde_json::to_value(&*project.loops["flow"].config).unwrap(), written);
    assert_eq!(project.loops["flow"].source.file, ".polpo/loops/flow.ts");
}

#[test]
fn a_loop_with_both_a_json_and_a_ts_file_is_a_conflict() {
    let dir = project(&[
        MANIFEST,
        AGENT,
        INSTRUCTIONS,
        (".polpo/loops/flow.json", r#"{"start": "a", "steps": {"a": {"systemPrompt": "hi"}}}"#),
        (".polpo/loops/flow.ts", TS_FLOW),
    ]);
    assert_eq!(problems(dir.path()), [at("loop_source_conflict", ".polpo/loops/flow.ts", "")]);
}

#[test]
fn problems_of_a_ts_loop_carry_the_line_and_column_of_its_source() {
    let graph = TS_FLOW.replace("\"b\"),", "\"ghost\"),");
    let dir = project(&[MANIFEST, AGENT, INSTRUCTIONS, (".polpo/loops/flow.ts", &graph)]);
    let shown: Vec<String> =
        polpo_project::load_project(dir.path()).unwrap_err().iter().map(|p| p.to_string()).collect();
    assert!(
        shown.iter().any(|p| p.starts_with(".polpo/loops/flow.ts:6:68:/steps/a/next/0/to: unknown_step")),
        "{shown:?}"
    );
    let hostile = TS_FLOW.replace("\"hi\"", "process.env.SECRET");
    let dir = project(&[MANIFEST, AGENT, INSTRUCTIONS, (".polpo/loops/flow.ts", &hostile)]);
    let shown: Vec<String> =
        polpo_project::load_project(dir.path()).unwrap_err().iter().map(|p| p.to_string()).collect();
    assert!(shown[0].starts_with(".polpo/loops/flow.ts:6:34: loop_ts_unsupported: `process.env.SECRET`"), "{shown:?}");
}

#[test]
fn every_problem_of_a_broken_loop_is_reported_with_its_pointer() {
    let dir = project(&[
        MANIFEST,
        AGENT,
        INSTRUCTIONS,
        (".polpo/agents/other/agent.json", r#"{"assignedLoops": ["missing"]}"#),
        (".polpo/agents/other/instructions.md", ""),
        (
            ".polpo/loops/flow.json",
            r#"{"start": "a", "steps": {
                "a": {"when": "x = 1", "next": "ghost"},
                "w": {"type": "while", "body": "a"}
            }}"#,
        ),
        (".polpo/loops/bad.json", r#"{"start": "a", "steps": {"a": {"type": "tool"}}, "extra": true}"#),
        (".polpo/loops/syntax.json", "{"),
        (".polpo/loops/not an id.json", "{}"),
    ]);
    let got = problems(dir.path());
    let mut want = vec![
        at("invalid_json", ".polpo/loops/syntax.json", ""),
        at("invalid_value", ".polpo/loops/bad.json", "/steps/a/tool"),
        at("unknown_field", ".polpo/loops/bad.json", "/extra"),
        at("invalid_expression", ".polpo/loops/flow.json", "/steps/a/when"),
        at("unknown_step", ".polpo/loops/flow.json", "/steps/a/next"),
        at("unbounded_while", ".polpo/loops/flow.json", "/steps/w"),
        at("unreachable_step", ".polpo/loops/flow.json", "/steps/w"),
        at("invalid_reference", ".polpo/agents/other/agent.json", "/assignedLoops/0"),
    ];
    want.sort();
    let without_bad_name: Vec<_> = got.iter().filter(|(_, f, _)| !f.contains("not an id")).cloned().collect();
    assert_eq!(without_bad_name, want);
    assert!(got.iter().any(|(c, f, _)| c == "invalid_value" && f == ".polpo/loops/not an id.json"), "{got:?}");
}
