//! What a wire renderer needs to know about the request it answers.

/// Per-request rendering context shared by both wire formats.
pub(crate) struct Render {
    /// The `model` the request named, echoed back like real providers do.
    pub model: String,
    /// 1-based number of the turn served, used to make ids unique.
    pub turn_no: u64,
    /// Characters per streamed delta.
    pub chunk_chars: usize,
    /// The OpenAI request asked for `stream_options.include_usage`.
    pub include_usage: bool,
    /// Size of the request body, for usage estimates.
    pub request_bytes: usize,
}

impl Render {
    /// A unique tool-call id (`call_…` for OpenAI, `toolu_…` for Anthropic).
    pub fn call_id(&self, prefix: &str, index: usize) -> String {
        format!("{prefix}_fake_{}_{index}", self.turn_no)
    }
}
