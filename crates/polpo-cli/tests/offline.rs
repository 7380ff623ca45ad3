//! Polpo with no API key and no network: the real binary answers with the real local model.
//!
//! Needs the test model installed (`scripts/test` does it):
//! `POLPO_MODELS_DIR=~/.cache/polpo-models cargo run -q -p polpo-cli -- models install smollm2-135m`,
//! then `cargo test -p polpo-cli --features local-model --test offline`. A missing model fails
//! every test with that command; it never passes silently.
//!
//! The agent's model is `openai/gpt-4o-mini` with no key set, so the runtime falls back to the
//! offline model; `POLPO_LOCAL_MODEL` points that fallback at the small test model's weights.
//! `OPENAI_BASE_URL` points at a listener the tests own, and each test asserts nothing connected.

#![cfg(feature = "local-model")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use polpo_llm_local::{MODEL_PATH_ENV, TEST_MODEL};
use polpo_testkit::ProjectFixture;
use serde_json::json;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use support::ServerProcess;

/// The installed test model's GGUF, or a panic that says how to install it.
fn test_model() -> PathBuf {
    installed_model(TEST_MODEL)
}

/// The GGUF of installed model `name`, or a panic that says how to install it.
fn installed_model(name: &str) -> PathBuf {
    let dir = match std::env::var_os("POLPO_MODELS_DIR").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => polpo_llm_local::default_cache_dir().unwrap(),
    };
    polpo_llm_local::list(&dir).into_iter().find(|m| m.model.name == name).map(|m| m.path).unwrap_or_else(|| {
        panic!(
            "the offline model `{name}` is not installed in {}: run \
             `POLPO_MODELS_DIR={} cargo run -q -p polpo-cli -- models install {name}` (scripts/test does this for the test model)",
            dir.display(),
            dir.display()
        )
    })
}

/// A project whose agent names a network model it has no key for, with only the `read` tool.
fn project(dir: &Path) {
    ProjectFixture::new(dir, json!({"storage": "file"}))
        .unwrap()
        .agent(
            "assistant",
            json!({"model": "openai/gpt-4o-mini", "allowedTools": ["read"], "maxTurns": 3}),
            "You are a helpful assistant. Answer clearly and briefly.",
        )
        .unwrap();
}

/// A port that would receive any call to the network provider: the tests check it stayed silent.
struct Tripwire(TcpListener);

impl Tripwire {
    fn new() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        Self(listener)
    }

    fn base_url(&self) -> String {
        format!("http://{}/v1", self.0.local_addr().unwrap())
    }

    /// Panics when anything connected (the kernel completes connections without `accept`).
    fn assert_untouched(&self) {
        match self.0.accept() {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            other => panic!("the network provider was contacted: {other:?}"),
        }
    }
}

/// `polpo run` with no provider key in its environment, only the offline test model.
fn polpo_run(root: &Path, tripwire: &Tripwire, args: &[&str]) -> Output {
    polpo_run_with(&test_model(), root, tripwire, args)
}

/// `polpo run` with no provider key in its environment, only the offline model at `model`.
fn polpo_run_with(model: &Path, root: &Path, tripwire: &Tripwire, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_polpo"));
    cmd.arg("run").args(args).arg("--project").arg(root);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().ends_with("_API_KEY") {
            cmd.env_remove(key);
        }
    }
    cmd.env(MODEL_PATH_ENV, model).env("OPENAI_BASE_URL", tripwire.base_url()).output().unwrap()
}

#[test]
fn polpo_run_answers_with_the_local_model_when_no_key_is_set() {
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let tripwire = Tripwire::new();
    let out = polpo_run(dir.path(), &tripwire, &["assistant", "What is the capital of France?"]);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(!stdout.trim().is_empty(), "an answer from the local model; stderr:\n{stderr}");
    assert!(stderr.contains("tokens in"), "the run summary counts the local model's tokens: {stderr}");
    tripwire.assert_untouched();
}

