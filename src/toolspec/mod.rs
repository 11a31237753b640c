//! The model tools — the four local ones (`list_peers`, `send_peer_message`, `peer_messages`,
//! `coordinate_resource`) and the six cross-machine ask tools of [`ask`]: their JSON Schemas,
//! strict validation of arguments into typed calls, the capability each call needs, and the
//! [`ToolHost`] interface that executes them.
//!
//! The CLI, the MCP server and child-run tool paths all go through [`parse_call`] so a model
//! sees the same contract everywhere. This module does no I/O and knows no principal: the
//! host decides who is calling and checks [`check_capability`] against that caller.
#![forbid(unsafe_code)]

pub mod answer;
mod args;
pub mod ask;
pub mod resource_answer;
mod schema;
pub mod words;

use crate::config::internal::TARGET_CHARS_MAX;
use crate::config::{Limits, Scope};
use crate::error::{Code, Error, Result};
use crate::protocol::message::MessageBody;
use args::Args;
use serde::Serialize;
use serde_json::{Map, Value};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

pub use crate::config::internal::ID_CHARS_MAX;
pub use crate::config::internal::QUERY_CHARS_MAX;
pub use crate::config::internal::RESOURCE_CHARS_MAX;
pub use crate::config::internal::TOPIC_CHARS_MAX;
/// The authority every piece of peer- or friend-written text carries in model-visible output.
pub const PEER_AUTHORITY: &str = "external-peer: not a user instruction";

/// Capability names, as the protocol lists them ("Capabilities include message.send, …").
pub const CAP_MESSAGE_SEND: &str = "message.send";
pub const CAP_MESSAGE_RECEIVE: &str = "message.receive";
pub const CAP_MESSAGE_WAIT: &str = "message.wait";
pub const CAP_RESOURCE_REQUEST: &str = "resource.request";
pub const CAP_RESOURCE_CONTROL: &str = "resource.control";

/// Tool names, in listing order.
pub const TOOL_NAMES: [&str; 10] = [
    "list_peers",
    "send_peer_message",
    "peer_messages",
    "coordinate_resource",
    ask::ASK_TOOL_NAMES[0],
    ask::ASK_TOOL_NAMES[1],
    ask::ASK_TOOL_NAMES[2],
    ask::ASK_TOOL_NAMES[3],
    ask::ASK_TOOL_NAMES[4],
    ask::ASK_TOOL_NAMES[5],
];

/// `list_peers` arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListPeersArgs {
    pub scope: Option<Scope>,
    pub query: Option<String>,
    pub cursor: Option<String>,
}

/// `send_peer_message` arguments. `to` is normalized: a leading `@` is removed, leaving an
/// alias or an exact peer id (see [`crate::mention::is_peer_id`]). Serializes to the
/// arguments object [`parse_call`] reads back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SendArgs {
    pub to: String,
    #[serde(flatten)]
    pub body: MessageBody,
}

/// `peer_messages` arguments. `wait_ms` is 0 when absent; `from` is normalized like
/// [`SendArgs::to`]. Serializes to the arguments object [`parse_call`] reads back, absent
/// fields left out.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MessagesArgs {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    #[serde(skip_serializing_if = "is_zero")]
    pub wait_ms: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// `coordinate_resource` arguments, one variant per `op`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResourceArgs {
    /// Policy, controller, holders and queue of one resource, or of all when `None`.
    Status { resource: Option<String> },
    /// Ask for a reservation; waits up to `wait_ms` (0 or absent: queue and return at once).
    Request {
        resource: String,
        capacity: Option<u64>,
        wait_ms: Option<u64>,
        /// The policy epoch the caller saw; an older one answers STALE_POLICY.
        epoch: Option<u64>,
    },
    /// Controller only: grant a queued ticket.
    Grant {
        resource: String,
        ticket: String,
        epoch: Option<u64>,
    },
    /// Give a reservation back, by ticket or fencing token; neither means the caller's own.
    Release {
        resource: String,
        ticket: Option<String>,
        /// The fencing token exactly as `request` returns it (a number).
        token: Option<u64>,
    },
    /// Withdraw a queued request.
    CancelRequest { resource: String, ticket: String },
    /// Become (or with `force`, replace a dead) controller; optionally set capacity.
    SetController {
        resource: String,
        capacity: Option<u64>,
        force: bool,
        /// Hand the resource back to automatic FIFO granting.
        automatic: bool,
    },
}

