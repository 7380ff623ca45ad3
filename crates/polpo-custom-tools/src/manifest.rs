//! `.polpo/tools/<name>/tool.json`: what the model sees (name, description, `parameters`), what
//! only the host fills (`bindingsSchema` + `serverBindings`, read from the immutable invocation),
//! the Connection slots, the effect and the timeout.

use crate::CustomToolError;
use polpo_connections::Slot;
use polpo_core::tool::ToolEffect;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Largest manifest read.
const MAX_MANIFEST_BYTES: u64 = 256 * 1024;
/// Default and longest call time (ms).
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;
/// Longest `timeoutMs` a manifest may ask for.
pub const MAX_TIMEOUT_MS: u64 = 300_000;
/// Entrypoints looked for, in order, when the manifest names none.
const ENTRYPOINTS: [&str; 3] = ["index.ts", "index.js", "index.mjs"];

/// One custom tool's manifest, checked.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Manifest {
    /// The tool name (also its folder's name).
    pub name: String,
    /// What the model reads.
    pub description: String,
    /// JSON Schema of the model-visible arguments.
    #[serde(default = "empty_object_schema")]
    pub parameters: Value,
    /// JSON Schema of the hidden bindings.
    #[serde(default)]
    pub bindings_schema: Option<Value>,
    /// Binding name → `{"$context": "invocation.user" | "invocation.metadata.<key>" | …}`.
    #[serde(default)]
    pub server_bindings: BTreeMap<String, ContextRef>,
    /// Logical Connection slots.
    #[serde(default)]
    pub connections: BTreeMap<String, Slot>,
    /// `read`, `idempotent` or `write` (the default: a tool may change anything).
    #[serde(default)]
    pub effect: Option<String>,
    /// Wall-clock limit per call.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// The file run, relative to the tool folder (default `index.ts|js|mjs`).
    #[serde(default)]
    pub entrypoint: Option<String>,
}

/// A `{"$context": "invocation.…"}` marker.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextRef {
    /// The dotted path under `invocation`.
    #[serde(rename = "$context")]
    pub context: String,
}

fn empty_object_schema() -> Value {
    serde_json::json!({"type": "object", "properties": {}, "additionalProperties": false})
}

/// A loaded tool: its manifest, folder and entrypoint.
#[derive(Debug, Clone)]
pub struct ToolDir {
    /// The checked manifest.
    pub manifest: Manifest,
    /// The tool folder.
    pub dir: PathBuf,
    /// The entrypoint file (inside `dir`).
    pub entrypoint: PathBuf,
    /// Its effect.
    pub effect: ToolEffect,
}

