//! The web dashboard in a real headless Chromium, driven over WebDriver (chromedriver), against
//! the real `polpo serve`: a governed loop stops at its approval gate, the reviewer opens the
//! dashboard's Approvals view (typing the server's API key when the page asks), sees the pending
//! approval, clicks Approve, and the approval is gone while the loop run is listed and, resumed
//! past the gate, completes; a second run is rejected with feedback typed into the prompt. The
//! agent view lists the agent's skills and the Schedules view a schedule's next fire time.
//! A mission created over REST appears with its progress; executed from the page, its first
//! task's end moves the bar (live, from the event feed, the page never reloading) to the
//! checkpoint, resumed from the page it completes; the task view shows the assessment's checks
//! and the reviewers' median scores and links the task's run. A loop run waiting on a human step
//! shows its trace in order and a form: a wrong answer shows the server's refusal, a right one
//! resumes the run to its end.
//!
//! Skips with a printed reason when `chromium` is not installed, unless `POLPO_REQUIRE_BROWSER`
//! is set (scripts/test installs the browser and sets it, so CI never skips).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use polpo_testkit::{FakeLlm, ProjectFixture, Turn, review_flow};
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

    /// Clicks the first element matching `css`. The dashboard re-renders a view when a live
    /// event arrives, which can replace the element between finding and clicking it (the driver
    /// answers `stale element reference`): then the new one is found and clicked.
    async fn click(&self, css: &str) {
        let clicked = tokio::time::timeout(EVENTUALLY, async {
            loop {
                let element = self.find(css).await;
                let url = format!("{}/element/{element}/click", self.session);
                let r = self.http.post(url).json(&json!({})).send().await.unwrap();
                let status = r.status();
                let body: Value = r.json().await.unwrap();
                if status.is_success() {
                    return;
                }
                assert_eq!(body["value"]["error"], "stale element reference", "WebDriver click on {css}: {body}");
                tokio::task::yield_now().await;
            }
        });
        clicked.await.unwrap_or_else(|_| panic!("{css} stayed stale"));
    }

    /// Clicks the first element matching `css` inside the page, once it exists: one atomic
    /// step, so a view re-rendered by a live event between finding and clicking cannot fail it.
    async fn click_when_shown(&self, what: &str, css: &str) {
        let click = "const e = document.querySelector(arguments[0]); if (!e) return false; e.click(); return true";
        self.until(what, click, json!([css])).await;
    }

    /// The page's answer to `script` as text.
    async fn text(&self, script: &str, args: Value) -> String {
        self.eval(script, args).await.as_str().unwrap_or_default().to_owned()
    }

    async fn type_into(&self, css: &str, text: &str) {
        let element = self.find(css).await;
        self.command(&format!("/element/{element}/value"), json!({"text": text})).await;
    }

    /// Polls `script` until it returns `true` (bounded by [`EVENTUALLY`]).
    async fn until(&self, what: &str, script: &str, args: Value) {
        let done = tokio::time::timeout(EVENTUALLY, async {
            while self.eval(script, args.clone()).await != Value::Bool(true) {
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
    browser.until("the API key form", "return !document.querySelector('#key-form').hidden", json!([])).await;
    browser.type_into("#key-input", "sk-review").await;
    browser.click("#key-form button").await;
    let row = "return [...document.querySelectorAll('#approval-list li.approval')].some((li) => li.dataset.id === arguments[0] && li.textContent.includes('a person signs off the release'))";
    browser.until("the pending approval", row, json!([approval])).await;
    assert!(!dir.path().join("log.txt").exists(), "the gated step waits for the reviewer");

    browser.click("#approval-list li.approval button.approve").await;
    let gone = "return document.querySelector('#approval-list li.approval') === null && document.querySelector('#approval-list').textContent.includes('No pending approvals')";
    browser.until("no pending approval", gone, json!([])).await;
    // Followed from the live feed (loop_run:completed), with no refresh clicked: a test clicking
    // it in a loop spent the key's rate limit, and the next view's reads were refused `429`.
    browser.until("the loop run completed", RUN_LISTED, json!([run, "completed"])).await;
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
        )
        .await;
    browser.click("#approval-list li.approval button.reject").await;
    browser.command("/alert/text", json!({"text": "not on a leap day"})).await;
    browser.command("/alert/accept", json!({})).await;
    browser.until("the loop run rejected", RUN_LISTED, json!([other, "approval_rejected"])).await;
    browser.until("no pending approval", gone, json!([])).await;
    assert_eq!(std::fs::read_to_string(dir.path().join("log.txt")).unwrap(), "shipped\n");

    // The agent's skills and the schedules with their next fire times.
    browser.open(&format!("{}/#agents/releaser", server.url)).await;
    let skills = "return document.querySelector('#agent-detail').textContent.includes('Skillsrelease-notes (Writes the notes.)')";
    browser.until("the agent's skill", skills, json!([])).await;
    browser.open(&format!("{}/#schedules", server.url)).await;
    let next = "const li = document.querySelector('#schedule-list li.schedule'); return !!li && li.dataset.id === 'leap-release' && /next: \\d{4}-02-29T03:00:00/.test(li.textContent)";
    browser.until("the schedule's next fire time", next, json!([])).await;
}

/// A builder agent for missions, and the `review-flow` loop (a tool step writes a draft, a
/// human step waits for a `decision`).
fn work_project(dir: &Path) {
    let agent =
        json!({"model": "openai/fake-model", "allowedTools": ["read", "write"], "assignedLoops": [review_flow::NAME]});
    ProjectFixture::new(dir, json!({"storage": "file"}))
        .unwrap()
        .agent("builder", agent, "You build things.")
        .unwrap()
        .project_loop(review_flow::NAME, review_flow::definition())
        .unwrap();
}

/// A reviewer's structured verdict on the one `clarity` dimension.
fn review(score: u8) -> Turn {
    Turn::json(json!({"scores": [{"dimension": "clarity", "score": score, "reasoning": "read it"}], "summary": "fine"}))
}

/// Script: the mission row `arguments[0]` shows `arguments[1]` with `arguments[2]` of
/// `arguments[3]` tasks done, in its bar and its words.
const MISSION_ROW: &str = "const li = [...document.querySelectorAll('#mission-list li.mission')].find((li) => li.dataset.id === arguments[0]); const bar = li && li.querySelector('progress'); return !!bar && li.dataset.status === arguments[1] && bar.value === arguments[2] && bar.max === arguments[3] && li.textContent.includes(arguments[2] + '/' + arguments[3] + ' done')";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mission_moves_live_in_the_dashboard_and_a_loop_run_waits_for_a_human_answer_there() {
    polpo_llm::install_crypto_provider();
    let Some(browser) = Browser::start().await else { return };
    // Draft: its answer, then the three reviewers of its llm_review (median 4); Publish: its answer.
    let llm = FakeLlm::start([Turn::text("Drafted."), review(3), review(5), review(4), Turn::text("Published.")])
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    work_project(dir.path());
    let base = llm.base_url();
    let env = [("OPENAI_BASE_URL", base.as_str()), ("OPENAI_API_KEY", "sk-upstream")];
    let server = ServerProcess::start("serve", dir.path(), &[], &env);
    let api = reqwest::Client::new();

    let task = |title: &str, after: &[&str], checks: Value| json!({"title": title, "description": format!("{title} the notes."), "assignTo": "builder", "dependsOn": after, "expectations": checks});
    let plan = json!({"name": "notes", "data": {
        "tasks": [
            task("Draft", &[], json!([{"type": "test", "command": "true"}, {"type": "llm_review", "criteria": "clear notes", "dimensions": [{"name": "clarity", "weight": 1}]}])),
            task("Publish", &["Draft"], json!([]))
        ],
        "checkpoints": [{"name": "sign-off", "afterTasks": ["Draft"], "blocksTasks": ["Publish"], "message": "an editor reads the draft"}]
    }});
    let created: Value =
        api.post(format!("{}/api/v1/missions", server.url)).json(&plan).send().await.unwrap().json().await.unwrap();
    let mission = created["data"]["id"].as_str().unwrap().to_owned();

    // The draft mission is listed with its planned tasks, none done.
    browser.open(&format!("{}/#missions", server.url)).await;
    browser.eval("window.dashboardMarker = 'the same page'", json!([])).await;
    browser.until("the draft mission at 0/2", MISSION_ROW, json!([mission, "draft", 0, 2])).await;
    browser.click(&format!("#mission-list li.mission[data-id='{mission}'] a")).await;
    browser.click_when_shown("the Execute button", "#mission-detail button.execute").await;

    // Draft runs and passes its checks; the checkpoint pauses the mission: the bar moved by itself.
    browser.until("the mission paused at 1/2", MISSION_ROW, json!([mission, "paused", 1, 2])).await;
    let waiting = "const li = document.querySelector('#mission-detail li.stop.checkpoint'); return !!li && li.dataset.name === 'sign-off' && li.textContent.includes('waiting: resume the mission') && li.textContent.includes('an editor reads the draft')";
    browser.until("the checkpoint waiting", waiting, json!([])).await;
    browser.click_when_shown("the Resume button", "#mission-detail button.resume").await;
    browser.until("the mission completed at 2/2", MISSION_ROW, json!([mission, "completed", 2, 2])).await;
    let report = "const d = document.querySelector('#mission-detail'); return d.textContent.includes('All passedyes') && d.textContent.includes('Average score4.00') && d.querySelectorAll('table.mission-tasks tr[data-status=\"done\"]').length === 2";
    browser.until("the mission report", report, json!([])).await;
    assert_eq!(
        browser.eval("return window.dashboardMarker", json!([])).await,
        "the same page",
        "the page never reloaded"
    );

    // The task view: the checks, the reviewers' median per dimension, the run it ran in.
    let tasks: Value =
        api.get(format!("{}/api/v1/tasks?missionId={mission}", server.url)).send().await.unwrap().json().await.unwrap();
    let draft = tasks["data"]["tasks"].as_array().unwrap().iter().find(|t| t["title"] == "Draft").unwrap();
    let draft = draft["id"].as_str().unwrap().to_owned();
    browser.click("#nav-tasks").await;
    browser.click_when_shown("the Draft task", &format!("#task-list li.task[data-id='{draft}'] a")).await;
    let checks = "const d = document.querySelector('#task-detail'); const review = d && d.querySelector('li.check.passed[data-type=\"llm_review\"]'); return !!review && !!d.querySelector('li.check.passed[data-type=\"test\"]') && [...review.querySelectorAll('table.scores tr')].some((tr) => tr.textContent === 'clarity4') && review.textContent.includes('3 reviewers') && d.textContent.includes('Retries0 of 2') && d.textContent.includes('Draft the notes.')";
    browser.until("the Draft task's assessment", checks, json!([])).await;
    let run = browser.text("return document.querySelector('#task-detail a.run-link').textContent", json!([])).await;
    assert!(run.starts_with(&format!("run task-{draft}-")), "{run}");
    browser.click("#task-detail a.run-link").await;
    let journal = "return document.querySelector('#run-info').textContent.includes('Statuscompleted') && document.querySelector('#run-events').textContent.includes('run.completed')";
    browser.until("the task's run", journal, json!([])).await;

    // A loop run waits on its human step; the approvals view lists it, its trace shows why.
    let chat = json!({"agent": "builder", "loop": review_flow::NAME, "messages": [{"role": "user", "content": "Review the draft"}]});
    let url = server.url.clone();
    let answered = tokio::spawn(async move {
        let r = reqwest::Client::new().post(format!("{url}/v1/chat/completions")).json(&chat).send().await.unwrap();
        (r.status().as_u16(), r.json::<Value>().await.unwrap())
    });
    browser.open(&format!("{}/#approvals", server.url)).await;
    // Listed, and once shown followed, from the live feed (loop_run:* events): no refresh clicked.
    let listed = "return !!document.querySelector('#loop-run-list li.loop-run[data-status=\"awaiting_human\"] a')";
    browser.until("the loop run awaiting a person", listed, json!([])).await;
    browser.click_when_shown("the loop run", "#loop-run-list li.loop-run[data-status='awaiting_human'] a").await;
    let form = "return !!document.querySelector('#loop-run-detail form.human-form[data-step=\"review\"] input[name=\"decision\"]') && !!document.querySelector('#loop-trace li.trace-event[data-type=\"human.request\"]')";
    browser.until("the human step's form", form, json!([])).await;

    // Sent empty, the server refuses the answer against output.schema and the form says so.
    browser.click("#loop-run-detail form.human-form button").await;
    let refused = "const e = document.querySelector('#loop-run-detail .human-error'); return !!e && !e.hidden && e.textContent.includes('loop_human_output_invalid') && e.textContent.includes('decision')";
    browser.until("the refusal", refused, json!([])).await;
    assert!(!answered.is_finished(), "a refused answer does not resume the run");
    browser.type_into("#loop-run-detail form.human-form input[name='decision']", "ship").await;
    browser.click("#loop-run-detail form.human-form button").await;
    let done =
        "const d = document.querySelector('#loop-run-detail'); return !!d && d.textContent.includes('Statuscompleted')";
    browser.until("the loop run completed", done, json!([])).await;
    let (status, body) = answered.await.unwrap();
    assert_eq!(status, 200, "{body}");

    let order = browser
        .eval(
            "return [...document.querySelectorAll('#loop-trace li.trace-event')].map((li) => li.dataset.type + ' ' + li.dataset.step)",
            json!([]),
        )
        .await;
    assert_eq!(order, json!(review_flow::TRACE));
    let context = browser.text("return document.querySelector('#loop-context').textContent", json!([])).await;
    assert!(context.contains("\"decision\": \"ship\""), "{context}");
    assert_eq!(std::fs::read_to_string(dir.path().join("draft.txt")).unwrap(), review_flow::DRAFT);
}
