//! Bounded decoding of `Transfer-Encoding: chunked` response bodies, the form Node's `http`
//! server (dsh-ask-peer) answers in. Chunk-size lines are tokenized by `httparse`; this file
//! adds the limits a hostile server could otherwise exploit: the length of a chunk-size line
//! (extensions included), the number of chunks, the trailer bytes and the decoded total. The
//! decoder is incremental, so a reader can tell when a body is complete without re-scanning
//! what it already checked (pure; no I/O).

/// The bounds one decoder enforces.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Longest chunk-size line, CRLF and any extension included.
    pub line_bytes: usize,
    /// Most chunks, the final zero-size one included.
    pub chunks: usize,
    /// Most trailer bytes after the final chunk, the closing CRLF included.
    pub trailer_bytes: usize,
    /// Most decoded body bytes.
    pub body_bytes: usize,
}

impl Limits {
    /// Generous for any JSON answer, small enough that a hostile stream is cut early.
    pub const fn for_body(body_bytes: usize) -> Limits {
        Limits {
            line_bytes: 256,
            chunks: 1 << 16,
            trailer_bytes: 8 * 1024,
            body_bytes,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Size,
    Data(usize),
    Trailers(usize),
    Done,
}

/// Decodes one chunked body fed as a growing buffer.
#[derive(Debug)]
pub struct Decoder {
    limits: Limits,
    phase: Phase,
    /// Bytes of the encoded buffer consumed so far.
    pos: usize,
    chunks: usize,
    body: Vec<u8>,
}

impl Decoder {
    pub fn new(limits: Limits) -> Decoder {
        Decoder {
            limits,
            phase: Phase::Size,
            pos: 0,
            chunks: 0,
            body: Vec::new(),
        }
    }

    /// Advances over `buf` (every encoded byte received so far, the earlier ones unchanged):
    /// `Ok(true)` once the final chunk and the trailers are complete, `Ok(false)` when more
    /// bytes are needed, `Err` with a reason when the encoding is malformed or over a limit.
    pub fn advance(&mut self, buf: &[u8]) -> Result<bool, String> {
        loop {
            let progressed = match self.phase {
                Phase::Done => return Ok(true),
                Phase::Size => self.size_line(buf)?,
                Phase::Data(n) => self.data(buf, n)?,
                Phase::Trailers(start) => self.trailer_line(buf, start)?,
            };
            if !progressed {
                return Ok(false);
            }
        }
    }

    /// Encoded bytes consumed (the whole body once complete).
    pub fn consumed(&self) -> usize {
        self.pos
    }

    /// The decoded body.
    pub fn into_body(self) -> Vec<u8> {
        self.body
    }

    fn size_line(&mut self, buf: &[u8]) -> Result<bool, String> {
        let rest = &buf[self.pos.min(buf.len())..];
        let window = &rest[..rest.len().min(self.limits.line_bytes)];
        let (used, size) = match httparse::parse_chunk_size(window) {
            Ok(httparse::Status::Complete(v)) => v,
            Ok(httparse::Status::Partial) if window.len() >= self.limits.line_bytes => {
                return Err(format!(
                    "chunk-size line longer than {} bytes",
                    self.limits.line_bytes
                ));
            }
            Ok(httparse::Status::Partial) => return Ok(false),
            Err(_) => return Err("malformed chunk-size line".into()),
        };
        self.chunks += 1;
        if self.chunks > self.limits.chunks {
            return Err(format!("more than {} chunks", self.limits.chunks));
        }
        let room = self.limits.body_bytes - self.body.len();
        if size > room as u64 {
            return Err(format!(
                "chunked body exceeds {} bytes",
                self.limits.body_bytes
            ));
        }
        self.pos += used;
        self.phase = if size == 0 {
            Phase::Trailers(self.pos)
        } else {
            // At most `room`, which is a usize.
            Phase::Data(size as usize)
        };
        Ok(true)
    }

    fn data(&mut self, buf: &[u8], n: usize) -> Result<bool, String> {
        let end = self.pos + n;
        if buf.len() < end + 2 {
            return Ok(false);
        }
        if &buf[end..end + 2] != b"\r\n" {
            return Err("chunk data is not followed by CRLF".into());
        }
        self.body.extend_from_slice(&buf[self.pos..end]);
        self.pos = end + 2;
        self.phase = Phase::Size;
        Ok(true)
    }

    fn trailer_line(&mut self, buf: &[u8], start: usize) -> Result<bool, String> {
        let rest = &buf[self.pos.min(buf.len())..];
        let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") else {
            if buf.len() - start > self.limits.trailer_bytes {
                return Err(format!(
                    "trailers exceed {} bytes",
                    self.limits.trailer_bytes
                ));
            }
            return Ok(false);
        };
        self.pos += eol + 2;
        if self.pos - start > self.limits.trailer_bytes {
            return Err(format!(
                "trailers exceed {} bytes",
                self.limits.trailer_bytes
            ));
        }
        if eol == 0 {
            self.phase = Phase::Done;
        }
        Ok(true)
    }
}

/// Decodes a complete chunked body (pure): the decoded bytes, or why not.
pub fn decode(buf: &[u8], limits: Limits) -> Result<Vec<u8>, String> {
    let mut d = Decoder::new(limits);
    if d.advance(buf)? {
        Ok(d.into_body())
    } else {
        Err("the connection closed mid-answer (chunked body incomplete)".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: Limits = Limits::for_body(1024);

    #[test]
    fn node_style_bodies_decode() {
        assert_eq!(
            decode(b"b\r\n{\"ok\":true}\r\n0\r\n\r\n", L).unwrap(),
            b"{\"ok\":true}"
        );
        // Extensions, upper-case hex, several chunks and a trailer.
        let raw = b"2;x=y\r\n{\"\r\n9\r\nok\":true}\r\n0\r\nx-t: 1\r\n\r\n";
        assert_eq!(decode(raw, L).unwrap(), b"{\"ok\":true}");
        assert_eq!(decode(b"0\r\n\r\n", L).unwrap(), b"");
    }

    #[test]
    fn incremental_feeding_finds_the_end_once() {
        let raw = b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
        let mut d = Decoder::new(L);
        for end in 0..raw.len() {
            assert!(!d.advance(&raw[..end]).unwrap(), "done early at {end}");
        }
        assert!(d.advance(raw).unwrap());
        assert_eq!(d.consumed(), raw.len());
        assert_eq!(d.into_body(), b"abcde");
    }

    #[test]
    fn hostile_encodings_are_refused() {
        let too_big = b"401\r\n";
        assert!(decode(too_big, L).unwrap_err().contains("exceeds"));
        let huge = b"ffffffffffffffff\r\n";
        assert!(decode(huge, L).is_err());
        let mut long_ext = b"1;".to_vec();
        long_ext.resize(300, b'a');
        assert!(decode(&long_ext, L).unwrap_err().contains("longer"));
        let many = b"1\r\na\r\n".repeat(20);
        let few = Limits { chunks: 10, ..L };
        assert!(decode(&many, few).unwrap_err().contains("chunks"));
        let mut trailers = b"0\r\n".to_vec();
        trailers.extend(b"x: y\r\n".repeat(2000));
        assert!(decode(&trailers, L).unwrap_err().contains("trailers"));
        let mut endless = b"0\r\n".to_vec();
        endless.resize(9000, b'a');
        assert!(decode(&endless, L).unwrap_err().contains("trailers"));
        assert!(decode(b"3\r\nabcX\r\n0\r\n\r\n", L).is_err());
        assert!(decode(b"zz\r\n", L).is_err());
        assert!(decode(b"-1\r\n", L).is_err());
        assert!(decode(b"3\r\nab", L).unwrap_err().contains("mid-answer"));
        // Many small chunks add up to the body bound.
        let sum = b"100\r\n".iter().chain([b'a'; 256].iter()).chain(b"\r\n");
        let sum: Vec<u8> = sum.copied().collect::<Vec<u8>>().repeat(5);
        assert!(decode(&sum, L).unwrap_err().contains("exceeds"));
    }
}
