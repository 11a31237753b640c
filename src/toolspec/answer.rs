//! What the message tools answer, as typed results: a page of peers, a send's receipt with the
//! names it was sent under, a page of messages and receipt events, and the sender's view of
//! one sent message. A host returns them; the front end (MCP, the local channel) encodes them
//! as the JSON objects tools have always returned, `null` for an absent optional field.

use super::resource_answer::ResourceAnswer;
use crate::protocol::message::{Field, Receipt, WithFields};
use crate::protocol::rpc;
use serde::{Deserialize, Serialize};

/// Bytes reserved for a send's answer as JSON: its receipt's ids, the target's and the
/// recipient's names.
const ANSWER_JSON_BYTES: usize = 512;

/// `list_peers`: one page of the directory and the cursor of the next.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PeersPage {
    pub peers: Vec<PeerView>,
    pub cursor: Option<String>,
}

/// One listed peer (a root or one of its runs, or a record of another program), with display
/// metadata only: sanitized, no transcripts or secrets.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PeerView {
    pub peer_id: Option<String>,
    pub alias: Option<String>,
    /// The root whose run this is.
    pub run_of: Option<String>,
    pub session_id: String,
    pub project: String,
    pub workspace: String,
    pub pid: i64,
    pub mode: String,
    /// `working` or `idle`.
    #[serde(deserialize_with = "super::words::peer_status")]
    pub status: super::words::Word,
    pub age_ms: Option<u64>,
    /// `live`, `stale` or `invalid`.
    #[serde(deserialize_with = "super::words::peer_state")]
    pub state: super::words::Word,
    pub reason: Option<String>,
    /// The peer can take messages now.
    pub messaging: bool,
    pub messaging_error: Option<String>,
    /// The viewer's own root.
    #[serde(rename = "self")]
    pub is_self: bool,
    pub in_scope: bool,
    /// A root's capabilities (absent for runs and other programs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Vec<String>>,
    /// A root's advertised scope (absent for runs and other programs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

impl PeerView {
    /// Whether `q` (lowercase) is in the alias, peerId, project, sessionId or workspace.
    pub fn matches(&self, q: &str) -> bool {
        [
            self.alias.as_deref(),
            self.peer_id.as_deref(),
            Some(&self.project),
            Some(&self.session_id),
            Some(&self.workspace),
        ]
        .into_iter()
        .flatten()
        .any(|s| s.to_lowercase().contains(q))
    }
}

/// `send_peer_message`: the custody receipt plus who it went to and from, under which name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
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

impl SendAnswer {
    /// The answer as compact JSON text, byte for byte what serialising its `Value` writes.
    pub fn to_json(&self) -> Vec<u8> {
        self.with_fields(None, |a| serde_json::to_vec(a).unwrap_or_default())
    }

    /// The answer as an MCP tool result's `structuredContent`: its object with `ok: true`,
    /// byte for byte what serialising that `Value` writes.
    pub fn to_tool_json(&self) -> String {
        // serde_json writes UTF-8 only.
        self.with_fields(Some(true), |a| {
            String::from_utf8(rpc::json_sized(a, ANSWER_JSON_BYTES)).unwrap_or_default()
        })
    }

    /// The answer with `extra` beside the receipt's fields, keys sorted (see
    /// [`WithFields`]).
    fn with_fields<T>(&self, ok: Option<bool>, write: impl FnOnce(&WithFields<'_>) -> T) -> T {
        let mut extra = vec![
            ("from", Field::Str(&self.from)),
            ("mentions", Field::Strs(&self.mentions)),
        ];
        extra.extend(ok.map(|ok| ("ok", Field::Bool(ok))));
        extra.push(("to", Field::Str(&self.to)));
        extra.push(("toAlias", Field::opt_str(self.to_alias.as_deref())));
        write(&WithFields(&self.receipt, &extra))
    }
}

/// One received message as tools and the CLI show it. The content is peer data.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
    #[serde(deserialize_with = "super::words::receipt_state")]
    pub state: super::words::Word,
    pub accepted_at_ms: u64,
    pub sent_at: String,
    pub expires_at_ms: u64,
    /// Inline `@references` are metadata for the reader; the text itself is unchanged.
    pub mentions: Vec<String>,
}

/// `peer_messages`: messages, then receipt events of the caller's own sends, and where to
/// continue.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
    #[serde(deserialize_with = "super::words::sent_state")]
    pub state: super::words::Word,
    pub sequence: Option<u64>,
    pub reply_message_id: Option<String>,
    /// `{code}` of a refusal.
    pub error: Option<ErrorCode>,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
    /// Why an unresolved message is still unresolved (`peer status` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// This is a second copy, sent after the recipient incarnation named here (which had
    /// accepted the first) was found to have lost it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redelivered_from: Option<String>,
}

/// A refusal's code name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
    /// A resource coordination answer.
    Resource(ResourceAnswer),
}

#[cfg(test)]
#[path = "answer_tests.rs"]
pub(crate) mod tests;
