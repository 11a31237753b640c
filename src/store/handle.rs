//! `StoreHandle`: the cloneable front of the store writer. A call that submits a job and waits
//! for it leads the group commit in its own thread when the writer is free (see
//! [`writer`](super::writer)), and otherwise rings the writer thread. Every mutating call returns
//! only after its record is durable (or fails), except the sender's copy of a receipt, which
//! is only queued ([`StoreHandle::outbox_receipt_queued`]: the caller keeps an [`Applying`]
//! ticket, which its route waits for before its bookkeeping next reads the state). Reads run in the calling thread against the
//! shared committed state: [`StoreHandle::query`] sees only durable state (when a batch is
//! between apply and fdatasync it is answered by the writer after that sync instead),
//! [`StoreHandle::peek`] also sees applied records, for the root's own route bookkeeping.
//! The send path's intent is answered once written and written out to the device, without an
//! fdatasync: a recipient's stated device flush usually makes it durable, otherwise the sender
//! leads its sync ([`StoreHandle::outbox_intent_written`], [`StoreHandle::wait_durable`],
//! [`super::flush`]). A recipient's accept says whether an fdatasync begun after it was
//! queued returned ([`StoreHandle::accept_stating`]).
//! Includes the change notification readers block on (bounded by `waitMsMax`, abortable).

use super::changes::{Shared, StoreStats};
use super::flush::{Device, IntentFrame};
use super::oneshot::{self, Gone};
use super::writer::{Ack, Job, ReadFn, Wake, WriteFn, Writer};
use crate::config::Limits;
use crate::error::{Code, Error, Result};
use crate::messaging::{
    InboundSend, InboxEntry, Machine, MessageRef, OutboundSend, OutboxEntry, Outcome, Principal,
    PushEntry, ReadQuery, ReadResult, Receipt, ReceiptState, Recipients, RouteView, SweepReport,
    TargetRef,
};
use crossbeam_channel::Sender;
use parking_lot::RwLock;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering, fence};
use std::time::{Duration, Instant};

use crate::config::internal::CANCEL_POLL_MS;

/// The batch a write answered once written ([`StoreHandle::write_written`]) landed in, and
/// what the writer knows of its frame: [`StoreHandle::wait_durable`] returns once that batch
/// is fdatasynced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "the write is not durable until its batch is waited for"]
pub struct SyncTicket {
    batch: u64,
    /// In room and written out (see [`IntentFrame`]).
    pub frame: IntentFrame,
}

/// A write queued to the writer without waiting ([`StoreHandle::outbox_receipt_queued`]):
/// [`StoreHandle::wait_applied`] returns once the writer has applied it to the shared state
/// (its frame is then written at once and fdatasynced with the next durable batch).
#[must_use = "a peek may not see the write until its ticket is waited for"]
pub struct Applying<T>(oneshot::Waiter<Result<T>>);

impl<T> Applying<T> {
    /// Whether the writer has answered it (applied, or failed): waiting would not block.
    pub fn is_done(&self) -> bool {
        self.0.is_answered()
    }
}

/// A cloneable, thread-safe handle on one instance store.
#[derive(Clone)]
pub struct StoreHandle {
    pub(crate) tx: Sender<Job>,
    /// The writer, which a submitter that finds it free runs a batch with.
    pub(crate) core: Arc<parking_lot::Mutex<Writer>>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) recipients: Arc<RwLock<Recipients>>,
    pub(crate) limits: Arc<Limits>,
    /// The journal's device facts (the writer's, copied at open).
    pub(crate) device: Device,
}

impl StoreHandle {
    fn gone() -> Error {
        Error::new(Code::Disconnected, "the message store has shut down")
    }

    /// Queues a job the caller then waits for, and leads the group commit if the writer is
    /// free; otherwise rings the writer thread, which takes it after the current holder.
    fn submit(&self, job: Job) -> Result<()> {
        self.enqueue(job)?;
        self.lead_or_ring();
        Ok(())
    }

