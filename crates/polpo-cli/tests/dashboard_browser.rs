//! The web dashboard in a real headless Chromium, driven over WebDriver (chromedriver), against
//! the real `polpo serve`: a governed loop stops at its approval gate, the reviewer opens the
//! dashboard's Approvals view (typing the server's API key when the page asks), sees the pending
//! approval, clicks Approve, and the approval is gone while the loop run is listed and, resumed
//! past the gate, completes; a second run is rejected with feedback typed into the prompt. The
//! agent view lists the agent's skills and the Schedules view a schedule's next fire time.
//!
//! Skips with a printed reason when `chromium` is not installed, unless `POLPO_REQUIRE_BROWSER`
//! is set (scripts/test installs the browser and sets it, so CI never skips).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use polpo_testkit::{FakeLlm, ProjectFixture};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use support::{ServerProcess, free_port};

/// Generous bound for "eventually", never a timing assertion.
const EVENTUALLY: Duration = Duration::from_secs(60);
/// The W3C WebDriver key of an element reference.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A loop whose only step, a `bash` tool call, waits for a reviewer's approval.
fn governed_project(dir: &Path) {
    let flow = json!({
        "name": "ship",
        "start": "ship",
        "policies": [{"id": "review-ship", "hook": "tool:before", "effect": "approval", "when": "step.name == 'ship'", "message": "a person signs off the release"}],
        "steps": {"ship": {"type": "tool", "tool": "bash", "input": {"command": "echo shipped >> log.txt"}, "next": "end"}}
    });
    let agent = json!({"model": "openai/fake-model", "allowedTools": ["bash"], "assignedLoops": ["ship"], "skills": ["release-notes"]});
    ProjectFixture::new(dir, json!({"storage": "file"}))
        .unwrap()
        .agent("releaser", agent, "You release things.")
        .unwrap()
        .project_loop("ship", flow)
        .unwrap();
    let files = [
        (
            ".polpo/skills/release-notes/SKILL.md",
            "---\nname: release-notes\ndescription: Writes the notes.\n---\nList changes.\n",
        ),
        (
            ".polpo/schedules/leap-release.json",
            r#"{"timing": {"kind": "cron", "expression": "0 3 29 2 *", "timezone": "UTC"},
                "invocation": {"surface": "agent", "agentName": "releaser", "input": {"prompt": "Release."}}}"#,
        ),
    ];
    for (path, text) in files {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
}

/// A chromedriver process and one headless Chromium session on it; both end when dropped.
struct Browser {
    driver: Child,
    session: String,
    http: reqwest::Client,
}

impl Browser {
    /// `None` (after printing why) when Chromium is absent and the browser is not required.
    async fn start() -> Option<Self> {
        let installed = |tool: &str| Command::new(tool).arg("--version").output().is_ok_and(|o| o.status.success());
        if !installed("chromium") || !installed("chromedriver") {
            assert!(
                std::env::var_os("POLPO_REQUIRE_BROWSER").is_none(),
                "POLPO_REQUIRE_BROWSER is set but chromium/chromedriver are not installed"
            );
            println!(
                "SKIPPED: the dashboard browser test needs chromium and chromedriver (apt-get install chromium chromium-driver); scripts/test installs them"
            );
            return None;
        }
        let port = free_port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut browser = Self { driver, session: format!("http://127.0.0.1:{port}"), http: reqwest::Client::new() };
        let base = browser.session.clone();
        let ready = tokio::time::timeout(EVENTUALLY, async {
            loop {
                if let Ok(r) = browser.http.get(format!("{base}/status")).send().await
                    && r.json::<Value>().await.is_ok_and(|s| s["value"]["ready"] == true)
                {
                    return;
                }
                tokio::task::yield_now().await;
            }
        });
        ready.await.expect("chromedriver answers /status");
        let args = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"];
        let capabilities = json!({"capabilities": {"alwaysMatch": {"browserName": "chrome",
            "goog:chromeOptions": {"binary": which("chromium"), "args": args}}}});
        let created = browser.http.post(format!("{base}/session")).json(&capabilities).send().await.unwrap();
        let created: Value = created.json().await.unwrap();
        let id = created["value"]["sessionId"].as_str().unwrap_or_else(|| panic!("no WebDriver session: {created}"));
        browser.session = format!("{base}/session/{id}");
        Some(browser)
    }

