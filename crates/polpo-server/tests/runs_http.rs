//! Durable runs over HTTP, on the file store, SQLite and PostgreSQL: run-backed chat that outlives
//! its client, reconnecting with `Last-Event-ID`, steering and abort through the run routes,
//! followers that stay through a pause, and chats whose server stops (hand-over).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup should panic loudly

mod support;

use polpo_core::config::ApiKeyEntry;
use polpo_server::auth::ApiKeys;
use polpo_testkit::pg::PgSchema;
use polpo_testkit::{FakeLlm, ProjectFixture, Turn};
use serde_json::{Value, json};
use std::time::Duration;
use support::{Frame, Frames, Server};

/// Generous bound for "eventually", never a timing assertion.
const EVENTUALLY: Duration = Duration::from_secs(20);

/// A server over the store `settings` name whose agent `coder` may read and run bash.
async fn server(llm: &FakeLlm, settings: Value) -> Server {
    Server::start_with(llm, None, |d| {
        ProjectFixture::new(d, settings)
            .unwrap()
            .agent(
                "coder",
                json!({"model": "openai/fake-model", "allowedTools": ["read", "bash"], "maxTurns": 8}),
                "You write code.",
            )
            .unwrap();
    })
    .await
}

/// A bash call that waits for `gate` to exist, then appends `line` to `log.txt`.
fn gated_append(gate: &str, line: &str) -> Value {
    json!({"command": format!("while [ ! -f {gate} ]; do sleep 0.02; done; echo {line} >> log.txt")})
}

fn durable_chat(text: &str, stream: bool) -> Value {
    json!({"agent": "coder", "stream": stream, "messages": [{"role": "user", "content": text}], "polpo": {"delivery": {"onDisconnect": "continue"}}})
}

impl Server {
    async fn open(
        &self,
        method: reqwest::Method,
        path: &str,
        headers: &[(&str, String)],
        body: Option<Value>,
    ) -> reqwest::Response {
        let mut req = self.http.request(method, format!("{}{path}", self.url));
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        if let Some(body) = body {
            req = req.json(&body);
        }
        req.send().await.unwrap()
    }

    async fn run_events(&self, run: &str, last_event_id: Option<u64>) -> Vec<Frame> {
        let headers: Vec<(&str, String)> =
            last_event_id.map(|id| ("last-event-id", id.to_string())).into_iter().collect();
        let response = self.open(reqwest::Method::GET, &format!("/v1/runs/{run}/events"), &headers, None).await;
        assert_eq!(response.status(), 200);
        Frames::new(response).rest(EVENTUALLY).await
    }
}

/// Run `test` over a fresh store of `storage` (a schema of its own on PostgreSQL).
async fn with_backend<F, Fut>(storage: &str, test: F)
where
    F: FnOnce(Value) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let schema = if storage == "postgres" { Some(PgSchema::create().await.unwrap()) } else { None };
    let settings = match &schema {
        Some(s) => json!({"storage": "postgres", "databaseUrl": s.url()}),
        None => json!({"storage": storage}),
    };
    test(settings).await;
    if let Some(schema) = schema {
        schema.drop_schema().await.unwrap();
    }
}

