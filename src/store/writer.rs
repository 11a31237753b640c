//! The store-writer thread: the only writer of an instance store. It drains up to
//! `commitBatch` queued jobs, answers reads from the already-durable state, applies every
//! write to the state machine, appends all their records as one frame with one write and one
//! fdatasync, then answers the waiters. A failed write or sync answers that batch with the
//! error and poisons the writer: nothing later is acknowledged until the root restarts and
//! recovers from the journal. Compaction runs after the batch is answered.

use super::changes::Shared;
use super::{journal, paths, snapshot};
use crate::error::{Code, Error, Result};
use crate::fsutil::{self, FileLock};
use crate::messaging::{Machine, Recipients, Record};
use crossbeam_channel::{Receiver, Sender};
use parking_lot::RwLock;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;

/// Called once the batch holding a write is durable (`None`) or failed (`Some(error)`).
pub(crate) type Finish = Box<dyn FnOnce(Option<&Error>) + Send>;
pub(crate) type WriteFn = Box<
    dyn FnOnce(
            std::result::Result<(&mut Machine, &Recipients, u64), &Error>,
        ) -> (Vec<Record>, Finish)
        + Send,
>;
pub(crate) type ReadFn = Box<dyn FnOnce(std::result::Result<&Machine, &Error>) + Send>;

pub(crate) enum Job {
    Read(ReadFn),
    Write(WriteFn),
    Shutdown(Sender<()>),
}

/// Test-only fault injection: fail the fdatasync with this 1-based number.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Faults {
    pub fail_sync_at: Option<u64>,
}

pub(crate) struct Writer {
    pub dir: PathBuf,
    pub file: File,
    pub len: u64,
    pub generation: u64,
    pub batch_no: u64,
    /// Size of the current snapshot (0 before the first): the next compaction waits for
    /// about as many journal bytes (see `Machine::compaction_trigger`).
    pub snapshot_bytes: u64,
    pub machine: Machine,
    pub recipients: Arc<RwLock<Recipients>>,
    pub shared: Arc<Shared>,
    pub poisoned: Option<Error>,
    pub faults: Faults,
    pub _lock: FileLock,
}

/// Creates journal `generation` durably: temp file, header, fsync, rename, fsync dir.
pub(crate) fn create_journal(dir: &std::path::Path, generation: u64) -> Result<File> {
    let tmp = dir.join(paths::JOURNAL_TMP);
    match std::fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io("cannot remove", &tmp, &e)),
    }
    let mut f = fsutil::create_private_new(&tmp)?;
    f.write_all(&journal::encode_header(generation))
        .map_err(|e| Error::io("cannot write", &tmp, &e))?;
    f.sync_data()
        .map_err(|e| Error::io("cannot fsync", &tmp, &e))?;
    let path = dir.join(paths::JOURNAL);
    std::fs::rename(&tmp, &path).map_err(|e| Error::io("cannot rename onto", &path, &e))?;
    fsutil::fsync_dir(dir)?;
    Ok(f)
}

impl Writer {
    pub fn run(mut self, rx: Receiver<Job>) {
        let batch_max = self.machine.limits().commit_batch.max(1) as usize;
        while let Ok(first) = rx.recv() {
            let mut jobs = Vec::with_capacity(batch_max.min(1024));
            jobs.push(first);
            while jobs.len() < batch_max {
                match rx.try_recv() {
                    Ok(j) => jobs.push(j),
                    Err(_) => break,
                }
            }
            if self.run_batch(jobs) {
                break;
            }
        }
    }

    /// One group commit; returns true when asked to shut down.
    fn run_batch(&mut self, jobs: Vec<Job>) -> bool {
        let jobs_n = jobs.len() as u64;
        let mut writes = Vec::new();
        let mut stop = None;
        // Reads first: the state here is exactly what earlier batches made durable.
        for job in jobs {
            match job {
                Job::Read(f) => f(self.poisoned.as_ref().map_or(Ok(&self.machine), Err)),
                Job::Write(f) => writes.push(f),
                Job::Shutdown(tx) => stop = Some(tx),
            }
        }
        let committed = self.commit_writes(writes, jobs_n);
        if committed
            && self.poisoned.is_none()
            && let Err(e) = self.maybe_compact()
        {
            self.poison(&e);
        }
        if let Some(tx) = stop {
            // A clean close records how far the journal was acknowledged.
            if self.poisoned.is_none() {
                let _ = super::write_sync_point(&self.dir, &self.sync_point());
            }
            let _ = tx.send(());
            return true;
        }
        false
    }

