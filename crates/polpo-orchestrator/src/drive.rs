//! One task's life on this worker, from the moment it holds the task's claim: each status
//! leads to the next through the core state machine (`transition`), every step stored by
//! compare-and-set at the revision this worker holds. The agent runs through the engine's one
//! entry; its run id is derived from the task and attempt, so a worker that takes over a
//! task whose worker died follows the run already started instead of starting it again.
//! The claim is renewed while the task runs, and released at the end. An answer that is a
//! question (phase `clarification`) is answered by the orchestrator up to
//! `maxQuestionRounds`, then the agent runs again with the exchange in its description.

use std::sync::Arc;

use polpo_core::message::Message;
use polpo_core::model::ModelSelection;
use polpo_core::tasks::{FailReason, Phase, Task, TaskEvent, TaskResult, TaskStatus, transition};
use polpo_engine::events::EventKind;
use polpo_engine::meter::Meter;
use polpo_engine::{ChatInput, Failure, RunAnswer, Surface};
use polpo_store::StoredTask;
use polpo_store::work::escalated_agent;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::assess::{AssessmentResult, assess};
use crate::context::{Ctx, HANDED_OVER, follow_to_end, run_to_end};
use crate::error::OrchestratorError;

/// Why driving stopped early.
enum Stop {
    /// The claim was lost (another worker took the task) or the store refused a write.
    Lost(OrchestratorError),
    /// The server is stopping: the task stays as it is, for the next worker.
    HandedOver,
}

impl From<OrchestratorError> for Stop {
    fn from(e: OrchestratorError) -> Self {
        Stop::Lost(e)
    }
}

/// Drive `held` (claimed by this worker) until it is done, failed for good, waits for a
/// person, or the claim is lost; `kill` fails it on purpose. The claim is renewed meanwhile
/// and released at the end.
pub(crate) async fn drive(ctx: Arc<Ctx>, held: StoredTask, kill: CancellationToken) {
    let id = held.task.id.clone();
    let lost = CancellationToken::new();
    let renewer = tokio::spawn(renew(ctx.clone(), id.clone(), lost.clone()));
    let outcome = tokio::select! {
        r = steps(&ctx, held, &kill) => r,
        () = lost.cancelled() => Err(Stop::Lost(OrchestratorError::Invalid("the task's claim was lost".into()))),
    };
    renewer.abort();
    match outcome {
        Ok(()) | Err(Stop::HandedOver) => {}
        Err(Stop::Lost(e)) => tracing::warn!(task = %id, code = e.code(), "task stopped on this worker: {e}"),
    }
    if let Err(e) = ctx.store().tasks.release_task(&id, &ctx.worker).await {
        tracing::warn!(task = %id, code = e.code(), "task claim could not be released: {e}");
    }
    ctx.wake.notify_one();
}

/// Renew the claim every third of the lease; cancel `lost` when another worker has it.
async fn renew(ctx: Arc<Ctx>, id: String, lost: CancellationToken) {
    loop {
        tokio::time::sleep(ctx.options.lease / 3).await;
        if let Err(e) = ctx.store().tasks.hold_task(&id, &ctx.worker, ctx.options.lease).await
            && e.code() == "conflict"
        {
            lost.cancel();
            return;
        }
    }
}

/// Apply `event` and store the task at its revision; publish `task:transition`.
pub(crate) async fn apply(ctx: &Ctx, held: &StoredTask, event: TaskEvent) -> Result<StoredTask, OrchestratorError> {
    let next = transition(&held.task, &event, ctx.now())?;
    store_moved(ctx, held, next, event.name()).await
}

/// Store `next` over `held` and publish the move.
pub(crate) async fn store_moved(
    ctx: &Ctx,
    held: &StoredTask,
    next: Task,
    event: &str,
) -> Result<StoredTask, OrchestratorError> {
    let stored = ctx.store().tasks.update_task(next, held.revision).await?;
    ctx.emit(
        EventKind::TaskTransition,
        json!({"taskId": stored.task.id, "title": stored.task.title, "event": event, "from": held.task.status,
               "to": stored.task.status, "phase": stored.task.phase}),
    );
    Ok(stored)
}

