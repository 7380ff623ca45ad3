//! Trying a chain of models in order.
//!
//! # The fallback rule
//!
//! A target is abandoned for the next one only when it fails with a *classified, transient or
//! target-specific* error (`rate_limited`, `provider_unavailable`, `model_timeout`,
//! `auth_failed`, `model_not_found`) **before its first content delta** (text, reasoning or a
//! tool-call fragment). Until then nothing has reached the caller, so switching models is
//! invisible and safe. Once any content was delivered, a failure is never hidden by switching
//! models mid-answer (the caller would get half of one model's answer glued to another's): it
//! is delivered as an explicit `stream_interrupted` error event and the call ends there.
//! Errors that another model would repeat (`invalid_request`, `context_length_exceeded`,
//! `content_filtered`, `invalid_response`) are returned at once.

use crate::decode::{interrupted, is_content};
use crate::{LlmError, LlmErrorKind, ModelEvent, ModelProvider, ModelRequest, ModelStream};
use futures::{StreamExt, stream};
use std::sync::Arc;

/// One concrete model in a chain.
#[derive(Clone)]
pub struct Target {
    /// The `provider/model` id, for messages and logs.
    pub id: String,
    /// The provider's own model name (sent as `model` on the wire).
    pub model: String,
    /// The provider that serves it.
    pub provider: Arc<dyn ModelProvider>,
}

/// A [`ModelProvider`] over an ordered chain of targets, applying the fallback rule above.
/// It ignores `ModelRequest::model` and sends each target's own model name.
#[derive(Clone)]
pub struct FallbackProvider {
    targets: Vec<Target>,
}

impl FallbackProvider {
    /// A chain tried in order; the first target is the primary.
    pub fn new(targets: Vec<Target>) -> Self {
        Self { targets }
    }

    /// The `provider/model` ids of the chain, in order.
    pub fn ids(&self) -> Vec<&str> {
        self.targets.iter().map(|t| t.id.as_str()).collect()
    }
}

/// Whether an error before the first content delta lets the next target take over.
pub fn falls_back(kind: LlmErrorKind) -> bool {
    matches!(
        kind,
        LlmErrorKind::RateLimited
            | LlmErrorKind::ProviderUnavailable
            | LlmErrorKind::Timeout
            | LlmErrorKind::AuthFailed
            | LlmErrorKind::ModelNotFound
    )
}

#[async_trait::async_trait]
impl ModelProvider for FallbackProvider {
    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, LlmError> {
        let mut failures = Vec::new();
        for (position, target) in self.targets.iter().enumerate() {
            let attempt = ModelRequest { model: target.model.clone(), ..request.clone() };
            let result = match target.provider.stream(attempt).await {
                Ok(stream) => until_first_content(stream).await,
                Err(e) => Err(e),
            };
            let error = match result {
                Ok(stream) => return Ok(stream),
                Err(e) => e,
            };
            let last = position + 1 == self.targets.len();
            if last || !falls_back(error.kind) {
                let earlier =
                    if failures.is_empty() { String::new() } else { format!(" (after {})", failures.join("; ")) };
                return Err(LlmError { message: format!("{}: {}{earlier}", target.id, error.message), ..error });
            }
            tracing::warn!(model = %target.id, code = error.kind.code(), "model failed before its first delta; falling back to the next model");
            failures.push(format!("{} failed with {}", target.id, error.kind.code()));
        }
        Err(LlmError::new(LlmErrorKind::ModelNotFound, "no model to call: the model chain is empty"))
    }
}

/// Read `stream` until its first content event (or its end), so that failures before it can
/// still be handed to the next target. The held events are replayed, and any later error is
/// reported as `stream_interrupted`.
async fn until_first_content(mut stream: ModelStream) -> Result<ModelStream, LlmError> {
    let mut held = Vec::new();
    while let Some(item) = stream.next().await {
        let event = item?;
        let stop = is_content(&event) || matches!(event, ModelEvent::Finish(_));
        held.push(event);
        if stop {
            break;
        }
    }
    let rest = stream.map(|item| item.map_err(interrupted));
    Ok(Box::pin(stream::iter(held.into_iter().map(Ok)).chain(rest)))
}
