//! The HTTP side shared by every wire: one client per provider, retries with backoff and
//! jitter, `Retry-After`, error classification, and redaction of the API key.

use crate::config::{ApiKey, HttpPolicy, ProviderConfig};
use crate::{LlmError, LlmErrorKind};
use bytes::Bytes;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use std::hash::{BuildHasher, RandomState};
use std::time::{Duration, SystemTime};

/// Largest error body read for classification.
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;
/// Longest provider error message quoted in an `LlmError`.
const MAX_QUOTED_CHARS: usize = 500;

/// `body` as the JSON bytes of a request.
pub(crate) fn encode(body: &(impl serde::Serialize + ?Sized)) -> Result<Bytes, LlmError> {
    serde_json::to_vec(body).map(Bytes::from).map_err(cannot_encode)
}

/// The error of a request body that cannot be written as JSON.
pub(crate) fn cannot_encode(e: serde_json::Error) -> LlmError {
    LlmError::new(LlmErrorKind::InvalidRequest, format!("cannot encode request: {e}"))
}

/// `path` under a provider's `base_url`, parsed once when the provider is built rather than
/// at every request (the parse, host normalisation included, was ≈ 20 k instructions a run).
/// The error does not quote the URL, which may carry credentials.
pub(crate) fn endpoint(base_url: &str, path: &str) -> Result<reqwest::Url, LlmError> {
    reqwest::Url::parse(&format!("{}{path}", base_url.trim_end_matches('/'))).map_err(|e| {
        LlmError::new(LlmErrorKind::InvalidRequest, format!("the provider's baseUrl is not a valid URL: {e}"))
    })
}

/// POSTs JSON to one provider and turns HTTP failures into classified [`LlmError`]s.
pub(crate) struct Transport {
    client: reqwest::Client,
    policy: HttpPolicy,
    headers: HeaderMap,
    key: Option<ApiKey>,
    missing_key_env: Option<String>,
}

impl Transport {
    /// A client for `config`; `auth` turns the key into the wire's auth headers.
    pub fn new(
        config: &ProviderConfig,
        key: Option<ApiKey>,
        auth: impl Fn(&ApiKey) -> Vec<(&'static str, String)>,
    ) -> Result<Self, LlmError> {
        crate::install_crypto_provider();
        let client = reqwest::Client::builder()
            .connect_timeout(config.http.connect_timeout)
            .read_timeout(config.http.idle_timeout)
            .build()
            .map_err(|e| {
                LlmError::new(LlmErrorKind::InvalidRequest, format!("cannot build HTTP client: {}", e.without_url()))
            })?;
        let mut headers = HeaderMap::new();
        headers.insert(reqwest::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(key) = &key {
            for (name, value) in auth(key) {
                let mut value = HeaderValue::from_str(&value).map_err(|_| {
                    LlmError::new(LlmErrorKind::AuthFailed, "the API key contains characters not allowed in a header")
                })?;
                value.set_sensitive(true);
                headers.insert(name, value);
            }
        }
        for (name, value) in &config.headers {
            let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                LlmError::new(LlmErrorKind::InvalidRequest, format!("invalid header name `{name}` in provider config"))
            })?;
            let mut value = HeaderValue::from_str(value).map_err(|_| {
                LlmError::new(
                    LlmErrorKind::InvalidRequest,
                    format!("invalid value for header `{name}` in provider config"),
                )
            })?;
            value.set_sensitive(true);
            headers.insert(name, value);
        }
        let missing_key_env = if key.is_none() { config.api_key_env.clone() } else { None };
        Ok(Self { client, policy: config.http.clone(), headers, key, missing_key_env })
    }

    /// POST `body` to `url`, retrying 429, 5xx and connection failures with exponential
    /// backoff and jitter (or the provider's `Retry-After`, up to a bound). Retries happen only
    /// here, before any byte of a successful body is read, so nothing is ever delivered twice.
    pub async fn post(&self, url: &reqwest::Url, body: Bytes) -> Result<reqwest::Response, LlmError> {
        let mut attempt: u32 = 0;
        loop {
            let sent = self.client.post(url.clone()).headers(self.headers.clone()).body(body.clone()).send().await;
            let error = match sent {
                Ok(response) if response.status().is_success() => return Ok(response),
                Ok(response) => self.status_error(response).await,
                Err(e) => self.transport_error(&e),
            };
            let retryable = matches!(error.kind, LlmErrorKind::RateLimited | LlmErrorKind::ProviderUnavailable);
            if !retryable || attempt >= self.policy.max_retries {
                return Err(error);
            }
            let wait = match error.retry_after {
                Some(wait) if wait > self.policy.max_retry_after => return Err(error),
                Some(wait) => wait,
                None => backoff(&self.policy, attempt),
            };
            tracing::debug!(
                code = error.kind.code(),
                attempt,
                wait_ms = wait.as_millis() as u64,
                "model call failed; retrying"
            );
            tokio::time::sleep(wait).await;
            attempt += 1;
        }
    }

