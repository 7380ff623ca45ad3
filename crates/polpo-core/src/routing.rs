//! Project model routing (`settings.modelRouting`): which profile answers one request of an
//! agent that opted in with `"modelRouting": {"mode": "auto"}`.
//!
//! Agents without the opt-in stay pinned to their `model`, whatever the project routes. For an
//! agent that opted in, the ordered `rules` are tried first and the first match wins; when none
//! matches, an optional bounded `classifier` (one tool-free model call answering one label) may
//! pick a profile; otherwise the agent's own model answers. Everything here is decided from
//! data; the classifier's model call happens in the engine, which hands its answer back to
//! [`RoutingClassifier::profile_for`]. Neither path can leave the agent's
//! `allowedModelProfiles`: a rule or label naming a profile outside it is skipped at run time and
//! reported as a warning by [`agent_routing_warnings`].

use crate::config::codes;
use crate::config::schema::{Field, STRINGS, Shape};
use crate::model::MODEL_SELECTION;
use crate::model::{ModelProfileError, ModelProfiles, ModelSelection, resolve_model_chain};
use crate::problem::{Problem, pointer_push};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Most output tokens a classifier may spend: it answers one label, nothing more.
pub const MAX_CLASSIFIER_TOKENS: u32 = 16;
/// Output tokens of a classifier call when `maxTokens` is absent.
pub const DEFAULT_CLASSIFIER_TOKENS: u32 = 8;
/// Longest a classifier may delay a request, in milliseconds.
pub const MAX_CLASSIFIER_TIMEOUT_MS: u64 = 10_000;
/// Classifier time budget when `timeoutMs` is absent.
pub const DEFAULT_CLASSIFIER_TIMEOUT_MS: u64 = 3_000;
/// Characters of the user's message the classifier sees (its head), so a huge prompt does not
/// make routing cost as much as answering.
pub const MAX_CLASSIFIER_INPUT_CHARS: usize = 4_000;
/// Most routing labels one request may carry (`routing.labels` of a chat request).
pub const MAX_REQUEST_LABELS: usize = 16;
/// Longest routing label a request may carry, in characters.
pub const MAX_REQUEST_LABEL_CHARS: usize = 64;

/// `settings.modelRouting`: how requests of opted-in agents pick a profile.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelRoutingSettings {
    /// Deterministic rules, in order; the first that matches (and that the agent may use) wins.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rules: Option<Vec<RoutingRule>>,
    /// Asked only when no rule matched.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub classifier: Option<RoutingClassifier>,
}

/// One entry of `settings.modelRouting.rules`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RoutingRule {
    /// Conditions that must all hold; absent matches every request (a catch-all).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub when: Option<RoutingCondition>,
    /// The profile (from `settings.modelProfiles`) that answers a matching request.
    pub profile: String,
}

/// `when` of a rule: every condition present must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RoutingCondition {
    /// The message contains at least one of these phrases (case-insensitive).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub contains: Option<Vec<String>>,
    /// The message has at least this many characters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_chars: Option<u32>,
    /// The message has at most this many characters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_chars: Option<u32>,
    /// The request declares client tools (`true`) or none (`false`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub has_tools: Option<bool>,
    /// The request carries at least one of these routing labels (case-insensitive).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub labels: Option<Vec<String>>,
}

/// `settings.modelRouting.classifier`: one bounded, tool-free model call that answers a label.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RoutingClassifier {
    /// The model that classifies: an id or `{"profile": …}` (usually a small, fast one).
    pub model: ModelSelection,
    /// Label the classifier may answer → profile that then answers the request.
    pub labels: BTreeMap<String, String>,
    /// What the labels mean, for the classifier's prompt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// Output tokens of the call, 1 to [`MAX_CLASSIFIER_TOKENS`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Time budget in ms, 1 to [`MAX_CLASSIFIER_TIMEOUT_MS`]; past it the agent's model answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// What the rules look at in one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoutingRequest<'a> {
    /// The text of the request's last user message.
    pub text: &'a str,
    /// Whether the request declares client tools.
    pub has_tools: bool,
    /// Routing labels the caller attached to the request (`routing.labels` in chat).
    pub labels: &'a [String],
}

