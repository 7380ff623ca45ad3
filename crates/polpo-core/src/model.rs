//! How an agent names its model: a direct id, a project profile, or a primary with fallbacks.
//!
//! A plain string is always a concrete model id (`openai/gpt-4o-mini`), never a profile name,
//! so adding a profile can never silently change what an existing agent runs.

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
