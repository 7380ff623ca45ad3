//! Assessment and clarification through the orchestrator on a real SQLite store, the model
//! replaced by the strict scripted fake (JSON only when asked through `response_format`):
//! an `llm_review` without dimensions scores the ones the judge generates (the defaults when
//! the judge's proposal does not hold up); a task that wrote files is reviewed by reviewers
//! that read them — read-only, inside the workspace, the vault's secrets cut out; and an
//! answer ending in a question is a question only when the orchestrator model says so.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use polpo_core::redact::{REDACTED_SECRET, Redactor};
use polpo_core::tasks::{Task, TaskStatus};
use polpo_engine::{Loaded, Runtime};
use polpo_llm::Providers;
use polpo_orchestrator::Orchestrator;
use polpo_store::{StoreKind, SystemClock, open_store};
use polpo_testkit::{FakeLlm, ProjectFixture, Turn};
use serde_json::{Value, json};

/// An orchestrator over `dir` (agent `writer` with `tools`) whose model is `llm` and whose
/// redactor cuts out `secret`.
async fn orchestrator(dir: &Path, llm: &FakeLlm, tools: Value, secret: &str) -> Arc<Orchestrator> {
    ProjectFixture::new(dir, json!({"storage": "sqlite"}))
        .unwrap()
        .agent("writer", json!({"model": "openai/fake-model", "allowedTools": tools}), "You write notes.")
        .unwrap();
    let project = polpo_project::load_project(dir).unwrap();
    let store = open_store(StoreKind::Sqlite, dir, None, Arc::new(SystemClock)).await.unwrap();
    let providers = Providers::new(BTreeMap::new(), llm.openai_env());
    let redactor = Redactor::new();
    redactor.replace([secret.to_owned()]);
    let runtime = Runtime::new(Loaded::new(project).unwrap(), providers, store).with_redactor(redactor);
    Orchestrator::with_runtime(Arc::new(runtime))
}

/// Task `id` for `writer` with these expectations.
fn task(id: &str, description: &str, expectations: Value) -> Task {
    let mut task = Task::new(id, id, description, chrono::Utc::now());
    task.assign_to = Some("writer".into());
    task.expectations = serde_json::from_value(expectations).unwrap();
    task
}

/// Run `task` to its end: the stored task.
async fn run(orchestrator: &Arc<Orchestrator>, task: Task) -> Task {
    let id = task.id.clone();
    orchestrator.create_task(task).await.unwrap();
    orchestrator.run_until_idle().await.unwrap();
    orchestrator.task(&id).await.unwrap().task
}

/// The first check of a task's latest assessment.
fn first_check(task: &Task) -> Value {
    task.result.as_ref().and_then(|r| r.assessment.clone()).expect("assessed")["checks"][0].clone()
}

/// One reviewer's answer scoring `scores`.
fn review(scores: &[(&str, u32)]) -> Turn {
    let scores: Vec<Value> =
        scores.iter().map(|(d, s)| json!({"dimension": d, "score": s, "reasoning": format!("{d}: {s}")})).collect();
    Turn::json(json!({"scores": scores, "summary": "reviewed"}))
}

/// The `response_format` name a request asked for, if any.
fn format_name(body: &Value) -> Option<&str> {
    body["response_format"]["json_schema"]["name"].as_str()
}

