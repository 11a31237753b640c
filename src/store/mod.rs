//! The durable message store of one root instance, `<home>/peer-messages/<instanceId>/`:
//! `identity.json` (session ↔ instance association), `messages.journal` (checksummed
//! group-commit frames written in order at its logical end, into zero-filled room the writer
//! preallocates; byte layout in [`journal`]) and `messages.json` (the
//! compacted snapshot; see [`snapshot`]). One writer ([`writer`]) owns the files, behind a
//! mutex: a submitting caller that finds it free runs the group commit itself, the writer
//! thread does the rest; [`StoreHandle`] is its cloneable front. Directory 0700, files 0600.
//!
//! Durability rules:
//! - A write is acknowledged only after the frame holding its records is fdatasynced.
//! - Recovery opens read-only first; a torn, never-acknowledged tail is truncated, any other
//!   checksum or parse failure is `RECOVERY_REQUIRED` with every file left as it was.
//! - Compaction writes the snapshot atomically and durably, then starts a new journal
//!   generation by temp file + rename + dir fsync; recovery ignores covered generations.
//! - Admission keeps snapshot + journal within `storageBytes` (see `Machine::storage_budget`).

mod changes;
pub mod flush;
pub(crate) mod handle;
pub mod journal;
mod oneshot;
pub mod recovery;
pub(crate) mod snapshot;
pub(crate) mod syncpoint;
pub(crate) mod writer;

#[cfg(test)]
mod compat_tests;
#[cfg(test)]
pub(crate) mod tests;

pub use changes::StoreStats;
pub use handle::{Applying, StoreHandle, SyncTicket};
pub use recovery::{Review, StoreIdentity, recover_unread, review};
pub use writer::{HOLD_SYNC_ENV, UNFLUSHED_ENV};

use crate::config::Limits;
use crate::error::{Code, Error, Result};
use crate::fsutil::{self, Durability, FileLock};
use crate::messaging::{Machine, Recipients};
use changes::Shared;
use parking_lot::RwLock;
use recovery::JournalFile;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use writer::{Faults, Job, Writer};

/// File names inside a store directory.
pub mod paths {
    pub const IDENTITY: &str = "identity.json";
    pub const SNAPSHOT: &str = "messages.json";
    pub const JOURNAL: &str = "messages.journal";
    pub const JOURNAL_TMP: &str = "messages.journal.tmp";
    pub const LOCK: &str = "messages.lock";
    pub const SYNC: &str = "messages.sync";
    pub const SYNC_TMP_PREFIX: &str = ".messages.sync.";

    pub use crate::paths::messages_dir as store_dir;
}

/// An open store: the writer thread and a handle on it.
pub struct Store {
    handle: StoreHandle,
    thread: Option<std::thread::JoinHandle<()>>,
    dir: PathBuf,
}

impl Store {
    /// Opens (creating if needed) the store of `instance_id`, bound to `session_id`, recovers
    /// it and starts its writer. Errors: RECOVERY_REQUIRED (corrupt or foreign store, nothing
    /// changed), SCOPE_DENIED (another session's inbox), UNSAFE_PATH, TIMEOUT (locked), IO.
    pub fn open(
        home: &Path,
        instance_id: &str,
        session_id: &str,
        limits: &Limits,
    ) -> Result<Store> {
        Store::open_with(home, instance_id, session_id, limits, Faults::from_env())
    }

