//! Receiver-side custody: acceptance with dedup, validation, rate and capacity checks;
//! recipient transitions (prepared, consumed, replied) with the context journal; receipt
//! pushes to original senders; `peer.status`.

use super::machine::{Machine, Outcome, as_of, expiry_due};
use super::state::{KeyRef, RECEIPT_RESERVE_BYTES, Record, dedup_ref, inbox_cost};
use super::types::{
    ContextEntry, InboundSend, InboxEntry, MessageRef, Principal, PushEntry, Receipt, ReceiptState,
    Recipients,
};
use crate::error::{Code, Error, Result};

impl Machine {
    /// Takes custody of `send` from the authenticated `from` for one of our `recipients`.
    /// Dedup comes first, so a retry after success always gets the original receipt (in its
    /// current state), whatever the rate or capacity now. Errors: MESSAGE_ID_CONFLICT,
    /// INVALID_REQUEST (bad id), TARGET_ENDED, PEER_OFFLINE, MESSAGE_TOO_LARGE, EXPIRED,
    /// INVALID_REPLY, RATE_LIMITED, QUEUE_FULL. The send is taken by value: its body moves
    /// into the inbox entry.
    pub fn accept(
        &mut self,
        from: &Principal,
        mut send: InboundSend,
        recipients: &Recipients,
        now_ms: u64,
    ) -> Outcome<Receipt> {
        // An instance whose record is gone is still the session it stated before.
        if send.origin.is_none()
            && let Some(o) = self.state.origin_of(&from.instance_id)
        {
            send.origin = Some(o.clone());
        }
        let key = KeyRef(
            &from.instance_id,
            from.run_id.as_deref(),
            &send.message_id,
            &send.to_peer_id,
        );
        if let Some(original) = self.dedup_hit(&key, &send, now_ms) {
            return original.map(|r| (r, Vec::new()));
        }
        if let Some(moved) = self.origin_hit(from, &send, now_ms) {
            return moved;
        }
        Self::check_id("messageId", &send.message_id)?;
        if let Some(c) = &send.correlation_id {
            Self::check_id("correlationId", c)?;
        }
        Self::check_recipient(recipients, &send.to_peer_id)?;
        self.check_content(&send.body.content, &send.body.topic)?;
        let expires_at_ms = self.expiry(send.expires_at_ms, now_ms)?;
        let correlation_id = self.inbound_correlation(from, &send)?;
        if !self.rate.allows(&self.limits, &from.instance_id, now_ms) {
            return Err(Error::new(
                Code::RateLimited,
                format!(
                    "sender exceeded ratePerSecond ({}) / rateBurst ({}); retry later with the same message id",
                    self.limits.rate_per_second, self.limits.rate_burst
                ),
            ));
        }
        let sequence = self
            .state
            .next_sequence
            .get(&send.to_peer_id)
            .copied()
            .unwrap_or(1);
        let entry = InboxEntry {
            recipient_peer_id: send.to_peer_id.clone(),
            sequence,
            from: from.clone(),
            message_id: send.message_id.clone(),
            // The body, origin and alias move: the ids stay borrowed by the dedup key.
            body: send.body,
            correlation_id,
            expires_at_ms,
            accepted_at_ms: now_ms,
            state: ReceiptState::Accepted,
            state_at_ms: now_ms,
            reply_message_id: None,
            context_marked: false,
            origin: send.origin,
            from_alias: send.from_alias,
        };
        self.check_capacity(&entry)?;
        self.rate.take(&self.limits, &from.instance_id, now_ms);
        assert_eq!(
            dedup_ref(&entry),
            key,
            "the entry deduplicates under its own key"
        );
        let receipt = entry.receipt();
        let entry = std::sync::Arc::new(entry);
        Ok((receipt, self.commit(vec![Record::InboxAdded { entry }])))
    }

