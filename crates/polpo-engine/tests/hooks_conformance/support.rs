//! Building invocations with hook packs, and running them against the fake LLM.

#![allow(dead_code)] // each test module uses a different part

use polpo_core::hooks::validate::{ValidateOptions, check_document};
use polpo_core::hooks::{ExecutionMode, HookPack, HookSet, InvocationInfo, Scope};
use polpo_core::message::Message;
use polpo_core::policy::{PolicyLayer, ToolPolicy};
use polpo_engine::hooks::{Clock, HookRuntime, InvocationHooks, system_clock};
use polpo_engine::structured::ResponseFormat;
use polpo_engine::tools::set::ToolSet;
use polpo_engine::{EngineError, Invocation, RunEvent, RunOutcome, run_turns};
use polpo_llm::{OpenAiProvider, ProviderConfig, ToolChoice, WireApi};
use polpo_testkit::FakeLlm;
use polpo_tools::{Tool, ToolContext};
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;

/// A workspace directory plus helpers to write hook scripts into it.
pub struct Workspace {
    pub dir: TempDir,
}

impl Workspace {
    pub fn new() -> Self {
        Self { dir: tempfile::tempdir().unwrap() }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Write an executable `sh` script (outside the agent-visible files) and return the
    /// command line that runs it.
    pub fn script(&self, name: &str, body: &str) -> String {
        let dir = self.path().join(".hooks");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path.display().to_string()
    }

    /// A script that saves each envelope it receives as `<name>-<n>.json` and prints `output`.
    pub fn recording_script(&self, name: &str, output: &str) -> String {
        let dir = self.path().join(".hooks");
        std::fs::create_dir_all(&dir).unwrap();
        let body = format!(
            "n=$(ls {dir}/{name}-*.json 2>/dev/null | wc -l | tr -d ' ')\ncat > {dir}/{name}-$n.json\nprintf '%s' '{output}'",
            dir = dir.display()
        );
        self.script(name, &body)
    }

    /// Every envelope a recording script saved, in order.
    pub fn envelopes(&self, name: &str) -> Vec<Value> {
        (0..)
            .map(|n| self.path().join(".hooks").join(format!("{name}-{n}.json")))
            .take_while(|p| p.exists())
            .map(|p| serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap())
            .collect()
    }

    pub fn file(&self, rel: &str) -> PathBuf {
        self.path().join(rel)
    }
}

/// Validate a pack document (with the test-only loopback allowance) or panic with its problems.
pub fn pack(name: &str, doc: Value) -> HookPack {
    let (pack, problems) = check_document(name, &doc, &ValidateOptions { allow_loopback_http: true });
    assert!(problems.is_empty(), "pack {name} has problems: {problems:?}");
    pack
}

/// Hooks for an agent with `packs` assigned at agent scope, in chat mode.
pub fn hooks(packs: &[HookPack]) -> InvocationHooks {
    hooks_in(packs, ExecutionMode::Chat, None)
}

pub fn hooks_in(packs: &[HookPack], mode: ExecutionMode, step: Option<&str>) -> InvocationHooks {
    let set = HookSet::resolve(packs.iter().map(|p| (Scope::Agent, p)));
    let info = InvocationInfo {
        run_id: "run_test".into(),
        session_id: None,
        agent: "writer".into(),
        mode,
        loop_id: step.map(|_| "release".into()),
        step: step.map(String::from),
    };
    InvocationHooks {
        set: Arc::new(set),
        info,
        runtime: HookRuntime { enabled: true, managed: false, allow_loopback_http: true },
        clock: system_clock(),
        secrets: Vec::new(),
        parallel_branch: false,
        verifiers: Default::default(),
        connections: None,
    }
}

/// A clock that moves forward by `step_ms` every time it is read.
pub fn stepping_clock(step_ms: u64) -> Clock {
    let reads = Arc::new(std::sync::atomic::AtomicU64::new(0));
    Arc::new(move || {
        std::time::Duration::from_millis(reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst) * step_ms)
    })
}

