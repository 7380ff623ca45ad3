//! Model routing end to end below HTTP: a project on disk, the fake LLM answering every model
//! id, a real file store. What a project owner relies on: agents that opted in are routed by
//! the project's rules and classifier, never outside their `allowedModelProfiles`, and fall
//! back to their own model when the classifier fails; agents that did not opt in stay pinned.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup should panic loudly

use futures::StreamExt;
use polpo_core::message::Message;
use polpo_core::tool::ToolSpec;
use polpo_engine::runs::{CheckpointState, RunManager, RunOptions, RunSpec};
use polpo_engine::{ChatInput, Delivery, Loaded, Runtime};
use polpo_llm::Providers;
use polpo_store::{NewRun, NewSession, RunEvent, StoreKind, SystemClock, open_store};
use polpo_testkit::{FakeLlm, ProjectFixture, Turn};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;

const SHORT: &str = "Hi!";
const LONG: &str = "Please review the locking strategy of our job queue under contention.";

fn settings() -> Value {
    json!({
        "storage": "file",
        "modelProfiles": {"fast": "openai/fast-model", "balanced": "openai/balanced-model", "remote": "nowhere/model"},
        "modelRouting": {
            "rules": [{"when": {"maxChars": 20, "hasTools": false}, "profile": "fast"}, {"when": {"contains": ["ELSEWHERE"]}, "profile": "remote"}],
            "classifier": {"model": "openai/classifier-model", "labels": {"simple": "fast", "hard": "balanced"}, "maxTokens": 4, "timeoutMs": 300}
        }
    })
}

struct Setup {
    _dir: TempDir,
    runtime: Arc<Runtime>,
}

/// A project with a routed agent, a narrowly allowed routed agent and two pinned agents.
/// `narrow` only allows `balanced`: the project loads (with a warning) and the runtime must
/// skip every route outside that grant.
async fn setup(llm: &FakeLlm) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    ProjectFixture::new(dir.path(), settings())
        .unwrap()
        .agent("router", json!({"model": "openai/pinned-model", "modelRouting": {"mode": "auto"}}), "You route.")
        .unwrap()
        .agent("narrow", json!({"model": {"profile": "balanced"}, "allowedModelProfiles": ["balanced"], "modelRouting": {"mode": "auto"}}), "You are narrow.")
        .unwrap()
        .agent("pinned", json!({"model": "openai/pinned-model"}), "You stay.")
        .unwrap()
        .agent("profiled", json!({"model": {"profile": "balanced"}}), "You stay on your profile.")
        .unwrap();
    let project = polpo_project::load_project(dir.path()).unwrap();
    let store = open_store(StoreKind::File, dir.path(), None, Arc::new(SystemClock)).await.unwrap();
    let runtime =
        Arc::new(Runtime::new(Loaded::new(project).unwrap(), Providers::new(BTreeMap::new(), llm.openai_env()), store));
    Setup { _dir: dir, runtime }
}

/// Run one chat request; its answer and its `model:routed` event, if any.
async fn ask(rt: &Arc<Runtime>, input: ChatInput) -> (String, Option<Value>) {
    let out = rt.chat(input, &|_| {}, &CancellationToken::new()).await.unwrap();
    let run_id = out.run_id.clone();
    let (backlog, _) = rt.events().subscribe_after(Some(0));
    let route = backlog.into_iter().find_map(|d| match d {
        Delivery::Event(e) if e.event == "model:routed" && e.payload()["runId"] == run_id.as_str() => Some(e.payload()),
        _ => None,
    });
    (out.outcome.content.unwrap_or_default(), route)
}

fn models_called(llm: &FakeLlm) -> Vec<String> {
    llm.requests().iter().map(|r| r.body["model"].as_str().unwrap_or_default().to_owned()).collect()
}

