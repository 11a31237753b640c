//! The state the store-writer thread and its handles share: the writer's counters and the
//! change notification (a counter plus a condition variable) that readers block on.

use parking_lot::{Condvar, Mutex};

/// Counters of the writer, for tests, benchmarks and `peer bench`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Jobs (reads and writes) taken from the queue.
    pub jobs: u64,
    /// Batches that wrote a frame.
    pub batches: u64,
    /// fdatasync calls on the journal (one per written batch).
    pub syncs: u64,
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

/// What the writer thread and every handle share: the counters and the change count readers
/// wait on.
pub(crate) struct Shared {
    pub stats: Mutex<StoreStats>,
    pub changes: Mutex<u64>,
    pub changed: Condvar,
}

impl Shared {
    pub fn new(stats: StoreStats) -> Shared {
        Shared {
            stats: Mutex::new(stats),
            changes: Mutex::new(0),
            changed: Condvar::new(),
        }
    }

    pub fn bump_changes(&self) {
        *self.changes.lock() += 1;
        self.changed.notify_all();
    }
}
