//! Teams under the agents router, at the reference's paths: `GET /agents/teams`,
//! `GET /agents/team?name=`, `POST /agents/teams {name, description?}`,
//! `DELETE /agents/teams/{name}`, `PATCH /agents/team {oldName, name}`.
//!
//! A team is `.polpo/teams/<id>.json` (its description); membership is each agent's `team`
//! field. Every change is one project edit, like the agents' ([`edit`]): checked against the
//! same schema `polpo validate` uses, written, and served from the next request on, or undone
//! whole when the project no longer loads. A rename writes the new file, re-points the
//! members' `agent.json` (revision-checked), then removes the old file, and never overwrites
//! another team.

use crate::error::{ApiError, ErrorCode, ok};
use crate::routes::agents::{AgentError, edit, object};
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{delete, get};
use axum::{Json, Router};
use polpo_core::config::{
    Location, Project, TEAM_FILE, TeamConfig, check_confusable, check_id, fold_id, parse_checked,
};
use polpo_project::paths::{TEAMS_DIR, display};
use polpo_project::teams::{delete_team, team_file, write_team};
use polpo_project::{Edit, read_agent, write_agent};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
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
pub async fn get_one(
    State(state): State<Arc<AppState>>,
    Query(query): Query<BTreeMap<String, String>>,
) -> Result<Json<Value>, AgentError> {
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
    let created = name.clone();
    edit(&state, move |edit, served| {
        let config = checked(&name, body)?;
        ensure_free(edit, served, &name, None)?;
        Ok(write_team(edit, &name, &config)?)
    })
    .await?;
    Ok((StatusCode::CREATED, ok(view(&state.runtime.loaded().project, &created))))
}

/// `DELETE /agents/teams/{name}` → `{removed: true}`. `409 team_not_empty` (naming the members)
/// while agents still name the team: deleting it would silently leave them pointing at nothing,
/// so the members are moved or removed first, deliberately.
pub async fn remove_team(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
) -> Result<Json<Value>, AgentError> {
    edit(&state, move |edit, served| {
        existing(served, &name)?;
        let members: Vec<&str> = served.team_members(&name).map(|a| a.id.as_str()).collect();
        if !members.is_empty() {
            let message =
                format!("team `{name}` still has members ({}); move or remove them first", members.join(", "));
            return Err(ApiError::new(ErrorCode::TeamNotEmpty, message).into());
        }
        Ok(delete_team(edit, &name)?)
    })
    .await?;
    Ok(ok(json!({"removed": true})))
}

/// `PATCH /agents/team {oldName, name}`: rename; the members follow. `404 team_not_found` for
/// an unknown `oldName`, `409 already_exists` when `name` is another team's.
pub async fn rename(State(state): State<Arc<AppState>>, body: Bytes) -> Result<Json<Value>, AgentError> {
    let body = object(&body)?;
    let text = |k: &str| {
        body.get(k)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| ApiError::invalid(format!("the body needs `{k}` (a string)")))
    };
    let (old, new) = (text("oldName")?, text("name")?);
    let renamed = new.clone();
    edit(&state, move |edit, served| {
        let config = existing(served, &old)?;
        ensure_free(edit, served, &new, Some(&old))?;
        write_team(edit, &new, &config)?;
        for member in served.team_members(&old) {
            repoint(edit, &member.id, &new)?;
        }
        if old != new {
            delete_team(edit, &old)?;
        }
        Ok(())
    })
    .await?;
    Ok(ok(view(&state.runtime.loaded().project, &renamed)))
}

/// Set agent `id`'s `team` in its `agent.json`, revision-checked against a concurrent edit.
fn repoint(edit: &mut Edit<'_>, id: &str, team: &str) -> Result<(), AgentError> {
    let snapshot = read_agent(edit.root(), id)?;
    let mut config = snapshot.agent.config;
    config.team = Some(team.to_owned());
    write_agent(edit, id, &config, &snapshot.agent.instructions, Some(&snapshot.revision))?;
    Ok(())
}

/// The body (without `name`) as `teams/<name>.json`, checked like `polpo validate` does.
fn checked(name: &str, body: Map<String, Value>) -> Result<TeamConfig, AgentError> {
    check_id(name)
        .map_err(|reason| ApiError::new(ErrorCode::InvalidValue, format!("invalid team name `{name}`: {reason}")))?;
    let at = Location::file(display(&[TEAMS_DIR, &format!("{name}.json")]));
    parse_checked(&Value::Object(body), &TEAM_FILE, &at)
        .map_err(|problems| AgentError::Problems { code: ErrorCode::InvalidConfig, problems })
}

/// A new team may be called `name`: `409 already_exists` when a served team other than
/// `except` or a file on disk already has that id, `400 id_confusable` when it looks like one.
fn ensure_free(edit: &Edit<'_>, served: &Project, name: &str, except: Option<&str>) -> Result<(), AgentError> {
    check_id(name)
        .map_err(|reason| ApiError::new(ErrorCode::InvalidValue, format!("invalid team name `{name}`: {reason}")))?;
    let others: Vec<&str> = served.teams.keys().map(String::as_str).filter(|id| Some(*id) != except).collect();
    check_confusable(name, others.iter().copied()).map_err(|reason| ApiError::new(ErrorCode::IdConfusable, reason))?;
    let taken = others.iter().any(|id| fold_id(id) == fold_id(name));
    if taken || (except != Some(name) && team_file(edit.root(), name)?.exists()) {
        return Err(ApiError::new(ErrorCode::AlreadyExists, format!("team `{name}` already exists")).into());
    }
    Ok(())
}

/// The served team's config; `404 team_not_found`.
fn existing(served: &Project, name: &str) -> Result<TeamConfig, AgentError> {
    served.teams.get(name).map(|t| t.config.clone()).ok_or_else(|| not_found(name).into())
}

fn view(project: &Project, id: &str) -> Value {
    let team = project.teams.get(id);
    let members: Vec<&str> = project.team_members(id).map(|a| a.id.as_str()).collect();
    json!({"name": id, "description": team.and_then(|t| t.config.description.as_deref()), "members": members, "file": team.map(|t| &t.source.file)})
}

fn not_found(name: &str) -> ApiError {
    ApiError::new(ErrorCode::TeamNotFound, format!("team `{name}` does not exist"))
}