async fn steps(ctx: &Arc<Ctx>, mut held: StoredTask, kill: &CancellationToken) -> Result<(), Stop> {
    let root = ctx.runs.runtime().loaded().project.root.clone();
    // The answer of the run that just ended, for the assessment that follows.
    let mut output: Option<String> = None;
    loop {
        let task = &held.task;
        held = match task.status {
            TaskStatus::Pending => apply(ctx, &held, TaskEvent::Assign { agent: escalated_agent(task) }).await?,
            TaskStatus::Assigned => apply(ctx, &held, TaskEvent::Start).await?,
            TaskStatus::InProgress if task.phase == Some(Phase::Clarification) => answer_question(ctx, &held).await?,
            TaskStatus::InProgress => {
                let (answer, took) = tokio::select! {
                    r = run_agent(ctx, task) => r?,
                    () = kill.cancelled() => {
                        abort_run(ctx, task).await;
                        return fail(ctx, &held, FailReason::Forced, "killed".into()).await;
                    }
                };
                match answer {
                    Ok(answer) => {
                        let text = answer.content.clone().unwrap_or_default();
                        let mut next = with_result(task, 0, text.clone(), String::new(), took);
                        if let Some(result) = next.result.as_mut() {
                            let agent = task.assign_to.as_deref();
                            crate::files::record_work(ctx, &answer.session_id, agent, result, &mut next.outcomes)
                                .await?;
                        }
                        next.session_id = Some(answer.session_id);
                        // A question while rounds are left is answered first (the classifier
                        // is asked only then); after that the answer is assessed like any other.
                        let asked = match transition(&next, &TaskEvent::Ask, ctx.now()) {
                            Ok(asked) => crate::clarify::question_in(ctx, task, &text).await.map(|q| (asked, q)),
                            Err(_) => None,
                        };
                        if let Some((asked, question)) = asked {
                            ctx.emit(
                                EventKind::TaskQuestion,
                                json!({"taskId": task.id, "question": question, "round": asked.question_rounds}),
                            );
                            store_moved(ctx, &held, asked, "ask").await?
                        } else {
                            output = Some(text);
                            let next =
                                transition(&next, &TaskEvent::Submit, ctx.now()).map_err(OrchestratorError::from)?;
                            store_moved(ctx, &held, next, "submit").await?
                        }
                    }
                    Err(f) if f.code == "task_timeout" => {
                        ctx.emit(EventKind::TaskTimeout, json!({"taskId": task.id, "maxDuration": task.max_duration}));
                        fail_stored(ctx, &held, FailReason::Timeout, f.message, took).await?
                    }
                    Err(f) => {
                        fail_stored(ctx, &held, FailReason::Crash, format!("{}: {}", f.code, f.message), took).await?
                    }
                }
            }
            TaskStatus::Review => {
                let answer = match output.take() {
                    Some(o) => o,
                    None => task.result.as_ref().map(|r| r.stdout.clone()).unwrap_or_default(),
                };
                let trigger = if task.fix_attempts > 0 {
                    "fix"
                } else if task.retries > 0 {
                    "retry"
                } else {
                    "initial"
                };
                let result = assess(ctx, task, &answer, &root, trigger).await;
                let mut next = task.clone();
                record_assessment(&mut next, &result);
                let event = if result.passed {
                    TaskEvent::Pass
                } else if transition(&next, &TaskEvent::Fix, ctx.now()).is_ok() {
                    ctx.emit(EventKind::TaskFix, json!({"taskId": task.id, "attempt": task.fix_attempts + 1}));
                    TaskEvent::Fix
                } else {
                    TaskEvent::Fail { reason: FailReason::RetriesExhausted }
                };
                let name = event.name();
                let next = transition(&next, &event, ctx.now()).map_err(OrchestratorError::from)?;
                store_moved(ctx, &held, next, name).await?
            }
            TaskStatus::Failed => match transition(task, &TaskEvent::Retry { manual: false }, ctx.now()) {
                Ok(next) => {
                    ctx.emit(EventKind::TaskRetry, json!({"taskId": task.id, "attempt": next.retries}));
                    let mut next = next;
                    next.session_id = None;
                    store_moved(ctx, &held, next, "retry").await?
                }
                Err(e) if e.code() == "side_effects_need_approval" => {
                    apply(ctx, &held, TaskEvent::RequestApproval).await?;
                    return Ok(());
                }
                Err(_) => {
                    ctx.emit(EventKind::TaskMaxRetries, json!({"taskId": task.id, "retries": task.retries}));
                    return Ok(());
                }
            },
            TaskStatus::Done | TaskStatus::AwaitingApproval | TaskStatus::Draft => return Ok(()),
        };
    }
}

