//! Every error the server returns, in the OpenAI error envelope with a stable code.
//!
//! One mapping from code to HTTP status, so the same failure has the same status on every
//! route. Provider-side failures (the model's API key is wrong, the provider is down) are
//! reported as 502, never 401/403: those statuses belong to the caller's own credentials.

use crate::wire::error_body;
use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// An error response.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable snake_case code.
    pub code: String,
    /// Human sentence.
    pub message: String,
    /// The durable run the failure concerns (`error.run_id`), for a client to follow it on.
    pub run_id: Option<String>,
}

impl ApiError {
    /// An error whose status follows from its code.
    pub fn new(code: &str, message: impl Into<String>) -> Self {
        Self { status: status_of(code), code: code.to_owned(), message: message.into(), run_id: None }
    }

    /// The same error, naming the durable run it concerns.
    pub fn for_run(mut self, run_id: &str) -> Self {
        self.run_id = Some(run_id.to_owned());
        self
    }

    /// `400 invalid_request`.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new("invalid_request", message)
    }

    /// The OpenAI `type` that goes with the status, so SDKs raise the matching exception class.
    fn kind(&self) -> &'static str {
        match self.status.as_u16() {
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            409 => "conflict_error",
            429 => "rate_limit_error",
            500..=599 => "api_error",
            _ => "invalid_request_error",
        }
    }
}

impl From<polpo_engine::ChatError> for ApiError {
    fn from(e: polpo_engine::ChatError) -> Self {
        Self::new(e.code(), e.to_string())
    }
}

impl From<polpo_store::StoreError> for ApiError {
    fn from(e: polpo_store::StoreError) -> Self {
        Self::new(e.code(), e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = error_body(&self.message, self.kind(), &self.code);
        if let Some(run_id) = self.run_id {
            body["error"]["run_id"] = run_id.into();
        }
        (self.status, Json(body)).into_response()
    }
}

/// An error from a management route (`/api/v1/*`), in the reference's REST envelope
/// `{ok:false, error, code}` rather than OpenAI's.
#[derive(Debug, Clone)]
pub struct RestError(pub ApiError);

impl<E: Into<ApiError>> From<E> for RestError {
    fn from(e: E) -> Self {
        Self(e.into())
    }
}

impl IntoResponse for RestError {
    fn into_response(self) -> Response {
        (self.0.status, Json(serde_json::json!({"ok": false, "error": self.0.message, "code": self.0.code}))).into_response()
    }
}

/// `e` in the envelope the route at `path` answers with: OpenAI's for the OpenAI surface
/// (`/v1/chat/completions`, `/v1/models`, which OpenAI SDKs parse), the REST envelope for
/// everything else; for errors raised before any handler runs (layers, fallbacks).
pub fn for_path(path: &str, e: ApiError) -> Response {
    if path == "/v1/chat/completions" || path == "/v1/models" { e.into_response() } else { RestError(e).into_response() }
}

/// A management route's success: `{ok:true, data}`.
pub fn ok<T: serde::Serialize>(data: T) -> Json<serde_json::Value> {
    Json(serde_json::json!({"ok": true, "data": data}))
}

/// The HTTP status for a stable error code.
pub fn status_of(code: &str) -> StatusCode {
    match code {
        "unauthorized" => StatusCode::UNAUTHORIZED,
        "tool_policy_denied" | "hook_stopped" | "forbidden" | "origin_not_allowed" => StatusCode::FORBIDDEN,
        "host_not_allowed" => StatusCode::MISDIRECTED_REQUEST,
        "unsupported_media_type" => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "method_not_allowed" => StatusCode::METHOD_NOT_ALLOWED,
        "request_timeout" => StatusCode::REQUEST_TIMEOUT,
        "agent_not_found" | "team_not_found" | "session_not_found" | "run_not_found" | "not_found" | "route_not_found" => StatusCode::NOT_FOUND,
        "conflict" | "team_not_empty" | "session_agent_mismatch" | "idempotency_in_progress" | "already_exists" | "lease_held" | "invalid_transition" | "run_not_active" => StatusCode::CONFLICT,
        "payload_too_large" => StatusCode::PAYLOAD_TOO_LARGE,
        "idempotency_key_reused" | "max_turns_exhausted" | "structured_output_invalid" | "hook_failed" => StatusCode::UNPROCESSABLE_ENTITY,
        c if c.starts_with("termination_gate_") => StatusCode::UNPROCESSABLE_ENTITY,
        "too_many_requests" => StatusCode::TOO_MANY_REQUESTS,
        "aborted" => StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
        // The server is stopping; the run goes on on the next one.
        "run_handed_over" | "too_many_connections" => StatusCode::SERVICE_UNAVAILABLE,
        // The operator has not set the provider's key: nothing the caller can fix by retrying.
        "provider_not_configured" => StatusCode::SERVICE_UNAVAILABLE,
        "rate_limited" | "provider_unavailable" | "auth_failed" | "model_timeout" | "stream_interrupted" | "content_filtered" | "context_length_exceeded" | "invalid_response" => {
            StatusCode::BAD_GATEWAY
        }
        "internal" | "io_error" | "database_error" | "store_corrupt" | "store_locked" | "migration_failed" | "store_config" | "lease_lost" => StatusCode::INTERNAL_SERVER_ERROR,
        _ => StatusCode::BAD_REQUEST,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_credential_failures_are_not_the_callers_401() {
        assert_eq!(status_of("auth_failed"), StatusCode::BAD_GATEWAY);
        assert_eq!(status_of("unauthorized"), StatusCode::UNAUTHORIZED);
        assert_eq!(status_of("termination_gate_cycles_exhausted"), StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(ApiError::new("agent_not_found", "x").kind(), "not_found_error");
    }
}
