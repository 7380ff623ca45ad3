//! Which executions a hook applies to.
//!
//! Tool names match like tool policies do (ASCII case-insensitive) so a pack and a policy
//! that name the same tools agree, but hooks accept full globs (`*`, `?` anywhere):
//! `mcp__lab__*` and `*_write` both work, and a bare `mcp__lab` is an exact name — the
//! validator warns about matchers that can never match (see `hooks explain`).

use super::pack::{ExecutionMode, HookEvent, Matcher};
use serde::{Deserialize, Serialize};
use std::fmt;

/// The execution a hook is asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target<'a> {
    /// Surface of the invocation.
    pub mode: ExecutionMode,
    /// Loop step id, for agent nodes in Project Loops.
    pub step: Option<&'a str>,
    /// Tool name, for `tool:*` events.
    pub tool: Option<&'a str>,
}

/// Glob match with `*` (any run) and `?` (one character), ASCII case-insensitive.
pub fn glob_matches(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.trim().chars().map(|c| c.to_ascii_lowercase()).collect();
    let n: Vec<char> = name.chars().map(|c| c.to_ascii_lowercase()).collect();
    // Iterative wildcard matching with one backtrack point: linear in practice, never
    // exponential, so an adversarial pattern cannot stall the runtime.
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ni));
            pi += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// True when `pattern` matches at least one name that starts with `prefix`. Tools that are
/// only known at run time (an MCP server's `mcp__<server>__…`) are a family with a known
/// prefix; a matcher that could match one of them is not dead.
pub fn glob_can_match_prefix(pattern: &str, prefix: &str) -> bool {
    let p: Vec<char> = pattern.trim().chars().map(|c| c.to_ascii_lowercase()).collect();
    // The set of pattern positions reachable after reading the prefix (an NFA, so no
    // backtracking); any position left can still be completed by a suitable suffix.
    let closure = |mut states: Vec<usize>| {
        let mut i = 0;
        while i < states.len() {
            let s = states[i];
            if p.get(s) == Some(&'*') && !states.contains(&(s + 1)) {
                states.push(s + 1);
            }
            i += 1;
        }
        states
    };
    let mut states = closure(vec![0]);
    for c in prefix.chars().map(|c| c.to_ascii_lowercase()) {
        let mut next = Vec::new();
        for &s in &states {
            match p.get(s) {
                Some('*') => next.push(s),
                Some(&x) if x == '?' || x == c => next.push(s + 1),
                _ => {}
            }
        }
        next.sort_unstable();
        next.dedup();
        states = closure(next);
        if states.is_empty() {
            return false;
        }
    }
    true
}

/// Why a matcher admitted an execution: the clause and pattern that matched, so `hooks
/// explain` can show *why* a hook fires, not only that it does. Empty: the hook has no
/// restriction that applies here.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MatchReason {
    /// The `tools` pattern that matched the tool.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The `steps` pattern that matched the loop step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// The mode, when `modes` restricts the hook.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<ExecutionMode>,
}

impl fmt::Display for MatchReason {
    /// `tools "wri*", modes chat`, or `any (no matcher applies)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(t) = &self.tool {
            parts.push(format!("tools {t:?}"));
        }
        if let Some(s) = &self.step {
            parts.push(format!("steps {s:?}"));
        }
        if let Some(m) = self.mode {
            parts.push(format!("modes {}", m.as_str()));
        }
        if parts.is_empty() { f.write_str("any (unrestricted)") } else { f.write_str(&parts.join(", ")) }
    }
}

impl Matcher {
    /// True when a hook with this matcher, registered on `event`, applies to `target`.
    pub fn matches(&self, event: HookEvent, target: &Target<'_>) -> bool {
        if let Some(modes) = &self.modes
            && !modes.contains(&target.mode)
        {
            return false;
        }
        if let Some(steps) = &self.steps {
            let Some(step) = target.step.filter(|_| target.mode == ExecutionMode::Loop) else { return false };
            if !steps.iter().any(|p| glob_matches(p, step)) {
                return false;
            }
        }
        if event.is_tool_event()
            && let Some(tools) = &self.tools
        {
            let Some(tool) = target.tool else { return false };
            return tools.iter().any(|p| glob_matches(p, tool));
        }
        true
    }

