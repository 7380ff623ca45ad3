//! The real `polpo` binary in temp dirs.
#![allow(clippy::unwrap_used)] // test helpers: a failed setup should panic loudly

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn polpo(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_polpo")).args(args).current_dir(cwd).stdin(Stdio::null()).output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn ok(o: Output) -> String {
    assert!(o.status.success(), "failed: {}\nstdout: {}\nstderr: {}", o.status, stdout(&o), stderr(&o));
    stdout(&o)
}

fn fails(o: Output) -> Output {
    assert_eq!(o.status.code(), Some(1), "stdout: {}\nstderr: {}", stdout(&o), stderr(&o));
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    o
}

fn write(root: &Path, files: &[(&str, &str)]) {
    for (path, content) in files {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
}

/// A hash of every path and file content under `root`.
fn tree_hash(root: &Path) -> u64 {
    fn walk(dir: &Path, root: &Path, out: &mut Vec<(String, Vec<u8>)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                out.push((rel + "/", Vec::new()));
                walk(&path, root, out);
            } else {
                out.push((rel, std::fs::read(&path).unwrap()));
            }
        }
    }
    let mut entries = Vec::new();
    walk(root, root, &mut entries);
    entries.sort();
    let mut h = DefaultHasher::new();
    entries.hash(&mut h);
    h.finish()
}

#[test]
fn create_then_validate_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let out = ok(polpo(dir.path(), &["create", "demo", "--yes"]));
    assert!(out.contains("agent `assistant`"), "{out}");
    let out = ok(polpo(dir.path(), &["validate", "--project", "demo"]));
    assert_eq!(out.trim(), "ok: 1 agent, 1 team (directory layout)");
    let demo = dir.path().join("demo/.polpo");
    let project: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(demo.join("project.json")).unwrap()).unwrap();
    assert_eq!(project["schemaVersion"], 2);
    assert_eq!(project["settings"]["storage"], "file");
    assert!(demo.join("agents/assistant/instructions.md").is_file());
    assert!(demo.join("teams/default.json").is_file());
    // Validation also works from inside the project.
    ok(polpo(&dir.path().join("demo/.polpo/agents"), &["validate"]));
}

#[test]
fn create_takes_template_agent_and_model_flags_and_never_prompts_without_a_tty() {
    let dir = tempfile::tempdir().unwrap();
    // No --yes, but stdin is not a terminal: flags and defaults, no prompt.
    ok(polpo(
        dir.path(),
        &["create", "shop", "--template", "support", "--agent", "helpdesk", "--model", "anthropic/claude-haiku"],
    ));
    let out = ok(polpo(dir.path(), &["agents", "show", "helpdesk", "--json", "--project", "shop"]));
    let agent: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(agent["config"]["model"], "anthropic/claude-haiku");
    assert_eq!(agent["config"]["chat"]["suggestions"]["enabled"], true);
    assert!(agent["instructions"].as_str().unwrap().contains("customer support"));
}

#[test]
fn create_refuses_an_existing_project() {
    let dir = tempfile::tempdir().unwrap();
    ok(polpo(dir.path(), &["create", "demo", "--yes"]));
    let before = tree_hash(dir.path());
    let out = fails(polpo(dir.path(), &["create", "demo", "--yes", "--template", "coder"]));
    assert!(stderr(&out).contains("already contains a .polpo/ folder"), "{}", stderr(&out));
    assert_eq!(tree_hash(dir.path()), before);
}

