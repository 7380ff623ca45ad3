#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::config::{Agent, Layout, Location, Project};
use crate::problem::Problem;
use config::{LifecycleHook, TimeoutAction};
use governance::{Gate, RuleKind, gate_timeout};
use serde_json::{Value, json};

/// The README's `router-flow`, with built-in tool names in place of `clone_repository`.
fn router_flow() -> Value {
    json!({
        "name": "router-flow",
        "groups": {"request_routing": {"label": "Route request", "description": "Classify the request and select its execution path."}},
        "context": "shared",
        "start": "clone_repo",
        "steps": {
            "clone_repo": {
                "type": "tool", "tool": "bash",
                "input": {"command": "git clone https://github.com/acme/app.git workspace/app"},
                "saveAs": "repo.clone", "next": "classify"
            },
            "classify": {
                "type": "agent", "label": "Classify request", "description": "Select the route without executing it.",
                "group": "request_routing", "systemPrompt": "Classify the incoming request.",
                "tools": ["read"], "skills": ["classification"],
                "output": {"schema": {"type": "object", "properties": {"route": {"type": "string"}}}},
                "stopWhen": {"expression": "classify.route != null"},
                "next": [
                    {"when": "classify.route == 'answer'", "label": "Answer directly", "to": "answer"},
                    {"label": "Needs review", "to": "human_review"}
                ]
            },
            "answer": {
                "type": "agent", "systemPrompt": "Answer using the selected route.",
                "tools": ["write"], "toolChoice": {"mode": "required", "tool": "write"}, "next": "end"
            },
            "human_review": {
                "type": "human",
                "output": {"schema": {"type": "object", "properties": {"decision": {"type": "string"}}}},
                "next": "end"
            }
        }
    })
}

fn file(id: &str) -> Location {
    Location::file(format!(".polpo/loops/{id}.json"))
}

fn parsed(id: &str, value: &Value) -> Loop {
    Loop { id: id.into(), config: std::sync::Arc::new(parse_loop(value, &file(id)).unwrap()), source: file(id) }
}

fn project(agents: &[(&str, Value)], loops: Vec<Loop>) -> Project {
    Project {
        root: ".".into(),
        layout: Layout::Directory,
        manifest: serde_json::from_value(json!({"schemaVersion": 2})).unwrap(),
        manifest_source: Location::file(".polpo/project.json"),
        agents: agents
            .iter()
            .map(|(id, config)| {
                let source = Location::file(format!(".polpo/agents/{id}/agent.json"));
                let agent = Agent {
                    id: (*id).into(),
                    config: serde_json::from_value(config.clone()).unwrap(),
                    instructions: String::new(),
                    source,
                };
                ((*id).to_owned(), agent)
            })
            .collect(),
        teams: Default::default(),
        loops: loops.into_iter().map(|l| (l.id.clone(), l)).collect(),
        hook_packs: Default::default(),
        schedules: Default::default(),
    }
}

fn located(problems: &[Problem]) -> Vec<(String, String)> {
    let mut v: Vec<_> = problems.iter().map(|p| (p.code.clone(), p.pointer.clone().unwrap_or_default())).collect();
    v.sort();
    v
}

fn want(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v: Vec<_> = pairs.iter().map(|(c, p)| ((*c).to_owned(), (*p).to_owned())).collect();
    v.sort();
    v
}

/// The problems of one loop document, shape first, then rules.
fn problems_of(value: Value) -> Vec<(String, String)> {
    match parse_loop(&value, &file("flow")) {
        Err(problems) => located(&problems),
        Ok(config) => located(&validate_loop("flow", &config)),
    }
}

