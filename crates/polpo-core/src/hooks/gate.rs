//! The cumulative budgets of a termination gate.
//!
//! A validate-and-repair loop is only safe with hard limits that no hook author has to
//! remember: repairs (`maxCycles`), wall time from invocation start (`maxDurationMs`),
//! reported tokens (`maxTokens`) and the agent's own `maxTurns`. Several matching gates
//! merge to the strictest limit of each kind. Time is passed in, never read here.

use super::pack::TerminationGate;
use crate::message::Usage;
use serde::{Deserialize, Serialize};

/// The merged limits of every gate that applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GateLimits {
    /// Allowed repairs.
    pub max_cycles: u32,
    /// Elapsed time from invocation start.
    pub max_duration_ms: u64,
    /// Reported tokens; `None` when no gate sets it.
    pub max_tokens: Option<u64>,
}

impl GateLimits {
    /// The limits of one gate.
    pub fn of(gate: &TerminationGate) -> Self {
        Self { max_cycles: gate.max_cycles, max_duration_ms: gate.max_duration_ms, max_tokens: gate.max_tokens }
    }

    /// The smaller of each limit of `self` and `other`.
    pub fn merge(self, other: Self) -> Self {
        let max_tokens = match (self.max_tokens, other.max_tokens) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Self {
            max_cycles: self.max_cycles.min(other.max_cycles),
            max_duration_ms: self.max_duration_ms.min(other.max_duration_ms),
            max_tokens,
        }
    }

    /// The strictest limits of `gates`; `None` when there is none.
    pub fn strictest<'a>(gates: impl IntoIterator<Item = &'a TerminationGate>) -> Option<Self> {
        gates.into_iter().map(Self::of).reduce(Self::merge)
    }
}

/// Which budget ran out; each maps to a `termination_gate_*` error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GateExhaustion {
    /// `maxCycles` repairs were used and the validator still said `continue`.
    Cycles,
    /// The agent's `maxTurns` model calls were used while the gate was active.
    Turns,
    /// `maxDurationMs` passed since the invocation started.
    Time,
    /// Reported tokens exceeded `maxTokens`.
    Tokens,
    /// `maxTokens` is set but the provider reported no usage, so the budget cannot be enforced.
    UsageUnknown,
}

impl GateExhaustion {
    /// Stable error code.
    pub fn code(self) -> &'static str {
        match self {
            Self::Cycles => "termination_gate_cycles_exhausted",
            Self::Turns => "termination_gate_turns_exhausted",
            Self::Time => "termination_gate_time_exhausted",
            Self::Tokens => "termination_gate_tokens_exhausted",
            Self::UsageUnknown => "termination_gate_usage_unknown",
        }
    }
}

/// What a gate has consumed so far in one invocation. Serializable so a durable run can
/// checkpoint it and a resume cannot loosen it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GateBudget {
    /// The limits in force.
    pub limits: GateLimits,
    /// Repairs started (`continue` decisions honoured).
    pub cycles_used: u32,
    /// Reported tokens of every model call of the invocation.
    pub tokens_used: u64,
    /// Validations run (1-based number of the next candidate minus one).
    pub termination_attempts: u32,
}

impl GateBudget {
    /// A fresh budget under `limits`.
    pub fn new(limits: GateLimits) -> Self {
        Self { limits, cycles_used: 0, tokens_used: 0, termination_attempts: 0 }
    }

    /// Fails once `elapsed_ms` since invocation start reaches `maxDurationMs`.
    pub fn check_time(&self, elapsed_ms: u64) -> Result<(), GateExhaustion> {
        if elapsed_ms >= self.limits.max_duration_ms { Err(GateExhaustion::Time) } else { Ok(()) }
    }

    /// Account one model call. `None` means the provider reported no usage, which is only
    /// acceptable when no token budget is set.
    pub fn record_usage(&mut self, usage: Option<Usage>) -> Result<(), GateExhaustion> {
        let Some(max) = self.limits.max_tokens else { return Ok(()) };
        let usage = usage.ok_or(GateExhaustion::UsageUnknown)?;
        self.tokens_used = self.tokens_used.saturating_add(usage.total());
        if self.tokens_used > max { Err(GateExhaustion::Tokens) } else { Ok(()) }
    }