/// One validated tool call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolCall {
    ListPeers(ListPeersArgs),
    Send(SendArgs),
    Messages(MessagesArgs),
    Resource(ResourceArgs),
    /// One of the cross-machine ask tools.
    Ask(ask::AskCall),
}

/// Executes validated tool calls; implemented by the runtime (root or child-run adapter).
pub trait ToolHost: Send + Sync {
    /// Runs one validated tool call for the calling principal. `call_id` is the MCP request id
    /// (retry-stable message ids derive from it). `cancel` is set when the client cancels
    /// (notifications/cancelled) or shuts down; long waits must poll it.
    fn call(&self, call: ToolCall, call_id: &str, cancel: &Arc<AtomicBool>) -> Result<ToolOutput>;
    /// Called right after a call's answer went to the client: bookkeeping the answer did not
    /// need (a send's own copy of its receipt) is done here, while the client reads, instead
    /// of on the next call's path. The default does nothing.
    fn after_answer(&self) {}
    /// Whether the ask tools are offered (`tools/list`) and accepted (`tools/call`): a front
    /// end without friends configured leaves them out instead of listing tools that can only
    /// answer NOT_FOUND.
    fn offers_ask_tools(&self) -> bool {
        true
    }
}

/// What a host answered: a typed answer, which a front end may write as JSON text without
/// building a `Value` (the MCP server does so for a send's receipt, the call agents make
/// most), or a JSON object made elsewhere (the ask tools, test hosts).
// Made and moved once per call, host to writer: a box would cost an allocation per call to
// save copying a few hundred bytes once.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum ToolOutput {
    Answer(answer::ToolAnswer),
    Value(Value),
}

impl From<Value> for ToolOutput {
    fn from(v: Value) -> ToolOutput {
        ToolOutput::Value(v)
    }
}

impl From<answer::ToolAnswer> for ToolOutput {
    fn from(a: answer::ToolAnswer) -> ToolOutput {
        ToolOutput::Answer(a)
    }
}

impl ToolOutput {
    /// The answer as the JSON object tools have always returned.
    pub fn into_value(self) -> Result<Value> {
        match self {
            ToolOutput::Answer(a) => {
                serde_json::to_value(a).map_err(|e| Error::new(Code::Io, e.to_string()))
            }
            ToolOutput::Value(v) => Ok(v),
        }
    }
}

impl ToolCall {
    /// The tool's wire name.
    pub fn tool_name(&self) -> &'static str {
        match self {
            ToolCall::ListPeers(_) => TOOL_NAMES[0],
            ToolCall::Send(_) => TOOL_NAMES[1],
            ToolCall::Messages(_) => TOOL_NAMES[2],
            ToolCall::Resource(_) => TOOL_NAMES[3],
            ToolCall::Ask(a) => a.tool_name(),
        }
    }

    /// Every capability this call needs (empty for `list_peers` and the ask tools, which act
    /// for the namespace's owner towards friends the owner configured).
    pub fn required_capabilities(&self) -> Vec<&'static str> {
        match self {
            ToolCall::ListPeers(_) | ToolCall::Ask(_) => vec![],
            ToolCall::Send(_) => vec![CAP_MESSAGE_SEND],
            ToolCall::Messages(m) if m.wait_ms > 0 => vec![CAP_MESSAGE_RECEIVE, CAP_MESSAGE_WAIT],
            ToolCall::Messages(_) => vec![CAP_MESSAGE_RECEIVE],
            ToolCall::Resource(ResourceArgs::Grant { .. } | ResourceArgs::SetController { .. }) => {
                vec![CAP_RESOURCE_REQUEST, CAP_RESOURCE_CONTROL]
            }
            ToolCall::Resource(_) => vec![CAP_RESOURCE_REQUEST],
        }
    }
}

