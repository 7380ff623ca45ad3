//! Figures of the offline embedding model on this machine: load time, milliseconds per sentence
//! (one at a time and in batches of 16), and peak resident memory. Timing lives here, not in
//! tests. Run: `cargo run --release -p polpo-embed --features local --example local-bench`.
#![allow(clippy::unwrap_used)] // a benchmark: a failed setup should panic loudly

use polpo_embed::Embedder;
use std::time::Instant;

#[tokio::main]
async fn main() {
    let dir = polpo_embed::local::models_dir(&|name| std::env::var(name).ok()).unwrap();
    let model_dir = polpo_embed::local::install(&dir).unwrap();
    let started = Instant::now();
    let embedder = polpo_embed::LocalEmbedder::load(&model_dir).unwrap();
    println!("load: {:.0} ms", started.elapsed().as_secs_f64() * 1000.0);
    let sentences: Vec<String> = (0..64)
        .map(|i| format!("Note {i}: the deployment of service {i} failed because the database password expired."))
        .collect();
    embedder.embed(&sentences[..1]).await.unwrap(); // warm-up
    let started = Instant::now();
    for s in &sentences {
        embedder.embed(std::slice::from_ref(s)).await.unwrap();
    }
    let one = started.elapsed().as_secs_f64() * 1000.0 / sentences.len() as f64;
    println!("one at a time: {one:.1} ms per sentence");
    let started = Instant::now();
    embedder.embed(&sentences).await.unwrap();
    let batched = started.elapsed().as_secs_f64() * 1000.0 / sentences.len() as f64;
    println!("batched: {batched:.1} ms per sentence");
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let peak = status.lines().find(|l| l.starts_with("VmHWM")).unwrap_or("VmHWM: unknown");
    println!("peak RSS {}", peak.trim_start_matches("VmHWM:").trim());
}
