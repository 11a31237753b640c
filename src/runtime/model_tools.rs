//! The one implementation of the model tools, used by the CLI (through `local.tool`), by
//! `peer mcp` (as a `ToolHost`) and by child runs: capability checks, retry-stable message ids,
//! bounded abortable waits, and results shaped for both people and models.

use super::core::{Caller, Core};
use super::send::SendRequest;
use crate::directory::{self, ListOptions};
use crate::error::{Code, Error, Result};
use crate::messaging::{
    InboxEntry, MessageRef, ReadQuery, ReceiptState, derive_message_id, new_message_id,
};
use crate::protocol::local::{LocalTool, WaitReceipt};
use crate::toolspec::answer::{
    ErrorCode, MessageView, MessagesPage, PeersPage, SendAnswer, SentView, ToolAnswer,
};
use crate::toolspec::{self, MessagesArgs, ToolCall};
use crate::{clock, identity, presence};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// Extra, non-model options of one tool call (from the CLI's envelope).
#[derive(Default, Clone)]
pub struct CallOptions {
    pub call_id: Option<String>,
    pub message_id: Option<String>,
    pub events_after: Option<u64>,
    /// Messages returned to a model are in its context: record that and consume them. The
    /// CLI's `peer inbox` only shows; `peer consume` consumes.
    pub consume_on_read: bool,
    /// Only unconsumed messages (the CLI's default; `peer inbox --all` clears it).
    pub unconsumed_only: bool,
    /// Only a message ends a wait, not a receipt update (`peer inbox --wait`).
    pub wait_for_message: bool,
}

/// `local.tool`: one model tool for a local adapter, with the CLI's envelope options.
pub fn local_tool(core: &Arc<Core>, caller: &Caller, t: LocalTool) -> Result<ToolAnswer> {
    let call = toolspec::parse_call(&t.tool, &t.args, core.limits())?;
    let opts = CallOptions {
        call_id: t.call_id,
        message_id: t.message_id,
        events_after: t.events_after,
        consume_on_read: false,
        unconsumed_only: t.unconsumed,
        wait_for_message: t.wait_for.as_deref() == Some("message"),
    };
    run_local(core, caller, call, &opts)
}

/// A validated local tool call with the envelope options of `local.tool`.
fn run_local(
    core: &Arc<Core>,
    caller: &Caller,
    call: ToolCall,
    opts: &CallOptions,
) -> Result<ToolAnswer> {
    if opts
        .message_id
        .as_deref()
        .is_some_and(|m| !identity::is_valid_id(m))
    {
        return Err(Error::new(
            Code::Usage,
            format!(
                "--message-id must be 1-{} chars of [A-Za-z0-9_.-]",
                crate::config::internal::ID_CHARS_MAX
            ),
        ));
    }
    execute(core, caller, call, opts, &core.stopping)
}

/// Runs one validated tool call for `caller`.
pub fn execute(
    core: &Arc<Core>,
    caller: &Caller,
    call: ToolCall,
    opts: &CallOptions,
    cancel: &AtomicBool,
) -> Result<ToolAnswer> {
    toolspec::check_capability(&call, &caller.capabilities)?;
    match call {
        ToolCall::ListPeers(a) => {
            let viewer = core.viewer(a.scope)?;
            let opts = ListOptions {
                query: a.query,
                cursor: a.cursor,
                all: false,
                page_size: None,
            };
            let page = directory::list_cached(
                core.site.ns(),
                core.limits(),
                &viewer,
                &opts,
                core.presence.files(),
            )?;
            Ok(ToolAnswer::Peers(PeersPage {
                peers: page.peers,
                cursor: page.cursor,
            }))
        }
        ToolCall::Send(a) => {
            // The name the caller used for the target, when it was one (not a peerId).
            let to_alias = (!crate::mention::is_peer_id(&a.to))
                .then(|| a.to.trim_start_matches('@').to_string());
            let message_id = match (&opts.message_id, &opts.call_id) {
                (Some(m), _) => m.clone(),
                (None, Some(c)) => derive_message_id(&caller.peer_id, c),
                (None, None) => new_message_id(),
            };
            let mentions = crate::mention::inline_mentions(&a.body.content);
            let req = SendRequest {
                to: a.to,
                body: a.body,
                message_id,
            };
            let r = core.send_message(caller, req)?;
            Ok(ToolAnswer::Sent(SendAnswer {
                to: r.to_peer_id.clone(),
                from: r.from_peer_id.clone(),
                receipt: r,
                mentions,
                to_alias,
            }))
        }
        ToolCall::Messages(a) => {
            read_messages(core, caller, a, opts, cancel).map(ToolAnswer::Messages)
        }
        ToolCall::Resource(a) => {
            super::resources::coordinate(core, caller, a, cancel).map(ToolAnswer::Resource)
        }
        // The ask tools talk to friends on other machines; the front ends that offer them
        // (`peer mcp`) run them beside this host (see `cli::ask_discovery::WithAskTools`).
        ToolCall::Ask(a) => Err(Error::new(
            Code::MethodNotFound,
            format!(
                "{} is served by peer mcp, not by this session's local tools",
                a.tool_name()
            ),
        )),
    }
}

