//! Cross-file rules of schedules: the agents and loops they name exist (a loop assigned to its
//! agent), webhooks go to allowlisted hosts; and the warnings
//! `polpo validate` prints for them.

use super::codes;
use super::config::Invocation;
use crate::config::{Project, codes as config_codes};
use crate::problem::Problem;

/// Every schedule whose invocation names an agent or loop the project does not have, or a
/// loop its agent is not assigned (the loop executor runs only assigned loops); and the
/// webhook host allowlist ([`super::settings::validate_webhook_allowlist`]).
pub fn validate_schedules(project: &Project) -> Vec<Problem> {
    let mut out = Vec::new();
    for s in project.schedules.values() {
        let mut refused = |message: String, field: &str| {
            out.push(s.source.problem(
                config_codes::INVALID_REFERENCE,
                format!("schedule `{}` {message}", s.id),
                &format!("/invocation/{field}"),
            ));
        };
        let missing = |what: &str, name: &str| format!("names {what} `{name}`, which the project does not have");
        match &s.config.invocation {
            Invocation::Agent { agent_name, .. } | Invocation::Task { agent_name, .. }
                if !project.agents.contains_key(agent_name) =>
            {
                refused(missing("agent", agent_name), "agentName");
            }
            Invocation::Loop { loop_name, agent_name, .. } => {
                if !project.loops.contains_key(loop_name) {
                    refused(missing("loop", loop_name), "loopName");
                }
                match project.agents.get(agent_name) {
                    None => refused(missing("agent", agent_name), "agentName"),
                    Some(agent) if !agent.config.assigned_loops.iter().flatten().any(|l| l == loop_name) => refused(
                        format!("runs loop `{loop_name}` for agent `{agent_name}`, whose assignedLoops do not list it"),
                        "loopName",
                    ),
                    Some(_) => {}
                }
            }
            _ => {}
        }
    }
    out.extend(super::settings::validate_webhook_allowlist(project));
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
