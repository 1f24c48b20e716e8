//! Newline-delimited framing with bounded memory, and the nesting-depth scan that runs
//! before any JSON value is built.
//!
//! The splitter never holds more than `LINE_BYTES_MAX + 1` bytes of one line: past that it
//! discards until the next newline and reports the line as too long, so a hostile client
//! cannot make the server buffer without limit, and the next line is read normally.

use crate::limits::LINE_BYTES_MAX;
/// The largest chunk read from the stream at once.
pub const READ_CHUNK_BYTES: usize = 64 * 1024;

/// One unit of input, as the protocol layer sees it.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// A complete line, newline (and a trailing carriage return) removed.
    Line(Vec<u8>),
    /// A line over `LINE_BYTES_MAX`; its bytes were discarded. `bytes` counts them.
    TooLong { bytes: usize },
}

/// Splits a byte stream into frames.
#[derive(Default)]
pub struct LineSplitter {
    /// Bytes of the current, unterminated line (never more than `LINE_BYTES_MAX + 1`).
    pending: Vec<u8>,
    /// Bytes of the current line dropped because it grew past the limit.
    discarded: usize,
    /// Complete frames not yet taken.
    ready: std::collections::VecDeque<Frame>,
}

impl LineSplitter {
    pub fn new() -> LineSplitter {
        LineSplitter::default()
    }

    /// Feeds a chunk of input. Frames become available through `next_frame`.
    pub fn feed(&mut self, mut chunk: &[u8]) {
        while !chunk.is_empty() {
            match chunk.iter().position(|&b| b == b'\n') {
                Some(newline) => {
                    self.take_bytes(&chunk[..newline]);
                    self.end_line();
                    chunk = &chunk[newline + 1..];
                }
                None => {
                    self.take_bytes(chunk);
                    chunk = &[];
                }
            }
        }
    }

    pub fn next_frame(&mut self) -> Option<Frame> {
        self.ready.pop_front()
    }

    /// At end of input: the number of bytes of an unterminated last line, which is dropped
    /// (a message is only complete with its newline).
    pub fn finish(&mut self) -> usize {
        let partial = self.pending.len() + self.discarded;
        self.pending.clear();
        self.discarded = 0;
        partial
    }

    fn take_bytes(&mut self, bytes: &[u8]) {
        if self.discarded > 0 {
            self.discarded += bytes.len();
            return;
        }
        let room = LINE_BYTES_MAX + 1 - self.pending.len();
        if bytes.len() <= room {
            self.pending.extend_from_slice(bytes);
        } else {
            // One byte over the limit is enough to know the line is too long; a trailing
            // carriage return cannot bring it back under, so drop everything now.
            self.discarded = self.pending.len() + bytes.len();
            self.pending = Vec::new();
        }
    }

    fn end_line(&mut self) {
        if self.discarded > 0 {
            self.ready.push_back(Frame::TooLong { bytes: self.discarded });
            self.discarded = 0;
            return;
        }
        let mut line = std::mem::take(&mut self.pending);
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        if line.len() > LINE_BYTES_MAX {
            self.ready.push_back(Frame::TooLong { bytes: line.len() });
        } else if !line.iter().all(u8::is_ascii_whitespace) {
            self.ready.push_back(Frame::Line(line));
        }
        assert!(self.pending.is_empty());
    }
}

/// The deepest nesting of `[` and `{` in `bytes`, outside strings, stopping early once it
/// exceeds `limit`. Runs on raw bytes, before parsing, so a deep line costs no allocation.
pub fn depth_exceeds(bytes: &[u8], limit: usize) -> bool {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for &b in bytes {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > limit {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(input: &[&[u8]]) -> Vec<Frame> {
        let mut splitter = LineSplitter::new();
        let mut out = Vec::new();
        for chunk in input {
            splitter.feed(chunk);
            while let Some(frame) = splitter.next_frame() {
                out.push(frame);
            }
        }
        out
    }

    #[test]
    fn splits_lines_across_chunks() {
        let got = frames(&[b"{\"a\"", b":1}\n{\"b\":2}\r\n\n  \n{"]);
        assert_eq!(got, vec![Frame::Line(b"{\"a\":1}".to_vec()), Frame::Line(b"{\"b\":2}".to_vec())]);
    }

    #[test]
    fn a_line_at_the_limit_passes_and_one_over_is_refused() {
        let at_limit = vec![b'x'; LINE_BYTES_MAX];
        let over = vec![b'y'; LINE_BYTES_MAX + 1];
        let got = frames(&[&at_limit, b"\n", &over[..10], &over[10..], b"\nok\n"]);
        assert_eq!(got.len(), 3);
        assert_eq!(got[0], Frame::Line(at_limit));
        assert_eq!(got[1], Frame::TooLong { bytes: LINE_BYTES_MAX + 1 });
        assert_eq!(got[2], Frame::Line(b"ok".to_vec()));
    }

    #[test]
    fn depth_scan_ignores_brackets_in_strings() {
        let deep = "[".repeat(crate::limits::DEPTH_MAX + 1);
        assert!(depth_exceeds(deep.as_bytes(), crate::limits::DEPTH_MAX));
        let at_limit = format!("{}{}", "[".repeat(crate::limits::DEPTH_MAX), "]".repeat(crate::limits::DEPTH_MAX));
        assert!(!depth_exceeds(at_limit.as_bytes(), crate::limits::DEPTH_MAX));
        let quoted = format!("{{\"k\":\"{}\\\"{}\"}}", "[".repeat(100), "{".repeat(100));
        assert!(!depth_exceeds(quoted.as_bytes(), crate::limits::DEPTH_MAX));
    }
}
