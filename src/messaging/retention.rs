//! Expiry and retention: unconsumed messages past their expiry become `expired` (with a
//! receipt push); only final records older than `retentionMs` are removed. Nothing accepted or
//! unresolved is ever dropped to make room.

use super::machine::{Machine, Outcome};
use super::state::Record;
use super::types::{Receipt, ReceiptState, SweepReport};
use std::collections::BTreeSet;

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
                    .unresolved_get(to, id)
                    .is_some_and(|e| e.expires_at_ms <= now_ms)
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
            let recs = self.receipt_records(e, receipt, now_ms);
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
        let room = room - inbox.len();
        let outbox = self.old_outbox(now_ms, room);
        let room = room - outbox.len();
        let events = self.old_events(now_ms, room);
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

    /// Removal records for resolved outbox entries past retention, at most `room`.
    fn old_outbox(&self, now_ms: u64, room: usize) -> Vec<Record> {
        let keep = self.limits.retention_ms;
        let old = |at: u64| at.saturating_add(keep) <= now_ms;
        // A resolved outbox entry is the recipient's custody; after expiry + retention nothing
        // will update it any more.
        let done = |state: ReceiptState, expires: u64, updated: u64| {
            let settled = state.is_final() || state == ReceiptState::Consumed || old(expires);
            settled && old(updated)
        };
        let full = self.state.outbox.values().filter_map(|e| {
            let r = e.receipt.as_ref()?;
            done(r.state, e.expires_at_ms, e.updated_at_ms)
                .then(|| (e.to.peer_id.clone(), e.message_id.clone()))
        });
        let compact = self.state.settled.iter().filter_map(|(k, s)| {
            let (state, expires, updated) = s.retention_view();
            done(state, expires, updated)
                .then(|| (k.to_peer_id().to_string(), k.message_id.to_string()))
        });
        full.chain(compact)
            .map(|(to_peer_id, message_id)| Record::OutboxRemoved {
                to_peer_id,
                message_id,
            })
            .take(room)
            .collect()
    }

    /// Removal records for events beyond the per-peer bound (oldest first), then events past
    /// retention, at most `room`.
    fn old_events(&self, now_ms: u64, room: usize) -> Vec<Record> {
        let keep = self.limits.retention_ms;
        let old = |at: u64| at.saturating_add(keep) <= now_ms;
        let over: BTreeSet<u64> = self.state.events_over_bound().take(room).collect();
        let aged = self
            .state
            .events
            .values()
            .filter(|ev| old(ev.at_ms) && !over.contains(&ev.cursor))
            .map(|ev| ev.cursor);
        over.iter()
            .copied()
            .chain(aged)
            .map(|cursor| Record::EventRemoved { cursor })
            .take(room)
            .collect()
    }
}
