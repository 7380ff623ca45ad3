//! Building small projects on disk for tests.
#![allow(dead_code, clippy::unwrap_used)] // test helpers: a failed setup should panic loudly

use polpo_core::problem::Problem;
use std::path::Path;

/// Write `files` (path relative to the root → content) under a fresh temp dir.
pub fn project(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_files(dir.path(), files);
    dir
}

/// Write `files` under `root`, creating parent directories.
pub fn write_files(root: &Path, files: &[(&str, &str)]) {
    for (path, content) in files {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
}

/// A minimal valid directory-layout project.
pub const MANIFEST: (&str, &str) = (".polpo/project.json", r#"{"schemaVersion": 2}"#);

/// `(code, file, pointer)` of each problem, sorted.
pub fn located(problems: &[Problem]) -> Vec<(String, String, String)> {
    let mut v: Vec<_> = problems
        .iter()
        .map(|p| (p.code.clone(), p.file.clone().unwrap_or_default(), p.pointer.clone().unwrap_or_default()))
        .collect();
    v.sort();
    v
}

/// Load, expecting failure, and return the located problems.
pub fn problems(root: &Path) -> Vec<(String, String, String)> {
    located(&polpo_project::load_project(root).unwrap_err())
}

/// `(code, file, pointer)` with `&str`s, for comparisons.
pub fn at(code: &str, file: &str, pointer: &str) -> (String, String, String) {
    (code.into(), file.into(), pointer.into())
}

/// A stable fingerprint of every file and directory under `root` (paths and contents).
pub fn tree_fingerprint(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                out.push((format!("{rel}/"), Vec::new()));
                stack.push(path);
            } else {
                out.push((rel, std::fs::read(&path).unwrap()));
            }
        }
    }
    out.sort();
    out
}