    pub(crate) fn open_with(
        home: &Path,
        instance_id: &str,
        session_id: &str,
        limits: &Limits,
        faults: Faults,
    ) -> Result<Store> {
        if !crate::identity::is_valid_id(instance_id) || !crate::identity::is_valid_id(session_id) {
            return Err(Error::new(
                Code::Usage,
                "instanceId and sessionId must be ids such as i-0123456789abcdef",
            ));
        }
        let dir = paths::store_dir(home, instance_id);
        fsutil::ensure_private_dir(&dir)?;
        let lock = FileLock::acquire(&dir.join(paths::LOCK), limits.lock_ms)?;
        let identity = recovery::read_identity(&dir)?;
        if let Some(id) = &identity {
            recovery::check_identity(id, instance_id, session_id)?;
        }
        // Read-only first: nothing is touched unless the whole store verified.
        let loaded = recovery::load(&dir, limits)?;
        if identity.is_none() {
            if loaded.journal != JournalFile::Fresh {
                return Err(Error::new(
                    Code::RecoveryRequired,
                    format!(
                        "{} holds messages but no identity.json; its session cannot be verified",
                        dir.display()
                    ),
                ));
            }
            write_identity(&dir, instance_id, session_id)?;
        }
        let (torn_tail_bytes, torn_tail_batches) = loaded.torn_tail();
        let machine = Machine::from_state(loaded.state, limits.clone());
        let (journal_file, covered, snapshot_bytes) = replace_unmarked(
            &dir,
            &machine,
            loaded.journal,
            loaded.covered,
            loaded.snapshot_bytes,
        )?;
        let room = Room {
            chunk: writer::prealloc_chunk(limits),
            cap: machine.compaction_trigger(snapshot_bytes),
        };
        let (file, len, alloc, generation, batch_no) =
            prepare_journal(&dir, &journal_file, covered, room)?;
        remove_stale_temps(&dir);
        // Everything recovered is durable now: later recoveries must find at least this much.
        write_sync_point(
            &dir,
            &syncpoint::SyncPoint {
                generation,
                length: len,
                batches: batch_no,
            },
        )?;
        let stats = StoreStats {
            journal_bytes: len,
            generation,
            snapshot_bytes,
            torn_tail_bytes,
            torn_tail_batches,
            ..StoreStats::default()
        };
        let shared = Arc::new(Shared::new(stats, machine));
        let recipients = Arc::new(RwLock::new(Recipients::default()));
        let (tx, rx) = crossbeam_channel::bounded(limits.commit_batch.max(1) as usize);
        let mut device = flush::Device::of(&file);
        device.flushes &= !faults.unflushed;
        let writer = Writer {
            dir: dir.clone(),
            file,
            len,
            alloc,
            prealloc_chunk: room.chunk,
            room_refused: false,
            generation,
            batch_no,
            unsynced: false,
            unsynced_since: None,
            synced_len: len,
            durable_room: alloc,
            snapshot_bytes,
            recipients: recipients.clone(),
            shared: shared.clone(),
            faults,
            lock: Some(lock),
            rx: rx.clone(),
            batch_max: limits.commit_batch.max(1) as usize,
            jobs: Vec::new(),
            writes: Vec::new(),
            waiters: Default::default(),
            receipt_due: false,
            deferred_notices: None,
            closed: false,
        };
        let core = Arc::new(parking_lot::Mutex::new(writer));
        let thread = spawn_writer(core.clone(), shared.clone(), rx, instance_id)?;
        let handle = StoreHandle {
            tx,
            core,
            shared,
            recipients,
            limits: Arc::new(limits.clone()),
            device,
        };
        Ok(Store {
            handle,
            thread: Some(thread),
            dir,
        })
    }

