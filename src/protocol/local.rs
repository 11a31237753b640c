//! The trusted local methods (`local.*`) a root's own adapters call, as typed requests:
//! [`LocalRequest`] is the run and automatic-reply envelope every call carries plus one
//! [`LocalCall`]. `encode` gives the method name and params object for the local channel;
//! `decode` reads them back with the strictness each field always had (ids and required
//! strings are checked, the envelope fields of `local.tool` are read leniently).

use super::message::{opt_id, opt_str};
use crate::error::{Code, Error, Result};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

/// One local call and whom it acts for.
#[derive(Clone, Debug, PartialEq)]
pub struct LocalRequest {
    /// The root's run the call acts as (None: the root itself). A connection bound to a run
    /// by that run's secret cannot name another.
    pub run_id: Option<String>,
    /// The conversation an automatic handler replies in (its reply budget).
    pub auto: Option<String>,
    pub call: LocalCall,
}

/// The local methods.
#[derive(Clone, Debug, PartialEq)]
pub enum LocalCall {
    /// `local.info`: identity, capabilities, store counters, limits.
    Info,
    /// `local.tool`: one model tool.
    Tool(LocalTool),
    /// `local.consume`: context first, then the consumed receipt.
    Consume(MessageNote),
    /// `local.prepare`: the context record only.
    Prepare(MessageNote),
    /// `local.reply`: a reply to a received message.
    Reply(LocalReply),
    /// `local.status`: the sender's view of one sent message.
    Status(SentMessage),
    /// `local.wait_receipt`: waits for a sent message's receipt to reach a state.
    WaitReceipt(WaitReceipt),
    /// `local.run.publish`: a new child run of the root.
    RunPublish(RunPublish),
    /// `local.run.retire`: ends a child run.
    RunRetire(RunRetire),
}

/// `local.tool {tool, args, callId?, messageId?, eventsAfter?, unconsumed?, waitFor?}`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalTool {
    pub tool: String,
    /// The tool's arguments, validated by the tool's own strict reader.
    #[serde(default = "empty_object")]
    pub args: Value,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient_str"
    )]
    pub call_id: Option<String>,
    /// The message id a send uses (checked by the root).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient_str"
    )]
    pub message_id: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient_u64"
    )]
    pub events_after: Option<u64>,
    /// Only messages not yet consumed.
    #[serde(
        default,
        skip_serializing_if = "std::ops::Not::not",
        deserialize_with = "lenient_true"
    )]
    pub unconsumed: bool,
    /// `"message"`: only a message ends a wait, not a receipt update.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient_str"
    )]
    pub wait_for: Option<String>,
}

/// `local.consume` / `local.prepare {messageId, note}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageNote {
    pub message_id: String,
    #[serde(default)]
    pub note: Option<String>,
}

/// `local.reply {messageId, content, topic, replyId?}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalReply {
    /// The received message (id or unique prefix).
    pub message_id: String,
    pub content: String,
    #[serde(default)]
    pub topic: Option<String>,
    /// The reply's own message id (default: a fresh one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_id: Option<String>,
}

/// `local.status {messageId}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SentMessage {
    pub message_id: String,
}

/// `local.wait_receipt {messageId, state, waitMs}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WaitReceipt {
    pub message_id: String,
    /// A state name; the root refuses anything but the four progress states.
    #[serde(default, deserialize_with = "lenient_str")]
    pub state: Option<String>,
    #[serde(default, deserialize_with = "lenient_u64")]
    pub wait_ms: Option<u64>,
}

/// `local.run.publish {alias, delegateControl?}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunPublish {
    pub alias: String,
    #[serde(
        default,
        skip_serializing_if = "std::ops::Not::not",
        deserialize_with = "lenient_true"
    )]
    pub delegate_control: bool,
}

/// `local.run.retire {run}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRetire {
    pub run: String,
}

impl LocalTool {
    /// A call of tool `name` with `args` and no envelope options.
    pub fn new(name: &str, args: Value) -> LocalTool {
        LocalTool {
            tool: name.into(),
            args,
            ..LocalTool::default()
        }
    }
}

