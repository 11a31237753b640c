//! Sender-side custody: the outbox intent written before the first byte leaves, the custody
//! answer, recipient receipts applied only from the exact target incarnation, and the
//! unresolved entries of one route in send order.

use super::machine::{Machine, Outcome};
use super::state::{RECEIPT_RESERVE_BYTES, Record, outbox_cost};
use super::types::{OutboundSend, OutboxEntry, Principal, Receipt, ReceiptState, TargetRef};
use crate::error::{Code, Error, Result};

/// Failures after which the same message may be sent again: the entry stays unresolved.
pub fn is_retryable(code: Code) -> bool {
    matches!(
        code,
        Code::PeerOffline
            | Code::Timeout
            | Code::Disconnected
            | Code::QueueFull
            | Code::RateLimited
    )
}

impl Machine {
    /// Records the intent to send before transmission. The same id, target and content returns
    /// the existing entry. Errors: MESSAGE_ID_CONFLICT, INVALID_REQUEST, MESSAGE_TOO_LARGE,
    /// EXPIRED, INVALID_REPLY, QUEUE_FULL (route or storage full).
    /// The send is taken by value: its ids, target and content move into the entry.
    pub fn outbox_intent(&mut self, send: OutboundSend, now_ms: u64) -> Outcome<OutboxEntry> {
        if let Some(e) = self.state.outbox_get(&send.to.peer_id, &send.message_id) {
            let same = e.has_content(&send.body.content)
                && e.body.topic == send.body.topic
                && e.body.reply_to == send.body.reply_to
                && e.to == send.to
                && e.from_peer_id == send.from_peer_id;
            if !same {
                return Err(Error::new(
                    Code::MessageIdConflict,
                    format!(
                        "message {} to {} already exists with different content; use a new message id",
                        send.message_id, send.to.peer_id
                    ),
                ));
            }
            return Ok((e, Vec::new()));
        }
        Self::check_id("messageId", &send.message_id)?;
        self.check_content(&send.body.content, &send.body.topic)?;
        let expires_at_ms = self.expiry(send.expires_at_ms, now_ms)?;
        let correlation_id = self.outbound_correlation(&send, now_ms)?;
        let entry = OutboxEntry {
            order: self.state.next_order.max(1),
            from_peer_id: send.from_peer_id,
            to: send.to,
            message_id: send.message_id,
            body: send.body,
            content_digest: None,
            correlation_id,
            expires_at_ms,
            created_at_ms: now_ms,
            receipt: None,
            updated_at_ms: now_ms,
            redelivered_from: None,
        };
        let queued =
            self.state
                .route_pending_count(&entry.from_peer_id, &entry.to.peer_id) as u64;
        if queued >= self.limits.inbox_messages {
            return Err(Error::new(
                Code::QueueFull,
                format!(
                    "{queued} messages to {} are still unresolved (inboxMessages); wait for their receipts",
                    entry.to.peer_id
                ),
            ));
        }
        self.check_space(
            outbox_cost(&entry) + RECEIPT_RESERVE_BYTES,
            "cannot record the outgoing message",
        )?;
        let records = self.commit(vec![Record::OutboxAdded {
            entry: entry.clone(),
        }]);
        Ok((entry, records))
    }

    /// A reply must answer a message our local sender received from exactly the target
    /// incarnation and that has not expired, and carries that message's correlation id.
    fn outbound_correlation(&self, send: &OutboundSend, now_ms: u64) -> Result<String> {
        let Some(reply_to) = &send.body.reply_to else {
            return Ok(send
                .correlation_id
                .clone()
                .unwrap_or_else(|| send.message_id.clone()));
        };
        let key = (
            send.to.instance_id.clone(),
            send.to.run_id.clone(),
            reply_to.clone(),
            send.from_peer_id.clone(),
        );
        let original = self
            .state
            .dedup
            .get(&key)
            .and_then(|at| self.state.inbox.get(at))
            .filter(|e| send.to.is(&e.from))
            .ok_or_else(|| {
                Error::new(
                    Code::InvalidReply,
                    format!("replyTo {reply_to} is not a message {} received from that exact target incarnation", send.from_peer_id),
                )
            })?;
        if original.state == ReceiptState::Expired || super::machine::expiry_due(original, now_ms) {
            return Err(Error::new(
                Code::Expired,
                format!("message {reply_to} expired; it can no longer be replied to"),
            ));
        }
        match &send.correlation_id {
            Some(c) if *c != original.correlation_id => Err(Error::new(
                Code::InvalidReply,
                format!("correlationId must stay {}", original.correlation_id),
            )),
            _ => Ok(original.correlation_id.clone()),
        }
    }