    pub fn handle(&self) -> StoreHandle {
        self.handle.clone()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Stops the writer after the jobs queued before this call, and waits for it. Later calls
    /// on remaining handles fail with DISCONNECTED.
    pub fn close(mut self) -> Result<()> {
        self.stop()
    }

    fn stop(&mut self) -> Result<()> {
        let Some(thread) = self.thread.take() else {
            return Ok(());
        };
        let (tx, rx) = crossbeam_channel::bounded(1);
        if self.handle.tx.send(Job::Shutdown(tx)).is_ok() {
            self.handle.shared.ring();
            let _ = rx.recv();
        }
        thread
            .join()
            .map_err(|_| Error::new(Code::Io, "the store writer thread panicked"))
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// Starts the writer thread of `core`, whose queue is `rx`.
fn spawn_writer(
    core: Arc<parking_lot::Mutex<Writer>>,
    shared: Arc<Shared>,
    rx: crossbeam_channel::Receiver<Job>,
    instance_id: &str,
) -> Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("store-writer-{instance_id}"))
        .spawn(move || writer::run_thread(core, shared, rx))
        .map_err(|e| {
            Error::new(
                Code::Io,
                format!("cannot start the store writer thread: {e}"),
            )
        })
}

/// Records a journal position as durable and acknowledged (`messages.sync`).
pub(crate) fn write_sync_point(dir: &Path, p: &syncpoint::SyncPoint) -> Result<()> {
    fsutil::atomic_write(
        &dir.join(paths::SYNC),
        &syncpoint::encode(p),
        Durability::Durable,
    )
}

fn write_identity(dir: &Path, instance_id: &str, session_id: &str) -> Result<()> {
    let id = StoreIdentity {
        format: 1,
        instance_id: instance_id.to_string(),
        session_id: session_id.to_string(),
        created_at_ms: crate::clock::now_ms(),
    };
    let bytes = serde_json::to_vec_pretty(&id)
        .map_err(|e| Error::new(Code::Io, format!("cannot encode identity.json: {e}")))?;
    fsutil::atomic_write(&dir.join(paths::IDENTITY), &bytes, Durability::Durable)
}

/// A journal written before end marks (format 1) is never appended to: its records go into a
/// snapshot covering its generation, exactly as a compaction writes one, and the next
/// generation starts marked (`prepare_journal` creates it). The crash points are a
/// compaction's (see `Writer::maybe_compact`). Returns the journal, the generation the
/// snapshot covers and the snapshot's size, as they are now.
fn replace_unmarked(
    dir: &Path,
    machine: &Machine,
    journal: JournalFile,
    covered: u64,
    snapshot_bytes: u64,
) -> Result<(JournalFile, u64, u64)> {
    match journal {
        JournalFile::Live {
            generation,
            marked: false,
            valid_len,
            batches,
            ..
        } => {
            // First the sync point of what verified (as every open writes one), so a crash
            // anywhere below finds one even in a store older than sync points.
            write_sync_point(
                dir,
                &syncpoint::SyncPoint {
                    generation,
                    length: valid_len,
                    batches,
                },
            )?;
            let written = snapshot::write(&dir.join(paths::SNAPSHOT), machine.state(), generation)?;
            Ok((JournalFile::Covered { generation }, generation, written))
        }
        other => Ok((other, covered, snapshot_bytes)),
    }
}

/// How the journal at open is preallocated: chunk size and the compaction trigger it stays
/// within (see `writer::prealloc_target`).
#[derive(Clone, Copy)]
struct Room {
    chunk: u64,
    cap: u64,
}

/// Makes the journal ready for appending: (file, logical length, file size, generation, last
/// batch number). The file gets its zero-filled room now if it has too little (an old journal
/// written before preallocation, or one cut at a torn tail), synced before any frame goes in.
fn prepare_journal(
    dir: &Path,
    journal: &JournalFile,
    covered: u64,
    room: Room,
) -> Result<(std::fs::File, u64, u64, u64, u64)> {
    let header = journal::HEADER_BYTES as u64;
    match journal {
        JournalFile::Fresh | JournalFile::Covered { .. } => {
            // Fresh store, or a crash between snapshot and journal swap: start generation
            // covered + 1 (the covered journal's records are all in the snapshot).
            let g = covered + 1;
            let size =
                writer::prealloc_target(header, header, room.chunk, room.cap).unwrap_or(header);
            let (file, size) = writer::create_journal(dir, g, size)?;
            Ok((file, header, size, g, 0))
        }
        JournalFile::Live {
            generation,
            valid_len,
            torn_bytes,
            batches,
            ..
        } => {
            let path = dir.join(paths::JOURNAL);
            let file = fsutil::open_private_rw(&path)?;
            if *torn_bytes > 0 {
                // The torn tail was never acknowledged (see journal.rs); cut it before appending.
                file.set_len(*valid_len)
                    .map_err(|e| Error::io("cannot truncate the torn tail of", &path, &e))?;
                file.sync_all()
                    .map_err(|e| Error::io("cannot fsync", &path, &e))?;
            }
            let mut alloc = file
                .metadata()
                .map_err(|e| Error::io("cannot stat", &path, &e))?
                .len();
            if let Some(target) = writer::prealloc_target(*valid_len, alloc, room.chunk, room.cap) {
                alloc = writer::add_room(&file, alloc, target);
            }
            // The end mark of what was recovered (again, or after a cut torn tail), durable
            // with the sync below before any frame is written over it.
            std::os::unix::fs::FileExt::write_all_at(
                &file,
                &journal::encode_mark(*generation, *batches),
                *valid_len,
            )
            .map_err(|e| Error::io("cannot write the end mark of", &path, &e))?;
            alloc = alloc.max(*valid_len + journal::MARK_BYTES as u64);
            // Frames a killed process wrote without a sync may still be only in the page
            // cache, and so may the file's size: what the sync point below claims, and what
            // the writer's write-outs count as durable room, is made durable here.
            file.sync_data()
                .map_err(|e| Error::io("cannot fdatasync", &path, &e))?;
            Ok((file, *valid_len, alloc, *generation, *batches))
        }
    }
}

/// Removes a closed store's directory: exactly the files a store creates, then the directory
/// (left in place if anything else is inside). Only for a store whose owner decided nothing
/// in it is needed any more.
pub fn remove_store_dir(dir: &Path) {
    for name in [
        paths::JOURNAL,
        paths::SNAPSHOT,
        paths::JOURNAL_TMP,
        paths::SYNC,
        paths::IDENTITY,
        paths::LOCK,
    ] {
        let _ = std::fs::remove_file(dir.join(name));
    }
    let _ = std::fs::remove_dir(dir);
}

/// Removes temp files a crash left behind (`messages.journal.tmp`, `.messages.json.*.tmp`,
/// `.messages.sync.*.tmp`).
fn remove_stale_temps(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let ours = name == paths::JOURNAL_TMP
            || ((name.starts_with(".messages.json.") || name.starts_with(paths::SYNC_TMP_PREFIX))
                && name.ends_with(".tmp"));
        if ours {
            let _ = std::fs::remove_file(e.path());
        }
    }
}
