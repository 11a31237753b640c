//! Typed decoding of the hot peer requests (`peer.send`, `peer.receipt`), and of the plain
//! success answers the sender reads back, straight from a frame's bytes into their structs,
//! in one pass with borrowed strings and no JSON value tree.
//!
//! It only ever says yes to a plain, fully valid request: exactly the envelope keys
//! `jsonrpc`, `id`, `method`, `params` (each once, `method` before `params`), a known method,
//! params with only that method's fields, each once and of the right type, ids that pass the
//! id check. Anything else, malformed or merely unusual (duplicate or unknown keys, `null`
//! where a value is optional, params before the method), yields `None`, and the caller takes
//! the general path (`rpc::parse` plus the method's own decoder), which gives the answer and
//! error text it always gave. So accepting a frame here never changes what a frame means: a
//! frame decoded here is one the general path decodes to the same request.

use super::message::{self, MessageBody, PeerSend, Receipt, ReceiptPush, ReceiptState};
use super::rpc::{ID_BYTES_MAX, Id};
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::fmt;

/// One hot request, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HotRequest {
    pub id: Id,
    pub call: HotCall,
}

/// The hot methods with their typed params.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HotCall {
    Send(PeerSend),
    Receipt(ReceiptPush),
}

impl HotCall {
    pub fn method(&self) -> &'static str {
        match self {
            HotCall::Send(_) => "peer.send",
            HotCall::Receipt(_) => "peer.receipt",
        }
    }
}

/// The frame (without its newline) as a hot request, or `None`: take the general path.
pub fn decode(frame: &[u8]) -> Option<HotRequest> {
    decode_with(frame, FrameVisitor)
}

/// Runs a request visitor over the whole frame: `None` when it declines, or when the frame
/// is no JSON object or has anything after it.
pub(crate) fn decode_with<'de, T, V: Visitor<'de, Value = Option<T>>>(
    frame: &'de [u8],
    visitor: V,
) -> Option<T> {
    let mut de = serde_json::Deserializer::from_slice(frame);
    let req = de.deserialize_map(visitor).ok()??;
    de.end().ok()?;
    Some(req)
}

/// Reads a `jsonrpc` value: whether it is the version both paths accept, `"2.0"`.
pub(crate) fn version_is_2<'de, A: MapAccess<'de>>(map: &mut A) -> Result<bool, A::Error> {
    Ok(map.next_value::<Str<'de>>()?.0 == "2.0")
}

struct FrameVisitor;

/// Which hot method the frame names.
#[derive(Clone, Copy)]
enum Method {
    Send,
    Receipt,
}

impl<'de> Visitor<'de> for FrameVisitor {
    type Value = Option<HotRequest>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON-RPC request object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut version_ok = false;
        let mut id: Option<Id> = None;
        let mut method: Option<Method> = None;
        let mut call: Option<HotCall> = None;
        // Returning early leaves the map unfinished, which the deserializer reports as an
        // error: either way the caller sees `None`.
        while let Some(key) = map.next_key::<Str<'de>>()? {
            match key.0.as_ref() {
                "jsonrpc" if !version_ok => {
                    if !version_is_2(&mut map)? {
                        return Ok(None);
                    }
                    version_ok = true;
                }
                "id" if id.is_none() => id = Some(map.next_value::<WireId>()?.0),
                "method" if method.is_none() => {
                    method = match map.next_value::<Str<'de>>()?.0.as_ref() {
                        "peer.send" => Some(Method::Send),
                        "peer.receipt" => Some(Method::Receipt),
                        _ => return Ok(None),
                    }
                }
                "params" if call.is_none() => match method {
                    Some(Method::Send) => {
                        let Some(send) = map.next_value::<SendParams>()?.checked() else {
                            return Ok(None);
                        };
                        call = Some(HotCall::Send(send));
                    }
                    Some(Method::Receipt) => {
                        let Some(push) = map.next_value::<ReceiptParams>()?.checked() else {
                            return Ok(None);
                        };
                        call = Some(HotCall::Receipt(push));
                    }
                    None => return Ok(None),
                },
                _ => return Ok(None),
            }
        }
        Ok(match (version_ok, id, call) {
            (true, Some(id), Some(call)) => Some(HotRequest { id, call }),
            _ => None,
        })
    }
}