#[tokio::test]
async fn a_rule_routes_a_short_prompt_to_the_fast_profile() {
    let llm = FakeLlm::start([Turn::text("Hello from fast.")]).await.unwrap();
    let s = setup(&llm).await;
    let (answer, route) = ask(&s.runtime, ChatInput::new("router", vec![Message::user(SHORT)])).await;
    assert_eq!(answer, "Hello from fast.");
    assert_eq!(models_called(&llm), ["fast-model"], "a matching rule needs no classifier call");
    let route = route.expect("an opted-in agent reports its route");
    assert_eq!(
        (route["via"].as_str(), route["profile"].as_str(), route["rule"].as_u64()),
        (Some("rule"), Some("fast"), Some(0))
    );
}

#[tokio::test]
async fn a_rule_condition_on_client_tools_sends_the_request_on_to_the_classifier() {
    let llm = FakeLlm::start([Turn::text("simple"), Turn::text("ok")]).await.unwrap();
    let s = setup(&llm).await;
    let mut input = ChatInput::new("router", vec![Message::user(SHORT)]);
    input.client_tools = vec![ToolSpec {
        name: "pick_colour".into(),
        description: "Ask the app for a colour".into(),
        parameters: json!({"type": "object"}),
    }];
    let (_, route) = ask(&s.runtime, input).await;
    assert_eq!(models_called(&llm), ["classifier-model", "fast-model"], "hasTools: false does not hold");
    assert_eq!(route.unwrap()["via"], "classifier");
}

#[tokio::test]
async fn the_classifier_label_routes_to_its_profile() {
    let llm = FakeLlm::start([Turn::text(" Hard.\n"), Turn::text("A careful review.")]).await.unwrap();
    let s = setup(&llm).await;
    let (answer, route) = ask(&s.runtime, ChatInput::new("router", vec![Message::user(LONG)])).await;
    assert_eq!(answer, "A careful review.");
    assert_eq!(models_called(&llm), ["classifier-model", "balanced-model"]);
    let classifier_call = &llm.requests()[0].body;
    assert!(classifier_call.get("tools").is_none(), "the classifier call is tool-free: {classifier_call}");
    assert_eq!(classifier_call["max_tokens"], 4, "bounded by maxTokens");
    assert_eq!(classifier_call["messages"][1]["content"], LONG, "it sees the user's message");
    let route = route.unwrap();
    assert_eq!(
        (route["via"].as_str(), route["label"].as_str(), route["profile"].as_str()),
        (Some("classifier"), Some("hard"), Some("balanced"))
    );
}

#[tokio::test]
async fn a_classifier_timeout_or_garbage_falls_back_to_the_pinned_model() {
    // The classifier's stream opens and then says nothing: the 300 ms budget runs out.
    let llm = FakeLlm::start([
        Turn::text("hard").stall_after(0),
        Turn::text("Pinned answer."),
        Turn::text("Well, it is rather hard."),
        Turn::text("Pinned again."),
    ])
    .await
    .unwrap();
    let s = setup(&llm).await;
    let (answer, route) = ask(&s.runtime, ChatInput::new("router", vec![Message::user(LONG)])).await;
    assert_eq!(answer, "Pinned answer.");
    assert_eq!(route.unwrap()["reason"], "classifier_timeout");

    let (answer, route) = ask(&s.runtime, ChatInput::new("router", vec![Message::user(LONG)])).await;
    assert_eq!(answer, "Pinned again.");
    let route = route.unwrap();
    assert_eq!((route["via"].as_str(), route["reason"].as_str()), (Some("pinned"), Some("classifier_unknown_label")));
    assert_eq!(models_called(&llm), ["classifier-model", "pinned-model", "classifier-model", "pinned-model"]);
}

