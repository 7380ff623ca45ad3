//! The task state machine (inventory §5.2): the statuses, the one table of allowed status
//! changes, and [`transition`], the only way a task's status, phase and counters move.
//!
//! Every change is an explicit [`TaskEvent`]; an event that does not apply to the task's
//! status is `invalid_transition`, and the counters (`retries`, `fixAttempts`,
//! `questionRounds`) are checked and bumped here, so a store or orchestrator cannot move a
//! task past its limits by accident.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::model::{MAX_FIX_ATTEMPTS, MAX_QUESTION_ROUNDS, Task};
use super::status::{Phase, TaskStatus};

/// Every allowed status change, `(from, to)`: the reference table of §5.2, plus
/// `pending → failed` (a deadlock no resolver can untangle, or a failed quality gate,
/// force-fails the pending tasks) and `done ↔ failed` (a person's `reassess`: the new
/// assessment's verdict decides, where the reference sets the status by its logged bypass).
/// [`transition`] never produces a change outside this table.
pub const TRANSITIONS: &[(TaskStatus, TaskStatus)] = &[
    (TaskStatus::Draft, TaskStatus::Pending),
    (TaskStatus::Pending, TaskStatus::Assigned),
    (TaskStatus::Pending, TaskStatus::AwaitingApproval),
    (TaskStatus::Assigned, TaskStatus::AwaitingApproval),
    (TaskStatus::Assigned, TaskStatus::InProgress),
    (TaskStatus::InProgress, TaskStatus::Review),
    (TaskStatus::Review, TaskStatus::Done),
    (TaskStatus::Review, TaskStatus::InProgress),
    (TaskStatus::Review, TaskStatus::Failed),
    (TaskStatus::InProgress, TaskStatus::Failed),
    (TaskStatus::Review, TaskStatus::AwaitingApproval),
    (TaskStatus::Failed, TaskStatus::AwaitingApproval),
    (TaskStatus::AwaitingApproval, TaskStatus::Assigned),
    (TaskStatus::AwaitingApproval, TaskStatus::Failed),
    (TaskStatus::Failed, TaskStatus::Pending),
    (TaskStatus::Pending, TaskStatus::Failed),
    (TaskStatus::Done, TaskStatus::Failed),
    (TaskStatus::Failed, TaskStatus::Done),
];

/// Whether `from → to` is in [`TRANSITIONS`]. Staying in a status (a phase change) is not a
/// status change and is always allowed.
pub fn allowed(from: TaskStatus, to: TaskStatus) -> bool {
    from == to || TRANSITIONS.contains(&(from, to))
}

/// Why a task failed, for `failed` transitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailReason {
    /// Assessment failed and no fix or retry is left.
    RetriesExhausted,
    /// The runner died.
    Crash,
    /// The run exceeded `maxDuration` or the task timeout.
    Timeout,
    /// Someone failed it on purpose (API, orchestrator).
    Forced,
    /// A dependency deadlock could not be resolved.
    Deadlock,
    /// A mission quality gate that blocks it failed, so it can never run.
    QualityGate,
}

/// Something that happened to a task. Each applies to some statuses only.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TaskEvent {
    /// `draft → pending`: queued by hand or because its mission started.
    Queue,
    /// `pending → assigned`: the orchestrator picked it (dependencies done, a slot free).
    /// `agent` replaces `assignTo` when given (escalation to a fallback agent).
    Assign {
        /// The agent that takes it.
        #[serde(default)]
        agent: Option<String>,
    },
    /// `pending | assigned | review | failed → awaiting_approval`: a human gate fired.
    RequestApproval,
    /// `assigned → in_progress` (phase execution): the runner started.
    Start,
    /// `in_progress → review` (phase review): the agent produced its result.
    Submit,
    /// `review → done`: assessment passed.
    Pass,
    /// `review → in_progress` (phase fix): assessment failed and a fix round is left.
    /// Refused for tasks with side effects (a human approves re-execution).
    Fix,
    /// `in_progress → in_progress` (phase clarification): the agent asked a question.
    Ask,
    /// `in_progress → in_progress` (phase execution): the question was answered.
    Answer,
    /// `in_progress | review | pending → failed`. Pending tasks fail only by deadlock.
    Fail {
        /// Why.
        reason: FailReason,
    },
    /// `awaiting_approval → assigned`: approved as is.
    Approve,
    /// `awaiting_approval → assigned`: sent back with feedback, which is appended to the
    /// description (the first description is kept in `originalDescription`).
    Revise {
        /// What the human wants changed.
        feedback: String,
    },
    /// `awaiting_approval → failed`: rejected (or the approval timed out).
    Reject,
    /// `failed → pending`. An automatic retry needs `retries < maxRetries` and no side
    /// effects; a manual one (`POST /retry`) is always allowed. Fix rounds start over.
    Retry {
        /// Asked for by a person rather than the orchestrator.
        manual: bool,
    },
    /// `done | failed → done | failed`: a person had the finished work assessed again
    /// (`POST /reassess`); the new verdict decides.
    Reassess {
        /// The new assessment passed.
        passed: bool,
    },
}

