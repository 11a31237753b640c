//! The root's answers to authenticated peers (`peer.*`) and to its trusted local adapters
//! (`local.*`), as typed requests in and typed answers out (`super::dispatch` is the JSON edge
//! that decodes and encodes them). Peer identity always comes from the connection; a
//! `fromRun` names one of the authenticated root's own runs, whose peerId is bound to that
//! instance by construction.

use super::control;
use super::core::{ArrivalNote, Caller, Core, Problem};
use super::model_tools::outbox_view;
use super::send::SendRequest;
use crate::error::{Code, Error, Result};
use crate::identity;
use crate::messaging::{InboundSend, MessageBody, MessageRef, Principal};
use crate::protocol::local::{LocalCall, LocalReply, LocalRequest, RunPublish};
use crate::protocol::message::{self, PeerSend, PeerStatus, ReceiptPush};
use crate::protocol::peer::{ReceiptRecorded, RunEntry, RunsPage};
use crate::toolspec::answer::{SentView, ToolAnswer};
use crate::transport::{Notifier, PeerInfo};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::sync::Arc;

/// The principal of an authenticated peer, with the run it speaks for.
fn principal(from: &PeerInfo, run_id: Option<String>) -> Principal {
    Principal {
        instance_id: from.instance_id.clone(),
        peer_id: from.peer_id(run_id.as_deref()),
        run_id,
    }
}

/// `peer.status` (and `peer.subscribe`, which also sends the message's later receipt changes
/// to `subscriber` as notifications).
pub fn peer_status(
    core: &Core,
    from: &PeerInfo,
    q: PeerStatus,
    subscriber: Option<&Notifier>,
) -> Result<message::Receipt> {
    let who = principal(from, q.from_run);
    let r = match core.store.status(who, &q.message_id, &q.to) {
        // About an incarnation that is not one of ours: a predecessor's store may hold it.
        Err(e)
            if e.code == Code::NotFound
                && q.to != core.me.peer_id()
                && core.run_of_peer(&q.to).is_none() =>
        {
            return Err(super::repair::predecessor_answer(
                core,
                &q.to,
                &q.message_id,
            ));
        }
        r => r?,
    };
    if let Some(notify) = subscriber {
        core.outbox
            .subscribe(&from.instance_id, &q.message_id, notify);
    }
    Ok(r)
}

/// `peer.receipt` as a request: only the message's own recipient may record its receipt.
pub fn peer_receipt(core: &Core, from: &PeerInfo, push: ReceiptPush) -> Result<ReceiptRecorded> {
    let who = principal(from, push.from_run);
    let r = push.receipt;
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
    Ok(ReceiptRecorded {
        ok: true,
        state: entry.receipt.map(|r| r.state.name()),
    })
}

/// `peer.receipt` as a notification (advisory; the durable copy arrives as a request):
/// recorded when it is the recipient's own, otherwise ignored.
pub fn receipt_notification(core: &Core, from: &PeerInfo, push: ReceiptPush) {
    let who = principal(from, push.from_run);
    if push.receipt.to_peer_id == who.peer_id
        && let Ok(entry) = core.store.record_receipt(who, push.receipt)
        && let Some(latest) = &entry.receipt
    {
        core.announce_receipt(latest);
    }
}

/// `peer.directory`: the root's live runs (one page; `cursor` is always null).
pub fn peer_directory(core: &Core) -> RunsPage {
    let runs = core.runs.lock();
    RunsPage {
        runs: runs
            .live()
            .map(|r| RunEntry {
                run_id: r.run_id.clone(),
                peer_id: r.peer_id.clone(),
                alias: r.alias.clone(),
            })
            .collect(),
        cursor: None,
    }
}

