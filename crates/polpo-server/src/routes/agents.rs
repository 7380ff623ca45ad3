//! `/api/v1/agents` (and `/v1/agents`): list, read, create, update and delete the agents of
//! the project on disk, then serve the new version from the next request on.
//!
//! Files are the source of truth and a user may edit them by hand while the API edits them
//! too. Every read returns the agent's `revision` (also as `ETag`); an update or delete that
//! presents a revision (`If-Match` or a `revision` field) fails with `409 conflict` when the
//! files changed since, instead of overwriting the hand edit. Without a revision the change
//! applies to the files as they are now (a PATCH merges onto them).
//!
//! A change is checked before anything is written: the id (`400 id_confusable` when it can be
//! mistaken for another agent's), the config against the same schema `polpo validate` uses
//! (`400 invalid_config`, each problem with file and JSON pointer; a create or a full replace
//! must name the agent's `model`, so `PUT {}` cannot wipe it); then the change is written and
//! the whole project with it checked (`400 invalid_project`, e.g. a `reportsTo` that
//! names a deleted agent). Every change is one project edit ([`edit`]): written, the whole
//! project loaded from disk and served; when it no longer loads, every touched file is put back
//! and the runtime keeps the version it had.

use crate::error::{ApiError, ErrorCode, RestError, ok};
use crate::state::AppState;
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use polpo_core::config::{
    AGENT_FILE, Agent, AgentConfig, Location, Project, check_confusable, check_id, codes, parse_checked,
};
use polpo_core::problem::Problem;
use polpo_engine::Loaded;
use polpo_project::paths::{AGENT_JSON, AGENTS_DIR, display};
use polpo_project::{Edit, ProjectError, Revision, delete_agent, read_agent, write_agent};
use serde_json::{Map, Value, json};
use std::sync::Arc;

/// Body keys that are not part of `agent.json`.
const NON_CONFIG_KEYS: [&str; 5] = ["id", "name", "instructions", "systemPrompt", "revision"];

/// A failure of an agent route: a plain REST error, or a list of located problems.
#[derive(Debug)]
pub enum AgentError {
    /// `{ok:false, error, code}`.
    Rest(RestError),
    /// `400 {ok:false, error, code, problems:[{code, message, file, pointer}]}`.
    Problems {
        /// `invalid_config` (the new agent.json) or `invalid_project` (the project with it).
        code: ErrorCode,
        /// What is wrong, located.
        problems: Vec<Problem>,
    },
}

impl From<ApiError> for AgentError {
    fn from(e: ApiError) -> Self {
        Self::Rest(RestError(e))
    }
}

/// A project edit's failure, its problems located when it has any.
impl From<ProjectError> for AgentError {
    fn from(e: ProjectError) -> Self {
        match e {
            ProjectError::Invalid(problems) => Self::Problems { code: ErrorCode::InvalidProject, problems },
            other => Self::Rest(RestError(other.into())),
        }
    }
}

impl IntoResponse for AgentError {
    fn into_response(self) -> Response {
        match self {
            Self::Rest(e) => e.into_response(),
            Self::Problems { code, problems } => {
                let lines: Vec<String> = problems.iter().map(Problem::to_string).collect();
                let body = json!({"ok": false, "error": lines.join("; "), "code": code.as_str(), "problems": problems});
                (code.status(), Json(body)).into_response()
            }
        }
    }
}

/// What revision a change is based on.
#[derive(Debug, Clone)]
enum Base {
    /// Create: there must be no such agent.
    Absent,
    /// The revision the client read.
    Revision(Revision),
    /// Whatever is on disk now (the client sent no revision).
    Current,
}

/// How the body changes `agent.json`.
#[derive(Debug, Clone)]
enum ConfigEdit {
    /// The body is the whole new config.
    Replace(Value),
    /// The body is a JSON merge patch (RFC 7386) onto the current config.
    Merge(Value),
}

/// `GET /agents`: every agent the runtime serves, `[{id, config, file}]`.
pub async fn list(State(state): State<Arc<AppState>>) -> Json<Value> {
    let loaded = state.runtime.loaded();
    let agents: Vec<Value> = loaded
        .project
        .agents
        .values()
        .map(|a| json!({"id": a.id, "config": a.config, "file": a.source.file}))
        .collect();
    ok(agents)
}

