//! The attacks of issue #13 against an in-process server over real HTTP: a foreign page's
//! requests, foreign Host names, one client reading another's sessions and runs, key guessing,
//! an empty full replace, look-alike ids, nonsense sampling parameters, non-JSON errors, and
//! connection floods. (`crates/polpo-cli/tests/security_http.rs` replays the browser attacks
//! and slow clients against the real `polpo serve`.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use polpo_core::config::ApiKeyEntry;
use polpo_server::auth::{ApiKeys, hashed_form};
use polpo_server::serve::{Limits, run};
use polpo_testkit::{FakeLlm, Turn};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;
use support::{Server, default_project};

/// Longest a test waits for something that should happen at once.
const EVENTUALLY: Duration = Duration::from_secs(20);

fn ask(text: &str) -> Value {
    json!({"agent": "writer", "messages": [{"role": "user", "content": text}]})
}

fn bearer(key: &str) -> (&'static str, String) {
    ("authorization", format!("Bearer {key}"))
}

/// A server with an admin key (`POLPO_API_KEY`), client keys `key-a` and `key-b`, and an
/// `apiKeys` admin entry `boss` (stored as its digest).
async fn keyed(llm: &FakeLlm) -> Server {
    Server::start_tweaked(
        llm,
        Some("root"),
        |d| drop(default_project(d)),
        |state| {
            let entries = [
                ApiKeyEntry::Plain("key-a".into()),
                ApiKeyEntry::Plain(hashed_form("key-b")),
                ApiKeyEntry::Detailed { key: hashed_form("boss"), admin: true },
            ];
            state.keys = ApiKeys::load(Some("root"), &entries).0;
        },
    )
    .await
}

