//! Happy paths and errors of the file, memory and outcome tools, and the registry.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{call, code, ctx, dirs};
use polpo_core::tool::ToolEffect;
use polpo_tools::ToolRegistry;
use serde_json::json;

#[test]
fn registry_lists_every_builtin_in_reference_order() {
    let registry = ToolRegistry::system_tools();
    let names: Vec<&str> = registry.names().collect();
    assert_eq!(
        names,
        [
            "read",
            "write",
            "edit",
            "bash",
            "glob",
            "grep",
            "ls",
            "http_fetch",
            "http_download",
            "register_outcome",
            "memory_get",
            "memory_save",
            "memory_append",
            "memory_update"
        ]
    );
    let specs = registry.specs();
    assert!(specs.iter().all(|s| s.parameters["type"] == "object"));
    assert_eq!(registry.get("read").unwrap().effect(), ToolEffect::Read);
    assert_eq!(registry.get("write").unwrap().effect(), ToolEffect::Idempotent);
    assert_eq!(registry.get("bash").unwrap().effect(), ToolEffect::Write);
    let fetch = registry.get("http_fetch").unwrap();
    assert_eq!(fetch.call_effect(&json!({"url": "https://example.com"})), ToolEffect::Read);
    assert_eq!(fetch.call_effect(&json!({"url": "https://example.com", "method": "post"})), ToolEffect::Write);
    let mut again = ToolRegistry::system_tools();
    let dup = again.register(registry.get("read").unwrap().clone()).unwrap_err();
    assert_eq!(dup.code(), "duplicate_tool");
}

#[tokio::test]
async fn write_then_read_with_numbered_lines_and_paging() {
    let d = dirs();
    let c = ctx(&d.ws);
    let content: String = (1..=10).map(|i| format!("line {i}\n")).collect();
    let out = call(&c, "write", json!({"path": "nested/dir/f.txt", "content": content})).await.unwrap();
    let abs = d.ws.canonicalize().unwrap().join("nested/dir/f.txt");
    assert_eq!(out.text, format!("File written: {} ({} bytes)", abs.display(), content.len()));

    let out = call(&c, "read", json!({"path": "nested/dir/f.txt"})).await.unwrap();
    assert!(out.text.starts_with("1\tline 1\n2\tline 2\n"), "{}", out.text);
    assert!(!out.text.contains("more lines"));
    assert_eq!(out.details["total"], 10);

    let out = call(&c, "read", json!({"path": "nested/dir/f.txt", "offset": 3, "limit": 2})).await.unwrap();
    assert_eq!(out.text, "3\tline 3\n4\tline 4\n... (6 more lines)");
    assert_eq!(out.details["lines"], 2);
}

#[tokio::test]
async fn read_errors() {
    let d = dirs();
    let c = ctx(&d.ws);
    assert_eq!(code(call(&c, "read", json!({"path": "missing.txt"})).await), "file_not_found");
    assert_eq!(code(call(&c, "read", json!({"path": "."})).await), "is_a_directory");
    assert_eq!(code(call(&c, "read", json!({"file": "x"})).await), "invalid_arguments");
}

#[tokio::test]
async fn edit_replaces_exactly_once_or_explains_why_not() {
    let d = dirs();
    let c = ctx(&d.ws);
    std::fs::write(d.ws.join("a.rs"), "fn a() {}\nfn b() {}\nfn b() {}\n").unwrap();
    let out = call(&c, "edit", json!({"path": "a.rs", "old_text": "fn a()", "new_text": "fn alpha()"})).await.unwrap();
    assert!(out.text.starts_with("File edited: "));
    assert_eq!(std::fs::read_to_string(d.ws.join("a.rs")).unwrap(), "fn alpha() {}\nfn b() {}\nfn b() {}\n");

    let err = call(&c, "edit", json!({"path": "a.rs", "old_text": "fn b()", "new_text": "x"})).await.unwrap_err();
    assert_eq!(err.code, "not_unique");
    assert!(err.message.contains("2 times"), "{}", err.message);
    assert_eq!(
        code(call(&c, "edit", json!({"path": "a.rs", "old_text": "fn zeta", "new_text": "x"})).await),
        "not_found"
    );
    assert_eq!(
        code(call(&c, "edit", json!({"path": "a.rs", "old_text": "", "new_text": "x"})).await),
        "invalid_arguments"
    );
    assert_eq!(
        code(call(&c, "edit", json!({"path": "nope.rs", "old_text": "a", "new_text": "x"})).await),
        "file_not_found"
    );
    // Failed edits change nothing.
    assert_eq!(std::fs::read_to_string(d.ws.join("a.rs")).unwrap(), "fn alpha() {}\nfn b() {}\nfn b() {}\n");
}

