//! Missions with a `schedule`, fired by the scheduler against a real PostgreSQL shared by two
//! servers and the strict fake model: a recurring mission starts one run per occurrence
//! whichever server passes first, each run a fresh group of its plan's tasks; it goes back to
//! `recurring` when a run is over, and once aborted it has no schedule left to fire. Time is
//! a `ManualClock` shared by the stores, so every occurrence is exact.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod support;

use chrono::{DateTime, Duration, Utc};
use polpo_core::tasks::{Mission, MissionStatus};
use polpo_scheduler::{RunState, Scheduler};
use polpo_store::{ManualClock, PageRequest, StoreKind, TaskFilter};
use polpo_testkit::pg::PgSchema;
use polpo_testkit::{FakeLlm, Turn};
use serde_json::json;
use std::sync::Arc;

fn start() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-07-28T08:00:00Z").unwrap().with_timezone(&Utc)
}

/// A draft mission `name` with `schedule` whose plan is one task for the reporter.
fn reporting(name: &str, schedule: &str) -> Mission {
    serde_json::from_value(json!({
        "id": "", "name": name, "status": "draft", "schedule": schedule,
        "data": {"tasks": [{"title": "Report", "description": "Report.", "assignTo": "reporter"}]},
        "createdAt": start(), "updatedAt": start()
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_recurring_mission_runs_once_per_occurrence_across_servers_until_aborted() {
    polpo_llm::install_crypto_provider();
    let llm = FakeLlm::start(std::iter::repeat_n(Turn::text("Reported."), 4)).await.unwrap();
    let dir = common::project(&[]);
    let schema = PgSchema::create().await.unwrap();
    let clock = Arc::new(ManualClock::new(start()));
    let (runs_a, runs_b) = (
        common::runs(&dir, StoreKind::Postgres, Some(&schema.url()), &clock, &llm).await,
        common::runs(&dir, StoreKind::Postgres, Some(&schema.url()), &clock, &llm).await,
    );
    let targets = support::targets(&runs_a);
    let orchestrator = targets.orchestrator.clone();
    let a = Scheduler::new(runs_a.clone(), targets);
    let b = support::scheduler(runs_b);

    let id = orchestrator.create_mission(reporting("daily", "* * * * * *")).await.unwrap().mission.id;
    assert_eq!(orchestrator.mission(&id).await.unwrap().mission.status, MissionStatus::Recurring);
    let tick = || async {
        let (x, y) = tokio::join!(a.tick(), b.tick());
        x.unwrap().fired + y.unwrap().fired
    };
    let store = runs_a.runtime().store().clone();
    let tasks = || async {
        let filter = TaskFilter { mission_id: Some(id.clone()), ..Default::default() };
        let mut t = store.tasks.list_tasks(&filter, &PageRequest::first(100)).await.unwrap().items;
        t.sort_by_key(|x| x.task.created_at);
        t.into_iter().map(|t| (t.task.group.unwrap_or_default(), t.task.status)).collect::<Vec<_>>()
    };

    assert_eq!(tick().await, 0, "nothing before its first occurrence");
    clock.advance(Duration::seconds(1));
    assert_eq!(tick().await, 1, "one server fired the occurrence, the other saw its claim");
    let running = orchestrator.mission(&id).await.unwrap().mission;
    assert_eq!((running.status, running.execution_count), (MissionStatus::Active, 1));
    clock.advance(Duration::seconds(1));
    assert_eq!(tick().await, 0, "a running mission is not fired again");

    orchestrator.run_until_idle().await.unwrap();
    let rearmed = orchestrator.mission(&id).await.unwrap().mission;
    assert_eq!(rearmed.status, MissionStatus::Recurring, "its run is over; it waits for the next occurrence");
    let report = orchestrator.mission_report(&id).await.unwrap();
    assert!(report.all_passed, "{report:?}");

    clock.advance(Duration::seconds(1));
    assert_eq!(tick().await, 1);
    let second = orchestrator.mission(&id).await.unwrap().mission;
    assert_eq!((second.status, second.execution_count), (MissionStatus::Active, 2));
    use polpo_core::tasks::TaskStatus::{Done, Pending};
    assert_eq!(tasks().await, vec![("daily".to_owned(), Done), ("daily #2".to_owned(), Pending)]);

    orchestrator.abort_mission(&id).await.unwrap();
    clock.advance(Duration::seconds(1));
    assert_eq!(tick().await, 0, "an aborted mission has no schedule");
    let schedule = polpo_orchestrator::mission_schedule_id(&id);
    let runs = a.runs(&schedule, &PageRequest::first(100)).await.unwrap().items;
    let fired: Vec<_> = runs.iter().filter(|r| r.status == RunState::Succeeded).collect();
    assert_eq!(fired.len(), 2, "{runs:?}");
    assert!(fired.iter().all(|r| r.result.as_ref().unwrap()["missionId"] == json!(id)), "{fired:?}");
    assert!(a.mission_schedules().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_missions_schedule_fires_on_a_manual_trigger_once_per_key() {
    polpo_llm::install_crypto_provider();
    let llm = FakeLlm::start([Turn::text("Reported.")]).await.unwrap();
    let dir = common::project(&[]);
    let clock = Arc::new(ManualClock::new(start()));
    let runs = common::runs(&dir, StoreKind::Sqlite, None, &clock, &llm).await;
    let targets = support::targets(&runs);
    let orchestrator = targets.orchestrator.clone();
    let scheduler = Scheduler::new(runs, targets);

    let id = orchestrator.create_mission(reporting("launch", "2026-08-01T09:00:00Z")).await.unwrap().mission.id;
    let schedule = polpo_orchestrator::mission_schedule_id(&id);
    assert!(scheduler.schedule(&schedule, true).await.unwrap().is_some(), "a waiting mission's schedule is found");

    let first = scheduler.trigger(&schedule, "now-please").await.unwrap();
    assert_eq!(first.status, RunState::Succeeded, "{first:?}");
    assert_eq!(first.result.as_ref().unwrap()["missionId"], json!(id));
    let started = orchestrator.mission(&id).await.unwrap().mission;
    assert_eq!((started.status, started.execution_count), (MissionStatus::Active, 1), "fired days early, by hand");

    let again = scheduler.trigger(&schedule, "now-please").await.unwrap();
    assert_eq!(again, first, "the same key answers the first trigger's run");
    assert_eq!(orchestrator.mission(&id).await.unwrap().mission.execution_count, 1, "and starts nothing");
    let refused = scheduler.trigger(&schedule, "another-key").await.unwrap_err();
    assert_eq!(refused.code(), "schedule_not_found", "a running mission waits for nothing: no schedule to fire");
    assert_eq!(scheduler.trigger("mission-nope", "k").await.unwrap_err().code(), "schedule_not_found");
}