#[test]
fn an_agent_reads_a_workspace_file_offline() {
    // SmolLM2 does not pick tools on its own: force `read` on the first call.
    reads_the_code_word(&test_model(), &["--tool-choice", "read"]);
}

/// The quick start's own question, with no `--tool-choice`: a model tuned on the Hermes tool
/// template calls `read` by itself. Needs the 491 MB model:
/// `polpo models install qwen2.5-coder-0.5b`, then run with `--ignored`.
#[test]
#[ignore = "needs qwen2.5-coder-0.5b installed (491 MB)"]
fn qwen_reads_a_workspace_file_offline_on_its_own() {
    reads_the_code_word(&installed_model("qwen2.5-coder-0.5b"), &[]);
}

/// Asks the model at `model` (with `extra` `polpo run` arguments) for the code word only
/// notes.txt holds, and checks it read the file once and quoted it.
fn reads_the_code_word(model: &Path, extra: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    // A made-up word: the model can only answer with it by reading the file.
    std::fs::write(dir.path().join("notes.txt"), "The code word is PELICAN-42.\n").unwrap();
    let tripwire = Tripwire::new();
    let args = [&["assistant", "Read notes.txt and tell me the code word."], extra].concat();
    let out = polpo_run_with(model, dir.path(), &tripwire, &args);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(stderr.contains("→ read"), "the model called the read tool:\n{stderr}");
    assert_eq!(stderr.matches("→ read").count(), 1, "one read, then an answer instead of reading again:\n{stderr}");
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("PELICAN-42"), "the answer quotes the file: {stdout}\nstderr:\n{stderr}");
    tripwire.assert_untouched();
}

/// Prompt tokens of one `polpo run --json` answering `prompt` with this `--tool-choice`.
fn prompt_tokens(root: &Path, tripwire: &Tripwire, prompt: &str, tool_choice: &str) -> u64 {
    let out = polpo_run(root, tripwire, &["assistant", prompt, "--json", "--tool-choice", tool_choice]);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    summary["usage"]["input_tokens"].as_u64().unwrap_or_else(|| panic!("no input tokens: {summary}"))
}

/// Without `--tool-choice` (what the quick start does) the model is shown the agent's tools: its
/// prompt is longer than the same question's with `--tool-choice none` by at least the `read`
/// tool's schema. The question is one SmolLM2 answers in one turn either way, so the two prompts
/// differ only by the tool block.
#[test]
fn the_default_tool_choice_offers_the_agents_tools_to_the_local_model() {
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let tripwire = Tripwire::new();
    let question = "What is the capital of France?";
    let without_tools = prompt_tokens(dir.path(), &tripwire, question, "none");
    let auto = prompt_tokens(dir.path(), &tripwire, question, "auto");
    // `read`'s description and parameter schema alone are well over 100 tokens.
    assert!(auto > without_tools + 100, "auto: {auto} prompt tokens, none: {without_tools}");
    tripwire.assert_untouched();
}

#[tokio::test(flavor = "multi_thread")]
async fn polpo_serve_answers_chat_completions_with_the_local_model() {
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let tripwire = Tripwire::new();
    let model = test_model();
    let (model, base) = (model.to_str().unwrap(), tripwire.base_url());
    let server = ServerProcess::start("serve", dir.path(), &[], &[(MODEL_PATH_ENV, model), ("OPENAI_BASE_URL", &base)]);
    polpo_llm::install_crypto_provider();
    let response = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", server.url))
        .json(&json!({"model": "assistant", "messages": [{"role": "user", "content": "Say hello."}]}))
        .send()
        .await
        .unwrap();
    let status = response.status();
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(status, 200, "{body}");
    let answer = body["choices"][0]["message"]["content"].as_str().unwrap_or("");
    assert!(!answer.trim().is_empty(), "{body}");
    assert!(body["usage"]["completion_tokens"].as_u64().unwrap_or(0) > 0, "{body}");
    tripwire.assert_untouched();
}
