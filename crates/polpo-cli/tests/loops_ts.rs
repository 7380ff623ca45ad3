//! Static TypeScript loops from the command line: `polpo loops compile` prints (or writes) the
//! canonical JSON of a `.ts` loop without running it, and `polpo validate` reports the problems
//! of a `.ts` loop in a project at their line and column.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::Value;
use std::path::Path;
use std::process::Output;
use support::polpo;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../polpo-loop-ts/tests/fixtures");

fn run(cwd: &Path, args: &[&str]) -> Output {
    polpo(args).current_dir(cwd).stdin(std::process::Stdio::null()).output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn hand_written() -> Value {
    serde_json::from_str(&std::fs::read_to_string(format!("{FIXTURES}/router-flow.json")).unwrap()).unwrap()
}

#[test]
fn loops_compile_prints_the_json_of_the_seed_router_flow_or_writes_it_with_out() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("router-flow.ts");
    std::fs::copy(format!("{FIXTURES}/router-flow.ts"), &source).unwrap();
    let printed = run(dir.path(), &["loops", "compile", "router-flow.ts"]);
    assert!(printed.status.success(), "{}", text(&printed.stderr));
    assert_eq!(serde_json::from_slice::<Value>(&printed.stdout).unwrap(), hand_written());

    let written = run(dir.path(), &["loops", "compile", "router-flow.ts", "--out", "router-flow.json"]);
    assert!(written.status.success(), "{}", text(&written.stderr));
    assert!(written.stdout.is_empty());
    let file = std::fs::read(dir.path().join("router-flow.json")).unwrap();
    assert_eq!(file, printed.stdout, "the file holds what stdout showed");
}

#[test]
fn loops_compile_refuses_code_with_the_line_and_column_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let source = "import { defineProjectLoop } from \"@polpo-ai/core/loop-code\";\n\
                  export default defineProjectLoop({\n  start: require(\"os\").hostname(),\n  steps: {},\n});\n";
    std::fs::write(dir.path().join("evil.ts"), source).unwrap();
    let out = run(dir.path(), &["loops", "compile", "evil.ts", "--out", "evil.json"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with("evil.ts:3:10: loop_ts_unsupported: `require(\"os\").hostname(…)` is not a loop DSL helper"),
        "{stderr}"
    );
    assert!(!dir.path().join("evil.json").exists());
    // A loop that compiles but breaks a graph rule is refused at the line of the bad edge.
    let graph = "export default { start: \"a\", steps: {\n  a: { systemPrompt: \"hi\", next: \"ghost\" } } };\n";
    std::fs::write(dir.path().join("flow.ts"), graph).unwrap();
    let out = run(dir.path(), &["loops", "compile", "flow.ts"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).starts_with("flow.ts:2:28:/steps/a/next: unknown_step"), "{}", text(&out.stderr));
}

#[test]
fn validate_and_loops_show_read_ts_loops_of_the_project() {
    let dir = tempfile::tempdir().unwrap();
    assert!(run(dir.path(), &["create", "demo", "--yes"]).status.success());
    let root = dir.path().join("demo");
    let loops = root.join(".polpo/loops");
    std::fs::copy(format!("{FIXTURES}/router-flow.ts"), loops.join("router-flow.ts")).unwrap();
    let shown = run(&root, &["loops", "show", "router-flow"]);
    assert!(shown.status.success(), "{}", text(&shown.stderr));
    assert_eq!(serde_json::from_slice::<Value>(&shown.stdout).unwrap(), hand_written());

    std::fs::write(loops.join("bad.ts"), "export default { start: `${process.env.HOME}`, steps: {} };\n").unwrap();
    let out = run(&root, &["validate"]);
    assert_eq!(out.status.code(), Some(1));
    let all = text(&out.stdout) + &text(&out.stderr);
    assert!(all.contains(".polpo/loops/bad.ts:1:25: loop_ts_unsupported: a template literal with `${…}`"), "{all}");
    // Tool names are checked against the built-in tools, and shown at the `.ts` line too.
    assert!(all.contains(".polpo/loops/router-flow.ts:32:7:/steps/audit/tool: unknown_tool"), "{all}");
}

#[test]
fn polpo_dev_reloads_when_a_ts_loop_changes_and_reports_its_problems() {
    let dir = tempfile::tempdir().unwrap();
    assert!(run(dir.path(), &["create", "demo", "--yes"]).status.success());
    let root = dir.path().join("demo");
    let mut server = support::ServerProcess::start("dev", &root, &[], &[("OPENAI_API_KEY", "sk")]);
    let flow = root.join(".polpo/loops/flow.ts");
    std::fs::write(&flow, "export default { start: process.env.START, steps: {} };\n").unwrap();
    server.wait_for(".polpo/loops/flow.ts:1:25: loop_ts_unsupported");
    server.wait_for("still serving the previous version");
    std::fs::write(&flow, "export default { start: \"a\", steps: { a: { systemPrompt: \"hi\" } } };\n").unwrap();
    server.wait_for("reloaded the project");
}