    /// Records the custody answer of one send attempt. `Ok(receipt)` resolves the entry (and,
    /// for a reply, marks the answered inbox message replied); a retryable code leaves it
    /// unresolved; any other code resolves it as `refused` with that code. Never regresses.
    pub fn outbox_result(
        &mut self,
        to_peer_id: &str,
        message_id: &str,
        answer: std::result::Result<Receipt, Code>,
        now_ms: u64,
    ) -> Outcome<OutboxEntry> {
        let ((), records) = self.record_outbox_result(to_peer_id, message_id, answer, now_ms)?;
        Ok((self.outbox_entry(to_peer_id, message_id)?, records))
    }

    /// [`outbox_result`](Self::outbox_result) without reading the entry back: the send path
    /// records a receipt it already holds, and a resolved entry read back is rebuilt from its
    /// compact form only to be dropped.
    pub fn record_outbox_result(
        &mut self,
        to_peer_id: &str,
        message_id: &str,
        answer: std::result::Result<Receipt, Code>,
        now_ms: u64,
    ) -> Outcome<()> {
        // Borrowed while the records are built (an unresolved entry is not copied).
        let entry = self
            .state
            .outbox_view(to_peer_id, message_id)
            .ok_or_else(|| no_outbox_entry(to_peer_id, message_id))?;
        let receipt = match answer {
            Ok(r) => {
                if r.message_id != entry.message_id
                    || r.to_peer_id != entry.to.peer_id
                    || r.from_peer_id != entry.from_peer_id
                {
                    return Err(Error::new(
                        Code::InvalidRequest,
                        "the custody receipt names another message, sender or target",
                    ));
                }
                r
            }
            Err(code) if is_retryable(code) => return Ok(((), Vec::new())),
            Err(code) => Receipt {
                message_id: entry.message_id.clone(),
                from_peer_id: entry.from_peer_id.clone(),
                to_peer_id: entry.to.peer_id.clone(),
                // The recipient found it past its expiry: expired, not a refusal of content.
                state: if code == Code::Expired {
                    ReceiptState::Expired
                } else {
                    ReceiptState::Refused
                },
                sequence: 0,
                correlation_id: entry.correlation_id.clone(),
                at_ms: now_ms,
                reply_message_id: None,
                code: Some(code.name().to_string()),
            },
        };
        let in_custody = !receipt.state.is_failure();
        let mut records = self.receipt_records(&entry, receipt, now_ms);
        if !records.is_empty() && in_custody {
            records.extend(self.replied_records(&entry, now_ms));
        }
        drop(entry);
        Ok(((), self.commit(records)))
    }

    /// Once a reply is in the target's custody, the message it answers is replied.
    fn replied_records(&self, reply: &OutboxEntry, now_ms: u64) -> Vec<Record> {
        let Some(orig_id) = &reply.body.reply_to else {
            return Vec::new();
        };
        let key = (
            reply.to.instance_id.clone(),
            reply.to.run_id.clone(),
            orig_id.clone(),
            reply.from_peer_id.clone(),
        );
        let Some(at) = self.state.dedup.get(&key) else {
            return Vec::new();
        };
        let Some(orig) = self.state.inbox.get(at) else {
            return Vec::new();
        };
        if !orig.state.may_become(ReceiptState::Replied) {
            return Vec::new();
        }
        let mut records = Vec::new();
        if !orig.context_marked {
            records.push(super::inbound::context_record(orig, "", true, now_ms));
        }
        let cursor = self.state.next_push.max(1);
        records.extend(super::inbound::state_records(
            orig,
            ReceiptState::Replied,
            Some(reply.message_id.clone()),
            now_ms,
            cursor,
        ));
        records
    }

