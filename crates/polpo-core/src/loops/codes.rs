//! Stable problem codes of loop files (besides the general ones in
//! [`crate::config::codes`]). Scripts and tests match on these strings.

/// A `start`, `next`, transition, branch, body or `match.step` names no step of the loop.
pub const UNKNOWN_STEP: &str = "unknown_step";
/// No path from `start` reaches the step, so it can never run.
pub const UNREACHABLE_STEP: &str = "unreachable_step";
/// A step's `group` is not declared in `groups`.
pub const UNKNOWN_GROUP: &str = "unknown_group";
/// A step id the runtime reserves (`end`, `request`).
pub const RESERVED_STEP_ID: &str = "reserved_step_id";
/// A guard that does not parse; the message carries the column.
pub const INVALID_EXPRESSION: &str = "invalid_expression";
/// A `while` step with neither `condition` nor `until`.
pub const UNBOUNDED_WHILE: &str = "unbounded_while";
/// A `{"$context": …}` marker that is not exactly one key with a dotted path.
pub const INVALID_BINDING: &str = "invalid_binding";
/// A tool name the runtime does not have.
pub const UNKNOWN_TOOL: &str = "unknown_tool";
/// A tool a step names that a ceiling (the loop's, the step's or an agent's `allowedTools`)
/// excludes, so it could never be used.
pub const TOOL_OUTSIDE_CEILING: &str = "tool_outside_ceiling";
/// Two branches of one parallel step can reach human steps: a run waits for one person at a
/// time (it stores one waiting step, and an answer names none), so such a loop is refused.
pub const PARALLEL_HUMAN_STEPS: &str = "parallel_human_steps";
/// A field kept for compatibility under a new name (a warning).
pub const DEPRECATED_FIELD: &str = "deprecated_field";
/// A skill an agent step names that an agent running the loop is not assigned (`skills` in
/// its agent.json): a step only narrows its agent's skills. The runtime's code for the same.
pub const SKILL_NOT_ASSIGNED: &str = "skill_not_assigned";
