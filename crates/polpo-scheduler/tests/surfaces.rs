//! The fires that are not an agent conversation, against a real SQLite store and the strict
//! fake model: a `task` schedule creates its task in the orchestrator's store (once per
//! occurrence, and `maxConcurrency` counts its unfinished tasks), a `loop` schedule runs a
//! Project Loop to its end, a `webhook` schedule is refused by the SSRF guard for a loopback
//! target and delivered to a receiver the server's policy exempts, over real HTTP.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use chrono::{DateTime, Utc};
use polpo_engine::runs::{RunManager, RunOptions};
use polpo_engine::{Loaded, Runtime};
use polpo_llm::Providers;
use polpo_scheduler::{RunState, Scheduler};
use polpo_store::{ManualClock, StoreKind, open_store};
use polpo_testkit::{FakeLlm, ProjectFixture, Turn};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-07-28T08:00:00Z").unwrap().with_timezone(&Utc)
}

fn project(schedule: Value) -> TempDir {
    project_with(json!({}), schedule)
}

/// [`project`] with project `settings`.
fn project_with(settings: Value, schedule: Value) -> TempDir {
    let dir = tempfile::tempdir().unwrap();
    let agent = json!({"model": "openai/fake-model", "assignedLoops": ["triage"]});
    ProjectFixture::new(dir.path(), settings)
        .unwrap()
        .agent("reporter", agent, "You report.")
        .unwrap()
        .project_loop("triage", json!({"start": "ask", "steps": {"ask": {"type": "agent", "systemPrompt": "Triage."}}}))
        .unwrap();
    std::fs::create_dir_all(dir.path().join(".polpo/schedules")).unwrap();
    let mut file = json!({"timing": {"kind": "cron", "expression": "0 9 * * *", "timezone": "Europe/Rome"}});
    file["invocation"] = schedule;
    file["policy"] = json!({"maxConcurrency": 1});
    std::fs::write(dir.path().join(".polpo/schedules/s.json"), file.to_string()).unwrap();
    dir
}

async fn runs(dir: &TempDir, llm: &FakeLlm) -> Arc<RunManager> {
    polpo_llm::install_crypto_provider();
    let project = polpo_project::load_project(dir.path()).unwrap();
    let store = open_store(StoreKind::Sqlite, dir.path(), None, Arc::new(ManualClock::new(now()))).await.unwrap();
    let runtime =
        Arc::new(Runtime::new(Loaded::new(project).unwrap(), Providers::new(BTreeMap::new(), llm.openai_env()), store));
    RunManager::new(runtime, RunOptions::default())
}

#[tokio::test]
async fn a_task_schedule_creates_one_task_per_occurrence_through_the_task_store() {
    let llm = FakeLlm::start([]).await.unwrap();
    let dir = project(
        json!({"surface": "task", "agentName": "reporter", "title": "Triage inbox", "prompt": "Sort the inbox."}),
    );
    let runs = runs(&dir, &llm).await;
    let store = runs.runtime().store().clone();
    let s = support::scheduler(runs);

    let first = s.trigger("s", "k1").await.unwrap();
    let again = s.trigger("s", "k1").await.unwrap();
    assert_eq!(first.status, RunState::Succeeded, "{first:?}");
    let task_id = first.task_id.clone().unwrap();
    assert_eq!(again.task_id.as_deref(), Some(task_id.as_str()), "one key, one task");
    let task = store.tasks.get_task(&task_id).await.unwrap().unwrap().task;
    assert_eq!((task.assign_to.as_deref(), task.description.as_str()), (Some("reporter"), "Sort the inbox."));
    assert!(task.title.starts_with("Triage inbox (2026-07-28T10:00:00+02:00"), "{}", task.title);
    assert_eq!(format!("{:?}", task.status), "Pending");

    // Nobody runs the orchestrator here: the task stays unfinished, so it holds the one slot.
    let busy = s.trigger("s", "k2").await.unwrap();
    assert_eq!(busy.status, RunState::Skipped);
    assert_eq!(busy.error.unwrap().code, "max_concurrency");
    assert!(llm.requests().is_empty(), "creating a task asks no model");
}

