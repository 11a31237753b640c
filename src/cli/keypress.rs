//! Terminal input for `peer chat`, as pure state machines without I/O: [`Decoder`] turns the
//! bytes a terminal sends into keys (UTF-8 characters, C0 controls, `ESC x` as Alt-x, CSI
//! sequences read to their final byte, SS3 sequences), and [`Line`] applies keys to the line
//! being edited. Unknown sequences become [`Key::Ignored`] as a whole, so no part of one ever
//! lands in the line, and no control character can be inserted into it.

use crate::config::internal::CHAT_CSI_PARAMS_MAX as CSI_PARAMS_MAX;

/// One key press, as the editor understands it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Key {
    /// A printable character (never a control character).
    Char(char),
    Enter,
    Tab,
    Backspace,
    Delete,
    Left,
    Right,
    WordLeft,
    WordRight,
    Home,
    End,
    Up,
    Down,
    /// Ctrl-U: delete from the start of the line to the cursor.
    KillToStart,
    /// Ctrl-K: delete from the cursor to the end of the line.
    KillToEnd,
    /// Ctrl-W, Alt-Backspace: delete the word before the cursor.
    KillWordBefore,
    /// Ctrl-C.
    Interrupt,
    /// Ctrl-D.
    EndOfInput,
    /// Alt with a character that has no binding.
    Alt(char),
    /// A control character or escape sequence without a binding, consumed whole.
    Ignored,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Ground,
    /// After ESC.
    Escape,
    /// After `ESC [`: parameter and intermediate bytes until a final byte 0x40..=0x7E.
    Csi,
    /// After `ESC O`: one final byte.
    Ss3,
    /// Inside a UTF-8 character: continuation bytes still expected.
    Utf8(u8),
}

/// Bytes in, keys out; one call per byte.
#[derive(Debug)]
pub struct Decoder {
    state: State,
    params: Vec<u8>,
    utf8: Vec<u8>,
}

impl Default for Decoder {
    fn default() -> Decoder {
        Decoder {
            state: State::Ground,
            params: Vec::new(),
            utf8: Vec::new(),
        }
    }
}

impl Decoder {
    /// Feeds one byte; returns a key once one is complete.
    pub fn push(&mut self, b: u8) -> Option<Key> {
        match self.state {
            State::Ground => self.ground(b),
            State::Escape => self.escape(b),
            State::Csi => self.csi(b),
            State::Ss3 => {
                self.state = State::Ground;
                Some(ss3_key(b))
            }
            State::Utf8(left) => self.utf8_continue(b, left),
        }
    }

    /// True while a sequence or character is incomplete.
    pub fn pending(&self) -> bool {
        self.state != State::Ground
    }

    fn ground(&mut self, b: u8) -> Option<Key> {
        let key = match b {
            0x1b => {
                self.state = State::Escape;
                return None;
            }
            b'\r' | b'\n' => Key::Enter,
            b'\t' => Key::Tab,
            0x7f | 0x08 => Key::Backspace,
            0x01 => Key::Home,
            0x05 => Key::End,
            0x02 => Key::Left,
            0x06 => Key::Right,
            0x15 => Key::KillToStart,
            0x0b => Key::KillToEnd,
            0x17 => Key::KillWordBefore,
            0x03 => Key::Interrupt,
            0x04 => Key::EndOfInput,
            0x00..=0x1f => Key::Ignored,
            0x20..=0x7e => Key::Char(b as char),
            0xc2..=0xdf => return self.utf8_start(b, 1),
            0xe0..=0xef => return self.utf8_start(b, 2),
            0xf0..=0xf4 => return self.utf8_start(b, 3),
            // A continuation byte without a lead, or a byte never valid in UTF-8.
            _ => Key::Ignored,
        };
        Some(key)
    }

    fn utf8_start(&mut self, b: u8, need: u8) -> Option<Key> {
        self.utf8.clear();
        self.utf8.push(b);
        self.state = State::Utf8(need);
        None
    }