/// Takes custody of one `peer.send` from an authenticated peer: the sender is the connection
/// plus its `fromRun`, its session and alias what its presence record states. Answers the
/// receipt and the `flushedDevice` statement the answer carries, if the store may make it
/// (`StoreHandle::accept_stating`), and what the arrival's announcement needs besides the
/// receipt: the caller writes the answer first and then hands both to
/// [`Core::defer_arrival`], announced once the answer is out (`Handler::after_reply`).
pub fn peer_send(
    core: &Core,
    from: &PeerInfo,
    send: PeerSend<'static>,
) -> Result<(message::Receipt, Option<u64>, ArrivalNote)> {
    let who = principal(from, send.from_run.map(Cow::into_owned));
    let (origin, from_alias) = core.sender_facts(&who)?;
    let reply_to = send.body.reply_to.clone();
    let inbound = InboundSend {
        origin,
        to_peer_id: send.to.into_owned(),
        message_id: send.message_id.into_owned(),
        body: send.body.into_owned(),
        correlation_id: send.correlation_id.map(Cow::into_owned),
        expires_at_ms: send.expires_at_ms,
        from_alias: from_alias.clone(),
    };
    let (r, stated) = core.store.accept_stating(who, inbound)?;
    hold_answer();
    Ok((
        r,
        stated,
        ArrivalNote {
            reply_to,
            from_alias,
        },
    ))
}

/// Debug builds only (the binaries the integration tests run): names a file whose existence
/// holds every `peer.send` answer after its record is durable, so a test can
/// stop a root that owes a sender its `accepted`. Release builds ignore it.
pub const HOLD_ANSWER_ENV: &str = "PEERWIRE_TEST_HOLD_ANSWER";

fn hold_answer() {
    if cfg!(debug_assertions)
        && let Some(gate) = std::env::var_os(HOLD_ANSWER_ENV).filter(|v| !v.is_empty())
    {
        while std::path::Path::new(&gate).exists() {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }
}

/// What a local method answers.
#[derive(Serialize)]
#[serde(untagged)]
pub enum LocalAnswer {
    Info(Box<Info>),
    Tool(ToolAnswer),
    Receipt(message::Receipt),
    Reply(ReplyAnswer),
    Sent(SentView),
    RunPublished(RunPublished),
    RunRetired(RunRetired),
}

/// The trusted local methods, shared by the socket channel and in-process sessions. `bound` is
/// the run a connection proved with the run's own secret: it cannot be changed by `runId`, and
/// such a connection can neither publish nor retire runs.
pub fn local_request(
    core: &Arc<Core>,
    bound: Option<&str>,
    req: LocalRequest,
) -> Result<LocalAnswer> {
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
        LocalCall::Info => Ok(LocalAnswer::Info(Box::new(info(core, &caller)))),
        LocalCall::Tool(t) => {
            super::model_tools::local_tool(core, &caller, t).map(LocalAnswer::Tool)
        }
        LocalCall::Consume(n) => {
            let r = core.consume(&caller.peer_id, &n.message_id, n.note.as_deref())?;
            Ok(LocalAnswer::Receipt(r))
        }
        LocalCall::Prepare(n) => {
            let e = core.inbox_entry(&caller.peer_id, &n.message_id)?;
            let r = core.store.record_context(
                &caller.peer_id,
                MessageRef::Sequence(e.sequence),
                n.note.as_deref().unwrap_or("prepared"),
            )?;
            super::inbox::refuse_expired(&r)?;
            Ok(LocalAnswer::Receipt(r))
        }
        LocalCall::Reply(r) => reply(core, &caller, r).map(LocalAnswer::Reply),
        LocalCall::Status(q) => {
            let entry = core.sent_message(&caller.peer_id, &q.message_id)?;
            let reason = entry
                .receipt
                .is_none()
                .then(|| core.unresolved_reason(&entry));
            Ok(LocalAnswer::Sent(SentView {
                reason,
                ..outbox_view(&entry)
            }))
        }
        LocalCall::WaitReceipt(w) => {
            super::model_tools::wait_receipt(core, &caller, w).map(LocalAnswer::Sent)
        }
        LocalCall::RunPublish(p) if run.is_none() => {
            publish_run(core, p).map(LocalAnswer::RunPublished)
        }
        LocalCall::RunPublish(_) => Err(Error::new(
            Code::CapabilityDenied,
            "a child run cannot publish runs of its own",
        )),
        LocalCall::RunRetire(r) if run.is_none() => {
            retire_run(core, &r.run).map(LocalAnswer::RunRetired)
        }
        LocalCall::RunRetire(_) => Err(Error::new(
            Code::CapabilityDenied,
            "a child run cannot retire runs",
        )),
    }
}

