//! Several `polpo serve` processes on one PostgreSQL behave as one (issue 21, items 4–6),
//! against the real binary and the real database: a run started on server A is steered and
//! aborted through server B while server C streams its journal, complete and gap-free, and
//! shows A's live events with the ids B resumes from; and a
//! server paused (SIGSTOP) past its lease while another took its run over writes nothing to
//! the run's journal or its effect ledger once it is let go again (SIGCONT).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use polpo_testkit::{FakeLlm, Turn};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use support::{Frame, RunEvents, ServerProcess, builder_project, on_postgres, start_builder_run};

/// Leases lapse after 1 s, so a paused server's run is taken over quickly.
const LEASE_MS: &str = "1000";

/// A `bash` call that appends `line` to log.txt, then waits (bounded, 60 s) until the test
/// creates the file `gate`: the run stays in this call until the test lets it go.
fn gated(line: &str, gate: &str) -> Turn {
    let command = format!("echo {line} >> log.txt; for i in $(seq 3000); do [ -f {gate} ] && break; sleep 0.02; done");
    Turn::tool_calls(vec![("bash", json!({"command": command}))])
}

/// `GET /api/v1/events` (the live feed) on one server: (id, event name, data) per event.
struct Feed {
    response: reqwest::Response,
    buffer: String,
}

impl Feed {
    async fn open(url: &str, last_event_id: Option<u64>) -> Self {
        let mut req = reqwest::Client::new().get(format!("{url}/api/v1/events?filter=tool:*"));
        if let Some(id) = last_event_id {
            req = req.header("last-event-id", id.to_string());
        }
        let response = req.send().await.unwrap();
        assert_eq!(response.status(), 200);
        Self { response, buffer: String::new() }
    }

    /// The next event of run `run` (30 s at most).
    async fn next_of(&mut self, run: &str) -> (u64, String, Value) {
        let next = async {
            loop {
                if let Some(end) = self.buffer.find("\n\n") {
                    let raw: String = self.buffer.drain(..end + 2).collect();
                    let field =
                        |name: &str| raw.lines().find_map(|l| l.strip_prefix(name)).map(|v| v.trim().to_owned());
                    if let (Some(id), Some(event), Some(data)) = (field("id:"), field("event:"), field("data:")) {
                        let data: Value = serde_json::from_str(&data).unwrap();
                        if data["runId"] == run {
                            return (id.parse().unwrap(), event, data);
                        }
                    }
                    continue;
                }
                let chunk = self.response.chunk().await.unwrap().expect("the feed stays open");
                self.buffer.push_str(&String::from_utf8_lossy(&chunk));
            }
        };
        tokio::time::timeout(Duration::from_secs(30), next).await.expect("an event of the run within 30 s")
    }
}

/// Read `events` into `seen` until a frame of type `until` (30 s at most).
async fn read_until(events: &mut RunEvents, seen: &mut Vec<Frame>, until: &str) {
    tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(frame) = events.next().await {
            let done = frame.1["type"] == until;
            seen.push(frame);
            if done {
                return;
            }
        }
        panic!("the stream ended before {until}");
    })
    .await
    .unwrap_or_else(|_| panic!("no {until} within 30 s; saw {:?}", types(seen)));
}

fn types(seen: &[Frame]) -> Vec<String> {
    seen.iter().map(|(_, e)| e["type"].as_str().unwrap_or_default().to_owned()).collect()
}

