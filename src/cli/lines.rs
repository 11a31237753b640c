//! The human lines of the messaging commands: a receipt (whichever answer carries it), the
//! receipt of a consumed message, and an inbox message with its body. Every string in them
//! is peer data and is sanitized here, on its way to a terminal.

use crate::protocol::message::Receipt;
use crate::runtime::handler::ReplyAnswer;
use crate::sanitize;
use crate::toolspec::answer::{MessageView, SendAnswer, SentView};
use std::collections::HashMap;

/// What a receipt line shows, from a send's answer, a reply's, a sent message's view or a
/// bare receipt.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReceiptLine {
    pub state: String,
    pub message_id: String,
    pub correlation_id: String,
    /// The recipient as the answer names it (a send's, a sent message's); the peerId else.
    pub to: Option<String>,
    pub to_peer_id: String,
    pub to_alias: Option<String>,
    /// Absent from a sent message's view.
    pub from_peer_id: Option<String>,
    pub from_alias: Option<String>,
    pub sequence: Option<u64>,
    /// The refusal's code name.
    pub code: Option<String>,
    /// Why the original could not be marked replied (a reply's answer).
    pub unmarked: Option<String>,
    /// Why a sent message is still unresolved.
    pub reason: Option<String>,
}

impl From<Receipt> for ReceiptLine {
    fn from(r: Receipt) -> Self {
        ReceiptLine {
            state: r.state.name().to_string(),
            message_id: r.message_id,
            correlation_id: r.correlation_id,
            to_peer_id: r.to_peer_id,
            from_peer_id: Some(r.from_peer_id),
            sequence: Some(r.sequence),
            code: r.code,
            ..ReceiptLine::default()
        }
    }
}

impl From<SendAnswer> for ReceiptLine {
    fn from(a: SendAnswer) -> Self {
        ReceiptLine {
            to: Some(a.to),
            to_alias: a.to_alias,
            ..ReceiptLine::from(a.receipt)
        }
    }
}

impl From<ReplyAnswer> for ReceiptLine {
    fn from(a: ReplyAnswer) -> Self {
        ReceiptLine {
            unmarked: a.mark_replied.map(|f| f.code.to_string()),
            ..ReceiptLine::from(a.receipt)
        }
    }
}

impl From<SentView> for ReceiptLine {
    fn from(v: SentView) -> Self {
        ReceiptLine {
            state: v.state.to_string(),
            message_id: v.message_id,
            correlation_id: v.correlation_id,
            to: Some(v.to),
            to_peer_id: v.to_peer_id,
            sequence: v.sequence,
            code: v.error.map(|e| e.code),
            reason: v.reason,
            ..ReceiptLine::default()
        }
    }
}

impl ReceiptLine {
    /// Adds the aliases the answer did not carry, from peerId → alias `names`.
    pub fn add_aliases(&mut self, names: &HashMap<String, String>) {
        if self.to_alias.is_none() {
            self.to_alias = names.get(&self.to_peer_id).cloned();
        }
        if self.from_alias.is_none() {
            self.from_alias = self
                .from_peer_id
                .as_ref()
                .and_then(|id| names.get(id))
                .cloned();
        }
    }

    /// One human line for a receipt of a message this session sent.
    pub fn describe(&self) -> String {
        let seq = part(self.sequence, |n| format!(" as #{n}"));
        let err = part(self.code.as_ref(), |c| format!(" ({c})"));
        let id = short(self.to.as_deref().unwrap_or(&self.to_peer_id));
        let unmarked = part(self.unmarked.as_ref(), |c| {
            format!(" (the original could not be marked replied: {c})")
        });
        let reason = part(self.reason.as_ref(), |why| {
            format!(" — {}", sanitize::line(why, 300))
        });
        // People read aliases; the peerId follows for exactness.
        let to = match &self.to_alias {
            Some(alias) => format!("{} ({id})", sanitize::line(alias, 64)),
            None => id,
        };
        format!(
            "{} {to}{seq}: message {} (correlation {}){err}{unmarked}{reason}",
            short(&self.state),
            short(&self.message_id),
            short(&self.correlation_id)
        )
    }

    /// One human line for the receipt of a message this session received: who sent it.
    pub fn describe_consumed(&self) -> String {
        let from_id = self
            .from_peer_id
            .as_deref()
            .map_or_else(|| "-".into(), short);
        let from = match &self.from_alias {
            Some(alias) => format!("{} ({from_id})", sanitize::line(alias, 64)),
            None => from_id,
        };
        let seq = part(self.sequence, |n| format!(" #{n}"));
        format!(
            "{}: message {}{seq} from {from}",
            short(&self.state),
            short(&self.message_id)
        )
    }
}

/// What `f` writes of `v`, or nothing when it is absent.
fn part<T>(v: Option<T>, f: impl FnOnce(T) -> String) -> String {
    v.map(f).unwrap_or_default()
}

/// A field of a receipt or message header, on one line.
fn short(s: &str) -> String {
    sanitize::line(s, 80)
}

/// Human rendering of one inbox message: a header line and the sanitized, indented body. The
/// text is peer data, never interpreted.
pub fn describe_message(m: &MessageView) -> String {
    let topic = part(m.topic.as_ref(), |t| {
        format!(" [{}]", sanitize::line(t, 60))
    });
    let reply = part(m.reply_to.as_ref(), |t| {
        format!(" (reply to {})", sanitize::line(t, 60))
    });
    let body = sanitize::text(&m.content);
    let body: Vec<String> = body.lines().map(|l| format!("  | {l}")).collect();
    format!(
        "#{} from {} ({}){topic}{reply} — message {} [{}]\n{}",
        m.sequence,
        m.from_alias.as_deref().map_or_else(|| "-".into(), short),
        short(&m.from),
        short(&m.message_id),
        short(m.state),
        body.join("\n")
    )
}

#[cfg(test)]
#[path = "lines_tests.rs"]
mod tests;
