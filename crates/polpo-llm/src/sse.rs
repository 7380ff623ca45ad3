//! A hand-written server-sent-events decoder with bounded line and event sizes.
//!
//! Written by hand because provider streams are untrusted input: every buffer here has a
//! ceiling, and the decoder is a plain state machine fed byte slices, easy to test and fuzz.
//! Public so every SSE client of the project (providers, the CLI following a run) reads
//! streams through the same bounded code.

use crate::{LlmError, LlmErrorKind};

/// Longest line accepted.
const MAX_LINE_BYTES: usize = 4 * 1024 * 1024;
/// Largest `data` payload of one event.
const MAX_EVENT_BYTES: usize = 8 * 1024 * 1024;

/// One dispatched event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, when given.
    pub event: Option<String>,
    /// The `id:` field of this event, when given (what a client resumes from with
    /// `Last-Event-ID`).
    pub id: Option<String>,
    /// The `data:` lines joined by newlines.
    pub data: String,
}

/// Incremental decoder: feed it chunks as they arrive.
#[derive(Debug, Default)]
pub struct SseDecoder {
    line: Vec<u8>,
    after_cr: bool,
    event: Option<String>,
    id: Option<String>,
    data: String,
    has_data: bool,
}

impl SseDecoder {
    /// Decode `bytes`, appending complete events to `out`.
    pub fn push(&mut self, mut bytes: &[u8], out: &mut Vec<SseEvent>) -> Result<(), LlmError> {
        while !bytes.is_empty() {
            if self.after_cr {
                self.after_cr = false;
                if bytes[0] == b'\n' {
                    bytes = &bytes[1..];
                    continue;
                }
            }
            match bytes.iter().position(|&b| b == b'\n' || b == b'\r') {
                Some(end) => {
                    self.extend_line(&bytes[..end])?;
                    self.after_cr = bytes[end] == b'\r';
                    bytes = &bytes[end + 1..];
                    self.end_line(out)?;
                }
                None => {
                    self.extend_line(bytes)?;
                    bytes = &[];
                }
            }
        }
        Ok(())
    }

    /// The body ended: dispatch a last event that lacked its blank line.
    pub fn finish(&mut self, out: &mut Vec<SseEvent>) -> Result<(), LlmError> {
        if !self.line.is_empty() {
            self.end_line(out)?;
        }
        self.dispatch(out);
        Ok(())
    }

    fn extend_line(&mut self, part: &[u8]) -> Result<(), LlmError> {
        if self.line.len() + part.len() > MAX_LINE_BYTES {
            return Err(LlmError::new(
                LlmErrorKind::InvalidResponse,
                format!("stream line longer than {MAX_LINE_BYTES} bytes"),
            ));
        }
        self.line.extend_from_slice(part);
        Ok(())
    }

    fn end_line(&mut self, out: &mut Vec<SseEvent>) -> Result<(), LlmError> {
        let line = std::mem::take(&mut self.line);
        let line = String::from_utf8_lossy(&line);
        if line.is_empty() {
            self.dispatch(out);
            return Ok(());
        }
        if line.starts_with(':') {
            return Ok(());
        }
        let (field, value) = line.split_once(':').unwrap_or((&line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "data" => {
                if self.data.len() + value.len() + 1 > MAX_EVENT_BYTES {
                    return Err(LlmError::new(
                        LlmErrorKind::InvalidResponse,
                        format!("stream event larger than {MAX_EVENT_BYTES} bytes"),
                    ));
                }
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.event = Some(value.to_owned()),
            "id" => self.id = Some(value.to_owned()),
            _ => {}
        }
        Ok(())
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        let (event, id) = (self.event.take(), self.id.take());
        if std::mem::take(&mut self.has_data) {
            out.push(SseEvent { event, id, data: std::mem::take(&mut self.data) });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut d = SseDecoder::default();
        let mut out = Vec::new();
        for c in chunks {
            d.push(c, &mut out).unwrap();
        }
        d.finish(&mut out).unwrap();
        out
    }

    #[test]
    fn events_split_anywhere_reassemble() {
        let whole =
            b"event: a\nid: 7\ndata: {\"x\":1}\n\n: ping\n\ndata: one\ndata: two\r\n\r\ndata:tight\r\rdata: last";
        let text = |data: &str| SseEvent { data: data.into(), ..SseEvent::default() };
        let expected = vec![
            SseEvent { event: Some("a".into()), id: Some("7".into()), data: "{\"x\":1}".into() },
            text("one\ntwo"),
            text("tight"),
            text("last"),
        ];
        assert_eq!(decode(&[whole]), expected);
        for cut in 1..whole.len() {
            assert_eq!(decode(&[&whole[..cut], &whole[cut..]]), expected, "cut at {cut}");
        }
        let bytewise: Vec<&[u8]> = whole.chunks(1).collect();
        assert_eq!(decode(&bytewise), expected);
    }

    #[test]
    fn oversized_lines_are_refused() {
        let mut d = SseDecoder::default();
        let big = vec![b'a'; MAX_LINE_BYTES + 1];
        let err = d.push(&big, &mut Vec::new()).unwrap_err();
        assert_eq!(err.kind, LlmErrorKind::InvalidResponse);
    }
}
