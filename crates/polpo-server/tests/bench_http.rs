//! Benchmark (ignored by default): what the HTTP server adds to a chat completion.
//!
//! `cargo test --release -p polpo-server --test bench_http -- --ignored --nocapture`
//!
//! Against the fake LLM (a real HTTP server answering at once), per storage backend:
//! latency of calling the fake LLM directly vs through Polpo (the gateway overhead), the
//! runtime's own share as reported in `x-polpo-overhead-ms`, completions per second with 32
//! concurrent clients (each completion is a Run: new session, model call, stored turn), and
//! resident memory before and after, to see that it stays flat; then the same with
//! `store: false` (nothing written) on the file store.
//!
//! `rss_over_50000_runs` (also ignored): resident memory after 5,000 and after 50,000
//! completions at 32 concurrent clients (`POLPO_BENCH_STORES=file,sqlite,unstored`, file by
//! default), the growth between them being what a long-running server keeps per run.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use polpo_testkit::{FakeLlm, ProjectFixture, Turn};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::Server;

const SEQUENTIAL: usize = 400;
const CONCURRENT_TOTAL: usize = 4000;
const CLIENTS: usize = 32;
const ROUNDS: usize = 3;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    kib / 1024.0
}

/// A new conversation; stored unless `store` is false.
fn body(store: bool) -> serde_json::Value {
    json!({"agent": "writer", "store": store, "messages": [{"role": "user", "content": "Say something short."}]})
}

async fn sequential(http: &reqwest::Client, url: &str, n: usize, store: bool) -> (Vec<Duration>, Vec<f64>) {
    let mut times = Vec::with_capacity(n);
    let mut overheads = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let r = http.post(url).json(&body(store)).send().await.unwrap();
        assert!(r.status().is_success());
        if let Some(o) = r.headers().get("x-polpo-overhead-ms") {
            overheads.push(o.to_str().unwrap().parse::<f64>().unwrap());
        }
        r.bytes().await.unwrap();
        times.push(t.elapsed());
    }
    times.sort();
    overheads.sort_by(f64::total_cmp);
    (times, overheads)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run with --release -- --ignored --nocapture"]
async fn http_overhead_and_throughput() {
    polpo_llm::install_crypto_provider();
    let llm = FakeLlm::start_repeating([Turn::text("Short answer.").usage(900, 6)]).await.unwrap();
    let direct = reqwest::Client::new();
    let direct_url = format!("{}/chat/completions", llm.base_url());
    let fake_body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    for _ in 0..50 {
        direct.post(&direct_url).json(&fake_body).send().await.unwrap().bytes().await.unwrap();
    }
    let mut base = Vec::new();
    for _ in 0..SEQUENTIAL {
        let t = Instant::now();
        direct.post(&direct_url).json(&fake_body).send().await.unwrap().bytes().await.unwrap();
        base.push(t.elapsed());
    }
    base.sort();
    println!(
        "fake LLM called directly: p50 {:.3} ms, p99 {:.3} ms",
        ms(percentile(&base, 0.5)),
        ms(percentile(&base, 0.99))
    );

    for (storage, store) in [("file", true), ("sqlite", true), ("file", false)] {
        let s = writer_server(&llm, storage).await;
        let url = format!("{}/v1/chat/completions", s.url);
        let storage = if store { storage } else { "store:false" };
        sequential(&s.http, &url, 50, store).await;
        let rss_before = rss_mib();
        let (times, overheads) = sequential(&s.http, &url, SEQUENTIAL, store).await;
        println!(
            "[{storage}] through polpo: p50 {:.3} ms, p99 {:.3} ms; x-polpo-overhead-ms p50 {:.3}, p99 {:.3}",
            ms(percentile(&times, 0.5)),
            ms(percentile(&times, 0.99)),
            overheads[overheads.len() / 2],
            overheads[(overheads.len() - 1) * 99 / 100]
        );

        // Several rounds: completions/s per round, and RSS after each, to see memory stay flat.
        let http = Arc::new(s.http.clone());
        let per_client = CONCURRENT_TOTAL / CLIENTS;
        let mut rss = vec![format!("{rss_before:.1}")];
        for round in 1..=ROUNDS {
            let elapsed = concurrently(&http, &url, CONCURRENT_TOTAL, store).await;
            rss.push(format!("{:.1}", rss_mib()));
            println!(
                "[{storage}] round {round}: {CLIENTS} concurrent clients, {:.0} completions/s ({} in {:.2} s)",
                (per_client * CLIENTS) as f64 / elapsed.as_secs_f64(),
                per_client * CLIENTS,
                elapsed.as_secs_f64()
            );
        }
        println!("[{storage}] RSS MiB before and after each round: {}", rss.join(" → "));
    }
}

/// A server whose only agent `writer` has no tools, on `storage`.
async fn writer_server(llm: &FakeLlm, storage: &str) -> Server {
    Server::start_with(llm, None, |d| {
        ProjectFixture::new(d, json!({"storage": storage}))
            .unwrap()
            .agent("writer", json!({"model": "openai/fake", "allowedTools": []}), "You write.")
            .unwrap();
    })
    .await
}

/// `total` completions by [`CLIENTS`] concurrent clients; how long they took.
async fn concurrently(http: &Arc<reqwest::Client>, url: &str, total: usize, store: bool) -> Duration {
    let started = Instant::now();
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (http, url) = (http.clone(), url.to_owned());
            tokio::spawn(async move {
                for _ in 0..total / CLIENTS {
                    let r = http.post(&url).json(&body(store)).send().await.unwrap();
                    assert!(r.status().is_success());
                    r.bytes().await.unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run with --release -- --ignored --nocapture"]
async fn rss_over_50000_runs() {
    polpo_llm::install_crypto_provider();
    let llm = FakeLlm::start_repeating([Turn::text("Short answer.").usage(900, 6)]).await.unwrap();
    let stores = std::env::var("POLPO_BENCH_STORES").unwrap_or_else(|_| "file".into());
    for kind in stores.split(',') {
        let (storage, store) = if kind == "unstored" { ("file", false) } else { (kind, true) };
        let s = writer_server(&llm, storage).await;
        let (url, http) = (format!("{}/v1/chat/completions", s.url), Arc::new(s.http.clone()));
        let start = rss_mib();
        let first = concurrently(&http, &url, 5_000, store).await;
        let at_5k = rss_mib();
        let rest = concurrently(&http, &url, 45_000, store).await;
        let at_50k = rss_mib();
        println!(
            "[{kind}] RSS MiB: start {start:.1}, after 5,000 runs {at_5k:.1}, after 50,000 {at_50k:.1} (growth {:.1} MiB); {:.0} runs/s, then {:.0} runs/s",
            at_50k - at_5k,
            5_000.0 / first.as_secs_f64(),
            45_000.0 / rest.as_secs_f64()
        );
    }
}
