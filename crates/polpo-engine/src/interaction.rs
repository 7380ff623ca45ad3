//! Chat interactions a client can render: `ask_user_question` and suggested next messages.
//!
//! Both are opt-in twice: the agent allows them (`chat.allowUserQuestions`, default on;
//! `chat.suggestions.enabled`, default off) and the request declares the client can render
//! them (`polpo.capabilities`). `ask_user_question` is a runtime-provided client tool: the
//! model calls it, the turn ends with finish reason `ask_user` and the call (its arguments
//! are the question payload) is handed to the client, whose answer continues the session as a
//! `tool` message (or as a plain user message, which is then recorded as the answer).
//!
//! Suggestions are one extra, tool-free, bounded model call after a successful text answer.
//! They are fail-open: any failure (model error, timeout, unusable JSON) yields none and
//! never touches the answer.

use futures::StreamExt;
use polpo_core::config::agent::ChatConfig;
use polpo_core::message::{Content, FinishReason, Message, Role, ToolCall};
use polpo_core::policy::ToolPolicy;
use polpo_core::tool::ToolSpec;
use polpo_llm::{ModelEvent, ModelProvider, ModelRequest, ToolChoice};
use polpo_store::IdGen;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

/// The runtime-provided question tool.
pub const ASK_USER_QUESTION: &str = "ask_user_question";
/// Finish reason of a turn that waits for the user's answer.
pub const ASK_USER_FINISH: &str = "ask_user";
/// Most questions in one call.
pub const MAX_QUESTIONS: usize = 5;
/// Longest question header (characters).
pub const MAX_HEADER_CHARS: usize = 30;
/// Most suggestions, whatever the agent asks for.
pub const MAX_SUGGESTIONS: usize = 5;
/// Suggestions when the agent does not say how many.
pub const DEFAULT_SUGGESTIONS: usize = 3;
/// Longest suggestion label (characters); longer ones are cut.
pub const MAX_LABEL_CHARS: usize = 40;
/// Longest suggested prompt (characters); longer ones are dropped.
pub const MAX_PROMPT_CHARS: usize = 500;
/// The suggestion call may take this long before it is given up.
pub const SUGGESTIONS_TIMEOUT: Duration = Duration::from_secs(10);
/// Output tokens the suggestion call may use.
const SUGGESTIONS_MAX_TOKENS: u32 = 400;
/// Answer text shown to the suggestion call (characters).
const ANSWER_CONTEXT_CHARS: usize = 4000;

/// What the client says it can render (`polpo.capabilities`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    /// The client renders `ask_user_question` and sends the answer back.
    #[serde(default)]
    pub ask_user_question: bool,
    /// The client renders `polpo.suggestions`.
    #[serde(default)]
    pub suggestions: bool,
}

/// The interactions one invocation offers: the agent's opt-ins ∩ the client's capabilities.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Interactions {
    /// The model is shown `ask_user_question`.
    pub ask_user_question: bool,
    /// Suggestions are generated after a text answer.
    pub suggestions: Option<SuggestionPolicy>,
}

/// How to write suggestions (`chat.suggestions`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SuggestionPolicy {
    /// At most this many (1..=[`MAX_SUGGESTIONS`]).
    pub max_items: usize,
    /// The agent's guidance for writing them.
    pub guidance: Option<String>,
}

impl Interactions {
    /// Resolve for a direct chat turn. `ask_user_question` is also subject to the tool policy
    /// (an agent whose `allowedTools` leaves it out does not ask).
    pub fn resolve(chat: Option<&ChatConfig>, capabilities: Capabilities, policy: &ToolPolicy) -> Self {
        let allow_questions = chat.and_then(|c| c.allow_user_questions).unwrap_or(true);
        let suggestions = chat
            .and_then(|c| c.suggestions.as_ref())
            .filter(|s| s.enabled == Some(true) && capabilities.suggestions)
            .map(|s| SuggestionPolicy {
                max_items: s.max_items.map_or(DEFAULT_SUGGESTIONS, |n| n as usize).clamp(1, MAX_SUGGESTIONS),
                guidance: s.guidance.clone().filter(|g| !g.trim().is_empty()),
            });
        Self {
            ask_user_question: allow_questions && capabilities.ask_user_question && policy.allows(ASK_USER_QUESTION),
            suggestions,
        }
    }
}

