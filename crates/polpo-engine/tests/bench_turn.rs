//! Benchmark (ignored by default): the engine's own cost per agent turn.
//!
//! `cargo test --release -p polpo-engine --test bench_turn -- --ignored --nocapture`
//!
//! The shape of issue #4: a 20-message history, 10 tools offered, a model answering at once.
//! Two figures: with an in-process provider that returns a canned answer (the runtime's cost
//! alone), and through the OpenAI provider to the fake LLM over loopback HTTP (what a real
//! deployment adds on top of the model).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark: a failed setup should panic loudly

#[path = "hooks_conformance/support.rs"]
mod support;

use futures::stream;
use polpo_core::message::{FinishReason, Message, Usage};
use polpo_engine::run_turns;
use polpo_engine::tool_exec::ToolSet;
use polpo_llm::{LlmError, ModelEvent, ModelProvider, ModelRequest, ModelStream};
use polpo_testkit::{FakeLlm, Turn};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{Workspace, invocation};
use tokio_util::sync::CancellationToken;

/// Answers every call with the same short text, in-process: no I/O, no parsing.
struct Canned;

#[async_trait::async_trait]
impl ModelProvider for Canned {
    async fn stream(&self, _request: ModelRequest) -> Result<ModelStream, LlmError> {
        let events = vec![
            Ok(ModelEvent::TextDelta("The answer is 42.".into())),
            Ok(ModelEvent::Usage(Usage { input_tokens: 900, output_tokens: 6 })),
            Ok(ModelEvent::Finish(FinishReason::Stop)),
        ];
        Ok(Box::pin(stream::iter(events)))
    }
}

fn history() -> Vec<Message> {
    (0..20).map(|i| if i % 2 == 0 { Message::user(format!("question {i} about the project")) } else { Message::assistant(format!("answer {i} with some detail")) }).collect()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

async fn measure(inv: &polpo_engine::Invocation, n: usize) -> (Duration, Duration) {
    let cancel = CancellationToken::new();
    for _ in 0..n / 10 {
        run_turns(inv, history(), &|_| {}, &cancel).await.unwrap();
    }
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        run_turns(inv, history(), &|_| {}, &cancel).await.unwrap();
        times.push(t.elapsed());
    }
    times.sort();
    (percentile(&times, 0.5), percentile(&times, 0.99))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run with --ignored --nocapture, in release"]
async fn engine_overhead_per_turn() {
    let ws = Workspace::new();
    let llm = FakeLlm::start_repeating(vec![Turn::text("The answer is 42.")]).await.unwrap();
    let mut inv = invocation(&llm, &ws, None);
    let tools: Vec<_> = polpo_tools::tools::system_tools().into_iter().take(10).collect();
    assert_eq!(tools.len(), 10);
    inv.tools = Arc::new(ToolSet::new(tools));

    let (p50, p99) = measure(&inv, 2000).await;
    println!("HTTP to fake LLM (OpenAI wire, loopback): p50 {:?}  p99 {:?} per turn", p50, p99);

    inv.provider = Arc::new(Canned);
    let (p50, p99) = measure(&inv, 20000).await;
    println!("engine alone (in-process canned provider): p50 {:?}  p99 {:?} per turn", p50, p99);
}
