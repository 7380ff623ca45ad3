//! The web dashboard: one static page, its script and its style, embedded in the binary so
//! `polpo serve` and `polpo dev` ship it with no build step and no extra files.
//!
//! The page holds no data: it calls the same REST API as any client, with the API key the user
//! types (kept in the tab's `sessionStorage`, sent as `Authorization: Bearer`). So these routes
//! need no key, and everything they serve is identical on every server. The script is a separate
//! file because the Content-Security-Policy forbids inline script and style: with `'self'` only,
//! a model's answer that somehow reached the DOM as markup still could not run code.

use crate::state::AppState;
use axum::Router;
use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use std::sync::Arc;

/// The page (`GET /` and `GET /dashboard`).
pub const PAGE: &str = include_str!("../../dashboard/index.html");
/// The page's script (`GET /dashboard/app.js`).
pub const SCRIPT: &str = include_str!("../../dashboard/app.js");
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
        .route("/dashboard/app.js", get(script))
        .route("/dashboard/app.css", get(style))
}

async fn page() -> Response {
    asset("text/html; charset=utf-8", PAGE)
}

async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
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
