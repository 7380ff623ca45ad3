//! `polpo hooks explain|validate|capabilities` through the real binary, on real project folders.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use polpo_testkit::{FakeLlm, ProjectFixture, Turn};
use serde_json::{Value, json};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use support::ServerProcess;

/// Run `polpo --project <root> <args>` with `env`, stdin closed.
fn polpo(root: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_polpo"));
    cmd.arg("--project").arg(root).args(args).stdin(Stdio::null()).env_remove("POLPO_RUNTIME_HOOKS");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

/// Stdout of a run that must exit 0.
fn ok(o: Output) -> String {
    let (out, err) = (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "exit {}\nstdout: {out}\nstderr: {err}", o.status);
    out
}

fn cmd(handler: &str) -> Value {
    json!({"type": "command", "command": handler})
}

/// Agent `writer` (read, write, bash) with two packs assigned `base` first, `quality`
/// second; `quality`'s hook has the lower priority so it runs first anyway.
fn two_packs(root: &Path) {
    ProjectFixture::new(root, json!({}))
        .unwrap()
        .agent("writer", json!({"model": "openai/fake-model", "allowedTools": ["read", "write", "bash"], "hooks": ["base", "quality"]}), "You write.")
        .unwrap()
        .agent("reader", json!({"model": "openai/fake-model", "allowedTools": ["read"]}), "You read.")
        .unwrap()
        .agent("handy", json!({"model": "openai/fake-model", "hooks": ["base"]}), "Every tool.")
        .unwrap()
        .hook_pack(
            "base",
            json!({"version": 1, "hooks": {"tool:before": [
                {"id": "guard-write", "description": "No writes outside docs/", "priority": 50, "matcher": {"tools": ["write"]}, "handler": cmd("sh guard.sh")},
                {"id": "audit", "observe": true, "matcher": {"tools": ["wri*", "read"]}, "handler": cmd("sh audit.sh")}
            ]}}),
        )
        .unwrap()
        .hook_pack(
            "quality",
            json!({"version": 1, "hooks": {
                "tool:before": [{"id": "first", "priority": 10, "matcher": {"tools": ["write", "wirte"]}, "handler": cmd("sh first.sh")}],
                "tool:after": [{"id": "scrub-fetch", "matcher": {"tools": ["http_fetch"]}, "handler": cmd("sh scrub.sh")}],
                "turn:stop": [
                    {"id": "gate", "terminationGate": {"validator": cmd("sh check.sh"), "maxCycles": 2, "maxDurationMs": 60000}},
                    {"id": "build-review", "matcher": {"steps": ["build*"]}, "handler": cmd("sh review.sh")}
                ]
            }}),
        )
        .unwrap();
}

fn hook_ids(explained: &Value, event: &str) -> Vec<(Value, String)> {
    let e = explained["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["event"] == event)
        .unwrap_or_else(|| panic!("no {event} in {explained:#}"));
    e["hooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| (h["order"].clone(), h["hook"].as_str().unwrap().to_owned()))
        .collect()
}

#[test]
fn explain_shows_running_order_across_packs_by_priority_with_the_pattern_that_matched() {
    let dir = tempfile::tempdir().unwrap();
    two_packs(dir.path());
    let out = ok(polpo(dir.path(), &["hooks", "explain", "--agent", "writer", "--tool", "write", "--json"], &[]));
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["mode"], "chat");
    assert_eq!(v["packs"], json!(["base", "quality"]));
    // Priority 10 (quality) before 50 (base) although base is assigned first; the observer
    // has no position because it runs concurrently.
    assert_eq!(
        hook_ids(&v, "tool:before"),
        [(json!(1), "quality/first".into()), (json!(2), "base/guard-write".into()), (Value::Null, "base/audit".into())]
    );
    let before = &v["events"][0]["hooks"];
    assert_eq!(before[0]["matchedBy"], json!({"tool": "write"}));
    assert_eq!(before[0]["priority"], 10);
    assert_eq!(before[0]["scope"], "agent");
    assert_eq!(before[2]["matchedBy"], json!({"tool": "wri*"}));
    assert_eq!(before[2]["concurrent"], true);
    assert_eq!(hook_ids(&v, "tool:after"), []);
    // In chat the step-only hook does not fire; the gate does, with its limits.
    assert_eq!(hook_ids(&v, "turn:stop"), [(json!(1), "quality/gate".into())]);
    assert_eq!(v["events"].as_array().unwrap().last().unwrap()["hooks"][0]["role"], "terminationGate");
    assert_eq!(v["terminationGate"]["maxCycles"], 2);

    // Inside a loop step the step hook joins, and says which step pattern matched.
    let v: Value = serde_json::from_str(&ok(polpo(
        dir.path(),
        &["hooks", "explain", "--agent", "writer", "--step", "build-1", "--json"],
        &[],
    )))
    .unwrap();
    assert_eq!(v["mode"], "loop");
    assert_eq!(
        hook_ids(&v, "turn:stop"),
        [(json!(1), "quality/gate".into()), (json!(2), "quality/build-review".into())]
    );
    assert_eq!(
        v["events"].as_array().unwrap().iter().find(|e| e["event"] == "turn:stop").unwrap()["hooks"][1]["matchedBy"],
        json!({"step": "build*"})
    );
    // Without --tool, every tool of the agent that some hook matches is explained (read for
    // the observer, write), and bash, which no hook matches, is left out.
    let tools: Vec<(&str, &str)> = v["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| Some((e["event"].as_str()?, e["tool"].as_str()?)))
        .collect();
    assert_eq!(tools, [("tool:before", "read"), ("tool:before", "write")]);

    // The text form numbers controlling hooks and marks observers.
    let text = ok(polpo(dir.path(), &["hooks", "explain", "--agent", "writer", "--tool", "write"], &[]));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "agent writer · mode chat · packs: base, quality", "{text}");
    assert_eq!(lines[1], "tool:before (write)");
    assert!(
        lines[2].starts_with(
            "  1. quality/first [controlling] command · scope agent · priority 10 · matched tools \"write\""
        ),
        "{text}"
    );
    assert!(lines[3].starts_with("  2. base/guard-write") && lines[3].ends_with("— No writes outside docs/"), "{text}");
    assert!(lines[4].starts_with("  ~ base/audit [observer, runs concurrently]"), "{text}");
    assert!(text.contains("termination gate: maxCycles 2, maxDurationMs 60000, maxTokens unlimited"), "{text}");
}

#[test]
fn explain_says_when_the_tool_policy_keeps_a_tool_from_every_hook() {
    let dir = tempfile::tempdir().unwrap();
    two_packs(dir.path());
    let v: Value = serde_json::from_str(&ok(polpo(
        dir.path(),
        &["hooks", "explain", "--agent", "writer", "--tool", "http_fetch", "--json"],
        &[],
    )))
    .unwrap();
    assert_eq!(v["toolPolicy"], json!({"tool": "http_fetch", "available": false, "deniedBy": "agent"}));
    assert_eq!(hook_ids(&v, "tool:after"), [], "scrub-fetch matches `http_fetch`, but the agent cannot use it");
    let text = ok(polpo(
        dir.path(),
        &["hooks", "explain", "--agent", "writer", "--tool", "http_fetch"],
        &[("POLPO_RUNTIME_HOOKS", "off")],
    ));
    assert!(text.contains("tool `http_fetch` is denied by the agent tool policy"), "{text}");
    assert!(text.contains("POLPO_RUNTIME_HOOKS=off"), "{text}");

    // A name the agent does not have meets no hook, even one whose pattern would match it.
    let v: Value = serde_json::from_str(&ok(polpo(
        dir.path(),
        &["hooks", "explain", "--agent", "handy", "--tool", "write_all", "--json"],
        &[],
    )))
    .unwrap();
    assert_eq!(v["toolPolicy"], json!({"tool": "write_all", "available": false, "reason": "unknown_tool"}));
    assert_eq!(hook_ids(&v, "tool:before"), [], "`wri*` would match, but write_all never runs here");

    let o = polpo(dir.path(), &["hooks", "explain", "--agent", "nobody"], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("agent_not_found"));
    let o = polpo(dir.path(), &["hooks", "explain", "--agent", "writer", "--mode", "chat", "--step", "x"], &[]);
    assert_eq!(o.status.code(), Some(1), "a step only exists inside loops");
}

#[test]
fn explain_puts_project_packs_first_for_every_agent() {
    let dir = tempfile::tempdir().unwrap();
    two_packs(dir.path());
    // `settings.hooks` assigns `audit` to the project (and `base`, which writer also has: it
    // runs once, at project scope). Within the project scope priority orders them (base's 50,
    // then audit's 900), and both run before the agent's priority 10.
    let manifest = dir.path().join(".polpo/project.json");
    let mut project: Value = serde_json::from_slice(&std::fs::read(&manifest).unwrap()).unwrap();
    project["settings"]["hooks"] = json!(["audit", "base"]);
    std::fs::write(&manifest, serde_json::to_vec_pretty(&project).unwrap()).unwrap();
    let audit =
        json!({"version": 1, "hooks": {"tool:before": [{"id": "log", "priority": 900, "handler": cmd("sh log.sh")}]}});
    std::fs::write(dir.path().join(".polpo/hooks/audit.json"), audit.to_string()).unwrap();

    let v: Value = serde_json::from_str(&ok(polpo(
        dir.path(),
        &["hooks", "explain", "--agent", "writer", "--tool", "write", "--json"],
        &[],
    )))
    .unwrap();
    assert_eq!(v["packs"], json!(["audit", "base", "quality"]));
    assert_eq!(
        v["assignments"],
        json!([{"scope": "project", "packs": ["audit", "base"]}, {"scope": "agent", "packs": ["base", "quality"]}])
    );
    assert_eq!(
        hook_ids(&v, "tool:before"),
        [
            (json!(1), "base/guard-write".into()),
            (json!(2), "audit/log".into()),
            (json!(3), "quality/first".into()),
            (Value::Null, "base/audit".into())
        ]
    );
    let scopes: Vec<&str> =
        v["events"][0]["hooks"].as_array().unwrap().iter().map(|h| h["scope"].as_str().unwrap()).collect();
    assert_eq!(scopes, ["project", "project", "agent", "project"]);
    // An agent with no packs of its own gets the project's.
    let v: Value = serde_json::from_str(&ok(polpo(
        dir.path(),
        &["hooks", "explain", "--agent", "reader", "--tool", "read", "--json"],
        &[],
    )))
    .unwrap();
    assert_eq!(hook_ids(&v, "tool:before"), [(json!(1), "audit/log".into()), (Value::Null, "base/audit".into())]);
    let text = ok(polpo(dir.path(), &["hooks", "explain", "--agent", "writer", "--tool", "write"], &[]));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "agent writer · mode chat · packs: audit (project), base (project), quality", "{text}");
    assert!(lines[3].starts_with("  2. audit/log [controlling] command · scope project · priority 900"), "{text}");

    // A project assignment to a pack that does not exist is refused with its location.
    project["settings"]["hooks"] = json!(["audit", "qualty"]);
    std::fs::write(&manifest, serde_json::to_vec_pretty(&project).unwrap()).unwrap();
    let o = polpo(dir.path(), &["hooks", "validate"], &[]);
    assert_eq!(o.status.code(), Some(1));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains(".polpo/project.json:/settings/hooks/1: unknown_hook_pack"), "{out}");
    let o = polpo(dir.path(), &["hooks", "explain", "--agent", "writer"], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/settings/hooks/1"), "the problem is shown where it is");
}

#[test]
fn validate_warns_about_matchers_that_never_match_a_tool_of_the_agent_but_passes() {
    let dir = tempfile::tempdir().unwrap();
    two_packs(dir.path());
    let out = ok(polpo(dir.path(), &["hooks", "validate"], &[]));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            "warning: .polpo/hooks/quality.json:/hooks/tool:after/0/matcher/tools: matcher_matches_no_tool: hook `scrub-fetch` matches none of the tools of agent `writer`, so it never fires",
            "warning: .polpo/hooks/quality.json:/hooks/tool:before/0/matcher/tools/1: matcher_pattern_matches_no_tool: pattern `wirte` of hook `first` matches none of the tools of agent `writer`",
            "ok: 2 hook packs (2 warnings)",
        ]
    );
    // `polpo validate` reports the same warnings and still succeeds.
    let out = ok(polpo(dir.path(), &["validate"], &[]));
    assert_eq!(out.lines().filter(|l| l.starts_with("warning: ")).count(), 2, "{out}");
    let v: Value = serde_json::from_str(&ok(polpo(dir.path(), &["validate", "--json"], &[]))).unwrap();
    assert_eq!(v["ok"], true);
    let codes: Vec<(&str, &str)> = v["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| (w["file"].as_str().unwrap(), w["code"].as_str().unwrap()))
        .collect();
    assert_eq!(
        codes,
        [
            (".polpo/hooks/quality.json", "matcher_matches_no_tool"),
            (".polpo/hooks/quality.json", "matcher_pattern_matches_no_tool")
        ]
    );

    // An agent with MCP servers: a pattern for one of its servers' tools is not dead.
    let agent = dir.path().join(".polpo/agents/writer/agent.json");
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(&agent).unwrap()).unwrap();
    config["mcpServers"] = json!({"fetcher": {"type": "stdio", "command": "fetcher"}});
    std::fs::write(&agent, config.to_string()).unwrap();
    let pack = dir.path().join(".polpo/hooks/quality.json");
    let text = std::fs::read_to_string(&pack)
        .unwrap()
        .replace("\"http_fetch\"", "\"mcp__fetcher__get\"")
        .replace("\"wirte\"", "\"edit\"");
    std::fs::write(&pack, text).unwrap();
    let out = ok(polpo(dir.path(), &["hooks", "validate"], &[]));
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "warning: .polpo/hooks/quality.json:/hooks/tool:before/0/matcher/tools/1: matcher_pattern_matches_no_tool: pattern `edit` of hook `first` matches none of the tools of agent `writer`",
            "ok: 2 hook packs (1 warning)"
        ]
    );
}