    /// The clauses that admit `target`, or `None` when the matcher does not match — the
    /// same decision as [`Matcher::matches`], with the patterns that made it.
    pub fn match_reason(&self, event: HookEvent, target: &Target<'_>) -> Option<MatchReason> {
        if !self.matches(event, target) {
            return None;
        }
        let first = |patterns: &Option<Vec<String>>, name: Option<&str>| {
            let name = name?;
            patterns.as_ref()?.iter().find(|p| glob_matches(p, name)).cloned()
        };
        Some(MatchReason {
            tool: if event.is_tool_event() { first(&self.tools, target.tool) } else { None },
            step: first(&self.steps, target.step),
            mode: self.modes.as_ref().map(|_| target.mode),
        })
    }

    /// True when the matcher can apply in `mode` at all (a `steps` matcher needs `loop`).
    pub fn admits_mode(&self, mode: ExecutionMode) -> bool {
        self.modes.as_ref().is_none_or(|m| m.contains(&mode)) && (self.steps.is_none() || mode == ExecutionMode::Loop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_anywhere_and_ignore_ascii_case() {
        assert!(glob_matches("mcp__lab__*", "mcp__lab__search"));
        assert!(!glob_matches("mcp__lab", "mcp__lab__search"));
        assert!(glob_matches("*_write", "file_WRITE"));
        assert!(glob_matches("b?sh", "bash"));
        assert!(glob_matches("*", ""));
        assert!(!glob_matches("a*b*c", "aXbY"));
        assert!(glob_matches("a*b*c", "aXbYc"));
    }

    #[test]
    fn a_pattern_can_match_a_family_when_some_suffix_completes_it() {
        assert!(glob_can_match_prefix("mcp__lab__*", "mcp__lab__"));
        assert!(glob_can_match_prefix("mcp__lab__search", "mcp__lab__"));
        assert!(glob_can_match_prefix("*search", "mcp__lab__"));
        assert!(glob_can_match_prefix("MCP__?ab*", "mcp__lab__"));
        assert!(!glob_can_match_prefix("mcp__lab", "mcp__lab__"));
        assert!(!glob_can_match_prefix("mcp__docs__*", "mcp__lab__"));
        assert!(!glob_can_match_prefix("write", "mcp__lab__"));
    }

    #[test]
    fn the_reason_names_the_pattern_that_matched() {
        let m = Matcher {
            tools: Some(vec!["read".into(), "wri*".into()]),
            modes: Some(vec![ExecutionMode::Chat]),
            steps: None,
        };
        let t = Target { mode: ExecutionMode::Chat, step: None, tool: Some("write") };
        let r = m.match_reason(HookEvent::ToolBefore, &t).unwrap_or_default();
        assert_eq!(r, MatchReason { tool: Some("wri*".into()), step: None, mode: Some(ExecutionMode::Chat) });
        assert_eq!(r.to_string(), "tools \"wri*\", modes chat");
        assert_eq!(m.match_reason(HookEvent::ToolBefore, &Target { tool: Some("bash"), ..t }), None);
        assert_eq!(
            Matcher::default().match_reason(HookEvent::TurnStop, &t).map(|r| r.to_string()),
            Some("any (unrestricted)".into())
        );
    }

    #[test]
    fn steps_restrict_a_hook_to_loops() {
        let m = Matcher { steps: Some(vec!["build*".into()]), ..Default::default() };
        let chat = Target { mode: ExecutionMode::Chat, step: None, tool: Some("bash") };
        let node = Target { mode: ExecutionMode::Loop, step: Some("build-1"), tool: Some("bash") };
        assert!(!m.matches(HookEvent::ToolBefore, &chat));
        assert!(m.matches(HookEvent::ToolBefore, &node));
        assert!(Matcher::default().matches(HookEvent::ToolBefore, &chat));
    }

    #[test]
    fn tool_patterns_only_filter_tool_events() {
        let m = Matcher { tools: Some(vec!["write".into()]), ..Default::default() };
        let t = Target { mode: ExecutionMode::Chat, step: None, tool: Some("read") };
        assert!(!m.matches(HookEvent::ToolBefore, &t));
        assert!(m.matches(HookEvent::TurnStop, &Target { tool: None, ..t }));
    }
}
