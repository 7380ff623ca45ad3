//! Contract tests: both providers against the scripted fake servers from polpo-testkit, over
//! real HTTP on loopback.

// Test helpers outside `#[test]` functions may panic: a failed setup is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use futures::StreamExt;
use polpo_core::message::{FinishReason, Message, ToolCall, Usage};
use polpo_core::model::{ModelProfiles, ModelSelection};
use polpo_core::tool::ToolSpec;
use polpo_llm::{
    AnthropicProvider, ApiKey, EnvLookup, HttpPolicy, LlmError, LlmErrorKind, ModelEvent, ModelProvider, ModelRequest,
    OpenAiProvider, ProviderConfig, Providers, ToolChoice, WireApi,
};
use polpo_testkit::{FakeLlm, Turn};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

const KEY: &str = "sk-test-secret-123";
const WIRES: [WireApi; 2] = [WireApi::OpenAiChat, WireApi::AnthropicMessages];

fn fast_http() -> HttpPolicy {
    HttpPolicy {
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(40),
        idle_timeout: Duration::from_secs(10),
        ..HttpPolicy::default()
    }
}

fn config(wire: WireApi, fake: &FakeLlm) -> ProviderConfig {
    let base = match wire {
        WireApi::OpenAiChat => fake.base_url(),
        WireApi::AnthropicMessages => fake.anthropic_base_url(),
    };
    ProviderConfig { http: fast_http(), ..ProviderConfig::new(wire, base) }
}

fn provider_with(config: &ProviderConfig, key: Option<&str>) -> Arc<dyn ModelProvider> {
    let key = key.map(ApiKey::new);
    match config.api {
        WireApi::OpenAiChat => Arc::new(OpenAiProvider::new(config, key).unwrap()),
        WireApi::AnthropicMessages => Arc::new(AnthropicProvider::new(config, key).unwrap()),
    }
}

fn provider(wire: WireApi, fake: &FakeLlm) -> Arc<dyn ModelProvider> {
    provider_with(&config(wire, fake), Some(KEY))
}

fn read_tool() -> ToolSpec {
    ToolSpec {
        name: "read".into(),
        description: "Read a file".into(),
        parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
    }
}

fn request() -> ModelRequest {
    ModelRequest {
        model: "test-model".into(),
        messages: Arc::new(vec![Message::system("Be brief."), Message::user("What is in a.txt?")]),
        tools: vec![Arc::new(read_tool())],
        ..ModelRequest::default()
    }
}

/// Everything a caller saw from one call.
#[derive(Debug, Default)]
struct Outcome {
    events: Vec<ModelEvent>,
    error: Option<LlmError>,
}

impl Outcome {
    fn text(&self) -> String {
        self.events
            .iter()
            .filter_map(|e| if let ModelEvent::TextDelta(t) = e { Some(t.as_str()) } else { None })
            .collect()
    }
    fn reasoning(&self) -> String {
        self.events
            .iter()
            .filter_map(|e| if let ModelEvent::ReasoningDelta(t) = e { Some(t.as_str()) } else { None })
            .collect()
    }
    fn tool_calls(&self) -> Vec<ToolCall> {
        self.events
            .iter()
            .filter_map(|e| if let ModelEvent::ToolCall(c) = e { Some(c.clone()) } else { None })
            .collect()
    }
    fn deltas_of_call(&self, index: usize) -> usize {
        self.events.iter().filter(|e| matches!(e, ModelEvent::ToolCallDelta { index: i, .. } if *i == index)).count()
    }
    fn usage(&self) -> Option<Usage> {
        self.events.iter().find_map(|e| if let ModelEvent::Usage(u) = e { Some(*u) } else { None })
    }
    fn finish(&self) -> Option<FinishReason> {
        self.events.iter().find_map(|e| if let ModelEvent::Finish(f) = e { Some(f.clone()) } else { None })
    }
    fn error_kind(&self) -> Option<LlmErrorKind> {
        self.error.as_ref().map(|e| e.kind)
    }
}

