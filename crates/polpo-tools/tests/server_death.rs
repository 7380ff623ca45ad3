//! Commands die with the server that started them, even a server killed with SIGKILL (whose
//! own clean-up never runs) — with and without PID namespaces — but not with the thread that
//! spawned them: a blocking-pool thread retiring must not take a running command along.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{assert_no_survivors, dirs, live_processes_with, marker, wait_until};
use polpo_tools::sandbox::{CommandSpec, Program, run_command, spawn_service};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Set by the parent test: the marker the child's command carries.
const MARKER_ENV: &str = "POLPO_TEST_SERVER_DEATH_MARKER";

/// The "server": runs a long command (and a long service) until it is killed.
#[tokio::test]
#[ignore = "started by the tests below, in a child process they SIGKILL"]
async fn server_child() {
    let m = std::env::var(MARKER_ENV).expect("started by a parent test");
    let d = dirs();
    let mut service = CommandSpec::new(Program::Shell(format!("sleep 301.{m}")), &d.ws);
    service.timeout = Duration::from_secs(600);
    let _service = spawn_service(&service).unwrap();
    let mut spec = CommandSpec::new(Program::Shell(format!("sleep 300.{m} & sleep 302.{m}")), &d.ws);
    spec.timeout = Duration::from_secs(600);
    run_command(spec).await.unwrap();
    panic!("the command ended before the parent killed this process");
}

/// Start [`server_child`] (with `sandbox` as `POLPO_SANDBOX_FORCE_UNAVAILABLE`), wait until
/// its three commands run, SIGKILL it, and check that none of them is left.
fn killed_server_leaves_no_command(sandbox: &str) {
    let m = marker();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["server_child", "--exact", "--ignored", "--test-threads=1"])
        .env(MARKER_ENV, &m)
        .env("POLPO_SANDBOX_FORCE_UNAVAILABLE", sandbox)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let each_runs = || ["300", "301", "302"].iter().all(|n| !live_processes_with(&format!("{n}.{m}")).is_empty());
    let started = wait_until(Duration::from_secs(20), each_runs);
    let running = live_processes_with(&m);
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(started, "the child's commands start: {running:?}");
    assert_no_survivors(&m);
}

#[test]
fn a_server_killed_with_sigkill_takes_its_commands_along() {
    killed_server_leaves_no_command("");
}

#[test]
fn without_namespaces_a_killed_server_takes_its_commands_along_too() {
    killed_server_leaves_no_command("namespaces");
}

/// The thread that spawned a command exits (as a blocking-pool thread retires when idle): the
/// command goes on, and still ends when its caller stops it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_outlives_the_thread_that_spawned_it() {
    let d = dirs();
    let m = marker();
    let command = format!("while [ ! -f gate ]; do sleep 0.02; done; echo alive > out.txt; sleep 300.{m}");
    let spec = CommandSpec::new(Program::Shell(command), &d.ws);
    let runtime = tokio::runtime::Handle::current();
    let service = std::thread::spawn(move || {
        let _inside = runtime.enter();
        spawn_service(&spec).unwrap()
    })
    .join()
    .unwrap();
    std::fs::write(d.ws.join("gate"), "").unwrap();
    let out = d.ws.join("out.txt");
    assert!(wait_until(Duration::from_secs(10), || out.exists()), "the command was killed with its thread");
    assert!(!live_processes_with(&format!("300.{m}")).is_empty(), "it still runs");
    service.stop().await;
    assert_no_survivors(&m);
}
