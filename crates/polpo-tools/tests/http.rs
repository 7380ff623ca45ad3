//! `http_fetch` / `http_download` against real local servers, and the SSRF guard.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::routing::get;
use common::{call, code, ctx, dirs};
use polpo_tools::net::is_public_ip;
use serde_json::json;
use std::net::{IpAddr, SocketAddr};

/// Starts a server on 127.0.0.1:0 with a plain page, a large page and redirects to `target`.
async fn server(target: String) -> SocketAddr {
    let big = "x".repeat(200 * 1024);
    let app = Router::new()
        .route("/hello", get(|| async { "hello world" }))
        .route("/big", get(move || async move { big }))
        .route("/redirect", get(move || async move { (StatusCode::FOUND, [(header::LOCATION, target)]) }))
        .route("/file.bin", get(|| async { vec![7u8; 1000] }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

#[test]
fn address_classification_covers_private_ranges_and_embedded_ipv4() {
    for blocked in [
        "127.0.0.1",
        "127.9.9.9",
        "0.0.0.0",
        "10.1.2.3",
        "172.16.0.1",
        "172.31.255.255",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "224.0.0.1",
        "255.255.255.255",
        "::1",
        "::",
        "fc00::1",
        "fd12::1",
        "fe80::1",
        "ff02::1",
        "::ffff:127.0.0.1",
        "::ffff:10.0.0.1",
        "::ffff:169.254.169.254",
        "::127.0.0.1",
        "64:ff9b::a00:1",
        "2002:7f00:1::",
    ] {
        assert!(!is_public_ip(blocked.parse::<IpAddr>().unwrap()), "{blocked} should be blocked");
    }
    for public in ["8.8.8.8", "1.1.1.1", "172.32.0.1", "2606:4700:4700::1111", "::ffff:8.8.8.8"] {
        assert!(is_public_ip(public.parse::<IpAddr>().unwrap()), "{public} should be public");
    }
}

#[tokio::test]
async fn private_and_local_targets_are_refused_by_default() {
    let d = dirs();
    let addr = server(String::new()).await;
    let port = addr.port();
    let c = ctx(&d.ws);
    for url in [
        format!("http://127.0.0.1:{port}/hello"),
        format!("http://localhost:{port}/hello"),
        format!("http://[::1]:{port}/hello"),
        format!("http://[::ffff:127.0.0.1]:{port}/hello"),
        format!("http://2130706433:{port}/hello"),
        "http://10.0.0.1/".to_owned(),
        "http://169.254.169.254/latest/meta-data/".to_owned(),
    ] {
        let err = call(&c, "http_fetch", json!({"url": url})).await.unwrap_err();
        assert_eq!(err.code, "ssrf_blocked", "{url}: {err}");
    }
    let err = call(&c, "http_download", json!({"url": format!("http://127.0.0.1:{port}/file.bin"), "path": "f.bin"}))
        .await
        .unwrap_err();
    assert_eq!(err.code, "ssrf_blocked");
    assert!(!d.ws.join("f.bin").exists());
    assert_eq!(code(call(&c, "http_fetch", json!({"url": "file:///etc/passwd"})).await), "unsupported_scheme");
    assert_eq!(code(call(&c, "http_fetch", json!({"url": "not a url"})).await), "invalid_url");
}

#[tokio::test]
async fn fetch_works_when_private_network_is_allowed() {
    let d = dirs();
    let addr = server(String::new()).await;
    let mut c = ctx(&d.ws);
    c.allow_private_network = true;
    let out = call(&c, "http_fetch", json!({"url": format!("http://{addr}/hello")})).await.unwrap();
    assert!(out.text.starts_with("HTTP 200 OK\n"), "{}", out.text);
    assert!(out.text.ends_with("\n\nhello world"), "{}", out.text);

    let out = call(&c, "http_fetch", json!({"url": format!("http://{addr}/big")})).await.unwrap();
    assert!(out.text.contains("(body truncated; 204800 bytes in all)"), "{}", &out.text[out.text.len() - 80..]);
    assert!(out.text.len() < 60 * 1024);
}

#[tokio::test]
async fn redirects_are_rechecked_at_every_hop() {
    let d = dirs();
    let target = server(String::new()).await;
    let to_private = server("http://10.0.0.1/admin".to_owned()).await;
    let to_other_local = server(format!("http://{target}/hello")).await;
    let mut c = ctx(&d.ws);

    // Only the first hop's exact authority is exempt; where it redirects is checked again.
    c.private_network_allowlist = vec![to_private.to_string(), to_other_local.to_string()];
    let err = call(&c, "http_fetch", json!({"url": format!("http://{to_private}/redirect")})).await.unwrap_err();
    assert_eq!(err.code, "ssrf_blocked", "{err}");
    assert!(err.message.contains("10.0.0.1"), "{err}");
    let err = call(&c, "http_fetch", json!({"url": format!("http://{to_other_local}/redirect")})).await.unwrap_err();
    assert_eq!(err.code, "ssrf_blocked", "{err}");

    // With the redirect target allowed too, the redirect is followed.
    c.private_network_allowlist.push(target.to_string());
    let out = call(&c, "http_fetch", json!({"url": format!("http://{to_other_local}/redirect")})).await.unwrap();
    assert!(out.text.contains(&format!("URL: http://{target}/hello")), "{}", out.text);
    assert!(out.text.ends_with("hello world"));
}

#[tokio::test]
async fn download_writes_inside_the_sandbox_only() {
    let d = dirs();
    let addr = server(String::new()).await;
    let mut c = ctx(&d.ws);
    c.allow_private_network = true;
    let url = format!("http://{addr}/file.bin");
    let out = call(&c, "http_download", json!({"url": url, "path": "dl/file.bin"})).await.unwrap();
    assert!(out.text.ends_with("(1000 bytes)"), "{}", out.text);
    assert_eq!(std::fs::read(d.ws.join("dl/file.bin")).unwrap(), vec![7u8; 1000]);
    assert_eq!(
        code(call(&c, "http_download", json!({"url": url, "path": "../outside/x.bin"})).await),
        "path_outside_sandbox"
    );
    let missing = format!("http://{addr}/missing");
    assert_eq!(code(call(&c, "http_download", json!({"url": missing, "path": "m.bin"})).await), "http_status");
    assert!(!d.ws.join("m.bin").exists());
}

#[tokio::test]
async fn a_download_never_writes_through_a_file_planted_beside_its_target() {
    let d = dirs();
    let addr = server(String::new()).await;
    let mut c = ctx(&d.ws);
    c.allow_private_network = true;
    std::fs::create_dir_all(d.ws.join("dl")).unwrap();
    // Where the download used to stage its bytes: a symlink out of the sandbox, as bash could plant.
    std::os::unix::fs::symlink(d.outside.join("planted.bin"), d.ws.join("dl/.file.bin.polpo-download")).unwrap();
    let url = format!("http://{addr}/file.bin");
    call(&c, "http_download", json!({"url": url, "path": "dl/file.bin"})).await.unwrap();
    assert_eq!(std::fs::read(d.ws.join("dl/file.bin")).unwrap(), vec![7u8; 1000]);
    assert!(!d.outside.join("planted.bin").exists(), "nothing was written through the planted link");
}

#[tokio::test]
async fn cancellation_stops_a_hanging_request() {
    let d = dirs();
    // A server that accepts and then never answers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (accepted_tx, accepted_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let (socket, _) = listener.accept().await.unwrap();
        let _ = accepted_tx.send(());
        std::future::pending::<()>().await;
        drop(socket);
    });
    let mut c = ctx(&d.ws);
    c.allow_private_network = true;
    let task = {
        let c = c.clone();
        tokio::spawn(async move { call(&c, "http_fetch", json!({"url": format!("http://{addr}/")})).await })
    };
    accepted_rx.await.unwrap();
    c.cancel.cancel();
    let result = tokio::time::timeout(std::time::Duration::from_secs(10), task).await.unwrap().unwrap();
    assert_eq!(code(result), "cancelled");
}
