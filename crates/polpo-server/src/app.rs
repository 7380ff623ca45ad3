//! The server's router: which route lives where, and the layers every request passes (JSON
//! errors, host and origin checks, CORS, JSON bodies, body limit, authentication). The state
//! handlers share lives below the routes, in [`crate::state`].

use crate::auth::{digest, presented_key};
use crate::error::{ApiError, ErrorCode, for_path};
use crate::guard;
use crate::routes;
use crate::state::AppState;
use axum::Router;
use axum::extract::{ConnectInfo, DefaultBodyLimit, Request, State};
use axum::http::{HeaderName, HeaderValue, Method, Uri};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;
use tower_http::cors::{AllowOrigin, CorsLayer};

/// Largest request body. Generous enough for image parts as data URLs, small enough that
/// one request cannot exhaust memory.
pub const MAX_BODY_BYTES: usize = 20 * 1024 * 1024;

/// Headers browsers may read from responses (the reference exposes `x-session-id`).
pub const EXPOSED_HEADERS: [&str; 3] = ["x-session-id", "x-polpo-run-id", "x-polpo-overhead-ms"];

/// Request headers allowed pages may send: named one by one, since a wildcard does not cover
/// `Authorization` in browsers.
pub const ALLOWED_HEADERS: [&str; 6] =
    ["authorization", "content-type", "x-api-key", "idempotency-key", "x-session-id", "last-event-id"];

/// The whole HTTP API.
pub fn router(state: Arc<AppState>) -> Router {
    let open = Router::new()
        .route("/api/v1/health", get(routes::health::health))
        .route("/v1/health", get(routes::health::health));
    let protected = Router::new()
        .route("/v1/chat/completions", post(routes::chat::completions))
        .route("/v1/models", get(routes::models::list))
        .route("/api/v1/workers", get(routes::health::workers))
        .route("/v1/workers", get(routes::health::workers))
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
        .route("/v1/loop-runs/{id}/human", post(routes::loops::human))
        .route("/api/v1/loop-runs/{id}/human", post(routes::loops::human))
        .route("/v1/loop-runs", get(routes::loop_runs::list))
        .route("/api/v1/loop-runs", get(routes::loop_runs::list))
        .route("/api/v1/schedules", get(routes::schedules::list).post(routes::schedules::create))
        .route(
            "/api/v1/schedules/{id}",
            get(routes::schedules::get).patch(routes::schedules::patch).delete(routes::schedules::delete),
        )
        .route("/api/v1/schedules/{id}/pause", post(routes::schedules::pause))
        .route("/api/v1/schedules/{id}/resume", post(routes::schedules::resume))
        .route("/api/v1/schedules/{id}/trigger", post(routes::schedules::trigger))
        .route("/api/v1/schedules/{id}/runs", get(routes::schedules::runs))
        .route("/v1/schedules", get(routes::schedules::list).post(routes::schedules::create))
        .route(
            "/v1/schedules/{id}",
            get(routes::schedules::get).patch(routes::schedules::patch).delete(routes::schedules::delete),
        )
        .route("/v1/schedules/{id}/pause", post(routes::schedules::pause))
        .route("/v1/schedules/{id}/resume", post(routes::schedules::resume))
        .route("/v1/schedules/{id}/trigger", post(routes::schedules::trigger))
        .route("/v1/schedules/{id}/runs", get(routes::schedules::runs))
        .route("/v1/loop-runs/{id}", get(routes::loop_runs::get))
        .route("/api/v1/loop-runs/{id}", get(routes::loop_runs::get))
        .route("/v1/loop-runs/{id}/cancel", post(routes::loop_runs::cancel))
        .route("/api/v1/loop-runs/{id}/cancel", post(routes::loop_runs::cancel))
        .route("/v1/loop-runs/{id}/reconcile", post(routes::loop_runs::reconcile))
        .route("/api/v1/loop-runs/{id}/reconcile", post(routes::loop_runs::reconcile))
        .route("/v1/loop-runs/{id}/approve", post(routes::approvals::approve_run))
        .route("/api/v1/loop-runs/{id}/approve", post(routes::approvals::approve_run))
        .route("/v1/loop-runs/{id}/reject", post(routes::approvals::reject_run))
        .route("/api/v1/loop-runs/{id}/reject", post(routes::approvals::reject_run))
        .route("/v1/loop-runs/{id}/resume", post(routes::approvals::resume))
        .route("/api/v1/loop-runs/{id}/resume", post(routes::approvals::resume))
        .route("/v1/approvals", get(routes::approvals::list))
        .route("/api/v1/approvals", get(routes::approvals::list))
        .route("/v1/approvals/{id}", get(routes::approvals::get))
        .route("/api/v1/approvals/{id}", get(routes::approvals::get))
        .route("/v1/approvals/{id}/approve", post(routes::approvals::approve))
        .route("/api/v1/approvals/{id}/approve", post(routes::approvals::approve))
        .route("/v1/approvals/{id}/reject", post(routes::approvals::reject))
        .route("/api/v1/approvals/{id}/reject", post(routes::approvals::reject))
        .route("/v1/hooks/capabilities", get(routes::health::hook_capabilities))
        .route("/api/v1/hooks/capabilities", get(routes::health::hook_capabilities))
        .route("/api/v1/events", get(routes::events::stream))
        .route("/v1/events", get(routes::events::stream))
        .route("/api/v1/openapi.json", get(routes::openapi::openapi))
        .route("/v1/openapi.json", get(routes::openapi::openapi))
        .route("/api/v1/loops", get(routes::loops::list).post(routes::loops::create))
        .route("/v1/loops", get(routes::loops::list).post(routes::loops::create))
        .route("/api/v1/loops/{id}", get(routes::loops::get).put(routes::loops::replace).delete(routes::loops::delete))
        .route("/v1/loops/{id}", get(routes::loops::get).put(routes::loops::replace).delete(routes::loops::delete))
        .route("/api/v1/agents", get(routes::agents::list).post(routes::agents::create))
        .route("/v1/agents", get(routes::agents::list).post(routes::agents::create))
        .route(
            "/api/v1/agents/{id}",
            get(routes::agents::get)
                .put(routes::agents::replace)
                .patch(routes::agents::patch)
                .delete(routes::agents::delete),
        )
        .route(
            "/v1/agents/{id}",
            get(routes::agents::get)
                .put(routes::agents::replace)
                .patch(routes::agents::patch)
                .delete(routes::agents::delete),
        )
        .merge(routes::sessions::router())
        .merge(routes::teams::router())
        .merge(routes::skills::router())
        .merge(routes::memory::router())
        .merge(routes::memory_candidates::router())
        .merge(routes::tasks::router())
        .merge(routes::missions::router())
        .merge(routes::vault::router())
        .merge(routes::mcp::router(&state))
        .route_layer(middleware::from_fn_with_state(state.clone(), authenticate));
    // Layers run outside in: the last added sees the request first.
    open.merge(routes::dashboard::router())
        .merge(protected)
        .fallback(|uri: Uri| async move {
            for_path(uri.path(), ApiError::new(ErrorCode::RouteNotFound, format!("no route {}", uri.path())))
        })
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(tower_http::timeout::RequestBodyDeadlineLayer::new(state.body_deadline))
        .layer(middleware::from_fn(guard::check_content_type))
        .layer(cors(&state.cors_origins))
        .layer(middleware::from_fn_with_state(state.clone(), guard::check_origin))
        .layer(middleware::from_fn_with_state(state.clone(), guard::check_host))
        .layer(middleware::from_fn(guard::json_errors))
        .with_state(state)
}

