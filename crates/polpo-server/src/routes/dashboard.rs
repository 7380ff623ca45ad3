//! The web dashboard: one static page, its script and its style, embedded in the binary so
//! `polpo serve` and `polpo dev` ship it with no build step and no extra files.
//!
//! The page holds no data: it calls the same REST API as any client, with the API key the user
//! types (kept in the tab's `sessionStorage`, sent as `Authorization: Bearer`). So these routes
//! need no key, and everything they serve is identical on every server. The scripts are separate
//! files because the Content-Security-Policy forbids inline script and style: with `'self'` only,
//! a model's answer that somehow reached the DOM as markup still could not run code. There are
//! several plain scripts (no modules, no build step) so none grows past a readable size; the page
//! loads them in [`SCRIPTS`] order.

use crate::error::{ApiError, ErrorCode, RestError};
use crate::state::AppState;
use axum::Router;
use axum::extract::Path;
use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use std::sync::Arc;

/// The page (`GET /` and `GET /dashboard`).
pub const PAGE: &str = include_str!("../../dashboard/index.html");
/// The page's scripts (`GET /dashboard/<name>`), in the order the page loads them: the
/// helpers and the live event feed, tasks and missions, approvals and loop runs, then the other
/// views and the router, which lists every view.
pub const SCRIPTS: [(&str, &str); 4] = [
    ("core.js", include_str!("../../dashboard/core.js")),
    ("work.js", include_str!("../../dashboard/work.js")),
    ("loops.js", include_str!("../../dashboard/loops.js")),
    ("app.js", include_str!("../../dashboard/app.js")),
];
/// The page's style (`GET /dashboard/app.css`).
pub const STYLE: &str = include_str!("../../dashboard/app.css");

/// Same-origin script, style and API calls only; no inline code, no plugins, no framing,
/// no form posts elsewhere.
pub const CONTENT_SECURITY_POLICY_VALUE: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The dashboard's routes; mounted outside authentication (they serve no data).
pub fn router() -> Router<Arc<AppState>> {
    Router::new()
        .route("/", get(page))
        .route("/dashboard", get(page))
        .route("/dashboard/app.css", get(style))
        .route("/dashboard/{name}", get(script))
}

async fn page() -> Response {
    asset("text/html; charset=utf-8", PAGE)
}

/// One of [`SCRIPTS`] by name; 404 `not_found` for any other name.
async fn script(Path(name): Path<String>) -> Response {
    match SCRIPTS.iter().find(|(n, _)| *n == name) {
        Some((_, body)) => asset("text/javascript; charset=utf-8", body),
        None => RestError(ApiError::new(ErrorCode::NotFound, format!("the dashboard has no script `{name}`")))
            .into_response(),
    }
}

async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}

/// An embedded file with the security headers; `no-cache` so a new binary's page is picked up.
fn asset(content_type: &'static str, body: &'static str) -> Response {
    let headers = [
        (CONTENT_TYPE, content_type),
        (CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY_VALUE),
        (X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (X_FRAME_OPTIONS, "DENY"),
        (REFERRER_POLICY, "no-referrer"),
        (CACHE_CONTROL, "no-cache"),
    ];
    (headers, body).into_response()
}