    fn utf8_continue(&mut self, b: u8, left: u8) -> Option<Key> {
        if b & 0xc0 != 0x80 {
            // Broken character: drop it and read this byte afresh.
            self.state = State::Ground;
            self.utf8.clear();
            return match self.ground(b) {
                Some(k) => Some(k),
                None => Some(Key::Ignored).filter(|_| !self.pending()),
            };
        }
        self.utf8.push(b);
        if left > 1 {
            self.state = State::Utf8(left - 1);
            return None;
        }
        self.state = State::Ground;
        let key = std::str::from_utf8(&self.utf8)
            .ok()
            .and_then(|s| s.chars().next())
            .filter(|c| !c.is_control())
            .map_or(Key::Ignored, Key::Char);
        self.utf8.clear();
        Some(key)
    }

    fn escape(&mut self, b: u8) -> Option<Key> {
        self.state = State::Ground;
        let key = match b {
            b'[' => {
                self.params.clear();
                self.state = State::Csi;
                return None;
            }
            b'O' => {
                self.state = State::Ss3;
                return None;
            }
            // ESC ESC: the first one stands alone; the second starts anew.
            0x1b => {
                self.state = State::Escape;
                Key::Ignored
            }
            0x7f | 0x08 => Key::KillWordBefore,
            b'b' => Key::WordLeft,
            b'f' => Key::WordRight,
            0x20..=0x7e => Key::Alt(b as char),
            _ => Key::Ignored,
        };
        Some(key)
    }

    fn csi(&mut self, b: u8) -> Option<Key> {
        match b {
            0x20..=0x3f => {
                if self.params.len() < CSI_PARAMS_MAX {
                    self.params.push(b);
                }
                None
            }
            0x40..=0x7e => {
                self.state = State::Ground;
                let key = csi_key(&self.params, b);
                self.params.clear();
                Some(key)
            }
            // A control or non-ASCII byte cannot be part of a CSI sequence: it ends it.
            _ => {
                self.state = State::Ground;
                self.params.clear();
                Some(Key::Ignored)
            }
        }
    }
}

/// `ESC [ params final`: arrows (with a Ctrl or Alt modifier as word moves), Home/End in
/// both the `H`/`F` and the `N~` forms, Delete; everything else is ignored whole.
fn csi_key(params: &[u8], fin: u8) -> Key {
    let text = std::str::from_utf8(params).unwrap_or("");
    let mut fields = text.split(';');
    let first = fields.next().unwrap_or("");
    let modifier: u32 = fields.next().and_then(|m| m.parse().ok()).unwrap_or(1);
    // xterm modifiers: 1 + (Shift 1, Alt 2, Ctrl 4); Alt or Ctrl make arrows move by word.
    let word = modifier > 1 && (modifier - 1) & 0b110 != 0;
    match (fin, first) {
        (b'A', _) => Key::Up,
        (b'B', _) => Key::Down,
        (b'C', _) if word => Key::WordRight,
        (b'D', _) if word => Key::WordLeft,
        (b'C', _) => Key::Right,
        (b'D', _) => Key::Left,
        (b'H', _) => Key::Home,
        (b'F', _) => Key::End,
        (b'~', "1" | "7") => Key::Home,
        (b'~', "4" | "8") => Key::End,
        (b'~', "3") => Key::Delete,
        _ => Key::Ignored,
    }
}

/// `ESC O final`: the application-mode arrows and Home/End.
fn ss3_key(b: u8) -> Key {
    match b {
        b'A' => Key::Up,
        b'B' => Key::Down,
        b'C' => Key::Right,
        b'D' => Key::Left,
        b'H' => Key::Home,
        b'F' => Key::End,
        _ => Key::Ignored,
    }
}

/// What a key asks the chat to do besides editing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Only the line changed (or nothing did): redraw it.
    Edited,
    /// Enter: this line is done (the editor is empty again).
    Submit(String),
    /// Recall the previous or next history entry.
    HistoryPrev,
    HistoryNext,
    /// Complete the word under the cursor.
    Complete,
    /// Leave the chat (Ctrl-C, or Ctrl-D on an empty line).
    Quit,
}

/// The line being edited and the cursor, in characters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Line {
    pub chars: Vec<char>,
    pub cursor: usize,
}

