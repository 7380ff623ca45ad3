//! The seed's custom tools as fixtures (`site_publish`, `site_context_get` under `fixtures/tools`)
//! and the site API `site_publish` posts to, served locally over real HTTP: one copy for the
//! custom-tools crate, which runs the tools directly, and the CLI, which runs them through
//! `polpo serve`.

use axum::http::{HeaderMap, header};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The site API's secret, kept in a test's vault and sent by the Connection `site`: a test
/// asserts it reaches the site API and nothing else.
pub const SITE_SECRET: &str = "site-secret-7a6b5c4d3e2f";

/// The tenant `site_context_get` takes from the invocation's metadata (`tenantId`).
pub const SITE_TENANT: &str = "6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f";

/// `.polpo/connections/site.json`: the provider and scopes `site_publish`'s slot asks for, a
/// bearer token from the vault entry `site` (key `key`).
pub fn site_connection() -> serde_json::Value {
    serde_json::json!({"provider": "sitoinchat", "scopes": ["site:read", "site:write"],
        "auth": {"type": "bearer", "token": "${vault:site:key}"}})
}

/// The folder of custom tool fixture `name`.
pub fn custom_tool_fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/tools").join(name)
}

/// Copy custom tool fixture `name` into project `root` (`.polpo/tools/<name>/`).
pub fn install_custom_tool(root: &Path, name: &str) -> std::io::Result<()> {
    let to = root.join(".polpo/tools").join(name);
    std::fs::create_dir_all(&to)?;
    for entry in std::fs::read_dir(custom_tool_fixture(name))? {
        let entry = entry?;
        std::fs::copy(entry.path(), to.join(entry.file_name()))?;
    }
    Ok(())
}

/// A local site API: every request is answered `published by <its Authorization header>:
/// <its body>` — so a secret a tool sends shows up in the tool's result, where redaction must
/// catch it — and the last Authorization header is kept.
pub struct SiteApi {
    url: String,
    authorization: Arc<Mutex<String>>,
}

impl SiteApi {
    /// Serve on a free local port until the test's runtime ends.
    pub async fn start() -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let authorization = Arc::new(Mutex::new(String::new()));
        let seen = authorization.clone();
        let app = axum::Router::new().fallback(move |headers: HeaderMap, body: String| {
            let seen = seen.clone();
            async move {
                let auth = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).unwrap_or_default();
                let line = format!("authorization: {auth}");
                *seen.lock().unwrap_or_else(|p| p.into_inner()) = line.clone();
                format!("published by {line}: {body}")
            }
        });
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(Self { url, authorization })
    }

    /// Its base URL (`http://127.0.0.1:<port>`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The Authorization header of the last request (`authorization: <value>`; empty before any).
    pub fn authorization(&self) -> String {
        self.authorization.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// A local `http` hook endpoint: every POST is answered `{"decision": "allow"}`, and its
/// Authorization header and body (the hook envelope) are kept, so a test sees what a hook
/// authenticating through a Connection sent.
pub struct HookEndpoint {
    url: String,
    received: Arc<Mutex<Vec<(String, String)>>>,
}

impl HookEndpoint {
    /// Serve `/hook` on a free local port until the test's runtime ends.
    pub async fn start() -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/hook", listener.local_addr()?);
        let received = Arc::new(Mutex::new(Vec::new()));
        let kept = received.clone();
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |headers: HeaderMap, body: String| {
                let kept = kept.clone();
                async move {
                    let auth = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).unwrap_or_default();
                    kept.lock().unwrap_or_else(|p| p.into_inner()).push((auth.to_owned(), body));
                    axum::Json(serde_json::json!({"decision": "allow"}))
                }
            }),
        );
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(Self { url, received })
    }

    /// Its URL (`http://127.0.0.1:<port>/hook`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Every request so far: (Authorization header, body).
    pub fn received(&self) -> Vec<(String, String)> {
        self.received.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}
