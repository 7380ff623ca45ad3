//! Decoding token bytes into text as they stream.
//!
//! A token can end in the middle of a multi-byte character (emoji, accented letters in byte-level
//! vocabularies); the incomplete tail waits for the next token instead of becoming U+FFFD.

/// Bytes of an incomplete character carried to the next token.
#[derive(Debug, Default)]
pub struct Utf8Stream {
    pending: Vec<u8>,
}

impl Utf8Stream {
    /// Add token bytes; returns the text that is complete so far.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let complete = match std::str::from_utf8(&self.pending) {
            Ok(_) => self.pending.len(),
            // An invalid sequence (not just an unfinished one) will never complete: flush lossily.
            Err(e) if e.error_len().is_some() => self.pending.len(),
            Err(e) => e.valid_up_to(),
        };
        let text = String::from_utf8_lossy(&self.pending[..complete]).into_owned();
        self.pending.drain(..complete);
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_character_split_over_tokens_comes_out_whole() {
        let bytes = "é🙂".as_bytes();
        let mut s = Utf8Stream::default();
        assert_eq!(s.push(&bytes[..1]), "");
        assert_eq!(s.push(&bytes[1..3]), "é");
        assert_eq!(s.push(&bytes[3..]), "🙂");
        assert_eq!(s.push(&[0xff, b'a']), "\u{fffd}a");
    }
}