/// Why an event cannot be applied to a task. Each has a stable code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransitionError {
    /// The event does not apply to the task's status.
    #[error("task cannot take `{event}` while {from}")]
    InvalidTransition {
        /// The task's status.
        from: TaskStatus,
        /// The event's name.
        event: &'static str,
    },
    /// An automatic retry with no retries left.
    #[error("task has used all {max} retries")]
    RetriesExhausted {
        /// `maxRetries`.
        max: u32,
    },
    /// A fix round with none left.
    #[error("task has used all {max} fix attempts")]
    FixAttemptsExhausted {
        /// `maxFixAttempts`.
        max: u32,
    },
    /// A question with no answer rounds left.
    #[error("task has used all {max} question rounds")]
    QuestionRoundsExhausted {
        /// `maxQuestionRounds`.
        max: u32,
    },
    /// An automatic retry or fix of a task with side effects: a human must approve.
    #[error("task has side effects: re-execution needs approval")]
    SideEffectsNeedApproval,
}

impl TransitionError {
    /// Stable snake_case code.
    pub fn code(&self) -> &'static str {
        match self {
            TransitionError::InvalidTransition { .. } => "invalid_transition",
            TransitionError::RetriesExhausted { .. } => "retries_exhausted",
            TransitionError::FixAttemptsExhausted { .. } => "fix_attempts_exhausted",
            TransitionError::QuestionRoundsExhausted { .. } => "question_rounds_exhausted",
            TransitionError::SideEffectsNeedApproval => "side_effects_need_approval",
        }
    }
}

impl TaskEvent {
    /// The event's snake_case name (as serialized in `type`).
    pub fn name(&self) -> &'static str {
        match self {
            TaskEvent::Queue => "queue",
            TaskEvent::Assign { .. } => "assign",
            TaskEvent::RequestApproval => "request_approval",
            TaskEvent::Start => "start",
            TaskEvent::Submit => "submit",
            TaskEvent::Pass => "pass",
            TaskEvent::Fix => "fix",
            TaskEvent::Ask => "ask",
            TaskEvent::Answer => "answer",
            TaskEvent::Fail { .. } => "fail",
            TaskEvent::Approve => "approve",
            TaskEvent::Revise { .. } => "revise",
            TaskEvent::Reject => "reject",
            TaskEvent::Retry { .. } => "retry",
            TaskEvent::Reassess { .. } => "reassess",
        }
    }
}

