//! The real `polpo` binary as a server process, for end-to-end tests.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

/// A running `polpo serve`/`dev`, killed when dropped.
pub struct ServerProcess {
    pub child: Child,
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    /// Every stdout and stderr line so far arrives here (prefixed `out: ` / `err: `).
    pub lines: Receiver<String>,
    /// Lines already read.
    pub seen: Vec<String>,
    /// Indices into `seen` that an earlier `wait_for` returned (each line matches once).
    consumed: Vec<usize>,
}

impl ServerProcess {
    /// Start `polpo <command> --project <root> --port 0 <extra>` with `env`, and wait for
    /// the listening line.
    pub fn start(command: &str, root: &Path, extra: &[&str], env: &[(&str, &str)]) -> Self {
        Self::start_on(command, root, 0, extra, env)
    }

    /// [`ServerProcess::start`] on a fixed `port` (`0`: any), for a server that replaces a
    /// stopped one at the same address.
    pub fn start_on(command: &str, root: &Path, port: u16, extra: &[&str], env: &[(&str, &str)]) -> Self {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_polpo"));
        cmd.arg(command).arg("--project").arg(root).args(["--port", &port.to_string()]).args(extra);
        cmd.env_remove("POLPO_API_KEY").env_remove("OPENAI_API_KEY").env_remove("OPENAI_BASE_URL");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let (tx, lines) = channel();
        for (prefix, stream) in [
            ("out: ", Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>),
            ("err: ", Box::new(child.stderr.take().unwrap())),
        ] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    if tx.send(format!("{prefix}{line}")).is_err() {
                        break;
                    }
                }
            });
        }
        let mut server = Self { child, url: String::new(), lines, seen: Vec::new(), consumed: Vec::new() };
        let line = server.wait_for("polpo listening on http://");
        server.url = line.split("listening on ").nth(1).unwrap().trim().to_owned();
        server
    }

    /// Wait (up to 60 s) for a line containing `needle` that no earlier `wait_for` returned
    /// (stdout and stderr interleave in any order); panics with everything seen if none comes.
    pub fn wait_for(&mut self, needle: &str) -> String {
        if let Some(i) = (0..self.seen.len()).find(|i| !self.consumed.contains(i) && self.seen[*i].contains(needle)) {
            self.consumed.push(i);
            return self.seen[i].clone();
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.contains(needle) {
                        self.consumed.push(self.seen.len() - 1);
                        return line;
                    }
                }
                Err(_) => panic!("no line containing {needle:?}; saw:\n{}", self.seen.join("\n")),
            }
        }
    }
}

impl ServerProcess {
    /// Every line the server printed so far, for a failing assertion's message (what it logged,
    /// e.g. why an MCP server was left out, is the first thing to read when a check fails).
    pub fn log(&mut self) -> String {
        self.seen.extend(self.lines.try_iter());
        self.seen.join("\n")
    }

    /// Stop the server the way a supervisor does (SIGTERM) and wait until it says it stopped
    /// and has exited.
    pub fn terminate(&mut self) {
        let status = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().unwrap();
        assert!(status.success(), "kill -TERM failed");
        self.wait_for("polpo stopped");
        self.child.wait().unwrap();
    }
}

/// A project with agent `builder` (bash and read, up to 10 turns, the fake model) and
/// `settings`: the shape of the durable-run tests, which append lines to log.txt with bash.
pub fn builder_project(dir: &Path, settings: serde_json::Value) {
    polpo_testkit::ProjectFixture::new(dir, settings)
        .unwrap()
        .agent(
            "builder",
            serde_json::json!({"model": "openai/fake-model", "allowedTools": ["bash", "read"], "maxTurns": 10}),
            "You build things.",
        )
        .unwrap();
}

/// Start a durable run of `builder` (see [`builder_project`]) on `url` asking `prompt`: the
/// chat outlives its client (`onDisconnect: continue`). Returns the streaming chat response
/// (drop it to disconnect the client) and the run id.
pub async fn start_builder_run(url: &str, prompt: &str) -> (reqwest::Response, String) {
    polpo_llm::install_crypto_provider();
    let body = serde_json::json!({"agent": "builder", "stream": true, "messages": [{"role": "user", "content": prompt}], "polpo": {"delivery": {"onDisconnect": "continue"}}});
    let chat = reqwest::Client::new().post(format!("{url}/v1/chat/completions")).json(&body).send().await.unwrap();
    assert_eq!(chat.status(), 200);
    let run = chat.headers()["x-polpo-run-id"].to_str().unwrap().to_owned();
    (chat, run)
}

/// A port nobody listens on right now, for servers that must share one address.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The `polpo` binary with `args`, without the caller's `POLPO_API_KEY`.
pub fn polpo(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_polpo"));
    cmd.args(args).env_remove("POLPO_API_KEY");
    cmd
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Run a store-parametrised test against a fresh PostgreSQL schema: `test` gets the project
/// settings that select it, and the schema is dropped afterwards.
pub async fn on_postgres<F: std::future::Future<Output = ()>>(test: impl FnOnce(serde_json::Value) -> F) {
    let schema = polpo_testkit::pg::PgSchema::create().await.unwrap();
    test(serde_json::json!({"storage": "postgres", "databaseUrl": schema.url()})).await;
    schema.drop_schema().await.unwrap();
}

/// A run stream frame: (sequence, RunStreamEvent).
pub type Frame = (u64, serde_json::Value);

/// Reads `GET /v1/runs/{id}/events` frames as they arrive (from `last_event_id` when given).
pub struct RunEvents {
    response: reqwest::Response,
    buffer: String,
}

impl RunEvents {
    pub async fn open(url: &str, run: &str, last_event_id: Option<u64>) -> Self {
        let mut req = reqwest::Client::new().get(format!("{url}/v1/runs/{run}/events"));
        if let Some(id) = last_event_id {
            req = req.header("last-event-id", id.to_string());
        }
        let response = req.send().await.unwrap();
        assert_eq!(response.status(), 200);
        Self { response, buffer: String::new() }
    }

    /// The next frame, or `None` when the stream ends (or the server died).
    pub async fn next(&mut self) -> Option<Frame> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let raw: String = self.buffer.drain(..end + 2).collect();
                let id = raw.lines().find_map(|l| l.strip_prefix("id:")).and_then(|v| v.trim().parse().ok());
                let data = raw.lines().find_map(|l| l.strip_prefix("data:")).map(str::trim);
                if let (Some(id), Some(data)) = (id, data) {
                    return Some((id, serde_json::from_str(data).unwrap()));
                }
                continue;
            }
            let chunk = self.response.chunk().await.ok()??;
            self.buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
}
