//! The loop executor over a real runtime: every step type, the step budget, the binding
//! errors (the tool never runs), the agent-step projection, and the policy layers of loop
//! mode. The model is the strict scripted fake at the HTTP boundary.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup should panic loudly

use polpo_core::message::Message;
use polpo_engine::runs::{RunManager, RunOptions};
use polpo_engine::structured::ResponseFormat;
use polpo_engine::{ChatInput, Loaded, LoopContext, Runtime, Surface};
use polpo_llm::Providers;
use polpo_loops::{EffectDecision, LoopExecutor, LoopFinished, LoopOptions, LoopRequest, TraceEvent, TraceKind};
use polpo_store::{PageRequest, StoreKind, SystemClock, open_store};
use polpo_testkit::{FakeLlm, ProjectFixture, Turn};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;

/// The allocator `polpo` ships with (polpo-cli's `main`): the benchmarks at the end of this file
/// measure what a user's server spends per loop step, not glibc's malloc.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// A project whose agent `bot` has `loops` assigned (the first is its default), run by an
/// executor with `budget` step executions.
async fn executor(llm: &FakeLlm, agent: Value, loops: &[(&str, Value)], budget: u32) -> (TempDir, LoopExecutor) {
    executor_with(llm, json!({"storage": "file", "chatExecution": "inline"}), agent, loops, &[], budget).await
}

/// [`executor`] with these project `settings` and hook `packs`.
async fn executor_with(
    llm: &FakeLlm,
    settings: Value,
    agent: Value,
    loops: &[(&str, Value)],
    packs: &[(&str, Value)],
    budget: u32,
) -> (TempDir, LoopExecutor) {
    let (dir, runtime) = runtime_with(llm, settings, agent, loops, packs).await;
    let runs = RunManager::new(runtime, RunOptions { lease_ttl: Duration::from_secs(5) });
    (dir, LoopExecutor::new(runs, LoopOptions { step_budget: budget }))
}

/// The runtime of [`executor_with`]'s project, on the store `settings.storage` names (file by default).
async fn runtime_with(
    llm: &FakeLlm,
    settings: Value,
    agent: Value,
    loops: &[(&str, Value)],
    packs: &[(&str, Value)],
) -> (TempDir, Arc<Runtime>) {
    runtime_on(llm, settings, agent, loops, packs, Arc::new(SystemClock)).await
}