fn read_messages(
    core: &Arc<Core>,
    caller: &Caller,
    a: MessagesArgs,
    opts: &CallOptions,
    cancel: &AtomicBool,
) -> Result<MessagesPage> {
    let (q, unfiltered, wait_ms) = messages_query(core, caller, a, opts);
    let deadline =
        Instant::now() + std::time::Duration::from_millis(wait_ms.min(core.limits().wait_ms_max));
    // Receipt events present when the call starts do not end a wait; new ones do, unless the
    // caller filters for particular messages.
    let filtered = q.reply_to.is_some() || q.message_id.is_some() || q.from.is_some();
    let mut first_event_cursor = None;
    loop {
        let generation = core.store.change_generation();
        let r = core.store.read(q.clone())?;
        let waited_out = Instant::now() >= deadline
            || cancel.load(Ordering::SeqCst)
            || core.stopping.load(Ordering::SeqCst);
        let baseline = *first_event_cursor.get_or_insert(r.next_event_cursor);
        let events_end_wait = !filtered && !opts.wait_for_message;
        let new_events = events_end_wait && r.next_event_cursor > baseline;
        let initial_events = events_end_wait && !r.events.is_empty() && opts.events_after.is_some();
        if !r.messages.is_empty() || new_events || initial_events || wait_ms == 0 || waited_out {
            let page = messages_page(core, &r, &q);
            if opts.consume_on_read {
                consume_returned(core, &r.messages, page.messages.len())?;
                core.arrivals.advance_model_cursors(
                    &caller.peer_id,
                    unfiltered.then_some(page.cursor),
                    page.event_cursor,
                );
            }
            return Ok(page);
        }
        let left = deadline
            .saturating_duration_since(Instant::now())
            .as_millis() as u64;
        core.store.wait_for_change(generation, left, cancel);
    }
}

/// The store query for a `peer_messages` call, whether it is unfiltered, and how long it may
/// wait. A model that names no cursor continues where it left off; a person's `peer inbox`
/// shows everything retained unless told otherwise.
fn messages_query(
    core: &Arc<Core>,
    caller: &Caller,
    a: MessagesArgs,
    opts: &CallOptions,
) -> (ReadQuery, bool, u64) {
    let (model_after, model_events) = core.arrivals.model_cursors(&caller.peer_id);
    let unfiltered =
        a.after.is_none() && a.message_id.is_none() && a.reply_to.is_none() && a.from.is_none();
    let default_after = (opts.consume_on_read && unfiltered).then_some(model_after);
    let events_after = opts
        .events_after
        .or(opts.consume_on_read.then_some(model_events));
    let a = MessagesArgs {
        after: a.after.or(default_after),
        ..a
    };
    let from = match a.from {
        Some(f) if crate::mention::is_peer_id(&f) => Some(f),
        Some(f) => Some(core.resolve_target(&f).map(|t| t.peer_id).unwrap_or(f)),
        None => None,
    };
    let q = ReadQuery {
        recipient_peer_id: caller.peer_id.clone(),
        after: a.after,
        from,
        reply_to: a.reply_to,
        message_id: a.message_id,
        limit: core.limits().directory_page_size,
        events_after: Some(events_after.unwrap_or(0)),
        unconsumed_only: opts.unconsumed_only,
    };
    (q, unfiltered, a.wait_ms)
}

