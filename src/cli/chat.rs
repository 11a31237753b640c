//! `peer chat`: an interactive line composer for people. `@alias text` sends to alias and makes
//! it the current recipient; plain text goes to the current recipient; Tab completes `@names`;
//! Up/Down walk the history; incoming messages are printed between prompts and the line being
//! typed is redrawn intact. Everything from peers is sanitized before it reaches the terminal.

use super::msg::{describe_message, describe_receipt};
use super::session::Session;
use super::{Ctx, args};
use crate::error::{Code, Error, Result};
use crate::mention;
use parking_lot::Mutex;
use serde_json::{Map, json};
use std::ffi::OsString;
use std::io::{BufRead, Read, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

pub const HELP: &str = "usage: peer chat

Interactive chat for this session. Lines:
  @alias text   send text to alias (and make it the current recipient)
  text          send to the current recipient
  /to alias     change the current recipient
  /who          list peers in scope
  /quit         leave (also Ctrl-D)
Tab completes @names, Up/Down recall history. Incoming messages appear above the prompt.
";

use crate::config::internal::CHAT_HISTORY_MAX;
use crate::config::internal::CHAT_LINE_CHARS_MAX;

/// What the screen shows below the messages: the prompt and the line being edited.
#[derive(Default)]
struct Composer {
    line: Vec<char>,
    cursor: usize,
    recipient: Option<String>,
}

impl Composer {
    fn prompt(&self) -> String {
        match &self.recipient {
            Some(r) => format!("@{r}> "),
            None => "peer> ".to_string(),
        }
    }
    fn redraw(&self, out: &mut impl Write) {
        let text: String = self.line.iter().collect();
        let back = self.line.len() - self.cursor;
        let _ = write!(out, "\r\x1b[2K{}{}", self.prompt(), text);
        if back > 0 {
            let _ = write!(out, "\x1b[{back}D");
        }
        let _ = out.flush();
    }
}

pub fn cmd(ctx: &Ctx, argv: Vec<OsString>) -> Result<i32> {
    use lexopt::prelude::*;
    let mut p = args::parser(argv);
    if let Some(arg) = p.next().map_err(args::usage)? {
        return match arg {
            Long("help") | Short('h') => {
                print!("{HELP}");
                Ok(0)
            }
            other => Err(args::unexpected(other)),
        };
    }
    let session = Session::open(ctx)?;
    let watcher = session.fork()?;
    let composer = Arc::new(Mutex::new(Composer::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let tty = nix::unistd::isatty(std::io::stdin()).unwrap_or(false);
    let w = {
        let (composer, stop) = (composer.clone(), stop.clone());
        std::thread::spawn(move || watch(watcher, composer, stop, tty))
    };
    let result = if tty {
        interactive(session, &composer)
    } else {
        line_mode(session, &composer)
    };
    stop.store(true, Ordering::SeqCst);
    let _ = w.join();
    result.map(|_| 0)
}

/// Streams arrivals and receipts until `stop`, printing them above the composer.
fn watch(mut session: Session, composer: Arc<Mutex<Composer>>, stop: Arc<AtomicBool>, tty: bool) {
    let mut after: Option<u64> = None;
    let mut envelope = Map::new();
    while !stop.load(Ordering::SeqCst) {
        let mut a = Map::new();
        a.insert("waitMs".into(), json!(500));
        if let Some(n) = after {
            a.insert("after".into(), json!(n));
        }
        let page = match session.tool(
            "peer_messages",
            serde_json::Value::Object(a),
            envelope.clone(),
        ) {
            Ok(p) => p,
            Err(_) => {
                std::thread::sleep(std::time::Duration::from_millis(500));
                continue;
            }
        };
        if let Some(c) = page.get("cursor").and_then(serde_json::Value::as_u64) {
            after = Some(c);
        }
        if let Some(c) = page.get("eventCursor") {
            envelope.insert("eventsAfter".into(), c.clone());
        }
        let mut lines = Vec::new();
        for m in page
            .get("messages")
            .and_then(serde_json::Value::as_array)
            .into_iter()
            .flatten()
        {
            lines.push(describe_message(m));
        }
        for e in page
            .get("events")
            .and_then(serde_json::Value::as_array)
            .into_iter()
            .flatten()
        {
            lines.push(format!("receipt: {}", describe_receipt(e)));
        }
        if lines.is_empty() {
            continue;
        }
        let c = composer.lock();
        let mut out = std::io::stdout().lock();
        for l in lines {
            if tty {
                let _ = write!(out, "\r\x1b[2K{}\r\n", l.replace('\n', "\r\n"));
            } else {
                let _ = writeln!(out, "{l}");
            }
        }
        if tty {
            c.redraw(&mut out);
        }
        let _ = out.flush();
    }
}

/// Handles one submitted line; returns false to quit.
fn submit(session: &mut Session, composer: &Mutex<Composer>, line: &str) -> Result<bool> {
    let line = line.trim();
    if line.is_empty() {
        return Ok(true);
    }
    if line == "/quit" || line == "/exit" {
        return Ok(false);
    }
    if line == "/who" {
        let page = session.tool("list_peers", json!({}), Map::new())?;
        for p in page
            .get("peers")
            .and_then(serde_json::Value::as_array)
            .into_iter()
            .flatten()
        {
            let s = |k: &str| {
                p.get(k)
                    .and_then(serde_json::Value::as_str)
                    .map(|v| crate::sanitize::line(v, 60))
                    .unwrap_or_else(|| "-".into())
            };
            say(&format!(
                "  {} {} {}",
                s("alias"),
                s("peerId"),
                s("workspace")
            ));
        }
        return Ok(true);
    }
    if let Some(to) = line.strip_prefix("/to ") {
        let to = mention::normalize_target(to.trim())
            .ok_or_else(|| Error::new(Code::Usage, "/to needs an alias or peerId"))?;
        composer.lock().recipient = Some(to);
        return Ok(true);
    }
    let m = mention::parse(line);
    let to = match m
        .leading_recipient
        .clone()
        .or_else(|| composer.lock().recipient.clone())
    {
        Some(t) => t,
        None => {
            return Err(Error::new(
                Code::Usage,
                "no recipient: start the line with @alias or use /to alias",
            ));
        }
    };
    if m.body.trim().is_empty() {
        composer.lock().recipient = Some(to);
        return Ok(true);
    }
    let receipt = session.tool(
        "send_peer_message",
        json!({"to": to, "content": m.body}),
        Map::new(),
    )?;
    composer.lock().recipient = Some(to);
    say(&describe_receipt(&receipt));
    Ok(true)
}

fn say(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = write!(out, "\r\x1b[2K{}\r\n", text.replace('\n', "\r\n"));
    let _ = out.flush();
}

fn line_mode(mut session: Session, composer: &Mutex<Composer>) -> Result<()> {
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let line =
            line.map_err(|e| Error::new(Code::Io, format!("cannot read standard input: {e}")))?;
        match submit(&mut session, composer, &line) {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => eprintln!("peer: {}: {}", e.code, e.message),
        }
    }
    session.close();
    Ok(())
}

/// Restores the terminal mode when dropped, even on an early return.
struct RawMode(nix::sys::termios::Termios);

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = nix::sys::termios::tcsetattr(
            std::io::stdin(),
            nix::sys::termios::SetArg::TCSANOW,
            &self.0,
        );
    }
}

