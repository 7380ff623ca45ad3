//! `GET /v1/models`: agents (and model profiles) as OpenAI models, so any OpenAI client can
//! discover what it may talk to.

use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};
use std::sync::Arc;

/// Each agent appears twice: as `agent/<id>` (unambiguous) and as its bare id, which is what
/// a user types into an OpenAI client's model box. Profiles are listed as `profile/<name>`
/// for discovery; requests always run through an agent.
pub async fn list(State(state): State<Arc<AppState>>) -> Json<Value> {
    let loaded = state.runtime.loaded();
    let mut data = Vec::new();
    for (id, agent) in &loaded.project.agents {
        let role = agent.config.role.clone();
        for name in [format!("agent/{id}"), id.clone()] {
            data.push(json!({"id": name, "object": "model", "created": 0, "owned_by": "polpo", "polpo": {"kind": "agent", "agent": id, "role": role}}));
        }
    }
    for name in loaded.project.settings().model_profiles.iter().flatten().map(|(k, _)| k) {
        data.push(json!({"id": format!("profile/{name}"), "object": "model", "created": 0, "owned_by": "polpo", "polpo": {"kind": "profile"}}));
    }
    Json(json!({"object": "list", "data": data}))
}
