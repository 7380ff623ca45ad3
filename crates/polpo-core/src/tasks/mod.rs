//! Tasks and missions, the orchestrator's data (inventory §5.1–5.3): the task record, its
//! state machine and dependency rules, missions with their lifecycle and flow control, and
//! ISO-8601 durations for mission delays. Pure: time is passed in.

pub mod duration;
pub mod graph;
pub mod machine;
pub mod mission;
pub mod model;
pub mod status;

pub use duration::{DurationError, format_duration, parse_duration};
pub use graph::{DependencyError, check_new_tasks, deadlocked, find_cycle, ready};
pub use machine::{FailReason, TRANSITIONS, TaskEvent, TaskTransition, TransitionError, allowed, transition};
pub use mission::{
    GateConditionError, GateFacts, GateTask, GateVerdict, MISSION_TRANSITIONS, Mission, MissionCheckpoint,
    MissionDelay, MissionEvent, MissionStatus, MissionTransitionError, QualityGate, transition_mission,
};
pub use model::{
    Confidence, EvalDimension, ExpectationType, ExpectedOutcome, OutcomeType, RetryPolicy, Task, TaskExpectation,
    TaskMetric, TaskOutcome, TaskResult,
};
pub use status::{Phase, TaskStatus};
