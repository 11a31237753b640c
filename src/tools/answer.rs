//! What the message tools answer, as typed results: a page of peers, a send's receipt with the
//! names it was sent under, a page of messages and receipt events, and the sender's view of
//! one sent message. A host returns them; the front end (MCP, the local channel) encodes them
//! as the JSON objects tools have always returned, `null` for an absent optional field.

use crate::protocol::message::Receipt;
use serde::Serialize;
use serde_json::Value;

/// `list_peers`: one page of the directory and the cursor of the next.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PeersPage {
    /// Directory entries as the directory lists them.
    pub peers: Vec<Value>,
    pub cursor: Option<String>,
}

/// `send_peer_message`: the custody receipt plus who it went to and from, under which name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SendAnswer {
    #[serde(flatten)]
    pub receipt: Receipt,
    /// The recipient's peerId (also `toPeerId`).
    pub to: String,
    /// The sender's peerId (also `fromPeerId`).
    pub from: String,
    /// Inline `@references` in the content.
    pub mentions: Vec<String>,
    /// The alias the caller named the recipient by, when it was not a peerId.
    pub to_alias: Option<String>,
}

/// One received message as tools and the CLI show it. The content is peer data.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageView {
    pub sequence: u64,
    pub message_id: String,
    pub from: String,
    pub from_peer_id: String,
    pub from_alias: Option<String>,
    pub from_instance_id: String,
    pub from_run_id: Option<String>,
    pub to: String,
    pub content: String,
    pub topic: Option<String>,
    pub reply_to: Option<String>,
    pub correlation_id: String,
    pub state: &'static str,
    pub accepted_at_ms: u64,
    pub sent_at: String,
    pub expires_at_ms: u64,
    /// Inline `@references` are metadata for the reader; the text itself is unchanged.
    pub mentions: Vec<String>,
}

/// `peer_messages`: messages, then receipt events of the caller's own sends, and where to
/// continue.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MessagesPage {
    pub messages: Vec<MessageView>,
    pub events: Vec<Receipt>,
    /// Pass back as `after`.
    pub cursor: u64,
    /// Pass back as `eventsAfter`.
    pub event_cursor: u64,
    pub more: bool,
}

/// The sender's view of one sent message (`peer status`, `--wait-receipt`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SentView {
    pub message_id: String,
    pub to: String,
    pub to_peer_id: String,
    pub to_instance_id: String,
    pub to_run_id: Option<String>,
    pub correlation_id: String,
    pub reply_to: Option<String>,
    /// A receipt state, or `unresolved` before any custody answer.
    pub state: &'static str,
    pub sequence: Option<u64>,
    pub reply_message_id: Option<String>,
    /// `{code}` of a refusal.
    pub error: Option<ErrorCode>,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
    /// Why an unresolved message is still unresolved (`peer status` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A refusal's code name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ErrorCode {
    pub code: String,
}

/// What one validated tool call answered.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ToolAnswer {
    Peers(PeersPage),
    Sent(SendAnswer),
    Messages(MessagesPage),
    /// A resource answer, shaped by the resource layer.
    Resource(Value),
}

#[cfg(test)]
#[path = "answer_tests.rs"]
mod tests;
