//! Benchmark (ignored by default): the engine's own cost per agent turn.
//!
//! `cargo test --release -p polpo-engine --test bench_turn -- --ignored --nocapture`
//!
//! The shape of issue #4: a 20-message history (and a 200-message one, a long session), 10 tools
//! offered, a model answering at once.
//! Two figures: with an in-process provider that returns a canned answer (the runtime's cost
//! alone), and through the OpenAI provider to the fake LLM over loopback HTTP (what a real
//! deployment adds on top of the model).
//!
//! Allocations are counted by a global allocator installed in this test binary only: every
//! allocation (and reallocation) of every thread during the timed runs, divided by the number
//! of turns. Through HTTP that includes the fake LLM server, which runs in the same process.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark: a failed setup should panic loudly

#[path = "hooks_conformance/support.rs"]
mod support;

use futures::stream;
use polpo_core::message::{FinishReason, Message, Usage};
use polpo_engine::run_turns;
use polpo_engine::tools::set::ToolSet;
use polpo_llm::{LlmError, ModelEvent, ModelProvider, ModelRequest, ModelStream};
use polpo_testkit::{FakeLlm, Turn};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};
use support::{Workspace, invocation};
use tokio_util::sync::CancellationToken;

/// The system allocator, counting allocations and bytes requested.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

// The only way to observe allocations is a global allocator, which is an unsafe trait; this
// one forwards every call unchanged to `System`, so it upholds `System`'s guarantees.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        BYTES.fetch_add(layout.size() as u64, Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        BYTES.fetch_add(layout.size() as u64, Relaxed);
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        BYTES.fetch_add(new_size as u64, Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

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

fn history(len: usize) -> Vec<Message> {
    (0..len)
        .map(|i| {
            if i % 2 == 0 {
                Message::user(format!("question {i} about the project"))
            } else {
                Message::assistant(format!("answer {i} with some detail"))
            }
        })
        .collect()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// Median and p99 time per turn, and allocations and bytes allocated per turn.
async fn measure(inv: &polpo_engine::Invocation, n: usize, history_len: usize) -> (Duration, Duration, u64, u64) {
    let cancel = CancellationToken::new();
    for _ in 0..n / 10 {
        run_turns(inv, history(history_len), &|_| {}, &cancel).await.unwrap();
    }
    let mut times = Vec::with_capacity(n);
    // Histories are built before counting: the caller's conversation is not the engine's cost.
    let histories: Vec<Vec<Message>> = (0..n).map(|_| history(history_len)).collect();
    let (allocations, bytes) = (ALLOCATIONS.load(Relaxed), BYTES.load(Relaxed));
    for history in histories {
        let t = Instant::now();
        run_turns(inv, history, &|_| {}, &cancel).await.unwrap();
        times.push(t.elapsed());
    }
    let (allocations, bytes) = (ALLOCATIONS.load(Relaxed) - allocations, BYTES.load(Relaxed) - bytes);
    times.sort();
    (percentile(&times, 0.5), percentile(&times, 0.99), allocations / n as u64, bytes / n as u64)
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

    let (p50, p99, allocs, bytes) = measure(&inv, 2000, 20).await;
    println!(
        "HTTP to fake LLM (OpenAI wire, loopback): p50 {p50:?}  p99 {p99:?}  {allocs} allocations / {bytes} bytes per turn (fake server included)"
    );

    inv.provider = Arc::new(Canned);
    let (p50, p99, allocs, bytes) = measure(&inv, 20000, 20).await;
    println!(
        "engine alone (in-process canned provider): p50 {p50:?}  p99 {p99:?}  {allocs} allocations / {bytes} bytes per turn"
    );

    // A long session: what the engine's cost per turn does as the history grows tenfold.
    let short_history_allocs = allocs;
    let (p50, p99, allocs, bytes) = measure(&inv, 20000, 200).await;
    println!(
        "engine alone, 200-message history: p50 {p50:?}  p99 {p99:?}  {allocs} allocations / {bytes} bytes per turn"
    );
    assert_eq!(
        allocs, short_history_allocs,
        "the history is shared with each model call, never copied message by message"
    );

    // The same without tools: what offering 10 tool schemas per model call costs.
    inv.tools = Arc::new(ToolSet::new(Vec::new()));
    let (p50, p99, allocs, bytes) = measure(&inv, 20000, 20).await;
    println!("engine alone, no tools offered: p50 {p50:?}  p99 {p99:?}  {allocs} allocations / {bytes} bytes per turn");
}
