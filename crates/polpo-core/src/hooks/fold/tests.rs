//! One test per row of the README precedence table, plus property tests for the two
//! guarantees that must never regress: hooks never widen the tool policy, and observe-only
//! hooks never change anything.

use super::*;
use crate::hooks::pack::{Handler, HookAction, HookEvent, Matcher, TerminationGate};
use crate::policy::PolicyLayer;
use proptest::prelude::*;
use serde_json::json;

fn hook(id: &str, event: HookEvent, observe: bool, on_failure: OnFailure) -> Hook {
    Hook {
        pack: "p".into(),
        id: id.into(),
        description: None,
        event,
        declaration: 0,
        priority: 100,
        observe,
        matcher: Matcher::default(),
        action: HookAction::Handler(Handler::Command {
            command: "x".into(),
            env: Default::default(),
            timeout_ms: None,
        }),
        on_failure,
    }
}

fn before(id: &str) -> Hook {
    hook(id, HookEvent::ToolBefore, false, OnFailure::Fail)
}

fn gate(id: &str) -> Hook {
    let mut h = hook(id, HookEvent::TurnStop, false, OnFailure::Continue);
    h.action = HookAction::Gate(TerminationGate {
        validator: Handler::Command { command: "x".into(), env: Default::default(), timeout_ms: None },
        max_cycles: 2,
        max_duration_ms: 1000,
        max_tokens: None,
    });
    h
}

fn fail(cause: FailureCause) -> HookOutcome {
    Err(HookFailure::new(cause, "boom"))
}

fn fold_before(steps: Vec<(Hook, HookOutcome)>) -> ToolBeforeVerdict {
    let mut f = ToolBeforeFold::new(json!({"path": "a"}));
    for (h, o) in steps {
        if f.apply(&h, o) == Flow::Halt {
            break;
        }
    }
    f.finish()
}

fn deny(r: &str) -> HookOutcome {
    Ok(Decision::Deny { reason: r.into() })
}

fn modify(v: Value) -> HookOutcome {
    Ok(Decision::Modify { input: Some(v), result: None })
}

// ---- tool:before rows ----

#[test]
fn row_no_hook_or_allow_or_defer_proceeds_with_the_input() {
    assert_eq!(fold_before(vec![]), ToolBeforeVerdict::Proceed { input: json!({"path": "a"}) });
    assert_eq!(
        fold_before(vec![(before("a"), Ok(Decision::Allow)), (before("b"), Ok(Decision::Defer))]),
        ToolBeforeVerdict::Proceed { input: json!({"path": "a"}) }
    );
}

#[test]
fn row_deny_wins_over_earlier_allow_and_ask_and_stops_the_chain() {
    let mut f = ToolBeforeFold::new(json!({}));
    assert_eq!(f.apply(&before("a"), Ok(Decision::Allow)), Flow::Next);
    assert_eq!(f.apply(&before("b"), Ok(Decision::Ask { reason: "check".into(), timeout: None })), Flow::Next);
    assert_eq!(f.apply(&before("c"), deny("no")), Flow::Halt);
    assert_eq!(f.apply(&before("d"), Ok(Decision::Allow)), Flow::Halt, "later hooks do not run");
    assert!(matches!(f.finish(), ToolBeforeVerdict::Deny { code: "hook_denied", hook, .. } if hook == "p/c"));
}

#[test]
fn row_allow_after_deny_cannot_lift_it() {
    let v = fold_before(vec![(before("a"), deny("no")), (before("b"), Ok(Decision::Allow))]);
    assert!(matches!(v, ToolBeforeVerdict::Deny { .. }));
}

