//! `http_fetch {url, method?, headers?, body?}` and `http_download {url, path}`, both behind the
//! SSRF guard of [`crate::net`], with size and time limits.

use crate::args::{io_error, spec};
use crate::net::{NetworkPolicy, OutboundRequest, send_guarded};
use crate::sandbox::resolve_in_sandbox;
use crate::{ToolContext, ToolError, ToolOutput};
use futures::StreamExt;
use polpo_core::tool::ToolEffect;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, Url};
use serde::Deserialize;
use serde_json::json;
use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// Response bytes `http_fetch` reads; the rest is not downloaded.
const FETCH_MAX_BYTES: usize = 5 * 1024 * 1024;
/// Body text `http_fetch` shows the model.
const FETCH_SHOWN_BYTES: usize = 50 * 1024;
/// Whole-call bound of `http_fetch`.
const FETCH_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest file `http_download` writes.
const DOWNLOAD_MAX_BYTES: u64 = 100 * 1024 * 1024;
/// Whole-call bound of `http_download`.
const DOWNLOAD_TIMEOUT: Duration = Duration::from_secs(300);
/// Request body bound of `http_fetch`.
const MAX_REQUEST_BODY: usize = 1024 * 1024;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FetchArgs {
    url: String,
    method: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    body: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DownloadArgs {
    url: String,
    path: String,
}

fn parse_url(raw: &str) -> Result<Url, ToolError> {
    Url::parse(raw).map_err(|e| ToolError::new("invalid_url", format!("invalid URL: {e}")))
}

fn parse_method(raw: Option<&str>) -> Result<Method, ToolError> {
    Method::from_bytes(raw.unwrap_or("GET").to_ascii_uppercase().as_bytes())
        .map_err(|_| ToolError::new("invalid_arguments", "invalid HTTP method"))
}

fn parse_headers(raw: &BTreeMap<String, String>) -> Result<HeaderMap, ToolError> {
    let mut headers = HeaderMap::new();
    for (name, value) in raw {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| ToolError::new("invalid_arguments", format!("invalid header name {name:?}")))?;
        let value = HeaderValue::from_str(value)
            .map_err(|_| ToolError::new("invalid_arguments", format!("invalid value for header {name}")))?;
        headers.insert(name, value);
    }
    Ok(headers)
}

/// Runs `work` within `limit` and until `ctx.cancel` fires, whichever ends first.
async fn bounded<T>(
    ctx: &ToolContext,
    limit: Duration,
    work: impl Future<Output = Result<T, ToolError>>,
) -> Result<T, ToolError> {
    tokio::select! {
        result = tokio::time::timeout(limit, work) => result
            .map_err(|_| ToolError::new("timeout", format!("request did not finish within {} s", limit.as_secs())))?,
        () = ctx.cancel.cancelled() => Err(ToolError::new("cancelled", "the call was cancelled")),
    }
}

builtin_tool! {
    /// Fetches a URL and shows status, content type and (a bounded prefix of) the body. Its
    /// worst-case effect is `Write` (a POST may change things); [`crate::Tool::call_effect`] narrows GET,
    /// HEAD and OPTIONS calls to `Read`.
    HttpFetchTool {
        spec: spec(
            "http_fetch",
            "Make an HTTP request and return the status and response body (text, truncated when long). Private and local network addresses are refused.",
            json!({
                "type": "object",
                "properties": {
                    "url": {"type": "string", "description": "http or https URL."},
                    "method": {"type": "string", "description": "HTTP method (default GET)."},
                    "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                    "body": {"type": "string", "description": "Request body."}
                },
                "required": ["url"],
                "additionalProperties": false
            }),
        ),
        effect: ToolEffect::Write,
        call_effect: http_fetch_effect,
        call: http_fetch,
    }
}

/// How one `http_fetch` call touches the world, from its arguments.
fn http_fetch_effect(args: &serde_json::Value) -> ToolEffect {
    let method = args.get("method").and_then(|m| m.as_str()).unwrap_or("GET").to_ascii_uppercase();
    if matches!(method.as_str(), "GET" | "HEAD" | "OPTIONS") { ToolEffect::Read } else { ToolEffect::Write }
}