fn raw_mode() -> Result<RawMode> {
    use nix::sys::termios::{self, LocalFlags, SetArg};
    let saved = termios::tcgetattr(std::io::stdin())
        .map_err(|e| Error::new(Code::Io, format!("cannot read terminal mode: {e}")))?;
    let mut raw = saved.clone();
    raw.local_flags
        .remove(LocalFlags::ICANON | LocalFlags::ECHO | LocalFlags::ISIG);
    termios::tcsetattr(std::io::stdin(), SetArg::TCSANOW, &raw)
        .map_err(|e| Error::new(Code::Io, format!("cannot set terminal mode: {e}")))?;
    Ok(RawMode(saved))
}

fn interactive(mut session: Session, composer: &Mutex<Composer>) -> Result<()> {
    let _raw = raw_mode()?;
    let mut history: Vec<String> = Vec::new();
    let mut hpos = 0usize;
    let mut known: Vec<String> = Vec::new();
    composer.lock().redraw(&mut std::io::stdout().lock());
    let mut stdin = std::io::stdin().lock();
    let mut byte = [0u8; 1];
    let mut pending = Vec::new();
    loop {
        if stdin
            .read(&mut byte)
            .map_err(|e| Error::new(Code::Io, e.to_string()))?
            == 0
        {
            break;
        }
        pending.push(byte[0]);
        // Collect a whole UTF-8 character or escape sequence before acting.
        let Some(key) = decode_key(&mut pending) else {
            continue;
        };
        let mut c = composer.lock();
        match key {
            Key::Char(ch) if c.line.len() < CHAT_LINE_CHARS_MAX => {
                let at = c.cursor;
                c.line.insert(at, ch);
                c.cursor += 1;
            }
            Key::Char(_) => {}
            Key::Backspace if c.cursor > 0 => {
                let at = c.cursor - 1;
                c.line.remove(at);
                c.cursor -= 1;
            }
            Key::Backspace => {}
            Key::Left => c.cursor = c.cursor.saturating_sub(1),
            Key::Right => c.cursor = (c.cursor + 1).min(c.line.len()),
            Key::Up | Key::Down => {
                if history.is_empty() {
                    continue;
                }
                hpos = if key == Key::Up {
                    hpos.saturating_sub(1)
                } else {
                    (hpos + 1).min(history.len())
                };
                c.line = history
                    .get(hpos)
                    .map(|h| h.chars().collect())
                    .unwrap_or_default();
                c.cursor = c.line.len();
            }
            Key::Tab => {
                if known.is_empty() {
                    known = peer_names(&mut session);
                }
                complete_word(&mut c, &known);
            }
            Key::Quit => break,
            Key::Enter => {
                let line: String = c.line.iter().collect();
                c.line.clear();
                c.cursor = 0;
                drop(c);
                say(&format!("> {}", crate::sanitize::line(&line, 400)));
                if !line.trim().is_empty() {
                    history.push(line.clone());
                    if history.len() > CHAT_HISTORY_MAX {
                        history.remove(0);
                    }
                    hpos = history.len();
                }
                match submit(&mut session, composer, &line) {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(e) => say(&format!("peer: {}: {}", e.code, e.message)),
                }
                composer.lock().redraw(&mut std::io::stdout().lock());
                continue;
            }
        }
        c.redraw(&mut std::io::stdout().lock());
    }
    say("");
    session.close();
    Ok(())
}

