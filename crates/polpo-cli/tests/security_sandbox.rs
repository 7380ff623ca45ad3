//! The tool sandbox attacked through a real `polpo` server (issue #13 items 3 and 4): a model
//! scripted to rewrite its own agent, install a command hook and read the project's keys with
//! the file tools and with `bash`, read the server's environment from `bash`, and leave a
//! `setsid` child behind. Every attempt is seen
//! the way a user would: in the tool results the model receives, on disk, and in the process
//! table.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use polpo_testkit::{FakeLlm, ProjectFixture, Turn};
use serde_json::{Value, json};
use std::path::Path;
use support::ServerProcess;

const UPSTREAM_KEY: &str = "sk-secret-upstream-4f2a";
const POLPO_KEY: &str = "sk-secret-polpo-9c1d";
const PROJECT_KEY: &str = "sk-secret-project-77e0";

/// A project whose `project.json` holds a plain provider key, with agent `agent` allowed `tools`.
fn project(dir: &Path, agent: &str, tools: Value) {
    ProjectFixture::new(dir, json!({"storage": "file", "apiKeys": {"openai": PROJECT_KEY}}))
        .unwrap()
        .agent(agent, json!({"model": "openai/gpt-4o-mini", "allowedTools": tools}), "You are careful.")
        .unwrap();
}

/// One chat with `agent` through the server; the answer must come back (tool errors are
/// results for the model, not failures of the request).
async fn chat(server: &ServerProcess, agent: &str) {
    polpo_llm::install_crypto_provider();
    let response = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", server.url))
        .bearer_auth(POLPO_KEY)
        .json(&json!({"agent": agent, "messages": [{"role": "user", "content": "go"}]}))
        .send()
        .await
        .unwrap();
    let status = response.status();
    assert_eq!(status, 200, "{}", response.text().await.unwrap());
}

/// The tool results (`role: tool` contents) that first reached the model in request `index`
/// (each request repeats the conversation so far).
fn tool_results(llm: &FakeLlm, index: usize) -> Vec<String> {
    let requests = llm.requests();
    let results = |i: usize| -> Vec<String> {
        requests[i].body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| m["content"].as_str().map_or_else(|| m["content"].to_string(), str::to_owned))
            .collect()
    };
    let earlier = if index == 0 { 0 } else { results(index - 1).len() };
    results(index).split_off(earlier)
}

fn start(command: &str, dir: &Path, llm: &FakeLlm, extra_env: &[(&str, &str)]) -> ServerProcess {
    let base = llm.base_url();
    let mut env =
        vec![("OPENAI_BASE_URL", base.as_str()), ("OPENAI_API_KEY", UPSTREAM_KEY), ("POLPO_API_KEY", POLPO_KEY)];
    env.extend_from_slice(extra_env);
    ServerProcess::start(command, dir, &[], &env)
}

