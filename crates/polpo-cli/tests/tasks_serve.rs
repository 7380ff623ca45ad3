//! Tasks and missions through the real `polpo serve`, the model replaced by the strict fake
//! at the HTTP boundary: a mission's two dependent tasks run in order and the mission
//! completes; a task whose checks keep failing gets its fix prompts, is retried, then fails;
//! a task whose server is SIGKILLed mid-run is taken over after the restart and completes
//! with its one run. `task_throughput` (ignored; run by hand) measures tasks per second.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use polpo_testkit::{FakeLlm, ProjectFixture, Turn};
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};
use support::ServerProcess;

fn project(dir: &Path) {
    ProjectFixture::new(dir, json!({"storage": "file"}))
        .unwrap()
        .agent(
            "builder",
            json!({"model": "openai/fake-model", "allowedTools": ["bash", "read", "write"], "maxTurns": 10}),
            "You build things.",
        )
        .unwrap();
}

fn env(llm: &FakeLlm) -> Vec<(&'static str, String)> {
    vec![
        ("OPENAI_BASE_URL", llm.base_url()),
        ("OPENAI_API_KEY", "sk-upstream".into()),
        ("POLPO_RUN_LEASE_MS", "1000".into()),
        ("POLPO_TASK_LEASE_MS", "1000".into()),
    ]
}

