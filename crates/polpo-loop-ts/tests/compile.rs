//! `.ts` loops compile to the JSON a hand-written `.json` loop holds, and everything outside the
//! static subset is refused with a stable code at the line and column of the construct, without
//! running any of it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use polpo_core::config::Location;
use polpo_core::loops::{parse_loop, validate_loop};
use polpo_core::problem::Problem;
use polpo_loop_ts::{codes, compile, limits};
use serde_json::Value;

const FILE: &str = ".polpo/loops/flow.ts";
const HEADER: &str =
    "import { defineProjectLoop, agentStep, toolStep, when, bash } from \"@polpo-ai/core/loop-code\";\n";

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

fn json(name: &str) -> Value {
    serde_json::from_str(&fixture(name)).unwrap()
}

/// The problems of `source`, which must not compile.
fn refused(source: &str) -> Vec<Problem> {
    match compile(source, FILE) {
        Ok(compiled) => panic!("compiled, to {}:\n{source}", compiled.value),
        Err(problems) => problems,
    }
}

/// The source text from a problem's line and column on.
fn text_at<'a>(source: &'a str, problem: &Problem) -> &'a str {
    let (line, column) = (problem.line.expect("a line"), problem.column.expect("a column"));
    let text = source.lines().nth(line - 1).unwrap_or_default();
    let start = text.char_indices().nth(column - 1).map_or(text.len(), |(i, _)| i);
    &text[start..]
}

#[test]
fn the_seed_router_flow_compiles_to_the_hand_written_json() {
    let compiled = compile(&fixture("router-flow.ts"), ".polpo/loops/router-flow.ts").unwrap();
    let expected = json("router-flow.json");
    assert_eq!(compiled.value, expected);
    let at = Location::file(".polpo/loops/router-flow.ts");
    let config = compiled.config(&at).unwrap();
    assert_eq!(config, parse_loop(&expected, &at).unwrap());
    assert_eq!(validate_loop("router-flow", &config), Vec::new());
}

#[test]
fn every_helper_compiles_to_its_json_shape() {
    let compiled = compile(&fixture("governed.ts"), ".polpo/loops/governed.ts").unwrap();
    assert_eq!(compiled.value, json("governed.json"));
    compiled.config(&Location::file(".polpo/loops/governed.ts")).unwrap();
}

#[test]
fn a_plain_object_export_gets_the_contract_defaults_like_define_project_loop() {
    let compiled = compile("export default { start: 'a', steps: { a: { systemPrompt: 'hi' } } }", FILE).unwrap();
    let expected = serde_json::json!({"version": "1", "kind": "graph", "context": "shared", "start": "a",
        "steps": {"a": {"systemPrompt": "hi"}}});
    assert_eq!(compiled.value, expected);
}

#[test]
fn shape_problems_of_the_compiled_json_carry_the_line_of_the_ts_source() {
    let source = format!(
        "{HEADER}export default defineProjectLoop({{\n  start: \"a\",\n  steps: {{\n    a: toolStep({{ tool: \"read\", saveAz: \"x\" }}),\n  }},\n}});\n"
    );
    let compiled = compile(&source, FILE).unwrap();
    let problems = compiled.config(&Location::file(FILE)).unwrap_err();
    let unknown = problems.iter().find(|p| p.code == "unknown_field").expect("saveAz is unknown");
    assert_eq!(unknown.pointer.as_deref(), Some("/steps/a/saveAz"));
    assert_eq!((unknown.line, unknown.column), (Some(5), Some(33)));
    assert!(text_at(&source, unknown).starts_with("saveAz"), "{unknown}");
    assert!(unknown.to_string().starts_with(".polpo/loops/flow.ts:5:33:/steps/a/saveAz: unknown_field"), "{unknown}");
}