    /// The original receipt for a retry, or MESSAGE_ID_CONFLICT when the content changed.
    fn dedup_hit(&self, key: &KeyRef, send: &InboundSend, now_ms: u64) -> Option<Result<Receipt>> {
        let at = self.state.dedup.get(key.find())?;
        let Some(e) = self.state.inbox.get(at) else {
            return Some(Err(Error::new(
                Code::RecoveryRequired,
                "the dedup index names a missing message",
            )));
        };
        if e.body != send.body {
            return Some(Err(Error::new(
                Code::MessageIdConflict,
                format!(
                    "message {} was already accepted with different content; use a new message id",
                    send.message_id
                ),
            )));
        }
        Some(Ok(as_of(e, now_ms).receipt()))
    }

    /// A retry from another incarnation of the same sending session (a restarted sender, a
    /// later one-off root): the original receipt, with the message's custody moved to the
    /// incarnation now asking. MESSAGE_ID_CONFLICT when the content changed.
    fn origin_hit(
        &mut self,
        from: &Principal,
        send: &InboundSend,
        now_ms: u64,
    ) -> Option<Outcome<Receipt>> {
        let okey = KeyRef(
            send.origin.as_deref()?,
            from.run_id.as_deref(),
            &send.message_id,
            &send.to_peer_id,
        );
        let at = self.state.origins.get(okey.find())?.clone();
        let Some(e) = self.state.inbox.get(&at) else {
            return Some(Err(Error::new(
                Code::RecoveryRequired,
                "the origin index names a missing message",
            )));
        };
        if e.body != send.body {
            return Some(Err(Error::new(
                Code::MessageIdConflict,
                format!(
                    "message {} was already accepted from this session with different content; use a new message id",
                    send.message_id
                ),
            )));
        }
        let records = self.commit(vec![Record::InboxSender {
            recipient: at.0.clone(),
            sequence: at.1,
            from: from.clone(),
        }]);
        let e = self.state.inbox.get(&at)?;
        Some(Ok((as_of(e, now_ms).receipt(), records)))
    }

    fn check_recipient(recipients: &Recipients, to: &str) -> Result<()> {
        if recipients.ended.contains(to) {
            return Err(Error::new(
                Code::TargetEnded,
                format!("run {to} has ended; select the current run"),
            ));
        }
        if !recipients.live.contains(to) {
            // Terminal, not retryable: no retry will make this root serve another peer.
            return Err(Error::new(
                Code::NotFound,
                format!("this root does not serve {to}; refresh discovery"),
            ));
        }
        Ok(())
    }

    fn check_capacity(&self, entry: &InboxEntry) -> Result<()> {
        let held = self.state.unconsumed(&entry.recipient_peer_id);
        if held >= self.limits.inbox_messages {
            return Err(Error::new(
                Code::QueueFull,
                format!(
                    "{} holds {held} unconsumed messages (inboxMessages); retry after some are consumed",
                    entry.recipient_peer_id
                ),
            ));
        }
        self.check_space(
            inbox_cost(entry) + RECEIPT_RESERVE_BYTES,
            "cannot accept the message",
        )
    }

    /// A reply must answer a message our recipient sent to exactly this sender incarnation,
    /// and keeps that message's correlation id.
    fn inbound_correlation(&self, from: &Principal, send: &InboundSend) -> Result<String> {
        let Some(reply_to) = &send.body.reply_to else {
            return Ok(send
                .correlation_id
                .clone()
                .unwrap_or_else(|| send.message_id.clone()));
        };
        let invalid = |why: &str| {
            Error::new(
                Code::InvalidReply,
                format!(
                    "replyTo {reply_to}: {why}; reply to a message this peer received from the exact target"
                ),
            )
        };
        let original = self
            .state
            .outbox_get(&from.peer_id, reply_to)
            .filter(|o| o.from_peer_id == send.to_peer_id)
            .ok_or_else(|| invalid("no such message was sent from this recipient to the sender"))?;
        if !original.to.is(from) {
            return Err(invalid(
                "the original went to a different incarnation of the sender",
            ));
        }
        match &send.correlation_id {
            Some(c) if *c != original.correlation_id => {
                Err(invalid("the correlation id differs from the original's"))
            }
            _ => Ok(original.correlation_id.clone()),
        }
    }

