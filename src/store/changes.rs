//! The state the store writer (its thread and the callers leading a group commit) and its
//! handles share: the writer's counters, the change notification (a counter plus a condition
//! variable) that readers block on, the doorbell the writer thread sleeps on between batches,
//! and the custody state itself ([`Committed`]) that handles read in their own thread.

use crate::error::Error;
use crate::messaging::Machine;
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Counters of the writer, for tests, benchmarks and `peer bench`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Jobs (reads and writes) taken from the queue.
    pub jobs: u64,
    /// Batches that wrote a frame.
    pub batches: u64,
    /// fdatasync calls on the journal.
    pub syncs: u64,
    /// Write-outs (`sync_file_range`) of a send's intent frame instead of an fdatasync.
    pub write_outs: u64,
    /// Bytes those write-outs covered (each from the end of the last fdatasync).
    pub write_out_bytes: u64,
    /// fdatasyncs a sender led for its own intent because no recipient's flush covered it
    /// (`StoreHandle::wait_durable`).
    pub intent_syncs: u64,
    pub records: u64,
    /// Most jobs taken in one batch.
    pub max_batch: u64,
    pub compactions: u64,
    pub journal_bytes: u64,
    pub snapshot_bytes: u64,
    /// Snapshot bytes written by compactions since the store was opened.
    pub snapshot_bytes_written: u64,
    pub generation: u64,
    /// A write failed; nothing is acknowledged any more.
    pub poisoned: bool,
    /// Bytes of a torn, never-acknowledged journal tail discarded when the store was opened.
    pub torn_tail_bytes: u64,
    /// Partial batches (0 or 1) those bytes held.
    pub torn_tail_batches: u64,
}

/// The custody state as the writer last applied it, behind a `RwLock` in [`Shared`]. Only the
/// writer (its thread or a leading caller, holding the writer's mutex) takes the write lock, and only while it applies one batch's writes (no I/O
/// under it); handles read it in their own thread. `applied` counts the batches whose records
/// are in `machine`; [`Shared::durable`] counts those whose fdatasync returned, so a reader
/// holding the read lock sees exactly durable state when the two are equal.
pub(crate) struct Committed {
    pub machine: Machine,
    pub applied: u64,
    /// Set when a write failed: nothing later is acknowledged or read.
    pub poisoned: Option<Error>,
}

/// What the writer thread and every handle share: the counters, the change count readers
/// wait on, the doorbell and the committed state.
pub(crate) struct Shared {
    pub stats: Mutex<StoreStats>,
    pub changes: Mutex<u64>,
    pub changed: Condvar,
    /// Changes the root worker acts on (see `Wake`), with their own condition variable so the
    /// worker sleeps through the commits of the send path.
    pub worker_changes: Mutex<u64>,
    pub worker_changed: Condvar,
    pub committed: parking_lot::RwLock<Committed>,
    /// Batches whose frame is written to the journal file (in the page cache: a crash of
    /// this process cannot lose them; a power loss still can until `durable` passes them).
    pub written: AtomicU64,
    /// Batches made durable (see [`Committed::applied`]).
    pub durable: AtomicU64,
    /// Writes queued without waiting (`StoreHandle::write_queued`), counted before they are
    /// queued, and how many of them the writer has applied (or that failed to queue): a read
    /// of durable state first waits until every one queued before it is applied, so our own
    /// receipt queued a moment ago is never missing from what `peer status` shows.
    pub lazy_queued: AtomicU64,
    pub lazy_applied: AtomicU64,
    /// A leader left the writer thread work (compaction, preallocation, a
    /// deferred frame's timer, a close): set before the ring, so the thread's sleep sees it.
    pub thread_wanted: AtomicBool,
    /// The writer shut down: submissions fail with DISCONNECTED before they are queued.
    pub closed: AtomicBool,
    /// fdatasyncs of the journal begun, and the number (in that count) of the latest one
    /// begun that returned successfully: a write queued when `syncs_begun` was `n` is covered
    /// by a device flush issued after it was queued once `synced_begun > n` (see
    /// `StoreHandle::accept_stating`).
    syncs_begun: AtomicU64,
    synced_begun: AtomicU64,
    /// What the last intent batch's waiters learn about their frame (set by the writer
    /// right before it answers them, read by their answer in the same thread).
    intent_frame: Mutex<super::flush::IntentFrame>,
    /// Wakes callers waiting for `written` or `durable` to pass a batch (or for poisoning).
    progress: Mutex<()>,
    progressed: Condvar,
    /// How the writer sleeps for want of jobs, if it does.
    idle: Mutex<Idle>,
    job_queued: Condvar,
}

/// The writer's sleep between batches, as the doorbell sees it.
#[derive(Clone, Copy, Default)]
struct Idle {
    /// The writer sleeps until a ring (or its timer).
    sleeping: bool,
    /// That sleep ends by itself within `DEFERRED_SYNC_MS` (a deferred sync is due, or a send's
    /// receipt is expected): a job that may wait (see [`Shared::ring_lazily`]) is taken then.
    timed: bool,
}

impl Shared {
    pub fn new(stats: StoreStats, machine: Machine) -> Shared {
        Shared {
            stats: Mutex::new(stats),
            changes: Mutex::new(0),
            changed: Condvar::new(),
            worker_changes: Mutex::new(0),
            worker_changed: Condvar::new(),
            committed: parking_lot::RwLock::new(Committed {
                machine,
                applied: 0,
                poisoned: None,
            }),
            written: AtomicU64::new(0),
            durable: AtomicU64::new(0),
            lazy_queued: AtomicU64::new(0),
            lazy_applied: AtomicU64::new(0),
            thread_wanted: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            syncs_begun: AtomicU64::new(0),
            synced_begun: AtomicU64::new(0),
            intent_frame: Mutex::new(super::flush::IntentFrame::default()),
            progress: Mutex::new(()),
            progressed: Condvar::new(),
            idle: Mutex::new(Idle::default()),
            job_queued: Condvar::new(),
        }
    }

