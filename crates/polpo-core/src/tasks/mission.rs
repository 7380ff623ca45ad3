//! Missions (inventory §5.3): a named group of tasks with a lifecycle of its own and the
//! flow control between its tasks — checkpoints (wait for a person), delays (wait for a
//! time) and quality gates (wait for a score) — all keyed by task titles.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::duration::{DurationError, parse_duration};

/// Where a mission is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MissionStatus {
    /// Written, not started.
    Draft,
    /// Starts once, when its schedule fires.
    Scheduled,
    /// Starts again each time its schedule fires, until its end date.
    Recurring,
    /// Its tasks are running.
    Active,
    /// Stopped at a checkpoint until someone resumes it.
    Paused,
    /// Finished, quality met. Terminal.
    Completed,
    /// Finished below the quality threshold. Terminal.
    Failed,
    /// Aborted. Terminal.
    Cancelled,
}

impl MissionStatus {
    /// Every status.
    pub const ALL: [MissionStatus; 8] = [
        MissionStatus::Draft,
        MissionStatus::Scheduled,
        MissionStatus::Recurring,
        MissionStatus::Active,
        MissionStatus::Paused,
        MissionStatus::Completed,
        MissionStatus::Failed,
        MissionStatus::Cancelled,
    ];

    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            MissionStatus::Draft => "draft",
            MissionStatus::Scheduled => "scheduled",
            MissionStatus::Recurring => "recurring",
            MissionStatus::Active => "active",
            MissionStatus::Paused => "paused",
            MissionStatus::Completed => "completed",
            MissionStatus::Failed => "failed",
            MissionStatus::Cancelled => "cancelled",
        }
    }

    /// Parse the stored spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// Completed, failed and cancelled missions never change again (a failed mission's
    /// tasks are retried by resuming a new run of it, not by reviving it).
    pub fn is_terminal(self) -> bool {
        matches!(self, MissionStatus::Completed | MissionStatus::Failed | MissionStatus::Cancelled)
    }
}

impl std::fmt::Display for MissionStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A group of tasks run together, with its lifecycle and flow control.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Mission {
    /// Stable id, made by the store.
    pub id: String,
    /// `mission-N` or a custom name; also the `group` of its tasks.
    pub name: String,
    /// The plan: tasks to create, team (volatile agents …), kept as given until the
    /// orchestrator reads it.
    #[serde(default)]
    pub data: Value,
    /// The prompt the plan was made from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// Where it is in its life.
    pub status: MissionStatus,
    /// When it should be finished by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<DateTime<Utc>>,
    /// When it starts: a cron expression or an ISO instant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    /// When a recurring mission stops recurring.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_date: Option<DateTime<Utc>>,
    /// Average score (1–5) the mission must reach to complete; the project default otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quality_threshold: Option<f64>,
    /// Notification rules, kept as given until notifications exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notifications: Option<Value>,
    /// Stops that wait for a person.
    #[serde(default)]
    pub checkpoints: Vec<MissionCheckpoint>,
    /// Stops that wait for a time.
    #[serde(default)]
    pub delays: Vec<MissionDelay>,
    /// Stops that wait for a score.
    #[serde(default)]
    pub quality_gates: Vec<QualityGate>,
    /// How many times it has started (recurring missions start many times).
    #[serde(default)]
    pub execution_count: u32,
    /// The end user it belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
}

impl Mission {
    /// Check what the store cannot: every delay's duration parses.
    pub fn validate(&self) -> Result<(), DurationError> {
        self.delays.iter().try_for_each(|d| d.span().map(drop))
    }
}

/// Pause the mission after some tasks until someone resumes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MissionCheckpoint {
    /// Checkpoint name.
    pub name: String,
    /// Titles of the tasks that must be terminal for the checkpoint to be reached.
    #[serde(default)]
    pub after_tasks: Vec<String>,
    /// Titles of the tasks that wait until it is resumed.
    #[serde(default)]
    pub blocks_tasks: Vec<String>,
    /// Where to announce it.
    #[serde(default)]
    pub notify_channels: Vec<String>,
    /// What to tell the person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Wait a fixed time after some tasks, then go on by itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MissionDelay {
    /// Delay name.
    pub name: String,
    /// Titles of the tasks whose end starts the timer (all must be terminal).
    #[serde(default)]
    pub after_tasks: Vec<String>,
    /// Titles of the tasks that wait for the timer.
    #[serde(default)]
    pub blocks_tasks: Vec<String>,
    /// How long, as an ISO-8601 duration (`PT2H`).
    pub duration: String,
    /// What to announce.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl MissionDelay {
    /// The delay's length.
    pub fn span(&self) -> Result<std::time::Duration, DurationError> {
        parse_duration(&self.duration)
    }

    /// When a timer started at `started` expires.
    pub fn expires_at(&self, started: DateTime<Utc>) -> Result<DateTime<Utc>, DurationError> {
        let span = self.span()?;
        // `parse_duration` caps spans at 100 years, which always converts and adds.
        Ok(started + chrono::Duration::from_std(span).unwrap_or_default())
    }
}