async fn post(url: &str, body: Value) -> (u16, Value) {
    let response = reqwest::Client::new().post(url).json(&body).send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

/// Wait until `path` exists (the effect of a tool call the test watches for).
async fn exists(path: &Path) {
    tokio::time::timeout(Duration::from_secs(30), async {
        while !path.exists() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{} never appeared", path.display()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_on_a_is_steered_and_aborted_through_b_and_streamed_whole_from_c() {
    on_postgres(|settings| async move {
        polpo_llm::install_crypto_provider();
        let llm =
            FakeLlm::start([gated("one", "gate1"), gated("two", "gate2"), Turn::text("never asked")]).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        builder_project(dir.path(), settings);
        let base = llm.base_url();
        let env =
            [("OPENAI_BASE_URL", base.as_str()), ("OPENAI_API_KEY", "sk-upstream"), ("POLPO_RUN_LEASE_MS", "15000")];
        let a = ServerProcess::start("serve", dir.path(), &[], &env);
        let b = ServerProcess::start("serve", dir.path(), &[], &env);
        let c = ServerProcess::start("serve", dir.path(), &[], &env);

        let mut feed_on_c = Feed::open(&c.url, None).await;
        let (_, run) = start_builder_run(&a.url, "Build it").await;
        let mut stream = RunEvents::open(&c.url, &run, None).await;
        let mut seen = Vec::new();
        read_until(&mut stream, &mut seen, "tool.started").await;

        // C's live feed shows what A does, and a client resumes it on B with the same id.
        let (id, event, data) = feed_on_c.next_of(&run).await;
        assert_eq!((event.as_str(), data["tool"].as_str()), ("tool:started", Some("bash")), "{data}");
        let mut feed_on_b = Feed::open(&b.url, Some(id - 1)).await;
        assert_eq!(feed_on_b.next_of(&run).await, (id, event, data), "one id for one event on every server");

        // Steering through B reaches the run executing on A: accepted once, then a duplicate.
        let steer = json!({"id": "s-1", "mode": "steer", "content": "Also paint it blue."});
        let (status, body) = post(&format!("{}/v1/runs/{run}/steer", b.url), steer.clone()).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!((body["data"]["accepted"].clone(), body["data"]["duplicate"].clone()), (json!(true), json!(false)));
        let (status, again) = post(&format!("{}/v1/runs/{run}/steer", b.url), steer).await;
        assert_eq!((status, again["data"]["duplicate"].clone()), (200, json!(true)), "{again}");
        read_until(&mut stream, &mut seen, "run.steering.queued").await;

        // Let the first call finish: the next model call carries the steering message.
        std::fs::write(dir.path().join("gate1"), "").unwrap();
        read_until(&mut stream, &mut seen, "run.steering.delivered").await;
        read_until(&mut stream, &mut seen, "tool.started").await;
        let second_call = serde_json::to_string(&llm.requests()[1].body).unwrap();
        assert!(second_call.contains("Also paint it blue."), "{second_call}");

        // Abort through B while A runs the second call.
        let (status, body) = post(&format!("{}/v1/runs/{run}/abort", b.url), json!({"reason": "enough"})).await;
        assert_eq!(status, 200, "{body}");
        read_until(&mut stream, &mut seen, "run.cancelled").await;
        assert!(stream.next().await.is_none(), "the stream ends after the terminal event");

        let seqs: Vec<u64> = seen.iter().map(|(s, _)| *s).collect();
        assert_eq!(seqs, (1..=seen.len() as u64).collect::<Vec<_>>(), "C's stream has no gaps or duplicates");
        let kinds = types(&seen);
        assert_eq!(kinds.first().map(String::as_str), Some("run.accepted"), "{kinds:?}");
        assert_eq!(kinds.iter().filter(|t| *t == "run.steering.queued").count(), 1, "{kinds:?}");
        assert!(kinds.contains(&"run.cancelling".to_owned()), "{kinds:?}");
        assert_eq!(llm.requests().len(), 2, "the model is not asked again after the abort");

        // The journal as stored is what C streamed, and the run is stored aborted.
        let mut replay = RunEvents::open(&b.url, &run, Some(0)).await;
        let mut stored = Vec::new();
        read_until(&mut replay, &mut stored, "run.cancelled").await;
        assert_eq!(stored, seen);
        let got: Value = reqwest::get(format!("{}/v1/runs/{run}", c.url)).await.unwrap().json().await.unwrap();
        assert_eq!(got["data"]["status"], "aborted", "{got}");

        // A finished run takes no steering from any server.
        let late = json!({"id": "s-2", "mode": "steer", "content": "too late"});
        let (status, body) = post(&format!("{}/v1/runs/{run}/steer", c.url), late).await;
        assert_eq!((status, body["code"].as_str()), (409, Some("run_not_active")), "{body}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_paused_past_its_lease_writes_nothing_once_it_wakes() {
    on_postgres(|settings| async move {
        polpo_llm::install_crypto_provider();
        let llm = FakeLlm::start([gated("one", "gate"), Turn::text("never asked")]).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        builder_project(dir.path(), settings);
        let base = llm.base_url();
        let env =
            [("OPENAI_BASE_URL", base.as_str()), ("OPENAI_API_KEY", "sk-upstream"), ("POLPO_RUN_LEASE_MS", LEASE_MS)];
        let mut a = ServerProcess::start("serve", dir.path(), &[], &env);
        let b = ServerProcess::start("serve", dir.path(), &[], &env);

        let (_, run) = start_builder_run(&a.url, "Append one").await;
        let mut stream = RunEvents::open(&b.url, &run, None).await;
        let mut seen = Vec::new();
        read_until(&mut stream, &mut seen, "tool.started").await;
        exists(&dir.path().join("log.txt")).await;

        // A stops (as in a long GC pause or a partition) while its write call is under way;
        // its lease lapses and B takes the run over. The call's effect is unconfirmed, so B
        // pauses the run for a person instead of repeating it.
        let pid = a.child.id().to_string();
        assert!(std::process::Command::new("kill").args(["-STOP", &pid]).status().unwrap().success());
        read_until(&mut stream, &mut seen, "run.paused").await;
        let kinds = types(&seen);
        assert!(kinds.contains(&"run.resumed".to_owned()), "B took the run over: {kinds:?}");
        let paused: Value = reqwest::get(format!("{}/v1/runs/{run}", b.url)).await.unwrap().json().await.unwrap();
        assert_eq!(paused["data"]["status"], "paused", "{paused}");

        // A wakes up, still believing it executes the run, with its write call finished, and
        // is then stopped gracefully, which hands its runs over (`run.released`, a checkpoint):
        // the store refuses the call's result and every journal entry and checkpoint. Once it
        // has exited, everything it tried to write was tried.
        std::fs::write(dir.path().join("gate"), "").unwrap();
        assert!(std::process::Command::new("kill").args(["-CONT", &pid]).status().unwrap().success());
        a.terminate();

        // The journal is exactly what it was when B paused the run.
        let mut replay = RunEvents::open(&b.url, &run, Some(0)).await;
        let mut stored = Vec::new();
        read_until(&mut replay, &mut stored, "run.paused").await;
        assert_eq!(stored, seen, "nothing was journaled after the takeover");
        let after: Value = reqwest::get(format!("{}/v1/runs/{run}", b.url)).await.unwrap().json().await.unwrap();
        assert_eq!(after["data"]["status"], "paused", "{after}");
        assert_eq!(after["data"]["lastSeq"], json!(seen.len()), "{after}");
        assert_eq!(std::fs::read_to_string(dir.path().join("log.txt")).unwrap(), "one\n");
        assert_eq!(llm.requests().len(), 1, "neither server asked the model again");

        // The effect is still unconfirmed (A's result was refused), so a person can decide it
        // on B, and the run goes on there to its end.
        let key = seen.last().unwrap().1["data"]["detail"]["key"].as_str().unwrap().to_owned();
        let decision = json!({"key": key, "outcome": "applied", "result": "appended one"});
        let (status, body) = post(&format!("{}/v1/runs/{run}/reconcile", b.url), decision).await;
        assert_eq!(status, 200, "{body}");
        let mut rest = Vec::new();
        read_until(&mut stream, &mut rest, "run.completed").await;
        assert_eq!(rest.first().map(|(s, _)| *s), Some(seen.len() as u64 + 1), "the stream goes on without a gap");
        assert_eq!(llm.requests().len(), 2);
    })
    .await;
}

/// Mean and median of `samples` in milliseconds.
fn summary(samples: &mut [Duration]) -> (f64, f64) {
    samples.sort();
    let mean = samples.iter().map(Duration::as_secs_f64).sum::<f64>() / samples.len() as f64 * 1000.0;
    (mean, samples[samples.len() / 2].as_secs_f64() * 1000.0)
}

/// Benchmark (ignored; `cargo test -p polpo-cli --test many_servers -- --ignored --nocapture`):
/// the latency a steering message adds when it is sent to another server than the one
/// executing the run (written to PostgreSQL, delivered by NOTIFY, settled once durable in the
/// run's checkpoint) against sending it to the executing server itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark"]
async fn bench_cross_server_steering_latency() {
    on_postgres(|settings| async move {
        polpo_llm::install_crypto_provider();
        let llm = FakeLlm::start([gated("one", "gate"), Turn::text("Done.")]).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        builder_project(dir.path(), settings);
        let base = llm.base_url();
        let env =
            [("OPENAI_BASE_URL", base.as_str()), ("OPENAI_API_KEY", "sk-upstream"), ("POLPO_RUN_LEASE_MS", "15000")];
        let a = ServerProcess::start("serve", dir.path(), &[], &env);
        let b = ServerProcess::start("serve", dir.path(), &[], &env);
        let (_, run) = start_builder_run(&a.url, "Build it").await;
        let mut stream = RunEvents::open(&a.url, &run, None).await;
        read_until(&mut stream, &mut Vec::new(), "tool.started").await;
        let client = reqwest::Client::new();
        for (name, url) in [("same server", &a.url), ("other server", &b.url)] {
            let mut samples = Vec::new();
            for i in 0..100 {
                let body = json!({"id": format!("{name}-{i}"), "mode": "follow_up", "content": "more"});
                let started = std::time::Instant::now();
                let response = client.post(format!("{url}/v1/runs/{run}/steer")).json(&body).send().await.unwrap();
                assert_eq!(response.status(), 200);
                samples.push(started.elapsed());
            }
            let (mean, median) = summary(&mut samples);
            println!("steer via {name}: mean {mean:.2} ms, median {median:.2} ms (100 messages)");
        }
        std::fs::write(dir.path().join("gate"), "").unwrap();
    })
    .await;
}

/// Benchmark (ignored): durable runs per second with 64 clients at once, spread over three
/// servers on one PostgreSQL against all on one server. Each run is one model call (the fake
/// model answers at once), journaled and leased like any durable run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark"]
async fn bench_runs_per_second_one_vs_three_servers() {
    const CLIENTS: usize = 64;
    const RUNS: usize = 512;
    for servers in [1usize, 3] {
        on_postgres(|settings| async move {
            polpo_llm::install_crypto_provider();
            let llm = FakeLlm::start_repeating([Turn::text("ok")]).await.unwrap();
            let dir = tempfile::tempdir().unwrap();
            builder_project(dir.path(), settings);
            let base = llm.base_url();
            // A long lease keeps recovery passes (every half lease) out of the measurement.
            let env =
                [("OPENAI_BASE_URL", base.as_str()), ("OPENAI_API_KEY", "sk-upstream"), ("POLPO_RUN_LEASE_MS", "600000")];
            let procs: Vec<ServerProcess> =
                (0..servers).map(|_| ServerProcess::start("serve", dir.path(), &[], &env)).collect();
            let urls: Arc<Vec<String>> = Arc::new(procs.iter().map(|p| p.url.clone()).collect());
            let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let started = std::time::Instant::now();
            let mut clients = Vec::new();
            for _ in 0..CLIENTS {
                let (urls, next) = (urls.clone(), next.clone());
                clients.push(tokio::spawn(async move {
                    let client = reqwest::Client::new();
                    loop {
                        let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if n >= RUNS {
                            return;
                        }
                        let body = json!({"agent": "builder", "messages": [{"role": "user", "content": "hi"}], "polpo": {"delivery": {"onDisconnect": "continue"}}});
                        let url = &urls[n % urls.len()];
                        let response = client.post(format!("{url}/v1/chat/completions")).json(&body).send().await.unwrap();
                        assert_eq!(response.status(), 200);
                        let answer: Value = response.json().await.unwrap();
                        assert_eq!(answer["choices"][0]["message"]["content"], "ok");
                    }
                }));
            }
            for c in clients {
                c.await.unwrap();
            }
            let elapsed = started.elapsed().as_secs_f64();
            println!("{servers} server(s), {CLIENTS} clients: {RUNS} durable runs in {elapsed:.2} s = {:.1} runs/s", RUNS as f64 / elapsed);
            drop(procs);
        })
        .await;
    }
}

/// One live server per `--worker-id` on a shared PostgreSQL: a second `polpo serve` with the
/// id of a live one refuses to start (`worker_id_in_use`, nothing served) while the first's
/// heartbeat is fresh; once the first is SIGKILLed and its last heartbeat is older than the
/// lease time, a new server takes the id over; a clean stop gives the id back at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_id_is_held_by_one_live_server() {
    on_postgres(|settings| async move {
        polpo_llm::install_crypto_provider();
        let dir = tempfile::tempdir().unwrap();
        builder_project(dir.path(), settings.clone());
        let env = [("POLPO_RUN_LEASE_MS", LEASE_MS)];
        let start = |id: &str| ServerProcess::start("serve", dir.path(), &["--worker-id", id], &env);
        let refusal = |id: &str| {
            let root = dir.path().to_str().unwrap();
            let out = support::polpo(&["serve", "--project", root, "--port", "0", "--worker-id", id])
                .env("POLPO_RUN_LEASE_MS", LEASE_MS)
                .output()
                .unwrap();
            assert!(!out.status.success(), "a second server with worker id {id} started");
            assert!(!String::from_utf8_lossy(&out.stdout).contains("polpo listening"));
            String::from_utf8_lossy(&out.stderr).into_owned()
        };
        let mut first = start("web-1");
        let stderr = refusal("web-1");
        assert!(stderr.contains("worker_id_in_use") && stderr.contains("`web-1`"), "{stderr}");
        let mut other = start("web-2");

        // web-1 dies without a word; its id is free once its last heartbeat is a lease old.
        first.child.kill().unwrap();
        first.child.wait().unwrap();
        let url = settings["databaseUrl"].as_str().unwrap();
        let clock = Arc::new(polpo_store::SystemClock);
        let store =
            polpo_store::open_store(polpo_store::StoreKind::Postgres, dir.path(), Some(url), clock).await.unwrap();
        let held = store.records.get_record("workers", "web-1").await.unwrap().expect("web-1's heartbeat record");
        let last: chrono::DateTime<chrono::Utc> = held.value["heartbeatAt"].as_str().unwrap().parse().unwrap();
        let stale = last + chrono::Duration::milliseconds(LEASE_MS.parse().unwrap());
        // The heartbeat lapsing is what is tested: wait for that instant, not for a guess.
        if let Ok(left) = (stale - chrono::Utc::now()).to_std() {
            tokio::time::sleep(left).await;
        }
        let mut successor = start("web-1");

        // A clean stop releases the id: the next server with it starts at once.
        other.terminate();
        let mut again = start("web-2");
        let health: Value = reqwest::get(format!("{}/api/v1/health", again.url)).await.unwrap().json().await.unwrap();
        assert_eq!(health["data"]["worker"]["id"], "web-2", "{health}");
        successor.terminate();
        again.terminate();
    })
    .await;
}
