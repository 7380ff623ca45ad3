//! Durable loop runs against the real binary: a loop whose tool step appends a line and whose
//! human step then waits is stored `awaiting_human`; `polpo serve` is killed with SIGKILL and
//! started again on the same project; a person answers over REST to the restarted server,
//! which resumes the run at the human step with that answer (the tool step is not run again)
//! and completes it — the line appears once. Cancelling a waiting run stores it `cancelled`. On the file store and on
//! PostgreSQL. Two servers on one PostgreSQL: a run has one executor at a time; the other
//! server takes it over once the first one's lease lapses (killed, or paused past its lease),
//! from the last checkpoint, and the paused one, let go, writes nothing and runs no step more.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use polpo_testkit::{FakeLlm, ProjectFixture};
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;
use support::{ServerProcess, on_postgres};

/// Generous bound for "eventually", never a timing assertion.
const EVENTUALLY: Duration = Duration::from_secs(60);

/// Leases lapse after 2 s, so a dead or paused server's loop run is taken over quickly — and a
/// live one starved of CPU for a second on a loaded 2-core machine (seen: its run taken over in
/// the middle of its first step) still renews its lease in time.
const LEASE_MS: &str = "2000";

/// The environment of a server of these tests: the fake model at `base`, and short leases.
fn lease_env(base: &str) -> [(&'static str, &str); 3] {
    [("OPENAI_BASE_URL", base), ("OPENAI_API_KEY", "sk-upstream"), ("POLPO_RUN_LEASE_MS", LEASE_MS)]
}

fn project(dir: &Path, settings: Value) {
    let flow = json!({
        "name": "append-then-ask",
        "start": "append",
        "steps": {
            "append": {"type": "tool", "tool": "bash", "input": {"command": "echo one >> log.txt"}, "next": "review"},
            "review": {"type": "human", "output": {"schema": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}}, "next": "end"}
        }
    });
    ProjectFixture::new(dir, settings)
        .unwrap()
        .agent(
            "builder",
            json!({"model": "openai/fake-model", "allowedTools": ["bash"], "assignedLoops": ["append-then-ask"]}),
            "You build things.",
        )
        .unwrap()
        .project_loop("append-then-ask", flow)
        .unwrap();
}

/// Start a loop chat (streamed, so the run id arrives at once) and return the run id and the
/// open response (dropping it cancels the run).
async fn start_loop(url: &str) -> (String, reqwest::Response) {
    let body = json!({"agent": "builder", "loop": "append-then-ask", "stream": true,
        "messages": [{"role": "user", "content": "Append and ask"}]});
    let response = reqwest::Client::new().post(format!("{url}/v1/chat/completions")).json(&body).send().await.unwrap();
    assert_eq!(response.status(), 200);
    (response.headers()["x-polpo-loop-run-id"].to_str().unwrap().to_owned(), response)
}

async fn loop_run(url: &str, id: &str) -> Value {
    let response = reqwest::get(format!("{url}/api/v1/loop-runs/{id}")).await.unwrap();
    assert_eq!(response.status(), 200);
    response.json::<Value>().await.unwrap()["data"].clone()
}

/// The stored run once `done` holds for it (polled every 10 ms — a tight loop of requests from
/// several tests at once starved the servers on 2 cores —, bounded by [`EVENTUALLY`], and the
/// last state seen shown when it never holds); a streamed chat's run id arrives before the
/// run's first write, so `404` only means "not yet".
async fn until(url: &str, id: &str, done: impl Fn(&Value) -> bool) -> Value {
    let last = std::sync::Mutex::new(Value::Null);
    let polled = tokio::time::timeout(EVENTUALLY, async {
        let mut every = tokio::time::interval(Duration::from_millis(10));
        loop {
            every.tick().await;
            let response = reqwest::get(format!("{url}/api/v1/loop-runs/{id}")).await.unwrap();
            if response.status() == 404 {
                continue;
            }
            assert_eq!(response.status(), 200);
            let run = response.json::<Value>().await.unwrap()["data"].clone();
            if done(&run) {
                return run;
            }
            *last.lock().unwrap() = run;
        }
    })
    .await;
    polled.unwrap_or_else(|_| {
        panic!("the loop run never reached the expected state; last seen: {}", last.lock().unwrap())
    })
}

fn types(run: &Value) -> Vec<String> {
    run["trace"].as_array().unwrap().iter().map(|e| e["type"].as_str().unwrap().to_owned()).collect()
}

