//! The `.polpo/` configuration: file shapes, typed values, and the validated [`Project`].
//!
//! Each file is parsed in two steps. First its JSON is walked against a [`schema::Shape`],
//! which collects *every* unknown field and invalid value with its JSON pointer; then the
//! clean document is deserialized into the typed struct (`deny_unknown_fields`, camelCase
//! names as in the reference). Finally [`validate_project`] checks the rules that span
//! files. All of it is pure: reading the files is `polpo-project`'s job.
//!
//! Every type round-trips: parse then serialize gives the same JSON, and an absent field
//! stays absent (defaults are applied by accessors such as [`AgentConfig::max_turns`]).

pub mod agent;
pub mod codes;
pub mod enums;
pub mod id;
pub mod parse;
pub mod project;
pub mod schema;
pub mod settings;
pub mod team;
pub mod unavailable;

pub use agent::{AGENT_FILE, AgentConfig, DEFAULT_MAX_TURNS, LEGACY_AGENT};
pub use enums::{ChatExecution, ExecutionMode, ReasoningLevel, StorageKind, ToolLoadingMode};
pub use id::{check_confusable, check_id, collisions, confusable_with, fold_id, skeleton};
pub use parse::{Location, parse_checked};
pub use project::{Agent, Layout, Project, Team, validate_project};
pub use settings::{
    ApiKeyEntry, LEGACY_PROJECT_FILE, PROJECT_FILE, ProjectFile, ProviderConfig, SCHEMA_VERSION, SandboxSettings,
    Settings,
};
pub use team::{LEGACY_TEAM, TEAM_FILE, TeamConfig};
pub use unavailable::unavailable_agent_fields;

#[cfg(test)]
mod tests;