async fn run(provider: &dyn ModelProvider, request: ModelRequest) -> Outcome {
    let mut outcome = Outcome::default();
    match provider.stream(request).await {
        Err(e) => outcome.error = Some(e),
        Ok(mut stream) => {
            while let Some(item) = stream.next().await {
                match item {
                    Ok(event) => outcome.events.push(event),
                    Err(e) => {
                        outcome.error = Some(e);
                        break;
                    }
                }
            }
        }
    }
    outcome
}

fn full_turn() -> Turn {
    Turn::text("Let me look at it.")
        .with_reasoning("The user wants a.txt; I should read it.")
        .with_tool_call("read", json!({"path": "src/deeply/nested/a.txt", "limit": 20}))
        .with_tool_call("read", json!({"path": "b.txt"}))
        .usage(42, 7)
}

fn assert_full_turn(o: &Outcome, wire: WireApi) {
    assert!(o.error.is_none(), "{wire:?}: {:?}", o.error);
    assert_eq!(o.text(), "Let me look at it.", "{wire:?}");
    assert_eq!(o.reasoning(), "The user wants a.txt; I should read it.", "{wire:?}");
    let calls = o.tool_calls();
    assert_eq!(calls.len(), 2, "{wire:?}");
    assert_eq!(calls[0].name, "read");
    assert_eq!(
        serde_json::from_str::<Value>(&calls[0].arguments).unwrap(),
        json!({"path": "src/deeply/nested/a.txt", "limit": 20})
    );
    assert_eq!(serde_json::from_str::<Value>(&calls[1].arguments).unwrap(), json!({"path": "b.txt"}));
    assert_ne!(calls[0].id, calls[1].id);
    assert_eq!(o.usage(), Some(Usage { input_tokens: 42, output_tokens: 7 }), "{wire:?}");
    assert_eq!(o.finish(), Some(FinishReason::ToolCalls), "{wire:?}");
    assert!(matches!(o.events.last(), Some(ModelEvent::Finish(_))));
}

#[tokio::test]
async fn streamed_text_reasoning_and_split_tool_arguments_reassemble_on_both_wires() {
    for wire in WIRES {
        let fake = FakeLlm::start([full_turn()]).await.unwrap();
        let o = run(&*provider(wire, &fake), request()).await;
        assert_full_turn(&o, wire);
        assert!(o.deltas_of_call(0) > 3, "{wire:?}: arguments must arrive in several fragments");
        assert!(o.events.iter().filter(|e| matches!(e, ModelEvent::TextDelta(_))).count() > 1);
        assert_eq!(fake.requests()[0].body["stream"], json!(true));
    }
}

#[tokio::test]
async fn non_streaming_mode_yields_the_same_answer_on_both_wires() {
    for wire in WIRES {
        let fake = FakeLlm::start([full_turn()]).await.unwrap();
        let config = ProviderConfig { stream: false, ..config(wire, &fake) };
        let o = run(&*provider_with(&config, Some(KEY)), request()).await;
        assert_full_turn(&o, wire);
        assert_eq!(fake.requests()[0].body["stream"], json!(false));
    }
}

fn conversation_with_tool_result() -> ModelRequest {
    let mut assistant = Message::assistant("Reading.");
    assistant.tool_calls.push(ToolCall {
        id: "call_1".into(),
        name: "read".into(),
        arguments: r#"{"path":"a.txt"}"#.into(),
    });
    ModelRequest {
        messages: Arc::new(vec![
            Message::system("Be brief."),
            Message::user("What is in a.txt?"),
            assistant,
            Message::tool_result("call_1", "hello"),
        ]),
        tool_choice: ToolChoice::Required,
        max_output_tokens: Some(500),
        ..request()
    }
}

