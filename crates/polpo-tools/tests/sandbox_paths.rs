//! Every way out of the workspace is refused with `path_outside_sandbox`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{call, code, ctx, dirs};
use serde_json::json;
use std::os::unix::fs::symlink;

const ESCAPE: &str = "path_outside_sandbox";

#[tokio::test]
async fn dot_dot_is_refused() {
    let d = dirs();
    std::fs::write(d.outside.join("secret.txt"), "s3cret").unwrap();
    let c = ctx(&d.ws);
    assert_eq!(code(call(&c, "read", json!({"path": "../outside/secret.txt"})).await), ESCAPE);
    assert_eq!(code(call(&c, "read", json!({"path": "new/../../outside/secret.txt"})).await), ESCAPE);
    assert_eq!(code(call(&c, "write", json!({"path": "../outside/evil.txt", "content": "x"})).await), ESCAPE);
    assert!(!d.outside.join("evil.txt").exists());
    // `..` that stays inside is fine.
    std::fs::create_dir_all(d.ws.join("a")).unwrap();
    std::fs::write(d.ws.join("b.txt"), "ok").unwrap();
    assert_eq!(call(&c, "read", json!({"path": "a/../b.txt"})).await.unwrap().text, "1\tok");
}

#[tokio::test]
async fn absolute_paths_outside_are_refused_inside_allowed() {
    let d = dirs();
    std::fs::write(d.outside.join("secret.txt"), "s3cret").unwrap();
    std::fs::write(d.ws.join("mine.txt"), "mine").unwrap();
    let c = ctx(&d.ws);
    assert_eq!(code(call(&c, "read", json!({"path": "/etc/passwd"})).await), ESCAPE);
    let outside = d.outside.join("secret.txt");
    assert_eq!(code(call(&c, "read", json!({"path": outside})).await), ESCAPE);
    assert_eq!(code(call(&c, "ls", json!({"path": "/"})).await), ESCAPE);
    assert_eq!(code(call(&c, "grep", json!({"pattern": "s3cret", "path": d.outside})).await), ESCAPE);
    let inside = d.ws.join("mine.txt");
    assert_eq!(call(&c, "read", json!({"path": inside})).await.unwrap().text, "1\tmine");
}

#[tokio::test]
async fn symlinked_file_pointing_outside_is_refused() {
    let d = dirs();
    std::fs::write(d.outside.join("secret.txt"), "s3cret").unwrap();
    symlink(d.outside.join("secret.txt"), d.ws.join("link.txt")).unwrap();
    let c = ctx(&d.ws);
    assert_eq!(code(call(&c, "read", json!({"path": "link.txt"})).await), ESCAPE);
    assert_eq!(code(call(&c, "write", json!({"path": "link.txt", "content": "pwned"})).await), ESCAPE);
    assert_eq!(
        code(call(&c, "edit", json!({"path": "link.txt", "old_text": "s3cret", "new_text": "x"})).await),
        ESCAPE
    );
    assert_eq!(std::fs::read_to_string(d.outside.join("secret.txt")).unwrap(), "s3cret");
    // Walkers do not follow it either.
    assert_eq!(call(&c, "grep", json!({"pattern": "s3cret"})).await.unwrap().text, "No matches found");
    assert_eq!(call(&c, "glob", json!({"pattern": "*.txt"})).await.unwrap().text, "No files found");
}

#[tokio::test]
async fn symlinked_directory_pointing_outside_is_refused() {
    let d = dirs();
    std::fs::write(d.outside.join("secret.txt"), "s3cret").unwrap();
    symlink(&d.outside, d.ws.join("dirlink")).unwrap();
    let c = ctx(&d.ws);
    assert_eq!(code(call(&c, "read", json!({"path": "dirlink/secret.txt"})).await), ESCAPE);
    assert_eq!(code(call(&c, "ls", json!({"path": "dirlink"})).await), ESCAPE);
    assert_eq!(code(call(&c, "glob", json!({"pattern": "**/*", "path": "dirlink"})).await), ESCAPE);
}

