//! `/api/v1/skills` (and `/v1/skills`): the project's installed Agent Skills and their
//! assignment to agents. `GET /skills` lists them (`{name, description, assignedTo, lock}`),
//! `GET /skills/{name}` adds `content` (the `SKILL.md`) and `files`; `POST
//! /skills/{name}/assign {agent}` and `…/unassign {agent}` change that agent's `skills` as one
//! project edit (the same transaction as agent edits, admin keys only), served from the next
//! request on. Installing bundles stays with `polpo skills add` (it fetches sources).

use crate::error::{ApiError, ok};
use crate::routes::agents::{AgentError, blocking, edit, object};
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use polpo_core::config::Project;
use polpo_project::skills::{self, SkillError, SkillsLock};
use serde_json::{Value, json};
use std::sync::Arc;

/// Every skill route under `/api/v1` and `/v1`.
pub fn router() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/v1/skills", get(list))
        .route("/v1/skills", get(list))
        .route("/api/v1/skills/{name}", get(get_one))
        .route("/v1/skills/{name}", get(get_one))
        .route("/api/v1/skills/{name}/assign", post(assign))
        .route("/v1/skills/{name}/assign", post(assign))
        .route("/api/v1/skills/{name}/unassign", post(unassign))
        .route("/v1/skills/{name}/unassign", post(unassign))
}

impl From<SkillError> for AgentError {
    fn from(e: SkillError) -> Self {
        match e {
            SkillError::Project(e) => e.into(),
            other => ApiError::from(other).into(),
        }
    }
}

/// `GET /skills`: every installed skill, in name order.
pub async fn list(State(state): State<Arc<AppState>>) -> Result<Json<Value>, AgentError> {
    let project = state.runtime.loaded().project.clone();
    let views = blocking(move || {
        let lock = skills::read_lock(&project.root)?;
        let names = skills::installed_names(&project.root)?;
        Ok(names.iter().map(|name| summary(&project, &lock, name)).collect::<Vec<_>>())
    })
    .await?;
    Ok(ok(views))
}

/// `GET /skills/{name}`: one skill with its `SKILL.md` (`content`) and file list; 404
/// `skill_not_found`.
pub async fn get_one(State(state): State<Arc<AppState>>, Path(name): Path<String>) -> Result<Json<Value>, AgentError> {
    let project = state.runtime.loaded().project.clone();
    let view = blocking(move || {
        let dir = skills::skill_dir(&project.root, &name)?;
        if !dir.is_dir() {
            return Err(SkillError::NotFound(format!("skill `{name}`")).into());
        }
        let bundle = skills::read_bundle(&dir)?;
        let content = String::from_utf8_lossy(&bundle.files[skills::SKILL_MD]).into_owned();
        let mut view = summary(&project, &skills::read_lock(&project.root)?, &name);
        view["content"] = json!(content);
        view["files"] = json!(bundle.files.keys().collect::<Vec<_>>());
        view["hash"] = json!(bundle.hash());
        Ok(view)
    })
    .await?;
    Ok(ok(view))
}

/// `POST /skills/{name}/assign {agent}` → `{skill, agent, changed}`.
pub async fn assign(state: State<Arc<AppState>>, name: Path<String>, body: Bytes) -> Result<Json<Value>, AgentError> {
    set(state, name, body, true).await
}

/// `POST /skills/{name}/unassign {agent}` → `{skill, agent, changed}`.
pub async fn unassign(state: State<Arc<AppState>>, name: Path<String>, body: Bytes) -> Result<Json<Value>, AgentError> {
    set(state, name, body, false).await
}

async fn set(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
    body: Bytes,
    assigned: bool,
) -> Result<Json<Value>, AgentError> {
    let body = object(&body)?;
    let agent = body
        .get("agent")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::invalid("name the agent: `{\"agent\": \"<id>\"}`"))?
        .to_owned();
    let (skill, who) = (name.clone(), agent.clone());
    let changed = edit(&state, move |edit, _| Ok(skills::set_assigned(edit, &who, &skill, assigned)?)).await?;
    Ok(ok(json!({"skill": name, "agent": agent, "changed": changed})))
}

/// What the list shows of one skill: front matter (or why it does not read), the agents
/// assigned, and its lock entry.
fn summary(project: &Project, lock: &SkillsLock, name: &str) -> Value {
    let meta = skills::read_meta(&project.root, name);
    json!({
        "name": name,
        "description": meta.as_ref().ok().map(|m| m.description.clone()),
        "error": meta.as_ref().err().map(|e| json!({"code": e.code(), "message": e.to_string()})),
        "assignedTo": skills::assigned_to(project, name),
        "lock": lock.skills.get(name),
    })
}