/// [`runtime_with`] whose store tells the time by `clock`.
async fn runtime_on(
    llm: &FakeLlm,
    settings: Value,
    agent: Value,
    loops: &[(&str, Value)],
    packs: &[(&str, Value)],
    clock: Arc<dyn polpo_store::Clock>,
) -> (TempDir, Arc<Runtime>) {
    polpo_llm::install_crypto_provider();
    let kind = StoreKind::parse(settings["storage"].as_str().unwrap_or("file")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut agent = agent;
    agent["model"] = json!("openai/fake-model");
    agent["assignedLoops"] = json!(loops.iter().map(|(id, _)| *id).collect::<Vec<_>>());
    agent["defaultLoop"] = json!(loops[0].0);
    let mut fixture = ProjectFixture::new(dir.path(), settings).unwrap().agent("bot", agent, "You help.").unwrap();
    for (id, config) in loops {
        fixture = fixture.project_loop(id, config.clone()).unwrap();
    }
    for (name, pack) in packs {
        fixture = fixture.hook_pack(name, pack.clone()).unwrap();
    }
    let project = polpo_project::load_project(dir.path()).unwrap();
    let store = open_store(kind, dir.path(), None, clock).await.unwrap();
    let runtime = Runtime::new(Loaded::new(project).unwrap(), Providers::new(BTreeMap::new(), llm.openai_env()), store);
    (dir, Arc::new(runtime))
}

fn request(metadata: Value) -> LoopRequest {
    let mut request = LoopRequest::new("bot", None, vec![Message::user("Please handle this.")]);
    request.metadata = metadata;
    request
}

async fn run(exec: &LoopExecutor, request: &LoopRequest) -> LoopFinished {
    let (id, config) = exec.select(request).unwrap();
    let run_id = exec.new_run_id();
    tokio::time::timeout(Duration::from_secs(30), exec.run(request, &run_id, &id, &config, &|_| {}))
        .await
        .expect("the run ends")
}

fn kinds(trace: &[TraceEvent]) -> Vec<(TraceKind, Option<String>)> {
    trace.iter().map(|e| (e.kind, e.step_key.clone().or_else(|| e.to_step_key.clone()))).collect()
}

fn code(finished: &LoopFinished) -> &str {
    finished.result.as_ref().err().map(|e| e.code()).unwrap_or("ok")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_steps_bind_the_context_save_their_output_and_trace_every_event() {
    let llm = FakeLlm::start([]).await.unwrap();
    let config = json!({"start": "save", "steps": {
        "save": {"type": "tool", "tool": "write", "input": {"path": "note.txt", "content": {"$context": "request.metadata.note"}}, "saveAs": "out.saved", "next": "load"},
        "load": {"type": "tool", "tool": "read", "input": {"path": "note.txt"}, "saveAs": "file"}
    }});
    let (dir, exec) = executor(&llm, json!({}), &[("flow", config)], 100).await;
    let finished = run(&exec, &request(json!({"note": "hello {$context} $x"}))).await;
    assert_eq!(code(&finished), "ok", "{:?}", finished.result);
    // Bound as a value, never interpolated.
    assert_eq!(std::fs::read_to_string(dir.path().join("note.txt")).unwrap(), "hello {$context} $x");
    assert!(finished.state.context["file"].as_str().unwrap().contains("hello {$context} $x"));
    assert!(finished.state.context["out"]["saved"].is_string());
    use TraceKind::*;
    let s = |x: &str| Some(x.to_owned());
    assert_eq!(
        kinds(&finished.trace),
        vec![
            (LoopStart, None),
            (StepStart, s("save")),
            (ToolCall, s("save")),
            (ToolResult, s("save")),
            (StepEnd, s("save")),
            (Transition, s("load")),
            (StepStart, s("load")),
            (ToolCall, s("load")),
            (ToolResult, s("load")),
            (StepEnd, s("load")),
            (Transition, s("end")),
            (LoopEnd, None)
        ]
    );
    let call = &finished.trace[2];
    assert_eq!(
        (call.step.as_deref(), call.tool.as_deref()),
        (Some("out.saved"), Some("write")),
        "`step` is the saveAs alias"
    );
    assert_eq!(call.data.as_ref().unwrap()["bindings"], json!(["request.metadata.note"]));
    assert_eq!(finished.trace[5].from_step_key.as_deref(), Some("save"));
    assert!(finished.trace.iter().enumerate().all(|(i, e)| e.id == format!("trace-{}", i + 1)));
    assert_eq!(llm.requests().len(), 0, "tool steps call no model");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binding_errors_fail_with_stable_codes_and_the_tool_never_runs() {
    let llm = FakeLlm::start([]).await.unwrap();
    let step = |input: Value, save_as: &str| json!({"start": "t", "steps": {"t": {"type": "tool", "tool": "write", "input": input, "saveAs": save_as}}});
    let cases = [
        (
            "missing",
            step(json!({"path": "x.txt", "content": {"$context": "request.metadata.absent"}}), "w"),
            "loop_binding_missing",
        ),
        (
            "schema",
            step(json!({"path": "x.txt", "content": {"$context": "request.metadata.n"}}), "w"),
            "loop_tool_input_invalid",
        ),
    ];
    for (name, config, expected) in cases {
        let (dir, exec) = executor(&llm, json!({}), &[(name, config)], 100).await;
        let finished = run(&exec, &request(json!({"n": 7}))).await;
        assert_eq!(code(&finished), expected, "{name}");
        assert!(!dir.path().join("x.txt").exists(), "{name}: the tool did not run");
        assert_eq!(finished.trace.last().unwrap().kind, TraceKind::LoopError, "{name}");
        assert!(!finished.trace.iter().any(|e| e.kind == TraceKind::ToolResult && e.error.is_none()), "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_steps_structured_output_routes_the_conditional_next() {
    // Tools are offered, so the first answer is free text and a formatting call gives the JSON.
    let turns =
        [Turn::text("This one can be answered."), Turn::json(json!({"route": "answer"})), Turn::text("Answered.")];
    let llm = FakeLlm::start(turns).await.unwrap();
    let schema = json!({"type": "object", "properties": {"route": {"type": "string"}}, "required": ["route"]});
    let config = json!({"start": "classify", "steps": {
        "classify": {"systemPrompt": "Classify.", "output": {"schema": schema}, "next": [
            {"when": "classify.route == 'review'", "to": "review"},
            {"when": "classify.route == 'answer'", "to": "answer", "label": "Answer directly"},
            {"to": "review"}
        ]},
        "answer": {"type": "agent", "systemPrompt": "Answer.", "when": "classify.route == 'answer'", "next": "end"},
        "review": {"type": "human", "next": "end"}
    }});
    let (_dir, exec) = executor(&llm, json!({}), &[("router", config)], 100).await;
    let finished = run(&exec, &request(json!({}))).await;
    assert_eq!(finished.result.as_ref().unwrap(), &Some(json!("Answered.")));
    assert_eq!(finished.state.context["classify"], json!({"route": "answer"}));
    let transition = finished.trace.iter().find(|e| e.kind == TraceKind::Transition).unwrap();
    assert_eq!(
        (transition.to_step_key.as_deref(), transition.when.as_deref()),
        (Some("answer"), Some("classify.route == 'answer'"))
    );
    assert_eq!(transition.data.as_ref().unwrap()["label"], "Answer directly");
    let requests = llm.requests();
    assert_eq!(
        requests[1].body["response_format"]["json_schema"]["schema"], schema,
        "output.schema is sent as structured output"
    );
    // The second step sees the first one's output in its shared-context prompt, and the request.
    let second = requests[2].body["messages"].to_string();
    assert!(second.contains("route") && second.contains("Please handle this."), "{second}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_projection_replaces_context_and_history_and_is_bounded() {
    let llm = FakeLlm::start([Turn::text("Fixed.")]).await.unwrap();
    let projected = |source: &str| {
        json!({"start": "load", "steps": {
            "load": {"type": "tool", "tool": "read", "input": {"path": "small.txt"}, "saveAs": "validation.failures", "next": "fix"},
            "fix": {"systemPrompt": "Fix only these.", "input": {"failures": {"$context": source}, "attempt": 1},
                "inputSchema": {"type": "object", "required": ["failures", "attempt"], "properties": {"attempt": {"type": "integer", "minimum": 1}}}}
        }})
    };
    let (dir, exec) = executor(
        &llm,
        json!({}),
        &[("small", projected("validation.failures")), ("big", projected("request.metadata.big"))],
        100,
    )
    .await;
    std::fs::write(dir.path().join("small.txt"), "line one failed").unwrap();

    let finished = run(&exec, &request(json!({}))).await;
    assert_eq!(code(&finished), "ok", "{:?}", finished.result);
    let messages = llm.requests()[0].body["messages"].as_array().unwrap().clone();
    let last: Value = serde_json::from_str(messages.last().unwrap()["content"].as_str().unwrap()).unwrap();
    assert_eq!(last["attempt"], 1);
    assert!(last["failures"].as_str().unwrap().contains("line one failed"));
    let text = Value::Array(messages).to_string();
    assert!(
        !text.contains("Please handle this.") && !text.contains("Loop context"),
        "the projection replaces the conversation and the shared context: {text}"
    );
    let start =
        finished.trace.iter().find(|e| e.kind == TraceKind::StepStart && e.step_key.as_deref() == Some("fix")).unwrap();
    let facts = &start.data.as_ref().unwrap()["projection"];
    assert_eq!((facts["bindings"].clone(), facts["valid"].clone()), (json!(["validation.failures"]), json!(true)));
    assert_eq!(facts["sha256"].as_str().unwrap().len(), 64);
    assert!(!start.data.as_ref().unwrap().to_string().contains("line one failed"), "the trace never records values");

    let mut big = request(json!({"big": "x".repeat(300 * 1024)}));
    big.loop_id = Some("big".into());
    let finished = run(&exec, &big).await;
    assert_eq!(code(&finished), "loop_input_too_large");
    assert_eq!(llm.requests().len(), 1, "no model call for a refused projection");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_stops_at_max_iterations_and_a_back_edge_cycle_at_the_budget() {
    let llm = FakeLlm::start([]).await.unwrap();
    let repeat = json!({"start": "again", "steps": {
        "again": {"type": "while", "condition": "true", "body": "tick", "maxIterations": 3, "next": "end"},
        "tick": {"type": "tool", "tool": "ls", "input": {}, "saveAs": "listing"}
    }});
    let cycle = json!({"start": "a", "steps": {
        "a": {"type": "tool", "tool": "ls", "input": {}, "next": "b"},
        "b": {"type": "tool", "tool": "ls", "input": {}, "when": "false", "next": "a"}
    }});
    let (_dir, exec) = executor(&llm, json!({}), &[("repeat", repeat), ("cycle", cycle)], 7).await;
    let finished = run(&exec, &request(json!({}))).await;
    assert_eq!(code(&finished), "ok", "{:?}", finished.result);
    assert!(finished.state.frontier.is_empty());
    assert_eq!(finished.state.while_iterations["again"], 3);
    assert_eq!(finished.trace.iter().filter(|e| e.kind == TraceKind::ToolCall).count(), 3);

    let mut cyclic = request(json!({}));
    cyclic.loop_id = Some("cycle".into());
    let finished = run(&exec, &cyclic).await;
    assert_eq!(code(&finished), "loop_step_budget_exceeded");
    assert_eq!(finished.state.executed, 8, "seven executions ran, the eighth was refused");
    assert_eq!(finished.state.frontier, ["b"], "a resume would start at the refused step");
    assert!(finished.trace.iter().any(|e| e.kind == TraceKind::StepSkip && e.step_key.as_deref() == Some("b")));

    // The project's setting wins over the executor's default.
    let cycle = json!({"start": "a", "steps": {"a": {"type": "tool", "tool": "ls", "input": {}, "next": "a"}}});
    let (_dir, exec) =
        executor_with(&llm, json!({"storage": "file", "loopStepBudget": 3}), json!({}), &[("cycle", cycle)], &[], 100)
            .await;
    let finished = run(&exec, &request(json!({}))).await;
    assert_eq!((code(&finished), finished.state.executed), ("loop_step_budget_exceeded", 4));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_joins_all_in_branch_order_and_any_at_the_first_branch() {
    let llm = FakeLlm::start([]).await.unwrap();
    let parallel = |join: &str| {
        json!({"start": "fan", "steps": {
            "fan": {"type": "parallel", "branches": ["slow", "fast"], "join": join},
            "slow": {"type": "tool", "tool": "bash", "input": {"command": "while [ ! -f gate ]; do sleep 0.02; done; echo slow"}, "saveAs": "slow"},
            "fast": {"type": "tool", "tool": "write", "input": {"path": "gate", "content": "open"}, "saveAs": "fast"}
        }})
    };
    let never = json!({"start": "fan", "steps": {
        "fan": {"type": "parallel", "branches": ["stuck", "quick"], "join": "any"},
        "stuck": {"type": "tool", "tool": "bash", "input": {"command": "while [ ! -f never ]; do sleep 0.02; done"}, "saveAs": "stuck"},
        "quick": {"type": "tool", "tool": "ls", "input": {}, "saveAs": "quick"}
    }});
    let (_dir, exec) = executor(&llm, json!({}), &[("all", parallel("all")), ("any", never)], 100).await;
    let finished = run(&exec, &request(json!({}))).await;
    assert_eq!(code(&finished), "ok", "{:?}", finished.result);
    assert!(
        finished.state.context["slow"].to_string().contains("slow") && finished.state.context["fast"].is_string(),
        "both branches merged"
    );

    let mut any = request(json!({}));
    any.loop_id = Some("any".into());
    let finished = run(&exec, &any).await;
    assert_eq!(code(&finished), "ok", "{:?}", finished.result);
    assert!(finished.state.context.get("quick").is_some());
    assert!(finished.state.context.get("stuck").is_none(), "the branch still running was cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_human_step_suspends_until_a_valid_answer() {
    let llm = FakeLlm::start([]).await.unwrap();
    let config = json!({"start": "review", "steps": {
        "review": {"type": "human", "output": {"schema": {"type": "object", "required": ["decision"], "properties": {"decision": {"type": "string"}}}}, "next": "end"}
    }});
    let (_dir, exec) = executor(&llm, json!({}), &[("review", config)], 100).await;
    let exec = Arc::new(exec);
    let (run_id, running, mut asked) = suspended(&exec);
    asked.recv().await.unwrap();
    assert!(exec.humans().is_waiting(&run_id));
    assert_eq!(
        exec.answer_human(&run_id, None, json!({"decision": 3})).await.unwrap_err().code(),
        "loop_human_output_invalid"
    );
    assert_eq!(exec.answer_human("looprun-other", None, json!({})).await.unwrap_err().code(), "loop_run_not_found");
    assert_eq!(
        exec.answer_human(&run_id, Some("another-client"), json!({"decision": "ship"})).await.unwrap_err().code(),
        "loop_run_not_found"
    );
    exec.answer_human(&run_id, Some(""), json!({"decision": "ship"})).await.unwrap();
    let finished = running.await.unwrap();
    assert_eq!(finished.result.unwrap(), Some(json!({"decision": "ship"})));
    assert!(!exec.humans().is_waiting(&run_id));
    let order: Vec<TraceKind> = finished.trace.iter().map(|e| e.kind).collect();
    assert_eq!(
        &order[1..5],
        &[TraceKind::StepStart, TraceKind::HumanRequest, TraceKind::HumanResult, TraceKind::StepEnd]
    );

    // A run whose task goes away leaves no step waiting in memory for nobody: the record, not
    // the process, waits, stored so without a lease (its answer would resume it).
    let (gone, running, mut asked) = suspended(&exec);
    asked.recv().await.unwrap();
    stored_when(&exec, &gone, |r| r.status == polpo_loops::LoopRunStatus::AwaitingHuman).await;
    running.abort();
    assert!(running.await.unwrap_err().is_cancelled());
    assert!(!exec.humans().is_waiting(&gone));
    let waiting = exec.stored_run(&gone, None).await.unwrap().record;
    assert_eq!(waiting.status, polpo_loops::LoopRunStatus::AwaitingHuman);
    assert!(waiting.lease.is_none(), "a run waiting for a person holds no lease");
}

/// Start the executor's default loop in a task; the receiver hears each `human.request`.
fn suspended(
    exec: &Arc<LoopExecutor>,
) -> (String, tokio::task::JoinHandle<LoopFinished>, tokio::sync::mpsc::UnboundedReceiver<()>) {
    let req = request(json!({}));
    let (id, config) = exec.select(&req).unwrap();
    let run_id = exec.new_run_id();
    let (asked_tx, asked) = tokio::sync::mpsc::unbounded_channel();
    let sink = move |e: &TraceEvent| {
        if e.kind == TraceKind::HumanRequest {
            let _ = asked_tx.send(());
        }
    };
    let (exec, id_for_run) = (exec.clone(), run_id.clone());
    let running = tokio::spawn(async move { exec.run(&req, &id_for_run, &id, &config, &sink).await });
    (run_id, running, asked)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loop_mode_policy_is_agent_loop_step_request_and_never_chat() {
    // The step's model tries `write`, which its step excluded; it is refused, then it answers.
    let llm = FakeLlm::start([
        Turn::tool_calls(vec![("write", json!({"path": "b.txt", "content": "b"}))]),
        Turn::text("Listed."),
    ])
    .await
    .unwrap();
    // Chat mode allows only `read`; the loop does not inherit that, but narrows to read+ls+write.
    let agent = json!({"allowedTools": ["read", "ls", "write", "bash"], "chat": {"allowedTools": ["read"]}});
    let config = json!({"allowedTools": ["read", "ls", "write"], "start": "w", "steps": {
        "w": {"type": "tool", "tool": "write", "input": {"path": "a.txt", "content": "a"}, "next": "think"},
        "think": {"systemPrompt": "List.", "allowedTools": ["ls"]}
    }});
    let (dir, exec) = executor(&llm, agent, &[("flow", config)], 100).await;
    let finished = run(&exec, &request(json!({}))).await;
    assert_eq!(code(&finished), "ok", "{:?}", finished.result);
    assert!(dir.path().join("a.txt").exists(), "chat.allowedTools does not apply in a loop");
    let requests = llm.requests();
    let tools: Vec<String> = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(tools, vec!["ls"], "the agent step sees agent ∩ loop ∩ step");
    assert!(requests[1].body["messages"].to_string().contains("tool_policy_denied"));
    assert!(!dir.path().join("b.txt").exists(), "a step cannot use a tool outside its layers");
    // The agent step's calls are traced under the step, without arguments or results.
    let calls: Vec<(TraceKind, Option<&str>, Option<&str>)> = finished
        .trace
        .iter()
        .filter(|e| e.step_key.as_deref() == Some("think") && e.tool.is_some())
        .map(|e| (e.kind, e.tool.as_deref(), e.error.as_deref().map(|_| "failed")))
        .collect();
    assert_eq!(
        calls,
        vec![(TraceKind::ToolCall, Some("write"), None), (TraceKind::ToolResult, Some("write"), Some("failed"))]
    );
    assert!(!serde_json::to_string(&finished.trace).unwrap().contains("b.txt"));

    let mut narrowed = request(json!({}));
    narrowed.allowed_tools = Some(vec!["read".into()]);
    let finished = run(&exec, &narrowed).await;
    assert_eq!(code(&finished), "loop_tool_failed", "the request layer narrows too");
    assert!(finished.result.unwrap_err().to_string().contains("tool_policy_denied"));
}

/// A skill bundle `name` in the project at `root`, described as `description`.
fn skill_bundle(root: &std::path::Path, name: &str, description: &str) {
    let dir = root.join(".polpo/skills").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let text = format!("---\nname: {name}\ndescription: {description}\n---\nThe {name} steps.\n");
    std::fs::write(dir.join("SKILL.md"), text).unwrap();
}

fn tool_names(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
        .collect()
}

/// The content of the last message the model was sent (the latest tool result).
fn last_message(request: &Value) -> String {
    request["messages"].as_array().unwrap().last().unwrap()["content"].to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_naming_skills_gets_only_those_and_a_step_naming_none_gets_the_agents() {
    let llm = FakeLlm::start([
        // `narrow` names `design`: it lists only that one and cannot read `review`.
        Turn::tool_calls(vec![("skill_list", json!({}))]),
        Turn::tool_calls(vec![("skill_read", json!({"name": "review"}))]),
        Turn::text("Narrow."),
        // `all` names none: both of the agent's.
        Turn::tool_calls(vec![("skill_list", json!({}))]),
        Turn::text("All."),
        // `none` names an empty list: no skill tools at all.
        Turn::text("None."),
    ])
    .await
    .unwrap();
    let config = json!({"start": "narrow", "steps": {
        "narrow": {"systemPrompt": "Design.", "skills": ["design"], "next": "all"},
        "all": {"systemPrompt": "Anything.", "next": "none"},
        "none": {"systemPrompt": "Plain.", "skills": []}
    }});
    let agent = json!({"skills": ["design", "review"], "allowedTools": ["read"]});
    let (dir, exec) = executor(&llm, agent, &[("flow", config)], 100).await;
    skill_bundle(dir.path(), "design", "Lay out pages on a grid.");
    skill_bundle(dir.path(), "review", "Review code for defects.");
    let finished = run(&exec, &request(json!({}))).await;
    assert_eq!(code(&finished), "ok", "{:?}", finished.result);
    let sent = llm.requests();
    assert_eq!(sent.len(), 6);
    assert_eq!(tool_names(&sent[0].body), ["read", "skill_list", "skill_read"]);
    let listed = last_message(&sent[1].body);
    assert!(listed.contains("design") && listed.contains("Lay out pages"), "{listed}");
    assert!(!listed.contains("review") && !listed.contains("Review code"), "only the step's skill: {listed}");
    let refused = last_message(&sent[2].body);
    assert!(refused.contains("skill_not_assigned") && !refused.contains("The review steps"), "{refused}");
    let listed = last_message(&sent[4].body);
    assert!(listed.contains("Lay out pages") && listed.contains("Review code"), "the agent's skills: {listed}");
    assert_eq!(tool_names(&sent[5].body), ["read"], "an empty list narrows the skills away");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_naming_a_skill_its_agent_is_not_assigned_does_not_load() {
    let dir = tempfile::tempdir().unwrap();
    let config = json!({"start": "s", "steps": {"s": {"systemPrompt": "Go.", "skills": ["design", "deploy"]}}});
    ProjectFixture::new(dir.path(), json!({"storage": "file"}))
        .unwrap()
        .agent(
            "bot",
            json!({"model": "openai/fake-model", "skills": ["design"], "assignedLoops": ["flow"]}),
            "You help.",
        )
        .unwrap()
        .project_loop("flow", config)
        .unwrap();
    let problems = polpo_project::load_project(dir.path()).unwrap_err();
    let found: Vec<_> = problems
        .iter()
        .map(|p| (p.code.as_str(), p.file.as_deref().unwrap_or_default(), p.pointer.as_deref().unwrap_or_default()))
        .collect();
    assert_eq!(found, [("skill_not_assigned", ".polpo/loops/flow.json", "/steps/s/skills/1")], "{problems:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_step_overrides_the_model_reasoning_temperature_and_turn_budget() {
    let turns = [Turn::text("Quick."), Turn::tool_calls(vec![("ls", json!({}))]), Turn::text("never reached")];
    let llm = FakeLlm::start(turns).await.unwrap();
    let config = json!({"start": "quick", "steps": {
        "quick": {"systemPrompt": "Be quick.", "model": "openai/fast-model", "reasoning": "high", "temperature": 0.25, "next": "short"},
        "short": {"systemPrompt": "One turn only.", "maxTurns": 1}
    }});
    let (_dir, exec) = executor(&llm, json!({"reasoning": "low", "maxTurns": 10}), &[("steps", config)], 100).await;
    let finished = run(&exec, &request(json!({}))).await;
    let requests = llm.requests();
    assert_eq!(
        (requests[0].body["model"].as_str(), requests[0].body["reasoning_effort"].as_str()),
        (Some("fast-model"), Some("high"))
    );
    assert_eq!(requests[0].body["temperature"], 0.25);
    assert_eq!(
        (requests[1].body["model"].as_str(), requests[1].body["reasoning_effort"].as_str()),
        (Some("fake-model"), Some("low")),
        "the next step has the agent's"
    );
    assert!(requests[1].body.get("temperature").is_none());
    assert_eq!(requests.len(), 2, "maxTurns 1: no second model call in the step");
    assert_eq!(code(&finished), "loop_step_failed");
    assert!(finished.result.unwrap_err().to_string().contains("max_turns"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_when_continues_the_step_in_its_session_until_it_holds_within_the_turn_budget() {
    let turns = [
        Turn::json(json!({"route": "unsure"})),
        Turn::json(json!({"route": "answer"})),
        Turn::json(json!({"route": "unsure"})),
    ];
    let llm = FakeLlm::start(turns).await.unwrap();
    // No tools, so each answer is constrained to the schema in one call.
    let step = |max_turns: u32| {
        json!({"start": "classify", "steps": {"classify": {"systemPrompt": "Classify.", "allowedTools": [], "maxTurns": max_turns,
            "output": {"schema": {"type": "object", "properties": {"route": {"type": "string"}}, "required": ["route"]}},
            "stopWhen": {"expression": "classify.route == 'answer'"}}}})
    };
    let (_dir, exec) = executor(&llm, json!({}), &[("patient", step(3)), ("hasty", step(1))], 100).await;
    let finished = run(&exec, &request(json!({}))).await;
    assert_eq!(finished.result.unwrap(), Some(json!({"route": "answer"})));
    let second = llm.requests()[1].body["messages"].to_string();
    assert!(second.contains("unsure") && second.contains("does not hold yet"), "the same session goes on: {second}");

    let mut hasty = request(json!({}));
    hasty.loop_id = Some("hasty".into());
    let finished = run(&exec, &hasty).await;
    assert_eq!(code(&finished), "loop_stop_condition_unmet");
    assert_eq!(llm.requests().len(), 3, "no turn beyond the step's budget");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hook_packs_see_the_loop_step_and_gate_tool_steps_and_parallel_agents() {
    let llm = FakeLlm::start([]).await.unwrap();
    let guard = json!({"version": 1, "hooks": {
        "tool:before": [{"id": "guarded-writes", "matcher": {"tools": ["write"], "steps": ["guarded"]}, "handler": {"type": "command", "command": "sh .polpo/hooks/deny.sh", "timeoutMs": 5000}}],
        "turn:stop": [{"id": "check", "terminationGate": {"validator": {"type": "command", "command": "true", "timeoutMs": 5000}, "maxCycles": 2, "maxDurationMs": 60000}}]
    }});
    let writes = json!({"start": "free", "steps": {
        "free": {"type": "tool", "tool": "write", "input": {"path": "a.txt", "content": "a"}, "next": "guarded"},
        "guarded": {"type": "tool", "tool": "write", "input": {"path": "b.txt", "content": "b"}}
    }});
    let fan = json!({"start": "fan", "steps": {"fan": {"type": "parallel", "branches": ["think"]}, "think": {"systemPrompt": "Think."}}});
    let settings = json!({"storage": "file", "chatExecution": "inline"});
    let (dir, exec) = executor_with(
        &llm,
        settings,
        json!({"hooks": ["guard"]}),
        &[("writes", writes), ("fan", fan)],
        &[("guard", guard)],
        100,
    )
    .await;
    std::fs::write(
        dir.path().join(".polpo/hooks/deny.sh"),
        "cat > /dev/null\necho '{\"decision\":\"deny\",\"reason\":\"writes need a review\"}'\n",
    )
    .unwrap();
    let finished = run(&exec, &request(json!({}))).await;
    assert_eq!(code(&finished), "loop_tool_failed");
    assert!(finished.result.unwrap_err().to_string().contains("writes need a review"));
    assert!(dir.path().join("a.txt").exists(), "the matcher saw step `free` and let it write");
    assert!(!dir.path().join("b.txt").exists(), "the tool:before hook refused step `guarded`");

    let mut fan = request(json!({}));
    fan.loop_id = Some("fan".into());
    let finished = run(&exec, &fan).await;
    assert!(finished.result.unwrap_err().to_string().contains("termination_gate_parallel_unsupported"));
    assert!(llm.requests().is_empty(), "refused before inference");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loop_refuses_what_it_cannot_honour_before_any_step() {
    let llm = FakeLlm::start([]).await.unwrap();
    let config = json!({"start": "t", "steps": {"t": {"type": "tool", "tool": "ls", "input": {}}}});
    let (_dir, exec) = executor(&llm, json!({}), &[("flow", config)], 100).await;
    let mut structured = request(json!({}));
    structured.response_format = ResponseFormat::from_wire(&json!({"type": "json_object"})).unwrap();
    let mut asking = request(json!({}));
    asking.capabilities.ask_user_question = true;
    let mut other = request(json!({}));
    other.loop_id = Some("elsewhere".into());
    for (req, expected) in
        [(structured, "loop_request_unsupported"), (asking, "loop_request_unsupported"), (other, "loop_not_assigned")]
    {
        assert_eq!(exec.select(&req).unwrap_err().code(), expected);
    }
}

/// A loop of `STEPS` tool steps (`read`, no model) run `RUNS` times on `storage`: loop steps
/// per second, and the executor's own cost per step — the loop's time per step minus the same
/// `read` called as often straight through `Runtime::call_tool` (so what is left is the graph
/// walk, bindings, governance, trace and the per-step checkpoint write, fsync included; with
/// `TMPDIR=/dev/shm` the project and its store are on tmpfs, where fsync costs nothing). Run
/// for short and long loops: a checkpoint's cost must not grow with the run. Then loop runs per
/// second with 32 at once.
async fn bench_tool_steps(storage: &str) {
    for (steps, runs) in [(10, 200), (200, 10)] {
        bench_tool_loop(storage, steps, runs).await;
    }
}

/// CPU time this process has used so far, all threads, user and system (Linux: `/proc/self/stat`,
/// in clock ticks of 10 ms; `None` elsewhere).
fn process_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command name (which may hold spaces, inside parentheses): utime
    // and stime are the 12th and 13th.
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace().skip(11);
    let ticks = fields.next()?.parse::<u64>().ok()? + fields.next()?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

/// A point to measure from: the wall clock and [`process_cpu`].
fn mark() -> (std::time::Instant, Option<Duration>) {
    (std::time::Instant::now(), process_cpu())
}

/// Wall and CPU time since `from`.
fn since((wall, cpu): (std::time::Instant, Option<Duration>)) -> (Duration, Option<Duration>) {
    (wall.elapsed(), process_cpu().zip(cpu).map(|(end, start)| end - start))
}

/// The steps of a loop of `length` `read` tool steps, `s0` to `s{length-1}`, each saving its
/// output as `r<i>`.
fn read_chain(length: u32) -> serde_json::Map<String, Value> {
    (0..length)
        .map(|i| {
            let next = if i + 1 < length { format!("s{}", i + 1) } else { "end".into() };
            let step = json!({"type": "tool", "tool": "read", "input": {"path": "f.txt"}, "saveAs": format!("r{i}"), "next": next});
            (format!("s{i}"), step)
        })
        .collect()
}

/// One [`bench_tool_steps`] figure: a `length`-step loop run `repeat` times.
async fn bench_tool_loop(storage: &str, length: u32, repeat: u32) {
    let llm = FakeLlm::start([]).await.unwrap();
    let steps = read_chain(length);
    let settings = json!({"storage": storage, "chatExecution": "inline"});
    let (dir, runtime) =
        runtime_with(&llm, settings, json!({}), &[("bench", json!({"start": "s0", "steps": steps}))], &[]).await;
    let runs = RunManager::new(runtime.clone(), RunOptions { lease_ttl: Duration::from_secs(5) });
    let exec = Arc::new(LoopExecutor::new(runs, LoopOptions { step_budget: length + 1 }));
    std::fs::write(dir.path().join("f.txt"), "data").unwrap();
    let req = request(json!({}));
    assert_eq!(code(&run(&exec, &req).await), "ok", "warm-up");
    let started = mark();
    for _ in 0..repeat {
        assert_eq!(code(&run(&exec, &req).await), "ok");
    }
    let (looped, looped_cpu) = since(started);

    let mut input = ChatInput::new("bot", Vec::new());
    input.surface = Surface::Loop;
    input.loop_context = Some(LoopContext { loop_id: "bench".into(), step: "s0".into(), ..LoopContext::default() });
    let cancel = CancellationToken::new();
    let started = mark();
    for _ in 0..repeat * length {
        let read = runtime.call_tool(&input, "read", json!({"path": "f.txt"}), &cancel, &|_| {}).await.unwrap();
        assert!(read.unwrap().contains("data"), "the direct call reads the file");
    }
    let (direct, direct_cpu) = since(started);

    let steps = repeat * length;
    let (per_step, tool) = (looped / steps, direct / steps);
    // The same difference in CPU time (every thread of the process), which the wake-up latency
    // of an idle machine does not inflate.
    let own_cpu = looped_cpu.zip(direct_cpu).map(|(looped, direct)| (looped / steps).saturating_sub(direct / steps));
    println!(
        "{storage}: {length}-step tool-only loop x {repeat}: {:.0} steps/s, {per_step:?} per step; `read` alone {tool:?}; executor's own cost {:?} per step, {} of CPU",
        f64::from(steps) / looped.as_secs_f64(),
        per_step.saturating_sub(tool),
        own_cpu.map_or_else(|| "unknown".to_owned(), |cpu| format!("{cpu:?}"))
    );

    let total = repeat * 2;
    let started = std::time::Instant::now();
    run_concurrently(&exec, &req, total).await;
    println!(
        "{storage}: {length}-step tool-only loop, {CONCURRENT} at once: {total} runs in {:?} = {:.1} loop runs/s",
        started.elapsed(),
        f64::from(total) / started.elapsed().as_secs_f64()
    );
}

/// How many loop runs [`run_concurrently`] keeps in flight.
const CONCURRENT: u32 = 32;

/// Run `req` `total` times, [`CONCURRENT`] at once, each to the end.
async fn run_concurrently(exec: &Arc<LoopExecutor>, req: &LoopRequest, total: u32) {
    let next = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let clients: Vec<_> = (0..CONCURRENT)
        .map(|_| {
            let (exec, next, req) = (exec.clone(), next.clone(), req.clone());
            tokio::spawn(async move {
                while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < total {
                    assert_eq!(code(&run(&exec, &req).await), "ok");
                }
            })
        })
        .collect();
    for client in clients {
        client.await.unwrap();
    }
}

/// This process's resident memory in MiB (Linux; 0 elsewhere).
fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.trim().strip_suffix("kB"));
    kb.and_then(|v| v.trim().parse::<f64>().ok()).unwrap_or(0.0) / 1024.0
}

/// Memory over many loop runs on the file store: resident memory after 2,000 10-step runs (32 at
/// once), after 20,000 more and after 20,000 more again. Every run leaves its record behind;
/// memory holds only the records used lately, so once that cache is full it stays flat. `TMPDIR=/dev/shm cargo test --release -p polpo-loops --test executor
/// -- --ignored --nocapture bench_memory_over_loop_runs_file_store`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark"]
async fn bench_memory_over_loop_runs_file_store() {
    let llm = FakeLlm::start([]).await.unwrap();
    let settings = json!({"storage": "file", "chatExecution": "inline"});
    let (dir, runtime) =
        runtime_with(&llm, settings, json!({}), &[("bench", json!({"start": "s0", "steps": read_chain(10)}))], &[])
            .await;
    let runs = RunManager::new(runtime.clone(), RunOptions { lease_ttl: Duration::from_secs(5) });
    let exec = Arc::new(LoopExecutor::new(runs, LoopOptions { step_budget: 11 }));
    std::fs::write(dir.path().join("f.txt"), "data").unwrap();
    let req = request(json!({}));
    run_concurrently(&exec, &req, 2_000).await;
    let mut rss = vec![rss_mib()];
    let started = std::time::Instant::now();
    for _ in 0..2 {
        run_concurrently(&exec, &req, 20_000).await;
        rss.push(rss_mib());
    }
    let listed = runtime.store().records.list_records("loop_runs", &PageRequest::first(5)).await;
    assert_eq!(listed.unwrap().items.len(), 5, "the runs are stored");
    println!(
        "file: RSS after 2,000 10-step loop runs {:.1} MiB, after 20,000 more {:.1} MiB, after 20,000 more again {:.1} MiB ({:.0} loop runs/s)",
        rss[0],
        rss[1],
        rss[2],
        40_000.0 / started.elapsed().as_secs_f64()
    );
}

/// Checkpoints between two tool steps are deltas, which do not extend the run's lease: runs
/// slower than their lease (32 at once on a short one) still complete, their lease renewed as
/// it lapses, with their whole trace and context stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_longer_than_their_lease_complete_with_delta_checkpoints() {
    let llm = FakeLlm::start([]).await.unwrap();
    let length = 40;
    let steps = read_chain(length);
    let settings = json!({"storage": "file", "chatExecution": "inline"});
    let (dir, runtime) =
        runtime_with(&llm, settings, json!({}), &[("flow", json!({"start": "s0", "steps": steps}))], &[]).await;
    let runs = RunManager::new(runtime.clone(), RunOptions { lease_ttl: Duration::from_millis(200) });
    let exec = Arc::new(LoopExecutor::new(runs, LoopOptions { step_budget: length + 1 }));
    std::fs::write(dir.path().join("f.txt"), "data").unwrap();
    let mut req = request(json!({}));
    req.loop_id = Some("flow".into());
    let clients: Vec<_> = (0..16)
        .map(|_| {
            let (exec, req) = (exec.clone(), req.clone());
            tokio::spawn(async move { run(&exec, &req).await })
        })
        .collect();
    for client in clients {
        let finished = client.await.unwrap();
        assert_eq!(code(&finished), "ok", "{:?}", finished.result);
        let stored = exec.stored_run(&finished.run_id, None).await.unwrap();
        assert!(stored.record.state.context[format!("r{}", length - 1)].as_str().unwrap().contains("data"));
        assert_eq!(stored.record.trace, finished.trace);
    }
}

/// `cargo test -p polpo-loops --test executor -- --ignored --nocapture bench`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark"]
async fn bench_tool_steps_file_store() {
    bench_tool_steps("file").await;
}

/// As [`bench_tool_steps_file_store`], on SQLite (there is no in-memory store).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark"]
async fn bench_tool_steps_sqlite() {
    bench_tool_steps("sqlite").await;
}

/// A loop whose one step writes `out.txt`, with these governance fields.
fn governed(governance: Value) -> Value {
    let mut config = json!({"start": "save", "steps": {
        "save": {"type": "tool", "tool": "write", "input": {"path": "out.txt", "content": "saved"}}
    }});
    for (k, v) in governance.as_object().unwrap() {
        config[k] = v.clone();
    }
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_matching_deny_and_an_allow_list_that_names_nothing_here_stop_the_tool_before_it_runs() {
    let llm = FakeLlm::start([]).await.unwrap();
    let cases = [
        (
            json!({"permissions": [
                {"id": "reads-ok", "resource": "tool", "effect": "deny", "match": {"tool": "read"}},
                {"id": "no-writes", "resource": "tool", "effect": "deny", "match": {"tool": "wr*"}, "message": "writes are off"}
            ]}),
            "loop_permission_denied",
            vec![("reads-ok", false), ("no-writes", true)],
        ),
        (
            json!({"permissions": [{"id": "only-read", "resource": "tool", "effect": "allow", "match": {"tool": "read"}}]}),
            "loop_permission_denied",
            vec![("only-read", false)],
        ),
        (
            json!({"policies": [{"id": "no-out", "effect": "deny", "when": "tool.input.path == 'out.txt'"}]}),
            "loop_policy_denied",
            vec![("no-out", true)],
        ),
    ];
    for (governance, want, results) in cases {
        let (dir, exec) = executor(&llm, json!({}), &[("flow", governed(governance))], 100).await;
        let finished = run(&exec, &request(json!({}))).await;
        assert_eq!(code(&finished), want, "{:?}", finished.result);
        assert!(!dir.path().join("out.txt").exists(), "the tool did not run");
        let seen: Vec<(String, bool)> = finished
            .trace
            .iter()
            .filter(|e| matches!(e.kind, TraceKind::PermissionResult | TraceKind::PolicyResult))
            .map(|e| {
                let data = e.data.as_ref().unwrap();
                (data["id"].as_str().unwrap().to_owned(), data["matched"].as_bool().unwrap())
            })
            .collect();
        let results: Vec<(String, bool)> = results.into_iter().map(|(id, m)| (id.to_owned(), m)).collect();
        assert_eq!(seen, results);
    }
    // The same allow-list lets the tool it names run.
    let allow = json!({"permissions": [{"id": "only-write", "resource": "tool", "effect": "allow", "match": {"tool": "write"}}]});
    let (dir, exec) = executor(&llm, json!({}), &[("flow", governed(allow))], 100).await;
    assert_eq!(code(&run(&exec, &request(json!({}))).await), "ok");
    assert_eq!(std::fs::read_to_string(dir.path().join("out.txt")).unwrap(), "saved");
}

/// Rules at `tool:after`, `step:after` and `loop:transition` see the point's payload (the
/// step's output, the transition's ends): each stops the run on what it reads there, and the
/// same rules on other values let it complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_and_transition_rules_read_the_output_and_transition_payloads() {
    let llm = FakeLlm::start([]).await.unwrap();
    let config = |policy: Value| {
        json!({"start": "look", "policies": [policy], "steps": {
            "look": {"type": "tool", "tool": "read", "input": {"path": "level.txt"}, "saveAs": "seen",
                     "next": [{"when": "seen == '1\thigh'", "to": "alarm"}, {"to": "end"}]},
            "alarm": {"type": "tool", "tool": "read", "input": {"path": "level.txt"}, "next": "end"}
        }})
    };
    // `read` numbers its lines: the output of a file holding `high` is "1<tab>high".
    let rules = [
        json!({"id": "high-out", "hook": "tool:after", "effect": "deny", "when": "output == '1\thigh'"}),
        json!({"id": "high-step", "hook": "step:after", "effect": "deny", "when": "output == '1\thigh'"}),
        json!({"id": "to-alarm", "hook": "loop:transition", "effect": "deny", "when": "transition.from == 'look' && transition.to == 'alarm'"}),
    ];
    for rule in rules {
        let id = rule["id"].as_str().unwrap().to_owned();
        for (level, want, matched) in [("high", "loop_policy_denied", true), ("low", "ok", false)] {
            let (dir, exec) = executor(&llm, json!({}), &[("flow", config(rule.clone()))], 100).await;
            std::fs::write(dir.path().join("level.txt"), level).unwrap();
            let finished = run(&exec, &request(json!({}))).await;
            assert_eq!(code(&finished), want, "{id} on {level}: {:?}", finished.result);
            let result =
                finished.trace.iter().find(|e| e.kind == TraceKind::PolicyResult).expect("the rule is reported");
            assert_eq!(result.data.as_ref().unwrap()["matched"], json!(matched), "{id} on {level}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hook_actions_save_their_output_and_a_failure_fails_closed_unless_on_error_continue() {
    let llm = FakeLlm::start([]).await.unwrap();
    let audit = json!({"tool": "write", "input": {"path": "audit.txt", "content": "started"}, "saveAs": "audit.start"});
    let probe = |on_error: Value| {
        let mut action = json!({"tool": "read", "input": {"path": "missing.txt"}, "saveAs": "probe"});
        if !on_error.is_null() {
            action["onError"] = on_error;
        }
        governed(json!({"hooks": {"loop:start": [audit.clone()], "step:before": [action]}}))
    };

    let (dir, exec) = executor(&llm, json!({}), &[("flow", probe(json!("continue")))], 100).await;
    let finished = run(&exec, &request(json!({}))).await;
    assert_eq!(code(&finished), "ok", "{:?}", finished.result);
    assert_eq!(std::fs::read_to_string(dir.path().join("audit.txt")).unwrap(), "started");
    assert!(finished.state.context["audit"]["start"].is_string(), "the hook's output is saved at saveAs");
    assert_eq!(std::fs::read_to_string(dir.path().join("out.txt")).unwrap(), "saved");
    let failed = finished
        .trace
        .iter()
        .find(|e| e.kind == TraceKind::ToolResult && e.tool.as_deref() == Some("read"))
        .expect("the failed hook call is traced");
    assert_eq!(failed.status, Some(polpo_loops::TraceStatus::Failed));
    assert_eq!(failed.data.as_ref().unwrap()["kind"], "hook");
    assert_eq!(failed.data.as_ref().unwrap()["hook"], "step:before");

    for on_error in [json!("fail"), Value::Null] {
        let (dir, exec) = executor(&llm, json!({}), &[("flow", probe(on_error))], 100).await;
        let finished = run(&exec, &request(json!({}))).await;
        assert_eq!(code(&finished), "loop_hook_failed", "{:?}", finished.result);
        assert!(!dir.path().join("out.txt").exists(), "the step after the failed hook did not run");
    }
}

/// A run long enough that its older trace entries are stored apart from its record stops at a
/// human step, and its process dies (the task is dropped mid-wait, nothing more written). A
/// writer that lost the run earlier left entries the record does not count (as if killed
/// between storing them and storing the state that counts them). Another executor on the same
/// store resumes the run: its trace reads back whole and in order, each entry once, the
/// uncounted ones nowhere, and the run completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_long_run_reads_its_trace_back_whole_without_uncounted_entries() {
    // Tool steps s0… before the human step and as many after it, each tracing five entries:
    // both halves outgrow what a record keeps.
    const STEPS: usize = 20;
    let llm = FakeLlm::start([]).await.unwrap();
    let mut steps: serde_json::Map<String, Value> = (0..2 * STEPS)
        .map(|i| {
            let next = match i + 1 {
                n if n == STEPS => "ask".to_owned(),
                n if n == 2 * STEPS => "end".to_owned(),
                n => format!("s{n}"),
            };
            (format!("s{i}"), json!({"type": "tool", "tool": "read", "input": {"path": "f.txt"}, "next": next}))
        })
        .collect();
    steps.insert("ask".into(), json!({"type": "human", "next": format!("s{STEPS}")}));
    let settings = json!({"storage": "sqlite", "chatExecution": "inline"});
    let (dir, runtime) =
        runtime_with(&llm, settings.clone(), json!({}), &[("long", json!({"start": "s0", "steps": steps}))], &[]).await;
    std::fs::write(dir.path().join("f.txt"), "data").unwrap();
    // Both processes are the same worker (`--worker-id`), so the restarted one takes its runs
    // back without waiting for their leases to lapse.
    let worker = || "worker-1".to_owned();
    let exec = Arc::new(LoopExecutor::new(
        RunManager::with_owner(runtime.clone(), RunOptions { lease_ttl: Duration::from_secs(5) }, worker()),
        LoopOptions { step_budget: 100 },
    ));
    let (run_id, running, mut asked) = suspended(&exec);
    asked.recv().await.unwrap();
    let stored = |exec: Arc<LoopExecutor>, id: String, want: polpo_loops::LoopRunStatus, resumed: bool| async move {
        let polled = tokio::time::timeout(Duration::from_secs(30), async {
            let mut every = tokio::time::interval(Duration::from_millis(5));
            loop {
                every.tick().await;
                let run = exec.stored_run(&id, None).await.unwrap();
                let has_resumed = run.record.trace.iter().any(|e| e.kind == TraceKind::LoopResume);
                if run.record.status == want && has_resumed == resumed {
                    return run;
                }
            }
        });
        polled.await.expect("the run reaches the state")
    };
    stored(exec.clone(), run_id.clone(), polpo_loops::LoopRunStatus::AwaitingHuman, false).await;
    running.abort();
    assert!(running.await.unwrap_err().is_cancelled());

    // The record as stored counts the entries kept apart; a dead writer's chunk of entries
    // past that count, under an older claim than any resume's, is left behind.
    let records = runtime.store().records.clone();
    let raw = records.get_record("loop_runs", &run_id).await.unwrap().unwrap();
    let flushed = raw.value["traceFlushed"].as_u64().unwrap();
    assert!(flushed > 0, "the trace outgrew the record: {}", raw.value);
    let stray: Vec<Value> = (0..3)
        .map(|i| json!({"id": format!("trace-{}", flushed + 1 + i), "type": "tool.call", "ts": 0, "loop": "long", "step": "stray"}))
        .collect();
    let chunk = json!({"epoch": raw.revision, "from": flushed + 1, "events": stray});
    records.put_record(&format!("loop_trace.{run_id}"), "stray", chunk, None).await.unwrap();

    // A new process on the same project and store resumes it.
    let project = polpo_project::load_project(dir.path()).unwrap();
    let store = open_store(StoreKind::Sqlite, dir.path(), None, Arc::new(SystemClock)).await.unwrap();
    let runtime =
        Arc::new(Runtime::new(Loaded::new(project).unwrap(), Providers::new(BTreeMap::new(), llm.openai_env()), store));
    let runs = RunManager::with_owner(runtime.clone(), RunOptions { lease_ttl: Duration::from_secs(5) }, worker());
    let again = Arc::new(LoopExecutor::new(runs, LoopOptions { step_budget: 100 }));
    // Waiting for a person, the run holds no lease and no recovery takes it over: its answer,
    // stored with it, resumes it here.
    assert_eq!(again.recover().await.unwrap(), 0);
    again.answer_human(&run_id, None, json!({"ok": true})).await.unwrap();
    let done = stored(again.clone(), run_id.clone(), polpo_loops::LoopRunStatus::Completed, true).await;

    let trace = &done.record.trace;
    let ids: Vec<&str> = trace.iter().map(|e| e.id.as_str()).collect();
    let numbered: Vec<String> = (1..=trace.len()).map(|n| format!("trace-{n}")).collect();
    assert_eq!(ids, numbered, "every entry once, in order");
    assert!(trace.iter().all(|e| e.step.as_deref() != Some("stray")), "uncounted entries are not read back");
    let count = |kind: TraceKind| trace.iter().filter(|e| e.kind == kind).count();
    assert_eq!(count(TraceKind::ToolCall), 2 * STEPS, "no tool step traced twice");
    let raw = runtime.store().records.get_record("loop_runs", &run_id).await.unwrap().unwrap();
    assert!(
        raw.value["traceFlushed"].as_u64().unwrap() > flushed + 3,
        "the resumed run stored entries apart over the stray ones"
    );
    assert_eq!((count(TraceKind::LoopStart), count(TraceKind::LoopResume), count(TraceKind::LoopEnd)), (1, 1, 1));
    assert_eq!(count(TraceKind::HumanRequest), 1, "asked once: the resumed step takes the stored answer");
}

/// Stored run `id` once `done` holds for it (polled every 5 ms, 30 s at most).
async fn stored_when(
    exec: &LoopExecutor,
    id: &str,
    done: impl Fn(&polpo_loops::LoopRunRecord) -> bool,
) -> polpo_loops::LoopRunRecord {
    let polled = tokio::time::timeout(Duration::from_secs(30), async {
        let mut every = tokio::time::interval(Duration::from_millis(5));
        loop {
            every.tick().await;
            if let Ok(run) = exec.stored_run(id, None).await
                && done(&run.record)
            {
                return run.record;
            }
        }
    });
    polled.await.expect("the run reaches the state")
}

/// Two servers on one store. A runs a loop to its human step: the run is stored waiting,
/// holding no lease, and A does not rewrite it while it waits. The answer reaches B, which
/// stores it with the run and claims it (the next fencing generation) in one write, then
/// resumes it from A's last checkpoint — the tool step before it is not run again — and
/// finishes it. A, still waiting in memory, sees the record changed and lets the run go
/// without writing (`lease_lost`); a second answer, to either server, is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_human_answer_given_to_another_server_resumes_the_run_there_once() {
    let llm = FakeLlm::start([]).await.unwrap();
    let config = json!({"start": "note", "steps": {
        "note": {"type": "tool", "tool": "write", "input": {"path": "note.txt", "content": "once"}, "next": "ask"},
        "ask": {"type": "human", "output": {"schema": {"type": "object", "required": ["ok"], "properties": {"ok": {"type": "boolean"}}}}, "next": "end"}
    }});
    let settings = json!({"storage": "sqlite", "chatExecution": "inline"});
    let (dir, runtime) =
        runtime_with(&llm, settings, json!({"allowedTools": ["write"]}), &[("flow", config)], &[]).await;
    let ttl = Duration::from_millis(300);
    let a_runs = RunManager::with_owner(runtime, RunOptions { lease_ttl: ttl }, "a".into());
    let a = Arc::new(LoopExecutor::new(a_runs, LoopOptions::default()));
    let (run_id, running, mut asked) = suspended(&a);
    asked.recv().await.unwrap();
    stored_when(&a, &run_id, |r| r.status == polpo_loops::LoopRunStatus::AwaitingHuman).await;
    let waiting = a.stored_run(&run_id, None).await.unwrap();
    assert!(waiting.record.lease.is_none(), "a run waiting for a person holds no lease");
    // Over more than a whole lease, the waiting run's record is not written again.
    tokio::time::sleep(ttl * 2).await;
    assert_eq!(a.stored_run(&run_id, None).await.unwrap().revision, waiting.revision);

    let project = polpo_project::load_project(dir.path()).unwrap();
    let store = open_store(StoreKind::Sqlite, dir.path(), None, Arc::new(SystemClock)).await.unwrap();
    let runtime =
        Arc::new(Runtime::new(Loaded::new(project).unwrap(), Providers::new(BTreeMap::new(), llm.openai_env()), store));
    let b_runs = RunManager::with_owner(runtime, RunOptions { lease_ttl: Duration::from_secs(5) }, "b".into());
    let b = Arc::new(LoopExecutor::new(b_runs, LoopOptions::default()));
    assert_eq!(b.recover().await.unwrap(), 0, "nobody takes over a run waiting for a person");
    assert_eq!(
        b.answer_human(&run_id, None, json!({"ok": "yes"})).await.unwrap_err().code(),
        "loop_human_output_invalid",
        "checked against the step's output.schema as stored"
    );
    b.answer_human(&run_id, None, json!({"ok": true})).await.unwrap();
    assert_eq!(
        b.answer_human(&run_id, None, json!({"ok": false})).await.unwrap_err().code(),
        "loop_run_not_found",
        "answered once"
    );

    let fenced = tokio::time::timeout(Duration::from_secs(30), running).await.unwrap().unwrap();
    assert_eq!(code(&fenced), "lease_lost", "{:?}", fenced.result);
    assert!(!a.humans().is_waiting(&run_id), "A's human step waits for nobody");
    assert_eq!(a.answer_human(&run_id, None, json!({"ok": false})).await.unwrap_err().code(), "loop_run_not_found");

    let done = stored_when(&b, &run_id, |r| r.status == polpo_loops::LoopRunStatus::Completed).await;
    assert_eq!(done.output, Some(json!({"ok": true})));
    assert!(done.lease.is_none(), "an ended run holds no lease");
    let count = |kind: TraceKind| done.trace.iter().filter(|e| e.kind == kind).count();
    assert_eq!(count(TraceKind::ToolCall), 1, "the tool step before the checkpoint ran once");
    assert_eq!((count(TraceKind::HumanRequest), count(TraceKind::HumanResult)), (1, 1));
    assert_eq!((count(TraceKind::LoopResume), count(TraceKind::LoopError)), (1, 0), "nothing of A's after the claim");
    assert_eq!(std::fs::read_to_string(dir.path().join("note.txt")).unwrap(), "once");
    assert_eq!(b.recover().await.unwrap(), 0, "an ended run is not listed live");
}

/// Stored run `id` put back at the checkpoint before its first step (`start`, nothing
/// executed, no lease), as a server that died before that step's checkpoint left it; read
/// back with its revision for a resume.
async fn rewound(runtime: &Runtime, id: &str, start: &str) -> (polpo_loops::LoopRunRecord, u64) {
    let records = &runtime.store().records;
    let stored = records.get_record("loop_runs", id).await.unwrap().unwrap();
    let mut record: polpo_loops::LoopRunRecord = serde_json::from_value(stored.value).unwrap();
    record.status = polpo_loops::LoopRunStatus::Running;
    record.state.frontier = vec![start.to_owned()];
    record.state.executed = 0;
    record.state.context = json!({"request": record.state.context["request"]});
    record.human = None;
    record.lease = None;
    let value = serde_json::to_value(&record).unwrap();
    let written = records.put_record("loop_runs", id, value, Some(stored.revision)).await.unwrap();
    (record, written.revision)
}

/// A side-effecting tool step (`bash` appending a line) goes through the effect ledger. A
/// server that ran it and recorded its outcome, but died before the checkpoint after it: the
/// run taken over from the checkpoint before the step reuses the recorded outcome and the line
/// is not appended twice. A server that died while the step ran (its intent recorded, no
/// outcome): the step may or may not have happened, so the run taking over fails
/// `effect_unconfirmed` instead of running it again. A read step is not ledgered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_side_effecting_tool_step_a_dead_server_started_is_never_run_again_blindly() {
    let llm = FakeLlm::start([]).await.unwrap();
    let appended = json!({"start": "append", "steps": {
        "append": {"type": "tool", "tool": "bash", "input": {"command": "echo x >> out.txt"}, "saveAs": "out", "next": "look"},
        "look": {"type": "tool", "tool": "read", "input": {"path": "out.txt"}, "next": "ask"},
        "ask": {"type": "human", "next": "end"}
    }});
    let stuck = json!({"start": "append", "steps": {
        "append": {"type": "tool", "tool": "bash", "input": {"command": "echo y >> stuck.txt; while [ ! -f never ]; do sleep 0.02; done"}}
    }});
    let agent = json!({"allowedTools": ["bash", "read"]});
    let settings = json!({"storage": "sqlite", "chatExecution": "inline"});
    let (dir, runtime) = runtime_with(&llm, settings, agent, &[("appended", appended), ("stuck", stuck)], &[]).await;
    let runs = RunManager::new(runtime.clone(), RunOptions { lease_ttl: Duration::from_secs(5) });
    let exec = Arc::new(LoopExecutor::new(runs, LoopOptions::default()));
    let lines = |file: &str| std::fs::read_to_string(dir.path().join(file)).unwrap_or_default();

    // Done: the outcome is recorded; the checkpoint after the step is lost.
    let (run_id, running, mut asked) = suspended(&exec);
    asked.recv().await.unwrap();
    let first = stored_when(&exec, &run_id, |r| r.status == polpo_loops::LoopRunStatus::AwaitingHuman).await;
    running.abort();
    let _ = running.await;
    assert_eq!(lines("out.txt"), "x\n");
    let (record, revision) = rewound(&runtime, &run_id, "append").await;
    let config = exec.select(&request(json!({}))).unwrap().1;
    // Another executor (a server taking over) on the same store: the dropped run is still
    // active in the first one's process.
    let again = Arc::new(LoopExecutor::new(
        RunManager::new(runtime.clone(), RunOptions { lease_ttl: Duration::from_secs(5) }),
        LoopOptions::default(),
    ));
    let (resumer, id) = (again.clone(), run_id.clone());
    let resumed = tokio::spawn(async move { resumer.resume(record, revision, &config, &|_| {}).await });
    let waiting = stored_when(&exec, &run_id, |r| {
        r.status == polpo_loops::LoopRunStatus::AwaitingHuman && r.trace.iter().any(|e| e.kind == TraceKind::LoopResume)
    })
    .await;
    assert_eq!(lines("out.txt"), "x\n", "the appending step did not run again");
    let results: Vec<&TraceEvent> = waiting.trace.iter().filter(|e| e.kind == TraceKind::ToolResult).collect();
    let effects: Vec<(Option<&str>, Option<&str>)> =
        results.iter().map(|e| (e.step_key.as_deref(), e.data.as_ref().and_then(|d| d["effect"].as_str()))).collect();
    assert_eq!(
        effects,
        [(Some("append"), None), (Some("look"), None), (Some("append"), Some("recorded")), (Some("look"), None)],
        "the resumed run reused the recorded outcome; a read step is not ledgered"
    );
    assert_eq!(waiting.state.context["out"], first.state.context["out"], "the recorded outcome is the step's output");
    again.answer_human(&id, None, json!({"ok": true})).await.unwrap();
    assert_eq!(code(&resumed.await.unwrap()), "ok");
    assert_eq!(lines("out.txt"), "x\n");

    // Pending: the server stops while the step runs.
    let mut req = request(json!({}));
    req.loop_id = Some("stuck".into());
    let (id, config) = exec.select(&req).unwrap();
    let run_id = exec.new_run_id();
    let (runner, rid, cfg) = (exec.clone(), run_id.clone(), config.clone());
    let running = tokio::spawn(async move { runner.run(&req, &rid, &id, &cfg, &|_| {}).await });
    tokio::time::timeout(Duration::from_secs(30), async {
        while lines("stuck.txt").is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the step starts");
    exec.stop(&run_id);
    assert_eq!(code(&running.await.unwrap()), "aborted");
    let (record, revision) = rewound(&runtime, &run_id, "append").await;
    let finished = tokio::time::timeout(Duration::from_secs(30), again.resume(record, revision, &config, &|_| {}))
        .await
        .expect("the resumed run ends");
    assert_eq!(code(&finished), "effect_unconfirmed", "{:?}", finished.result);
    assert_eq!(lines("stuck.txt"), "y\n", "the step was not run again");
    let stored = stored_when(&exec, &run_id, |r| r.status == polpo_loops::LoopRunStatus::Failed).await;
    assert_eq!(stored.error.unwrap().code, "effect_unconfirmed");

    // A person checked: the line was appended. Settled `applied`, with the output the step
    // saves, the run resumes from its last checkpoint and completes without running the step.
    let failed = stored.trace.iter().rev().find(|e| e.kind == TraceKind::LoopError).unwrap();
    let key = failed.data.as_ref().unwrap()["effect"]["key"].as_str().unwrap().to_owned();
    let applied = EffectDecision::Applied { result: Some(r#"{"appended": 1}"#.into()) };
    let refused = again.reconcile(&run_id, None, &format!("{key}-other"), applied.clone()).await.unwrap_err();
    assert_eq!(refused.code(), "loop_run_not_resumable", "not that run's effect");
    again.reconcile(&run_id, None, &key, applied.clone()).await.unwrap();
    let done = stored_when(&again, &run_id, |r| r.status.is_terminal()).await;
    assert_eq!(done.status, polpo_loops::LoopRunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.state.context["bash"], json!({"appended": 1}), "the step saved the stated output");
    assert_eq!(lines("stuck.txt"), "y\n", "the step was not run again");
    let refused = again.reconcile(&run_id, None, &key, applied).await.unwrap_err();
    assert_eq!(refused.code(), "loop_run_not_resumable", "settled once");
}

/// Polled every 5 ms (30 s at most) until file `name` in `dir` has every line of `lines`.
async fn until_lines(dir: &std::path::Path, name: &str, lines: &[&str]) {
    let read = || std::fs::read_to_string(dir.join(name)).unwrap_or_default();
    tokio::time::timeout(Duration::from_secs(30), async {
        while !lines.iter().all(|l| read().lines().any(|have| have == *l)) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{name} never had {lines:?}: {:?}", read()));
}

/// A parallel step whose branches run side-effecting `bash` steps: branch A waits for a person
/// then appends `a2`; branch B appends `b1` then `b2`, all while A waits. The server dies
/// after the answer was stored and every branch ran, before the checkpoint after the parallel
/// step. The run taken over from the checkpoint before it (the answer stored with it) runs the
/// branches again in another order — A no longer waits — and reuses every recorded outcome:
/// each line appears once, the effect keys being the branch path's, not the order the
/// branches happened to run in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_branches_side_effects_run_once_across_a_resume_in_another_order() {
    let llm = FakeLlm::start([]).await.unwrap();
    let append = |line: &str, next: &str| json!({"type": "tool", "tool": "bash", "input": {"command": format!("echo {line} >> out.txt")}, "saveAs": line, "next": next});
    let config = json!({"start": "fan", "steps": {
        "fan": {"type": "parallel", "branches": ["ask", "b1"], "join": "all", "next": "end"},
        "ask": {"type": "human", "next": "a2"},
        "a2": append("a2", "end"),
        "b1": append("b1", "b2"),
        "b2": append("b2", "end")
    }});
    let settings = json!({"storage": "sqlite", "chatExecution": "inline"});
    let (dir, runtime) = runtime_with(&llm, settings, json!({"allowedTools": ["bash"]}), &[("fan", config)], &[]).await;
    let exec = Arc::new(LoopExecutor::new(
        RunManager::new(runtime.clone(), RunOptions { lease_ttl: Duration::from_secs(5) }),
        LoopOptions::default(),
    ));
    let (run_id, running, mut asked) = suspended(&exec);
    asked.recv().await.unwrap();
    until_lines(dir.path(), "out.txt", &["b1", "b2"]).await;
    exec.answer_human(&run_id, None, json!({"ok": true})).await.unwrap();
    assert_eq!(code(&tokio::time::timeout(Duration::from_secs(30), running).await.unwrap().unwrap()), "ok");
    let lines = || {
        let mut lines: Vec<String> =
            std::fs::read_to_string(dir.path().join("out.txt")).unwrap().lines().map(str::to_owned).collect();
        lines.sort();
        lines
    };
    assert_eq!(lines(), ["a2", "b1", "b2"]);

    // As the run was stored when its server died: the answer stored with it, running, at the
    // checkpoint before the parallel step.
    let records = &runtime.store().records;
    let stored = records.get_record("loop_runs", &run_id).await.unwrap().unwrap();
    let mut record: polpo_loops::LoopRunRecord = serde_json::from_value(stored.value).unwrap();
    record.status = polpo_loops::LoopRunStatus::Running;
    record.state.frontier = vec!["fan".to_owned()];
    record.state.executed = 0;
    record.state.context = json!({"request": record.state.context["request"]});
    record.human =
        Some(polpo_loops::PendingHuman { step: "ask".into(), schema: None, answer: Some(json!({"ok": true})) });
    record.lease = None;
    let written =
        records.put_record("loop_runs", &run_id, serde_json::to_value(&record).unwrap(), Some(stored.revision));
    let revision = written.await.unwrap().revision;
    let again = LoopExecutor::new(
        RunManager::new(runtime.clone(), RunOptions { lease_ttl: Duration::from_secs(5) }),
        LoopOptions::default(),
    );
    let config = exec.select(&request(json!({}))).unwrap().1;
    let resumed = tokio::time::timeout(Duration::from_secs(30), again.resume(record, revision, &config, &|_| {}))
        .await
        .expect("the resumed run ends");
    assert_eq!(code(&resumed), "ok", "{:?}", resumed.result);
    assert_eq!(lines(), ["a2", "b1", "b2"], "no branch's effect ran twice");
    let resume = resumed.trace.iter().position(|e| e.kind == TraceKind::LoopResume).unwrap();
    let mut reused: Vec<&str> = resumed.trace[resume..]
        .iter()
        .filter(|e| e.kind == TraceKind::ToolResult && e.data.as_ref().is_some_and(|d| d["effect"] == "recorded"))
        .filter_map(|e| e.step_key.as_deref())
        .collect();
    reused.sort_unstable();
    assert_eq!(reused, ["a2", "b1", "b2"], "every outcome reused from the ledger");
}

/// Two servers on one store, their time the store's clock (moved by hand). Server A runs a
/// loop whose side-effecting step is held, before it runs, by a `tool:before` hook action that
/// waits for the test. Meanwhile A's lease lapses and server B claims the run. When A's hook
/// returns, A does not start the effect: it finds the run claimed (`lease_lost`), records no
/// intent and runs nothing, so B's resume runs the step as a fresh effect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_whose_lease_was_claimed_never_starts_a_side_effect() {
    let llm = FakeLlm::start([]).await.unwrap();
    let config = json!({"start": "append",
    "hooks": {"tool:before": [{"tool": "bash", "input": {"command": "touch holding; for i in $(seq 3000); do [ -f gate ] && break; sleep 0.02; done"}}]},
    "steps": {
        "append": {"type": "tool", "tool": "bash", "input": {"command": "echo once >> out.txt"}, "next": "end"}
    }});
    let clock = Arc::new(polpo_store::ManualClock::new(chrono::Utc::now()));
    let settings = json!({"storage": "sqlite", "chatExecution": "inline"});
    let agent = json!({"allowedTools": ["bash"]});
    let (dir, runtime) = runtime_on(&llm, settings, agent, &[("held", config)], &[], clock.clone()).await;
    // A long lease: A's background renewal (a third of it, on the wall clock) never runs here.
    let ttl = Duration::from_secs(600);
    let a = Arc::new(LoopExecutor::new(
        RunManager::with_owner(runtime.clone(), RunOptions { lease_ttl: ttl }, "a".into()),
        LoopOptions::default(),
    ));
    let req = request(json!({}));
    let (loop_id, config) = a.select(&req).unwrap();
    let run_id = a.new_run_id();
    let (runner, rid, cfg) = (a.clone(), run_id.clone(), config.clone());
    let running = tokio::spawn(async move { runner.run(&req, &rid, &loop_id, &cfg, &|_| {}).await });
    tokio::time::timeout(Duration::from_secs(30), async {
        while !dir.path().join("holding").exists() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("A's hook runs");

    // A's lease lapses; B claims the run (its recovery pass resumes it, and its hook waits too).
    clock.advance(chrono::Duration::from_std(ttl).unwrap() + chrono::Duration::seconds(1));
    let b = Arc::new(LoopExecutor::new(
        RunManager::with_owner(runtime.clone(), RunOptions { lease_ttl: ttl }, "b".into()),
        LoopOptions::default(),
    ));
    assert_eq!(b.recover().await.unwrap(), 1);
    stored_when(&b, &run_id, |r| r.lease.as_ref().is_some_and(|l| l.owner == "b")).await;
    std::fs::write(dir.path().join("gate"), "").unwrap();
    let fenced = tokio::time::timeout(Duration::from_secs(30), running).await.unwrap().unwrap();
    assert_eq!(code(&fenced), "lease_lost", "{:?}", fenced.result);
    // The step's own result, not its hook action's.
    let stepped = |e: &&TraceEvent| {
        e.kind == TraceKind::ToolResult
            && e.tool.as_deref() == Some("bash")
            && e.data.as_ref().is_some_and(|d| d["kind"] != "hook")
    };
    assert_eq!(fenced.trace.iter().filter(stepped).count(), 0, "A did not run the step");
    let done = stored_when(&b, &run_id, |r| r.status.is_terminal()).await;
    assert_eq!(done.status, polpo_loops::LoopRunStatus::Completed, "{:?}", done.error);
    assert_eq!(std::fs::read_to_string(dir.path().join("out.txt")).unwrap(), "once\n");
    let effects: Vec<Option<&Value>> =
        done.trace.iter().filter(stepped).map(|e| e.data.as_ref().and_then(|d| d.get("effect"))).collect();
    assert_eq!(effects, [None], "B ran the step, a fresh effect: A had recorded no intent");
}