#[tokio::test]
async fn openai_requests_carry_messages_tools_tool_choice_usage_option_and_bearer_key() {
    let fake = FakeLlm::start([Turn::text("ok"), Turn::text("ok")]).await.unwrap();
    let p = provider(WireApi::OpenAiChat, &fake);
    run(&*p, conversation_with_tool_result()).await;
    run(&*p, ModelRequest { tool_choice: ToolChoice::Tool("read".into()), ..request() }).await;
    let requests = fake.requests();
    let body = &requests[0].body;
    assert_eq!(requests[0].path, "/v1/chat/completions");
    assert_eq!(requests[0].header("authorization"), Some(format!("Bearer {KEY}").as_str()));
    assert_eq!(body["model"], "test-model");
    assert_eq!(body["messages"][0], json!({"role": "system", "content": "Be brief."}));
    assert_eq!(
        body["messages"][2]["tool_calls"],
        json!([{"id": "call_1", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"a.txt\"}"}}])
    );
    assert_eq!(body["messages"][3], json!({"role": "tool", "content": "hello", "tool_call_id": "call_1"}));
    assert_eq!(
        body["tools"][0],
        json!({"type": "function", "function": {"name": "read", "description": "Read a file", "parameters": read_tool().parameters}})
    );
    assert_eq!(body["tool_choice"], "required");
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
    assert_eq!(body["max_tokens"], 500);
    assert_eq!(requests[1].body["tool_choice"], json!({"type": "function", "function": {"name": "read"}}));
}

#[tokio::test]
async fn anthropic_requests_put_system_apart_and_tool_results_in_blocks() {
    let fake = FakeLlm::start([Turn::text("ok")]).await.unwrap();
    run(&*provider(WireApi::AnthropicMessages, &fake), conversation_with_tool_result()).await;
    let r = &fake.requests()[0];
    assert_eq!(r.path, "/v1/messages");
    assert_eq!(r.header("x-api-key"), Some(KEY));
    assert_eq!(r.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(r.header("authorization"), None);
    assert_eq!(r.body["system"], "Be brief.");
    assert_eq!(r.body["max_tokens"], 500);
    let messages = r.body["messages"].as_array().unwrap();
    assert!(messages.iter().all(|m| m["role"] != "system"));
    assert_eq!(
        messages[1]["content"][1],
        json!({"type": "tool_use", "id": "call_1", "name": "read", "input": {"path": "a.txt"}})
    );
    assert_eq!(
        messages[2],
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "hello"}]})
    );
    assert_eq!(
        r.body["tools"][0],
        json!({"name": "read", "description": "Read a file", "input_schema": read_tool().parameters})
    );
    assert_eq!(r.body["tool_choice"], json!({"type": "any"}));
}

