//! What a fake model answers: a queue of scripted turns, each rendered in whichever wire
//! format the request arrived in.

use serde_json::Value;
use std::time::Duration;

/// A scripted HTTP failure instead of an answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptedError {
    /// HTTP status code.
    pub status: u16,
    /// Response body, sent verbatim (usually the provider's JSON error envelope).
    pub body: String,
    /// Extra response headers (name, value), e.g. `Retry-After` as seconds or an HTTP date.
    pub headers: Vec<(String, String)>,
}

/// How a streamed answer breaks off, for tests of interrupted streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interruption {
    /// Send this many SSE events, then drop the connection.
    DisconnectAfter(usize),
    /// Send this many SSE events, then send nothing more while keeping the connection open.
    StallAfter(usize),
}

/// One scripted model answer. Build it with the constructors and chain the modifiers:
/// `Turn::text("hi").with_reasoning("thinking").usage(12, 3).delay(50)`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Turn {
    /// Visible answer text.
    pub text: Option<String>,
    /// Reasoning text, sent before the answer.
    pub reasoning: Option<String>,
    /// Tool calls: name and arguments object, in order.
    pub tool_calls: Vec<(String, Value)>,
    /// Usage to report as (input, output) tokens; estimated from sizes when unset.
    pub usage: Option<(u64, u64)>,
    /// Wait this long before sending the response headers.
    pub delay: Option<Duration>,
    /// Answer with this error instead.
    pub error: Option<ScriptedError>,
    /// Break the response off part-way.
    pub interruption: Option<Interruption>,
}

impl Turn {
    /// A plain text answer.
    pub fn text(text: impl Into<String>) -> Self {
        Self { text: Some(text.into()), ..Self::default() }
    }

    /// A structured answer: `value` as JSON text. A strict fake sends it as JSON only to a
    /// request that asks for JSON (see the `strict` module), as real models do.
    pub fn json(value: Value) -> Self {
        Self::text(value.to_string())
    }

    /// An answer that only calls tools, e.g. `vec![("read", json!({"path": "a.txt"}))]`.
    pub fn tool_calls<N: Into<String>>(calls: Vec<(N, Value)>) -> Self {
        Self { tool_calls: calls.into_iter().map(|(n, v)| (n.into(), v)).collect(), ..Self::default() }
    }

    /// An HTTP error with this status and body.
    pub fn error(status: u16, body: impl Into<String>) -> Self {
        Self { error: Some(ScriptedError { status, body: body.into(), headers: Vec::new() }), ..Self::default() }
    }

    /// Add (or replace) the visible text.
    pub fn with_text(mut self, text: impl Into<String>) -> Self {
        self.text = Some(text.into());
        self
    }

    /// Add one tool call.
    pub fn with_tool_call(mut self, name: impl Into<String>, arguments: Value) -> Self {
        self.tool_calls.push((name.into(), arguments));
        self
    }

    /// Add reasoning text, streamed before the answer.
    pub fn with_reasoning(mut self, reasoning: impl Into<String>) -> Self {
        self.reasoning = Some(reasoning.into());
        self
    }

    /// Report these token counts.
    pub fn usage(mut self, input_tokens: u64, output_tokens: u64) -> Self {
        self.usage = Some((input_tokens, output_tokens));
        self
    }

    /// Wait `ms` milliseconds before responding.
    pub fn delay(mut self, ms: u64) -> Self {
        self.delay = Some(Duration::from_millis(ms));
        self
    }

    /// For an error turn: send `Retry-After: secs`.
    pub fn retry_after(self, secs: u64) -> Self {
        self.header("retry-after", secs.to_string())
    }

    /// For an error turn: send header `name: value` too (e.g. `Retry-After` as an HTTP date).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        if let Some(e) = &mut self.error {
            e.headers.push((name.into(), value.into()));
        }
        self
    }

    /// Stream `events` SSE events, then drop the connection.
    pub fn disconnect_after(mut self, events: usize) -> Self {
        self.interruption = Some(Interruption::DisconnectAfter(events));
        self
    }

    /// Stream `events` SSE events, then go silent with the connection open.
    pub fn stall_after(mut self, events: usize) -> Self {
        self.interruption = Some(Interruption::StallAfter(events));
        self
    }

    /// Token usage to report: the scripted numbers, or a size-based estimate.
    pub(crate) fn usage_or_estimate(&self, request_bytes: usize) -> (u64, u64) {
        self.usage.unwrap_or_else(|| {
            let out = self.text.as_deref().map_or(0, str::len)
                + self.reasoning.as_deref().map_or(0, str::len)
                + self.tool_calls.iter().map(|(n, a)| n.len() + a.to_string().len()).sum::<usize>();
            ((request_bytes / 4 + 1) as u64, (out / 4 + 1) as u64)
        })
    }
}

/// Split `s` into pieces of at most `n` characters (never inside a UTF-8 character), so
/// clients must reassemble streamed text and tool arguments.
pub(crate) fn pieces(s: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    chars.chunks(n.max(1)).map(|c| c.iter().collect()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_respect_character_boundaries() {
        assert_eq!(pieces("héllo", 2), vec!["hé", "ll", "o"]);
        assert!(pieces("", 3).is_empty());
    }
}