#[tokio::test]
async fn ls_sorts_and_marks_directories() {
    let d = dirs();
    let c = ctx(&d.ws);
    std::fs::create_dir_all(d.ws.join("src")).unwrap();
    std::fs::write(d.ws.join("b.txt"), "").unwrap();
    std::fs::write(d.ws.join("a.txt"), "").unwrap();
    let out = call(&c, "ls", json!({})).await.unwrap();
    assert_eq!(out.text, "a.txt\nb.txt\nsrc/");
    let out = call(&c, "ls", json!({"path": "src"})).await.unwrap();
    assert_eq!(out.text, "(empty directory)");
    assert_eq!(code(call(&c, "ls", json!({"path": "missing"})).await), "file_not_found");
}

#[tokio::test]
async fn glob_matches_files_only_sorted_without_dotfiles() {
    let d = dirs();
    let c = ctx(&d.ws);
    for f in ["src/b.rs", "src/a.rs", "src/deep/c.rs", "src/d.ts", ".hidden/e.rs", "src/.f.rs", "top.rs"] {
        let p = d.ws.join(f);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, "x").unwrap();
    }
    let out = call(&c, "glob", json!({"pattern": "**/*.rs"})).await.unwrap();
    assert_eq!(out.text, "src/a.rs\nsrc/b.rs\nsrc/deep/c.rs\ntop.rs");
    let out = call(&c, "glob", json!({"pattern": "*.{rs,ts}", "path": "src"})).await.unwrap();
    assert_eq!(out.text, "src/a.rs\nsrc/b.rs\nsrc/d.ts");
    let out = call(&c, "glob", json!({"pattern": "src/?.rs"})).await.unwrap();
    assert_eq!(out.text, "src/a.rs\nsrc/b.rs");
    let out = call(&c, "glob", json!({"pattern": "*.py"})).await.unwrap();
    assert_eq!(out.text, "No files found");
    assert_eq!(code(call(&c, "glob", json!({"pattern": "a{b"})).await), "invalid_pattern");
}

#[tokio::test]
async fn glob_caps_results_at_200() {
    let d = dirs();
    let c = ctx(&d.ws);
    for i in 0..250 {
        std::fs::write(d.ws.join(format!("f{i:03}.txt")), "").unwrap();
    }
    let out = call(&c, "glob", json!({"pattern": "*.txt"})).await.unwrap();
    let lines: Vec<&str> = out.text.lines().collect();
    assert_eq!(lines.len(), 201);
    assert_eq!(lines[0], "f000.txt");
    assert_eq!(lines[200], "... (50 more files; narrow the pattern)");
}

#[tokio::test]
async fn grep_prints_path_line_text_with_include_filter_and_cap() {
    let d = dirs();
    let c = ctx(&d.ws);
    std::fs::create_dir_all(d.ws.join("src")).unwrap();
    std::fs::write(d.ws.join("src/a.rs"), "fn main() {\n    todo!()\n}\n").unwrap();
    std::fs::write(d.ws.join("notes.md"), "todo: write docs\n").unwrap();
    std::fs::write(d.ws.join("bin.dat"), b"todo\0binary").unwrap();
    let out = call(&c, "grep", json!({"pattern": "todo"})).await.unwrap();
    assert_eq!(out.text, "notes.md:1:todo: write docs\nsrc/a.rs:2:    todo!()");
    let out = call(&c, "grep", json!({"pattern": r"todo!\(\)", "include": "*.rs"})).await.unwrap();
    assert_eq!(out.text, "src/a.rs:2:    todo!()");
    let out = call(&c, "grep", json!({"pattern": "nothing-here"})).await.unwrap();
    assert_eq!(out.text, "No matches found");
    assert_eq!(code(call(&c, "grep", json!({"pattern": "(unclosed"})).await), "invalid_pattern");

    let many: String = (0..150).map(|i| format!("hit {i}\n")).collect();
    std::fs::write(d.ws.join("many.txt"), many).unwrap();
    let out = call(&c, "grep", json!({"pattern": "^hit", "path": "many.txt"})).await.unwrap();
    assert_eq!(out.text.lines().count(), 101);
    assert!(out.text.ends_with("(results truncated at 100 lines)"));
}

