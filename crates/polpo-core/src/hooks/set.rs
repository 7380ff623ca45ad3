//! The hooks that apply to one agent, in the order they run.
//!
//! Packs are assigned at several scopes; [`HookSet::resolve`] flattens them once per agent
//! (or loop step) into one ordered list — scope (project → agent → loop → step), then
//! `priority` (lower first), then declaration order (assignment order, then position in the
//! pack) — so every surface (chat, run-backed chat, channels, loop nodes) runs the same hooks
//! in the same order through one code path.

use super::gate::GateLimits;
use super::matcher::Target;
use super::pack::{Hook, HookEvent, HookPack, Scope};
use crate::problem::Problem;
use serde::Serialize;
use std::collections::BTreeMap;

/// A hook together with the scope its pack was assigned at.
#[derive(Debug, Clone, PartialEq)]
pub struct ScopedHook {
    /// Where the pack was assigned.
    pub scope: Scope,
    /// The hook.
    pub hook: Hook,
}

/// Every hook of one agent (or loop step), in running order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HookSet {
    hooks: Vec<ScopedHook>,
}

/// The hooks that apply to one event of one execution.
#[derive(Debug, Clone, Default)]
pub struct Applicable<'a> {
    /// Run one after another, in this order; their decisions are folded.
    pub controlling: Vec<&'a ScopedHook>,
    /// Run concurrently; their decisions are telemetry only.
    pub observers: Vec<&'a ScopedHook>,
}

impl Applicable<'_> {
    /// True when no hook applies.
    pub fn is_empty(&self) -> bool {
        self.controlling.is_empty() && self.observers.is_empty()
    }
}

impl HookSet {
    /// Flatten packs assigned at `scope`s, in assignment order, into running order. A pack
    /// assigned more than once (say, to the project and to the agent) runs once, at its
    /// broadest scope, so its hooks never fire twice with the same idempotency key.
    pub fn resolve<'a>(assignments: impl IntoIterator<Item = (Scope, &'a HookPack)>) -> Self {
        let mut assignments: Vec<(Scope, &HookPack)> = assignments.into_iter().collect();
        assignments.sort_by_key(|(scope, _)| *scope);
        let mut seen = std::collections::HashSet::new();
        assignments.retain(|(_, pack)| seen.insert(pack.name.as_str()));
        let mut hooks: Vec<ScopedHook> = assignments
            .into_iter()
            .flat_map(|(scope, pack)| pack.hooks.iter().map(move |h| ScopedHook { scope, hook: h.clone() }))
            .collect();
        // Stable: equal (scope, priority) keep assignment order, then pack order.
        hooks.sort_by_key(|s| (s.scope, s.hook.priority));
        Self { hooks }
    }

    /// All hooks in running order.
    pub fn hooks(&self) -> &[ScopedHook] {
        &self.hooks
    }

    /// True when no pack contributes a hook.
    pub fn is_empty(&self) -> bool {
        self.hooks.is_empty()
    }

    /// The hooks of `event` that apply to `target`, split into controlling and observing.
    pub fn applicable(&self, event: HookEvent, target: &Target<'_>) -> Applicable<'_> {
        let (observers, controlling) = self
            .hooks
            .iter()
            .filter(|s| s.hook.event == event && s.hook.matcher.matches(event, target))
            .partition(|s| s.hook.observe);
        Applicable { controlling, observers }
    }

    /// The strictest limits of every termination gate that applies to `target`; `None`
    /// when no gate applies.
    pub fn gate_limits(&self, target: &Target<'_>) -> Option<GateLimits> {
        GateLimits::strictest(
            self.applicable(HookEvent::TurnStop, target).controlling.iter().filter_map(|s| s.hook.gate()),
        )
    }

    /// What `hooks explain` prints: which hooks would fire for `target`, in which order.
    pub fn explain(&self, target: &Target<'_>) -> Vec<ExplainEntry> {
        HookEvent::ALL
            .into_iter()
            .flat_map(|event| {
                let a = self.applicable(event, target);
                let controlling =
                    a.controlling.into_iter().enumerate().map(|(i, s)| ExplainEntry::new(s, Some(i + 1), target));
                let observers = a.observers.into_iter().map(|s| ExplainEntry::new(s, None, target));
                controlling.chain(observers).collect::<Vec<_>>()
            })
            .collect()
    }
}

/// Resolve pack *names* as assigned in configuration (`project.json`, `agent.json`
/// `hooks`, a loop, a step) against the packs loaded from `.polpo/hooks/`. Every unknown
/// name is a problem: an assignment that silently resolves to nothing is how hooks stop
/// firing without anyone noticing.
pub fn resolve_named(
    packs: &BTreeMap<String, HookPack>,
    assignments: &[(Scope, &[String])],
) -> Result<HookSet, Vec<Problem>> {
    let mut found = Vec::new();
    let mut problems = Vec::new();
    for (scope, names) in assignments {
        for name in names.iter() {
            match packs.get(name) {
                Some(pack) => found.push((*scope, pack)),
                None => problems.push(Problem::new(
                    "unknown_hook_pack",
                    format!("hook pack `{name}` is assigned but .polpo/hooks/{name}.json does not exist"),
                )),
            }
        }
    }
    if problems.is_empty() { Ok(HookSet::resolve(found)) } else { Err(problems) }
}