#[test]
fn the_readme_router_flow_parses_validates_and_round_trips() {
    let value = router_flow();
    let lp = parsed("router-flow", &value);
    assert_eq!(serde_json::to_value(&*lp.config).unwrap(), value, "absent stays absent, nothing added");
    let p = project(
        &[(
            "router",
            json!({"assignedLoops": ["router-flow"], "allowedTools": ["read", "write", "bash"], "skills": ["classification", "triage"]}),
        )],
        vec![lp],
    );
    assert_eq!(crate::config::validate_project(&p), vec![]);
    assert_eq!(unknown_loop_tools(&p, &|n| ["bash", "read", "write"].contains(&n)), vec![]);
    let warnings = located(&loop_warnings(&p));
    assert_eq!(
        warnings,
        want(&[("deprecated_field", "/steps/answer/tools"), ("deprecated_field", "/steps/classify/tools"),])
    );
    assert!(matches!(p.loops["router-flow"].config.steps["human_review"].body, StepBody::Human(_)));
}

#[test]
fn a_step_skill_its_agent_is_not_assigned_is_located_at_the_step() {
    let mut value = router_flow();
    value["steps"]["classify"]["skills"] = json!(["classification", "deploy"]);
    let p = project(
        &[
            ("router", json!({"assignedLoops": ["router-flow"], "skills": ["classification"]})),
            ("bare", json!({"assignedLoops": ["router-flow"]})),
            ("other", json!({"skills": []})),
        ],
        vec![parsed("router-flow", &value)],
    );
    let problems = crate::config::validate_project(&p);
    assert_eq!(
        located(&problems),
        want(&[
            ("skill_not_assigned", "/steps/classify/skills/0"),
            ("skill_not_assigned", "/steps/classify/skills/1"),
            ("skill_not_assigned", "/steps/classify/skills/1"),
        ])
    );
    assert!(problems.iter().all(|p| p.file.as_deref() == Some(".polpo/loops/router-flow.json")), "{problems:?}");
    assert!(problems.iter().any(|p| p.message.contains("`deploy`") && p.message.contains("`router`")), "{problems:?}");
}

