//! Loop governance decided from data (inventory §6.4): at a lifecycle point, a loop's
//! permissions and then its policies are evaluated in order; each item is reported (matched or
//! skipped); the first matching `deny` stops the run, the first matching `approval` raises a
//! gate (unless that gate was already approved), and when any `allow` item applies to the point
//! but none matched, the point is blocked (allow-list semantics). Guards are the safe
//! expression language, over the context bag plus the point's payload; a guard that fails to
//! evaluate does not hold (fail closed: a `deny` guard that cannot be read never allows by
//! matching nothing, so `allow` lists block instead).

use crate::hooks::matcher::glob_matches;
use crate::loops::config::{
    Effect, LifecycleHook, LoopConfig, Names, Permission, PermissionResource, Policy, TimeoutAction,
};
use crate::loops::expr::holds;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Which kind of rule decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleKind {
    /// A `permissions[]` item.
    Permission,
    /// A `policies[]` item.
    Policy,
}

/// Where in a run the rules are asked.
#[derive(Debug, Clone, Copy)]
pub struct Point<'a> {
    /// The lifecycle point.
    pub hook: LifecycleHook,
    /// The loop's name.
    pub loop_name: &'a str,
    /// The step (none at `loop:start`/`loop:end`).
    pub step: Option<&'a str>,
    /// The step's type (`tool`, `agent`, `human` …).
    pub step_type: Option<&'a str>,
    /// The tool at `tool:before`/`tool:after`.
    pub tool: Option<&'a str>,
}

/// One item's evaluation, for the `permission.result`/`policy.result` trace.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleResult {
    /// Permission or policy.
    pub kind: RuleKind,
    /// Its `id`, else `<kind>-<index>`.
    pub id: String,
    /// Its effect.
    pub effect: Effect,
    /// A permission's resource.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource: Option<PermissionResource>,
    /// A permission's action.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// The point.
    pub hook: LifecycleHook,
    /// Whether it matched (its names and `when`).
    pub matched: bool,
}

/// An approval gate: which rule asked, where.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Gate {
    /// Permission or policy.
    #[serde(rename = "type")]
    pub kind: RuleKind,
    /// The rule's id.
    pub id: String,
    /// The point.
    pub hook: LifecycleHook,
    /// The step it guards, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
}

/// What the rules decided at a point.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Go on.
    Proceed,
    /// A matching `deny`, or an allow-list none of whose items matched (`id` is `None`).
    Deny {
        /// Permission or policy.
        kind: RuleKind,
        /// The deny item, or `None` for an allow-list block.
        id: Option<String>,
        /// Why, for people.
        message: String,
    },
    /// A matching `approval` not yet approved.
    Approval {
        /// The gate to approve.
        gate: Gate,
        /// Its message.
        message: String,
    },
}

/// Every item's result and the verdict at `point`; `scope` is the context bag with the
/// point's payload; `approved` tells whether a gate was already approved (a resumed run).
pub fn evaluate(
    config: &LoopConfig,
    point: &Point<'_>,
    scope: &Value,
    approved: &dyn Fn(&Gate) -> bool,
) -> (Vec<RuleResult>, Verdict) {
    let mut results = Vec::new();
    let permissions = config.permissions.as_deref().unwrap_or_default();
    let items: Vec<Item<'_>> = permissions
        .iter()
        .enumerate()
        .filter(|(_, p)| applies_to(p, point))
        .map(|(i, p)| Item::permission(i, p, point, scope))
        .collect();
    if let Some(verdict) = decide(RuleKind::Permission, &items, point, approved, &mut results) {
        return (results, verdict);
    }
    let policies = config.policies.as_deref().unwrap_or_default();
    let items: Vec<Item<'_>> = policies
        .iter()
        .enumerate()
        .filter(|(_, p)| p.hook.unwrap_or(LifecycleHook::ToolBefore) == point.hook)
        .map(|(i, p)| Item::policy(i, p, scope))
        .collect();
    let verdict = decide(RuleKind::Policy, &items, point, approved, &mut results).unwrap_or(Verdict::Proceed);
    (results, verdict)
}

/// A rule's id in traces and gates: its `id`, else `permission-<i>`/`policy-<i>`.
fn rule_id(id: Option<&String>, kind: RuleKind, index: usize) -> String {
    id.cloned().unwrap_or_else(|| format!("{}-{index}", kind_name(kind)))
}

