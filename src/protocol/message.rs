//! The messaging methods between roots as typed wire shapes: [`MessageBody`] (what a person
//! wrote, shared by every message struct), [`PeerSend`] (the params of `peer.send`),
//! [`Receipt`] (the custody answer of `peer.send` and `peer.status`) and [`ReceiptPush`] (the
//! params of `peer.receipt`). Field names are the camelCase of peer-protocol(7); decoding
//! reads the params object the frame decoder produced and answers each malformed field with
//! the error code the method has always used.

use crate::error::{Code, Error, Result};
use crate::{identity, sanitize};
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::borrow::Cow;

/// The text of one message and how it threads: the same three fields in tool arguments, the
/// outbox, the wire and the inbox.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageBody {
    pub content: String,
    pub topic: Option<String>,
    /// The message id this message answers.
    pub reply_to: Option<String>,
}

impl MessageBody {
    /// A body without topic or reply.
    pub fn text(content: impl Into<String>) -> MessageBody {
        MessageBody {
            content: content.into(),
            topic: None,
            reply_to: None,
        }
    }
}

/// Receipt states. Order of progress: accepted → prepared → consumed → replied; refused and
/// expired are terminal failures reachable only before consumption.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReceiptState {
    Accepted,
    Prepared,
    Consumed,
    Replied,
    Refused,
    Expired,
}

impl ReceiptState {
    /// Whether a wait for `wanted` is over at `self`: reached, failed, or moved past a point
    /// from which `wanted` can no longer come.
    pub fn reached(self, wanted: ReceiptState) -> bool {
        self == wanted
            || self.is_failure()
            || (self != ReceiptState::Refused && !self.may_become(wanted) && !wanted.is_failure())
    }

    pub fn name(self) -> &'static str {
        match self {
            ReceiptState::Accepted => "accepted",
            ReceiptState::Prepared => "prepared",
            ReceiptState::Consumed => "consumed",
            ReceiptState::Replied => "replied",
            ReceiptState::Refused => "refused",
            ReceiptState::Expired => "expired",
        }
    }

    /// The state a sender may wait for, by name (`accepted`, `prepared`, `consumed`,
    /// `replied`); failures are not waited for, they end every wait.
    pub fn waitable(name: &str) -> Option<ReceiptState> {
        match name {
            "accepted" => Some(ReceiptState::Accepted),
            "prepared" => Some(ReceiptState::Prepared),
            "consumed" => Some(ReceiptState::Consumed),
            "replied" => Some(ReceiptState::Replied),
            _ => None,
        }
    }

    fn rank(self) -> u8 {
        match self {
            ReceiptState::Accepted => 0,
            ReceiptState::Prepared => 1,
            ReceiptState::Consumed => 2,
            ReceiptState::Replied => 3,
            ReceiptState::Refused | ReceiptState::Expired => 4,
        }
    }

    /// Refused or expired: the message will never be consumed.
    pub fn is_failure(self) -> bool {
        matches!(self, ReceiptState::Refused | ReceiptState::Expired)
    }

    /// Nothing further can happen to the message except retention removal.
    pub fn is_final(self) -> bool {
        self.is_failure() || self == ReceiptState::Replied
    }

    /// The forward-only rule: progress moves up; a failure may only replace a state before
    /// consumption; nothing leaves a failure.
    pub fn may_become(self, next: ReceiptState) -> bool {
        if self.is_failure() {
            return false;
        }
        if next.is_failure() {
            return matches!(self, ReceiptState::Accepted | ReceiptState::Prepared);
        }
        next.rank() > self.rank()
    }
}

/// The optional `peer.send` answer field in which a recipient states that an fdatasync of its
/// journal, begun after the request arrived, returned for this very accept, and that this
/// fdatasync flushed the write cache of the device with this `st_dev` (see
/// `store::flush`). Older peers neither send nor read it.
pub const FLUSHED_DEVICE: &str = "flushedDevice";

/// Bytes reserved for a receipt's JSON text: its fixed keys, four ids and a statement.
const RECEIPT_JSON_BYTES: usize = 512;

