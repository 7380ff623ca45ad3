//! Chat messages, tool calls and usage as the runtime sees them.
//!
//! These are the runtime's own types, not a wire format: the server translates OpenAI wire
//! requests into them, providers translate them into each provider's wire, and stores persist
//! them. Keeping one shape in the middle means each wire is translated exactly once.

use serde::{Deserialize, Serialize};

/// Who said a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions from the runtime (agent instructions, identity, skills index).
    System,
    /// The person or program talking to the agent.
    User,
    /// The model.
    Assistant,
    /// The result of a tool call, answering one `ToolCall` by id.
    Tool,
}

/// One part of a multi-part message (text, an image, a file).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// An image by `https:` or `data:` URL.
    ImageUrl {
        /// `{url, detail?}` as in the OpenAI wire.
        image_url: ImageUrl,
    },
    /// A file attachment (`{file_id}` or inline data), kept as given.
    File {
        /// The file descriptor, passed through untouched.
        file: serde_json::Value,
    },
}

/// An image reference.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageUrl {
    /// `https:` or `data:` URL.
    pub url: String,
    /// `auto`, `low` or `high`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// The content of a message: a plain string or a list of parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Content {
    /// A plain string (the common case).
    Text(String),
    /// Several parts (text, images, files).
    Parts(Vec<ContentPart>),
}

impl Content {
    /// The text of the content: the string, or the text parts joined by newlines.
    pub fn text(&self) -> String {
        match self {
            Content::Text(t) => t.clone(),
            Content::Parts(parts) => parts
                .iter()
                .filter_map(|p| match p {
                    ContentPart::Text { text } => Some(text.as_str()),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }
}

/// A tool call proposed by the model: a name and its arguments as the model wrote them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's call id (`call_…`), echoed by the matching tool message.
    pub id: String,
    /// Tool name as the model wrote it.
    pub name: String,
    /// Arguments as raw JSON text; kept raw because models sometimes write invalid JSON and
    /// the runtime must report that to the model rather than lose it.
    pub arguments: String,
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Who said it.
    pub role: Role,
    /// What was said; `None` for an assistant message that only calls tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Content>,
    /// Tool calls made by an assistant message, in the model's order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For a `tool` message: the id of the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Optional participant name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl Message {
    /// A system message.
    pub fn system(text: impl Into<String>) -> Self {
        Self::text(Role::System, text)
    }

    /// A user message.
    pub fn user(text: impl Into<String>) -> Self {
        Self::text(Role::User, text)
    }

    /// An assistant message with text only.
    pub fn assistant(text: impl Into<String>) -> Self {
        Self::text(Role::Assistant, text)
    }

    /// A tool result answering `call_id`.
    pub fn tool_result(call_id: impl Into<String>, text: impl Into<String>) -> Self {
        Self { tool_call_id: Some(call_id.into()), ..Self::text(Role::Tool, text) }
    }

    fn text(role: Role, text: impl Into<String>) -> Self {
        Self { role, content: Some(Content::Text(text.into())), tool_calls: Vec::new(), tool_call_id: None, name: None }
    }

    /// The text of the message, empty when it has none.
    pub fn text_content(&self) -> String {
        self.content.as_ref().map(Content::text).unwrap_or_default()
    }
}

/// Tokens a model call consumed, as the provider reported them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt (input) tokens.
    pub input_tokens: u64,
    /// Completion (output) tokens, reasoning included.
    pub output_tokens: u64,
}

impl Usage {
    /// Input plus output.
    pub fn total(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }

    /// Add another call's usage to this one.
    pub fn add(&mut self, other: Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
    }
}

/// Why a model stopped producing output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// A natural end: the answer is complete.
    Stop,
    /// The output token limit was reached.
    Length,
    /// The model asked for tool calls.
    ToolCalls,
    /// The provider filtered the output.
    ContentFilter,
    /// Any other reason the provider gave, kept verbatim.
    #[serde(untagged)]
    Other(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_through_the_openai_shape() {
        let json =
            r#"{"role":"assistant","tool_calls":[{"id":"call_1","name":"read","arguments":"{\"path\":\"a\"}"}]}"#;
        let m: Message = serde_json::from_str(json).unwrap();
        assert_eq!(m.tool_calls[0].name, "read");
        assert_eq!(serde_json::to_string(&m).unwrap(), json);
        let parts: Content = serde_json::from_str(r#"[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"https://x/y.png"}},{"type":"text","text":"b"}]"#).unwrap();
        assert_eq!(parts.text(), "a\nb");
    }

    #[test]
    fn unknown_finish_reasons_are_kept() {
        let f: FinishReason = serde_json::from_str(r#""pause_turn""#).unwrap();
        assert_eq!(f, FinishReason::Other("pause_turn".into()));
        let f: FinishReason = serde_json::from_str(r#""tool_calls""#).unwrap();
        assert_eq!(f, FinishReason::ToolCalls);
    }
}
