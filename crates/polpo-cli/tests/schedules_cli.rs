//! `polpo schedules list|next` on a real project folder: next occurrences in the schedule's
//! time zone and in UTC, and the error for an unknown schedule; `trigger|pause|runs` against a
//! real `polpo serve`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use polpo_testkit::{FakeLlm, Turn};
use serde_json::Value;
use std::process::{Command, Output, Stdio};
use support::ServerProcess;

fn polpo(cwd: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_polpo")).args(args).current_dir(cwd).stdin(Stdio::null()).output().unwrap()
}

fn write_project(dir: &std::path::Path) {
    let files = [
        (".polpo/project.json", r#"{"schemaVersion": 2}"#),
        (".polpo/agents/reporter/agent.json", r#"{"model": "openai/gpt-4o-mini"}"#),
        (".polpo/agents/reporter/instructions.md", "Report."),
        (
            ".polpo/schedules/daily.json",
            r#"{"timing": {"kind": "cron", "expression": "0 9 * * *", "timezone": "Europe/Rome"},
                "invocation": {"surface": "agent", "agentName": "reporter", "input": {"prompt": "Report."}}}"#,
        ),
    ];
    for (path, text) in files {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
}

#[test]
fn next_lists_occurrences_in_the_zone_and_in_utc() {
    let dir = tempfile::tempdir().unwrap();
    write_project(dir.path());
    let out = polpo(dir.path(), &["schedules", "next", "daily", "--count", "3"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<String> = String::from_utf8(out.stdout).unwrap().lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    for line in &lines {
        // 09:00 in Rome is 08:00 UTC in winter (+01:00) and 07:00 UTC in summer (+02:00).
        let winter = line.contains("T09:00:00+01:00 (") && line.ends_with("T08:00:00Z)");
        let summer = line.contains("T09:00:00+02:00 (") && line.ends_with("T07:00:00Z)");
        assert!(winter || summer, "{line}");
    }
    let list = polpo(dir.path(), &["schedules", "list"]);
    let text = String::from_utf8(list.stdout).unwrap();
    assert!(text.starts_with("daily\tactive\tcron '0 9 * * *' Europe/Rome\tagent\tnext "), "{text}");
    let validate = String::from_utf8(polpo(dir.path(), &["validate"]).stdout).unwrap();
    assert!(validate.contains("schedule daily: next 20"), "{validate}");
    let missing = polpo(dir.path(), &["schedules", "next", "ghost"]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("schedule_not_found"));
}

fn json_of(out: &Output) -> Value {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test]
async fn trigger_pause_and_runs_go_through_the_server() {
    let llm = FakeLlm::start([Turn::text("Reported.")]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_project(dir.path());
    std::fs::write(dir.path().join(".polpo/agents/reporter/agent.json"), r#"{"model": "openai/fake-model"}"#).unwrap();
    let base = llm.base_url();
    let server = ServerProcess::start(
        "serve",
        dir.path(),
        &[],
        &[("OPENAI_BASE_URL", base.as_str()), ("OPENAI_API_KEY", "sk-upstream")],
    );
    let url = server.url.clone();
    let cli = |args: &[&str]| {
        let mut all: Vec<&str> = vec!["schedules"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--url", &url]);
        support::polpo(&all).current_dir(dir.path()).stdin(Stdio::null()).output().unwrap()
    };
    let first = json_of(&cli(&["trigger", "daily", "--key", "k1"]));
    let again = json_of(&cli(&["trigger", "daily", "--key", "k1"]));
    assert_eq!(first["runId"], again["runId"], "one key, one run");
    let runs = json_of(&cli(&["runs", "daily"]));
    assert_eq!(runs["runs"].as_array().unwrap().len(), 1);

    let stale = cli(&["pause", "daily", "--revision", "3"]);
    assert!(!stale.status.success());
    assert!(String::from_utf8_lossy(&stale.stderr).contains("conflict"), "{}", String::from_utf8_lossy(&stale.stderr));
    let paused = json_of(&cli(&["pause", "daily", "--revision", "0"]));
    assert_eq!((paused["status"].as_str(), paused["revision"].as_u64()), (Some("paused"), Some(1)));
}

#[test]
fn migrate_rewrites_legacy_files_as_v2_and_a_dry_run_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    write_project(dir.path());
    let legacy = r#"{"missionId": "m1", "expression": "0 8 * * 1", "recurring": true, "timezone": "Europe/Rome"}"#;
    let path = dir.path().join(".polpo/schedules/weekly.json");
    std::fs::write(&path, legacy).unwrap();
    let validate = polpo(dir.path(), &["validate"]);
    assert!(
        String::from_utf8_lossy(&validate.stdout).contains("legacy_schedule")
            || String::from_utf8_lossy(&validate.stderr).contains("legacy_schedule"),
        "a migration warning"
    );

    let dry = polpo(dir.path(), &["schedules", "migrate", "--dry-run"]);
    assert!(dry.status.success(), "{}", String::from_utf8_lossy(&dry.stderr));
    let plan = String::from_utf8(dry.stdout).unwrap();
    assert!(plan.contains("--- .polpo/schedules/weekly.json"), "{plan}");
    assert!(plan.contains(r#"-{"missionId": "m1""#), "{plan}");
    assert!(plan.contains(r#"+    "surface": "legacy_mission","#), "{plan}");
    assert!(plan.contains("nothing written"), "{plan}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), legacy, "the dry run wrote nothing");

    let done = polpo(dir.path(), &["schedules", "migrate"]);
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    let v2: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(v2["timing"], serde_json::json!({"kind": "cron", "expression": "0 8 * * 1", "timezone": "Europe/Rome"}));
    assert_eq!(v2["invocation"], serde_json::json!({"surface": "legacy_mission", "missionId": "m1"}));
    let validate = polpo(dir.path(), &["validate"]);
    let all = format!("{}{}", String::from_utf8_lossy(&validate.stdout), String::from_utf8_lossy(&validate.stderr));
    assert!(!all.contains("legacy_schedule"), "{all}");
    assert!(all.contains("schedule weekly: next 20"), "{all}");
    let again = String::from_utf8(polpo(dir.path(), &["schedules", "migrate"]).stdout).unwrap();
    assert!(again.contains("nothing to migrate"), "{again}");
}

/// A schedule file added while `polpo dev` runs fires at its time: the reload wakes the
/// scheduler, which otherwise sleeps a whole pass (30 s) before it reads the project again.
#[tokio::test]
async fn dev_fires_a_schedule_added_while_it_runs_at_its_time() {
    polpo_llm::install_crypto_provider();
    let llm = FakeLlm::start([Turn::text("Reported soon.")]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_project(dir.path());
    std::fs::write(dir.path().join(".polpo/agents/reporter/agent.json"), r#"{"model": "openai/fake-model"}"#).unwrap();
    let base = llm.base_url();
    let mut server =
        ServerProcess::start("dev", dir.path(), &[], &[("OPENAI_BASE_URL", base.as_str()), ("OPENAI_API_KEY", "sk")]);
    let at = (chrono::Utc::now() + chrono::Duration::seconds(3)).to_rfc3339();
    let soon = serde_json::json!({"timing": {"kind": "once", "at": at},
        "invocation": {"surface": "agent", "agentName": "reporter", "input": {"prompt": "Report now."}}});
    std::fs::write(dir.path().join(".polpo/schedules/soon.json"), soon.to_string()).unwrap();
    server.wait_for("reloaded the project");
    let runs = format!("{}/api/v1/schedules/soon/runs", server.url);
    let fired = tokio::time::timeout(std::time::Duration::from_secs(20), async {
        loop {
            let page: Value = reqwest::get(&runs).await.unwrap().json().await.unwrap();
            if let Some(run) =
                page["data"]["runs"].as_array().and_then(|r| r.first()).filter(|r| r["status"] == "succeeded")
            {
                return run.clone();
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the new schedule fired well before the scheduler's next full pass");
    assert_eq!(fired["scheduledFor"].as_str().map(|s| s.starts_with(&at[..19])), Some(true), "{fired}");
    let asked = llm.requests();
    assert_eq!(asked.len(), 1);
    assert!(asked[0].body.to_string().contains("Report now."), "the schedule's prompt reached the model");
}
