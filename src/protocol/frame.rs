//! Newline-delimited input, bounded before anything parses it. [`LineSplitter`] is the one
//! sans-IO line splitter of the crate: peer frames ([`FrameDecoder`]), `peer mcp`'s stdin and
//! the benchmark's ready lines all cut their bytes with it, so "how long may a line be" and
//! "what happens to a longer one" are answered here once.
//!
//! - A line is the bytes before a `\n`; the `\n` is dropped, a `\r` before it is kept (JSON
//!   ignores it, and the readers above decide what whitespace means).
//! - A line of at most `max_line_bytes` is produced whole; a longer one is reported as
//!   [`TooLong`] as soon as the buffer proves it (with or without its newline), never buffered
//!   whole. What follows depends on [`Overlong`], chosen by the caller.
//! - Memory stays within `max_line_bytes` plus the chunk being pushed.
//! - At end of input, [`LineSplitter::finish`] hands out an unterminated last line.
//!
//! [`FrameDecoder`] adds the peer-frame rules on top: blank lines are skipped, each line must
//! be UTF-8 (checked per complete line, so multibyte characters split across reads are fine),
//! and an overlong frame ends the stream.

/// What happens after a line longer than the bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overlong {
    /// Report it once and produce nothing more. For peer connections: the other side is a
    /// program that broke the announced `frameBytes`, and skipping its line would mean reading
    /// an unbounded number of bytes for it, so the connection is answered and closed.
    Stop,
    /// Report it once, discard everything up to its newline, and go on with the next line.
    /// For `peer mcp`'s stdin: one oversized request must not end an agent's session; the
    /// server answers it with an error and keeps serving (the discarded bytes are never held).
    Skip,
}

/// A line exceeded the bound (its bytes were discarded, never parsed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooLong;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Lines,
    /// Inside an overlong line whose newline has not arrived yet ([`Overlong::Skip`]).
    Skipping,
    /// After an overlong line under [`Overlong::Stop`]: nothing more is produced.
    Stopped,
}

/// Splits a byte stream into bounded lines. Feed it with [`LineSplitter::push`], drain it with
/// [`LineSplitter::next_line`] until that returns `None`, and call [`LineSplitter::finish`] at
/// end of input for an unterminated last line.
#[derive(Debug)]
pub struct LineSplitter {
    max_line_bytes: usize,
    overlong: Overlong,
    buf: Vec<u8>,
    /// Start of the first unconsumed byte in `buf`.
    start: usize,
    /// Bytes after `start` already searched for a newline, so each byte is scanned once.
    scanned: usize,
    state: State,
}

impl LineSplitter {
    pub fn new(max_line_bytes: usize, overlong: Overlong) -> LineSplitter {
        LineSplitter {
            max_line_bytes,
            overlong,
            buf: Vec::new(),
            start: 0,
            scanned: 0,
            state: State::Lines,
        }
    }

    /// Changes the bound; bytes already buffered are judged by it from the next line on.
    pub fn set_max_line_bytes(&mut self, max_line_bytes: usize) {
        self.max_line_bytes = max_line_bytes;
    }