#[test]
fn validate_reports_three_different_mistakes_with_file_and_pointer() {
    let dir = tempfile::tempdir().unwrap();
    ok(polpo(dir.path(), &["create", "demo", "--yes"]));
    let root = dir.path().join("demo");
    write(
        &root,
        &[
            (".polpo/project.json", r#"{"schemaVersion": 2, "settings": {"storage": "file", "colour": "red"}}"#),
            (".polpo/agents/assistant/agent.json", r#"{"model": "openai/gpt-4o-mini", "reasoning": "extreme"}"#),
            (".polpo/agents/writer/agent.json", r#"{"role": "writer"}"#),
        ],
    );
    let out = fails(polpo(dir.path(), &["validate", "--project", "demo"]));
    let lines: Vec<&str> = std::str::from_utf8(&out.stdout).unwrap().lines().collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(
        lines[0].starts_with(".polpo/agents/assistant/agent.json:/reasoning: invalid_value: expected one of"),
        "{}",
        lines[0]
    );
    assert!(lines[1].starts_with(".polpo/agents/writer/instructions.md: missing_agent_file: "), "{}", lines[1]);
    assert!(lines[2].starts_with(".polpo/project.json:/settings/colour: unknown_field: "), "{}", lines[2]);

    let out = fails(polpo(dir.path(), &["validate", "--project", "demo", "--json"]));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["ok"], false);
    let codes: Vec<&str> = report["problems"].as_array().unwrap().iter().map(|p| p["code"].as_str().unwrap()).collect();
    assert_eq!(codes, ["invalid_value", "missing_agent_file", "unknown_field"]);
    assert_eq!(report["problems"][2]["pointer"], "/settings/colour");
}

#[test]
fn migrate_round_trips_a_legacy_project_and_dry_run_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(
        root,
        &[
            (".polpo/polpo.json", r#"{"project": "old", "settings": {"maxRetries": 3}}"#),
            (
                ".polpo/agents.json",
                r#"[{"name": "alice", "role": "lead", "systemPrompt": "Lead."},
                                    {"agent": {"name": "bob", "reportsTo": "alice"}, "teamName": "ops"}]"#,
            ),
            (".polpo/teams.json", r#"[{"name": "ops", "description": "Operations"}]"#),
        ],
    );
    let out = ok(polpo(root, &["validate"]));
    assert!(out.contains("2 agents, 1 team (legacy layout"), "{out}");
    let before_list = ok(polpo(root, &["agents", "list", "--json"]));

    let before = tree_hash(root);
    let out = ok(polpo(root, &["migrate", "--dry-run"]));
    assert!(out.contains("would write .polpo/agents/bob/agent.json"), "{out}");
    assert_eq!(tree_hash(root), before, "--dry-run changed the tree");

    let out = ok(polpo(root, &["migrate"]));
    assert!(out.contains("renamed .polpo/agents.json → .polpo/agents.v1.json"), "{out}");
    assert_eq!(ok(polpo(root, &["validate"])).trim(), "ok: 2 agents, 1 team (directory layout)");
    assert_eq!(ok(polpo(root, &["agents", "list", "--json"])), before_list, "agents changed in migration");
    let bob = ok(polpo(root, &["agents", "show", "bob"]));
    assert!(bob.contains("\"reportsTo\": \"alice\""), "{bob}");

    let out = fails(polpo(root, &["migrate"]));
    assert!(stderr(&out).contains("backup_exists"), "{}", stderr(&out));
}

#[test]
fn agents_list_prints_a_table() {
    let dir = tempfile::tempdir().unwrap();
    ok(polpo(dir.path(), &["create", "demo", "--yes", "--template", "coder"]));
    let out = ok(polpo(dir.path(), &["agents", "list", "--project", "demo"]));
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("ID "), "{out}");
    assert!(lines[1].starts_with("coder ") && lines[1].contains("openai/gpt-4o-mini"), "{out}");
}

#[test]
fn user_errors_exit_non_zero_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    ok(polpo(dir.path(), &["create", "demo", "--yes"]));
    let out = fails(polpo(dir.path(), &["agents", "show", "nobody", "--project", "demo"]));
    assert!(stderr(&out).contains("agent `nobody` not found (agents: assistant)"), "{}", stderr(&out));
    let out = fails(polpo(dir.path(), &["validate"]));
    assert!(stdout(&out).contains("missing_project_file"), "{}", stdout(&out));
    let out = fails(polpo(dir.path(), &["create", "bad", "--yes", "--agent", "a/b"]));
    assert!(stderr(&out).contains("invalid agent name"), "{}", stderr(&out));
}

#[test]
fn version_and_completions() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(ok(polpo(dir.path(), &["--version"])).trim(), format!("polpo {}", env!("CARGO_PKG_VERSION")));
    let script = ok(polpo(dir.path(), &["completions", "bash"]));
    assert!(script.contains("polpo") && script.contains("migrate"), "{script}");
}