/// Reject requests without a valid key (when keys are configured) with `401`, in the envelope
/// of the route; a client address that failed too often gets `429` with `Retry-After` until
/// its budget refills, whatever key it presents. A request that passes carries its
/// [`Caller`](crate::auth::Caller) for the handlers.
async fn authenticate(State(state): State<Arc<AppState>>, mut request: Request, next: Next) -> Response {
    let path = request.uri().path().to_owned();
    let client = crate::ratelimit::address_key(
        request.extensions().get::<ConnectInfo<SocketAddr>>().map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| c.0.ip()),
    );
    let now = Instant::now();
    if let Some(wait) = state.auth_failures.as_ref().and_then(|l| l.exhausted(&client, now)) {
        return too_many(&path, wait, "too many failed authentications from this address");
    }
    let Some(caller) = state.keys.authenticate(request.headers()) else {
        if let Some(Err(wait)) = state.auth_failures.as_ref().map(|l| l.check(client, now)) {
            return too_many(&path, wait, "too many failed authentications from this address");
        }
        return for_path(
            &path,
            ApiError::new(
                ErrorCode::Unauthorized,
                "missing or invalid API key: send `Authorization: Bearer <key>` or `X-API-Key: <key>`",
            ),
        );
    };
    if let (Some(limit), Some(key)) = (&state.rate_limit, presented_key(request.headers()))
        && let Err(wait) = limit.check(digest(key), now)
    {
        return too_many(&path, wait, "rate limit reached for this API key");
    }
    if !caller.admin && needs_admin(request.method(), &path) {
        return for_path(
            &path,
            ApiError::new(
                ErrorCode::Forbidden,
                "changing the project's agents, teams, skills, loops or schedules, deciding approvals and operating tasks and missions need an admin key: client keys use agents, they do not configure or govern them",
            ),
        );
    }
    request.extensions_mut().insert(caller);
    next.run(request).await
}

/// Whether a request needs an admin key: it changes `.polpo/` (agents, teams, skill
/// assignments, loops, schedules and their fires), decides an approval, or
/// reaches tasks and missions (kept for the whole project, not per client). An
/// agent's config bounds its tools for every client, so a client key that could edit it could
/// grant itself `bash` on the whole disk; and a client that could approve its own loop run's
/// gate would make the gate meaningless.
fn needs_admin(method: &Method, path: &str) -> bool {
    let path = path.strip_prefix("/api").unwrap_or(path);
    let decides_approval = path.starts_with("/v1/approvals/")
        || (path.starts_with("/v1/loop-runs/") && (path.ends_with("/approve") || path.ends_with("/reject")));
    // Tasks and missions are not stored per client yet: one client would read another's.
    let operates_tasks = ["/v1/tasks", "/v1/missions"].iter().any(|p| path == *p || path.starts_with(&format!("{p}/")));
    // Which servers hold which runs is the operator's view, not a client's.
    operates_tasks
        || path == "/v1/workers"
        || guard::changes_state(method)
            && (path.starts_with("/v1/agents") && !routes::memory::is_memory_path(path)
                || path.starts_with("/v1/skills")
                || path == "/v1/loops"
                || path.starts_with("/v1/loops/")
                || path == "/v1/schedules"
                || path.starts_with("/v1/schedules/")
                || decides_approval)
}

/// `429 too_many_requests` with `Retry-After`.
fn too_many(path: &str, wait: std::time::Duration, why: &str) -> Response {
    let secs = wait.as_secs() + 1;
    let mut response = for_path(path, ApiError::new(ErrorCode::TooManyRequests, format!("{why}; retry in {secs} s")));
    response.headers_mut().insert(axum::http::header::RETRY_AFTER, HeaderValue::from(secs));
    response
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
        .allow_headers(ALLOWED_HEADERS.map(HeaderName::from_static))
        .expose_headers(EXPOSED_HEADERS.map(HeaderName::from_static))
}
