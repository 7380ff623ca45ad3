//! What the runtime knows about a tool before running it.

use serde::{Deserialize, Serialize};

/// How a tool call touches the world. It decides which calls may run in a parallel batch
/// (only `Read`), and what crash recovery may do with a call that was in flight: `Read` and
/// `Idempotent` calls are re-run, a `Write` call with no recorded result is never repeated
/// blindly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolEffect {
    /// Observes only (read, grep, glob, ls, http_fetch GET).
    Read,
    /// Changes the world, but running it twice equals running it once (write of a whole file).
    Idempotent,
    /// Changes the world; running it twice may differ from once (bash, append, send email).
    Write,
    /// Not declared: treated like `Write`.
    Unknown,
}

impl ToolEffect {
    /// Safe to run concurrently with other reads.
    pub fn is_read_only(self) -> bool {
        matches!(self, ToolEffect::Read)
    }

    /// Safe to re-run after a crash when no result was recorded.
    pub fn is_replayable(self) -> bool {
        matches!(self, ToolEffect::Read | ToolEffect::Idempotent)
    }
}

/// A tool as the model sees it: a name, a description and a JSON Schema for its arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Unique name (`read`, `mcp__github__search`, …).
    pub name: String,
    /// What the tool does, written for the model.
    pub description: String,
    /// JSON Schema (draft 2020-12) of the arguments object.
    pub parameters: serde_json::Value,
}
