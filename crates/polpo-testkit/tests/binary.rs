//! The `polpo-testkit` binary serves a repeating fake for benchmarks.

// Test helpers outside `#[test]` functions may panic: a failed setup is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::Command;

async fn post(addr: &str, path: &str, body: &str) -> String {
    let mut conn = TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    conn.read_to_string(&mut response).await.unwrap();
    response
}

#[tokio::test]
async fn the_binary_answers_every_request_with_the_same_text_on_both_wires() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_polpo-testkit"))
        .args(["--port", "0", "--text", "bench answer"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut banner = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut banner).await.unwrap();
    let addr = banner.split("http://").nth(1).unwrap().split('/').next().unwrap().to_owned();

    for _ in 0..3 {
        let response = post(&addr, "/v1/chat/completions", r#"{"model":"m","messages":[]}"#).await;
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        assert!(response.contains(r#""content":"bench answer""#), "{response}");
    }
    let response = post(&addr, "/v1/messages", r#"{"model":"m","messages":[],"stream":true}"#).await;
    assert!(response.contains("event: message_stop"), "{response}");
    child.kill().await.unwrap();
}
