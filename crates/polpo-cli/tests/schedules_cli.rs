//! `polpo schedules list|next` on a real project folder: next occurrences in the schedule's
//! time zone and in UTC, and the error for an unknown schedule.

#![allow(clippy::unwrap_used)]

use std::process::{Command, Output, Stdio};

fn polpo(cwd: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_polpo")).args(args).current_dir(cwd).stdin(Stdio::null()).output().unwrap()
}

#[test]
fn next_lists_occurrences_in_the_zone_and_in_utc() {
    let dir = tempfile::tempdir().unwrap();
    let files = [
        (".polpo/project.json", r#"{"schemaVersion": 2}"#),
        (".polpo/agents/reporter/agent.json", r#"{"model": "openai/gpt-4o-mini"}"#),
        (".polpo/agents/reporter/instructions.md", "Report."),
        (
            ".polpo/schedules/daily.json",
            r#"{"timing": {"kind": "cron", "expression": "0 9 * * *", "timezone": "Europe/Rome"},
                "invocation": {"surface": "agent", "agentName": "reporter", "input": {"prompt": "Report."}}}"#,
        ),
    ];
    for (path, text) in files {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    let out = polpo(dir.path(), &["schedules", "next", "daily", "--count", "3"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<String> = String::from_utf8(out.stdout).unwrap().lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    for line in &lines {
        // 09:00 in Rome is 08:00 UTC in winter (+01:00) and 07:00 UTC in summer (+02:00).
        let winter = line.contains("T09:00:00+01:00 (") && line.ends_with("T08:00:00Z)");
        let summer = line.contains("T09:00:00+02:00 (") && line.ends_with("T07:00:00Z)");
        assert!(winter || summer, "{line}");
    }
    let list = polpo(dir.path(), &["schedules", "list"]);
    let text = String::from_utf8(list.stdout).unwrap();
    assert!(text.starts_with("daily\tactive\tcron '0 9 * * *' Europe/Rome\tagent\tnext "), "{text}");
    let missing = polpo(dir.path(), &["schedules", "next", "ghost"]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("schedule_not_found"));
}
