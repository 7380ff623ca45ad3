//! Output buffers that stay bounded however much a process writes.

use std::collections::VecDeque;

/// Keeps the first and last `cap / 2` bytes of a stream and counts the total, so a runaway
/// process cannot exhaust memory and the model still sees how output began and ended.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CappedOutput {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    half_cap: usize,
    total: u64,
}

impl CappedOutput {
    /// An empty buffer keeping at most `cap` bytes in all.
    pub fn new(cap: usize) -> Self {
        Self { head: Vec::new(), tail: VecDeque::new(), half_cap: cap / 2, total: 0 }
    }

    /// Appends a chunk, dropping the middle once the cap is reached.
    pub fn push(&mut self, mut chunk: &[u8]) {
        self.total += chunk.len() as u64;
        let head_room = self.half_cap.saturating_sub(self.head.len());
        let into_head = head_room.min(chunk.len());
        self.head.extend_from_slice(&chunk[..into_head]);
        chunk = &chunk[into_head..];
        if chunk.len() >= self.half_cap {
            self.tail.clear();
            chunk = &chunk[chunk.len() - self.half_cap..];
        }
        self.tail.extend(chunk);
        let excess = self.tail.len().saturating_sub(self.half_cap);
        self.tail.drain(..excess);
    }

    /// Bytes written in all, including those dropped.
    pub fn total_bytes(&self) -> u64 {
        self.total
    }

    /// True when some of the middle was dropped.
    pub fn is_truncated(&self) -> bool {
        self.total > (self.head.len() + self.tail.len()) as u64
    }

    /// The kept text (lossy UTF-8), with a marker saying how much was omitted where the middle
    /// was dropped.
    pub fn render(&self) -> String {
        let head = String::from_utf8_lossy(&self.head);
        let tail_bytes: Vec<u8> = self.tail.iter().copied().collect();
        let tail = String::from_utf8_lossy(&tail_bytes);
        if self.is_truncated() {
            let kept = (self.head.len() + self.tail.len()) as u64;
            format!("{head}\n... [{} bytes omitted; total output {} bytes] ...\n{tail}", self.total - kept, self.total)
        } else {
            format!("{head}{tail}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::CappedOutput;

    #[test]
    fn small_output_is_kept_whole() {
        let mut out = CappedOutput::new(10);
        out.push(b"abc");
        out.push(b"de");
        assert_eq!(out.render(), "abcde");
        assert!(!out.is_truncated());
    }

    #[test]
    fn large_output_keeps_head_and_tail() {
        let mut out = CappedOutput::new(10);
        for chunk in [&b"0123"[..], b"456789abcdef", b"ghij"] {
            out.push(chunk);
        }
        assert_eq!(out.total_bytes(), 20);
        assert!(out.is_truncated());
        let text = out.render();
        assert!(text.starts_with("01234\n"), "{text}");
        assert!(text.ends_with("\nfghij"), "{text}");
        assert!(text.contains("10 bytes omitted; total output 20 bytes"), "{text}");
    }
}