/// `local.info`: who the caller is, the root's identity, store and limits.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Info {
    pub peer_id: String,
    pub run_id: Option<String>,
    pub alias: String,
    pub instance_id: String,
    pub session_id: String,
    pub capabilities: Vec<String>,
    pub events_dropped: u64,
    /// Whether this process may dump core or be ptraced (it should not).
    pub dumpable: bool,
    pub store: StoreInfo,
    pub problems: Vec<Problem>,
    pub limits: InfoLimits,
}

/// The limits an adapter adopts from its root.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InfoLimits {
    pub message_bytes: u64,
    pub wait_ms_max: u64,
    pub acknowledgement_ms: u64,
    pub frame_bytes: u64,
}

/// What `local.info` tells about the store: what its recovery discarded at open, and its
/// writer's counters (fdatasyncs, written batches, jobs, compactions and the snapshot bytes
/// they wrote) for benchmarks.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoreInfo {
    /// `ok` or `failed`.
    #[serde(deserialize_with = "store_state")]
    pub state: crate::toolspec::words::Word,
    #[serde(deserialize_with = "store_recovery")]
    pub recovery: Option<crate::toolspec::words::Word>,
    pub torn_tail_bytes: u64,
    pub torn_tail_batches: u64,
    pub poisoned: bool,
    pub syncs: u64,
    /// Of those, the ones a sender led for its own intent (no recipient's flush covered it).
    pub intent_syncs: u64,
    /// Intent frames written out (`sync_file_range`) instead of fdatasynced.
    pub write_outs: u64,
    pub batches: u64,
    pub jobs: u64,
    pub compactions: u64,
    pub journal_bytes: u64,
    pub snapshot_bytes: u64,
    pub snapshot_bytes_written: u64,
    /// Predecessor stores of this session left untouched at start because they did not
    /// verify: path and the command that reviews each.
    pub predecessors_unverified: Vec<super::core::UnverifiedStore>,
    /// Accepted messages sent again because the recipient's successor had lost its copy.
    pub redelivered: u64,
    /// Recipient incarnations whose session is known, so a successor can be asked about them.
    pub recipient_sessions_known: u64,
}

fn info(core: &Core, caller: &Caller) -> Info {
    let limits = core.limits();
    Info {
        peer_id: caller.peer_id.clone(),
        run_id: caller.run_id.clone(),
        alias: caller.alias.clone(),
        instance_id: core.me.instance_id().to_string(),
        session_id: core.me.session_id().to_string(),
        capabilities: caller.capabilities.to_vec(),
        events_dropped: core.bus.dropped(),
        dumpable: crate::hardening::is_dumpable(),
        store: store_info(core),
        problems: core.problems.recent(),
        limits: InfoLimits {
            message_bytes: limits.message_bytes,
            wait_ms_max: limits.wait_ms_max,
            acknowledgement_ms: limits.acknowledgement_ms,
            frame_bytes: limits.frame_bytes,
        },
    }
}

/// A local reply's receipt, and why the original could not be marked replied if so.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplyAnswer {
    #[serde(flatten)]
    pub receipt: message::Receipt,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mark_replied: Option<Failure>,
}

/// A failure beside a result: its code name and message.
#[derive(Serialize, Deserialize)]
pub struct Failure {
    #[serde(deserialize_with = "crate::toolspec::words::code")]
    pub code: crate::toolspec::words::Word,
    pub message: String,
}

/// `local.reply`: the reply goes to the exact incarnation that sent the original, which is
/// then marked replied.
fn reply(core: &Arc<Core>, caller: &Caller, r: LocalReply) -> Result<ReplyAnswer> {
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
    let mark_replied = marked.err().map(|e| {
        core.report_problem(&format!("marking message {} replied", r.message_id), &e);
        Failure {
            code: e.code.name(),
            message: e.message,
        }
    });
    Ok(ReplyAnswer {
        receipt,
        mark_replied,
    })
}