/// A request id as the general path reads it: an integer that fits i64, or a string of at
/// most [`ID_BYTES_MAX`] bytes. Anything else is a decode failure here.
struct WireId(Id);

impl<'de> Deserialize<'de> for WireId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<WireId, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = WireId;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an integer or a short string")
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<WireId, E> {
                Ok(WireId(Id::Num(n)))
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<WireId, E> {
                i64::try_from(n)
                    .map(|n| WireId(Id::Num(n)))
                    .map_err(|_| E::custom("id out of range"))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<WireId, E> {
                if s.len() > ID_BYTES_MAX {
                    return Err(E::custom("id too long"));
                }
                Ok(WireId(Id::Str(s.to_string())))
            }
        }
        d.deserialize_any(V)
    }
}

/// `params.version` as the general path accepts it: the integer 1 (absent is fine too).
struct VersionOne;

impl<'de> Deserialize<'de> for VersionOne {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<VersionOne, D::Error> {
        match u64::deserialize(d)? {
            super::PROTOCOL_VERSION => Ok(VersionOne),
            _ => Err(de::Error::custom("unsupported version")),
        }
    }
}

/// `version` when present: a `null` there is refused by the general path, so it must not
/// read as absent here (which a plain `Option` would do).
fn version_one<'de, D: Deserializer<'de>>(d: D) -> Result<Option<VersionOne>, D::Error> {
    VersionOne::deserialize(d).map(Some)
}

/// A string field, borrowed from the frame unless it holds escapes. An optional one reads
/// `null` as absent, as the general path does.
pub(crate) type Text<'a> = Cow<'a, str>;

/// A string borrowed from the frame when it has no escapes (serde's `Cow` always copies).
pub(crate) struct Str<'de>(pub(crate) Cow<'de, str>);

impl<'de> Deserialize<'de> for Str<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Str<'de>, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Str<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Borrowed(s)))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Owned(s.to_string())))
            }
        }
        d.deserialize_str(V)
    }
}

/// An optional string field: `null` or absent is `None`.
fn opt_text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Text<'de>>, D::Error> {
    Ok(Option::<Str<'de>>::deserialize(d)?.map(|s| s.0))
}

pub(crate) fn owned(s: Option<Text<'_>>) -> Option<String> {
    s.map(Cow::into_owned)
}

/// `peer.send` params, field by field (the general path's `PeerSend`, flattened).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SendParams<'a> {
    #[serde(default, deserialize_with = "version_one")]
    version: Option<VersionOne>,
    #[serde(borrow)]
    message_id: Text<'a>,
    #[serde(borrow)]
    to: Text<'a>,
    #[serde(default, borrow, deserialize_with = "opt_text")]
    from_run: Option<Text<'a>>,
    #[serde(borrow)]
    content: Text<'a>,
    #[serde(default, borrow, deserialize_with = "opt_text")]
    topic: Option<Text<'a>>,
    #[serde(default, borrow, deserialize_with = "opt_text")]
    reply_to: Option<Text<'a>>,
    #[serde(default, borrow, deserialize_with = "opt_text")]
    correlation_id: Option<Text<'a>>,
    #[serde(default)]
    expires_at: Option<u64>,
}

impl SendParams<'_> {
    /// The typed request when every id field passes the general path's id check.
    fn checked(self) -> Option<PeerSend> {
        let _ = self.version;
        let ids = [
            ("fromRun", self.from_run.as_deref()),
            ("messageId", Some(self.message_id.as_ref())),
            ("replyTo", self.reply_to.as_deref()),
            ("correlationId", self.correlation_id.as_deref()),
        ];
        if ids.iter().any(|(k, v)| message::check_id(k, *v).is_err()) {
            return None;
        }
        Some(PeerSend {
            version: super::PROTOCOL_VERSION,
            message_id: self.message_id.into_owned(),
            to: self.to.into_owned(),
            from_run: owned(self.from_run),
            body: MessageBody {
                content: self.content.into_owned(),
                topic: owned(self.topic),
                reply_to: owned(self.reply_to),
            },
            correlation_id: owned(self.correlation_id),
            expires_at_ms: self.expires_at,
        })
    }
}