/// One line of `hooks explain`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExplainEntry {
    /// Event.
    pub event: HookEvent,
    /// 1-based position among the controlling hooks of the event; `None` for observers
    /// (which run concurrently).
    pub order: Option<usize>,
    /// `pack/id`.
    pub hook: String,
    /// Scope of the pack assignment.
    pub scope: Scope,
    /// Priority.
    pub priority: i32,
    /// `controlling`, `observe` or `terminationGate`.
    pub role: &'static str,
    /// Handler `type`.
    pub handler: &'static str,
    /// The matcher as written.
    pub matcher: super::pack::Matcher,
    /// The pattern of each clause that admitted this execution (empty: unrestricted).
    pub matched_by: super::matcher::MatchReason,
    /// True for observers: they run concurrently with the controlling chain and cannot
    /// change execution.
    pub concurrent: bool,
    /// The hook's `description`, so the output says what the hook is for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

impl ExplainEntry {
    fn new(s: &ScopedHook, order: Option<usize>, target: &Target<'_>) -> Self {
        let role = if s.hook.observe {
            "observe"
        } else if s.hook.gate().is_some() {
            "terminationGate"
        } else {
            "controlling"
        };
        Self {
            event: s.hook.event,
            order,
            hook: s.hook.qualified_id(),
            scope: s.scope,
            priority: s.hook.priority,
            role,
            handler: s.hook.action.handler().kind(),
            matcher: s.hook.matcher.clone(),
            matched_by: s.hook.matcher.match_reason(s.hook.event, target).unwrap_or_default(),
            concurrent: s.hook.observe,
            description: s.hook.description.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::pack::ExecutionMode;
    use crate::hooks::validate::{ValidateOptions, check_document};
    use serde_json::json;

    fn pack(name: &str, hooks: serde_json::Value) -> HookPack {
        let (p, problems) = check_document(name, &json!({"version": 1, "hooks": hooks}), &ValidateOptions::default());
        assert_eq!(problems, vec![]);
        p
    }

    #[test]
    fn order_is_scope_then_priority_then_declaration() {
        let cmd = json!({"type": "command", "command": "x"});
        let agent = pack(
            "a",
            json!({"tool:before": [{"id": "late", "priority": 200, "handler": cmd}, {"id": "first", "handler": cmd}, {"id": "second", "handler": cmd}]}),
        );
        let project = pack("p", json!({"tool:before": [{"id": "proj", "priority": 500, "handler": cmd}]}));
        let step = pack(
            "s",
            json!({"tool:before": [{"id": "step", "priority": 1, "handler": cmd}, {"id": "obs", "observe": true, "handler": cmd}]}),
        );
        let set = HookSet::resolve([(Scope::Step, &step), (Scope::Agent, &agent), (Scope::Project, &project)]);
        let target = Target { mode: ExecutionMode::Loop, step: Some("build"), tool: Some("bash") };
        let a = set.applicable(HookEvent::ToolBefore, &target);
        let order: Vec<String> = a.controlling.iter().map(|s| s.hook.qualified_id()).collect();
        assert_eq!(order, ["p/proj", "a/first", "a/second", "a/late", "s/step"]);
        assert_eq!(a.observers.len(), 1);
        let explained = set.explain(&target);
        assert_eq!(explained[0].order, Some(1));
        assert_eq!(explained.last().map(|e| e.role), Some("observe"));
        assert_eq!(explained.last().map(|e| e.concurrent), Some(true));
        assert_eq!(explained[0].matched_by, Default::default(), "p/proj has no matcher");
    }

    #[test]
    fn a_pack_assigned_twice_runs_once_at_its_broadest_scope() {
        let p = pack("quality", json!({"tool:before": [{"handler": {"type": "command", "command": "x"}}]}));
        let set = HookSet::resolve([(Scope::Agent, &p), (Scope::Project, &p)]);
        assert_eq!(set.hooks().len(), 1);
        assert_eq!(set.hooks()[0].scope, Scope::Project);
    }

    #[test]
    fn pack_names_resolve_or_report_the_missing_pack() {
        let p = pack("quality", json!({"tool:before": [{"handler": {"type": "command", "command": "x"}}]}));
        let packs: BTreeMap<String, HookPack> = [("quality".to_string(), p)].into();
        let agent = vec!["quality".to_string()];
        assert_eq!(resolve_named(&packs, &[(Scope::Agent, &agent)]).map(|s| s.hooks().len()), Ok(1));
        let missing = vec!["qualty".to_string()];
        let err = resolve_named(&packs, &[(Scope::Agent, &missing)]).unwrap_err();
        assert_eq!(err[0].code, "unknown_hook_pack");
    }

    #[test]
    fn several_matching_gates_merge_to_the_strictest_limits() {
        let v = json!({"type": "command", "command": "x"});
        let a = pack(
            "a",
            json!({"turn:stop": [{"terminationGate": {"validator": v, "maxCycles": 5, "maxDurationMs": 1000, "maxTokens": 900}}]}),
        );
        let b = pack(
            "b",
            json!({"turn:stop": [{"matcher": {"modes": ["loop"]}, "terminationGate": {"validator": v, "maxCycles": 2, "maxDurationMs": 5000}}]}),
        );
        let set = HookSet::resolve([(Scope::Agent, &a), (Scope::Agent, &b)]);
        let chat = Target { mode: ExecutionMode::Chat, step: None, tool: None };
        let lp = Target { mode: ExecutionMode::Loop, step: Some("x"), tool: None };
        assert_eq!(
            set.gate_limits(&chat),
            Some(GateLimits { max_cycles: 5, max_duration_ms: 1000, max_tokens: Some(900) })
        );
        assert_eq!(
            set.gate_limits(&lp),
            Some(GateLimits { max_cycles: 2, max_duration_ms: 1000, max_tokens: Some(900) })
        );
        assert_eq!(HookSet::default().gate_limits(&chat), None);
    }
}
