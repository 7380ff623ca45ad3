//! `polpo schedules list|show|next`: the project's schedules as loaded from
//! `.polpo/schedules/`, with their next occurrences in each schedule's time zone, computed
//! from the files without a server; `migrate [--dry-run]` rewrites legacy mission-shaped
//! files in the v2 shape they are read as, all in one project edit. `trigger|pause|resume|runs` ask a running server
//! (`/api/v1/schedules`, `--url`, key from `POLPO_API_KEY`); a server error prints its code.

use super::remote::Client;
use super::{Global, print_json};
use polpo_core::config::Project;
use polpo_core::schedules::{Schedule, TimingConfig};
use polpo_project::ProjectEditor;
use polpo_project::schedules::{migrate_schedules, plan_schedule_migration};
use polpo_store::{Clock, SystemClock};
use reqwest::Method;
use serde_json::json;
use std::process::ExitCode;

/// Largest `--count` of `next`.
const MAX_COUNT: usize = 1000;

/// `polpo schedules` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Every schedule: id, status, timing and next occurrence.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// One schedule's definition and its next occurrences.
    Show {
        /// The schedule id (its file name).
        id: String,
    },
    /// The next occurrences of a schedule, one per line (its time zone, then UTC).
    Next {
        /// The schedule id.
        id: String,
        /// How many (1..=1000).
        #[arg(long, default_value_t = 5)]
        count: usize,
    },
    /// Fire it now on the running server; the same `--key` never fires twice.
    Trigger {
        /// The schedule id.
        id: String,
        /// Idempotency key (default: a new one, so each call fires).
        #[arg(long, value_name = "K")]
        key: Option<String>,
        /// The server (default: `http://127.0.0.1:<settings.port or 3890>`).
        #[arg(long, value_name = "URL")]
        url: Option<String>,
    },
    /// Stop firing it (writes `status: paused` to its file through the server).
    Pause {
        /// The schedule id.
        id: String,
        /// The revision you read; the server answers `conflict` when the file moved on.
        #[arg(long, value_name = "N")]
        revision: Option<u64>,
        /// The server.
        #[arg(long, value_name = "URL")]
        url: Option<String>,
    },
    /// Fire it again (writes `status: active`).
    Resume {
        /// The schedule id.
        id: String,
        /// The revision you read.
        #[arg(long, value_name = "N")]
        revision: Option<u64>,
        /// The server.
        #[arg(long, value_name = "URL")]
        url: Option<String>,
    },
    /// Rewrite legacy mission-shaped files as v2 (`timing` + `invocation`), all or none.
    Migrate {
        /// Print what would change (each file before and after) and write nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Its runs, newest first, as JSON (`{runs, nextCursor}`).
    Runs {
        /// The schedule id.
        id: String,
        /// Page size (1..=1000).
        #[arg(long, default_value_t = 25)]
        limit: u32,
        /// The previous page's `nextCursor`.
        #[arg(long)]
        cursor: Option<String>,
        /// The server.
        #[arg(long, value_name = "URL")]
        url: Option<String>,
    },
}

/// Run a `polpo schedules` subcommand on the project.
pub fn run(global: &Global, command: Command) -> anyhow::Result<ExitCode> {
    let (client, method, path, body) = match command {
        Command::Trigger { id, key, url } => (
            Client::connect(global, url),
            Method::POST,
            format!("/api/v1/schedules/{id}/trigger"),
            json!({"idempotencyKey": key}),
        ),
        Command::Pause { id, revision, url } => (
            Client::connect(global, url),
            Method::POST,
            format!("/api/v1/schedules/{id}/pause"),
            json!({"expectedRevision": revision}),
        ),
        Command::Resume { id, revision, url } => (
            Client::connect(global, url),
            Method::POST,
            format!("/api/v1/schedules/{id}/resume"),
            json!({"expectedRevision": revision}),
        ),
        Command::Runs { id, limit, cursor, url } => {
            let cursor = cursor.map(|c| format!("&cursor={c}")).unwrap_or_default();
            (
                Client::connect(global, url),
                Method::GET,
                format!("/api/v1/schedules/{id}/runs?limit={limit}{cursor}"),
                json!(null),
            )
        }
        local => return run_local(global, local),
    };
    client.print_call(method, &path, (!body.is_null()).then_some(body))
}