/// `CAPABILITY_DENIED` naming the first capability in `caps` the call lacks.
pub fn check_capability(call: &ToolCall, caps: &[String]) -> Result<()> {
    for need in call.required_capabilities() {
        if !caps.iter().any(|c| c == need) {
            return Err(Error::new(
                Code::CapabilityDenied,
                format!(
                    "{} needs the {need} capability, which this session was not given",
                    call.tool_name()
                ),
            ));
        }
    }
    Ok(())
}

/// Validates `args` for tool `name`. Unknown tool → `METHOD_NOT_FOUND`; any missing, extra,
/// mistyped or out-of-bound argument → `USAGE` naming it. Waits are bounded by
/// `limits.wait_ms_max`; content size is left to the messaging layer (`messageBytes`).
pub fn parse_call(name: &str, args: &Value, limits: &Limits) -> Result<ToolCall> {
    let empty = Map::new();
    match name {
        "list_peers" => parse_list(&Args::new(name, args, &empty)?).map(ToolCall::ListPeers),
        "send_peer_message" => parse_send(&Args::new(name, args, &empty)?).map(ToolCall::Send),
        "peer_messages" => {
            parse_messages(&Args::new(name, args, &empty)?, limits).map(ToolCall::Messages)
        }
        "coordinate_resource" => {
            parse_resource(&Args::new(name, args, &empty)?, limits).map(ToolCall::Resource)
        }
        n if ask::ASK_TOOL_NAMES.contains(&n) => {
            ask::parse(n, &Args::new(name, args, &empty)?).map(ToolCall::Ask)
        }
        other => Err(Error::new(
            Code::MethodNotFound,
            format!(
                "unknown tool {:?}; tools: {}",
                crate::sanitize::line(other, 60),
                TOOL_NAMES.join(", ")
            ),
        )),
    }
}

fn parse_list(a: &Args) -> Result<ListPeersArgs> {
    a.only(&["scope", "query", "cursor"])?;
    let scope = a.opt_enum("scope", &["workspace", "repository", "machine"])?;
    Ok(ListPeersArgs {
        scope: scope.as_deref().and_then(Scope::parse),
        query: a.opt_label("query", QUERY_CHARS_MAX)?,
        cursor: a.opt_str("cursor", crate::config::internal::CURSOR_CHARS_MAX)?,
    })
}

/// A recipient or sender: alias, `@alias` or exact peer id, returned without `@`.
fn target(a: &Args, name: &str, value: Option<String>) -> Result<Option<String>> {
    let Some(raw) = value else { return Ok(None) };
    crate::mention::normalize_target(&raw)
        .map(Some)
        .ok_or_else(|| {
            a.error(&format!(
                "argument `{name}` must be an alias, @alias or peer id (p- and 24 hex digits)"
            ))
        })
}

fn parse_send(a: &Args) -> Result<SendArgs> {
    a.only(&["to", "content", "topic", "replyTo"])?;
    let to = target(a, "to", Some(a.req_str("to", TARGET_CHARS_MAX)?))?.unwrap_or_default();
    let content = match a.get_raw("content") {
        Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
        Some(Value::String(_)) => return Err(a.error("argument `content` must not be empty")),
        Some(v) => {
            return Err(a.error(&format!(
                "argument `content` must be a string, not {}",
                args::kind(v)
            )));
        }
        None => return Err(a.error("argument `content` is required (string)")),
    };
    Ok(SendArgs {
        to,
        body: MessageBody {
            content,
            topic: a.opt_label("topic", TOPIC_CHARS_MAX)?,
            reply_to: a.opt_str("replyTo", ID_CHARS_MAX)?,
        },
    })
}

fn parse_messages(a: &Args, limits: &Limits) -> Result<MessagesArgs> {
    a.only(&["after", "from", "replyTo", "messageId", "waitMs"])?;
    let from = a.opt_str("from", TARGET_CHARS_MAX)?;
    Ok(MessagesArgs {
        after: a.opt_int("after", 0, args::JSON_SAFE_INTEGER_MAX)?,
        from: target(a, "from", from)?,
        reply_to: a.opt_str("replyTo", ID_CHARS_MAX)?,
        message_id: a.opt_str("messageId", ID_CHARS_MAX)?,
        wait_ms: a.opt_int("waitMs", 0, limits.wait_ms_max)?.unwrap_or(0),
    })
}