#[derive(Debug, PartialEq, Eq)]
enum Key {
    Char(char),
    Backspace,
    Left,
    Right,
    Up,
    Down,
    Tab,
    Enter,
    Quit,
}

/// Turns buffered input bytes into one key, or `None` while a sequence is incomplete.
fn decode_key(pending: &mut Vec<u8>) -> Option<Key> {
    let key = match pending.as_slice() {
        [0x1b] | [0x1b, b'['] => return None,
        [0x1b, b'[', b'A'] => Key::Up,
        [0x1b, b'[', b'B'] => Key::Down,
        [0x1b, b'[', b'C'] => Key::Right,
        [0x1b, b'[', b'D'] => Key::Left,
        [0x1b, ..] if pending.len() >= 3 => Key::Char('\u{0}'),
        [b'\r'] | [b'\n'] => Key::Enter,
        [b'\t'] => Key::Tab,
        [0x7f] | [0x08] => Key::Backspace,
        [0x03] | [0x04] => Key::Quit,
        [b] if *b < 0x20 => Key::Char('\u{0}'),
        bytes => match std::str::from_utf8(bytes) {
            Ok(s) => Key::Char(s.chars().next().unwrap_or('\u{0}')),
            Err(e) if e.error_len().is_none() && bytes.len() < 4 => return None,
            Err(_) => Key::Char('\u{0}'),
        },
    };
    pending.clear();
    // Unknown sequences and controls are dropped, never inserted into the line.
    if key == Key::Char('\u{0}') {
        None
    } else {
        Some(key)
    }
}

fn peer_names(session: &mut Session) -> Vec<String> {
    let Ok(page) = session.tool("list_peers", json!({}), Map::new()) else {
        return Vec::new();
    };
    page.get("peers")
        .and_then(serde_json::Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| {
            p.get("alias")
                .and_then(serde_json::Value::as_str)
                .map(str::to_string)
        })
        .collect()
}

/// Completes the `@word` under the cursor when exactly one name matches (or their common
/// prefix when several do).
fn complete_word(c: &mut Composer, known: &[String]) {
    let before: String = c.line[..c.cursor].iter().collect();
    let start = before.rfind(char::is_whitespace).map_or(0, |i| i + 1);
    let word = &before[start..];
    if !word.starts_with('@') {
        return;
    }
    let matches = mention::complete(word, known);
    let Some(first) = matches.first() else { return };
    let common: String = if matches.len() == 1 {
        format!("{first} ")
    } else {
        let mut prefix = first.clone();
        for m in &matches[1..] {
            while !m.starts_with(&prefix) {
                prefix.pop();
            }
        }
        prefix
    };
    let typed = word.len() - 1;
    for ch in common.chars().skip(typed) {
        let at = c.cursor;
        c.line.insert(at, ch);
        c.cursor += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_decode_and_controls_are_dropped() {
        let mut p = vec![0x1b];
        assert_eq!(decode_key(&mut p), None);
        p.push(b'[');
        assert_eq!(decode_key(&mut p), None);
        p.push(b'A');
        assert_eq!(decode_key(&mut p), Some(Key::Up));
        let mut p = "é".as_bytes()[..1].to_vec();
        assert_eq!(decode_key(&mut p), None);
        p.push("é".as_bytes()[1]);
        assert_eq!(decode_key(&mut p), Some(Key::Char('é')));
        let mut p = vec![0x01];
        assert_eq!(decode_key(&mut p), None);
        assert!(p.is_empty());
    }

    #[test]
    fn completion_fills_a_unique_name() {
        let mut c = Composer {
            line: "@bo".chars().collect(),
            cursor: 3,
            recipient: None,
        };
        complete_word(&mut c, &["bob".into(), "alice".into()]);
        assert_eq!(c.line.iter().collect::<String>(), "@bob ");
        let mut c = Composer {
            line: "@a".chars().collect(),
            cursor: 2,
            recipient: None,
        };
        complete_word(&mut c, &["alpha".into(), "alps".into()]);
        assert_eq!(c.line.iter().collect::<String>(), "@alp");
    }
}