/// `GET /agents/{id}`: `{id, config, instructions, revision, file}` as on disk now, with the
/// revision also in `ETag`.
pub async fn get(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Result<Response, AgentError> {
    let root = state.runtime.loaded().project.root.clone();
    let snapshot = blocking(move || Ok(read_agent(&root, &id)?)).await?;
    Ok(with_etag(ok(view(&snapshot.agent, &snapshot.revision)).into_response(), &snapshot.revision))
}

/// `POST /agents {id|name, instructions|systemPrompt, config | …config fields}` → `201`.
/// `409 already_exists` when the id is taken.
pub async fn create(State(state): State<Arc<AppState>>, body: Bytes) -> Result<Response, AgentError> {
    let body = object(&body)?;
    let id = ["id", "name"].iter().find_map(|k| body.get(*k).and_then(Value::as_str)).map(str::to_owned);
    let id = id.ok_or_else(|| ApiError::invalid("the body needs the agent's `id` (or `name`)"))?;
    let edit = ConfigEdit::Replace(config_of(&body));
    let (revision, body) = save(&state, id, Base::Absent, edit, instructions_of(&body)?).await?;
    let mut response = with_etag(body.into_response(), &revision);
    *response.status_mut() = StatusCode::CREATED;
    Ok(response)
}

/// `PUT /agents/{id}`: replace the config (and the instructions when given).
pub async fn replace(
    state: State<Arc<AppState>>,
    id: Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, AgentError> {
    update(state, id, headers, body, ConfigEdit::Replace).await
}

/// `PATCH /agents/{id}`: merge the given config fields (a `null` removes one) and replace the
/// instructions when given.
pub async fn patch(
    state: State<Arc<AppState>>,
    id: Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, AgentError> {
    update(state, id, headers, body, ConfigEdit::Merge).await
}

async fn update(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
    edit: fn(Value) -> ConfigEdit,
) -> Result<Response, AgentError> {
    let body = object(&body)?;
    if let Some(other) =
        ["id", "name"].iter().find_map(|k| body.get(*k).and_then(Value::as_str)).filter(|other| *other != id)
    {
        return Err(ApiError::invalid(format!(
            "the body names agent `{other}` but the path names `{id}`; agents are renamed by creating a new one"
        ))
        .into());
    }
    let base = base_of(&headers, body.get("revision"))?;
    let config = config_of(&body);
    let (revision, body) = save(&state, id, base, edit(config), instructions_of(&body)?).await?;
    Ok(with_etag(body.into_response(), &revision))
}

/// `DELETE /agents/{id}` (optionally `If-Match`) → `{removed: true}`.
pub async fn delete(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, AgentError> {
    let base = base_of(&headers, None)?;
    edit(&state, move |edit, _| remove(edit, &id, base)).await?;
    Ok(ok(json!({"removed": true})))
}

/// Check, write, serve; returns the new revision and the response body.
async fn save(
    state: &AppState,
    id: String,
    base: Base,
    change: ConfigEdit,
    instructions: Option<String>,
) -> Result<(Revision, Json<Value>), AgentError> {
    let (agent, revision) =
        edit(state, move |edit, served| write(edit, served, &id, base, change, instructions)).await?;
    let body = ok(view(&agent, &revision));
    Ok((revision, body))
}

/// Change the project's files as one edit of the state's [`polpo_project::ProjectEditor`]:
/// `change` sees the project as served when the edit starts; the project it leaves on disk is
/// served from the next request on, or every file is put back (`invalid_project`).
pub(crate) async fn edit<T: Send + 'static>(
    state: &AppState,
    change: impl FnOnce(&mut Edit<'_>, &Project) -> Result<T, AgentError> + Send + 'static,
) -> Result<T, AgentError> {
    let (editor, runtime) = (state.editor.clone(), state.runtime.clone());
    let edited = blocking(move || {
        editor.edit(
            |edit| change(edit, &runtime.loaded().project),
            |project| {
                runtime.reload(Loaded::new(project)?);
                Ok(())
            },
        )
    })
    .await?;
    // A schedule may have changed: the scheduler, asleep until its next occurrence, looks again.
    state.scheduler.wake();
    Ok(edited)
}

fn write(
    edit: &mut Edit<'_>,
    served: &Project,
    id: &str,
    base: Base,
    change: ConfigEdit,
    instructions: Option<String>,
) -> Result<(Agent, Revision), AgentError> {
    check_id(id)
        .map_err(|reason| ApiError::new(ErrorCode::InvalidValue, format!("invalid agent id `{id}`: {reason}")))?;
    check_confusable(id, served.agents.keys().map(String::as_str))
        .map_err(|reason| ApiError::new(ErrorCode::IdConfusable, reason))?;
    let current = match base {
        Base::Absent => None,
        _ => Some(read_agent(edit.root(), id)?),
    };
    let expected = match (&base, &current) {
        (Base::Revision(r), _) => Some(r.clone()),
        (_, Some(snapshot)) => Some(snapshot.revision.clone()),
        (_, None) => None,
    };
    if let (Some(expected), Some(snapshot)) = (&expected, &current)
        && *expected != snapshot.revision
    {
        return Err(ProjectError::Conflict(format!("agent `{id}`")).into());
    }
    let replaced = matches!(change, ConfigEdit::Replace(_));
    let value = match (change, &current) {
        (ConfigEdit::Replace(v), _) => v,
        (ConfigEdit::Merge(patch), Some(snapshot)) => {
            let mut v = serde_json::to_value(&snapshot.agent.config)
                .map_err(|e| ApiError::new(ErrorCode::Internal, e.to_string()))?;
            merge_patch(&mut v, patch);
            v
        }
        (ConfigEdit::Merge(patch), None) => patch,
    };
    let at = Location::file(display(&[AGENTS_DIR, id, AGENT_JSON]));
    if replaced && value.get("model").is_none_or(Value::is_null) {
        let problem = at.problem(
            codes::INVALID_VALUE,
            "a whole agent config names its `model`; to change some fields only, use PATCH",
            "/model",
        );
        return Err(AgentError::Problems { code: ErrorCode::InvalidConfig, problems: vec![problem] });
    }
    let config: AgentConfig = parse_checked(&value, &AGENT_FILE, &at)
        .map_err(|problems| AgentError::Problems { code: ErrorCode::InvalidConfig, problems })?;
    let instructions =
        instructions.or_else(|| current.as_ref().map(|s| s.agent.instructions.clone())).unwrap_or_default();
    let agent = Agent { id: id.to_owned(), config, instructions, source: at };

    let revision = write_agent(edit, id, &agent.config, &agent.instructions, expected.as_ref())?;
    Ok((agent, revision))
}

fn remove(edit: &mut Edit<'_>, id: &str, base: Base) -> Result<(), AgentError> {
    let expected = match base {
        Base::Revision(r) => r,
        _ => read_agent(edit.root(), id)?.revision,
    };
    Ok(delete_agent(edit, id, &expected)?)
}

/// Run file work off the async threads (writes fsync).
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, AgentError> + Send + 'static,
) -> Result<T, AgentError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::new(ErrorCode::Internal, format!("agent file work failed: {e}")))?
}

fn view(agent: &Agent, revision: &Revision) -> Value {
    json!({"id": agent.id, "config": agent.config, "instructions": agent.instructions, "revision": revision.as_str(), "file": agent.source.file})
}

fn with_etag(mut response: Response, revision: &Revision) -> Response {
    if let Ok(v) = HeaderValue::from_str(&format!("\"{revision}\"")) {
        response.headers_mut().insert(header::ETAG, v);
    }
    response
}

/// The request body as a JSON object (`400 invalid_request` otherwise).
pub(crate) fn object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    match serde_json::from_slice(body) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(ApiError::invalid("the body must be a JSON object")),
        Err(e) => Err(ApiError::invalid(format!("the body is not JSON: {e}"))),
    }
}

