//! Splitting streamed model output into visible text and `<tool_call>` bodies.
//!
//! Text is released as soon as it cannot be the start of a `<tool_call>` tag, so users see tokens
//! as they decode while a call is never shown as text. Output that opens with `{` is taken as one
//! bare call body (how Qwen writes calls when left to itself). Output that opens with a Markdown
//! block of JSON is held back until the block closes: Qwen2.5-Coder, left to choose, often writes
//! its call that way, and it is a call when it names an offered tool (the caller decides). The
//! same splitter serves grammar-constrained output and free text in which a model wrote a call on
//! its own.

use polpo_core::message::ToolCall;

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";

/// A piece of output, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Visible text.
    Text(String),
    /// The body between `<tool_call>` and `</tool_call>` (or the end of output).
    Call(String),
    /// A ```` ```json ```` block opening the output: a call if `body` names an offered tool,
    /// else the `block` as written.
    Fenced {
        /// The block as the model wrote it, fences included.
        block: String,
        /// The JSON inside the fences.
        body: String,
    },
}

const FENCE: &str = "```";

/// Whether output opening with `text` is a Markdown block of JSON (```` ```json ````, or a bare
/// fence, then a line starting with `{`): `None` while `text` is too short to tell.
fn opens_fenced_json(text: &str) -> Option<bool> {
    let Some(rest) = text.strip_prefix(FENCE) else {
        return (!FENCE.starts_with(text)).then_some(false);
    };
    let rest = match rest.strip_prefix("json") {
        Some(rest) => rest,
        None if "json".starts_with(rest) => return None,
        None => rest,
    };
    let rest = rest.trim_start_matches([' ', '\t']);
    let Some(rest) = rest.strip_prefix('\n') else {
        return if rest.is_empty() { None } else { Some(false) };
    };
    rest.trim_start().chars().next().map(|c| c == '{')
}

/// Streaming splitter state.
#[derive(Debug, Default)]
pub struct Splitter {
    pending: String,
    in_call: bool,
    started: bool,
    bare: bool,
    /// Output opened with a fence: `None` until it is known whether a JSON block follows.
    fenced: Option<Option<bool>>,
}

impl Splitter {
    /// Feed decoded text; returns what is now certain.
    pub fn push(&mut self, text: &str) -> Vec<Piece> {
        if !self.started && !text.is_empty() {
            self.started = true;
            // Output that opens with `{` is a bare call (the grammar allows no prose starting so).
            self.bare = text.starts_with('{');
            self.fenced = text.starts_with('`').then_some(None);
        }
        self.pending.push_str(text);
        let mut out = Vec::new();
        if self.bare {
            return out;
        }
        if let Some(None) = self.fenced {
            self.fenced = Some(opens_fenced_json(&self.pending));
        }
        match self.fenced {
            Some(None) => return out,
            Some(Some(true)) => match self.pending[FENCE.len()..].find(FENCE) {
                None => return out,
                Some(close) => {
                    let end = FENCE.len() + close + FENCE.len();
                    out.push(self.fenced_piece(end));
                }
            },
            _ => {}
        }
        loop {
            if self.in_call {
                let Some(end) = self.pending.find(CLOSE) else {
                    return out;
                };
                out.push(Piece::Call(self.pending[..end].into()));
                self.pending.drain(..end + CLOSE.len());
                self.in_call = false;
            } else if let Some(start) = self.pending.find(OPEN) {
                if start > 0 {
                    out.push(Piece::Text(self.pending[..start].into()));
                }
                self.pending.drain(..start + OPEN.len());
                self.in_call = true;
            } else {
                let keep = partial_tag_len(&self.pending);
                let release = self.pending.len() - keep;
                if release > 0 {
                    out.push(Piece::Text(self.pending[..release].into()));
                    self.pending.drain(..release);
                }
                return out;
            }
        }
    }

    /// The JSON block opening the pending output, up to byte `end`; what follows is split as usual.
    fn fenced_piece(&mut self, end: usize) -> Piece {
        let block: String = self.pending.drain(..end).collect();
        self.fenced = Some(Some(false));
        let inner = block[FENCE.len()..].trim_end_matches(FENCE);
        let body = inner.split_once('\n').map_or("", |(_, json)| json).trim().to_string();
        Piece::Fenced { block, body }
    }

    /// The output ended: whatever is held back, an unterminated call included.
    pub fn finish(mut self) -> Option<Piece> {
        if matches!(self.fenced, Some(Some(true))) {
            let end = self.pending.len();
            return Some(self.fenced_piece(end));
        }
        match (self.in_call || self.bare, self.pending.is_empty()) {
            (true, _) => Some(Piece::Call(self.pending)),
            (false, false) => Some(Piece::Text(self.pending)),
            (false, true) => None,
        }
    }
}

/// Length of the longest suffix of `text` that is a proper prefix of `<tool_call>`.
fn partial_tag_len(text: &str) -> usize {
    (1..OPEN.len()).rev().find(|&n| text.ends_with(&OPEN[..n])).unwrap_or(0)
}

/// A call body `{"name": …, "arguments": {…}}` as a runtime tool call with a fresh id, or `None`
/// when it is not that shape (the caller then shows it as text).
pub fn parse_call(body: &str) -> Option<ToolCall> {
    let value: serde_json::Value = serde_json::from_str(body.trim()).ok()?;
    let name = value.get("name")?.as_str()?.to_string();
    let arguments = match value.get("arguments") {
        None | Some(serde_json::Value::Null) => "{}".to_string(),
        Some(serde_json::Value::String(raw)) => raw.clone(),
        Some(args) => args.to_string(),
    };
    Some(ToolCall { id: format!("call_{}", uuid::Uuid::new_v4().simple()), name, arguments })
}

