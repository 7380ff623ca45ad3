//! The fuzz targets: every parser that reads untrusted input. Each runs for
//! `POLPO_FUZZ_SECONDS` (default 3 s) after replaying its stored regressions; see the crate docs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use polpo_fuzz::{fuzz, inputs};
use proptest::prelude::*;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

fn seeds(values: &[Value]) -> Vec<Vec<u8>> {
    values.iter().map(|v| serde_json::to_vec_pretty(v).unwrap()).collect()
}

/// `POST /v1/chat/completions` bodies: parse, then turn every message and tool into the
/// runtime's types, as the chat route does. Any input gets a value or an error, never a panic.
#[test]
fn chat_request_wire() {
    let seeds = seeds(&[
        json!({"model": "helper", "messages": [{"role": "user", "content": "hi"}]}),
        json!({"model": "agent/helper", "stream": true, "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get", "arguments": "{\"a\":1}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "42"}],
            "tools": [{"type": "function", "function": {"name": "get", "description": "d", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}],
            "tool_choice": {"type": "function", "function": {"name": "get"}},
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "strict": true, "schema": {"type": "object"}}},
            "metadata": {"k": "v"}, "user": "u1", "max_tokens": 100, "temperature": 0.2,
            "polpo": {"execution": {"allowedTools": ["read"]}, "delivery": {"onDisconnect": "continue"}, "skills": ["s"]}}),
    ]);
    let words = [
        "messages",
        "role",
        "content",
        "user",
        "assistant",
        "system",
        "tool",
        "developer",
        "tools",
        "tool_calls",
        "tool_call_id",
        "function",
        "name",
        "arguments",
        "parameters",
        "type",
        "text",
        "image_url",
        "url",
        "tool_choice",
        "response_format",
        "json_schema",
        "json_object",
        "schema",
        "strict",
        "stream",
        "polpo",
        "execution",
        "allowedTools",
        "metadata",
        "max_tokens",
        "temperature",
        "top_p",
        "agent",
        "model",
        "loop",
    ];
    fuzz("chat_request_wire", inputs(seeds, &words), &|bytes| {
        if let Ok(request) = serde_json::from_slice::<polpo_server::wire::ChatRequest>(bytes) {
            for message in request.messages {
                let _ = message.into_message();
            }
            for tool in request.tools {
                let _ = tool.into_spec();
            }
        }
        Ok(())
    });
}

/// Provider and run streams: decoding must not depend on how the bytes were cut into chunks
/// (the network cuts them anywhere), and must never panic.
#[test]
fn sse_decoder() {
    let seeds = vec![
        b"data: {\"a\":1}\n\n".to_vec(),
        b"event: run.completed\r\nid: 7\r\ndata: x\r\ndata: y\r\n\r\n: comment\n\ndata: [DONE]\n\n".to_vec(),
        b"retry: 10\nid\ndata\n\nevent:e\rdata:z\r\r".to_vec(),
    ];
    let words = ["data:", "event:", "id:", "retry:", ":", "\n", "\r\n", "\r", "[DONE]", "data: "];
    fuzz("sse_decoder", inputs(seeds, &words), &|bytes| {
        let whole = decode(bytes, bytes.len().max(1));
        for chunk in [1, 2, 3, 7, 64] {
            let cut = decode(bytes, chunk);
            if cut != whole {
                return Err(format!("chunks of {chunk} bytes decode to {cut:?}, the whole body to {whole:?}"));
            }
        }
        Ok(())
    });
}

fn decode(bytes: &[u8], chunk: usize) -> Result<Vec<polpo_llm::SseEvent>, String> {
    let mut decoder = polpo_llm::SseDecoder::default();
    let mut out = Vec::new();
    for part in bytes.chunks(chunk) {
        decoder.push(part, &mut out).map_err(|e| e.to_string())?;
    }
    decoder.finish(&mut out).map_err(|e| e.to_string())?;
    Ok(out)
}

