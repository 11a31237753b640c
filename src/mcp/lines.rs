//! Bounded newline-delimited reading: a line longer than the limit is skipped up to its
//! newline (never buffered whole) so the server can answer with an error and keep serving.

use std::io::{self, BufRead};

/// What one [`read_line`] call produced.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// `buf` holds one line without its `\n` (possibly the unterminated last line).
    Complete,
    /// The line exceeded the limit and was discarded through its `\n`; `buf` is empty.
    TooLong,
    /// End of input with nothing pending.
    Eof,
}

/// Reads the next line into `buf` (cleared first), holding at most `max_bytes` of it.
pub fn read_line(
    reader: &mut impl BufRead,
    max_bytes: usize,
    buf: &mut Vec<u8>,
) -> io::Result<Line> {
    buf.clear();
    let mut too_long = false;
    loop {
        let chunk = match reader.fill_buf() {
            Ok(chunk) => chunk,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            return Ok(match (too_long, buf.is_empty()) {
                (true, _) => Line::TooLong,
                (false, true) => Line::Eof,
                (false, false) => Line::Complete,
            });
        }
        let newline = chunk.iter().position(|&b| b == b'\n');
        let take = newline.unwrap_or(chunk.len());
        if !too_long {
            if buf.len() + take > max_bytes {
                too_long = true;
                buf.clear();
            } else {
                buf.extend_from_slice(&chunk[..take]);
            }
        }
        reader.consume(take + usize::from(newline.is_some()));
        if newline.is_some() {
            return Ok(if too_long {
                Line::TooLong
            } else {
                Line::Complete
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8], max: usize, cap: usize) -> Vec<(Line, Vec<u8>)> {
        // A tiny BufReader capacity exercises lines split across reads.
        let mut r = io::BufReader::with_capacity(cap, input);
        let mut out = Vec::new();
        let mut buf = Vec::new();
        loop {
            let l = read_line(&mut r, max, &mut buf).unwrap();
            if l == Line::Eof {
                return out;
            }
            out.push((l, buf.clone()));
        }
    }

    #[test]
    fn splits_bounds_and_recovers() {
        for cap in [1, 3, 64] {
            let got = lines(b"ab\n0123456789\ncd\n\nlast", 5, cap);
            assert_eq!(
                got,
                vec![
                    (Line::Complete, b"ab".to_vec()),
                    (Line::TooLong, vec![]),
                    (Line::Complete, b"cd".to_vec()),
                    (Line::Complete, vec![]),
                    (Line::Complete, b"last".to_vec()),
                ],
                "capacity {cap}"
            );
        }
        // Exactly at the limit is accepted; one over is not.
        assert_eq!(
            lines(b"12345\n123456\n", 5, 2)[0],
            (Line::Complete, b"12345".to_vec())
        );
        assert_eq!(lines(b"12345\n123456\n", 5, 2)[1].0, Line::TooLong);
        assert_eq!(lines(b"123456", 5, 4), vec![(Line::TooLong, vec![])]);
    }
}
