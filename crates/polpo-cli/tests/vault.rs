//! `polpo vault` and `/api/v1/vault` through the real binary: values go in on stdin, never
//! come out of a listing, a route or an error; without a key the API says so (503).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use polpo_testkit::ProjectFixture;
use serde_json::{Value, json};
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use support::ServerProcess;

const SECRET: &str = "sk-site-9f8e7d6c5b4a";

/// `polpo --project <root> <args>` with `HOME=<home>` and no `POLPO_VAULT_KEY`, `stdin` piped in.
fn polpo(root: &Path, home: &Path, args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_polpo"))
        .arg("--project")
        .arg(root)
        .args(args)
        .env("HOME", home)
        .env_remove("POLPO_VAULT_KEY")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

#[test]
fn values_go_in_on_stdin_and_never_come_out() {
    let (dir, home) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    ProjectFixture::new(dir.path(), json!({})).unwrap();
    let set = polpo(dir.path(), home.path(), &["vault", "set", "site-api", "--label", "Site"], SECRET);
    assert!(set.status.success(), "{}", text(&set));
    let login = r#"{"username": "bot", "password": "pw-0000-secret"}"#;
    let set = polpo(dir.path(), home.path(), &["vault", "set", "mail", "--type", "login", "--agent", "writer"], login);
    assert!(set.status.success(), "{}", text(&set));
    let key_file = home.path().join(".polpo/vault.key");
    assert!(key_file.exists(), "the key is made on first use, outside the project");

    for args in [&["vault", "list"][..], &["vault", "list", "--json"]] {
        let out = polpo(dir.path(), home.path(), args, "");
        let shown = text(&out);
        assert!(out.status.success(), "{shown}");
        assert!(shown.contains("site-api") && shown.contains("password"), "{shown}");
        assert!(!shown.contains(SECRET) && !shown.contains("pw-0000-secret"), "a value was printed: {shown}");
    }
    let raw = std::fs::read(dir.path().join(".polpo/vault.enc")).unwrap();
    assert!(!String::from_utf8_lossy(&raw).contains(SECRET));

    let other_home = tempfile::tempdir().unwrap();
    let out = polpo(dir.path(), other_home.path(), &["vault", "list"], "");
    assert!(!out.status.success() && text(&out).contains("vault_key_missing"), "{}", text(&out));

    let out = polpo(dir.path(), home.path(), &["vault", "remove", "mail", "--agent", "writer"], "");
    assert!(out.status.success(), "{}", text(&out));
    let out = polpo(dir.path(), home.path(), &["vault", "list"], "");
    assert!(!text(&out).contains("mail"), "{}", text(&out));
}

#[tokio::test]
async fn the_api_lists_metadata_only_and_answers_503_without_a_key() {
    let (dir, home) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    ProjectFixture::new(dir.path(), json!({})).unwrap();
    polpo_llm::install_crypto_provider();
    let http = reqwest::Client::new();

    let keyless = ServerProcess::start("serve", dir.path(), &[], &[("HOME", home.path().to_str().unwrap())]);
    let r = http.get(format!("{}/api/v1/vault/entries", keyless.url)).send().await.unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(r.json::<Value>().await.unwrap()["code"], "vault_key_missing");
    drop(keyless);

    let key = "ab".repeat(32);
    let server = ServerProcess::start("serve", dir.path(), &[], &[("POLPO_VAULT_KEY", &key)]);
    let entries = format!("{}/api/v1/vault/entries", server.url);
    let body = json!({"agent": "*", "service": "site-api", "type": "api_key", "credentials": {"key": SECRET}});
    let r = http.post(&entries).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 201);
    let created = r.text().await.unwrap();
    assert!(created.contains("\"keys\":[\"key\"]") && !created.contains(SECRET), "{created}");
    let listed = http.get(&entries).send().await.unwrap().text().await.unwrap();
    assert!(listed.contains("site-api") && !listed.contains(SECRET), "{listed}");
    let patch = json!({"credentials": {"key": 42}});
    let r = http.patch(format!("{entries}/*/site-api")).json(&patch).send().await.unwrap();
    assert_eq!(r.status(), 422, "a non-string value is refused by the body's shape");
    let bad = json!({"agent": "*", "service": "x", "type": "login", "credentials": {"username": SECRET}});
    let refused = http.post(&entries).json(&bad).send().await.unwrap().text().await.unwrap();
    assert!(refused.contains("vault_entry_invalid") && !refused.contains(SECRET), "{refused}");
    let removed = http.delete(format!("{entries}/*/site-api")).send().await.unwrap().json::<Value>().await.unwrap();
    assert_eq!(removed["data"]["removed"], true);
}