/// Why the classifier's answer picked no profile; the agent's own model answers then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClassifierMiss {
    /// The answer is none of the labels.
    UnknownLabel(String),
    /// The label maps to a profile outside the agent's `allowedModelProfiles`.
    NotAllowed {
        /// The label answered.
        label: String,
        /// Its profile.
        profile: String,
    },
}

/// Whether an agent with `allowedModelProfiles` = `allowed` may be routed to `profile`
/// (`None` allows every profile; a routed profile is a root, so it needs its own grant).
pub fn profile_allowed(profile: &str, allowed: Option<&[String]>) -> bool {
    allowed.is_none_or(|list| list.iter().any(|a| a == profile))
}

impl ModelRoutingSettings {
    /// The first rule that matches `request` and routes inside `allowed`, with its index.
    /// Rules outside `allowed` are skipped, never followed.
    pub fn rule_for(&self, request: &RoutingRequest<'_>, allowed: Option<&[String]>) -> Option<(usize, &RoutingRule)> {
        self.rules
            .iter()
            .flatten()
            .enumerate()
            .find(|(_, rule)| rule.matches(request) && profile_allowed(&rule.profile, allowed))
    }
}

impl RoutingRule {
    /// Whether every condition of `when` holds for `request`.
    pub fn matches(&self, request: &RoutingRequest<'_>) -> bool {
        let Some(when) = &self.when else { return true };
        let chars = request.text.chars().count();
        let text = request.text.to_lowercase();
        when.contains.as_ref().is_none_or(|phrases| phrases.iter().any(|p| text.contains(&p.to_lowercase())))
            && when.min_chars.is_none_or(|min| chars >= min as usize)
            && when.max_chars.is_none_or(|max| chars <= max as usize)
            && when.has_tools.is_none_or(|wanted| wanted == request.has_tools)
            && when
                .labels
                .as_ref()
                .is_none_or(|wanted| wanted.iter().any(|w| request.labels.iter().any(|l| l.eq_ignore_ascii_case(w))))
    }
}

impl RoutingClassifier {
    /// Output tokens of the call, clamped to [`MAX_CLASSIFIER_TOKENS`].
    pub fn max_tokens(&self) -> u32 {
        self.max_tokens.unwrap_or(DEFAULT_CLASSIFIER_TOKENS).clamp(1, MAX_CLASSIFIER_TOKENS)
    }

    /// Time budget in ms, clamped to [`MAX_CLASSIFIER_TIMEOUT_MS`].
    pub fn timeout_ms(&self) -> u64 {
        self.timeout_ms.unwrap_or(DEFAULT_CLASSIFIER_TIMEOUT_MS).clamp(1, MAX_CLASSIFIER_TIMEOUT_MS)
    }

    /// The classifier's system prompt: answer exactly one of the labels.
    pub fn system_prompt(&self) -> String {
        let labels: Vec<&str> = self.labels.keys().map(String::as_str).collect();
        let guidance = self.instructions.as_deref().map(|i| format!(" {i}")).unwrap_or_default();
        format!(
            "Classify the user's message for routing. Answer with exactly one of these labels and nothing else: {}.{guidance}",
            labels.join(", ")
        )
    }

    /// The classifier's user message: the head of the request text.
    pub fn input(&self, text: &str) -> String {
        text.chars().take(MAX_CLASSIFIER_INPUT_CHARS).collect()
    }

    /// The label and profile the classifier's `answer` names. Tolerates case, surrounding
    /// whitespace, quotes and a final period; anything else is an unknown label.
    pub fn profile_for<'a>(
        &'a self,
        answer: &str,
        allowed: Option<&[String]>,
    ) -> Result<(&'a str, &'a str), ClassifierMiss> {
        let word = answer
            .trim()
            .trim_matches(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '.' | '*'))
            .to_lowercase();
        let (label, profile) = self
            .labels
            .iter()
            .find(|(label, _)| label.to_lowercase() == word)
            .ok_or_else(|| ClassifierMiss::UnknownLabel(answer.chars().take(64).collect()))?;
        if !profile_allowed(profile, allowed) {
            return Err(ClassifierMiss::NotAllowed { label: label.clone(), profile: profile.clone() });
        }
        Ok((label, profile))
    }
}

