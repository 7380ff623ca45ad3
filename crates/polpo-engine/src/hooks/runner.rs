//! One event's hooks: controlling hooks one after another (each sees the previous `modify`),
//! observe-only hooks concurrently beside them, every execution traced with its stable id.

use super::InvocationHooks;
use super::handlers;
use crate::events::{EventSink, RunEvent};
use crate::invocation::Invocation;
use futures::future::join_all;
use polpo_core::hooks::{
    Flow, GateFold, GateVerdict, Hook, HookEvent, HookOutcome, ScopedHook, StopFold, StopVerdict, Target,
    ToolAfterFold, ToolAfterVerdict, ToolBeforeFold, ToolBeforeVerdict, build_envelope,
};
use serde_json::{Value, json};

/// Where in the run an event happens.
pub(crate) struct At<'a> {
    pub inv: &'a Invocation,
    pub hooks: &'a InvocationHooks,
    pub turn: u32,
    /// Distinguishes executions of one hook within one turn (call id, attempt number).
    pub subject: String,
    pub sink: EventSink<'a>,
}

/// Run one hook and trace it.
async fn run_one(at: &At<'_>, scoped: &ScopedHook, data: Value) -> HookOutcome {
    let envelope = build_envelope(&at.hooks.info, at.turn, scoped, &at.subject, data, &at.hooks.secrets);
    let id = envelope.hook_execution_id.clone();
    let hook = scoped.hook.qualified_id();
    (at.sink)(RunEvent::HookStarted {
        hook_execution_id: id.clone(),
        hook: hook.clone(),
        event: scoped.hook.event,
        observe: scoped.hook.observe,
    });
    let outcome =
        crate::meter::external(handlers::run(at.inv, &at.hooks.runtime, scoped.hook.action.handler(), &envelope)).await;
    let (decision, error) = match &outcome {
        Ok(d) => (Some(d.name().to_string()), None),
        Err(f) => (None, Some(f.to_string())),
    };
    (at.sink)(RunEvent::HookCompleted { hook_execution_id: id, hook, event: scoped.hook.event, decision, error });
    outcome
}

/// Run the hooks of `event` for `target`: observers concurrently with the controlling chain,
/// whose outcomes are folded into `fold` in order until it halts.
async fn run_chain<F>(
    at: &At<'_>,
    event: HookEvent,
    target: &Target<'_>,
    fold: &mut F,
    data: impl Fn(&F) -> Value,
    apply: fn(&mut F, &Hook, HookOutcome) -> Flow,
) {
    let applicable = at.hooks.set.applicable(event, target);
    let first = data(fold);
    let observers = join_all(applicable.observers.iter().map(|s| run_one(at, s, first.clone())));
    let controlling = async {
        for scoped in applicable.controlling {
            let outcome = run_one(at, scoped, data(fold)).await;
            if apply(fold, &scoped.hook, outcome) == Flow::Halt {
                break;
            }
        }
    };
    // Observers' answers are telemetry only: their outcomes are dropped here.
    let _ = futures::join!(observers, controlling);
}

/// `tool:before` for one call with its parsed input.
pub(crate) async fn tool_before(at: &At<'_>, tool: &str, input: Value) -> ToolBeforeVerdict {
    let mut fold = ToolBeforeFold::new(input);
    let target = at.hooks.target(Some(tool));
    run_chain(
        at,
        HookEvent::ToolBefore,
        &target,
        &mut fold,
        |f| json!({ "tool": { "name": tool, "input": f.input() } }),
        ToolBeforeFold::apply,
    )
    .await;
    fold.finish()
}

/// `tool:after` for one call's model-visible result.
pub(crate) async fn tool_after(
    at: &At<'_>,
    tool: &str,
    input: &Value,
    result: String,
    is_error: bool,
) -> ToolAfterVerdict {
    let mut fold = ToolAfterFold::new(result, is_error);
    let target = at.hooks.target(Some(tool));
    let data = |f: &ToolAfterFold| json!({ "tool": { "name": tool, "input": input }, "result": f.result(), "isError": f.is_error() });
    run_chain(at, HookEvent::ToolAfter, &target, &mut fold, data, ToolAfterFold::apply).await;
    fold.finish()
}

/// `turn:stop` outside a gate: accept, ask for one recovery step, or fail.
pub(crate) async fn turn_stop(at: &At<'_>, candidate: &str, recovery: bool) -> StopVerdict {
    let mut fold = StopFold::default();
    let target = at.hooks.target(None);
    run_chain(
        at,
        HookEvent::TurnStop,
        &target,
        &mut fold,
        |_| json!({ "candidate": candidate, "recovery": recovery }),
        StopFold::apply,
    )
    .await;
    fold.finish()
}

/// `turn:stop` inside a gate: validators (and ordinary stop hooks) judge the candidate.
pub(crate) async fn validate(at: &At<'_>, candidate: &str, attempt: u32, cycle: u32) -> GateVerdict {
    let mut fold = GateFold::default();
    let target = at.hooks.target(None);
    let data =
        |_: &GateFold| json!({ "candidate": candidate, "terminationAttempt": attempt, "correctionCycle": cycle });
    run_chain(at, HookEvent::TurnStop, &target, &mut fold, data, GateFold::apply).await;
    fold.finish()
}

/// How many (controlling, observe-only) `turn:stop` hooks apply to this invocation.
pub(crate) fn stop_hooks(hooks: &InvocationHooks) -> (usize, usize) {
    let a = hooks.set.applicable(HookEvent::TurnStop, &hooks.target(None));
    (a.controlling.len(), a.observers.len())
}
