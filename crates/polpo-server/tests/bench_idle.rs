//! Benchmark (ignored by default): resident memory per idle connection, and that it is
//! returned once the connections close.
//!
//! `cargo test --release -p polpo-server --test bench_idle -- --ignored --nocapture`
//!
//! 2,000 clients connect to the server as `polpo serve` runs it (`polpo_server::serve::run`,
//! with the header timeout raised so nothing is closed while measuring): first silent (a
//! client that connected and sent nothing yet), then each after one answered request, idle on
//! keep-alive (what browsers and connection pools leave open). The clients are plain sockets
//! with no user-space buffers, so the process's resident memory growth is the server's.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use polpo_server::serve::{Limits, run};
use polpo_testkit::{FakeLlm, Turn};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use support::Server;

const CONNECTIONS: usize = 2_000;
/// Targets from issue #13.
const MAX_KIB_PER_CONNECTION: f64 = 16.0;
const MAX_TOTAL_MIB: f64 = 32.0;

fn rss_kib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// Resident memory once it stops moving (the server finishes setting connections up).
async fn settled_rss_kib() -> f64 {
    let mut last = rss_kib();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = rss_kib();
        if (now - last).abs() < 64.0 || Instant::now() > deadline {
            return now;
        }
        last = now;
    }
}

/// One request on `stream`, answer read whole (`content-length` bounded), connection kept.
fn health(stream: &mut TcpStream) {
    stream.write_all(b"GET /api/v1/health HTTP/1.1\r\nhost: localhost\r\n\r\n").unwrap();
    let mut buf = [0u8; 2048];
    let mut got = Vec::new();
    while !got.windows(4).any(|w| w == b"\r\n\r\n") || !String::from_utf8_lossy(&got).contains("\"ok\"") {
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0, "the server closed the connection");
        got.extend_from_slice(&buf[..n]);
    }
}

async fn measure(addr: &str, label: &str, request: bool) -> (f64, f64) {
    let before = settled_rss_kib().await;
    let addr = addr.to_owned();
    let streams = tokio::task::spawn_blocking(move || {
        (0..CONNECTIONS)
            .map(|_| {
                let mut s = TcpStream::connect(&addr).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                if request {
                    health(&mut s);
                }
                s
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    let open = settled_rss_kib().await;
    drop(streams);
    let closed = settled_rss_kib().await;
    let per = (open - before) / CONNECTIONS as f64;
    println!(
        "{label}: {CONNECTIONS} idle connections: RSS {:.1} → {:.1} MiB ({per:.1} KiB each); after closing {:.1} MiB",
        before / 1024.0,
        open / 1024.0,
        closed / 1024.0
    );
    (per, closed - before)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run in release with --ignored --nocapture"]
async fn idle_connections_cost_little_and_give_it_back() {
    let llm = FakeLlm::start([Turn::text("unused")]).await.unwrap();
    let s = Server::start(&llm).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let limits = Limits {
        header_read_timeout: Duration::from_secs(120),
        max_connections: CONNECTIONS + 10,
        max_per_address: CONNECTIONS + 10,
    };
    tokio::spawn(run(listener, polpo_server::router(s.state.clone()), limits, std::future::pending()));
    // Warm up: the first connections allocate what every later one reuses (timer wheel, pools).
    measure(&addr, "warm-up", true).await;
    for (label, request) in [("silent", false), ("keep-alive after one request", true)] {
        let (per, left) = measure(&addr, label, request).await;
        assert!(per <= MAX_KIB_PER_CONNECTION, "{label}: {per:.1} KiB per connection");
        assert!(per * CONNECTIONS as f64 / 1024.0 <= MAX_TOTAL_MIB, "{label}: total over {MAX_TOTAL_MIB} MiB");
        assert!(left < 2048.0, "{label}: {left:.0} KiB still resident after the connections closed");
    }
}
