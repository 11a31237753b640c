//! Typed decoding of the request an agent sends most, a plain `tools/call` of
//! `send_peer_message`, straight from the line's bytes into its strings in one pass, with no
//! JSON value tree for the envelope, the params and the arguments.
//!
//! Like [`crate::protocol::hot`], it only ever says yes to a plain request: the envelope keys
//! `jsonrpc` (`"2.0"`), `id` (a string or an integer), `method` (`"tools/call"`) and `params`,
//! each once, `method` before `params`; params with `name` (`"send_peer_message"`), `arguments`
//! and optionally `_meta` (which the general path ignores too), each once; arguments with only
//! `to` and `content` (strings) and `topic` and `replyTo` (strings or `null`), each once.
//! Anything else, malformed or merely unusual, yields `None` and the line takes the general
//! path (a `Value` tree, then [`crate::toolspec::parse_call`]), which gives the answer it always
//! gave. The strings are then checked by [`crate::toolspec::send_args`], the checks (and errors)
//! of the general path's reader, so a line decoded here means what the general path reads.
//! The line is already bounded by `frameBytes` ([`super::lines`]) before it gets here.

use crate::protocol::hot::{SendToolArgs, Str, Text, decode_with, owned, version_is_2};
use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;
use std::fmt;

/// A plain `send_peer_message` call, decoded: its request id and the tool's arguments as
/// strings, not yet checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct McpSend {
    pub id: Value,
    pub to: String,
    pub content: String,
    pub topic: Option<String>,
    pub reply_to: Option<String>,
}

/// The line (without its `\n`) as a plain `send_peer_message` call, or `None`: take the
/// general path.
pub fn decode_send(line: &[u8]) -> Option<McpSend> {
    decode_with(line, EnvelopeVisitor)
}

struct EnvelopeVisitor;

impl<'de> Visitor<'de> for EnvelopeVisitor {
    type Value = Option<McpSend>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON-RPC request object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut version_ok = false;
        let mut id: Option<Value> = None;
        let mut method_ok = false;
        let mut params: Option<CallParams<'de>> = None;
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
                "id" if id.is_none() => id = Some(map.next_value::<RequestId>()?.0),
                "method" if !method_ok => {
                    if map.next_value::<Str<'de>>()?.0 != "tools/call" {
                        return Ok(None);
                    }
                    method_ok = true;
                }
                "params" if method_ok && params.is_none() => params = Some(map.next_value()?),
                _ => return Ok(None),
            }
        }
        Ok(match (version_ok, id, params) {
            (true, Some(id), Some(p)) if p.name == "send_peer_message" => Some(McpSend {
                id,
                to: p.arguments.to.into_owned(),
                content: p.arguments.content.into_owned(),
                topic: owned(p.arguments.topic),
                reply_to: owned(p.arguments.reply_to),
            }),
            _ => None,
        })
    }
}

/// A request id the general path accepts: a string, or an integer (as `serde_json` reads it
/// into a `Value`: `u64` when not negative, else `i64`). A float, `null` or anything else is a
/// decode failure here.
struct RequestId(Value);

impl<'de> Deserialize<'de> for RequestId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<RequestId, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = RequestId;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or an integer")
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<RequestId, E> {
                Ok(RequestId(Value::from(n)))
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<RequestId, E> {
                Ok(RequestId(Value::from(n)))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<RequestId, E> {
                Ok(RequestId(Value::String(s.to_string())))
            }
        }
        d.deserialize_any(V)
    }
}

/// `tools/call` params of a plain send.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CallParams<'a> {
    #[serde(borrow)]
    name: Text<'a>,
    #[serde(borrow)]
    arguments: SendToolArgs<'a>,
    /// Request metadata (a progress token): the general path ignores it, and so does a send.
    #[serde(default, rename = "_meta")]
    _meta: Option<IgnoredAny>,
}

#[cfg(test)]
#[path = "hot_tests.rs"]
mod tests;
