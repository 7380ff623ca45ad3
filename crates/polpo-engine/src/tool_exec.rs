//! Executing the tool calls of one model turn.
//!
//! Every call passes the same gates in the same order — exists, allowed by policy, arguments
//! parse, arguments match the schema — and a failure at any gate becomes a model-visible
//! `Error: …` result rather than an aborted run, so the model can correct itself. Results
//! always come back in the model's order, even when a read-only batch ran concurrently.

use crate::events::{EventSink, RunEvent};
use crate::invocation::Invocation;
use futures::StreamExt;
use polpo_core::message::{Message, ToolCall};
use polpo_core::tool::ToolSpec;
use polpo_tools::Tool;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

/// Most calls of one read-only batch that run at once.
pub const MAX_PARALLEL_CALLS: usize = 8;
/// Longest model-written arguments text we parse.
pub const MAX_ARGUMENTS_BYTES: usize = 1024 * 1024;

/// A tool with its argument schema compiled once.
struct ToolEntry {
    tool: Arc<dyn Tool>,
    validator: Option<jsonschema::Validator>,
}

/// An agent's server tools, compiled once and shared by every request to that agent.
pub struct ToolSet {
    entries: Vec<ToolEntry>,
    by_name: HashMap<String, usize>,
}

impl ToolSet {
    /// Compile the schemas of `tools`. A tool whose schema does not compile is kept but its
    /// calls are refused, so one bad custom tool cannot take the agent down.
    pub fn new(tools: Vec<Arc<dyn Tool>>) -> Self {
        let entries: Vec<ToolEntry> = tools
            .into_iter()
            .map(|tool| {
                let validator = jsonschema::draft202012::new(&tool.spec().parameters).ok();
                ToolEntry { tool, validator }
            })
            .collect();
        let by_name = entries.iter().enumerate().map(|(i, e)| (e.tool.spec().name.clone(), i)).collect();
        Self { entries, by_name }
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.by_name.get(name).map(|&i| &self.entries[i].tool)
    }

    /// Specs in declaration order.
    pub fn specs(&self) -> impl Iterator<Item = &ToolSpec> {
        self.entries.iter().map(|e| e.tool.spec())
    }

    /// Number of tools.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when the agent has no server tools.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Run the server tool calls of one turn and return one `tool` message per call, in order.
pub async fn execute_batch(inv: &Invocation, calls: &[ToolCall], sink: EventSink<'_>) -> Vec<Message> {
    let all_read = calls.iter().all(|c| inv.tools.get(&c.name).is_some_and(|t| t.effect().is_read_only()));
    if inv.parallel_tool_calls && all_read && calls.len() > 1 {
        futures::stream::iter(calls.iter().map(|c| execute_one(inv, c, sink)))
            .buffered(MAX_PARALLEL_CALLS)
            .collect()
            .await
    } else {
        let mut out = Vec::with_capacity(calls.len());
        for c in calls {
            out.push(execute_one(inv, c, sink).await);
        }
        out
    }
}

/// One call through every gate; never fails, a failure is the model-visible result.
async fn execute_one(inv: &Invocation, call: &ToolCall, sink: EventSink<'_>) -> Message {
    let arguments = parse_arguments(&call.arguments);
    sink(RunEvent::ToolCalling {
        id: call.id.clone(),
        name: call.name.clone(),
        arguments: arguments.clone().unwrap_or_else(|_| Value::String(call.arguments.clone())),
    });
    let result = run_gated(inv, call, arguments).await;
    let (text, is_error) = match result {
        Ok(text) => (text, false),
        Err(e) => (format!("Error: {e}"), true),
    };
    sink(RunEvent::ToolCompleted { id: call.id.clone(), name: call.name.clone(), result: text.clone(), is_error });
    Message::tool_result(call.id.clone(), text)
}

async fn run_gated(inv: &Invocation, call: &ToolCall, arguments: Result<Value, String>) -> Result<String, String> {
    let index = inv.tools.by_name.get(&call.name).ok_or_else(|| format!("unknown_tool: no tool named `{}`", call.name))?;
    if let Some(layer) = inv.policy.denied_by(&call.name) {
        return Err(format!("tool_policy_denied: `{}` is not allowed by the {layer:?} tool policy", call.name));
    }
    let entry = &inv.tools.entries[*index];
    let arguments = arguments.map_err(|e| format!("invalid_arguments: {e}"))?;
    let validator = entry.validator.as_ref().ok_or_else(|| format!("invalid_tool: the schema of `{}` does not compile", call.name))?;
    let problems: Vec<String> = validator.iter_errors(&arguments).take(5).map(|e| format!("at `{}`: {e}", e.instance_path())).collect();
    if !problems.is_empty() {
        return Err(format!("invalid_arguments: {}", problems.join("; ")));
    }
    tokio::select! {
        biased;
        _ = inv.tool_context.cancel.cancelled() => Err("aborted: the run was aborted".into()),
        r = entry.tool.call(&inv.tool_context, arguments) => r.map(|o| o.text).map_err(|e| e.to_string()),
    }
}

/// Arguments must be one JSON object of bounded size; an empty string means `{}`.
fn parse_arguments(text: &str) -> Result<Value, String> {
    if text.len() > MAX_ARGUMENTS_BYTES {
        return Err(format!("arguments are larger than {MAX_ARGUMENTS_BYTES} bytes"));
    }
    if text.trim().is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    match serde_json::from_str::<Value>(text) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(_) => Err("arguments must be a JSON object".into()),
        Err(e) => Err(format!("arguments are not valid JSON: {e}")),
    }
}