/// A custody receipt as it crosses the wire: the answer of `peer.send` and `peer.status`, the
/// body of `peer.receipt`, and what local adapters are shown.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Receipt {
    pub message_id: String,
    /// The original sender's peerId.
    pub from_peer_id: String,
    /// The original target's peerId.
    pub to_peer_id: String,
    pub state: ReceiptState,
    /// The recipient's own sequence (0 when the recipient never accepted the message).
    pub sequence: u64,
    pub correlation_id: String,
    pub at_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_message_id: Option<String>,
    /// The refusal code name (e.g. `QUEUE_FULL`) for a `refused` receipt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
}

impl Receipt {
    /// Whether `self` may replace `cur` as the latest receipt of an outbox entry. Progress only
    /// moves forward; but a failure the recipient never confirmed holding the message for
    /// (sequence 0: a refusal before acceptance, or the sender's own expiry of an entry it
    /// never got an answer for) yields to the recipient's own receipt for the message it holds
    /// (sequence above 0): that receipt is the recipient's statement, ours was an inference.
    pub fn may_replace(&self, cur: &Receipt) -> bool {
        cur.state.may_become(self.state)
            || (cur.state.is_failure() && cur.sequence == 0 && self.sequence > 0)
    }

    /// The receipt as compact JSON text, byte for byte what serialising its `Value` writes
    /// (keys in sorted order).
    pub fn to_json(&self) -> Vec<u8> {
        self.to_json_stating(None)
    }

    /// [`to_json`](Self::to_json) as a `peer.send` answer, with the recipient's
    /// `flushedDevice` statement when it makes one (see [`FLUSHED_DEVICE`]).
    pub fn to_json_stating(&self, flushed_device: Option<u64>) -> Vec<u8> {
        let stated = flushed_device.map(|d| (FLUSHED_DEVICE, Field::Num(d)));
        let extra = stated.as_slice();
        super::rpc::json_sized(&WithFields(self, extra), RECEIPT_JSON_BYTES)
    }

    /// The receipt's wire entries in sorted key order; absent optionals are `None` (left
    /// out, not written as `null`).
    fn wire_fields(&self) -> [(&'static str, Option<Field<'_>>); 9] {
        [
            ("atMs", Some(Field::Num(self.at_ms))),
            ("code", self.code.as_deref().map(Field::Str)),
            ("correlationId", Some(Field::Str(&self.correlation_id))),
            ("fromPeerId", Some(Field::Str(&self.from_peer_id))),
            ("messageId", Some(Field::Str(&self.message_id))),
            (
                "replyMessageId",
                self.reply_message_id.as_deref().map(Field::Str),
            ),
            ("sequence", Some(Field::Num(self.sequence))),
            ("state", Some(Field::Str(self.state.name()))),
            ("toPeerId", Some(Field::Str(&self.to_peer_id))),
        ]
    }

    /// A receipt a peer answered with (the result of `peer.send` or `peer.status`).
    pub fn decode(v: Value) -> Result<Receipt> {
        serde_json::from_value(v).map_err(|e| {
            Error::new(
                Code::InvalidRequest,
                format!("the peer answered with a malformed receipt: {e}"),
            )
        })
    }
}

/// One borrowed value of a wire object that carries a receipt's entries beside its own.
#[derive(Clone, Copy, Debug)]
pub enum Field<'a> {
    Num(u64),
    Bool(bool),
    Str(&'a str),
    /// Written as `null`.
    Null,
    Strs(&'a [String]),
}

impl Serialize for Field<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match *self {
            Field::Num(n) => s.serialize_u64(n),
            Field::Bool(b) => s.serialize_bool(b),
            Field::Str(t) => s.serialize_str(t),
            Field::Null => s.serialize_unit(),
            Field::Strs(l) => l.serialize(s),
        }
    }
}

