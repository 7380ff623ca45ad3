//! The orchestrator's own model calls (reviews, generated dimensions, the question
//! classifier): each a run of the task's agent through the engine's one entry, on a model the
//! orchestrator picks, answering in a JSON shape the engine validates (`response_format`
//! `json_schema`, strict). Going through the engine keeps what an agent run has: the agent's
//! allowed model profiles, its tool policy and workspace confinement for the tools a call may
//! use, the vault redactor over tool results, hooks and events.

use std::sync::Arc;

use polpo_core::message::Message;
use polpo_core::model::ModelSelection;
use polpo_core::tasks::Task;
use polpo_engine::structured::ResponseFormat;
use polpo_engine::{ChatInput, Surface};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::context::{Ctx, run_to_end};

/// Environment variable naming the judge model of every review (`provider/model`).
pub const JUDGE_MODEL_ENV: &str = "POLPO_JUDGE_MODEL";
/// Environment variable naming the project's default model, the judge's first fallback.
pub const MODEL_ENV: &str = "POLPO_MODEL";

/// The judge model, as the reference picks it: `POLPO_JUDGE_MODEL`, else `POLPO_MODEL`, else
/// `settings.orchestratorModel`; `None` leaves the task agent's own model (the reference's last
/// resort, a fixed Anthropic model, would need a key the project may not have).
pub(crate) fn judge_model(ctx: &Ctx) -> Option<ModelSelection> {
    [JUDGE_MODEL_ENV, MODEL_ENV]
        .into_iter()
        .find_map(|k| std::env::var(k).ok().filter(|v| !v.trim().is_empty()))
        .map(|id| ModelSelection::Id(id.trim().to_owned()))
        .or_else(|| orchestrator_model(ctx))
}

/// `settings.orchestratorModel` (`None`: the task agent's own model answers).
pub(crate) fn orchestrator_model(ctx: &Ctx) -> Option<ModelSelection> {
    ctx.runs.runtime().loaded().project.settings().orchestrator_model.clone()
}

/// A strict `json_schema` response format named `name` over the object `schema`.
pub(crate) fn json_format(name: &str, schema: Value) -> Result<ResponseFormat, String> {
    ResponseFormat::from_wire(&json!({
        "type": "json_schema",
        "json_schema": {"name": name, "strict": true, "schema": schema}
    }))
}

/// One structured call.
pub(crate) struct Call {
    /// The model answering (`None`: the task agent's own).
    pub(crate) model: Option<ModelSelection>,
    /// The one user message.
    pub(crate) prompt: String,
    /// The answer's shape.
    pub(crate) format: ResponseFormat,
    /// Tools the call may use, narrowing the agent's own (empty: none).
    pub(crate) tools: Vec<String>,
    /// Most model calls, under the agent's own `maxTurns` (`None`: the agent's).
    pub(crate) max_turns: Option<u32>,
}

/// Ask `call` as `task`'s agent and read the answer as `T`: `Err` with why not (no agent,
/// the run failed, the answer does not have the shape).
pub(crate) async fn ask<T: DeserializeOwned>(ctx: &Arc<Ctx>, task: &Task, call: Call) -> Result<T, String> {
    let agent = task.assign_to.clone().ok_or("the task has no agent to ask with")?;
    let mut input = ChatInput::new(agent, vec![Message::user(call.prompt)]);
    input.model = call.model;
    input.surface = Surface::Task;
    input.response_format = call.format;
    input.allowed_tools = Some(call.tools);
    input.max_turns = call.max_turns;
    input.user = task.user.clone();
    input.metadata = json!({"taskId": task.id});
    match run_to_end(&ctx.runs, input).await {
        Ok((_, Ok(answer))) => serde_json::from_str::<T>(&answer.content.unwrap_or_default())
            .map_err(|err| format!("unreadable answer: {err}")),
        Ok((_, Err(f))) => Err(format!("{}: {}", f.code, f.message)),
        Err(err) => Err(format!("{}: {err}", err.code())),
    }
}

/// At most `max` characters of `text` (its start), marked when cut.
pub(crate) fn bounded(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}\n… (cut at {max} characters)", &text[..cut]),
        None => text.to_owned(),
    }
}
