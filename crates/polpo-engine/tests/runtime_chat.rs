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
        .unwrap()
        .agent("support", json!({"model": "openai/fake-model", "allowedTools": ["read", "ask_user_question"],
            "chat": {"suggestions": {"enabled": true, "maxItems": 2, "guidance": "Prefer concrete next actions."}}}), "You help.")
        .unwrap()
        .agent("quiet", json!({"model": "openai/fake-model", "chat": {"allowUserQuestions": false}}), "You never ask.")
        .unwrap()
        .agent("loader", json!({"model": "openai/fake-model", "allowedTools": ["read", "ls"], "toolLoading": {"mode": "progressive"}}), "You load tools.")
        .unwrap();
    std::fs::write(dir.path().join("notes.txt"), "the password is swordfish").unwrap();
    let project = polpo_project::load_project(dir.path()).unwrap();
    let env: polpo_llm::EnvLookup = llm.openai_env();
    let store = open_store(StoreKind::File, dir.path(), None, Arc::new(SystemClock)).await.unwrap();
    let runtime = Arc::new(Runtime::new(Loaded::new(project).unwrap(), Providers::new(BTreeMap::new(), env), store));
    Setup { _dir: dir, runtime }
}

async fn chat(rt: &Arc<Runtime>, input: ChatInput) -> Result<polpo_engine::ChatOutput, ChatError> {
    rt.chat(input, &|_| {}, &CancellationToken::new()).await
}

#[tokio::test]
async fn a_session_remembers_the_conversation_and_is_stored() {
    let llm = FakeLlm::start([
        Turn::tool_calls(vec![("read", json!({"path": "notes.txt"}))]),
        Turn::text("It says swordfish."),
        Turn::text("You asked about notes."),
    ])
    .await
    .unwrap();
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
    let sessions =
        s.runtime.store().sessions.list_sessions(&Default::default(), &PageRequest::default()).await.unwrap();
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
    let sessions =
        s.runtime.store().sessions.list_sessions(&Default::default(), &PageRequest::default()).await.unwrap();
    // user + 3 × (assistant call + tool result)
    assert_eq!(sessions.items[0].message_count, 7);
}