/// `config` when given, else every body field that is not an id, instructions or revision
/// (the reference's flat AddAgentSchema).
fn config_of(body: &Map<String, Value>) -> Value {
    match body.get("config") {
        Some(c) => c.clone(),
        None => Value::Object(
            body.iter()
                .filter(|(k, _)| !NON_CONFIG_KEYS.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
    }
}

fn instructions_of(body: &Map<String, Value>) -> Result<Option<String>, ApiError> {
    match body.get("instructions").or_else(|| body.get("systemPrompt")) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(ApiError::invalid("`instructions` must be a string")),
    }
}

/// `If-Match` (an ETag, quoted or not) wins over a `revision` body field.
fn base_of(headers: &HeaderMap, field: Option<&Value>) -> Result<Base, ApiError> {
    if let Some(v) = headers.get(header::IF_MATCH) {
        let text = v.to_str().map_err(|_| ApiError::invalid("If-Match is not text"))?.trim();
        let text = text.strip_prefix("W/").unwrap_or(text).trim_matches('"');
        return Ok(if text == "*" { Base::Current } else { Base::Revision(Revision::new(text)) });
    }
    match field {
        None | Some(Value::Null) => Ok(Base::Current),
        Some(Value::String(s)) => Ok(Base::Revision(Revision::new(s.clone()))),
        Some(_) => Err(ApiError::invalid("`revision` must be the string a read returned")),
    }
}

/// RFC 7386: objects merge key by key, `null` deletes, anything else replaces (agents and
/// schedules are patched alike).
pub(crate) fn merge_patch(target: &mut Value, patch: Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(&k);
                } else {
                    merge_patch(t.entry(k).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_patch_merges_objects_and_null_deletes() {
        let mut v = json!({"role": "a", "model": "x", "nested": {"k": 1, "j": 2}});
        merge_patch(&mut v, json!({"role": null, "nested": {"j": 3}, "maxTurns": 4}));
        assert_eq!(v, json!({"model": "x", "nested": {"k": 1, "j": 3}, "maxTurns": 4}));
    }

    #[test]
    fn if_match_accepts_quoted_and_weak_etags() {
        let mut h = HeaderMap::new();
        h.insert(header::IF_MATCH, HeaderValue::from_static("W/\"abc\""));
        assert!(matches!(base_of(&h, None), Ok(Base::Revision(r)) if r.as_str() == "abc"));
        assert!(
            matches!(base_of(&HeaderMap::new(), Some(&json!("def"))), Ok(Base::Revision(r)) if r.as_str() == "def")
        );
        assert!(matches!(base_of(&HeaderMap::new(), None), Ok(Base::Current)));
    }
}
