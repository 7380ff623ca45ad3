//! The runtime end to end below HTTP: a project on disk, the fake LLM, a real file store.
//! What a user of `/v1/chat/completions` or `polpo run` relies on: sessions that remember,
//! policy layers that only narrow, and errors with stable codes before any model call.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup should panic loudly

use polpo_core::message::{Message, Role};
use polpo_engine::{ChatError, ChatInput, Loaded, Runtime};
use polpo_llm::{Providers, ToolChoice};
use polpo_store::{PageRequest, StoreKind, SystemClock, open_store};
use polpo_testkit::{FakeLlm, ProjectFixture, Turn};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;

struct Setup {
    _dir: TempDir,
    runtime: Arc<Runtime>,
}

async fn setup(llm: &FakeLlm) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    ProjectFixture::new(dir.path(), json!({"storage": "file"}))
        .unwrap()
        .agent("coder", json!({"model": "openai/fake-model", "allowedTools": ["read", "ls", "write"], "maxTurns": 3}), "You write code.")
        .unwrap()
        .agent("writer", json!({"model": "openai/fake-model"}), "You write prose.")
        .unwrap();
    std::fs::write(dir.path().join("notes.txt"), "the password is swordfish").unwrap();
    let project = polpo_project::load_project(dir.path()).unwrap();
    let base = llm.base_url();
    let env: polpo_llm::EnvLookup = Arc::new(move |name| match name {
        "OPENAI_BASE_URL" => Some(base.clone()),
        "OPENAI_API_KEY" => Some("sk-test".into()),
        _ => None,
    });
    let store = open_store(StoreKind::File, dir.path(), None, Arc::new(SystemClock)).await.unwrap();
    let runtime = Arc::new(Runtime::new(Loaded::new(project).unwrap(), Providers::new(BTreeMap::new(), env), store));
    Setup { _dir: dir, runtime }
}

async fn chat(rt: &Arc<Runtime>, input: ChatInput) -> Result<polpo_engine::ChatOutput, ChatError> {
    rt.chat(input, &|_| {}, &CancellationToken::new()).await
}

#[tokio::test]
async fn a_session_remembers_the_conversation_and_is_stored() {
    let llm = FakeLlm::start([Turn::tool_calls(vec![("read", json!({"path": "notes.txt"}))]), Turn::text("It says swordfish."), Turn::text("You asked about notes.")]).await.unwrap();
    let s = setup(&llm).await;
    let first = chat(&s.runtime, ChatInput::new("coder", vec![Message::user("What is in notes.txt?")])).await.unwrap();
    assert_eq!(first.outcome.content.as_deref(), Some("It says swordfish."));
    assert_eq!(first.session.title, "What is in notes.txt?");
    // user, assistant(tool call), tool result, assistant answer
    assert_eq!(first.session.message_count, 4);

    // The client sends only the new message; the server rebuilds the history from the store.
    let mut next = ChatInput::new("coder", vec![Message::user("What did I ask?")]);
    next.session_id = Some(first.session.id.clone());
    let second = chat(&s.runtime, next).await.unwrap();
    assert_eq!(second.session.id, first.session.id);
    assert_eq!(second.session.message_count, 6);
    let sent = &llm.requests()[2].body["messages"];
    let roles: Vec<&str> = sent.as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "assistant", "user"]);
    assert!(sent[3]["content"].as_str().unwrap().contains("swordfish"), "the tool result is part of the history");
    assert!(sent[0]["content"].as_str().unwrap().starts_with("You write code."));

    let stored = s.runtime.store().sessions.list_messages(&first.session.id, &PageRequest::default()).await.unwrap();
    assert_eq!(stored.items.last().unwrap().message.text_content(), "You asked about notes.");
}

#[tokio::test]
async fn a_client_resending_the_whole_conversation_does_not_duplicate_it() {
    let llm = FakeLlm::start([Turn::text("Hello!"), Turn::text("Fine, thanks.")]).await.unwrap();
    let s = setup(&llm).await;
    let first = chat(&s.runtime, ChatInput::new("writer", vec![Message::user("Hi")])).await.unwrap();
    let assistant = Message { role: Role::Assistant, ..Message::user("Hello!") };
    let mut next = ChatInput::new("writer", vec![Message::user("Hi"), assistant, Message::user("How are you?")]);
    next.session_id = Some(first.session.id.clone());
    let second = chat(&s.runtime, next).await.unwrap();
    assert_eq!(second.session.message_count, 4, "Hi, Hello!, How are you?, Fine");
}

