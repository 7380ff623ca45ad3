//! The tool-policy algebra: which tools one execution may use.
//!
//! The effective set is the intersection of every configured layer, in order: the agent's
//! `allowedTools` (the global ceiling), the mode layer (`chat`, `channels` + Route, or loop +
//! step), the request's `polpo.execution.allowedTools`, and trusted host grants. A layer that
//! is not configured does not narrow; a configured layer can only narrow. No layer, hook or
//! request can add a tool an earlier layer excluded — the property tests below prove it.

use serde::{Deserialize, Serialize};

/// Where a restriction came from; shown in `tool_policy_denied` errors so a user knows which
/// file or request field to change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyLayer {
    /// `agent.json` `allowedTools`.
    Agent,
    /// `agent.json` `chat.allowedTools`.
    Chat,
    /// `agent.json` `channels.allowedTools`.
    Channels,
    /// A Channel Route's `allowedTools`.
    Route,
    /// A Project Loop's `allowedTools`.
    Loop,
    /// A loop step's `allowedTools` (or the legacy `tools`).
    Step,
    /// The request's `polpo.execution.allowedTools`.
    Request,
    /// A trusted host grant.
    Grant,
}

/// True when `pattern` admits the tool `name`: case-insensitive exact match, a trailing `*`
/// as a prefix wildcard, and `"*"` for every tool.
pub fn pattern_matches(pattern: &str, name: &str) -> bool {
    let pattern = trimmed(pattern);
    match pattern.strip_suffix('*') {
        Some(prefix) => {
            name.len() >= prefix.len()
                && name.is_char_boundary(prefix.len())
                && name[..prefix.len()].eq_ignore_ascii_case(prefix)
        }
        None => pattern.eq_ignore_ascii_case(name),
    }
}

/// `pattern` without surrounding whitespace. Asked for every tool under every layer of every
/// run: a pattern that starts and ends with a visible ASCII character (every pattern written
/// plainly) is returned as it is, without `str::trim`'s decoding of characters at both ends.
fn trimmed(pattern: &str) -> &str {
    let plain = |b: &u8| b.is_ascii() && !matches!(b, b' ' | b'\t'..=b'\r');
    match (pattern.as_bytes().first(), pattern.as_bytes().last()) {
        (Some(first), Some(last)) if plain(first) && plain(last) => pattern,
        _ => pattern.trim(),
    }
}

/// One configured restriction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restriction {
    /// Where it came from.
    pub layer: PolicyLayer,
    /// Tool-name patterns it admits.
    pub patterns: Vec<String>,
}

/// The layered policy of one execution. Built once per run and consulted for every tool.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolPolicy {
    restrictions: Vec<Restriction>,
}

impl ToolPolicy {
    /// A policy with no restriction (every tool the runtime offers is allowed).
    pub fn unrestricted() -> Self {
        Self::default()
    }

    /// Add a layer. `None` means "not configured" and leaves the policy unchanged; `Some`
    /// narrows, even when empty (an empty list denies everything).
    pub fn narrow(mut self, layer: PolicyLayer, patterns: Option<&[String]>) -> Self {
        if let Some(patterns) = patterns {
            self.restrictions.push(Restriction { layer, patterns: patterns.to_vec() });
        }
        self
    }

    /// The first layer that excludes `name`, or `None` when the tool is allowed.
    pub fn denied_by(&self, name: &str) -> Option<PolicyLayer> {
        self.restrictions.iter().find(|r| !r.patterns.iter().any(|p| pattern_matches(p, name))).map(|r| r.layer)
    }

    /// True when every layer admits `name`.
    pub fn allows(&self, name: &str) -> bool {
        self.denied_by(name).is_none()
    }

