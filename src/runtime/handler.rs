//! The root's answers to authenticated peers (`peer.*`) and to its trusted local adapters
//! (`local.*`). Peer identity always comes from the connection; a `fromRun` names one of the
//! authenticated root's own runs, whose peerId is bound to that instance by construction.

use super::control;
use super::core::Core;
use super::send::SendRequest;
use super::tools::outbox_view;
use crate::error::{Code, Error, Result};
use crate::messaging::{InboundSend, MessageRef, Principal, Receipt};
use crate::transport::{Handler, Notifier, PeerInfo};
use crate::{identity, sanitize};
use serde_json::{Map, Value, json};
use std::sync::Arc;

/// The transport's view of a root.
pub struct RootHandler(pub Arc<Core>);

fn str_param<'a>(p: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>> {
    match p.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(Error::new(
            Code::Usage,
            format!("params.{key} must be a string"),
        )),
    }
}

fn req_str<'a>(p: &'a Map<String, Value>, key: &str) -> Result<&'a str> {
    str_param(p, key)?.ok_or_else(|| Error::new(Code::Usage, format!("params.{key} is required")))
}

fn id_param(p: &Map<String, Value>, key: &str) -> Result<Option<String>> {
    match str_param(p, key)? {
        Some(s) if identity::is_valid_id(s) => Ok(Some(s.to_string())),
        Some(s) => Err(Error::new(
            Code::Usage,
            format!(
                "params.{key} {:?} is not an id ([A-Za-z0-9_.-], at most {})",
                sanitize::line(s, 40),
                crate::config::internal::ID_CHARS_MAX
            ),
        )),
        None => Ok(None),
    }
}

/// The principal of an authenticated peer, with the run it speaks for.
fn principal(from: &PeerInfo, p: &Map<String, Value>) -> Result<Principal> {
    let run_id = id_param(p, "fromRun")?;
    Ok(Principal {
        instance_id: from.instance_id.clone(),
        peer_id: identity::peer_id(&from.instance_id, run_id.as_deref()),
        run_id,
    })
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
                let who = principal(from, &params)?;
                let origin = core.session_of(&from.instance_id);
                core.check_sender_scope(&who)?;
                let from_alias = core.alias_of(&who);
                let announced_alias = from_alias.clone();
                let send = InboundSend {
                    origin,
                    to_peer_id: req_str(&params, "to")?.to_string(),
                    message_id: id_param(&params, "messageId")?
                        .ok_or_else(|| Error::new(Code::Usage, "params.messageId is required"))?,
                    content: req_str(&params, "content")?.to_string(),
                    topic: str_param(&params, "topic")?.map(str::to_string),
                    reply_to: id_param(&params, "replyTo")?,
                    correlation_id: id_param(&params, "correlationId")?,
                    expires_at_ms: match params.get("expiresAt") {
                        None | Some(Value::Null) => None,
                        Some(v) => Some(v.as_u64().ok_or_else(|| {
                            Error::new(Code::Usage, "params.expiresAt must be epoch milliseconds")
                        })?),
                    },
                    from_alias,
                };
                let reply_to = send.reply_to.clone();
                let r = core.store.accept(who, send)?;
                core.announce_arrival(&r, reply_to.as_deref(), announced_alias.as_deref());
                to_value(&r)
            }
            "peer.status" | "peer.subscribe" => {
                let who = principal(from, &params)?;
                let id = id_param(&params, "messageId")?
                    .ok_or_else(|| Error::new(Code::Usage, "params.messageId is required"))?;
                let r = core.store.status(who, &id, req_str(&params, "to")?)?;
                if method == "peer.subscribe" {
                    core.outbox.subscribe(&from.instance_id, &id, notify);
                }
                to_value(&r)
            }
            "peer.receipt" => {
                let who = principal(from, &params)?;
                let r = Receipt::from_wire(Value::Object(params))?;
                if r.to_peer_id != who.peer_id {
                    return Err(Error::new(
                        Code::InvalidRequest,
                        "a receipt may only be recorded by the message's own recipient",
                    ));
                }
                let entry = core.store.record_receipt(who, r.clone())?;
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
        local_request(&self.0, None, method, params)
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
        local_request(&self.0, Some(run_id), method, params)
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
        if let (Ok(who), Ok(r)) = (
            principal(from, &params),
            Receipt::from_wire(Value::Object(params)),
        ) && r.to_peer_id == who.peer_id
            && let Ok(entry) = self.0.store.record_receipt(who, r)
            && let Some(latest) = &entry.receipt
        {
            self.0.announce_receipt(latest);
        }
    }
}

