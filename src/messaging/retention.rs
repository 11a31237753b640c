//! Expiry and retention: unconsumed messages past their expiry become `expired` (with a
//! receipt push); only final records older than `retentionMs` are removed. Nothing accepted or
//! unresolved is ever dropped to make room.

use super::machine::{Machine, Outcome};
use super::state::Record;
use super::types::{Receipt, ReceiptEvent, ReceiptState, SweepReport};

impl Machine {
    /// One bounded sweep pass: at most `commitBatch` changes, `more` says call again.
    pub fn sweep(&mut self, now_ms: u64) -> Outcome<SweepReport> {
        let budget = self.limits.commit_batch.max(1) as usize;
        let mut rep = SweepReport::default();
        let mut records = Vec::new();
        self.expire_inbox(now_ms, budget, &mut rep, &mut records);
        self.expire_outbox(now_ms, budget, &mut rep, &mut records);
        self.remove_old(now_ms, budget, &mut rep, &mut records);
        rep.more = records.len() >= budget;
        Ok((rep, records))
    }

    fn expire_inbox(
        &mut self,
        now_ms: u64,
        budget: usize,
        rep: &mut SweepReport,
        records: &mut Vec<Record>,
    ) {
        let due: Vec<(String, u64)> = self
            .state
            .inbox
            .values()
            .filter(|e| e.expires_at_ms <= now_ms && e.state.may_become(ReceiptState::Expired))
            .map(|e| (e.recipient_peer_id.clone(), e.sequence))
            .take(budget.saturating_sub(records.len()) / 2)
            .collect();
        for key in due {
            let Some(e) = self.state.inbox.get(&key) else {
                continue;
            };
            let recs = super::inbound::state_records(
                e,
                ReceiptState::Expired,
                None,
                now_ms,
                self.state.next_push.max(1),
            );
            records.extend(self.commit(recs));
            rep.expired_inbox += 1;
        }
    }

    fn expire_outbox(
        &mut self,
        now_ms: u64,
        budget: usize,
        rep: &mut SweepReport,
        records: &mut Vec<Record>,
    ) {
        // Only unresolved entries can expire: walk the pending index, not the history.
        let due: Vec<(String, String)> = self
            .state
            .pending
            .iter()
            .flat_map(|((_, to), ids)| ids.values().map(move |id| (to, id)))
            .filter(|(to, id)| {
                self.state
                    .outbox_get(to, id)
                    .is_some_and(|e| e.receipt.is_none() && e.expires_at_ms <= now_ms)
            })
            .map(|(to, id)| (to.clone(), id.clone()))
            .take(budget.saturating_sub(records.len()) / 2)
            .collect();
        for (to, id) in due {
            let Some(e) = self.state.outbox.get(&(to.clone(), id.clone())) else {
                continue;
            };
            let receipt = Receipt {
                message_id: id.clone(),
                from_peer_id: e.from_peer_id.clone(),
                to_peer_id: to.clone(),
                state: ReceiptState::Expired,
                sequence: 0,
                correlation_id: e.correlation_id.clone(),
                at_ms: now_ms,
                reply_message_id: None,
                code: Some(crate::error::Code::Expired.name().to_string()),
            };
            let event = ReceiptEvent {
                cursor: self.state.next_event.max(1),
                local_peer_id: e.from_peer_id.clone(),
                receipt: receipt.clone(),
                at_ms: now_ms,
            };
            let recs = vec![
                Record::OutboxReceipt {
                    to_peer_id: to,
                    message_id: id,
                    receipt,
                    at_ms: now_ms,
                },
                Record::Event { event },
            ];
            records.extend(self.commit(recs));
            rep.expired_outbox += 1;
        }
    }

    /// Removes final inbox entries (consumed, replied, expired), resolved outbox entries, events
    /// and undeliverable pushes once they are older than `retentionMs`.
    fn remove_old(
        &mut self,
        now_ms: u64,
        budget: usize,
        rep: &mut SweepReport,
        records: &mut Vec<Record>,
    ) {
        let keep = self.limits.retention_ms;
        let old = |at: u64| at.saturating_add(keep) <= now_ms;
        let room = budget.saturating_sub(records.len());
        let inbox = self.state.inbox.values().filter(|e| {
            let done = matches!(
                e.state,
                ReceiptState::Consumed | ReceiptState::Replied | ReceiptState::Expired
            );
            done && old(e.state_at_ms) && old(e.accepted_at_ms)
        });
        let inbox: Vec<Record> = inbox
            .map(|e| Record::InboxRemoved {
                recipient: e.recipient_peer_id.clone(),
                sequence: e.sequence,
            })
            .take(room)
            .collect();
        // A resolved outbox entry is the recipient's custody; after expiry + retention nothing
        // will update it any more.
        let outbox = self.state.outbox.values().filter(|e| {
            let settled = e.receipt.as_ref().is_some_and(|r| {
                r.state.is_final() || r.state == ReceiptState::Consumed || old(e.expires_at_ms)
            });
            settled && old(e.updated_at_ms)
        });
        let room = room - inbox.len();
        let outbox: Vec<Record> = outbox
            .map(|e| Record::OutboxRemoved {
                to_peer_id: e.to.peer_id.clone(),
                message_id: e.message_id.clone(),
            })
            .take(room)
            .collect();
        let room = room - outbox.len();
        let events: Vec<Record> = self
            .state
            .events
            .values()
            .filter(|ev| old(ev.at_ms))
            .map(|ev| Record::EventRemoved { cursor: ev.cursor })
            .take(room)
            .collect();
        let room = room - events.len();
        let pushes: Vec<Record> = self
            .state
            .pushes
            .values()
            .filter(|p| old(p.queued_at_ms))
            .map(|p| Record::PushDone { cursor: p.cursor })
            .take(room)
            .collect();
        rep.removed_inbox += inbox.len() as u64;
        rep.removed_outbox += outbox.len() as u64;
        rep.removed_events += events.len() as u64;
        rep.dropped_pushes += pushes.len() as u64;
        let all: Vec<Record> = inbox
            .into_iter()
            .chain(outbox)
            .chain(events)
            .chain(pushes)
            .collect();
        records.extend(self.commit(all));
    }
}
