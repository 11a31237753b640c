//! What crosses to another root: one outbox entry handed to its recipient (in-process for our
//! own runs, over the authenticated pool otherwise), and recipient-side receipts pushed back
//! to their senders with per-sender backoff.

use super::core::{Core, Reach};
use crate::clock;
use crate::error::{Code, Error, Result};
use crate::messaging::{InboundSend, OutboxEntry, Principal, Receipt, is_retryable};
use crate::protocol::message::{PeerSend, ReceiptPush};
use std::time::Duration;

use crate::config::internal::PUSH_BATCH;
use crate::config::internal::WORKER_TICK_MS;

impl Core {
    /// Hands one outbox entry to its recipient: in-process for our own runs (no statement: our
    /// own accept's sync is ours), otherwise over an authenticated connection to the target
    /// instance, with what its answer states (`flushedDevice`).
    pub(super) fn deliver(&self, entry: &OutboxEntry) -> Result<(Receipt, Option<u64>)> {
        let from_run = self.run_of_peer(&entry.from_peer_id);
        if self.me.is(&entry.to.instance_id) {
            return self.deliver_here(entry, from_run).map(|r| (r, None));
        }
        // One lookup answers both where the target is and whether it is silent.
        let reach = self.presence.reach_of(&entry.to.instance_id);
        let silent = match &reach {
            Reach::Silent(_, since) => Some(since.clone()),
            _ => None,
        };
        let target = self.presence.target_of(&entry.to.instance_id, reach)?;
        let send = PeerSend::of_parts(
            &entry.message_id,
            &entry.to.peer_id,
            from_run.as_deref(),
            &entry.body,
            Some(&entry.correlation_id),
            Some(entry.expires_at_ms),
        );
        let (r, stated) = self
            .outbox
            .pool()
            .peer_send(&target, &send, self.limits().acknowledgement_ms)
            .inspect_err(|e| {
                // The advertisement may be what is wrong: read it afresh next time.
                if matches!(
                    e.code,
                    Code::PeerOffline | Code::TargetEnded | Code::AuthFailed | Code::Disconnected
                ) {
                    self.presence.forget_advertisement(&entry.to.instance_id);
                }
            })
            .map_err(|e| match &silent {
                Some(since) if is_retryable(e.code) => Error::new(
                    e.code,
                    format!(
                        "target not answering since {since} (no heartbeat; its process still exists): {}",
                        e.message
                    ),
                ),
                _ => e,
            })?;
        Ok((r, stated))
    }

    /// [`deliver`](Self::deliver) to one of our own peers: accepted into our own store and
    /// announced at once.
    fn deliver_here(&self, entry: &OutboxEntry, from_run: Option<String>) -> Result<Receipt> {
        let from = self.me.principal_of(&entry.from_peer_id, from_run);
        let alias = self.alias_of(&from);
        let send = InboundSend {
            origin: Some(self.me.session_id().to_string()),
            to_peer_id: entry.to.peer_id.clone(),
            message_id: entry.message_id.clone(),
            body: entry.body.clone(),
            correlation_id: Some(entry.correlation_id.clone()),
            expires_at_ms: Some(entry.expires_at_ms),
            from_alias: alias.clone(),
        };
        let r = self.store.accept(from, send)?;
        super::arrivals::announce(
            &self.bus,
            &self.auto,
            &r,
            entry.body.reply_to.as_deref(),
            alias.as_deref(),
        );
        Ok(r)
    }

    /// Pushes pending recipient-side receipts to their senders. A sender that fails with a
    /// retryable answer (stopped, not answering) is backed off (`Outbox::push_failed`): its
    /// pushes stay queued, in order, while other senders' go ahead. Returns how long the
    /// caller may sleep before the next attempt is due: None when nothing is pending.
    pub fn push_receipts(&self) -> Option<Duration> {
        let tick = Duration::from_millis(WORKER_TICK_MS);
        let Ok(pushes) = self.store.pending_pushes(PUSH_BATCH) else {
            return Some(tick);
        };
        if pushes.is_empty() {
            self.outbox.pushes_done();
            return None;
        }
        let now = clock::now_ms();
        let mut deferred_until: Option<u64> = None;
        let mut defer = |at: u64| deferred_until = Some(deferred_until.map_or(at, |d| d.min(at)));
        let mut delivered = false;
        for p in pushes {
            if let Some(at) = self.outbox.push_deferred(&p.to.instance_id, now) {
                defer(at);
                continue;
            }
            match self.push_one(&p.to, &p.receipt) {
                Ok(()) => self.outbox.push_succeeded(&p.to.instance_id),
                Err(e) if is_retryable(e.code) => {
                    defer(self.outbox.push_failed(&p.to.instance_id, now));
                    continue;
                }
                // The sender is gone or refuses: its copy stays as it was; ours is final.
                Err(_) => self.outbox.push_succeeded(&p.to.instance_id),
            }
            delivered = true;
            let _ = self.store.receipt_delivered(p.cursor);
        }
        match deferred_until {
            // Delivered ones changed the store, which wakes the caller for the rest anyway.
            Some(at) if !delivered => Some(Duration::from_millis(at.saturating_sub(now))),
            _ => Some(tick),
        }
    }

    fn push_one(&self, to: &Principal, receipt: &Receipt) -> Result<()> {
        let from_run = self.run_of_peer(&receipt.to_peer_id);
        self.outbox
            .notify_subscriber(&to.instance_id, receipt, from_run.as_deref());
        if self.me.is(&to.instance_id) {
            let me = self.me.principal_of(&receipt.to_peer_id, from_run);
            self.store.record_receipt(me, receipt.clone())?;
            self.announce_receipt(receipt);
            return Ok(());
        }
        let target = self.presence.target_of_instance(&to.instance_id)?;
        let push = ReceiptPush {
            version: crate::protocol::PROTOCOL_VERSION,
            from_run,
            receipt: receipt.clone(),
        };
        self.outbox
            .pool()
            .push_receipt(&target, &push, self.limits().acknowledgement_ms)
    }

    /// Publishes a receipt change on our outbox.
    pub fn announce_receipt(&self, r: &Receipt) {
        self.bus.publish(&super::events::ReceiptChanged::of(r));
    }
}
