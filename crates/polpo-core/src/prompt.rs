//! The system prompt of an agent, assembled from its files.
//!
//! Pure: the same agent always gives the same prompt, so a prompt cache at the provider keeps
//! hitting and a replayed run sees what the original saw. Time and memory are added by the
//! caller when those features need them, never read here.

use crate::config::Agent;
use std::fmt::Write;

/// `instructions.md`, then the identity the agent presents (name, title, tone …) and its role.
pub fn system_prompt(agent: &Agent) -> String {
    let mut out = agent.instructions.trim().to_owned();
    let mut about = String::new();
    let c = &agent.config;
    let mut line = |label: &str, value: Option<&str>| {
        if let Some(v) = value.map(str::trim).filter(|v| !v.is_empty()) {
            let _ = writeln!(about, "- {label}: {v}");
        }
    };
    line("Agent id", Some(&agent.id));
    line("Role", c.role.as_deref());
    if let Some(id) = &c.identity {
        line("Name", id.display_name.as_deref());
        line("Title", id.title.as_deref());
        line("Company", id.company.as_deref());
        line("Timezone", id.timezone.as_deref());
        line("Personality", id.personality.as_deref());
        line("Tone", id.tone.as_deref());
        line("About", id.bio.as_deref());
    }
    if !out.is_empty() {
        out.push_str("\n\n");
    }
    out.push_str("## About you\n");
    out.push_str(&about);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::agent::Identity;
    use crate::config::{AgentConfig, Location};

    fn agent(instructions: &str, config: AgentConfig) -> Agent {
        Agent { id: "coder".into(), config, instructions: instructions.into(), source: Location::file("agent.json") }
    }

    #[test]
    fn instructions_come_first_then_identity() {
        let config = AgentConfig {
            role: Some("Writes Rust".into()),
            identity: Some(Identity {
                display_name: Some("Ada".into()),
                tone: Some("terse".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let p = system_prompt(&agent("You fix bugs.\n", config));
        assert!(p.starts_with("You fix bugs.\n\n## About you\n"), "{p}");
        assert!(p.contains("- Agent id: coder\n- Role: Writes Rust\n- Name: Ada\n- Tone: terse\n"), "{p}");
        assert!(!p.contains("Company"), "empty fields are left out: {p}");
    }
}