    /// Runs a batch of the queued jobs in this thread if the writer is free. Otherwise the
    /// current holder sees them when it lets go, and rings the writer thread for them (or,
    /// being that thread, takes them): see the writer module's doc for why none is missed.
    fn lead_or_ring(&self) {
        // Orders the job queued before it against the holder's check after its release.
        fence(Ordering::SeqCst);
        let Some(mut w) = self.core.try_lock() else {
            return;
        };
        let wanted = w.lead();
        drop(w);
        fence(Ordering::SeqCst);
        if wanted {
            self.shared.want_thread();
        } else if !self.tx.is_empty() {
            // Queued while this batch ran: followers, asleep on their slots.
            self.shared.ring();
        }
    }

    fn enqueue(&self, job: Job) -> Result<()> {
        if self.shared.closed.load(Ordering::Acquire) {
            return Err(Self::gone());
        }
        let wait = Duration::from_millis(self.limits.acknowledgement_ms);
        self.tx.send_timeout(job, wait).map_err(|e| match e {
            crossbeam_channel::SendTimeoutError::Timeout(_) => Error::new(
                Code::Timeout,
                format!(
                    "the message store queue stayed full for acknowledgementMs ({} ms); retry",
                    self.limits.acknowledgement_ms
                ),
            ),
            crossbeam_channel::SendTimeoutError::Disconnected(_) => Self::gone(),
        })
    }

    fn answer<T>(&self, rx: oneshot::Waiter<Result<T>>) -> Result<T> {
        // The writer always answers; the bound only guards against a wedged disk.
        let wait = Duration::from_millis(self.limits.acknowledgement_ms.saturating_mul(4));
        match rx.recv_timeout(wait) {
            Ok(r) => r,
            Err(Gone::TimedOut) => Err(Error::new(
                Code::Timeout,
                "the message store did not commit in time; retry with the same message id (retries are deduplicated)",
            )),
            Err(Gone::Dropped) => Err(Self::gone()),
        }
    }