    /// One WebDriver command; its `value`, or a panic with the driver's error.
    async fn command(&self, path: &str, body: Value) -> Value {
        let r = self.http.post(format!("{}{path}", self.session)).json(&body).send().await.unwrap();
        let status = r.status();
        let body: Value = r.json().await.unwrap();
        assert!(status.is_success(), "WebDriver {path}: {body}");
        body["value"].clone()
    }

    async fn open(&self, url: &str) {
        self.command("/url", json!({"url": url})).await;
    }

    /// The page's answer to `script` (a function body using `arguments`).
    async fn eval(&self, script: &str, args: Value) -> Value {
        self.command("/execute/sync", json!({"script": script, "args": args})).await
    }

    /// The WebDriver id of the first element matching `css`.
    async fn find(&self, css: &str) -> String {
        let found = self.command("/element", json!({"using": "css selector", "value": css})).await;
        found[ELEMENT].as_str().unwrap_or_else(|| panic!("no element {css}: {found}")).to_owned()
    }

    async fn click(&self, css: &str) {
        let element = self.find(css).await;
        self.command(&format!("/element/{element}/click"), json!({})).await;
    }

    async fn type_into(&self, css: &str, text: &str) {
        let element = self.find(css).await;
        self.command(&format!("/element/{element}/value"), json!({"text": text})).await;
    }

    /// Polls `script` until it returns `true` (bounded by [`EVENTUALLY`]); `refresh` is
    /// clicked between tries, as a person would to see new state.
    async fn until(&self, what: &str, script: &str, args: Value, refresh: Option<&str>) {
        let done = tokio::time::timeout(EVENTUALLY, async {
            while self.eval(script, args.clone()).await != Value::Bool(true) {
                if let Some(css) = refresh {
                    self.click(css).await;
                }
                tokio::task::yield_now().await;
            }
        });
        if done.await.is_err() {
            let text = self.eval("return document.body.innerText", json!([])).await;
            panic!("the page never showed {what}; it shows:\n{text}");
        }
    }
}