#[tokio::test]
async fn new_file_under_symlinked_directory_is_refused_and_not_created() {
    let d = dirs();
    symlink(&d.outside, d.ws.join("dirlink")).unwrap();
    let c = ctx(&d.ws);
    let result = call(&c, "write", json!({"path": "dirlink/sub/new.txt", "content": "x"})).await;
    assert_eq!(code(result), ESCAPE);
    assert!(!d.outside.join("sub").exists());
    // A dangling link whose target lies outside: writing through it would create the target.
    symlink(d.outside.join("later.txt"), d.ws.join("dangling")).unwrap();
    assert_eq!(code(call(&c, "write", json!({"path": "dangling", "content": "x"})).await), ESCAPE);
    assert!(!d.outside.join("later.txt").exists());
}

#[tokio::test]
async fn symlinks_that_stay_inside_and_extra_allowed_roots_work() {
    let d = dirs();
    std::fs::create_dir_all(d.ws.join("real")).unwrap();
    std::fs::write(d.ws.join("real/a.txt"), "inside").unwrap();
    symlink(d.ws.join("real"), d.ws.join("alias")).unwrap();
    let mut c = ctx(&d.ws);
    assert_eq!(call(&c, "read", json!({"path": "alias/a.txt"})).await.unwrap().text, "1\tinside");

    std::fs::write(d.outside.join("shared.txt"), "shared").unwrap();
    c.allowed_paths = vec![d.ws.clone(), d.outside.clone()];
    let shared = d.outside.join("shared.txt");
    assert_eq!(call(&c, "read", json!({"path": shared})).await.unwrap().text, "1\tshared");
    assert_eq!(code(call(&c, "read", json!({"path": "/etc/hostname"})).await), ESCAPE);
}

#[tokio::test]
async fn symlink_loops_fail_cleanly() {
    let d = dirs();
    symlink(d.ws.join("a"), d.ws.join("b")).unwrap();
    symlink(d.ws.join("b"), d.ws.join("a")).unwrap();
    let c = ctx(&d.ws);
    assert_eq!(code(call(&c, "read", json!({"path": "a"})).await), "invalid_path");
    assert_eq!(code(call(&c, "write", json!({"path": "a/x", "content": ""})).await), "invalid_path");
}

