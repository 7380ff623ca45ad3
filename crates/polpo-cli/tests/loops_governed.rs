//! The seed's `governed-build` loop as written (its `unix_time` and `audit_step` tools replaced
//! by the built-in `ls` and `read`), through a real `polpo serve` and the strict fake LLM: it
//! completes, its lifecycle hook actions save their outputs into the context, the failing
//! `onError: "continue"` audit stays trace-only, and the trace shows every policy result in the
//! order the governance evaluated them — permissions, then policies, then hook actions.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use polpo_testkit::{FakeLlm, ProjectFixture, Turn};
use serde_json::{Value, json};
use std::path::Path;
use support::ServerProcess;

/// The README's `governed-build`, with `unix_time` → `ls` and `audit_step` → `read`.
fn governed_build() -> Value {
    json!({
      "name": "governed-build",
      "context": "shared",
      "hooks": {
        "loop:start": [
          { "tool": "ls", "saveAs": "timing.start" }
        ],
        "tool:after": [
          { "tool": "read", "input": { "level": "info" }, "saveAs": "audit.last", "onError": "continue" }
        ],
        "loop:end": [
          { "tool": "ls", "saveAs": "timing.end" }
        ]
      },
      "policies": [
        {
          "id": "only-safe-tools",
          "hook": "tool:before",
          "effect": "allow",
          "when": "tool.name == 'read' || tool.name == 'grep' || tool.name == 'ls'"
        },
        {
          "id": "deny-shell",
          "hook": "tool:before",
          "effect": "deny",
          "when": "tool.name == 'bash'",
          "message": "bash requires an explicit build loop"
        }
      ],
      "start": "capture_start",
      "steps": {
        "capture_start": {
          "type": "tool",
          "tool": "ls",
          "saveAs": "timing.start",
          "next": "plan"
        },
        "plan": {
          "type": "agent",
          "systemPrompt": "Plan the work. Do not edit files.",
          "tools": ["read", "grep"],
          "next": "end"
        }
      }
    })
}

fn project(dir: &Path) {
    ProjectFixture::new(dir, json!({"storage": "file"}))
        .unwrap()
        .agent(
            "builder",
            json!({"model": "openai/fake-model", "allowedTools": ["read", "grep", "ls"], "assignedLoops": ["governed-build"]}),
            "You plan builds.",
        )
        .unwrap()
        .project_loop("governed-build", governed_build())
        .unwrap();
    std::fs::write(dir.join("Makefile"), "all:\n\techo build\n").unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn governed_build_completes_with_its_policy_results_in_order() {
    polpo_llm::install_crypto_provider();
    let llm = FakeLlm::start([Turn::text("1. Read the Makefile. 2. Run make.")]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let base = llm.base_url();
    let server = ServerProcess::start(
        "serve",
        dir.path(),
        &[],
        &[("OPENAI_BASE_URL", base.as_str()), ("OPENAI_API_KEY", "sk-upstream")],
    );
    let body = json!({"agent": "builder", "loop": "governed-build",
        "messages": [{"role": "user", "content": "Plan the release build."}]});
    let response =
        reqwest::Client::new().post(format!("{}/v1/chat/completions", server.url)).json(&body).send().await.unwrap();
    let status = response.status();
    let run_id = response.headers()["x-polpo-loop-run-id"].to_str().unwrap().to_owned();
    let answer: Value = response.json().await.unwrap();
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["choices"][0]["message"]["content"], "1. Read the Makefile. 2. Run make.");

    let run: Value =
        reqwest::get(format!("{}/api/v1/loop-runs/{run_id}", server.url)).await.unwrap().json().await.unwrap();
    let run = &run["data"];
    assert_eq!(run["status"], "completed", "{run}");
    let context = &run["state"]["context"];
    for saved in [&context["timing"]["start"], &context["timing"]["end"]] {
        assert!(saved.as_str().unwrap().contains("Makefile"), "the lifecycle hooks' ls output is saved: {context}");
    }
    assert!(context["audit"].get("last").is_none(), "the failed audit saved nothing: {context}");

    // Every governance result and tool event in order: the allow-list and the deny are both
    // evaluated (in declaration order) before the tool step's call, and the failing audit
    // after it is traced (kind hook) without failing the run.
    let trace = run["trace"].as_array().unwrap();
    let seen: Vec<String> = trace
        .iter()
        .filter_map(|e| {
            let kind = e["type"].as_str().unwrap();
            let data = &e["data"];
            match kind {
                "policy.result" | "permission.result" => {
                    Some(format!("{kind} {} matched={}", data["id"].as_str().unwrap(), data["matched"]))
                }
                "tool.call" | "tool.result" => Some(format!(
                    "{kind} {} {}{}",
                    e["tool"].as_str().unwrap_or_default(),
                    if data["kind"] == "hook" { "hook " } else { "" },
                    e["status"].as_str().unwrap_or_default()
                )),
                "step.start" | "loop.end" => Some(format!("{kind} {}", e["stepKey"].as_str().unwrap_or_default())),
                _ => None,
            }
        })
        .collect();
    // The first entry from `from` on that starts with `want`: each lookup starts where the
    // previous one matched, so the chain below asserts the order.
    let after = |from: usize, want: &str| {
        seen.iter()
            .skip(from)
            .position(|s| s.starts_with(want))
            .map(|i| i + from)
            .unwrap_or_else(|| panic!("no `{want}` after entry {from}: {seen:#?}"))
    };
    let step = after(0, "step.start capture_start");
    let allow = after(step, "policy.result only-safe-tools matched=true");
    let deny = after(allow, "policy.result deny-shell matched=false");
    let call = after(deny, "tool.call ls");
    after(call, "tool.result read hook failed");
    after(call, "loop.end");
    assert!(!trace.iter().any(|e| e["type"] == "loop.error"), "{seen:#?}");
    assert_eq!(llm.requests().len(), 1);
}
