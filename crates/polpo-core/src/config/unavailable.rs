//! Fields of `agent.json` that this runtime reads and keeps but does not act on yet.
//!
//! The reference system defines them and a project may carry them, so refusing them would break
//! compatible projects; ignoring them silently would let a user believe, say, that an agent
//! answers on its channels. `polpo validate` therefore warns about each one present, with the file
//! and JSON pointer, naming what would act on it. The list shrinks as the capabilities land.

use super::codes;
use super::project::Project;
use crate::problem::Problem;

/// `(field, what it needs)` for every agent field parsed but not acted on yet.
const UNAVAILABLE_AGENT_FIELDS: &[(&str, &str)] = &[
    // `assignedLoops`, `defaultLoop` and `executionRouter` act: a chat runs the named, default
    // or routed loop.
    ("loops", "Project Loops"),
    ("pipeline", "Project Loops"),
    ("channels", "messaging Channels"),
    ("missionGroup", "Missions"),
    ("executionMode", "the task orchestrator"),
    ("volatile", "the task orchestrator"),
    ("toolChoice", "agent-level tool choice"),
    ("sandbox", "per-agent sandboxes (use settings.sandbox)"),
    ("imageModel", "image tools"),
    ("videoModel", "video tools"),
    ("visionModel", "vision tools"),
    ("transcribeModel", "audio tools"),
    ("ttsModel", "audio tools"),
    ("searchProvider", "a search tool"),
    ("browserProfile", "browser tools"),
    ("emailAllowedDomains", "email tools"),
];

/// One `feature_unavailable` warning per such field present in an agent's file.
pub fn unavailable_agent_fields(project: &Project) -> Vec<Problem> {
    project
        .agents
        .values()
        .flat_map(|agent| {
            // Serialising keeps exactly the fields the file had (absent stays absent).
            let present = serde_json::to_value(&agent.config).unwrap_or_default();
            UNAVAILABLE_AGENT_FIELDS
                .iter()
                .filter(move |(field, _)| present.get(*field).is_some_and(|v| !v.is_null()))
                .map(|(field, needs)| {
                    let message = format!("`{field}` is kept but has no effect yet: it needs {needs}, which this runtime does not have yet");
                    agent.source.locate(
                        Problem::new(codes::FEATURE_UNAVAILABLE, message)
                        .at(format!("/{field}")),
                    )
                })
                .collect::<Vec<_>>()
        })
        .collect()
}
