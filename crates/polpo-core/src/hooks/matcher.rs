//! Which executions a hook applies to.
//!
//! Tool names match like tool policies do (ASCII case-insensitive) so a pack and a policy
//! that name the same tools agree, but hooks accept full globs (`*`, `?` anywhere):
//! `mcp__lab__*` and `*_write` both work, and a bare `mcp__lab` is an exact name — the
//! validator warns about matchers that can never match (see `hooks explain`).

use super::pack::{ExecutionMode, HookEvent, Matcher};

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
