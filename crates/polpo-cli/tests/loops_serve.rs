//! Project Loops end to end: the seed's `router-flow` (adapted to built-in tools) through a
//! real `polpo serve` and the strict fake LLM — the tool step's `$context` binding from
//! `request.metadata` reaches the tool, the agent step's structured output routes the
//! conditional `next`, the human step suspends the run until `POST /api/v1/loop-runs/{id}/human`
//! answers it, and the trace has every event in order; then `polpo loops run` in a terminal.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use polpo_testkit::{FakeLlm, ProjectFixture, Turn};
use serde_json::{Value, json};
use std::io::Write;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;
use support::{ServerProcess, polpo};

/// Generous bound for "eventually", never a timing assertion.
const EVENTUALLY: Duration = Duration::from_secs(60);

fn router_flow() -> Value {
    json!({
        "name": "router-flow",
        "groups": {"request_routing": {"label": "Route request", "description": "Classify the request and select its execution path."}},
        "context": "shared",
        "start": "clone_repo",
        "steps": {
            "clone_repo": {"type": "tool", "tool": "write", "input": {"path": "repo.txt", "content": {"$context": "request.metadata.projectRef"}}, "saveAs": "repo.clone", "next": "classify"},
            "classify": {
                "type": "agent", "label": "Classify request", "group": "request_routing", "systemPrompt": "Classify the incoming request.",
                "allowedTools": ["read"],
                "output": {"schema": {"type": "object", "properties": {"route": {"type": "string"}}, "required": ["route"]}},
                "stopWhen": {"expression": "classify.route != null"},
                "next": [{"when": "classify.route == 'answer'", "label": "Answer directly", "to": "answer"}, {"label": "Needs review", "to": "human_review"}]
            },
            "answer": {"type": "agent", "systemPrompt": "Answer using the selected route.", "allowedTools": ["write"], "toolChoice": {"mode": "required", "tool": "write"}, "next": "end"},
            "human_review": {"type": "human", "output": {"schema": {"type": "object", "properties": {"decision": {"type": "string"}}, "required": ["decision"]}}, "next": "end"}
        }
    })
}

fn project(dir: &Path) {
    ProjectFixture::new(dir, json!({"storage": "file"}))
        .unwrap()
        .agent(
            "router",
            json!({"model": "openai/fake-model", "allowedTools": ["read", "write"], "assignedLoops": ["router-flow"]}),
            "You route requests.",
        )
        .unwrap()
        .project_loop("router-flow", router_flow())
        .unwrap();
}

fn serve(dir: &Path, llm: &FakeLlm) -> ServerProcess {
    project(dir);
    let base = llm.base_url();
    ServerProcess::start("serve", dir, &[], &[("OPENAI_BASE_URL", base.as_str()), ("OPENAI_API_KEY", "sk-upstream")])
}

fn chat(stream: bool) -> Value {
    json!({"agent": "router", "loop": "router-flow", "stream": stream, "metadata": {"projectRef": "acme/app@main"},
        "messages": [{"role": "user", "content": "Can we ship the release?"}]})
}

/// `(type, stepKey or toStepKey)` of each trace event.
fn order(trace: &[Value]) -> Vec<(String, String)> {
    trace
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap().to_owned(),
                e["stepKey"].as_str().or(e["toStepKey"].as_str()).unwrap_or("").to_owned(),
            )
        })
        .collect()
}

fn expected(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(a, b)| ((*a).to_owned(), (*b).to_owned())).collect()
}

