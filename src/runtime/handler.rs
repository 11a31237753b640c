//! The root's answers to authenticated peers (`peer.*`) and to its trusted local adapters
//! (`local.*`). Peer identity always comes from the connection; a `fromRun` names one of the
//! authenticated root's own runs, whose peerId is bound to that instance by construction.

use super::control;
use super::core::Core;
use super::send::SendRequest;
use super::tools::outbox_view;
use crate::error::{Code, Error, Result};
use crate::messaging::{InboundSend, MessageBody, MessageRef, Principal, Receipt};
use crate::protocol::local::{LocalCall, LocalReply, LocalRequest, RunPublish};
use crate::protocol::message::{self, PeerSend, PeerStatus, ReceiptPush};
use crate::transport::{Handler, Notifier, PeerInfo};
use crate::{identity, sanitize};
use serde_json::{Map, Value, json};
use std::sync::Arc;

/// The transport's view of a root.
pub struct RootHandler(pub Arc<Core>);

/// The principal of an authenticated peer, with the run it speaks for.
fn principal(from: &PeerInfo, run_id: Option<String>) -> Principal {
    Principal {
        instance_id: from.instance_id.clone(),
        peer_id: identity::peer_id(&from.instance_id, run_id.as_deref()),
        run_id,
    }
}

impl Handler for RootHandler {
    fn peer_request(
        &self,
        from: &PeerInfo,
        method: &str,
        params: Map<String, Value>,
        notify: &Notifier,
    ) -> Result<Value> {
        let core = &self.0;
        match method {
            "peer.send" => {
                let send = PeerSend::decode(params)?;
                let r = accept(core, from, send)?;
                to_value(&message::Receipt::from(r))
            }
            "peer.status" | "peer.subscribe" => {
                let q = PeerStatus::decode(&params)?;
                let who = principal(from, q.from_run);
                let r = core.store.status(who, &q.message_id, &q.to)?;
                if method == "peer.subscribe" {
                    core.outbox
                        .subscribe(&from.instance_id, &q.message_id, notify);
                }
                to_value(&message::Receipt::from(r))
            }
            "peer.receipt" => {
                let push = ReceiptPush::decode(params)?;
                let who = principal(from, push.from_run);
                let r = Receipt::from(push.receipt);
                if r.to_peer_id != who.peer_id {
                    return Err(Error::new(
                        Code::InvalidRequest,
                        "a receipt may only be recorded by the message's own recipient",
                    ));
                }
                let entry = core.store.record_receipt(who, r)?;
                if let Some(latest) = &entry.receipt {
                    core.announce_receipt(latest);
                }
                Ok(json!({"ok": true, "state": entry.receipt.map(|r| r.state.name())}))
            }
            "peer.directory" => {
                let runs = core.runs.lock();
                let list: Vec<Value> = runs
                    .live()
                    .map(|r| json!({"runId": r.run_id, "peerId": r.peer_id, "alias": r.alias}))
                    .collect();
                Ok(json!({"runs": list, "cursor": null}))
            }
            other => Err(Error::new(
                Code::MethodNotFound,
                format!(
                    "unknown method {}",
                    sanitize::line(other, crate::config::internal::ECHO_CHARS_MAX)
                ),
            )),
        }
    }

    fn local_request(
        &self,
        method: &str,
        params: Map<String, Value>,
        _notify: &Notifier,
    ) -> Result<Value> {
        local_request(&self.0, None, LocalRequest::decode(method, params)?)
    }

    fn run_for_secret(&self, secret: &[u8; 32]) -> Option<String> {
        self.0.runs.lock().by_secret(secret)
    }

    fn run_request(
        &self,
        run_id: &str,
        method: &str,
        params: Map<String, Value>,
        _notify: &Notifier,
    ) -> Result<Value> {
        local_request(&self.0, Some(run_id), LocalRequest::decode(method, params)?)
    }

    fn peer_notification(&self, from: &PeerInfo, method: &str, params: Map<String, Value>) {
        self.on_notification(from, method, params);
    }
}

impl RootHandler {
    /// Notifications from peers (on either direction of a connection). Receipt updates of a
    /// `peer.subscribe` are advisory: the durable copy arrives as a `peer.receipt` request.
    pub fn on_notification(&self, from: &PeerInfo, method: &str, params: Map<String, Value>) {
        if method != "peer.receipt" {
            return;
        }
        let Ok(push) = ReceiptPush::decode(params) else {
            return;
        };
        let who = principal(from, push.from_run);
        if push.receipt.to_peer_id == who.peer_id
            && let Ok(entry) = self.0.store.record_receipt(who, push.receipt.into())
            && let Some(latest) = &entry.receipt
        {
            self.0.announce_receipt(latest);
        }
    }
}

