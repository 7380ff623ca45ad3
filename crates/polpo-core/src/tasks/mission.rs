//! Missions (inventory §5.3): a named group of tasks with a lifecycle of its own and the
//! flow control between its tasks — checkpoints (wait for a person), delays (wait for a
//! time) and quality gates (wait for a score) — all keyed by task titles.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::duration::{DurationError, parse_duration};
use crate::loops::expr;

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

    /// Check every quality gate's `condition` parses, so a typo is refused when the mission
    /// is written instead of failing its gate (closed) hours later.
    pub fn validate_gates(&self) -> Result<(), GateConditionError> {
        for (index, gate) in self.quality_gates.iter().enumerate() {
            if let Some(c) = &gate.condition {
                expr::parse(c).map_err(|error| GateConditionError { index, error })?;
            }
        }
        Ok(())
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
    /// An extra condition in the safe expression language of loop guards
    /// (`crate::loops::expr`), over [`GateFacts`]: e.g. `avgScore >= 4 && failedCount == 0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
}

/// What a quality gate knows of one task it judges.
#[derive(Debug, Clone, PartialEq)]
pub struct GateTask {
    /// The task's title.
    pub title: String,
    /// Its last assessment's weighted score, when an LLM review scored it.
    pub score: Option<f64>,
    /// It ended `done` (its assessment passed).
    pub passed: bool,
}

/// The facts a gate's `condition` reads, by these names: `avgScore` (mean of the scored
/// tasks, `null` when none was scored), `lowestScore`, `allPassed`, `passedCount`,
/// `failedCount`, `taskCount`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GateFacts {
    /// Mean score of the judged tasks that were scored.
    pub avg_score: Option<f64>,
    /// Lowest score of the judged tasks that were scored.
    pub lowest_score: Option<f64>,
    /// Every judged task passed.
    pub all_passed: bool,
    /// Judged tasks that passed.
    pub passed_count: usize,
    /// Judged tasks that did not.
    pub failed_count: usize,
    /// Judged tasks.
    pub task_count: usize,
}

impl GateFacts {
    /// The facts of `tasks`.
    pub fn of(tasks: &[GateTask]) -> Self {
        let scores: Vec<f64> = tasks.iter().filter_map(|t| t.score).collect();
        let passed_count = tasks.iter().filter(|t| t.passed).count();
        GateFacts {
            avg_score: (!scores.is_empty()).then(|| scores.iter().sum::<f64>() / scores.len() as f64),
            lowest_score: scores.iter().copied().reduce(f64::min),
            all_passed: passed_count == tasks.len(),
            passed_count,
            failed_count: tasks.len() - passed_count,
            task_count: tasks.len(),
        }
    }
}

/// A quality gate's decision, once every task it judges is settled.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GateVerdict {
    /// The blocked tasks may run.
    pub passed: bool,
    /// What it judged.
    #[serde(flatten)]
    pub facts: GateFacts,
    /// Why it failed, for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Why a gate's `condition` cannot be used. One code: `invalid_condition`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("qualityGates[{index}].condition: {error}")]
pub struct GateConditionError {
    /// The gate's index in `qualityGates`.
    pub index: usize,
    /// The parser's complaint, with its column.
    pub error: expr::ExprError,
}

impl GateConditionError {
    /// Stable snake_case code.
    pub fn code(&self) -> &'static str {
        "invalid_condition"
    }
}

impl QualityGate {
    /// Judge the settled tasks `judged`: `requireAllPassed`, then `minScore` against the
    /// mean score (no scored task fails a `minScore`), then `condition` (false, or an
    /// evaluation error, fails: closed).
    pub fn judge(&self, judged: &[GateTask]) -> GateVerdict {
        let facts = GateFacts::of(judged);
        let reason = self.failure(&facts);
        GateVerdict { passed: reason.is_none(), facts, reason }
    }

