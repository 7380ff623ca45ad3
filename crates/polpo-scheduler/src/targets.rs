//! The fires that are not an agent conversation: `task` creates an orchestrator task from the
//! schedule's template, `loop` starts a Project Loop run through the loop executor (as a chat
//! that selects a loop does), `webhook` POSTs the payload through the tools' SSRF guard, and
//! `legacy_mission` (a mission's own `schedule`, or a mission-shaped file) starts a run of the
//! mission through the orchestrator.
//!
//! Each is named by the occurrence, like an agent fire's durable run: the task id, the loop
//! run id and a mission run's task ids are derived from the schedule-run record, so a server
//! taking over a lapsed claim finds what its dead claimer already made instead of making it
//! twice; a webhook carries the same name in its `idempotency-key` header, for the receiver to
//! drop a repeated delivery.

use crate::record::{RunError, ScheduleRun};
use chrono::{DateTime, SecondsFormat, Utc};
use polpo_core::schedules::Schedule;
use polpo_core::schedules::config::Invocation;
use polpo_core::tasks::Task;
use polpo_loops::{LoopExecutor, LoopRequest, StoredLoopRun};
use polpo_orchestrator::{Orchestrator, OrchestratorError};
use polpo_store::StoreError;
use polpo_tools::net::{NetworkPolicy, OutboundRequest, send_guarded};
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, Url};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// Longest a webhook delivery may take, connection and answer included.
const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(30);

/// What the scheduler fires besides agents: the orchestrator for `task` and `legacy_mission`,
/// the loop executor for `loop`, and the network policy a `webhook` is sent under.
#[derive(Clone)]
pub struct Targets {
    /// Creates `task` fires' tasks and starts missions' runs (its loop runs them).
    pub orchestrator: Arc<Orchestrator>,
    /// Runs `loop` fires.
    pub loops: Arc<LoopExecutor>,
    /// Which private addresses a webhook may reach: none by default (the SSRF guard refuses
    /// loopback, private and link-local targets); a test allowlists its local receiver.
    pub webhooks: NetworkPolicy,
}

impl Targets {
    /// Tasks through `orchestrator`, loops through `loops`, webhooks under the SSRF guard with
    /// no private address exempt (what `polpo serve` runs with).
    pub fn new(orchestrator: Arc<Orchestrator>, loops: Arc<LoopExecutor>) -> Self {
        Self { orchestrator, loops, webhooks: NetworkPolicy::default() }
    }
}

/// How a non-agent fire got going.
pub(crate) enum Launched {
    /// Done on the spot: the task was created or the mission's run started (or was already,
    /// by a claimer that died), the webhook answered 2xx. The record is final.
    Done,
    /// A loop run started here: the walk, which ends with the run's verdict.
    Walking(tokio::task::JoinHandle<Result<(), RunError>>),
    /// The loop run by this occurrence's id was started already (its claimer died after
    /// starting it): its verdict when it is over, `None` while it goes on (recovery resumes it).
    Existing(Option<Result<(), RunError>>),
}

/// The loop run id of schedule-run `record_id`'s occurrence.
pub(crate) fn loop_run_id(derived: &str) -> String {
    format!("looprun-{derived}")
}

/// Start `schedule`'s task, loop or webhook invocation for `run`, named `derived` (the
/// occurrence's derived run id); fills the record's references (`taskId`, `loopRunId`,
/// `result`: a webhook's `{status}`, a mission's `{missionId, executionCount}`). `now` is the store's time; `hosts` the project's webhook host allowlist in
/// force (`settings.schedules.webhookAllowlist`), enforced by the SSRF guard on every hop.
pub(crate) async fn launch(
    targets: &Targets,
    schedule: &Schedule,
    run: &mut ScheduleRun,
    derived: &str,
    now: DateTime<Utc>,
    hosts: Option<&[String]>,
) -> Result<Launched, RunError> {
    let at = run.scheduled_for;
    match &schedule.config.invocation {
        Invocation::Task { agent_name, title, prompt, user_id, metadata, execution } => {
            refuse_set("metadata", metadata.as_ref())?;
            refuse_set("execution", execution.as_ref())?;
            let zone = schedule.timing.zone();
            // Titles are unique among unfinished tasks: each occurrence's task is its own.
            let title = format!("{title} ({})", at.with_timezone(&zone).to_rfc3339_opts(SecondsFormat::Secs, true));
            let mut task = Task::new(derived, title, prompt.clone(), now);
            task.assign_to = Some(agent_name.clone());
            task.user.clone_from(user_id);
            run.task_id = Some(derived.to_owned());
            match targets.orchestrator.create_task(task).await {
                Ok(_) => Ok(Launched::Done),
                // Created already by a claimer that died before recording it.
                Err(OrchestratorError::Store(StoreError::Conflict(_)))
                    if targets.orchestrator.task(derived).await.is_ok() =>
                {
                    Ok(Launched::Done)
                }
                Err(e) => Err(RunError { code: e.code().to_owned(), message: e.to_string() }),
            }
        }
        Invocation::Loop { loop_name, agent_name, input } => {
            let id = loop_run_id(derived);
            run.loop_run_id = Some(id.clone());
            if let Some(existing) = stored(&targets.loops, &id).await? {
                return Ok(Launched::Existing(verdict(&existing)));
            }
            let mut request =
                LoopRequest::new(agent_name.clone(), Some(loop_name.clone()), crate::fire::messages(input)?);
            request.metadata = json!({
                "scheduleId": schedule.id,
                "scheduledFor": at.to_rfc3339_opts(SecondsFormat::Millis, true),
            });
            let (loop_id, config) = targets
                .loops
                .select(&request)
                .map_err(|e| RunError { code: e.code().to_owned(), message: e.to_string() })?;
            let loops = targets.loops.clone();
            Ok(Launched::Walking(tokio::spawn(async move {
                let finished = loops.run(&request, &id, &loop_id, &config, &|_| {}).await;
                finished.result.map(|_| ()).map_err(|e| RunError { code: e.code().to_owned(), message: e.to_string() })
            })))
        }
        Invocation::Webhook { url, payload } => {
            let policy = NetworkPolicy { host_allowlist: hosts.map(<[String]>::to_vec), ..targets.webhooks.clone() };
            let status = deliver(&policy, schedule, at, url, payload.as_ref(), derived).await?;
            run.result = Some(json!({"status": status}));
            if (200..300).contains(&status) {
                Ok(Launched::Done)
            } else {
                Err(RunError { code: "webhook_failed".into(), message: format!("the webhook answered HTTP {status}") })
            }
        }
        Invocation::LegacyMission { mission_id } => {
            let stored = targets.orchestrator.fire_mission(mission_id, derived).await.map_err(|e| RunError {
                code: e.code().to_owned(),
                message: format!("mission `{mission_id}` was not started: {e}"),
            })?;
            run.result = Some(json!({"missionId": mission_id, "executionCount": stored.mission.execution_count}));
            Ok(Launched::Done)
        }
        other => Err(RunError {
            code: "internal".into(),
            message: format!("surface `{}` is fired as an agent invocation", other.surface()),
        }),
    }
}