/// The time limit of the rule behind `gate` and what it decides when it runs out (`None`: the
/// approval waits for a person however long it takes).
pub fn gate_timeout(config: &LoopConfig, gate: &Gate) -> Option<(std::time::Duration, TimeoutAction)> {
    let rules: Vec<(Option<&String>, Option<&str>, Option<TimeoutAction>)> = match gate.kind {
        RuleKind::Permission => config
            .permissions
            .iter()
            .flatten()
            .map(|p| (p.id.as_ref(), p.timeout.as_deref(), p.timeout_action))
            .collect(),
        RuleKind::Policy => {
            config.policies.iter().flatten().map(|p| (p.id.as_ref(), p.timeout.as_deref(), p.timeout_action)).collect()
        }
    };
    let (_, timeout, action) =
        rules.into_iter().enumerate().find(|(i, (id, _, _))| rule_id(*id, gate.kind, *i) == gate.id)?.1;
    let timeout = crate::tasks::parse_duration(timeout?).ok()?;
    Some((timeout, action.unwrap_or(TimeoutAction::Reject)))
}

/// One relevant item, evaluated.
struct Item<'a> {
    id: String,
    effect: Effect,
    resource: Option<PermissionResource>,
    action: Option<&'a str>,
    message: Option<&'a str>,
    matched: bool,
}

impl<'a> Item<'a> {
    fn permission(index: usize, p: &'a Permission, point: &Point<'_>, scope: &Value) -> Self {
        let m = p.matches.clone().unwrap_or_default();
        let named = names_match(m.loop_name.as_ref(), Some(point.loop_name))
            && names_match(m.step.as_ref(), point.step)
            && names_match(m.tool.as_ref(), point.tool)
            && names_match(m.human.as_ref(), point.step.filter(|_| point.step_type == Some("human")))
            && names_match(m.hook.as_ref(), Some(point.hook.as_str()));
        Self {
            id: rule_id(p.id.as_ref(), RuleKind::Permission, index),
            effect: p.effect,
            resource: Some(p.resource),
            action: p.action.as_deref(),
            message: p.message.as_deref(),
            matched: named && p.when.as_deref().is_none_or(|w| holds(w, scope)),
        }
    }

    fn policy(index: usize, p: &'a Policy, scope: &Value) -> Self {
        Self {
            id: rule_id(p.id.as_ref(), RuleKind::Policy, index),
            effect: p.effect,
            resource: None,
            action: None,
            message: p.message.as_deref(),
            matched: holds(&p.when, scope),
        }
    }
}

/// Report `items` into `results` and decide: the first matching deny, the first matching
/// approval not yet approved, or an allow-list block; `None`: go on to the next kind.
fn decide(
    kind: RuleKind,
    items: &[Item<'_>],
    point: &Point<'_>,
    approved: &dyn Fn(&Gate) -> bool,
    results: &mut Vec<RuleResult>,
) -> Option<Verdict> {
    let mut verdict = None;
    for item in items {
        results.push(RuleResult {
            kind,
            id: item.id.clone(),
            effect: item.effect,
            resource: item.resource,
            action: item.action.map(str::to_owned),
            hook: point.hook,
            matched: item.matched,
        });
        if verdict.is_some() || !item.matched {
            continue;
        }
        let message = item.message.map_or_else(|| format!("{} `{}`", kind_name(kind), item.id), str::to_owned);
        match item.effect {
            Effect::Deny => verdict = Some(Verdict::Deny { kind, id: Some(item.id.clone()), message }),
            Effect::Approval => {
                let gate = Gate { kind, id: item.id.clone(), hook: point.hook, step: point.step.map(str::to_owned) };
                if !approved(&gate) {
                    verdict = Some(Verdict::Approval { gate, message });
                }
            }
            Effect::Allow => {}
        }
    }
    let allows = items.iter().filter(|i| i.effect == Effect::Allow);
    if verdict.is_none() && allows.clone().next().is_some() && !allows.clone().any(|i| i.matched) {
        let ids: Vec<&str> = allows.map(|i| i.id.as_str()).collect();
        verdict = Some(Verdict::Deny {
            kind,
            id: None,
            message: format!(
                "allow-list blocked at {}: no {} matched ({})",
                point.hook.as_str(),
                kind_name(kind),
                ids.join(", ")
            ),
        });
    }
    verdict
}

fn kind_name(kind: RuleKind) -> &'static str {
    match kind {
        RuleKind::Permission => "permission",
        RuleKind::Policy => "policy",
    }
}

