//! Connections on disk: headers from vault secrets, slot selection by identity, OAuth2
//! client credentials against a real token endpoint (a local HTTP server), refreshed on expiry.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use polpo_connections::{ConnectionError, Connections, Slot};
use polpo_core::redact::Redactor;
use polpo_tools::net::NetworkPolicy;
use polpo_vault::{Entry, Vault, VaultError, VaultKey};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TOKEN: &str = "site-token-5f4e3d2c1b";

fn project() -> (tempfile::TempDir, Vault) {
    let dir = tempfile::tempdir().unwrap();
    let polpo = dir.path().join(".polpo");
    std::fs::create_dir_all(polpo.join("connections")).unwrap();
    let vault = Vault::open(&polpo, VaultKey::generate(), Redactor::new());
    let credentials = BTreeMap::from([("key".to_string(), TOKEN.to_string())]);
    vault
        .set(Entry { agent: "*".into(), service: "site".into(), kind: "api_key".into(), label: None, credentials })
        .unwrap();
    let client = BTreeMap::from([("key".to_string(), "client-secret-99".to_string())]);
    vault
        .set(Entry {
            agent: "*".into(),
            service: "oauth".into(),
            kind: "api_key".into(),
            label: None,
            credentials: client,
        })
        .unwrap();
    (dir, vault)
}

fn write(root: &Path, id: &str, doc: serde_json::Value) {
    std::fs::write(root.join(format!(".polpo/connections/{id}.json")), doc.to_string()).unwrap();
}

fn slot(provider: &str, scopes: &[&str]) -> Slot {
    Slot { provider: provider.into(), scopes: scopes.iter().map(|s| s.to_string()).collect(), strict: false }
}

#[tokio::test]
async fn headers_come_from_the_vault_and_literal_secrets_are_refused() {
    let (dir, vault) = project();
    write(
        dir.path(),
        "site",
        json!({"provider": "sitoinchat", "scopes": ["site:read", "site:write"], "auth": {"type": "bearer", "token": "${vault:site:key}"}}),
    );
    write(
        dir.path(),
        "plain",
        json!({"provider": "x", "auth": {"type": "header", "name": "X-Api-Key", "value": "literal-secret"}}),
    );
    let connections = Connections::new(&dir.path().join(".polpo"), Ok(vault), NetworkPolicy::default());
    assert_eq!(
        connections.headers("site", "writer").await.unwrap(),
        vec![("authorization".to_string(), format!("Bearer {TOKEN}"))]
    );
    let err = connections.get("plain").unwrap_err();
    assert_eq!(err.code(), "connection_invalid");
    assert!(err.to_string().contains(".polpo/connections/plain.json:/auth/value"), "{err}");
    assert_eq!(connections.get("nope").unwrap_err().code(), "connection_not_found");

    let keyless = Connections::new(&dir.path().join(".polpo"), Err(VaultError::KeyMissing), NetworkPolicy::default());
    assert_eq!(keyless.headers("site", "writer").await.unwrap_err().code(), "vault_key_missing");
}