    fn failure(&self, facts: &GateFacts) -> Option<String> {
        if self.require_all_passed && !facts.all_passed {
            return Some(format!("{} of {} judged tasks did not pass", facts.failed_count, facts.task_count));
        }
        if let Some(min) = self.min_score {
            match facts.avg_score {
                None => return Some(format!("minScore {min} needs a score, and no judged task was scored")),
                Some(avg) if avg < min => return Some(format!("average score {avg:.2} is below minScore {min}")),
                Some(_) => {}
            }
        }
        let condition = self.condition.as_deref().filter(|c| !c.trim().is_empty())?;
        let context = serde_json::to_value(facts).unwrap_or_default();
        let limits = expr::Limits::default();
        let holds = expr::parse_with(condition, &limits)
            .and_then(|e| expr::evaluate_expr(&e, &context, &limits).map(|v| v.truthy()));
        match holds {
            Ok(true) => None,
            Ok(_) => Some(format!("condition `{condition}` does not hold")),
            Err(e) => Some(format!("condition `{condition}` failed: {e}")),
        }
    }
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
    /// `active → recurring`: a run of a recurring mission finished (its outcome is in its
    /// report); the mission waits for its schedule's next fire.
    Rearm,
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
            MissionEvent::Rearm => "rearm",
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
    (MissionStatus::Active, MissionStatus::Recurring),
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
        (S::Active, MissionEvent::Rearm) => S::Recurring,
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
            Just(MissionEvent::Rearm),
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

    fn gate(min_score: Option<f64>, require_all_passed: bool, condition: Option<&str>) -> QualityGate {
        QualityGate {
            name: "g".into(),
            after_tasks: vec!["A".into(), "B".into()],
            blocks_tasks: vec!["C".into()],
            min_score,
            require_all_passed,
            condition: condition.map(Into::into),
        }
    }

    fn judged(a: (Option<f64>, bool), b: (Option<f64>, bool)) -> Vec<GateTask> {
        vec![
            GateTask { title: "A".into(), score: a.0, passed: a.1 },
            GateTask { title: "B".into(), score: b.0, passed: b.1 },
        ]
    }

    #[test]
    fn a_quality_gate_judges_min_score_all_passed_and_its_condition() {
        let good = judged((Some(4.0), true), (Some(3.0), true));
        let verdict = gate(Some(3.5), true, None).judge(&good);
        assert!(verdict.passed, "{verdict:?}");
        assert_eq!(verdict.facts.avg_score, Some(3.5));
        assert_eq!(verdict.facts.lowest_score, Some(3.0));
        let v = gate(Some(3.6), false, None).judge(&good);
        assert!(!v.passed && v.reason.as_deref().unwrap_or_default().contains("below minScore 3.6"), "{v:?}");
        let one_failed = judged((Some(5.0), true), (None, false));
        assert!(gate(Some(4.0), false, None).judge(&one_failed).passed, "unscored tasks are left out of the mean");
        assert!(!gate(None, true, None).judge(&one_failed).passed);
        assert!(
            !gate(Some(1.0), false, None).judge(&judged((None, true), (None, true))).passed,
            "minScore needs a score"
        );
        assert!(gate(None, false, Some("lowestScore >= 3 && failedCount == 0")).judge(&good).passed);
        assert!(!gate(None, false, Some("lowestScore > 3")).judge(&good).passed);
        assert!(!gate(None, false, Some("avgScore >= 4")).judge(&judged((None, true), (None, true))).passed);
        assert!(gate(None, false, Some("")).judge(&one_failed).passed, "an empty condition holds");
    }

    #[test]
    fn a_gate_condition_that_does_not_parse_is_refused_with_its_index() {
        let mut m = mission(MissionStatus::Draft);
        m.quality_gates = vec![gate(None, false, Some("avgScore >= 3")), gate(None, false, Some("avgScore >= "))];
        let err = m.validate_gates().unwrap_err();
        assert_eq!((err.code(), err.index), ("invalid_condition", 1));
        assert!(err.to_string().starts_with("qualityGates[1].condition: column"), "{err}");
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