impl<'a> Field<'a> {
    /// An optional string: `null` when absent.
    pub fn opt_str(v: Option<&'a str>) -> Field<'a> {
        v.map_or(Field::Null, Field::Str)
    }
}

/// A receipt serialised as the wire writes every object that carries it: its own entries and
/// the extra entries of `.1` (sorted by key) in one object, all keys in sorted order, the
/// order a `Value` object writes them, so the bytes are the ones its `Value` gives. The
/// receipt's derived `Serialize` keeps the declaration order the store's records have
/// always had.
pub struct WithFields<'a>(pub &'a Receipt, pub &'a [(&'static str, Field<'a>)]);

impl Serialize for WithFields<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let own = self.0.wire_fields();
        let mut own = own
            .iter()
            .filter_map(|(k, v)| v.map(|v| (*k, v)))
            .peekable();
        let mut extra = self.1.iter().copied().peekable();
        let mut m = s.serialize_map(None)?;
        loop {
            let next = match (own.peek(), extra.peek()) {
                (Some(a), Some(b)) if b.0 < a.0 => extra.next(),
                (Some(_), _) => own.next(),
                (None, _) => extra.next(),
            };
            let Some((k, v)) = next else { break };
            m.serialize_entry(k, &v)?;
        }
        m.end()
    }
}

/// The params of `peer.send`: one message for one exact recipient. Who sends it is the
/// authenticated connection plus `fromRun`, never a field of these params. Decoded params own
/// their strings; a delivery attempt borrows them from where the message is kept, so it
/// copies none of it, its content least of all.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PeerSend<'a> {
    /// Always 1 on the way out; the endpoint has checked it on the way in.
    #[serde(default = "protocol_version", skip_deserializing)]
    pub version: u64,
    pub message_id: Cow<'a, str>,
    /// The recipient's peerId.
    pub to: Cow<'a, str>,
    /// The sending root's run, or None for the root itself.
    #[serde(default)]
    pub from_run: Option<Cow<'a, str>>,
    #[serde(flatten)]
    pub body: Cow<'a, MessageBody>,
    #[serde(default)]
    pub correlation_id: Option<Cow<'a, str>>,
    /// Epoch milliseconds.
    #[serde(default, rename = "expiresAt")]
    pub expires_at_ms: Option<u64>,
}

/// `peer.send` params as the encoder writes them: keys in sorted order, the order a `Value`
/// object writes them (the body's fields flattened, absent optionals as `null`), so they
/// serialise to the bytes the params' `Value` gives without building one.
impl Serialize for PeerSend<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let body = &*self.body;
        let mut m = s.serialize_map(Some(9))?;
        m.serialize_entry("content", &body.content)?;
        m.serialize_entry("correlationId", &self.correlation_id)?;
        m.serialize_entry("expiresAt", &self.expires_at_ms)?;
        m.serialize_entry("fromRun", &self.from_run)?;
        m.serialize_entry("messageId", &self.message_id)?;
        m.serialize_entry("replyTo", &body.reply_to)?;
        m.serialize_entry("to", &self.to)?;
        m.serialize_entry("topic", &body.topic)?;
        m.serialize_entry("version", &self.version)?;
        m.end()
    }
}

impl<'a> PeerSend<'a> {
    /// `peer.send` params (this protocol's version) borrowed from where the message is kept.
    pub fn of_parts(
        message_id: &'a str,
        to: &'a str,
        from_run: Option<&'a str>,
        body: &'a MessageBody,
        correlation_id: Option<&'a str>,
        expires_at_ms: Option<u64>,
    ) -> PeerSend<'a> {
        PeerSend {
            version: crate::protocol::PROTOCOL_VERSION,
            message_id: Cow::Borrowed(message_id),
            to: Cow::Borrowed(to),
            from_run: from_run.map(Cow::Borrowed),
            body: Cow::Borrowed(body),
            correlation_id: correlation_id.map(Cow::Borrowed),
            expires_at_ms,
        }
    }

    /// Bytes of content the params carry.
    pub fn content_len(&self) -> usize {
        self.body.content.len()
    }
}

