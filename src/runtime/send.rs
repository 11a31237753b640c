//! A caller's send: the size check, outbox intent before the first byte, driving the route
//! until the message has an answer, and the durability wait before anyone hears it; what the
//! caller reads back about its sent messages.

use super::core::{Caller, Core, Route};
use crate::clock;
use crate::error::{Code, Error, Result};
use crate::messaging::{
    InboxEntry, MessageBody, MessageRef, OutboundSend, OutboxEntry, Receipt, TargetRef,
};
use crate::store::flush::{self, Answer};
use parking_lot::Mutex;

/// What a send needs beyond the tool arguments.
pub struct SendRequest {
    pub to: String,
    pub body: MessageBody,
    pub message_id: String,
}

impl Core {
    /// Sends one message for `caller` and returns its custody receipt. Retries of the same
    /// message id return the original receipt.
    pub fn send_message(&self, caller: &Caller, req: SendRequest) -> Result<Receipt> {
        self.check_size(&req.body.content)?;
        let to = self.resolve_target(&req.to)?;
        self.send_to(caller, to, req)
    }

    /// Replies go to the exact incarnation that sent `original`, never to an alias: a
    /// restarted sender answers `TARGET_ENDED`.
    pub fn send_reply(
        &self,
        caller: &Caller,
        req: SendRequest,
        original: &InboxEntry,
    ) -> Result<Receipt> {
        self.check_size(&req.body.content)?;
        let to = TargetRef {
            peer_id: original.from.peer_id.clone(),
            instance_id: original.from.instance_id.clone(),
            run_id: original.from.run_id.clone(),
        };
        self.send_to(caller, to, req)
    }

    fn check_size(&self, content: &str) -> Result<()> {
        let bytes = content.len() as u64;
        if bytes > self.limits().message_bytes {
            return Err(Error::new(
                Code::MessageTooLarge,
                format!(
                    "the message is {bytes} bytes; messageBytes allows {}",
                    self.limits().message_bytes
                ),
            ));
        }
        Ok(())
    }

    fn send_to(&self, caller: &Caller, to: TargetRef, req: SendRequest) -> Result<Receipt> {
        if caller.automatic {
            let correlation =
                self.correlation_for(caller, req.body.reply_to.as_deref(), &req.message_id);
            self.auto.take(&correlation)?;
        }
        let intent = OutboundSend {
            from_peer_id: caller.peer_id.clone(),
            to: to.clone(),
            message_id: req.message_id.clone(),
            body: req.body,
            correlation_id: None,
            expires_at_ms: None,
        };
        // Held from before the intent is written until the send returns: the root worker
        // leaves a route a caller is about to drive to the caller instead of racing it for
        // the route lock (`retry_routes`).
        let route = self.route(&caller.peer_id, &to.peer_id);
        // The intent is in the journal file and written out to the device before the first
        // byte leaves (a crash of this process cannot lose it; the device's next cache flush
        // makes it durable).
        let (entry, intent_sync) = self.store.outbox_intent_written(intent)?;
        let answer = self.answer_send(caller, &to, &req.message_id, &entry, &route);
        // Nobody hears an answer before the intent is durable: `accepted` means both the
        // recipient's record and ours survive a power loss. The recipient's stated flush of our
        // device covers it when every condition of `flush::covered` holds; otherwise we
        // fdatasync it now. A failure we recorded was appended after the intent, so its own
        // fdatasync already covered it; then this returns at once.
        let stated = match &answer {
            Ok((_, a)) => *a,
            Err(_) => Answer::Other,
        };
        if !flush::covered(self.store.device(), intent_sync.frame, stated) {
            self.store.wait_durable(intent_sync)?;
        }
        answer.map(|(r, _)| r)
    }

    /// Drives the route of a just-written intent until `message_id` has an answer, and how
    /// the recipient answered (see [`Answer`]).
    fn answer_send(
        &self,
        caller: &Caller,
        to: &TargetRef,
        message_id: &str,
        entry: &OutboxEntry,
        route: &Mutex<Route>,
    ) -> Result<(Receipt, Answer)> {
        if entry.receipt.is_some() {
            self.outbox_answer(&caller.peer_id, &to.peer_id, message_id)
                .map(|r| (r, Answer::Other))
        } else {
            // A caller's send is a fresh attempt: a route whose head gave up starts over.
            {
                let mut r = route.lock();
                if r.queue.failures() > self.limits().route_retries {
                    r.queue.reset();
                }
            }
            let answer = self
                .drive_route_on(route, &caller.peer_id, to, Some(message_id), true)
                .unwrap_or_else(|| {
                    Err(Error::new(
                        Code::NotFound,
                        "the message left the outbox unexpectedly",
                    ))
                });
            if answer.is_err() {
                // The intent's commit did not wake the root worker: it retries from now on.
                self.store.nudge_worker();
            }
            answer
        }
    }

    /// The conversation an automatic send belongs to: its reply's correlation, or a new one.
    fn correlation_for(&self, caller: &Caller, reply_to: Option<&str>, message_id: &str) -> String {
        let Some(reply_to) = reply_to else {
            return message_id.to_string();
        };
        let recipient = caller.peer_id.clone();
        let id = reply_to.to_string();
        self.store
            .query(move |m| {
                m.find_inbox(&recipient, &MessageRef::Id(id))
                    .map(|e| e.correlation_id.clone())
                    .ok()
            })
            .ok()
            .flatten()
            .unwrap_or_else(|| reply_to.to_string())
    }

    /// The latest outbox entry `from` sent under `message_id` (whatever its target).
    pub fn sent_message(&self, from: &str, message_id: &str) -> Result<OutboxEntry> {
        let (me, wanted) = (from.to_string(), message_id.to_string());
        self.store.query(move |m| {
            // Keys only: resolved entries are rebuilt just for the one returned.
            let mine: Vec<(&str, &str, u64)> = m
                .state()
                .outbox_keys()
                .filter(|(from, ..)| *from == me)
                .map(|(_, to, id, order)| (to, id, order))
                .collect();
            let ids = crate::messaging::ids_matching(&wanted, mine.iter().map(|(_, id, _)| *id));
            match ids.as_slice() {
                [id] => mine
                    .iter()
                    .filter(|(_, i, _)| i == id)
                    .max_by_key(|(.., order)| *order)
                    .and_then(|(to, i, _)| m.state().outbox_get(to, i))
                    .ok_or_else(|| Error::new(Code::NotFound, "no such sent message")),
                [] => Err(Error::new(
                    Code::NotFound,
                    format!(
                        "this session sent no message {}",
                        crate::sanitize::line(&wanted, 100)
                    ),
                )),
                several => Err(crate::messaging::ambiguous_prefix(
                    &wanted,
                    several,
                    "sent message",
                )),
            }
        })?
    }

    /// Why an unresolved outbox entry is still unresolved, for `peer status`: the route's last
    /// failure and since when, or the head it waits behind.
    pub fn unresolved_reason(&self, e: &OutboxEntry) -> String {
        let head = self
            .store
            .route_view(&e.from_peer_id, &e.to.peer_id, None)
            .ok()
            .and_then(|v| v.head.map(|h| h.message_id));
        if let Some(h) = head.filter(|h| *h != e.message_id) {
            return format!("waits behind unresolved message {h} on this route");
        }
        match self.outbox.route_error(&e.from_peer_id, &e.to.peer_id) {
            Some((err, since)) => format!(
                "{} ({}); failing since {}; retried in the background",
                err.message,
                err.code.name(),
                clock::iso8601(since)
            ),
            None => "not yet acknowledged; retried in the background".to_string(),
        }
    }
}
