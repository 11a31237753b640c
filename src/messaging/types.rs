//! The custody vocabulary shared by the state machine, the store and the integrator:
//! principals, sends, receipts, inbox/outbox entries, events, pushes and read queries.

use crate::error::{Code, Error};
/// A custody receipt, one type from the wire to the journal: the store keeps it in its
/// declaration order, the wire writes its keys sorted.
pub use crate::protocol::message::{MessageBody, Receipt, ReceiptState};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;

/// An authenticated sender as the transport established it; never taken from a message body.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Principal {
    pub instance_id: String,
    pub run_id: Option<String>,
    pub peer_id: String,
}

/// The exact incarnation a local sender addresses: a root (`run_id` None) or one child run.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TargetRef {
    pub peer_id: String,
    pub instance_id: String,
    pub run_id: Option<String>,
}

impl TargetRef {
    /// True when `p` is exactly this incarnation (instance, run and peer id all equal).
    pub fn is(&self, p: &Principal) -> bool {
        self.peer_id == p.peer_id && self.instance_id == p.instance_id && self.run_id == p.run_id
    }
}

/// What a remote sender asks us to take custody of (`peer.send` params after validation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InboundSend {
    pub to_peer_id: String,
    pub message_id: String,
    pub body: MessageBody,
    pub correlation_id: Option<String>,
    pub expires_at_ms: Option<u64>,
    /// The sender's sessionId as the presence record its key was verified against states it
    /// (None when unknown). Dedup spans the session's incarnations: a retry from a restarted
    /// sender or another one-off root of the same session gets the original receipt.
    pub origin: Option<String>,
    /// The sender's alias as its own advertisement states it when the message arrives (not
    /// from params): kept with the message so it still names the sender after it left.
    pub from_alias: Option<String>,
}

/// What one of our local peers (root or child run) wants to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutboundSend {
    /// The local sender: our root's peerId or one of our published runs' peerIds.
    pub from_peer_id: String,
    pub to: TargetRef,
    pub message_id: String,
    pub body: MessageBody,
    pub correlation_id: Option<String>,
    pub expires_at_ms: Option<u64>,
}

/// A message in custody at one of our recipients.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InboxEntry {
    pub recipient_peer_id: String,
    pub sequence: u64,
    pub from: Principal,
    pub message_id: String,
    /// Stored in place: `content`, `topic`, `replyTo` where they always were.
    #[serde(flatten)]
    pub body: MessageBody,
    pub correlation_id: String,
    pub expires_at_ms: u64,
    pub accepted_at_ms: u64,
    pub state: ReceiptState,
    pub state_at_ms: u64,
    pub reply_message_id: Option<String>,
    /// A context marker (explicit or implicit) exists for this message.
    pub context_marked: bool,
    /// The sender's sessionId at acceptance (see [`InboundSend::origin`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// The sender's alias when the message was accepted (see `InboundSend::from_alias`);
    /// absent in records written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_alias: Option<String>,
}

impl InboxEntry {
    /// The receipt the original sender sees for this entry now.
    pub fn receipt(&self) -> Receipt {
        Receipt {
            message_id: self.message_id.clone(),
            from_peer_id: self.from.peer_id.clone(),
            to_peer_id: self.recipient_peer_id.clone(),
            state: self.state,
            sequence: self.sequence,
            correlation_id: self.correlation_id.clone(),
            at_ms: self.state_at_ms,
            reply_message_id: self.reply_message_id.clone(),
            code: None,
        }
    }
}

/// A message one of our local peers sent (or is about to send). Stored with its body's fields
/// in the order entries have always been written (see [`OutboxEntryFields`]): a snapshot's
/// checksum covers its re-encoding.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutboxEntry {
    /// Durable send order across the whole outbox; routes are served in this order.
    pub order: u64,
    pub from_peer_id: String,
    pub to: TargetRef,
    pub message_id: String,
    /// The content is the body while unresolved, empty once resolved (see `content_digest`).
    #[serde(flatten)]
    pub body: MessageBody,
    /// SHA-256 (hex) of the body, set when the body is dropped at resolution.
    #[serde(default)]
    pub content_digest: Option<String>,
    pub correlation_id: String,
    pub expires_at_ms: u64,
    pub created_at_ms: u64,
    /// None while unresolved (no custody answer yet); then the latest receipt, never regressing.
    pub receipt: Option<Receipt>,
    pub updated_at_ms: u64,
    /// Set on a copy sent again to a recipient's successor incarnation after it answered that
    /// it does not hold the message: the peerId the first copy was accepted by.
    #[serde(default)]
    pub redelivered_from: Option<String>,
}

/// How an [`OutboxEntry`] is written: its fields borrowed in their stored order, the digest
/// between the content and the topic.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OutboxEntryFields<'a> {
    order: u64,
    from_peer_id: &'a str,
    to: &'a TargetRef,
    message_id: &'a str,
    content: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    content_digest: &'a Option<String>,
    topic: &'a Option<String>,
    reply_to: &'a Option<String>,
    correlation_id: &'a str,
    expires_at_ms: u64,
    created_at_ms: u64,
    receipt: &'a Option<Receipt>,
    updated_at_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    redelivered_from: &'a Option<String>,
}

impl Serialize for OutboxEntry {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        OutboxEntryFields {
            order: self.order,
            from_peer_id: &self.from_peer_id,
            to: &self.to,
            message_id: &self.message_id,
            content: &self.body.content,
            content_digest: &self.content_digest,
            topic: &self.body.topic,
            reply_to: &self.body.reply_to,
            correlation_id: &self.correlation_id,
            expires_at_ms: self.expires_at_ms,
            created_at_ms: self.created_at_ms,
            receipt: &self.receipt,
            updated_at_ms: self.updated_at_ms,
            redelivered_from: &self.redelivered_from,
        }
        .serialize(s)
    }
}

