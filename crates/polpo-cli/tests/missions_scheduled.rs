//! A mission with a `schedule`, through the real `polpo serve` and the strict fake model: one
//! set a few seconds ahead waits `scheduled`, survives a restart of its server before it is
//! due, then runs by itself and completes; a schedule that can never fire is refused with its
//! code and a pointer to `/schedule`, from the REST API and from `polpo missions create`; a
//! recurring mission's schedule also fires by hand, through the schedules' trigger route.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use polpo_testkit::{FakeLlm, Turn};
use serde_json::{Value, json};
use std::time::Duration;
use support::ServerProcess;

fn start(dir: &std::path::Path, llm: &FakeLlm) -> ServerProcess {
    let base = llm.base_url();
    ServerProcess::start("serve", dir, &[], &[("OPENAI_BASE_URL", base.as_str()), ("OPENAI_API_KEY", "sk-upstream")])
}

async fn mission(url: &str, id: &str) -> Value {
    let body: Value = reqwest::get(format!("{url}/api/v1/missions/{id}")).await.unwrap().json().await.unwrap();
    body["data"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_mission_survives_a_restart_and_runs_by_itself() {
    polpo_llm::install_crypto_provider();
    let llm = FakeLlm::start([Turn::text("Report written."), Turn::text("Done by hand.")]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    support::builder_project(dir.path(), json!({"storage": "file"}));
    let first = start(dir.path(), &llm);
    let client = reqwest::Client::new();
    let missions = format!("{}/api/v1/missions", first.url);
    let plan = |schedule: &str| {
        json!({"name": "nightly", "schedule": schedule,
               "data": {"tasks": [{"title": "Report", "description": "Write the report.", "assignTo": "builder"}]}})
    };

    for (schedule, code) in [("2020-01-01T00:00:00Z", "schedule_in_past"), ("61 * * * *", "invalid_cron")] {
        let refused = client.post(&missions).json(&plan(schedule)).send().await.unwrap();
        assert_eq!(refused.status(), 400);
        let body: Value = refused.json().await.unwrap();
        assert_eq!(body["problems"][0]["code"], code, "{body}");
        assert_eq!(body["problems"][0]["pointer"], "/schedule", "{body}");
    }

    let at = (chrono::Utc::now() + chrono::Duration::seconds(4)).to_rfc3339();
    let created = client.post(&missions).json(&plan(&at)).send().await.unwrap();
    assert_eq!(created.status(), 201);
    let created: Value = created.json().await.unwrap();
    let id = created["data"]["id"].as_str().unwrap().to_owned();
    assert_eq!(created["data"]["status"], "scheduled", "{created}");
    assert_eq!(created["data"]["scheduleId"], format!("mission-{id}"));
    assert!(created["data"]["nextOccurrenceAt"].is_string(), "{created}");
    drop(first); // SIGKILL, before the mission is due

    let second = start(dir.path(), &llm);
    if mission(&second.url, &id).await["status"] == "scheduled" {
        // Not due yet: the schedules listing shows the mission's schedule.
        let listed: Value =
            reqwest::get(format!("{}/api/v1/schedules", second.url)).await.unwrap().json().await.unwrap();
        assert!(listed["data"].as_array().unwrap().iter().any(|s| s["id"] == format!("mission-{id}")), "{listed}");
    }
    let done = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let m = mission(&second.url, &id).await;
            if matches!(m["status"].as_str(), Some("completed" | "failed" | "cancelled")) {
                return m;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the mission runs by itself once due");
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["executionCount"], 1);
    let report: Value =
        reqwest::get(format!("{}/api/v1/missions/{id}/report", second.url)).await.unwrap().json().await.unwrap();
    assert_eq!(report["data"]["tasks"][0]["status"], "done", "{report}");
    assert_eq!(report["data"]["tasks"][0]["outcomes"], json!([]), "{report}");
    let runs: Value =
        reqwest::get(format!("{}/api/v1/schedules/mission-{id}/runs", second.url)).await.unwrap().json().await.unwrap();
    let runs = runs["data"]["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "fired once: {runs:?}");
    assert_eq!(runs[0]["status"], "succeeded", "{runs:?}");
    assert_eq!(llm.requests().len(), 1, "one run of its one task");

    let second_missions = format!("{}/api/v1/missions", second.url);
    let plan_file = dir.path().join("plan.json");
    std::fs::write(&plan_file, json!({"tasks": [{"title": "T", "description": "D"}]}).to_string()).unwrap();
    let out = support::polpo(&["missions", "create", "later", "--plan", plan_file.to_str().unwrap(), "--schedule"])
        .args(["61 * * * *", "--url", &second.url])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("invalid_cron") || stderr.contains("/schedule"), "{stderr}");
    let out = support::polpo(&["missions", "create", "weekly", "--plan", plan_file.to_str().unwrap()])
        .args(["--schedule", "0 9 * * 1", "--url", &second.url])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("recurring"), "{}", String::from_utf8_lossy(&out.stdout));

    // A draft is given a schedule later; a waiting mission keeps its kind.
    let draft = json!({"name": "later", "data": {"tasks": [{"title": "T", "description": "D"}]}});
    let draft: Value = client.post(&second_missions).json(&draft).send().await.unwrap().json().await.unwrap();
    let url = format!("{second_missions}/{}", draft["data"]["id"].as_str().unwrap());
    let patched = client.patch(&url).json(&json!({"schedule": "0 9 * * 1"})).send().await.unwrap();
    assert_eq!(patched.status(), 200);
    let patched: Value = patched.json().await.unwrap();
    assert_eq!(patched["data"]["status"], "recurring", "{patched}");
    let tomorrow = (chrono::Utc::now() + chrono::Duration::days(1)).to_rfc3339();
    let once = client.patch(&url).json(&json!({"schedule": tomorrow})).send().await.unwrap();
    assert_eq!(once.status(), 409, "a recurring mission does not become a one-shot one");

    // Its schedule fires by hand too, once per idempotency key.
    let trigger = format!("{}/api/v1/schedules/mission-{}/trigger", second.url, draft["data"]["id"].as_str().unwrap());
    let fired: Value =
        client.post(&trigger).json(&json!({"idempotencyKey": "k1"})).send().await.unwrap().json().await.unwrap();
    assert_eq!(fired["data"]["status"], "succeeded", "{fired}");
    assert_eq!(fired["data"]["result"]["executionCount"], 1, "{fired}");
    let again: Value =
        client.post(&trigger).json(&json!({"idempotencyKey": "k1"})).send().await.unwrap().json().await.unwrap();
    assert_eq!(again["data"], fired["data"], "the same key answers the first trigger");
    let missing = client.post(format!("{}/api/v1/schedules/mission-nope/trigger", second.url)).send().await.unwrap();
    assert_eq!(missing.status(), 404);
}
