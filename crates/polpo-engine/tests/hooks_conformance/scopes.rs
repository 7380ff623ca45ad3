//! Scopes end to end through the `Runtime`: packs assigned to the project (`settings.hooks`),
//! to an agent (`hooks`), to a loop and to a step (the request's `LoopContext`) run in that
//! order whatever their priorities, each once, and step matchers see the step.

use futures::StreamExt;
use polpo_core::message::Message;
use polpo_engine::hooks::HookRuntime;
use polpo_engine::runs::{RunManager, RunOptions, RunSpec};
use polpo_engine::{ChatError, ChatInput, Loaded, LoopContext, Runtime};
use polpo_llm::Providers;
use polpo_store::{PageRequest, StoreKind, SystemClock, open_store};
use polpo_testkit::{FakeLlm, ProjectFixture, Turn};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;

/// A `tool:before` hook that appends its id to `order.log` and allows the call.
fn marker(id: &str, priority: i32) -> Value {
    json!({"id": id, "priority": priority, "handler": {"type": "command", "command": format!("sh .polpo/hooks/mark.sh {id}")}})
}

fn pack(hooks: Vec<Value>) -> Value {
    json!({"version": 1, "hooks": {"tool:before": hooks}})
}

struct Project {
    dir: TempDir,
    runtime: Arc<Runtime>,
}

impl Project {
    /// Agents `writer` (agent pack `agent`) and `reader` (none) under project pack `proj`,
    /// plus the loop and step packs a loop context may assign.
    async fn start(llm: &FakeLlm, step_pack: Value) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let fixture = ProjectFixture::new(dir.path(), json!({"storage": "file", "hooks": ["proj"]}))
            .unwrap()
            .agent("writer", json!({"model": "openai/fake-model", "hooks": ["agent"]}), "You write.")
            .unwrap()
            .agent("reader", json!({"model": "openai/fake-model"}), "You read.")
            .unwrap()
            // Priorities are inverted against scopes on purpose: scope decides first.
            .hook_pack("proj", pack(vec![marker("project", 900)]))
            .unwrap()
            .hook_pack("agent", pack(vec![marker("agent-late", 50), marker("agent-early", 10)]))
            .unwrap()
            .hook_pack("loop", pack(vec![marker("loop", -5)]))
            .unwrap()
            .hook_pack("step", step_pack)
            .unwrap();
        let script = "id=\"$1\"\ncat > \".polpo/hooks/envelope-$id.json\"\necho \"$id\" >> order.log\necho '{\"decision\":\"allow\"}'";
        std::fs::write(fixture.root().join(".polpo/hooks/mark.sh"), script).unwrap();
        let project = polpo_project::load_project(dir.path()).unwrap();
        let store = open_store(StoreKind::File, dir.path(), None, Arc::new(SystemClock)).await.unwrap();
        let runtime =
            Runtime::new(Loaded::new(project).unwrap(), Providers::new(BTreeMap::new(), llm.openai_env()), store)
                .with_hook_runtime(HookRuntime::default());
        Self { dir, runtime: Arc::new(runtime) }
    }

    async fn chat(&self, agent: &str, loop_context: Option<LoopContext>) -> Result<String, ChatError> {
        let mut input = ChatInput::new(agent, vec![Message::user("list the files")]);
        input.loop_context = loop_context;
        let out = self.runtime.chat(input, &|_| {}, &CancellationToken::new()).await?;
        Ok(out.outcome.content.unwrap_or_default())
    }

    /// The hook ids that ran, in order, since the last call.
    fn fired(&self) -> Vec<String> {
        let log = self.dir.path().join("order.log");
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let _ = std::fs::remove_file(&log);
        text.lines().map(String::from).collect()
    }

    fn envelope(&self, id: &str) -> Value {
        serde_json::from_slice(
            &std::fs::read(self.dir.path().join(format!(".polpo/hooks/envelope-{id}.json"))).unwrap(),
        )
        .unwrap()
    }
}

fn in_step(step: &str, loop_hooks: &[&str], step_hooks: &[&str]) -> Option<LoopContext> {
    let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect();
    Some(LoopContext {
        loop_id: "release".into(),
        step: step.into(),
        loop_hooks: names(loop_hooks),
        step_hooks: names(step_hooks),
        ..Default::default()
    })
}

async fn ls_then_done(calls: usize) -> FakeLlm {
    FakeLlm::start((0..calls).flat_map(|_| [Turn::tool_calls(vec![("ls", json!({"path": "."}))]), Turn::text("done")]))
        .await
        .unwrap()
}

