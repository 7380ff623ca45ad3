//! How an agent names its model: a direct id, a project profile, or a primary with fallbacks.
//!
//! A plain string is always a concrete model id (`openai/gpt-4o-mini`), never a profile name,
//! so adding a profile can never silently change what an existing agent runs.

use crate::config::schema::{Field, Shape};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One step of a fallback chain: a concrete id or a profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ModelTarget {
    /// A concrete `provider/model` id.
    Id(String),
    /// A named profile from `settings.modelProfiles`.
    Profile {
        /// Profile name.
        profile: String,
    },
}

/// `model` on an agent, `orchestratorModel` in settings, and each entry of `modelProfiles`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ModelSelection {
    /// A concrete `provider/model` id.
    Id(String),
    /// A named profile.
    Profile {
        /// Profile name.
        profile: String,
    },
    /// A primary target tried first, then each fallback in order.
    Chain {
        /// Tried first.
        primary: ModelTarget,
        /// Tried in order when the previous target fails before its first content delta.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        fallbacks: Vec<ModelTarget>,
    },
}

/// `settings.modelProfiles`: profile name → selection. Ordered so files round-trip stably.
pub type ModelProfiles = BTreeMap<String, ModelSelection>;

/// Longest fallback list one selection may declare, and most targets after the primary that
/// a resolved chain may hold: every fallback is a model call a user may pay for.
pub const MAX_MODEL_FALLBACKS: usize = 8;

/// Deepest chain of profile-to-profile references; aliases of aliases beyond this are a
/// configuration smell and would make a resolution hard to explain.
pub const MAX_PROFILE_DEPTH: usize = 8;

/// Bound on resolution work, so diamond-shaped profile graphs cannot explode.
const MAX_RESOLUTION_STEPS: usize = 64;

/// Why a model selection cannot be resolved. Raised at validation and again before any
/// provider call, never half-way through a run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelProfileError {
    /// A `{profile}` names no entry of `settings.modelProfiles`.
    #[error("model profile `{0}` is not defined in settings.modelProfiles")]
    Unknown(String),
    /// Profiles reference each other in a loop (the path, first name repeated at the end).
    #[error("model profiles reference each other in a cycle: {}", .0.join(" -> "))]
    Cycle(Vec<String>),
    /// The agent selects a root profile outside its `allowedModelProfiles`.
    #[error("model profile `{0}` is not in the agent's allowedModelProfiles")]
    NotAllowed(String),
    /// Too many fallbacks, or an empty model id.
    #[error("invalid model fallbacks: {0}")]
    FallbacksInvalid(String),
    /// Profile references nest deeper than [`MAX_PROFILE_DEPTH`].
    #[error("model profile `{0}` nests more than {MAX_PROFILE_DEPTH} profile references deep")]
    TooDeep(String),
}

impl ModelProfileError {
    /// Stable snake_case code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Unknown(_) => "model_profile_unknown",
            Self::Cycle(_) => "model_profile_cycle",
            Self::NotAllowed(_) => "model_profile_not_allowed",
            Self::FallbacksInvalid(_) => "model_fallbacks_invalid",
            Self::TooDeep(_) => "model_profile_too_deep",
        }
    }

    /// The error as a user-facing [`Problem`](crate::problem::Problem).
    pub fn to_problem(&self) -> crate::problem::Problem {
        crate::problem::Problem::new(self.code(), self.to_string())
    }
}

/// Resolve what an agent (or the orchestrator) selected into the ordered, de-duplicated chain
/// of concrete `provider/model` ids to try: primary first, then fallbacks depth-first.
///
/// `allowed` is the agent's `allowedModelProfiles`: `None` allows every profile; `Some(list)`
/// allows only the listed *root* profiles (an empty list allows none). Profiles reached from an
/// allowed root inherit its grant, so owners can re-point an alias without touching agents.
/// Plain strings are always direct ids and need no grant.
pub fn resolve_model_chain(
    selection: &ModelSelection,
    profiles: &ModelProfiles,
    allowed: Option<&[String]>,
) -> Result<Vec<String>, ModelProfileError> {
    if let Some(allowed) = allowed
        && let Some(denied) = root_profiles(selection).into_iter().find(|root| !allowed.iter().any(|a| a == root))
    {
        return Err(ModelProfileError::NotAllowed(denied.to_owned()));
    }
    let mut resolver = Resolver { profiles, chain: Vec::new(), stack: Vec::new(), steps: 0 };
    resolver.selection(selection)?;
    Ok(resolver.chain)
}