#[tokio::test]
async fn a_route_outside_allowed_model_profiles_is_never_taken() {
    // The short prompt matches the `fast` rule and the classifier answers `simple` (→ fast);
    // `narrow` may only use `balanced`, so both are skipped and its own profile answers.
    let llm = FakeLlm::start([Turn::text("simple"), Turn::text("Balanced answer.")]).await.unwrap();
    let s = setup(&llm).await;
    let (answer, route) = ask(&s.runtime, ChatInput::new("narrow", vec![Message::user(SHORT)])).await;
    assert_eq!(answer, "Balanced answer.");
    assert_eq!(models_called(&llm), ["classifier-model", "balanced-model"]);
    let route = route.unwrap();
    assert_eq!(
        (route["via"].as_str(), route["reason"].as_str(), route["label"].as_str()),
        (Some("pinned"), Some("classifier_not_allowed"), Some("simple"))
    );
}

#[tokio::test]
async fn a_routed_profile_whose_provider_is_not_configured_leaves_the_agent_pinned() {
    let llm = FakeLlm::start([Turn::text("Pinned answer.")]).await.unwrap();
    let s = setup(&llm).await;
    let (answer, route) =
        ask(&s.runtime, ChatInput::new("router", vec![Message::user("Please answer this one elsewhere.")])).await;
    assert_eq!(answer, "Pinned answer.");
    assert_eq!(models_called(&llm), ["pinned-model"]);
    let route = route.unwrap();
    assert_eq!((route["via"].as_str(), route["rule"].as_u64()), (Some("pinned"), Some(1)));
    assert!(route["reason"].as_str().unwrap().starts_with("route_unavailable: "), "{route}");
}

#[tokio::test]
async fn a_refused_request_costs_no_classifier_call() {
    let llm = FakeLlm::start([Turn::text("hard")]).await.unwrap();
    let s = setup(&llm).await;
    let mut input = ChatInput::new("router", vec![Message::user(LONG)]);
    input.tool_choice = polpo_llm::ToolChoice::Tool("launch_rockets".into());
    let error = s.runtime.chat(input, &|_| {}, &CancellationToken::new()).await.unwrap_err();
    assert_eq!(error.code(), "tool_policy_denied");
    assert!(llm.requests().is_empty(), "routing runs only for requests that will run");
}

#[tokio::test]
async fn agents_without_the_opt_in_are_never_routed() {
    let llm = FakeLlm::start([Turn::text("one"), Turn::text("two")]).await.unwrap();
    let s = setup(&llm).await;
    let (_, route) = ask(&s.runtime, ChatInput::new("pinned", vec![Message::user(SHORT)])).await;
    assert!(route.is_none(), "no route is reported for a pinned agent");
    let (_, route) = ask(&s.runtime, ChatInput::new("profiled", vec![Message::user(SHORT)])).await;
    assert!(route.is_none());
    assert_eq!(
        models_called(&llm),
        ["pinned-model", "balanced-model"],
        "the short prompt matches the fast rule, yet neither agent moves"
    );
}

#[test]
fn routing_mistakes_are_reported_with_file_and_pointer() {
    let dir = tempfile::tempdir().unwrap();
    let mut broken = settings();
    broken["modelRouting"]["rules"][0]["profile"] = json!("turbo");
    broken["modelRouting"]["classifier"]["maxTokens"] = json!(99);
    ProjectFixture::new(dir.path(), broken)
        .unwrap()
        .agent("narrow", json!({"model": {"profile": "balanced"}, "allowedModelProfiles": ["balanced"], "modelRouting": {"mode": "auto"}}), "You are narrow.")
        .unwrap();
    let problems = polpo_project::load_project(dir.path()).unwrap_err();
    let found: Vec<(String, String, String)> = problems
        .iter()
        .map(|p| (p.code.clone(), p.file.clone().unwrap_or_default(), p.pointer.clone().unwrap_or_default()))
        .collect();
    assert!(
        found.iter().any(|(c, f, p)| c == "invalid_value"
            && f.ends_with("project.json")
            && p == "/settings/modelRouting/classifier/maxTokens"),
        "{found:?}"
    );

    // With the shape fixed, the rules are checked against the profiles and the agent's grant.
    let mut unknown = settings();
    unknown["modelRouting"]["rules"][0]["profile"] = json!("turbo");
    ProjectFixture::new(dir.path(), unknown).unwrap();
    let problems = polpo_project::load_project(dir.path()).unwrap_err();
    let found: Vec<(String, String, String)> = problems
        .iter()
        .map(|p| (p.code.clone(), p.file.clone().unwrap_or_default(), p.pointer.clone().unwrap_or_default()))
        .collect();
    assert!(
        found.iter().any(|(c, f, p)| c == "model_profile_unknown"
            && f.ends_with("project.json")
            && p == "/settings/modelRouting/rules/0/profile"),
        "{found:?}"
    );
    assert!(
        !found.iter().any(|(c, _, _)| c == "model_profile_not_allowed"),
        "a route outside an agent's grant is not an error: {found:?}"
    );

    // It is a warning that names the agent's file: the project loads and the route is skipped.
    ProjectFixture::new(dir.path(), settings()).unwrap();
    let project = polpo_project::load_project(dir.path()).unwrap();
    let warnings = polpo_core::routing::project_routing_warnings(&project);
    let label = warnings.iter().find(|w| {
        w.code == "model_profile_not_allowed" && w.file.as_deref().is_some_and(|f| f.ends_with("narrow/agent.json"))
    });
    assert_eq!(
        label.and_then(|w| w.pointer.as_deref()),
        Some("/modelRouting"),
        "the `simple` → fast label is outside narrow's grant: {warnings:?}"
    );
}

