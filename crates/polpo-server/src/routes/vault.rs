//! The vault, metadata only: `GET /vault/entries[/{agent}]`, `POST /vault/entries`,
//! `PATCH /vault/entries/{agent}/{service}`, `DELETE /vault/entries/{agent}/{service}`.
//!
//! No route ever answers with a credential value: listings and writes return
//! `{agent, service, type, label, keys}`. Writes need an admin key. Without a vault key the
//! routes answer `503 vault_key_missing`, never an empty list that would look like "no
//! secrets".

use crate::auth::Caller;
use crate::error::{ApiError, ErrorCode, RestError, ok};
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, patch};
use axum::{Extension, Json, Router};
use polpo_vault::{Entry, Vault};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Every vault route under `/api/v1` and `/v1`.
pub fn router() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/v1/vault/entries", get(list).post(create))
        .route("/v1/vault/entries", get(list).post(create))
        .route("/api/v1/vault/entries/{agent}", get(list_agent))
        .route("/v1/vault/entries/{agent}", get(list_agent))
        .route("/api/v1/vault/entries/{agent}/{service}", patch(update).delete(remove))
        .route("/v1/vault/entries/{agent}/{service}", patch(update).delete(remove))
}

/// The body of `POST /vault/entries`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewEntry {
    agent: String,
    service: String,
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    label: Option<String>,
    credentials: BTreeMap<String, String>,
}

/// The body of `PATCH /vault/entries/{agent}/{service}`: fields to replace; credentials merge.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EntryPatch {
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    label: Option<String>,
    #[serde(default)]
    credentials: Option<BTreeMap<String, String>>,
}

/// `GET /vault/entries`: every entry's metadata.
pub async fn list(State(state): State<Arc<AppState>>) -> Result<Json<Value>, RestError> {
    Ok(ok(vault(&state)?.list(None)?))
}

/// `GET /vault/entries/{agent}`: one agent's entries' metadata.
pub async fn list_agent(
    State(state): State<Arc<AppState>>,
    Path(agent): Path<String>,
) -> Result<Json<Value>, RestError> {
    Ok(ok(vault(&state)?.list(Some(&agent))?))
}

/// `POST /vault/entries`: add or replace an entry; answers its metadata (201).
pub async fn create(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Json(body): Json<NewEntry>,
) -> Result<impl IntoResponse, RestError> {
    admin(&caller)?;
    let entry = Entry {
        agent: body.agent,
        service: body.service,
        kind: body.kind,
        label: body.label,
        credentials: body.credentials,
    };
    let meta = vault(&state)?.set(entry)?;
    Ok((StatusCode::CREATED, ok(meta)))
}

/// `PATCH /vault/entries/{agent}/{service}`: change the type or label, merge credentials.
pub async fn update(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path((agent, service)): Path<(String, String)>,
    Json(body): Json<EntryPatch>,
) -> Result<Json<Value>, RestError> {
    admin(&caller)?;
    let vault = vault(&state)?;
    let meta = vault.patch(&agent, &service, body.kind, body.label, body.credentials.unwrap_or_default())?;
    Ok(ok(meta))
}

/// `DELETE /vault/entries/{agent}/{service}`: `{removed}`.
pub async fn remove(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path((agent, service)): Path<(String, String)>,
) -> Result<Json<Value>, RestError> {
    admin(&caller)?;
    Ok(ok(json!({"removed": vault(&state)?.remove(&agent, &service)?})))
}

fn vault(state: &AppState) -> Result<&Vault, ApiError> {
    state.vault.as_ref().map_err(|e| e.clone().into())
}

fn admin(caller: &Caller) -> Result<(), ApiError> {
    if caller.admin {
        Ok(())
    } else {
        Err(ApiError::new(ErrorCode::Forbidden, "changing the vault needs an admin key"))
    }
}