/// The page a read returns: its messages with their senders' aliases, cut to what fits in one
/// frame.
fn messages_page(
    core: &Arc<Core>,
    r: &crate::messaging::ReadResult,
    q: &ReadQuery,
) -> MessagesPage {
    let aliases = sender_aliases(core, &r.messages);
    let budget = core
        .limits()
        .frame_bytes
        .saturating_sub(crate::config::internal::PAGE_ENVELOPE_BYTES);
    let starts = (q.after.unwrap_or(0), q.events_after.unwrap_or(0));
    bounded_page(r, &aliases, starts, budget)
}

/// Marks the first `returned` messages of a read as taken into the model's context. The
/// whole page is one durable write.
fn consume_returned(core: &Arc<Core>, messages: &[InboxEntry], returned: usize) -> Result<()> {
    let open: Vec<&InboxEntry> = messages
        .iter()
        .take(returned)
        .filter(|e| !e.state.is_final() && e.state != ReceiptState::Consumed)
        .collect();
    if let Some(first) = open.first() {
        let recipient = first.recipient_peer_id.clone();
        let page = open
            .iter()
            .take_while(|e| e.recipient_peer_id == recipient)
            .map(|e| (MessageRef::Sequence(e.sequence), e.context_marked))
            .collect();
        let (receipts, failed) =
            core.store
                .consume_page(&recipient, page, "returned to the model by peer_messages")?;
        if let Some(e) = failed {
            return Err(e);
        }
        receipts.iter().try_for_each(super::inbox::refuse_expired)?;
        // A page is one recipient's; any other (not expected) goes one by one.
        for e in open.iter().skip_while(|e| e.recipient_peer_id == recipient) {
            core.consume_entry(e, "returned to the model by peer_messages")?;
        }
    }
    Ok(())
}

/// One `peer_messages` page cut to a byte budget: messages first, then receipt events, each
/// counted by its encoded size, and the cursors moved only past what the page holds. At least
/// one item is kept so a reader always makes progress.
fn bounded_page(
    r: &crate::messaging::ReadResult,
    aliases: &HashMap<String, presence::Advertisement>,
    (after, events_after): (u64, u64),
    budget: u64,
) -> MessagesPage {
    let mut used = 0u64;
    let mut fits = |len: Option<usize>, first: bool| {
        let len = len.map_or(u64::MAX, |n| n as u64 + 1);
        if first || used.saturating_add(len) <= budget {
            used = used.saturating_add(len);
            true
        } else {
            false
        }
    };
    let mut page = MessagesPage {
        cursor: after,
        event_cursor: r.next_event_cursor,
        more: r.more,
        ..MessagesPage::default()
    };
    let mut cut = false;
    for e in &r.messages {
        let v = message_view(e, aliases.get(&e.from.instance_id));
        if !fits(encoded_len(&v), page.messages.is_empty()) {
            cut = true;
            break;
        }
        page.cursor = e.sequence;
        page.messages.push(v);
    }
    if page.messages.len() == r.messages.len() {
        page.cursor = r.next_after;
    }
    let mut event_cursor = None;
    for e in &r.events {
        let v = e.receipt.clone();
        if cut
            || !fits(
                encoded_len(&v),
                page.messages.is_empty() && page.events.is_empty(),
            )
        {
            cut = true;
            break;
        }
        event_cursor = Some(e.cursor);
        page.events.push(v);
    }
    if page.events.len() < r.events.len() {
        // Continue after the last event this page holds (or where the query started).
        page.event_cursor = event_cursor.unwrap_or(events_after);
    }
    page.more |= cut;
    page
}

/// The length of `v` as JSON (None when it cannot be encoded, which never fits).
fn encoded_len<T: serde::Serialize>(v: &T) -> Option<usize> {
    serde_json::to_vec(v).ok().map(|b| b.len())
}

