//! The server's shared state and its router: which route lives where, and the layers every
//! request passes (authentication, body limit, timeout, CORS).

use crate::auth::{ApiKeys, digest, presented_key};
use crate::ratelimit::RateLimit;
use crate::error::{ApiError, RestError};
use crate::routes;
use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderName, Method};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use polpo_engine::Runtime;
use polpo_engine::runs::{RunManager, RunOptions};
use std::sync::Arc;
use tower_http::cors::{AllowOrigin, CorsLayer};

/// Largest request body. Generous enough for image parts as data URLs, small enough that
/// one request cannot exhaust memory.
pub const MAX_BODY_BYTES: usize = 20 * 1024 * 1024;

/// Headers browsers may read from responses (the reference exposes `x-session-id`).
pub const EXPOSED_HEADERS: [&str; 3] = ["x-session-id", "x-polpo-run-id", "x-polpo-overhead-ms"];

/// Everything a handler needs.
pub struct AppState {
    /// The runtime (project, providers, store).
    pub runtime: Arc<Runtime>,
    /// Accepted API keys; empty means local-only mode (the listener is bound to 127.0.0.1).
    pub keys: ApiKeys,
    /// Browser origins allowed to call the API (`*` for any); empty: none.
    pub cors_origins: Vec<String>,
    /// When the server started (health reports uptime).
    pub started: std::time::Instant,
    /// Per-key request limit; only applied when keys are configured.
    pub rate_limit: Option<RateLimit>,
    /// Durable runs of this process (run-backed chat, steering, abort, recovery).
    pub runs: Arc<RunManager>,
}

impl AppState {
    /// State for `runtime` with these keys, local browser origins, started now.
    pub fn new(runtime: Arc<Runtime>, keys: ApiKeys) -> Self {
        let rate_limit = if keys.is_empty() { None } else { RateLimit::from_env() };
        // Runs whose owner crashed are taken over as soon as the server state exists.
        let runs = RunManager::new(runtime.clone(), RunOptions::from_env());
        if tokio::runtime::Handle::try_current().is_ok() {
            runs.spawn_recovery();
        }
        Self { runtime, keys, cors_origins: default_cors_origins(), started: std::time::Instant::now(), rate_limit, runs }
    }
}

/// The reference's default: local dashboards and dev servers only.
pub fn default_cors_origins() -> Vec<String> {
    let ports = [3000, 3001, 3890, 3891, 5173, 5174, 5175, 5176];
    ports.iter().flat_map(|p| [format!("http://localhost:{p}"), format!("http://127.0.0.1:{p}")]).collect()
}

/// The whole HTTP API.
pub fn router(state: Arc<AppState>) -> Router {
    let open = Router::new().route("/api/v1/health", get(routes::health::health)).route("/v1/health", get(routes::health::health));
    let protected = Router::new()
        .route("/v1/chat/completions", post(routes::chat::completions))
        .route("/v1/models", get(routes::models::list))
        .route("/v1/runs/{id}", get(routes::runs::get_run))
        .route("/api/v1/runs/{id}", get(routes::runs::get_run))
        .route("/v1/runs/{id}/events", get(routes::runs::events))
        .route("/api/v1/runs/{id}/events", get(routes::runs::events))
        .route("/v1/runs/{id}/steer", post(routes::runs::steer))
        .route("/api/v1/runs/{id}/steer", post(routes::runs::steer))
        .route("/v1/runs/{id}/abort", post(routes::runs::abort))
        .route("/api/v1/runs/{id}/abort", post(routes::runs::abort))
        .route("/v1/runs/{id}/reconcile", post(routes::runs::reconcile))
        .route("/api/v1/runs/{id}/reconcile", post(routes::runs::reconcile))
        .route("/v1/hooks/capabilities", get(routes::health::hook_capabilities))
        .route("/api/v1/hooks/capabilities", get(routes::health::hook_capabilities))
        .route("/api/v1/events", get(routes::events::stream))
        .route("/v1/events", get(routes::events::stream))
        .route("/api/v1/openapi.json", get(routes::openapi::openapi))
        .route("/v1/openapi.json", get(routes::openapi::openapi))
        .route("/api/v1/agents", get(routes::agents::list).post(routes::agents::create))
        .route("/v1/agents", get(routes::agents::list).post(routes::agents::create))
        .route("/api/v1/agents/{id}", get(routes::agents::get).put(routes::agents::replace).patch(routes::agents::patch).delete(routes::agents::delete))
        .route("/v1/agents/{id}", get(routes::agents::get).put(routes::agents::replace).patch(routes::agents::patch).delete(routes::agents::delete))
        .merge(routes::sessions::router())
        .merge(routes::teams::router())
        .route_layer(middleware::from_fn_with_state(state.clone(), authenticate));
    open.merge(routes::dashboard::router())
        .merge(protected)
        .fallback(|| async { ApiError::new("route_not_found", "no such route") })
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(cors(&state.cors_origins))
        .with_state(state)
}

/// Reject requests without a valid key (when keys are configured) with the OpenAI 401 shape.
/// The OpenAI surface gets the OpenAI error shape, management routes the REST envelope.
async fn authenticate(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let path = request.uri().path();
    let openai_shape = path == "/v1/chat/completions" || path == "/v1/models";
    let reply = |e: ApiError| if openai_shape { e.into_response() } else { RestError(e).into_response() };
    if !state.keys.authorizes(request.headers()) {
        return reply(ApiError::new("unauthorized", "missing or invalid API key: send `Authorization: Bearer <key>` or `X-API-Key: <key>`"));
    }
    if let (Some(limit), Some(key)) = (&state.rate_limit, presented_key(request.headers()))
        && let Err(wait) = limit.check(digest(key), std::time::Instant::now())
    {
        let secs = wait.as_secs() + 1;
        let mut response = reply(ApiError::new("too_many_requests", format!("rate limit reached for this API key; retry in {secs} s")));
        if let Ok(v) = secs.to_string().parse() {
            response.headers_mut().insert(axum::http::header::RETRY_AFTER, v);
        }
        return response;
    }
    next.run(request).await
}

fn cors(origins: &[String]) -> CorsLayer {
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(origins.iter().filter_map(|o| o.parse().ok()))
    };
    CorsLayer::new()
        .allow_origin(allow)
        .allow_methods([Method::GET, Method::POST, Method::PUT, Method::PATCH, Method::DELETE])
        .allow_headers(tower_http::cors::Any)
        .expose_headers(EXPOSED_HEADERS.map(HeaderName::from_static))
}