    /// `peer.status`: the current receipt of `from`'s message `message_id` to `to_peer_id` (a
    /// message past its expiry reads as expired).
    pub fn status(
        &self,
        from: &Principal,
        message_id: &str,
        to_peer_id: &str,
        now_ms: u64,
    ) -> Result<Receipt> {
        let key = (
            from.instance_id.clone(),
            from.run_id.clone(),
            message_id.to_string(),
            to_peer_id.to_string(),
        );
        self.state
            .dedup
            .get(&key)
            .and_then(|at| self.state.inbox.get(at))
            .map(|e| as_of(e, now_ms).receipt())
            .ok_or_else(|| {
                Error::new(
                    Code::NotFound,
                    format!("no message {message_id} from you to {to_peer_id} is held here"),
                )
            })
    }

    /// Marks a message prepared or consumed. Consuming without a context marker records an
    /// implicit one first. A request that would not move the state forward changes nothing
    /// and returns the current receipt. Errors: NOT_FOUND, AMBIGUOUS_TARGET, USAGE.
    pub fn mark(
        &mut self,
        recipient: &str,
        r: &MessageRef,
        state: ReceiptState,
        now_ms: u64,
    ) -> Outcome<Receipt> {
        match state {
            ReceiptState::Prepared => self.record_context(recipient, r, "", now_ms),
            ReceiptState::Consumed => {
                self.transition(recipient, r, ReceiptState::Consumed, None, now_ms)
            }
            other => Err(Error::new(
                Code::Usage,
                format!(
                    "a recipient can mark prepared or consumed, not {}",
                    other.name()
                ),
            )),
        }
    }

    /// Consumes a page of messages in one write: for each, in order, the context record
    /// (unless already marked) and then `consumed`. Stops after the first message that fails
    /// or turns out expired; returns the receipts so far (the last one may be that expired
    /// one) and the failure. Everything returned is committed, so one fdatasync covers it.
    pub fn consume_page(
        &mut self,
        recipient: &str,
        page: &[(MessageRef, bool)],
        note: &str,
        now_ms: u64,
    ) -> Outcome<(Vec<Receipt>, Option<Error>)> {
        let (mut receipts, mut records) = (Vec::new(), Vec::new());
        for (r, marked) in page {
            match self.consume_one(recipient, r, *marked, note, now_ms, &mut records) {
                Ok(receipt) => {
                    let expired = receipt.state == ReceiptState::Expired;
                    receipts.push(receipt);
                    if expired {
                        break;
                    }
                }
                Err(e) => return Ok(((receipts, Some(e)), records)),
            }
        }
        Ok(((receipts, None), records))
    }

    fn consume_one(
        &mut self,
        recipient: &str,
        r: &MessageRef,
        marked: bool,
        note: &str,
        now_ms: u64,
        records: &mut Vec<Record>,
    ) -> Result<Receipt> {
        if !marked {
            let (receipt, recs) = self.record_context(recipient, r, note, now_ms)?;
            records.extend(recs);
            if receipt.state == ReceiptState::Expired {
                return Ok(receipt);
            }
        }
        let (receipt, recs) = self.mark(recipient, r, ReceiptState::Consumed, now_ms)?;
        records.extend(recs);
        Ok(receipt)
    }

    /// Records the context-journal entry for a message (before consumption) and moves it to
    /// prepared. A second call keeps the first marker. Errors: NOT_FOUND, MESSAGE_TOO_LARGE.
    pub fn record_context(
        &mut self,
        recipient: &str,
        r: &MessageRef,
        note: &str,
        now_ms: u64,
    ) -> Outcome<Receipt> {
        self.check_content(note, &None)?;
        if let Some(expired) = self.expire_if_due(recipient, r, now_ms)? {
            return Ok(expired);
        }
        let e = self.find_inbox(recipient, r)?;
        if e.context_marked || !e.state.may_become(ReceiptState::Prepared) {
            return Ok((e.receipt(), Vec::new()));
        }
        let mut records = vec![context_record(e, note, false, now_ms)];
        records.extend(state_records(
            e,
            ReceiptState::Prepared,
            None,
            now_ms,
            self.state.next_push.max(1),
        ));
        let records = self.commit(records);
        Ok((self.find_inbox(recipient, r)?.receipt(), records))
    }