/// The `ask_user_question` schema (the reference's shape), built once and shared by every
/// model request that offers it.
pub fn ask_user_spec() -> Arc<ToolSpec> {
    static SPEC: LazyLock<Arc<ToolSpec>> = LazyLock::new(|| {
        Arc::new(ToolSpec {
            name: ASK_USER_QUESTION.into(),
            description: "Ask the user one or more questions when you cannot continue without their input. \
            The turn ends; their answers come back as this tool's result."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {"questions": {"type": "array", "minItems": 1, "maxItems": MAX_QUESTIONS, "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string", "minLength": 1, "maxLength": 64},
                        "question": {"type": "string", "minLength": 1, "maxLength": 1000},
                        "header": {"type": "string", "maxLength": MAX_HEADER_CHARS},
                        "options": {"type": "array", "maxItems": 10, "items": {
                            "type": "object",
                            "properties": {"label": {"type": "string", "minLength": 1, "maxLength": 100}, "description": {"type": "string", "maxLength": 500}},
                            "required": ["label"]
                        }},
                        "multiple": {"type": "boolean"},
                        "custom": {"type": "boolean"}
                    },
                    "required": ["id", "question"]
                }}},
                "required": ["questions"]
            }),
        })
    });
    SPEC.clone()
}

/// `Err` with a model-visible sentence when the model's question payload is unusable.
pub fn check_question(arguments: &str) -> Result<(), String> {
    let value: Value =
        serde_json::from_str(arguments).map_err(|e| format!("invalid_arguments: arguments are not valid JSON: {e}"))?;
    let spec = ask_user_spec();
    let validator = jsonschema::draft202012::new(&spec.parameters).map_err(|e| format!("invalid_tool: {e}"))?;
    let problems: Vec<String> =
        validator.iter_errors(&value).take(5).map(|e| format!("at `{}`: {e}", e.instance_path())).collect();
    if problems.is_empty() { Ok(()) } else { Err(format!("invalid_arguments: {}", problems.join("; "))) }
}

/// `ask_user` when the hand-back includes a question, else `tool_calls`.
pub fn finish_reason(client_calls: &[ToolCall]) -> FinishReason {
    if client_calls.iter().any(|c| c.name == ASK_USER_QUESTION) {
        FinishReason::Other(ASK_USER_FINISH.into())
    } else {
        FinishReason::ToolCalls
    }
}

/// A user who answers a pending question with a plain message (not a `tool` message) still
/// answers it: record that message as the tool result, so the history stays well-formed for
/// the model (every call answered) and the question is not left open.
pub fn answer_pending_questions(history: &[Message], new: &mut Vec<Message>) {
    let Some(last) = history.iter().rposition(|m| m.role == Role::Assistant) else { return };
    let answered =
        |id: &str| history[last + 1..].iter().chain(new.iter()).any(|m| m.tool_call_id.as_deref() == Some(id));
    let pending: Vec<String> = history[last]
        .tool_calls
        .iter()
        .filter(|c| c.name == ASK_USER_QUESTION && !answered(&c.id))
        .map(|c| c.id.clone())
        .collect();
    if !new.iter().any(|m| m.role == Role::User) {
        return;
    }
    for (i, id) in pending.into_iter().enumerate() {
        new.insert(i, Message::tool_result(id, "The user did not use the form; their answer is their next message."));
    }
}

/// One suggested next message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Suggestion {
    /// `suggestion_…`, unique per response.
    pub id: String,
    /// Short button text.
    pub label: String,
    /// The message sent when the user picks it.
    pub prompt: String,
}

/// Suggest next messages after `answer` to `question`, asking `model` of `provider`; each gets
/// an id from `ids`. Empty on any failure (fail-open).
pub async fn suggest(
    provider: &dyn ModelProvider,
    model: &str,
    ids: &dyn IdGen,
    policy: &SuggestionPolicy,
    question: &str,
    answer: &str,
) -> Vec<Suggestion> {
    match tokio::time::timeout(
        SUGGESTIONS_TIMEOUT,
        crate::meter::external(suggestion_text(provider, model, policy, question, answer)),
    )
    .await
    {
        Ok(Some(text)) => parse_suggestions(&text, policy.max_items, ids),
        _ => Vec::new(),
    }
}

async fn suggestion_text(
    provider: &dyn ModelProvider,
    model: &str,
    policy: &SuggestionPolicy,
    question: &str,
    answer: &str,
) -> Option<String> {
    let guidance = policy.guidance.as_deref().map(|g| format!(" Guidance: {g}")).unwrap_or_default();
    let system = format!(
        "You suggest what the user might send next in a chat with an assistant. Reply with only JSON: \
         {{\"suggestions\":[{{\"label\":\"…\",\"prompt\":\"…\"}}]}} with at most {} items. label: 2 to 6 words, at most {MAX_LABEL_CHARS} characters; \
         prompt: the whole message in the user's voice.{guidance}",
        policy.max_items
    );
    let answer: String = answer.chars().take(ANSWER_CONTEXT_CHARS).collect();
    let request = ModelRequest {
        model: model.to_owned(),
        messages: vec![Message::system(system), Message::user(format!("User: {question}\n\nAssistant: {answer}"))]
            .into(),
        tools: Vec::new(),
        tool_choice: ToolChoice::None,
        // Asked for natively too: models answer in JSON reliably only when the request says so.
        response_format: Some(json!({"type": "json_object"})),
        reasoning: None,
        max_output_tokens: Some(SUGGESTIONS_MAX_TOKENS),
        temperature: None,
    };
    let mut stream = provider.stream(request).await.ok()?;
    let mut text = String::new();
    while let Some(event) = stream.next().await {
        if let ModelEvent::TextDelta(t) = event.ok()? {
            text.push_str(&t);
        }
    }
    Some(text)
}