    /// Classify a failed `reqwest` call (connect, timeout, reset), without its URL or key.
    pub fn transport_error(&self, e: &reqwest::Error) -> LlmError {
        transport_error(e, self.key.as_ref())
    }

    /// The same classification as an owned function, for streams that outlive `self`.
    pub fn error_classifier(&self) -> impl Fn(&reqwest::Error) -> LlmError + Send + 'static {
        let key = self.key.clone();
        move |e| transport_error(e, key.as_ref())
    }

    async fn status_error(&self, mut response: reqwest::Response) -> LlmError {
        let status = response.status().as_u16();
        let retry_after = retry_after(response.headers(), SystemTime::now());
        let mut body = Vec::new();
        while body.len() < MAX_ERROR_BODY_BYTES {
            match response.chunk().await {
                Ok(Some(chunk)) => body.extend_from_slice(&chunk),
                _ => break,
            }
        }
        let body = String::from_utf8_lossy(&body);
        let kind = classify(Some(status), &body);
        let mut message = format!("provider answered HTTP {status}: {}", provider_message(&body));
        if let (LlmErrorKind::AuthFailed, Some(env)) = (kind, &self.missing_key_env) {
            message.push_str(&format!(" (no API key: environment variable {env} is not set)"));
        }
        LlmError { kind, message: redact(&message, self.key.as_ref()), retry_after }
    }
}

/// Classify a failed `reqwest` call: an idle timeout is `model_timeout`; refused, reset or
/// timed-out connections mean the provider is not answering.
fn transport_error(e: &reqwest::Error, key: Option<&ApiKey>) -> LlmError {
    let kind =
        if e.is_timeout() && !e.is_connect() { LlmErrorKind::Timeout } else { LlmErrorKind::ProviderUnavailable };
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    LlmError::new(kind, redact(&text, key))
}

/// Remove the API key from text that may be shown to a user.
fn redact(text: &str, key: Option<&ApiKey>) -> String {
    match key {
        Some(key) if !key.expose().is_empty() => text.replace(key.expose(), "[redacted]"),
        _ => text.to_owned(),
    }
}

/// Exponential backoff with "equal jitter": half the delay fixed, half random, so retries from
/// many clients spread out without ever collapsing to zero.
fn backoff(policy: &HttpPolicy, attempt: u32) -> Duration {
    let exp = policy.initial_backoff.saturating_mul(2u32.saturating_pow(attempt)).min(policy.max_backoff);
    let half = exp / 2;
    let jitter = RandomState::new().hash_one(attempt) % (half.as_millis() as u64 + 1);
    half + Duration::from_millis(jitter)
}

/// `retry-after-ms` (OpenAI), else `retry-after` as seconds or as an HTTP date (IMF-fixdate,
/// RFC 850 or asctime) counted from `now`; a date already past means "retry now".
fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let text = |name: &str| headers.get(name)?.to_str().ok().map(str::trim);
    let number = |name: &str| text(name)?.parse::<f64>().ok().filter(|n| n.is_finite() && *n >= 0.0);
    let date = || {
        httpdate::parse_http_date(text("retry-after")?).ok().map(|at| at.duration_since(now).unwrap_or(Duration::ZERO))
    };
    number("retry-after-ms")
        .map(|ms| Duration::from_secs_f64(ms / 1000.0))
        .or_else(|| number("retry-after").map(Duration::from_secs_f64))
        .or_else(date)
}

/// The provider's own error sentence from a JSON error envelope, or the body text, shortened:
/// what a user is shown of a failed call to any provider (models, embeddings), bounded whatever
/// the provider sent.
pub fn provider_message(body: &str) -> String {
    let json: Option<serde_json::Value> = serde_json::from_str(body).ok();
    let message = json
        .as_ref()
        .and_then(|v| v["error"]["message"].as_str().or(v["message"].as_str()).or(v["error"].as_str()))
        .unwrap_or(body)
        .trim();
    let mut quoted: String = message.chars().take(MAX_QUOTED_CHARS).collect();
    if message.chars().count() > MAX_QUOTED_CHARS {
        quoted.push('…');
    }
    if quoted.is_empty() { "(empty body)".to_owned() } else { quoted }
}