#[test]
fn create_prompts_on_a_terminal() {
    // `script` (util-linux) runs polpo on a pseudo-terminal fed from our stdin.
    let dir = tempfile::tempdir().unwrap();
    let command = format!("{} create demo", env!("CARGO_BIN_EXE_polpo"));
    let mut child = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .current_dir(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Template, agent name, then Enter to keep the default model.
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), b"coder\nbuilder\n\n").unwrap();
    let out = child.wait_with_output().unwrap();
    let text = stdout(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("Template (basic, coder, support) [basic]: "), "{text}");
    let agent = ok(polpo(dir.path(), &["agents", "show", "builder", "--json", "--project", "demo"]));
    let agent: serde_json::Value = serde_json::from_str(&agent).unwrap();
    assert_eq!(agent["config"]["role"], "Software engineer");
    assert_eq!(agent["config"]["model"], "openai/gpt-4o-mini");
}

#[test]
fn db_commands_report_migrate_and_copy_between_backends() {
    let dir = tempfile::tempdir().unwrap();
    ok(polpo(dir.path(), &["create", "demo", "--yes"]));
    let demo = dir.path().join("demo");
    assert!(ok(polpo(&demo, &["db", "status"])).contains("storage: file"));

    let copied = ok(polpo(&demo, &["db", "copy", "--from", "file", "--to", "sqlite"]));
    assert!(copied.contains("copied file → sqlite"), "{copied}");
    assert!(demo.join(".polpo/polpo.db").is_file());
    ok(polpo(&demo, &["db", "copy", "--from", "file", "--to", "sqlite"]));

    // Switch the project to SQLite: `migrate` reports the schema at its latest version.
    let project_json = demo.join(".polpo/project.json");
    let mut project: serde_json::Value = serde_json::from_slice(&std::fs::read(&project_json).unwrap()).unwrap();
    project["settings"]["storage"] = "sqlite".into();
    std::fs::write(&project_json, serde_json::to_vec_pretty(&project).unwrap()).unwrap();
    let migrated = ok(polpo(&demo, &["db", "migrate"]));
    let versions: Vec<i64> = migrated.split(|c: char| !c.is_ascii_digit()).filter_map(|s| s.parse().ok()).collect();
    assert!(migrated.starts_with("storage: sqlite (schema version"), "{migrated}");
    assert!(versions.len() == 2 && versions[0] == versions[1] && versions[0] >= 1, "{migrated}");

    let same = fails(polpo(&demo, &["db", "copy", "--from", "sqlite", "--to", "sqlite"]));
    assert!(stderr(&same).contains("both `sqlite`"));
    let unknown = fails(polpo(&demo, &["db", "copy", "--from", "mongo", "--to", "file"]));
    assert!(stderr(&unknown).contains("unknown storage `mongo`"));
}

#[test]
fn hooks_validate_checks_packs_and_assignments() {
    let dir = tempfile::tempdir().unwrap();
    ok(polpo(dir.path(), &["create", "demo", "--yes", "--agent", "writer"]));
    let demo = dir.path().join("demo");
    let good = r#"{"version": 1, "hooks": {"tool:before": [{"id": "guard-bash", "matcher": {"tools": ["bash"]},
        "handler": {"type": "command", "command": "./guard.sh", "timeoutMs": 2000}}]}}"#;
    write(&demo, &[(".polpo/hooks/quality.json", good)]);
    let agent_json = demo.join(".polpo/agents/writer/agent.json");
    let mut agent: serde_json::Value = serde_json::from_slice(&std::fs::read(&agent_json).unwrap()).unwrap();
    agent["hooks"] = serde_json::json!(["quality"]);
    std::fs::write(&agent_json, serde_json::to_vec_pretty(&agent).unwrap()).unwrap();
    assert!(ok(polpo(&demo, &["hooks", "validate"])).contains("ok: 1 hook pack"));

    // An inline credential in an http hook and an assignment to a pack that does not exist.
    let leaky = r#"{"version": 1, "hooks": {"tool:after": [{"id": "audit", "observe": true,
        "handler": {"type": "http", "url": "https://hooks.example.com/a", "headers": {"Authorization": "Bearer s3cr3t"}}}]}}"#;
    write(&demo, &[(".polpo/hooks/audit.json", leaky)]);
    agent["hooks"] = serde_json::json!(["quality", "missing"]);
    std::fs::write(&agent_json, serde_json::to_vec_pretty(&agent).unwrap()).unwrap();
    let out = stdout(&fails(polpo(&demo, &["hooks", "validate"])));
    assert!(out.contains(".polpo/hooks/audit.json:/hooks/tool:after/0/handler"), "{out}");
    assert!(out.contains(".polpo/agents/writer/agent.json:/hooks/1: unknown_hook_pack"), "{out}");
    assert!(!out.contains("s3cr3t"), "a rejected secret must not be echoed: {out}");
    let whole = stdout(&fails(polpo(&demo, &["validate"])));
    assert!(whole.contains("unknown_hook_pack"), "polpo validate checks hook packs too: {whole}");

    let caps: serde_json::Value =
        serde_json::from_str(&ok(polpo(&demo, &["hooks", "capabilities", "--json"]))).unwrap();
    assert!(caps.get("terminationGate").is_some(), "{caps}");
}