async fn a_client_that_loses_the_stream_reconnects_and_misses_nothing(settings: Value) {
    let llm =
        FakeLlm::start([Turn::tool_calls(vec![("bash", gated_append("go", "written"))]), Turn::text("All done.")])
            .await
            .unwrap();
    let s = server(&llm, settings).await;
    let response =
        s.open(reqwest::Method::POST, "/v1/chat/completions", &[], Some(durable_chat("Build it", true))).await;
    assert_eq!(response.status(), 200);
    let run = response.headers()["x-polpo-run-id"].to_str().unwrap().to_owned();
    let mut frames = Frames::new(response);
    let mut last_id = 0;
    // Read until the tool is running, then lose the connection.
    loop {
        let f = frames.next().await.expect("the stream goes on until the tool runs");
        if let Some(id) = f.id {
            last_id = id;
        }
        if f.json()["choices"][0]["tool_call"]["state"] == "calling" {
            break;
        }
    }
    drop(frames);
    std::fs::write(s.dir.path().join("go"), "").unwrap();

    let resumed = s.run_events(&run, Some(last_id)).await;
    let all = s.run_events(&run, None).await;
    let seqs: Vec<u64> = all.iter().map(|f| f.id.unwrap()).collect();
    assert_eq!(seqs, (1..=all.len() as u64).collect::<Vec<_>>(), "the journal has no gaps or duplicates");
    let resumed_seqs: Vec<u64> = resumed.iter().map(|f| f.id.unwrap()).collect();
    assert_eq!(
        resumed_seqs,
        seqs[last_id as usize..].to_vec(),
        "the reconnected stream continues right after Last-Event-ID"
    );
    let last = resumed.last().unwrap().json();
    assert_eq!(last["type"], "run.completed");
    assert_eq!(last["data"]["content"], "All done.");
    assert_eq!(last["runId"], run);
    assert_eq!(last["schemaVersion"], 1);
    assert!(resumed.iter().all(|f| f.event.as_deref() == Some("run.event")));
    // `?after=N` works like Last-Event-ID.
    let after = s.get(&format!("/v1/runs/{run}/events?after={}", all.len() - 1), &[]).await;
    assert_eq!(after.sse_data().len(), 1);

    let got = s.get(&format!("/api/v1/runs/{run}"), &[]).await.json();
    assert_eq!(got["data"]["status"], "completed");
    assert_eq!(std::fs::read_to_string(s.dir.path().join("log.txt")).unwrap(), "written\n");
}

async fn steering_over_http_is_delivered_once_at_the_next_boundary(settings: Value) {
    let llm = FakeLlm::start([
        Turn::tool_calls(vec![("bash", gated_append("go", "x"))]),
        Turn::text("Switched to PostgreSQL."),
    ])
    .await
    .unwrap();
    let s = server(&llm, settings).await;
    let reply = s.post("/v1/runs/nope/steer", &[], json!({"id": "a", "mode": "steer", "content": "hi"})).await;
    assert_eq!((reply.status, reply.json()["code"].as_str()), (404, Some("run_not_found")));

    let response =
        s.open(reqwest::Method::POST, "/v1/chat/completions", &[], Some(durable_chat("Build it", true))).await;
    let run = response.headers()["x-polpo-run-id"].to_str().unwrap().to_owned();
    let mut frames = Frames::new(response);
    while frames.next().await.unwrap().json()["choices"][0]["tool_call"]["state"] != "calling" {}

    let body = json!({"id": "m1", "mode": "steer", "content": {"text": "Use PostgreSQL."}});
    let first = s.post(&format!("/v1/runs/{run}/steer"), &[], body.clone()).await.json();
    assert_eq!((first["data"]["accepted"].as_bool(), first["data"]["duplicate"].as_bool()), (Some(true), Some(false)));
    let again = s.post(&format!("/api/v1/runs/{run}/steer"), &[], body).await.json();
    assert_eq!(again["data"]["duplicate"], true);
    std::fs::write(s.dir.path().join("go"), "").unwrap();

    let rest = frames.rest(EVENTUALLY).await;
    assert_eq!(rest.last().unwrap().data, "[DONE]");
    let second = &llm.requests()[1].body["messages"];
    let steers = second.as_array().unwrap().iter().filter(|m| m["content"] == "Use PostgreSQL.").count();
    assert_eq!(steers, 1, "delivered once: {second}");
    assert_eq!(second.as_array().unwrap().last().unwrap()["role"], "user");

    let late = s
        .post(&format!("/v1/runs/{run}/steer"), &[], json!({"id": "m2", "mode": "follow_up", "content": "more"}))
        .await;
    assert_eq!((late.status, late.json()["code"].as_str()), (409, Some("run_not_active")));
}