/// Takes custody of one `peer.send` from an authenticated peer: the sender is the connection
/// plus its `fromRun`, its session and alias what its presence record states.
fn accept(core: &Core, from: &PeerInfo, send: PeerSend) -> Result<Receipt> {
    let who = principal(from, send.from_run);
    let origin = core.session_of(&from.instance_id);
    core.check_sender_scope(&who)?;
    let from_alias = core.alias_of(&who);
    let reply_to = send.body.reply_to.clone();
    let inbound = InboundSend {
        origin,
        to_peer_id: send.to,
        message_id: send.message_id,
        body: send.body,
        correlation_id: send.correlation_id,
        expires_at_ms: send.expires_at_ms,
        from_alias: from_alias.clone(),
    };
    let r = core.store.accept(who, inbound)?;
    core.announce_arrival(&r, reply_to.as_deref(), from_alias.as_deref());
    Ok(r)
}

fn to_value<T: serde::Serialize>(v: &T) -> Result<Value> {
    serde_json::to_value(v).map_err(|e| Error::new(Code::Io, e.to_string()))
}

/// The trusted local methods, shared by the socket channel and in-process sessions. `bound` is
/// the run a connection proved with the run's own secret: it cannot be changed by `runId`, and
/// such a connection can neither publish nor retire runs.
pub fn local_request(core: &Arc<Core>, bound: Option<&str>, req: LocalRequest) -> Result<Value> {
    let run = match (bound, req.run_id) {
        (Some(b), Some(a)) if a != b => {
            return Err(Error::new(
                Code::CapabilityDenied,
                "this connection speaks for its own child run only",
            ));
        }
        (Some(b), _) => Some(b.to_string()),
        (None, a) => a,
    };
    let caller = core.caller_for(run.as_deref(), req.auto.as_deref())?;
    match req.call {
        LocalCall::Info => Ok(info(core, &caller)),
        LocalCall::Tool(t) => super::tools::local_tool(core, &caller, t),
        LocalCall::Consume(n) => {
            let r = core.consume(&caller.peer_id, &n.message_id, n.note.as_deref())?;
            to_value(&message::Receipt::from(r))
        }
        LocalCall::Prepare(n) => {
            let e = core.inbox_entry(&caller.peer_id, &n.message_id)?;
            let r = core.store.record_context(
                &caller.peer_id,
                MessageRef::Sequence(e.sequence),
                n.note.as_deref().unwrap_or("prepared"),
            )?;
            super::send::refuse_expired(&r)?;
            to_value(&message::Receipt::from(r))
        }
        LocalCall::Reply(r) => reply(core, &caller, r),
        LocalCall::Status(q) => {
            let entry = core.sent_message(&caller.peer_id, &q.message_id)?;
            let mut v = outbox_view(&entry);
            if entry.receipt.is_none()
                && let Some(o) = v.as_object_mut()
            {
                o.insert("reason".into(), json!(core.unresolved_reason(&entry)));
            }
            Ok(v)
        }
        LocalCall::WaitReceipt(w) => super::tools::wait_receipt(core, &caller, w),
        LocalCall::RunPublish(p) if run.is_none() => publish_run(core, p),
        LocalCall::RunPublish(_) => Err(Error::new(
            Code::CapabilityDenied,
            "a child run cannot publish runs of its own",
        )),
        LocalCall::RunRetire(r) if run.is_none() => retire_run(core, &r.run),
        LocalCall::RunRetire(_) => Err(Error::new(
            Code::CapabilityDenied,
            "a child run cannot retire runs",
        )),
    }
}

/// `local.info`: who the caller is, the root's identity, store and limits.
fn info(core: &Core, caller: &super::core::Caller) -> Value {
    let limits = core.limits();
    json!({
        "peerId": caller.peer_id,
        "runId": caller.run_id,
        "alias": caller.alias,
        "instanceId": core.instance_id,
        "sessionId": core.session_id,
        "capabilities": caller.capabilities,
        "eventsDropped": core.bus.dropped(),
        "dumpable": crate::hardening::is_dumpable(),
        "store": store_info(core),
        "problems": core.problems(),
        "limits": {"messageBytes": limits.message_bytes, "waitMsMax": limits.wait_ms_max, "acknowledgementMs": limits.acknowledgement_ms, "frameBytes": limits.frame_bytes},
    })
}

