//! The execution router at request time: for a chat that names no loop, to an agent with no
//! `defaultLoop` and `"executionRouter": {"mode": "auto"}`, one bounded classifier call decides
//! whether one of the agent's `allowedLoops` runs the request or the agent answers directly.
//!
//! The decision rules are `polpo_core::loops::router`'s; this module adds the I/O: the agent's
//! own model chain answers a tool-free, structured (`response_format`) request within the
//! router's time budget, seeing at most `maxInputChars` of the user's text. Routing fails open
//! to a direct chat (timeout, provider error, unreadable answer); a caller that goes away drops
//! the future and the classifier call with it. Each decision is published as an
//! `execution:routed` event.

use crate::request::ChatInput;
use crate::routing::{bounded_answer, classifier_request};
use crate::runtime::Runtime;
use polpo_core::loops::router::{
    ExecutionRoute, LoopCandidate, ROUTER_MAX_TOKENS, decide, router_input, router_prompt, router_response_format,
};
use std::sync::Arc;
use std::time::Instant;

/// Bytes of classifier answer read: the JSON answer is small; a provider streaming more is cut off.
const MAX_ROUTER_ANSWER_BYTES: usize = 4 * 1024;

impl Runtime {
    /// The route of `input` when its agent routes automatically: `None` when the router does
    /// not apply (a loop is named, the agent has a `defaultLoop`, no router or mode `off`),
    /// `Some(route)` with the loop to run or a direct answer.
    pub async fn route_execution(
        self: &Arc<Self>,
        input: &ChatInput,
        named_loop: Option<&str>,
    ) -> Option<ExecutionRoute> {
        let loaded = self.loaded();
        let agent = loaded.agent(&input.agent)?;
        let router = match &agent.config.execution_router {
            Some(router) if router.is_auto() && named_loop.is_none() && agent.config.default_loop.is_none() => router,
            _ => return None,
        };
        let started = Instant::now();
        let elapsed = || u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let limits = router.limits();
        let allowed = router.allowed_loops.clone().unwrap_or_default();
        let candidates: Vec<LoopCandidate> = allowed
            .iter()
            .filter_map(|id| {
                let found = loaded.project.loops.get(id)?;
                let about = found.config.description.clone().or_else(|| found.config.label.clone());
                Some(LoopCandidate { id: id.clone(), about })
            })
            .collect();
        let route = if candidates.is_empty() {
            ExecutionRoute::fallback("router_no_candidates", elapsed())
        } else {
            match self.provider_for(&loaded, agent) {
                Err(_) => ExecutionRoute::fallback("router_failed", elapsed()),
                Ok(model) => {
                    let text = crate::interaction::last_user_text(&input.messages).unwrap_or_default();
                    let request = classifier_request(
                        router_prompt(&candidates),
                        router_input(&text, limits.max_input_chars).to_owned(),
                        ROUTER_MAX_TOKENS,
                        Some(router_response_format(&candidates)),
                    );
                    let budget = std::time::Duration::from_millis(limits.timeout_ms);
                    let call = crate::meter::external(bounded_answer(&*model, request, MAX_ROUTER_ANSWER_BYTES));
                    match tokio::time::timeout(budget, call).await {
                        Err(_) => ExecutionRoute::fallback("router_timeout", elapsed()),
                        Ok(None) => ExecutionRoute::fallback("router_failed", elapsed()),
                        Ok(Some(answer)) => decide(&answer, &allowed, &limits, elapsed()),
                    }
                }
            }
        };
        let mut event = serde_json::to_value(&route).unwrap_or_default();
        event["agent"] = serde_json::Value::String(agent.id.clone());
        if let Some(name) = crate::events::EventKind::ExecutionRouted.bus_name() {
            self.events().publish(name, event);
        }
        Some(route)
    }
}