/// Check every entry of `settings.modelProfiles` resolves; one problem per broken profile,
/// located at `/settings/modelProfiles/<name>`.
pub fn validate_model_profiles(profiles: &ModelProfiles) -> Vec<crate::problem::Problem> {
    profiles
        .keys()
        .filter_map(|name| {
            let selection = ModelSelection::Profile { profile: name.clone() };
            let err = resolve_model_chain(&selection, profiles, None).err()?;
            Some(err.to_problem().at(crate::problem::pointer_push("/settings/modelProfiles", name)))
        })
        .collect()
}

/// The profiles a selection names directly: the ones `allowedModelProfiles` must grant.
fn root_profiles(selection: &ModelSelection) -> Vec<&str> {
    fn target_profile(t: &ModelTarget) -> Option<&str> {
        match t {
            ModelTarget::Profile { profile } => Some(profile.as_str()),
            ModelTarget::Id(_) => None,
        }
    }
    match selection {
        ModelSelection::Id(_) => Vec::new(),
        ModelSelection::Profile { profile } => vec![profile.as_str()],
        ModelSelection::Chain { primary, fallbacks } => {
            std::iter::once(primary).chain(fallbacks).filter_map(target_profile).collect()
        }
    }
}

struct Resolver<'a> {
    profiles: &'a ModelProfiles,
    chain: Vec<String>,
    stack: Vec<String>,
    steps: usize,
}

impl Resolver<'_> {
    fn selection(&mut self, selection: &ModelSelection) -> Result<(), ModelProfileError> {
        match selection {
            ModelSelection::Id(id) => self.id(id),
            ModelSelection::Profile { profile } => self.profile(profile),
            ModelSelection::Chain { primary, fallbacks } => {
                if fallbacks.len() > MAX_MODEL_FALLBACKS {
                    return Err(ModelProfileError::FallbacksInvalid(format!(
                        "{} fallbacks declared, at most {MAX_MODEL_FALLBACKS} allowed",
                        fallbacks.len()
                    )));
                }
                std::iter::once(primary).chain(fallbacks).try_for_each(|t| self.target(t))
            }
        }
    }

    fn target(&mut self, target: &ModelTarget) -> Result<(), ModelProfileError> {
        match target {
            ModelTarget::Id(id) => self.id(id),
            ModelTarget::Profile { profile } => self.profile(profile),
        }
    }

    fn profile(&mut self, name: &str) -> Result<(), ModelProfileError> {
        if let Some(start) = self.stack.iter().position(|p| p == name) {
            let mut cycle = self.stack[start..].to_vec();
            cycle.push(name.to_owned());
            return Err(ModelProfileError::Cycle(cycle));
        }
        if self.stack.len() >= MAX_PROFILE_DEPTH {
            return Err(ModelProfileError::TooDeep(self.stack.first().cloned().unwrap_or_default()));
        }
        let selection = self.profiles.get(name).ok_or_else(|| ModelProfileError::Unknown(name.to_owned()))?;
        self.stack.push(name.to_owned());
        self.selection(selection)?;
        self.stack.pop();
        Ok(())
    }

    fn id(&mut self, id: &str) -> Result<(), ModelProfileError> {
        if id.trim().is_empty() {
            return Err(ModelProfileError::FallbacksInvalid("a model id is empty".into()));
        }
        self.steps += 1;
        if self.steps > MAX_RESOLUTION_STEPS {
            return Err(ModelProfileError::FallbacksInvalid(format!(
                "resolution visits more than {MAX_RESOLUTION_STEPS} model ids"
            )));
        }
        if !self.chain.iter().any(|c| c == id) {
            self.chain.push(id.to_owned());
        }
        if self.chain.len() > 1 + MAX_MODEL_FALLBACKS {
            return Err(ModelProfileError::FallbacksInvalid(format!(
                "the resolved chain has more than {MAX_MODEL_FALLBACKS} fallbacks"
            )));
        }
        Ok(())
    }
}

/// One step of a fallback chain: an id or `{profile}`.
pub static MODEL_TARGET: Shape = Shape::OneOf(
    &[Shape::String, Shape::Object(&[&[Field::required("profile", Shape::String)]])],
    "a model id or {\"profile\": name}",
);

/// `model`, `orchestratorModel` and each profile: id, `{profile}` or `{primary, fallbacks}`.
pub static MODEL_SELECTION: Shape = Shape::OneOf(
    &[
        Shape::String,
        Shape::Object(&[&[Field::required("profile", Shape::String)]]),
        Shape::Object(&[&[
            Field::required("primary", MODEL_TARGET),
            Field::optional("fallbacks", Shape::Array(&MODEL_TARGET)),
        ]]),
    ],
    "a model id, {\"profile\": name} or {\"primary\": …, \"fallbacks\": […]}",
);