impl LocalCall {
    /// The method name on the local channel.
    pub fn method(&self) -> &'static str {
        match self {
            LocalCall::Info => "local.info",
            LocalCall::Tool(_) => "local.tool",
            LocalCall::Consume(_) => "local.consume",
            LocalCall::Prepare(_) => "local.prepare",
            LocalCall::Reply(_) => "local.reply",
            LocalCall::Status(_) => "local.status",
            LocalCall::WaitReceipt(_) => "local.wait_receipt",
            LocalCall::RunPublish(_) => "local.run.publish",
            LocalCall::RunRetire(_) => "local.run.retire",
        }
    }

    /// Reads the params of `method`; an unknown method is `METHOD_NOT_FOUND`, a malformed
    /// field `USAGE`.
    pub fn decode(method: &str, params: Map<String, Value>) -> Result<LocalCall> {
        Ok(match method {
            "local.info" => LocalCall::Info,
            "local.tool" => LocalCall::Tool(fields(params)?),
            "local.consume" => LocalCall::Consume(fields(params)?),
            "local.prepare" => LocalCall::Prepare(fields(params)?),
            "local.reply" => {
                let reply: LocalReply = fields(params)?;
                super::message::check_id("replyId", reply.reply_id.as_deref())?;
                LocalCall::Reply(reply)
            }
            "local.status" => LocalCall::Status(fields(params)?),
            "local.wait_receipt" => LocalCall::WaitReceipt(fields(params)?),
            "local.run.publish" => LocalCall::RunPublish(fields(params)?),
            "local.run.retire" => LocalCall::RunRetire(fields(params)?),
            other => return Err(super::rpc::unknown_method("local method", other)),
        })
    }

    /// The call's own params (without the envelope).
    fn params(&self) -> Value {
        let v = match self {
            LocalCall::Info => Ok(Value::Object(Map::new())),
            LocalCall::Tool(t) => serde_json::to_value(t),
            LocalCall::Consume(n) | LocalCall::Prepare(n) => serde_json::to_value(n),
            LocalCall::Reply(r) => serde_json::to_value(r),
            LocalCall::Status(s) => serde_json::to_value(s),
            LocalCall::WaitReceipt(w) => serde_json::to_value(w),
            LocalCall::RunPublish(p) => serde_json::to_value(p),
            LocalCall::RunRetire(r) => serde_json::to_value(r),
        };
        // Plain structs of strings, numbers and a JSON value always serialize.
        v.unwrap_or_else(|_| Value::Object(Map::new()))
    }
}

impl LocalRequest {
    /// A call for the root itself.
    pub fn root(call: LocalCall) -> LocalRequest {
        LocalRequest {
            run_id: None,
            auto: None,
            call,
        }
    }

    /// The method and params object sent on the local channel.
    pub fn encode(&self) -> (&'static str, Value) {
        let mut p = match self.call.params() {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        p.insert("version".into(), Value::from(super::PROTOCOL_VERSION));
        if let Some(r) = &self.run_id {
            p.insert("runId".into(), Value::from(r.as_str()));
        }
        if let Some(a) = &self.auto {
            p.insert("auto".into(), Value::from(a.as_str()));
        }
        (self.call.method(), Value::Object(p))
    }

    /// Reads one request: the envelope first (`runId` must be an id, `auto` a string), then
    /// the method's params.
    pub fn decode(method: &str, params: Map<String, Value>) -> Result<LocalRequest> {
        let run_id = opt_id(&params, "runId")?;
        let auto = opt_str(&params, "auto")?.map(str::to_string);
        Ok(LocalRequest {
            run_id,
            auto,
            call: LocalCall::decode(method, params)?,
        })
    }
}

fn fields<T: DeserializeOwned>(params: Map<String, Value>) -> Result<T> {
    serde_json::from_value(Value::Object(params))
        .map_err(|e| Error::new(Code::Usage, format!("params: {e}")))
}

fn empty_object() -> Value {
    Value::Object(Map::new())
}

/// A string, or None for any other JSON value (these fields were always read leniently).
fn lenient_str<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Option<String>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::String(s) => Some(s),
        _ => None,
    })
}

/// A non-negative integer, or None for any other JSON value.
fn lenient_u64<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Option<u64>, D::Error> {
    Ok(Value::deserialize(d)?.as_u64())
}

/// True only for JSON `true`.
fn lenient_true<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<bool, D::Error> {
    Ok(Value::deserialize(d)? == Value::Bool(true))
}

#[cfg(test)]
#[path = "local_tests.rs"]
mod tests;