#[tokio::test]
async fn mistakes_fail_with_codes_before_any_model_call() {
    let llm = FakeLlm::start([Turn::text("unused")]).await.unwrap();
    let s = setup(&llm).await;
    let err = chat(&s.runtime, ChatInput::new("nobody", vec![Message::user("hi")])).await.unwrap_err();
    assert_eq!(err.code(), "agent_not_found");

    let mut missing = ChatInput::new("coder", vec![Message::user("hi")]);
    missing.session_id = Some("no-such-session".into());
    assert_eq!(chat(&s.runtime, missing).await.unwrap_err().code(), "session_not_found");

    // The request may narrow the agent's tools, never widen them: `bash` is not the agent's.
    let mut widen = ChatInput::new("coder", vec![Message::user("run ls")]);
    widen.allowed_tools = Some(vec!["bash".into(), "read".into()]);
    widen.tool_choice = ToolChoice::Tool("bash".into());
    assert_eq!(chat(&s.runtime, widen).await.unwrap_err().code(), "tool_policy_denied");

    let mut narrowed = ChatInput::new("coder", vec![Message::user("read it")]);
    narrowed.allowed_tools = Some(vec!["ls".into()]);
    narrowed.tool_choice = ToolChoice::Tool("read".into());
    assert_eq!(chat(&s.runtime, narrowed).await.unwrap_err().code(), "tool_policy_denied");
    assert!(llm.requests().is_empty(), "no model call was paid for");
    let sessions = s.runtime.store().sessions.list_sessions(&Default::default(), &PageRequest::default()).await.unwrap();
    assert!(sessions.items.is_empty(), "a refused request leaves no session behind");
}

#[tokio::test]
async fn another_agents_session_is_refused() {
    let llm = FakeLlm::start([Turn::text("hello")]).await.unwrap();
    let s = setup(&llm).await;
    let first = chat(&s.runtime, ChatInput::new("writer", vec![Message::user("hi")])).await.unwrap();
    let mut other = ChatInput::new("coder", vec![Message::user("hi")]);
    other.session_id = Some(first.session.id);
    assert_eq!(chat(&s.runtime, other).await.unwrap_err().code(), "session_agent_mismatch");
}

#[tokio::test]
async fn a_run_out_of_turns_keeps_its_transcript_in_the_session() {
    let call = || Turn::tool_calls(vec![("ls", json!({"path": "."}))]);
    let llm = FakeLlm::start([call(), call(), call()]).await.unwrap();
    let s = setup(&llm).await;
    let err = chat(&s.runtime, ChatInput::new("coder", vec![Message::user("loop forever")])).await.unwrap_err();
    assert_eq!(err.code(), "max_turns_exhausted");
    let sessions = s.runtime.store().sessions.list_sessions(&Default::default(), &PageRequest::default()).await.unwrap();
    // user + 3 × (assistant call + tool result)
    assert_eq!(sessions.items[0].message_count, 7);
}

#[tokio::test]
async fn without_any_provider_key_the_offline_model_answers() {
    let offline = FakeLlm::start([Turn::text("answered offline")]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    ProjectFixture::new(dir.path(), json!({})).unwrap().agent("writer", json!({"model": "openai/gpt-4o-mini"}), "You write.").unwrap();
    let project = polpo_project::load_project(dir.path()).unwrap();
    // Stands in for the in-process model: any provider registered under `local`.
    let config = polpo_llm::ProviderConfig::new(polpo_llm::WireApi::OpenAiChat, offline.base_url());
    let local: Arc<dyn polpo_llm::ModelProvider> = Arc::new(polpo_llm::OpenAiProvider::new(&config, None).unwrap());
    let no_keys: polpo_llm::EnvLookup = Arc::new(|_| None);
    let providers = Providers::new(BTreeMap::new(), no_keys).with_provider("local", local);
    let store = open_store(StoreKind::File, dir.path(), None, Arc::new(SystemClock)).await.unwrap();
    let rt = Arc::new(Runtime::new(Loaded::new(project).unwrap(), providers, store).with_offline_model("local/tiny"));
    let out = chat(&rt, ChatInput::new("writer", vec![Message::user("hi")])).await.unwrap();
    assert_eq!(out.outcome.content.as_deref(), Some("answered offline"));
    assert_eq!(offline.requests()[0].body["model"], "tiny");
}