/// Inputs a hostile or careless author could write, each with the code it gets and the text
/// the reported line and column point at.
fn hostile(dir: &std::path::Path) -> Vec<(String, &'static str, &'static str)> {
    let marker = dir.join("pwned");
    let marker = marker.display();
    let loop_with = |prompt: &str| {
        format!(
            "{HEADER}export default defineProjectLoop({{\n  start: \"a\",\n  steps: {{ a: agentStep({{ systemPrompt: {prompt} }}) }},\n}});\n"
        )
    };
    vec![
        (loop_with("process.env.OPENAI_API_KEY"), codes::UNSUPPORTED, "process.env.OPENAI_API_KEY"),
        (loop_with(&format!("require(\"fs\").writeFileSync(\"{marker}\", \"x\")")), codes::UNSUPPORTED, "require("),
        (loop_with(&format!("await import(\"{marker}.mjs\")")), codes::UNSUPPORTED, "await import("),
        (loop_with("import(\"./evil.mjs\")"), codes::UNSUPPORTED, "import(\"./evil.mjs\")"),
        (loop_with("`hello ${globalThis.name}`"), codes::UNSUPPORTED, "`hello ${"),
        (loop_with("(() => \"hi\")()"), codes::UNSUPPORTED, "(() => \"hi\")()"),
        (loop_with("fetch(\"https://example.com\")"), codes::UNSUPPORTED, "fetch("),
        (loop_with("\"a\" + \"b\""), codes::UNSUPPORTED, "\"a\" + \"b\""),
        (loop_with(&format!("bash`touch {marker}`")), codes::UNSUPPORTED, "bash`touch"),
        (loop_with("new Function(\"return 1\")()"), codes::UNSUPPORTED, "new Function("),
        (loop_with("prompt"), codes::UNSUPPORTED, "prompt"),
        (
            format!("{HEADER}export default defineProjectLoop({{ start: \"a\", get steps() {{ return {{}} }} }});\n"),
            codes::UNSUPPORTED,
            "get steps()",
        ),
        (
            format!("{HEADER}export default defineProjectLoop({{ start: \"a\", steps() {{ return {{}} }} }});\n"),
            codes::UNSUPPORTED,
            "steps()",
        ),
        (
            format!("{HEADER}export default defineProjectLoop({{ ...globalThis.base, start: \"a\", steps: {{}} }});\n"),
            codes::UNSUPPORTED,
            "...globalThis",
        ),
        (
            format!("{HEADER}export default defineProjectLoop({{ [\"st\" + \"art\"]: \"a\", steps: {{}} }});\n"),
            codes::UNSUPPORTED,
            "[\"st\"",
        ),
        (
            format!(
                "{HEADER}export default defineProjectLoop({{ start: \"a\", steps: {{ a: agentStep(...[{{}}]) }} }});\n"
            ),
            codes::UNSUPPORTED,
            "...[{}]",
        ),
        (
            format!(
                "import {{ execSync }} from \"node:child_process\";\n{HEADER}export default {{ start: \"a\", steps: {{}} }};\n"
            ),
            codes::UNSUPPORTED,
            "\"node:child_process\"",
        ),
        (
            "import * as dsl from \"@polpo-ai/core/loop-code\";\nexport default dsl.defineProjectLoop({});\n"
                .to_owned(),
            codes::UNSUPPORTED,
            "* as dsl",
        ),
        (
            format!(
                "{HEADER}const base = {{ start: \"a\" }};\nexport default defineProjectLoop({{ start: \"a\", steps: {{}} }});\n"
            ),
            codes::UNSUPPORTED,
            "const base",
        ),
        (
            format!(
                "{HEADER}globalThis.process.exit(1);\nexport default defineProjectLoop({{ start: \"a\", steps: {{}} }});\n"
            ),
            codes::UNSUPPORTED,
            "globalThis.process.exit(1)",
        ),
        (
            "export default agentStep({ systemPrompt: \"not imported\" });\n".to_owned(),
            codes::UNSUPPORTED,
            "agentStep(",
        ),
        (
            format!(
                "{HEADER}export default defineProjectLoop({{ start: \"a\", steps: {{ a: agentStep({{ when: /x/.source }}) }} }});\n"
            ),
            codes::UNSUPPORTED,
            "/x/",
        ),
        (
            format!(
                "{HEADER}export default defineProjectLoop({{ start: \"a\", steps: {{ a: toolStep({{ type: \"human\", tool: \"read\" }}) }} }});\n"
            ),
            codes::INVALID_CALL,
            "{ type: \"human\"",
        ),
        (
            format!(
                "{HEADER}export default defineProjectLoop({{ start: \"a\", steps: {{ a: agentStep({{ next: [when(\"x == 1\")] }}) }} }});\n"
            ),
            codes::INVALID_CALL,
            "when(\"x == 1\")",
        ),
        (
            format!("{HEADER}export default defineProjectLoop({{ start: \"a\", start: \"b\", steps: {{}} }});\n"),
            codes::DUPLICATE_KEY,
            "start: \"b\"",
        ),
        (
            format!("{HEADER}export default function () {{ return {{}} }}\n"),
            codes::MISSING_EXPORT,
            "export default function",
        ),
        (HEADER.to_owned(), codes::MISSING_EXPORT, "import {"),
        (format!("{HEADER}export default defineProjectLoop({{ start: \"a\", steps: {{ }}\n"), codes::SYNTAX, ""),
    ]
}