/// Check `settings.modelRouting` against the profiles: every rule and label names a defined
/// profile, `minChars` ≤ `maxChars`, the classifier has labels and a model that resolves.
/// Problems are located under `/settings/modelRouting`.
pub fn validate_model_routing(routing: &ModelRoutingSettings, profiles: &ModelProfiles) -> Vec<Problem> {
    let base = "/settings/modelRouting";
    let unknown = |name: &str, pointer: String| {
        (!profiles.contains_key(name)).then(|| ModelProfileError::Unknown(name.to_owned()).to_problem().at(pointer))
    };
    let mut out = Vec::new();
    for (i, rule) in routing.rules.iter().flatten().enumerate() {
        let at = format!("{base}/rules/{i}");
        out.extend(unknown(&rule.profile, format!("{at}/profile")));
        if let Some(when) = &rule.when
            && let (Some(min), Some(max)) = (when.min_chars, when.max_chars)
            && min > max
        {
            out.push(
                Problem::new(
                    codes::INVALID_VALUE,
                    format!("`minChars` {min} is greater than `maxChars` {max}: the rule can never match"),
                )
                .at(format!("{at}/when")),
            );
        }
    }
    if let Some(classifier) = &routing.classifier {
        let at = format!("{base}/classifier");
        if classifier.labels.is_empty() {
            out.push(
                Problem::new(codes::INVALID_VALUE, "the classifier needs at least one label")
                    .at(format!("{at}/labels")),
            );
        }
        for (label, profile) in &classifier.labels {
            out.extend(unknown(profile, pointer_push(&format!("{at}/labels"), label)));
        }
        if let Err(e) = resolve_model_chain(&classifier.model, profiles, None) {
            out.push(e.to_problem().at(format!("{at}/model")));
        }
    }
    out
}

/// Check one agent's opt-in (`pointer` is its `modelRouting` field): the project must define
/// `settings.modelRouting`, or the opt-in could never route anything.
pub fn validate_agent_routing(routing: Option<&ModelRoutingSettings>, pointer: &str) -> Vec<Problem> {
    match routing {
        Some(_) => Vec::new(),
        None => vec![
            Problem::new(
                codes::INVALID_VALUE,
                "`modelRouting.mode` is `auto` but settings.modelRouting is not set: the agent would stay pinned",
            )
            .at(pointer),
        ],
    }
}

/// Warnings for the rules and classifier labels an opted-in agent can never take because they
/// route outside its `allowedModelProfiles`. They are skipped at run time, so the project still
/// loads (the rules are project-wide and an agent narrowing its grant is legitimate), but the
/// owner is told which routes are dead for which agent.
pub fn agent_routing_warnings(
    routing: &ModelRoutingSettings,
    allowed: Option<&[String]>,
    pointer: &str,
) -> Vec<Problem> {
    let not_allowed = |what: String, profile: &str| {
        let sentence = format!(
            "{what} routes to profile `{profile}`, which is not in this agent's allowedModelProfiles; it is never used for this agent"
        );
        Problem::new(ModelProfileError::NotAllowed(profile.to_owned()).code(), sentence).at(pointer)
    };
    let rules = routing
        .rules
        .iter()
        .flatten()
        .enumerate()
        .filter(|(_, r)| !profile_allowed(&r.profile, allowed))
        .map(|(i, r)| not_allowed(format!("settings.modelRouting rule {i}"), &r.profile));
    let labels = routing
        .classifier
        .iter()
        .flat_map(|c| &c.labels)
        .filter(|(_, p)| !profile_allowed(p, allowed))
        .map(|(l, p)| not_allowed(format!("classifier label `{l}`"), p));
    rules.chain(labels).collect()
}

