#![allow(clippy::unwrap_used)]

use super::config::{ScheduleConfig, SchedulePolicy};
use super::plan::{Due, plan_due};
use super::timing::{Timing, TimingConfig};
use super::{CatchUp, parse_schedule};
use crate::config::Location;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

fn t(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn cron(expression: &str, zone: &str) -> Timing {
    let config = TimingConfig::Cron { expression: expression.into(), timezone: Some(zone.into()), end_at: None };
    Timing::from_config(&config).unwrap()
}

fn preview(timing: &Timing, after: &str, n: usize) -> Vec<String> {
    timing.preview(t(after), n).iter().map(|d| d.to_rfc3339()).collect()
}

#[test]
fn daily_job_in_rome_follows_the_zone_across_spring_forward() {
    // 2026-03-29: clocks go 02:00 CET → 03:00 CEST (01:00 UTC).
    let daily = cron("0 9 * * *", "Europe/Rome");
    assert_eq!(
        preview(&daily, "2026-03-27T12:00:00Z", 3),
        ["2026-03-28T08:00:00+00:00", "2026-03-29T07:00:00+00:00", "2026-03-30T07:00:00+00:00"]
    );
}

#[test]
fn a_local_time_in_the_spring_gap_fires_shifted_by_the_gap() {
    // 02:30 does not exist on 2026-03-29 in Rome: it fires at 03:30 CEST (01:30 UTC).
    let at_half_past_two = cron("30 2 * * *", "Europe/Rome");
    assert_eq!(
        preview(&at_half_past_two, "2026-03-28T12:00:00Z", 2),
        ["2026-03-29T01:30:00+00:00", "2026-03-30T00:30:00+00:00"]
    );
    // Every 30 minutes: the gap's local times coincide with real ones; nothing fires twice.
    let half_hourly = cron("*/30 * * * *", "Europe/Rome");
    assert_eq!(
        preview(&half_hourly, "2026-03-29T00:45:00Z", 3),
        ["2026-03-29T01:00:00+00:00", "2026-03-29T01:30:00+00:00", "2026-03-29T02:00:00+00:00"]
    );
}

#[test]
fn a_repeated_local_time_fires_once_unless_the_hour_is_a_wildcard() {
    // 2026-10-25: clocks go 03:00 CEST → 02:00 CET (01:00 UTC); 02:30 happens twice.
    let at_half_past_two = cron("30 2 * * *", "Europe/Rome");
    assert_eq!(
        preview(&at_half_past_two, "2026-10-24T12:00:00Z", 2),
        ["2026-10-25T00:30:00+00:00", "2026-10-26T01:30:00+00:00"]
    );
    let half_hourly = cron("*/30 * * * *", "Europe/Rome");
    assert_eq!(
        preview(&half_hourly, "2026-10-24T23:45:00Z", 5),
        [
            "2026-10-25T00:00:00+00:00",
            "2026-10-25T00:30:00+00:00",
            "2026-10-25T01:00:00+00:00",
            "2026-10-25T01:30:00+00:00",
            "2026-10-25T02:00:00+00:00"
        ]
    );
    // Starting inside the second pass of the repeated hour.
    let quarterly = cron("*/15 * * * *", "Europe/Rome");
    assert_eq!(preview(&quarterly, "2026-10-25T01:10:00Z", 1), ["2026-10-25T01:15:00+00:00"]);
    // Starting in the first pass, just before the clocks go back.
    assert_eq!(
        preview(&quarterly, "2026-10-25T00:50:00Z", 2),
        ["2026-10-25T01:00:00+00:00", "2026-10-25T01:15:00+00:00"]
    );
}

#[test]
fn six_fields_have_seconds_and_macros_read_as_their_expansion() {
    let every_second = cron("* * * * * *", "UTC");
    assert_eq!(
        preview(&every_second, "2026-01-01T00:00:00.400Z", 2),
        ["2026-01-01T00:00:01+00:00", "2026-01-01T00:00:02+00:00"]
    );
    assert_eq!(cron("@weekly", "UTC"), cron("0 0 * * sun", "UTC"));
    // Day of month and weekday both restricted: either fires (the 13th, and every Friday).
    let either = cron("0 0 13 * fri", "UTC");
    assert_eq!(
        preview(&either, "2026-02-01T00:00:00Z", 3),
        ["2026-02-06T00:00:00+00:00", "2026-02-13T00:00:00+00:00", "2026-02-20T00:00:00+00:00"]
    );
}

#[test]
fn interval_and_once() {
    let every =
        Timing::from_config(&TimingConfig::Interval { every: "PT15M".into(), start_at: None, end_at: None }).unwrap();
    assert_eq!(preview(&every, "2026-01-01T00:07:00Z", 2), ["2026-01-01T00:15:00+00:00", "2026-01-01T00:30:00+00:00"]);
    let once = Timing::from_config(&TimingConfig::Once {
        at: "2026-07-28T09:00:00".into(),
        timezone: Some("Europe/Rome".into()),
    })
    .unwrap();
    assert_eq!(preview(&once, "2026-07-01T00:00:00Z", 3), ["2026-07-28T07:00:00+00:00"]);
    assert!(once.next_after(t("2026-07-28T07:00:00Z")).is_none());
}

fn parse(value: Value) -> Result<ScheduleConfig, Vec<(String, String)>> {
    parse_schedule(&value, &Location::file(".polpo/schedules/s.json"))
        .map(|(c, ..)| c)
        .map_err(|ps| ps.into_iter().map(|p| (p.code, p.pointer.unwrap_or_default())).collect())
}

#[test]
fn the_seed_example_parses_and_mistakes_are_located() {
    let seed = json!({
        "id": "daily-report", "name": "Daily report",
        "timing": {"kind": "cron", "expression": "0 9 * * *", "timezone": "Europe/Rome"},
        "invocation": {"surface": "agent", "agentName": "reporter", "input": {"prompt": "Prepare today's report."}},
        "policy": {"catchUp": "skip", "misfireGraceSeconds": 300, "maxConcurrency": 1}
    });
    let config = parse(seed.clone()).unwrap();
    assert_eq!(serde_json::to_value(&config).unwrap(), seed, "read and written back unchanged");

    let mut bad = seed.clone();
    bad["timing"]["timezone"] = json!("Europe/Atlantis");
    assert_eq!(parse(bad).unwrap_err(), [("invalid_timezone".into(), "/timing/timezone".into())]);
    let mut bad = seed.clone();
    bad["timing"]["expression"] = json!("0 25 * * *");
    assert_eq!(parse(bad).unwrap_err(), [("invalid_cron".into(), "/timing/expression".into())]);
    let mut bad = seed.clone();
    bad["timing"]["expression"] = json!("0 0 31 2 *");
    assert_eq!(parse(bad).unwrap_err(), [("schedule_never_fires".into(), "/timing/expression".into())]);
    let mut bad = seed.clone();
    bad["invocation"] = json!({"surface": "channel", "channelId": "c"});
    assert_eq!(parse(bad).unwrap_err(), [("feature_unavailable".into(), "/invocation/surface".into())]);
    let mut bad = seed;
    bad["invocation"]["agentNam"] = json!("x");
    bad["policy"]["catchUp"] = json!("sometimes");
    let found = parse(bad).unwrap_err();
    assert!(found.contains(&("unknown_field".into(), "/invocation/agentNam".into())), "{found:?}");
    assert!(found.contains(&("invalid_value".into(), "/policy/catchUp".into())), "{found:?}");
}

#[test]
fn a_webhook_goes_to_a_public_https_url() {
    let webhook = |url: &str| {
        json!({"timing": {"kind": "once", "at": "2026-07-28T07:00:00Z"},
               "invocation": {"surface": "webhook", "url": url, "payload": {"a": 1}}})
    };
    assert!(parse(webhook("https://hooks.example.com/daily")).is_ok());
    // A local receiver passes here; the scheduler's SSRF guard refuses it unless exempted.
    assert!(parse(webhook("http://127.0.0.1:8080/hook")).is_ok());
    for (url, code) in [
        ("http://hooks.example.com/daily", "insecure_url"),
        ("https://10.0.0.8/hook", "private_url"),
        ("https://user:pw@hooks.example.com/", "inline_secret"),
        ("hooks.example.com", "invalid_url"),
    ] {
        assert_eq!(parse(webhook(url)).unwrap_err(), [(code.into(), "/invocation/url".into())], "{url}");
    }
}

#[test]
fn a_legacy_mission_schedule_reads_as_v2() {
    let legacy =
        json!({"missionId": "m1", "expression": "0 8 * * 1", "recurring": true, "endDate": "2027-01-01T00:00:00Z"});
    let (config, _, is_legacy) = parse_schedule(&legacy, &Location::file("s.json")).unwrap();
    assert!(is_legacy);
    assert_eq!(
        serde_json::to_value(&config).unwrap(),
        json!({"timing": {"kind": "cron", "expression": "0 8 * * 1", "endAt": "2027-01-01T00:00:00Z"},
               "invocation": {"surface": "legacy_mission", "missionId": "m1"}})
    );
    let broken = json!({"missionId": "m1", "expression": "every monday"});
    let err = parse_schedule(&broken, &Location::file("s.json")).unwrap_err();
    assert_eq!((err[0].code.as_str(), err[0].pointer.as_deref()), ("invalid_cron", Some("/expression")));
}

fn policy(catch_up: CatchUp, grace: u32) -> SchedulePolicy {
    SchedulePolicy {
        catch_up: Some(catch_up),
        catch_up_limit: Some(2),
        misfire_grace_seconds: Some(grace),
        max_concurrency: None,
    }
}

#[test]
fn catch_up_after_downtime_follows_the_policy() {
    let hourly = cron("0 * * * *", "UTC");
    // Down from 00:30 to 05:10: 01:00 … 05:00 passed; grace 5 minutes keeps 05:00 on time.
    let (cursor, now) = (t("2026-01-01T00:30:00Z"), t("2026-01-01T05:10:00Z"));
    let kinds = |c: CatchUp, grace: u32| {
        let plan = plan_due(&hourly, &policy(c, grace), cursor, now);
        assert_eq!(plan.cursor, t("2026-01-01T05:00:00Z"));
        plan.due.iter().map(|d| matches!(d, Due::Fire(_))).collect::<Vec<_>>()
    };
    assert_eq!(kinds(CatchUp::Skip, 600), [false, false, false, false, true]);
    assert_eq!(kinds(CatchUp::One, 600), [false, false, false, false, true], "one on time: no late one fires");
    assert_eq!(kinds(CatchUp::One, 60), [false, false, false, false, true], "the newest late one fires");
    assert_eq!(kinds(CatchUp::Skip, 60), [false; 5]);
    assert_eq!(kinds(CatchUp::All, 60), [false, false, false, true, true], "catchUpLimit 2");
    // Nothing new: nothing due, cursor unchanged.
    let idle = plan_due(&hourly, &policy(CatchUp::Skip, 60), now, now);
    assert!(idle.due.is_empty() && idle.cursor == now);
}
