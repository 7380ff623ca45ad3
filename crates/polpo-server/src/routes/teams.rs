//! Teams under the agents router, at the reference's paths: `GET /agents/teams`,
//! `GET /agents/team?name=`, `POST /agents/teams {name, description?}`,
//! `DELETE /agents/teams/{name}`, `PATCH /agents/team {oldName, name}`.
//!
//! A team is `.polpo/teams/<id>.json` (its description); membership is each agent's `team`
//! field. Writes are atomic files checked against the same schema `polpo validate` uses, done
//! in the agents' write order, and served from the next request on (the project is reloaded;
//! a create or delete after which the project no longer loads is undone). A rename writes the
//! new file, re-points the members' `agent.json` (revision-checked), then removes the old file,
//! and never overwrites another team.

use crate::state::AppState;
use crate::error::{ApiError, ok};
use crate::routes::agents::{AgentError, WRITES, blocking, object, project_error, reload};
use axum::body::Bytes;
use axum::routing::{delete, get};
use axum::{Json, Router};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use polpo_core::config::{Location, Project, TEAM_FILE, TeamConfig, check_confusable, check_id, codes, fold_id, parse_checked};
use polpo_engine::Runtime;
use polpo_project::paths::{LEGACY_TEAMS_JSON, TEAMS_DIR, display, polpo_dir};
use polpo_project::{ProjectError, fsx, read_agent, write_agent};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

/// Every team route under `/api/v1` and `/v1`.
pub fn router() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/v1/agents/teams", get(list).post(create))
        .route("/v1/agents/teams", get(list).post(create))
        .route("/api/v1/agents/teams/{name}", delete(remove_team))
        .route("/v1/agents/teams/{name}", delete(remove_team))
        .route("/api/v1/agents/team", get(get_one).patch(rename))
        .route("/v1/agents/team", get(get_one).patch(rename))
}

/// `GET /agents/teams`: every team, `[{name, description, members, file}]`, in id order.
pub async fn list(State(state): State<Arc<AppState>>) -> Json<Value> {
    let loaded = state.runtime.loaded();
    ok(loaded.project.teams.keys().map(|id| view(&loaded.project, id)).collect::<Vec<_>>())
}

/// `GET /agents/team?name=<id>`: one team; `404 team_not_found`.
pub async fn get_one(State(state): State<Arc<AppState>>, Query(query): Query<BTreeMap<String, String>>) -> Result<Json<Value>, AgentError> {
    let name = query.get("name").ok_or_else(|| ApiError::invalid("name the team: `?name=<team>`"))?;
    let loaded = state.runtime.loaded();
    if !loaded.project.teams.contains_key(name) {
        return Err(not_found(name).into());
    }
    Ok(ok(view(&loaded.project, name)))
}

/// `POST /agents/teams {name, description?}` → `201` the team; `409 already_exists` when a
/// team of that id (compared as ids are: NFKC, lowercase) exists.
pub async fn create(State(state): State<Arc<AppState>>, body: Bytes) -> Result<impl IntoResponse, AgentError> {
    let mut body = object(&body)?;
    let name = match body.remove("name") {
        Some(Value::String(name)) => name,
        _ => return Err(ApiError::invalid("the body needs the team's `name`").into()),
    };
    let _order = WRITES.lock().await;
    let runtime = state.runtime.clone();
    let team = blocking(move || {
        let config = checked(&name, body)?;
        let path = team_path(&runtime, &name, None)?;
        fsx::write_json_atomic(&path, &config).map_err(ProjectError::io("write", &path)).map_err(project_error)?;
        reload_or(&runtime, || remove(&path))?;
        Ok(view(&runtime.loaded().project, &name))
    })
    .await?;
    Ok((StatusCode::CREATED, ok(team)))
}

/// `DELETE /agents/teams/{name}` → `{removed: true}`. `409 team_not_empty` (naming the members)
/// while agents still name the team: deleting it would silently leave them pointing at nothing,
/// so the members are moved or removed first, deliberately.
pub async fn remove_team(State(state): State<Arc<AppState>>, Path(name): Path<String>) -> Result<Json<Value>, AgentError> {
    let _order = WRITES.lock().await;
    let runtime = state.runtime.clone();
    blocking(move || {
        let config = existing(&runtime, &name)?;
        let members: Vec<String> = runtime.loaded().project.team_members(&name).map(|a| a.id.clone()).collect();
        if !members.is_empty() {
            let message = format!("team `{name}` still has members ({}); move or remove them first", members.join(", "));
            return Err(ApiError::new("team_not_empty", message).into());
        }
        let path = file(&runtime, &name)?;
        remove(&path)?;
        reload_or(&runtime, || fsx::write_json_atomic(&path, &config).map_err(ProjectError::io("write", &path)).map_err(project_error))
    })
    .await?;
    Ok(ok(json!({"removed": true})))
}