/// Current aliases of the senders of these messages (roots and their runs), from presence.
fn sender_aliases(core: &Core, msgs: &[InboxEntry]) -> HashMap<String, presence::Advertisement> {
    let mut out = HashMap::new();
    for m in msgs {
        if out.contains_key(&m.from.instance_id) {
            continue;
        }
        if core.me.is(&m.from.instance_id) {
            continue;
        }
        if let Some(ad) = core.presence.advertisement_of(&m.from.instance_id) {
            out.insert(m.from.instance_id.clone(), Arc::unwrap_or_clone(ad));
        }
        if out.len() > 64 {
            break;
        }
    }
    out
}

/// One inbox entry as tools and the CLI show it. The content is peer data.
pub fn message_view(e: &InboxEntry, ad: Option<&presence::Advertisement>) -> MessageView {
    // The current advertisement first (an alias may have changed), else the alias the sender
    // stated when the message arrived, which outlives the sender.
    let alias = ad
        .and_then(|ad| super::resolve::advertised_alias(ad, e.from.run_id.as_deref()))
        .or_else(|| e.from_alias.clone());
    MessageView {
        sequence: e.sequence,
        message_id: e.message_id.clone(),
        from: e.from.peer_id.clone(),
        from_peer_id: e.from.peer_id.clone(),
        from_alias: alias,
        from_instance_id: e.from.instance_id.clone(),
        from_run_id: e.from.run_id.clone(),
        to: e.recipient_peer_id.clone(),
        content: e.body.content.clone(),
        topic: e.body.topic.clone(),
        reply_to: e.body.reply_to.clone(),
        correlation_id: e.correlation_id.clone(),
        state: e.state.name(),
        accepted_at_ms: e.accepted_at_ms,
        sent_at: clock::iso8601(e.accepted_at_ms),
        expires_at_ms: e.expires_at_ms,
        mentions: crate::mention::inline_mentions(&e.body.content),
    }
}

/// `local.wait_receipt {messageId, state, waitMs}`: waits until the sender-side receipt
/// reaches `state` (or a terminal failure).
pub fn wait_receipt(core: &Arc<Core>, caller: &Caller, w: WaitReceipt) -> Result<SentView> {
    let id = w.message_id;
    let wanted = w
        .state
        .as_deref()
        .and_then(ReceiptState::waitable)
        .ok_or_else(|| {
            Error::new(
                Code::Usage,
                "--wait-receipt takes accepted, prepared, consumed or replied",
            )
        })?;
    let wait_ms = w.wait_ms.unwrap_or(30_000);
    let deadline = Instant::now() + std::time::Duration::from_millis(wait_ms);
    loop {
        let generation = core.store.change_generation();
        let entry = core.sent_message(&caller.peer_id, &id)?;
        if let Some(r) = &entry.receipt
            && r.state.reached(wanted)
        {
            return Ok(outbox_view(&entry));
        }
        if Instant::now() >= deadline || core.stopping.load(Ordering::SeqCst) {
            let now = entry
                .receipt
                .as_ref()
                .map_or("unresolved", |r| r.state.name());
            return Err(Error::new(
                Code::Timeout,
                format!(
                    "message {id} is still {now} after {wait_ms} ms (waited for {})",
                    wanted.name()
                ),
            ));
        }
        let left = deadline
            .saturating_duration_since(Instant::now())
            .as_millis() as u64;
        core.store.wait_for_change(generation, left, &core.stopping);
    }
}

/// What `peer status` shows for one outbox entry.
pub fn outbox_view(e: &crate::messaging::OutboxEntry) -> SentView {
    let (state, code) = match &e.receipt {
        Some(r) => (r.state.name(), r.code.clone()),
        None => ("unresolved", None),
    };
    SentView {
        message_id: e.message_id.clone(),
        to: e.to.peer_id.clone(),
        to_peer_id: e.to.peer_id.clone(),
        to_instance_id: e.to.instance_id.clone(),
        to_run_id: e.to.run_id.clone(),
        correlation_id: e.correlation_id.clone(),
        reply_to: e.body.reply_to.clone(),
        state,
        sequence: e.receipt.as_ref().map(|r| r.sequence),
        reply_message_id: e.receipt.as_ref().and_then(|r| r.reply_message_id.clone()),
        error: code.map(|code| ErrorCode { code }),
        created_at_ms: e.created_at_ms,
        updated_at_ms: e.updated_at_ms,
        reason: None,
        redelivered_from: e.redelivered_from.clone(),
    }
}