    /// Appends bytes read from the input. Consumed bytes are dropped first, so the buffer
    /// holds at most one partial line (≤ `max_line_bytes`) plus `bytes`; while an overlong
    /// line is being skipped, its bytes are dropped without being copied.
    pub fn push(&mut self, bytes: &[u8]) {
        let bytes = match self.state {
            State::Stopped => return,
            State::Lines => bytes,
            State::Skipping => match bytes.iter().position(|&b| b == b'\n') {
                None => return,
                Some(newline) => {
                    self.state = State::Lines;
                    bytes.get(newline + 1..).unwrap_or_default()
                }
            },
        };
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// True after an overlong line under [`Overlong::Stop`]; nothing more will be produced.
    pub fn is_stopped(&self) -> bool {
        self.state == State::Stopped
    }

    /// Bytes currently held (consumed bytes included until the next push).
    pub fn buffered_bytes(&self) -> usize {
        self.buf.len()
    }

    /// Bytes pushed and not yet returned as (or skipped with) a line.
    pub fn unconsumed_bytes(&self) -> usize {
        self.buf.len().saturating_sub(self.start)
    }

    /// The next complete line without its `\n`; `None` means more bytes are needed (or the
    /// splitter stopped).
    pub fn next_line(&mut self) -> Option<Result<Vec<u8>, TooLong>> {
        if self.state != State::Lines {
            return None;
        }
        let pending = self.buf.get(self.start..).unwrap_or_default();
        let from = self.scanned.min(pending.len());
        let newline = find_newline(pending.get(from..).unwrap_or_default());
        let Some(offset) = newline else {
            self.scanned = pending.len();
            if pending.len() > self.max_line_bytes {
                self.overlong_line(false);
                return Some(Err(TooLong));
            }
            return None;
        };
        let end = from + offset;
        let line =
            (end <= self.max_line_bytes).then(|| pending.get(..end).unwrap_or_default().to_vec());
        self.start += end + 1;
        self.scanned = 0;
        if line.is_none() {
            self.overlong_line(true);
        }
        Some(line.ok_or(TooLong))
    }

    /// At end of input: the unterminated last line, if bytes of one are pending. An overlong
    /// line was already reported by [`LineSplitter::next_line`] and gives `None` here.
    pub fn finish(&mut self) -> Option<Result<Vec<u8>, TooLong>> {
        if let Some(line) = self.next_line() {
            return Some(line);
        }
        if self.state != State::Lines {
            return None;
        }
        let rest = self.buf.get(self.start..).unwrap_or_default().to_vec();
        self.buf.clear();
        self.start = 0;
        self.scanned = 0;
        (!rest.is_empty()).then_some(Ok(rest))
    }

    /// After an overlong line: under `Stop` every buffered byte goes and nothing more comes;
    /// under `Skip` the bytes go too when the line's newline has not arrived yet, and so do
    /// the next pushes' bytes up to it.
    fn overlong_line(&mut self, newline_seen: bool) {
        self.state = match (self.overlong, newline_seen) {
            (Overlong::Stop, _) => State::Stopped,
            (Overlong::Skip, false) => State::Skipping,
            (Overlong::Skip, true) => return,
        };
        self.buf = Vec::new();
        self.start = 0;
        self.scanned = 0;
    }
}

/// Why one frame could not be produced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameError {
    /// A line exceeded the frame bound. The decoder is finished: the caller answers
    /// `FRAME_TOO_LARGE` and closes, because the rest of the stream cannot be re-synchronised
    /// without reading unbounded bytes ([`Overlong::Stop`]).
    TooLarge,
    /// A complete line was not valid UTF-8. Only that frame is lost; decoding continues.
    InvalidUtf8,
}

/// Splits a peer connection's byte stream into frames. Feed it with [`FrameDecoder::push`],
/// then drain it with [`FrameDecoder::next_frame`] (or iterate) until it returns `None`.
pub struct FrameDecoder {
    lines: LineSplitter,
}

impl FrameDecoder {
    pub fn new(max_frame_bytes: usize) -> FrameDecoder {
        FrameDecoder {
            lines: LineSplitter::new(max_frame_bytes, Overlong::Stop),
        }
    }

    /// Adopts the bound the other side announced (a root's `frameBytes`); bytes already
    /// buffered are judged by the new bound from the next frame on.
    pub fn set_max_frame_bytes(&mut self, max_frame_bytes: usize) {
        self.lines.set_max_line_bytes(max_frame_bytes);
    }

    /// Appends bytes read from the stream (see [`LineSplitter::push`]).
    pub fn push(&mut self, bytes: &[u8]) {
        self.lines.push(bytes);
    }

    /// True once a `TooLarge` has been returned; nothing more will be produced.
    pub fn is_failed(&self) -> bool {
        self.lines.is_stopped()
    }

    /// Bytes currently held (consumed bytes included until the next push).
    pub fn buffered_bytes(&self) -> usize {
        self.lines.buffered_bytes()
    }

    /// The next complete frame without its `\n` (a trailing `\r` is kept; JSON ignores it).
    /// Blank lines are skipped. `None` means more bytes are needed (or the decoder failed).
    pub fn next_frame(&mut self) -> Option<Result<Vec<u8>, FrameError>> {
        loop {
            match self.lines.next_line()? {
                Err(TooLong) => return Some(Err(FrameError::TooLarge)),
                Ok(line) if line.iter().all(u8::is_ascii_whitespace) => continue,
                Ok(line) if std::str::from_utf8(&line).is_err() => {
                    return Some(Err(FrameError::InvalidUtf8));
                }
                Ok(line) => return Some(Ok(line)),
            }
        }
    }
}

