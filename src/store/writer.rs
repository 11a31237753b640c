//! The store writer: the state only one thread at a time may write with (the journal file,
//! its lengths and batch numbers, the deferred-sync state), behind a mutex, and the
//! store-writer thread. Whoever holds the mutex runs the group commit: it drains up to
//! `commitBatch` queued jobs, answers reads from the already-durable state, applies every write
//! to the state machine (under the write lock of the shared committed state, with no I/O under
//! it), appends all their records as one frame with one write and one fdatasync, then answers
//! the waiters. A write asked with [`Ack::Applied`] is answered as soon as it is applied,
//! before that fdatasync (see `StoreHandle::write_queued` for who may); one asked with
//! [`Ack::Written`] once the frame is written and written out to the device, without an
//! fdatasync (see `StoreHandle::write_written`). A failed write or sync answers that batch with the error and
//! poisons the writer: nothing later is acknowledged until the root restarts and recovers from
//! the journal.
//!
//! Leaders and followers. A caller that submits a write (or a read of durable state) queues
//! its job, then tries the mutex without blocking. If it gets it, it leads: it runs one batch
//! of everything queued by then (its own job among them) in its own thread, answers the others'
//! slots, and needs no wake-up for its own answer. A batch with a durable waiter is
//! fdatasynced by whoever runs it; a batch whose waiters are all answered once written (a
//! send's intent) is written, then written out (`sync_file_range` over every byte since the
//! last fdatasync: on the device, waiting for the device's cache flush) and left unsynced: the
//! recipient's stated flush usually makes it durable (see [`super::flush`]); otherwise its
//! sender leads the fdatasync itself (`StoreHandle::wait_durable`), and the writer thread's
//! `DEFERRED_SYNC_MS` timer syncs it anyway. If the mutex is held, the caller is a follower: it
//! sleeps on its slot, and the holder, once it lets go, rings the writer thread for it (or,
//! being that thread, takes it next), so a batch of followers costs one wake-up, not one each.
//!
//! The writer thread keeps everything that must not sit on a caller's path: the deferred
//! fdatasync of written-out frames (and the change notifications due after it), compaction and
//! preallocation after a batch (a leader rings for them when they are due), the
//! `DEFERRED_SYNC_MS` timer, the shutdown, and every job queued while nobody leads. Between
//! batches it sleeps on the shared doorbell; after a batch with a send's intent, or with a
//! frame still to sync, that sleep has a timer (`DEFERRED_SYNC_MS` after the oldest unsynced
//! frame was written, so a stream of sends cannot postpone it) and takes jobs queued without a
//! ring (a sender's copy of a receipt) when it ends, if no rung job came first. A leader rings
//! the thread for a deferred frame only when the thread does not already sleep with a timer.
//!
//! No job is lost. A submitter queues its job, issues a sequentially consistent fence, then
//! tries the mutex. If the try succeeds, it drains the queue itself; the queue holds at most
//! `commitBatch` jobs, which is also the batch bound, so its own job is in what it drains,
//! unless an earlier holder already took and answered it. Every holder, once it releases the
//! mutex, issues the same fence and looks at the queue: a leader rings the writer thread when
//! the queue is not empty; the thread looks (under the doorbell's lock, before it sleeps, and
//! again after it retakes the mutex) and takes what it finds. The two fences make this the
//! store-buffering pattern: a submitter whose try saw the mutex still held by some holder
//! (queue, fence, read the lock word) and that holder (release the lock word, fence, read the
//! queue) cannot both miss the other's write, so the holder sees the job. A leader's ring takes
//! the doorbell's lock after the job was queued, so the thread either sees the job before it
//! sleeps or is woken; a leader that barges in first may take the job instead. A job a leader
//! leaves behind for the thread (a deferred sync, upkeep, a closed store) is announced the same
//! way: a flag set, then a ring. A job queued without waiting (`StoreHandle::write_queued`)
//! rings lazily (see `Shared::ring_lazily`), and whoever must wait for it leads or relies on
//! the same look.
//!
//! The journal file is kept preallocated: after a batch is answered, when less than half a
//! chunk of zero-filled room is left past the logical end, the writer thread writes the next
//! chunk of real zeros and fdatasyncs it (see [`prealloc_target`]). Frames are then written
//! with `pwrite` into that room, so a commit's fdatasync changes neither the file's size nor
//! its block map and writes data blocks only.