#[test]
fn every_step_type_and_governance_field_parses_and_round_trips() {
    let value = json!({
        "version": "1", "kind": "graph", "name": "flow", "label": "Flow", "description": "d", "metadata": {"team": "x"},
        "context": "shared", "allowedTools": ["read", "memory_*"],
        "hooks": {"loop:start": [{"tool": "read", "input": {"path": "a"}, "saveAs": "boot.file", "when": "true", "onError": "continue"}]},
        "permissions": [{"id": "p1", "description": "d", "resource": "tool", "action": "call", "effect": "allow",
                         "match": {"tool": ["read"], "step": "a", "loop": "flow", "human": [], "hook": "tool:before"}, "when": "a.ok", "message": "m"}],
        "policies": [{"id": "q", "hook": "tool:before", "effect": "approval", "when": "tool.name == 'read'", "message": "ask"}],
        "start": "a",
        "steps": {
            "a": {"systemPrompt": "s", "allowedTools": ["read"], "toolChoice": "auto", "model": "openai/gpt-4o-mini",
                  "reasoning": "low", "temperature": 0.5, "maxTurns": 3, "when": "", "input": {"x": {"$context": "request.metadata.x"}, "n": 1},
                  "inputSchema": {"type": "object"}, "next": "p"},
            "p": {"type": "parallel", "branches": ["b", "c"], "join": 1, "next": "w"},
            "b": {"type": "tool", "tool": "read", "input": {"path": {"$context": "a.path"}}, "saveAs": "files.b"},
            "c": {"type": "human", "notify": ["ops"], "output": {"schema": {}}},
            "w": {"type": "while", "until": "d.done === true", "body": ["d"], "maxIterations": 3, "next": "end"},
            "d": {"type": "agent", "toolChoice": "none"}
        }
    });
    let config = parse_loop(&value, &file("flow")).unwrap();
    assert_eq!(serde_json::to_value(&config).unwrap(), value);
    assert_eq!(validate_loop("flow", &config), vec![]);
    match &config.steps["w"].body {
        StepBody::While(w) => assert_eq!((w.max_iterations(), w.body.as_slice().len()), (3, 1)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn shape_problems_are_all_reported_against_the_step_type() {
    let got = problems_of(json!({
        "start": "a", "colour": 1, "version": 2,
        "groups": {"g": {"label": "G", "groups": {}}},
        "hooks": {"loop:begin": []},
        "steps": {
            "a": {"type": "tool", "tol": "read"},
            "b": {"type": "loop"},
            "c": {"group": ["g", "h"], "temperature": 3, "toolChoice": {"mode": "required", "tool": 1}},
            "d": {"type": "parallel", "branches": ["a"], "join": "some"},
            "e": {"type": "while", "body": "a", "maxIterations": 0},
            "f": {"next": [{"when": "x", "goto": "a"}]}
        }
    }));
    assert_eq!(
        got,
        want(&[
            ("forbidden_field", "/groups/g/groups"),
            ("invalid_value", "/steps/a/tool"),
            ("invalid_value", "/steps/b/type"),
            ("invalid_value", "/steps/c/group"),
            ("invalid_value", "/steps/c/temperature"),
            ("invalid_value", "/steps/c/toolChoice/tool"),
            ("invalid_value", "/steps/d/join"),
            ("invalid_value", "/steps/e/maxIterations"),
            ("invalid_value", "/steps/f/next/0/to"),
            ("invalid_value", "/version"),
            ("unknown_field", "/colour"),
            ("unknown_field", "/hooks/loop:begin"),
            ("unknown_field", "/steps/a/tol"),
            ("unknown_field", "/steps/f/next/0/goto"),
        ])
    );
}

#[test]
fn graph_problems_are_all_reported_with_their_pointers() {
    let got = problems_of(json!({
        "name": "other", "start": "nowhere",
        "steps": {"a": {"next": "ghost"}, "end": {}}
    }));
    assert_eq!(
        got,
        want(&[
            ("invalid_value", "/name"),
            ("reserved_step_id", "/steps/end"),
            ("unknown_step", "/start"),
            ("unknown_step", "/steps/a/next")
        ])
    );

    let got = problems_of(json!({
        "start": "a",
        "groups": {"g": {}},
        "permissions": [{"resource": "step", "effect": "deny", "match": {"step": ["a", "zz"], "hook": "step:after"}},
                        {"resource": "step", "effect": "deny", "match": {"step": "yy", "hook": ["loop:after"]}}],
        "steps": {
            "a": {"group": "g", "next": [{"when": "x", "to": "b"}, {"to": "end"}, {"to": "missing"}]},
            "b": {"type": "parallel", "branches": ["c", "end"], "join": 3, "next": "end"},
            "c": {"group": "nope", "type": "while", "condition": "c.more", "body": ["c2", "gone"]},
            "c2": {},
            "island": {"next": "island2"},
            "island2": {},
            "n": {"next": []}
        }
    }));
    assert_eq!(
        got,
        want(&[
            ("invalid_value", "/steps/b/join"),
            ("invalid_value", "/steps/n/next"),
            ("unknown_group", "/steps/c/group"),
            ("invalid_value", "/permissions/1/match/hook/0"),
            ("unknown_step", "/permissions/0/match/step/1"),
            ("unknown_step", "/permissions/1/match/step"),
            ("unknown_step", "/steps/a/next/2/to"),
            ("unknown_step", "/steps/b/branches/1"),
            ("unknown_step", "/steps/c/body/1"),
            ("unreachable_step", "/steps/island"),
            ("unreachable_step", "/steps/island2"),
            ("unreachable_step", "/steps/n"),
        ])
    );
}

#[test]
fn expressions_are_checked_everywhere_with_the_column() {
    let value = json!({
        "start": "a",
        "hooks": {"tool:after": [{"tool": "read", "when": "a ="}]},
        "permissions": [{"resource": "tool", "effect": "deny", "when": "(a"}],
        "policies": [{"effect": "deny", "when": "a == b == c"}],
        "steps": {
            "a": {"when": "'open", "stopWhen": {"expression": "x > 1.2.3"}, "next": [{"when": "a[0]", "to": "w"}]},
            "w": {"type": "while", "condition": "!", "until": "ok", "body": "a"}
        }
    });
    let config = parse_loop(&value, &file("flow")).unwrap();
    let problems = validate_loop("flow", &config);
    assert_eq!(
        located(&problems),
        want(&[
            ("invalid_expression", "/hooks/tool:after/0/when"),
            ("invalid_expression", "/permissions/0/when"),
            ("invalid_expression", "/policies/0/when"),
            ("invalid_expression", "/steps/a/next/0/when"),
            ("invalid_expression", "/steps/a/stopWhen/expression"),
            ("invalid_expression", "/steps/a/when"),
            ("invalid_expression", "/steps/w/condition"),
            ("invalid_value", "/steps/w/until"),
        ])
    );
    let stop = problems.iter().find(|p| p.pointer.as_deref() == Some("/steps/a/stopWhen/expression")).unwrap();
    assert!(stop.message.contains("column 5") && stop.message.contains("invalid_number"), "{}", stop.message);
}

#[test]
fn while_needs_a_condition_and_bindings_and_save_as_are_checked() {
    let got = problems_of(json!({
        "start": "w",
        "steps": {
            "w": {"type": "while", "body": "t", "next": "end"},
            "t": {"type": "tool", "tool": "read", "saveAs": "request.x",
                  "input": {"ok": {"$context": "a.b"}, "bad": {"$context": "a.b", "x": 1}, "list": [{"$context": 3}, {"$context": "a..b"}]}},
            "g": {"input": {"$context": "a-b"}, "tools": ["read"], "allowedTools": ["read"], "toolChoice": {"mode": "none", "tool": "read"}}
        }
    }));
    assert_eq!(
        got,
        want(&[
            ("invalid_binding", "/steps/g/input"),
            ("invalid_binding", "/steps/t/input/bad"),
            ("invalid_binding", "/steps/t/input/list/0"),
            ("invalid_binding", "/steps/t/input/list/1"),
            ("invalid_value", "/steps/g/toolChoice/mode"),
            ("invalid_value", "/steps/g/tools"),
            ("invalid_value", "/steps/t/saveAs"),
            ("unbounded_while", "/steps/w"),
            ("unreachable_step", "/steps/g"),
        ])
    );
}

#[test]
fn tools_must_exist_and_stay_within_every_ceiling() {
    let value = json!({
        "start": "a", "allowedTools": ["read", "write", "bash", "memory_*"],
        "hooks": {"loop:end": [{"tool": "notify_slack"}]},
        "permissions": [{"resource": "tool", "effect": "allow", "match": {"tool": ["read", "red", "memory_*"]}}],
        "steps": {
            "a": {"allowedTools": ["read", "grep", "memory_get"], "toolChoice": {"mode": "required", "tool": "write"}, "next": "b"},
            "b": {"type": "tool", "tool": "bash", "next": "c"},
            "c": {"tools": ["write", "mcp__*"]}
        }
    });
    let lp = parsed("flow", &value);
    assert_eq!(
        located(&validate_loop("flow", &lp.config)),
        want(&[
            ("tool_outside_ceiling", "/steps/a/allowedTools/1"),
            ("tool_outside_ceiling", "/steps/a/toolChoice/tool"),
        ])
    );
    let p = project(
        &[
            ("narrow", json!({"assignedLoops": ["flow"], "allowedTools": ["read", "memory_*"]})),
            ("open", json!({"assignedLoops": ["flow"]})),
            ("other", json!({"allowedTools": []})),
        ],
        vec![lp],
    );
    let problems = crate::config::validate_project(&p);
    let from_agents: Vec<_> = problems.iter().filter(|p| p.message.contains("agent `narrow`")).cloned().collect();
    assert_eq!(
        located(&from_agents),
        want(&[
            ("tool_outside_ceiling", "/steps/a/allowedTools/1"),
            ("tool_outside_ceiling", "/steps/a/toolChoice/tool"),
            ("tool_outside_ceiling", "/steps/b/tool"),
            ("tool_outside_ceiling", "/steps/c/tools/0"),
        ])
    );
    assert!(problems.iter().all(|p| p.file.as_deref() == Some(".polpo/loops/flow.json")));
    let known = ["read", "write", "bash", "memory_get"];
    let unknown = unknown_loop_tools(&p, &|n| known.contains(&n));
    assert_eq!(
        located(&unknown),
        want(&[
            ("unknown_tool", "/hooks/loop:end/0/tool"),
            ("unknown_tool", "/permissions/0/match/tool/1"),
            ("unknown_tool", "/steps/a/allowedTools/1"),
        ])
    );
}

#[test]
fn agents_must_assign_existing_loops_and_step_models_must_resolve() {
    let lp = parsed("flow", &json!({"start": "a", "steps": {"a": {"model": {"profile": "fast"}}}}));
    let p = project(&[("a", json!({"assignedLoops": ["flow", "ghost"], "defaultLoop": "ghost"}))], vec![lp]);
    let problems = crate::config::validate_project(&p);
    let got: Vec<_> = problems
        .iter()
        .map(|p| (p.code.clone(), p.file.clone().unwrap_or_default(), p.pointer.clone().unwrap_or_default()))
        .collect();
    assert!(
        got.contains(&("invalid_reference".into(), ".polpo/agents/a/agent.json".into(), "/assignedLoops/1".into())),
        "{got:?}"
    );
    assert!(
        got.iter()
            .any(|(c, f, p)| c.starts_with("model_profile") && f == ".polpo/loops/flow.json" && p == "/steps/a/model"),
        "{got:?}"
    );
    assert_eq!(got.len(), 2, "{got:?}");
}

#[test]
fn an_approval_timeout_is_an_iso_duration_on_an_approval_rule_and_its_gate_finds_it() {
    let value = json!({
        "start": "a",
        "permissions": [
            {"resource": "tool", "effect": "approval", "timeout": "soon"},
            {"id": "p1", "resource": "tool", "effect": "deny", "timeout": "PT1S"}
        ],
        "policies": [
            {"effect": "approval", "when": "true", "timeout": "PT1M", "timeoutAction": "approve"},
            {"id": "later", "effect": "approval", "when": "true", "timeout": "P1Y"},
            {"id": "plain", "effect": "approval", "when": "true"}
        ],
        "steps": {"a": {"type": "tool", "tool": "read", "input": {}}}
    });
    let bad_action = json!({"start": "a", "policies": [{"effect": "approval", "when": "true", "timeoutAction": "later"}],
        "steps": {"a": {"type": "tool", "tool": "read", "input": {}}}});
    assert_eq!(problems_of(bad_action), want(&[("invalid_value", "/policies/0/timeoutAction")]));
    assert_eq!(
        problems_of(value.clone()),
        want(&[
            ("invalid_duration", "/permissions/0/timeout"),
            ("invalid_duration", "/policies/1/timeout"),
            ("invalid_value", "/permissions/1/timeout"),
        ])
    );
    let config = parse_loop(&value, &file("flow")).unwrap();
    let gate = |kind, id: &str| Gate { kind, id: id.to_owned(), hook: LifecycleHook::ToolBefore, step: None };
    assert_eq!(
        gate_timeout(&config, &gate(RuleKind::Policy, "policy-0")),
        Some((std::time::Duration::from_secs(60), TimeoutAction::Approve))
    );
    assert_eq!(gate_timeout(&config, &gate(RuleKind::Policy, "plain")), None);
    assert_eq!(gate_timeout(&config, &gate(RuleKind::Permission, "policy-0")), None, "kinds are apart");
}

#[test]
fn two_parallel_branches_reaching_human_steps_are_refused_one_is_not() {
    let got = problems_of(json!({
        "start": "fan",
        "steps": {
            "fan": {"type": "parallel", "branches": ["left", "right", "quiet"], "next": "single"},
            "left": {"type": "tool", "tool": "read", "next": "ask-left"},
            "ask-left": {"type": "human"},
            "right": {"type": "while", "condition": "true", "body": "ask-right"},
            "ask-right": {"type": "human"},
            "quiet": {"type": "tool", "tool": "read"},
            "single": {"type": "parallel", "branches": ["ask-once", "quiet-too"]},
            "ask-once": {"type": "human"},
            "quiet-too": {"type": "tool", "tool": "read"}
        }
    }));
    assert_eq!(got, want(&[("parallel_human_steps", "/steps/fan/branches")]));
}