/// The ```json blocks of README.md's "Runtime hooks" section, each with the path named on the
/// line before it (`.polpo/...json`).
fn readme_files() -> Vec<(String, String)> {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md")).unwrap();
    let start = readme.find("\n## Runtime hooks\n").expect("README has a Runtime hooks section");
    let section = &readme[start + 1..];
    let section = &section[..section[1..].find("\n## ").map_or(section.len(), |i| i + 1)];
    let lines: Vec<&str> = section.lines().collect();
    let mut files = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if *line != "```json" {
            continue;
        }
        let caption = lines[..i].iter().rev().find(|l| !l.trim().is_empty()).unwrap();
        let path = caption
            .split('`')
            .find(|p| p.starts_with(".polpo/") && p.ends_with(".json"))
            .unwrap_or_else(|| panic!("the line before a json block names its file: {caption}"));
        let body: Vec<&str> = lines[i + 1..].iter().take_while(|l| **l != "```").copied().collect();
        files.push((path.to_owned(), body.join("\n")));
    }
    files
}

#[test]
fn the_readme_hook_pack_example_is_accepted_by_polpo_hooks_validate_without_warnings() {
    let files = readme_files();
    let paths: Vec<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(paths, [".polpo/hooks/quality.json", ".polpo/agents/writer/agent.json"]);
    let dir = tempfile::tempdir().unwrap();
    ProjectFixture::new(dir.path(), json!({})).unwrap();
    for (path, body) in &files {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, body).unwrap();
    }
    std::fs::write(dir.path().join(".polpo/agents/writer/instructions.md"), "You write.").unwrap();
    assert_eq!(ok(polpo(dir.path(), &["hooks", "validate"], &[])), "ok: 1 hook pack\n");
    assert!(ok(polpo(dir.path(), &["validate"], &[])).starts_with("ok: 1 agent"));
    let v: Value = serde_json::from_str(&ok(polpo(
        dir.path(),
        &["hooks", "explain", "--agent", "writer", "--tool", "write", "--json"],
        &[],
    )))
    .unwrap();
    assert_eq!(
        hook_ids(&v, "tool:before"),
        [(json!(1), "quality/no-edits".into()), (Value::Null, "quality/audit".into())]
    );
    assert_eq!(hook_ids(&v, "turn:stop"), [(json!(1), "quality/names-a-source".into())]);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_kill_switch_shows_in_capabilities_and_a_gated_agent_refuses_to_run() {
    let dir = tempfile::tempdir().unwrap();
    two_packs(dir.path());
    let caps: Value = serde_json::from_str(&ok(polpo(
        dir.path(),
        &["hooks", "capabilities", "--json"],
        &[("POLPO_RUNTIME_HOOKS", "off")],
    )))
    .unwrap();
    assert_eq!(caps["managed"]["hooks"]["mode"], "off");
    assert_eq!(caps["managed"]["terminationGate"]["enabled"], false);
    assert_eq!(caps["terminationGate"]["supported"], true, "supported by the contract, switched off on this host");

    let llm = FakeLlm::start([Turn::text("unvalidated answer")]).await.unwrap();
    let base = llm.base_url();
    let server = ServerProcess::start(
        "serve",
        dir.path(),
        &[],
        &[("POLPO_RUNTIME_HOOKS", "off"), ("OPENAI_BASE_URL", &base), ("OPENAI_API_KEY", "sk")],
    );
    polpo_llm::install_crypto_provider();
    let http = reqwest::Client::new();
    let caps: Value =
        http.get(format!("{}/v1/hooks/capabilities", server.url)).send().await.unwrap().json().await.unwrap();
    assert_eq!(caps["managed"]["hooks"]["mode"], "off");
    let r = http
        .post(format!("{}/v1/chat/completions", server.url))
        .json(&json!({"agent": "writer", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "termination_gate_disabled", "{body}");
    assert!(llm.requests().is_empty(), "the gated agent never reached the model");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_verifier_agent_judges_a_tool_call_and_its_decision_is_applied() {
    let dir = tempfile::tempdir().unwrap();
    ProjectFixture::new(dir.path(), json!({"storage": "file"}))
        .unwrap()
        .agent("writer", json!({"model": "openai/gpt-4o-mini", "allowedTools": ["write", "read"], "hooks": ["review"]}), "You write files.")
        .unwrap()
        .agent("reviewer", json!({"model": "openai/gpt-4o-mini", "allowedTools": []}), "You review writes. Refuse any write to a.txt.")
        .unwrap()
        .hook_pack("review", json!({"version": 1, "hooks": {"tool:before": [
            {"id": "second-opinion", "matcher": {"tools": ["write"]}, "handler": {"type": "verifier", "agent": "reviewer", "maxTurns": 2}}
        ]}}))
        .unwrap();
    let llm = FakeLlm::start([
        Turn::tool_calls(vec![("write", json!({"path": "a.txt", "content": "draft"}))]),
        // The reviewer's decision, then the writer's answer once the write was refused.
        Turn::text(r#"{"decision": "deny", "reason": "a.txt is frozen"}"#),
        Turn::text("The write was refused."),
    ])
    .await
    .unwrap();
    let base = llm.base_url();
    let server =
        ServerProcess::start("serve", dir.path(), &[], &[("OPENAI_BASE_URL", &base), ("OPENAI_API_KEY", "sk")]);
    polpo_llm::install_crypto_provider();
    let http = reqwest::Client::new();
    let r = http
        .post(format!("{}/v1/chat/completions", server.url))
        .json(&json!({"agent": "writer", "messages": [{"role": "user", "content": "write a.txt"}]}))
        .send()
        .await
        .unwrap();
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], "The write was refused.", "{body}");
    assert!(!dir.path().join("a.txt").exists(), "the verifier's deny kept the write from running");
    let requests = llm.requests();
    assert_eq!(requests.len(), 3);
    let verifier = requests[1].body.to_string();
    assert!(
        verifier.contains("You review writes") && verifier.contains("a.txt"),
        "the reviewer ran on the envelope with its own instructions: {verifier}"
    );
    assert_eq!(requests[1].body["response_format"]["type"], "json_object", "the decision is asked for natively");
    assert!(
        requests[1].body.get("tools").is_none_or(|t| t.as_array().is_some_and(Vec::is_empty)),
        "a tool-free reviewer is offered no tools"
    );
    assert!(requests[2].body.to_string().contains("a.txt is frozen"), "the writer saw the reason");
}

#[test]
fn capabilities_list_only_runnable_handlers_and_validate_refuses_the_others_with_a_pointer() {
    let dir = tempfile::tempdir().unwrap();
    ProjectFixture::new(dir.path(), json!({"storage": "file"}))
        .unwrap()
        .agent("writer", json!({"model": "openai/gpt-4o-mini", "hooks": ["lab"]}), "You write.")
        .unwrap()
        .hook_pack(
            "lab",
            json!({"version": 1, "hooks": {"tool:before": [
                {"handler": {"type": "command", "command": "true"}},
                {"handler": {"type": "http", "url": "https://hooks.example.com/a", "connection": "audit"}},
                {"handler": {"type": "verifier", "agent": "ghost"}}
            ]}}),
        )
        .unwrap();
    let caps: Value = serde_json::from_str(&ok(polpo(dir.path(), &["hooks", "capabilities", "--json"], &[]))).unwrap();
    assert_eq!(caps["handlers"], json!(["command", "http", "tool", "mcp_tool", "prompt", "verifier"]));
    let out = polpo(dir.path(), &["validate", "--json"], &[]);
    assert_eq!(out.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let found: Vec<(String, String)> = report["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["code"].as_str().unwrap().to_owned(), p["pointer"].as_str().unwrap().to_owned()))
        .collect();
    assert!(found.contains(&("hook_handler_unavailable".into(), "/hooks/tool:before/1/handler".into())), "{report}");
    assert!(found.contains(&("invalid_reference".into(), "/hooks/tool:before/2/handler/agent".into())), "{report}");
    // Once `audit` is a project Connection the handler is runnable.
    std::fs::create_dir_all(dir.path().join(".polpo/connections")).unwrap();
    let audit = json!({"provider": "audit", "auth": {"type": "bearer", "token": "${vault:audit:key}"}});
    std::fs::write(dir.path().join(".polpo/connections/audit.json"), audit.to_string()).unwrap();
    let out = polpo(dir.path(), &["validate", "--json"], &[]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(!report.to_string().contains("hook_handler_unavailable"), "{report}");
}