/// The model for the current attempt: the `escalateModel` once `escalateAfter` retries were
/// used (resolved under the agent's allowed profiles like its own model), else the agent's.
fn escalated_model(task: &Task) -> Option<String> {
    let policy = task.retry_policy.as_ref()?;
    let after = policy.escalate_after?;
    (task.retries >= after).then(|| policy.escalate_model.clone()).flatten()
}

/// The run id of the task's current attempt: the same on every worker, so a takeover finds
/// the run its dead worker started. A run after an answered question is a new attempt.
/// Public so the REST task view can link a task to the run of its latest attempt.
pub fn task_run_id(task: &Task) -> String {
    let base = format!("task-{}-r{}-f{}", task.id, task.retries, task.fix_attempts);
    match task.question_rounds {
        0 => base,
        n => format!("{base}-q{n}"),
    }
}

/// Answer the question `held`'s agent asked (kept in `result.stdout`) as the orchestrator,
/// with `settings.orchestratorModel` (else the task agent's model) and no tools, append the exchange to the description (the first
/// description stays in `originalDescription`) and go back to `execution`. When no answer can
/// be had, the agent is told to go on with its best judgement: a question never stops a task.
async fn answer_question(ctx: &Arc<Ctx>, held: &StoredTask) -> Result<StoredTask, OrchestratorError> {
    let task = &held.task;
    let question = task.result.as_ref().map(|r| r.stdout.clone()).unwrap_or_default();
    let prompt = format!(
        "You coordinate the agents of this project. The agent working on the task below asked a question instead of doing the work. Answer it directly and briefly from the task and sensible assumptions; the agent will go on with your answer.\n\nTask: {}\n{}\n\nThe agent's question:\n{question}",
        task.title, task.description
    );
    let answer = match &task.assign_to {
        Some(agent) => {
            let mut input = ChatInput::new(agent.clone(), vec![Message::user(prompt)]);
            input.surface = Surface::Task;
            input.allowed_tools = Some(Vec::new());
            input.user = task.user.clone();
            input.model = ctx.runs.runtime().loaded().project.settings().orchestrator_model.clone();
            match run_to_end(&ctx.runs, input).await {
                Ok((_, Ok(a))) => a.content.filter(|c| !c.trim().is_empty()),
                Ok((_, Err(f))) => {
                    tracing::warn!(task = %task.id, code = %f.code, "a task's question went unanswered: {}", f.message);
                    None
                }
                Err(e) => {
                    tracing::warn!(task = %task.id, code = e.code(), "a task's question went unanswered: {e}");
                    None
                }
            }
        }
        None => None,
    };
    let reply = answer.clone().unwrap_or_else(|| "No answer could be given: go on with your best judgement.".into());
    let mut next = task.clone();
    next.original_description.get_or_insert_with(|| task.description.clone());
    next.description = format!("{}\n\nYou asked: {}\nAnswer: {reply}", task.description, question.trim());
    let next = transition(&next, &TaskEvent::Answer, ctx.now())?;
    let stored = store_moved(ctx, held, next, "answer").await?;
    ctx.emit(
        EventKind::TaskAnswered,
        json!({"taskId": task.id, "answer": reply, "answered": answer.is_some(), "round": task.question_rounds}),
    );
    Ok(stored)
}

/// What the agent is told for this attempt.
fn prompt(task: &Task) -> String {
    let base = format!("Task: {}\n\n{}", task.title, task.description);
    let failures = task
        .result
        .as_ref()
        .and_then(|r| r.assessment.as_ref())
        .and_then(|a| serde_json::from_value::<AssessmentResult>(a.clone()).ok())
        .map(|a| a.failures());
    match (task.phase, failures) {
        (Some(Phase::Fix), Some(failures)) => format!(
            "The work on this task did not pass its checks. Fix it, then answer with what you changed.\n\n{base}\n\nWhat failed:\n{failures}"
        ),
        _ => base,
    }
}

