//! A writer killed mid-write leaves the old or the new complete file, never a prefix.
//!
//! The test re-runs this test binary as a child that rewrites one large file in a loop,
//! alternating two contents and printing a line after each completed write. The parent waits
//! for a few completed writes, SIGKILLs the child (it is then in the middle of the next
//! write), and checks the file.

use polpo_project::fsx::write_atomic;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

const TARGET_ENV: &str = "POLPO_TEST_CRASH_WRITER_TARGET";
const OLD: (u8, usize) = (b'a', 3 << 20);
const NEW: (u8, usize) = (b'b', 5 << 20);

fn content((byte, len): (u8, usize)) -> Vec<u8> {
    vec![byte; len]
}

/// The child's body; a no-op unless the parent set the env var.
#[test]
fn crash_writer_child() {
    let Ok(target) = std::env::var(TARGET_ENV) else {
        return;
    };
    let (old, new) = (content(OLD), content(NEW));
    loop {
        for bytes in [&new, &old] {
            write_atomic(Path::new(&target), bytes).unwrap();
            println!("wrote");
        }
    }
}

#[test]
fn killed_writer_leaves_old_or_new_file() {
    let (old, new) = (content(OLD), content(NEW));
    for writes_before_kill in 1..=4 {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("config.json");
        write_atomic(&target, &old).unwrap();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["crash_writer_child", "--exact", "--nocapture", "--test-threads=1"])
            .env(TARGET_ENV, &target)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut seen = 0;
        for line in BufReader::new(stdout).lines() {
            // libtest may print "test crash_writer_child ... " on the same line as the first one.
            if line.unwrap().trim_end().ends_with("wrote") {
                seen += 1;
                if seen == writes_before_kill {
                    break;
                }
            }
        }
        assert_eq!(seen, writes_before_kill, "the child stopped writing early");
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let now = std::fs::read(&target).unwrap();
        assert!(now == old || now == new, "torn file of {} bytes after kill #{writes_before_kill}", now.len());
    }
}
