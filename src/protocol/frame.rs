//! Newline-delimited frame decoding. Bytes are bounded before anything parses them: a line
//! longer than `max_frame_bytes` is reported as soon as the buffer proves it, whether or not its
//! newline has arrived. UTF-8 is validated per complete line only, so multibyte characters split
//! across reads are fine. Memory stays within `max_frame_bytes` plus the chunk being pushed.

/// Why one frame could not be produced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameError {
    /// A line exceeded the frame bound. The decoder is finished: the caller answers
    /// `FRAME_TOO_LARGE` and closes, because the rest of the stream cannot be re-synchronised
    /// without reading unbounded bytes.
    TooLarge,
    /// A complete line was not valid UTF-8. Only that frame is lost; decoding continues.
    InvalidUtf8,
}

/// Splits a byte stream into lines. Feed it with [`FrameDecoder::push`], then drain it with
/// [`FrameDecoder::next_frame`] (or iterate) until it returns `None`.
pub struct FrameDecoder {
    max_frame_bytes: usize,
    buf: Vec<u8>,
    /// Start of the first unconsumed byte in `buf`.
    start: usize,
    /// Bytes after `start` already searched for a newline, so each byte is scanned once.
    scanned: usize,
    /// Set after `TooLarge`: the stream is abandoned.
    failed: bool,
}

impl FrameDecoder {
    pub fn new(max_frame_bytes: usize) -> FrameDecoder {
        FrameDecoder {
            max_frame_bytes,
            buf: Vec::new(),
            start: 0,
            scanned: 0,
            failed: false,
        }
    }

    /// Adopts the bound the other side announced (a root's `frameBytes`); bytes already
    /// buffered are judged by the new bound from the next frame on.
    pub fn set_max_frame_bytes(&mut self, max_frame_bytes: usize) {
        self.max_frame_bytes = max_frame_bytes;
    }

    /// Appends bytes read from the stream. Consumed bytes are dropped first, so the buffer
    /// holds at most one partial frame (≤ `max_frame_bytes`) plus `bytes`.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.failed {
            return;
        }
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// True once a `TooLarge` has been returned; nothing more will be produced.
    pub fn is_failed(&self) -> bool {
        self.failed
    }

    /// Bytes currently held (consumed bytes included until the next push).
    pub fn buffered_bytes(&self) -> usize {
        self.buf.len()
    }

    /// The next complete frame without its `\n` (a trailing `\r` is kept; JSON ignores it).
    /// Blank lines are skipped. `None` means more bytes are needed (or the decoder failed).
    pub fn next_frame(&mut self) -> Option<Result<Vec<u8>, FrameError>> {
        loop {
            if self.failed {
                return None;
            }
            let pending = &self.buf[self.start..];
            let from = self.scanned.min(pending.len());
            let Some(offset) = pending[from..].iter().position(|b| *b == b'\n') else {
                self.scanned = pending.len();
                if pending.len() > self.max_frame_bytes {
                    return Some(Err(self.fail()));
                }
                return None;
            };
            let end = from + offset;
            let line = &pending[..end];
            if line.len() > self.max_frame_bytes {
                return Some(Err(self.fail()));
            }
            let frame = if line.iter().all(u8::is_ascii_whitespace) {
                None
            } else if std::str::from_utf8(line).is_err() {
                Some(Err(FrameError::InvalidUtf8))
            } else {
                Some(Ok(line.to_vec()))
            };
            self.start += end + 1;
            self.scanned = 0;
            if let Some(frame) = frame {
                return Some(frame);
            }
        }
    }

    fn fail(&mut self) -> FrameError {
        self.failed = true;
        self.buf = Vec::new();
        self.start = 0;
        self.scanned = 0;
        FrameError::TooLarge
    }
}

impl Iterator for FrameDecoder {
    type Item = Result<Vec<u8>, FrameError>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_frame()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn all(d: &mut FrameDecoder) -> Vec<Result<Vec<u8>, FrameError>> {
        d.by_ref().collect()
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
