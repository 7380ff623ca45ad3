//! What a durable run keeps so it survives a restart: the request in durable form
//! ([`RunSpec`]), the checkpoint's state ([`CheckpointState`]) and the steering messages it
//! receives. Plain data: the run manager, the journal's `run.accepted` entry and the live
//! run state all share these shapes.
//!
//! A checkpoint holds only what this run added — the request's new messages, the messages
//! produced since (assistant turns, tool results, delivered steering) and the steering not
//! yet delivered — never the session history, which the session store already has. So it
//! grows with the run's new content only.

use crate::hooks::LoopContext;
use crate::hooks::gate::GateCheckpoint;
use crate::interaction::Capabilities;
use crate::request::ChatInput;
use crate::structured::ResponseFormat;
use polpo_core::message::Message;
use polpo_core::model::ModelSelection;
use polpo_core::tool::ToolSpec;
use polpo_llm::ToolChoice;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// How a steering message is delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SteerMode {
    /// Before the next model call, at a safe boundary.
    Steer,
    /// When the run would otherwise finish; starts another turn.
    FollowUp,
}

/// A message sent to a running run. `id` is an idempotency key: a repeated id is ignored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SteerMessage {
    /// Caller-chosen id (idempotency key).
    pub id: String,
    /// Steer or follow up.
    pub mode: SteerMode,
    /// The user message to add (text and attachments).
    pub message: Message,
}

/// The request a run answers, in a form that survives a restart.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunSpec {
    /// The agent.
    pub agent: String,
    /// The session the turn is stored in.
    pub session_id: String,
    /// The request's new messages (what follows the stored history).
    pub messages: Vec<Message>,
    /// Request-scoped client tools.
    #[serde(default)]
    pub client_tools: Vec<ToolSpec>,
    /// Tool choice: `auto`, `none`, `required` or `{"tool": name}`.
    #[serde(default)]
    pub tool_choice: Value,
    /// Run read-only batches concurrently.
    #[serde(default)]
    pub parallel_tool_calls: bool,
    /// The OpenAI wire `response_format` (null: text).
    #[serde(default)]
    pub response_format: Value,
    /// `polpo.execution.allowedTools`.
    #[serde(default)]
    pub allowed_tools: Option<Vec<String>>,
    /// The loop node this run executes, so a resumed node keeps its mode, step and
    /// loop/step hook packs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loop_context: Option<LoopContext>,
    /// `polpo.capabilities` (questions, suggestions), so a resumed run offers the same.
    #[serde(default)]
    pub capabilities: Capabilities,
    /// The run is an agent node in a parallel loop branch (a resumed run is refused a gate too).
    #[serde(default)]
    pub parallel_branch: bool,
    /// The profile model routing chose when the run was accepted, so a resumed run answers
    /// with it again instead of routing (and paying a classifier) a second time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_profile: Option<String>,
    /// `polpo.skills`, so a resumed run keeps the same activated skills.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skills: Vec<String>,
    /// The model the surface picked instead of the agent's (a task retry escalated to
    /// `escalateModel`), so a resumed run asks the same model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelSelection>,
    /// The surface's cap on model calls, so a resumed run keeps it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
}

impl RunSpec {
    /// The durable form of `input` (session and messages are filled in once prepared).
    pub fn from_input(input: &ChatInput) -> Self {
        Self {
            agent: input.agent.clone(),
            session_id: String::new(),
            messages: Vec::new(),
            client_tools: input.client_tools.clone(),
            tool_choice: match &input.tool_choice {
                ToolChoice::Auto => json!("auto"),
                ToolChoice::None => json!("none"),
                ToolChoice::Required => json!("required"),
                ToolChoice::Tool(name) => json!({"tool": name}),
            },
            parallel_tool_calls: input.parallel_tool_calls,
            // As the client sent it, so a resumed run asks the provider for the same thing.
            response_format: input.response_format.wire().unwrap_or(Value::Null),
            allowed_tools: input.allowed_tools.clone(),
            loop_context: input.loop_context.clone(),
            model_profile: None,
            capabilities: input.capabilities,
            parallel_branch: input.parallel_branch,
            skills: input.skills.clone(),
            model: input.model.clone(),
            max_turns: input.max_turns,
        }
    }

    /// The request again, to resume run `run_id`.
    pub fn to_input(&self, run_id: &str) -> Result<ChatInput, String> {
        let mut input = ChatInput::new(self.agent.clone(), self.messages.clone());
        input.session_id = Some(self.session_id.clone());
        input.client_tools = self.client_tools.clone();
        input.tool_choice = match &self.tool_choice {
            Value::String(s) if s == "none" => ToolChoice::None,
            Value::String(s) if s == "required" => ToolChoice::Required,
            v => v.get("tool").and_then(Value::as_str).map_or(ToolChoice::Auto, |n| ToolChoice::Tool(n.to_owned())),
        };
        input.parallel_tool_calls = self.parallel_tool_calls;
        input.response_format = if self.response_format.is_null() {
            ResponseFormat::Text
        } else {
            ResponseFormat::from_wire(&self.response_format)?
        };
        input.allowed_tools = self.allowed_tools.clone();
        input.loop_context = self.loop_context.clone();
        input.capabilities = self.capabilities;
        input.parallel_branch = self.parallel_branch;
        input.skills = self.skills.clone();
        input.model = self.model.clone();
        input.max_turns = self.max_turns;
        input.run_id = Some(run_id.to_owned());
        Ok(input)
    }
}

/// A durable run's resumable state (the checkpoint's `state`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointState {
    /// The request.
    pub spec: RunSpec,
    /// Messages this run produced so far, in order.
    #[serde(default)]
    pub produced: Vec<Message>,
    /// Steering received and not yet delivered.
    #[serde(default)]
    pub pending: Vec<SteerMessage>,
    /// Every steering id received (delivered or not): the idempotency keys.
    #[serde(default)]
    pub steering_ids: Vec<String>,
    /// The termination gate's budgets and latest validation, when the agent has a gate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<GateCheckpoint>,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A model the surface picked (a task's escalation) is asked again by the resumed run,
    /// and a spec stored before the field existed still reads (as the agent's own model).
    #[test]
    fn a_picked_model_survives_the_stored_spec() {
        let mut input = ChatInput::new("worker".to_owned(), vec![Message::user("go")]);
        input.model = Some(ModelSelection::Id("fake/big".into()));
        let stored = serde_json::to_value(RunSpec::from_input(&input)).unwrap();
        let read: RunSpec = serde_json::from_value(stored.clone()).unwrap();
        assert_eq!(read.to_input("run-1").unwrap().model, input.model);

        let mut older = stored;
        older.as_object_mut().unwrap().remove("model");
        let read: RunSpec = serde_json::from_value(older).unwrap();
        assert_eq!(read.to_input("run-1").unwrap().model, None);
    }
}