impl Line {
    pub fn text(&self) -> String {
        self.chars.iter().collect()
    }

    /// Replaces the line (history recall), cursor at the end.
    pub fn set(&mut self, text: &str) {
        self.chars = text.chars().filter(|c| !c.is_control()).collect();
        self.cursor = self.chars.len();
    }

    /// Inserts printable text at the cursor, up to `max` characters in the line.
    pub fn insert(&mut self, text: &str, max: usize) {
        for ch in text.chars().filter(|c| !c.is_control()) {
            if self.chars.len() >= max {
                break;
            }
            self.chars.insert(self.cursor, ch);
            self.cursor += 1;
        }
    }

    /// Applies one key; `max` bounds the line's length in characters.
    pub fn apply(&mut self, key: &Key, max: usize) -> Action {
        match key {
            Key::Char(c) => self.insert(&c.to_string(), max),
            Key::Enter => {
                let text = self.text();
                *self = Line::default();
                return Action::Submit(text);
            }
            Key::Tab => return Action::Complete,
            Key::Up => return Action::HistoryPrev,
            Key::Down => return Action::HistoryNext,
            Key::Interrupt => return Action::Quit,
            Key::EndOfInput if self.chars.is_empty() => return Action::Quit,
            Key::EndOfInput | Key::Delete => {
                if self.cursor < self.chars.len() {
                    self.chars.remove(self.cursor);
                }
            }
            Key::Backspace => {
                if self.cursor > 0 {
                    self.cursor -= 1;
                    self.chars.remove(self.cursor);
                }
            }
            Key::Left => self.cursor = self.cursor.saturating_sub(1),
            Key::Right => self.cursor = (self.cursor + 1).min(self.chars.len()),
            Key::Home => self.cursor = 0,
            Key::End => self.cursor = self.chars.len(),
            Key::WordLeft => self.cursor = self.word_start(),
            Key::WordRight => self.cursor = self.word_end(),
            Key::KillToStart => {
                self.chars.drain(..self.cursor);
                self.cursor = 0;
            }
            Key::KillToEnd => self.chars.truncate(self.cursor),
            Key::KillWordBefore => {
                let start = self.word_start();
                self.chars.drain(start..self.cursor);
                self.cursor = start;
            }
            Key::Alt(_) | Key::Ignored => {}
        }
        Action::Edited
    }

    /// Start of the word before the cursor (spaces before it skipped).
    fn word_start(&self) -> usize {
        let mut i = self.cursor;
        while i > 0 && self.chars[i - 1].is_whitespace() {
            i -= 1;
        }
        while i > 0 && !self.chars[i - 1].is_whitespace() {
            i -= 1;
        }
        i
    }