async fn abort_over_http_ends_the_run_within_a_second(settings: Value) {
    let llm = FakeLlm::start([Turn::tool_calls(vec![("bash", json!({"command": "sleep 60"}))]), Turn::text("never")])
        .await
        .unwrap();
    let s = server(&llm, settings).await;
    let response = s.open(reqwest::Method::POST, "/v1/chat/completions", &[], Some(durable_chat("Wait", true))).await;
    let run = response.headers()["x-polpo-run-id"].to_str().unwrap().to_owned();
    let mut frames = Frames::new(response);
    while frames.next().await.unwrap().json()["choices"][0]["tool_call"]["state"] != "calling" {}

    let reply = s.post(&format!("/v1/runs/{run}/abort"), &[], json!({"reason": "stop"})).await;
    assert_eq!(reply.status, 200);
    let end = tokio::time::timeout(Duration::from_secs(1), async {
        let mut last = None;
        while let Some(f) = frames.next().await {
            last = Some(f);
        }
        last
    })
    .await
    .expect("the stream ends within 1 s of the abort");
    assert_eq!(end.unwrap().data, "[DONE]");
    let events = s.run_events(&run, None).await;
    assert_eq!(events.last().unwrap().json()["type"], "run.cancelled");
}

async fn a_non_streaming_durable_completion_answers_from_its_run(settings: Value) {
    let llm = FakeLlm::start([Turn::text("Hello from a run.")]).await.unwrap();
    let s = server(&llm, settings).await;
    let reply = s.post("/v1/chat/completions", &[], durable_chat("Hi", false)).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(reply.json()["choices"][0]["message"]["content"], "Hello from a run.");
    let run = reply.header("x-polpo-run-id").unwrap().to_owned();
    let got = s.get(&format!("/v1/runs/{run}"), &[]).await.json();
    assert_eq!(got["data"]["sessionId"], reply.header("x-session-id").unwrap());
}

async fn a_plain_streaming_chat_can_be_steered_and_aborted_by_its_run_id(settings: Value) {
    let llm = FakeLlm::start([
        Turn::tool_calls(vec![("bash", gated_append("go", "x"))]),
        Turn::text("Steered."),
        Turn::tool_calls(vec![("bash", json!({"command": "sleep 60"}))]),
    ])
    .await
    .unwrap();
    let s = server(&llm, settings).await;
    let plain = |text: &str| json!({"agent": "coder", "stream": true, "messages": [{"role": "user", "content": text}]});
    let response = s.open(reqwest::Method::POST, "/v1/chat/completions", &[], Some(plain("Build it"))).await;
    let run = response.headers()["x-polpo-run-id"].to_str().unwrap().to_owned();
    let mut frames = Frames::new(response);
    while frames.next().await.unwrap().json()["choices"][0]["tool_call"]["state"] != "calling" {}
    let body = json!({"id": "p1", "mode": "steer", "content": "Keep it small."});
    assert_eq!(s.post(&format!("/v1/runs/{run}/steer"), &[], body.clone()).await.json()["data"]["accepted"], true);
    assert_eq!(s.post(&format!("/v1/runs/{run}/steer"), &[], body).await.json()["data"]["duplicate"], true);
    std::fs::write(s.dir.path().join("go"), "").unwrap();
    frames.rest(EVENTUALLY).await;
    assert_eq!(user_messages(&llm.requests()[1].body), ["Build it", "Keep it small."]);
    // Not durable: there is no stored run to read.
    assert_eq!(s.get(&format!("/v1/runs/{run}"), &[]).await.status, 404);

    let response = s.open(reqwest::Method::POST, "/v1/chat/completions", &[], Some(plain("Wait"))).await;
    let run = response.headers()["x-polpo-run-id"].to_str().unwrap().to_owned();
    let mut frames = Frames::new(response);
    while frames.next().await.unwrap().json()["choices"][0]["tool_call"]["state"] != "calling" {}
    assert_eq!(s.post(&format!("/v1/runs/{run}/abort"), &[], json!({})).await.status, 200);
    let rest = tokio::time::timeout(Duration::from_secs(1), frames.rest(EVENTUALLY))
        .await
        .expect("the stream ends within 1 s of the abort");
    let error = rest.iter().rev().find_map(|f| serde_json::from_str::<Value>(&f.data).ok()).unwrap();
    assert_eq!(error["error"]["code"], "aborted");
}