/// `PATCH /agents/team {oldName, name}`: rename; the members follow. `404 team_not_found` for
/// an unknown `oldName`, `409 already_exists` when `name` is another team's.
pub async fn rename(State(state): State<Arc<AppState>>, body: Bytes) -> Result<Json<Value>, AgentError> {
    let body = object(&body)?;
    let text = |k: &str| body.get(k).and_then(Value::as_str).map(str::to_owned).ok_or_else(|| ApiError::invalid(format!("the body needs `{k}` (a string)")));
    let (old, new) = (text("oldName")?, text("name")?);
    let _order = WRITES.lock().await;
    let runtime = state.runtime.clone();
    let team = blocking(move || {
        let config = existing(&runtime, &old)?;
        let (from, to) = (file(&runtime, &old)?, team_path(&runtime, &new, Some(&old))?);
        let members: Vec<String> = runtime.loaded().project.team_members(&old).map(|a| a.id.clone()).collect();
        let root = runtime.loaded().project.root.clone();
        fsx::write_json_atomic(&to, &config).map_err(ProjectError::io("write", &to)).map_err(project_error)?;
        for (n, id) in members.iter().enumerate() {
            if let Err(e) = repoint(&root, id, &new) {
                // Put back the members already moved and the new file: the team stays as it was.
                let undone = members[..n].iter().all(|id| repoint(&root, id, &old).is_ok()) && (from == to || remove(&to).is_ok());
                if !undone {
                    tracing::warn!(team = old, "could not undo a half-done team rename");
                }
                return Err(e);
            }
        }
        if from != to {
            remove(&from)?;
        }
        reload(&runtime, &root).map_err(|problems| AgentError::Problems { code: "invalid_project", problems })?;
        Ok(view(&runtime.loaded().project, &new))
    })
    .await?;
    Ok(ok(team))
}

/// Set agent `id`'s `team` in its `agent.json`, revision-checked against a concurrent edit.
fn repoint(root: &std::path::Path, id: &str, team: &str) -> Result<(), AgentError> {
    let snapshot = read_agent(root, id).map_err(project_error)?;
    let mut config = snapshot.agent.config;
    config.team = Some(team.to_owned());
    write_agent(root, id, &config, &snapshot.agent.instructions, Some(&snapshot.revision)).map_err(project_error)?;
    Ok(())
}

/// The body (without `name`) as `teams/<name>.json`, checked like `polpo validate` does.
fn checked(name: &str, body: Map<String, Value>) -> Result<TeamConfig, AgentError> {
    check_id(name).map_err(|reason| ApiError::new("invalid_value", format!("invalid team name `{name}`: {reason}")))?;
    let at = Location::file(display(&[TEAMS_DIR, &format!("{name}.json")]));
    parse_checked(&Value::Object(body), &TEAM_FILE, &at).map_err(|problems| AgentError::Problems { code: "invalid_config", problems })
}

/// Where a new team `name` goes: `409 already_exists` when a served team other than `except`
/// or a file on disk already has that id.
fn team_path(runtime: &Runtime, name: &str, except: Option<&str>) -> Result<PathBuf, AgentError> {
    check_id(name).map_err(|reason| ApiError::new("invalid_value", format!("invalid team name `{name}`: {reason}")))?;
    let loaded = runtime.loaded();
    let others: Vec<&str> = loaded.project.teams.keys().map(String::as_str).filter(|id| Some(*id) != except).collect();
    check_confusable(name, others.iter().copied()).map_err(|reason| ApiError::new(codes::ID_CONFUSABLE, reason))?;
    let taken = others.iter().any(|id| fold_id(id) == fold_id(name));
    let path = file(runtime, name)?;
    if taken || (except != Some(name) && path.exists()) {
        return Err(ApiError::new("already_exists", format!("team `{name}` already exists")).into());
    }
    Ok(path)
}

/// `.polpo/teams/<name>.json`; team writes need the directory layout.
fn file(runtime: &Runtime, name: &str) -> Result<PathBuf, AgentError> {
    let dot = polpo_dir(&runtime.loaded().project.root);
    if dot.join(LEGACY_TEAMS_JSON).exists() {
        return Err(project_error(ProjectError::LegacyLayout));
    }
    let dir = dot.join(TEAMS_DIR);
    std::fs::create_dir_all(&dir).map_err(ProjectError::io("create", &dir)).map_err(project_error)?;
    Ok(dir.join(format!("{name}.json")))
}

/// The served team's config; `404 team_not_found`.
fn existing(runtime: &Runtime, name: &str) -> Result<TeamConfig, AgentError> {
    runtime.loaded().project.teams.get(name).map(|t| t.config.clone()).ok_or_else(|| not_found(name).into())
}

fn remove(path: &std::path::Path) -> Result<(), AgentError> {
    std::fs::remove_file(path).map_err(ProjectError::io("remove", path)).map_err(project_error)?;
    let dir = path.parent().unwrap_or(std::path::Path::new("."));
    fsx::sync_dir(dir).map_err(ProjectError::io("sync", dir)).map_err(project_error)
}

/// Serve the project as now on disk; when it no longer loads, `undo` the write and report why.
fn reload_or(runtime: &Runtime, undo: impl FnOnce() -> Result<(), AgentError>) -> Result<(), AgentError> {
    let root = runtime.loaded().project.root.clone();
    reload(runtime, &root).map_err(|problems| {
        if undo().is_err() {
            tracing::warn!("could not undo a team write after the project stopped loading");
        }
        AgentError::Problems { code: "invalid_project", problems }
    })
}

fn view(project: &Project, id: &str) -> Value {
    let team = project.teams.get(id);
    let members: Vec<&str> = project.team_members(id).map(|a| a.id.as_str()).collect();
    json!({"name": id, "description": team.and_then(|t| t.config.description.as_deref()), "members": members, "file": team.map(|t| &t.source.file)})
}

fn not_found(name: &str) -> ApiError {
    ApiError::new("team_not_found", format!("team `{name}` does not exist"))
}