/// [`agent_routing_warnings`] for every opted-in agent of `project`, located in its file.
pub fn project_routing_warnings(project: &crate::config::Project) -> Vec<Problem> {
    let Some(routing) = project.settings().model_routing.as_ref() else {
        return Vec::new();
    };
    project
        .agents
        .values()
        .filter(|a| a.config.model_routing.as_ref().is_some_and(|r| r.mode == crate::config::enums::RouterMode::Auto))
        .flat_map(|a| {
            agent_routing_warnings(routing, a.config.allowed_model_profiles.as_deref(), "/modelRouting")
                .into_iter()
                .map(|p| a.source.locate(p))
        })
        .collect()
}

static ROUTING_CONDITION: Shape = Shape::Object(&[&[
    Field::optional("contains", STRINGS),
    Field::optional("minChars", crate::config::schema::COUNT),
    Field::optional("maxChars", crate::config::schema::COUNT),
    Field::optional("hasTools", Shape::Bool),
    Field::optional("labels", STRINGS),
]]);

static ROUTING_RULE: Shape =
    Shape::Object(&[&[Field::optional("when", ROUTING_CONDITION), Field::required("profile", Shape::String)]]);

/// The shape of `settings.modelRouting`.
pub static MODEL_ROUTING: Shape = Shape::Object(&[&[
    Field::optional("rules", Shape::Array(&ROUTING_RULE)),
    Field::optional(
        "classifier",
        Shape::Object(&[&[
            Field::required("model", MODEL_SELECTION),
            Field::required("labels", Shape::Map(&Shape::String)),
            Field::optional("instructions", Shape::String),
            Field::optional("maxTokens", Shape::Integer { min: 1, max: MAX_CLASSIFIER_TOKENS as i64 }),
            Field::optional("timeoutMs", Shape::Integer { min: 1, max: MAX_CLASSIFIER_TIMEOUT_MS as i64 }),
        ]]),
    ),
]]);

#[cfg(test)]
mod tests {
    use super::*;

    fn routing(json: &str) -> ModelRoutingSettings {
        serde_json::from_str(json).unwrap()
    }

