//! Structured output end to end against the strict fake, which (like OpenAI, vLLM, Ollama and
//! Claude) answers in JSON only when the request asks for it natively: `response_format` on
//! the OpenAI wire, a forced tool on the Anthropic wire. Every test runs on both wires,
//! streamed and not.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup should panic loudly

#[path = "hooks_conformance/support.rs"]
mod support;

use polpo_engine::Invocation;
use polpo_engine::structured::ResponseFormat;
use polpo_llm::{AnthropicProvider, ModelProvider, OpenAiProvider, ProviderConfig, WireApi};
use polpo_testkit::{FakeLlm, RecordedRequest, Turn};
use serde_json::{Value, json};
use std::sync::Arc;
use support::{Workspace, invocation, invocation_with, run};

/// Each wire, streamed and not.
const WIRES: [(WireApi, bool); 4] = [
    (WireApi::OpenAiChat, true),
    (WireApi::OpenAiChat, false),
    (WireApi::AnthropicMessages, true),
    (WireApi::AnthropicMessages, false),
];

fn on_wire(mut inv: Invocation, llm: &FakeLlm, (api, stream): (WireApi, bool)) -> Invocation {
    let base = if api == WireApi::OpenAiChat { llm.base_url() } else { llm.anthropic_base_url() };
    let mut config = ProviderConfig::new(api, base);
    config.stream = stream;
    inv.provider = match api {
        WireApi::OpenAiChat => Arc::new(OpenAiProvider::new(&config, None).unwrap()) as Arc<dyn ModelProvider>,
        WireApi::AnthropicMessages => Arc::new(AnthropicProvider::new(&config, None).unwrap()),
    };
    inv
}

fn tier_wire() -> Value {
    json!({"type": "json_schema", "json_schema": {"name": "customer_tier", "strict": true, "schema": {
        "type": "object", "properties": {"tier": {"type": "string", "enum": ["free", "paid"]}}, "required": ["tier"], "additionalProperties": false}}})
}

fn tier_format() -> ResponseFormat {
    ResponseFormat::from_wire(&tier_wire()).unwrap()
}

/// The output constraint a request put on the answer, in OpenAI terms: `response_format`, or
/// on the Anthropic wire the schema of the tool it forces.
fn constraint(request: &RecordedRequest) -> Option<Value> {
    let body = &request.body;
    if request.path == "/v1/messages" {
        let forced = body["tool_choice"]["name"].as_str().filter(|_| body["tool_choice"]["type"] == "tool")?;
        return body["tools"]
            .as_array()?
            .iter()
            .find(|t| t["name"] == forced)
            .map(|t| json!({"tool": forced, "schema": t["input_schema"]}));
    }
    body.get("response_format").cloned()
}

