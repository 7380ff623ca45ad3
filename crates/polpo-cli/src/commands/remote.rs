//! The running server a command talks to over HTTP (`polpo runs`, `polpo tasks`,
//! `polpo missions`): its address (`--url`, else `http://127.0.0.1:<settings.port or 3890>`),
//! the API key from `POLPO_API_KEY`, and its errors as stable codes
//! (`error: run_not_found: …`).

use super::Global;
use reqwest::Method;
use serde_json::Value;

/// The project's `settings.port` when the project loads, else the default port.
fn default_port(global: &Global) -> u16 {
    let project = global.root().ok().and_then(|root| polpo_project::load_project(&root).ok());
    project.map_or(polpo_core::config::settings::DEFAULT_PORT, |p| p.settings().port())
}

/// An error the server answered with, or `server_unreachable`.
#[derive(Debug)]
pub struct ServerError {
    /// Stable snake_case code.
    pub code: String,
    /// Human sentence.
    pub message: String,
}

impl std::fmt::Display for ServerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for ServerError {}

impl ServerError {
    /// The server did not answer (`server_unreachable`).
    pub fn unreachable(url: &str, e: impl std::fmt::Display) -> Self {
        Self {
            code: "server_unreachable".into(),
            message: format!(
                "cannot reach the polpo server at {url} (start it with `polpo serve`, or pass --url): {e}"
            ),
        }
    }

    /// The error in a failed response: `{ok:false, error, code}` (run routes) or
    /// `{error:{message, code}}` (OpenAI envelope, e.g. a missing API key).
    pub async fn from_response(response: reqwest::Response) -> Self {
        let status = response.status();
        let body: Value = response.json().await.unwrap_or_default();
        let text = |v: &Value| v.as_str().map(str::to_owned);
        let code = text(&body["code"])
            .or_else(|| text(&body["error"]["code"]))
            .unwrap_or_else(|| format!("http_{}", status.as_u16()));
        let message =
            text(&body["error"]).or_else(|| text(&body["error"]["message"])).unwrap_or_else(|| status.to_string());
        // Some messages already start with their code (`run_not_found: no run …`).
        let message = message.strip_prefix(&format!("{code}: ")).map(str::to_owned).unwrap_or(message);
        Self { code, message }
    }
}

/// The server and its credentials.
pub struct Client {
    http: reqwest::Client,
    /// The server's base address.
    pub url: String,
    key: Option<String>,
}

impl Client {
    /// The server at `url` (default: this project's port on 127.0.0.1), with the key of
    /// `POLPO_API_KEY` when set.
    pub fn connect(global: &Global, url: Option<String>) -> Self {
        let url = match url {
            Some(url) => url.trim_end_matches('/').to_owned(),
            None => format!("http://127.0.0.1:{}", default_port(global)),
        };
        polpo_llm::install_crypto_provider();
        Self { http: reqwest::Client::new(), url, key: std::env::var("POLPO_API_KEY").ok().filter(|k| !k.is_empty()) }
    }

    pub fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        let request = self.http.request(method, format!("{}{path}", self.url));
        match &self.key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
    }

    /// Send a request; a success status, or the server's error.
    pub async fn send(&self, request: reqwest::RequestBuilder) -> Result<reqwest::Response, ServerError> {
        let response = request.send().await.map_err(|e| ServerError::unreachable(&self.url, e))?;
        if response.status().is_success() { Ok(response) } else { Err(ServerError::from_response(response).await) }
    }

    /// A JSON route: its `data`.
    pub async fn call(&self, method: Method, path: &str, body: Option<Value>) -> Result<Value, ServerError> {
        let mut request = self.request(method, path);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let mut reply: Value =
            self.send(request).await?.json().await.map_err(|e| ServerError::unreachable(&self.url, e))?;
        Ok(reply["data"].take())
    }

    /// [`Client::call`] from a command's synchronous code, its `data` printed as JSON: the
    /// whole of a subcommand that is one route.
    pub fn print_call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<std::process::ExitCode> {
        use anyhow::Context as _;
        let data = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot start the async runtime")?
            .block_on(self.call(method, path, body))?;
        super::print_json(&data)
    }
}