#[tokio::test(flavor = "multi_thread")]
async fn file_tools_cannot_touch_the_project_folder() {
    let dir = tempfile::tempdir().unwrap();
    project(dir.path(), "editor", json!(["read", "write", "edit", "ls", "glob", "grep"]));
    std::os::unix::fs::symlink(dir.path().join(".polpo"), dir.path().join("shortcut")).unwrap();
    let agent_file = dir.path().join(".polpo/agents/editor/agent.json");
    let project_file = dir.path().join(".polpo/project.json");
    let (agent_before, project_before) = (std::fs::read(&agent_file).unwrap(), std::fs::read(&project_file).unwrap());

    let llm = FakeLlm::start([
        Turn::tool_calls(vec![
            ("write", json!({"path": ".polpo/agents/editor/agent.json", "content": r#"{"model": "openai/gpt-4o-mini", "allowedTools": ["*"]}"#})),
            ("write", json!({"path": ".polpo/hooks/x.json", "content": r#"{"hooks": []}"#})),
            ("read", json!({"path": ".polpo/project.json"})),
            ("edit", json!({"path": ".polpo/agents/editor/agent.json", "old_text": "\"read\"", "new_text": "\"bash\""})),
            ("ls", json!({"path": ".polpo"})),
            ("glob", json!({"pattern": "**/*.json", "path": ".polpo"})),
            ("grep", json!({"pattern": "sk-secret", "path": ".polpo"})),
            ("read", json!({"path": "shortcut/project.json"})),
        ]),
        Turn::tool_calls(vec![("grep", json!({"pattern": "sk-secret"})), ("ls", json!({}))]),
        Turn::text("done"),
    ])
    .await
    .unwrap();
    // `dev` is where a written agent or hook would be picked up by the next call.
    let server = start("dev", dir.path(), &llm, &[]);
    chat(&server, "editor").await;

    let refused = tool_results(&llm, 1);
    assert_eq!(refused.len(), 8, "{refused:?}");
    for result in &refused {
        assert!(result.contains("path_outside_sandbox"), "{result}");
    }
    let walked = tool_results(&llm, 2);
    assert!(!walked.join("\n").contains("sk-secret"), "{walked:?}");
    assert!(!walked[1].contains(".polpo"), "ls lists the project folder: {}", walked[1]);
    assert_eq!(std::fs::read(&agent_file).unwrap(), agent_before);
    assert_eq!(std::fs::read(&project_file).unwrap(), project_before);
    assert!(!dir.path().join(".polpo/hooks/x.json").exists());
}

/// Live processes (not zombies) whose command line contains `marker`.
fn live_processes_with(marker: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_string_lossy().parse::<u32>().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            let state = stat.rsplit_once(')')?.1.trim_start().chars().next()?;
            (String::from_utf8_lossy(&cmdline).contains(marker) && state != 'Z').then_some(pid)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn bash_cannot_steal_secrets_change_the_project_nor_leave_children_behind() {
    let dir = tempfile::tempdir().unwrap();
    project(dir.path(), "shell", json!(["bash"]));
    let llm = FakeLlm::start([]).await.unwrap();
    let server = start("serve", dir.path(), &llm, &[]);
    let marker = format!("300.{}", std::process::id());
    let agent_file = dir.path().join(".polpo/agents/shell/agent.json");
    let agent_before = std::fs::read(&agent_file).unwrap();
    let steal = format!(
        "tr '\\0' '\\n' < /proc/$PPID/environ; tr '\\0' '\\n' < /proc/{}/environ; grep -ah sk-secret /proc/*/environ; cat .polpo/project.json; env; \
         echo '{{\"allowedTools\": [\"*\"]}}' > .polpo/agents/shell/agent.json; echo '{{}}' > .polpo/hooks/x.json",
        server.child.id()
    );
    llm.push(Turn::tool_calls(vec![("bash", json!({"command": steal}))]));
    llm.push(Turn::tool_calls(vec![(
        "bash",
        json!({"command": format!("setsid sleep {marker} </dev/null >/dev/null 2>&1 & echo $!")}),
    )]));
    llm.push(Turn::text("done"));
    chat(&server, "shell").await;

    let stolen = tool_results(&llm, 1).join("\n");
    assert!(stolen.contains("Exit code"), "bash did not run: {stolen}");
    assert!(stolen.contains("PATH="), "env did not run: {stolen}");
    for secret in [UPSTREAM_KEY, POLPO_KEY, PROJECT_KEY] {
        assert!(!stolen.contains(secret), "{secret} leaked:\n{stolen}");
    }
    assert_eq!(std::fs::read(&agent_file).unwrap(), agent_before, "bash rewrote its own agent");
    assert!(!dir.path().join(".polpo/hooks/x.json").exists(), "bash installed a hook");
    let spawned = tool_results(&llm, 2).join("\n");
    assert!(spawned.starts_with("Exit code: 0"), "{spawned}");
    // The call has returned: nothing it started may still run.
    assert_eq!(live_processes_with(&marker), Vec::<u32>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn without_landlock_the_server_says_so_and_bash_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    project(dir.path(), "shell", json!(["bash"]));
    let llm = FakeLlm::start([Turn::tool_calls(vec![("bash", json!({"command": "echo ran"}))]), Turn::text("done")])
        .await
        .unwrap();
    let mut server = start("serve", dir.path(), &llm, &[("POLPO_SANDBOX_FORCE_UNAVAILABLE", "landlock")]);
    server.wait_for("warning: tool sandbox: Landlock is not available");
    chat(&server, "shell").await;
    let results = tool_results(&llm, 1);
    assert!(results[0].contains("sandbox_unavailable"), "{results:?}");
    assert!(!results[0].contains("ran"), "{results:?}");
}

#[test]
fn validate_reports_a_host_that_cannot_confine_bash() {
    let dir = tempfile::tempdir().unwrap();
    project(dir.path(), "shell", json!(["bash"]));
    let root = dir.path().to_str().unwrap();
    let warnings = |env: &[(&str, &str)]| -> Vec<Value> {
        let mut cmd = support::polpo(&["validate", "--json", "--project", root]);
        cmd.env_remove("POLPO_SANDBOX_FORCE_UNAVAILABLE").envs(env.iter().copied());
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        report["warnings"].as_array().unwrap().clone()
    };
    assert!(!warnings(&[]).iter().any(|w| w["code"].as_str().is_some_and(|c| c.starts_with("sandbox_"))));
    let without = warnings(&[("POLPO_SANDBOX_FORCE_UNAVAILABLE", "landlock")]);
    assert!(
        without
            .iter()
            .any(|w| w["code"] == "sandbox_unavailable" && w["message"].as_str().unwrap().contains("allowUnconfined")),
        "{without:?}"
    );
}

/// Without an API key (`polpo dev`'s default) the server trusts every local process: `bash`
/// must not reach it over loopback, or it could rewrite its own agent and raise its ceiling.
#[tokio::test(flavor = "multi_thread")]
async fn bash_cannot_call_the_servers_own_api() {
    let dir = tempfile::tempdir().unwrap();
    project(dir.path(), "shell", json!(["bash"]));
    let llm = FakeLlm::start([]).await.unwrap();
    let base = llm.base_url();
    let server = ServerProcess::start(
        "dev",
        dir.path(),
        &[],
        &[("OPENAI_BASE_URL", base.as_str()), ("OPENAI_API_KEY", UPSTREAM_KEY)],
    );
    let agent_file = dir.path().join(".polpo/agents/shell/agent.json");
    let agent_before = std::fs::read(&agent_file).unwrap();
    let rewrite = format!(
        "curl -sS -m 20 -X PATCH -H 'content-type: application/json' -d '{{\"config\":{{\"allowedTools\":[\"bash\",\"write\"]}}}}' {}/v1/agents/shell; echo curl=$?",
        server.url
    );
    llm.push(Turn::tool_calls(vec![("bash", json!({"command": rewrite}))]));
    llm.push(Turn::text("done"));
    chat(&server, "shell").await;

    let result = tool_results(&llm, 1).join("\n");
    assert_eq!(std::fs::read(&agent_file).unwrap(), agent_before, "bash rewrote its own agent: {result}");
    // 7: curl could not connect.
    assert!(result.contains("curl=7"), "{result}");
}
