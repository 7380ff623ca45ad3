//! Checks every request passes before any route sees it, against attacks from the user's own
//! browser: a web page may send requests to `localhost` (it cannot read the answers, but a
//! chat request runs the agent and its tools all the same).
//!
//! - **Host** ([`check_host`]): a local-only server (no API keys) answers only requests whose
//!   `Host` is `localhost`, `127.0.0.1` or `[::1]` (any port), so a page whose DNS name is made
//!   to point at 127.0.0.1 (DNS rebinding) is refused with `421 host_not_allowed`. With keys,
//!   `POLPO_ALLOWED_HOSTS` (comma-separated names or `name:port`) narrows it; default any.
//! - **Origin** ([`check_origin`]): a state-changing request (POST, PUT, PATCH, DELETE) from a
//!   browser page of another origin is refused with `403 origin_not_allowed`, with or without
//!   keys, unless that origin is in the CORS list. The server's own origin (the dashboard) is
//!   allowed. `Sec-Fetch-Site: cross-site` without a listed origin is refused the same way.
//! - **Content-Type** ([`check_content_type`]): request bodies must be `application/json`, so
//!   a browser cannot send one without a CORS preflight (`text/plain`, forms): `415
//!   unsupported_media_type`.
//! - **Envelope** ([`json_errors`]): every error response is JSON in the route's envelope,
//!   also those produced by the framework (unknown route, wrong method, a query or body that
//!   does not parse, a body too large).

use crate::error::{ApiError, ErrorCode, for_path};
use crate::hosts::{ALLOWED_HOSTS_ENV, HostPolicy};
use crate::state::AppState;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE, HOST, ORIGIN, TRANSFER_ENCODING};
use axum::http::{HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use std::sync::Arc;

/// Most bytes of a framework error's text kept as the envelope's message.
const MAX_MESSAGE_BYTES: usize = 4096;

/// The authority the request was sent to: `Host`, or the URI's (HTTP/2 `:authority`).
fn authority(request: &Request) -> Option<&str> {
    request.headers().get(HOST).and_then(|v| v.to_str().ok()).or_else(|| request.uri().authority().map(|a| a.as_str()))
}

/// Refuse a request whose `Host` the server does not answer (`421 host_not_allowed`).
pub async fn check_host(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    if state.hosts.allows(authority(&request)) {
        return next.run(request).await;
    }
    let shown = authority(&request).unwrap_or("(none)").to_owned();
    let message = match state.hosts {
        HostPolicy::Local => format!(
            "host `{shown}` is not served: without API keys this server answers only localhost, 127.0.0.1 and [::1]"
        ),
        _ => format!("host `{shown}` is not served: it is not in {ALLOWED_HOSTS_ENV}"),
    };
    for_path(request.uri().path(), ApiError::new(ErrorCode::HostNotAllowed, message))
}

/// Whether the method changes state (and so must not come from a foreign page).
pub(crate) fn changes_state(method: &Method) -> bool {
    [Method::POST, Method::PUT, Method::PATCH, Method::DELETE].contains(method)
}

/// Refuse a state-changing request from a browser page of a foreign origin
/// (`403 origin_not_allowed`).
pub async fn check_origin(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    if !changes_state(request.method()) {
        return next.run(request).await;
    }
    let origin = request.headers().get(ORIGIN).map(|v| v.to_str().unwrap_or("(not text)"));
    // `*` opens the API to every page only where keys guard it; without keys it would hand the
    // local server (and the agents' tools) to any site the user visits, so it is not honoured.
    let any = !state.keys.is_empty();
    let listed = origin.is_some_and(|o| {
        state.cors_origins.iter().any(|allowed| (any && allowed == "*") || allowed.eq_ignore_ascii_case(o))
    });
    let same = origin
        .zip(authority(&request))
        .is_some_and(|(o, host)| o.split_once("://").is_some_and(|(_, rest)| rest.eq_ignore_ascii_case(host)));
    let cross_site =
        request.headers().get("sec-fetch-site").is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"cross-site"));
    let refused = if cross_site { !listed } else { origin.is_some() && !listed && !same };
    if !refused {
        return next.run(request).await;
    }
    let message = format!(
        "requests from origin `{}` may not change anything here: add it to POLPO_CORS_ORIGINS to allow a web page there to call this server",
        origin.unwrap_or("(cross-site)")
    );
    for_path(request.uri().path(), ApiError::new(ErrorCode::OriginNotAllowed, message))
}