/// A field the scheduler cannot honour yet is refused, never ignored.
fn refuse_set(field: &str, value: Option<&Value>) -> Result<(), RunError> {
    let set = match value {
        None | Some(Value::Null) => false,
        Some(Value::Object(m)) => !m.is_empty(),
        Some(_) => true,
    };
    if set {
        return Err(RunError {
            code: polpo_core::config::codes::FEATURE_UNAVAILABLE.into(),
            message: format!("`invocation.{field}` on a task schedule is not supported by this runtime yet"),
        });
    }
    Ok(())
}

/// The stored loop run `id`, if any.
async fn stored(loops: &LoopExecutor, id: &str) -> Result<Option<StoredLoopRun>, RunError> {
    match loops.stored_run(id, None).await {
        Ok(run) => Ok(Some(run)),
        Err(polpo_loops::LoopError::RunNotFound(_)) => Ok(None),
        Err(e) => Err(RunError { code: e.code().to_owned(), message: e.to_string() }),
    }
}

/// A stored loop run's verdict, `None` while it is not over.
pub(crate) fn verdict(run: &StoredLoopRun) -> Option<Result<(), RunError>> {
    let record = &run.record;
    if !record.status.is_terminal() {
        return None;
    }
    Some(match &record.error {
        None if record.status == polpo_loops::LoopRunStatus::Completed => Ok(()),
        Some(e) => Err(RunError { code: e.code.clone(), message: e.message.clone() }),
        None => {
            let status = serde_json::to_value(record.status).ok().and_then(|v| v.as_str().map(str::to_owned));
            let status = status.unwrap_or_default();
            Err(RunError { code: format!("loop_{status}"), message: format!("the loop run ended {status}") })
        }
    })
}

/// Whether loop run `id` is still going (counted by `maxConcurrency`).
pub(crate) async fn loop_live(loops: &LoopExecutor, id: &str) -> Result<bool, StoreError> {
    match loops.stored_run(id, None).await {
        Ok(run) => Ok(!run.record.status.is_terminal()),
        Err(polpo_loops::LoopError::RunNotFound(_)) => Ok(false),
        Err(e) => Err(StoreError::Invalid(e.to_string())),
    }
}

/// POST the payload to `url` through the SSRF guard (every hop resolved and checked); plain
/// `http` only to a target the policy exempts (a test's local receiver). The answer's status.
async fn deliver(
    policy: &NetworkPolicy,
    schedule: &Schedule,
    at: DateTime<Utc>,
    url: &str,
    payload: Option<&Value>,
    derived: &str,
) -> Result<u16, RunError> {
    let fail = |code: &str, message: String| RunError { code: code.to_owned(), message };
    let url = Url::parse(url).map_err(|e| fail("invalid_url", format!("invalid webhook URL: {e}")))?;
    let authority = format!("{}:{}", url.host_str().unwrap_or_default(), url.port_or_known_default().unwrap_or(0));
    let exempt = policy.allow_private || policy.private_allowlist.iter().any(|a| a.eq_ignore_ascii_case(&authority));
    if url.scheme() != "https" && !exempt {
        return Err(fail("insecure_url", "webhooks are sent to https URLs only".into()));
    }
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let scheduled_for = at.to_rfc3339_opts(SecondsFormat::Millis, true);
    for (name, value) in [
        ("idempotency-key", derived),
        ("x-polpo-schedule-id", schedule.id.as_str()),
        ("x-polpo-scheduled-for", scheduled_for.as_str()),
    ] {
        if let Ok(value) = HeaderValue::from_str(value) {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
    let body = serde_json::to_vec(payload.unwrap_or(&json!({}))).map_err(|e| fail("internal", e.to_string()))?;
    let request = OutboundRequest { method: Method::POST, url, headers, body: Some(body) };
    let response = tokio::time::timeout(WEBHOOK_TIMEOUT, send_guarded(request, policy))
        .await
        .map_err(|_| fail("timeout", format!("the webhook did not answer within {} s", WEBHOOK_TIMEOUT.as_secs())))?
        .map_err(|e| fail(&e.code, e.message))?;
    Ok(response.status().as_u16())
}