/// Classify an error from its HTTP status (when there is one) and its body: the body decides
/// between causes that share a status (a 400 may be an overlong prompt or a filtered one) and
/// classifies in-stream error events, which have no status.
pub(crate) fn classify(status: Option<u16>, body: &str) -> LlmErrorKind {
    let text = body.to_ascii_lowercase();
    let has = |needles: &[&str]| needles.iter().any(|n| text.contains(n));
    let context = has(&[
        "context_length_exceeded",
        "context length",
        "context window",
        "maximum context",
        "prompt is too long",
        "too many tokens",
        "request_too_large",
    ]);
    let filtered = has(&["content_filter", "content_policy", "content policy", "safety system"]);
    match status {
        Some(401 | 403) => LlmErrorKind::AuthFailed,
        Some(404) => LlmErrorKind::ModelNotFound,
        Some(408) => LlmErrorKind::Timeout,
        Some(413) => LlmErrorKind::ContextLengthExceeded,
        Some(429) => LlmErrorKind::RateLimited,
        Some(s) if s >= 500 => LlmErrorKind::ProviderUnavailable,
        Some(_) if context => LlmErrorKind::ContextLengthExceeded,
        Some(_) if filtered => LlmErrorKind::ContentFiltered,
        Some(_) => LlmErrorKind::InvalidRequest,
        None if context => LlmErrorKind::ContextLengthExceeded,
        None if filtered => LlmErrorKind::ContentFiltered,
        None if has(&["rate_limit", "rate limit"]) => LlmErrorKind::RateLimited,
        None if has(&["authentication", "permission", "invalid_api_key"]) => LlmErrorKind::AuthFailed,
        None if has(&["not_found"]) => LlmErrorKind::ModelNotFound,
        None if has(&["invalid_request"]) => LlmErrorKind::InvalidRequest,
        None => LlmErrorKind::ProviderUnavailable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_and_bodies_classify() {
        assert_eq!(
            classify(Some(400), r#"{"error":{"code":"context_length_exceeded"}}"#),
            LlmErrorKind::ContextLengthExceeded
        );
        assert_eq!(
            classify(Some(400), r#"{"error":{"message":"prompt is too long: 210000 tokens"}}"#),
            LlmErrorKind::ContextLengthExceeded
        );
        assert_eq!(classify(Some(400), r#"{"error":{"code":"content_filter"}}"#), LlmErrorKind::ContentFiltered);
        assert_eq!(classify(Some(400), "{}"), LlmErrorKind::InvalidRequest);
        assert_eq!(classify(Some(529), "overloaded"), LlmErrorKind::ProviderUnavailable);
        assert_eq!(classify(None, r#"{"type":"overloaded_error"}"#), LlmErrorKind::ProviderUnavailable);
        assert_eq!(classify(None, r#"{"type":"rate_limit_error"}"#), LlmErrorKind::RateLimited);
    }

    #[test]
    fn backoff_grows_and_stays_bounded() {
        let p = HttpPolicy {
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(1000),
            ..HttpPolicy::default()
        };
        for attempt in 0..10 {
            let exp = (100u64 << attempt.min(4)).min(1000);
            let b = backoff(&p, attempt).as_millis() as u64;
            assert!(b >= exp / 2 && b <= exp, "attempt {attempt}: {b}");
        }
    }

    #[test]
    fn retry_after_reads_ms_and_seconds() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("2"));
        assert_eq!(retry_after(&h, SystemTime::now()), Some(Duration::from_secs(2)));
        h.insert("retry-after-ms", HeaderValue::from_static("150"));
        assert_eq!(retry_after(&h, SystemTime::now()), Some(Duration::from_millis(150)));
        h.clear();
        h.insert("retry-after", HeaderValue::from_static("soon"));
        assert_eq!(retry_after(&h, SystemTime::now()), None);
    }

    #[test]
    fn retry_after_dates_count_from_now_and_past_dates_mean_now() {
        let now = httpdate::parse_http_date("Wed, 21 Oct 2015 07:28:00 GMT").unwrap();
        let mut h = HeaderMap::new();
        for date in ["Wed, 21 Oct 2015 07:28:05 GMT", "Wednesday, 21-Oct-15 07:28:05 GMT", "Wed Oct 21 07:28:05 2015"] {
            h.insert("retry-after", HeaderValue::from_static(date));
            assert_eq!(retry_after(&h, now), Some(Duration::from_secs(5)), "{date}");
        }
        h.insert("retry-after", HeaderValue::from_static("Tue, 20 Oct 2015 07:28:00 GMT"));
        assert_eq!(retry_after(&h, now), Some(Duration::ZERO));
    }
}