/// Run (or, after a takeover, follow) the agent of `task`'s current attempt: its answer or
/// why there is none, and how long it took in milliseconds.
async fn run_agent(ctx: &Arc<Ctx>, task: &Task) -> Result<(Result<RunAnswer, Failure>, u64), Stop> {
    let Some(agent) = task.assign_to.clone() else {
        let f = Failure { code: "invalid_input".into(), message: "the task names no agent (assignTo)".into() };
        return Ok((Err(f), 0));
    };
    let started = ctx.now();
    let mut input = ChatInput::new(agent, vec![Message::user(prompt(task))]);
    input.surface = Surface::Task;
    input.outlive_caller = true;
    input.user = task.user.clone();
    input.metadata = json!({"taskId": task.id});
    if task.phase == Some(Phase::Fix) {
        input.session_id = task.session_id.clone();
    }
    input.model = escalated_model(task).map(ModelSelection::Id);
    let id = task_run_id(task);
    let run = async {
        let invoked = match ctx.runs.invoke_once(input, &id, Meter::start()).await {
            Ok(invoked) => invoked,
            Err(e) => return Err(Failure { code: e.code().into(), message: e.to_string() }),
        };
        if invoked.followed() {
            ctx.emit(EventKind::TaskRecovered, json!({"taskId": task.id, "runId": id}));
        }
        follow_to_end(invoked).await.1
    };
    let result = if task.max_duration > 0 {
        match tokio::time::timeout(std::time::Duration::from_millis(task.max_duration), run).await {
            Ok(r) => r,
            Err(_) => {
                abort_run(ctx, task).await;
                Err(Failure {
                    code: "task_timeout".into(),
                    message: format!("ran past maxDuration {} ms", task.max_duration),
                })
            }
        }
    } else {
        run.await
    };
    if matches!(&result, Err(f) if f.code == HANDED_OVER) {
        return Err(Stop::HandedOver);
    }
    let took = u64::try_from((ctx.now() - started).num_milliseconds()).unwrap_or(0);
    Ok((result, took))
}

async fn abort_run(ctx: &Ctx, task: &Task) {
    let _ = ctx.runs.abort(&task_run_id(task), Some("task stopped".into())).await;
}

/// `task` with the outcome of a run; the assessments and the files of earlier runs stay.
fn with_result(task: &Task, exit_code: i32, stdout: String, stderr: String, duration: u64) -> Task {
    let mut next = task.clone();
    let earlier = task.result.clone().unwrap_or_default();
    next.result = Some(TaskResult { exit_code, stdout, stderr, duration, ..earlier });
    next
}

/// Keep `result` as the latest assessment; the previous one moves to the history.
pub(crate) fn record_assessment(task: &mut Task, result: &AssessmentResult) {
    let r = task.result.get_or_insert_with(TaskResult::default);
    if let Some(previous) = r.assessment.take() {
        r.assessment_history.push(previous);
    }
    r.assessment = serde_json::to_value(result).ok();
}

async fn fail_stored(
    ctx: &Ctx,
    held: &StoredTask,
    reason: FailReason,
    message: String,
    took: u64,
) -> Result<StoredTask, OrchestratorError> {
    let next = with_result(&held.task, 1, String::new(), message, took);
    let event = TaskEvent::Fail { reason };
    let next = transition(&next, &event, ctx.now())?;
    store_moved(ctx, held, next, "fail").await
}

async fn fail(ctx: &Ctx, held: &StoredTask, reason: FailReason, message: String) -> Result<(), Stop> {
    fail_stored(ctx, held, reason, message, 0).await?;
    Ok(())
}

/// Assess `held` (done or failed, held by this worker) again on the answer it kept, record
/// the new assessment (the previous one moves to the history) and let its verdict decide
/// `done` or `failed`.
pub(crate) async fn reassess(ctx: &Arc<Ctx>, held: &StoredTask) -> Result<StoredTask, OrchestratorError> {
    let task = &held.task;
    // Refused before any command runs when the task is not finished.
    transition(task, &TaskEvent::Reassess { passed: true }, ctx.now())?;
    let root = ctx.runs.runtime().loaded().project.root.clone();
    let answer = task.result.as_ref().map(|r| r.stdout.clone()).unwrap_or_default();
    let result = assess(ctx, task, &answer, &root, "reassess").await;
    let mut next = task.clone();
    record_assessment(&mut next, &result);
    let next = transition(&next, &TaskEvent::Reassess { passed: result.passed }, ctx.now())?;
    let stored = store_moved(ctx, held, next, "reassess").await?;
    ctx.emit(
        EventKind::TaskReassessed,
        json!({"taskId": task.id, "passed": result.passed, "globalScore": result.global_score, "status": stored.task.status}),
    );
    Ok(stored)
}