/// Whether a `Content-Type` value is JSON (`application/json`, parameters allowed).
fn is_json(content_type: &HeaderValue) -> bool {
    content_type
        .to_str()
        .ok()
        .and_then(|v| v.split(';').next())
        .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("application/json"))
}

/// Refuse a POST, PUT, PATCH or DELETE body that is not declared `application/json`
/// (`415 unsupported_media_type`); a request without a body needs no type, and reads are not
/// looked at (some clients label every request `text/plain`).
pub async fn check_content_type(request: Request, next: Next) -> Response {
    if !changes_state(request.method()) {
        return next.run(request).await;
    }
    let headers = request.headers();
    let has_body =
        headers.contains_key(TRANSFER_ENCODING) || headers.get(CONTENT_LENGTH).is_some_and(|v| v.as_bytes() != b"0");
    let acceptable = match headers.get(CONTENT_TYPE) {
        Some(ct) => is_json(ct),
        None => !has_body,
    };
    if acceptable {
        return next.run(request).await;
    }
    let given = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("none");
    let message = format!("request bodies must be JSON with `Content-Type: application/json` (got {given})");
    for_path(request.uri().path(), ApiError::new(ErrorCode::UnsupportedMediaType, message))
}

/// The stable code for a framework error of this status.
fn code_for(status: StatusCode) -> ErrorCode {
    match status.as_u16() {
        404 => ErrorCode::RouteNotFound,
        405 => ErrorCode::MethodNotAllowed,
        408 => ErrorCode::RequestTimeout,
        413 => ErrorCode::PayloadTooLarge,
        415 => ErrorCode::UnsupportedMediaType,
        429 => ErrorCode::TooManyRequests,
        500..=599 => ErrorCode::Internal,
        _ => ErrorCode::InvalidRequest,
    }
}

/// Rewrite every error response that is not JSON (the framework's plain-text rejections,
/// empty 405s) into the route's JSON envelope, keeping its status and headers (`Allow`).
pub async fn json_errors(request: Request, next: Next) -> Response {
    let path = request.uri().path().to_owned();
    let response = next.run(request).await;
    let json = response.headers().get(CONTENT_TYPE).is_some_and(is_json);
    if json || !(response.status().is_client_error() || response.status().is_server_error()) {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, MAX_MESSAGE_BYTES)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
        .unwrap_or_default();
    let code = code_for(parts.status);
    let message = if text.is_empty() { parts.status.canonical_reason().unwrap_or("error").to_owned() } else { text };
    let mut error = ApiError::new(code, message);
    if code.status() != parts.status {
        error.status = parts.status;
    }
    let (json_parts, json_body): (_, Body) = for_path(&path, error).into_parts();
    parts.headers.remove(CONTENT_LENGTH);
    if let Some(ct) = json_parts.headers.get(CONTENT_TYPE) {
        parts.headers.insert(CONTENT_TYPE, ct.clone());
    }
    Response::from_parts(parts, json_body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_content_types_may_carry_parameters() {
        assert!(is_json(&HeaderValue::from_static("application/json; charset=utf-8")));
        assert!(is_json(&HeaderValue::from_static("Application/JSON")));
        assert!(!is_json(&HeaderValue::from_static("text/plain")));
        assert!(!is_json(&HeaderValue::from_static("application/x-www-form-urlencoded")));
    }
}