fn to_value<T: serde::Serialize>(v: &T) -> Result<Value> {
    serde_json::to_value(v).map_err(|e| Error::new(Code::Io, e.to_string()))
}

/// The trusted local methods, shared by the socket channel and in-process sessions. `bound` is
/// the run a connection proved with the run's own secret: it cannot be changed by `runId`, and
/// such a connection can neither publish nor retire runs.
pub fn local_request(
    core: &Arc<Core>,
    bound: Option<&str>,
    method: &str,
    params: Map<String, Value>,
) -> Result<Value> {
    let asked = id_param(&params, "runId")?;
    let run = match (bound, asked) {
        (Some(b), Some(a)) if a != b => {
            return Err(Error::new(
                Code::CapabilityDenied,
                "this connection speaks for its own child run only",
            ));
        }
        (Some(b), _) => Some(b.to_string()),
        (None, a) => a,
    };
    let caller = core.caller_for(run.as_deref(), str_param(&params, "auto")?)?;
    match method {
        "local.info" => Ok(json!({
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
            "limits": {"messageBytes": core.limits().message_bytes, "waitMsMax": core.limits().wait_ms_max, "acknowledgementMs": core.limits().acknowledgement_ms, "frameBytes": core.limits().frame_bytes},
        })),
        "local.tool" => super::tools::local_tool(core, &caller, &params),
        "local.consume" | "local.prepare" => {
            let id = req_str(&params, "messageId")?;
            let note = str_param(&params, "note")?;
            let r = if method == "local.consume" {
                core.consume(&caller.peer_id, id, note)?
            } else {
                let e = core.inbox_entry(&caller.peer_id, id)?;
                let r = core.store.record_context(
                    &caller.peer_id,
                    MessageRef::Sequence(e.sequence),
                    note.unwrap_or("prepared"),
                )?;
                super::send::refuse_expired(&r)?;
                r
            };
            to_value(&r)
        }
        "local.reply" => {
            let id = req_str(&params, "messageId")?;
            let original = core.inbox_entry(&caller.peer_id, id)?;
            let to = original.from.peer_id.clone();
            let message_id = match id_param(&params, "replyId")? {
                Some(m) => m,
                None => crate::messaging::new_message_id(),
            };
            let req = SendRequest {
                to,
                content: req_str(&params, "content")?.to_string(),
                topic: str_param(&params, "topic")?.map(str::to_string),
                reply_to: Some(original.message_id.clone()),
                message_id: message_id.clone(),
            };
            let r = core.send_reply(&caller, req, &original)?;
            // The reply is in its target's custody; failing to mark the original replied
            // must not hide that, but must be seen.
            let marked = core.store.mark_replied(
                &caller.peer_id,
                MessageRef::Sequence(original.sequence),
                &message_id,
            );
            let mut v = to_value(&r)?;
            if let Err(e) = marked {
                core.report_problem(&format!("marking message {id} replied"), &e);
                if let Some(o) = v.as_object_mut() {
                    o.insert(
                        "markReplied".into(),
                        json!({"code": e.code.name(), "message": e.message}),
                    );
                }
            }
            Ok(v)
        }
        "local.status" => {
            let entry = core.sent_message(&caller.peer_id, req_str(&params, "messageId")?)?;
            let mut v = outbox_view(&entry);
            if entry.receipt.is_none()
                && let Some(o) = v.as_object_mut()
            {
                o.insert("reason".into(), json!(core.unresolved_reason(&entry)));
            }
            Ok(v)
        }
        "local.wait_receipt" => super::tools::wait_receipt(core, &caller, &params),
        "local.run.publish" => {
            let alias = req_str(&params, "alias")?;
            let delegate = params
                .get("delegateControl")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            if run.is_some() {
                return Err(Error::new(
                    Code::CapabilityDenied,
                    "a child run cannot publish runs of its own",
                ));
            }
            let secret = zeroize::Zeroizing::new(control::new_secret());
            let r = core.runs.lock().publish(
                &core.instance_id,
                alias,
                &core.capabilities,
                delegate,
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
        "local.run.retire" => {
            if run.is_some() {
                return Err(Error::new(
                    Code::CapabilityDenied,
                    "a child run cannot retire runs",
                ));
            }
            let id = req_str(&params, "run")?;
            let r = core.runs.lock().retire(id)?;
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
        other => Err(Error::new(
            Code::MethodNotFound,
            format!(
                "unknown local method {}",
                sanitize::line(other, crate::config::internal::ECHO_CHARS_MAX)
            ),
        )),
    }
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
