//! `http` handlers: POST the envelope to a public https endpoint; the body is the decision.
//!
//! Requests go through the tools' SSRF guard (every hop resolved and checked, connections
//! pinned to the checked addresses), so a pack cannot point hooks at internal services even
//! through DNS. The only exception is the explicit test allowance for `http://127.0.0.1`.
//! Handlers that authenticate through a Connection get its headers (`auth`), resolved by the
//! caller right before this request and never written into the envelope.

use super::HookRuntime;
use polpo_core::hooks::limits::MAX_OUTPUT_BYTES;
use polpo_core::hooks::{Envelope, FailureCause, HookFailure, HookOutcome, parse_output};
use polpo_tools::net::{NetworkPolicy, OutboundRequest, send_guarded};
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, Url};
use std::collections::BTreeMap;
use std::time::Duration;

/// POST `envelope` to `url` and read the decision from the response body.
pub(super) async fn run(
    runtime: &HookRuntime,
    url: &str,
    headers: &BTreeMap<String, String>,
    auth: Vec<(String, String)>,
    envelope: &Envelope,
    body: Vec<u8>,
    timeout: Duration,
) -> HookOutcome {
    let fail = |cause, detail: String| HookFailure::new(cause, detail);
    let url = Url::parse(url).map_err(|e| fail(FailureCause::HandlerError, format!("invalid hook URL: {e}")))?;
    let loopback = runtime.allow_loopback_http && url.host_str() == Some("127.0.0.1");
    if url.scheme() != "https" && !loopback {
        return Err(fail(FailureCause::HandlerError, "http hooks must use https".into()));
    }
    let policy = NetworkPolicy {
        allow_private: false,
        private_allowlist: if loopback {
            vec![format!("127.0.0.1:{}", url.port_or_known_default().unwrap_or(80))]
        } else {
            Vec::new()
        },
        host_allowlist: None,
    };
    let mut map = HeaderMap::new();
    map.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    for (name, value) in
        headers.iter().map(|(n, v)| (n.as_str(), v.as_str())).chain(auth.iter().map(|(n, v)| (n.as_str(), v.as_str())))
    {
        let (Ok(n), Ok(mut v)) = (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_str(value)) else {
            return Err(fail(FailureCause::HandlerError, format!("invalid header `{name}`")));
        };
        v.set_sensitive(true);
        map.insert(n, v);
    }
    for (name, value) in
        [("idempotency-key", &envelope.idempotency_key), ("x-polpo-hook-execution-id", &envelope.hook_execution_id)]
    {
        if let Ok(v) = HeaderValue::from_str(value) {
            map.insert(HeaderName::from_static(name), v);
        }
    }
    let request = OutboundRequest { method: Method::POST, url, headers: map, body: Some(body) };
    let exchange = async {
        let mut response =
            send_guarded(request, &policy).await.map_err(|e| fail(FailureCause::HandlerError, e.to_string()))?;
        let status = response.status();
        let mut raw = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| {
            fail(FailureCause::HandlerError, format!("reading the response failed: {}", e.without_url()))
        })? {
            if raw.len() + chunk.len() > MAX_OUTPUT_BYTES {
                return Err(fail(
                    FailureCause::OutputTooLarge,
                    format!("the response is larger than {MAX_OUTPUT_BYTES} bytes"),
                ));
            }
            raw.extend_from_slice(&chunk);
        }
        if !status.is_success() {
            return Err(fail(FailureCause::HandlerError, format!("the endpoint answered HTTP {}", status.as_u16())));
        }
        parse_output(&raw)
    };
    tokio::time::timeout(timeout, exchange).await.unwrap_or_else(|_| {
        Err(fail(FailureCause::Timeout, format!("the endpoint did not answer within {} ms", timeout.as_millis())))
    })
}