/// The agent's tools a request offered (the Anthropic format tool is not one).
fn agent_tools(request: &RecordedRequest) -> Vec<String> {
    let forced = request.body["tool_choice"]["name"].as_str();
    let tools = request.body["tools"].as_array().cloned().unwrap_or_default();
    tools
        .iter()
        .filter_map(|t| t["function"]["name"].as_str().or(t["name"].as_str()))
        .filter(|n| Some(*n) != forced)
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn a_schema_answer_after_a_tool_call_is_formatted_by_a_tool_free_call_the_provider_constrains() {
    for wire in WIRES {
        let ws = Workspace::new();
        std::fs::write(ws.file("crm.txt"), "ACME: paid plan since 2021\n").unwrap();
        let llm = FakeLlm::start([
            Turn::tool_calls(vec![("read", json!({"path": "crm.txt"}))]),
            Turn::text("ACME is on the paid plan."),
            Turn::json(json!({"tier": "paid"})),
        ])
        .await
        .unwrap();
        let mut inv = on_wire(invocation(&llm, &ws, None), &llm, wire);
        inv.response_format = tier_format();
        let seen = run(&inv, "Which tier is ACME on?").await;
        assert_eq!(seen.content(), r#"{"tier":"paid"}"#, "{wire:?}");
        assert_eq!(seen.streamed_text(), r#"{"tier":"paid"}"#, "{wire:?}: only the valid value is streamed");
        let requests = llm.requests();
        assert_eq!(requests.len(), 3, "{wire:?}");
        for tools_phase in &requests[..2] {
            assert!(agent_tools(tools_phase).contains(&"read".to_owned()), "{wire:?}");
            assert_eq!(constraint(tools_phase), None, "{wire:?}: the tools phase is not constrained");
            assert!(
                tools_phase.body.to_string().contains(r#"\"enum\":[\"free\",\"paid\"]"#),
                "{wire:?}: the schema is in the system prompt"
            );
        }
        let formatting = &requests[2];
        assert!(agent_tools(formatting).is_empty(), "{wire:?}: formatting is tool-free");
        match wire.0 {
            WireApi::OpenAiChat => {
                assert_eq!(constraint(formatting), Some(tier_wire()), "response_format exactly as the client sent it")
            }
            WireApi::AnthropicMessages => assert_eq!(
                constraint(formatting),
                Some(json!({"tool": "customer_tier", "schema": tier_wire()["json_schema"]["schema"]}))
            ),
        }
        let outcome = seen.result.unwrap();
        assert_eq!(
            outcome.messages.last().unwrap().text_content(),
            r#"{"tier":"paid"}"#,
            "{wire:?}: the session keeps the value"
        );
    }
}

#[tokio::test]
async fn without_tools_to_offer_one_constrained_call_answers() {
    for wire in WIRES {
        let ws = Workspace::new();
        let llm = FakeLlm::start([Turn::json(json!({"summary": "short", "words": 1}))]).await.unwrap();
        let mut inv = on_wire(invocation_with(&llm, &ws, None, Vec::new(), None), &llm, wire);
        inv.response_format = ResponseFormat::from_wire(&json!({"type": "json_object"})).unwrap();
        let seen = run(&inv, "Summarise in a word").await;
        assert_eq!(seen.content(), r#"{"summary":"short","words":1}"#, "{wire:?}");
        let requests = llm.requests();
        assert_eq!(requests.len(), 1, "{wire:?}: no second call when the first can carry the format");
        match wire.0 {
            WireApi::OpenAiChat => assert_eq!(constraint(&requests[0]), Some(json!({"type": "json_object"}))),
            WireApi::AnthropicMessages => {
                assert_eq!(constraint(&requests[0]), Some(json!({"tool": "json_answer", "schema": {"type": "object"}})))
            }
        }
    }
}

#[tokio::test]
async fn an_invalid_constrained_answer_is_repaired_once_with_the_errors_and_the_schema() {
    for wire in WIRES {
        let ws = Workspace::new();
        let llm =
            FakeLlm::start([Turn::json(json!({"tier": "gold"})), Turn::json(json!({"tier": "paid"}))]).await.unwrap();
        let mut inv = on_wire(invocation_with(&llm, &ws, None, Vec::new(), None), &llm, wire);
        inv.response_format = tier_format();
        let seen = run(&inv, "Which tier?").await;
        assert_eq!(seen.content(), r#"{"tier":"paid"}"#, "{wire:?}");
        assert_eq!(seen.streamed_text(), r#"{"tier":"paid"}"#, "{wire:?}: the invalid answer is never streamed");
        let repair = llm.requests()[1].body["messages"].as_array().unwrap().last().unwrap().to_string();
        assert!(
            repair.contains("/tier") && repair.contains("gold"),
            "{wire:?}: the validation error is shown: {repair}"
        );
        assert!(repair.contains(r#"\"required\":[\"tier\"]"#), "{wire:?}: the schema is shown: {repair}");
        assert!(constraint(&llm.requests()[1]).is_some(), "{wire:?}: the repair is constrained too");
    }
}

#[tokio::test]
async fn an_answer_that_stays_invalid_fails_clearly_after_one_repair() {
    for wire in WIRES {
        let ws = Workspace::new();
        let llm =
            FakeLlm::start([Turn::json(json!({"tier": "gold"})), Turn::json(json!({"tier": "gold"}))]).await.unwrap();
        let mut inv = on_wire(invocation_with(&llm, &ws, None, Vec::new(), None), &llm, wire);
        inv.response_format = tier_format();
        let seen = run(&inv, "Which tier?").await;
        assert_eq!(seen.error_code(), "structured_output_invalid", "{wire:?}");
        assert!(seen.streamed_text().is_empty(), "{wire:?}");
        assert_eq!(llm.requests().len(), 2, "{wire:?}");
    }
}

#[tokio::test]
async fn formatting_is_not_an_agent_turn() {
    let ws = Workspace::new();
    let llm = FakeLlm::start([Turn::text("It is paid."), Turn::json(json!({"tier": "paid"}))]).await.unwrap();
    let mut inv = invocation(&llm, &ws, None);
    inv.response_format = tier_format();
    inv.max_turns = 1;
    let seen = run(&inv, "Which tier?").await;
    assert_eq!(seen.content(), r#"{"tier":"paid"}"#, "an agent limited to one turn still gets its answer formatted");
}

#[tokio::test]
async fn a_schema_whose_root_is_not_an_object_round_trips_on_every_wire() {
    let tags = json!({"type": "json_schema", "json_schema": {"name": "tags", "schema": {"type": "array", "items": {"type": "string"}}}});
    for wire in WIRES {
        let ws = Workspace::new();
        let llm = FakeLlm::start([Turn::json(json!(["urgent", "billing"]))]).await.unwrap();
        let mut inv = on_wire(invocation_with(&llm, &ws, None, Vec::new(), None), &llm, wire);
        inv.response_format = ResponseFormat::from_wire(&tags).unwrap();
        let seen = run(&inv, "Tag this ticket").await;
        assert_eq!(
            seen.content(),
            r#"["urgent","billing"]"#,
            "{wire:?}: Anthropic tool input is an object, so the value travels wrapped"
        );
        assert_eq!(llm.requests().len(), 1, "{wire:?}");
    }
}

#[tokio::test]
async fn tools_the_model_may_not_call_do_not_cost_a_formatting_call() {
    for wire in WIRES {
        let ws = Workspace::new();
        let llm = FakeLlm::start([Turn::json(json!({"tier": "free"}))]).await.unwrap();
        let mut inv = on_wire(invocation(&llm, &ws, None), &llm, wire);
        inv.response_format = tier_format();
        inv.tool_choice = polpo_llm::ToolChoice::None;
        let seen = run(&inv, "Which tier?").await;
        assert_eq!(seen.content(), r#"{"tier":"free"}"#, "{wire:?}");
        assert_eq!(llm.requests().len(), 1, "{wire:?}: tool_choice none, so the first call carries the format");
        assert!(constraint(&llm.requests()[0]).is_some(), "{wire:?}");
    }
}

#[tokio::test]
async fn an_answer_that_already_matches_needs_no_formatting_call() {
    // A model that follows the schema in the system prompt on its own: the lax fake sends the
    // scripted JSON although the tools-phase request did not ask for it.
    let ws = Workspace::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let lax = polpo_testkit::Options { strict: false, ..Default::default() };
    let llm = FakeLlm::start_with(listener, [Turn::json(json!({"tier": "paid"}))], lax).unwrap();
    let mut inv = invocation(&llm, &ws, None);
    inv.response_format = tier_format();
    let seen = run(&inv, "Which tier?").await;
    assert_eq!(seen.content(), r#"{"tier":"paid"}"#);
    assert_eq!(llm.requests().len(), 1, "a valid answer is not formatted again");
    assert_eq!(constraint(&llm.requests()[0]), None, "tools were offered, so the call was not constrained");
}