fn user_messages(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect()
}

async fn only_paused_runs_are_reconciled(settings: Value) {
    let llm = FakeLlm::start([Turn::text("Hi.")]).await.unwrap();
    let s = server(&llm, settings).await;
    let body = json!({"key": "run/x/turn/1/call/0/ab", "outcome": "applied"});
    let missing = s.post("/v1/runs/nope/reconcile", &[], body.clone()).await;
    assert_eq!((missing.status, missing.json()["code"].as_str()), (404, Some("run_not_found")));
    let reply = s.post("/v1/chat/completions", &[], durable_chat("Hi", false)).await;
    let run = reply.header("x-polpo-run-id").unwrap().to_owned();
    let done = s.post(&format!("/api/v1/runs/{run}/reconcile"), &[], body).await;
    assert_eq!((done.status, done.json()["code"].as_str()), (409, Some("run_not_active")));
    let bad = s.post(&format!("/v1/runs/{run}/reconcile"), &[], json!({"key": "k", "outcome": "maybe"})).await;
    assert_eq!(bad.status, 400);
}

/// A bash call that creates `started` (so the test knows the write is under way), then waits
/// for `gate` and appends `line` to `log.txt`.
fn started_gated_append(started: &str, gate: &str, line: &str) -> Value {
    json!({"command": format!("touch {started}; while [ ! -f {gate} ]; do sleep 0.02; done; echo {line} >> log.txt")})
}

