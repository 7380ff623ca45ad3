//! `polpo skills` with the real binary, real git repositories in temp dirs and the real
//! project files: what a user sees after each command.
#![allow(clippy::unwrap_used)] // test helpers: a failed setup should panic loudly

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn polpo(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_polpo")).args(args).current_dir(cwd).stdin(Stdio::null()).output().unwrap()
}

fn ok(o: Output) -> String {
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "failed: {}\nstdout: {out}\nstderr: {err}", o.status);
    out.into_owned()
}

/// Exit 1, and what was said on stderr.
fn fails(o: Output) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(1), "stdout: {}\nstderr: {err}", String::from_utf8_lossy(&o.stdout));
    assert!(!err.contains("panicked"), "{err}");
    err
}

fn git(dir: &Path, args: &[&str]) -> String {
    let o = Command::new("git")
        .args(["-c", "user.email=t@example.invalid", "-c", "user.name=t", "-c", "commit.gpgsign=false"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).trim().to_owned()
}

fn skill_md(name: &str, body: &str) -> String {
    format!("---\nname: {name}\ndescription: The {name} skill.\n---\n{body}\n")
}

/// A git repository holding two skills under `skills/`, one with references and a binary asset.
fn repo(dir: &Path) -> String {
    let design = dir.join("skills/frontend-design");
    std::fs::create_dir_all(design.join("references")).unwrap();
    std::fs::create_dir_all(design.join("assets")).unwrap();
    std::fs::create_dir_all(dir.join("skills/pdf-tools")).unwrap();
    std::fs::write(design.join("SKILL.md"), skill_md("frontend-design", "Use a 4px grid.")).unwrap();
    std::fs::write(design.join("references/colors.md"), "Primary: #0a84ff").unwrap();
    std::fs::write(design.join("assets/logo.png"), [0x89, b'P', b'N', b'G', 0, 0xff]).unwrap();
    std::fs::write(dir.join("skills/pdf-tools/SKILL.md"), skill_md("pdf-tools", "Read PDFs.")).unwrap();
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["add", "."]);
    git(dir, &["commit", "-q", "-m", "two skills"]);
    git(dir, &["rev-parse", "HEAD"])
}

fn lock(root: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(root.join(".polpo/skills.lock.json")).unwrap()).unwrap()
}

#[test]
fn add_from_a_git_repository_installs_the_picked_skill_locks_it_and_update_follows_the_source() {
    let work = tempfile::tempdir().unwrap();
    let source = work.path().join("skills-repo");
    std::fs::create_dir(&source).unwrap();
    let first = repo(&source);
    ok(polpo(work.path(), &["create", "demo", "--yes"]));
    let root = work.path().join("demo");
    let src = source.to_str().unwrap();

    let out = ok(polpo(&root, &["skills", "add", src, "--skill", "frontend-design", "--agent", "assistant"]));
    assert!(out.contains("installed frontend-design"), "{out}");
    let bundle = root.join(".polpo/skills/frontend-design");
    assert_eq!(std::fs::read(bundle.join("assets/logo.png")).unwrap(), [0x89, b'P', b'N', b'G', 0, 0xff]);
    assert_eq!(std::fs::read_to_string(bundle.join("references/colors.md")).unwrap(), "Primary: #0a84ff");
    assert!(!root.join(".polpo/skills/pdf-tools").exists(), "--skill picks one bundle");
    let entry = &lock(&root)["skills"]["frontend-design"];
    assert_eq!(entry["source"], source.canonicalize().unwrap().to_str().unwrap());
    assert_eq!(entry["path"], "skills/frontend-design");
    assert_eq!(entry["revision"], first.as_str());
    assert!(entry["hash"].as_str().unwrap().starts_with("sha256:"), "{entry}");
    let agent = std::fs::read_to_string(root.join(".polpo/agents/assistant/agent.json")).unwrap();
    let agent: Value = serde_json::from_str(&agent).unwrap();
    assert_eq!(agent["skills"], serde_json::json!(["frontend-design"]));
    let listed = ok(polpo(&root, &["skills", "list"]));
    assert!(listed.contains("frontend-design\tThe frontend-design skill.\tagents: assistant"), "{listed}");
    ok(polpo(&root, &["validate"]));

    // Nothing changed upstream: update writes nothing.
    let before = std::fs::read(root.join(".polpo/skills.lock.json")).unwrap();
    let out = ok(polpo(&root, &["skills", "update", "frontend-design"]));
    assert!(out.contains("up to date"), "{out}");
    assert_eq!(std::fs::read(root.join(".polpo/skills.lock.json")).unwrap(), before);

    // A new commit: update installs it and moves the lock.
    std::fs::write(source.join("skills/frontend-design/SKILL.md"), skill_md("frontend-design", "Use an 8px grid."))
        .unwrap();
    git(&source, &["commit", "-q", "-am", "bigger grid"]);
    let second = git(&source, &["rev-parse", "HEAD"]);
    let out = ok(polpo(&root, &["skills", "update", "--all"]));
    assert!(out.contains("updated frontend-design"), "{out}");
    assert_eq!(lock(&root)["skills"]["frontend-design"]["revision"], second.as_str());
    assert!(std::fs::read_to_string(bundle.join("SKILL.md")).unwrap().contains("8px"));

    // A hand edit of an installed file no longer matches the lock: validate says so.
    std::fs::write(bundle.join("references/colors.md"), "Primary: red").unwrap();
    let out = polpo(&root, &["validate", "--json"]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(report["problems"][0]["code"], "skill_lock_mismatch", "{report}");

    // Remove: folder, lock entry and assignment go together.
    ok(polpo(&root, &["skills", "remove", "frontend-design"]));
    assert!(!bundle.exists());
    assert_eq!(lock(&root)["skills"], serde_json::json!({}));
    let agent = std::fs::read_to_string(root.join(".polpo/agents/assistant/agent.json")).unwrap();
    assert!(!agent.contains("frontend-design"), "{agent}");
    ok(polpo(&root, &["validate"]));
}

#[test]
fn a_bundle_with_a_symlink_or_an_unknown_agent_installs_nothing() {
    let work = tempfile::tempdir().unwrap();
    ok(polpo(work.path(), &["create", "demo", "--yes"]));
    let root = work.path().join("demo");
    let linked = work.path().join("linked");
    std::fs::create_dir_all(linked.join("references")).unwrap();
    std::fs::write(linked.join("SKILL.md"), skill_md("linked", "Body.")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", linked.join("references/passwd")).unwrap();
    let err = fails(polpo(&root, &["skills", "add", linked.to_str().unwrap()]));
    assert!(err.contains("skill_symlink_refused"), "{err}");
    assert!(!root.join(".polpo/skills/linked").exists());
    assert!(!root.join(".polpo/skills.lock.json").exists());

    // A plain folder installs (its content hash is its revision), but not for an agent that
    // does not exist: the whole edit is undone.
    std::fs::remove_file(linked.join("references/passwd")).unwrap();
    let err = fails(polpo(&root, &["skills", "add", linked.to_str().unwrap(), "--agent", "nobody"]));
    assert!(err.contains("agent_not_found"), "{err}");
    assert!(!root.join(".polpo/skills/linked").exists(), "undone with the failed assignment");
    ok(polpo(&root, &["skills", "add", "../linked"]));
    assert!(lock(&root)["skills"]["linked"]["revision"].as_str().unwrap().starts_with("sha256:"));
    let err = fails(polpo(&root, &["skills", "add", "no-such/thing-here", "--skill", "x"]));
    assert!(err.contains("skill_source_failed"), "{err}");
}
