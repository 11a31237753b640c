//! Reading a store without changing it: identity association, snapshot + journal replay with
//! torn-tail classification, and `recover_unread` for operator review of an old instance.

use super::{journal, paths, snapshot, syncpoint};
use crate::config::Limits;
use crate::error::{Code, Error, Result};
use crate::fsutil;
use crate::messaging::{InboxEntry, Machine, OutboxEntry, State};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// `identity.json`: which saved session this inbox incarnation belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoreIdentity {
    pub format: u32,
    pub instance_id: String,
    pub session_id: String,
    pub created_at_ms: u64,
}

use crate::config::internal::IDENTITY_FILE_BYTES_MAX;

/// Largest snapshot or journal file read: the storage bound with room for JSON escaping
/// (≤ 6× per content byte) and one commit batch past the compaction threshold.
pub fn file_bytes_max(limits: &Limits) -> u64 {
    limits
        .storage_bytes
        .saturating_mul(8)
        .saturating_add(frame_bytes_max(limits))
        .max(1 << 20)
}

/// Bound of one journal frame: `commitBatch` operations, each carrying at most one
/// `messageBytes` string (content or context note, ≤ 6× when escaped) plus small records.
pub fn frame_bytes_max(limits: &Limits) -> u64 {
    let per_op = limits
        .message_bytes
        .saturating_mul(6)
        .saturating_add(16 * 1024);
    limits.commit_batch.saturating_mul(per_op)
}

pub fn read_identity(dir: &Path) -> Result<Option<StoreIdentity>> {
    let path = dir.join(paths::IDENTITY);
    let bytes = match fsutil::read_private_bounded(&path, IDENTITY_FILE_BYTES_MAX) {
        Ok(b) => b,
        Err(e) if e.code == Code::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    serde_json::from_slice(&bytes).map(Some).map_err(|e| {
        Error::new(
            Code::RecoveryRequired,
            format!(
                "{} cannot be parsed ({e}); preserve it and inspect",
                path.display()
            ),
        )
    })
}

/// Checks that `id` is the association of `instance_id` with `session_id`.
pub fn check_identity(id: &StoreIdentity, instance_id: &str, session_id: &str) -> Result<()> {
    if id.instance_id != instance_id {
        return Err(Error::new(
            Code::RecoveryRequired,
            format!(
                "identity.json names instance {}, not {instance_id}; the directory was moved or copied",
                id.instance_id
            ),
        ));
    }
    if id.session_id != session_id {
        return Err(Error::new(
            Code::ScopeDenied,
            format!(
                "inbox {instance_id} belongs to another saved session; pass that session's id to review it"
            ),
        ));
    }
    Ok(())
}

/// What the journal file on disk means relative to the snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JournalFile {
    /// No journal and no snapshot: a fresh store.
    Fresh,
    /// The snapshot already covers this journal (crash between snapshot and journal swap).
    Covered { generation: u64 },
    /// Replayed; `torn_bytes` past `valid_len` were never acknowledged. `marked`: it carries
    /// end marks (an older journal is replaced by a marked generation at open).
    Live {
        generation: u64,
        valid_len: u64,
        torn_bytes: u64,
        batches: u64,
        marked: bool,
    },
}

/// A store's state as recovered from disk, read-only.
#[derive(Debug)]
pub struct Loaded {
    pub state: State,
    /// The journal generation the snapshot covers (0 without a snapshot).
    pub covered: u64,
    pub journal: JournalFile,
    pub snapshot_bytes: u64,
}

impl Loaded {
    /// (bytes, batches) of the torn tail recovery discards: at most one partial batch, since
    /// only the last frame can be torn.
    pub fn torn_tail(&self) -> (u64, u64) {
        match self.journal {
            JournalFile::Live { torn_bytes, .. } if torn_bytes > 0 => (torn_bytes, 1),
            _ => (0, 0),
        }
    }
}