#[test]
fn row_ask_without_deny_requires_approval_of_the_modified_input() {
    let v = fold_before(vec![
        (before("a"), Ok(Decision::Ask { reason: "risky".into(), timeout: None })),
        (before("b"), Ok(Decision::Modify { input: Some(json!({"command": "ls"})), result: None })),
    ]);
    assert!(matches!(v, ToolBeforeVerdict::ApprovalRequired { .. }));
    let a = authorize(&ToolPolicy::unrestricted(), "bash", v.clone());
    assert_eq!(
        a,
        Authorization::Ask {
            hook: "p/a".into(),
            reason: "risky".into(),
            timeout: None,
            input: json!({"command": "ls"})
        }
    );
    // The policy still wins over an ask: a denied tool is never offered for approval.
    let policy = ToolPolicy::unrestricted().narrow(PolicyLayer::Agent, Some(&["read".to_string()]));
    assert!(matches!(authorize(&policy, "bash", v), Authorization::Refuse { code: "tool_policy_denied", .. }));
}

#[test]
fn row_modify_chains_and_the_last_input_is_executed() {
    let mut f = ToolBeforeFold::new(json!({"path": "a"}));
    f.apply(&before("a"), modify(json!({"path": "b"})));
    assert_eq!(f.input(), &json!({"path": "b"}), "the next hook sees the modified input");
    f.apply(&before("b"), modify(json!({"path": "c"})));
    assert_eq!(
        authorize(&ToolPolicy::unrestricted(), "read", f.finish()),
        Authorization::Execute { input: json!({"path": "c"}) }
    );
}

#[test]
fn row_modify_without_an_object_input_is_a_failure() {
    let v = fold_before(vec![(before("a"), Ok(Decision::Modify { input: Some(json!("rm -rf")), result: None }))]);
    assert!(matches!(v, ToolBeforeVerdict::Deny { code: "hook_failed", .. }));
}

#[test]
fn row_stop_ends_the_run() {
    let v = fold_before(vec![(before("a"), Ok(Decision::Stop { feedback: Some("enough".into()) }))]);
    assert!(matches!(
        authorize(&ToolPolicy::unrestricted(), "x", v),
        Authorization::EndRun { code: "hook_stopped", .. }
    ));
}

#[test]
fn row_failure_obeys_on_failure() {
    let v = fold_before(vec![(before("a"), fail(FailureCause::Timeout))]);
    assert!(
        matches!(v, ToolBeforeVerdict::Deny { code: "hook_failed", ref reason, .. } if reason.contains("hook_timeout"))
    );
    let lenient = hook("a", HookEvent::ToolBefore, false, OnFailure::Continue);
    assert_eq!(
        fold_before(vec![(lenient, fail(FailureCause::Timeout))]),
        ToolBeforeVerdict::Proceed { input: json!({"path": "a"}) }
    );
}

#[test]
fn row_continue_and_accept_are_rejected_outside_a_gate() {
    for d in [Decision::Continue { diagnostics: json!({"x": 1}) }, Decision::Accept] {
        let v = fold_before(vec![(before("a"), Ok(d))]);
        assert!(
            matches!(v, ToolBeforeVerdict::Deny { code: "hook_failed", ref reason, .. } if reason.contains("hook_decision_not_allowed")),
            "{v:?}"
        );
    }
}

#[test]
fn row_policy_denied_tools_stay_denied_whatever_the_hooks_say() {
    let policy = ToolPolicy::unrestricted().narrow(PolicyLayer::Agent, Some(&["read".to_string()]));
    let v = fold_before(vec![(before("a"), Ok(Decision::Allow))]);
    assert!(matches!(authorize(&policy, "bash", v), Authorization::Refuse { code: "tool_policy_denied", .. }));
}

#[test]
fn row_observe_only_hooks_change_nothing() {
    let obs = hook("o", HookEvent::ToolBefore, true, OnFailure::Fail);
    let v = fold_before(vec![
        (obs.clone(), deny("no")),
        (obs.clone(), modify(json!({"x": 1}))),
        (obs, fail(FailureCause::Timeout)),
    ]);
    assert_eq!(v, ToolBeforeVerdict::Proceed { input: json!({"path": "a"}) });
}

// ---- tool:after rows ----