    fn ask(text: &str) -> RoutingRequest<'_> {
        RoutingRequest { text, has_tools: false, labels: &[] }
    }

    const RULES: &str = r#"{"rules": [
        {"when": {"contains": ["Stack trace", "panic"]}, "profile": "balanced"},
        {"when": {"maxChars": 40, "hasTools": false}, "profile": "fast"},
        {"profile": "balanced"}
    ]}"#;

    #[test]
    fn the_first_matching_rule_wins() {
        let r = routing(RULES);
        assert_eq!(r.rule_for(&ask("hi there"), None).map(|(i, rule)| (i, rule.profile.as_str())), Some((1, "fast")));
        assert_eq!(
            r.rule_for(&ask("why does it PANIC?"), None).map(|(i, _)| i),
            Some(0),
            "phrases match case-insensitively"
        );
        assert_eq!(r.rule_for(&ask(&"long ".repeat(20)), None).map(|(i, _)| i), Some(2), "the catch-all");
        let with_tools = RoutingRequest { text: "hi", has_tools: true, labels: &[] };
        assert_eq!(r.rule_for(&with_tools, None).map(|(i, _)| i), Some(2), "hasTools must agree");
    }

    #[test]
    fn a_label_rule_needs_one_of_its_labels_on_the_request() {
        let rule: RoutingRule =
            serde_json::from_str(r#"{"when": {"labels": ["vip", "escalated"]}, "profile": "balanced"}"#).unwrap();
        let labels = vec!["beta".to_owned(), "VIP".to_owned()];
        assert!(rule.matches(&RoutingRequest { text: "hi", has_tools: false, labels: &labels }));
        assert!(!rule.matches(&RoutingRequest { text: "hi", has_tools: false, labels: &labels[..1] }));
        assert!(!rule.matches(&ask("vip")), "labels are not words of the message");
    }

    #[test]
    fn rules_outside_the_allowed_profiles_are_skipped_never_followed() {
        let r = routing(RULES);
        let only_balanced = vec!["balanced".to_owned()];
        assert_eq!(r.rule_for(&ask("hi"), Some(&only_balanced)).map(|(i, _)| i), Some(2));
        assert_eq!(r.rule_for(&ask("hi"), Some(&[])), None, "an empty allowance routes nowhere");
    }

    #[test]
    fn min_and_max_chars_count_characters_not_bytes() {
        let rule: RoutingRule =
            serde_json::from_str(r#"{"when": {"minChars": 3, "maxChars": 3}, "profile": "p"}"#).unwrap();
        assert!(rule.matches(&ask("héé")));
        assert!(!rule.matches(&ask("hé")));
    }

    #[test]
    fn the_classifier_answer_maps_to_a_label_or_misses() {
        let c: RoutingClassifier = serde_json::from_str(
            r#"{"model": "openai/small", "labels": {"simple": "fast", "hard": "balanced"}, "maxTokens": 99}"#,
        )
        .unwrap();
        assert_eq!(c.profile_for(" Hard.\n", None), Ok(("hard", "balanced")));
        assert_eq!(c.profile_for("\"simple\"", None), Ok(("simple", "fast")));
        assert!(matches!(c.profile_for("it is hard", None), Err(ClassifierMiss::UnknownLabel(_))));
        assert!(matches!(c.profile_for("hard", Some(&["fast".to_owned()])), Err(ClassifierMiss::NotAllowed { .. })));
        assert_eq!(c.max_tokens(), MAX_CLASSIFIER_TOKENS, "bounded even when the file was not validated");
        assert_eq!(c.timeout_ms(), DEFAULT_CLASSIFIER_TIMEOUT_MS);
        assert!(c.system_prompt().contains("hard, simple"));
    }

    #[test]
    fn validation_points_at_each_broken_rule_and_label() {
        let profiles: ModelProfiles = serde_json::from_str(r#"{"fast": "o/a", "balanced": "o/b"}"#).unwrap();
        let r = routing(
            r#"{"rules": [{"profile": "fast"}, {"when": {"minChars": 9, "maxChars": 2}, "profile": "nope"}],
            "classifier": {"model": {"profile": "missing"}, "labels": {"a/b": "gone"}}}"#,
        );
        let found: Vec<(String, String)> = validate_model_routing(&r, &profiles)
            .into_iter()
            .map(|p| (p.code, p.pointer.unwrap_or_default()))
            .collect();
        let want = [
            ("model_profile_unknown", "/settings/modelRouting/rules/1/profile"),
            ("invalid_value", "/settings/modelRouting/rules/1/when"),
            ("model_profile_unknown", "/settings/modelRouting/classifier/labels/a~1b"),
            ("model_profile_unknown", "/settings/modelRouting/classifier/model"),
        ];
        assert_eq!(found, want.map(|(c, p)| (c.to_owned(), p.to_owned())));
    }

    #[test]
    fn an_agent_is_told_which_routes_it_may_not_take() {
        let r = routing(
            r#"{"rules": [{"profile": "fast"}, {"profile": "balanced"}], "classifier": {"model": "o/c", "labels": {"hard": "fast"}}}"#,
        );
        let warnings = agent_routing_warnings(&r, Some(&["balanced".to_owned()]), "/modelRouting");
        assert_eq!(warnings.len(), 2);
        assert!(
            warnings
                .iter()
                .all(|p| p.code == "model_profile_not_allowed" && p.pointer.as_deref() == Some("/modelRouting"))
        );
        assert!(warnings[0].message.contains("rule 0") && warnings[1].message.contains("label `hard`"), "{warnings:?}");
        assert!(agent_routing_warnings(&r, None, "/modelRouting").is_empty());
        assert!(validate_agent_routing(Some(&r), "/modelRouting").is_empty());
        assert_eq!(validate_agent_routing(None, "/modelRouting")[0].code, "invalid_value");
    }
}
