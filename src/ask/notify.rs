//! Tells the owner, where they are, that an ask waits for their approval: the ask server
//! calls [`Notifier::pending`] once per ask it puts before the owner, and each front end that
//! runs the server subscribes a sink (`peer ask serve`: a stderr line or an NDJSON event;
//! `peer host` and `peer mcp` with `"listen": true`: their own event streams). A notice only
//! informs; deciding stays with `peer ask decide` (no sink can decide). Sinks are called on
//! the connection thread, so each must be quick and must not block.

use crate::config::internal::{
    ASK_NOTIFY_PREVIEW_CHARS, ASK_NOTIFY_SHORT_ID_CHARS, ASK_NOTIFY_SINKS_MAX,
};
use parking_lot::Mutex;
use serde::Serialize;
use std::path::Path;

/// One ask waiting for the owner's decision. Every text member is sanitized for a terminal.
/// As JSON it is the event `{"event":"ask_pending", askId, shortId, caller, preview,
/// waitSeconds, decide}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "event", rename = "ask_pending", rename_all = "camelCase")]
pub struct Notice {
    pub ask_id: String,
    pub short_id: String,
    pub caller: String,
    /// The question's first words, on one line.
    pub preview: String,
    /// How long the ask waits for a decision, in whole seconds.
    #[serde(rename = "waitSeconds")]
    pub wait_s: u64,
    /// The exact command that decides it (`approve` or `decline` as the last word).
    pub decide: String,
}

impl Notice {
    /// A notice for `ask_id` from `caller`; `home` is named in the command when it is not
    /// the default namespace, so the command works as printed.
    pub fn new(home: &Path, ask_id: &str, caller: &str, question: &str, wait_ms: u64) -> Notice {
        let ask_id = crate::sanitize::line(ask_id, 64);
        let home_arg = match crate::config::resolve_home(None) {
            Ok(default) if default == home => String::new(),
            _ => format!("--home {} ", shell_word(&home.to_string_lossy())),
        };
        Notice {
            short_id: ask_id.chars().take(ASK_NOTIFY_SHORT_ID_CHARS).collect(),
            decide: format!("peer {home_arg}ask decide {ask_id} approve|decline"),
            caller: crate::sanitize::line(caller, 64),
            preview: crate::sanitize::line(question, ASK_NOTIFY_PREVIEW_CHARS),
            wait_s: wait_ms / 1000,
            ask_id,
        }
    }

    /// The one-line human form.
    pub fn line(&self) -> String {
        format!(
            "ask {} from {} waits for your approval (up to {} s): \"{}\" — decide: {}",
            self.short_id, self.caller, self.wait_s, self.preview, self.decide
        )
    }
}

/// `s` as one shell word (single-quoted when it needs quoting).
fn shell_word(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+,:@".contains(&b))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// A subscriber to notices.
pub type Sink = Box<dyn Fn(&Notice) + Send + Sync>;

/// The sinks of one server.
#[derive(Default)]
pub struct Notifier {
    sinks: Mutex<Vec<Sink>>,
}

impl Notifier {
    /// Adds a sink (ignored past the bound: front ends add one or two).
    pub fn subscribe(&self, sink: Sink) {
        let mut sinks = self.sinks.lock();
        if sinks.len() < ASK_NOTIFY_SINKS_MAX {
            sinks.push(sink);
        }
    }

    /// Tells every sink.
    pub fn pending(&self, notice: &Notice) {
        for sink in self.sinks.lock().iter() {
            sink(notice);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notices_are_one_sanitized_line_with_the_exact_command() {
        let n = Notice::new(
            Path::new("/tmp/x y"),
            "0123456789abcdef",
            "ada\x1b[31m",
            "where is\nthe \x1b]0;evil\x07 config? ".repeat(20).as_str(),
            120_000,
        );
        let line = n.line();
        assert!(!line.contains('\n') && !line.contains('\x1b'), "{line:?}");
        assert!(line.contains("ask 01234567 from ada"), "{line}");
        assert!(line.contains("up to 120 s"), "{line}");
        assert_eq!(
            n.decide,
            "peer --home '/tmp/x y' ask decide 0123456789abcdef approve|decline"
        );
        assert!(n.preview.chars().count() <= ASK_NOTIFY_PREVIEW_CHARS);
        assert_eq!(serde_json::to_value(&n).unwrap()["event"], "ask_pending");
        assert_eq!(shell_word("it's"), "'it'\\''s'");
    }
}