/// `local.run.publish`: a child run with its own peerId, secret and control file.
/// A published run: what its command needs (the control file) and what it may do.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunPublished {
    pub run_id: String,
    pub peer_id: String,
    pub alias: String,
    pub capabilities: Vec<String>,
    pub control: String,
}

fn publish_run(core: &Arc<Core>, p: RunPublish) -> Result<RunPublished> {
    let secret = zeroize::Zeroizing::new(control::new_secret());
    let r = core.runs.lock().publish(
        core.me.instance_id(),
        &p.alias,
        core.me.capabilities(),
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
    Ok(RunPublished {
        control: path.to_string_lossy().into_owned(),
        run_id: r.run_id,
        peer_id: r.peer_id,
        alias: r.alias,
        capabilities: r.capabilities,
    })
}

/// `local.run.retire`: the run ends; what it reserved goes back with it.
/// A retired run.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunRetired {
    pub run_id: String,
    pub peer_id: String,
    /// Always `ended`.
    pub state: &'static str,
}

fn retire_run(core: &Arc<Core>, run_id: &str) -> Result<RunRetired> {
    let r = core.runs.lock().retire(run_id)?;
    control::remove(
        &control::path_in(&core.control_dir(), core.me.instance_id(), Some(&r.run_id)),
        core.me.instance_id(),
    );
    // What the run reserved goes back with it; its held messages stay for review.
    let _ = super::resources::release_run(core, &r.peer_id);
    core.store.set_ended(&r.peer_id);
    core.publish_runs();
    Ok(RunRetired {
        run_id: r.run_id,
        peer_id: r.peer_id,
        state: "ended",
    })
}

fn store_state<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<&'static str, D::Error> {
    crate::toolspec::words::one_of(d, &["ok", "failed"])
}

/// The one recovery text a failed store states ([`super::core::STORE_FAILED`]).
fn store_recovery<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<&'static str>, D::Error> {
    use super::core::STORE_FAILED;
    match Option::<String>::deserialize(d)? {
        None => Ok(None),
        Some(text) if text == STORE_FAILED => Ok(Some(STORE_FAILED)),
        Some(_) => Err(serde::de::Error::custom("unknown store recovery text")),
    }
}

fn store_info(core: &Core) -> StoreInfo {
    let s = core.store.stats();
    let (state, recovery) = match core.degraded() {
        None => ("ok", None),
        Some(why) => ("failed", Some(why)),
    };
    StoreInfo {
        state,
        recovery,
        torn_tail_bytes: s.torn_tail_bytes,
        torn_tail_batches: s.torn_tail_batches,
        poisoned: s.poisoned,
        syncs: s.syncs,
        intent_syncs: s.intent_syncs,
        write_outs: s.write_outs,
        batches: s.batches,
        jobs: s.jobs,
        compactions: s.compactions,
        journal_bytes: s.journal_bytes,
        snapshot_bytes: s.snapshot_bytes,
        snapshot_bytes_written: s.snapshot_bytes_written,
        predecessors_unverified: core.problems.unverified(),
        redelivered: core
            .store
            .query(|m| m.state().redelivered_count() as u64)
            .unwrap_or(0),
        recipient_sessions_known: core.repair.sessions_known(),
    }
}

/// Writes the control file a run's command gets instead of the root's.
fn write_run_control(
    core: &Core,
    run: &super::runs::Run,
    secret: &[u8; 32],
) -> Result<std::path::PathBuf> {
    let cf = control::ControlFile {
        version: 1,
        endpoint: core.site.socket_path().to_path_buf(),
        secret: identity::b64(secret),
        instance_id: core.me.instance_id().to_string(),
        peer_id: run.peer_id.clone(),
        home: core.site.home().to_path_buf(),
        run_id: Some(run.run_id.clone()),
    };
    // The text form of the secret is wiped when `cf` drops.
    control::write(&core.control_dir(), &cf)
}