#[tokio::test]
async fn controlling_hooks_run_project_then_agent_then_loop_then_step_whatever_their_priority() {
    let llm = ls_then_done(1).await;
    let p = Project::start(&llm, pack(vec![marker("step", -100)])).await;
    // `proj` is also assigned to the step: it still runs once, at project scope.
    let answer = p.chat("writer", in_step("build", &["loop"], &["step", "proj"])).await.unwrap();
    assert_eq!(answer, "done");
    assert_eq!(p.fired(), ["project", "agent-early", "agent-late", "loop", "step"]);
    let step = p.envelope("step");
    assert_eq!(step["hook"]["scope"], "step");
    assert_eq!(step["invocation"]["mode"], "loop");
    assert_eq!((&step["invocation"]["loop"], &step["invocation"]["step"]), (&json!("release"), &json!("build")));
    assert_eq!(p.envelope("project")["hook"]["scope"], "project");
}

#[tokio::test]
async fn a_project_pack_applies_to_every_agent() {
    let llm = ls_then_done(2).await;
    let p = Project::start(&llm, pack(vec![marker("step", 0)])).await;
    p.chat("writer", None).await.unwrap();
    assert_eq!(p.fired(), ["project", "agent-early", "agent-late"]);
    p.chat("reader", None).await.unwrap();
    assert_eq!(p.fired(), ["project"], "reader has no packs of its own, but the project's apply");
    assert_eq!(p.envelope("project")["invocation"]["mode"], "chat");
}

#[tokio::test]
async fn a_step_matcher_fires_only_on_its_step() {
    let llm = ls_then_done(3).await;
    let mut only_build = marker("build-only", 0);
    only_build["matcher"] = json!({"steps": ["build"]});
    let p = Project::start(&llm, pack(vec![only_build])).await;
    p.chat("reader", in_step("build", &[], &["step"])).await.unwrap();
    assert_eq!(p.fired(), ["project", "build-only"]);
    p.chat("reader", in_step("deploy", &[], &["step"])).await.unwrap();
    assert_eq!(p.fired(), ["project"]);
    // The same pack at agent scope would not fire in chat either: a `steps` matcher means loops only.
    p.chat("reader", None).await.unwrap();
    assert_eq!(p.fired(), ["project"]);
}

#[tokio::test]
async fn an_unknown_pack_in_a_loop_context_fails_before_any_model_call() {
    let llm = ls_then_done(1).await;
    let p = Project::start(&llm, pack(vec![marker("step", 0)])).await;
    let err = p.chat("writer", in_step("build", &["loop"], &["qualty"])).await.unwrap_err();
    assert_eq!(err.code(), "unknown_hook_pack");
    assert!(err.to_string().contains(".polpo/hooks/qualty.json"), "{err}");
    assert!(llm.requests().is_empty(), "no model call");
    assert!(p.fired().is_empty(), "no hook ran");
    let sessions =
        p.runtime.store().sessions.list_sessions(&Default::default(), &PageRequest::default()).await.unwrap();
    assert!(sessions.items.is_empty(), "no session was created");
}

#[tokio::test]
async fn a_durable_loop_node_runs_its_scopes_and_keeps_them_for_a_resume() {
    let llm = ls_then_done(1).await;
    let p = Project::start(&llm, pack(vec![marker("step", 0)])).await;
    let runs = RunManager::new(p.runtime.clone(), RunOptions::default());
    let mut input = ChatInput::new("reader", vec![Message::user("list the files")]);
    input.loop_context = in_step("build", &["loop"], &["step"]);
    let run = runs.start(input).await.unwrap().run_id;
    let journal = runs.events(&run, 0).map(Result::unwrap).collect::<Vec<_>>();
    let journal = tokio::time::timeout(std::time::Duration::from_secs(20), journal).await.expect("the run ends");
    assert_eq!(journal.last().map(|e| e.event_type.as_str()), Some("run.completed"));
    assert_eq!(p.fired(), ["project", "loop", "step"]);
    // A resume rebuilds the request from what the run accepted: the loop node is still one.
    let accepted = journal.iter().find(|e| e.event_type == "run.accepted").unwrap();
    let spec: RunSpec = serde_json::from_value(accepted.data["spec"].clone()).unwrap();
    assert_eq!(spec.to_input(&run).unwrap().loop_context, in_step("build", &["loop"], &["step"]));
}