    /// Marks a message replied with the reply's message id (implicit context if none).
    pub fn mark_replied(
        &mut self,
        recipient: &str,
        r: &MessageRef,
        reply_message_id: &str,
        now_ms: u64,
    ) -> Outcome<Receipt> {
        self.transition(
            recipient,
            r,
            ReceiptState::Replied,
            Some(reply_message_id.to_string()),
            now_ms,
        )
    }

    pub(crate) fn transition(
        &mut self,
        recipient: &str,
        r: &MessageRef,
        to: ReceiptState,
        reply: Option<String>,
        now_ms: u64,
    ) -> Outcome<Receipt> {
        if !to.is_failure()
            && let Some(expired) = self.expire_if_due(recipient, r, now_ms)?
        {
            return Ok(expired);
        }
        let e = self.find_inbox(recipient, r)?;
        if !e.state.may_become(to) {
            return Ok((e.receipt(), Vec::new()));
        }
        let mut records = Vec::new();
        if !e.context_marked && !to.is_failure() {
            records.push(context_record(e, "", true, now_ms));
        }
        records.extend(state_records(
            e,
            to,
            reply,
            now_ms,
            self.state.next_push.max(1),
        ));
        let records = self.commit(records);
        Ok((self.find_inbox(recipient, r)?.receipt(), records))
    }

    /// A message past its expiry cannot be prepared, consumed or replied to: it becomes expired
    /// now (with the receipt push), and the caller gets that `expired` receipt. None when the
    /// message is not due.
    fn expire_if_due(
        &mut self,
        recipient: &str,
        r: &MessageRef,
        now_ms: u64,
    ) -> Result<Option<(Receipt, Vec<Record>)>> {
        let e = self.find_inbox(recipient, r)?;
        if !expiry_due(e, now_ms) {
            return Ok(None);
        }
        let records = state_records(
            e,
            ReceiptState::Expired,
            None,
            now_ms,
            self.state.next_push.max(1),
        );
        let records = self.commit(records);
        Ok(Some((self.find_inbox(recipient, r)?.receipt(), records)))
    }

    /// Receipts waiting to be pushed to original senders, oldest first, at most `limit`.
    pub fn pending_pushes(&self, limit: usize) -> Vec<PushEntry> {
        self.state.pushes.values().take(limit).cloned().collect()
    }

    /// The sender acknowledged a pushed receipt; unknown cursors are a no-op.
    pub fn receipt_delivered(&mut self, cursor: u64) -> Outcome<()> {
        if !self.state.pushes.contains_key(&cursor) {
            return Ok(((), Vec::new()));
        }
        Ok(((), self.commit(vec![Record::PushDone { cursor }])))
    }
}

pub(crate) fn context_record(e: &InboxEntry, note: &str, implicit: bool, now_ms: u64) -> Record {
    Record::Context {
        entry: ContextEntry {
            recipient_peer_id: e.recipient_peer_id.clone(),
            sequence: e.sequence,
            message_id: e.message_id.clone(),
            note: note.to_string(),
            implicit,
            at_ms: now_ms,
        },
    }
}

/// The state change of an inbox entry plus the receipt push to its original sender.
pub(crate) fn state_records(
    e: &InboxEntry,
    to: ReceiptState,
    reply: Option<String>,
    now_ms: u64,
    cursor: u64,
) -> Vec<Record> {
    let mut receipt = e.receipt();
    receipt.state = to;
    receipt.at_ms = now_ms;
    if reply.is_some() {
        receipt.reply_message_id = reply.clone();
    }
    vec![
        Record::InboxState {
            recipient: e.recipient_peer_id.clone(),
            sequence: e.sequence,
            state: to,
            at_ms: now_ms,
            reply_message_id: reply,
        },
        Record::PushQueued {
            push: PushEntry {
                cursor,
                to: e.from.clone(),
                receipt,
                queued_at_ms: now_ms,
            },
        },
    ]
}