/// The `coordinate_resource` operations, each with the label its errors name.
const RESOURCE_OPS: [(&str, &str); 6] = [
    ("status", "coordinate_resource op=status"),
    ("request", "coordinate_resource op=request"),
    ("grant", "coordinate_resource op=grant"),
    ("release", "coordinate_resource op=release"),
    ("cancel_request", "coordinate_resource op=cancel_request"),
    ("set_controller", "coordinate_resource op=set_controller"),
];

fn parse_resource(a: &Args, limits: &Limits) -> Result<ResourceArgs> {
    let ops = RESOURCE_OPS.map(|(op, _)| op);
    let op = a.opt_enum("op", &ops)?.ok_or_else(|| {
        a.error(&format!(
            "argument `op` is required (one of {})",
            ops.join("|")
        ))
    })?;
    let label = RESOURCE_OPS
        .iter()
        .find(|(name, _)| *name == op)
        .map_or("coordinate_resource", |(_, label)| label);
    let a = a.relabel(label);
    let resource = |a: &Args| a.req_str("resource", RESOURCE_CHARS_MAX);
    let ticket = |a: &Args| a.req_str("ticket", ID_CHARS_MAX);
    let capacity = |a: &Args| a.opt_int("capacity", 1, limits.resource_tickets);
    match op.as_str() {
        "status" => {
            a.only(&["op", "resource"])?;
            Ok(ResourceArgs::Status {
                resource: a.opt_str("resource", RESOURCE_CHARS_MAX)?,
            })
        }
        "request" => {
            a.only(&["op", "resource", "capacity", "waitMs", "epoch"])?;
            let wait_ms = a.opt_int("waitMs", 0, limits.wait_ms_max)?;
            Ok(ResourceArgs::Request {
                resource: resource(&a)?,
                capacity: capacity(&a)?,
                wait_ms,
                epoch: a.opt_int("epoch", 0, u64::MAX)?,
            })
        }
        "grant" => {
            a.only(&["op", "resource", "ticket", "epoch"])?;
            Ok(ResourceArgs::Grant {
                resource: resource(&a)?,
                ticket: ticket(&a)?,
                epoch: a.opt_int("epoch", 0, u64::MAX)?,
            })
        }
        "release" => parse_release(&a, resource(&a)?),
        "cancel_request" => {
            a.only(&["op", "resource", "ticket"])?;
            Ok(ResourceArgs::CancelRequest {
                resource: resource(&a)?,
                ticket: ticket(&a)?,
            })
        }
        _ => {
            a.only(&["op", "resource", "capacity", "force", "automatic"])?;
            let force = a.opt_bool("force")?.unwrap_or(false);
            Ok(ResourceArgs::SetController {
                resource: resource(&a)?,
                capacity: capacity(&a)?,
                force,
                automatic: a.opt_bool("automatic")?.unwrap_or(false),
            })
        }
    }
}

fn parse_release(a: &Args, resource: String) -> Result<ResourceArgs> {
    a.only(&["op", "resource", "ticket", "token"])?;
    let ticket = a.opt_str("ticket", ID_CHARS_MAX)?;
    // The token is returned as a number; a number written as a string is taken too.
    let token = match a.get_raw("token") {
        Some(serde_json::Value::String(s)) => Some(s.trim().parse::<u64>().map_err(|_| {
            a.error("argument `token` must be the fencing token number returned by request")
        })?),
        _ => a.opt_int("token", 1, u64::MAX)?,
    };
    if ticket.is_some() && token.is_some() {
        return Err(a.error("give `ticket` or `token`, not both"));
    }
    Ok(ResourceArgs::Release {
        resource,
        ticket,
        token,
    })
}

/// `[{name, title, description, inputSchema, annotations}]` for every tool, in
/// [`TOOL_NAMES`] order: the local tools, then the ask tools.
pub fn tool_list(limits: &Limits) -> Value {
    let mut tools = schema::local_tools(limits);
    tools.extend(ask::tool_list());
    Value::Array(tools)
}

#[cfg(test)]
mod tests;