#[test]
fn slots_select_one_connection_by_provider_scopes_user_and_agent() {
    let (dir, vault) = project();
    let auth = json!({"type": "bearer", "token": "${vault:site:key}"});
    write(
        dir.path(),
        "alice",
        json!({"provider": "sitoinchat", "scopes": ["site:read", "site:write"], "users": ["alice"], "auth": auth}),
    );
    write(
        dir.path(),
        "bob",
        json!({"provider": "sitoinchat", "scopes": ["site:read"], "users": ["bob"], "auth": auth}),
    );
    write(dir.path(), "ops", json!({"provider": "ops", "agents": ["admin"], "auth": auth}));
    let connections = Connections::new(&dir.path().join(".polpo"), Ok(vault), NetworkPolicy::default());
    let write_slot = slot("sitoinchat", &["site:read", "site:write"]);
    assert_eq!(connections.select(&write_slot, "writer", Some("alice")).unwrap().id, "alice");
    let missing = connections.select(&write_slot, "writer", Some("bob")).unwrap_err();
    assert!(matches!(missing, ConnectionError::Missing { .. }), "bob's Connection lacks site:write: {missing}");
    assert_eq!(connections.select(&write_slot, "writer", None).unwrap_err().code(), "connection_missing");
    assert_eq!(connections.select(&slot("ops", &[]), "writer", None).unwrap_err().code(), "connection_denied");
    write(dir.path(), "alice2", json!({"provider": "sitoinchat", "scopes": ["site:read", "site:write"], "auth": auth}));
    assert_eq!(connections.select(&write_slot, "writer", Some("alice")).unwrap_err().code(), "connection_ambiguous");
    // A strict slot never falls back to the project-level `alice2`: alice gets hers, carol none.
    let strict = Slot { strict: true, ..write_slot.clone() };
    assert_eq!(connections.select(&strict, "writer", Some("alice")).unwrap().id, "alice");
    assert_eq!(connections.select(&write_slot, "writer", Some("carol")).unwrap().id, "alice2");
    assert_eq!(connections.select(&strict, "writer", Some("carol")).unwrap_err().code(), "connection_missing");
}

/// A token endpoint answering each request with a new token living `lifetime` seconds; counts
/// requests and keeps the last `Authorization` header it saw.
async fn token_server(lifetime: u64) -> (String, Arc<AtomicUsize>, Arc<std::sync::Mutex<String>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/token", listener.local_addr().unwrap());
    let count = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(std::sync::Mutex::new(String::new()));
    let (c, s) = (count.clone(), seen.clone());
    tokio::spawn(async move {
        loop {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buf = vec![0u8; 8192];
            let n = socket.read(&mut buf).await.unwrap();
            let request = String::from_utf8_lossy(&buf[..n]).to_string();
            let auth = request.lines().find(|l| l.to_ascii_lowercase().starts_with("authorization:")).unwrap_or("");
            *s.lock().unwrap() = auth.to_string();
            let n = c.fetch_add(1, Ordering::SeqCst) + 1;
            let body = json!({"access_token": format!("oauth-token-{n}"), "expires_in": lifetime}).to_string();
            let reply = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            socket.write_all(reply.as_bytes()).await.unwrap();
        }
    });
    (url, count, seen)
}

#[tokio::test]
async fn oauth2_client_credentials_fetch_a_token_and_refresh_it_when_expired() {
    polpo_llm::install_crypto_provider();
    for (lifetime, expected_second) in [(3600, "oauth-token-1"), (0, "oauth-token-2")] {
        let (dir, vault) = project();
        let (url, count, seen) = token_server(lifetime).await;
        let authority = url.trim_start_matches("http://").split('/').next().unwrap().to_string();
        write(
            dir.path(),
            "api",
            json!({"provider": "api", "auth": {"type": "oauth2_client_credentials", "tokenUrl": url, "clientId": "polpo", "clientSecret": "${vault:oauth:key}", "scopes": ["read"]}}),
        );
        let network = NetworkPolicy { allow_private: false, private_allowlist: vec![authority], host_allowlist: None };
        let connections = Connections::new(&dir.path().join(".polpo"), Ok(vault), network);
        let first = connections.headers("api", "writer").await.unwrap();
        assert_eq!(first[0].1, "Bearer oauth-token-1");
        assert!(
            seen.lock().unwrap().contains("Basic cG9scG86Y2xpZW50LXNlY3JldC05OQ=="),
            "client credentials sent as Basic"
        );
        let second = connections.headers("api", "writer").await.unwrap();
        assert_eq!(second[0].1, format!("Bearer {expected_second}"), "lifetime {lifetime}");
        assert_eq!(count.load(Ordering::SeqCst), if lifetime == 0 { 2 } else { 1 });
    }
}