use super::changes::Shared;
use super::flush::{self, IntentFrame};
use super::{journal, paths, snapshot};
use crate::config::internal::{PREALLOC_CHUNK_BYTES, ZERO_FILL_PIECE_BYTES as PIECE};
use crate::error::{Code, Error, Result};
use crate::fsutil::{self, FileLock};
use crate::messaging::{Machine, Recipients, Record};
use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Mutex, RwLock};
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{Ordering, fence};

use crate::config::Limits;
use crate::config::internal::DEFERRED_SYNC_MS;

/// The preallocation chunk for `limits`: a quarter of the journal threshold
/// (`journalBytes`, at most half of `storageBytes`), between 4 KiB and
/// [`PREALLOC_CHUNK_BYTES`], so a small journal is not mostly room.
pub(crate) fn prealloc_chunk(limits: &Limits) -> u64 {
    let threshold = limits.journal_bytes.min(limits.storage_bytes / 2);
    (threshold / 4).clamp(4096, PREALLOC_CHUNK_BYTES)
}

/// The size to zero-fill the journal up to now, if it should grow: when less than half a
/// `chunk` of room is left past the logical end `len` (the file's size is `alloc`), up to the
/// chunk boundary at least half a chunk past `len`; never past `cap`, the compaction trigger,
/// so the file's allocated bytes stay within what storage admission counts for the journal
/// (a frame that does not fit the room is appended past it, as without preallocation).
pub(crate) fn prealloc_target(len: u64, alloc: u64, chunk: u64, cap: u64) -> Option<u64> {
    let chunk = chunk.max(1);
    if alloc.saturating_sub(len) >= chunk / 2 {
        return None;
    }
    let target = len
        .saturating_add(chunk / 2)
        .div_ceil(chunk)
        .saturating_mul(chunk)
        .min(cap);
    (target > alloc && target > len).then_some(target)
}