impl OutboxEntry {
    /// SHA-256 (hex) of a message body, what a resolved entry keeps of it.
    pub fn digest_of(content: &str) -> String {
        use sha2::{Digest, Sha256};
        crate::identity::hex(&Sha256::digest(content.as_bytes()))
    }

    /// Whether `content` is this entry's body (compared by digest once the body is dropped).
    pub fn has_content(&self, content: &str) -> bool {
        match &self.content_digest {
            Some(d) => *d == Self::digest_of(content),
            None => self.body.content == content,
        }
    }

    /// Replaces the body's content by its digest (idempotent); content no longer than a digest
    /// stays.
    pub fn drop_body(&mut self) {
        if self.body.content.len() <= 64 {
            return;
        }
        if self.content_digest.is_none() {
            self.content_digest = Some(Self::digest_of(&self.body.content));
        }
        self.body.content = String::new();
    }
}

/// A receipt change on our outbox, for the local sender's `peer_messages` event stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReceiptEvent {
    /// Durable, strictly increasing across the store.
    pub cursor: u64,
    /// The local peer that sent the message.
    pub local_peer_id: String,
    pub receipt: Receipt,
    pub at_ms: u64,
}

/// A recipient-side receipt waiting to be pushed to the original sender with `peer.receipt`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PushEntry {
    /// Durable, strictly increasing; acknowledge with `receipt_delivered(cursor)`.
    pub cursor: u64,
    /// The original sender incarnation (the push goes to its instance's endpoint).
    pub to: Principal,
    pub receipt: Receipt,
    pub queued_at_ms: u64,
}

/// One context-journal record: what the runtime put into a model context for a message,
/// written before consumption advances.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContextEntry {
    pub recipient_peer_id: String,
    pub sequence: u64,
    pub message_id: String,
    pub note: String,
    /// True when consumption or reply came without an explicit preparation.
    pub implicit: bool,
    pub at_ms: u64,
}

/// How a recipient-side call names one message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MessageRef {
    Sequence(u64),
    /// A message id, or a unique prefix of one (at least `MESSAGE_ID_PREFIX_MIN` characters);
    /// ambiguous when two senders used the same id (then use the sequence).
    Id(String),
}

impl std::fmt::Display for MessageRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MessageRef::Sequence(n) => write!(f, "#{n}"),
            MessageRef::Id(id) => f.write_str(id),
        }
    }
}

/// Which of `ids` a message id or prefix names: the exact id when present, else the distinct
/// ids starting with it (none when the prefix is shorter than `MESSAGE_ID_PREFIX_MIN`).
pub fn ids_matching<'a>(wanted: &str, ids: impl Iterator<Item = &'a str> + Clone) -> Vec<&'a str> {
    if ids.clone().any(|i| i == wanted) {
        return vec![wanted_in(wanted, ids)];
    }
    if wanted.chars().count() < crate::config::internal::MESSAGE_ID_PREFIX_MIN {
        return Vec::new();
    }
    let mut hits: Vec<&str> = ids.filter(|i| i.starts_with(wanted)).collect();
    hits.sort_unstable();
    hits.dedup();
    hits
}

/// The AMBIGUOUS_TARGET answer for a prefix that starts several `kind` ids (`message`,
/// `sent message`), naming up to five of them.
pub fn ambiguous_prefix(wanted: &str, several: &[&str], kind: &str) -> Error {
    Error::new(
        Code::AmbiguousTarget,
        format!(
            "{} is the start of {} {kind} ids ({}); give more of it",
            crate::sanitize::line(wanted, 100),
            several.len(),
            several[..several.len().min(5)].join(", ")
        ),
    )
}

fn wanted_in<'a>(wanted: &str, mut ids: impl Iterator<Item = &'a str>) -> &'a str {
    ids.find(|i| *i == wanted).unwrap_or_default()
}

/// The peers this root answers for right now; the runtime keeps it current.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recipients {
    pub live: HashSet<String>,
    pub ended: HashSet<String>,
}

impl Recipients {
    pub fn with_live(ids: &[&str]) -> Recipients {
        Recipients {
            live: ids.iter().map(|s| s.to_string()).collect(),
            ended: HashSet::new(),
        }
    }
}

/// A trusted local read of one recipient's mailbox and its receipt events.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadQuery {
    pub recipient_peer_id: String,
    /// Only messages with a sequence above this.
    pub after: Option<u64>,
    /// Only messages from this sender peerId.
    pub from: Option<String>,
    pub reply_to: Option<String>,
    pub message_id: Option<String>,
    /// At most this many messages and this many events; 0 or above `directoryPageSize` is
    /// clamped to `directoryPageSize`.
    pub limit: u64,
    /// Only receipt events with a cursor above this; None skips events.
    pub events_after: Option<u64>,
    /// Only messages not yet consumed (accepted or prepared).
    pub unconsumed_only: bool,
}

/// The answer to a [`ReadQuery`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadResult {
    pub messages: Vec<InboxEntry>,
    pub events: Vec<ReceiptEvent>,
    /// Pass back as `after` to continue (the last returned sequence, or the query's `after`).
    pub next_after: u64,
    /// Pass back as `events_after` to continue.
    pub next_event_cursor: u64,
    /// More matching messages or events exist beyond this page.
    pub more: bool,
}

/// What one `sweep` did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SweepReport {
    pub expired_inbox: u64,
    pub expired_outbox: u64,
    pub removed_inbox: u64,
    pub removed_outbox: u64,
    pub removed_events: u64,
    pub dropped_pushes: u64,
    /// The sweep stopped at its per-call bound; call again.
    pub more: bool,
}