/// The tool results a request carries.
fn tool_results(body: &Value) -> Vec<String> {
    let messages = body["messages"].as_array().unwrap();
    messages.iter().filter(|m| m["role"] == "tool").map(|m| m["content"].to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_without_dimensions_scores_the_generated_ones_and_falls_back_to_the_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let dims = json!({"dimensions": [
        {"name": "accuracy", "description": "Every fact is right.", "weight": 0.4},
        {"name": "tone", "description": "Friendly and plain.", "weight": 0.2}
    ]});
    let llm = FakeLlm::start([
        // `gen`: the answer, the judge's dimensions, three reviewers on them.
        Turn::text("The notes are ready."),
        Turn::json(dims),
        review(&[("accuracy", 4), ("tone", 2)]),
        review(&[("accuracy", 4), ("tone", 2)]),
        review(&[("accuracy", 4), ("tone", 2)]),
        // `bad`: one dimension proposed is too few, so the defaults are scored.
        Turn::text("The notes are ready."),
        Turn::json(json!({"dimensions": [{"name": "everything", "description": "All of it.", "weight": 1}]})),
        review(&[("correctness", 5), ("completeness", 5), ("quality", 5)]),
        review(&[("correctness", 5), ("completeness", 5), ("quality", 5)]),
        review(&[("correctness", 5), ("completeness", 5), ("quality", 5)]),
    ])
    .await
    .unwrap();
    let orchestrator = orchestrator(dir.path(), &llm, json!(["read"]), "unused-secret-value").await;
    let check = json!([{"type": "llm_review", "criteria": "clear notes", "threshold": 3}]);

    let done = run(&orchestrator, task("gen", "Write the launch notes.", check.clone())).await;
    assert_eq!(done.status, TaskStatus::Done, "{:?}", done.result);
    let review = first_check(&done);
    assert_eq!(review["dimensionSource"], "generated", "{review}");
    assert_eq!(review["reviewMode"], "output", "no file was written: {review}");
    let weights: Vec<f64> =
        review["dimensions"].as_array().unwrap().iter().map(|d| d["weight"].as_f64().unwrap()).collect();
    assert!((weights[0] - 2.0 / 3.0).abs() < 1e-9 && (weights[1] - 1.0 / 3.0).abs() < 1e-9, "normalised: {weights:?}");
    assert_eq!(review["scores"], json!({"accuracy": 4.0, "tone": 2.0}));
    assert_eq!(review["globalScore"], 3.33, "4·2/3 + 2·1/3: {review}");
    let bodies: Vec<Value> = llm.requests().into_iter().map(|r| r.body).collect();
    assert_eq!(format_name(&bodies[1]), Some("review_dimensions"), "the judge was asked through response_format");
    assert!(bodies[1].to_string().contains("Write the launch notes."));
    assert!(bodies[2..5].iter().all(|b| format_name(b) == Some("review") && b.to_string().contains("- tone: ")));

    let fell_back = run(&orchestrator, task("bad", "Write the launch notes.", check)).await;
    assert_eq!(fell_back.status, TaskStatus::Done, "{:?}", fell_back.result);
    let review = first_check(&fell_back);
    assert_eq!(review["dimensionSource"], "default", "{review}");
    let names: Vec<&str> =
        review["dimensions"].as_array().unwrap().iter().map(|d| d["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["correctness", "completeness", "quality"]);
    assert!(review["message"].as_str().unwrap().contains("1 dimensions proposed, 2 to 6 needed"), "{review}");
    assert_eq!(review["globalScore"], 5.0);
    assert_eq!(llm.remaining(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reviewers_of_a_task_that_wrote_a_file_read_it_and_are_refused_outside_the_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let elsewhere = outside.path().join("private.txt");
    std::fs::write(&elsewhere, "the private plans of another project").unwrap();
    let secret = "sk-launch-7f3a9c2e";
    let notes = format!("# Launch\nThe launch is on Tuesday.\nDeploy key: {secret}\n");
    let read_notes = || Turn::tool_calls(vec![("read", json!({"path": "notes.md"}))]);
    let llm = FakeLlm::start([
        Turn::tool_calls(vec![("write", json!({"path": "notes.md", "content": notes}))]),
        Turn::text("Wrote notes.md."),
        // Three reviewers: each takes tool calls until it answers, then the answer is put in
        // the review's JSON shape (the fake answers JSON only to a request asking for it), so
        // every reviewer uses two of the six JSON turns, whatever order their calls come in.
        read_notes(),
        Turn::tool_calls(vec![("read", json!({"path": elsewhere.to_str().unwrap()}))]),
        read_notes(),
        review(&[("accuracy", 4)]),
        review(&[("accuracy", 4)]),
        review(&[("accuracy", 4)]),
        review(&[("accuracy", 4)]),
        review(&[("accuracy", 4)]),
        review(&[("accuracy", 4)]),
    ])
    .await
    .unwrap();
    let tools = json!(["write", "read", "glob", "grep", "bash"]);
    let orchestrator = orchestrator(dir.path(), &llm, tools, secret).await;
    let check = json!([{"type": "llm_review", "criteria": "the date is right", "dimensions": [{"name": "accuracy"}]}]);

    let done = run(&orchestrator, task("notes", "Write notes.md with the launch date.", check)).await;
    assert_eq!(done.status, TaskStatus::Done, "{:?}", done.result);
    let review = first_check(&done);
    assert_eq!(review["reviewMode"], "file_exploration", "{review}");
    assert_eq!(review["dimensionSource"], "given");
    assert_eq!((review["globalScore"].as_f64(), review["reviewers"].as_array().unwrap().len()), (Some(4.0), 3));
    assert_eq!(llm.remaining(), 0);

    let reviews: Vec<Value> = llm
        .requests()
        .into_iter()
        .map(|r| r.body)
        .filter(|b| b["messages"].to_string().contains("You are reviewing work"))
        .collect();
    // The reviewers were told which file the agent wrote and offered only the read-only tools.
    assert!(reviews[0]["messages"].to_string().contains("notes.md"));
    for body in reviews.iter().filter(|b| b["tools"].is_array()) {
        let mut offered: Vec<&str> =
            body["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
        offered.sort_unstable();
        assert_eq!(offered, ["glob", "grep", "read"], "no write, no bash");
    }
    let results: Vec<String> = reviews.iter().flat_map(tool_results).collect();
    assert!(results.iter().any(|r| r.contains("The launch is on Tuesday.")), "a reviewer read the file: {results:?}");
    assert!(results.iter().any(|r| r.contains(REDACTED_SECRET)), "its secret cut out: {results:?}");
    assert!(results.iter().any(|r| r.contains("outside the allowed paths")), "the outside read refused: {results:?}");
    let seen = reviews.iter().map(Value::to_string).collect::<String>();
    assert!(!seen.contains(secret) && !seen.contains("private plans"), "nothing secret or outside reached the judge");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_ending_in_a_question_is_answered_only_when_the_orchestrator_model_says_it_is_one() {
    let dir = tempfile::tempdir().unwrap();
    let not_a_question = json!({"isQuestion": false, "question": ""});
    let llm = FakeLlm::start([
        // `report`: work that ends with a courtesy question; the classifier says so.
        Turn::text("Report written to report.txt. Anything else?"),
        Turn::json(not_a_question),
        // `format`: a real question, answered, then the work (no classifier call for it).
        Turn::text("Which format should the report use?"),
        Turn::json(json!({"isQuestion": true, "question": "Which format should the report use?"})),
        Turn::text("Plain text."),
        Turn::text("Report written as plain text."),
        // `broken`: the classifier answers no JSON at all, even when asked again: not a question.
        Turn::text("Shall I go on?"),
        Turn::text("yes it is"),
        Turn::text("I said yes"),
    ])
    .await
    .unwrap();
    let orchestrator = orchestrator(dir.path(), &llm, json!(["read"]), "unused-secret-value").await;

    let report = run(&orchestrator, task("report", "Write the report.", json!([]))).await;
    assert_eq!((report.status, report.question_rounds), (TaskStatus::Done, 0), "{:?}", report.result);
    assert_eq!(report.result.as_ref().unwrap().stdout, "Report written to report.txt. Anything else?");
    let bodies: Vec<Value> = llm.requests().into_iter().map(|r| r.body).collect();
    assert_eq!(bodies.len(), 2);
    assert_eq!(format_name(&bodies[1]), Some("question_check"));
    assert!(bodies[1].to_string().contains("Anything else?"));

    let format = run(&orchestrator, task("format", "Write the report.", json!([]))).await;
    assert_eq!((format.status, format.question_rounds), (TaskStatus::Done, 1), "{:?}", format.result);
    assert!(format.description.contains("You asked: Which format should the report use?\nAnswer: Plain text."));
    assert_eq!(format.result.as_ref().unwrap().stdout, "Report written as plain text.");
    assert_eq!(llm.requests().len(), 6, "an answer that does not end in a question costs no classifier call");

    let broken = run(&orchestrator, task("broken", "Write the report.", json!([]))).await;
    assert_eq!((broken.status, broken.question_rounds), (TaskStatus::Done, 0), "{:?}", broken.result);
    assert_eq!(llm.remaining(), 0, "the classifier was asked, and its repair too");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reviewer_that_only_explores_is_stopped_after_twenty_model_calls() {
    let dir = tempfile::tempdir().unwrap();
    let read_notes = || Turn::tool_calls(vec![("read", json!({"path": "notes.md"}))]);
    let mut script = vec![
        Turn::tool_calls(vec![("write", json!({"path": "notes.md", "content": "Launch on Tuesday."}))]),
        Turn::text("Wrote notes.md."),
    ];
    // Three reviewers that never stop reading use twenty model calls each, no more.
    script.extend((0..60).map(|_| read_notes()));
    // The fix run that follows the failed review is refused, which ends the task.
    script.push(Turn::error(
        400,
        json!({"error": {"message": "stop here", "type": "invalid_request_error"}}).to_string(),
    ));
    let llm = FakeLlm::start(script).await.unwrap();
    let orchestrator = orchestrator(dir.path(), &llm, json!(["write", "read"]), "unused-secret-value").await;
    let check = json!([{"type": "llm_review", "dimensions": [{"name": "accuracy"}]}]);
    let mut endless = task("endless", "Write notes.md.", check);
    endless.max_retries = 0;

    let failed = run(&orchestrator, endless).await;
    assert_eq!(failed.status, TaskStatus::Failed, "{:?}", failed.result);
    let review = first_check(&failed);
    assert_eq!(review["passed"], false);
    let message = review["message"].as_str().unwrap();
    assert!(message.starts_with("every reviewer failed") && message.contains("max_turns_exhausted"), "{message}");
    let reviews = llm
        .requests()
        .into_iter()
        .filter(|r| r.body["messages"].to_string().contains("You are reviewing work"))
        .count();
    assert_eq!(reviews, 60, "twenty model calls per reviewer");
    assert_eq!(llm.remaining(), 0, "the fix run came after every reviewer stopped");
}
