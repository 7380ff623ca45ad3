//! Checks of a pack against the agent it is assigned to — the mistakes that make a hook
//! silently never fire, or fire too late to matter.
//!
//! These are warnings for `polpo hooks validate`: the pack itself is valid, but in the
//! context of this agent a `tools` matcher matches none of its tools, or a `tool:before`
//! hook can only see provider-native tools, which execute at the provider before any local
//! decision could stop them.

use super::matcher::{glob_can_match_prefix, glob_matches};
use super::pack::{HookEvent, HookPack};
use crate::problem::{Problem, pointer_push};

/// A tool of the agent, as the linter needs to know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AgentTool<'a> {
    /// Tool name. A name ending in `*` stands for a family of tools only known at run time
    /// (`mcp__lab__*`: the tools of MCP server `lab`); a pattern that could match one of
    /// them counts as matching.
    pub name: &'a str,
    /// Executed by the model provider (web search, code interpreter …), not by Polpo.
    pub provider_native: bool,
}

/// Warnings for `pack` assigned to an agent with `tools`.
pub fn lint_for_agent(pack: &HookPack, agent: &str, tools: &[AgentTool<'_>]) -> Vec<Problem> {
    let mut problems = Vec::new();
    for hook in pack.hooks.iter().filter(|h| h.event.is_tool_event()) {
        let Some(patterns) = &hook.matcher.tools else { continue };
        let ptr = pointer_push(
            &pointer_push(&pointer_push("/hooks", hook.event.as_str()), &hook.declaration.to_string()),
            "matcher",
        );
        let matched: Vec<&AgentTool<'_>> = tools.iter().filter(|t| patterns.iter().any(|p| can_match(p, t))).collect();
        if !matched.is_empty() {
            // One dead pattern in a live list is usually a typo (`wirte`) that leaves a tool
            // unguarded while the hook as a whole looks fine.
            for (i, pattern) in patterns.iter().enumerate().filter(|(_, p)| !tools.iter().any(|t| can_match(p, t))) {
                problems.push(
                    Problem::new(
                        "matcher_pattern_matches_no_tool",
                        format!(
                            "pattern `{pattern}` of hook `{}` matches none of the tools of agent `{agent}`",
                            hook.id
                        ),
                    )
                    .at(pointer_push(&pointer_push(&ptr, "tools"), &i.to_string())),
                );
            }
        }
        if matched.is_empty() {
            problems.push(
                Problem::new(
                    "matcher_matches_no_tool",
                    format!("hook `{}` matches none of the tools of agent `{agent}`, so it never fires", hook.id),
                )
                .at(pointer_push(&ptr, "tools")),
            );
        } else if hook.event == HookEvent::ToolBefore && matched.iter().all(|t| t.provider_native) {
            problems.push(
                Problem::new(
                    "provider_native_tool",
                    format!("hook `{}` only matches provider-native tools, which run at the provider: a tool:before decision cannot prevent their side effects", hook.id),
                )
                .at(pointer_push(&ptr, "tools")),
            );
        }
    }
    problems
}

fn can_match(pattern: &str, tool: &AgentTool<'_>) -> bool {
    match tool.name.strip_suffix('*') {
        Some(prefix) => glob_can_match_prefix(pattern, prefix),
        None => glob_matches(pattern, tool.name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::validate::{ValidateOptions, check_document};
    use serde_json::json;

    #[test]
    fn warns_about_matchers_that_never_fire_or_fire_too_late() {
        let cmd = json!({"type": "command", "command": "x"});
        let doc = json!({"version": 1, "hooks": {"tool:before": [
            {"id": "lab", "matcher": {"tools": ["mcp__lab"]}, "handler": cmd},
            {"id": "search", "matcher": {"tools": ["web_search"]}, "handler": cmd},
            {"id": "fine", "matcher": {"tools": ["mcp__lab__*"]}, "handler": cmd},
            {"id": "typo", "matcher": {"tools": ["mcp__lab__run", "wirte"]}, "handler": cmd},
            {"id": "family", "matcher": {"tools": ["mcp__docs__search"]}, "handler": cmd}
        ]}});
        let (pack, problems) = check_document("p", &doc, &ValidateOptions::default());
        assert!(problems.is_empty());
        let tools = [
            AgentTool { name: "mcp__lab__run", provider_native: false },
            AgentTool { name: "web_search", provider_native: true },
            AgentTool { name: "mcp__docs__*", provider_native: false },
        ];
        let got: Vec<(String, String)> = lint_for_agent(&pack, "writer", &tools)
            .into_iter()
            .map(|p| (p.code, p.pointer.unwrap_or_default()))
            .collect();
        assert_eq!(
            got,
            [
                ("matcher_matches_no_tool".to_string(), "/hooks/tool:before/0/matcher/tools".to_string()),
                ("provider_native_tool".to_string(), "/hooks/tool:before/1/matcher/tools".to_string()),
                ("matcher_pattern_matches_no_tool".to_string(), "/hooks/tool:before/3/matcher/tools/1".to_string()),
            ]
        );
    }
}