/// `.polpo/` as users write it: one of the project's files replaced by the input. Loading and
/// checking hooks answers with the project or located problems, never a panic.
#[test]
fn project_loader() {
    let dir = tempfile::tempdir().unwrap();
    let files = [
        (
            "project.json",
            json!({"schemaVersion": 2, "project": "p", "settings": {"storage": "file", "port": 3890, "hooks": ["quality"], "workDir": "."}}),
        ),
        (
            "agents/helper/agent.json",
            json!({"role": "helper", "model": "openai/gpt-4o-mini", "allowedTools": ["read", "write"], "chat": {"allowedTools": ["read"]}, "hooks": ["quality"], "maxTurns": 5, "team": "core"}),
        ),
        ("teams/core.json", json!({"name": "core", "description": "the core team"})),
        ("hooks/quality.json", hook_pack_seed()),
        (
            "loops/flow.json",
            json!({"start": "a", "steps": {"a": {"allowedTools": ["read"], "when": "request.metadata.x != null", "next": "b"}, "b": {"type": "tool", "tool": "read", "input": {"path": {"$context": "a.path"}}}}}),
        ),
    ];
    let seeds = seeds(&files.iter().map(|(_, v)| v.clone()).collect::<Vec<_>>());
    let words = [
        "schemaVersion",
        "project",
        "settings",
        "storage",
        "file",
        "sqlite",
        "postgres",
        "port",
        "hooks",
        "workDir",
        "role",
        "model",
        "allowedTools",
        "chat",
        "maxTurns",
        "team",
        "name",
        "description",
        "members",
        "providers",
        "apiKeys",
        "modelRouting",
        "reportsTo",
        "toolLoading",
        "mode",
        "auto",
        "skills",
        "assignedLoops",
    ];
    let case = std::sync::atomic::AtomicUsize::new(0);
    fuzz("project_loader", inputs(seeds, &words), &|bytes| {
        let root = dir.path().join(case.fetch_add(1, std::sync::atomic::Ordering::Relaxed).to_string());
        // By length: the first byte of JSON is nearly always `{`, the length varies with every mutation.
        let target = bytes.len() % files.len();
        for (i, (path, value)) in files.iter().enumerate() {
            let content = if i == target { bytes.to_vec() } else { serde_json::to_vec_pretty(value).unwrap() };
            write(&root.join(".polpo").join(path), &content);
        }
        let problems = polpo_project::load_project(&root).err().unwrap_or_default();
        std::fs::remove_dir_all(&root).unwrap();
        located(&problems)
    });
}

/// Hook packs are trusted policy but still hand-written: any text is a pack or located problems.
#[test]
fn hook_pack_validation() {
    let seeds = seeds(&[hook_pack_seed()]);
    let words = [
        "hooks",
        "tool:before",
        "tool:after",
        "turn:stop",
        "turn:start",
        "id",
        "matcher",
        "tools",
        "modes",
        "steps",
        "priority",
        "observe",
        "handler",
        "type",
        "command",
        "http",
        "url",
        "prompt",
        "verifier",
        "mcp_tool",
        "timeoutMs",
        "terminationGate",
        "validator",
        "maxCycles",
        "maxDurationMs",
        "maxTokens",
        "onFailure",
        "https://example.com/hook",
        "headers",
        "Authorization",
    ];
    let options = polpo_core::hooks::validate::ValidateOptions::default();
    fuzz("hook_pack_validation", inputs(seeds, &words), &|bytes| {
        let text = String::from_utf8_lossy(bytes);
        match polpo_core::hooks::validate::parse_pack("quality", &text, ".polpo/hooks/quality.json", &options) {
            Ok(_) => Ok(()),
            Err(problems) if problems.is_empty() => Err("refused with no problem named".into()),
            Err(problems) => located(&problems),
        }
    });
}