impl Drop for Browser {
    /// Ends the session first (that closes Chromium, also when the test panicked), then the
    /// driver. Plain blocking HTTP: `drop` cannot await.
    fn drop(&mut self) {
        if let Some((address, path)) = self.session.strip_prefix("http://").and_then(|s| s.split_once('/'))
            && let Ok(mut stream) = std::net::TcpStream::connect(address)
        {
            let request = format!("DELETE /{path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
            let _ = stream.set_read_timeout(Some(EVENTUALLY));
            // The answer comes once the session (and Chromium) has ended; the driver keeps the
            // connection open, so read that answer, not to the end.
            let _ = stream.write_all(request.as_bytes()).and_then(|()| stream.read(&mut [0; 512]));
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// The full path of `tool` on `PATH`.
fn which(tool: &str) -> String {
    let out = Command::new("sh").args(["-c", &format!("command -v {tool}")]).output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// Run the governed loop over the API: it stops at its gate (202); the loop run's id.
async fn start_governed(api: &reqwest::Client, url: &str) -> String {
    let body = json!({"agent": "releaser", "loop": "ship", "messages": [{"role": "user", "content": "Ship it"}]});
    let r = api.post(format!("{url}/v1/chat/completions")).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 202);
    r.json::<Value>().await.unwrap()["loop_run_id"].as_str().unwrap().to_owned()
}

/// Script: the loop run `arguments[0]` is listed with status `arguments[1]`.
const RUN_LISTED: &str = "return [...document.querySelectorAll('#loop-run-list li.loop-run')].some((li) => li.dataset.id === arguments[0] && li.dataset.status === arguments[1])";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reviewer_approves_and_rejects_gated_loop_runs_in_the_dashboard_then_sees_skills_and_schedules() {
    polpo_llm::install_crypto_provider();
    let Some(browser) = Browser::start().await else { return };
    let llm = FakeLlm::start([]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    governed_project(dir.path());
    let base = llm.base_url();
    let env = [("OPENAI_BASE_URL", base.as_str()), ("OPENAI_API_KEY", "sk-upstream"), ("POLPO_API_KEY", "sk-review")];
    let server = ServerProcess::start("serve", dir.path(), &[], &env);
    let mut auth = reqwest::header::HeaderMap::new();
    auth.insert("authorization", "Bearer sk-review".parse().unwrap());
    let api = reqwest::Client::builder().default_headers(auth).build().unwrap();

    let run = start_governed(&api, &server.url).await;
    let pending: Value =
        api.get(format!("{}/api/v1/approvals?status=pending", server.url)).send().await.unwrap().json().await.unwrap();
    let approval = pending["data"]["approvals"][0]["id"].as_str().unwrap().to_owned();

    // The server wants a key: the page asks for one, then lists the pending approval.
    browser.open(&format!("{}/#approvals", server.url)).await;
    browser.until("the API key form", "return !document.querySelector('#key-form').hidden", json!([]), None).await;
    browser.type_into("#key-input", "sk-review").await;
    browser.click("#key-form button").await;
    let row = "return [...document.querySelectorAll('#approval-list li.approval')].some((li) => li.dataset.id === arguments[0] && li.textContent.includes('a person signs off the release'))";
    browser.until("the pending approval", row, json!([approval]), None).await;
    assert!(!dir.path().join("log.txt").exists(), "the gated step waits for the reviewer");

    browser.click("#approval-list li.approval button.approve").await;
    let gone = "return document.querySelector('#approval-list li.approval') === null && document.querySelector('#approval-list').textContent.includes('No pending approvals')";
    browser.until("no pending approval", gone, json!([]), None).await;
    browser.until("the loop run completed", RUN_LISTED, json!([run, "completed"]), Some("#approvals-refresh")).await;
    assert_eq!(std::fs::read_to_string(dir.path().join("log.txt")).unwrap(), "shipped\n");
    let decided: Value =
        api.get(format!("{}/api/v1/approvals/{approval}", server.url)).send().await.unwrap().json().await.unwrap();
    assert_eq!(decided["data"]["status"], "approved");

    // Reject asks why; the run ends `approval_rejected` and its tool never runs.
    let other = start_governed(&api, &server.url).await;
    browser.click("#approvals-refresh").await;
    browser
        .until(
            "the second pending approval",
            "return document.querySelector('#approval-list li.approval button.reject') !== null",
            json!([]),
            None,
        )
        .await;
    browser.click("#approval-list li.approval button.reject").await;
    browser.command("/alert/text", json!({"text": "not on a leap day"})).await;
    browser.command("/alert/accept", json!({})).await;
    browser.until("the loop run rejected", RUN_LISTED, json!([other, "approval_rejected"]), None).await;
    browser.until("no pending approval", gone, json!([]), None).await;
    assert_eq!(std::fs::read_to_string(dir.path().join("log.txt")).unwrap(), "shipped\n");

    // The agent's skills and the schedules with their next fire times.
    browser.open(&format!("{}/#agents/releaser", server.url)).await;
    let skills = "return document.querySelector('#agent-detail').textContent.includes('Skillsrelease-notes (Writes the notes.)')";
    browser.until("the agent's skill", skills, json!([]), None).await;
    browser.open(&format!("{}/#schedules", server.url)).await;
    let next = "const li = document.querySelector('#schedule-list li.schedule'); return !!li && li.dataset.id === 'leap-release' && /next: \\d{4}-02-29T03:00:00/.test(li.textContent)";
    browser.until("the schedule's next fire time", next, json!([]), None).await;
}