/// True when `call` names the same tool with the same arguments (as JSON values, so spacing and
/// key order do not count) as one of `earlier`.
pub fn repeats(call: &ToolCall, earlier: &[ToolCall]) -> bool {
    let arguments = |raw: &str| serde_json::from_str::<serde_json::Value>(raw).ok();
    earlier.iter().any(|e| {
        e.name == call.name
            && match (arguments(&e.arguments), arguments(&call.arguments)) {
                (Some(a), Some(b)) => a == b,
                _ => e.arguments == call.arguments,
            }
    })
}

/// How a call body that did not parse is shown: as the text the model wrote.
pub fn unparsed_call_text(body: &str) -> String {
    format!("{OPEN}{body}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(chunks: &[&str]) -> Vec<Piece> {
        let mut s = Splitter::default();
        let mut out: Vec<Piece> = chunks.iter().flat_map(|c| s.push(c)).collect();
        out.extend(s.finish());
        out
    }

    fn texts(pieces: &[Piece]) -> String {
        pieces.iter().map(|p| if let Piece::Text(t) = p { t.as_str() } else { "|" }).collect()
    }

    #[test]
    fn a_call_split_across_tokens_is_never_shown_as_text() {
        let out = split(&["Let me look.", " <tool", "_call>\n{\"name\": \"re", "ad\"}\n</tool_", "call>"]);
        assert_eq!(
            out,
            vec![
                Piece::Text("Let me look.".into()),
                Piece::Text(" ".into()),
                Piece::Call("\n{\"name\": \"read\"}\n".into()),
            ]
        );
    }

    #[test]
    fn text_that_only_looks_like_a_tag_start_is_released() {
        let out = split(&["a <b", "> and <tool", " maybe"]);
        assert_eq!(texts(&out), "a <b> and <tool maybe");
        assert!(out.iter().all(|p| matches!(p, Piece::Text(_))));
        let mut s = Splitter::default();
        assert_eq!(s.push("x <tool_ca"), vec![Piece::Text("x ".into())], "the tag prefix is held back");
    }

    #[test]
    fn output_opening_with_a_brace_is_one_bare_call() {
        assert_eq!(split(&["{\"", "name\": \"ls\"}"]), vec![Piece::Call("{\"name\": \"ls\"}".into())]);
        assert_eq!(texts(&split(&["Use {x}"])), "Use {x}");
    }

    #[test]
    fn a_json_block_opening_the_output_is_held_back_whole() {
        let call = "{\"name\": \"read\", \"arguments\": {\"path\": \"a\"}}";
        let out = split(&[
            "``",
            "`json",
            "\n",
            "{\"name\": \"read\", ",
            "\"arguments\": {\"path\": \"a\"}}\n`",
            "``",
            "\nDone.",
        ]);
        assert_eq!(
            out,
            vec![
                Piece::Fenced { block: format!("```json\n{call}\n```"), body: call.into() },
                Piece::Text("\nDone.".into()),
            ]
        );
        assert_eq!(
            split(&["```\n", "{\"a\": 1}"]),
            vec![Piece::Fenced { block: "```\n{\"a\": 1}".into(), body: "{\"a\": 1}".into() }],
            "an unclosed block comes out at the end"
        );
        assert_eq!(texts(&split(&["```", "python\nprint(1)\n```"])), "```python\nprint(1)\n```");
        assert_eq!(texts(&split(&["```json\n", "[1]\n```"])), "```json\n[1]\n```");
        assert_eq!(texts(&split(&["``"])), "``");
        assert_eq!(texts(&split(&["Use ```json\n{}```"])), "Use ```json\n{}```");
    }

    #[test]
    fn unterminated_calls_come_out_at_the_end() {
        assert_eq!(split(&["<tool_call>{\"name\":"]), vec![Piece::Call("{\"name\":".into())]);
    }

    #[test]
    fn call_bodies_parse_into_calls_with_fresh_ids() {
        let call = parse_call("\n{\"name\": \"read\", \"arguments\": {\"path\": \"a.txt\"}}\n").unwrap();
        assert_eq!(call.name, "read");
        assert_eq!(call.arguments, r#"{"path":"a.txt"}"#);
        assert!(call.id.starts_with("call_"));
        assert_ne!(call.id, parse_call(r#"{"name":"read"}"#).unwrap().id);
        assert_eq!(parse_call(r#"{"name":"ls"}"#).unwrap().arguments, "{}");
        assert!(parse_call("not json").is_none());
        assert_eq!(unparsed_call_text("not json"), "<tool_call>not json");
        assert!(parse_call(r#"{"arguments":{}}"#).is_none());
    }

    #[test]
    fn a_repeat_is_the_same_tool_with_equal_arguments() {
        let earlier = [parse_call(r#"{"name":"read","arguments":{"path":"a","limit":5}}"#).unwrap()];
        let again = parse_call(r#"{"name": "read", "arguments": {"limit": 5, "path": "a"}}"#).unwrap();
        assert!(repeats(&again, &earlier));
        let other_file = parse_call(r#"{"name":"read","arguments":{"path":"b","limit":5}}"#).unwrap();
        let other_tool = parse_call(r#"{"name":"ls","arguments":{"path":"a","limit":5}}"#).unwrap();
        assert!(!repeats(&other_file, &earlier) && !repeats(&other_tool, &earlier));
        assert!(!repeats(&again, &[]));
    }
}
