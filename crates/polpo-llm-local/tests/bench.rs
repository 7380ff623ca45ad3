//! Prefill and decode speed of an installed local model, for the README:
//! `cargo test -p polpo-llm-local --features llama --test bench -- --ignored --nocapture`
//! (`POLPO_BENCH_MODEL=qwen2.5-coder-0.5b` to measure another model; it is installed if needed).
//! Run it on a quiet machine: parallel builds slow llama.cpp several times over.
#![cfg(feature = "llama")]
#![allow(clippy::unwrap_used)] // test helpers: a failed setup should panic loudly

use futures::StreamExt;
use polpo_core::message::{Message, Usage};
use polpo_core::tool::ToolSpec;
use polpo_llm::{ModelEvent, ModelProvider, ModelRequest, ToolChoice};
use polpo_llm_local::{LocalProvider, LocalSettings, TEST_MODEL, install};
use std::path::PathBuf;
use std::time::{Duration, Instant};

struct Sample {
    usage: Usage,
    to_first_token: Duration,
    first_to_last: Duration,
}

async fn measure(provider: &LocalProvider, request: ModelRequest) -> Sample {
    let started = Instant::now();
    let mut stream = provider.stream(request).await.unwrap();
    let (mut first, mut last, mut usage) = (None, started, Usage::default());
    while let Some(event) = stream.next().await {
        match event.unwrap() {
            ModelEvent::TextDelta(_) | ModelEvent::ToolCall(_) => {
                first.get_or_insert_with(Instant::now);
                last = Instant::now();
            }
            ModelEvent::Usage(u) => usage = u,
            _ => {}
        }
    }
    let first = first.unwrap_or(last);
    Sample { usage, to_first_token: first - started, first_to_last: last - first }
}

fn report(label: &str, s: &Sample) {
    // Time to the first token covers the prompt plus one decoded token; the rest is pure decoding.
    let prefill = s.usage.input_tokens as f64 / s.to_first_token.as_secs_f64();
    let decode = s.usage.output_tokens.saturating_sub(1) as f64 / s.first_to_last.as_secs_f64().max(1e-9);
    println!(
        "{label}: prompt {} tok in {:?} = {prefill:.0} tok/s prefill; {} tok generated, {decode:.1} tok/s decode",
        s.usage.input_tokens, s.to_first_token, s.usage.output_tokens
    );
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "benchmark: run on a quiet machine"]
async fn prefill_and_decode_speed() {
    let model = std::env::var("POLPO_BENCH_MODEL").unwrap_or_else(|_| TEST_MODEL.into());
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("polpo-models");
    let (name, install_dir) = (model.clone(), dir.clone());
    tokio::task::spawn_blocking(move || install(&name, &install_dir, |_, _| {})).await.unwrap().unwrap();
    let provider = LocalProvider::new(LocalSettings::new(dir));
    println!("model {model}, {} threads", provider.settings().threads);
    let chat = |max| ModelRequest {
        model: model.clone(),
        messages: vec![
            Message::system("You are a helpful assistant. ".repeat(20)),
            Message::user("Explain in detail how a lighthouse works, its history and its parts."),
        ]
        .into(),
        max_output_tokens: Some(max),
        ..Default::default()
    };
    measure(&provider, chat(1)).await; // load the weights
    for run in 1..=3 {
        report(&format!("chat run {run}"), &measure(&provider, chat(128)).await);
    }
    let read = ToolSpec {
        name: "read".into(),
        description: "Read a text file from the workspace.".into(),
        parameters: serde_json::json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
    };
    let call = ModelRequest {
        model: model.clone(),
        messages: vec![Message::user("Use the read tool to read the file notes.txt.")].into(),
        tools: vec![read.into()],
        tool_choice: ToolChoice::Required,
        ..Default::default()
    };
    // A call arrives as one event at its end: only the whole turn can be timed.
    let s = measure(&provider, call).await;
    println!(
        "grammar-constrained tool call: prompt {} tok + {} tok generated in {:?}",
        s.usage.input_tokens,
        s.usage.output_tokens,
        s.to_first_token + s.first_to_last
    );
}