impl ToolDir {
    /// Read and check `<dir>/tool.json`.
    pub fn load(dir: &Path) -> Result<Self, CustomToolError> {
        let folder = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
        let file = format!(".polpo/tools/{folder}/tool.json");
        let invalid = |pointer: &str, message: String| CustomToolError::Invalid {
            file: file.clone(),
            pointer: pointer.into(),
            message,
        };
        let bytes = polpo_project::fsx::read_bounded(&dir.join("tool.json"), MAX_MANIFEST_BYTES)
            .map_err(|e| invalid("", format!("cannot read: {e}")))?;
        let manifest: Manifest = serde_json::from_slice(&bytes).map_err(|e| invalid("", e.to_string()))?;
        let name_ok = !manifest.name.is_empty()
            && manifest.name.len() <= 64
            && manifest.name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'));
        if !name_ok || manifest.name != folder {
            return Err(invalid("/name", format!("must match [A-Za-z0-9_-]{{1,64}} and the folder name `{folder}`")));
        }
        for (pointer, schema) in
            [("/parameters", Some(&manifest.parameters)), ("/bindingsSchema", manifest.bindings_schema.as_ref())]
        {
            let Some(schema) = schema else { continue };
            if !schema.is_object() || jsonschema::validator_for(schema).is_err() {
                return Err(invalid(pointer, "must be a JSON Schema object".into()));
            }
        }
        let visible = manifest.parameters.get("properties").and_then(Value::as_object);
        if let Some(hidden) = manifest.server_bindings.keys().find(|k| visible.is_some_and(|p| p.contains_key(*k))) {
            return Err(invalid(
                &format!("/parameters/properties/{hidden}"),
                "a server binding must not be a model-visible parameter".into(),
            ));
        }
        for (key, binding) in &manifest.server_bindings {
            if !binding.context.starts_with("invocation.") && binding.context != "invocation" {
                return Err(invalid(
                    &format!("/serverBindings/{key}/$context"),
                    "must be a path under `invocation`".into(),
                ));
            }
        }
        let effect = match manifest.effect.as_deref() {
            None | Some("write") => ToolEffect::Write,
            Some("read") => ToolEffect::Read,
            Some("idempotent") => ToolEffect::Idempotent,
            Some(other) => return Err(invalid("/effect", format!("`{other}` is not read, idempotent or write"))),
        };
        if manifest.timeout_ms.is_some_and(|t| t == 0 || t > MAX_TIMEOUT_MS) {
            return Err(invalid("/timeoutMs", format!("must be 1 to {MAX_TIMEOUT_MS}")));
        }
        let entrypoint =
            match &manifest.entrypoint {
                Some(e) => dir.join(e),
                None => ENTRYPOINTS.iter().map(|e| dir.join(e)).find(|p| p.exists()).ok_or_else(|| {
                    invalid("/entrypoint", "no entrypoint: add index.ts, index.js or index.mjs".into())
                })?,
            };
        let inside = entrypoint.canonicalize().ok().zip(dir.canonicalize().ok()).is_some_and(|(e, d)| e.starts_with(d));
        let symlink = std::fs::symlink_metadata(&entrypoint).map(|m| m.file_type().is_symlink()).unwrap_or(true);
        if !inside || symlink {
            return Err(invalid("/entrypoint", "must be a regular file inside the tool folder".into()));
        }
        Ok(Self { manifest, dir: dir.to_path_buf(), entrypoint, effect })
    }

    /// The per-call timeout.
    pub fn timeout_ms(&self) -> u64 {
        self.manifest.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS)
    }

    /// Whether the entrypoint runs under the JS runtime (`.ts`, `.js`, `.mjs`).
    pub fn is_javascript(&self) -> bool {
        matches!(self.entrypoint.extension().and_then(|e| e.to_str()), Some("ts" | "js" | "mjs"))
    }

    /// The hidden bindings for `invocation`, validated against `bindingsSchema`; any problem is
    /// `tool_binding_invalid`, before tool code runs.
    pub fn bindings(&self, invocation: &Value) -> Result<Value, CustomToolError> {
        let mut bindings = Map::new();
        for (key, binding) in &self.manifest.server_bindings {
            let mut at = invocation;
            for part in binding.context.split('.').skip(1) {
                at = at.get(part).unwrap_or(&Value::Null);
            }
            if !at.is_null() {
                bindings.insert(key.clone(), at.clone());
            }
        }
        let bindings = Value::Object(bindings);
        if let Some(schema) = &self.manifest.bindings_schema {
            let validator = jsonschema::options()
                .should_validate_formats(true)
                .build(schema)
                .map_err(|e| CustomToolError::BindingInvalid(e.to_string()))?;
            if let Some(error) = validator.iter_errors(&bindings).next() {
                // The path and the rule, never the value: bindings may be private to the host.
                return Err(CustomToolError::BindingInvalid(format!(
                    "binding {} fails its schema ({:?})",
                    if error.instance_path().as_str().is_empty() {
                        "(all)".to_string()
                    } else {
                        error.instance_path().to_string()
                    },
                    error.kind().keyword()
                )));
            }
        }
        Ok(bindings)
    }
}

/// Every tool under `<polpo_dir>/tools/`, by name; a bad one fails with its file and pointer.
pub fn load_all(polpo_dir: &Path) -> Result<Vec<ToolDir>, CustomToolError> {
    let root = polpo_dir.join("tools");
    let entries = match std::fs::read_dir(&root) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(CustomToolError::Io(e.to_string())),
    };
    let mut dirs: Vec<PathBuf> =
        entries.filter_map(Result::ok).map(|e| e.path()).filter(|p| p.join("tool.json").is_file()).collect();
    dirs.sort();
    dirs.iter().map(|d| ToolDir::load(d)).collect()
}