/// `peer.receipt` params: `fromRun` plus the receipt's fields.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ReceiptParams<'a> {
    #[serde(default, deserialize_with = "version_one")]
    version: Option<VersionOne>,
    #[serde(default, borrow, deserialize_with = "opt_text")]
    from_run: Option<Text<'a>>,
    #[serde(borrow)]
    message_id: Text<'a>,
    #[serde(borrow)]
    from_peer_id: Text<'a>,
    #[serde(borrow)]
    to_peer_id: Text<'a>,
    state: ReceiptState,
    sequence: u64,
    #[serde(borrow)]
    correlation_id: Text<'a>,
    at_ms: u64,
    #[serde(default, borrow, deserialize_with = "opt_text")]
    reply_message_id: Option<Text<'a>>,
    #[serde(default, borrow, deserialize_with = "opt_text")]
    code: Option<Text<'a>>,
}

impl ReceiptParams<'_> {
    fn checked(self) -> Option<ReceiptPush> {
        let _ = self.version;
        message::check_id("fromRun", self.from_run.as_deref()).ok()?;
        Some(ReceiptPush {
            version: super::PROTOCOL_VERSION,
            from_run: owned(self.from_run),
            receipt: Receipt {
                message_id: self.message_id.into_owned(),
                from_peer_id: self.from_peer_id.into_owned(),
                to_peer_id: self.to_peer_id.into_owned(),
                state: self.state,
                sequence: self.sequence,
                correlation_id: self.correlation_id.into_owned(),
                at_ms: self.at_ms,
                reply_message_id: owned(self.reply_message_id),
                code: owned(self.code),
            },
        })
    }
}

/// A plain `local.tool` call of `send_peer_message` from a local adapter, decoded: the
/// tool's arguments as their strings (checked by the tool's own reader afterwards) and the
/// envelope options a send uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalSend {
    pub id: Id,
    pub to: String,
    pub content: String,
    pub topic: Option<String>,
    pub reply_to: Option<String>,
    pub message_id: Option<String>,
    pub call_id: Option<String>,
}

/// The frame as a plain `send_peer_message` call, or `None`: take the general path.
///
/// Only a frame whose meaning is plain says yes: the envelope keys once each (`method`
/// before `params`), params with only `tool`, `args`, `messageId`, `callId` and `version`,
/// each once, `messageId` and `callId` strings (or `null`, which the general path also reads
/// as absent); args with only `to` and `content` (strings) and `topic` and `replyTo`
/// (strings or `null`). A run or automatic-reply envelope (`runId`, `auto`), any other
/// tool, or a value of another type declines, so the general path gives its own answer.
pub fn decode_local_send(frame: &[u8]) -> Option<LocalSend> {
    decode_with(frame, LocalVisitor)
}

struct LocalVisitor;

impl<'de> Visitor<'de> for LocalVisitor {
    type Value = Option<LocalSend>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON-RPC request object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut version_ok = false;
        let mut id: Option<Id> = None;
        let mut method_ok = false;
        let mut params: Option<LocalToolParams<'de>> = None;
        while let Some(key) = map.next_key::<Str<'de>>()? {
            match key.0.as_ref() {
                "jsonrpc" if !version_ok => {
                    if !version_is_2(&mut map)? {
                        return Ok(None);
                    }
                    version_ok = true;
                }
                "id" if id.is_none() => id = Some(map.next_value::<WireId>()?.0),
                "method" if !method_ok => {
                    if map.next_value::<Str<'de>>()?.0 != "local.tool" {
                        return Ok(None);
                    }
                    method_ok = true;
                }
                "params" if method_ok && params.is_none() => params = Some(map.next_value()?),
                _ => return Ok(None),
            }
        }
        Ok(match (version_ok, id, params) {
            (true, Some(id), Some(p)) if p.tool == "send_peer_message" => {
                let _ = p.version;
                Some(LocalSend {
                    id,
                    to: p.args.to.into_owned(),
                    content: p.args.content.into_owned(),
                    topic: owned(p.args.topic),
                    reply_to: owned(p.args.reply_to),
                    message_id: owned(p.message_id),
                    call_id: owned(p.call_id),
                })
            }
            _ => None,
        })
    }
}