/// Send raw bytes on a new connection and read until the server closes it (bounded).
fn raw(url: &str, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(url.trim_start_matches("http://")).unwrap();
    stream.set_read_timeout(Some(EVENTUALLY)).unwrap();
    stream.write_all(request).unwrap();
    let mut out = Vec::new();
    let _ = stream.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_key_sees_only_its_own_sessions_and_runs_and_an_admin_sees_all() {
    let llm =
        FakeLlm::start([Turn::text("For A."), Turn::text("Durable for A."), Turn::text("A again.")]).await.unwrap();
    let s = keyed(&llm).await;
    let (a, b, root, boss) = (bearer("key-a"), bearer("key-b"), bearer("root"), bearer("boss"));
    let r = s.post("/v1/chat/completions", &[(a.0, &a.1)], ask("secret plans")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let session = r.header("x-session-id").unwrap().to_owned();
    let mut durable = ask("more plans");
    durable["polpo"] = json!({"delivery": {"onDisconnect": "continue"}});
    let r = s.post("/v1/chat/completions", &[(a.0, &a.1)], durable).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let run = r.header("x-polpo-run-id").unwrap().to_owned();
    let calls = llm.requests().len();

    // B: A's session and run do not exist, whatever the route.
    let path = format!("/api/v1/chat/sessions/{session}");
    let got = s.get(&path, &[(b.0, &b.1)]).await;
    assert_eq!((got.status, got.json()["code"].as_str()), (404, Some("session_not_found")));
    assert_eq!(s.patch(&path, &[(b.0, &b.1)], json!({"title": "mine now"})).await.status, 404);
    assert_eq!(s.delete(&path, &[(b.0, &b.1)]).await.status, 404);
    let listed = s.get("/api/v1/chat/sessions", &[(b.0, &b.1)]).await.json();
    assert_eq!(listed["data"]["sessions"], json!([]), "B lists none of A's sessions");
    let cont =
        s.post("/v1/chat/completions", &[(b.0, &b.1), ("x-session-id", &session)], ask("continue A's chat")).await;
    assert_eq!((cont.status, cont.json()["error"]["code"].as_str()), (404, Some("session_not_found")));
    assert_eq!(llm.requests().len(), calls, "continuing another client's session never reaches the model");
    for route in [format!("/v1/runs/{run}"), format!("/api/v1/runs/{run}/events")] {
        let r = s.get(&route, &[(b.0, &b.1)]).await;
        assert_eq!((r.status, r.json()["code"].as_str()), (404, Some("run_not_found")), "{route}");
    }
    let abort = s.post(&format!("/v1/runs/{run}/abort"), &[(b.0, &b.1)], json!({})).await;
    assert_eq!(abort.status, 404, "{}", abort.text);

    // A and the admins see them; A's listing holds its two sessions.
    for key in [&a, &root, &boss] {
        assert_eq!(s.get(&path, &[(key.0, &key.1)]).await.status, 200, "{}", key.1);
        assert_eq!(s.get(&format!("/v1/runs/{run}"), &[(key.0, &key.1)]).await.status, 200, "{}", key.1);
    }
    assert_eq!(
        s.get("/api/v1/chat/sessions", &[(a.0, &a.1)]).await.json()["data"]["sessions"].as_array().unwrap().len(),
        2
    );
    let cont = s.post("/v1/chat/completions", &[(a.0, &a.1), ("x-session-id", &session)], ask("and then?")).await;
    assert_eq!(cont.status, 200, "{}", cont.text);
    // The stored owner is a key id, never the key or the digest apiKeys holds.
    let stored = s.state.runtime.store().sessions.get_session(&session).await.unwrap().unwrap();
    let owner = stored.owner.unwrap();
    assert!(
        owner.starts_with("key_") && !owner.contains("key-a") && !hashed_form("key-a").contains(&owner[4..]),
        "{owner}"
    );
    // The live feed shows every client's activity: admins only.
    assert_eq!(s.get("/api/v1/events", &[(b.0, &b.1)]).await.status, 403);
}

#[tokio::test(flavor = "multi_thread")]
async fn only_admin_keys_edit_the_project_decide_approvals_and_operate_tasks() {
    let llm = FakeLlm::start([Turn::text("unused")]).await.unwrap();
    let s = keyed(&llm).await;
    let (a, root) = (bearer("key-a"), bearer("root"));
    let file = s.dir.path().join(".polpo/agents/writer/agent.json");
    let before = std::fs::read(&file).unwrap();
    let widen = json!({"config": {"allowedTools": ["bash"]}});
    let attempts = [
        s.post(
            "/api/v1/agents",
            &[(a.0, &a.1)],
            json!({"id": "pwn", "instructions": "x", "config": {"model": "openai/gpt-4o-mini"}}),
        )
        .await,
        s.patch("/v1/agents/writer", &[(a.0, &a.1)], widen.clone()).await,
        s.put("/api/v1/agents/writer", &[(a.0, &a.1)], json!({"config": {"model": "openai/gpt-4o-mini"}})).await,
        s.delete("/api/v1/agents/writer", &[(a.0, &a.1)]).await,
        s.post("/api/v1/agents/teams", &[(a.0, &a.1)], json!({"name": "crew"})).await,
        // Assigning a skill grants its tools: the same edit rights.
        s.post("/api/v1/skills/frontend-design/assign", &[(a.0, &a.1)], json!({"agent": "writer"})).await,
        // Pausing a schedule rewrites its file; firing one runs its agent on the admin's terms.
        s.post("/api/v1/schedules/nightly/pause", &[(a.0, &a.1)], json!({"expectedRevision": 1})).await,
        s.post("/api/v1/schedules/nightly/trigger", &[(a.0, &a.1)], json!({"idempotencyKey": "k"})).await,
        // Creating, changing or deleting a schedule writes `.polpo/schedules/`.
        s.post("/api/v1/schedules", &[(a.0, &a.1)], json!({"id": "x"})).await,
        s.patch("/api/v1/schedules/nightly", &[(a.0, &a.1)], json!({"status": "paused"})).await,
        s.delete("/v1/schedules/nightly", &[(a.0, &a.1)]).await,
        // A client must not approve a gate, its own loop run's included.
        s.post("/api/v1/approvals/some-approval/approve", &[(a.0, &a.1)], json!({})).await,
        s.post("/v1/loop-runs/some-run/approve", &[(a.0, &a.1)], json!({})).await,
        s.post("/api/v1/loop-runs/some-run/reject", &[(a.0, &a.1)], json!({"feedback": "no"})).await,
        // Tasks and missions are the project's, not a client's: a client would read others'.
        s.post("/api/v1/tasks", &[(a.0, &a.1)], json!({"title": "t", "description": "d", "assignTo": "writer"})).await,
        s.get("/api/v1/tasks", &[(a.0, &a.1)]).await,
        s.get("/v1/missions/m1", &[(a.0, &a.1)]).await,
    ];
    for r in attempts {
        assert_eq!(
            (r.status, r.json()["code"].as_str().or(r.json()["error"]["code"].as_str())),
            (403, Some("forbidden")),
            "{}",
            r.text
        );
    }
    assert_eq!(std::fs::read(&file).unwrap(), before, "nothing was written");
    assert!(!s.dir.path().join(".polpo/agents/pwn").exists());
    // Client keys still read agents; an admin key edits them.
    assert_eq!(s.get("/api/v1/agents", &[(a.0, &a.1)]).await.status, 200);
    let r =
        s.patch("/api/v1/agents/writer", &[(root.0, &root.1)], json!({"config": {"role": "edited by an admin"}})).await;
    assert_eq!(r.status, 200, "{}", r.text);
}

#[tokio::test(flavor = "multi_thread")]
async fn guessing_keys_is_rate_limited_per_address() {
    let llm = FakeLlm::start([Turn::text("unused")]).await.unwrap();
    let s = keyed(&llm).await;
    for i in 0..10 {
        let wrong = bearer(&format!("guess-{i}"));
        assert_eq!(s.get("/v1/models", &[(wrong.0, &wrong.1)]).await.status, 401, "guess {i}");
    }
    let wrong = bearer("guess-10");
    let r = s.get("/v1/models", &[(wrong.0, &wrong.1)]).await;
    assert_eq!((r.status, r.json()["error"]["code"].as_str()), (429, Some("too_many_requests")));
    assert!(r.header("retry-after").unwrap().parse::<u64>().unwrap() >= 1);
    // While the address is locked out even a right key waits: guessing it gains nothing.
    let right = bearer("key-a");
    assert_eq!(s.get("/v1/models", &[(right.0, &right.1)]).await.status, 429);
}

#[tokio::test]
async fn a_full_replace_without_a_model_is_refused_and_nothing_is_written() {
    let llm = FakeLlm::start([Turn::text("unused")]).await.unwrap();
    let s = Server::start(&llm).await;
    let file = s.dir.path().join(".polpo/agents/writer/agent.json");
    let before = std::fs::read_to_string(&file).unwrap();
    for body in [json!({}), json!({"config": {"role": "poet"}})] {
        let r = s.put("/api/v1/agents/writer", &[], body.clone()).await;
        assert_eq!(r.status, 400, "{body}: {}", r.text);
        let got = r.json();
        assert_eq!(got["code"], "invalid_config");
        assert_eq!(got["problems"][0]["pointer"], "/model", "{got}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), before, "nothing written for {body}");
    }
    let created = s.post("/api/v1/agents", &[], json!({"id": "modelless"})).await;
    assert_eq!((created.status, created.json()["code"].as_str()), (400, Some("invalid_config")));
    assert_eq!(s.get("/api/v1/agents/writer", &[]).await.json()["data"]["config"]["model"], "openai/fake-model");
}

#[tokio::test]
async fn ids_that_look_like_another_or_mix_scripts_are_refused() {
    let llm = FakeLlm::start([Turn::text("unused")]).await.unwrap();
    let s = Server::start(&llm).await;
    // "wrіter" with U+0456 CYRILLIC SMALL LETTER BYELORUSSIAN-UKRAINIAN I, "сoder" with U+0441
    // CYRILLIC SMALL LETTER ES, "wrıter" with U+0131 LATIN SMALL LETTER DOTLESS I.
    for id in ["wr\u{0456}ter", "\u{0441}oder", "wr\u{0131}ter"] {
        let r = s.post("/api/v1/agents", &[], json!({"id": id, "model": "openai/fake-model"})).await;
        assert_eq!((r.status, r.json()["code"].as_str()), (400, Some("id_confusable")), "{id}: {}", r.text);
        assert!(!s.dir.path().join(".polpo/agents").join(id).exists(), "{id} was written");
    }
    assert_eq!(s.post("/api/v1/agents/teams", &[], json!({"name": "ops"})).await.status, 201);
    let r = s.post("/api/v1/agents/teams", &[], json!({"name": "\u{03bf}ps"})).await;
    assert_eq!((r.status, r.json()["code"].as_str()), (400, Some("id_confusable")), "Greek omicron: {}", r.text);
    assert_eq!(s.post("/api/v1/agents", &[], json!({"id": "editor", "model": "openai/fake-model"})).await.status, 201);
}

#[tokio::test]
async fn nonsense_sampling_parameters_are_invalid_value_naming_the_field() {
    let llm = FakeLlm::start([Turn::text("fine")]).await.unwrap();
    let s = Server::start(&llm).await;
    let cases = [
        ("max_tokens", json!(-1)),
        ("max_tokens", json!(0)),
        ("max_tokens", json!(1e30)),
        ("max_completion_tokens", json!("100")),
        ("temperature", json!("NaN")),
        ("temperature", json!(2.5)),
        ("temperature", json!(-0.1)),
        ("top_p", json!(1.5)),
    ];
    for (field, value) in cases {
        let mut body = ask("hi");
        body[field] = value.clone();
        let r = s.post("/v1/chat/completions", &[], body).await;
        assert_eq!(r.status, 400, "{field}={value}: {}", r.text);
        let error = &r.json()["error"];
        assert_eq!(error["code"], "invalid_value");
        assert!(error["message"].as_str().unwrap().contains(field), "{error}");
    }
    assert!(llm.requests().is_empty(), "no invalid request reached the model");
    let mut body = ask("hi");
    body["max_tokens"] = json!(256);
    body["temperature"] = json!(0.2);
    body["top_p"] = json!(1);
    assert_eq!(s.post("/v1/chat/completions", &[], body).await.status, 200);
}

#[tokio::test]
async fn every_error_is_the_json_envelope() {
    let llm = FakeLlm::start([Turn::text("unused")]).await.unwrap();
    let s = Server::start(&llm).await;
    let rest = |r: &support::Reply| r.json()["code"].as_str().map(str::to_owned);
    let r = s.get("/api/v1/runs/some-run/events?after=-1", &[]).await;
    assert_eq!((r.status, rest(&r).as_deref()), (400, Some("invalid_request")), "{}", r.text);
    let r = s.get("/api/v1/nowhere", &[]).await;
    assert_eq!((r.status, rest(&r).as_deref()), (404, Some("route_not_found")));
    let r = s.delete("/api/v1/agents/teams", &[]).await;
    assert_eq!((r.status, rest(&r).as_deref()), (405, Some("method_not_allowed")));
    assert!(r.header("allow").is_some(), "405 keeps its Allow header");
    // The OpenAI surface answers in OpenAI's envelope.
    let r = s.send(reqwest::Method::DELETE, "/v1/models", &[], None).await;
    assert_eq!((r.status, r.json()["error"]["code"].as_str()), (405, Some("method_not_allowed")));
    let bad_json = s
        .http
        .post(format!("{}/v1/chat/completions", s.url))
        .header("content-type", "application/json")
        .body("{\"messages\": [")
        .send()
        .await
        .unwrap();
    assert_eq!(bad_json.status(), 400);
    assert_eq!(bad_json.json::<Value>().await.unwrap()["error"]["code"], "invalid_request");
    let huge = vec![b' '; polpo_server::app::MAX_BODY_BYTES + 1];
    let r = s
        .http
        .post(format!("{}/api/v1/agents", s.url))
        .header("content-type", "application/json")
        .body(huge)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    assert_eq!(r.json::<Value>().await.unwrap()["code"], "payload_too_large");
}

#[tokio::test]
async fn foreign_pages_cannot_post_and_only_json_bodies_are_read() {
    let llm = FakeLlm::start([Turn::text("From the dashboard.")]).await.unwrap();
    let s = Server::start(&llm).await;
    let url = format!("{}/v1/chat/completions", s.url);
    let body = ask("rm -rf ~").to_string();
    let post = |origin: Option<&str>, content_type: &str, site: Option<&str>| {
        let mut req = s.http.post(&url).header("content-type", content_type).body(body.clone());
        if let Some(o) = origin {
            req = req.header("origin", o);
        }
        if let Some(site) = site {
            req = req.header("sec-fetch-site", site);
        }
        req.send()
    };
    let r = post(Some("http://evil.example"), "text/plain", None).await.unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["code"], "origin_not_allowed");
    let r = post(Some("http://evil.example"), "application/json", None).await.unwrap();
    assert_eq!(r.status(), 403, "a foreign origin is refused whatever it sends");
    let r = post(None, "application/json", Some("cross-site")).await.unwrap();
    assert_eq!(r.status(), 403);
    let r = post(None, "text/plain", None).await.unwrap();
    assert_eq!(r.status(), 415);
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["code"], "unsupported_media_type");
    let form = s
        .http
        .post(format!("{}/api/v1/agents", s.url))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("id=x")
        .send()
        .await
        .unwrap();
    assert_eq!(
        (form.status().as_u16(), form.json::<Value>().await.unwrap()["code"].clone()),
        (415, json!("unsupported_media_type"))
    );
    assert!(llm.requests().is_empty(), "no refused request reached the model");
    let read =
        s.http.get(format!("{}/api/v1/agents", s.url)).header("content-type", "text/plain").send().await.unwrap();
    assert_eq!(read.status(), 200, "reads are not judged by a content type they do not need");

    // The dashboard's own requests: same origin as the Host, JSON with a charset.
    let own = s.url.clone();
    let r = post(Some(&own), "application/json; charset=utf-8", Some("same-origin")).await.unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    // A listed dev origin may post too.
    assert_ne!(post(Some("http://localhost:5173"), "application/json", Some("same-site")).await.unwrap().status(), 403);
}

#[tokio::test]
async fn a_wildcard_origin_list_does_not_open_a_server_without_keys() {
    let llm = FakeLlm::start([Turn::text("unused")]).await.unwrap();
    let s =
        Server::start_tweaked(&llm, None, |d| drop(default_project(d)), |state| state.cors_origins = vec!["*".into()])
            .await;
    let r = s
        .http
        .post(format!("{}/v1/chat/completions", s.url))
        .header("origin", "http://evil.example")
        .json(&ask("hi"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert!(llm.requests().is_empty());
}

#[tokio::test]
async fn a_local_server_answers_local_host_names_only() {
    let llm = FakeLlm::start([Turn::text("unused")]).await.unwrap();
    let s = Server::start(&llm).await;
    let port = s.url.rsplit(':').next().unwrap().to_owned();
    for host in ["localhost", &format!("localhost:{port}"), &format!("[::1]:{port}")] {
        assert_eq!(s.get("/api/v1/chat/sessions", &[("host", host)]).await.status, 200, "{host}");
    }
    let r = s.get("/api/v1/chat/sessions", &[("host", &format!("attacker.example:{port}"))]).await;
    assert_eq!((r.status, r.json()["code"].as_str()), (421, Some("host_not_allowed")));
    // HTTP/1.0 has no Host: refused too.
    let answer = tokio::task::spawn_blocking({
        let url = s.url.clone();
        move || raw(&url, b"GET /api/v1/chat/sessions HTTP/1.0\r\n\r\n")
    })
    .await
    .unwrap();
    assert!(answer.starts_with("HTTP/1.0 421"), "{answer}");
}

#[tokio::test]
async fn browsers_may_send_authorization_from_allowed_origins() {
    let llm = FakeLlm::start([Turn::text("unused")]).await.unwrap();
    let s = Server::start(&llm).await;
    let r = s
        .http
        .request(reqwest::Method::OPTIONS, format!("{}/api/v1/agents", s.url))
        .header("origin", "http://localhost:5173")
        .header("access-control-request-method", "PUT")
        .header("access-control-request-headers", "authorization,content-type,idempotency-key")
        .send()
        .await
        .unwrap();
    let allowed = r.headers().get("access-control-allow-headers").unwrap().to_str().unwrap().to_ascii_lowercase();
    for header in polpo_server::app::ALLOWED_HEADERS {
        assert!(allowed.contains(header), "{header} missing from {allowed}");
    }
    assert!(!allowed.contains('*'));
}

#[tokio::test]
async fn one_address_cannot_take_every_connection() {
    let llm = FakeLlm::start([Turn::text("unused")]).await.unwrap();
    let s = Server::start(&llm).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let limits = Limits { header_read_timeout: EVENTUALLY, max_connections: 10, max_per_address: 2 };
    tokio::spawn(run(listener, polpo_server::router(s.state.clone()), limits, std::future::pending()));
    tokio::task::spawn_blocking(move || {
        // Two silent connections from 127.0.0.1 hold its share; a third from it is refused though
        // eight slots are free.
        let held = [TcpStream::connect(&addr).unwrap(), TcpStream::connect(&addr).unwrap()];
        let refused = raw(&addr, b"GET /api/v1/health HTTP/1.1\r\nhost: localhost\r\n\r\n");
        assert!(refused.starts_with("HTTP/1.1 503") && refused.contains("too_many_connections"), "{refused}");
        // Its share comes back when one of them closes.
        drop(held);
        let deadline = std::time::Instant::now() + EVENTUALLY;
        loop {
            let answer = raw(&addr, b"GET /api/v1/health HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n");
            if answer.starts_with("HTTP/1.1 200") {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "the address never got its share back: {answer}");
        }
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_body_that_never_finishes_arriving_is_cut_off() {
    let llm = FakeLlm::start([Turn::text("unused")]).await.unwrap();
    let s = Server::start_tweaked(
        &llm,
        None,
        |d| drop(default_project(d)),
        |state| {
            state.body_deadline = Duration::from_millis(300);
        },
    )
    .await;
    let url = s.url.clone();
    tokio::task::spawn_blocking(move || {
        // Headers promise 100 bytes; 10 arrive and the rest never does.
        let answer = raw(
            &url,
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"agent\": ",
        );
        assert!(answer.starts_with("HTTP/1.1 4"), "the request is answered with an error, not held open: {answer}");
        assert!(answer.contains("\"error\""), "in the JSON envelope: {answer}");
    })
    .await
    .unwrap();
    assert!(llm.requests().is_empty());
}

#[tokio::test]
async fn connections_beyond_the_cap_get_a_503_and_idle_ones_are_closed() {
    let llm = FakeLlm::start([Turn::text("unused")]).await.unwrap();
    let s = Server::start(&llm).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let limits = Limits { header_read_timeout: Duration::from_millis(300), max_connections: 1, max_per_address: 1 };
    tokio::spawn(run(listener, polpo_server::router(s.state.clone()), limits, std::future::pending()));
    tokio::task::spawn_blocking(move || {
        // The first connection takes the only slot; the second is answered 503 and closed.
        let mut first = TcpStream::connect(&addr).unwrap();
        let refused = raw(&addr, b"GET /api/v1/health HTTP/1.1\r\nhost: localhost\r\n\r\n");
        assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
        assert!(refused.contains("too_many_connections"), "{refused}");
        // The first, silent, is closed by the server at the header timeout, freeing the slot.
        first.set_read_timeout(Some(EVENTUALLY)).unwrap();
        assert_eq!(first.read(&mut [0u8; 64]).unwrap(), 0, "the server closed the silent connection");
        // An idle keep-alive connection is closed too once its request is answered.
        let mut kept = TcpStream::connect(&addr).unwrap();
        kept.set_read_timeout(Some(EVENTUALLY)).unwrap();
        kept.write_all(b"GET /api/v1/health HTTP/1.1\r\nhost: localhost\r\n\r\n").unwrap();
        let mut answer = Vec::new();
        let _ = kept.read_to_end(&mut answer);
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    })
    .await
    .unwrap();
}
