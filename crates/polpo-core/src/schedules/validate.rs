//! Cross-file rules of schedules: the agents and loops they name exist; and the warnings
//! `polpo validate` prints for them.

use super::codes;
use super::config::Invocation;
use crate::config::{Project, codes as config_codes};
use crate::problem::Problem;

/// Every schedule whose invocation names an agent or loop the project does not have.
pub fn validate_schedules(project: &Project) -> Vec<Problem> {
    let mut out = Vec::new();
    for s in project.schedules.values() {
        let mut missing = |what: &str, name: &str, field: &str| {
            out.push(s.source.problem(
                config_codes::INVALID_REFERENCE,
                format!("schedule `{}` names {what} `{name}`, which the project does not have", s.id),
                &format!("/invocation/{field}"),
            ));
        };
        match &s.config.invocation {
            Invocation::Agent { agent_name, .. } | Invocation::Task { agent_name, .. }
                if !project.agents.contains_key(agent_name) =>
            {
                missing("agent", agent_name, "agentName");
            }
            Invocation::Loop { loop_name, agent_name, .. } => {
                if !project.loops.contains_key(loop_name) {
                    missing("loop", loop_name, "loopName");
                }
                if !project.agents.contains_key(agent_name) {
                    missing("agent", agent_name, "agentName");
                }
            }
            _ => {}
        }
    }
    out
}

/// Warnings: legacy mission-shaped files (read as their v2 translation).
pub fn schedule_warnings(project: &Project) -> Vec<Problem> {
    project
        .schedules
        .values()
        .filter(|s| s.legacy)
        .map(|s| {
            s.source.problem(
                codes::LEGACY_SCHEDULE,
                "mission-shaped schedule file, read as a v2 schedule; rewrite it with `timing` and `invocation` (the legacy shape is accepted for a compatibility window)",
                "",
            )
        })
        .collect()
}
