//! `skill_list` and `skill_read`: the model's only way into skill bundles. They read the
//! skills the runtime put in [`ToolContext::skills`] (the agent's assigned ones) through the
//! bundle reader of `polpo-project`, which refuses traversal and symlinks; the workspace file
//! tools never reach `.polpo/`.

use polpo_core::tool::{ToolEffect, ToolSpec};
use polpo_project::skills::{REFERENCES_DIR, SKILL_MD, SkillError, read_meta, read_references, read_text};
use polpo_tools::{SkillAccess, Tool, ToolContext, ToolError, ToolOutput};
use serde::Deserialize;
use serde_json::json;
use std::sync::Arc;

/// Name of the index tool.
pub const SKILL_LIST: &str = "skill_list";
/// Name of the reading tool.
pub const SKILL_READ: &str = "skill_read";
/// Both, as the engine adds them to an agent's static allowlists when it has skills.
pub const SKILL_TOOLS: [&str; 2] = [SKILL_LIST, SKILL_READ];
/// Most text one `skill_read` returns; references past it are named, not loaded.
pub const MAX_READ_BYTES: usize = 256 * 1024;

/// The two skill tools.
pub fn skill_tools() -> Vec<Arc<dyn Tool>> {
    vec![Arc::new(SkillListTool::new()), Arc::new(SkillReadTool::new())]
}

fn access(ctx: &ToolContext) -> Result<&SkillAccess, ToolError> {
    ctx.skills.as_ref().ok_or_else(|| ToolError::new("skills_unavailable", "this agent has no skills assigned"))
}

fn tool_error(e: SkillError) -> ToolError {
    ToolError::new(e.code(), e.to_string())
}

/// `skill_list`: name and description of each assigned, installed skill.
pub struct SkillListTool {
    spec: ToolSpec,
}

impl SkillListTool {
    /// The tool with its spec.
    pub fn new() -> Self {
        Self {
            spec: ToolSpec {
                name: SKILL_LIST.into(),
                description: "List the skills available to you (name and description). Read one with skill_read."
                    .into(),
                parameters: json!({"type": "object", "properties": {}, "additionalProperties": false}),
            },
        }
    }
}

impl Default for SkillListTool {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait::async_trait]
impl Tool for SkillListTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::Read
    }

    async fn call(&self, ctx: &ToolContext, _args: serde_json::Value) -> Result<ToolOutput, ToolError> {
        let access = access(ctx)?.clone();
        let skills = tokio::task::spawn_blocking(move || {
            access.names.iter().filter_map(|name| read_meta(&access.root, name).ok()).collect::<Vec<_>>()
        })
        .await
        .map_err(|e| ToolError::new("internal", e.to_string()))?;
        let text = serde_json::to_string(&skills).map_err(|e| ToolError::new("internal", e.to_string()))?;
        Ok(ToolOutput { text, details: json!({"skills": skills.len()}) })
    }
}

/// `skill_read`: a skill's `SKILL.md` with the text files of `references/`, or one exact
/// bundle file (`path`).
pub struct SkillReadTool {
    spec: ToolSpec,
}

impl SkillReadTool {
    /// The tool with its spec.
    pub fn new() -> Self {
        Self {
            spec: ToolSpec {
                name: SKILL_READ.into(),
                description: "Read a skill: its SKILL.md plus the text files under references/. Give `path` \
                              (relative to the skill's folder) to read one other file of the skill."
                    .into(),
                parameters: json!({
                    "type": "object",
                    "properties": {
                        "name": {"type": "string", "description": "The skill's name, as skill_list shows it."},
                        "path": {"type": "string", "description": "A file inside the skill, e.g. scripts/run.py."}
                    },
                    "required": ["name"],
                    "additionalProperties": false
                }),
            },
        }
    }
}

impl Default for SkillReadTool {
    fn default() -> Self {
        Self::new()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadArgs {
    name: String,
    path: Option<String>,
}

#[async_trait::async_trait]
impl Tool for SkillReadTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::Read
    }

    async fn call(&self, ctx: &ToolContext, args: serde_json::Value) -> Result<ToolOutput, ToolError> {
        let args: ReadArgs =
            serde_json::from_value(args).map_err(|e| ToolError::new("invalid_arguments", e.to_string()))?;
        let access = access(ctx)?.clone();
        if !access.names.contains(&args.name) {
            return Err(ToolError::new(
                "skill_not_assigned",
                format!("no skill `{}` is available to you; call skill_list", args.name),
            ));
        }
        tokio::task::spawn_blocking(move || match args.path {
            Some(path) => read_text(&access.root, &args.name, &path)
                .map(|text| ToolOutput { text, details: json!({"skill": args.name, "path": path}) }),
            None => assemble(&access, &args.name),
        })
        .await
        .map_err(|e| ToolError::new("internal", e.to_string()))?
        .map_err(tool_error)
    }
}

/// `SKILL.md` then each text file of `references/` under a `--- path ---` heading, until
/// [`MAX_READ_BYTES`]; the rest are listed so the model can ask for them by path.
fn assemble(access: &SkillAccess, name: &str) -> Result<ToolOutput, SkillError> {
    let mut text = read_text(&access.root, name, SKILL_MD)?;
    let mut loaded = Vec::new();
    let mut skipped = Vec::new();
    for (path, body) in read_references(&access.root, name)? {
        if text.len() + body.len() + path.len() + 16 > MAX_READ_BYTES {
            skipped.push(path);
            continue;
        }
        text.push_str(&format!("\n\n--- {path} ---\n{body}"));
        loaded.push(path);
    }
    if !skipped.is_empty() {
        text.push_str(&format!(
            "\n\n(Not loaded, too large together; read each with skill_read and `path`: {})",
            skipped.join(", ")
        ));
    }
    let details = json!({"skill": name, "references": loaded, "skipped": skipped, "dir": REFERENCES_DIR});
    Ok(ToolOutput { text, details })
}