#[tokio::test]
async fn without_any_provider_key_the_offline_model_answers() {
    let offline = FakeLlm::start([Turn::text("answered offline")]).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    ProjectFixture::new(dir.path(), json!({}))
        .unwrap()
        .agent("writer", json!({"model": "openai/gpt-4o-mini"}), "You write.")
        .unwrap();
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

fn with_capabilities(mut input: ChatInput, ask: bool, suggestions: bool) -> ChatInput {
    input.capabilities = polpo_engine::interaction::Capabilities { ask_user_question: ask, suggestions };
    input
}

fn offered(llm: &FakeLlm, n: usize) -> Vec<String> {
    llm.requests()[n].body["tools"]
        .as_array()
        .map(|t| t.iter().map(|t| t["function"]["name"].as_str().unwrap().to_owned()).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn reasoning_is_stored_beside_the_answer_and_never_sent_back_to_the_model() {
    let llm = FakeLlm::start([
        Turn::tool_calls(vec![("read", json!({"path": "notes.txt"}))]).with_reasoning("I should read the notes first."),
        Turn::text("It is swordfish.").with_reasoning("The file names the password."),
        Turn::text("You asked about the password."),
    ])
    .await
    .unwrap();
    let s = setup(&llm).await;
    let first = chat(&s.runtime, ChatInput::new("coder", vec![Message::user("What is the password?")])).await.unwrap();
    assert_eq!(first.outcome.content.as_deref(), Some("It is swordfish."));
    let stored =
        s.runtime.store().sessions.list_messages(&first.session.id, &PageRequest::default()).await.unwrap().items;
    let reasoning: Vec<Option<&str>> = stored.iter().map(|m| m.reasoning.as_deref()).collect();
    assert_eq!(reasoning, [None, Some("I should read the notes first."), None, Some("The file names the password.")]);
    assert_eq!(stored[3].message.text_content(), "It is swordfish.", "reasoning is not mixed into the content");
    assert!(!stored[3].reasoning_truncated);

    let mut next = ChatInput::new("coder", vec![Message::user("What did I ask?")]);
    next.session_id = Some(first.session.id.clone());
    chat(&s.runtime, next).await.unwrap();
    let sent = llm.requests()[2].body.to_string();
    assert!(
        sent.contains("It is swordfish.")
            && !sent.contains("names the password")
            && !sent.contains("read the notes first"),
        "{sent}"
    );
}

#[tokio::test]
async fn reasoning_over_64_kib_is_cut_and_marked() {
    let long = "why ".repeat(20_000);
    let llm = FakeLlm::start([Turn::text("Done.").with_reasoning(long)]).await.unwrap();
    let s = setup(&llm).await;
    let out = chat(&s.runtime, ChatInput::new("writer", vec![Message::user("Think hard")])).await.unwrap();
    let stored =
        s.runtime.store().sessions.list_messages(&out.session.id, &PageRequest::default()).await.unwrap().items;
    let last = stored.last().unwrap();
    assert!(last.reasoning_truncated);
    assert_eq!(last.reasoning.as_deref().unwrap().len(), polpo_store::MAX_REASONING_BYTES);
}

#[tokio::test]
async fn ask_user_question_ends_the_turn_and_the_answer_continues_the_session() {
    let question = json!({"questions": [{"id": "plan", "question": "Which plan are you on?", "header": "Plan", "options": [{"label": "Free"}, {"label": "Pro"}]}]});
    let llm = FakeLlm::start([
        Turn::tool_calls(vec![("ask_user_question", question.clone())]),
        Turn::text("On Pro, open Settings > Billing."),
        Turn::tool_calls(vec![("ask_user_question", json!({"questions": [{"id": "os", "question": "Which OS?"}]}))]),
        Turn::text("Then use the installer."),
    ])
    .await
    .unwrap();
    let s = setup(&llm).await;
    let asked = chat(
        &s.runtime,
        with_capabilities(ChatInput::new("support", vec![Message::user("How do I change billing?")]), true, false),
    )
    .await
    .unwrap();
    assert!(offered(&llm, 0).contains(&"ask_user_question".to_owned()));
    assert_eq!(asked.outcome.finish_reason, polpo_core::message::FinishReason::Other("ask_user".into()));
    assert_eq!(asked.outcome.content, None);
    let call = &asked.outcome.client_tool_calls[0];
    assert_eq!(call.name, "ask_user_question");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&call.arguments).unwrap(),
        question,
        "the question payload reaches the client as written"
    );

    // The answer comes back as the tool result and the same session goes on.
    let mut answer = ChatInput::new("support", vec![Message::tool_result(call.id.clone(), r#"{"plan":"Pro"}"#)]);
    answer.session_id = Some(asked.session.id.clone());
    let answered = chat(&s.runtime, with_capabilities(answer, true, false)).await.unwrap();
    assert_eq!(answered.outcome.content.as_deref(), Some("On Pro, open Settings > Billing."));
    assert!(llm.requests()[1].body["messages"].to_string().contains(r#"{\"plan\":\"Pro\"}"#));

    // A user who types the answer instead of using the form answers it too.
    let mut again = ChatInput::new("support", vec![Message::user("And to install it?")]);
    again.session_id = Some(asked.session.id.clone());
    let asked = chat(&s.runtime, with_capabilities(again, true, false)).await.unwrap();
    let mut typed = ChatInput::new("support", vec![Message::user("Linux")]);
    typed.session_id = Some(asked.session.id.clone());
    let done = chat(&s.runtime, with_capabilities(typed, true, false)).await.unwrap();
    assert_eq!(done.outcome.content.as_deref(), Some("Then use the installer."));
    let roles: Vec<String> = llm.requests()[3].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        roles[roles.len() - 3..],
        ["assistant", "tool", "user"],
        "the open question is answered before the typed reply"
    );
}

#[tokio::test]
async fn questions_need_both_the_client_capability_and_the_agents_permission() {
    let llm = FakeLlm::start([Turn::text("a"), Turn::text("b"), Turn::text("c")]).await.unwrap();
    let s = setup(&llm).await;
    chat(&s.runtime, ChatInput::new("support", vec![Message::user("hi")])).await.unwrap();
    chat(&s.runtime, with_capabilities(ChatInput::new("quiet", vec![Message::user("hi")]), true, false)).await.unwrap();
    // `coder` has an allowedTools list without ask_user_question: the policy applies to it too.
    chat(&s.runtime, with_capabilities(ChatInput::new("coder", vec![Message::user("hi")]), true, false)).await.unwrap();
    for n in 0..3 {
        assert!(!offered(&llm, n).contains(&"ask_user_question".to_owned()), "request {n}: {:?}", offered(&llm, n));
    }
    // A client may not declare its own tool under that name.
    let mut shadow = ChatInput::new("support", vec![Message::user("hi")]);
    shadow.client_tools = vec![polpo_core::tool::ToolSpec {
        name: "ask_user_question".into(),
        description: "mine".into(),
        parameters: json!({"type": "object"}),
    }];
    assert_eq!(chat(&s.runtime, shadow).await.unwrap_err().code(), "invalid_request");
}

#[tokio::test]
async fn suggestions_are_bounded_opt_in_and_fail_open() {
    let llm = FakeLlm::start([
        Turn::text("Set it in agent.json."),
        Turn::text(r#"{"suggestions":[{"label":"Show an example","prompt":"Show me a complete example."},{"label":"Validate","prompt":"How do I validate it?"},{"label":"More","prompt":"Tell me more."}]}"#),
        Turn::text("Here is more."),
        Turn::error(400, "suggestions model refused"),
        Turn::text("Without suggestions."),
    ])
    .await
    .unwrap();
    let s = setup(&llm).await;
    let out = chat(
        &s.runtime,
        with_capabilities(ChatInput::new("support", vec![Message::user("How do I configure it?")]), false, true),
    )
    .await
    .unwrap();
    assert_eq!(out.outcome.content.as_deref(), Some("Set it in agent.json."));
    let labels: Vec<&str> = out.suggestions.iter().map(|s| s.label.as_str()).collect();
    assert_eq!(labels, ["Show an example", "Validate"], "maxItems 2");
    assert_eq!(out.suggestions[0].prompt, "Show me a complete example.");
    let call = &llm.requests()[1].body;
    assert!(call["tools"].as_array().is_none_or(Vec::is_empty), "the suggestion call is tool-free");
    assert!(
        call.to_string().contains("Prefer concrete next actions.")
            && call.to_string().contains("Set it in agent.json.")
    );

    // The suggestion call fails: the answer is unaffected.
    let failed =
        chat(&s.runtime, with_capabilities(ChatInput::new("support", vec![Message::user("More?")]), false, true))
            .await
            .unwrap();
    assert_eq!(failed.outcome.content.as_deref(), Some("Here is more."));
    assert!(failed.suggestions.is_empty());

    // Without the client capability no suggestion call is made.
    let plain = chat(&s.runtime, ChatInput::new("support", vec![Message::user("And?")])).await.unwrap();
    assert!(plain.suggestions.is_empty());
    assert_eq!(llm.requests().len(), 5);
}

#[tokio::test]
async fn a_tool_loaded_in_one_request_stays_loaded_in_the_session() {
    let llm = FakeLlm::start([
        Turn::tool_calls(vec![("polpo_tool_load", json!({"names": ["read"]}))]),
        Turn::tool_calls(vec![("read", json!({"path": "notes.txt"}))]),
        Turn::text("swordfish"),
        Turn::text("Still here."),
    ])
    .await
    .unwrap();
    let s = setup(&llm).await;
    let first = chat(&s.runtime, ChatInput::new("loader", vec![Message::user("Read notes.txt")])).await.unwrap();
    assert_eq!(first.outcome.content.as_deref(), Some("swordfish"));
    assert_eq!(offered(&llm, 0), ["polpo_tool_list", "polpo_tool_search", "polpo_tool_load"]);
    let mut next = ChatInput::new("loader", vec![Message::user("Again?")]);
    next.session_id = Some(first.session.id.clone());
    chat(&s.runtime, next).await.unwrap();
    assert_eq!(offered(&llm, 3), ["polpo_tool_list", "polpo_tool_search", "polpo_tool_load", "read"]);
}