const HEAD: &[(&str, &str)] = &[
    ("loop.start", ""),
    ("step.start", "clone_repo"),
    ("tool.call", "clone_repo"),
    ("tool.result", "clone_repo"),
    ("step.end", "clone_repo"),
    ("transition", "classify"),
    ("step.start", "classify"),
    ("step.end", "classify"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn router_flow_routes_by_structured_output_and_a_human_step_resumes_over_rest() {
    polpo_llm::install_crypto_provider();
    // classify is offered `read`, so its JSON comes from the formatting call after a text answer.
    let llm =
        FakeLlm::start([Turn::text("A person should decide."), Turn::json(json!({"route": "review"}))]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path(), &llm);
    let client = reqwest::Client::new();
    let mut response =
        client.post(format!("{}/v1/chat/completions", server.url)).json(&chat(true)).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let loop_run_id = response.headers()["x-polpo-loop-run-id"].to_str().unwrap().to_owned();

    let (mut buffer, mut trace, mut content, mut done, mut answered) =
        (String::new(), Vec::new(), String::new(), false, false);
    while !done {
        let chunk = tokio::time::timeout(EVENTUALLY, response.chunk())
            .await
            .expect("the stream goes on")
            .unwrap()
            .expect("the stream ends with [DONE]");
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buffer.find("\n\n") {
            let frame: String = buffer.drain(..end + 2).collect();
            let Some(data) = frame.lines().find_map(|l| l.strip_prefix("data: ")) else { continue };
            if data == "[DONE]" {
                done = true;
                continue;
            }
            let chunk: Value = serde_json::from_str(data).unwrap();
            assert!(chunk.get("error").is_none(), "{chunk}");
            if let Some(text) = chunk["choices"][0]["delta"]["content"].as_str() {
                content.push_str(text);
            }
            for event in chunk["loop_trace"].as_array().into_iter().flatten() {
                assert_eq!(chunk["loop_run_id"], loop_run_id.as_str());
                trace.push(event.clone());
                if event["type"] == "human.request" && !answered {
                    answered = true;
                    assert_eq!(
                        std::fs::read_to_string(dir.path().join("repo.txt")).unwrap(),
                        "acme/app@main",
                        "the metadata binding reached the tool"
                    );
                    let human = format!("{}/api/v1/loop-runs/{loop_run_id}/human", server.url);
                    let wrong = client.post(&human).json(&json!({"output": {"decision": 1}})).send().await.unwrap();
                    assert_eq!(wrong.status(), 400);
                    assert_eq!(wrong.json::<Value>().await.unwrap()["code"], "loop_human_output_invalid");
                    let right =
                        client.post(&human).json(&json!({"output": {"decision": "ship"}})).send().await.unwrap();
                    assert_eq!(right.status(), 200);
                }
            }
        }
    }
    assert_eq!(serde_json::from_str::<Value>(&content).unwrap(), json!({"decision": "ship"}));
    let mut want = HEAD.to_vec();
    want.extend([
        ("transition", "human_review"),
        ("step.start", "human_review"),
        ("human.request", "human_review"),
        ("human.result", "human_review"),
        ("step.end", "human_review"),
        ("transition", "end"),
        ("loop.end", ""),
    ]);
    assert_eq!(order(&trace), expected(&want));
    let to_review = trace.iter().find(|e| e["type"] == "transition" && e["toStepKey"] == "human_review").unwrap();
    assert_eq!((to_review["fromStepKey"].as_str(), to_review["label"].as_str()), (Some("classify"), None));
    assert!(trace.iter().all(|e| e["loop"] == "router-flow"));
    let again = client
        .post(format!("{}/api/v1/loop-runs/{loop_run_id}/human", server.url))
        .json(&json!({"output": {"decision": "x"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 404, "the run no longer waits");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn router_flow_answers_in_one_response_with_the_whole_trace() {
    polpo_llm::install_crypto_provider();
    let turns = [
        Turn::text("This can be answered."),
        Turn::json(json!({"route": "answer"})),
        Turn::tool_calls(vec![("write", json!({"path": "answer.txt", "content": "Yes, ship it."}))]),
        Turn::text("Wrote the answer."),
    ];
    let llm = FakeLlm::start(turns).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path(), &llm);
    let response = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", server.url))
        .json(&chat(false))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], "Wrote the answer.");
    assert!(body["loop_run_id"].as_str().unwrap().starts_with("looprun-"));
    let trace = body["loop_trace"].as_array().unwrap();
    let mut want = HEAD.to_vec();
    want.extend([
        ("transition", "answer"),
        ("step.start", "answer"),
        ("tool.call", "answer"),
        ("tool.result", "answer"),
        ("step.end", "answer"),
        ("transition", "end"),
        ("loop.end", ""),
    ]);
    assert_eq!(order(trace), expected(&want));
    assert_eq!(std::fs::read_to_string(dir.path().join("answer.txt")).unwrap(), "Yes, ship it.");
    // The forced tool reached the model, and chat's own layers did not.
    let requests = llm.requests();
    assert_eq!(requests[2].body["tool_choice"]["function"]["name"], "write");
    let to_answer = trace.iter().find(|e| e["type"] == "transition" && e["toStepKey"] == "answer").unwrap();
    assert_eq!(to_answer["data"]["label"], "Answer directly");

    // What a loop cannot honour is refused before any step runs.
    let client = reqwest::Client::new();
    let mut structured = chat(false);
    structured["response_format"] = json!({"type": "json_object"});
    let mut asking = chat(false);
    asking["polpo"] = json!({"capabilities": {"ask_user_question": true}});
    let mut elsewhere = chat(false);
    elsewhere["loop"] = json!("other-flow");
    for (body, code) in [
        (structured, "loop_request_unsupported"),
        (asking, "loop_request_unsupported"),
        (elsewhere, "loop_not_assigned"),
    ] {
        let r = client.post(format!("{}/v1/chat/completions", server.url)).json(&body).send().await.unwrap();
        assert_eq!(r.status(), 400);
        assert_eq!(r.json::<Value>().await.unwrap()["error"]["code"], code);
    }
    let keyed = client
        .post(format!("{}/v1/chat/completions", server.url))
        .header("idempotency-key", "k1")
        .json(&chat(false))
        .send()
        .await
        .unwrap();
    assert_eq!(keyed.status(), 400, "an Idempotency-Key is refused, not silently ignored");
    assert_eq!(llm.requests().len(), 4, "no refused request reached the model");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polpo_loops_run_prints_the_trace_live_and_takes_the_human_answer_from_stdin() {
    let llm =
        FakeLlm::start([Turn::text("A person should decide."), Turn::json(json!({"route": "review"}))]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let base = llm.base_url();
    let mut cmd = polpo(&[
        "loops",
        "run",
        "router",
        "router-flow",
        "--input",
        "\"Ship it?\"",
        "--metadata",
        r#"{"projectRef": "acme/cli"}"#,
    ]);
    cmd.arg("--project").arg(dir.path()).env("OPENAI_BASE_URL", &base).env("OPENAI_API_KEY", "sk-upstream");
    let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    // The answer is waiting on stdin before the step asks; it is read once the step suspends.
    child.stdin.take().unwrap().write_all(b"{\"decision\": 2}\n{\"decision\": \"ship\"}\n").unwrap();
    let out = tokio::time::timeout(EVENTUALLY, tokio::task::spawn_blocking(move || child.wait_with_output().unwrap()))
        .await
        .unwrap()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    let trace: Vec<Value> = lines[..lines.len() - 1].iter().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(trace.first().unwrap()["type"], "loop.start");
    assert_eq!(trace.last().unwrap()["type"], "loop.end");
    assert!(trace.iter().any(|e| e["type"] == "human.result"));
    assert_eq!(serde_json::from_str::<Value>(lines[lines.len() - 1]).unwrap(), json!({"decision": "ship"}));
    assert!(stderr.contains("loop_human_output_invalid"), "the invalid answer was refused: {stderr}");
    assert_eq!(std::fs::read_to_string(dir.path().join("repo.txt")).unwrap(), "acme/cli");
}

/// A tool step asks no model: a loop of tool steps runs on a machine without the agent's
/// provider key, and an agent step there is refused with why (`provider_not_configured`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_only_loop_runs_without_a_model_key_and_an_agent_step_says_why_it_cannot() {
    let dir = tempfile::tempdir().unwrap();
    let save =
        json!({"type": "tool", "tool": "write", "input": {"path": "saved.txt", "content": "kept"}, "next": "end"});
    let ask = json!({"type": "agent", "systemPrompt": "Say hi.", "next": "end"});
    ProjectFixture::new(dir.path(), json!({"storage": "file"}))
        .unwrap()
        .agent(
            "keeper",
            json!({"model": "openai/gpt-4o-mini", "allowedTools": ["write"], "assignedLoops": ["save", "ask"]}),
            "You keep things.",
        )
        .unwrap()
        .project_loop("save", json!({"start": "save", "steps": {"save": save}}))
        .unwrap()
        .project_loop("ask", json!({"start": "ask", "steps": {"ask": ask}}))
        .unwrap();
    let run = |lp: &str| {
        let mut cmd = polpo(&["loops", "run", "keeper", lp, "--project"]);
        cmd.arg(dir.path()).env_remove("OPENAI_API_KEY").env_remove("OPENAI_BASE_URL");
        cmd.output().unwrap()
    };
    let saved = run("save");
    let (stdout, stderr) = (String::from_utf8_lossy(&saved.stdout), String::from_utf8_lossy(&saved.stderr));
    assert!(saved.status.success(), "{stdout}\n{stderr}");
    assert_eq!(std::fs::read_to_string(dir.path().join("saved.txt")).unwrap(), "kept");
    let asked = run("ask");
    assert!(!asked.status.success());
    assert!(String::from_utf8_lossy(&asked.stderr).contains("provider_not_configured"), "{asked:?}");
}
