//! Progressive tool loading as the model experiences it: which tool schemas each model call
//! offers, what listing, searching and loading answer, and that the policy still decides.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup should panic loudly

#[path = "hooks_conformance/support.rs"]
mod support;

use polpo_core::config::ToolLoadingMode;
use polpo_core::tool::{ToolEffect, ToolSpec};
use polpo_engine::tools::loading::AUTO_PROGRESSIVE_ABOVE;
use polpo_testkit::{FakeLlm, Turn};
use polpo_tools::{Tool, ToolContext, ToolError, ToolOutput};
use serde_json::{Value, json};
use std::sync::Arc;
use support::{Workspace, invocation_with, request_tools, run};

const DISCLOSURE: [&str; 3] = ["polpo_tool_list", "polpo_tool_search", "polpo_tool_load"];

/// A custom tool that only answers its own name (a stand-in for MCP or project tools).
struct Echo(ToolSpec);

#[async_trait::async_trait]
impl Tool for Echo {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }
    fn effect(&self) -> ToolEffect {
        ToolEffect::Read
    }
    async fn call(&self, _ctx: &ToolContext, _args: Value) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput { text: format!("{} ran", self.0.name), details: Value::Null })
    }
}

/// The built-in tools plus `extra` custom ones named `site_<n>`.
fn catalog(extra: usize) -> Vec<Arc<dyn Tool>> {
    let mut tools = polpo_tools::tools::system_tools();
    for i in 0..extra {
        let spec = ToolSpec {
            name: format!("site_{i}"),
            description: format!("Site page number {i}"),
            parameters: json!({"type": "object"}),
        };
        tools.push(Arc::new(Echo(spec)));
    }
    tools
}

#[tokio::test]
async fn progressive_loading_shows_a_tool_from_the_next_call_and_never_past_the_policy() {
    let ws = Workspace::new();
    std::fs::write(ws.file("notes.txt"), "the code is 7").unwrap();
    let llm = FakeLlm::start(vec![
        Turn::tool_calls(vec![("polpo_tool_list", json!({}))]),
        Turn::tool_calls(vec![("polpo_tool_search", json!({"query": "read file"}))]),
        // `bash` exists but the policy denies it; `ls` is authorized but never loaded.
        Turn::tool_calls(vec![
            ("polpo_tool_load", json!({"names": ["read", "bash"]})),
            ("read", json!({"path": "notes.txt"})),
        ]),
        Turn::tool_calls(vec![("read", json!({"path": "notes.txt"})), ("ls", json!({}))]),
        Turn::text("The code is 7."),
    ])
    .await
    .unwrap();
    let mut inv = invocation_with(&llm, &ws, None, polpo_tools::tools::system_tools(), Some(&["read", "ls", "write"]));
    inv.tool_loading = ToolLoadingMode::Progressive;
    let seen = run(&inv, "What is the code in notes.txt?").await;
    assert_eq!(seen.content(), "The code is 7.");

    assert_eq!(request_tools(&llm, 0), DISCLOSURE, "only the disclosure tools at first");
    let results = seen.tool_results();
    let listing = &results[0].0;
    assert!(listing.contains("- read:") && listing.contains("- write:") && !listing.contains("bash"), "{listing}");
    assert!(results[1].0.starts_with("- read:"), "the best match comes first: {}", results[1].0);
    assert!(!results[1].0.contains("bash"));
    let (load, is_error) = &results[2];
    assert!(
        !is_error && load.contains("Loaded: read.") && load.contains("Not available to this agent: bash"),
        "{load}"
    );
    // Loaded by the same message: not callable yet, with a hint the model can follow.
    assert!(results[3].1 && results[3].0.contains("tool_not_loaded"), "{:?}", results[3]);
    assert_eq!(request_tools(&llm, 3), [&DISCLOSURE[..], &["read"]].concat(), "read is offered from the next call on");
    assert_eq!(results[4], ("1\tthe code is 7".to_string(), false));
    assert!(results[5].1 && results[5].0.contains("tool_not_loaded: `ls`"), "{:?}", results[5]);
}

#[tokio::test]
async fn a_forced_tool_is_preloaded_and_client_tools_stay_direct() {
    let ws = Workspace::new();
    let llm = FakeLlm::start(vec![Turn::text("done")]).await.unwrap();
    let mut inv = invocation_with(&llm, &ws, None, polpo_tools::tools::system_tools(), None);
    inv.tool_loading = ToolLoadingMode::Progressive;
    inv.tool_choice = polpo_llm::ToolChoice::Tool("glob".into());
    inv.client_tools = vec![
        ToolSpec {
            name: "open_panel".into(),
            description: "Open a panel in the UI".into(),
            parameters: json!({"type": "object"}),
        }
        .into(),
    ];
    run(&inv, "go").await.result.unwrap();
    assert_eq!(request_tools(&llm, 0), [&DISCLOSURE[..], &["glob", "open_panel"]].concat());
}

