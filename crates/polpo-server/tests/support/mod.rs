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
    /// The project folder; shared by the servers started [`Server::beside`] this one.
    pub dir: Arc<TempDir>,
    pub url: String,
    pub state: Arc<AppState>,
    pub http: reqwest::Client,
}

/// Agents every test project has: `coder` (file tools) and `writer` (no tools).
pub fn default_project(dir: &std::path::Path) -> ProjectFixture {
    ProjectFixture::new(dir, json!({"storage": "file"}))
        .unwrap()
        .agent(
            "coder",
            json!({"model": "openai/fake-model", "allowedTools": ["read", "ls", "write"], "maxTurns": 4}),
            "You write code.",
        )
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
    pub async fn start_tweaked(
        llm: &FakeLlm,
        key: Option<&str>,
        write: impl FnOnce(&std::path::Path),
        tweak: impl FnOnce(&mut AppState),
    ) -> Self {
        polpo_llm::install_crypto_provider();
        let dir = tempfile::tempdir().unwrap();
        write(dir.path());
        Self::serve(llm, key, Arc::new(dir), tweak).await
    }

    /// A second server over this one's project folder, and so over the same store (SQLite or
    /// PostgreSQL: the file store admits one process), like a second `polpo serve`: a run one
    /// hands over or leaves behind, the other takes over.
    pub async fn beside(&self, llm: &FakeLlm) -> Self {
        Self::serve(llm, None, self.dir.clone(), |_| {}).await
    }

    async fn serve(llm: &FakeLlm, key: Option<&str>, dir: Arc<TempDir>, tweak: impl FnOnce(&mut AppState)) -> Self {
        let project = polpo_project::load_project(dir.path()).unwrap();
        let env: polpo_llm::EnvLookup = llm.provider_env();
        // The backend the project asks for (`storage`, `databaseUrl`), file by default.
        let settings = project.settings().clone();
        let kind = StoreKind::parse(settings.storage().as_str()).unwrap();
        let store =
            open_store(kind, dir.path(), settings.database_url.as_deref(), Arc::new(SystemClock)).await.unwrap();
        let runtime =
            Arc::new(Runtime::new(Loaded::new(project).unwrap(), Providers::new(BTreeMap::new(), env), store));
        let (keys, _) = ApiKeys::load(key, &[]);
        let mut state = AppState::new(runtime, keys);
        tweak(&mut state);
        let state = Arc::new(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let app = router(state.clone());
        tokio::spawn(polpo_server::serve::run(
            listener,
            app,
            polpo_server::serve::Limits::default(),
            std::future::pending(),
        ));
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

    /// Any method, with an optional JSON body, returning status, headers and body.
    pub async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<Value>,
    ) -> Reply {
        let mut req = self.http.request(method, format!("{}{path}", self.url));
        if let Some(body) = body {
            req = req.json(&body);
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        Reply::read(req.send().await.unwrap()).await
    }

    /// PUT JSON.
    pub async fn put(&self, path: &str, headers: &[(&str, &str)], body: Value) -> Reply {
        self.send(reqwest::Method::PUT, path, headers, Some(body)).await
    }

    /// PATCH JSON.
    pub async fn patch(&self, path: &str, headers: &[(&str, &str)], body: Value) -> Reply {
        self.send(reqwest::Method::PATCH, path, headers, Some(body)).await
    }

    /// DELETE.
    pub async fn delete(&self, path: &str, headers: &[(&str, &str)]) -> Reply {
        self.send(reqwest::Method::DELETE, path, headers, None).await
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
        self.text
            .lines()
            .filter_map(|l| l.strip_prefix("data: ").or_else(|| l.strip_prefix("data:")))
            .map(str::to_owned)
            .collect()
    }
}

/// One server-sent event (comment frames such as `: ping` are skipped).
#[derive(Debug, Clone)]
pub struct Frame {
    pub id: Option<u64>,
    pub event: Option<String>,
    pub data: String,
}

impl Frame {
    /// The data as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.data))
    }

    /// The event name (`message` when none was sent, as browsers treat it).
    pub fn name(&self) -> &str {
        self.event.as_deref().unwrap_or("message")
    }
}

/// Reads SSE frames from a response incrementally, as they arrive.
pub struct Frames {
    body: std::pin::Pin<Box<dyn futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buffer: String,
}

impl Frames {
    pub fn new(response: reqwest::Response) -> Self {
        Self { body: Box::pin(response.bytes_stream()), buffer: String::new() }
    }

    /// The next frame, or `None` at the end of the stream.
    pub async fn next(&mut self) -> Option<Frame> {
        use futures::StreamExt;
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let raw: String = self.buffer.drain(..end + 2).collect();
                let mut frame = Frame { id: None, event: None, data: String::new() };
                for line in raw.lines() {
                    if let Some(v) = line.strip_prefix("id:") {
                        frame.id = v.trim().parse().ok();
                    } else if let Some(v) = line.strip_prefix("event:") {
                        frame.event = Some(v.trim().to_owned());
                    } else if let Some(v) = line.strip_prefix("data:") {
                        frame.data.push_str(v.strip_prefix(' ').unwrap_or(v));
                    }
                }
                if frame.data.is_empty() {
                    continue;
                }
                return Some(frame);
            }
            let chunk = self.body.next().await?.ok()?;
            self.buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    }

    /// Every remaining frame until the stream ends; panics when it has not ended within
    /// `within` (a bound for "eventually", not a timing assertion).
    pub async fn rest(mut self, within: std::time::Duration) -> Vec<Frame> {
        let mut out = Vec::new();
        tokio::time::timeout(within, async {
            while let Some(f) = self.next().await {
                out.push(f);
            }
        })
        .await
        .expect("the stream ends");
        out
    }

    /// Frames up to and including the first one `last` accepts; panics when none arrives
    /// within `within` (a bound for "eventually", not a timing assertion).
    pub async fn until(&mut self, within: std::time::Duration, last: impl Fn(&Frame) -> bool) -> Vec<Frame> {
        let mut out = Vec::new();
        tokio::time::timeout(within, async {
            while let Some(f) = self.next().await {
                let done = last(&f);
                out.push(f);
                if done {
                    return;
                }
            }
            panic!("the stream ended before the expected frame: {out:?}");
        })
        .await
        .unwrap_or_else(|_| panic!("no expected frame within {within:?}; got {out:?}"));
        out
    }
}

impl Server {
    /// GET an SSE stream; returns once the response headers arrived (the server has
    /// subscribed by then).
    pub async fn stream(&self, path: &str, headers: &[(&str, &str)]) -> Frames {
        let mut req = self.http.get(format!("{}{path}", self.url));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let response = req.send().await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
        Frames::new(response)
    }
}