/// A workspace that is also the project root: `.polpo/` holds an agent, a hook and the keys.
fn project_workspace() -> (common::Dirs, polpo_tools::ToolContext) {
    let d = dirs();
    let polpo = d.ws.join(".polpo");
    std::fs::create_dir_all(polpo.join("agents/a")).unwrap();
    std::fs::create_dir_all(polpo.join("hooks")).unwrap();
    std::fs::write(polpo.join("agents/a/agent.json"), r#"{"allowedTools":["read"]}"#).unwrap();
    std::fs::write(polpo.join("project.json"), r#"{"apiKeys":["sk-plain"]}"#).unwrap();
    std::fs::write(d.ws.join("notes.txt"), "sk-plain is not here").unwrap();
    let mut c = ctx(&d.ws);
    c.protected_paths = vec![polpo];
    (d, c)
}

#[tokio::test]
async fn every_file_tool_refuses_the_project_folder() {
    let (d, c) = project_workspace();
    let agent = ".polpo/agents/a/agent.json";
    let refused = [
        ("read", json!({"path": ".polpo/project.json"})),
        ("read", json!({"path": d.ws.join(".polpo/project.json")})),
        ("read", json!({"path": "sub/../.polpo/project.json"})),
        ("write", json!({"path": agent, "content": r#"{"allowedTools":["*"]}"#})),
        ("write", json!({"path": ".polpo/hooks/x.json", "content": "{}"})),
        ("edit", json!({"path": agent, "old_text": "read", "new_text": "*"})),
        ("ls", json!({"path": ".polpo"})),
        ("glob", json!({"pattern": "**/*", "path": ".polpo"})),
        ("grep", json!({"pattern": "sk-plain", "path": ".polpo"})),
        ("http_download", json!({"url": "http://127.0.0.1:9/x", "path": ".polpo/hooks/x.json"})),
        ("register_outcome", json!({"type": "file", "label": "keys", "path": ".polpo/project.json"})),
    ];
    for (tool, args) in refused {
        let result = call(&c, tool, args.clone()).await;
        assert_eq!(code(result), ESCAPE, "{tool} {args}");
    }
    assert_eq!(std::fs::read_to_string(d.ws.join(agent)).unwrap(), r#"{"allowedTools":["read"]}"#);
    assert!(!d.ws.join(".polpo/hooks/x.json").exists());
}

#[tokio::test]
async fn a_symlink_into_the_project_folder_is_refused() {
    let (d, c) = project_workspace();
    symlink(d.ws.join(".polpo"), d.ws.join("link")).unwrap();
    symlink(d.ws.join(".polpo/project.json"), d.ws.join("keys.txt")).unwrap();
    for (tool, args) in [
        ("read", json!({"path": "link/project.json"})),
        ("read", json!({"path": "keys.txt"})),
        ("write", json!({"path": "link/hooks/x.json", "content": "{}"})),
        ("write", json!({"path": "keys.txt", "content": "{}"})),
        ("edit", json!({"path": "link/agents/a/agent.json", "old_text": "read", "new_text": "*"})),
        ("ls", json!({"path": "link"})),
        ("glob", json!({"pattern": "**/*", "path": "link"})),
        ("grep", json!({"pattern": "sk-plain", "path": "link"})),
        ("http_download", json!({"url": "http://127.0.0.1:9/x", "path": "link/hooks/x.json"})),
        ("register_outcome", json!({"type": "file", "label": "keys", "path": "keys.txt"})),
    ] {
        let result = call(&c, tool, args.clone()).await;
        assert_eq!(code(result), ESCAPE, "{tool} {args}");
    }
    assert!(!d.ws.join(".polpo/hooks/x.json").exists());
    assert!(std::fs::read_to_string(d.ws.join(".polpo/project.json")).unwrap().contains("sk-plain"));
}

#[tokio::test]
async fn walking_the_workspace_never_enters_the_project_folder() {
    let (d, c) = project_workspace();
    // Even a file linked from outside `.polpo/` is not followed into it.
    symlink(d.ws.join(".polpo/project.json"), d.ws.join("keys.json")).unwrap();
    let listing = call(&c, "ls", json!({})).await.unwrap().text;
    assert!(!listing.contains(".polpo"), "{listing}");
    assert!(listing.contains("notes.txt"), "{listing}");
    let found = call(&c, "glob", json!({"pattern": "**/*.json"})).await.unwrap().text;
    assert_eq!(found, "No files found");
    let hits = call(&c, "grep", json!({"pattern": "sk-plain"})).await.unwrap().text;
    assert_eq!(hits, "notes.txt:1:sk-plain is not here");
}

#[tokio::test]
async fn protected_paths_win_over_allowed_paths() {
    let (d, mut c) = project_workspace();
    c.allowed_paths = vec![d.ws.join(".polpo")];
    assert_eq!(code(call(&c, "read", json!({"path": ".polpo/project.json"})).await), ESCAPE);
}

#[tokio::test]
async fn only_the_memory_tools_reach_the_memory_file_inside_the_project_folder() {
    let (d, mut c) = project_workspace();
    let memory = d.ws.join(".polpo/memory/a.md");
    c.memory_file = Some(memory.clone());
    call(&c, "memory_save", json!({"content": "likes tea"})).await.unwrap();
    assert_eq!(call(&c, "memory_get", json!({})).await.unwrap().text, "likes tea");
    assert_eq!(std::fs::read_to_string(&memory).unwrap(), "likes tea");
    assert_eq!(code(call(&c, "read", json!({"path": ".polpo/memory/a.md"})).await), ESCAPE);
    assert_eq!(code(call(&c, "write", json!({"path": ".polpo/memory/a.md", "content": "x"})).await), ESCAPE);
}