#[test]
fn tool_after_modify_replaces_the_result_and_deny_withholds_it() {
    let after = |id| hook(id, HookEvent::ToolAfter, false, OnFailure::Fail);
    let mut f = ToolAfterFold::new("secret=1".into(), false);
    f.apply(&after("a"), Ok(Decision::Modify { input: None, result: Some(json!("secret=[hidden]")) }));
    assert_eq!(f.result(), "secret=[hidden]");
    f.apply(&after("b"), Ok(Decision::Modify { input: None, result: Some(json!({"n": 1})) }));
    assert_eq!(f.clone().finish().result, r#"{"n":1}"#);
    f.apply(&after("c"), deny("not for the model"));
    let v = f.finish();
    assert!(v.is_error && v.result.starts_with("Error: hook_denied: not for the model"));
    let mut failing = ToolAfterFold::new("raw".into(), false);
    failing.apply(&after("d"), fail(FailureCause::EmptyOutput));
    let v = failing.finish();
    assert!(v.is_error && !v.result.contains("raw"), "a failing post-processor withholds the result");
    let mut asked = ToolAfterFold::new("raw".into(), false);
    asked.apply(
        &hook("e", HookEvent::ToolAfter, false, OnFailure::Continue),
        Ok(Decision::Ask { reason: "?".into(), timeout: None }),
    );
    assert_eq!(asked.finish().result, "raw");
}

// ---- turn:stop rows ----

#[test]
fn stop_feedback_asks_for_recovery_and_continue_is_rejected_outside_a_gate() {
    let stop = |id| hook(id, HookEvent::TurnStop, false, OnFailure::Fail);
    let mut f = StopFold::default();
    f.apply(&stop("a"), Ok(Decision::Stop { feedback: None }));
    f.apply(&stop("b"), Ok(Decision::Stop { feedback: Some("cite sources".into()) }));
    assert_eq!(f.finish(), StopVerdict::Feedback { hook: "p/b".into(), feedback: "cite sources".into() });
    let mut f = StopFold::default();
    f.apply(&stop("c"), Ok(Decision::Continue { diagnostics: json!(1) }));
    assert!(
        matches!(f.finish(), StopVerdict::Fail { ref reason, .. } if reason.contains("only valid inside a configured termination gate"))
    );
    let mut f = StopFold::default();
    f.apply(&hook("d", HookEvent::TurnStop, false, OnFailure::Continue), fail(FailureCause::Timeout));
    assert_eq!(f.finish(), StopVerdict::Accept);
}

// ---- termination gate rows ----

fn fold_gate(steps: Vec<(Hook, HookOutcome)>) -> GateVerdict {
    let mut f = GateFold::default();
    for (h, o) in steps {
        if f.apply(&h, o) == Flow::Halt {
            break;
        }
    }
    f.finish()
}

#[test]
fn gate_accept_continue_and_stop_feedback() {
    assert_eq!(fold_gate(vec![(gate("g"), Ok(Decision::Accept))]), GateVerdict::Accept);
    assert_eq!(
        fold_gate(vec![(gate("g"), Ok(Decision::Continue { diagnostics: json!({"failing": 2}) }))]),
        GateVerdict::Continue { hook: "p/g".into(), diagnostics: json!({"failing": 2}) }
    );
    assert_eq!(
        fold_gate(vec![(gate("g"), Ok(Decision::Stop { feedback: Some("fix".into()) }))]),
        GateVerdict::Continue { hook: "p/g".into(), diagnostics: json!({"feedback": "fix"}) }
    );
    let ordinary = hook("o", HookEvent::TurnStop, false, OnFailure::Fail);
    assert!(matches!(
        fold_gate(vec![
            (ordinary, Ok(Decision::Stop { feedback: Some("more".into()) })),
            (gate("g"), Ok(Decision::Accept))
        ]),
        GateVerdict::Continue { .. }
    ));
}

#[test]
fn gate_validators_fail_closed_even_with_on_failure_continue() {
    for cause in [
        FailureCause::EmptyOutput,
        FailureCause::MissingDecision,
        FailureCause::InvalidFeedback,
        FailureCause::Timeout,
        FailureCause::HandlerError,
    ] {
        let v = fold_gate(vec![(gate("g"), fail(cause))]);
        assert!(
            matches!(v, GateVerdict::Reject { ref reason, .. } if reason.starts_with(cause.code())),
            "{cause:?}: {v:?}"
        );
    }
    for d in
        [Decision::Stop { feedback: None }, Decision::Allow, Decision::Defer, Decision::Deny { reason: "bad".into() }]
    {
        assert!(matches!(fold_gate(vec![(gate("g"), Ok(d.clone()))]), GateVerdict::Reject { .. }), "{d:?}");
    }
}

// ---- properties ----

fn decision() -> impl Strategy<Value = HookOutcome> {
    prop_oneof![
        Just(Ok(Decision::Allow)),
        Just(Ok(Decision::Defer)),
        Just(Ok(Decision::Deny { reason: "r".into() })),
        Just(Ok(Decision::Ask { reason: "r".into(), timeout: None })),
        Just(Ok(Decision::Modify { input: Some(json!({"path": "other"})), result: None })),
        Just(Ok(Decision::Stop { feedback: None })),
        Just(Ok(Decision::Continue { diagnostics: json!(1) })),
        Just(Ok(Decision::Accept)),
        Just(fail(FailureCause::Timeout)),
    ]
}

fn step() -> impl Strategy<Value = (bool, bool, HookOutcome)> {
    (any::<bool>(), any::<bool>(), decision())
}

fn to_hooks(steps: &[(bool, bool, HookOutcome)]) -> Vec<(Hook, HookOutcome)> {
    steps
        .iter()
        .enumerate()
        .map(|(i, (observe, lenient, o))| {
            let on_failure = if *lenient { OnFailure::Continue } else { OnFailure::Fail };
            (hook(&format!("h{i}"), HookEvent::ToolBefore, *observe, on_failure), o.clone())
        })
        .collect()
}

proptest! {
    /// Whatever the hooks decide, a tool the policy denies is never executed.
    #[test]
    fn a_hook_can_never_grant_a_tool_the_policy_denies(
        steps in prop::collection::vec(step(), 0..6),
        allowed in prop::collection::vec(prop::sample::select(vec!["read", "write", "site_*", "*"]), 0..3),
        tool in prop::sample::select(vec!["read", "write", "bash", "site_get"]),
    ) {
        let allowed: Vec<String> = allowed.into_iter().map(String::from).collect();
        let policy = ToolPolicy::unrestricted().narrow(PolicyLayer::Agent, Some(&allowed));
        let a = authorize(&policy, tool, fold_before(to_hooks(&steps)));
        if !policy.allows(tool) {
            prop_assert!(matches!(a, Authorization::Refuse { code: "tool_policy_denied", .. }), "{a:?}");
        }
    }

    /// Any controlling deny means the call does not run.
    #[test]
    fn deny_always_wins(steps in prop::collection::vec(step(), 0..6)) {
        let hooks = to_hooks(&steps);
        let v = fold_before(hooks.clone());
        let any_final = hooks.iter().any(|(h, o)| !h.observe && matches!(o, Ok(Decision::Deny { .. }) | Ok(Decision::Stop { .. })));
        if any_final {
            prop_assert!(!matches!(v, ToolBeforeVerdict::Proceed { .. }), "{v:?}");
        }
    }

    /// Removing every observe-only hook never changes the verdict.
    #[test]
    fn observe_only_hooks_cannot_change_execution(steps in prop::collection::vec(step(), 0..6)) {
        let hooks = to_hooks(&steps);
        let without: Vec<_> = hooks.iter().filter(|(h, _)| !h.observe).cloned().collect();
        prop_assert_eq!(fold_before(hooks), fold_before(without));
    }
}