#[test]
fn hostile_inputs_are_refused_with_a_code_and_the_position_of_the_construct_and_nothing_runs() {
    let dir = tempfile::tempdir().unwrap();
    let cases = hostile(dir.path());
    assert!(cases.len() >= 10);
    for (source, code, at) in &cases {
        let problems = refused(source);
        let found =
            problems.iter().find(|p| p.code == *code).unwrap_or_else(|| panic!("no {code} in {problems:?}\n{source}"));
        assert_eq!(found.file.as_deref(), Some(FILE));
        assert!(text_at(source, found).starts_with(at), "{found} points at {:?}, not {at:?}", text_at(source, found));
    }
    // Several of them would have written this file, had anything been run.
    assert!(!dir.path().join("pwned").exists());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn every_unsupported_construct_of_a_file_is_reported_at_once() {
    let source = format!(
        "{HEADER}export default defineProjectLoop({{\n  name: process.env.NAME,\n  start: `${{1}}`,\n  steps: {{ ...x }},\n}});\n"
    );
    let lines: Vec<usize> = refused(&source).iter().map(|p| p.line.unwrap()).collect();
    assert_eq!(lines, [3, 4, 5]);
}

#[test]
fn oversized_and_deeply_nested_files_are_refused_before_parsing() {
    let big = format!("{HEADER}export default {{ start: \"{}\", steps: {{}} }};", "a".repeat(limits::MAX_SOURCE_BYTES));
    let problems = refused(&big);
    assert_eq!(problems[0].code, codes::TOO_LARGE);
    let deep = format!("export default {}{}", "[".repeat(100_000), "]".repeat(100_000));
    let problems = refused(&deep);
    assert_eq!((problems[0].code.as_str(), problems[0].column), (codes::TOO_LARGE, Some(16 + limits::MAX_NESTING)));
    let unary = format!("export default {}1", "!".repeat(100_000));
    assert_eq!(refused(&unary)[0].code, codes::UNSUPPORTED);
    let labels = "a: ".repeat(50_000);
    assert_eq!(refused(&labels)[0].code, codes::UNSUPPORTED);
}

#[test]
fn the_worst_nesting_within_the_bounds_compiles_on_a_small_caller_stack() {
    // Every bracket and operator the bounds allow, nested as deep as they go; the caller's
    // thread has far less stack than the parser would need on it in a debug build.
    let half = limits::MAX_NESTING / 2;
    let open = "[{a:".repeat(half);
    let close = "}]".repeat(half);
    let ops = "-".repeat(0) + &"!".repeat(limits::MAX_OPERATORS);
    let sources = [
        format!("export default {open}1{close}"),
        format!("export default {open}{ops}1{close}"),
        format!("export default {}{}{}", "(".repeat(limits::MAX_NESTING), "1", ")".repeat(limits::MAX_NESTING)),
    ];
    let outcome = std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(move || sources.iter().map(|s| compile(s, FILE).is_ok()).collect::<Vec<_>>())
        .unwrap()
        .join()
        .unwrap();
    assert_eq!(outcome, [false, false, false], "none is a loop object");
}