/// The body of [`HttpFetchTool`]: `args` already decoded.
async fn http_fetch(ctx: &ToolContext, args: FetchArgs) -> Result<ToolOutput, ToolError> {
    if args.body.as_ref().is_some_and(|b| b.len() > MAX_REQUEST_BODY) {
        return Err(ToolError::new("invalid_arguments", "request body is larger than 1 MiB"));
    }
    let request = OutboundRequest {
        method: parse_method(args.method.as_deref())?,
        url: parse_url(&args.url)?,
        headers: parse_headers(&args.headers)?,
        body: args.body.map(String::into_bytes),
    };
    let policy = NetworkPolicy::from_context(ctx);
    bounded(ctx, FETCH_TIMEOUT, async {
        let response = send_guarded(request, &policy).await?;
        let status = response.status();
        let final_url = response.url().to_string();
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let (body, complete) = read_prefix(response, FETCH_MAX_BYTES).await?;
        let shown = &body[..body.len().min(FETCH_SHOWN_BYTES)];
        let mut text = format!(
            "HTTP {} {}\nURL: {final_url}\nContent-Type: {content_type}\n\n{}",
            status.as_u16(),
            status.canonical_reason().unwrap_or(""),
            String::from_utf8_lossy(shown)
        );
        if shown.len() < body.len() || !complete {
            let size = if complete { format!("{} bytes", body.len()) } else { format!("more than {} bytes", body.len()) };
            text.push_str(&format!("\n... (body truncated; {size} in all)"));
        }
        Ok(ToolOutput {
            text,
            details: json!({"status": status.as_u16(), "url": final_url, "contentType": content_type, "bytes": body.len(), "complete": complete}),
        })
    })
    .await
}

/// Reads at most `limit` body bytes; `complete` is false when more was available.
async fn read_prefix(response: reqwest::Response, limit: usize) -> Result<(Vec<u8>, bool), ToolError> {
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| crate::net::request_error(&e))?;
        let room = limit - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            return Ok((body, false));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, true))
}

builtin_tool! {
    /// Downloads a URL (GET) to a file inside the sandbox. The body is streamed to a temporary
    /// sibling file and renamed into place when complete, so a failed or oversized download never
    /// leaves a partial file. Effect `Write`.
    HttpDownloadTool {
        spec: spec(
            "http_download",
            "Download a URL to a file in the workspace (at most 100 MiB). Private and local network addresses are refused.",
            json!({
                "type": "object",
                "properties": {
                    "url": {"type": "string", "description": "http or https URL."},
                    "path": {"type": "string", "description": "Destination file, relative to the workspace or absolute."}
                },
                "required": ["url", "path"],
                "additionalProperties": false
            }),
        ),
        effect: ToolEffect::Write,
        call: http_download,
    }
}

/// The body of [`HttpDownloadTool`]: `args` already decoded.
async fn http_download(ctx: &ToolContext, args: DownloadArgs) -> Result<ToolOutput, ToolError> {
    let url = parse_url(&args.url)?;
    let path = resolve_in_sandbox(ctx, &args.path)?;
    let request = OutboundRequest { method: Method::GET, url, headers: HeaderMap::new(), body: None };
    let policy = NetworkPolicy::from_context(ctx);
    // A fresh name opened with O_EXCL: whatever already sits at a predictable name (a symlink
    // planted into `.polpo/`, say) is never followed by this unconfined write.
    let nonce = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let partial = path.with_file_name(format!(
        ".{}.{}-{nonce}.polpo-download",
        path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        std::process::id()
    ));
    let result = bounded(ctx, DOWNLOAD_TIMEOUT, async {
        let response = send_guarded(request, &policy).await?;
        let status = response.status();
        if !status.is_success() {
            return Err(ToolError::new("http_status", format!("server answered HTTP {}", status.as_u16())));
        }
        if let Some(parent) = path.parent() {
            tokio::fs::create_dir_all(parent).await.map_err(|e| io_error("create directory", parent, &e))?;
        }
        let bytes = stream_to_file(response, &partial).await?;
        tokio::fs::rename(&partial, &path).await.map_err(|e| io_error("write", &path, &e))?;
        Ok(bytes)
    })
    .await;
    match result {
        Ok(bytes) => Ok(ToolOutput {
            text: format!("Downloaded to {} ({bytes} bytes)", path.display()),
            details: json!({"path": path, "bytes": bytes}),
        }),
        Err(err) => {
            // Best effort: the partial file may not exist.
            let _ = tokio::fs::remove_file(&partial).await;
            Err(err)
        }
    }
}

async fn stream_to_file(response: reqwest::Response, path: &std::path::Path) -> Result<u64, ToolError> {
    if response.content_length().is_some_and(|len| len > DOWNLOAD_MAX_BYTES) {
        return Err(too_large());
    }
    let mut file = tokio::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .await
        .map_err(|e| io_error("write", path, &e))?;
    let mut written = 0u64;
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| crate::net::request_error(&e))?;
        written += chunk.len() as u64;
        if written > DOWNLOAD_MAX_BYTES {
            return Err(too_large());
        }
        file.write_all(&chunk).await.map_err(|e| io_error("write", path, &e))?;
    }
    file.flush().await.map_err(|e| io_error("write", path, &e))?;
    Ok(written)
}

fn too_large() -> ToolError {
    ToolError::new("too_large", format!("the download exceeds {} MiB", DOWNLOAD_MAX_BYTES / (1024 * 1024)))
}