    /// Runs a mutating operation in the writer and waits until its records are durable.
    pub(crate) fn write<T: Send + 'static>(
        &self,
        op: impl FnOnce(&mut Machine, &Recipients, u64) -> Outcome<T> + Send + 'static,
    ) -> Result<T> {
        self.write_acked(op, Ack::Durable, Wake::Worker)
    }

    /// [`write`](Self::write) for the send path: its commit does not wake the root worker
    /// (unless it queues a receipt push), the caller driving the route itself.
    pub(crate) fn write_quiet<T: Send + 'static>(
        &self,
        op: impl FnOnce(&mut Machine, &Recipients, u64) -> Outcome<T> + Send + 'static,
    ) -> Result<T> {
        self.write_acked(op, Ack::Durable, Wake::Quiet)
    }

    /// Queues a mutating operation to the writer and returns at once with a ticket that
    /// [`wait_applied`](Self::wait_applied) turns into its value once it is applied to the
    /// shared state; its records are written right after and made durable by the next durable
    /// batch's fdatasync, which nobody waits for. Only for records whose loss in a crash is
    /// repaired by recovery (the sender's copy of a receipt the recipient already holds
    /// durably: recovery re-asks and the recipient answers the original receipt). If that
    /// fdatasync fails the store is poisoned and nothing later is acknowledged.
    ///
    /// The doorbell is rung lazily ([`Shared::ring_lazily`](super::changes::Shared)): a writer
    /// that expects such a job (it just wrote a send's intent) takes it with the next job or
    /// when its short timer ends, instead of waking for it; [`wait_applied`](Self::wait_applied)
    /// rings.
    pub(crate) fn write_queued<T: Send + 'static>(
        &self,
        op: impl FnOnce(&mut Machine, &Recipients, u64) -> Outcome<T> + Send + 'static,
    ) -> Result<Applying<T>> {
        let (job, rx) = make_write_job(op, Ack::Applied, Wake::Quiet, |v| v);
        self.shared.lazy_queued.fetch_add(1, Ordering::AcqRel);
        if let Err(e) = self.enqueue(job) {
            self.shared.note_lazy_applied(1);
            return Err(e);
        }
        self.shared.ring_lazily();
        Ok(Applying(rx))
    }

    /// [`write_queued`](Self::write_queued), waited for: answered once applied.
    #[cfg(test)]
    pub(crate) fn write_applied<T: Send + 'static>(
        &self,
        op: impl FnOnce(&mut Machine, &Recipients, u64) -> Outcome<T> + Send + 'static,
    ) -> Result<T> {
        let ticket = self.write_queued(op)?;
        self.wait_applied(ticket)
    }

    /// Waits until a queued write is applied (usually it already is: the writer takes jobs
    /// in order, so it was applied before any job queued after it). Errors: the write's own
    /// error, the store's poisoning error, TIMEOUT after 4 × `acknowledgementMs`.
    pub(crate) fn wait_applied<T>(&self, ticket: Applying<T>) -> Result<T> {
        if !ticket.is_done() {
            // It may still sit in the queue of a writer thread sleeping on its timer.
            self.lead_or_ring();
        }
        self.answer(ticket.0)
    }

    /// Runs a mutating operation in the writer and waits only until its batch's frame is
    /// written to the journal file and written out to the device (so a crash of this process
    /// cannot lose it), without an fdatasync; the ticket says what the writer knows of the
    /// frame. Before the caller tells anyone the record is durable, a recipient's stated flush
    /// covers it (`flush::covered`) or the caller waits with
    /// [`wait_durable`](Self::wait_durable), which leads the sync. Only for the send path's
    /// intent.
    pub(crate) fn write_written<T: Send + 'static>(
        &self,
        op: impl FnOnce(&mut Machine, &Recipients, u64) -> Outcome<T> + Send + 'static,
    ) -> Result<(T, SyncTicket)> {
        // The answer runs in the writer right after the batch's frame is written and
        // `written` moved to it, before any later batch: that value is the batch's number
        // (or, for a write that added no records, the last batch, whose state it read).
        let shared = self.shared.clone();
        self.write_job(op, Ack::Written, Wake::Quiet, move |v| {
            let ticket = SyncTicket {
                batch: shared.written.load(Ordering::Acquire),
                frame: shared.intent_frame(),
            };
            (v, ticket)
        })
    }

    fn write_acked<T: Send + 'static>(
        &self,
        op: impl FnOnce(&mut Machine, &Recipients, u64) -> Outcome<T> + Send + 'static,
        ack: Ack,
        wake: Wake,
    ) -> Result<T> {
        self.write_job(op, ack, wake, |v| v)
    }

    /// Queues a write job and waits for its answer; `seal` turns its value into the answer, in
    /// the writer thread when the write is acknowledged.
    fn write_job<T: Send + 'static, U: Send + 'static>(
        &self,
        op: impl FnOnce(&mut Machine, &Recipients, u64) -> Outcome<T> + Send + 'static,
        ack: Ack,
        wake: Wake,
        seal: impl FnOnce(T) -> U + Send + 'static,
    ) -> Result<U> {
        let (job, rx) = make_write_job(op, ack, wake, seal);
        self.submit(job)?;
        self.answer(rx)
    }

    /// Makes the batch of `ticket` durable: returns at once when it is, otherwise leads its
    /// fdatasync in this thread (taking the writer when the current holder lets go), since a
    /// written-out intent is otherwise synced only by the writer thread's timer. Errors: the
    /// store's poisoning error when that sync (or an earlier one) failed, TIMEOUT after
    /// 4 × `acknowledgementMs` (a wedged disk).
    pub(crate) fn wait_durable(&self, ticket: SyncTicket) -> Result<()> {
        if self.shared.durable.load(Ordering::Acquire) < ticket.batch {
            let mut w = self.core.lock();
            if self.shared.durable.load(Ordering::Acquire) < ticket.batch {
                let before = self.shared.stats.lock().syncs;
                w.sync_deferred();
                let mut st = self.shared.stats.lock();
                if st.syncs > before {
                    st.intent_syncs += 1;
                }
            }
            drop(w);
            // Jobs queued while this thread held the writer are rung for (see the writer's
            // module doc).
            fence(Ordering::SeqCst);
            if !self.tx.is_empty() {
                self.shared.ring();
            }
        }
        self.wait_batch(&self.shared.durable, ticket.batch)
    }

    /// The journal's device and whether its fdatasync flushes it (read at open).
    pub fn device(&self) -> Device {
        self.device
    }

    /// Waits until every batch applied so far is written to the journal file, so a record
    /// read with [`peek`](Self::peek) cannot be lost by a crash of this process. Usually
    /// already true: a batch is written right after it is applied.
    pub(crate) fn wait_written(&self) -> Result<()> {
        let applied = self.shared.committed.read().applied;
        self.wait_batch(&self.shared.written, applied)
    }

    fn wait_batch(&self, counter: &std::sync::atomic::AtomicU64, batch: u64) -> Result<()> {
        let poisoned = || self.shared.committed.read().poisoned.clone();
        if counter.load(Ordering::Acquire) < batch {
            let wait = Duration::from_millis(self.limits.acknowledgement_ms.saturating_mul(4));
            let reached = self.shared.wait_progress(
                counter,
                batch,
                || poisoned().is_some(),
                Instant::now() + wait,
            );
            if !reached {
                return Err(poisoned().unwrap_or_else(|| {
                    Error::new(
                        Code::Timeout,
                        "the message store did not commit in time; retry with the same message id (retries are deduplicated)",
                    )
                }));
            }
        }
        Ok(())
    }

    /// Runs a query against the durable state. In the calling thread when the shared state is
    /// all durable; while a batch is applied but not yet synced, the writer answers it right
    /// after that batch's fdatasync (never from records a crash could still undo).
    pub fn query<T: Send + 'static>(
        &self,
        q: impl FnOnce(&Machine) -> T + Send + 'static,
    ) -> Result<T> {
        self.settle_queued();
        {
            let c = self.shared.committed.read();
            if c.poisoned.is_none() && self.shared.all_durable(&c) {
                return Ok(q(&c.machine));
            }
        }
        self.query_in_writer(q)
    }

    /// Runs a query as a job of the writer, between batches (always durable state): in this
    /// thread when the writer is free, else by the next holder.
    pub(crate) fn query_in_writer<T: Send + 'static>(
        &self,
        q: impl FnOnce(&Machine) -> T + Send + 'static,
    ) -> Result<T> {
        self.settle_queued();
        let (tx, rx) = oneshot::slot::<Result<T>>();
        let job: ReadFn = Box::new(move |m| {
            tx.send(m.map(q).map_err(|e| e.clone()));
        });
        self.submit(Job::Read(job))?;
        self.answer(rx)
    }

    /// Applies the writes queued without waiting (a send's receipt) now, in this thread,
    /// unless another thread leads a batch: for a caller that just answered its client and
    /// would otherwise leave the work to its next send's intent, on that send's critical
    /// path. One atomic comparison when nothing is queued; never waits.
    pub fn apply_queued_now(&self) {
        let s = &self.shared;
        if s.lazy_applied.load(Ordering::Acquire) < s.lazy_queued.load(Ordering::Acquire) {
            self.lead_or_ring();
        }
    }

    /// Waits until every write queued without waiting before this call is applied (usually
    /// none is pending: one atomic comparison), so a read of durable state never misses our
    /// own record of a receipt the caller already heard (the reader then waits for its sync
    /// like for any applied record). Bounded by 4 × `acknowledgementMs`; past that the read
    /// goes ahead without it.
    fn settle_queued(&self) {
        let s = &self.shared;
        let target = s.lazy_queued.load(Ordering::Acquire);
        if s.lazy_applied.load(Ordering::Acquire) >= target {
            return;
        }
        // It may sit in the queue of a writer thread sleeping on its timer.
        self.lead_or_ring();
        let wait = Duration::from_millis(self.limits.acknowledgement_ms.saturating_mul(4));
        s.wait_progress(
            &s.lazy_applied,
            target,
            || s.committed.read().poisoned.is_some(),
            Instant::now() + wait,
        );
    }

    /// Runs a query in the calling thread against the state as applied, which may include the
    /// records of a batch whose fdatasync is still running. Only for the root's own outbox
    /// bookkeeping (which entry a route sends next, the answer a sender already holds), where
    /// a crash that undoes such a record is repaired by recovery re-asking the recipient;
    /// never for what is shown to a user or told to another party.
    pub(crate) fn peek<T>(&self, q: impl FnOnce(&Machine) -> T) -> Result<T> {
        let c = self.shared.committed.read();
        match &c.poisoned {
            Some(e) => Err(e.clone()),
            None => Ok(q(&c.machine)),
        }
    }

    /// `peer.send` custody: durable before it returns. See `Machine::accept` for the codes.
    pub fn accept(&self, from: Principal, send: InboundSend) -> Result<Receipt> {
        self.accept_stating(from, send).map(|(r, _)| r)
    }

    /// [`accept`](Self::accept), plus the device flush the answer may state
    /// (`flushedDevice`): the journal's device when this call's own write added records and an
    /// fdatasync of the journal begun after it was queued has returned, on a journal whose
    /// fdatasync always flushes its device (see [`super::flush`]). `None` for a duplicate
    /// answered from the state, or on any other filesystem.
    pub fn accept_stating(
        &self,
        from: Principal,
        send: InboundSend,
    ) -> Result<(Receipt, Option<u64>)> {
        let device = self.device;
        let before = self.shared.syncs_begun();
        let (receipt, new) = self.write_quiet(move |m, r, now| {
            m.accept(&from, send, r, now)
                .map(|(receipt, recs)| ((receipt, !recs.is_empty()), recs))
        })?;
        let stated =
            (device.flushes && new && self.shared.synced_since(before)).then_some(device.dev);
        Ok((receipt, stated))
    }

    /// Outbox intent, answered once written (see [`write_written`](Self::write_written)): the
    /// caller may deliver at once and waits for the returned ticket before it tells anyone the
    /// message was accepted. Its commit does not wake the root worker: the caller drives the
    /// route and calls [`nudge_worker`](Self::nudge_worker) if it leaves the entry unresolved.
    pub fn outbox_intent_written(&self, send: OutboundSend) -> Result<(OutboxEntry, SyncTicket)> {
        self.write_written(move |m, _, now| m.outbox_intent(send, now))
    }

    /// The send path's intent made durable before returning, for tests that need a settled
    /// outbox entry.
    #[cfg(test)]
    pub fn outbox_intent(&self, send: OutboundSend) -> Result<OutboxEntry> {
        let (entry, ticket) = self.outbox_intent_written(send)?;
        self.wait_durable(ticket)?;
        Ok(entry)
    }

    /// The custody answer of one send attempt (`Err(code)` for a typed failure).
    pub fn outbox_result(
        &self,
        to_peer_id: &str,
        message_id: &str,
        answer: std::result::Result<Receipt, Code>,
    ) -> Result<OutboxEntry> {
        let (to, id) = (to_peer_id.to_string(), message_id.to_string());
        self.write(move |m, _, now| m.outbox_result(&to, &id, answer, now))
    }

    /// Queues a recipient's receipt for one of our sends without waiting (see
    /// [`write_queued`](Self::write_queued)): the recipient holds the message durably and the
    /// caller holds its receipt, so the sender need not wait for its own copy of the answer to
    /// be applied, let alone durable. The route keeps the ticket and waits for it before it
    /// next reads its unresolved entries.
    pub fn outbox_receipt_queued(
        &self,
        to_peer_id: &str,
        message_id: &str,
        receipt: Receipt,
    ) -> Result<Applying<()>> {
        let (to, id) = (to_peer_id.to_string(), message_id.to_string());
        self.write_queued(move |m, _, now| m.record_outbox_result(&to, &id, Ok(receipt), now))
    }

    /// Takes over a dead earlier incarnation's unresolved entry (see `Machine::adopt`).
    pub fn adopt(&self, old: OutboxEntry, from_peer_id: &str) -> Result<bool> {
        let from = from_peer_id.to_string();
        self.write(move |m, _, now| m.adopt(&old, &from, now))
    }

    /// Sends an accepted message again to its recipient's successor (see
    /// `Machine::redeliver`); durable before it returns.
    pub fn redeliver(&self, first_to: &str, message_id: &str, to: TargetRef) -> Result<bool> {
        let (first, id) = (first_to.to_string(), message_id.to_string());
        self.write(move |m, _, now| m.redeliver(&first, &id, to, now))
    }

    /// Forgets an entry a later incarnation took over.
    pub fn hand_over(&self, to_peer_id: &str, message_id: &str) -> Result<()> {
        let (to, id) = (to_peer_id.to_string(), message_id.to_string());
        self.write(move |m, _, _| m.hand_over(&to, &id))
    }

    /// `peer.receipt` from the authenticated target.
    pub fn record_receipt(&self, from: Principal, receipt: Receipt) -> Result<OutboxEntry> {
        self.write(move |m, _, now| m.record_receipt(&from, &receipt, now))
    }

    pub fn mark(
        &self,
        recipient: &str,
        message: MessageRef,
        state: ReceiptState,
    ) -> Result<Receipt> {
        let recipient = recipient.to_string();
        self.write(move |m, _, now| m.mark(&recipient, &message, state, now))
    }

    pub fn record_context(
        &self,
        recipient: &str,
        message: MessageRef,
        note: &str,
    ) -> Result<Receipt> {
        let (recipient, note) = (recipient.to_string(), note.to_string());
        self.write(move |m, _, now| m.record_context(&recipient, &message, &note, now))
    }

    /// Consumes a page with one durable write (see `Machine::consume_page`).
    pub fn consume_page(
        &self,
        recipient: &str,
        page: Vec<(MessageRef, bool)>,
        note: &str,
    ) -> Result<(Vec<Receipt>, Option<Error>)> {
        let (recipient, note) = (recipient.to_string(), note.to_string());
        self.write(move |m, _, now| m.consume_page(&recipient, &page, &note, now))
    }

    pub fn mark_replied(
        &self,
        recipient: &str,
        message: MessageRef,
        reply_message_id: &str,
    ) -> Result<Receipt> {
        let (recipient, reply) = (recipient.to_string(), reply_message_id.to_string());
        self.write(move |m, _, now| m.mark_replied(&recipient, &message, &reply, now))
    }

    pub fn receipt_delivered(&self, cursor: u64) -> Result<()> {
        self.write(move |m, _, _| m.receipt_delivered(cursor))
    }

    /// One bounded expiry/retention pass at the current time.
    pub fn sweep(&self) -> Result<SweepReport> {
        self.write(|m, _, now| m.sweep(now))
    }

    pub fn status(&self, from: Principal, message_id: &str, to_peer_id: &str) -> Result<Receipt> {
        let (id, to) = (message_id.to_string(), to_peer_id.to_string());
        self.query(move |m| m.status(&from, &id, &to, crate::clock::now_ms()))?
    }

    pub fn read(&self, q: ReadQuery) -> Result<ReadResult> {
        self.query(move |m| m.read(&q, crate::clock::now_ms()))
    }

    pub fn pending_pushes(&self, limit: usize) -> Result<Vec<PushEntry>> {
        self.query(move |m| m.pending_pushes(limit))
    }

    /// The unresolved entries of one route, as applied (see [`peek`](Self::peek)).
    #[cfg(test)]
    pub fn route_pending(&self, from_peer_id: &str, to_peer_id: &str) -> Result<Vec<OutboxEntry>> {
        self.peek(|m| m.route_pending(from_peer_id, to_peer_id))
    }

    /// One route's head and whether `want` is unresolved on it, as applied (see
    /// [`peek`](Self::peek) and `Machine::route_view`).
    pub fn route_view(&self, from: &str, to: &str, want: Option<&str>) -> Result<RouteView> {
        self.peek(|m| m.route_view(from, to, want))
    }

    /// Routes with an unresolved head, as applied (see [`peek`](Self::peek)).
    pub fn pending_routes(&self) -> Result<Vec<(String, String)>> {
        self.peek(|m| m.pending_routes())
    }

    pub fn unread(&self) -> Result<Vec<InboxEntry>> {
        self.query(|m| m.unread())
    }

    /// Marks a recipient (our root or a published run) live: it can receive messages.
    pub fn set_live(&self, peer_id: &str) {
        let mut r = self.recipients.write();
        r.ended.remove(peer_id);
        r.live.insert(peer_id.to_string());
    }

    /// Marks a run ended: later sends get TARGET_ENDED; its held messages stay.
    pub fn set_ended(&self, peer_id: &str) {
        let mut r = self.recipients.write();
        r.live.remove(peer_id);
        r.ended.insert(peer_id.to_string());
    }

    /// The limits the store was opened with.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    pub fn stats(&self) -> StoreStats {
        *self.shared.stats.lock()
    }

    /// A counter that grows with every durable batch.
    pub fn change_generation(&self) -> u64 {
        *self.shared.changes.lock()
    }

    /// Blocks until the change counter passes `seen`, `wait_ms` (clamped to `waitMsMax`)
    /// passes, or `cancel` is set; returns the counter. Cancellation is noticed within
    /// 50 ms, or at once after `wake_waiters`.
    pub fn wait_for_change(&self, seen: u64, wait_ms: u64, cancel: &AtomicBool) -> u64 {
        let deadline = Instant::now() + Duration::from_millis(wait_ms.min(self.limits.wait_ms_max));
        let mut changes = self.shared.changes.lock();
        while *changes <= seen && !cancel.load(Ordering::Acquire) {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            let slice = (deadline - now).min(Duration::from_millis(CANCEL_POLL_MS));
            self.shared.changed.wait_for(&mut changes, slice);
        }
        *changes
    }

    /// Like [`wait_for_change`](Self::wait_for_change) for a flag whose setter always calls
    /// [`wake_waiters`](Self::wake_waiters) afterwards (the root's stopping flag): it sleeps
    /// until a change, the deadline or that wake-up, with no periodic re-check.
    pub fn wait_for_change_woken(&self, seen: u64, wait_ms: u64, cancel: &AtomicBool) -> u64 {
        let s = &self.shared;
        wait_woken(&s.changes, &s.changed, seen, wait_ms, cancel)
    }

    /// Wakes every waiter so it re-checks its cancellation flag now.
    pub fn wake_waiters(&self) {
        {
            let _guard = self.shared.changes.lock();
            self.shared.changed.notify_all();
        }
        let _guard = self.shared.worker_changes.lock();
        self.shared.worker_changed.notify_all();
    }

    /// A counter that grows with every durable batch the root worker must look at (receipts
    /// to push, routes nobody drives, a poisoned store) and with every
    /// [`nudge_worker`](Self::nudge_worker).
    pub fn worker_generation(&self) -> u64 {
        *self.shared.worker_changes.lock()
    }

    /// Tells the root worker to look now: a caller left a route unresolved.
    pub fn nudge_worker(&self) {
        self.shared.bump_worker();
    }

    /// [`wait_for_change_woken`](Self::wait_for_change_woken) on the worker's counter.
    pub fn wait_for_worker(&self, seen: u64, wait_ms: u64, cancel: &AtomicBool) -> u64 {
        let s = &self.shared;
        wait_woken(&s.worker_changes, &s.worker_changed, seen, wait_ms, cancel)
    }
}