impl PeerSend<'static> {
    /// Reads and checks `peer.send` params: every malformed field is `USAGE`.
    pub fn decode(params: Map<String, Value>) -> Result<PeerSend<'static>> {
        let send: PeerSend = serde_json::from_value(Value::Object(params))
            .map_err(|e| Error::new(Code::Usage, format!("peer.send params: {e}")))?;
        check_id("fromRun", send.from_run.as_deref())?;
        check_id("messageId", Some(&send.message_id))?;
        check_id("replyTo", send.body.reply_to.as_deref())?;
        check_id("correlationId", send.correlation_id.as_deref())?;
        Ok(send)
    }
}

/// The params of `peer.receipt`: a recipient's receipt plus the run of the recipient that
/// states it (its peerId must be the receipt's `toPeerId`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReceiptPush {
    #[serde(default = "protocol_version", skip_deserializing)]
    pub version: u64,
    #[serde(default)]
    pub from_run: Option<String>,
    #[serde(flatten)]
    pub receipt: Receipt,
}

/// `peer.receipt` params as the encoder writes them: keys in sorted order, the order a
/// `Value` object writes them (the receipt's fields flattened, `fromRun` null when absent).
impl Serialize for ReceiptPush {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let extra = [
            ("fromRun", Field::opt_str(self.from_run.as_deref())),
            ("version", Field::Num(self.version)),
        ];
        WithFields(&self.receipt, &extra).serialize(s)
    }
}

impl ReceiptPush {
    /// Reads `peer.receipt` params: a malformed `fromRun` is `USAGE`, a malformed receipt
    /// `INVALID_REQUEST`.
    pub fn decode(params: Map<String, Value>) -> Result<ReceiptPush> {
        let from_run = opt_id(&params, "fromRun")?;
        let receipt = Receipt::decode(Value::Object(params))?;
        Ok(ReceiptPush {
            version: protocol_version(),
            from_run,
            receipt,
        })
    }
}

/// The params naming one message of a sender (`peer.status`, `peer.subscribe`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerStatus {
    pub from_run: Option<String>,
    pub message_id: String,
    /// The recipient's peerId.
    pub to: String,
}

impl PeerStatus {
    /// The params as a sender asks a recipient root.
    pub fn encode(&self) -> Value {
        let mut m = Map::new();
        m.insert("messageId".into(), Value::String(self.message_id.clone()));
        m.insert("to".into(), Value::String(self.to.clone()));
        if let Some(run) = &self.from_run {
            m.insert("fromRun".into(), Value::String(run.clone()));
        }
        Value::Object(m)
    }

    pub fn decode(params: &Map<String, Value>) -> Result<PeerStatus> {
        Ok(PeerStatus {
            from_run: opt_id(params, "fromRun")?,
            message_id: opt_id(params, "messageId")?
                .ok_or_else(|| Error::new(Code::Usage, "params.messageId is required"))?,
            to: opt_str(params, "to")?
                .ok_or_else(|| Error::new(Code::Usage, "params.to is required"))?
                .to_string(),
        })
    }
}

/// The `fromRun` of any peer method's params (absent or null: the root itself).
pub fn from_run(params: &Map<String, Value>) -> Result<Option<String>> {
    opt_id(params, "fromRun")
}

fn protocol_version() -> u64 {
    super::PROTOCOL_VERSION
}

/// An optional string param (`null` counts as absent); anything else is `USAGE`.
pub(crate) fn opt_str<'a>(p: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>> {
    match p.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(Error::new(
            Code::Usage,
            format!("params.{key} must be a string"),
        )),
    }
}

/// An optional id param: a string of `[A-Za-z0-9_.-]`, else `USAGE`.
pub(crate) fn opt_id(p: &Map<String, Value>, key: &str) -> Result<Option<String>> {
    let s = opt_str(p, key)?;
    check_id(key, s)?;
    Ok(s.map(str::to_string))
}

/// `USAGE` unless `value` (when present) is an id.
pub(crate) fn check_id(key: &str, value: Option<&str>) -> Result<()> {
    match value {
        Some(s) if !identity::is_valid_id(s) => Err(Error::new(
            Code::Usage,
            format!(
                "params.{key} {:?} is not an id ([A-Za-z0-9_.-], at most {})",
                sanitize::line(s, 40),
                crate::config::internal::ID_CHARS_MAX
            ),
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
#[path = "message_tests.rs"]
mod tests;