#[tokio::test]
async fn memory_tools_read_save_append_and_update_the_agent_file() {
    let d = dirs();
    let mut c = ctx(&d.ws);
    assert_eq!(code(call(&c, "memory_get", json!({})).await), "memory_unavailable");
    let file = d.ws.join(".polpo/memory/agent.md");
    c.memory_file = Some(file.clone());

    assert_eq!(call(&c, "memory_get", json!({})).await.unwrap().text, "(memory is empty)");
    call(&c, "memory_save", json!({"content": "# Notes\nuser likes tea"})).await.unwrap();
    call(&c, "memory_append", json!({"text": "meeting on friday"})).await.unwrap();
    let text = call(&c, "memory_get", json!({})).await.unwrap().text;
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[..2], ["# Notes", "user likes tea"]);
    assert!(lines[2].starts_with("- [20") && lines[2].ends_with("] meeting on friday"), "{}", lines[2]);

    call(&c, "memory_update", json!({"old_text": "tea", "new_text": "coffee"})).await.unwrap();
    assert!(std::fs::read_to_string(&file).unwrap().contains("user likes coffee"));
    assert_eq!(code(call(&c, "memory_update", json!({"old_text": "tea", "new_text": "x"})).await), "not_found");
}

#[tokio::test]
async fn register_outcome_validates_and_returns_the_outcome() {
    let d = dirs();
    let c = ctx(&d.ws);
    std::fs::write(d.ws.join("report.pdf"), b"%PDF-1.7 fake").unwrap();
    let out = call(
        &c,
        "register_outcome",
        json!({"type": "file", "label": "Report", "path": "report.pdf", "mimeType": "application/pdf"}),
    )
    .await
    .unwrap();
    assert_eq!(out.text, "Outcome registered: Report");
    let outcome = &out.details["outcome"];
    assert_eq!(outcome["type"], "file");
    assert_eq!(outcome["size"], 13);
    assert_eq!(outcome["mimeType"], "application/pdf");

    let out = call(&c, "register_outcome", json!({"type": "json", "label": "Stats", "data": {"n": 3}})).await.unwrap();
    assert_eq!(out.details["outcome"]["data"]["n"], 3);
    assert_eq!(code(call(&c, "register_outcome", json!({"type": "text", "label": "T"})).await), "invalid_arguments");
    assert_eq!(
        code(call(&c, "register_outcome", json!({"type": "file", "label": "F", "path": "nope"})).await),
        "file_not_found"
    );
    assert_eq!(code(call(&c, "register_outcome", json!({"type": "video", "label": "V"})).await), "invalid_arguments");
}

#[tokio::test]
async fn read_cuts_very_long_lines_and_counts_lines_past_the_page() {
    let d = dirs();
    let c = ctx(&d.ws);
    let mut content = "y".repeat(1_000_000);
    content.push_str("\nshort\n");
    content.push_str(&"z\n".repeat(1000));
    std::fs::write(d.ws.join("min.js"), &content).unwrap();
    let out = call(&c, "read", json!({"path": "min.js", "limit": 2})).await.unwrap();
    let lines: Vec<&str> = out.text.lines().collect();
    assert_eq!(lines.len(), 3);
    assert!(lines[0].starts_with("1\tyyyy") && lines[0].ends_with("… [line truncated]"));
    assert_eq!(lines[0].chars().count(), "1\t".len() + 2000 + "… [line truncated]".chars().count());
    assert_eq!(lines[1], "2\tshort");
    assert_eq!(lines[2], "... (1000 more lines)");
}