    /// `peer.receipt`: applies a recipient's receipt to our outbox entry, only when `from` is
    /// exactly the entry's target incarnation; stale or regressing receipts change nothing.
    /// Errors: NOT_FOUND, INVALID_REQUEST (wrong incarnation or mismatched receipt).
    pub fn record_receipt(
        &mut self,
        from: &Principal,
        r: &Receipt,
        now_ms: u64,
    ) -> Outcome<OutboxEntry> {
        let entry = self.outbox_entry(&from.peer_id, &r.message_id)?;
        if !entry.to.is(from)
            || r.to_peer_id != entry.to.peer_id
            || r.from_peer_id != entry.from_peer_id
        {
            return Err(Error::new(
                Code::InvalidRequest,
                format!(
                    "receipt for {} does not come from the message's exact target incarnation",
                    r.message_id
                ),
            ));
        }
        let records = self.receipt_records(&entry, r.clone(), now_ms);
        let records = self.commit(records);
        Ok((self.outbox_entry(&from.peer_id, &r.message_id)?, records))
    }

    /// Records for moving an outbox entry to `receipt` (none when it would regress; see
    /// [`Receipt::may_replace`]).
    pub(super) fn receipt_records(
        &self,
        entry: &OutboxEntry,
        mut receipt: Receipt,
        now_ms: u64,
    ) -> Vec<Record> {
        if let Some(cur) = &entry.receipt
            && !receipt.may_replace(cur)
        {
            return Vec::new();
        }
        receipt.correlation_id = entry.correlation_id.clone();
        // The change carries its event (the sender's, with this receipt): every caller checked
        // that the receipt names the entry's sender, so the event's peer is the receipt's.
        debug_assert_eq!(receipt.from_peer_id, entry.from_peer_id);
        let mut records = vec![Record::OutboxReceipt {
            to_peer_id: entry.to.peer_id.clone(),
            message_id: entry.message_id.clone(),
            receipt,
            at_ms: now_ms,
            event: Some(self.state.next_event.max(1)),
        }];
        records.extend(self.state.event_room(&entry.from_peer_id));
        records
    }

    pub(crate) fn outbox_entry(&self, to_peer_id: &str, message_id: &str) -> Result<OutboxEntry> {
        self.state
            .outbox_get(to_peer_id, message_id)
            .ok_or_else(|| no_outbox_entry(to_peer_id, message_id))
    }

    /// Takes over an unresolved entry of a dead earlier incarnation of our session, to be sent
    /// as `from_peer_id` (our root). Same target, id, content, correlation and expiry; a new
    /// place at the end of the send order. Returns false (no change) when an entry with that
    /// target and id is already here. Errors: QUEUE_FULL (no room: the entry stays where it is).
    pub fn adopt(&mut self, old: &OutboxEntry, from_peer_id: &str, now_ms: u64) -> Outcome<bool> {
        if self.state.has_outbox(&old.to.peer_id, &old.message_id) {
            return Ok((false, Vec::new()));
        }
        let entry = OutboxEntry {
            order: self.state.next_order.max(1),
            from_peer_id: from_peer_id.to_string(),
            receipt: None,
            updated_at_ms: now_ms,
            ..old.clone()
        };
        self.check_space(
            outbox_cost(&entry) + RECEIPT_RESERVE_BYTES,
            "cannot take over an earlier incarnation's message",
        )?;
        Ok((true, self.commit(vec![Record::OutboxAdded { entry }])))
    }

