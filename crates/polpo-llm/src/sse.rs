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
            match memchr::memchr2(b'\n', b'\r', bytes) {
                Some(end) => {
                    self.after_cr = bytes[end] == b'\r';
                    if self.line.is_empty() {
                        // The whole line is in this chunk (a provider's chunk usually holds
                        // whole events): read where it lies, not copied into the line buffer.
                        check_line(end)?;
                        self.field(&bytes[..end], out)?;
                    } else {
                        self.extend_line(&bytes[..end])?;
                        self.end_line(out)?;
                    }
                    bytes = &bytes[end + 1..];
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
        check_line(self.line.len() + part.len())?;
        self.line.extend_from_slice(part);
        Ok(())
    }

    /// Read the line gathered across chunks; the buffer is kept for the next one.
    fn end_line(&mut self, out: &mut Vec<SseEvent>) -> Result<(), LlmError> {
        let line = std::mem::take(&mut self.line);
        let read = self.field(&line, out);
        self.line = line;
        self.line.clear();
        read
    }

    /// One line, without its end: a field, a comment, or the blank line that dispatches.
    fn field(&mut self, line: &[u8], out: &mut Vec<SseEvent>) -> Result<(), LlmError> {
        // `from_utf8` first: its ASCII fast path is quicker than the lossy decoder's, which
        // then only runs on a line that is not UTF-8 (its bad bytes become U+FFFD).
        let line = match std::str::from_utf8(line) {
            Ok(line) => std::borrow::Cow::Borrowed(line),
            Err(_) => String::from_utf8_lossy(line),
        };
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

/// Refuse a line of `len` bytes past [`MAX_LINE_BYTES`].
fn check_line(len: usize) -> Result<(), LlmError> {
    if len > MAX_LINE_BYTES {
        return Err(LlmError::new(
            LlmErrorKind::InvalidResponse,
            format!("stream line longer than {MAX_LINE_BYTES} bytes"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
        let mut big = vec![b'a'; MAX_LINE_BYTES + 1];
        // Still open, and complete in one chunk (read where it lies).
        for tail in [&b""[..], b"\n"] {
            big.extend_from_slice(tail);
            let err = SseDecoder::default().push(&big, &mut Vec::new()).unwrap_err();
            assert_eq!(err.kind, LlmErrorKind::InvalidResponse);
        }
        // Exactly at the bound, complete: accepted.
        let mut line = b"data: ".to_vec();
        line.resize(MAX_LINE_BYTES, b'x');
        line.extend_from_slice(b"\n\n");
        let mut out = Vec::new();
        SseDecoder::default().push(&line, &mut out).unwrap();
        assert_eq!(out[0].data.len(), MAX_LINE_BYTES - "data: ".len());
    }

    #[test]
    fn bytes_that_are_not_utf8_become_replacement_characters() {
        let events = decode(&[b"data: a\xffb\n\n"]);
        assert_eq!(events, vec![SseEvent { data: "a\u{fffd}b".into(), ..SseEvent::default() }]);
    }

    proptest! {
        /// A stream decodes to the same events whether lines arrive whole in one chunk, cut at
        /// random places or byte by byte (every line then gathered in the buffer): the two
        /// ways of reading a line agree, whatever the line ends, fields and bytes.
        #[test]
        fn every_chunking_decodes_alike(
            lines in proptest::collection::vec(
                (
                    proptest::sample::select(vec!["data", "data:", "data: ", "event: ", "id:", ":", "", "retry: "]),
                    proptest::collection::vec(any::<u8>().prop_filter("not an end", |b| *b != b'\n' && *b != b'\r'), 0..12),
                    proptest::sample::select(vec!["\n", "\r", "\r\n", "\n\n", "\r\r"]),
                ),
                0..12,
            ),
            cuts in proptest::collection::vec(0usize..200, 0..6),
        ) {
            let mut stream = Vec::new();
            for (field, value, end) in &lines {
                stream.extend_from_slice(field.as_bytes());
                stream.extend_from_slice(value);
                stream.extend_from_slice(end.as_bytes());
            }
            let whole = decode(&[&stream]);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(stream.len())).collect();
            cuts.sort_unstable();
            let mut pieces = Vec::new();
            let mut from = 0;
            for cut in cuts.into_iter().chain([stream.len()]) {
                pieces.push(&stream[from..cut]);
                from = cut;
            }
            prop_assert_eq!(&decode(&pieces), &whole);
            let bytewise: Vec<&[u8]> = stream.chunks(1).collect();
            prop_assert_eq!(&decode(&bytewise), &whole);
        }
    }
}