    /// End of the word after the cursor (spaces before it skipped).
    fn word_end(&self) -> usize {
        let n = self.chars.len();
        let mut i = self.cursor;
        while i < n && self.chars[i].is_whitespace() {
            i += 1;
        }
        while i < n && !self.chars[i].is_whitespace() {
            i += 1;
        }
        i
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(bytes: &[u8]) -> Vec<Key> {
        let mut d = Decoder::default();
        bytes.iter().filter_map(|b| d.push(*b)).collect()
    }

    fn edit(bytes: &[u8]) -> (String, usize, Vec<Action>) {
        let mut line = Line::default();
        let mut actions = Vec::new();
        for k in keys(bytes) {
            let a = line.apply(&k, 100);
            if a != Action::Edited {
                actions.push(a);
            }
        }
        (line.text(), line.cursor, actions)
    }

    #[test]
    fn escape_sequences_are_read_to_their_final_byte() {
        use Key::*;
        let cases: &[(&[u8], Key)] = &[
            (b"\x1b[A", Up),
            (b"\x1b[B", Down),
            (b"\x1b[C", Right),
            (b"\x1b[D", Left),
            (b"\x1b[1;5D", WordLeft),
            (b"\x1b[1;5C", WordRight),
            (b"\x1b[1;3D", WordLeft),
            (b"\x1b[1;2D", Left),
            (b"\x1b[3~", Delete),
            (b"\x1b[1~", Home),
            (b"\x1b[7~", Home),
            (b"\x1b[H", Home),
            (b"\x1b[4~", End),
            (b"\x1b[8~", End),
            (b"\x1b[F", End),
            (b"\x1bOH", Home),
            (b"\x1bOF", End),
            (b"\x1bOA", Up),
            (b"\x1bb", WordLeft),
            (b"\x1bf", WordRight),
            (b"\x1bc", Alt('c')),
            (b"\x1b\x7f", KillWordBefore),
            (b"\x1b[15~", Ignored),
            (b"\x1b[200~", Ignored),
            (b"\x1b[?1;2c", Ignored),
            (b"\x1bOP", Ignored),
        ];
        for (bytes, want) in cases {
            assert_eq!(keys(bytes), vec![want.clone()], "{bytes:?}");
        }
        // A very long parameter run is still read whole, to its final byte.
        let mut long = b"\x1b[".to_vec();
        long.extend(std::iter::repeat_n(b'1', 100));
        long.push(b'~');
        long.push(b'x');
        assert_eq!(keys(&long), vec![Ignored, Char('x')]);
    }

    #[test]
    fn controls_and_broken_bytes_never_become_characters() {
        use Key::*;
        assert_eq!(keys(b"\x00\x07\x1c\x1f"), vec![Ignored; 4]);
        assert_eq!(keys(&[0x80, 0xff, b'a']), vec![Ignored, Ignored, Char('a')]);
        // U+009B (a C1 CSI) encoded in UTF-8 is a control: ignored.
        assert_eq!(keys("\u{9b}".as_bytes()), vec![Ignored]);
        assert_eq!(
            keys("é€😀".as_bytes()),
            vec![Char('é'), Char('€'), Char('😀')]
        );
        // A character cut short by a control: the control still counts.
        assert_eq!(keys(&[0xc3, b'\r']), vec![Enter]);
        // A control byte inside a CSI sequence ends it.
        assert_eq!(keys(b"\x1b[1\x03"), vec![Ignored]);
        assert_eq!(
            keys(b"\x03\x04\x15\x17\x01\x05\x0b"),
            vec![
                Interrupt,
                EndOfInput,
                KillToStart,
                KillWordBefore,
                Home,
                End,
                KillToEnd
            ]
        );
    }

    #[test]
    fn line_editing_keys() {
        // Home, End, Delete, Ctrl-Left and Ctrl-Right do not insert anything.
        assert_eq!(edit(b"abc\x1b[1~X\x1b[4~Y\x1b[D\x1b[D\x1b[3~").0, "XabY");
        assert_eq!(edit(b"one two\x1b[1;5DX").0, "one Xtwo");
        assert_eq!(edit(b"one two\x01\x1b[1;5CX").0, "oneX two");
        // Ctrl-U kills to the start, Ctrl-W the word before the cursor, Ctrl-K to the end.
        assert_eq!(edit(b"hello world\x15").0, "");
        assert_eq!(edit(b"hello big  \x17").0, "hello ");
        assert_eq!(edit(b"hello world\x01\x06\x0b").0, "h");
        assert_eq!(edit(b"abc\x01\x05d").0, "abcd");
        assert_eq!(edit(b"abc\x7f\x7f").0, "a");
        // Alt-c changes nothing; Ctrl-D deletes under the cursor, quits on an empty line.
        assert_eq!(edit(b"ab\x1bc").0, "ab");
        assert_eq!(edit(b"ab\x02\x04").0, "a");
        assert_eq!(edit(b"\x04").2, vec![Action::Quit]);
        assert_eq!(
            edit(b"hi\r").2,
            vec![Action::Submit("hi".into())],
            "Enter submits"
        );
    }

    #[test]
    fn the_line_is_bounded() {
        let mut line = Line::default();
        for _ in 0..10 {
            line.apply(&Key::Char('x'), 4);
        }
        assert_eq!(line.text(), "xxxx");
        line.set("a\u{1b}[2Jb");
        assert_eq!(line.text(), "a[2Jb");
    }
}
