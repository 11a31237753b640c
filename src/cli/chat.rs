//! `peer chat`: an interactive line composer for people. `@alias text` sends to alias and makes
//! it the current recipient; plain text goes to the current recipient; Tab completes `@names`;
//! Up/Down walk the history; incoming messages are printed between prompts and the line being
//! typed is redrawn intact. Everything from peers is sanitized before it reaches the terminal.
//! Keys are decoded and applied by the pure state machines of `keys`; `/commands` never leave
//! this process, and a sent line never carries a control character.

use super::keypress::{Action, Decoder, Key, Line};
use super::lines::{ReceiptLine, describe_message};
use super::msg::peers;
use super::session::Session;
use super::{Ctx, args};
use crate::error::{Code, Error, Result};
use crate::mention;
use crate::protocol::local::{LocalCall, LocalTool};
use crate::protocol::message::{MessageBody, ReceiptState};
use crate::toolspec::answer::{MessagesPage, SendAnswer};
use crate::toolspec::{MessagesArgs, SendArgs};
use parking_lot::Mutex;
use std::ffi::OsString;
use std::io::{BufRead, Read, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

pub const HELP: &str = "usage: peer chat

Interactive chat for this session. Lines:
  @alias text   send text to alias (and make it the current recipient)
  text          send to the current recipient
  //text        send text that starts with /
  /to alias     change the current recipient
  /who          list peers in scope
  /help         show this help
  /quit         leave (also Ctrl-C, or Ctrl-D on an empty line)
Commands stay local; nothing that starts with one / is sent. Keys: Left/Right, Ctrl-Left/Right
(word), Home/End (Ctrl-A/E), Backspace, Delete, Ctrl-U/K (to start/end), Ctrl-W (word before),
Tab completes @names, Up/Down recall history. Incoming messages appear above the prompt.
";

use crate::config::internal::CHAT_HISTORY_MAX;
use crate::config::internal::CHAT_LINE_CHARS_MAX;

/// What the screen shows below the messages: the prompt and the line being edited.
#[derive(Default)]
struct Composer {
    line: Line,
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
        let text = self.line.text();
        let back = self.line.chars.len() - self.line.cursor;
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
                super::out::text(HELP)?;
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
    let mut events_after: Option<u64> = None;
    while !stop.load(Ordering::SeqCst) {
        let args = MessagesArgs {
            after,
            wait_ms: 500,
            ..MessagesArgs::default()
        };
        let call = LocalTool {
            events_after,
            ..LocalTool::new(
                "peer_messages",
                serde_json::to_value(&args).unwrap_or_default(),
            )
        };
        let page: MessagesPage = match session.call_as(LocalCall::Tool(call), 0) {
            Ok(p) => p,
            Err(_) => {
                std::thread::sleep(std::time::Duration::from_millis(500));
                continue;
            }
        };
        after = Some(page.cursor);
        events_after = Some(page.event_cursor);
        let mut lines: Vec<String> = page.messages.iter().map(describe_message).collect();
        // The send's own line already said "accepted": only later custody steps (consumed,
        // replied, refused, expired) are worth a line.
        for e in page
            .events
            .into_iter()
            .filter(|e| e.state != ReceiptState::Accepted)
        {
            lines.push(format!("receipt: {}", ReceiptLine::from(e).describe()));
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

/// What a submitted line is: a local command or text to send.
#[derive(Debug, PartialEq, Eq)]
enum Input<'a> {
    Empty,
    Quit,
    Help,
    Who,
    To(&'a str),
    /// A `/word` that is no command: refused locally, never sent.
    Unknown(&'a str),
    /// Text for a peer (`//x` stands for `/x`).
    Text(&'a str),
}

fn classify(line: &str) -> Input<'_> {
    let line = line.trim();
    if line.is_empty() {
        return Input::Empty;
    }
    if line.starts_with("//") {
        return Input::Text(line.get(1..).unwrap_or(line));
    }
    let Some(cmd) = line.strip_prefix('/') else {
        return Input::Text(line);
    };
    let (word, rest) = cmd.split_once(char::is_whitespace).unwrap_or((cmd, ""));
    match word {
        "quit" | "exit" | "q" => Input::Quit,
        "help" | "?" => Input::Help,
        "who" => Input::Who,
        "to" => Input::To(rest.trim()),
        _ => Input::Unknown(word),
    }
}

/// Handles one submitted line; returns false to quit.
fn submit(session: &mut Session, composer: &Mutex<Composer>, line: &str) -> Result<bool> {
    // Controls never travel: a terminal line cannot hold them, a piped one is cleaned here.
    let cleaned: String = line.chars().filter(|c| !c.is_control()).collect();
    let line = match classify(&cleaned) {
        Input::Empty => return Ok(true),
        Input::Quit => return Ok(false),
        Input::Help => {
            say(HELP.trim_end());
            return Ok(true);
        }
        Input::Unknown(word) => {
            return Err(Error::new(
                Code::Usage,
                format!(
                    "/{} is not a chat command (nothing was sent); /help lists them, //text sends text starting with /",
                    crate::sanitize::line(word, 40)
                ),
            ));
        }
        Input::To(to) => {
            let to = mention::normalize_target(to)
                .ok_or_else(|| Error::new(Code::Usage, "/to needs an alias or peerId"))?;
            composer.lock().recipient = Some(to);
            return Ok(true);
        }
        Input::Who => return who(session).map(|()| true),
        Input::Text(text) => text,
    };
    send_line(session, composer, line)
}

/// `/who`: the peers in scope, one sanitized line each.
fn who(session: &mut Session) -> Result<()> {
    let s = |v: Option<&str>| v.map_or_else(|| "-".into(), |v| crate::sanitize::line(v, 60));
    for p in peers(session)?.peers {
        say(&format!(
            "  {} {} {}",
            s(p.alias.as_deref()),
            s(p.peer_id.as_deref()),
            s(Some(&p.workspace))
        ));
    }
    Ok(())
}

/// A text line: sent to its leading `@alias` or the current recipient (which it becomes).
fn send_line(session: &mut Session, composer: &Mutex<Composer>, line: &str) -> Result<bool> {
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
    let args = SendArgs {
        to: to.clone(),
        body: MessageBody::text(m.body.clone()),
    };
    let args = serde_json::to_value(&args).map_err(|e| Error::new(Code::Io, e.to_string()))?;
    let receipt: SendAnswer = session.call_as(
        LocalCall::Tool(LocalTool::new("send_peer_message", args)),
        0,
    )?;
    composer.lock().recipient = Some(to.clone());
    // One line per send: what went where, and its custody receipt.
    say(&sent_line(&to, &m.body, &receipt));
    Ok(true)
}

/// `you → @bob: text  (accepted #3, m-…)`, sanitized and on one line.
fn sent_line(to: &str, body: &str, answer: &SendAnswer) -> String {
    let r = &answer.receipt;
    format!(
        "you → @{}: {}  ({} #{}, {})",
        crate::sanitize::line(to, 80),
        crate::sanitize::line(body, 400),
        r.state.name(),
        r.sequence,
        crate::sanitize::line(&r.message_id, 80)
    )
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
            Err(e) => super::out::err_line(&format!("peer: {}: {}", e.code, e.message)),
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
    let mut decoder = Decoder::default();
    loop {
        if stdin
            .read(&mut byte)
            .map_err(|e| Error::new(Code::Io, e.to_string()))?
            == 0
        {
            break;
        }
        let Some(key) = decoder.push(byte[0]) else {
            continue;
        };
        let mut c = composer.lock();
        match c.line.apply(&key, CHAT_LINE_CHARS_MAX) {
            Action::Edited => {}
            Action::HistoryPrev | Action::HistoryNext => {
                if history.is_empty() {
                    continue;
                }
                hpos = if key == Key::Up {
                    hpos.saturating_sub(1)
                } else {
                    (hpos + 1).min(history.len())
                };
                let recalled = history.get(hpos).cloned().unwrap_or_default();
                c.line.set(&recalled);
            }
            Action::Complete => {
                if known.is_empty() {
                    known = peer_names(&mut session);
                }
                complete_word(&mut c.line, &known);
            }
            Action::Quit => break,
            Action::Submit(line) => {
                drop(c);
                if !line.trim().is_empty() {
                    history.push(line.clone());
                    if history.len() > CHAT_HISTORY_MAX {
                        history.remove(0);
                    }
                    hpos = history.len();
                }
                // The typed line is replaced by the one line the submission prints (`say`
                // clears it first); a command that prints nothing leaves only the prompt.
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

fn peer_names(session: &mut Session) -> Vec<String> {
    let Ok(page) = peers(session) else {
        return Vec::new();
    };
    page.peers.into_iter().filter_map(|p| p.alias).collect()
}

/// Completes the `@word` under the cursor when exactly one name matches (or their common
/// prefix when several do).
fn complete_word(c: &mut Line, known: &[String]) {
    let before: String = c.chars[..c.cursor].iter().collect();
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
    let typed = word.chars().count() - 1;
    let rest: String = common.chars().skip(typed).collect();
    c.insert(&rest, CHAT_LINE_CHARS_MAX);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slash_commands_stay_local() {
        assert_eq!(classify("  "), Input::Empty);
        assert_eq!(classify("/help"), Input::Help);
        assert_eq!(classify("/quit"), Input::Quit);
        assert_eq!(classify("/who"), Input::Who);
        assert_eq!(classify("/to bob"), Input::To("bob"));
        assert_eq!(classify("/halp me"), Input::Unknown("halp"));
        assert_eq!(
            classify("//etc/hosts is broken"),
            Input::Text("/etc/hosts is broken")
        );
        assert_eq!(classify("@bob hi"), Input::Text("@bob hi"));
    }

    #[test]
    fn completion_fills_a_unique_name() {
        let mut c = Line::default();
        c.set("@bo");
        complete_word(&mut c, &["bob".into(), "alice".into()]);
        assert_eq!(c.text(), "@bob ");
        let mut c = Line::default();
        c.set("@a");
        complete_word(&mut c, &["alpha".into(), "alps".into()]);
        assert_eq!(c.text(), "@alp");
    }
}