#[cfg(test)]
mod tests {
    use super::*;

    fn profiles(json: &str) -> ModelProfiles {
        serde_json::from_str(json).unwrap()
    }

    fn sel(json: &str) -> ModelSelection {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn the_readme_example_resolves_primary_then_fallback_profile() {
        let p = profiles(
            r#"{"fast":"openai/gpt-4o-mini","balanced":{"primary":"anthropic/claude-sonnet-4","fallbacks":[{"profile":"fast"}]}}"#,
        );
        let chain = resolve_model_chain(&sel(r#"{"profile":"balanced"}"#), &p, None).unwrap();
        assert_eq!(chain, ["anthropic/claude-sonnet-4", "openai/gpt-4o-mini"]);
    }

    #[test]
    fn plain_strings_are_direct_ids_even_when_a_profile_has_that_name() {
        let p = profiles(r#"{"openai":"anthropic/claude"}"#);
        assert_eq!(resolve_model_chain(&sel(r#""openai""#), &p, Some(&[])).unwrap(), ["openai"]);
    }

    #[test]
    fn referenced_profiles_inherit_the_root_grant() {
        let p = profiles(r#"{"fast":"openai/a","balanced":{"primary":{"profile":"fast"},"fallbacks":["groq/b"]}}"#);
        let allowed = vec!["balanced".to_owned()];
        assert_eq!(
            resolve_model_chain(&sel(r#"{"profile":"balanced"}"#), &p, Some(&allowed)).unwrap(),
            ["openai/a", "groq/b"]
        );
        let err = resolve_model_chain(&sel(r#"{"profile":"fast"}"#), &p, Some(&allowed)).unwrap_err();
        assert_eq!(err.code(), "model_profile_not_allowed");
    }

    #[test]
    fn unknown_cycle_depth_and_too_many_fallbacks_have_stable_codes() {
        let p = profiles(
            r#"{"a":{"profile":"b"},"b":{"primary":"x/y","fallbacks":[{"profile":"a"}]},"c":{"profile":"nope"}}"#,
        );
        let err = resolve_model_chain(&sel(r#"{"profile":"a"}"#), &p, None).unwrap_err();
        assert_eq!(err, ModelProfileError::Cycle(vec!["a".into(), "b".into(), "a".into()]));
        assert_eq!(err.code(), "model_profile_cycle");
        assert_eq!(
            resolve_model_chain(&sel(r#"{"profile":"c"}"#), &p, None).unwrap_err().code(),
            "model_profile_unknown"
        );

        let many: Vec<String> = (0..=MAX_MODEL_FALLBACKS).map(|i| format!("\"p/m{i}\"")).collect();
        let s = sel(&format!(r#"{{"primary":"p/m","fallbacks":[{}]}}"#, many.join(",")));
        assert_eq!(resolve_model_chain(&s, &p, None).unwrap_err().code(), "model_fallbacks_invalid");

        let deep: ModelProfiles = (0..=MAX_PROFILE_DEPTH)
            .map(|i| (format!("p{i}"), ModelSelection::Profile { profile: format!("p{}", i + 1) }))
            .chain([(format!("p{}", MAX_PROFILE_DEPTH + 1), ModelSelection::Id("x/y".into()))])
            .collect();
        assert_eq!(
            resolve_model_chain(&sel(r#"{"profile":"p0"}"#), &deep, None).unwrap_err().code(),
            "model_profile_too_deep"
        );
    }

    #[test]
    fn diamonds_are_not_cycles_and_duplicates_collapse() {
        let p = profiles(
            r#"{"fast":"o/a","cheap":{"primary":{"profile":"fast"},"fallbacks":["o/b"]},"top":{"primary":{"profile":"fast"},"fallbacks":[{"profile":"cheap"}]}}"#,
        );
        assert_eq!(resolve_model_chain(&sel(r#"{"profile":"top"}"#), &p, None).unwrap(), ["o/a", "o/b"]);
    }

    #[test]
    fn validation_reports_each_broken_profile_at_its_pointer() {
        let p = profiles(r#"{"ok":"o/a","loop":{"profile":"loop"},"dangling":{"profile":"missing"}}"#);
        let problems = validate_model_profiles(&p);
        let found: Vec<(&str, Option<&str>)> =
            problems.iter().map(|p| (p.code.as_str(), p.pointer.as_deref())).collect();
        assert_eq!(
            found,
            [
                ("model_profile_unknown", Some("/settings/modelProfiles/dangling")),
                ("model_profile_cycle", Some("/settings/modelProfiles/loop"))
            ]
        );
    }
}
