//! A task's status and phase: the vocabulary the task record and its state machine share.

use serde::{Deserialize, Serialize};

/// Where a task is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// Written but not queued; the orchestrator ignores it.
    Draft,
    /// Queued, waiting for its dependencies, gates and a free slot.
    Pending,
    /// A human must approve before it (re-)runs.
    AwaitingApproval,
    /// Given to an agent; the runner is starting.
    Assigned,
    /// The agent is working (phase execution, fix or clarification).
    InProgress,
    /// The result is being assessed.
    Review,
    /// Finished and accepted. Terminal.
    Done,
    /// Finished without success. Terminal, but may be retried.
    Failed,
}

impl TaskStatus {
    /// Every status, in life order.
    pub const ALL: [TaskStatus; 8] = [
        TaskStatus::Draft,
        TaskStatus::Pending,
        TaskStatus::AwaitingApproval,
        TaskStatus::Assigned,
        TaskStatus::InProgress,
        TaskStatus::Review,
        TaskStatus::Done,
        TaskStatus::Failed,
    ];

    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Draft => "draft",
            TaskStatus::Pending => "pending",
            TaskStatus::AwaitingApproval => "awaiting_approval",
            TaskStatus::Assigned => "assigned",
            TaskStatus::InProgress => "in_progress",
            TaskStatus::Review => "review",
            TaskStatus::Done => "done",
            TaskStatus::Failed => "failed",
        }
    }

    /// Parse the stored spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// `done` and `failed` end a task's life (only a retry brings a failed task back).
    pub fn is_terminal(self) -> bool {
        matches!(self, TaskStatus::Done | TaskStatus::Failed)
    }
}

impl std::fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the agent is doing while the task is `in_progress` or `review`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// The first attempt at the work.
    Execution,
    /// The result is being assessed.
    Review,
    /// A targeted fix after a failed assessment.
    Fix,
    /// The agent asked a question and waits for the answer.
    Clarification,
}