#[tokio::test]
async fn a_loop_schedule_runs_the_loop_to_its_end() {
    let llm = FakeLlm::start([Turn::text("Triaged: 3 urgent.")]).await.unwrap();
    let dir = project(
        json!({"surface": "loop", "loopName": "triage", "agentName": "reporter", "input": {"prompt": "Triage."}}),
    );
    let runs = runs(&dir, &llm).await;
    let records = runs.runtime().store().records.clone();
    let s = support::scheduler(runs);

    let fired = s.trigger("s", "k1").await.unwrap();
    assert_eq!(fired.status, RunState::Running, "{fired:?}");
    let loop_run = fired.loop_run_id.clone().unwrap();
    s.settled().await;
    let done = s.trigger("s", "k1").await.unwrap();
    assert_eq!((done.status, done.loop_run_id.as_deref()), (RunState::Succeeded, Some(loop_run.as_str())));
    let stored = records.get_record(polpo_loops::LOOP_RUNS, &loop_run).await.unwrap().unwrap();
    assert_eq!(stored.value["status"], "completed");
    assert_eq!(stored.value["output"], "Triaged: 3 urgent.");
    assert_eq!(stored.value["request"]["metadata"]["scheduleId"], "s");
    assert_eq!(llm.requests().len(), 1, "the loop's one agent step asked the model once");
}

/// One request a receiver got: its head and body.
type Seen = Arc<Mutex<Vec<(String, String)>>>;

/// An HTTP receiver on 127.0.0.1 answering every request with `status`.
async fn receiver(status: u16) -> (String, Seen) {
    receiver_redirecting(status, None).await
}

/// [`receiver`], its answers carrying `location` when given (a redirect).
async fn receiver_redirecting(status: u16, location: Option<String>) -> (String, Seen) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let authority = listener.local_addr().unwrap().to_string();
    let seen: Seen = Arc::default();
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut raw = Vec::new();
            let mut buf = [0u8; 4096];
            let (head, body) = loop {
                let n = socket.read(&mut buf).await.unwrap();
                raw.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&raw).to_string();
                if let Some((head, body)) = text.split_once("\r\n\r\n") {
                    let length = head
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_owned())
                        })
                        .and_then(|v| v.parse::<usize>().ok())
                        .unwrap_or(0);
                    if body.len() >= length || n == 0 {
                        break (head.to_owned(), body.to_owned());
                    }
                }
            };
            log.lock().unwrap().push((head, body));
            let location = location.as_ref().map(|l| format!("location: {l}\r\n")).unwrap_or_default();
            let reply = format!("HTTP/1.1 {status} X\r\n{location}content-length: 0\r\nconnection: close\r\n\r\n");
            socket.write_all(reply.as_bytes()).await.unwrap();
        }
    });
    (authority, seen)
}

async fn webhook_scheduler(url: &str, exempt: &str, llm: &FakeLlm) -> (TempDir, Arc<Scheduler>) {
    webhook_scheduler_with(json!({}), url, exempt, llm).await
}

/// [`webhook_scheduler`] in a project with `settings`.
async fn webhook_scheduler_with(settings: Value, url: &str, exempt: &str, llm: &FakeLlm) -> (TempDir, Arc<Scheduler>) {
    let dir = project_with(settings, json!({"surface": "webhook", "url": url, "payload": {"report": "daily"}}));
    let runs = runs(&dir, llm).await;
    let mut targets = support::targets(&runs);
    if !exempt.is_empty() {
        targets.webhooks.private_allowlist.push(exempt.to_owned());
    }
    (dir, Scheduler::new(runs, targets))
}

#[tokio::test]
async fn a_webhook_is_refused_by_the_ssrf_guard_unless_its_target_is_exempt() {
    let llm = FakeLlm::start([]).await.unwrap();
    let (authority, seen) = receiver(204).await;

    let url = format!("http://{authority}/hook");
    for (target, code) in [(format!("https://{authority}/hook"), "ssrf_blocked"), (url.clone(), "insecure_url")] {
        let (_dir, guarded) = webhook_scheduler(&target, "", &llm).await;
        let refused = guarded.trigger("s", "k1").await.unwrap();
        assert_eq!(refused.status, RunState::Failed);
        assert_eq!(refused.error.unwrap().code, code, "{target}");
    }
    assert!(seen.lock().unwrap().is_empty(), "nothing was sent to the loopback address");

    let (_dir, allowed) = webhook_scheduler(&url, &authority, &llm).await;
    let sent = allowed.trigger("s", "k1").await.unwrap();
    assert_eq!(sent.status, RunState::Succeeded, "{sent:?}");
    assert_eq!(sent.result, Some(json!({"status": 204})));
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    let (head, body) = &seen[0];
    assert!(head.starts_with("POST /hook HTTP/1.1"), "{head}");
    let head = head.to_ascii_lowercase();
    assert!(head.contains("idempotency-key: schedule-s-key-k1"), "{head}");
    assert!(head.contains("x-polpo-schedule-id: s"), "{head}");
    assert_eq!(serde_json::from_str::<Value>(body).unwrap(), json!({"report": "daily"}));

    let (failing, _) = receiver(500).await;
    let (_dir, answered_500) = webhook_scheduler(&format!("http://{failing}/hook"), &failing, &llm).await;
    let failed = answered_500.trigger("s", "k1").await.unwrap();
    assert_eq!((failed.status, failed.error.unwrap().code.as_str()), (RunState::Failed, "webhook_failed"));
}