/// `local.reply`: the reply goes to the exact incarnation that sent the original, which is
/// then marked replied.
fn reply(core: &Arc<Core>, caller: &super::core::Caller, r: LocalReply) -> Result<Value> {
    let original = core.inbox_entry(&caller.peer_id, &r.message_id)?;
    let message_id = r.reply_id.unwrap_or_else(crate::messaging::new_message_id);
    let req = SendRequest {
        to: original.from.peer_id.clone(),
        body: MessageBody {
            content: r.content,
            topic: r.topic,
            reply_to: Some(original.message_id.clone()),
        },
        message_id: message_id.clone(),
    };
    let receipt = core.send_reply(caller, req, &original)?;
    // The reply is in its target's custody; failing to mark the original replied
    // must not hide that, but must be seen.
    let marked = core.store.mark_replied(
        &caller.peer_id,
        MessageRef::Sequence(original.sequence),
        &message_id,
    );
    let mut v = to_value(&message::Receipt::from(receipt))?;
    if let Err(e) = marked {
        core.report_problem(&format!("marking message {} replied", r.message_id), &e);
        if let Some(o) = v.as_object_mut() {
            o.insert(
                "markReplied".into(),
                json!({"code": e.code.name(), "message": e.message}),
            );
        }
    }
    Ok(v)
}

/// `local.run.publish`: a child run with its own peerId, secret and control file.
fn publish_run(core: &Arc<Core>, p: RunPublish) -> Result<Value> {
    let secret = zeroize::Zeroizing::new(control::new_secret());
    let r = core.runs.lock().publish(
        &core.instance_id,
        &p.alias,
        &core.capabilities,
        p.delegate_control,
        core.limits().published_runs,
        secret.clone(),
    )?;
    let path = match write_run_control(core, &r, &secret) {
        Ok(p) => p,
        Err(e) => {
            let _ = core.runs.lock().retire(&r.run_id);
            return Err(e);
        }
    };
    core.store.set_live(&r.peer_id);
    core.publish_runs();
    Ok(
        json!({"runId": r.run_id, "peerId": r.peer_id, "alias": r.alias, "capabilities": r.capabilities, "control": path.to_string_lossy()}),
    )
}

/// `local.run.retire`: the run ends; what it reserved goes back with it.
fn retire_run(core: &Arc<Core>, run_id: &str) -> Result<Value> {
    let r = core.runs.lock().retire(run_id)?;
    control::remove(
        &control::path_in(&core.control_dir(), &core.instance_id, Some(&r.run_id)),
        &core.instance_id,
    );
    // What the run reserved goes back with it; its held messages stay for review.
    let _ = super::resources::release_run(core, &r.peer_id);
    core.store.set_ended(&r.peer_id);
    core.publish_runs();
    Ok(json!({"runId": r.run_id, "peerId": r.peer_id, "state": "ended"}))
}

/// What `local.info` tells about the store: what its recovery discarded at open, and its
/// writer's counters (fdatasyncs, written batches, jobs) for benchmarks.
fn store_info(core: &Core) -> Value {
    let s = core.store.stats();
    let (state, recovery) = match core.degraded() {
        None => ("ok", None),
        Some(why) => ("failed", Some(why)),
    };
    json!({
        "state": state,
        "recovery": recovery,
        "tornTailBytes": s.torn_tail_bytes,
        "tornTailBatches": s.torn_tail_batches,
        "poisoned": s.poisoned,
        "syncs": s.syncs,
        "batches": s.batches,
        "jobs": s.jobs,
    })
}

/// Writes the control file a run's command gets instead of the root's.
fn write_run_control(
    core: &Core,
    run: &super::runs::Run,
    secret: &[u8; 32],
) -> Result<std::path::PathBuf> {
    let cf = control::ControlFile {
        version: 1,
        endpoint: core.socket_path.clone(),
        secret: identity::b64(secret),
        instance_id: core.instance_id.clone(),
        peer_id: run.peer_id.clone(),
        home: core.ns.home.clone(),
        run_id: Some(run.run_id.clone()),
    };
    // The text form of the secret is wiped when `cf` drops.
    control::write(&core.control_dir(), &cf)
}
