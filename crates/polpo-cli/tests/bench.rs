//! `polpo bench`: the real binary runs the read-a-file scenario against its own zero-latency
//! model through the real server, and prints the figures users compare. No timing thresholds:
//! the figures are the product, their size depends on the machine.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output, Stdio};

const FIELDS: [&str; 7] = ["p50_ms", "p99_ms", "runs_per_s", "peak_rss_kb", "rss_growth_kb", "cold_ms", "errors"];

fn bench(cwd: &Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_polpo"))
        .arg("bench")
        .args(["--runs", "20", "--concurrency", "4", "--duration", "1"])
        .args(extra)
        .current_dir(cwd)
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Every file under `dir`, with its size, to see that the bench wrote nothing there.
fn tree(dir: &Path) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                out.push((entry.path().display().to_string(), meta.len()));
            }
        }
    }
    out.sort();
    out
}

fn figures(out: &Output) -> serde_json::Map<String, Value> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed: {stdout}\n{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "--json prints exactly one line: {stdout}");
    let Value::Object(map) = serde_json::from_str::<Value>(lines[0]).unwrap() else {
        panic!("not an object: {stdout}")
    };
    map
}

fn assert_sound(map: &serde_json::Map<String, Value>) {
    assert_fields(map, &[]);
}

/// The documented fields and `extra` ones, exactly, with figures that were really measured.
fn assert_fields(map: &serde_json::Map<String, Value>, extra: &[&str]) {
    let mut keys: Vec<&str> = map.keys().map(String::as_str).collect();
    keys.sort_unstable();
    let mut expected = [FIELDS.as_slice(), extra].concat();
    expected.sort_unstable();
    assert_eq!(keys, expected, "exactly the documented fields: {map:?}");
    assert_eq!(map["errors"], 0, "{map:?}");
    assert!(map["runs_per_s"].as_f64().unwrap() > 0.0, "{map:?}");
    for field in ["p50_ms", "p99_ms", "cold_ms"] {
        assert!(map[field].as_f64().unwrap() > 0.0, "{field} is measured: {map:?}");
    }
    assert!(map["p99_ms"].as_f64().unwrap() >= map["p50_ms"].as_f64().unwrap(), "{map:?}");
    assert!(map["peak_rss_kb"].as_u64().unwrap() > 0, "{map:?}");
    assert!(map["rss_growth_kb"].is_i64(), "{map:?}");
}

#[test]
fn json_has_exactly_the_figures_and_no_run_fails_on_the_file_store() {
    let dir = tempfile::tempdir().unwrap();
    assert_sound(&figures(&bench(dir.path(), &["--json"])));
}

#[test]
fn sqlite_store_and_a_project_whose_store_is_never_touched() {
    // Run inside a real project: its own store and files stay exactly as they were.
    let dir = tempfile::tempdir().unwrap();
    let polpo = dir.path().join(".polpo");
    std::fs::create_dir_all(polpo.join("agents").join("helper")).unwrap();
    std::fs::write(
        polpo.join("project.json"),
        r#"{"schemaVersion": 2, "project": "mine", "settings": {"storage": "sqlite"}}"#,
    )
    .unwrap();
    std::fs::write(polpo.join("agents").join("helper").join("agent.json"), r#"{"model": "openai/gpt-4o"}"#).unwrap();
    let before = tree(dir.path());
    assert_sound(&figures(&bench(dir.path(), &["--json", "--store", "sqlite"])));
    assert_eq!(tree(dir.path()), before, "the bench wrote into the user's project");
}

#[test]
fn stored_sessions_are_in_the_store_the_cold_start_opens() {
    // The bench fills its store first, then starts cold on it and pages the session list through
    // the server; the bench itself fails when the page does not show the stored sessions.
    for store in ["file", "sqlite"] {
        let dir = tempfile::tempdir().unwrap();
        let map = figures(&bench(dir.path(), &["--json", "--store", store, "--stored-sessions", "45"]));
        assert_fields(&map, &["stored_sessions", "page_ms"]);
        assert_eq!(map["stored_sessions"], 45, "{map:?}");
        assert!(map["page_ms"].as_f64().unwrap() > 0.0, "{map:?}");
    }
    let dir = tempfile::tempdir().unwrap();
    let table = bench(dir.path(), &["--stored-sessions", "3"]);
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(table.contains("cold start to first run (3 stored sessions)"), "{table}");
    assert!(table.contains("first page of 20 sessions"), "{table}");
}

#[test]
fn unstored_runs_write_no_session() {
    // `store: false` runs leave nothing: the page after the cold start holds only the stored
    // sessions (the bench fails when it finds another count).
    let dir = tempfile::tempdir().unwrap();
    let map = figures(&bench(dir.path(), &["--json", "--unstored", "--stored-sessions", "5"]));
    assert_fields(&map, &["stored_sessions", "page_ms"]);
    let table = bench(dir.path(), &["--unstored"]);
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(table.contains("store: false (nothing written)"), "{table}");
}

#[test]
fn the_table_names_every_figure_and_bad_counts_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = bench(dir.path(), &[]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{table}\n{}", String::from_utf8_lossy(&out.stderr));
    for label in ["per run", "per model turn", "runs/s", "peak RSS", "RSS growth", "cold start", "errors"] {
        assert!(table.contains(label), "{label} missing from:\n{table}");
    }
    assert!(table.contains("10 tool schemas per call"), "{table}");

    let refused = Command::new(env!("CARGO_BIN_EXE_polpo")).args(["bench", "--runs", "0"]).output().unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("invalid_argument"));
}
