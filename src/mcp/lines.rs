//! `peer mcp`'s stdin as bounded lines: the blocking side of [`LineSplitter`] under
//! [`Overlong::Skip`], so a line longer than the limit is answered with an error and skipped up
//! to its newline (never buffered whole) while the server keeps serving.

use crate::protocol::frame::{LineSplitter, Overlong, TooLong};
use std::io::{self, BufRead, BufReader, Cursor, Read};
use std::os::fd::AsFd;

/// Input the server reads lines from, which can also tell, without blocking, whether more
/// bytes are already waiting: the reader runs a short call itself only when nothing else was
/// sent meanwhile (see the module comment of `mcp`).
pub trait Input: BufRead {
    /// Bytes can be read now without blocking (or the answer is unknown: `true`).
    fn has_pending(&mut self) -> bool;
}

impl<R: Read + AsFd> Input for BufReader<R> {
    fn has_pending(&mut self) -> bool {
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        if !self.buffer().is_empty() {
            return true;
        }
        let mut fds = [PollFd::new(self.get_ref().as_fd(), PollFlags::POLLIN)];
        // A failed poll says nothing; assume input is waiting (the call is handed off).
        poll(&mut fds, PollTimeout::ZERO).map_or(true, |n| n > 0)
    }
}

impl<T: AsRef<[u8]>> Input for Cursor<T> {
    fn has_pending(&mut self) -> bool {
        let len = self.get_ref().as_ref().len() as u64;
        self.position() < len
    }
}

/// What one [`LineReader::next`] call produced.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// One line without its `\n` (possibly the unterminated last line).
    Complete(Vec<u8>),
    /// A line exceeded the limit; it is discarded through its `\n`.
    TooLong,
    /// End of input with nothing pending.
    Eof,
}

/// Reads bounded lines from a `BufRead`.
pub struct LineReader {
    lines: LineSplitter,
}

impl LineReader {
    pub fn new(max_bytes: usize) -> LineReader {
        LineReader {
            lines: LineSplitter::new(max_bytes, Overlong::Skip),
        }
    }

    /// Part of a line, or whole lines, are buffered: more input is already here.
    pub fn has_buffered(&self) -> bool {
        self.lines.unconsumed_bytes() > 0
    }

    /// The next line, reading more input only when no complete line is buffered.
    pub fn next(&mut self, reader: &mut impl BufRead) -> io::Result<Line> {
        loop {
            if let Some(line) = self.lines.next_line() {
                return Ok(line_of(line));
            }
            let n = match reader.fill_buf() {
                Ok([]) => {
                    return Ok(self.lines.finish().map_or(Line::Eof, line_of));
                }
                Ok(chunk) => {
                    self.lines.push(chunk);
                    chunk.len()
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            reader.consume(n);
        }
    }
}

fn line_of(line: Result<Vec<u8>, TooLong>) -> Line {
    match line {
        Ok(bytes) => Line::Complete(bytes),
        Err(TooLong) => Line::TooLong,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8], max: usize, cap: usize) -> Vec<Line> {
        // A tiny BufReader capacity exercises lines split across reads.
        let mut r = io::BufReader::with_capacity(cap, input);
        let mut reader = LineReader::new(max);
        let mut out = Vec::new();
        loop {
            match reader.next(&mut r).unwrap() {
                Line::Eof => return out,
                l => out.push(l),
            }
        }
    }

    fn complete(s: &str) -> Line {
        Line::Complete(s.as_bytes().to_vec())
    }

    #[test]
    fn splits_bounds_and_recovers() {
        for cap in [1, 3, 64] {
            let got = lines(b"ab\n0123456789\ncd\n\nlast", 5, cap);
            assert_eq!(
                got,
                vec![
                    complete("ab"),
                    Line::TooLong,
                    complete("cd"),
                    complete(""),
                    complete("last"),
                ],
                "capacity {cap}"
            );
        }
        // Exactly at the limit is accepted; one over is not.
        assert_eq!(
            lines(b"12345\n123456\n", 5, 2),
            vec![complete("12345"), Line::TooLong]
        );
        assert_eq!(lines(b"123456", 5, 4), vec![Line::TooLong]);
    }
}