#[tokio::test]
async fn rate_limits_are_retried_after_the_retry_after_delay() {
    for wire in WIRES {
        let fake =
            FakeLlm::start([Turn::error(429, r#"{"error":{"message":"slow down"}}"#).retry_after(1), Turn::text("ok")])
                .await
                .unwrap();
        let o = run(&*provider(wire, &fake), request()).await;
        assert_eq!(o.text(), "ok", "{wire:?}: {:?}", o.error);
        let r = fake.requests();
        assert_eq!(r.len(), 2);
        assert!(
            r[1].received_at.duration_since(r[0].received_at) >= Duration::from_secs(1),
            "{wire:?}: Retry-After was not honoured"
        );
    }
}

#[tokio::test]
async fn a_retry_after_beyond_the_bound_fails_at_once_and_reports_the_wait() {
    let fake = FakeLlm::start([Turn::error(429, "{}").retry_after(3600), Turn::text("too late")]).await.unwrap();
    let o = run(&*provider(WireApi::OpenAiChat, &fake), request()).await;
    let error = o.error.unwrap();
    assert_eq!(error.kind, LlmErrorKind::RateLimited);
    assert_eq!(error.retry_after, Some(Duration::from_secs(3600)));
    assert_eq!(fake.requests().len(), 1);
}

#[tokio::test]
async fn a_retry_after_http_date_is_waited_for_then_the_call_succeeds() {
    for wire in WIRES {
        // Whole seconds on the wire: the date lies one to two seconds ahead.
        let at = SystemTime::now() + Duration::from_secs(2);
        let date = httpdate::fmt_http_date(at);
        let fake =
            FakeLlm::start([Turn::error(429, "{}").header("Retry-After", &date), Turn::text("ok")]).await.unwrap();
        let o = run(&*provider(wire, &fake), request()).await;
        assert_eq!(o.text(), "ok", "{wire:?}: {:?}", o.error);
        assert_eq!(fake.requests().len(), 2, "{wire:?}: one refusal, one retry");
        assert!(SystemTime::now() >= httpdate::parse_http_date(&date).unwrap(), "{wire:?}: retried before {date}");
    }
}

#[tokio::test]
async fn a_retry_after_date_in_the_past_retries_at_once_and_an_absurd_one_is_refused() {
    let past = httpdate::fmt_http_date(SystemTime::now() - Duration::from_secs(3600));
    let fake = FakeLlm::start([Turn::error(429, "{}").header("Retry-After", past), Turn::text("ok")]).await.unwrap();
    let o = run(&*provider(WireApi::OpenAiChat, &fake), request()).await;
    assert_eq!(o.text(), "ok", "{:?}", o.error);
    assert_eq!(fake.requests().len(), 2, "a past date is a wait of zero, not a refusal");

    let next_year = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(365 * 24 * 3600));
    let fake = FakeLlm::start([Turn::error(429, "{}").header("Retry-After", next_year), Turn::text("too late")])
        .await
        .unwrap();
    let error = run(&*provider(WireApi::OpenAiChat, &fake), request()).await.error.unwrap();
    assert_eq!(error.kind, LlmErrorKind::RateLimited);
    assert!(
        error.retry_after.unwrap() > Duration::from_secs(364 * 24 * 3600),
        "the wait is reported: {:?}",
        error.retry_after
    );
    assert_eq!(fake.requests().len(), 1, "max_retry_after refuses to wait a year");
}

#[tokio::test]
async fn server_errors_are_retried_a_bounded_number_of_times() {
    for wire in WIRES {
        let fake = FakeLlm::start([Turn::error(503, "{}"), Turn::text("recovered")]).await.unwrap();
        assert_eq!(run(&*provider(wire, &fake), request()).await.text(), "recovered");

        let fake = FakeLlm::start((0..5).map(|_| Turn::error(502, "bad gateway"))).await.unwrap();
        let o = run(&*provider(wire, &fake), request()).await;
        assert_eq!(o.error_kind(), Some(LlmErrorKind::ProviderUnavailable), "{wire:?}");
        assert_eq!(fake.requests().len(), 3, "{wire:?}: one call and two retries");
    }
}

#[tokio::test]
async fn each_error_class_is_recognised_on_both_wires() {
    let cases = [
        (401, r#"{"error":{"message":"Incorrect API key provided: sk-test-secret-123"}}"#, LlmErrorKind::AuthFailed),
        (403, r#"{"type":"error","error":{"type":"permission_error","message":"no"}}"#, LlmErrorKind::AuthFailed),
        (
            404,
            r#"{"error":{"message":"The model `x` does not exist","code":"model_not_found"}}"#,
            LlmErrorKind::ModelNotFound,
        ),
        (
            400,
            r#"{"error":{"message":"This model's maximum context length is 8192 tokens","code":"context_length_exceeded"}}"#,
            LlmErrorKind::ContextLengthExceeded,
        ),
        (
            400,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 250000 tokens > 200000 maximum"}}"#,
            LlmErrorKind::ContextLengthExceeded,
        ),
        (400, r#"{"error":{"message":"filtered","code":"content_filter"}}"#, LlmErrorKind::ContentFiltered),
        (400, r#"{"error":{"message":"messages: field required"}}"#, LlmErrorKind::InvalidRequest),
        (429, r#"{"error":{"message":"rate limited"}}"#, LlmErrorKind::RateLimited),
        (
            529,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            LlmErrorKind::ProviderUnavailable,
        ),
    ];
    for wire in WIRES {
        for (status, body, kind) in cases {
            let fake = FakeLlm::start([Turn::error(status, body)]).await.unwrap();
            let config = ProviderConfig { http: HttpPolicy { max_retries: 0, ..fast_http() }, ..config(wire, &fake) };
            let error = run(&*provider_with(&config, Some(KEY)), request()).await.error.unwrap();
            assert_eq!(error.kind, kind, "{wire:?} {status} {body}");
            assert!(!error.to_string().contains(KEY), "the API key leaked into: {error}");
        }
    }
}

/// A `baseUrl` that is not a URL is refused when the provider is built, as an invalid
/// request (never retried as an unreachable provider), without quoting the URL, which may
/// carry credentials.
#[test]
fn an_invalid_base_url_is_refused_when_the_provider_is_built() {
    for wire in WIRES {
        let config = ProviderConfig::new(wire, "http://user:hunter2@[not-a-host");
        let error = match wire {
            WireApi::OpenAiChat => OpenAiProvider::new(&config, None).err(),
            WireApi::AnthropicMessages => AnthropicProvider::new(&config, None).err(),
        };
        let error = error.expect("an invalid baseUrl is refused");
        assert_eq!(error.kind, LlmErrorKind::InvalidRequest, "{wire:?}");
        assert!(error.message.contains("baseUrl"), "{error}");
        assert!(!error.message.contains("hunter2"), "{error}");
    }
}

#[tokio::test]
async fn a_missing_key_is_named_in_the_auth_error() {
    let fake = FakeLlm::start([Turn::error(401, r#"{"error":{"message":"missing key"}}"#)]).await.unwrap();
    let config =
        ProviderConfig { api_key_env: Some("POLPO_TEST_UNSET_KEY".into()), ..config(WireApi::OpenAiChat, &fake) };
    let error = run(&*provider_with(&config, None), request()).await.error.unwrap();
    assert_eq!(error.kind, LlmErrorKind::AuthFailed);
    assert!(error.message.contains("POLPO_TEST_UNSET_KEY"), "{error}");
    assert_eq!(fake.requests()[0].header("authorization"), None);
}

#[tokio::test]
async fn a_silent_provider_is_a_model_timeout() {
    for wire in WIRES {
        let fake = FakeLlm::start([Turn::text("late").delay(5_000)]).await.unwrap();
        let config = ProviderConfig {
            http: HttpPolicy { idle_timeout: Duration::from_millis(300), ..fast_http() },
            ..config(wire, &fake)
        };
        let o = run(&*provider_with(&config, Some(KEY)), request()).await;
        assert_eq!(o.error_kind(), Some(LlmErrorKind::Timeout), "{wire:?}: {:?}", o.error);
        assert_eq!(fake.requests().len(), 1, "{wire:?}: a timeout is not retried");
    }
}

#[tokio::test]
async fn a_stream_that_breaks_after_content_ends_with_stream_interrupted() {
    for wire in WIRES {
        for broken in [
            Turn::text("a long answer that breaks").disconnect_after(5),
            Turn::text("a long answer that stalls").stall_after(5),
        ] {
            let fake = FakeLlm::start([broken]).await.unwrap();
            let config = ProviderConfig {
                http: HttpPolicy { idle_timeout: Duration::from_millis(300), ..fast_http() },
                ..config(wire, &fake)
            };
            let o = run(&*provider_with(&config, Some(KEY)), request()).await;
            assert!(!o.text().is_empty(), "{wire:?}");
            assert_eq!(o.error_kind(), Some(LlmErrorKind::StreamInterrupted), "{wire:?}: {:?}", o.error);
            assert_eq!(o.finish(), None);
        }
    }
}

#[tokio::test]
async fn an_exhausted_script_says_so() {
    let fake = FakeLlm::start([]).await.unwrap();
    let config =
        ProviderConfig { http: HttpPolicy { max_retries: 0, ..fast_http() }, ..config(WireApi::OpenAiChat, &fake) };
    let error = run(&*provider_with(&config, Some(KEY)), request()).await.error.unwrap();
    assert!(error.message.contains("fake llm script exhausted"), "{error}");
}

#[tokio::test]
async fn a_repeating_fake_answers_forever_and_records_nothing() {
    let fake = FakeLlm::start_repeating([Turn::text("again")]).await.unwrap();
    let p = provider(WireApi::OpenAiChat, &fake);
    for _ in 0..3 {
        assert_eq!(run(&*p, request()).await.text(), "again");
    }
    assert!(fake.requests().is_empty());
}

// --- profiles, registry and fallbacks --------------------------------------------------------

fn env(vars: &[(&str, String)]) -> EnvLookup {
    let vars: BTreeMap<String, String> = vars.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect();
    Arc::new(move |name| vars.get(name).cloned())
}

/// A registry with `primary` (OpenAI wire) and `backup` (Anthropic wire) providers.
fn registry(primary: &FakeLlm, backup: &FakeLlm) -> Providers {
    let no_retries = HttpPolicy { max_retries: 0, idle_timeout: Duration::from_millis(500), ..fast_http() };
    let configs = BTreeMap::from([
        (
            "primary".to_owned(),
            ProviderConfig {
                http: no_retries.clone(),
                api_key_env: Some("PRIMARY_KEY".into()),
                ..config(WireApi::OpenAiChat, primary)
            },
        ),
        ("backup".to_owned(), ProviderConfig { http: no_retries, ..config(WireApi::AnthropicMessages, backup) }),
    ]);
    Providers::new(configs, env(&[("PRIMARY_KEY", KEY.to_owned())]))
}

fn profiles() -> ModelProfiles {
    serde_json::from_value(json!({
        "backup": "backup/claude-test",
        "balanced": {"primary": "primary/gpt-test", "fallbacks": [{"profile": "backup"}]},
        "loop_a": {"profile": "loop_b"},
        "loop_b": {"primary": "primary/x", "fallbacks": [{"profile": "loop_a"}]},
        "dangling": {"profile": "nowhere"},
    }))
    .unwrap()
}

fn balanced() -> ModelSelection {
    ModelSelection::Profile { profile: "balanced".into() }
}

#[tokio::test]
async fn the_fallback_answers_when_the_primary_fails_before_its_first_delta() {
    let failures = [
        Turn::error(429, "{}"),
        Turn::error(503, "{}"),
        Turn::text("never").delay(5_000),
        Turn::text("cut").disconnect_after(1),
    ];
    for failure in failures {
        let primary = FakeLlm::start([failure.clone()]).await.unwrap();
        let backup = FakeLlm::start([Turn::text("from the backup")]).await.unwrap();
        let chain = registry(&primary, &backup).resolve(&balanced(), &profiles(), None).unwrap();
        assert_eq!(chain.ids(), ["primary/gpt-test", "backup/claude-test"]);
        let o = run(&chain, request()).await;
        assert_eq!(o.text(), "from the backup", "{failure:?}: {:?}", o.error);
        assert_eq!(primary.requests()[0].body["model"], "gpt-test");
        assert_eq!(backup.requests()[0].body["model"], "claude-test");
    }
}

#[tokio::test]
async fn after_the_first_delta_a_failure_is_an_explicit_error_not_a_fallback() {
    let primary = FakeLlm::start([Turn::text("half of an answer").disconnect_after(4)]).await.unwrap();
    let backup = FakeLlm::start([Turn::text("from the backup")]).await.unwrap();
    let chain = registry(&primary, &backup).resolve(&balanced(), &profiles(), None).unwrap();
    let o = run(&chain, request()).await;
    assert!(!o.text().is_empty());
    assert!(!o.text().contains("backup"));
    assert_eq!(o.error_kind(), Some(LlmErrorKind::StreamInterrupted));
    assert!(backup.requests().is_empty());
}

#[tokio::test]
async fn errors_another_model_would_repeat_do_not_fall_back() {
    let primary =
        FakeLlm::start([Turn::error(400, r#"{"error":{"code":"context_length_exceeded","message":"too long"}}"#)])
            .await
            .unwrap();
    let backup = FakeLlm::start([Turn::text("from the backup")]).await.unwrap();
    let chain = registry(&primary, &backup).resolve(&balanced(), &profiles(), None).unwrap();
    let error = run(&chain, request()).await.error.unwrap();
    assert_eq!(error.kind, LlmErrorKind::ContextLengthExceeded);
    assert!(error.message.starts_with("primary/gpt-test"), "{error}");
    assert!(backup.requests().is_empty());
}

#[tokio::test]
async fn when_every_model_fails_the_last_error_names_them_all() {
    let primary = FakeLlm::start([Turn::error(503, "{}")]).await.unwrap();
    let backup = FakeLlm::start([Turn::error(
        529,
        r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
    )])
    .await
    .unwrap();
    let chain = registry(&primary, &backup).resolve(&balanced(), &profiles(), None).unwrap();
    let error = run(&chain, request()).await.error.unwrap();
    assert_eq!(error.kind, LlmErrorKind::ProviderUnavailable);
    assert!(error.message.contains("backup/claude-test") && error.message.contains("primary/gpt-test"), "{error}");
}

#[tokio::test]
async fn profile_errors_fail_before_any_provider_call() {
    let primary = FakeLlm::start([Turn::text("x")]).await.unwrap();
    let backup = FakeLlm::start([Turn::text("x")]).await.unwrap();
    let providers = registry(&primary, &backup);
    let code = |selection: ModelSelection, allowed: Option<&[String]>| {
        providers.resolve(&selection, &profiles(), allowed).err().map(|e| e.code())
    };
    let profile = |name: &str| ModelSelection::Profile { profile: name.into() };
    assert_eq!(code(profile("loop_a"), None), Some("model_profile_cycle"));
    assert_eq!(code(profile("dangling"), None), Some("model_profile_unknown"));
    assert_eq!(code(profile("nope"), None), Some("model_profile_unknown"));
    let only_backup = ["backup".to_owned()];
    assert_eq!(code(balanced(), Some(&only_backup)), Some("model_profile_not_allowed"));
    assert_eq!(code(ModelSelection::Id("mystery/model".into()), None), Some("model_not_found"));
    // `balanced` grants the `backup` profile it references.
    assert_eq!(code(balanced(), Some(&["balanced".to_owned()])), None);
    assert!(primary.requests().is_empty() && backup.requests().is_empty());
}

#[tokio::test]
async fn sdk_environment_variables_point_builtin_providers_at_any_server() {
    let openai = FakeLlm::start([Turn::text("openai wire")]).await.unwrap();
    let anthropic = FakeLlm::start([Turn::text("anthropic wire")]).await.unwrap();
    let providers = Providers::new(
        BTreeMap::new(),
        env(&[
            ("OPENAI_BASE_URL", openai.base_url()),
            ("OPENAI_API_KEY", "sk-from-env".to_owned()),
            ("ANTHROPIC_BASE_URL", anthropic.anthropic_base_url()),
            ("ANTHROPIC_API_KEY", "ak-from-env".to_owned()),
        ]),
    );
    let o = run(&providers.chain(&["openai/any-model".to_owned()]).unwrap(), request()).await;
    assert_eq!(o.text(), "openai wire");
    let o = run(&providers.chain(&["anthropic/claude-x".to_owned()]).unwrap(), request()).await;
    assert_eq!(o.text(), "anthropic wire");
    assert_eq!(openai.requests()[0].header("authorization"), Some("Bearer sk-from-env"));
    assert_eq!(openai.requests()[0].body["model"], "any-model");
    assert_eq!(anthropic.requests()[0].header("x-api-key"), Some("ak-from-env"));
}

#[tokio::test]
async fn dropping_the_stream_cancels_the_call() {
    for wire in WIRES {
        let fake = FakeLlm::start([Turn::text("an answer that never ends").stall_after(4)]).await.unwrap();
        let mut stream = provider(wire, &fake).stream(request()).await.unwrap();
        while let Some(event) = stream.next().await {
            if matches!(event.unwrap(), ModelEvent::TextDelta(_)) {
                break;
            }
        }
        drop(stream);
        assert!(
            fake.wait_until_bodies_closed(Duration::from_secs(10)).await,
            "{wire:?}: the server kept streaming to a dropped caller"
        );
    }
}

#[tokio::test]
async fn a_registered_provider_serves_its_prefix_and_readiness_follows_keys() {
    let fake = FakeLlm::start([Turn::text("from the registered one")]).await.unwrap();
    let config = ProviderConfig::new(polpo_llm::WireApi::OpenAiChat, fake.base_url());
    let local: Arc<dyn ModelProvider> = Arc::new(OpenAiProvider::new(&config, None).unwrap());
    let providers = Providers::new(BTreeMap::new(), env(&[])).with_provider("local", local);
    let o = run(&providers.chain(&["local/tiny".to_owned()]).unwrap(), request()).await;
    assert_eq!(o.text(), "from the registered one");
    assert!(providers.is_ready("local"));
    // The built-in openai provider needs OPENAI_API_KEY, which this environment lacks.
    assert!(!providers.is_ready("openai"));
    assert!(!providers.is_ready("no-such-provider"));
    let keyed = Providers::new(BTreeMap::new(), env(&[("OPENAI_API_KEY", "sk".to_owned())]));
    assert!(keyed.is_ready("openai"));
}