    /// The subset of `names` this policy allows, in the given order.
    pub fn filter<'a, I: IntoIterator<Item = &'a str>>(&self, names: I) -> Vec<&'a str> {
        names.into_iter().filter(|n| self.allows(n)).collect()
    }

    /// The configured layers, in order.
    pub fn restrictions(&self) -> &[Restriction] {
        &self.restrictions
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    /// The shortcut for plainly written patterns trims exactly what `str::trim` trims.
    #[test]
    fn trimmed_equals_str_trim() {
        for p in ["read", " read", "read\u{b}", "\u{a0}read", "read\u{3000}", "\u{85}", "", " ", "é", "x*", "\tsite_* "]
        {
            assert_eq!(trimmed(p), p.trim(), "{p:?}");
        }
    }

    #[test]
    fn patterns_are_case_insensitive_with_trailing_wildcard() {
        assert!(pattern_matches("READ", "read"));
        assert!(pattern_matches("site_*", "Site_Context_Get"));
        assert!(pattern_matches("*", "anything"));
        assert!(!pattern_matches("site_*", "sit"));
        assert!(!pattern_matches("read", "read_more"));
        assert!(!pattern_matches("é*", "e"));
    }

    #[test]
    fn seed_example_chat_narrows_the_agent_ceiling() {
        let agent = s(&["ask_user_question", "site_*"]);
        let chat = s(&["ask_user_question"]);
        let channels = s(&["ask_user_question", "site_context_get"]);
        let p_chat =
            ToolPolicy::unrestricted().narrow(PolicyLayer::Agent, Some(&agent)).narrow(PolicyLayer::Chat, Some(&chat));
        assert!(p_chat.allows("ask_user_question"));
        assert_eq!(p_chat.denied_by("site_context_get"), Some(PolicyLayer::Chat));
        let p_chan = ToolPolicy::unrestricted()
            .narrow(PolicyLayer::Agent, Some(&agent))
            .narrow(PolicyLayer::Channels, Some(&channels));
        assert!(p_chan.allows("site_context_get"));
        assert_eq!(p_chan.denied_by("site_publish"), Some(PolicyLayer::Channels));
        assert_eq!(p_chan.denied_by("bash"), Some(PolicyLayer::Agent));
    }

    #[test]
    fn unconfigured_layers_do_not_narrow_but_empty_ones_deny_all() {
        let p = ToolPolicy::unrestricted().narrow(PolicyLayer::Chat, None);
        assert!(p.allows("bash"));
        let p = p.narrow(PolicyLayer::Request, Some(&[]));
        assert_eq!(p.denied_by("bash"), Some(PolicyLayer::Request));
    }

    fn name() -> impl Strategy<Value = String> {
        prop::sample::select(vec!["read", "write", "bash", "site_get", "site_put", "Grep", "mcp__gh__search"])
            .prop_map(String::from)
    }

    fn pattern() -> impl Strategy<Value = String> {
        prop::sample::select(vec!["read", "WRITE", "bash", "site_*", "*", "mcp__*", "grep", "s*", "nothing"])
            .prop_map(String::from)
    }

    proptest! {
        /// The shortcut agrees with `str::trim` on any text, whitespace of every kind around it.
        #[test]
        fn trimmed_is_trim(text in "[ \t\n\u{b}\u{c}\r\u{85}\u{a0}\u{2003}\u{3000}a-z*é]{0,8}") {
            prop_assert_eq!(trimmed(&text), text.trim());
        }

        /// Adding any layer never allows a tool that was denied before.
        #[test]
        fn narrowing_never_widens(
            layers in prop::collection::vec(prop::option::of(prop::collection::vec(pattern(), 0..4)), 0..5),
            extra in prop::option::of(prop::collection::vec(pattern(), 0..4)),
            tool in name(),
        ) {
            let mut p = ToolPolicy::unrestricted();
            for l in &layers { p = p.narrow(PolicyLayer::Request, l.as_deref()); }
            let before = p.allows(&tool);
            let after = p.clone().narrow(PolicyLayer::Grant, extra.as_deref()).allows(&tool);
            prop_assert!(!after || before);
        }

        /// The result is the intersection: order of layers does not matter.
        #[test]
        fn layer_order_does_not_matter(
            a in prop::collection::vec(pattern(), 0..4),
            b in prop::collection::vec(pattern(), 0..4),
            tool in name(),
        ) {
            let ab = ToolPolicy::unrestricted().narrow(PolicyLayer::Agent, Some(&a)).narrow(PolicyLayer::Chat, Some(&b));
            let ba = ToolPolicy::unrestricted().narrow(PolicyLayer::Chat, Some(&b)).narrow(PolicyLayer::Agent, Some(&a));
            prop_assert_eq!(ab.allows(&tool), ba.allows(&tool));
        }
    }
}