/// Writes zeros to `file` from `from` up to `to` (not synced).
fn write_zeros(file: &File, from: u64, to: u64) -> std::io::Result<()> {
    let zeros = vec![0u8; PIECE.min(to.saturating_sub(from)) as usize];
    let mut at = from;
    while at < to {
        let n = (to - at).min(PIECE) as usize;
        file.write_all_at(&zeros[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

/// Adds zero-filled room to `file` (size `from`) up to `to`, as far as the filesystem allows,
/// and returns the file's size after it (not synced). Room is only an optimisation: a full
/// disk or a file size limit (`RLIMIT_FSIZE`) leaves less or none, and frames are then
/// appended past it until a frame's own write fails, exactly as without preallocation.
pub(crate) fn add_room(file: &File, from: u64, to: u64) -> u64 {
    match write_zeros(file, from, to) {
        Ok(()) => to,
        Err(_) => file.metadata().map_or(from, |m| m.len().clamp(from, to)),
    }
}

/// Called once the batch holding a write is durable (`None`) or failed (`Some(error)`); for
/// an [`Ack::Applied`] write, once it is applied.
pub(crate) type Finish = Box<dyn FnOnce(Option<&Error>) + Send>;
pub(crate) type WriteFn = Box<
    dyn FnOnce(
            std::result::Result<(&mut Machine, &Recipients, u64), &Error>,
        ) -> (Vec<Record>, Finish)
        + Send,
>;
pub(crate) type ReadFn = Box<dyn FnOnce(std::result::Result<&Machine, &Error>) + Send>;

/// When a write's waiter is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ack {
    /// After the fdatasync of the batch holding its records.
    Durable,
    /// As soon as its records are applied to the shared state, before that fdatasync. Its
    /// submitter does not wait (`StoreHandle::write_queued`): it keeps the answer as a ticket
    /// and rings the doorbell lazily (`Shared::ring_lazily`).
    Applied,
    /// Once the batch's frame is written to the journal file (a crash of this process can no
    /// longer lose it), while its fdatasync, started at once, still runs; the caller waits
    /// for that sync later (`StoreHandle::wait_durable`) when it must.
    Written,
}

/// Whom a write's commit wakes besides the readers waiting for any change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wake {
    /// The root worker too: the write may leave receipts to push or a route nobody drives.
    Worker,
    /// Not the worker: a send-path write whose route its caller drives (an accept, an intent,
    /// a receipt for our send). A batch that queues a receipt push still wakes the worker.
    Quiet,
}

pub(crate) enum Job {
    Read(ReadFn),
    Write(WriteFn, Ack, Wake),
    Shutdown(Sender<()>),
}

/// One applied batch: its records and its waiters by when they are answered.
struct Applied {
    records: Vec<Record>,
    durable: Vec<Finish>,
    written: Vec<Finish>,
    applied: Vec<Finish>,
    /// The batch leaves the root worker something to do (see `Wake`).
    wake_worker: bool,
}

/// Test-only fault injection: fail the fdatasync with this 1-based number; hold every
/// fdatasync of the journal (its frames already written) while the gate is closed (`true`).
#[derive(Clone, Debug, Default)]
pub(crate) struct Faults {
    pub fail_sync_at: Option<u64>,
    pub hold_sync: Option<Arc<(parking_lot::Mutex<bool>, parking_lot::Condvar)>>,
    /// The same hold, across processes: while this file exists (see [`HOLD_SYNC_ENV`]).
    pub hold_sync_file: Option<PathBuf>,
    /// Treat the journal's fdatasync as not flushing its device (see [`UNFLUSHED_ENV`]).
    pub unflushed: bool,
    /// The writer thread never syncs a deferred frame by its timer (so a test sees who else
    /// leads that sync).
    pub no_deferred_timer: bool,
    /// Every write-out of an intent batch fails.
    pub fail_write_out: bool,
    /// Every journal fdatasync records the thread that ran it here.
    pub sync_threads: Option<Arc<parking_lot::Mutex<Vec<std::thread::ThreadId>>>>,
}

/// Debug builds only (the binaries the integration tests run): names a file whose existence
/// holds every journal fdatasync of every store this process opens, so a test can see what a
/// caller is told while a record is written but not yet durable.
/// Release builds ignore it.
pub const HOLD_SYNC_ENV: &str = "PEERWIRE_TEST_HOLD_SYNC";

/// When set (non-empty), every store this process opens treats its journal's fdatasync as
/// not flushing the device, so as a recipient it never states `flushedDevice` and as a sender
/// it fdatasyncs every intent itself (a recipient on another filesystem, or an older peer, as
/// a test sees it). Honoured by every build: it can only make a root sync more, never less.
pub const UNFLUSHED_ENV: &str = "PEERWIRE_TEST_UNFLUSHED";

impl Faults {
    /// No faults, except the debug builds' [`HOLD_SYNC_ENV`] hold.
    pub fn from_env() -> Faults {
        let hold_sync_file = if cfg!(debug_assertions) {
            std::env::var_os(HOLD_SYNC_ENV)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        } else {
            None
        };
        let unflushed = std::env::var_os(UNFLUSHED_ENV).is_some_and(|v| !v.is_empty());
        Faults {
            hold_sync_file,
            unflushed,
            ..Faults::default()
        }
    }

    /// Waits while a hold is closed.
    fn hold(&self) {
        if let Some(gate) = &self.hold_sync {
            let mut closed = gate.0.lock();
            while *closed {
                gate.1.wait(&mut closed);
            }
        }
        if let Some(f) = &self.hold_sync_file {
            while f.exists() {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        }
    }
}

pub(crate) struct Writer {
    pub dir: PathBuf,
    pub file: File,
    /// The logical end: where the next frame is written.
    pub len: u64,
    /// The file's size: `len` plus the zero-filled room after it.
    pub alloc: u64,
    /// How much room one preallocation adds (see [`prealloc_chunk`]).
    pub prealloc_chunk: u64,
    /// The filesystem refused room for this journal generation (full, or a file size limit):
    /// no more is tried until the next generation.
    pub room_refused: bool,
    pub generation: u64,
    pub batch_no: u64,
    /// Frames written after the last fdatasync (batches of `Ack::Applied` and
    /// `Ack::Written` writes).
    pub unsynced: bool,
    /// When the oldest of those frames was written: the deferred sync is due
    /// `DEFERRED_SYNC_MS` after it.
    pub unsynced_since: Option<std::time::Instant>,
    /// The logical end the last fdatasync covered: frames from here to `len` are not yet
    /// durable by our own sync.
    pub synced_len: u64,
    /// The file size (room included) whose size and block map an fdatasync made durable: a
    /// frame ending within it needs no metadata to survive, only its data blocks.
    pub durable_room: u64,
    /// Size of the current snapshot (0 before the first): the next compaction waits for
    /// about as many journal bytes (see `Machine::compaction_trigger`).
    pub snapshot_bytes: u64,
    pub recipients: Arc<RwLock<Recipients>>,
    /// Holds the committed state the writer alone mutates.
    pub shared: Arc<Shared>,
    pub faults: Faults,
    /// The store's lock file, held until the writer closes.
    pub lock: Option<FileLock>,
    /// The job queue (bounded by `commitBatch`); only the mutex's holder takes from it.
    pub rx: Receiver<Job>,
    /// Most jobs in one batch (`commitBatch`).
    pub batch_max: usize,
    /// Reused for every batch: a fresh `commitBatch`-sized buffer per batch is a large
    /// allocation, and glibc consolidates its fast bins on each one.
    pub jobs: Vec<Job>,
    /// The batch's writes, reused the same way (empty between batches).
    pub writes: Vec<(WriteFn, Ack, Wake)>,
    /// The batch's durable, written and applied waiters' lists, reused the same way.
    pub waiters: [Vec<Finish>; 3],
    /// The last batch held a send's intent: that send's receipt is queued soon without a
    /// ring (`Shared::ring_lazily`), so the thread's sleep until then has a timer and takes it.
    pub receipt_due: bool,
    /// The change notifications of written-out frames, due once they are durable.
    pub deferred_notices: Option<DeferredNotices>,
    /// Shut down: queued jobs are dropped unanswered (their callers see DISCONNECTED).
    pub closed: bool,
}

/// Change notifications of a written-out batch, deferred to the fdatasync that makes it
/// durable, so readers woken by them find the state durable (as after a synced batch).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct DeferredNotices {
    changes: bool,
    worker: bool,
}

/// Who runs a batch: a leader (a submitting caller) leaves compaction and preallocation to the
/// writer thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Runner {
    Thread,
    Leader,
}

/// The writer thread: runs what leaders hand over and the jobs queued while nobody leads,
/// until the writer is closed.
pub(crate) fn run_thread(core: Arc<Mutex<Writer>>, shared: Arc<Shared>, rx: Receiver<Job>) {
    loop {
        let until = {
            let mut w = core.lock();
            shared.thread_wanted.store(false, Ordering::Release);
            // Orders this look at the queue after the previous release (see the module doc).
            fence(Ordering::SeqCst);
            if w.closed {
                break;
            }
            w.tend();
            if w.take_jobs() {
                w.run_batch(Runner::Thread);
                continue;
            }
            w.timer()
        };
        let idle = || {
            fence(Ordering::SeqCst);
            rx.is_empty() && !shared.thread_wanted.load(Ordering::Acquire)
        };
        if !shared.sleep_while(idle, until) {
            let mut w = core.lock();
            w.receipt_due = false;
            if !w.faults.no_deferred_timer {
                w.sync_deferred();
            }
        }
    }
}

/// Creates journal `generation` durably with up to `size` bytes (the header, the end mark of
/// no batches, then zeros: the first preallocated room, as far as the filesystem allows): temp
/// file, header, mark, zeros, fsync, rename, fsync dir. Returns the file and its size.
pub(crate) fn create_journal(
    dir: &std::path::Path,
    generation: u64,
    size: u64,
) -> Result<(File, u64)> {
    let tmp = dir.join(paths::JOURNAL_TMP);
    match std::fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io("cannot remove", &tmp, &e)),
    }
    let mut f = fsutil::create_private_new(&tmp)?;
    let mut head = journal::encode_header(generation).to_vec();
    head.extend_from_slice(&journal::encode_mark(generation, 0));
    f.write_all(&head)
        .map_err(|e| Error::io("cannot write", &tmp, &e))?;
    let size = add_room(&f, head.len() as u64, size.max(head.len() as u64));
    f.sync_data()
        .map_err(|e| Error::io("cannot fsync", &tmp, &e))?;
    let path = dir.join(paths::JOURNAL);
    std::fs::rename(&tmp, &path).map_err(|e| Error::io("cannot rename onto", &path, &e))?;
    fsutil::fsync_dir(dir)?;
    Ok((f, size))
}