fn start(dir: &Path, env: &[(&'static str, String)]) -> ServerProcess {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    ServerProcess::start("serve", dir, &[], &env)
}

async fn call(method: reqwest::Method, url: String, body: Option<Value>) -> (u16, Value) {
    let mut request = reqwest::Client::new().request(method, url);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

async fn get(url: String) -> Value {
    let (status, body) = call(reqwest::Method::GET, url, None).await;
    assert_eq!(status, 200, "{body}");
    body["data"].clone()
}

/// Read `url` until `done` holds for its data (each read is a real request; no sleeps).
async fn until(url: String, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let data = get(url.clone()).await;
            if done(&data) {
                return data;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

/// The text of the user messages of a model request.
fn user_text(body: &Value) -> String {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mission_of_two_dependent_tasks_runs_them_in_order_and_completes() {
    polpo_llm::install_crypto_provider();
    let llm = FakeLlm::start([
        Turn::tool_calls(vec![("bash", json!({"command": "echo ok > built.txt"}))]),
        Turn::text("Built."),
        Turn::tool_calls(vec![("write", json!({"path": "deploy/log.txt", "content": "deployed"}))]),
        Turn::text("Deployed."),
    ])
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let server = start(dir.path(), &env(&llm));
    let plan = json!({"name": "release", "data": {"tasks": [
        {"title": "Deploy", "description": "Deploy what was built.", "assignTo": "builder", "dependsOn": ["Build"]},
        {"title": "Build", "description": "Build it.", "assignTo": "builder",
         "expectations": [{"type": "test", "command": "test -f built.txt"}, {"type": "file_exists", "paths": ["built.txt"]}]}
    ]}});
    let (status, created) = call(reqwest::Method::POST, format!("{}/api/v1/missions", server.url), Some(plan)).await;
    assert_eq!(status, 201, "{created}");
    let id = created["data"]["id"].as_str().unwrap().to_owned();
    assert_eq!(created["data"]["status"], "draft");
    let (status, executed) =
        call(reqwest::Method::POST, format!("{}/api/v1/missions/{id}/execute", server.url), None).await;
    assert_eq!(status, 200, "{executed}");

    let mission =
        until(format!("{}/api/v1/missions/{id}", server.url), "the mission to finish", |m| m["status"] != "active")
            .await;
    assert_eq!(mission["status"], "completed", "{mission}");
    let report = get(format!("{}/api/v1/missions/{id}/report", server.url)).await;
    assert_eq!(report["allPassed"], true, "{report}");
    let statuses: Vec<(&str, &str)> = report["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["title"].as_str().unwrap(), t["status"].as_str().unwrap()))
        .collect();
    assert_eq!(statuses, [("Deploy", "done"), ("Build", "done")]);

    // The report lists the file Deploy's `write` created (Build's `bash` writes are not known).
    assert_eq!(report["filesCreated"], json!(["deploy/log.txt"]), "{report}");
    assert_eq!(report["tasks"][0]["filesCreated"], json!(["deploy/log.txt"]), "{report}");
    assert_eq!(report["tasks"][1]["filesCreated"], json!([]), "{report}");

    // Build's two model calls came before Deploy's: the dependency held.
    let requests = llm.requests();
    assert_eq!(requests.len(), 4);
    assert!(user_text(&requests[0].body).contains("Task: Build"), "{}", user_text(&requests[0].body));
    assert!(user_text(&requests[2].body).contains("Task: Deploy"), "{}", user_text(&requests[2].body));
    let tasks = get(format!("{}/api/v1/tasks?missionId={id}", server.url)).await;
    let build = tasks["tasks"].as_array().unwrap().iter().find(|t| t["title"] == "Build").unwrap().clone();
    let checks = &build["result"]["assessment"]["checks"];
    assert_eq!(checks[0]["passed"], true, "{checks}");
    assert_eq!(checks[1]["passed"], true, "{checks}");
    assert_eq!(build["group"], "release");

    // The same from the terminal.
    let out = support::polpo(&["missions", "report", &id, "--url", &server.url]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text} {}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("allPassed true") && text.contains("Build") && text.contains("Deploy"), "{text}");
    assert!(text.contains("created  deploy/log.txt"), "{text}");
    let out = support::polpo(&["tasks", "list", "--mission", &id, "--status", "done", "--url", &server.url])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 2, "{}", String::from_utf8_lossy(&out.stdout));
    let out = support::polpo(&["tasks", "retry", "nope", "--url", &server.url]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not_found"), "{}", String::from_utf8_lossy(&out.stderr));

    // Deleting: Build is refused while Deploy depends on it; Deploy, then Build, go.
    let deploy = tasks["tasks"].as_array().unwrap().iter().find(|t| t["title"] == "Deploy").unwrap()["id"].clone();
    let rm = |id: &str| support::polpo(&["tasks", "rm", id, "--url", &server.url]).output().unwrap();
    let out = rm(build["id"].as_str().unwrap());
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("conflict"), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(rm(deploy.as_str().unwrap()).status.success());
    assert!(rm(build["id"].as_str().unwrap()).status.success());
    assert_eq!(get(format!("{}/api/v1/tasks?missionId={id}", server.url)).await["tasks"], json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_pauses_the_mission_until_resumed_and_a_delay_resumes_it_by_itself() {
    polpo_llm::install_crypto_provider();
    let llm = FakeLlm::start([Turn::text("A done."), Turn::text("B done."), Turn::text("C done.")]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let server = start(dir.path(), &env(&llm));
    let task = |title: &str, after: &[&str]| json!({"title": title, "description": title, "assignTo": "builder", "dependsOn": after});
    let plan = json!({"name": "flow", "data": {
        "tasks": [task("A", &[]), task("B", &["A"]), task("C", &["B"])],
        "checkpoints": [{"name": "sign-off", "afterTasks": ["A"], "blocksTasks": ["B"]}],
        "delays": [{"name": "cool-down", "afterTasks": ["B"], "blocksTasks": ["C"], "duration": "PT1S"}]
    }});
    let (status, created) = call(reqwest::Method::POST, format!("{}/api/v1/missions", server.url), Some(plan)).await;
    assert_eq!(status, 201, "{created}");
    let id = created["data"]["id"].as_str().unwrap().to_owned();
    call(reqwest::Method::POST, format!("{}/api/v1/missions/{id}/execute", server.url), None).await;
    let url = format!("{}/api/v1/missions/{id}", server.url);

    let paused = until(url.clone(), "the checkpoint", |m| m["status"] == "paused").await;
    assert_eq!(paused["data"]["progress"]["checkpoints"], json!(["sign-off"]), "{paused}");
    let tasks = get(format!("{}/api/v1/tasks?missionId={id}&status=pending", server.url)).await;
    assert_eq!(tasks["tasks"].as_array().unwrap().len(), 2, "B and C wait: {tasks}");
    assert_eq!(llm.requests().len(), 1, "only A ran before the checkpoint");

    // `polpo tasks watch` shows the paused mission, then follows it through the events to its end.
    let mut watcher = support::polpo(&["tasks", "watch", "--mission", &id, "--url", &server.url])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(watcher.stdout.take().unwrap()));
    let first = tokio::task::block_in_place(|| lines.next()).unwrap().unwrap();
    assert!(first.starts_with("flow [######..............] 1/3 done") && first.ends_with("paused"), "{first}");

    let (status, resumed) = call(reqwest::Method::POST, format!("{url}/resume"), Some(json!({}))).await;
    assert_eq!(status, 200, "{resumed}");
    let rest: Vec<String> = tokio::task::block_in_place(|| lines.map(Result::unwrap).collect());
    let exit = tokio::task::block_in_place(|| watcher.wait()).unwrap();
    assert!(exit.success(), "{rest:?}");
    assert!(rest.len() >= 2, "progress lines while it ran: {rest:?}");
    assert_eq!(
        rest.last().map(String::as_str),
        Some("flow [####################] 3/3 done, 0 failed, 0 running  completed")
    );
    let done =
        until(url.clone(), "the mission to finish", |m| m["status"] == "completed" || m["status"] == "failed").await;
    assert_eq!(done["status"], "completed", "{done}");
    let delay = &done["data"]["progress"]["delays"]["cool-down"];
    assert_eq!(delay["expired"], true, "the delay ran out and resumed the mission: {done}");
    assert_eq!(llm.requests().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_whose_checks_keep_failing_is_fixed_then_retried_then_failed() {
    polpo_llm::install_crypto_provider();
    // Each attempt answers without doing the work: 1 + 2 fix rounds, then one retry of the same.
    let llm = FakeLlm::start((0..6).map(|i| Turn::text(format!("Done, attempt {i}.")))).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let server = start(dir.path(), &env(&llm));
    let task = json!({"title": "Write the report", "description": "Write report.txt.", "assignTo": "builder",
        "maxRetries": 1, "expectations": [{"type": "test", "command": "test -f report.txt"}]});
    let (status, created) = call(reqwest::Method::POST, format!("{}/api/v1/tasks", server.url), Some(task)).await;
    assert_eq!(status, 201, "{created}");
    let id = created["data"]["id"].as_str().unwrap().to_owned();

    let url = format!("{}/api/v1/tasks/{id}", server.url);
    let failed = until(url, "the task to fail for good", |t| {
        t["status"] == "failed" && t["retries"] == 1 && t["fixAttempts"] == 2
    })
    .await;
    let result = &failed["result"];
    assert_eq!(result["assessment"]["passed"], false, "{result}");
    assert_eq!(result["assessmentHistory"].as_array().unwrap().len(), 5, "six assessments in all");
    assert!(result["assessment"]["checks"][0]["message"].as_str().unwrap().contains("exited 1"), "{result}");

    let requests = llm.requests();
    assert_eq!(requests.len(), 6, "three attempts per try, two tries");
    let fixes: Vec<bool> = requests.iter().map(|r| user_text(&r.body).contains("did not pass its checks")).collect();
    assert_eq!(fixes, [false, true, true, false, true, true], "a fix prompt after each failed check, fresh on retry");
    assert!(user_text(&requests[1].body).contains("test -f report.txt"), "the fix prompt says what failed");

    // Retrying by hand is still possible; an unknown task is a 404.
    let (status, body) = call(reqwest::Method::POST, format!("{}/api/v1/tasks/nope/retry", server.url), None).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("not_found")), "{body}");
}

/// The judge's dimensions for a review whose check names none: the three `review` scores.
fn dimensions() -> Turn {
    let dims = ["correctness", "completeness", "quality"]
        .map(|d| json!({"name": d, "description": format!("the {d} of the work"), "weight": 0.3}));
    Turn::json(json!({"dimensions": dims}))
}

/// One reviewer's structured answer scoring every default dimension `score`.
fn review(score: u32) -> Turn {
    let dims = ["correctness", "completeness", "quality"]
        .map(|d| json!({"dimension": d, "score": score, "reasoning": format!("{d} is {score}")}));
    Turn::text(json!({"scores": dims, "summary": format!("scored {score}")}).to_string())
}

/// A mission whose task `A` is reviewed by three reviewers, behind a quality gate that blocks `B`.
fn gated_plan(name: &str, threshold: f64) -> Value {
    let a = json!({"title": "A", "description": "Write it.", "assignTo": "builder",
        "expectations": [{"type": "llm_review", "criteria": "well written", "threshold": 1}]});
    let b = json!({"title": "B", "description": "Ship it.", "assignTo": "builder", "dependsOn": ["A"]});
    json!({"name": name, "qualityThreshold": threshold, "data": {"tasks": [a, b],
        "qualityGates": [{"name": "bar", "afterTasks": ["A"], "blocksTasks": ["B"], "minScore": 4,
                          "requireAllPassed": true, "condition": "lowestScore >= 4 && failedCount == 0"}]}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quality_gate_blocks_its_tasks_until_the_score_passes_and_fails_the_mission_when_it_does_not() {
    polpo_llm::install_crypto_provider();
    let llm = FakeLlm::start([
        // Mission "low": A, the judge's dimensions, three reviewers at 3, B never runs.
        Turn::text("A written."),
        dimensions(),
        review(3),
        review(3),
        review(3),
        // Mission "high": A, the judge's dimensions, three reviewers at 5, then B.
        Turn::text("A written well."),
        dimensions(),
        review(5),
        review(5),
        review(5),
        Turn::text("Shipped."),
    ])
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let mut env = env(&llm);
    env.push(("POLPO_JUDGE_MODEL", "openai/judge-model".into()));
    let server = start(dir.path(), &env);
    let missions = format!("{}/api/v1/missions", server.url);

    // A condition that does not parse is refused when the mission is written.
    let mut bad = gated_plan("bad", 3.0);
    bad["data"]["qualityGates"][0]["condition"] = json!("avgScore >= ");
    let (status, body) = call(reqwest::Method::POST, missions.clone(), Some(bad)).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("invalid_input")), "{body}");
    assert!(body["error"].as_str().unwrap().contains("qualityGates[0].condition"), "{body}");

    let run = |plan: Value| {
        let missions = missions.clone();
        async move {
            let (status, created) = call(reqwest::Method::POST, missions.clone(), Some(plan)).await;
            assert_eq!(status, 201, "{created}");
            let id = created["data"]["id"].as_str().unwrap().to_owned();
            let (status, body) = call(reqwest::Method::POST, format!("{missions}/{id}/execute"), None).await;
            assert_eq!(status, 200, "{body}");
            let done = until(format!("{missions}/{id}"), "the mission to finish", |m| {
                m["status"] == "completed" || m["status"] == "failed"
            })
            .await;
            (done, get(format!("{missions}/{id}/report")).await)
        }
    };

    let (low, report) = run(gated_plan("low", 3.0)).await;
    assert_eq!(low["status"], "failed", "{low}");
    assert_eq!(report["qualityGates"][0]["status"], "failed", "{report}");
    let verdict = &report["qualityGates"][0]["verdict"];
    assert_eq!(verdict["avgScore"], 3.0, "{verdict}");
    assert!(verdict["reason"].as_str().unwrap().contains("below minScore 4"), "{verdict}");
    let rows: Vec<(&str, &str)> = report["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["title"].as_str().unwrap(), t["status"].as_str().unwrap()))
        .collect();
    assert_eq!(rows, [("A", "done"), ("B", "failed")], "{report}");
    let id = low["id"].as_str().unwrap();
    let tasks = get(format!("{}/api/v1/tasks?missionId={id}&status=failed", server.url)).await;
    let b = &tasks["tasks"][0];
    assert!(b["result"]["stderr"].as_str().unwrap().contains("quality gate `bar` failed"), "{b}");
    assert_eq!(llm.requests().len(), 5, "B never reached the model");
    let judged = &llm.requests()[1];
    assert_eq!(judged.body["response_format"]["json_schema"]["name"], "review_dimensions", "no dimensions given");
    assert_eq!(judged.body["model"], "judge-model");
    let reviews = &llm.requests()[2..5];
    assert!(
        reviews.iter().all(|r| r.body["response_format"]["type"] == "json_schema"),
        "reviewers ask for the payload"
    );
    assert!(reviews.iter().all(|r| r.body["model"] == "judge-model"), "POLPO_JUDGE_MODEL reviews");
    assert_eq!(llm.requests()[0].body["model"], "fake-model", "the agent works with its own model");

    let (high, report) = run(gated_plan("high", 4.5)).await;
    assert_eq!(high["status"], "completed", "{high}");
    assert_eq!((report["avgScore"].as_f64(), report["qualityThreshold"].as_f64()), (Some(5.0), Some(4.5)), "{report}");
    assert_eq!(report["qualityGates"][0]["status"], "passed", "{report}");
    assert_eq!(high["data"]["progress"]["gates"]["bar"]["passed"], true, "{high}");
    assert_eq!(llm.requests().len(), 11);
    assert!(user_text(&llm.requests()[10].body).contains("Task: B"), "B ran after the gate passed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reassess_runs_the_checks_again_on_a_finished_task_and_keeps_the_history() {
    polpo_llm::install_crypto_provider();
    let llm = FakeLlm::start((0..3).map(|i| Turn::text(format!("Done, attempt {i}.")))).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let server = start(dir.path(), &env(&llm));
    let task = json!({"title": "Report", "description": "Write report.txt.", "assignTo": "builder", "maxRetries": 0,
        "expectations": [{"type": "test", "command": "test -f report.txt"}]});
    let (status, created) = call(reqwest::Method::POST, format!("{}/api/v1/tasks", server.url), Some(task)).await;
    assert_eq!(status, 201, "{created}");
    let id = created["data"]["id"].as_str().unwrap().to_owned();
    let url = format!("{}/api/v1/tasks/{id}", server.url);
    let failed = until(url.clone(), "the task to fail", |t| t["status"] == "failed").await;
    assert_eq!(failed["result"]["assessmentHistory"].as_array().unwrap().len(), 2, "{failed}");

    // The missing file appears (a person wrote it): the reassessment passes and the task is done.
    std::fs::write(dir.path().join("report.txt"), "ok").unwrap();
    let (status, body) = call(reqwest::Method::POST, format!("{url}/reassess"), None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"]["reassessed"], true);
    let task = &body["data"]["task"];
    assert_eq!(task["status"], "done", "{task}");
    assert_eq!(task["result"]["assessment"]["trigger"], "reassess");
    assert_eq!(task["result"]["assessment"]["passed"], true);
    assert_eq!(task["result"]["assessmentHistory"].as_array().unwrap().len(), 3, "the failed verdicts are kept");
    assert_eq!(task["result"]["stdout"], "Done, attempt 2.", "the answer it kept was assessed, no new run");
    assert_eq!(llm.requests().len(), 3);

    // From the terminal, after the file is gone again: failed.
    std::fs::remove_file(dir.path().join("report.txt")).unwrap();
    let out = support::polpo(&["tasks", "reassess", &id, "--url", &server.url]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text} {}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("failed") && text.contains("assessment: failed (trigger reassess)"), "{text}");
    let now = get(url.clone()).await;
    assert_eq!(
        (now["status"].as_str(), now["result"]["assessmentHistory"].as_array().map(Vec::len)),
        (Some("failed"), Some(4))
    );

    // Only a finished task can be reassessed.
    let draft = json!({"title": "Later", "description": "Not yet.", "assignTo": "builder", "draft": true});
    let (_, created) = call(reqwest::Method::POST, format!("{}/api/v1/tasks", server.url), Some(draft)).await;
    let draft_id = created["data"]["id"].as_str().unwrap();
    let (status, body) =
        call(reqwest::Method::POST, format!("{}/api/v1/tasks/{draft_id}/reassess", server.url), None).await;
    assert_eq!((status, body["code"].as_str()), (409, Some("invalid_transition")), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_question_is_answered_by_the_orchestrator_up_to_two_rounds_then_the_task_goes_on() {
    polpo_llm::install_crypto_provider();
    let llm = FakeLlm::start([
        // Each question is confirmed by the classifier (no call once the rounds are used up).
        Turn::text("Which format should the report use?"),
        Turn::json(json!({"isQuestion": true, "question": "Which format should the report use?"})),
        Turn::text("Plain text."),
        Turn::text("And which file name?"),
        Turn::json(json!({"isQuestion": true, "question": "And which file name?"})),
        Turn::text("report.txt"),
        Turn::text("Written. Shall I also add a title?"),
    ])
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let server = start(dir.path(), &env(&llm));
    let task = json!({"title": "Report", "description": "Write the report.", "assignTo": "builder"});
    let (status, created) = call(reqwest::Method::POST, format!("{}/api/v1/tasks", server.url), Some(task)).await;
    assert_eq!(status, 201, "{created}");
    let id = created["data"]["id"].as_str().unwrap().to_owned();
    let done = until(format!("{}/api/v1/tasks/{id}", server.url), "the task to finish", |t| {
        t["status"] == "done" || t["status"] == "failed"
    })
    .await;
    assert_eq!(done["status"], "done", "{done}");
    assert_eq!(done["questionRounds"], 2, "{done}");
    assert_eq!(done["originalDescription"], "Write the report.");
    let description = done["description"].as_str().unwrap();
    assert!(
        description.contains("You asked: Which format should the report use?\nAnswer: Plain text.")
            && description.contains("You asked: And which file name?\nAnswer: report.txt"),
        "{description}"
    );
    assert_eq!(done["result"]["stdout"], "Written. Shall I also add a title?", "the third question is the answer");

    let requests = llm.requests();
    assert_eq!(requests.len(), 7);
    assert_eq!(requests[1].body["response_format"]["json_schema"]["name"], "question_check");
    let asked = user_text(&requests[2].body);
    assert!(asked.contains("asked a question instead") && asked.contains("Which format"), "{asked}");
    assert!(requests[2].body["tools"].as_array().is_none_or(Vec::is_empty), "the orchestrator answers without tools");
    assert!(user_text(&requests[3].body).contains("Answer: Plain text."), "the agent runs again with the answer");
    let run = get(format!("{}/v1/runs/task-{id}-r0-f0-q2", server.url)).await;
    assert_eq!(run["status"], "completed", "each round is its own run: {run}");
}

/// A task's check commands come from whoever may create tasks (a client key too): they run
/// confined like `bash` — the project writable, `.polpo/` seen empty, nothing outside writable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_check_command_is_confined_like_bash() {
    polpo_llm::install_crypto_provider();
    let llm = FakeLlm::start((0..6).map(|i| Turn::text(format!("Done, attempt {i}.")))).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let outside = tempfile::tempdir().unwrap();
    let escape = outside.path().join("escape.txt");
    let server = start(dir.path(), &env(&llm));
    let checks = json!([
        {"type": "script", "command": "echo ok > inside.txt"},
        {"type": "script", "command": "test -n \"$(ls -A .polpo)\""},
        {"type": "script", "command": format!("echo x > {}", escape.display())},
    ]);
    let task = json!({"title": "Probe", "description": "Answer.", "assignTo": "builder", "maxRetries": 0,
        "expectations": checks});
    let (status, created) = call(reqwest::Method::POST, format!("{}/api/v1/tasks", server.url), Some(task)).await;
    assert_eq!(status, 201, "{created}");
    let id = created["data"]["id"].as_str().unwrap().to_owned();
    let url = format!("{}/api/v1/tasks/{id}", server.url);
    let failed = until(url, "the task to fail", |t| t["status"] == "failed").await;
    let checks = &failed["result"]["assessment"]["checks"];
    let passed: Vec<&Value> = (0..3).map(|i| &checks[i]["passed"]).collect();
    assert_eq!(passed, [true, false, false], "{checks}");
    assert!(dir.path().join("inside.txt").exists(), "the project stays writable");
    assert!(!escape.exists(), "nothing outside the project is writable");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_whose_server_is_killed_mid_run_completes_once_after_the_restart() {
    polpo_llm::install_crypto_provider();
    let llm =
        FakeLlm::start([Turn::text("lost with the process").stall_after(1), Turn::text("Done after the restart.")])
            .await
            .unwrap();
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let env = env(&llm);
    let first = start(dir.path(), &env);
    let task = json!({"title": "Survive", "description": "Finish even if the server dies.", "assignTo": "builder"});
    let (status, created) = call(reqwest::Method::POST, format!("{}/api/v1/tasks", first.url), Some(task)).await;
    assert_eq!(status, 201, "{created}");
    let id = created["data"]["id"].as_str().unwrap().to_owned();
    // The model is answering the task's run (and hangs): kill the server now.
    tokio::time::timeout(Duration::from_secs(30), async {
        while llm.requests().is_empty() {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the task's run reaches the model");
    let running = get(format!("{}/api/v1/tasks/{id}", first.url)).await;
    assert_eq!(running["status"], "in_progress");
    drop(first); // SIGKILL

    let second = start(dir.path(), &env);
    let done = until(format!("{}/api/v1/tasks/{id}", second.url), "the task to finish", |t| {
        t["status"] == "done" || t["status"] == "failed"
    })
    .await;
    assert_eq!(done["status"], "done", "{done}");
    assert_eq!(done["result"]["stdout"], "Done after the restart.");
    assert_eq!(done["retries"], 0);
    assert_eq!(llm.requests().len(), 2, "the resumed run asked once more; no second run was started");
    let run = get(format!("{}/v1/runs/task-{id}-r0-f0", second.url)).await;
    assert_eq!(run["status"], "completed", "{run}");
}

/// `cargo test -p polpo-cli --test tasks_serve task_throughput -- --ignored --nocapture`: through
/// `polpo serve` on the file store, each task one zero-latency model call and one `script`
/// check. Overhead: 20 tasks one at a time, create → `done` each (the orchestrator's own cost,
/// the model answering at once). Throughput: one mission of 200 independent tasks executed at
/// once, 32 in flight (the default `maxConcurrency`), from `execute` to the mission completed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark; run by hand"]
async fn task_throughput() {
    const ALONE: usize = 20;
    const TASKS: usize = 200;
    polpo_llm::install_crypto_provider();
    let llm = FakeLlm::start_repeating([Turn::text("ok")]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let server = start(dir.path(), &env(&llm));
    let job = |i: usize| {
        json!({"title": format!("job {i}"), "description": "Answer ok.", "assignTo": "builder",
            "expectations": [{"type": "script", "command": "true"}]})
    };
    let mut each = Vec::new();
    for i in 0..ALONE {
        let started = Instant::now();
        let (status, body) = call(reqwest::Method::POST, format!("{}/api/v1/tasks", server.url), Some(job(i))).await;
        assert_eq!(status, 201, "{body}");
        let id = body["data"]["id"].as_str().unwrap().to_owned();
        until(format!("{}/api/v1/tasks/{id}", server.url), "the task to be done", |t| t["status"] == "done").await;
        each.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    each.sort_by(f64::total_cmp);
    println!(
        "one task at a time, create -> done: median {:.1} ms, mean {:.1} ms",
        each[ALONE / 2],
        each.iter().sum::<f64>() / ALONE as f64
    );

    let plan = json!({"name": "bulk", "data": {"tasks": (0..TASKS).map(job).collect::<Vec<_>>()}});
    let (status, created) = call(reqwest::Method::POST, format!("{}/api/v1/missions", server.url), Some(plan)).await;
    assert_eq!(status, 201, "{created}");
    let id = created["data"]["id"].as_str().unwrap().to_owned();
    let started = Instant::now();
    let (status, body) =
        call(reqwest::Method::POST, format!("{}/api/v1/missions/{id}/execute", server.url), None).await;
    assert_eq!(status, 200, "{body}");
    let done =
        until(format!("{}/api/v1/missions/{id}", server.url), "the mission to finish", |m| m["status"] != "active")
            .await;
    let took = started.elapsed();
    assert_eq!(done["status"], "completed", "{done}");
    println!(
        "{TASKS} tasks of one mission, 32 in flight: {:.2} s, {:.1} tasks/s",
        took.as_secs_f64(),
        TASKS as f64 / took.as_secs_f64()
    );
}