/// The whole journal of `run` until its stream ends (bounded: a stuck run fails the test).
async fn journal(runs: &Arc<RunManager>, run: &str) -> Vec<RunEvent> {
    let stream = runs.events(run, 0).map(Result::unwrap).collect::<Vec<_>>();
    tokio::time::timeout(Duration::from_secs(20), stream).await.expect("the run ends")
}

#[tokio::test]
async fn a_durable_run_records_its_routed_profile_and_a_resumed_run_keeps_it() {
    let llm =
        FakeLlm::start([Turn::text("Fast answer."), Turn::text("Balanced answer after the crash.")]).await.unwrap();
    let s = setup(&llm).await;
    let runs = RunManager::new(s.runtime.clone(), RunOptions { lease_ttl: Duration::from_secs(5) });
    let started = runs.start(ChatInput::new("router", vec![Message::user(SHORT)])).await.unwrap();
    let events = journal(&runs, &started.run_id).await;
    assert_eq!(events[0].event_type, "run.accepted");
    assert_eq!(events[0].data["spec"]["modelProfile"], "fast", "the route travels with the request");
    assert_eq!(events.last().unwrap().event_type, "run.completed");

    // A run accepted on `balanced` (say, by the classifier) whose process crashed before it
    // answered: the long message would need the classifier again, yet the resumed run goes
    // straight to the profile it was accepted with.
    let store = s.runtime.store().clone();
    let session =
        store.sessions.create_session(NewSession { agent: "router".into(), ..Default::default() }).await.unwrap();
    let run = store
        .runs
        .create_run(NewRun {
            id: Some("chat-routed-crash".into()),
            agent: "router".into(),
            session_id: Some(session.id.clone()),
        })
        .await
        .unwrap();
    let seq = store.runs.append_event(&run.id, "run.accepted", json!({})).await.unwrap();
    let spec = RunSpec {
        agent: "router".into(),
        session_id: session.id,
        messages: vec![Message::user(LONG)],
        model_profile: Some("balanced".into()),
        ..Default::default()
    };
    store
        .runs
        .put_checkpoint(&run.id, seq, serde_json::to_value(CheckpointState { spec, ..Default::default() }).unwrap())
        .await
        .unwrap();
    assert_eq!(runs.recover().await.unwrap(), std::slice::from_ref(&run.id));
    let events = journal(&runs, &run.id).await;
    assert_eq!(
        events.last().unwrap().event_type,
        "run.completed",
        "{:?}",
        events.iter().map(|e| &e.event_type).collect::<Vec<_>>()
    );
    assert_eq!(models_called(&llm), ["fast-model", "balanced-model"], "no classifier call on resume");
}