    /// The most output tokens the next model call may produce, so a call cannot overshoot
    /// the budget by more than its (already processed) input.
    pub fn output_cap(&self) -> Option<u64> {
        self.limits.max_tokens.map(|max| max.saturating_sub(self.tokens_used).max(1))
    }

    /// The budget to continue with after a resume: what was already consumed is kept, and
    /// the limits are the stricter of the checkpointed and the currently configured ones, so
    /// editing a pack (or resuming elsewhere) can never loosen a running gate.
    pub fn resumed(stored: GateBudget, configured: GateLimits) -> Self {
        Self { limits: stored.limits.merge(configured), ..stored }
    }

    /// Start the next validation; returns the 1-based `terminationAttempt`.
    pub fn begin_attempt(&mut self) -> u32 {
        self.termination_attempts += 1;
        self.termination_attempts
    }

    /// Honour a `continue`: fails when every allowed repair was already used.
    pub fn begin_cycle(&mut self) -> Result<u32, GateExhaustion> {
        if self.cycles_used >= self.limits.max_cycles {
            return Err(GateExhaustion::Cycles);
        }
        self.cycles_used += 1;
        Ok(self.cycles_used)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn limits() -> impl Strategy<Value = GateLimits> {
        (1u32..=20, 1u64..=3_600_000, prop::option::of(1u64..=10_000_000)).prop_map(|(c, d, t)| GateLimits {
            max_cycles: c,
            max_duration_ms: d,
            max_tokens: t,
        })
    }

    proptest! {
        /// Merging never loosens any limit of any gate, and is order-independent.
        #[test]
        fn several_gates_use_the_strictest_limits(ls in prop::collection::vec(limits(), 1..5)) {
            let merged = ls.iter().copied().reduce(GateLimits::merge).unwrap();
            for l in &ls {
                prop_assert!(merged.max_cycles <= l.max_cycles);
                prop_assert!(merged.max_duration_ms <= l.max_duration_ms);
                if let Some(t) = l.max_tokens { prop_assert!(merged.max_tokens.unwrap() <= t); }
            }
            let rev = ls.iter().rev().copied().reduce(GateLimits::merge).unwrap();
            prop_assert_eq!(merged, rev);
        }

        /// Resuming never loosens a limit and never forgets consumption.
        #[test]
        fn resuming_cannot_loosen_the_budget(stored in limits(), configured in limits(), cycles in 0u32..20, tokens in 0u64..1_000_000) {
            let before = GateBudget { limits: stored, cycles_used: cycles, tokens_used: tokens, termination_attempts: cycles };
            let after = GateBudget::resumed(before, configured);
            prop_assert!(after.limits.max_cycles <= stored.max_cycles);
            prop_assert!(after.limits.max_duration_ms <= stored.max_duration_ms);
            if let Some(t) = stored.max_tokens { prop_assert!(after.limits.max_tokens.unwrap() <= t); }
            prop_assert_eq!((after.cycles_used, after.tokens_used), (cycles, tokens));
        }
    }

    #[test]
    fn cycles_run_out_after_max_cycles_repairs() {
        let mut b = GateBudget::new(GateLimits { max_cycles: 2, max_duration_ms: 1000, max_tokens: None });
        assert_eq!(b.begin_cycle(), Ok(1));
        assert_eq!(b.begin_cycle(), Ok(2));
        assert_eq!(b.begin_cycle(), Err(GateExhaustion::Cycles));
    }

    #[test]
    fn token_budget_needs_reported_usage() {
        let mut b = GateBudget::new(GateLimits { max_cycles: 1, max_duration_ms: 1000, max_tokens: Some(100) });
        assert_eq!(b.record_usage(Some(Usage { input_tokens: 60, output_tokens: 20 })), Ok(()));
        assert_eq!(b.output_cap(), Some(20));
        assert_eq!(b.record_usage(None), Err(GateExhaustion::UsageUnknown));
        assert_eq!(b.record_usage(Some(Usage { input_tokens: 30, output_tokens: 0 })), Err(GateExhaustion::Tokens));
        let mut free = GateBudget::new(GateLimits { max_tokens: None, ..b.limits });
        assert_eq!(free.record_usage(None), Ok(()));
        assert_eq!(b.check_time(999), Ok(()));
        assert_eq!(b.check_time(1000), Err(GateExhaustion::Time));
    }
}