async fn killed_while_a_human_step_waits_the_run_resumes_without_rerunning_the_tool(settings: Value) {
    polpo_llm::install_crypto_provider();
    let llm = FakeLlm::start([]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    project(dir.path(), settings);
    let base = llm.base_url();
    // The killed server's lease on the run lapses after two seconds: then the next one takes it.
    let env = lease_env(&base);

    let first = ServerProcess::start("serve", dir.path(), &[], &env);
    let (id, chat) = start_loop(&first.url).await;
    let waiting = until(&first.url, &id, |r| r["status"] == "awaiting_human").await;
    assert_eq!(waiting["state"]["frontier"], json!(["review"]));
    assert_eq!(waiting["human"]["step"], "review");
    assert_eq!(std::fs::read_to_string(dir.path().join("log.txt")).unwrap(), "one\n");
    drop(first); // SIGKILL (Child::kill), then reaped
    drop(chat);

    let second = ServerProcess::start("serve", dir.path(), &[], &env);
    // Waiting for a person, the run holds no lease: the new server leaves it stored as it is
    // until the answer, given to it, is stored with the run and resumes it there.
    let waiting = loop_run(&second.url, &id).await;
    assert_eq!(waiting["status"], "awaiting_human");
    assert!(waiting.get("lease").is_none(), "a run waiting for a person holds no lease: {waiting}");
    assert_eq!(waiting["state"]["frontier"], json!(["review"]));
    let client = reqwest::Client::new();
    let human = format!("{}/api/v1/loop-runs/{id}/human", second.url);
    let answered = client.post(&human).json(&json!({"output": {"ok": true}})).send().await.unwrap();
    assert_eq!(answered.status(), 200);
    let done = until(&second.url, &id, |r| r["status"] != "awaiting_human" && r["status"] != "running").await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["output"], json!({"ok": true}));
    assert_eq!(done["state"]["context"]["review"], json!({"ok": true}));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("log.txt")).unwrap(),
        "one\n",
        "the tool step before the checkpoint ran once"
    );
    let trace = types(&done);
    assert_eq!(trace.iter().filter(|t| *t == "tool.call").count(), 1, "{trace:?}");
    assert_eq!(trace.iter().filter(|t| *t == "loop.resume").count(), 1, "{trace:?}");
    assert_eq!(trace.first().map(String::as_str), Some("loop.start"));
    assert_eq!(trace.last().map(String::as_str), Some("loop.end"));
    let ids: Vec<&str> = done["trace"].as_array().unwrap().iter().map(|e| e["id"].as_str().unwrap()).collect();
    let numbered: Vec<String> = (1..=ids.len()).map(|n| format!("trace-{n}")).collect();
    assert_eq!(ids, numbered, "the resumed trace goes on numbering where the stored one stopped");

    // Listed among completed runs; a waiting run can be cancelled once.
    let listed: Value =
        reqwest::get(format!("{}/api/v1/loop-runs?status=completed", second.url)).await.unwrap().json().await.unwrap();
    let runs = listed["data"]["loopRuns"].as_array().unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!((runs[0]["id"].as_str(), runs[0]["loop"].as_str()), (Some(id.as_str()), Some("append-then-ask")));
    let (other, _open) = start_loop(&second.url).await;
    until(&second.url, &other, |r| r["status"] == "awaiting_human").await;
    let cancel = format!("{}/api/v1/loop-runs/{other}/cancel", second.url);
    let cancelled = client.post(&cancel).send().await.unwrap();
    assert_eq!(cancelled.status(), 200);
    assert_eq!(loop_run(&second.url, &other).await["status"], "cancelled");
    let again = client.post(&cancel).send().await.unwrap();
    assert_eq!(again.status(), 409);
    assert_eq!(again.json::<Value>().await.unwrap()["code"], "loop_run_finished");
    let late = client
        .post(format!("{}/api/v1/loop-runs/{other}/human", second.url))
        .json(&json!({"output": {"ok": true}}))
        .send()
        .await
        .unwrap();
    assert_eq!(late.status(), 404, "a cancelled run waits for nobody");
    let waiting: Value = reqwest::get(format!("{}/api/v1/loop-runs?status=awaiting_human", second.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(waiting["data"]["loopRuns"], json!([]));
    assert!(llm.requests().is_empty(), "a tool-and-human loop never asks the model");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_store_loop_run_survives_sigkill_at_a_human_step() {
    killed_while_a_human_step_waits_the_run_resumes_without_rerunning_the_tool(json!({"storage": "file"})).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_loop_run_survives_sigkill_at_a_human_step() {
    on_postgres(killed_while_a_human_step_waits_the_run_resumes_without_rerunning_the_tool).await;
}

/// A loop whose second `bash` step needs a person's approval before its tool runs.
fn gated_project(dir: &Path, settings: Value) {
    gated_project_with(dir, settings, json!({}));
}

/// [`gated_project`] with these extra fields on its approval policy (e.g. a `timeout`).
fn gated_project_with(dir: &Path, settings: Value, extra: Value) {
    let mut policy = json!({"id": "review-build", "hook": "tool:before", "effect": "approval", "when": "step.name == 'build'", "message": "a person reviews the build"});
    policy.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    let flow = json!({
        "name": "gated-build",
        "start": "prepare",
        "policies": [policy],
        "steps": {
            "prepare": {"type": "tool", "tool": "bash", "input": {"command": "echo prepare >> log.txt"}, "next": "build"},
            "build": {"type": "tool", "tool": "bash", "input": {"command": "echo build >> log.txt"}, "next": "end"}
        }
    });
    ProjectFixture::new(dir, settings)
        .unwrap()
        .agent(
            "builder",
            json!({"model": "openai/fake-model", "allowedTools": ["bash"], "assignedLoops": ["gated-build"]}),
            "You build things.",
        )
        .unwrap()
        .project_loop("gated-build", flow)
        .unwrap();
}

/// Run the gated loop: it stops at the approval gate (202 `loop_approval_required`).
async fn start_gated(url: &str) -> String {
    let body = json!({"agent": "builder", "loop": "gated-build", "messages": [{"role": "user", "content": "Build"}]});
    let response = reqwest::Client::new().post(format!("{url}/v1/chat/completions")).json(&body).send().await.unwrap();
    assert_eq!(response.status(), 202);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "loop_approval_required", "{body}");
    body["loop_run_id"].as_str().unwrap().to_owned()
}

async fn approved_after_a_restart_the_run_resumes_past_the_gate_and_a_rejected_one_ends(settings: Value) {
    polpo_llm::install_crypto_provider();
    let llm = FakeLlm::start([]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    gated_project(dir.path(), settings);
    let base = llm.base_url();
    let env = [("OPENAI_BASE_URL", base.as_str()), ("OPENAI_API_KEY", "sk-upstream")];
    let log = dir.path().join("log.txt");
    let client = reqwest::Client::new();

    let first = ServerProcess::start("serve", dir.path(), &[], &env);
    let id = start_gated(&first.url).await;
    let stopped = loop_run(&first.url, &id).await;
    assert_eq!(stopped["status"], "awaiting_approval");
    assert_eq!(stopped["state"]["frontier"], json!(["build"]));
    let approval = stopped["approvalRequestId"].as_str().unwrap().to_owned();
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "prepare\n", "the gated tool did not run");
    let early = client.post(format!("{}/api/v1/loop-runs/{id}/resume", first.url)).send().await.unwrap();
    assert_eq!(early.status(), 409, "nothing resumes before a reviewer approves");
    drop(first); // SIGKILL

    let second = ServerProcess::start("serve", dir.path(), &[], &env);
    let pending: Value =
        reqwest::get(format!("{}/api/v1/approvals?status=pending", second.url)).await.unwrap().json().await.unwrap();
    let pending = pending["data"]["approvals"].as_array().unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(
        (pending[0]["id"].as_str(), pending[0]["loopRunId"].as_str()),
        (Some(approval.as_str()), Some(id.as_str()))
    );
    assert_eq!(pending[0]["gate"]["id"], "review-build");
    // A reviewer at a terminal: `polpo approvals list`, `approve`, `resume`.
    let cli = |args: &[&str]| {
        let mut cmd = support::polpo(&["approvals", "--url", second.url.as_str()]);
        let out = cmd.args(args).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let listed = cli(&["list", "--status", "pending"]);
    assert!(listed.starts_with(&format!("{approval}\tpending\t{id}\treview-build")), "{listed}");
    cli(&["approve", &approval, "--note", "looks fine"]);
    let decided: Value =
        reqwest::get(format!("{}/api/v1/approvals/{approval}", second.url)).await.unwrap().json().await.unwrap();
    assert_eq!(
        (decided["data"]["status"].as_str(), decided["data"]["resolvedBy"].as_str()),
        (Some("approved"), Some("local"))
    );
    // `polpo loops runs` shows it approved; `polpo loops resume` (the same as `approvals resume`) goes on.
    let loops_cli = |args: &[&str]| {
        let mut cmd = support::polpo(&["loops"]);
        let out = cmd.args(args).args(["--url", second.url.as_str()]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let approved = loops_cli(&["runs", "--status", "approval_approved"]);
    assert!(approved.starts_with(&format!("{id}\tapproval_approved\tgated-build\tbuilder\t")), "{approved}");
    assert_eq!(approved.lines().count(), 1, "{approved}");
    assert_eq!(loops_cli(&["runs", "--status", "running"]), "", "no other run is listed");
    loops_cli(&["resume", &id]);
    let done = until(&second.url, &id, |r| r["status"] == "completed" || r["status"] == "failed").await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "prepare\nbuild\n", "steps before the gate ran once");
    let trace = types(&done);
    assert!(trace.contains(&"policy.result".to_owned()) && trace.contains(&"loop.resume".to_owned()), "{trace:?}");

    // A rejected gate ends the run; a rejection needs feedback.
    let other = start_gated(&second.url).await;
    let reject = format!("{}/api/v1/loop-runs/{other}/reject", second.url);
    let bare = client.post(&reject).json(&json!({})).send().await.unwrap();
    assert_eq!(bare.status(), 400);
    let rejected = client.post(&reject).json(&json!({"feedback": "not today"})).send().await.unwrap();
    assert_eq!(rejected.status(), 200);
    let ended = loop_run(&second.url, &other).await;
    assert_eq!(ended["status"], "approval_rejected");
    assert_eq!(ended["error"]["code"], "approval_rejected");
    let after = client.post(format!("{}/api/v1/loop-runs/{other}/resume", second.url)).send().await.unwrap();
    assert_eq!(after.status(), 409);
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "prepare\nbuild\nprepare\n");
    let all = loops_cli(&["runs"]);
    assert!(all.starts_with(&format!("{other}\tapproval_rejected\t")), "newest first: {all}");
    assert!(all.lines().next().unwrap().ends_with("\tapproval_rejected"), "the error code: {all}");
    assert!(all.lines().nth(1).unwrap().starts_with(&format!("{id}\tcompleted\t")), "{all}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_store_approval_survives_a_restart_and_resume_skips_completed_steps() {
    approved_after_a_restart_the_run_resumes_past_the_gate_and_a_rejected_one_ends(json!({"storage": "file"})).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_approval_survives_a_restart_and_resume_skips_completed_steps() {
    on_postgres(approved_after_a_restart_the_run_resumes_past_the_gate_and_a_rejected_one_ends).await;
}

async fn an_approval_that_times_out_while_the_server_is_down_is_rejected_when_it_starts(settings: Value) {
    polpo_llm::install_crypto_provider();
    let llm = FakeLlm::start([]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    // The gate lapses one second after it is raised (rejected on timeout by default).
    gated_project_with(dir.path(), settings, json!({"timeout": "PT1S"}));
    let base = llm.base_url();
    let env = [("OPENAI_BASE_URL", base.as_str()), ("OPENAI_API_KEY", "sk-upstream")];

    let first = ServerProcess::start("serve", dir.path(), &[], &env);
    let id = start_gated(&first.url).await;
    let stopped = loop_run(&first.url, &id).await;
    let approval_id = stopped["approvalRequestId"].as_str().unwrap().to_owned();
    let approval: Value =
        reqwest::get(format!("{}/api/v1/approvals/{approval_id}", first.url)).await.unwrap().json().await.unwrap();
    let approval = &approval["data"];
    assert_eq!((approval["status"].as_str(), approval["timeout"].as_str()), (Some("pending"), Some("PT1S")));
    let deadline: chrono::DateTime<chrono::Utc> = approval["deadline"].as_str().unwrap().parse().unwrap();
    drop(first); // SIGKILL, before the deadline can have been enforced by this server

    // The deadline passes while no server is up (this waits on the wall clock the test is
    // about, not on another process).
    let left = (deadline - chrono::Utc::now()).to_std().unwrap_or_default();
    tokio::time::sleep(left + Duration::from_millis(50)).await;

    let second = ServerProcess::start("serve", dir.path(), &[], &env);
    let ended = until(&second.url, &id, |r| r["status"] != "awaiting_approval").await;
    assert_eq!(ended["status"], "approval_rejected", "{ended}");
    assert_eq!(ended["error"]["code"], "approval_rejected");
    let message = ended["error"]["message"].as_str().unwrap();
    assert!(message.contains("timed out"), "{message}");
    let decided: Value =
        reqwest::get(format!("{}/api/v1/approvals/{approval_id}", second.url)).await.unwrap().json().await.unwrap();
    assert_eq!(
        (decided["data"]["status"].as_str(), decided["data"]["resolvedBy"].as_str()),
        (Some("rejected"), Some("timeout"))
    );
    assert_eq!(std::fs::read_to_string(dir.path().join("log.txt")).unwrap(), "prepare\n", "the gated step never ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_store_approval_timeout_rejects_after_a_restart() {
    an_approval_that_times_out_while_the_server_is_down_is_rejected_when_it_starts(json!({"storage": "file"})).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_approval_timeout_rejects_after_a_restart() {
    on_postgres(an_approval_that_times_out_while_the_server_is_down_is_rejected_when_it_starts).await;
}

/// A loop of three `bash` steps: `one` appends a line, `hold` creates `holding` then waits
/// (bounded, 60 s) until the test creates the file `gate`, `three` appends a line.
fn relay_project(dir: &Path, settings: Value) {
    let flow = json!({
        "name": "relay",
        "start": "one",
        "steps": {
            "one": {"type": "tool", "tool": "bash", "input": {"command": "echo one >> log.txt"}, "next": "hold"},
            "hold": {"type": "tool", "tool": "bash", "input": {"command": "touch holding; for i in $(seq 3000); do [ -f gate ] && break; sleep 0.02; done"}, "next": "three"},
            "three": {"type": "tool", "tool": "bash", "input": {"command": "echo three >> log.txt"}, "next": "end"}
        }
    });
    ProjectFixture::new(dir, settings)
        .unwrap()
        .agent(
            "builder",
            json!({"model": "openai/fake-model", "allowedTools": ["bash"], "assignedLoops": ["relay"]}),
            "You build things.",
        )
        .unwrap()
        .project_loop("relay", flow)
        .unwrap();
}

/// Servers `a` and `b` (`--worker-id a|b`) on the project in `dir`, with `env`.
fn servers_a_and_b(dir: &Path, env: &[(&str, &str)]) -> (ServerProcess, ServerProcess) {
    let a = ServerProcess::start("serve", dir, &["--worker-id", "a"], env);
    (a, ServerProcess::start("serve", dir, &["--worker-id", "b"], env))
}

/// `POST {url}/api/v1/loop-runs/{id}/human` with `output`: a person's answer.
async fn answer_human(url: &str, id: &str, output: Value) -> reqwest::Response {
    let to = format!("{url}/api/v1/loop-runs/{id}/human");
    reqwest::Client::new().post(to).json(&json!({"output": output})).send().await.unwrap()
}

/// Servers `a` and `b` (`--worker-id a|b`) on one store, and the relay loop started on `a`,
/// stored past its first step (checkpointed with `hold` next) while `hold` waits: the run id
/// and `a`'s open chat.
async fn relay_on_a(dir: &Path, env: &[(&str, &str)]) -> (ServerProcess, ServerProcess, String, reqwest::Response) {
    let (a, b) = servers_a_and_b(dir, env);
    let body = json!({"agent": "builder", "loop": "relay", "stream": true,
        "messages": [{"role": "user", "content": "Relay"}]});
    let chat = reqwest::Client::new().post(format!("{}/v1/chat/completions", a.url)).json(&body).send().await.unwrap();
    assert_eq!(chat.status(), 200);
    let id = chat.headers()["x-polpo-loop-run-id"].to_str().unwrap().to_owned();
    let held = until(&b.url, &id, |r| r["state"]["frontier"] == json!(["hold"])).await;
    assert_eq!(held["lease"]["owner"], "a", "{held}");
    assert_eq!(std::fs::read_to_string(dir.join("log.txt")).unwrap(), "one\n");
    // `hold` runs on `a` (its intent is in the effect ledger before its bash starts).
    tokio::time::timeout(EVENTUALLY, async {
        while !dir.join("holding").exists() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("`hold` starts on a");
    (a, b, id, chat)
}

/// What the relay run shows on `url` once `b` took it over from the checkpoint before `hold`:
/// `hold` (a `bash`, not replayable) was started on `a` and its outcome never recorded in the
/// effect ledger, so `b` does not run it blindly again — the run ends `effect_unconfirmed`,
/// its lease given up; `one` ran once (before the takeover), `three` never.
async fn finished_by_b(url: &str, id: &str, dir: &Path) -> Value {
    let done = until(url, id, |r| r["status"] != "running").await;
    assert_eq!((done["status"].as_str(), done["error"]["code"].as_str()), (Some("failed"), Some("effect_unconfirmed")));
    assert!(done.get("lease").is_none(), "an ended run holds no lease: {done}");
    assert_eq!(std::fs::read_to_string(dir.join("log.txt")).unwrap(), "one\n", "`one` once, `three` never");
    let calls = |step: &str| {
        let trace = done["trace"].as_array().unwrap();
        trace.iter().filter(|e| e["type"] == "tool.result" && e["stepKey"] == step).count()
    };
    assert_eq!((calls("one"), calls("hold"), calls("three")), (1, 0, 0), "{done}");
    assert!(types(&done).contains(&"loop.resume".to_owned()), "{done}");
    done
}

/// A chat stream `body` of run `id` on a server that lost the run to another: it ends
/// unfinished (no finish reason, no `[DONE]`), with the run to follow elsewhere, and never says
/// the run failed (no `loop.error`, no other error).
fn handed_over(body: &str, id: &str) {
    let chunks: Vec<Value> =
        body.lines().filter_map(|l| l.strip_prefix("data: ")).filter_map(|d| serde_json::from_str(d).ok()).collect();
    let last = chunks.last().unwrap_or_else(|| panic!("no chunk: {body}"));
    assert_eq!((last["error"]["code"].as_str(), last["error"]["run_id"].as_str()), (Some("run_handed_over"), Some(id)));
    let errors = chunks.iter().filter(|c| c.get("error").is_some()).count();
    let finished = chunks.iter().filter(|c| !c["choices"][0]["finish_reason"].is_null()).count();
    let traced = chunks.iter().flat_map(|c| c["loop_trace"].as_array().cloned().unwrap_or_default());
    let failed = traced.filter(|e| e["type"] == "loop.error").count();
    assert_eq!((errors, finished, failed), (1, 0, 0), "{body}");
    assert!(!body.contains("[DONE]"), "{body}");
}

/// `POST {url}/api/v1/loop-runs/{id}/reconcile` with `body`.
async fn reconcile(url: &str, id: &str, body: Value) -> reqwest::Response {
    let to = format!("{url}/api/v1/loop-runs/{id}/reconcile");
    reqwest::Client::new().post(to).json(&body).send().await.unwrap()
}

/// The effect key a run stopped `effect_unconfirmed` names in its `loop.error` event.
fn unconfirmed_key(run: &Value) -> String {
    let trace = run["trace"].as_array().unwrap();
    let failed = trace.iter().rev().find(|e| e["type"] == "loop.error").unwrap();
    failed["data"]["effect"]["key"].as_str().unwrap().to_owned()
}

/// `hold`'s tool results in `run`'s trace after its last `loop.resume`: whether each reused a
/// recorded outcome.
fn holds_after_last_resume(run: &Value) -> Vec<bool> {
    let trace = run["trace"].as_array().unwrap();
    let resumed = trace.iter().rposition(|e| e["type"] == "loop.resume").unwrap();
    let held = trace[resumed..].iter().filter(|e| e["type"] == "tool.result" && e["stepKey"] == "hold");
    held.map(|e| e["data"]["effect"] == "recorded").collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_killed_server_s_loop_run_is_finished_by_the_other_server() {
    on_postgres(|settings| async move {
        polpo_llm::install_crypto_provider();
        let llm = FakeLlm::start([]).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        relay_project(dir.path(), settings);
        let base = llm.base_url();
        let env = lease_env(&base);
        let (a, b, id, chat) = relay_on_a(dir.path(), &env).await;
        drop(a); // SIGKILL while `hold` waits (its bash dies with the server)
        drop(chat);
        let done = finished_by_b(&b.url, &id, dir.path()).await;
        assert_eq!(done["state"]["frontier"], json!(["hold"]), "B started at A's last checkpoint: {done}");

        // A person finds `hold` did not happen and says so (`polpo loops reconcile`, the key
        // read from the run): B runs it now (the gate lets it through), then `three`, and the
        // run completes; settled once.
        let key = unconfirmed_key(&done);
        let skip = reconcile(&b.url, &id, json!({"key": key, "outcome": "skip"})).await;
        assert_eq!(skip.status(), 400, "a tool step has no model to tell of a skip");
        let wrong = reconcile(&b.url, &id, json!({"key": format!("{key}x"), "outcome": "not_applied"})).await;
        assert_eq!(wrong.status(), 409);
        assert_eq!(wrong.json::<Value>().await.unwrap()["code"], "loop_run_not_resumable");
        std::fs::remove_file(dir.path().join("holding")).unwrap();
        std::fs::write(dir.path().join("gate"), "").unwrap();
        let settled = support::polpo(&["loops", "reconcile", &id, "not-applied", "--url", &b.url])
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(settled.status.success(), "{}", String::from_utf8_lossy(&settled.stderr));
        assert!(String::from_utf8_lossy(&settled.stdout).contains(&key));
        let completed = until(&b.url, &id, |r| r["status"] != "running" && r["status"] != "failed").await;
        assert_eq!(completed["status"], "completed", "{completed}");
        assert!(dir.path().join("holding").exists(), "`hold` ran again");
        assert_eq!(holds_after_last_resume(&completed), [false], "run afresh, not a recorded outcome");
        assert_eq!(std::fs::read_to_string(dir.path().join("log.txt")).unwrap(), "one\nthree\n");
        let again = reconcile(&b.url, &id, json!({"key": key, "outcome": "not_applied"})).await;
        assert_eq!(again.status(), 409, "settled once");
        assert!(llm.requests().is_empty(), "a tool-only loop never asks the model");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_server_paused_past_its_loop_lease_writes_nothing_once_it_wakes() {
    on_postgres(|settings| async move {
        polpo_llm::install_crypto_provider();
        let llm = FakeLlm::start([]).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        relay_project(dir.path(), settings);
        let base = llm.base_url();
        let env = lease_env(&base);
        let (a, b, id, chat) = relay_on_a(dir.path(), &env).await;
        // A stops (a long GC pause, a partition) while `hold` waits; its lease lapses and B
        // takes the run over from the checkpoint after `one`, and ends it without running
        // `hold` again.
        let pid = a.child.id().to_string();
        assert!(std::process::Command::new("kill").args(["-STOP", &pid]).status().unwrap().success());
        let done = finished_by_b(&b.url, &id, dir.path()).await;
        std::fs::write(dir.path().join("gate"), "").unwrap();

        // A wakes up still in `hold`, whose bash saw the gate too: its next write is refused,
        // so it stops there — its chat ends unfinished, the run handed over to B, `three` is
        // not run again, and the stored run is exactly what B left.
        assert!(std::process::Command::new("kill").args(["-CONT", &pid]).status().unwrap().success());
        let ended = tokio::time::timeout(EVENTUALLY, chat.text()).await.expect("A's chat ends").unwrap();
        handed_over(&ended, &id);
        assert_eq!(std::fs::read_to_string(dir.path().join("log.txt")).unwrap(), "one\n");
        let after = loop_run(&b.url, &id).await;
        assert_eq!((after["status"].clone(), after["trace"].clone()), (done["status"].clone(), done["trace"].clone()));

        // The person says `hold` happened (its bash did run on A): settled on B, the resumed run
        // reuses an outcome — the stated one, or A's own if A recorded it as it woke before it
        // stopped — and `hold` is not run a second time; the run completes.
        let applied = json!({"key": unconfirmed_key(&done), "outcome": "applied", "result": "held on a"});
        let settled = reconcile(&b.url, &id, applied).await;
        assert_eq!(settled.status(), 202);
        let completed = until(&b.url, &id, |r| r["status"] != "running" && r["status"] != "failed").await;
        assert_eq!(completed["status"], "completed", "{completed}");
        assert_eq!(holds_after_last_resume(&completed), [true], "an outcome reused, not run again");
        assert_eq!(std::fs::read_to_string(dir.path().join("log.txt")).unwrap(), "one\nthree\n");
        drop(a);
    })
    .await;
}

/// Two servers on one PostgreSQL: a run started on A waits at its human step, stored without a
/// lease, and the person's answer is posted to B. An answer the stored `output.schema` refuses
/// is refused; the valid one is stored with the run, and B resumes and completes it — the tool
/// step before it is not run again, and the run goes on once (a second answer, to A, is
/// refused). A, whose chat was still open, lets the run go (`lease_lost`) and writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_human_answer_posted_to_the_other_server_completes_the_run_once() {
    on_postgres(|settings| async move {
        polpo_llm::install_crypto_provider();
        let llm = FakeLlm::start([]).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        project(dir.path(), settings);
        let base = llm.base_url();
        let env = lease_env(&base);
        let (a, b) = servers_a_and_b(dir.path(), &env);
        let (id, chat) = start_loop(&a.url).await;
        let waiting = until(&b.url, &id, |r| r["status"] == "awaiting_human").await;
        assert!(waiting.get("lease").is_none(), "a run waiting for a person holds no lease: {waiting}");

        let refused = answer_human(&b.url, &id, json!({"ok": "yes"})).await;
        assert_eq!(refused.status(), 400);
        assert_eq!(refused.json::<Value>().await.unwrap()["code"], "loop_human_output_invalid");
        let accepted = answer_human(&b.url, &id, json!({"ok": true})).await;
        assert_eq!(accepted.status(), 200);
        let again = answer_human(&a.url, &id, json!({"ok": false})).await;
        assert_eq!(again.status(), 404, "answered once");

        let done = until(&b.url, &id, |r| r["status"] != "awaiting_human" && r["status"] != "running").await;
        assert_eq!(done["status"], "completed", "{done}");
        assert_eq!(done["output"], json!({"ok": true}));
        assert!(done.get("lease").is_none(), "an ended run holds no lease: {done}");
        let trace = types(&done);
        let count = |kind: &str| trace.iter().filter(|t| *t == kind).count();
        assert_eq!(
            [
                count("tool.call"),
                count("human.request"),
                count("human.result"),
                count("loop.resume"),
                count("loop.error")
            ],
            [1, 1, 1, 1, 0],
            "{trace:?}"
        );
        assert_eq!(std::fs::read_to_string(dir.path().join("log.txt")).unwrap(), "one\n", "the tool step ran once");

        // A's chat, still open, ends saying the run went on on B, not failing. A wrote nothing
        // after B's answer.
        let ended = tokio::time::timeout(EVENTUALLY, chat.text()).await.expect("A's chat ends").unwrap();
        handed_over(&ended, &id);
        let after = loop_run(&a.url, &id).await;
        assert_eq!((after["status"].clone(), after["trace"].clone()), (done["status"].clone(), done["trace"].clone()));
        assert!(llm.requests().is_empty(), "a tool-and-human loop never asks the model");
    })
    .await;
}

/// As above with a non-streaming chat on A: once the answer posted to B resumed the run there,
/// A's response is `503 run_handed_over` naming the run (and not to be retried), not a failure;
/// B completes the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_non_streaming_chat_whose_run_went_on_elsewhere_answers_run_handed_over() {
    on_postgres(|settings| async move {
        polpo_llm::install_crypto_provider();
        let llm = FakeLlm::start([]).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        project(dir.path(), settings);
        let base = llm.base_url();
        let env = lease_env(&base);
        let (a, b) = servers_a_and_b(dir.path(), &env);
        let body = json!({"agent": "builder", "loop": "append-then-ask",
            "messages": [{"role": "user", "content": "Append and ask"}]});
        let url = a.url.clone();
        let chat = tokio::spawn(async move {
            reqwest::Client::new().post(format!("{url}/v1/chat/completions")).json(&body).send().await.unwrap()
        });
        // The run's id, from B's listing once it waits (the answer's headers come at its end).
        let listed = tokio::time::timeout(EVENTUALLY, async {
            let mut every = tokio::time::interval(Duration::from_millis(10));
            loop {
                every.tick().await;
                let page = reqwest::get(format!("{}/api/v1/loop-runs?status=awaiting_human", b.url)).await.unwrap();
                let page: Value = page.json().await.unwrap();
                if let Some(id) = page["data"]["loopRuns"][0]["id"].as_str() {
                    return id.to_owned();
                }
            }
        });
        let id = listed.await.expect("the run waits for a person");
        assert_eq!(answer_human(&b.url, &id, json!({"ok": true})).await.status(), 200);

        let response = tokio::time::timeout(EVENTUALLY, chat).await.expect("A answers").unwrap();
        assert_eq!(response.status(), 503);
        assert_eq!(response.headers()["x-should-retry"], "false");
        let body: Value = response.json().await.unwrap();
        assert_eq!(
            (body["error"]["code"].as_str(), body["loop_run_id"].as_str()),
            (Some("run_handed_over"), Some(id.as_str()))
        );
        let done = until(&b.url, &id, |r| r["status"] != "awaiting_human" && r["status"] != "running").await;
        assert_eq!(done["status"], "completed", "{done}");
        assert_eq!(std::fs::read_to_string(dir.path().join("log.txt")).unwrap(), "one\n");
    })
    .await;
}