/// `settings.schedules.webhookAllowlist` restricts webhook targets to its hosts: the project
/// load (what `polpo validate` and `polpo serve` run) refuses a webhook schedule to an unlisted
/// host at the schedule's file and `/invocation/url`, and an entry that is not a bare host at
/// the setting's pointer; at fire time the SSRF guard enforces it on every hop, so a listed
/// receiver's redirect to an unlisted host is refused and never followed.
#[tokio::test]
async fn a_webhook_reaches_only_allowlisted_hosts() {
    let llm = FakeLlm::start([]).await.unwrap();
    let (other, other_seen) = receiver(204).await;
    let webhook = json!({"surface": "webhook", "url": format!("http://{other}/hook")});
    let refused =
        project_with(json!({"schedules": {"webhookAllowlist": ["hooks.example.com", "https://x.io/"]}}), webhook);
    let problems = polpo_project::load_project(refused.path()).unwrap_err();
    let found = |code: &str| {
        problems.iter().find(|p| p.code == code).map(|p| (p.file.clone().unwrap_or_default(), p.pointer.clone()))
    };
    let (file, pointer) = found("webhook_host_not_allowed").expect("the unlisted host is refused");
    assert!(file.ends_with("schedules/s.json") && pointer.as_deref() == Some("/invocation/url"), "{problems:?}");
    let (file, pointer) = found("invalid_value").expect("the bad entry is refused");
    let at = Some("/settings/schedules/webhookAllowlist/1");
    assert!(file.ends_with("project.json") && pointer.as_deref() == at, "{problems:?}");

    // 127.0.0.1 is listed; the receiver there redirects to `localhost`, which is not.
    let port = other.rsplit_once(':').unwrap().1;
    let (listed, listed_seen) = receiver_redirecting(307, Some(format!("http://localhost:{port}/hook"))).await;
    let settings = json!({"schedules": {"webhookAllowlist": ["127.0.0.1"]}});
    let (_dir, scheduler) =
        webhook_scheduler_with(settings.clone(), &format!("http://{listed}/hook"), &listed, &llm).await;
    let redirected = scheduler.trigger("s", "k1").await.unwrap();
    assert_eq!(redirected.status, RunState::Failed);
    assert_eq!(redirected.error.unwrap().code, "host_not_allowed");
    assert_eq!(listed_seen.lock().unwrap().len(), 1, "the listed host was asked");
    assert!(other_seen.lock().unwrap().is_empty(), "the redirect to an unlisted host was not followed");

    let (_dir, scheduler) = webhook_scheduler_with(settings, &format!("http://{other}/hook"), &other, &llm).await;
    let delivered = scheduler.trigger("s", "k1").await.unwrap();
    assert_eq!(delivered.status, RunState::Succeeded, "{delivered:?}");
    assert_eq!(other_seen.lock().unwrap().len(), 1);
}

/// A legacy mission-shaped schedule file loads (with its migration warning) and its fire
/// starts a run of its mission; a mission that is not there fails the fire with `not_found`
/// and says which, never silently dropped.
#[tokio::test]
async fn a_legacy_mission_schedule_starts_its_mission_or_says_why_not() {
    let llm = FakeLlm::start([]).await.unwrap();
    let dir = project(json!({"surface": "agent", "agentName": "reporter", "input": {"prompt": "Report."}}));
    let legacy = json!({"missionId": "weekly-review", "expression": "0 9 * * 1", "recurring": true});
    std::fs::write(dir.path().join(".polpo/schedules/s.json"), legacy.to_string()).unwrap();
    let runs = runs(&dir, &llm).await;
    let schedule = &runs.runtime().loaded().project.schedules["s"];
    assert!(schedule.legacy, "read as a legacy file");
    let scheduler = Scheduler::new(runs.clone(), support::targets(&runs));
    let fired = scheduler.trigger("s", "k1").await.unwrap();
    assert_eq!(fired.status, RunState::Failed);
    let error = fired.error.unwrap();
    assert_eq!(error.code, "not_found");
    assert!(error.message.contains("mission `weekly-review` was not started"), "{}", error.message);
    assert!(llm.requests().is_empty(), "no agent was asked");
}