/// Whether permission `p` is asked at `point`: its `match.hook` when given, else its
/// resource's own point (`loop` at `loop:start`, `step` and `human` at `step:before`, `model`
/// at `model:before`, `tool` at `tool:before`); a `human` permission only for human steps.
fn applies_to(p: &Permission, point: &Point<'_>) -> bool {
    let at_point = match p.matches.as_ref().and_then(|m| m.hook.as_ref()) {
        Some(_) => true,
        None => {
            let own = match p.resource {
                PermissionResource::Loop => LifecycleHook::LoopStart,
                PermissionResource::Step | PermissionResource::Human => LifecycleHook::StepBefore,
                PermissionResource::Model => LifecycleHook::ModelBefore,
                PermissionResource::Tool => LifecycleHook::ToolBefore,
            };
            own == point.hook
        }
    };
    let resource_here = match p.resource {
        PermissionResource::Human => point.step_type == Some("human"),
        PermissionResource::Tool => point.tool.is_some(),
        PermissionResource::Step | PermissionResource::Model => point.step.is_some(),
        PermissionResource::Loop => true,
    };
    at_point && resource_here
}

/// A `match` field: absent matches anything; given, the point's value must match one glob.
fn names_match(names: Option<&Names>, value: Option<&str>) -> bool {
    match names {
        None => true,
        Some(names) => value.is_some_and(|v| names.as_slice().iter().any(|p| glob_matches(p, v))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config(governance: Value) -> LoopConfig {
        let mut raw = json!({"name": "g", "start": "a", "steps": {"a": {"type": "tool", "tool": "bash"}}});
        for (k, v) in governance.as_object().unwrap() {
            raw[k] = v.clone();
        }
        serde_json::from_value(raw).unwrap()
    }

    fn at_tool(tool: &str) -> Point<'_> {
        Point {
            hook: LifecycleHook::ToolBefore,
            loop_name: "g",
            step: Some("a"),
            step_type: Some("tool"),
            tool: Some(tool),
        }
    }

    #[test]
    fn first_matching_deny_wins_and_every_item_is_reported() {
        let c = config(json!({"permissions": [
            {"id": "no-bash", "resource": "tool", "effect": "deny", "match": {"tool": "ba*"}},
            {"id": "no-read", "resource": "tool", "effect": "deny", "match": {"tool": "read"}}
        ]}));
        let (results, verdict) = evaluate(&c, &at_tool("bash"), &json!({}), &|_| false);
        assert_eq!(
            results.iter().map(|r| (r.id.as_str(), r.matched)).collect::<Vec<_>>(),
            [("no-bash", true), ("no-read", false)]
        );
        assert!(
            matches!(verdict, Verdict::Deny { kind: RuleKind::Permission, id: Some(ref id), .. } if id == "no-bash")
        );
    }

    #[test]
    fn an_allow_list_blocks_what_it_does_not_name() {
        let c = config(
            json!({"permissions": [{"id": "only-read", "resource": "tool", "effect": "allow", "match": {"tool": "read"}}]}),
        );
        let (_, verdict) = evaluate(&c, &at_tool("bash"), &json!({}), &|_| false);
        assert!(matches!(verdict, Verdict::Deny { id: None, .. }));
        assert_eq!(evaluate(&c, &at_tool("read"), &json!({}), &|_| false).1, Verdict::Proceed);
    }

    #[test]
    fn an_approval_policy_gates_until_approved_and_guards_read_the_payload() {
        let c =
            config(json!({"policies": [{"id": "review-bash", "effect": "approval", "when": "tool.name == 'bash'"}]}));
        let scope = json!({"tool": {"name": "bash"}});
        let (_, verdict) = evaluate(&c, &at_tool("bash"), &scope, &|_| false);
        let Verdict::Approval { gate, .. } = verdict else { panic!("{verdict:?}") };
        assert_eq!((gate.id.as_str(), gate.step.as_deref()), ("review-bash", Some("a")));
        assert_eq!(evaluate(&c, &at_tool("bash"), &scope, &|g| *g == gate).1, Verdict::Proceed);
        let other = json!({"tool": {"name": "read"}});
        assert_eq!(evaluate(&c, &at_tool("read"), &other, &|_| false).1, Verdict::Proceed);
    }
}