/// Sleeps on `changed` until `counter` passes `seen`, `wait_ms` passes or `cancel` is set (its
/// setter wakes the condvar, so nothing re-checks periodically); returns the counter.
fn wait_woken(
    counter: &parking_lot::Mutex<u64>,
    changed: &parking_lot::Condvar,
    seen: u64,
    wait_ms: u64,
    cancel: &AtomicBool,
) -> u64 {
    let deadline = Instant::now() + Duration::from_millis(wait_ms);
    let mut changes = counter.lock();
    while *changes <= seen && !cancel.load(Ordering::Acquire) {
        if changed.wait_until(&mut changes, deadline).timed_out() {
            break;
        }
    }
    *changes
}

/// A write job for `op` and the slot its answer arrives in; `seal` turns the value into the
/// answer, in the writer thread when the write is acknowledged.
fn make_write_job<T: Send + 'static, U: Send + 'static>(
    op: impl FnOnce(&mut Machine, &Recipients, u64) -> Outcome<T> + Send + 'static,
    ack: Ack,
    wake: Wake,
    seal: impl FnOnce(T) -> U + Send + 'static,
) -> (Job, oneshot::Waiter<Result<U>>) {
    let (tx, rx) = oneshot::slot::<Result<U>>();
    let job: WriteFn = Box::new(move |ctx| {
        let out = match ctx {
            Ok((m, r, now)) => op(m, r, now),
            Err(e) => Err(e.clone()),
        };
        match out {
            Ok((value, records)) => (
                records,
                Box::new(move |failed: Option<&Error>| {
                    tx.send(failed.map_or_else(|| Ok(seal(value)), |e| Err(e.clone())));
                }),
            ),
            Err(e) => (
                Vec::new(),
                Box::new(move |failed: Option<&Error>| {
                    tx.send(Err(failed.cloned().unwrap_or(e)));
                }),
            ),
        }
    });
    (Job::Write(job, ack, wake), rx)
}