/// Apply `event` to `task` at `now`: the task after it (status, phase, counters,
/// `updatedAt`), or why it cannot happen. The input is not changed, so a refused event
/// leaves nothing half-applied.
pub fn transition(task: &Task, event: &TaskEvent, now: DateTime<Utc>) -> Result<Task, TransitionError> {
    use TaskStatus as S;
    let invalid = || TransitionError::InvalidTransition { from: task.status, event: event.name() };
    let mut next = task.clone();
    let (to, phase) = match (task.status, event) {
        (S::Draft, TaskEvent::Queue) => (S::Pending, None),
        (S::Pending, TaskEvent::Assign { agent }) => {
            if let Some(agent) = agent {
                next.assign_to = Some(agent.clone());
            }
            (S::Assigned, None)
        }
        (S::Pending | S::Assigned | S::Review | S::Failed, TaskEvent::RequestApproval) => (S::AwaitingApproval, None),
        (S::Assigned, TaskEvent::Start) => (S::InProgress, Some(Phase::Execution)),
        (S::InProgress, TaskEvent::Submit) if task.phase != Some(Phase::Clarification) => {
            (S::Review, Some(Phase::Review))
        }
        (S::Review, TaskEvent::Pass) => (S::Done, None),
        (S::Review, TaskEvent::Fix) => {
            if task.side_effects {
                return Err(TransitionError::SideEffectsNeedApproval);
            }
            if task.fix_attempts >= MAX_FIX_ATTEMPTS {
                return Err(TransitionError::FixAttemptsExhausted { max: MAX_FIX_ATTEMPTS });
            }
            next.fix_attempts += 1;
            (S::InProgress, Some(Phase::Fix))
        }
        (S::InProgress, TaskEvent::Ask) if task.phase != Some(Phase::Clarification) => {
            if task.question_rounds >= MAX_QUESTION_ROUNDS {
                return Err(TransitionError::QuestionRoundsExhausted { max: MAX_QUESTION_ROUNDS });
            }
            next.question_rounds += 1;
            (S::InProgress, Some(Phase::Clarification))
        }
        (S::InProgress, TaskEvent::Answer) if task.phase == Some(Phase::Clarification) => {
            (S::InProgress, Some(Phase::Execution))
        }
        (S::InProgress | S::Review, TaskEvent::Fail { .. }) => (S::Failed, None),
        (S::Pending, TaskEvent::Fail { reason: FailReason::Deadlock | FailReason::QualityGate }) => (S::Failed, None),
        (S::AwaitingApproval, TaskEvent::Approve) => (S::Assigned, None),
        (S::AwaitingApproval, TaskEvent::Revise { feedback }) => {
            next.original_description.get_or_insert_with(|| task.description.clone());
            next.description = format!("{}\n\nFeedback: {feedback}", task.description);
            next.revision_count += 1;
            next.fix_attempts = 0;
            (S::Assigned, None)
        }
        (S::AwaitingApproval, TaskEvent::Reject) => (S::Failed, None),
        (S::Failed, TaskEvent::Retry { manual }) => {
            if !manual {
                if task.side_effects {
                    return Err(TransitionError::SideEffectsNeedApproval);
                }
                if task.retries >= task.max_retries {
                    return Err(TransitionError::RetriesExhausted { max: task.max_retries });
                }
            }
            next.retries += 1;
            next.fix_attempts = 0;
            next.question_rounds = 0;
            (S::Pending, None)
        }
        (S::Done | S::Failed, TaskEvent::Reassess { passed }) => (if *passed { S::Done } else { S::Failed }, None),
        _ => return Err(invalid()),
    };
    debug_assert!(allowed(task.status, to), "transition table and transition() disagree");
    next.status = to;
    next.phase = phase;
    next.updated_at = now;
    Ok(next)
}

/// The `task:transition` event (inventory §10.1): emitted, and `task:transition` hooks run,
/// on every status change.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskTransition<'a> {
    /// The task.
    pub task_id: &'a str,
    /// Its status before.
    pub from: TaskStatus,
    /// Its status after.
    pub to: TaskStatus,
    /// The task after the change.
    pub task: &'a Task,
}

impl<'a> TaskTransition<'a> {
    /// The event's name on the bus and for hooks.
    pub const NAME: &'static str = "task:transition";

