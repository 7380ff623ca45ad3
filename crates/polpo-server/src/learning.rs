//! Memory learning wired into a served runtime: the built-in model extractor over each
//! agent's own model chain, the runtime's turn observer that writes the outbox once a turn is
//! committed and then extracts in the background, events on the runtime's bus, and a pass over
//! the outbox at start (what a crash left there).
//!
//! The trusted user of a turn is the API key its session belongs to, taken from
//! authentication, never from a request body; a server without keys (reachable from this
//! machine only) has one user, `local`.

use std::sync::{Arc, Weak};

use async_trait::async_trait;
use polpo_core::config::enums::LearningSurface;
use polpo_engine::{CommittedTurn, Runtime, Surface, TurnObserver};
use polpo_memory::learning::{self, Learner, LearningEvent, ModelExtractor};
use polpo_store::{LearningStore, SourceTurn};

use crate::state::AppState;

/// How often turns whose extraction failed are tried again.
const RETRY_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// The user of every turn on a server without API keys.
pub const LOCAL_USER: &str = "local";

/// Start learning for `state`'s runtime: build the [`Learner`], observe committed turns and
/// drain what the outbox holds. Call once, after `state.memory` is the project's memory (the
/// one items are applied to).
pub fn start_learning(state: &mut AppState) {
    let runtime = &state.runtime;
    let weak = Arc::downgrade(runtime);
    let models = weak.clone();
    let model_for = move |agent: &str| {
        let runtime = models.upgrade().ok_or("the runtime is gone")?;
        let loaded = runtime.loaded();
        let agent = loaded.agent(agent).ok_or_else(|| format!("agent `{agent}` is gone"))?;
        runtime.provider_for(&loaded, agent).map_err(|e| e.to_string())
    };
    let config = move |agent: &str| learning_of(&weak, agent);
    let bus = runtime.events().clone();
    let events = move |event: LearningEvent| {
        let (name, data) = event.to_bus();
        bus.publish(name, data);
    };
    let learner = Learner::new(
        LearningStore::new(runtime.store().records.clone()),
        state.memory.clone(),
        Arc::new(ModelExtractor::new(Arc::new(model_for))),
        runtime.clock().clone(),
        Arc::new(config),
        Arc::new(events),
    )
    .with_redactor(runtime.redactor().clone());
    let observer = Observer { learner: learner.clone(), keyless: state.keys.is_empty() };
    runtime.observe_turns(Arc::new(observer));
    let drain = learner.clone();
    tokio::spawn(async move {
        let done = drain.drain().await;
        if done > 0 {
            tracing::info!(done, "memory learning finished turns a previous run left queued");
        }
        // Turns whose extraction failed (the model was down) are tried again, a bounded
        // number of times, without waiting for a restart.
        loop {
            tokio::time::sleep(RETRY_EVERY).await;
            drain.retry_failed().await;
        }
    });
    state.learning = Some(learner);
}

fn learning_of(runtime: &Weak<Runtime>, agent: &str) -> Option<polpo_core::config::agent::Learning> {
    let runtime = runtime.upgrade()?;
    let loaded = runtime.loaded();
    loaded.agent(agent)?.config.memory.as_ref()?.learning.clone()
}

/// The runtime's turn observer: the job is in the outbox before the answer leaves, the
/// extraction runs after it.
struct Observer {
    learner: Learner,
    keyless: bool,
}

#[async_trait]
impl TurnObserver for Observer {
    fn observes(&self, agent: &str) -> bool {
        self.learner.learns(agent)
    }

    async fn committed(&self, turn: CommittedTurn) {
        let surface = match turn.surface {
            Surface::Chat => Some(LearningSurface::Chat),
            Surface::Channel => Some(LearningSurface::Channel),
            Surface::Task | Surface::Loop | Surface::Schedule => None,
        };
        let learnt = learning::CommittedTurn {
            user: turn.owner.or_else(|| self.keyless.then(|| LOCAL_USER.to_owned())),
            turn: SourceTurn { session_id: turn.session_id, run_id: turn.run_id },
            surface,
            nested: turn.surface == Surface::Loop,
            answered: turn.answered,
            user_text: turn.user_text,
            answer: turn.answer,
            agent: turn.agent,
        };
        match self.learner.committed(learnt).await {
            Ok(Some(job)) => {
                let learner = self.learner.clone();
                tokio::spawn(async move { learner.process(job).await });
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "a committed turn could not be queued for memory learning"),
        }
    }
}