/// Wait until the workspace file `name` exists (a tool wrote it).
async fn written(s: &Server, name: &str) {
    let path = s.dir.path().join(name);
    tokio::time::timeout(EVENTUALLY, async {
        while !path.exists() {
            tokio::task::yield_now().await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{name} is never written"));
}

/// The `type` of each run event frame.
fn types(frames: &[Frame]) -> Vec<String> {
    frames.iter().map(|f| f.json()["type"].as_str().unwrap().to_owned()).collect()
}

/// A follower attached to the events route before a run pauses stays on the same connection
/// through the pause and the reconciliation, and sees the resumed run finish. The pause is a
/// real one: the first server stops (hands the run over) in the middle of a write, and the
/// second, taking the run over, cannot know whether the write happened.
async fn a_follower_sees_a_paused_run_through_its_reconciliation_to_the_end(settings: Value) {
    let llm = FakeLlm::start([
        Turn::tool_calls(vec![("bash", started_gated_append("started", "go", "x"))]),
        Turn::text("Reconciled and done."),
    ])
    .await
    .unwrap();
    let first = server(&llm, settings).await;
    let response =
        first.open(reqwest::Method::POST, "/v1/chat/completions", &[], Some(durable_chat("Append x", true))).await;
    let run = response.headers()["x-polpo-run-id"].to_str().unwrap().to_owned();
    written(&first, "started").await;
    let second = first.beside(&llm).await;
    let mut follower = second.stream(&format!("/v1/runs/{run}/events"), &[]).await;

    first.state.runs.shutdown().await;
    // Taken over now rather than at the second server's next recovery pass.
    second.state.runs.recover().await.unwrap();
    let paused = follower.until(EVENTUALLY, |f| f.json()["type"] == "run.paused").await;
    let pause = paused.last().unwrap().json();
    assert_eq!(pause["data"]["code"], "effect_unconfirmed", "{:?}", types(&paused));
    assert!(types(&paused).contains(&"run.released".to_owned()), "{:?}", types(&paused));

    let key = pause["data"]["detail"]["key"].as_str().unwrap();
    let reply = second
        .post(
            &format!("/v1/runs/{run}/reconcile"),
            &[],
            json!({"key": key, "outcome": "applied", "result": "appended"}),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    let rest = follower.rest(EVENTUALLY).await;
    let after = types(&rest);
    assert_eq!(after.first().map(String::as_str), Some("run.reconciled"), "{after:?}");
    assert!(after.contains(&"run.resumed".to_owned()), "{after:?}");
    let last = rest.last().unwrap().json();
    assert_eq!(
        (last["type"].as_str(), last["data"]["content"].as_str()),
        (Some("run.completed"), Some("Reconciled and done."))
    );
    let seqs: Vec<u64> = paused.iter().chain(&rest).map(|f| f.id.unwrap()).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "one connection, every event once");
    assert!(!first.dir.path().join("log.txt").exists(), "the uncertain write was not repeated");
}

/// A durable chat cut short because its server stops (its run handed over) does not pass for
/// an answer: the stream ends with a `run_handed_over` error naming the run and no `[DONE]`;
/// a non-streaming one gets 503 with the code and the run, and its `Idempotency-Key` stays
/// taken, so a retry cannot start a second run while the first goes on elsewhere.
async fn a_chat_whose_server_stops_is_told_its_run_was_handed_over(settings: Value) {
    let llm = FakeLlm::start([
        Turn::tool_calls(vec![("bash", started_gated_append("streamed", "go", "a"))]),
        Turn::tool_calls(vec![("bash", started_gated_append("waited", "go", "b"))]),
    ])
    .await
    .unwrap();
    let s = server(&llm, settings).await;
    let response =
        s.open(reqwest::Method::POST, "/v1/chat/completions", &[], Some(durable_chat("Append a", true))).await;
    let streamed_run = response.headers()["x-polpo-run-id"].to_str().unwrap().to_owned();
    let streamed = Frames::new(response);
    written(&s, "streamed").await;
    let key = [("idempotency-key", "handover-1".to_owned())];
    let waited = tokio::spawn({
        let (http, url) = (s.http.clone(), s.url.clone());
        async move {
            http.post(format!("{url}/v1/chat/completions"))
                .header("idempotency-key", "handover-1")
                .json(&durable_chat("Append b", false))
                .send()
                .await
                .unwrap()
        }
    });
    written(&s, "waited").await;

    s.state.runs.shutdown().await;
    let frames = streamed.rest(EVENTUALLY).await;
    assert!(frames.iter().all(|f| f.data != "[DONE]"), "a cut answer has no [DONE]: {frames:?}");
    let error = frames.last().unwrap().json();
    assert_eq!(error["error"]["code"], "run_handed_over", "{error}");
    assert_eq!(error["error"]["run_id"], streamed_run.as_str());
    assert!(
        error["error"]["message"].as_str().unwrap().contains(&format!("/v1/runs/{streamed_run}/events")),
        "{error}"
    );
    assert_eq!(error["choices"][0]["finish_reason"], Value::Null, "not finished: {error}");

    let reply = waited.await.unwrap();
    assert_eq!(reply.status(), 503);
    let run = reply.headers()["x-polpo-run-id"].to_str().unwrap().to_owned();
    assert_eq!(reply.headers()["x-should-retry"], "false");
    let body: Value = reply.json().await.unwrap();
    assert_eq!(
        (body["error"]["code"].as_str(), body["error"]["run_id"].as_str()),
        (Some("run_handed_over"), Some(run.as_str())),
        "{body}"
    );
    let retry =
        s.open(reqwest::Method::POST, "/v1/chat/completions", &key, Some(durable_chat("Append b", false))).await;
    assert_eq!(retry.status(), 409, "the key stays taken while the run goes on");

    for run in [streamed_run, run] {
        let got = s.get(&format!("/v1/runs/{run}"), &[]).await.json();
        assert_eq!(got["data"]["status"], "running", "handed over, not ended: {got}");
    }
    assert_eq!(llm.requests().len(), 2, "no second run");
}

async fn the_workers_route_and_health_show_the_server_holding_a_running_run(settings: Value) {
    let kind = settings["storage"].as_str().unwrap().to_owned();
    let llm =
        FakeLlm::start([Turn::tool_calls(vec![("bash", gated_append("go", "x"))]), Turn::text("Done.")]).await.unwrap();
    let s = server(&llm, settings).await;
    assert_eq!(s.get("/api/v1/workers", &[]).await.json()["data"], json!([]), "no run, no worker");

    let response = s.open(reqwest::Method::POST, "/v1/chat/completions", &[], Some(durable_chat("Build", true))).await;
    let mut frames = Frames::new(response);
    while frames.next().await.unwrap().json()["choices"][0]["tool_call"]["state"] != "calling" {}

    let health = s.get("/api/v1/health", &[]).await.json();
    let worker = health["data"]["worker"]["id"].as_str().unwrap().to_owned();
    assert!(worker.starts_with("polpo-"), "{health}");
    assert_eq!(health["data"]["worker"]["leases"], 1, "{health}");
    assert_eq!(health["data"]["store"], json!({"kind": kind, "ok": true}), "{health}");
    let workers = s.get("/v1/workers", &[]).await.json();
    let listed = workers["data"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "{workers}");
    assert_eq!((listed[0]["id"].as_str(), listed[0]["runs"].as_u64()), (Some(worker.as_str()), Some(1)), "{workers}");
    assert!(listed[0]["leaseExpiresAt"].is_string(), "{workers}");

    std::fs::write(s.dir.path().join("go"), "").unwrap();
    assert_eq!(frames.rest(EVENTUALLY).await.last().unwrap().data, "[DONE]");
}

#[tokio::test]
async fn the_workers_route_is_refused_to_a_client_key() {
    let llm = FakeLlm::start([]).await.unwrap();
    let s = Server::start_tweaked(
        &llm,
        Some("root"),
        |d| drop(support::default_project(d)),
        |state| state.keys = ApiKeys::load(Some("root"), &[ApiKeyEntry::Plain("client".into())]).0,
    )
    .await;
    for path in ["/api/v1/workers", "/v1/workers"] {
        let r = s.get(path, &[("authorization", "Bearer client")]).await;
        assert_eq!((r.status, r.json()["code"].clone()), (403, json!("forbidden")), "{path}: {}", r.text);
        let r = s.get(path, &[("authorization", "Bearer root")]).await;
        assert_eq!((r.status, r.json()["data"].clone()), (200, json!([])), "{path}: {}", r.text);
    }
}

macro_rules! on_backends {
    ($($name:ident),* $(,)?) => {
        mod file {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() { super::with_backend("file", super::$name).await })*
        }
        mod postgres {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() { super::with_backend("postgres", super::$name).await })*
        }
        mod sqlite {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() { super::with_backend("sqlite", super::$name).await })*
        }
    };
}

on_backends!(
    a_client_that_loses_the_stream_reconnects_and_misses_nothing,
    steering_over_http_is_delivered_once_at_the_next_boundary,
    abort_over_http_ends_the_run_within_a_second,
    a_non_streaming_durable_completion_answers_from_its_run,
    only_paused_runs_are_reconciled,
    a_plain_streaming_chat_can_be_steered_and_aborted_by_its_run_id,
    a_chat_whose_server_stops_is_told_its_run_was_handed_over,
    the_workers_route_and_health_show_the_server_holding_a_running_run,
);

/// Two servers over one store: not the file store, which admits one process.
macro_rules! on_shared_backends {
    ($($name:ident),* $(,)?) => {
        mod shared_postgres {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() { super::with_backend("postgres", super::$name).await })*
        }
        mod shared_sqlite {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() { super::with_backend("sqlite", super::$name).await })*
        }
    };
}

on_shared_backends!(a_follower_sees_a_paused_run_through_its_reconciliation_to_the_end);