/// Block some tasks until earlier ones reach a score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QualityGate {
    /// Gate name.
    pub name: String,
    /// Titles of the tasks whose scores are judged.
    #[serde(default)]
    pub after_tasks: Vec<String>,
    /// Titles of the tasks that wait for the gate.
    #[serde(default)]
    pub blocks_tasks: Vec<String>,
    /// Lowest average score (1–5) that passes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_score: Option<f64>,
    /// Every judged task must have passed its assessment.
    #[serde(default)]
    pub require_all_passed: bool,
    /// An extra condition, kept as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
}

/// Something that happens to a mission.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum MissionEvent {
    /// `draft → scheduled`: a one-off schedule was set.
    Schedule,
    /// `draft → recurring`: a repeating schedule was set.
    Recur,
    /// `draft | scheduled | recurring → active`: executed by hand or its schedule fired.
    /// Counts an execution.
    Execute,
    /// `active → paused`: a checkpoint was reached.
    Pause,
    /// `paused → active`: someone resumed it.
    Resume,
    /// `active → completed | failed`: all tasks are terminal. Completed when every task
    /// passed and the average score reaches the mission's threshold (else `default_threshold`).
    Finish {
        /// Every task passed its assessment.
        all_passed: bool,
        /// The tasks' average score, when any was scored.
        avg_score: Option<f64>,
        /// The project's threshold, for missions without their own.
        default_threshold: f64,
    },
    /// `recurring → completed`: its end date passed.
    Expire,
    /// `active | paused | scheduled | recurring → cancelled`: aborted.
    Cancel,
}

impl MissionEvent {
    /// The event's snake_case name.
    pub fn name(&self) -> &'static str {
        match self {
            MissionEvent::Schedule => "schedule",
            MissionEvent::Recur => "recur",
            MissionEvent::Execute => "execute",
            MissionEvent::Pause => "pause",
            MissionEvent::Resume => "resume",
            MissionEvent::Finish { .. } => "finish",
            MissionEvent::Expire => "expire",
            MissionEvent::Cancel => "cancel",
        }
    }
}

/// Every allowed mission status change, `(from, to)`.
pub const MISSION_TRANSITIONS: &[(MissionStatus, MissionStatus)] = &[
    (MissionStatus::Draft, MissionStatus::Scheduled),
    (MissionStatus::Draft, MissionStatus::Recurring),
    (MissionStatus::Draft, MissionStatus::Active),
    (MissionStatus::Scheduled, MissionStatus::Active),
    (MissionStatus::Recurring, MissionStatus::Active),
    (MissionStatus::Recurring, MissionStatus::Completed),
    (MissionStatus::Active, MissionStatus::Paused),
    (MissionStatus::Paused, MissionStatus::Active),
    (MissionStatus::Active, MissionStatus::Completed),
    (MissionStatus::Active, MissionStatus::Failed),
    (MissionStatus::Active, MissionStatus::Cancelled),
    (MissionStatus::Paused, MissionStatus::Cancelled),
    (MissionStatus::Scheduled, MissionStatus::Cancelled),
    (MissionStatus::Recurring, MissionStatus::Cancelled),
];

/// Why a mission event does not apply. One code: `invalid_transition`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("mission cannot take `{event}` while {from}")]
pub struct MissionTransitionError {
    /// The mission's status.
    pub from: MissionStatus,
    /// The event's name.
    pub event: &'static str,
}

impl MissionTransitionError {
    /// Stable snake_case code.
    pub fn code(&self) -> &'static str {
        "invalid_transition"
    }
}