/// The subcommands answered from the project's files.
fn run_local(global: &Global, command: Command) -> anyhow::Result<ExitCode> {
    let project = global.load()?;
    let now = SystemClock.now();
    let find =
        |id: &str| project.schedules.get(id).ok_or_else(|| anyhow::anyhow!("schedule_not_found: no schedule `{id}`"));
    match command {
        Command::List { json } => {
            if json {
                let rows: Vec<_> = project.schedules.values().map(|s| summary(s, now)).collect();
                return print_json(&rows);
            }
            if project.schedules.is_empty() {
                println!("(no schedules)");
            }
            for s in project.schedules.values() {
                let next = next_occurrences(s, now, 1).into_iter().next().unwrap_or_else(|| "never".into());
                let status = if s.config.is_active() { "active" } else { "paused" };
                println!(
                    "{}\t{status}\t{}\t{}\tnext {next}",
                    s.id,
                    timing(&s.config.timing),
                    s.config.invocation.surface()
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Show { id } => {
            let s = find(&id)?;
            print_json(&serde_json::json!({"id": s.id, "file": s.source.file, "definition": s.config,
                "next": next_occurrences(s, now, 5)}))
        }
        Command::Next { id, count } => {
            if !(1..=MAX_COUNT).contains(&count) {
                anyhow::bail!("invalid_value: --count must be 1..={MAX_COUNT}");
            }
            for line in next_occurrences(find(&id)?, now, count) {
                println!("{line}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Migrate { dry_run } => migrate(&project, dry_run),
        Command::Trigger { .. } | Command::Pause { .. } | Command::Resume { .. } | Command::Runs { .. } => {
            anyhow::bail!("internal: a server command reached the local ones")
        }
    }
}

/// Print the plan (each legacy file, `-` its lines now, `+` its v2 lines), then write it
/// unless `dry_run`.
fn migrate(project: &Project, dry_run: bool) -> anyhow::Result<ExitCode> {
    let plan = plan_schedule_migration(project)?;
    if plan.is_empty() {
        println!("no legacy schedule files: nothing to migrate");
        return Ok(ExitCode::SUCCESS);
    }
    for step in &plan {
        println!("--- {} (legacy mission schedule)\n+++ {} (v2)", step.file, step.file);
        step.before.lines().for_each(|line| println!("-{line}"));
        step.after.lines().for_each(|line| println!("+{line}"));
    }
    if dry_run {
        println!("dry run: {} file(s) would be rewritten; nothing written", plan.len());
        return Ok(ExitCode::SUCCESS);
    }
    migrate_schedules(&ProjectEditor::new(project.root.clone()), &plan)?;
    println!("migrated {} schedule file(s) to v2", plan.len());
    Ok(ExitCode::SUCCESS)
}

fn summary(s: &Schedule, now: chrono::DateTime<chrono::Utc>) -> serde_json::Value {
    serde_json::json!({"id": s.id, "status": if s.config.is_active() { "active" } else { "paused" },
        "timing": s.config.timing, "surface": s.config.invocation.surface(),
        "next": next_occurrences(s, now, 1).into_iter().next(), "legacy": s.legacy})
}

/// `2026-03-29T09:00:00+02:00 (07:00:00Z)`: in the schedule's zone, then UTC.
fn next_occurrences(s: &Schedule, now: chrono::DateTime<chrono::Utc>, count: usize) -> Vec<String> {
    s.timing
        .preview(now, count)
        .iter()
        .map(|t| format!("{} ({})", t.with_timezone(&s.timing.zone()).to_rfc3339(), t.format("%Y-%m-%dT%H:%M:%SZ")))
        .collect()
}

fn timing(t: &TimingConfig) -> String {
    match t {
        TimingConfig::Cron { expression, timezone, .. } => {
            format!("cron '{expression}' {}", timezone.as_deref().unwrap_or("UTC"))
        }
        TimingConfig::Once { at, .. } => format!("once {at}"),
        TimingConfig::Interval { every, .. } => format!("every {every}"),
    }
}