    /// Whether the writer thread sleeps between batches (so it holds no lock).
    #[cfg(test)]
    pub fn writer_sleeps(&self) -> bool {
        self.idle.lock().sleeping
    }

    /// Called after a job was queued: wakes the writer if it sleeps.
    pub fn ring(&self) {
        if self.idle.lock().sleeping {
            self.job_queued.notify_one();
        }
    }

    /// Counts an fdatasync about to begin; returns its number.
    pub fn sync_begins(&self) -> u64 {
        self.syncs_begun.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Fdatasync number `begun` returned successfully.
    pub fn sync_ended(&self, begun: u64) {
        self.synced_begun.fetch_max(begun, Ordering::SeqCst);
    }

    /// How many fdatasyncs have begun (read before a write is queued).
    pub fn syncs_begun(&self) -> u64 {
        self.syncs_begun.load(Ordering::SeqCst)
    }

    /// Whether an fdatasync begun after `syncs_begun()` read `before` has returned.
    pub fn synced_since(&self, before: u64) -> bool {
        self.synced_begun.load(Ordering::SeqCst) > before
    }

    pub fn set_intent_frame(&self, f: super::flush::IntentFrame) {
        *self.intent_frame.lock() = f;
    }

    pub fn intent_frame(&self) -> super::flush::IntentFrame {
        *self.intent_frame.lock()
    }

    /// Whether the writer thread sleeps with a timer: it will look at deferred frames when
    /// it ends, without a ring.
    pub fn sleeps_timed(&self) -> bool {
        let idle = self.idle.lock();
        idle.sleeping && idle.timed
    }

    /// Called by a leader that left the writer thread work, after releasing the writer.
    pub fn want_thread(&self) {
        self.thread_wanted.store(true, Ordering::Release);
        self.ring();
    }

    /// Called after a job nobody waits for was queued: wakes the writer only if its sleep has
    /// no timer. A timed sleep takes the job when it ends (within `DEFERRED_SYNC_MS`) or with
    /// the next rung job, and the thread that answered a send applies it right after its
    /// answer (`StoreHandle::apply_queued_now`), so a stream of sends never wakes the writer
    /// for a receipt. Whoever later must wait for such a job rings.
    pub fn ring_lazily(&self) {
        let idle = self.idle.lock();
        if idle.sleeping && !idle.timed {
            self.job_queued.notify_one();
        }
    }

    /// The writer's sleep between batches: returns once `empty()` is false. A submitter queues
    /// its job before it rings, and the flag is set and `empty()` checked under the same lock
    /// the ring takes, so a job queued at any moment either is seen here or wakes the sleep.
    /// With `until`, returns `false` once that passes with `empty()` still true.
    pub fn sleep_while(&self, empty: impl Fn() -> bool, until: Option<std::time::Instant>) -> bool {
        let mut idle = self.idle.lock();
        *idle = Idle {
            sleeping: true,
            timed: until.is_some(),
        };
        let mut woken = true;
        while empty() {
            match until {
                Some(t) => {
                    if self.job_queued.wait_until(&mut idle, t).timed_out() && empty() {
                        woken = false;
                        break;
                    }
                }
                None => self.job_queued.wait(&mut idle),
            }
        }
        *idle = Idle::default();
        woken
    }

    /// Whether a reader holding the read lock on `c` sees exactly durable state.
    pub fn all_durable(&self, c: &Committed) -> bool {
        c.applied == self.durable.load(Ordering::Acquire)
    }

    /// Moves `counter` (`written` or `durable`) to `batch` and wakes its waiters.
    pub fn advance(&self, counter: &AtomicU64, batch: u64) {
        let _guard = self.progress.lock();
        counter.store(batch, Ordering::Release);
        self.progressed.notify_all();
    }

    /// Counts `n` more queued-without-waiting writes applied and wakes who waits for them.
    pub fn note_lazy_applied(&self, n: u64) {
        let _guard = self.progress.lock();
        self.lazy_applied.fetch_add(n, Ordering::AcqRel);
        self.progressed.notify_all();
    }

    /// Wakes the waiters of `written`/`durable` so they see a poisoned store.
    pub fn wake_progress(&self) {
        let _guard = self.progress.lock();
        self.progressed.notify_all();
    }

    /// Sleeps until `counter` reaches `batch`, `failed()` says the store stopped, or
    /// `deadline` passes; returns whether it was reached.
    pub fn wait_progress(
        &self,
        counter: &AtomicU64,
        batch: u64,
        failed: impl Fn() -> bool,
        deadline: std::time::Instant,
    ) -> bool {
        let mut guard = self.progress.lock();
        loop {
            if counter.load(Ordering::Acquire) >= batch {
                return true;
            }
            if failed() || self.progressed.wait_until(&mut guard, deadline).timed_out() {
                return counter.load(Ordering::Acquire) >= batch;
            }
        }
    }

    pub fn bump_changes(&self) {
        *self.changes.lock() += 1;
        self.changed.notify_all();
    }

    pub fn bump_worker(&self) {
        *self.worker_changes.lock() += 1;
        self.worker_changed.notify_all();
    }
}
