//! The runtime's JSON edge: the transport's [`Handler`] and MCP's [`ToolHost`] implemented
//! over the typed dispatch of `handler` and `tools`. Requests arrive typed (the transport
//! decoded them); typed answers leave as JSON objects here, or as their JSON text where they
//! write it themselves (a receipt, a send's answer).
//! Nothing else in the runtime handles JSON values.

use super::core::Core;
use super::handler::{self, LocalAnswer};
use super::model_tools::{CallOptions, execute};
use crate::error::{Code, Error, Result};
use crate::protocol::local::LocalRequest;
use crate::protocol::message::ReceiptPush;
use crate::protocol::peer::{PeerAnswer, PeerRequest};
use crate::toolspec::answer::ToolAnswer;
use crate::toolspec::{ToolCall, ToolHost, ToolOutput};
use crate::transport::{Answer, Handler, Notifier, PeerInfo};
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// The transport's view of a root.
pub struct RootHandler(pub Arc<Core>);

/// A typed answer as the JSON object that goes on the wire.
pub fn encode<T: serde::Serialize>(answer: &T) -> Result<Value> {
    serde_json::to_value(answer).map_err(|e| Error::new(Code::Io, e.to_string()))
}

/// A local request answered as JSON text: written by the typed answer itself where it can (a
/// send's answer), else through its `Value`; the same bytes either way.
fn local_answer(core: &Arc<Core>, bound: Option<&str>, req: LocalRequest) -> Result<Answer> {
    match handler::local_request(core, bound, req)? {
        LocalAnswer::Tool(ToolAnswer::Sent(sent)) => Ok(Answer(sent.to_json())),
        answer => Answer::of(&encode(&answer)?),
    }
}

impl Handler for RootHandler {
    fn peer_request(&self, from: &PeerInfo, req: PeerRequest, notify: &Notifier) -> Result<Answer> {
        let core = &self.0;
        let answer = match req {
            PeerRequest::Send(send) => {
                let (receipt, flushed_device, note) = handler::peer_send(core, from, send)?;
                // The answer is written before the arrival is handed on, so its text is taken
                // now; the receipt itself goes with the arrival.
                let text = receipt.to_json_stating(flushed_device);
                core.defer_arrival(receipt, note);
                return Ok(Answer(text));
            }
            PeerRequest::Status(q) => PeerAnswer::Receipt {
                receipt: handler::peer_status(core, from, q, None)?,
                flushed_device: None,
            },
            PeerRequest::Subscribe(q) => PeerAnswer::Receipt {
                receipt: handler::peer_status(core, from, q, Some(notify))?,
                flushed_device: None,
            },
            PeerRequest::Receipt(push) => {
                PeerAnswer::Recorded(handler::peer_receipt(core, from, push)?)
            }
            PeerRequest::Directory => PeerAnswer::Directory(handler::peer_directory(core)),
        };
        Ok(Answer(answer.to_json()))
    }

    fn after_reply(&self) {
        // Arrivals accepted on this thread, announced now that their sender has its answer;
        // then a send's own copy of its receipt, queued without waiting.
        self.0.announce_deferred();
        self.0.store.apply_queued_now();
    }

    fn local_request(
        &self,
        run_id: Option<&str>,
        req: LocalRequest,
        _notify: &Notifier,
    ) -> Result<Answer> {
        local_answer(&self.0, run_id, req)
    }

    fn run_for_secret(&self, secret: &[u8; 32]) -> Option<String> {
        self.0.runs.lock().by_secret(secret)
    }

    fn receipt_notification(&self, from: &PeerInfo, push: ReceiptPush) {
        handler::receipt_notification(&self.0, from, push);
    }
}

/// The MCP face of a root: every call acts as the root itself.
pub struct RootTools(pub Arc<Core>);

impl ToolHost for RootTools {
    fn call(&self, call: ToolCall, call_id: &str, cancel: &Arc<AtomicBool>) -> Result<ToolOutput> {
        let caller = self.0.me.root_caller();
        let opts = CallOptions {
            call_id: Some(format!("mcp:{}:{call_id}", self.0.me.instance_id())),
            consume_on_read: true,
            ..CallOptions::default()
        };
        // Typed: the MCP server writes a send's answer as text without a `Value`.
        execute(&self.0, &caller, call, &opts, cancel).map(ToolOutput::Answer)
    }

    fn after_answer(&self) {
        self.0.store.apply_queued_now();
    }
}