/// `local.tool` params of a plain send.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct LocalToolParams<'a> {
    #[serde(default, deserialize_with = "version_one")]
    version: Option<VersionOne>,
    #[serde(borrow)]
    tool: Text<'a>,
    #[serde(borrow)]
    args: SendToolArgs<'a>,
    #[serde(default, borrow, deserialize_with = "opt_text")]
    message_id: Option<Text<'a>>,
    #[serde(default, borrow, deserialize_with = "opt_text")]
    call_id: Option<Text<'a>>,
}

/// `send_peer_message` arguments as strings (also what `peer mcp`'s typed decoder reads).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct SendToolArgs<'a> {
    #[serde(borrow)]
    pub to: Text<'a>,
    #[serde(borrow)]
    pub content: Text<'a>,
    #[serde(default, borrow, deserialize_with = "opt_text")]
    pub topic: Option<Text<'a>>,
    #[serde(default, borrow, deserialize_with = "opt_text")]
    pub reply_to: Option<Text<'a>>,
}

/// A plain success answer `{"jsonrpc":"2.0","id":N,"result":R}`: exactly those keys, each
/// once, `N` an integer that fits i64. Yields the id and the result's JSON text, unparsed, so
/// the caller decodes it straight into the type it expects. Anything else (an error answer,
/// duplicate or unknown keys, another id shape) yields `None`: take `rpc::parse`, which
/// reads an accepted frame as the same id and result.
pub fn decode_result(frame: &[u8]) -> Option<(i64, Box<RawValue>)> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Success<'a> {
        #[serde(borrow)]
        jsonrpc: &'a str,
        id: i64,
        #[serde(borrow)]
        result: &'a RawValue,
    }
    let s: Success = serde_json::from_slice(frame).ok()?;
    (s.jsonrpc == "2.0").then(|| (s.id, s.result.to_owned()))
}

/// A result's JSON text as the receipt answering `peer.send`: decoded straight into the
/// struct, or, when that fails, through a `Value` and [`Receipt::decode`], so a malformed
/// receipt gets the error text it always got.
pub fn receipt_answer(raw: &RawValue) -> crate::error::Result<Receipt> {
    if let Ok(r) = serde_json::from_str::<Receipt>(raw.get()) {
        return Ok(r);
    }
    let v: serde_json::Value = serde_json::from_str(raw.get()).map_err(|e| {
        crate::error::Error::new(
            crate::error::Code::InvalidRequest,
            format!("the peer answered with a malformed receipt: {e}"),
        )
    })?;
    Receipt::decode(v)
}

/// The recipient's `flushedDevice` statement in a `peer.send` answer's JSON text, if it makes
/// one (a number); anything else, or a malformed answer, states nothing.
pub fn flushed_device(raw: &RawValue) -> Option<u64> {
    #[derive(serde::Deserialize)]
    struct Stated {
        #[serde(default, rename = "flushedDevice")]
        flushed_device: Option<u64>,
    }
    serde_json::from_str::<Stated>(raw.get())
        .ok()
        .and_then(|s| s.flushed_device)
}

/// A `peer.send` answer's JSON text as its receipt and `flushedDevice` statement: exactly
/// what [`receipt_answer`] and [`flushed_device`] give for it (two passes over a few hundred
/// bytes, rather than a second struct that repeats the receipt's fields).
pub fn stated_receipt(raw: &RawValue) -> crate::error::Result<(Receipt, Option<u64>)> {
    Ok((receipt_answer(raw)?, flushed_device(raw)))
}

#[cfg(test)]
#[path = "hot_tests.rs"]
mod tests;
