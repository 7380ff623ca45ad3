//! Helpers shared by the integration tests: a temp workspace next to an "outside" directory,
//! a context confined to the workspace, calls through the real registry, and a look at the
//! process table.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use polpo_tools::{ToolContext, ToolError, ToolOutput, ToolRegistry};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A temp dir holding `ws/` (the workspace) and `outside/` (must stay unreachable).
pub struct Dirs {
    _root: tempfile::TempDir,
    pub ws: PathBuf,
    pub outside: PathBuf,
}

pub fn dirs() -> Dirs {
    let root = tempfile::tempdir().unwrap();
    let ws = root.path().join("ws");
    let outside = root.path().join("outside");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    Dirs { _root: root, ws, outside }
}

pub fn ctx(ws: &Path) -> ToolContext {
    ToolContext::new(ws)
}

pub async fn call(ctx: &ToolContext, tool: &str, args: serde_json::Value) -> Result<ToolOutput, ToolError> {
    let registry = ToolRegistry::system_tools();
    let tool = registry.get(tool).unwrap_or_else(|| panic!("no tool {tool}"));
    tool.call(ctx, args).await
}

pub fn code(result: Result<ToolOutput, ToolError>) -> String {
    match result {
        Ok(out) => panic!("expected an error, got {:?}", out.text),
        Err(err) => err.code,
    }
}

/// A marker unique to this test process and call, usable as a `sleep` argument (`300.<digits>`).
pub fn marker() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    format!("{}{}{}", std::process::id(), nanos, NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Live (non-zombie) processes whose command line contains `marker`.
pub fn live_processes_with(marker: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if !String::from_utf8_lossy(&cmdline).contains(marker) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // The state follows the parenthesised command name.
        let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next());
        if state != Some('Z') && state != Some('X') {
            found.push(pid);
        }
    }
    found
}

/// Waits (bounded) until `cond` holds; returns whether it did.
pub fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}

/// Asserts that no live process carries `marker`, allowing the kernel a moment to finish the
/// kills already sent.
pub fn assert_no_survivors(marker: &str) {
    let gone = wait_until(Duration::from_secs(10), || live_processes_with(marker).is_empty());
    assert!(gone, "processes survived: {:?}", live_processes_with(marker));
}

/// Runs the `#[ignore]`d test `name` of the current test binary in a child process with `env`
/// set, and fails unless it passed. For checks that need a process-wide setting (an environment
/// variable read once, a fault injected at start-up) without leaking it into the other tests.
pub fn run_child_test(name: &str, env: &[(&str, &str)]) {
    let mut command = std::process::Command::new(std::env::current_exe().unwrap());
    command.args([name, "--exact", "--ignored", "--test-threads=1"]);
    for (key, value) in env {
        command.env(key, value);
    }
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("1 passed"), "{stdout}");
}
