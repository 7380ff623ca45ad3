//! Liveness and what this host supports.

use crate::error::ok;
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use polpo_core::hooks::capabilities::{HostHooks, capabilities};
use serde_json::{Value, json};
use std::sync::Arc;

/// `GET /api/v1/health` (no auth): `{ok, data:{status, version, uptime}}` as in the reference.
pub async fn health(State(state): State<Arc<AppState>>) -> Json<Value> {
    ok(json!({"status": "ok", "version": env!("CARGO_PKG_VERSION"), "uptime": state.started.elapsed().as_secs()}))
}

/// `GET /v1/hooks/capabilities`: the hook contract this host implements, the same document
/// as `polpo hooks capabilities --json`, read from the runtime that actually runs the hooks.
pub async fn hook_capabilities(State(state): State<Arc<AppState>>) -> Json<Value> {
    let runtime = state.runtime.hook_runtime();
    Json(capabilities(HostHooks { hooks_enabled: runtime.enabled, managed: runtime.managed }))
}
