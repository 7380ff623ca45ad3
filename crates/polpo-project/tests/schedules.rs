//! `.polpo/schedules/<id>.json` is loaded with the project: v2 files as written, legacy
//! mission-shaped ones as their v2 translation with a warning, problems with file and pointer.

#![allow(clippy::unwrap_used)]

mod common;
use common::*;

const AGENT: (&str, &str) = (".polpo/agents/reporter/agent.json", "{}");
const INSTRUCTIONS: (&str, &str) = (".polpo/agents/reporter/instructions.md", "Report.");
const DAILY: &str = r#"{"timing": {"kind": "cron", "expression": "0 9 * * *", "timezone": "Europe/Rome"},
    "invocation": {"surface": "agent", "agentName": "reporter", "input": {"prompt": "Report."}}}"#;

#[test]
fn v2_and_legacy_schedules_load_and_the_legacy_one_is_warned_about() {
    let dir = project(&[
        MANIFEST,
        AGENT,
        INSTRUCTIONS,
        (".polpo/schedules/daily.json", DAILY),
        (".polpo/schedules/weekly.json", r#"{"missionId": "m1", "expression": "0 8 * * 1", "recurring": true}"#),
    ]);
    let project = polpo_project::load_project(dir.path()).unwrap();
    assert_eq!(project.schedules.keys().collect::<Vec<_>>(), ["daily", "weekly"]);
    assert_eq!(project.schedules["weekly"].config.invocation.surface(), "legacy_mission");
    let warnings = polpo_core::schedules::schedule_warnings(&project);
    assert_eq!(warnings.len(), 1);
    assert_eq!(
        (warnings[0].code.as_str(), warnings[0].file.as_deref()),
        ("legacy_schedule", Some(".polpo/schedules/weekly.json"))
    );
}

#[test]
fn a_schedule_naming_a_missing_agent_or_a_bad_zone_is_located() {
    let dir = project(&[
        MANIFEST,
        AGENT,
        INSTRUCTIONS,
        (".polpo/schedules/daily.json", &DAILY.replace("reporter", "ghost")),
        (".polpo/schedules/zone.json", &DAILY.replace("Europe/Rome", "Mars/Olympus")),
        (".polpo/schedules/named.json", &DAILY.replacen('{', r#"{"id": "other", "#, 1)),
    ]);
    let problems = polpo_project::load_project(dir.path()).unwrap_err();
    let found: Vec<(String, String, String)> =
        problems.into_iter().map(|p| (p.code, p.file.unwrap_or_default(), p.pointer.unwrap_or_default())).collect();
    for expected in [
        ("invalid_reference", ".polpo/schedules/daily.json", "/invocation/agentName"),
        ("invalid_timezone", ".polpo/schedules/zone.json", "/timing/timezone"),
        ("invalid_value", ".polpo/schedules/named.json", "/id"),
    ] {
        let expected = (expected.0.to_owned(), expected.1.to_owned(), expected.2.to_owned());
        assert!(found.contains(&expected), "{expected:?} not in {found:?}");
    }
}
