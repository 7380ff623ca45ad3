//! A server that dies between claiming an occurrence and starting it: after the claim's
//! lease another server takes it over and fires it once; when the dead server had already
//! started the occurrence's run, the taker follows that run instead of asking the model again.
//! Real SQLite and PostgreSQL stores sharing a `ManualClock`; the model is the strict fake.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod support;

use chrono::{DateTime, Duration, Utc};
use polpo_engine::meter::Meter;
use polpo_engine::runs::RunManager;
use polpo_engine::{ChatInput, Surface};
use polpo_scheduler::record::{occurrence_id, run_id, runs_collection};
use polpo_scheduler::{RunState, ScheduleRun, Scheduler};
use polpo_store::{ManualClock, PageRequest, StoreKind};
use polpo_testkit::pg::PgSchema;
use polpo_testkit::{FakeLlm, Turn};
use serde_json::json;
use std::sync::Arc;
use tempfile::TempDir;

/// The one occurrence of the `report` schedule.
fn occurrence() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-03-29T01:00:00Z").unwrap().with_timezone(&Utc)
}

fn project() -> TempDir {
    let schedule = json!({
        "timing": {"kind": "once", "at": "2026-03-29T01:00:00Z"},
        "invocation": {"surface": "agent", "agentName": "reporter", "input": {"prompt": "Report."}}
    });
    common::project(&[("report", schedule)])
}

/// What the dead server left: its claim of the occurrence, leased for five minutes.
async fn dead_claim(dead: &RunManager) {
    let run = ScheduleRun {
        schedule_id: "report".into(),
        scheduled_for: occurrence(),
        fired_at: None,
        status: RunState::Claimed,
        run_id: None,
        task_id: None,
        loop_run_id: None,
        result: None,
        error: None,
        claimed_by: dead.owner().to_owned(),
        lease_until: Some(occurrence() + Duration::minutes(5)),
        idempotency_key: None,
    };
    let value = serde_json::to_value(&run).unwrap();
    let records = &dead.runtime().store().records;
    records.put_record(&runs_collection("report"), &occurrence_id(occurrence()), value, Some(0)).await.unwrap();
}

/// The surviving server passes before, at and after the claim's lease; returns what it fired
/// at each pass and the occurrence's record in the end.
async fn survive(survivor: &Arc<Scheduler>, clock: &ManualClock) -> (Vec<usize>, Vec<ScheduleRun>) {
    let mut fired = Vec::new();
    for step in [Duration::zero(), Duration::seconds(10), Duration::minutes(5)] {
        clock.advance(step);
        fired.push(survivor.tick().await.unwrap().fired);
        survivor.settled().await;
    }
    (fired, survivor.runs("report", &PageRequest::first(10)).await.unwrap().items)
}

async fn a_lapsed_claim_is_taken_over_and_fired_once(kind: StoreKind, url: Option<&str>) {
    polpo_llm::install_crypto_provider();
    let llm = FakeLlm::start([Turn::text("reported")]).await.unwrap();
    let dir = project();
    let clock = Arc::new(ManualClock::new(occurrence() - Duration::seconds(10)));
    let dead = common::runs(&dir, kind, url, &clock, &llm).await;
    let survivor = support::scheduler(common::runs(&dir, kind, url, &clock, &llm).await);
    dead_claim(&dead).await;
    drop(dead);

    let (fired, records) = survive(&survivor, &clock).await;
    assert_eq!(fired, [0, 0, 1], "nothing while the dead claim is leased, one fire after");
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].status, RunState::Succeeded, "{records:?}");
    assert_eq!(records[0].run_id.as_deref(), Some(run_id("report", &occurrence_id(occurrence())).as_str()));
    assert_eq!(llm.requests().len(), 1, "the model was asked once");
    assert_eq!(survivor.tick().await.unwrap().fired, 0, "a finished occurrence is not taken over again");
}

async fn a_claim_whose_run_started_is_followed(kind: StoreKind, url: Option<&str>) {
    polpo_llm::install_crypto_provider();
    let llm = FakeLlm::start([Turn::text("reported by the dead server")]).await.unwrap();
    let dir = project();
    let clock = Arc::new(ManualClock::new(occurrence() - Duration::seconds(10)));
    let dead = common::runs(&dir, kind, url, &clock, &llm).await;
    let survivor = support::scheduler(common::runs(&dir, kind, url, &clock, &llm).await);
    dead_claim(&dead).await;
    // The dead server got as far as starting the occurrence's run, not recording it.
    let mut input = ChatInput::new("reporter", vec![polpo_core::message::Message::user("Report.")]);
    input.surface = Surface::Schedule;
    input.outlive_caller = true;
    input.run_id = Some(run_id("report", &occurrence_id(occurrence())));
    let mut invoked = dead.invoke(input, Meter::start()).await.unwrap();
    while invoked.next().await.is_some() {}
    drop(dead);

    let (fired, records) = survive(&survivor, &clock).await;
    assert_eq!(fired, [0, 0, 1]);
    assert_eq!(records[0].status, RunState::Succeeded, "{records:?}");
    assert_eq!(records[0].run_id.as_deref(), Some(run_id("report", &occurrence_id(occurrence())).as_str()));
    assert_eq!(llm.requests().len(), 1, "the started run was followed, not run again");
}

#[tokio::test]
async fn sqlite_a_lapsed_claim_is_taken_over_and_fired_once() {
    a_lapsed_claim_is_taken_over_and_fired_once(StoreKind::Sqlite, None).await;
}

#[tokio::test]
async fn sqlite_a_claim_whose_run_started_is_followed() {
    a_claim_whose_run_started_is_followed(StoreKind::Sqlite, None).await;
}

#[tokio::test]
async fn postgres_a_lapsed_claim_is_taken_over_and_fired_once() {
    let schema = PgSchema::create().await.unwrap();
    a_lapsed_claim_is_taken_over_and_fired_once(StoreKind::Postgres, Some(&schema.url())).await;
    schema.drop_schema().await.unwrap();
}

#[tokio::test]
async fn postgres_a_claim_whose_run_started_is_followed() {
    let schema = PgSchema::create().await.unwrap();
    a_claim_whose_run_started_is_followed(StoreKind::Postgres, Some(&schema.url())).await;
    schema.drop_schema().await.unwrap();
}