impl Iterator for FrameDecoder {
    type Item = Result<Vec<u8>, FrameError>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_frame()
    }
}

/// The index of the first `\n` in `bytes`. Every byte of every frame passes here, so it looks
/// at eight bytes per step: a word XORed with eight `\n` bytes has a zero byte exactly where
/// the word has a `\n` (the classic has-zero-byte test), and only the word that does is
/// searched byte by byte.
fn find_newline(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    const NEWLINES: u64 = u64::from_ne_bytes([b'\n'; 8]);
    let mut at = 0;
    for word in bytes.chunks_exact(8) {
        let w = u64::from_ne_bytes(word.try_into().unwrap_or([0; 8])) ^ NEWLINES;
        if w.wrapping_sub(ONES) & !w & HIGHS != 0 {
            break;
        }
        at += 8;
    }
    let rest = bytes.get(at..)?;
    rest.iter().position(|&b| b == b'\n').map(|i| at + i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The word-at-a-time search finds what a byte-by-byte search finds, wherever the
        /// newline sits (or none), next to any other byte value.
        #[test]
        fn find_newline_is_the_first_newline(
            bytes in proptest::collection::vec(prop_oneof![Just(b'\n'), Just(0x8a_u8), Just(0x0b_u8), any::<u8>()], 0..40),
            skip in 0usize..40,
        ) {
            let bytes = bytes.get(skip.min(bytes.len())..).unwrap_or_default();
            prop_assert_eq!(find_newline(bytes), bytes.iter().position(|&b| b == b'\n'));
        }
    }

    fn all(d: &mut FrameDecoder) -> Vec<Result<Vec<u8>, FrameError>> {
        d.by_ref().collect()
    }

    /// Every line the splitter yields for `input` pushed in chunks of `cut`, then `finish`.
    fn split(
        input: &[u8],
        max: usize,
        overlong: Overlong,
        cut: usize,
    ) -> Vec<Result<Vec<u8>, TooLong>> {
        let mut s = LineSplitter::new(max, overlong);
        let mut got = Vec::new();
        for chunk in input.chunks(cut.max(1)) {
            s.push(chunk);
            got.extend(std::iter::from_fn(|| s.next_line()));
        }
        got.extend(s.finish());
        got
    }

    fn ok(s: &str) -> Result<Vec<u8>, TooLong> {
        Ok(s.as_bytes().to_vec())
    }

    #[test]
    fn splitter_joins_partial_lines_and_keeps_blank_ones() {
        for cut in [1, 2, 3, 64] {
            for mode in [Overlong::Stop, Overlong::Skip] {
                let got = split(b"ab\n\ncd\nlast", 8, mode, cut);
                assert_eq!(
                    got,
                    vec![ok("ab"), ok(""), ok("cd"), ok("last")],
                    "cut {cut}"
                );
            }
        }
    }

    #[test]
    fn splitter_keeps_the_carriage_return_of_crlf() {
        assert_eq!(
            split(b"a\r\nb\r\n", 4, Overlong::Skip, 1),
            vec![ok("a\r"), ok("b\r")]
        );
        // The `\r` counts against the bound: 4 bytes and a CR are one too many.
        assert_eq!(split(b"abcd\r\n", 4, Overlong::Skip, 2), vec![Err(TooLong)]);
    }

    #[test]
    fn splitter_accepts_exactly_the_limit() {
        for cut in [1, 4, 5, 6, 64] {
            assert_eq!(split(b"abcd\n", 4, Overlong::Stop, cut), vec![ok("abcd")]);
            assert_eq!(split(b"abcd", 4, Overlong::Stop, cut), vec![ok("abcd")]);
            assert_eq!(
                split(b"abcde\n", 4, Overlong::Stop, cut),
                vec![Err(TooLong)]
            );
        }
    }

    #[test]
    fn overlong_lines_stop_or_are_skipped_to_their_newline() {
        let input = b"ab\n0123456789\ncd\n\nlast";
        for cut in [1, 3, 5, 64] {
            assert_eq!(
                split(input, 5, Overlong::Skip, cut),
                vec![ok("ab"), Err(TooLong), ok("cd"), ok(""), ok("last")],
                "cut {cut}"
            );
            assert_eq!(
                split(input, 5, Overlong::Stop, cut),
                vec![ok("ab"), Err(TooLong)]
            );
        }
        // Reported once, before its newline arrives, and its bytes are never held.
        let mut s = LineSplitter::new(4, Overlong::Skip);
        s.push(b"abcde");
        assert_eq!(s.next_line(), Some(Err(TooLong)));
        s.push(&[b'x'; 100]);
        assert_eq!((s.next_line(), s.buffered_bytes()), (None, 0));
        s.push(b"xx\nok\n");
        assert_eq!(s.next_line(), Some(ok("ok")));
        let mut s = LineSplitter::new(4, Overlong::Stop);
        s.push(b"abcde");
        assert_eq!(s.next_line(), Some(Err(TooLong)));
        s.push(b"\nok\n");
        assert!(s.is_stopped());
        assert_eq!(
            (s.next_line(), s.finish(), s.buffered_bytes()),
            (None, None, 0)
        );
    }

    #[test]
    fn end_of_input_mid_line() {
        // An unterminated last line is produced by `finish`, nothing when nothing is pending,
        // and an overlong one (already reported) is not reported twice.
        assert_eq!(
            split(b"a\nbc", 4, Overlong::Skip, 1),
            vec![ok("a"), ok("bc")]
        );
        assert_eq!(split(b"a\n", 4, Overlong::Skip, 1), vec![ok("a")]);
        assert_eq!(split(b"", 4, Overlong::Skip, 1), vec![]);
        assert_eq!(
            split(b"a\n123456", 4, Overlong::Skip, 2),
            vec![ok("a"), Err(TooLong)]
        );
        let mut s = LineSplitter::new(4, Overlong::Skip);
        s.push(b"abc");
        assert_eq!(s.next_line(), None);
        assert_eq!(s.finish(), Some(ok("abc")));
        assert_eq!(s.finish(), None);
    }

    #[test]
    fn split_coalesced_and_blank_lines() {
        let mut d = FrameDecoder::new(16);
        d.push(b"ab");
        assert_eq!(all(&mut d), vec![]);
        d.push(b"c\n\n\r\nde\nf");
        assert_eq!(all(&mut d), vec![Ok(b"abc".to_vec()), Ok(b"de".to_vec())]);
        d.push(b"\n");
        assert_eq!(all(&mut d), vec![Ok(b"f".to_vec())]);
    }

    #[test]
    fn multibyte_split_across_pushes() {
        let text = "héllo ☃\n".as_bytes();
        let mut d = FrameDecoder::new(64);
        let mut got = Vec::new();
        for b in text {
            d.push(std::slice::from_ref(b));
            got.extend(d.by_ref());
        }
        assert_eq!(got, vec![Ok("héllo ☃".as_bytes().to_vec())]);
    }

    #[test]
    fn invalid_utf8_loses_only_that_frame() {
        let mut d = FrameDecoder::new(16);
        d.push(b"ok\n\xff\xfe\nnext\n");
        assert_eq!(
            all(&mut d),
            vec![
                Ok(b"ok".to_vec()),
                Err(FrameError::InvalidUtf8),
                Ok(b"next".to_vec())
            ]
        );
    }

    #[test]
    fn oversize_is_detected_at_the_exact_edge() {
        let mut d = FrameDecoder::new(4);
        d.push(b"abcd\n");
        assert_eq!(d.next_frame(), Some(Ok(b"abcd".to_vec())));
        d.push(b"abcde\n");
        assert_eq!(d.next_frame(), Some(Err(FrameError::TooLarge)));
        assert!(d.is_failed());
        assert_eq!(d.next_frame(), None);
        // Without a newline: detected as soon as the partial line exceeds the bound.
        let mut d = FrameDecoder::new(4);
        d.push(b"abcd");
        assert_eq!(d.next_frame(), None);
        d.push(b"e");
        assert_eq!(d.next_frame(), Some(Err(FrameError::TooLarge)));
        d.push(&[b'x'; 100]);
        assert_eq!(d.buffered_bytes(), 0);
    }

    #[test]
    fn memory_is_bounded_by_frame_plus_chunk() {
        let mut d = FrameDecoder::new(8);
        for _ in 0..1000 {
            d.push(b"12\n345\n67");
            while let Some(f) = d.next_frame() {
                assert!(f.is_ok());
            }
            assert!(d.buffered_bytes() <= 8 + 9);
        }
    }

    fn frame_strategy() -> impl Strategy<Value = Vec<u8>> {
        // Non-blank frames without newlines, including multibyte characters.
        proptest::string::string_regex("[a-zé☃ {}\":,0-9]{0,24}[a-z☃]")
            .unwrap_or_else(|_| unreachable!())
            .prop_map(String::into_bytes)
    }

    proptest! {
        /// Under `Skip`, any chunking gives what splitting the whole input at once gives:
        /// each line, or one `TooLong` per overlong line; memory stays within the bound.
        #[test]
        fn skip_matches_the_whole_input_model(
            input in proptest::collection::vec(prop_oneof![Just(b'\n'), Just(b'\r'), Just(b'a'), any::<u8>()], 0..200),
            max in 0usize..24,
            cut in 1usize..32,
        ) {
            let mut model: Vec<Result<Vec<u8>, TooLong>> = input
                .split(|&b| b == b'\n')
                .map(|l| if l.len() > max { Err(TooLong) } else { Ok(l.to_vec()) })
                .collect();
            // The piece after the last newline is a line only when it is not empty.
            if model.last() == Some(&Ok(Vec::new())) {
                model.pop();
            }
            let mut s = LineSplitter::new(max, Overlong::Skip);
            let mut got = Vec::new();
            for chunk in input.chunks(cut) {
                s.push(chunk);
                prop_assert!(s.buffered_bytes() <= max + chunk.len());
                got.extend(std::iter::from_fn(|| s.next_line()));
            }
            got.extend(s.finish());
            prop_assert_eq!(got, model);
        }

        #[test]
        fn any_chunking_yields_exactly_the_frames(
            frames in proptest::collection::vec(frame_strategy(), 0..20),
            cuts in proptest::collection::vec(1usize..16, 0..64),
        ) {
            let stream: Vec<u8> = frames.iter().flat_map(|f| f.iter().copied().chain([b'\n'])).collect();
            let mut d = FrameDecoder::new(128);
            let mut got = Vec::new();
            let mut pos = 0;
            let mut cuts = cuts.into_iter();
            while pos < stream.len() {
                let n = cuts.next().unwrap_or(stream.len()).min(stream.len() - pos);
                d.push(&stream[pos..pos + n]);
                pos += n;
                for f in d.by_ref() {
                    prop_assert!(f.is_ok());
                    got.extend(f);
                }
            }
            prop_assert_eq!(got, frames);
        }

        #[test]
        fn random_bytes_never_panic_and_stay_bounded(
            chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..32),
            max in 1usize..48,
        ) {
            let mut d = FrameDecoder::new(max);
            for c in &chunks {
                d.push(c);
                prop_assert!(d.buffered_bytes() <= max + c.len());
                for line in d.by_ref().flatten() {
                    prop_assert!(line.len() <= max);
                    prop_assert!(std::str::from_utf8(&line).is_ok());
                }
            }
        }

        #[test]
        fn oversize_is_always_detected(
            prefix in proptest::collection::vec(frame_strategy(), 0..4),
            extra in 1usize..64,
            cut in 1usize..32,
            newline in any::<bool>(),
        ) {
            let max = 40;
            let mut stream: Vec<u8> = prefix.iter().flat_map(|f| f.iter().copied().chain([b'\n'])).collect();
            stream.extend(std::iter::repeat_n(b'x', max + extra));
            if newline {
                stream.push(b'\n');
            }
            let mut d = FrameDecoder::new(max);
            let mut too_large = false;
            for chunk in stream.chunks(cut) {
                d.push(chunk);
                for f in d.by_ref() {
                    too_large |= f == Err(FrameError::TooLarge);
                }
            }
            prop_assert!(too_large);
        }
    }
}