/// Accept `{"suggestions":[…]}` or a bare array, possibly wrapped in prose or a code fence;
/// keep well-formed, distinct items, cut to bounds; each gets an id from `ids`.
pub fn parse_suggestions(text: &str, max_items: usize, ids: &dyn IdGen) -> Vec<Suggestion> {
    let value = serde_json::from_str::<Value>(text.trim()).ok().or_else(|| {
        let (start, end) = (text.find(['{', '['])?, text.rfind(['}', ']'])?);
        serde_json::from_str(text.get(start..=end)?).ok()
    });
    let items = match value {
        Some(Value::Array(items)) => items,
        Some(Value::Object(mut o)) => match o.remove("suggestions") {
            Some(Value::Array(items)) => items,
            _ => return Vec::new(),
        },
        _ => return Vec::new(),
    };
    let mut out: Vec<Suggestion> = Vec::new();
    for item in items {
        let field = |k: &str| {
            item.get(k)
                .and_then(Value::as_str)
                .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
                .unwrap_or_default()
        };
        let (label, prompt) = (field("label"), field("prompt"));
        let label: String = label.chars().take(MAX_LABEL_CHARS).collect();
        if label.is_empty()
            || prompt.is_empty()
            || prompt.chars().count() > MAX_PROMPT_CHARS
            || out.iter().any(|s| s.prompt == prompt)
        {
            continue;
        }
        out.push(Suggestion { id: format!("suggestion_{}", ids.next_id()), label, prompt });
        if out.len() == max_items.min(MAX_SUGGESTIONS) {
            break;
        }
    }
    out
}

/// The text of the last user message among `messages`.
pub fn last_user_text(messages: &[Message]) -> Option<String> {
    messages.iter().rev().find(|m| m.role == Role::User).and_then(|m| m.content.as_ref()).map(Content::text)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn suggestions_are_bounded_and_tolerate_prose_around_the_json() {
        let text = "Sure:\n```json\n{\"suggestions\":[{\"label\":\"Show an example of the whole configuration file\",\"prompt\":\"Show me a complete example.\"},\
            {\"label\":\"Again\",\"prompt\":\"Show me a complete example.\"},{\"label\":\"\",\"prompt\":\"x\"},{\"label\":\"Next\",\"prompt\":\"What next?\"},{\"label\":\"More\",\"prompt\":\"More?\"}]}\n```";
        let ids = polpo_store::SequentialIds::default();
        let s = parse_suggestions(text, 2, &ids);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].label.chars().count(), MAX_LABEL_CHARS);
        assert_eq!(s[1].prompt, "What next?");
        assert_eq!(
            (s[0].id.as_str(), s[1].id.as_str()),
            ("suggestion_00000000000000000000000000000001", "suggestion_00000000000000000000000000000002")
        );
        assert!(parse_suggestions("no json here", 3, &ids).is_empty());
        assert!(parse_suggestions("{\"other\": 1}", 3, &ids).is_empty());
    }

    #[test]
    fn questions_follow_the_reference_shape() {
        assert!(
            check_question(
                r#"{"questions":[{"id":"q1","question":"Which plan?","header":"Plan","options":[{"label":"Pro"}]}]}"#
            )
            .is_ok()
        );
        assert!(check_question(r#"{"questions":[]}"#).unwrap_err().starts_with("invalid_arguments"));
        let long = format!(r#"{{"questions":[{{"id":"q","question":"?","header":"{}"}}]}}"#, "h".repeat(31));
        assert!(check_question(&long).is_err());
    }

    #[test]
    fn a_plain_reply_answers_the_pending_question() {
        let ask = Message {
            role: Role::Assistant,
            content: None,
            tool_calls: vec![ToolCall { id: "c1".into(), name: ASK_USER_QUESTION.into(), arguments: "{}".into() }],
            tool_call_id: None,
            name: None,
        };
        let history = vec![Message::user("help"), ask];
        let mut new = vec![Message::user("The Pro plan")];
        answer_pending_questions(&history, &mut new);
        assert_eq!(new.len(), 2);
        assert_eq!(new[0].tool_call_id.as_deref(), Some("c1"));
        assert_eq!(new[1].text_content(), "The Pro plan");
        let mut answered = vec![Message::tool_result("c1", "Pro"), Message::user("thanks")];
        answer_pending_questions(&history, &mut answered);
        assert_eq!(answered.len(), 2);
    }
}