    /// Sends an accepted message again, under the same id, to `to`: the successor incarnation
    /// of its recipient, which answered that it does not hold it (its copy was lost). The
    /// copy names the first target (`redelivered_from`) and goes to the end of the send order.
    /// Returns false (no change) when the entry is gone, no longer only `accepted`, holds no
    /// body, has expired, or a copy to `to` exists. Errors: QUEUE_FULL (no room).
    pub fn redeliver(
        &mut self,
        first_to: &str,
        message_id: &str,
        to: TargetRef,
        now_ms: u64,
    ) -> Outcome<bool> {
        let Some(old) = self.state.outbox_get(first_to, message_id) else {
            return Ok((false, Vec::new()));
        };
        let only_accepted = old
            .receipt
            .as_ref()
            .is_some_and(|r| r.state == ReceiptState::Accepted);
        if !only_accepted
            || old.content_digest.is_some()
            || old.expires_at_ms <= now_ms
            || self.state.has_outbox(&to.peer_id, message_id)
        {
            return Ok((false, Vec::new()));
        }
        let entry = OutboxEntry {
            order: self.state.next_order.max(1),
            to,
            receipt: None,
            updated_at_ms: now_ms,
            redelivered_from: Some(first_to.to_string()),
            ..old
        };
        self.check_space(
            outbox_cost(&entry) + RECEIPT_RESERVE_BYTES,
            "cannot send a lost message again",
        )?;
        Ok((true, self.commit(vec![Record::OutboxAdded { entry }])))
    }

    /// Forgets an outbox entry another incarnation has taken over (no-op when absent).
    pub fn hand_over(&mut self, to_peer_id: &str, message_id: &str) -> Outcome<()> {
        if !self.state.has_outbox(to_peer_id, message_id) {
            return Ok(((), Vec::new()));
        }
        Ok((
            (),
            self.commit(vec![Record::OutboxRemoved {
                to_peer_id: to_peer_id.to_string(),
                message_id: message_id.to_string(),
            }]),
        ))
    }

    /// Unresolved entries of the route `from_peer_id` → `to_peer_id`, in send order (from the
    /// per-route index: the cost follows the route's backlog, not the outbox's history). The
    /// tests' reference for [`route_view`](Self::route_view), which the send path reads.
    #[cfg(test)]
    pub fn route_pending(&self, from_peer_id: &str, to_peer_id: &str) -> Vec<OutboxEntry> {
        self.state
            .route_pending_ids(from_peer_id, to_peer_id)
            .filter_map(|id| self.state.unresolved_get(to_peer_id, id))
            .cloned()
            .collect()
    }

    /// What a route's driver reads: its head (the first unresolved entry, copied) and
    /// whether `want` is still unresolved on it, without copying the entries queued behind
    /// the head (a backlog of up to `inboxMessages` bodies per read).
    pub fn route_view(
        &self,
        from_peer_id: &str,
        to_peer_id: &str,
        want: Option<&str>,
    ) -> RouteView {
        RouteView {
            head: self.route_head(from_peer_id, to_peer_id).cloned(),
            want_pending: want.is_some_and(|w| self.state.route_holds(from_peer_id, to_peer_id, w)),
        }
    }

    /// The first unresolved entry of a route, if any.
    pub fn route_head(&self, from_peer_id: &str, to_peer_id: &str) -> Option<&OutboxEntry> {
        self.state
            .route_pending_ids(from_peer_id, to_peer_id)
            .next()
            .and_then(|id| self.state.unresolved_get(to_peer_id, id))
    }

    /// Every route with unresolved entries, as (from, to) pairs (for resending after restart).
    pub fn pending_routes(&self) -> Vec<(String, String)> {
        self.state.pending_route_keys().cloned().collect()
    }
}

/// A route as its driver reads it (see [`Machine::route_view`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RouteView {
    /// The first unresolved entry: the only one that may be sent.
    pub head: Option<OutboxEntry>,
    /// The message the caller waits for is still unresolved on this route.
    pub want_pending: bool,
}

/// `NOT_FOUND` for an outgoing message the outbox does not hold.
fn no_outbox_entry(to_peer_id: &str, message_id: &str) -> Error {
    Error::new(
        Code::NotFound,
        format!("no outgoing message {message_id} to {to_peer_id}"),
    )
}