    /// Applies the batch's writes, makes their records durable with one write + one
    /// fdatasync, then answers each waiter. Returns true when records were committed.
    fn commit_writes(&mut self, writes: Vec<WriteFn>, jobs_n: u64) -> bool {
        if let Some(err) = self.poisoned.clone() {
            for f in writes {
                f(Err(&err)).1(Some(&err));
            }
            self.note_batch(jobs_n, 0);
            return false;
        }
        let now = crate::clock::now_ms();
        let recipients = self.recipients.read().clone();
        let mut records = Vec::new();
        let mut finishes = Vec::with_capacity(writes.len());
        for f in writes {
            let (recs, fin) = f(Ok((&mut self.machine, &recipients, now)));
            records.extend(recs);
            finishes.push(fin);
        }
        let outcome = if records.is_empty() {
            Ok(())
        } else {
            self.append(&records)
        };
        // Counters and the change notification move before anyone is answered, so an
        // acknowledged caller always observes its own commit in them.
        self.note_batch(jobs_n, records.len() as u64);
        match outcome {
            Ok(()) => {
                if !records.is_empty() {
                    self.shared.bump_changes();
                }
                finishes.into_iter().for_each(|fin| fin(None));
                !records.is_empty()
            }
            Err(e) => {
                self.poison(&e);
                finishes.into_iter().for_each(|fin| fin(Some(&e)));
                false
            }
        }
    }

    fn sync_point(&self) -> super::syncpoint::SyncPoint {
        super::syncpoint::SyncPoint {
            generation: self.generation,
            length: self.len,
            batches: self.batch_no,
        }
    }

    fn poison(&mut self, cause: &Error) {
        self.poisoned = Some(Error::new(
            Code::RecoveryRequired,
            format!(
                "the message store stopped after a failed write ({}); restart the root to recover from the journal",
                cause.message
            ),
        ));
        self.shared.stats.lock().poisoned = true;
        // Waiters (the root worker among them) see the store degraded now, not at a deadline.
        self.shared.bump_changes();
    }

    fn note_batch(&self, jobs: u64, records: u64) {
        let mut s = self.shared.stats.lock();
        s.jobs += jobs;
        s.records += records;
        s.max_batch = s.max_batch.max(jobs);
        s.journal_bytes = self.len;
        s.generation = self.generation;
    }

    /// Appends one frame with one write and makes it durable with one fdatasync.
    fn append(&mut self, records: &[Record]) -> Result<()> {
        let batch = self.batch_no + 1;
        let frame = journal::encode_frame(batch, records)?;
        let path = self.dir.join(paths::JOURNAL);
        self.file
            .write_all_at(&frame, self.len)
            .map_err(|e| Error::io("cannot append to", &path, &e))?;
        let sync_no = self.shared.stats.lock().syncs + 1;
        if self.faults.fail_sync_at == Some(sync_no) {
            return Err(Error::new(
                Code::Io,
                format!("injected fdatasync failure at sync {sync_no}"),
            ));
        }
        self.file
            .sync_data()
            .map_err(|e| Error::io("cannot fdatasync", &path, &e))?;
        self.len += frame.len() as u64;
        self.batch_no = batch;
        let mut s = self.shared.stats.lock();
        s.syncs += 1;
        s.batches += 1;
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
        if self.len < self.machine.compaction_trigger(self.snapshot_bytes) {
            return Ok(());
        }
        let written = snapshot::write(
            &self.dir.join(paths::SNAPSHOT),
            self.machine.state(),
            self.generation,
        )?;
        self.snapshot_bytes = written;
        let next = self.generation + 1;
        self.file = create_journal(&self.dir, next)?;
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