/// The agent under test: the built-in tools in `ws`, an optional policy ceiling, the fake LLM.
pub fn invocation(llm: &FakeLlm, ws: &Workspace, hooks: Option<InvocationHooks>) -> Invocation {
    invocation_with(llm, ws, hooks, polpo_tools::tools::system_tools(), None)
}

pub fn invocation_with(
    llm: &FakeLlm,
    ws: &Workspace,
    hooks: Option<InvocationHooks>,
    tools: Vec<Arc<dyn Tool>>,
    allowed: Option<&[&str]>,
) -> Invocation {
    let provider = OpenAiProvider::new(&ProviderConfig::new(WireApi::OpenAiChat, llm.base_url()), None).unwrap();
    let allowed: Option<Vec<String>> = allowed.map(|a| a.iter().map(|s| s.to_string()).collect());
    Invocation {
        agent: "writer".into(),
        system_prompt: "You are a careful writer.".into(),
        provider: Arc::new(provider),
        model: "gpt-test".into(),
        tools: Arc::new(ToolSet::new(tools)),
        policy: ToolPolicy::unrestricted().narrow(PolicyLayer::Agent, allowed.as_deref()),
        client_tools: Vec::new(),
        tool_choice: ToolChoice::Auto,
        parallel_tool_calls: false,
        response_format: ResponseFormat::Text,
        max_turns: 8,
        reasoning: None,
        tool_context: ToolContext::new(ws.path()),
        hooks,
        approvals: None,
        tool_loading: polpo_core::config::ToolLoadingMode::Direct,
        interactions: Default::default(),
        temperature: None,
    }
}

/// What a run did, as a user or client would observe it.
pub struct Observed {
    pub result: Result<RunOutcome, EngineError>,
    pub events: Vec<RunEvent>,
}

impl Observed {
    /// Everything streamed to the client as answer text.
    pub fn streamed_text(&self) -> String {
        self.events
            .iter()
            .filter_map(|e| if let RunEvent::TextDelta { text } = e { Some(text.as_str()) } else { None })
            .collect()
    }

    pub fn error_code(&self) -> &'static str {
        match &self.result {
            Ok(o) => panic!("expected an error, got {o:?}"),
            Err(e) => e.code(),
        }
    }

    pub fn error_text(&self) -> String {
        self.result.as_ref().err().map(|e| e.to_string()).unwrap_or_default()
    }

    pub fn content(&self) -> String {
        match &self.result {
            Ok(o) => o.content.clone().unwrap_or_default(),
            Err(e) => panic!("run failed: {e}"),
        }
    }

    /// `(hook, decision-or-error)` of every completed hook, in completion order.
    pub fn hooks_completed(&self) -> Vec<(String, String)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                RunEvent::HookCompleted { hook, decision, error, .. } => {
                    Some((hook.clone(), decision.clone().or(error.clone()).unwrap_or_default()))
                }
                _ => None,
            })
            .collect()
    }

    /// Model-visible results of tool calls, in order.
    pub fn tool_results(&self) -> Vec<(String, bool)> {
        self.events
            .iter()
            .filter_map(|e| {
                if let RunEvent::ToolCompleted { result, is_error, .. } = e {
                    Some((result.clone(), *is_error))
                } else {
                    None
                }
            })
            .collect()
    }
}

pub async fn run(inv: &Invocation, prompt: &str) -> Observed {
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink_events = events.clone();
    let sink = move |e: RunEvent| sink_events.lock().unwrap().push(e);
    let result = run_turns(inv, vec![Message::user(prompt)], &sink, &CancellationToken::new()).await;
    let events = events.lock().unwrap().clone();
    Observed { result, events }
}

/// The text of every message the fake LLM received in request `n` (0-based).
pub fn request_text(llm: &FakeLlm, n: usize) -> String {
    llm.requests()[n].body["messages"].to_string()
}

/// The tool names offered in request `n`.
pub fn request_tools(llm: &FakeLlm, n: usize) -> Vec<String> {
    llm.requests()[n].body["tools"]
        .as_array()
        .map(|t| t.iter().map(|t| t["function"]["name"].as_str().unwrap_or_default().to_string()).collect())
        .unwrap_or_default()
}