#[test]
fn validate_warns_about_routes_an_agent_may_not_take_and_still_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    ok(polpo(dir.path(), &["create", "demo", "--yes"]));
    let root = dir.path().join("demo");
    write(
        &root,
        &[
            (
                ".polpo/project.json",
                r#"{"schemaVersion": 2, "settings": {"storage": "file",
                    "modelProfiles": {"fast": "openai/gpt-4o-mini", "balanced": "openai/gpt-4o"},
                    "modelRouting": {"rules": [{"when": {"maxChars": 40}, "profile": "fast"}]}}}"#,
            ),
            (
                ".polpo/agents/assistant/agent.json",
                r#"{"model": {"profile": "balanced"}, "allowedModelProfiles": ["balanced"], "modelRouting": {"mode": "auto"}}"#,
            ),
        ],
    );
    let out = ok(polpo(dir.path(), &["validate", "--project", "demo"]));
    let warning = out.lines().find(|l| l.starts_with("warning: ")).unwrap_or_default();
    assert!(
        warning.starts_with("warning: .polpo/agents/assistant/agent.json:/modelRouting: model_profile_not_allowed: settings.modelRouting rule 0 routes to profile `fast`"),
        "{out}"
    );
}

#[test]
fn without_a_key_or_an_offline_model_run_says_what_to_do_before_any_request() {
    let dir = tempfile::tempdir().unwrap();
    ok(polpo(dir.path(), &["create", "demo", "--yes"]));
    // A tripwire where the provider would be: a request reaching it would be accepted here.
    let tripwire = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    tripwire.set_nonblocking(true).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_polpo"))
        .args(["run", "assistant", "What files are here?", "--project", "demo"])
        .current_dir(dir.path())
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .env("OPENAI_BASE_URL", format!("http://{}/v1", tripwire.local_addr().unwrap()))
        .env("POLPO_MODELS_DIR", dir.path().join("no-models"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = stderr(&fails(out));
    assert!(err.contains("provider_not_configured"), "{err}");
    assert!(
        err.contains("OPENAI_API_KEY") && err.contains("polpo models install"),
        "both ways forward are named: {err}"
    );
    assert!(tripwire.accept().is_err(), "no request went out");
}

#[test]
fn validate_warns_about_fields_nothing_acts_on_yet_and_still_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    ok(polpo(dir.path(), &["create", "demo", "--yes"]));
    let root = dir.path().join("demo");
    write(
        &root,
        &[
            (
                ".polpo/agents/assistant/agent.json",
                r#"{"model": "openai/gpt-4o-mini", "mcpServers": {"fs": {"type": "stdio", "command": "mcp-fs"}}, "assignedLoops": ["flow"], "executionRouter": {"mode": "auto", "allowedLoops": ["flow"]}, "browserProfile": "work"}"#,
            ),
            (".polpo/loops/flow.json", r#"{"start": "a", "steps": {"a": {"systemPrompt": "hi"}}}"#),
        ],
    );
    let out = polpo(dir.path(), &["validate", "--project", "demo", "--json"]);
    let report: serde_json::Value = serde_json::from_str(&ok(out)).unwrap();
    let mut located: Vec<(String, String)> = report["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["code"] == "feature_unavailable")
        .map(|w| (w["file"].as_str().unwrap().to_owned(), w["pointer"].as_str().unwrap().to_owned()))
        .collect();
    located.sort();
    let file = ".polpo/agents/assistant/agent.json".to_owned();
    // `assignedLoops` and the execution router act (a chat runs the named or routed loop);
    // browser tools do not exist yet.
    assert_eq!(located, vec![(file, "/browserProfile".to_owned())]);
    let browser = report["warnings"].as_array().unwrap().iter().find(|w| w["pointer"] == "/browserProfile").unwrap();
    assert!(browser["message"].as_str().unwrap().contains("browser tools"), "{browser}");
    // A freshly scaffolded agent carries none of them.
    let fresh = tempfile::tempdir().unwrap();
    ok(polpo(fresh.path(), &["create", "demo", "--yes"]));
    let report: serde_json::Value =
        serde_json::from_str(&ok(polpo(fresh.path(), &["validate", "--project", "demo", "--json"]))).unwrap();
    assert!(!report["warnings"].to_string().contains("feature_unavailable"), "{report}");
}

/// A broken loop file: `polpo validate` names every problem by file and pointer (tool names
/// against the built-in tools, in the same pass) and exits 1.
#[test]
fn validate_reports_every_problem_of_a_broken_loop_with_its_pointer() {
    let dir = tempfile::tempdir().unwrap();
    ok(polpo(dir.path(), &["create", "demo", "--yes"]));
    let root = dir.path().join("demo");
    let loop_file = |steps: &str| format!(r#"{{"start": "fetch", "steps": {steps}}}"#);
    let broken = loop_file(
        r#"{"fetch": {"type": "tool", "tool": "clone_repository", "next": "clasify"},
            "classify": {"when": "fetch.ok = true", "allowedTools": ["write"], "next": "end"},
            "again": {"type": "while", "body": "fetch"}}"#,
    );
    write(
        &root,
        &[
            (".polpo/agents/assistant/agent.json", r#"{"allowedTools": ["read"], "assignedLoops": ["flow", "gone"]}"#),
            (".polpo/loops/flow.json", &broken),
        ],
    );
    let out = fails(polpo(&root, &["validate"]));
    let lines = stdout(&out);
    for want in [
        ".polpo/loops/flow.json:/steps/fetch/next: unknown_step:",
        ".polpo/loops/flow.json:/steps/classify/when: invalid_expression: `fetch.ok = true` at column 10",
        ".polpo/loops/flow.json:/steps/classify: unreachable_step:",
        ".polpo/loops/flow.json:/steps/again: unbounded_while:",
        ".polpo/loops/flow.json:/steps/again: unreachable_step:",
        ".polpo/loops/flow.json:/steps/classify/allowedTools/0: tool_outside_ceiling:",
        ".polpo/agents/assistant/agent.json:/assignedLoops/1: invalid_reference:",
        ".polpo/loops/flow.json:/steps/fetch/tool: unknown_tool: no tool is named `clone_repository`",
        ".polpo/loops/flow.json:/steps/fetch/tool: tool_outside_ceiling:",
    ] {
        assert!(lines.contains(want), "missing {want:?} in\n{lines}");
    }
    assert_eq!(lines.lines().count(), 9, "{lines}");
    let out = fails(polpo(&root, &["loops", "validate"]));
    assert_eq!(stdout(&out).lines().count(), 8, "only the loop file's problems: {}", stdout(&out));
    assert!(stderr(&out).contains("1 problem(s) outside the loop files"), "{}", stderr(&out));
}

#[test]
fn loops_list_show_and_validate_a_valid_loop() {
    let dir = tempfile::tempdir().unwrap();
    ok(polpo(dir.path(), &["create", "demo", "--yes"]));
    let root = dir.path().join("demo");
    write(
        &root,
        &[
            (".polpo/agents/assistant/agent.json", r#"{"assignedLoops": ["flow"]}"#),
            (".polpo/loops/flow.json", r#"{"start": "a", "steps": {"a": {"tools": ["read"], "next": "end"}}}"#),
        ],
    );
    let out = ok(polpo(&root, &["loops", "validate"]));
    assert!(out.contains("warning: .polpo/loops/flow.json:/steps/a/tools: deprecated_field:"), "{out}");
    assert!(out.contains("ok: 1 loop(s)"), "{out}");
    assert_eq!(ok(polpo(&root, &["loops", "list"])).trim(), "flow  1 step(s), start a  agents assistant");
    let shown: serde_json::Value = serde_json::from_str(&ok(polpo(&root, &["loops", "show", "flow"]))).unwrap();
    assert_eq!(shown["steps"]["a"]["tools"], serde_json::json!(["read"]));
    assert!(stderr(&fails(polpo(&root, &["loops", "show", "nope"]))).contains("loop_not_found"));
    assert!(ok(polpo(&root, &["validate"])).contains("1 loop (validated, not run yet)"));
}