/// Model-written tool arguments reach the file tools. Whatever they say, nothing outside the
/// workspace (nor the project's own `.polpo/`) is created, changed or deleted, and no tool panics.
#[test]
fn tool_arguments() {
    let root = tempfile::tempdir().unwrap();
    let ws = root.path().join("ws");
    let outside = root.path().join("outside");
    write(&outside.join("secret.txt"), b"outside");
    write(&ws.join(".polpo/project.json"), b"{\"schemaVersion\": 2}");
    write(&ws.join("notes/a.txt"), b"hello\nworld\n");
    std::os::unix::fs::symlink("../outside", ws.join("out")).unwrap();
    std::os::unix::fs::symlink(".polpo", ws.join("cfg")).unwrap();
    let protected = [outside.clone(), ws.join(".polpo")];
    let mut ctx = polpo_tools::ToolContext::new(&ws);
    ctx.protected_paths = vec![ws.join(".polpo")];
    let registry = polpo_tools::ToolRegistry::system_tools();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let tools: [&'static str; 6] = ["read", "write", "edit", "ls", "glob", "grep"];
    let seeds = seeds(&[
        json!({"path": "notes/a.txt"}),
        json!({"path": "notes/b.txt", "content": "x"}),
        json!({"path": "notes/a.txt", "old_string": "hello", "new_string": "bye"}),
        json!({"pattern": "**/*.txt", "path": "."}),
        json!({"pattern": "hel+o", "path": "notes", "include": "*.txt"}),
    ]);
    let paths = [
        "..",
        "../outside/secret.txt",
        "out/secret.txt",
        "cfg/project.json",
        ".polpo/project.json",
        "/etc/hostname",
        ".polpo",
        "out",
        "cfg",
        "notes/../../outside/x",
        "./.polpo/agents/a/agent.json",
        "**",
        "*",
        "notes",
    ];
    let fields =
        ["path", "content", "old_string", "new_string", "replace_all", "pattern", "include", "offset", "limit"];
    let words: Vec<&str> = fields.iter().chain(paths.iter()).copied().collect();
    let calls = prop_oneof![3 => tool_calls(&tools, &paths), 1 => inputs(seeds, &words)];
    fuzz("tool_arguments", calls, &|bytes| {
        let call =
            serde_json::from_slice::<Value>(bytes).unwrap_or_else(|_| json!({"path": String::from_utf8_lossy(bytes)}));
        let (tool, args) = match (call.get("tool").and_then(Value::as_str), call.get("args")) {
            (Some(tool), Some(args)) if tools.contains(&tool) => (tool, args.clone()),
            _ => (tools[bytes.len() % tools.len()], call),
        };
        // Compared around this call alone, so the call that broke the rule is the one reported.
        let before = snapshot(&protected);
        let _ = runtime.block_on(registry.get(tool).expect("a system tool").call(&ctx, args));
        let after = snapshot(&protected);
        if after != before {
            let changed: Vec<_> = before
                .iter()
                .chain(&after)
                .filter(|e| !(before.contains(e) && after.contains(e)))
                .map(|(p, _)| p)
                .collect();
            return Err(format!("{tool} changed what it must not touch: {changed:?}"));
        }
        Ok(())
    });
}

/// `{"tool", "args"}` with the arguments file tools take, paths drawn from `paths` (escapes,
/// symlinks, the project folder) joined and mixed with noise: the structured half of the input.
fn tool_calls(tools: &[&'static str], paths: &[&str]) -> impl Strategy<Value = Vec<u8>> + use<> {
    let paths: Vec<String> = paths.iter().map(|p| (*p).to_owned()).collect();
    let path = prop_oneof![
        3 => proptest::sample::select(paths.clone()),
        2 => proptest::collection::vec(proptest::sample::select(paths), 1..4).prop_map(|parts| parts.join("/")),
        1 => ".{0,24}",
    ];
    let text = prop_oneof![Just("x".to_owned()), Just("hello".to_owned()), ".{0,16}"];
    let field = |value: BoxedStrategy<String>| proptest::option::of(value);
    (
        proptest::sample::select(tools.to_vec()),
        path,
        field(text.clone().boxed()),
        field(text.clone().boxed()),
        field(text.boxed()),
        proptest::option::of(any::<bool>()),
    )
        .prop_map(|(tool, path, content, old, new, all)| {
            // Each tool's own fields only: the tools refuse unknown ones, which would stop the
            // call before any path is touched.
            let fields: &[&str] = match tool {
                "write" => &["path", "content"],
                "edit" => &["path", "old_string", "new_string", "replace_all"],
                "glob" => &["pattern", "path"],
                "grep" => &["pattern", "path", "include"],
                _ => &["path", "offset", "limit"],
            };
            let candidates = [
                ("path", json!(path)),
                ("content", json!(content.clone().unwrap_or_default())),
                ("old_string", json!(old.unwrap_or_default())),
                ("new_string", json!(new.unwrap_or_default())),
                ("replace_all", json!(all.unwrap_or_default())),
                ("pattern", json!(content.map_or_else(|| path.clone(), |c| format!("{path}{c}")))),
                ("include", json!("*")),
                ("offset", json!(1)),
                ("limit", json!(5)),
            ];
            let args: serde_json::Map<String, Value> =
                candidates.into_iter().filter(|(k, _)| fields.contains(k)).map(|(k, v)| (k.to_owned(), v)).collect();
            serde_json::to_vec(&json!({"tool": tool, "args": args})).unwrap()
        })
}

/// Loop guards are typed by people and evaluated by the runtime: any text parses to a tree that
/// prints back to itself, or fails with a column inside it; evaluation never panics, and the
/// fail-closed `holds` agrees with the value's truthiness.
#[test]
fn loop_expressions() {
    use polpo_core::loops::expr::{Limits, evaluate_expr, holds, parse};
    let seeds: Vec<Vec<u8>> = [
        "classify.route == 'answer'",
        "classify.route != null",
        "!(a.b >= -1.5) && (c === \"x\\\"y\" || d.0 < e)",
        "review.approved === true || attempts.count > 3",
        "",
        "a == b == c",
        "'unterminated",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    let words = [
        "||",
        "&&",
        "!",
        "===",
        "!==",
        "==",
        "!=",
        ">=",
        "<=",
        ">",
        "<",
        "(",
        ")",
        "true",
        "false",
        "null",
        "'",
        "\"",
        "\\",
        "-",
        ".",
        "0",
        "1.5",
        "classify.route",
        "a.b.c",
        " ",
    ];
    let context = json!({"classify": {"route": "answer"}, "a": {"b": 2, "c": [1, "x"]}, "e": null, "d": ["1"]});
    fuzz("loop_expressions", inputs(seeds, &words), &|bytes| {
        let text = String::from_utf8_lossy(bytes);
        let chars = text.chars().count();
        match parse(&text) {
            Err(e) if e.column == 0 || e.column > chars + 1 => {
                Err(format!("column {} outside {chars} characters: {e}", e.column))
            }
            Err(_) => match holds(&text, &context) {
                true => Err("a guard that does not parse held".into()),
                false => Ok(()),
            },
            Ok(tree) => {
                let printed = tree.to_string();
                match parse(&printed) {
                    Ok(again) if again == tree => {}
                    other => return Err(format!("{text:?} printed as {printed:?}, which parses to {other:?}")),
                }
                let value = evaluate_expr(&tree, &context, &Limits::default())
                    .map_err(|e| format!("a parsed tree failed: {e}"))?;
                match holds(&text, &context) == value.truthy() {
                    true => Ok(()),
                    false => Err(format!("holds disagrees with the truthiness of {value:?}")),
                }
            }
        }
    });
}

/// Loop files: any document is a loop whose problems all say where they are, or located
/// problems; a loop that parses serializes back to a document that parses to the same loop.
#[test]
fn loop_definitions() {
    use polpo_core::config::Location;
    use polpo_core::loops::{parse_loop, validate_loop};
    let seeds = seeds(&[
        json!({"name": "flow", "start": "a", "groups": {"g": {"label": "G"}}, "allowedTools": ["read"], "steps": {
            "a": {"group": "g", "tools": ["read"], "stopWhen": {"expression": "a.done"}, "input": {"x": {"$context": "request.metadata.x"}},
                  "next": [{"when": "a.route == 'b'", "to": "b"}, {"to": "end"}]},
            "b": {"type": "parallel", "branches": ["c", "d"], "join": "any", "next": "w"},
            "c": {"type": "tool", "tool": "read", "input": {"path": "x"}, "saveAs": "files.c"},
            "d": {"type": "human", "output": {"schema": {"type": "object"}}},
            "w": {"type": "while", "until": "c.ok", "body": ["c"], "maxIterations": 2}}}),
        json!({"start": "x", "steps": {"x": {"type": "while", "body": "y"}, "end": {}},
               "permissions": [{"resource": "tool", "effect": "approval", "match": {"step": "x"}, "when": "tool.name == 'bash'"}],
               "policies": [{"effect": "deny", "when": "(a"}], "hooks": {"loop:start": [{"tool": "read"}]}}),
    ]);
    let words = [
        "start",
        "steps",
        "type",
        "agent",
        "tool",
        "human",
        "parallel",
        "while",
        "next",
        "end",
        "when",
        "to",
        "label",
        "branches",
        "join",
        "body",
        "condition",
        "until",
        "maxIterations",
        "allowedTools",
        "tools",
        "toolChoice",
        "required",
        "mode",
        "group",
        "groups",
        "input",
        "$context",
        "saveAs",
        "stopWhen",
        "expression",
        "output",
        "schema",
        "permissions",
        "policies",
        "hooks",
        "effect",
        "resource",
        "match",
    ];
    let at = Location::file(".polpo/loops/flow.json");
    fuzz("loop_definitions", inputs(seeds, &words), &|bytes| {
        let Ok(value) = serde_json::from_slice::<Value>(bytes) else { return Ok(()) };
        match parse_loop(&value, &at) {
            Err(problems) if problems.is_empty() => Err("refused with no problem named".into()),
            Err(problems) => located(&problems),
            Ok(config) => {
                located(&validate_loop("flow", &config))?;
                let written = serde_json::to_value(&config).map_err(|e| e.to_string())?;
                match parse_loop(&written, &at) {
                    Ok(again) if again == config => Ok(()),
                    other => Err(format!("{value} wrote {written}, which reads as {other:?}")),
                }
            }
        }
    });
}

/// Static TypeScript loops are source text from users: any input compiles to a loop object or
/// to problems located inside the text, never a panic or a stack overflow; a compiled loop,
/// written back as `export default <its JSON>`, compiles to itself.
#[test]
fn loop_typescript() {
    use polpo_loop_ts::{codes, compile, line_column};
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/../polpo-loop-ts/tests/fixtures");
    let mut seeds: Vec<Vec<u8>> =
        ["router-flow.ts", "governed.ts"].iter().map(|f| std::fs::read(format!("{fixtures}/{f}")).unwrap()).collect();
    seeds.extend(
        [
            "export default { start: process.env.START, steps: { ...base } };",
            "import x from \"node:fs\";\nexport default defineProjectLoop({ start: `${x}`, get steps() { return {} } });",
            "export default [[[[{ a: -1, [b]: import(\"./e.js\"), c() {} }]]]] as const satisfies X;",
        ]
        .map(|s| s.as_bytes().to_vec()),
    );
    let words = [
        "defineProjectLoop(",
        "agentStep(",
        "toolStep(",
        "whileStep(",
        "when(",
        "otherwise(",
        "bash(",
        "toolAction(",
        "requireTool(",
        "import { agentStep } from \"@polpo-ai/core/loop-code\";\n",
        "export default ",
        "process.env",
        "${",
        "`",
        "...",
        "=>",
        "get ",
        "as const",
        "satisfies",
        "undefined",
        "null",
        "1e999",
        "0x1f",
        "10n",
        "-",
        "!",
        "/",
        "//",
        "/*",
        "*/",
        "\\u{D800}",
        "\\",
        ":",
        ",",
        "[",
        "]",
        "{",
        "}",
        "(",
        ")",
    ];
    fuzz("loop_typescript", inputs(seeds, &words), &|bytes| {
        let source = String::from_utf8_lossy(bytes);
        let file = ".polpo/loops/fuzz.ts";
        match compile(&source, file) {
            Err(problems) if problems.is_empty() => Err("refused with no problem named".into()),
            Err(problems) => {
                let end = line_column(&source, source.len());
                match problems.iter().find(|p| {
                    !p.code.starts_with("loop_ts_")
                        || p.file.as_deref() != Some(file)
                        || p.line.zip(p.column).is_some_and(|at| at > end || at.0 == 0 || at.1 == 0)
                }) {
                    Some(p) => Err(format!("a problem without its code, file or a position inside the text: {p:?}")),
                    None => Ok(()),
                }
            }
            Ok(compiled) if !compiled.value.is_object() => Err(format!("compiled to {}", compiled.value)),
            Ok(compiled) => match compile(&format!("export default {}", compiled.value), file) {
                Ok(again) if again.value == compiled.value => Ok(()),
                // The JSON can outgrow the bounds its source met (helpers add fields and nesting).
                Err(problems)
                    if problems
                        .iter()
                        .all(|p| p.code == codes::TOO_LARGE || p.message.contains("operators and keywords")) =>
                {
                    Ok(())
                }
                other => Err(format!("{} compiles to {other:?}", compiled.value)),
            },
        }
    });
}

/// `SKILL.md` of a bundle from anywhere (`polpo skills add owner/repo`): its front matter gives a
/// valid name and description or a located `invalid_skill`, never a panic.
#[test]
fn skill_front_matter() {
    let seeds = vec![
        b"---\nname: frontend-design\ndescription: Build polished pages.\nlicense: MIT\n---\n# Body\n".to_vec(),
        b"---\nname: 'pdf-tools'\ndescription: >\n  Read\n  PDFs.\nmetadata:\n  k: v\n---\n".to_vec(),
    ];
    let words = ["---", "name:", "description:", "|", ">", "'", "\"", "\n", "  ", "-", "--", "\u{feff}", "a-b"];
    fuzz("skill_front_matter", inputs(seeds, &words), &|bytes| {
        let text = String::from_utf8_lossy(bytes);
        match polpo_project::skills::parse_skill_md(&text, "skills/x/SKILL.md") {
            Ok(meta) if polpo_project::skills::check_name(&meta.name).is_err() => Err(format!("accepted {meta:?}")),
            Ok(meta) if meta.description.is_empty() || meta.description.chars().count() > 1024 => {
                Err(format!("accepted description {:?}", meta.description))
            }
            Ok(_) => Ok(()),
            Err(e) if e.code() == "invalid_skill" && e.to_string().contains("skills/x/SKILL.md") => Ok(()),
            Err(e) => Err(format!("unlocated or miscoded: {}: {e}", e.code())),
        }
    });
}

fn hook_pack_seed() -> Value {
    json!({"hooks": {
        "tool:before": [
            {"id": "no-edits", "matcher": {"tools": ["write", "edit"], "modes": ["chat"]}, "priority": 10,
             "handler": {"type": "command", "command": "sh deny.sh", "timeoutMs": 2000}},
            {"id": "audit", "matcher": {"tools": ["*"]}, "observe": true, "handler": {"type": "command", "command": "true"}}
        ],
        "turn:stop": [{"id": "gate", "terminationGate": {"validator": {"type": "command", "command": "sh check.sh"}, "maxCycles": 2, "maxDurationMs": 120000}}]
    }})
}

/// Every problem must say where it is, so a user can fix it.
fn located(problems: &[polpo_core::problem::Problem]) -> Result<(), String> {
    match problems.iter().find(|p| {
        p.code.is_empty()
            || p.message.is_empty()
            || p.pointer.as_deref().is_some_and(|ptr| !ptr.is_empty() && !ptr.starts_with('/'))
    }) {
        Some(p) => Err(format!("a problem without a code, a message or a valid pointer: {p:?}")),
        None => Ok(()),
    }
}

fn write(path: &Path, bytes: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

/// Every file under `roots` with its content (symlinks not followed).
fn snapshot(roots: &[PathBuf]) -> Vec<(PathBuf, Vec<u8>)> {
    let mut found = Vec::new();
    let mut pending = roots.to_vec();
    while let Some(path) = pending.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
        if meta.is_dir() {
            pending.extend(std::fs::read_dir(&path).unwrap().flatten().map(|e| e.path()));
        } else {
            found.push((path.clone(), std::fs::read(&path).unwrap_or_default()));
        }
    }
    found.sort();
    found
}
