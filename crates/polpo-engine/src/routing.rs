//! Model routing at request time, for agents that opted in with `"modelRouting": {"mode": "auto"}`.
//!
//! The rules and the label mapping are decided in `polpo_core::routing`; this module adds what
//! needs I/O: the classifier's one bounded, tool-free model call. Routing fails open to the
//! agent's own (pinned) model: a classifier that times out, errors or answers something that is
//! not a label never blocks the request and never widens what the agent may use. The decision
//! is published as a `model:routed` event, so operators see which way each request went.

use crate::loaded::Loaded;
use crate::request::ChatInput;
use futures::StreamExt;
use polpo_core::config::Agent;
use polpo_core::config::enums::RouterMode;
use polpo_core::message::Message;
use polpo_core::model::{ModelSelection, resolve_model_chain};
use polpo_core::routing::{ClassifierMiss, RoutingClassifier, RoutingRequest};
use polpo_llm::{ModelEvent, ModelProvider, ModelRequest, Providers, ToolChoice};
use serde::Serialize;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Which way one request of an opted-in agent went.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelRoute {
    /// How the model was chosen.
    pub via: RouteVia,
    /// The profile that answers; `None` when the agent's own model does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// Index of the rule in `settings.modelRouting.rules` that matched.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<usize>,
    /// The classifier's label.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Why the agent's own model answers (`pinned` only): `no_route`, `classifier_timeout`,
    /// `classifier_failed`, `classifier_unknown_label`, `classifier_not_allowed`, `cancelled`,
    /// `route_unavailable: <code>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// How a [`ModelRoute`] was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RouteVia {
    /// A deterministic rule matched.
    Rule,
    /// The classifier answered a label.
    Classifier,
    /// Nothing routed the request: the agent's own model answers.
    Pinned,
}

impl ModelRoute {
    fn pinned(reason: &str) -> Self {
        Self { via: RouteVia::Pinned, profile: None, rule: None, label: None, reason: Some(reason.to_owned()) }
    }

    /// The selection to resolve instead of the agent's `model`; `None` keeps the agent's own.
    pub fn selection(&self) -> Option<ModelSelection> {
        self.profile.clone().map(|profile| ModelSelection::Profile { profile })
    }

    /// The agent's own model answers after all: the routed profile's chain could not be built
    /// (`code`, e.g. a provider that is not configured), and routing fails open.
    pub fn fail_open(&mut self, code: &str) {
        *self =
            Self { label: self.label.take(), rule: self.rule, ..Self::pinned(&format!("route_unavailable: {code}")) };
    }
}

/// Route one request of `agent`: `None` when the agent did not opt in (it stays pinned and no
/// route is reported), else the route taken. Rules first, then the classifier, never a profile
/// outside the agent's `allowedModelProfiles`.
pub async fn route(
    providers: &Providers,
    loaded: &Loaded,
    agent: &Agent,
    input: &ChatInput,
    cancel: &CancellationToken,
) -> Option<ModelRoute> {
    if agent.config.model_routing.as_ref()?.mode != RouterMode::Auto {
        return None;
    }
    let settings = loaded.project.settings();
    let Some(routing) = &settings.model_routing else { return Some(ModelRoute::pinned("no_route")) };
    let allowed = agent.config.allowed_model_profiles.as_deref();
    let text = crate::interaction::last_user_text(&input.messages).unwrap_or_default();
    let request =
        RoutingRequest { text: &text, has_tools: !input.client_tools.is_empty(), labels: &input.routing_labels };
    if let Some((index, rule)) = routing.rule_for(&request, allowed) {
        return Some(ModelRoute {
            via: RouteVia::Rule,
            profile: Some(rule.profile.clone()),
            rule: Some(index),
            label: None,
            reason: None,
        });
    }
    let Some(classifier) = &routing.classifier else { return Some(ModelRoute::pinned("no_route")) };
    let profiles = settings.model_profiles.clone().unwrap_or_default();
    let Some(model) =
        resolve_model_chain(&classifier.model, &profiles, None).ok().and_then(|ids| providers.chain(&ids).ok())
    else {
        return Some(ModelRoute::pinned("classifier_failed"));
    };
    let budget = Duration::from_millis(classifier.timeout_ms());
    let answer = tokio::select! {
        _ = cancel.cancelled() => return Some(ModelRoute::pinned("cancelled")),
        answer = tokio::time::timeout(budget, crate::meter::external(classify(&model, classifier, &text))) => answer,
    };
    let route = match answer {
        Err(_) => ModelRoute::pinned("classifier_timeout"),
        Ok(None) => ModelRoute::pinned("classifier_failed"),
        Ok(Some(answer)) => match classifier.profile_for(&answer, allowed) {
            Ok((label, profile)) => ModelRoute {
                via: RouteVia::Classifier,
                profile: Some(profile.to_owned()),
                rule: None,
                label: Some(label.to_owned()),
                reason: None,
            },
            Err(ClassifierMiss::UnknownLabel(_)) => ModelRoute::pinned("classifier_unknown_label"),
            Err(ClassifierMiss::NotAllowed { label, .. }) => {
                ModelRoute { label: Some(label), ..ModelRoute::pinned("classifier_not_allowed") }
            }
        },
    };
    Some(route)
}

/// A label is one short word; a provider that streams more than this (ignoring the token cap)
/// is cut off rather than buffered until the timeout.
const MAX_CLASSIFIER_ANSWER_BYTES: usize = 256;

/// The classifier's answer text (bounded), or `None` when its call failed.
async fn classify(model: &dyn ModelProvider, classifier: &RoutingClassifier, text: &str) -> Option<String> {
    let request = classifier_request(classifier.system_prompt(), classifier.input(text), classifier.max_tokens(), None);
    bounded_answer(model, request, MAX_CLASSIFIER_ANSWER_BYTES).await
}

/// A classifier's one tool-free, deterministic (temperature 0) model call: a system prompt,
/// the user text, a token cap and, when the answer is structured, its `response_format`.
pub(crate) fn classifier_request(
    system: String,
    user: String,
    max_tokens: u32,
    response_format: Option<serde_json::Value>,
) -> ModelRequest {
    ModelRequest {
        model: String::new(),
        messages: vec![Message::system(system), Message::user(user)].into(),
        tools: Vec::new(),
        tool_choice: ToolChoice::None,
        response_format,
        reasoning: None,
        max_output_tokens: Some(max_tokens),
        temperature: Some(0.0),
    }
}

/// The answer text of `request`, cut off past `cap` bytes (a provider that ignores the token
/// cap is not buffered until the timeout), or `None` when the call failed.
pub(crate) async fn bounded_answer(model: &dyn ModelProvider, request: ModelRequest, cap: usize) -> Option<String> {
    let mut stream = model.stream(request).await.ok()?;
    let mut answer = String::new();
    while let Some(event) = stream.next().await {
        if let ModelEvent::TextDelta(t) = event.ok()? {
            answer.push_str(&t);
            if answer.len() > cap {
                break;
            }
        }
    }
    Some(answer)
}
