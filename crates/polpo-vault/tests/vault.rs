//! The vault on disk: encrypted, keyed, atomic under SIGKILL, never listing a value.

use polpo_core::redact::Redactor;
use polpo_vault::{Entry, KeySources, Vault, VaultError, VaultKey};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};

const SECRET: &str = "sk-live-0123456789abcdef";

fn entry(service: &str, value: &str) -> Entry {
    Entry {
        agent: "*".into(),
        service: service.into(),
        kind: "api_key".into(),
        label: Some("Site API".into()),
        credentials: BTreeMap::from([("key".to_string(), value.to_string())]),
    }
}

#[test]
fn the_file_is_unreadable_without_the_key_and_listing_shows_no_value() {
    let dir = tempfile::tempdir().unwrap();
    let key = VaultKey::generate();
    let vault = Vault::open(dir.path(), key.clone(), Redactor::new());
    vault.set(entry("site", SECRET)).unwrap();

    let bytes = std::fs::read(vault.path()).unwrap();
    assert!(!bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()), "the value is stored in clear");
    assert!(!bytes.windows(4).any(|w| w == b"site"), "even the service name is encrypted");

    let other = Vault::open(dir.path(), VaultKey::generate(), Redactor::new());
    assert_eq!(other.list(None).unwrap_err().code(), "vault_unreadable");
    let err = other.lookup("a", "site", "key").unwrap_err();
    assert!(!err.to_string().contains(SECRET));

    let listed = serde_json::to_string(&vault.list(None).unwrap()).unwrap();
    assert!(listed.contains("\"keys\":[\"key\"]") && !listed.contains(SECRET), "{listed}");
    assert_eq!(vault.lookup("any-agent", "site", "key").unwrap(), SECRET);
    assert!(!format!("{:?}", entry("site", SECRET)).contains(SECRET));
}

#[test]
fn writes_fill_the_redaction_list_and_references_interpolate() {
    let dir = tempfile::tempdir().unwrap();
    let redactor = Redactor::new();
    let vault = Vault::open(dir.path(), VaultKey::generate(), redactor.clone());
    vault.set(entry("site", SECRET)).unwrap();
    assert_eq!(redactor.redact_text(&format!("token={SECRET}")), "token=[REDACTED]");
    assert_eq!(vault.interpolate("a", "Bearer ${vault:site:key}!").unwrap(), format!("Bearer {SECRET}!"));
    assert_eq!(vault.interpolate("a", "${vault:site}").unwrap_err().code(), "vault_reference_invalid");
    assert_eq!(vault.interpolate("a", "${vault:nope:key}").unwrap_err().code(), "vault_entry_not_found");
    assert!(vault.remove("*", "site").unwrap());
    assert!(!vault.remove("*", "site").unwrap());
    assert_eq!(redactor.redact_text(SECRET), SECRET, "a removed value is no longer a known secret");
}

#[test]
fn invalid_entries_are_refused_without_quoting_values() {
    let dir = tempfile::tempdir().unwrap();
    let vault = Vault::open(dir.path(), VaultKey::generate(), Redactor::new());
    let mut bad = entry("site", SECRET);
    bad.kind = "login".into();
    let err = vault.set(bad).unwrap_err();
    assert_eq!(err.code(), "vault_entry_invalid");
    assert!(err.to_string().contains("username") && !err.to_string().contains(SECRET));
    assert!(!vault.path().exists(), "nothing was written");
}

#[test]
fn the_key_file_is_created_once_with_mode_0600_and_reused() {
    let home = tempfile::tempdir().unwrap();
    let sources = KeySources { env: None, home: Some(home.path().to_path_buf()) };
    assert_eq!(sources.load().unwrap_err(), VaultError::KeyMissing);
    let first = sources.load_or_create().unwrap();
    let path = sources.key_file().unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    let dir = tempfile::tempdir().unwrap();
    Vault::open(dir.path(), first, Redactor::new()).set(entry("site", SECRET)).unwrap();
    let again = sources.load_or_create().unwrap();
    assert_eq!(Vault::open(dir.path(), again, Redactor::new()).lookup("a", "site", "key").unwrap(), SECRET);
    let bad = KeySources { env: Some("not-hex".into()), home: None };
    assert_eq!(bad.load().unwrap_err(), VaultError::KeyInvalid);
}

/// The child side of the SIGKILL test: writes entries forever, printing each count once the
/// write has returned (so it is durable), until killed.
#[test]
fn sigkill_writer_child() {
    let (Ok(dir), Ok(key)) = (std::env::var("VAULT_CHILD_DIR"), std::env::var("VAULT_CHILD_KEY")) else { return };
    let vault = Vault::open(std::path::Path::new(&dir), VaultKey::from_hex(&key).unwrap(), Redactor::new());
    for n in 0.. {
        vault.set(entry(&format!("svc{n}"), &format!("{SECRET}-{n}"))).unwrap();
        println!("wrote {n}");
    }
}

#[test]
fn a_writer_killed_mid_write_leaves_a_whole_vault() {
    let dir = tempfile::tempdir().unwrap();
    let key_hex = {
        // The child needs the same key: store one through the key file and read it back as hex.
        let home = tempfile::tempdir().unwrap();
        let sources = KeySources { env: None, home: Some(home.path().to_path_buf()) };
        let _ = sources.load_or_create().unwrap();
        std::fs::read_to_string(sources.key_file().unwrap()).unwrap().trim().to_string()
    };
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "sigkill_writer_child", "--nocapture", "--test-threads=1"])
        .env("VAULT_CHILD_DIR", dir.path())
        .env("VAULT_CHILD_KEY", &key_hex)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut acknowledged = 0;
    while let Some(Ok(line)) = lines.next() {
        if let Some(n) = line.strip_prefix("wrote ") {
            acknowledged = n.parse::<usize>().unwrap() + 1;
            if acknowledged == 40 {
                break;
            }
        }
    }
    child.kill().unwrap(); // SIGKILL, most likely in the middle of the next write
    child.wait().unwrap();
    assert_eq!(acknowledged, 40);
    let vault = Vault::open(dir.path(), VaultKey::from_hex(&key_hex).unwrap(), Redactor::new());
    let listed = vault.list(None).expect("the vault still decrypts after the kill");
    assert!(listed.len() == 40 || listed.len() == 41, "{} entries", listed.len());
    assert_eq!(vault.lookup("a", "svc39", "key").unwrap(), format!("{SECRET}-39"));
}
