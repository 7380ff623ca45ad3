//! Runtime Hooks: trusted project policy that runs around agent execution.
//!
//! This module is the pure half of the hook contract — everything decidable from data:
//! the hook pack file format and its validation ([`validate`]), which hooks apply to an
//! execution and in which order ([`set`], [`matcher`]), the decisions a handler can return
//! and how their raw output is read ([`decision`]), how controlling decisions fold into one
//! verdict ([`fold`]), the termination gate's budgets ([`gate`]), the redacted envelope with
//! its stable idempotency key ([`envelope`]), the capabilities payload ([`capabilities`]) and
//! warnings about packs that never fire for an agent ([`lint`]). Running handlers (processes, HTTP, tools) is the engine's job.

pub mod capabilities;
pub mod decision;
pub mod envelope;
pub mod fold;
pub mod gate;
pub mod limits;
pub mod lint;
pub mod matcher;
pub mod pack;
mod secrets;
pub mod set;
pub mod validate;

pub use decision::{AskTimeout, Decision, FailureCause, HookFailure, HookOutcome, parse_output};
pub use envelope::{Envelope, InvocationInfo, build_envelope, message_needs_redaction, redact};
pub use fold::{
    Authorization, Flow, GateFold, GateVerdict, StopFold, StopVerdict, ToolAfterFold, ToolAfterVerdict, ToolBeforeFold,
    ToolBeforeVerdict, authorize,
};
pub use gate::{GateBudget, GateExhaustion, GateLimits};
pub use lint::{AgentTool, lint_for_agent};
pub use matcher::Target;
pub use pack::{
    ExecutionMode, Handler, Hook, HookAction, HookEvent, HookPack, Matcher, OnFailure, Scope, TerminationGate,
};
pub use secrets::{contains_token, is_secret_name};
pub use set::{HookSet, ScopedHook, resolve_named};
pub use validate::{ValidateOptions, parse_pack};