impl Writer {
    /// Runs one batch of the jobs queued now in the calling thread, which holds the mutex
    /// (see the module doc). Returns whether the writer thread must be rung: a deferred frame
    /// whose timer it keeps (unless it already sleeps with one), compaction or preallocation
    /// due, or a close.
    pub(crate) fn lead(&mut self) -> bool {
        if self.closed {
            // Dropping a job drops its answer: its caller sees DISCONNECTED.
            while self.rx.try_recv().is_ok() {}
            return false;
        }
        if !self.take_jobs() {
            return false;
        }
        self.run_batch(Runner::Leader);
        self.closed || (self.unsynced && !self.shared.sleeps_timed()) || self.upkeep_due()
    }

    /// When the writer thread's sleep must end by itself: the deferred sync's due time, or
    /// `DEFERRED_SYNC_MS` from now while a send's receipt is expected.
    fn timer(&self) -> Option<std::time::Instant> {
        let wait = std::time::Duration::from_millis(DEFERRED_SYNC_MS);
        // A poisoned writer syncs nothing more: no timer for it (it would fire at once, again).
        let sync = (self.unsynced && !self.faults.no_deferred_timer && !self.is_poisoned())
            .then(|| self.unsynced_since.unwrap_or_else(std::time::Instant::now) + wait);
        let receipt = self.receipt_due.then(|| std::time::Instant::now() + wait);
        match (sync, receipt) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Takes up to `commitBatch` queued jobs; false when none is queued.
    fn take_jobs(&mut self) -> bool {
        while self.jobs.len() < self.batch_max {
            match self.rx.try_recv() {
                Ok(j) => self.jobs.push(j),
                Err(_) => break,
            }
        }
        !self.jobs.is_empty()
    }

    /// The writer thread's work between batches: the deferred sync once due, then
    /// compaction and preallocation when due. A failure poisons.
    fn tend(&mut self) {
        let wait = std::time::Duration::from_millis(DEFERRED_SYNC_MS);
        if !self.faults.no_deferred_timer
            && self.unsynced_since.is_some_and(|t| t.elapsed() >= wait)
        {
            self.sync_deferred();
        }
        if !self.is_poisoned()
            && let Err(e) = self.maybe_compact().and_then(|()| self.maybe_extend())
        {
            self.poison(&e);
        }
    }

    /// Whether compaction or preallocation is due (cheap: lengths and the trigger).
    pub(crate) fn upkeep_due(&self) -> bool {
        if self.is_poisoned() {
            return false;
        }
        let cap = self
            .shared
            .committed
            .read()
            .machine
            .compaction_trigger(self.snapshot_bytes);
        self.len >= cap
            || (!self.room_refused
                && prealloc_target(self.len, self.alloc, self.prealloc_chunk, cap).is_some())
    }

    /// One group commit of the taken jobs.
    fn run_batch(&mut self, by: Runner) {
        let mut jobs = std::mem::take(&mut self.jobs);
        let jobs_n = jobs.len() as u64;
        self.receipt_due = jobs
            .iter()
            .any(|j| matches!(j, Job::Write(_, Ack::Written, _)));
        // Reused for every batch, like `jobs`.
        let mut writes = std::mem::take(&mut self.writes);
        let mut stop = None;
        // Reads see only durable state: a deferred frame is synced before they are answered.
        if jobs
            .iter()
            .any(|j| matches!(j, Job::Read(_) | Job::Shutdown(_)))
        {
            self.sync_deferred();
        }
        // Reads first: the state here is exactly what earlier batches made durable.
        {
            let c = self.shared.committed.read();
            for job in jobs.drain(..) {
                match job {
                    Job::Read(f) => f(c.poisoned.as_ref().map_or(Ok(&c.machine), Err)),
                    Job::Write(f, ack, wake) => writes.push((f, ack, wake)),
                    Job::Shutdown(tx) => stop = Some(tx),
                }
            }
        }
        self.jobs = jobs;
        let committed = self.commit_writes(&mut writes, jobs_n);
        self.writes = writes;
        if by == Runner::Thread
            && committed
            && !self.is_poisoned()
            && let Err(e) = self.maybe_compact().and_then(|()| self.maybe_extend())
        {
            self.poison(&e);
        }
        if let Some(tx) = stop {
            // A clean close makes every frame durable and records how far that is.
            self.sync_deferred();
            if !self.is_poisoned() {
                let _ = super::write_sync_point(&self.dir, &self.sync_point());
            }
            self.close();
            let _ = tx.send(());
        }
    }

    /// Stops taking jobs: drops what is still queued (its callers see DISCONNECTED) and
    /// releases the store's lock file, so the store can be opened again at once.
    fn close(&mut self) {
        self.closed = true;
        self.shared.closed.store(true, Ordering::Release);
        while self.rx.try_recv().is_ok() {}
        self.lock = None;
    }

    /// Every applied batch is on disk now; the notifications a leader deferred to this sync
    /// go out.
    fn mark_durable(&mut self) {
        let applied = self.shared.committed.read().applied;
        self.shared.advance(&self.shared.durable, applied);
        if let Some(h) = self.deferred_notices.take() {
            if h.changes {
                self.shared.bump_changes();
            }
            if h.worker {
                self.shared.bump_worker();
            }
        }
    }

    /// Every applied batch is written to the journal file now.
    fn mark_written(&self) {
        let applied = self.shared.committed.read().applied;
        self.shared.advance(&self.shared.written, applied);
    }

    /// fdatasyncs frames written without a sync (see `Ack::Applied`, `Ack::Written`); a
    /// failure poisons.
    pub(crate) fn sync_deferred(&mut self) {
        if !self.unsynced || self.is_poisoned() {
            return;
        }
        match self.sync_data() {
            Ok(()) => self.mark_durable(),
            Err(e) => self.poison(&e),
        }
    }

    fn sync_data(&mut self) -> Result<()> {
        self.faults.hold();
        let sync_no = self.shared.stats.lock().syncs + 1;
        if self.faults.fail_sync_at == Some(sync_no) {
            return Err(Error::new(
                Code::Io,
                format!("injected fdatasync failure at sync {sync_no}"),
            ));
        }
        if let Some(t) = &self.faults.sync_threads {
            t.lock().push(std::thread::current().id());
        }
        let begun = self.shared.sync_begins();
        self.file
            .sync_data()
            .map_err(|e| Error::io("cannot fdatasync", &self.dir.join(paths::JOURNAL), &e))?;
        self.shared.sync_ended(begun);
        self.unsynced = false;
        self.unsynced_since = None;
        self.synced_len = self.len;
        self.durable_room = self.durable_room.max(self.alloc);
        self.shared.stats.lock().syncs += 1;
        Ok(())
    }

    /// After a send's intent batch is written: writes every byte not yet fdatasynced out to
    /// the device (the intent's frame and any deferred frame before it, so no gap of
    /// unwritten bytes can lie before it after a power loss) and records what the intent's
    /// waiters learn about it (see [`IntentFrame`]). A failed write-out fails the batch and
    /// poisons, like a failed fdatasync: `sync_file_range` reports a writeback error once per
    /// open file (it advances the file's error cursor), so a later fdatasync would not.
    fn write_out_intent(&mut self) -> Result<()> {
        // The frame's end mark is written out with it (see `append`); nothing is pending when
        // an fdatasync already covered the frame (and so its mark).
        let pending = if self.len > self.synced_len {
            self.len + journal::MARK_BYTES as u64 - self.synced_len
        } else {
            0
        };
        if pending > 0 {
            if self.faults.fail_write_out {
                return Err(Error::new(Code::Io, "injected write-out failure"));
            }
            flush::write_out(&self.file, self.synced_len, pending)
                .map_err(|e| Error::io("cannot write out", &self.dir.join(paths::JOURNAL), &e))?;
            let mut st = self.shared.stats.lock();
            st.write_outs += 1;
            st.write_out_bytes += pending;
        }
        self.shared.set_intent_frame(IntentFrame {
            in_room: self.len + journal::MARK_BYTES as u64 <= self.durable_room,
            written_out: true,
        });
        Ok(())
    }

    fn is_poisoned(&self) -> bool {
        self.shared.committed.read().poisoned.is_some()
    }

    /// A send's intent batch left unsynced: its change notifications wait for the sync that
    /// makes it durable (see `mark_durable`), so readers woken by them find it durable.
    /// Returns true (deferred).
    fn defer_notifications(&mut self, wake_worker: bool) -> bool {
        let h = self
            .deferred_notices
            .get_or_insert_with(DeferredNotices::default);
        h.changes = true;
        h.worker |= wake_worker;
        true
    }

    /// Applies the batch's writes, writes their records as one frame and, when a waiter needs
    /// them durable, fdatasyncs it (a batch without durable waiters is deferred; a send's
    /// intent is written out), then answers each waiter. Returns true when records were committed.
    fn commit_writes(&mut self, writes: &mut Vec<(WriteFn, Ack, Wake)>, jobs_n: u64) -> bool {
        let Some(mut batch) = self.apply(writes) else {
            self.note_batch(jobs_n, 0);
            return false;
        };
        // Applied-only waiters go on now, while the batch is being made durable.
        batch.applied.drain(..).for_each(|fin| fin(None));
        // A batch nobody waits on the durability of is written now and synced with the next
        // durable batch, the next read of durable state, a close, a sender that leads its sync
        // (`StoreHandle::wait_durable`), or after DEFERRED_SYNC_MS. A send's intent is also
        // written out first. A durable waiter whose write added no records (a retry answered
        // from the state) may still have read a deferred record: that one is synced before it
        // is answered.
        let sync = !batch.durable.is_empty();
        let intent = !batch.written.is_empty();
        let mut deferred = false;
        let mut outcome = if batch.records.is_empty() {
            Ok(())
        } else {
            self.append(&batch.records)
        };
        if intent && outcome.is_ok() {
            outcome = self.write_out_intent();
        }
        if outcome.is_ok() {
            // Written waiters go on now (their caller syncs later, when nobody covered it).
            self.mark_written();
            batch.written.drain(..).for_each(|fin| fin(None));
            if sync && self.unsynced {
                outcome = self.sync_data();
            } else if self.unsynced && !batch.records.is_empty() && intent {
                deferred = self.defer_notifications(batch.wake_worker);
            }
        } else {
            let e = outcome.as_ref().err().cloned();
            batch.written.drain(..).for_each(|fin| fin(e.as_ref()));
        }
        // Counters and the change notification move before anyone is answered, so an
        // acknowledged caller always observes its own commit in them.
        self.note_batch(jobs_n, batch.records.len() as u64);
        let committed = match outcome {
            Ok(()) => {
                if !self.unsynced {
                    self.mark_durable();
                }
                if !batch.records.is_empty() && !deferred {
                    self.shared.bump_changes();
                    if batch.wake_worker {
                        self.shared.bump_worker();
                    }
                }
                batch.durable.drain(..).for_each(|fin| fin(None));
                !batch.records.is_empty()
            }
            Err(e) => {
                self.poison(&e);
                batch.durable.drain(..).for_each(|fin| fin(Some(&e)));
                false
            }
        };
        // The waiter lists are empty again: the next batch reuses them.
        self.waiters = [batch.durable, batch.written, batch.applied];
        committed
    }

    /// Applies a batch's writes under the write lock of the committed state; `None` (every
    /// waiter answered with the error) when the store is poisoned.
    fn apply(&mut self, writes: &mut Vec<(WriteFn, Ack, Wake)>) -> Option<Applied> {
        let now = crate::clock::now_ms();
        // Read in place, not cloned per batch: only `set_live`/`set_ended` take this lock,
        // never while holding the committed state.
        let recipients = self.recipients.read();
        let [durable, written, applied] = std::mem::take(&mut self.waiters);
        let mut out = Applied {
            records: Vec::new(),
            durable,
            written,
            applied,
            wake_worker: false,
        };
        let mut c = self.shared.committed.write();
        if let Some(err) = c.poisoned.clone() {
            drop(c);
            let lazy = writes.iter().filter(|w| w.1 == Ack::Applied).count() as u64;
            for (f, _, _) in writes.drain(..) {
                f(Err(&err)).1(Some(&err));
            }
            if lazy > 0 {
                self.shared.note_lazy_applied(lazy);
            }
            return None;
        }
        let pushes_before = c.machine.state().next_push;
        let mut lazy = 0;
        for (f, ack, wake) in writes.drain(..) {
            let (recs, fin) = f(Ok((&mut c.machine, &*recipients, now)));
            out.wake_worker |= wake == Wake::Worker && !recs.is_empty();
            // A batch of one write (the common case) keeps that write's own list.
            if out.records.is_empty() {
                out.records = recs;
            } else {
                out.records.extend(recs);
            }
            match ack {
                Ack::Durable => out.durable.push(fin),
                Ack::Applied => {
                    lazy += 1;
                    out.applied.push(fin);
                }
                Ack::Written => out.written.push(fin),
            }
        }
        out.wake_worker |= c.machine.state().next_push != pushes_before;
        if !out.records.is_empty() {
            c.applied += 1;
        }
        drop(c);
        if lazy > 0 {
            self.shared.note_lazy_applied(lazy);
        }
        Some(out)
    }

    /// [`prealloc_target`] for this journal, capped at its compaction trigger.
    fn prealloc_target(&self, len: u64, alloc: u64) -> Option<u64> {
        let cap = self
            .shared
            .committed
            .read()
            .machine
            .compaction_trigger(self.snapshot_bytes);
        prealloc_target(len, alloc, self.prealloc_chunk, cap)
    }

    /// Adds the next chunk of zero-filled room when little is left: zeros written and
    /// fdatasynced before any frame is written into them, so that sync carries the new size
    /// and block map once, and the commits after it sync data only. The sync also covers a
    /// deferred frame. Runs after a batch is answered, never on a commit's path.
    pub(crate) fn maybe_extend(&mut self) -> Result<()> {
        if self.room_refused {
            return Ok(());
        }
        let Some(target) = self.prealloc_target(self.len, self.alloc) else {
            return Ok(());
        };
        let size = add_room(&self.file, self.alloc, target);
        if size < target {
            // Frames written into what was added sync the new size with them.
            self.room_refused = true;
            self.alloc = size;
            return Ok(());
        }
        self.sync_data()?;
        self.alloc = target;
        self.durable_room = target;
        self.mark_durable();
        Ok(())
    }

    fn sync_point(&self) -> super::syncpoint::SyncPoint {
        super::syncpoint::SyncPoint {
            generation: self.generation,
            length: self.len,
            batches: self.batch_no,
        }
    }

    fn poison(&mut self, cause: &Error) {
        self.shared.committed.write().poisoned = Some(Error::new(
            Code::RecoveryRequired,
            format!(
                "the message store stopped after a failed write ({}); restart the root to recover from the journal",
                cause.message
            ),
        ));
        self.shared.stats.lock().poisoned = true;
        // Waiters (the root worker among them) see the store degraded now, not at a deadline.
        self.shared.wake_progress();
        self.shared.bump_changes();
        self.shared.bump_worker();
    }

    fn note_batch(&self, jobs: u64, records: u64) {
        let mut s = self.shared.stats.lock();
        s.jobs += jobs;
        s.records += records;
        s.max_batch = s.max_batch.max(jobs);
        s.journal_bytes = self.len;
        s.generation = self.generation;
    }

    /// Writes one frame and its end mark at the logical end, over the previous mark (into the
    /// preallocated room when it fits), with one write; the caller makes it (and any deferred
    /// frame before it) durable with one fdatasync, which so makes the mark durable with it:
    /// the commit mark costs no write, sync or device request of its own (see `journal`).
    fn append(&mut self, records: &[Record]) -> Result<()> {
        let batch = self.batch_no + 1;
        let mut frame = journal::encode_frame(batch, records)?;
        let own = journal::seal(&mut frame, self.len, self.generation, batch);
        // The path is built only for an error: a join allocates, once per batch otherwise.
        self.file
            .write_all_at(&frame, self.len)
            .map_err(|e| Error::io("cannot append to", &self.dir.join(paths::JOURNAL), &e))?;
        self.unsynced = true;
        self.unsynced_since
            .get_or_insert_with(std::time::Instant::now);
        self.len += own as u64;
        self.alloc = self.alloc.max(self.len + journal::MARK_BYTES as u64);
        self.batch_no = batch;
        self.shared.stats.lock().batches += 1;
        Ok(())
    }

    /// Compacts once the journal passes its threshold. Crash points (generation g → g+1):
    ///  A. before the snapshot rename: old snapshot (covers g−1) + journal g → replay g.
    ///  B. after the snapshot rename (even before its dir fsync is known to be durable):
    ///     either the old snapshot + journal g (as A), or the new snapshot (covers g) + journal
    ///     g, whose records recovery then ignores: no loss, no duplicate.
    ///  C. new journal temp written, not renamed: as B; the stale temp is removed at open.
    ///  D. after the journal rename, before the dir fsync: journal g (covered) or g+1 (empty).
    ///
    /// Only after D is any record appended to generation g+1. Any failure from B on could leave
    /// a covered journal behind, where appended records would be ignored, so it poisons.
    fn maybe_compact(&mut self) -> Result<()> {
        let written = {
            let c = self.shared.committed.read();
            if self.len < c.machine.compaction_trigger(self.snapshot_bytes) {
                return Ok(());
            }
            snapshot::write(
                &self.dir.join(paths::SNAPSHOT),
                c.machine.state(),
                self.generation,
            )?
        };
        self.snapshot_bytes = written;
        let next = self.generation + 1;
        let header = journal::HEADER_BYTES as u64;
        let size = self.prealloc_target(header, header).unwrap_or(header);
        (self.file, self.alloc) = create_journal(&self.dir, next, size)?;
        self.room_refused = self.alloc < size;
        // The durable snapshot holds every record, deferred ones included.
        self.unsynced = false;
        self.unsynced_since = None;
        self.synced_len = journal::HEADER_BYTES as u64;
        self.durable_room = self.alloc;
        self.mark_durable();
        self.generation = next;
        self.len = journal::HEADER_BYTES as u64;
        self.batch_no = 0;
        super::write_sync_point(&self.dir, &self.sync_point())?;
        let mut s = self.shared.stats.lock();
        s.compactions += 1;
        s.snapshot_bytes = written;
        s.snapshot_bytes_written += written;
        s.journal_bytes = self.len;
        s.generation = next;
        Ok(())
    }
}
