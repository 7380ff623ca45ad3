//! `polpo runs …` against a real `polpo serve` and the fake LLM: following a run to its end,
//! steering and aborting it, errors with their stable codes, and a graceful stop (SIGTERM)
//! that hands a run over to the next server at once, followed across the restart by
//! `polpo runs tail`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use polpo_testkit::{FakeLlm, Turn};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;
use support::{ServerProcess, builder_project, free_port, polpo, start_builder_run};

/// Generous bound for "eventually", never a timing assertion.
const EVENTUALLY: Duration = Duration::from_secs(60);

fn append(line: &str) -> Turn {
    Turn::tool_calls(vec![("bash", json!({"command": format!("echo {line} >> log.txt")}))])
}

/// A server for `llm` over a fresh file-store project, with extra `env`.
fn serve(dir: &Path, llm: &FakeLlm, env: &[(&str, &str)]) -> ServerProcess {
    builder_project(dir, json!({"storage": "file"}));
    let base = llm.base_url();
    let mut all = vec![("OPENAI_BASE_URL", base.as_str()), ("OPENAI_API_KEY", "sk-upstream")];
    all.extend_from_slice(env);
    ServerProcess::start("serve", dir, &[], &all)
}

/// `polpo runs <args…> --url <url>` to its exit, off the async runtime.
async fn runs(url: &str, args: &[&str]) -> Output {
    let mut cmd = polpo(&["runs"]);
    cmd.args(args).args(["--url", url]);
    tokio::time::timeout(EVENTUALLY, tokio::task::spawn_blocking(move || cmd.output().unwrap()))
        .await
        .expect("polpo runs exits")
        .unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Wait until the fake LLM has received `n` requests (the run is in its `n`th model call).
async fn model_calls(llm: &FakeLlm, n: usize) {
    tokio::time::timeout(EVENTUALLY, async {
        while llm.requests().len() < n {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the run reaches the model call");
}

#[tokio::test(flavor = "multi_thread")]
async fn tail_prints_every_event_through_to_completion_and_exits_0() {
    let llm = FakeLlm::start([append("one"), Turn::text("All done.")]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path(), &llm, &[]);
    let (_, run) = start_builder_run(&server.url, "Build it").await;

    let out = runs(&server.url, &["tail", &run]).await;
    assert!(out.status.success(), "{}\n{}", stdout(&out), stderr(&out));
    let lines: Vec<String> = stdout(&out).lines().map(str::to_owned).collect();
    let seqs: Vec<u64> = lines.iter().map(|l| l.split_whitespace().next().unwrap().parse().unwrap()).collect();
    assert_eq!(
        seqs,
        (1..=lines.len() as u64).collect::<Vec<_>>(),
        "one line per event, in order:\n{}",
        lines.join("\n")
    );
    assert!(lines[0].contains("run.accepted"), "{}", lines[0]);
    assert!(
        lines.iter().any(|l| l.contains(r#"tool.started bash {"command":"echo one >> log.txt"}"#)),
        "{}",
        lines.join("\n")
    );
    assert!(lines.last().unwrap().ends_with(r#"run.completed "All done.""#), "{}", lines.join("\n"));

    // `--json` prints the raw frames; `--after` starts after the given event.
    let out = runs(&server.url, &["tail", &run, "--json", "--after", &(lines.len() - 1).to_string()]).await;
    assert!(out.status.success());
    let frames: Vec<Value> = stdout(&out).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(frames.len(), 1);
    assert_eq!(
        (frames[0]["type"].as_str(), frames[0]["data"]["content"].as_str()),
        (Some("run.completed"), Some("All done."))
    );
    assert_eq!(frames[0]["runId"], run);

    let got = runs(&server.url, &["get", &run]).await;
    assert!(got.status.success());
    assert!(stdout(&got).contains("status   completed"), "{}", stdout(&got));
    let got = runs(&server.url, &["get", &run, "--json"]).await;
    assert_eq!(serde_json::from_str::<Value>(&stdout(&got)).unwrap()["lastSeq"], lines.len());
}

#[tokio::test(flavor = "multi_thread")]
async fn steering_a_running_run_from_the_terminal_reaches_the_next_model_call_once() {
    let gated = json!({"command": "while [ ! -f go ]; do sleep 0.02; done; echo x >> log.txt"});
    let llm =
        FakeLlm::start([Turn::tool_calls(vec![("bash", gated)]), Turn::text("Switched to PostgreSQL.")]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path(), &llm, &[]);
    let (_, run) = start_builder_run(&server.url, "Build it").await;

    // The run waits on the gate, so it is running while it is steered.
    let out = runs(&server.url, &["steer", &run, "Use PostgreSQL.", "--message-id", "m1"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("accepted"), "{}", stdout(&out));
    let again = runs(&server.url, &["steer", &run, "Use PostgreSQL.", "--message-id", "m1"]).await;
    assert!(again.status.success());
    assert!(stdout(&again).starts_with("already received"), "{}", stdout(&again));
    std::fs::write(dir.path().join("go"), "").unwrap();

    let tail = runs(&server.url, &["tail", &run]).await;
    assert!(tail.status.success(), "{}", stderr(&tail));
    assert!(stdout(&tail).contains("run.steering.delivered"), "{}", stdout(&tail));
    let second = &llm.requests()[1].body["messages"];
    assert_eq!(second.as_array().unwrap().iter().filter(|m| m["content"] == "Use PostgreSQL.").count(), 1, "{second}");

    // Finished: steering is refused with the server's code.
    let late = runs(&server.url, &["steer", &run, "more", "--follow-up"]).await;
    assert!(!late.status.success());
    assert!(stderr(&late).contains("run_not_active"), "{}", stderr(&late));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_aborted_run_ends_tail_with_a_non_zero_exit() {
    let llm = FakeLlm::start([Turn::tool_calls(vec![("bash", json!({"command": "sleep 60"}))]), Turn::text("never")])
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path(), &llm, &[]);
    let (_, run) = start_builder_run(&server.url, "Wait").await;
    let abort = runs(&server.url, &["abort", &run, "--reason", "changed my mind"]).await;
    assert!(abort.status.success(), "{}", stderr(&abort));

    let tail = runs(&server.url, &["tail", &run]).await;
    assert_eq!(tail.status.code(), Some(1), "{}", stdout(&tail));
    assert!(stdout(&tail).lines().last().unwrap().contains("run.cancelled"), "{}", stdout(&tail));
    assert!(stderr(&tail).contains("was cancelled"), "{}", stderr(&tail));
}

#[tokio::test(flavor = "multi_thread")]
async fn errors_exit_non_zero_with_the_servers_code() {
    let llm = FakeLlm::start([]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path(), &llm, &[("POLPO_API_KEY", "sk-polpo")]);

    // No key: the server's `unauthorized`.
    let out = runs(&server.url, &["get", "nope"]).await;
    assert!(!out.status.success());
    assert!(stderr(&out).contains("unauthorized"), "{}", stderr(&out));

    for args in [
        &["get", "nope"][..],
        &["tail", "nope"],
        &["steer", "nope", "hi"],
        &["abort", "nope"],
        &["reconcile", "nope", "applied", "--key", "k"],
    ] {
        let mut cmd = polpo(&["runs"]);
        cmd.args(args).args(["--url", &server.url]).env("POLPO_API_KEY", "sk-polpo");
        let out = tokio::task::spawn_blocking(move || cmd.output().unwrap()).await.unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(stderr(&out).contains("run_not_found"), "{args:?}: {}", stderr(&out));
        assert!(stdout(&out).is_empty(), "{args:?}");
    }

    let nobody = format!("http://127.0.0.1:{}", free_port());
    let out = runs(&nobody, &["get", "r1"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("server_unreachable"), "{}", stderr(&out));
    assert_eq!(llm.requests().len(), 0);
}

/// Stopped (`stop`: SIGKILL or SIGTERM) while a write runs, the run pauses on the restarted
/// server, since nobody knows whether the write finished: `tail` exits 2 and says how to go
/// on, `reconcile` (the key found from the pause) resumes it, and it completes without
/// repeating the write.
async fn a_run_paused_by_a_stop_is_reconciled_from_the_terminal(stop: fn(ServerProcess)) {
    let command = "echo one >> log.txt; for i in $(seq 300); do [ -f gate ] && break; sleep 0.02; done";
    let llm = FakeLlm::start([
        Turn::tool_calls(vec![("bash", json!({"command": command}))]),
        Turn::text("Confirmed and finished."),
    ])
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    builder_project(dir.path(), json!({"storage": "file"}));
    let base = llm.base_url();
    let env = [("OPENAI_BASE_URL", base.as_str()), ("OPENAI_API_KEY", "sk-upstream"), ("POLPO_RUN_LEASE_MS", "1000")];
    let first = ServerProcess::start("serve", dir.path(), &[], &env);
    let (_, run) = start_builder_run(&first.url, "Append one").await;
    let log = dir.path().join("log.txt");
    tokio::time::timeout(EVENTUALLY, async {
        while std::fs::read_to_string(&log).unwrap_or_default() != "one\n" {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the write happens");
    stop(first); // between the effect and its recorded result

    let second = ServerProcess::start("serve", dir.path(), &[], &env);
    let paused = runs(&second.url, &["tail", &run]).await;
    assert_eq!(paused.status.code(), Some(2), "{}\n{}", stdout(&paused), stderr(&paused));
    assert!(stdout(&paused).lines().last().unwrap().contains("run.paused effect_unconfirmed"), "{}", stdout(&paused));
    assert!(stderr(&paused).contains("polpo runs reconcile"), "{}", stderr(&paused));

    let reconciled = runs(&second.url, &["reconcile", &run, "applied", "--result", "appended"]).await;
    assert!(reconciled.status.success(), "{}", stderr(&reconciled));
    let done = runs(&second.url, &["tail", &run]).await;
    assert!(done.status.success(), "{}", stderr(&done));
    assert!(
        stdout(&done).lines().last().unwrap().ends_with(r#"run.completed "Confirmed and finished.""#),
        "{}",
        stdout(&done)
    );
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "one\n", "the write was not repeated");
    assert_eq!(
        llm.requests().last().unwrap().body["messages"].as_array().unwrap().last().unwrap()["content"],
        "appended"
    );

    // Nothing left to reconcile: the server's code for a run that is not paused.
    let again = runs(&second.url, &["reconcile", &run, "not-applied"]).await;
    assert_eq!(again.status.code(), Some(1));
    assert!(stderr(&again).contains("run_not_active"), "{}", stderr(&again));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_paused_by_a_crash_is_reconciled_from_the_terminal() {
    a_run_paused_by_a_stop_is_reconciled_from_the_terminal(drop).await; // SIGKILL
}

#[tokio::test(flavor = "multi_thread")]
async fn a_write_cut_short_by_sigterm_is_not_repeated_by_the_next_server() {
    a_run_paused_by_a_stop_is_reconciled_from_the_terminal(|mut server| server.terminate()).await;
}

/// SIGTERM in the middle of a model call: the server checkpoints the run and gives its lease
/// back before exiting, so a new server whose leases would otherwise keep it waiting for 10
/// minutes takes the run over at once and completes it. `polpo runs tail`, attached before
/// the stop, reconnects to the new server with `Last-Event-ID` and prints every event once.
async fn sigterm_hands_the_run_over_to_the_next_server_at_once(settings: Value) {
    let llm = FakeLlm::start([
        append("one"),
        Turn::text("lost with the stop").stall_after(1),
        append("two"),
        Turn::text("Handed over."),
    ])
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    builder_project(dir.path(), settings);
    let base = llm.base_url();
    let env = [("OPENAI_BASE_URL", base.as_str()), ("OPENAI_API_KEY", "sk-upstream"), ("POLPO_RUN_LEASE_MS", "600000")];
    let port = free_port();
    let mut first = ServerProcess::start_on("serve", dir.path(), port, &[], &env);
    let (_, run) = start_builder_run(&first.url, "Build it").await;
    let mut tail = polpo(&["runs", "tail", &run, "--json", "--url", &first.url])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, lines) = std::sync::mpsc::channel();
    let tail_stdout = tail.stdout.take().unwrap();
    std::thread::spawn(move || BufReader::new(tail_stdout).lines().map_while(Result::ok).try_for_each(|l| tx.send(l)));
    // Its first event printed: tail is attached to the first server.
    let first_line =
        tokio::task::block_in_place(|| lines.recv_timeout(EVENTUALLY)).expect("tail prints the first event");

    model_calls(&llm, 2).await; // the second model call hangs: the run is mid-turn
    first.terminate();
    let _second = ServerProcess::start_on("serve", dir.path(), port, &[], &env);

    let out = tokio::time::timeout(EVENTUALLY, tokio::task::spawn_blocking(move || tail.wait_with_output().unwrap()))
        .await
        .expect("tail follows the run to its end")
        .unwrap();
    let frames: Vec<Value> =
        std::iter::once(first_line).chain(lines.iter()).map(|l| serde_json::from_str(&l).unwrap()).collect();
    let types: Vec<&str> = frames.iter().map(|f| f["type"].as_str().unwrap()).collect();
    assert!(out.status.success(), "{types:?}\n{}", stderr(&out));
    let seqs: Vec<u64> = frames.iter().map(|f| f["sequence"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=frames.len() as u64).collect::<Vec<_>>(), "every event once, across the restart");
    let released = types.iter().position(|t| *t == "run.released").expect("the first server released the run");
    assert_eq!(types[released + 1], "run.resumed", "{types:?}");
    assert_eq!(frames.last().unwrap()["data"]["content"], "Handed over.");
    assert!(stderr(&out).contains("reconnecting"), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(dir.path().join("log.txt")).unwrap(), "one\ntwo\n", "each write once");
    assert_eq!(llm.requests().len(), 4);
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_hands_the_run_over_on_the_file_store() {
    sigterm_hands_the_run_over_to_the_next_server_at_once(json!({"storage": "file"})).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_hands_the_run_over_on_postgres() {
    support::on_postgres(sigterm_hands_the_run_over_to_the_next_server_at_once).await;
}