#[tokio::test]
async fn auto_mode_switches_to_progressive_only_above_the_catalog_limit_after_the_policy() {
    let ws = Workspace::new();
    let llm = FakeLlm::start(vec![Turn::text("ok"); 4]).await.unwrap();
    let builtins = polpo_tools::tools::system_tools().len();
    assert!(builtins <= AUTO_PROGRESSIVE_ABOVE);

    let small = invocation_with(&llm, &ws, None, catalog(AUTO_PROGRESSIVE_ABOVE - builtins), None);
    assert_eq!(small.tool_loading, ToolLoadingMode::Direct, "the test helper builds direct invocations");
    let mut small = small;
    small.tool_loading = ToolLoadingMode::Auto;
    run(&small, "hi").await.result.unwrap();
    assert_eq!(request_tools(&llm, 0).len(), AUTO_PROGRESSIVE_ABOVE, "a catalog at the limit is sent directly");

    let mut large = invocation_with(&llm, &ws, None, catalog(AUTO_PROGRESSIVE_ABOVE - builtins + 1), None);
    large.tool_loading = ToolLoadingMode::Auto;
    run(&large, "hi").await.result.unwrap();
    assert_eq!(request_tools(&llm, 1), DISCLOSURE, "one tool more and the catalog is disclosed progressively");

    // The limit applies to the authorized catalog: a narrow policy keeps a big agent direct.
    let mut narrowed = invocation_with(&llm, &ws, None, catalog(40), Some(&["read", "site_1*"]));
    narrowed.tool_loading = ToolLoadingMode::Auto;
    run(&narrowed, "hi").await.result.unwrap();
    let offered = request_tools(&llm, 2);
    assert_eq!(offered.len(), 12, "read, site_1 and site_10..site_19: {offered:?}");
    assert!(offered.contains(&"site_1".to_string()) && !offered.contains(&"polpo_tool_load".to_string()));

    // Direct never discloses, whatever the size.
    let mut direct = invocation_with(&llm, &ws, None, catalog(40), None);
    direct.tool_loading = ToolLoadingMode::Direct;
    run(&direct, "hi").await.result.unwrap();
    assert_eq!(request_tools(&llm, 3).len(), builtins + 40);
}

#[tokio::test]
async fn a_search_finds_custom_tools_and_loading_one_makes_it_callable() {
    let ws = Workspace::new();
    let llm = FakeLlm::start(vec![
        Turn::tool_calls(vec![("polpo_tool_search", json!({"query": "page 12", "limit": 3}))]),
        Turn::tool_calls(vec![("polpo_tool_load", json!({"names": ["SITE_12"]}))]),
        Turn::tool_calls(vec![("site_12", json!({}))]),
        Turn::text("Page 12 is fine."),
    ])
    .await
    .unwrap();
    let mut inv = invocation_with(&llm, &ws, None, catalog(30), None);
    inv.tool_loading = ToolLoadingMode::Auto;
    let seen = run(&inv, "check page 12").await;
    assert_eq!(seen.content(), "Page 12 is fine.");
    let results = seen.tool_results();
    assert!(results[0].0.lines().count() <= 3 && results[0].0.contains("- site_12:"), "{}", results[0].0);
    assert!(results[1].0.contains("Loaded: site_12."), "names match case-insensitively: {}", results[1].0);
    assert_eq!(results[2], ("site_12 ran".to_string(), false));
    assert!(request_tools(&llm, 2).contains(&"site_12".to_string()));
}

/// No steering: just the resume behaviour of a durable run.
struct Resumed;

impl polpo_engine::RunControl for Resumed {
    fn take_steering(&self) -> Vec<polpo_core::message::Message> {
        Vec::new()
    }
    fn take_follow_ups(&self) -> Vec<polpo_core::message::Message> {
        Vec::new()
    }
}

#[tokio::test]
async fn a_run_resumed_after_a_load_call_answers_it_and_offers_the_tool() {
    use polpo_core::message::{Message, Role, ToolCall};
    let ws = Workspace::new();
    let llm = FakeLlm::start(vec![Turn::text("resumed")]).await.unwrap();
    let mut inv = invocation_with(&llm, &ws, None, polpo_tools::tools::system_tools(), Some(&["read"]));
    inv.tool_loading = ToolLoadingMode::Progressive;
    let load = ToolCall { id: "c1".into(), name: "polpo_tool_load".into(), arguments: r#"{"names":["read"]}"#.into() };
    let history = vec![
        Message::user("go"),
        Message { role: Role::Assistant, content: None, tool_calls: vec![load], tool_call_id: None, name: None },
    ];
    let outcome = polpo_engine::run_turns_controlled(
        &inv,
        history,
        &|_| {},
        &tokio_util::sync::CancellationToken::new(),
        Some(&Resumed),
    )
    .await
    .unwrap();
    assert!(outcome.messages[0].text_content().starts_with("Loaded: read."), "{:?}", outcome.messages[0]);
    assert_eq!(request_tools(&llm, 0), [&DISCLOSURE[..], &["read"]].concat());
}
