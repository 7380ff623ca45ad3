//! An in-process server over a real project folder, a real store and the fake LLM, for
//! HTTP-level tests. Each test module uses a different part.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use polpo_engine::{Loaded, Runtime};
use polpo_llm::Providers;
use polpo_server::auth::ApiKeys;
use polpo_server::{AppState, router};
use polpo_store::{StoreKind, SystemClock, open_store};
use polpo_testkit::{FakeLlm, ProjectFixture};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use tempfile::TempDir;

/// A running server.
pub struct Server {
    pub dir: TempDir,
    pub url: String,
    pub state: Arc<AppState>,
    pub http: reqwest::Client,
}

/// Agents every test project has: `coder` (file tools) and `writer` (no tools).
pub fn default_project(dir: &std::path::Path) -> ProjectFixture {
    ProjectFixture::new(dir, json!({"storage": "file"}))
        .unwrap()
        .agent("coder", json!({"model": "openai/fake-model", "allowedTools": ["read", "ls", "write"], "maxTurns": 4}), "You write code.")
        .unwrap()
        .agent("writer", json!({"model": "openai/fake-model", "allowedTools": []}), "You write prose.")
        .unwrap()
}

impl Server {
    /// The default project, no API key.
    pub async fn start(llm: &FakeLlm) -> Self {
        Self::start_with(llm, None, |d| {
            default_project(d);
        })
        .await
    }

    /// A project written by `write`, with `key` as the only API key when given.
    pub async fn start_with(llm: &FakeLlm, key: Option<&str>, write: impl FnOnce(&std::path::Path)) -> Self {
        Self::start_tweaked(llm, key, write, |_| {}).await
    }

    /// Like [`Server::start_with`], with a last change to the server state (limits, origins).
    pub async fn start_tweaked(llm: &FakeLlm, key: Option<&str>, write: impl FnOnce(&std::path::Path), tweak: impl FnOnce(&mut AppState)) -> Self {
        polpo_llm::install_crypto_provider();
        let dir = tempfile::tempdir().unwrap();
        write(dir.path());
        let project = polpo_project::load_project(dir.path()).unwrap();
        let base = llm.base_url();
        let env: polpo_llm::EnvLookup = Arc::new(move |name| match name {
            "OPENAI_BASE_URL" => Some(base.clone()),
            "OPENAI_API_KEY" => Some("sk-test".into()),
            _ => None,
        });
        // The backend the project asks for (`storage`, `databaseUrl`), file by default.
        let settings = project.settings().clone();
        let kind = StoreKind::parse(settings.storage().as_str()).unwrap();
        let store = open_store(kind, dir.path(), settings.database_url.as_deref(), Arc::new(SystemClock)).await.unwrap();
        let runtime = Arc::new(Runtime::new(Loaded::new(project).unwrap(), Providers::new(BTreeMap::new(), env), store));
        let (keys, _) = ApiKeys::load(key, &[]);
        let mut state = AppState::new(runtime, keys);
        tweak(&mut state);
        let state = Arc::new(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let app = router(state.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { dir, url, state, http: reqwest::Client::new() }
    }

    /// POST JSON, returning status, headers and body (JSON, or the raw text as a JSON string).
    pub async fn post(&self, path: &str, headers: &[(&str, &str)], body: Value) -> Reply {
        let mut req = self.http.post(format!("{}{path}", self.url)).json(&body);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        Reply::read(req.send().await.unwrap()).await
    }

    /// GET, returning status, headers and body.
    pub async fn get(&self, path: &str, headers: &[(&str, &str)]) -> Reply {
        let mut req = self.http.get(format!("{}{path}", self.url));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        Reply::read(req.send().await.unwrap()).await
    }
}

/// A response, read whole.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub text: String,
}

impl Reply {
    async fn read(r: reqwest::Response) -> Self {
        Self { status: r.status().as_u16(), headers: r.headers().clone(), text: r.text().await.unwrap() }
    }

    /// The body as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text))
    }

    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The `data:` payloads of an SSE body, `[DONE]` included.
    pub fn sse_data(&self) -> Vec<String> {
        self.text.lines().filter_map(|l| l.strip_prefix("data: ").or_else(|| l.strip_prefix("data:"))).map(str::to_owned).collect()
    }
}