/// Apply `event` to `mission` at `now`: the mission after it, or why it cannot happen.
pub fn transition_mission(
    mission: &Mission,
    event: &MissionEvent,
    now: DateTime<Utc>,
) -> Result<Mission, MissionTransitionError> {
    use MissionStatus as S;
    let mut next = mission.clone();
    let to = match (mission.status, event) {
        (S::Draft, MissionEvent::Schedule) => S::Scheduled,
        (S::Draft, MissionEvent::Recur) => S::Recurring,
        (S::Draft | S::Scheduled | S::Recurring, MissionEvent::Execute) => {
            next.execution_count += 1;
            S::Active
        }
        (S::Active, MissionEvent::Pause) => S::Paused,
        (S::Paused, MissionEvent::Resume) => S::Active,
        (S::Active, MissionEvent::Finish { all_passed, avg_score, default_threshold }) => {
            let threshold = mission.quality_threshold.unwrap_or(*default_threshold);
            if *all_passed && avg_score.is_none_or(|s| s >= threshold) { S::Completed } else { S::Failed }
        }
        (S::Recurring, MissionEvent::Expire) => S::Completed,
        (S::Active | S::Paused | S::Scheduled | S::Recurring, MissionEvent::Cancel) => S::Cancelled,
        _ => return Err(MissionTransitionError { from: mission.status, event: event.name() }),
    };
    next.status = to;
    next.updated_at = now;
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t0() -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000, 0).unwrap_or_default()
    }

    fn mission(status: MissionStatus) -> Mission {
        serde_json::from_value(serde_json::json!({
            "id": "m1", "name": "mission-1", "status": status,
            "createdAt": "2026-01-01T00:00:00Z", "updatedAt": "2026-01-01T00:00:00Z"
        }))
        .unwrap()
    }

    fn event() -> impl Strategy<Value = MissionEvent> {
        prop_oneof![
            Just(MissionEvent::Schedule),
            Just(MissionEvent::Recur),
            Just(MissionEvent::Execute),
            Just(MissionEvent::Pause),
            Just(MissionEvent::Resume),
            (any::<bool>(), prop::option::of(1.0f64..5.0), 1.0f64..5.0).prop_map(
                |(all_passed, avg_score, default_threshold)| MissionEvent::Finish {
                    all_passed,
                    avg_score,
                    default_threshold
                }
            ),
            Just(MissionEvent::Expire),
            Just(MissionEvent::Cancel),
        ]
    }

    proptest! {
        /// No event sequence makes a change outside the table or leaves a terminal status,
        /// and executions are counted once per start.
        #[test]
        fn missions_stay_in_their_table(events in prop::collection::vec(event(), 0..40)) {
            let mut m = mission(MissionStatus::Draft);
            for e in &events {
                if let Ok(next) = transition_mission(&m, e, t0()) {
                    prop_assert!(MISSION_TRANSITIONS.contains(&(m.status, next.status)), "{:?} -> {:?}", m.status, next.status);
                    prop_assert!(!m.status.is_terminal());
                    prop_assert_eq!(next.execution_count, m.execution_count + u32::from(matches!(e, MissionEvent::Execute)));
                    m = next;
                }
            }
        }
    }

    #[test]
    fn finishing_weighs_the_quality_threshold() {
        let mut active = mission(MissionStatus::Active);
        let finish = |all_passed, avg_score| MissionEvent::Finish { all_passed, avg_score, default_threshold: 3.0 };
        assert_eq!(
            transition_mission(&active, &finish(true, Some(3.0)), t0()).unwrap().status,
            MissionStatus::Completed
        );
        assert_eq!(transition_mission(&active, &finish(true, Some(2.9)), t0()).unwrap().status, MissionStatus::Failed);
        assert_eq!(transition_mission(&active, &finish(false, None), t0()).unwrap().status, MissionStatus::Failed);
        active.quality_threshold = Some(4.5);
        assert_eq!(transition_mission(&active, &finish(true, Some(4.0)), t0()).unwrap().status, MissionStatus::Failed);
        let err = transition_mission(&mission(MissionStatus::Completed), &MissionEvent::Resume, t0()).unwrap_err();
        assert_eq!(err.code(), "invalid_transition");
    }

    #[test]
    fn delays_expire_after_their_iso_duration() {
        let mut m = mission(MissionStatus::Draft);
        m.delays.push(MissionDelay {
            name: "cool down".into(),
            after_tasks: vec!["Build".into()],
            blocks_tasks: vec!["Deploy".into()],
            duration: "PT2H".into(),
            message: None,
        });
        m.validate().unwrap();
        assert_eq!(m.delays[0].expires_at(t0()).unwrap(), t0() + chrono::Duration::hours(2));
        m.delays[0].duration = "2 hours".into();
        assert_eq!(m.validate().unwrap_err().code(), "invalid_duration");
    }
}
