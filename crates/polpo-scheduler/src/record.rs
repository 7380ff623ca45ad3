//! What the scheduler keeps in the store's `RecordStore`: one schedule-run record per
//! occurrence (created only if absent: that creation is the claim that makes an occurrence
//! fire once across every server) and one cursor per schedule (where the last pass stopped).

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};

/// Collection prefix of a schedule's runs: `schedule-runs.<escaped id>`.
const RUNS_PREFIX: &str = "schedule-runs.";
/// Collection of cursors, one record per schedule.
pub const CURSORS: &str = "schedule-cursors";
/// Longest manual-trigger idempotency key.
pub const MAX_KEY_LEN: usize = 64;

/// Where a schedule-run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// Claimed by a server, its invocation not started yet.
    Claimed,
    /// Its invocation runs.
    Running,
    /// Its invocation finished with an answer.
    Succeeded,
    /// Its invocation could not start, or finished with an error.
    Failed,
    /// Later than the misfire grace, and the catch-up policy did not fire it.
    Missed,
    /// Not fired: `maxConcurrency` invocations of the schedule were running.
    Skipped,
}

/// A failure as a user sees it: a stable code and a sentence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunError {
    /// Stable snake_case code.
    pub code: String,
    /// Human sentence.
    pub message: String,
}

/// One occurrence of a schedule (or one manual trigger) and what came of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleRun {
    /// The schedule.
    pub schedule_id: String,
    /// The occurrence (for a manual trigger: when it was asked).
    pub scheduled_for: DateTime<Utc>,
    /// When the invocation was started (absent for missed and skipped occurrences).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fired_at: Option<DateTime<Utc>>,
    /// Where it stands.
    pub status: RunState,
    /// The engine's run id (an `agent` fire).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// The task a `task` fire created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// The loop run a `loop` fire started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loop_run_id: Option<String>,
    /// What a `webhook` fire got back: `{status}`, the HTTP status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    /// Why it failed or was skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RunError>,
    /// The lease owner id of the server that claimed it (or took it over).
    pub claimed_by: String,
    /// Until when the claimer holds a `claimed` record: past it, another server takes the
    /// occurrence over (its claimer died before starting it). Absent on older records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_until: Option<DateTime<Utc>>,
    /// The key of a manual trigger.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

/// A schedule's cursor: the last occurrence a pass looked at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    /// The instant.
    pub after: DateTime<Utc>,
}

/// Store ids are `[A-Za-z0-9._-]`: other bytes of a schedule id or key become `.xx`.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
            out.push(b as char);
        } else {
            out.push_str(&format!(".{b:02x}"));
        }
    }
    out
}

/// The collection holding a schedule's runs.
pub fn runs_collection(schedule_id: &str) -> String {
    format!("{RUNS_PREFIX}{}", escape(schedule_id))
}

/// The record id of an occurrence: its instant, so two servers name it alike.
pub fn occurrence_id(at: DateTime<Utc>) -> String {
    format!("at-{}", at.to_rfc3339_opts(SecondsFormat::Millis, true).replace(':', "-"))
}

/// The durable run id of schedule-run record `record_id`: named by the occurrence, so a server
/// taking a lapsed claim over finds the run its claimer already started instead of starting a
/// second one.
pub fn run_id(schedule_id: &str, record_id: &str) -> String {
    format!("schedule-{}-{record_id}", escape(schedule_id))
}

/// The record id of a manual trigger: its key.
pub fn trigger_id(key: &str) -> String {
    format!("key-{}", escape(key))
}