    /// The event for `before → after`; `None` when the status did not change (a phase
    /// change is a `task:updated`, not a transition).
    pub fn between(before: &Task, after: &'a Task) -> Option<Self> {
        (before.status != after.status).then_some(TaskTransition {
            task_id: &after.id,
            from: before.status,
            to: after.status,
            task: after,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t0() -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000, 0).unwrap_or_default()
    }

    fn task(status: TaskStatus) -> Task {
        let mut t = Task::new("t1", "Build", "do it", t0());
        t.status = status;
        t
    }

    fn event() -> impl Strategy<Value = TaskEvent> {
        let reason = prop_oneof![
            Just(FailReason::RetriesExhausted),
            Just(FailReason::Crash),
            Just(FailReason::Timeout),
            Just(FailReason::Forced),
            Just(FailReason::Deadlock),
            Just(FailReason::QualityGate),
        ];
        prop_oneof![
            Just(TaskEvent::Queue),
            prop::option::of("[a-c]").prop_map(|agent| TaskEvent::Assign { agent }),
            Just(TaskEvent::RequestApproval),
            Just(TaskEvent::Start),
            Just(TaskEvent::Submit),
            Just(TaskEvent::Pass),
            Just(TaskEvent::Fix),
            Just(TaskEvent::Ask),
            Just(TaskEvent::Answer),
            reason.prop_map(|reason| TaskEvent::Fail { reason }),
            Just(TaskEvent::Approve),
            "[a-z]{1,5}".prop_map(|feedback| TaskEvent::Revise { feedback }),
            Just(TaskEvent::Reject),
            any::<bool>().prop_map(|manual| TaskEvent::Retry { manual }),
            any::<bool>().prop_map(|passed| TaskEvent::Reassess { passed }),
        ]
    }

    fn start() -> impl Strategy<Value = Task> {
        (prop::sample::select(TaskStatus::ALL.to_vec()), any::<bool>(), 0u32..4).prop_map(|(status, side, max)| {
            let mut t = task(status);
            t.side_effects = side;
            t.max_retries = max;
            if matches!(status, TaskStatus::InProgress) {
                t.phase = Some(Phase::Execution);
            } else if status == TaskStatus::Review {
                t.phase = Some(Phase::Review);
            }
            t
        })
    }

    proptest! {
        /// Whatever events arrive, every status change is in the table, the phase is set
        /// exactly while in progress or in review, the status stays put only for a question,
        /// its answer, or a reassessment that confirms the verdict, and the counters never
        /// pass their limits.
        #[test]
        fn no_event_sequence_leaves_the_table(start in start(), events in prop::collection::vec(event(), 0..60)) {
            let mut t = start;
            for (i, e) in events.iter().enumerate() {
                let now = t0() + chrono::Duration::seconds(i as i64 + 1);
                if let Ok(next) = transition(&t, e, now) {
                    if t.status == next.status {
                        prop_assert!(matches!(e, TaskEvent::Ask | TaskEvent::Answer | TaskEvent::Reassess { .. }), "{:?} kept the status", e);
                    } else {
                        prop_assert!(TRANSITIONS.contains(&(t.status, next.status)));
                    }
                    prop_assert_eq!(next.phase.is_some(), matches!(next.status, TaskStatus::InProgress | TaskStatus::Review));
                    prop_assert!(next.fix_attempts <= MAX_FIX_ATTEMPTS);
                    prop_assert!(next.question_rounds <= MAX_QUESTION_ROUNDS);
                    prop_assert_eq!(next.updated_at, now);
                    if let TaskEvent::Retry { manual: false } = e {
                        prop_assert!(next.retries <= t.max_retries && !t.side_effects);
                    }
                    t = next;
                }
            }
        }

        /// `done` is final and `failed` is left only by a retry (to `pending`) or an approval
        /// request.
        #[test]
        fn terminal_statuses_only_leave_as_the_table_says(e in event(), side in any::<bool>()) {
            let mut done = task(TaskStatus::Done);
            done.side_effects = side;
            match (&e, transition(&done, &e, t0())) {
                (TaskEvent::Reassess { passed }, Ok(next)) => {
                    prop_assert_eq!(next.status, if *passed { TaskStatus::Done } else { TaskStatus::Failed });
                }
                (_, r) => prop_assert_eq!(r.unwrap_err().code(), "invalid_transition"),
            }
            let mut failed = task(TaskStatus::Failed);
            failed.side_effects = side;
            match transition(&failed, &e, t0()) {
                Ok(next) => {
                    let as_table_says = matches!(
                        (&e, next.status),
                        (TaskEvent::Retry { .. }, TaskStatus::Pending)
                            | (TaskEvent::RequestApproval, TaskStatus::AwaitingApproval)
                            | (TaskEvent::Reassess { passed: true }, TaskStatus::Done)
                            | (TaskEvent::Reassess { passed: false }, TaskStatus::Failed)
                    );
                    prop_assert!(as_table_says, "{:?} took a failed task to {:?}", e, next.status);
                }
                Err(_) => prop_assert!(!matches!(e, TaskEvent::RequestApproval)),
            }
        }
    }

    #[test]
    fn the_happy_path_and_its_phases() {
        let mut t = task(TaskStatus::Draft);
        let steps = [
            (TaskEvent::Queue, TaskStatus::Pending, None),
            (TaskEvent::Assign { agent: Some("coder".into()) }, TaskStatus::Assigned, None),
            (TaskEvent::Start, TaskStatus::InProgress, Some(Phase::Execution)),
            (TaskEvent::Ask, TaskStatus::InProgress, Some(Phase::Clarification)),
            (TaskEvent::Answer, TaskStatus::InProgress, Some(Phase::Execution)),
            (TaskEvent::Submit, TaskStatus::Review, Some(Phase::Review)),
            (TaskEvent::Fix, TaskStatus::InProgress, Some(Phase::Fix)),
            (TaskEvent::Submit, TaskStatus::Review, Some(Phase::Review)),
            (TaskEvent::Pass, TaskStatus::Done, None),
        ];
        for (e, status, phase) in steps {
            let before = t.clone();
            t = transition(&t, &e, t0()).unwrap();
            assert_eq!((t.status, t.phase), (status, phase), "{e:?}");
            let ev = TaskTransition::between(&before, &t);
            assert_eq!(ev.map(|e| (e.from, e.to)), (before.status != status).then_some((before.status, status)));
        }
        assert_eq!((t.assign_to.as_deref(), t.fix_attempts, t.question_rounds), (Some("coder"), 1, 1));
        assert_eq!(
            serde_json::to_value(TaskTransition::between(&task(TaskStatus::Review), &t).unwrap()).unwrap()["to"],
            "done"
        );
    }

    #[test]
    fn limits_and_side_effects_have_their_own_codes() {
        let mut review = task(TaskStatus::Review);
        review.fix_attempts = MAX_FIX_ATTEMPTS;
        assert_eq!(transition(&review, &TaskEvent::Fix, t0()).unwrap_err().code(), "fix_attempts_exhausted");
        review.side_effects = true;
        assert_eq!(transition(&review, &TaskEvent::Fix, t0()).unwrap_err().code(), "side_effects_need_approval");
        assert_eq!(
            transition(&review, &TaskEvent::RequestApproval, t0()).unwrap().status,
            TaskStatus::AwaitingApproval
        );

        let mut failed = task(TaskStatus::Failed);
        failed.max_retries = 1;
        failed.fix_attempts = 2;
        let retried = transition(&failed, &TaskEvent::Retry { manual: false }, t0()).unwrap();
        assert_eq!((retried.status, retried.retries, retried.fix_attempts), (TaskStatus::Pending, 1, 0));
        failed.retries = 1;
        assert_eq!(
            transition(&failed, &TaskEvent::Retry { manual: false }, t0()).unwrap_err().code(),
            "retries_exhausted"
        );
        assert_eq!(transition(&failed, &TaskEvent::Retry { manual: true }, t0()).unwrap().retries, 2);
        assert_eq!(
            transition(&task(TaskStatus::Pending), &TaskEvent::Fail { reason: FailReason::Crash }, t0())
                .unwrap_err()
                .code(),
            "invalid_transition",
            "pending tasks fail only by deadlock"
        );
    }

    #[test]
    fn a_revision_keeps_the_original_description() {
        let waiting = task(TaskStatus::AwaitingApproval);
        let once = transition(&waiting, &TaskEvent::Revise { feedback: "use tabs".into() }, t0()).unwrap();
        let mut again = once.clone();
        again.status = TaskStatus::AwaitingApproval;
        let twice = transition(&again, &TaskEvent::Revise { feedback: "no, spaces".into() }, t0()).unwrap();
        assert_eq!(twice.original_description.as_deref(), Some("do it"));
        assert_eq!(twice.description, "do it\n\nFeedback: use tabs\n\nFeedback: no, spaces");
        assert_eq!((twice.status, twice.revision_count), (TaskStatus::Assigned, 2));
    }

    #[test]
    fn statuses_round_trip_their_spelling() {
        for s in TaskStatus::ALL {
            assert_eq!(TaskStatus::parse(s.as_str()), Some(s));
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
    }
}