fn read_optional(path: &Path, max: u64) -> Result<Option<Vec<u8>>> {
    match fsutil::read_private_bounded(path, max) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.code == Code::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Loads snapshot + journal without modifying anything. Corruption, or a journal holding less
/// than its last known sync point (`messages.sync`), is `RECOVERY_REQUIRED`.
pub fn load(dir: &Path, limits: &Limits) -> Result<Loaded> {
    let sync = read_optional(&dir.join(paths::SYNC), 4096)?
        .map(|b| syncpoint::decode(&b))
        .transpose()?;
    let loaded = load_files(dir, limits).map_err(|e| match &sync {
        // How much the damage may cover: what the last sync point knew was committed.
        Some(p) if e.code == Code::RecoveryRequired => Error::new(
            e.code,
            format!(
                "{} (the last sync point counted {} committed batches, {} bytes, in journal generation {})",
                e.message, p.batches, p.length, p.generation
            ),
        ),
        _ => e,
    })?;
    match sync {
        Some(p) => check_sync_point(&p, loaded.covered, &loaded.journal)?,
        None => check_no_sync_point(&loaded)?,
    }
    Ok(loaded)
}

/// Refuses a store written by this format that holds records but no `messages.sync`: it is
/// written at every open, before any frame, so only an empty store, or one written before end
/// marks (format 1, replaced at this open), can lack it.
fn check_no_sync_point(loaded: &Loaded) -> Result<()> {
    match loaded.journal {
        JournalFile::Live {
            marked: true,
            batches,
            ..
        } if batches > 0 || loaded.covered > 0 => Err(syncpoint::refused(format!(
            "messages.sync is missing, but the store holds a snapshot of generation {} and {batches} journal batches: the record of how far it committed is gone",
            loaded.covered
        ))),
        _ => Ok(()),
    }
}

fn load_files(dir: &Path, limits: &Limits) -> Result<Loaded> {
    let max = file_bytes_max(limits);
    let snap = read_optional(&dir.join(paths::SNAPSHOT), max)?;
    let snapshot_bytes = snap.as_ref().map_or(0, |b| b.len() as u64);
    let (covered, mut state) = match &snap {
        Some(bytes) => {
            let (g, image) = snapshot::decode(bytes)?;
            (g, State::from_image(image))
        }
        None => (0, State::default()),
    };
    let Some(bytes) = read_optional(&dir.join(paths::JOURNAL), max)? else {
        if snap.is_some() {
            return Err(Error::new(
                Code::RecoveryRequired,
                format!(
                    "{} has a snapshot but no messages.journal; records may be missing, inspect before recovering",
                    dir.display()
                ),
            ));
        }
        return Ok(Loaded {
            state,
            covered,
            journal: JournalFile::Fresh,
            snapshot_bytes,
        });
    };
    let generation = journal::decode_header(&bytes)?;
    if generation <= covered {
        return Ok(Loaded {
            state,
            covered,
            journal: JournalFile::Covered { generation },
            snapshot_bytes,
        });
    }
    if generation != covered + 1 {
        return Err(Error::new(
            Code::RecoveryRequired,
            format!(
                "messages.journal is generation {generation} but the snapshot covers only {covered}; a snapshot is missing"
            ),
        ));
    }
    let journal = replay_journal(&mut state, &bytes, generation, limits)?;
    Ok(Loaded {
        state,
        covered,
        journal,
        snapshot_bytes,
    })
}

/// Applies every complete batch of a live journal (generation `generation`, the one after the
/// snapshot) to `state`, refusing a record that contradicts it, and describes the journal:
/// its valid length, the torn tail recovery discards, its batch count.
fn replay_journal(
    state: &mut State,
    bytes: &[u8],
    generation: u64,
    limits: &Limits,
) -> Result<JournalFile> {
    let scan = journal::scan(bytes, frame_bytes_max(limits))?;
    for (n, batch) in scan.batches.iter().enumerate() {
        for r in batch {
            if !state.fits(r) {
                return Err(Error::new(
                    Code::RecoveryRequired,
                    format!(
                        "messages.journal batch {} holds a record that contradicts the stored state; preserve the store and inspect",
                        n + 1
                    ),
                ));
            }
            state.apply(r);
        }
    }
    Ok(JournalFile::Live {
        generation,
        valid_len: scan.valid_len,
        torn_bytes: scan.torn_bytes,
        batches: scan.batches.len() as u64,
        marked: scan.marked,
    })
}

/// Refuses a journal that holds less than the sync point proves was acknowledged. `covered` is
/// the generation the snapshot includes.
pub fn check_sync_point(
    p: &syncpoint::SyncPoint,
    covered: u64,
    journal: &JournalFile,
) -> Result<()> {
    let missing = |what: String| {
        syncpoint::refused(format!(
            "{what}, but its last known sync point is generation {} with {} batches ({} bytes): acknowledged records are missing",
            p.generation, p.batches, p.length
        ))
    };
    if p.generation < covered {
        // A sync point is written whenever a generation goes live, before its snapshot can
        // exist: one older than the snapshot was replaced by an old copy.
        return Err(syncpoint::refused(format!(
            "messages.sync names generation {}, older than the snapshot (generation {covered}); it is not this store's last sync point",
            p.generation
        )));
    }
    match journal {
        JournalFile::Fresh if p.batches > 0 || p.generation > 1 => {
            Err(missing("messages.journal is missing".into()))
        }
        JournalFile::Fresh => Ok(()),
        // The snapshot includes every record of generations up to `covered`.
        JournalFile::Covered { .. } if p.generation <= covered => Ok(()),
        JournalFile::Covered { generation } => Err(missing(format!(
            "messages.journal is generation {generation}, already covered by the snapshot"
        ))),
        JournalFile::Live {
            generation,
            valid_len,
            batches,
            ..
        } => {
            if p.generation > *generation {
                return Err(missing(format!(
                    "messages.journal is generation {generation}"
                )));
            }
            if p.generation < *generation && *batches > 0 {
                // Generation g goes live with its sync point written before any frame.
                return Err(syncpoint::refused(format!(
                    "messages.sync names generation {}, older than messages.journal (generation {generation}, {batches} batches); it is not this store's last sync point",
                    p.generation
                )));
            }
            if p.generation == *generation && (*batches < p.batches || *valid_len < p.length) {
                return Err(missing(format!(
                    "messages.journal holds {batches} complete batches ({valid_len} bytes)"
                )));
            }
            Ok(())
        }
    }
}

/// What an old instance's store holds for review.
#[derive(Clone, Debug, Default)]
pub struct Review {
    /// Unconsumed messages it accepted.
    pub unread: Vec<InboxEntry>,
    /// Messages it sent that never got a custody answer.
    pub unresolved: Vec<OutboxEntry>,
    /// Bytes of a torn, never-acknowledged journal tail a recovery would discard.
    pub torn_tail_bytes: u64,
    /// Partial batches (0 or 1) in that tail.
    pub torn_tail_batches: u64,
}

/// Opens an old instance's store read-only, checks that it belongs to `expected_session_id`,
/// and returns its unconsumed messages for explicit operator review. Nothing is moved,
/// truncated or rewritten (a torn tail is ignored in memory only). Errors: NOT_FOUND (no such
/// store), SCOPE_DENIED (another session's inbox), RECOVERY_REQUIRED (corrupt or foreign).
pub fn recover_unread(
    home: &Path,
    instance_id: &str,
    expected_session_id: &str,
    limits: &Limits,
) -> Result<Vec<InboxEntry>> {
    Ok(review(home, instance_id, expected_session_id, limits)?.unread)
}

/// Like [`recover_unread`], with the unresolved outbox entries and the torn tail too.
pub fn review(
    home: &Path,
    instance_id: &str,
    expected_session_id: &str,
    limits: &Limits,
) -> Result<Review> {
    if !crate::identity::is_valid_id(instance_id) {
        return Err(Error::new(
            Code::Usage,
            "instanceId must be an id such as i-0123456789abcdef",
        ));
    }
    let dir = paths::store_dir(home, instance_id);
    fsutil::check_private_dir(&dir)?;
    let id = read_identity(&dir)?.ok_or_else(|| {
        Error::new(
            Code::RecoveryRequired,
            format!(
                "{} has no identity.json; its session cannot be verified",
                dir.display()
            ),
        )
    })?;
    check_identity(&id, instance_id, expected_session_id)?;
    let loaded = load(&dir, limits)?;
    let (torn_tail_bytes, torn_tail_batches) = loaded.torn_tail();
    let m = Machine::from_state(loaded.state, limits.clone());
    let mut unresolved: Vec<OutboxEntry> = m.state().unresolved_outbox().cloned().collect();
    unresolved.sort_by_key(|e| e.order);
    Ok(Review {
        unread: m.unread(),
        unresolved,
        torn_tail_bytes,
        torn_tail_batches,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::syncpoint::SyncPoint;

    #[test]
    fn a_journal_below_its_sync_point_is_refused() {
        let p = SyncPoint {
            generation: 3,
            length: 4_096,
            batches: 17,
        };
        let live = |generation, valid_len, batches| JournalFile::Live {
            generation,
            valid_len,
            torn_bytes: 0,
            batches,
            marked: true,
        };
        assert!(check_sync_point(&p, 2, &live(3, 4_096, 17)).is_ok());
        assert!(check_sync_point(&p, 2, &live(3, 5_000, 20)).is_ok());
        assert!(
            check_sync_point(&p, 3, &live(4, 32, 0)).is_ok(),
            "compacted since"
        );
        assert!(check_sync_point(&p, 3, &JournalFile::Covered { generation: 3 }).is_ok());
        for bad in [live(3, 4_000, 16), live(3, 4_096, 16), live(2, 9_000, 40)] {
            assert_eq!(
                check_sync_point(&p, 2, &bad).unwrap_err().code,
                Code::RecoveryRequired,
                "{bad:?}"
            );
        }
        assert!(check_sync_point(&p, 2, &JournalFile::Covered { generation: 2 }).is_err());
        assert!(check_sync_point(&p, 0, &JournalFile::Fresh).is_err());
    }

    /// A sync point is written whenever a generation goes live, before its first frame and
    /// before any snapshot of it: one older than the snapshot, or older than a journal that
    /// holds frames, was replaced by an old copy; a marked store with records and none at all
    /// lost it.
    #[test]
    fn an_older_or_missing_sync_point_is_refused() {
        let at = |generation| SyncPoint {
            generation,
            length: 32,
            batches: 0,
        };
        let live = |generation, batches, marked| JournalFile::Live {
            generation,
            valid_len: 32 + 100 * batches,
            torn_bytes: 0,
            batches,
            marked,
        };
        // The crash window of a compaction: journal g+1 created, its sync point not yet.
        assert!(check_sync_point(&at(2), 2, &live(3, 0, true)).is_ok());
        assert!(check_sync_point(&at(2), 2, &live(3, 4, true)).is_err());
        assert!(check_sync_point(&at(1), 2, &live(3, 0, true)).is_err());
        assert!(check_sync_point(&at(1), 2, &JournalFile::Covered { generation: 2 }).is_err());
        let loaded = |journal, covered| Loaded {
            state: State::default(),
            covered,
            journal,
            snapshot_bytes: 0,
        };
        assert!(check_no_sync_point(&loaded(live(1, 3, true), 0)).is_err());
        assert!(check_no_sync_point(&loaded(live(3, 0, true), 2)).is_err());
        assert!(
            check_no_sync_point(&loaded(live(1, 0, true), 0)).is_ok(),
            "a new store"
        );
        assert!(
            check_no_sync_point(&loaded(live(1, 3, false), 0)).is_ok(),
            "written before sync points and end marks"
        );
    }

    #[test]
    fn a_preallocated_journal_is_checked_at_its_logical_length() {
        use crate::messaging::Record;
        let mut f = journal::encode_header_version(3, journal::FORMAT_VERSION_UNMARKED).to_vec();
        for n in 1..=3 {
            f.extend(journal::encode_frame(n, &[Record::PushDone { cursor: n }]).unwrap());
        }
        let logical = f.len() as u64;
        let scanned = |bytes: &[u8]| {
            let s = journal::scan(bytes, 1 << 20).unwrap();
            JournalFile::Live {
                generation: s.generation,
                valid_len: s.valid_len,
                torn_bytes: s.torn_bytes,
                batches: s.batches.len() as u64,
                marked: s.marked,
            }
        };
        let mut room = f.clone();
        room.resize(64 * 1024, 0);
        let live = scanned(&room);
        assert_eq!(
            live,
            JournalFile::Live {
                generation: 3,
                valid_len: logical,
                torn_bytes: 0,
                batches: 3,
                marked: false,
            }
        );
        let at = |length, batches| SyncPoint {
            generation: 3,
            length,
            batches,
        };
        assert!(check_sync_point(&at(logical, 3), 2, &live).is_ok());
        // The file's size is room, not acknowledged bytes: a sync point past the logical end
        // (an acknowledged frame zeroed out) is refused however large the file is.
        assert!(check_sync_point(&at(logical + 1, 3), 2, &live).is_err());
        let mut zeroed = room.clone();
        zeroed[logical as usize - 5..logical as usize].fill(0);
        let cut = scanned(&zeroed);
        assert!(check_sync_point(&at(logical, 3), 2, &cut).is_err());
    }
}
