//! Store tests on real temp files: reopen, torn tails at every offset, bit flips, compaction
//! crash points, group commit, poisoning, recover_unread, and a crash-at-sync-N model test.
#![allow(clippy::field_reassign_with_default)]

use super::*;
use crate::messaging::*;
use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;

pub(crate) const INSTANCE: &str = "i-00000000000000aa";
pub(crate) const SESSION: &str = "s-1";
pub(crate) const ME: &str = "p-me";

pub(crate) struct TempHome(pub(crate) fsutil::TempDir);

impl TempHome {
    pub(crate) fn new(tag: &str) -> TempHome {
        TempHome(fsutil::TempDir::new(&format!("store-{tag}")).unwrap())
    }
    fn dir(&self) -> PathBuf {
        paths::store_dir(&self.0, INSTANCE)
    }
}

pub(crate) fn limits() -> Limits {
    let mut l = Limits::default();
    l.rate_burst = 1_000_000;
    l.inbox_messages = 100_000;
    l
}

pub(crate) fn open(home: &TempHome, l: &Limits) -> Result<Store> {
    let s = Store::open(&home.0, INSTANCE, SESSION, l)?;
    s.handle().set_live(ME);
    Ok(s)
}

fn sender(n: u8) -> Principal {
    Principal {
        instance_id: format!("i-s{n}"),
        run_id: None,
        peer_id: format!("p-s{n}"),
    }
}

fn send(id: &str) -> InboundSend {
    InboundSend {
        origin: None,
        to_peer_id: ME.into(),
        message_id: id.into(),
        body: MessageBody {
            content: format!("content of {id}"),
            topic: None,
            reply_to: None,
        },
        correlation_id: None,
        expires_at_ms: None,
        from_alias: None,
    }
}

/// Waits until the writer finished everything before this call (stats, and the compaction
/// and preallocation a leader's batch leaves to the writer thread).
fn settle(h: &StoreHandle) {
    h.query_in_writer(|_| ()).unwrap();
    while h
        .shared
        .thread_wanted
        .load(std::sync::atomic::Ordering::Acquire)
        || h.core.lock().upkeep_due()
    {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Waits (bounded) until the writer thread sleeps between batches, holding no lock: a caller
/// then finds the writer free and leads its own batch.
fn wait_writer_asleep(h: &StoreHandle) {
    let start = std::time::Instant::now();
    while !h.shared.writer_sleeps() {
        assert!(
            start.elapsed().as_secs() < 20,
            "the writer thread never slept"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

fn image(h: &StoreHandle) -> StateImage {
    h.query(|m| m.state().image()).unwrap()
}

fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut m = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name != paths::LOCK {
            m.insert(name, std::fs::read(e.path()).unwrap());
        }
    }
    m
}

/// Where a journal's frames end: the end mark and the zero-filled room after them are not
/// counted (for a journal that does not scan: where its written bytes end). Never inside
/// the file header, whose reserved last bytes are zeros too (a fresh journal's header would
/// otherwise seem to end early, and a crash model would tear it, which never happens: it is
/// written once by temp file and rename).
fn logical_len(journal: &[u8]) -> usize {
    if let Ok(scan) = super::journal::scan(journal, 1 << 30) {
        return scan.valid_len as usize;
    }
    let frames_end = journal.len() - journal.iter().rev().take_while(|b| **b == 0).count();
    frames_end.max(journal.len().min(super::journal::HEADER_BYTES))
}

/// Tears the write of a next frame (batch `batch` of generation `generation`, large enough to
/// span sectors) over the end mark of `j` as a device tears it: its first sector landed, the
/// rest did not. Returns the offset where the landed bytes end (a sector boundary).
fn tear_next_frame(j: &mut Vec<u8>, generation: u64, batch: u64) -> usize {
    let end = logical_len(j);
    let records: Vec<Record> = (0..200).map(|c| Record::PushDone { cursor: c }).collect();
    let mut frame = journal::encode_frame(batch, &records).unwrap();
    journal::seal(&mut frame, end as u64, generation, batch);
    let sector = journal::SECTOR_BYTES as usize;
    let b = (end / sector + 1) * sector;
    if j.len() < b {
        j.resize(b, 0);
    }
    j[end..b].copy_from_slice(&frame[..b - end]);
    b
}

/// The journal's logical end (see [`logical_len`]).
fn journal_len(home: &TempHome) -> usize {
    logical_len(&std::fs::read(home.dir().join(paths::JOURNAL)).unwrap())
}

/// The journal file's size, room included.
fn journal_file_len(home: &TempHome) -> usize {
    std::fs::metadata(home.dir().join(paths::JOURNAL))
        .unwrap()
        .len() as usize
}

/// Replaces the store's files with `set` (a simulated post-crash disk).
fn restore(home: &TempHome, set: &BTreeMap<String, Vec<u8>>) {
    for e in std::fs::read_dir(home.dir()).unwrap().flatten() {
        if e.file_name() != paths::LOCK {
            std::fs::remove_file(e.path()).unwrap();
        }
    }
    for (name, bytes) in set {
        let p = home.dir().join(name);
        let mut f = fsutil::create_private_new(&p).unwrap();
        std::io::Write::write_all(&mut f, bytes).unwrap();
    }
}

#[test]
fn reopen_after_clean_close_equals_state() {
    let home = TempHome::new("reopen");
    let s = open(&home, &limits()).unwrap();
    let h = s.handle();
    for i in 0..5 {
        h.accept(sender(1), send(&format!("m{i}"))).unwrap();
    }
    h.mark(ME, MessageRef::Sequence(2), ReceiptState::Consumed)
        .unwrap();
    let before = image(&h);
    s.close().unwrap();
    assert_eq!(
        h.accept(sender(1), send("late")).unwrap_err().code,
        Code::Disconnected
    );
    let mode = |p: &Path| {
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(p).unwrap().permissions())
            & 0o777
    };
    assert_eq!(mode(&home.dir()), 0o700);
    assert_eq!(mode(&home.dir().join(paths::JOURNAL)), 0o600);
    assert_eq!(mode(&home.dir().join(paths::IDENTITY)), 0o600);
    let s = open(&home, &limits()).unwrap();
    assert_eq!(image(&s.handle()), before);
    // A retry after restart still gets the original receipt.
    let r = s.handle().accept(sender(1), send("m0")).unwrap();
    assert_eq!(r.sequence, 1);
    assert_eq!(
        s.handle()
            .read(ReadQuery {
                recipient_peer_id: ME.into(),
                ..Default::default()
            })
            .unwrap()
            .messages
            .len(),
        5
    );
}

#[test]
fn identity_binds_the_store_to_its_session() {
    let home = TempHome::new("ident");
    open(&home, &limits()).unwrap().close().unwrap();
    let e = Store::open(&home.0, INSTANCE, "s-other", &limits())
        .err()
        .unwrap();
    assert_eq!(e.code, Code::ScopeDenied);
}

/// A cut or zeros inside the last frame are read as its torn write only where a device can
/// tear one (a sector boundary, see `journal`); anywhere else they are damage to a committed
/// frame: refused with every file unchanged. A write torn at any sector boundary over the
/// previous end mark drops only that batch.
#[test]
fn torn_tail_at_every_offset_drops_only_the_last_batch() {
    let home = TempHome::new("torn");
    let s = open(&home, &limits()).unwrap();
    // A crash keeps the sync point written at open: only what came after it can be torn.
    let sync_at_open = files(&home.dir())[paths::SYNC].clone();
    let h = s.handle();
    let mut ends = vec![journal_len(&home)];
    let mut images = vec![image(&h)];
    let mut before_last = None;
    for i in 0..4 {
        before_last = Some(files(&home.dir()));
        h.accept(sender(1), send(&format!("m{i}"))).unwrap();
        ends.push(journal_len(&home));
        images.push(image(&h));
    }
    s.close().unwrap();
    let full = files(&home.dir());
    let journal = full[paths::JOURNAL].clone();
    let (last_start, last_end) = (ends[3], ends[4]);
    assert!(
        journal.len() > last_end + journal::MARK_BYTES,
        "the journal is preallocated past its frames"
    );
    let mut refused = 0;
    for cut in last_start..last_end + journal::MARK_BYTES {
        for zero_fill in [false, true] {
            let mut set = full.clone();
            let mut j = journal[..cut].to_vec();
            if zero_fill {
                // Cut inside the preallocated room: the rest of the room stays zeros.
                j.resize(journal.len(), 0);
            }
            set.insert(paths::JOURNAL.into(), j);
            set.insert(paths::SYNC.into(), sync_at_open.clone());
            restore(&home, &set);
            let written = cut - journal[..cut].iter().rev().take_while(|b| **b == 0).count();
            match open(&home, &limits()) {
                Ok(s) => {
                    let kept = image(&s.handle());
                    let whole = kept == images[4];
                    assert!(
                        whole || kept == images[3],
                        "cut at {cut}, zero fill {zero_fill}"
                    );
                    assert!(
                        journal::tear_can_end_at(
                            if whole { last_end } else { last_start },
                            written
                        ),
                        "cut at {cut} (zero fill {zero_fill}) read as a torn write"
                    );
                    assert!(s.handle().stats().torn_tail_bytes > 0);
                    s.close().unwrap();
                }
                Err(e) => {
                    assert_eq!(e.code, Code::RecoveryRequired, "cut at {cut}: {e}");
                    assert_eq!(files(&home.dir()), set, "a refused recovery changed files");
                    refused += 1;
                }
            }
        }
    }
    assert!(refused > 0);
    // What a device leaves: the previous journal with the last write's first sectors landed.
    let old = before_last.unwrap()[paths::JOURNAL].clone();
    let sector = journal::SECTOR_BYTES as usize;
    let mut b = (last_start / sector + 1) * sector;
    let mut tears = 0;
    while b < last_end + journal::MARK_BYTES {
        let mut j = old.clone();
        j.resize(j.len().max(b), 0);
        j[last_start..b].copy_from_slice(&journal[last_start..b]);
        let mut set = full.clone();
        set.insert(paths::JOURNAL.into(), j);
        set.insert(paths::SYNC.into(), sync_at_open.clone());
        restore(&home, &set);
        let s = open(&home, &limits()).unwrap_or_else(|e| panic!("torn at {b}: {e}"));
        let want = if b >= last_end {
            &images[4]
        } else {
            &images[3]
        };
        assert_eq!(&image(&s.handle()), want, "torn at {b}");
        let stats = s.handle().stats();
        assert_eq!(stats.torn_tail_batches, 1, "torn at {b}");
        s.close().unwrap();
        let cut_to = if b >= last_end { last_end } else { last_start };
        assert_eq!(journal_len(&home), cut_to, "the torn tail is truncated");
        tears += 1;
        b += sector;
    }
    // The frames are a few hundred bytes: their writes span a sector boundary or two.
    let _ = tears;
}

#[test]
fn the_journal_is_preallocated_and_commits_overwrite_its_room() {
    let home = TempHome::new("prealloc");
    let mut l = limits();
    l.journal_bytes = 64 * 1024;
    let chunk = writer::prealloc_chunk(&l) as usize;
    assert_eq!(chunk, 16 * 1024, "a quarter of journalBytes");
    let s = open(&home, &l).unwrap();
    let h = s.handle();
    assert_eq!(
        journal_file_len(&home),
        chunk,
        "created with its first chunk"
    );
    let mut sizes = vec![journal_file_len(&home)];
    let mut i = 0;
    while h.stats().compactions == 0 {
        let syncs = h.stats().syncs;
        h.accept(sender(1), send(&format!("m{i}"))).unwrap();
        settle(&h);
        i += 1;
        assert!(i < 1_000, "compaction never ran");
        let st = h.stats();
        if st.compactions > 0 {
            break;
        }
        let (logical, size) = (journal_len(&home), journal_file_len(&home));
        assert_eq!(
            st.journal_bytes as usize, logical,
            "stats count frames, not room"
        );
        assert!(size >= logical);
        // Never past the compaction trigger (what admission counts for the journal).
        assert!(
            size <= logical.max(l.journal_bytes as usize),
            "{size} at {logical}"
        );
        let grew = size != *sizes.last().unwrap();
        if grew {
            assert_eq!(size % chunk, 0, "room is added a chunk at a time");
            sizes.push(size);
        } else {
            // Until the cap, at least half a chunk of room is kept ahead of the frames.
            assert!(size - logical >= chunk / 2 || size == l.journal_bytes as usize);
        }
        // One fdatasync per commit, plus one per chunk of room added after it.
        assert_eq!(st.syncs - syncs, 1 + u64::from(grew), "accept {i}");
    }
    assert_eq!(sizes, [chunk, 2 * chunk, 3 * chunk, 4 * chunk]);
    // The next generation is created with its first chunk, and its frames go into it.
    assert_eq!(h.stats().generation, 2);
    assert_eq!(journal_file_len(&home), chunk);
    let image_before = image(&h);
    h.accept(sender(2), send("after")).unwrap();
    settle(&h);
    assert_eq!(journal_file_len(&home), chunk);
    assert_eq!(h.stats().journal_bytes as usize, journal_len(&home));
    let want = image(&h);
    assert_ne!(want, image_before);
    s.close().unwrap();
    let s = open(&home, &l).unwrap();
    assert_eq!(image(&s.handle()), want);
    assert_eq!(
        s.handle().stats().torn_tail_bytes,
        0,
        "room is not a torn tail"
    );
}

#[test]
fn room_is_added_a_chunk_at_a_time_below_half_a_chunk_and_never_past_the_trigger() {
    use writer::prealloc_target as t;
    let (k, cap) = (16_384, 1 << 20);
    assert_eq!(
        t(32, 32, k, cap),
        Some(k),
        "a new journal gets its first chunk"
    );
    assert_eq!(t(32, k, k, cap), None);
    assert_eq!(t(k / 2, k, k, cap), None, "half a chunk left is enough");
    assert_eq!(t(k / 2 + 1, k, k, cap), Some(2 * k));
    assert_eq!(t(k, k, k, cap), Some(2 * k));
    // A frame written past the room grew the file: room is added after it.
    assert_eq!(t(k + 100, k + 100, k, cap), Some(2 * k));
    // Capped at the compaction trigger, and nothing once the trigger is passed.
    assert_eq!(t(cap - 100, cap - 100, k, cap), Some(cap));
    assert_eq!(t(cap - 100, cap, k, cap), None);
    assert_eq!(t(cap + 10, cap + 10, k, cap), None);
    assert_eq!(t(32, 32, k, 1_024), Some(1_024), "a tiny journalBytes");
    // The chunk follows the journal threshold.
    let mut l = limits();
    assert_eq!(
        writer::prealloc_chunk(&l),
        crate::config::internal::PREALLOC_CHUNK_BYTES
    );
    l.journal_bytes = 1_024;
    assert_eq!(writer::prealloc_chunk(&l), 4_096);
    l.journal_bytes = 1 << 20;
    l.storage_bytes = 1 << 20;
    assert_eq!(
        writer::prealloc_chunk(&l),
        128 * 1024,
        "a quarter of storageBytes / 2"
    );
}

#[test]
fn a_crash_with_any_room_reopens_and_appends_at_the_logical_end() {
    let home = TempHome::new("room");
    let mut l = limits();
    l.journal_bytes = 64 * 1024;
    let chunk = writer::prealloc_chunk(&l) as usize;
    let s = open(&home, &l).unwrap();
    let h = s.handle();
    for i in 0..3 {
        h.accept(sender(1), send(&format!("m{i}"))).unwrap();
    }
    settle(&h);
    // The disk as a SIGKILL leaves it: the sync point of the open, frames in the room.
    let killed = files(&home.dir());
    let want = image(&h);
    drop(h);
    s.close().unwrap();
    let j = &killed[paths::JOURNAL];
    let end = logical_len(j);
    let torn = {
        let mut t = j.clone();
        tear_next_frame(&mut t, 2, 4);
        t
    };
    let marked_end = end + journal::MARK_BYTES;
    let variants: [(&str, Vec<u8>, bool); 5] = [
        ("room as written", j.clone(), false),
        // Not preallocated: a journal cut at a torn tail, or an extension whose size never
        // became durable (the end mark is written with the frame, so the size includes it).
        ("no room", j[..marked_end].to_vec(), false),
        ("part of a chunk", j[..end + 100].to_vec(), false),
        // The next chunk's zeros written, their fdatasync never done.
        (
            "a chunk more",
            [j.as_slice(), &vec![0; chunk]].concat(),
            false,
        ),
        ("a frame torn in the room", torn, true),
    ];
    for (what, journal, is_torn) in variants {
        let mut set = killed.clone();
        set.insert(paths::JOURNAL.into(), journal);
        restore(&home, &set);
        let s = open(&home, &l).unwrap();
        let h = s.handle();
        assert_eq!(image(&h), want, "{what}");
        let st = h.stats();
        assert_eq!(st.torn_tail_bytes > 0, is_torn, "{what}: {st:?}");
        assert_eq!(st.journal_bytes as usize, end, "{what}");
        assert!(
            journal_file_len(&home) >= end + chunk / 2,
            "{what}: room again"
        );
        h.accept(sender(2), send("after")).unwrap();
        settle(&h);
        let after = std::fs::read(home.dir().join(paths::JOURNAL)).unwrap();
        assert_eq!(
            after[..end],
            j[..end],
            "{what}: frames before the end unchanged"
        );
        let scan = journal::scan(&after, recovery::frame_bytes_max(&l)).unwrap();
        assert_eq!((scan.batches.len(), scan.torn_bytes), (4, 0), "{what}");
        let with_after = image(&h);
        s.close().unwrap();
        let s = open(&home, &l).unwrap();
        assert_eq!(image(&s.handle()), with_after, "{what}");
        s.close().unwrap();
    }
}

#[test]
fn a_journal_shorter_than_its_sync_point_requires_recovery_at_every_cut() {
    let home = TempHome::new("synccut");
    let s = open(&home, &limits()).unwrap();
    let h = s.handle();
    for i in 0..3 {
        h.accept(sender(1), send(&format!("m{i}"))).unwrap();
    }
    // A clean close: its sync point proves every batch was acknowledged.
    s.close().unwrap();
    let full = files(&home.dir());
    let journal = full[paths::JOURNAL].clone();
    let mut refused = 0;
    let end = logical_len(&journal);
    for cut in journal::HEADER_BYTES..end {
        for zero_fill in [false, true] {
            let mut set = full.clone();
            let mut j = journal[..cut].to_vec();
            if zero_fill {
                j.resize(journal.len(), 0);
            }
            set.insert(paths::JOURNAL.into(), j);
            restore(&home, &set);
            let e = open(&home, &limits()).err().unwrap_or_else(|| {
                panic!("cut at {cut} (zero fill {zero_fill}) was taken as a torn tail")
            });
            assert_eq!(e.code, Code::RecoveryRequired, "cut at {cut}: {e}");
            assert_eq!(files(&home.dir()), set, "a refused recovery changed files");
            refused += 1;
        }
    }
    assert_eq!(refused, 2 * (end - journal::HEADER_BYTES));
    // A damaged sync point is refused too, never ignored.
    let mut set = full.clone();
    set.get_mut(paths::SYNC).unwrap()[12] ^= 0x01;
    restore(&home, &set);
    assert_eq!(
        open(&home, &limits()).err().unwrap().code,
        Code::RecoveryRequired
    );
}

#[test]
fn bit_flip_in_an_earlier_record_requires_recovery_and_changes_nothing() {
    let home = TempHome::new("flip");
    let s = open(&home, &limits()).unwrap();
    let h = s.handle();
    let first_end = {
        h.accept(sender(1), send("m0")).unwrap();
        journal_len(&home)
    };
    h.accept(sender(1), send("m1")).unwrap();
    s.close().unwrap();
    for at in [
        journal::HEADER_BYTES + 1,
        journal::HEADER_BYTES + 5,
        journal::HEADER_BYTES + 9,
        first_end - 3,
    ] {
        let mut set = files(&home.dir());
        let saved = set.clone();
        set.get_mut(paths::JOURNAL).unwrap()[at] ^= 0x04;
        restore(&home, &set);
        let e = open(&home, &limits()).err().unwrap();
        assert_eq!(e.code, Code::RecoveryRequired, "flip at {at}: {e}");
        assert_eq!(
            files(&home.dir()),
            set,
            "nothing may change on RECOVERY_REQUIRED"
        );
        restore(&home, &saved);
    }
    let mut set = files(&home.dir());
    let last = logical_len(&set[paths::JOURNAL]) - 10;
    set.get_mut(paths::JOURNAL).unwrap()[last] ^= 0x04;
    restore(&home, &set);
    assert_eq!(
        open(&home, &limits()).err().unwrap().code,
        Code::RecoveryRequired,
        "complete last frame, bad checksum"
    );
    assert_eq!(files(&home.dir()), set);
}

#[test]
fn compaction_crash_points_lose_and_duplicate_nothing() {
    let home = TempHome::new("compact");
    let mut l = limits();
    l.journal_bytes = 2_048;
    let s = open(&home, &l).unwrap();
    let h = s.handle();
    let mut pre = None;
    let mut i = 0;
    // Run until one compaction happened, keeping the disk image just before it.
    while h.stats().compactions == 0 {
        pre = Some((files(&home.dir()), image(&h)));
        h.accept(sender(1), send(&format!("m{i}"))).unwrap();
        settle(&h);
        i += 1;
        assert!(i < 100, "compaction never ran");
    }
    let after = image(&h);
    let stats = h.stats();
    assert_eq!((stats.generation, stats.compactions), (2, 1));
    s.close().unwrap();
    let post = files(&home.dir());
    let (pre_files, _) = pre.unwrap();
    let journal_g1_full = {
        // The last batch went into generation 1 before compaction: rebuild that journal.
        let mut set = pre_files.clone();
        let g1 = set.get_mut(paths::JOURNAL).unwrap();
        let mut frame = journal::encode_frame(i as u64, &h_records_of_last(&post)).unwrap();
        // Written at the logical end over the end mark, into the room or past it.
        let end = logical_len(g1);
        journal::seal(&mut frame, end as u64, 1, i as u64);
        g1.truncate(end);
        g1.extend(frame);
        set
    };
    // A: crash before the snapshot rename (old files + the last frame in generation 1).
    restore(&home, &journal_g1_full);
    let s = open(&home, &l).unwrap();
    assert_eq!(image(&s.handle()), after);
    s.close().unwrap();
    // B/C: snapshot renamed, journal not yet swapped (plus a stale temp journal).
    let mut b = journal_g1_full.clone();
    b.insert(paths::SNAPSHOT.into(), post[paths::SNAPSHOT].clone());
    b.insert(
        paths::JOURNAL_TMP.into(),
        journal::encode_header(2).to_vec(),
    );
    restore(&home, &b);
    let s = open(&home, &l).unwrap();
    assert_eq!(
        image(&s.handle()),
        after,
        "covered journal records must not apply twice"
    );
    assert_eq!(s.handle().stats().generation, 2);
    s.close().unwrap();
    assert!(!home.dir().join(paths::JOURNAL_TMP).exists());
    // D: everything swapped.
    restore(&home, &post);
    let s = open(&home, &l).unwrap();
    assert_eq!(image(&s.handle()), after);
    s.close().unwrap();
    // A newer journal without the snapshot that covers its predecessor is not guessed at.
    let mut lost = post.clone();
    lost.remove(paths::SNAPSHOT);
    restore(&home, &lost);
    assert_eq!(open(&home, &l).err().unwrap().code, Code::RecoveryRequired);
}

/// The record of the last accept (the newest inbox entry in the snapshot).
fn h_records_of_last(post: &BTreeMap<String, Vec<u8>>) -> Vec<Record> {
    let (_, image) = snapshot::decode(&post[paths::SNAPSHOT]).unwrap();
    let last = image.inbox.last().unwrap().clone();
    vec![Record::InboxAdded {
        entry: std::sync::Arc::new(last),
    }]
}

#[test]
fn group_commit_acknowledges_all_with_one_sync_per_batch() {
    let home = TempHome::new("group");
    let s = open(&home, &limits()).unwrap();
    let h = s.handle();
    // Hold the writer inside a read so that every sender queues behind it.
    let held = hold_writer(&h);
    const N: usize = 16;
    let senders: Vec<_> = (0..N)
        .map(|i| {
            let h = h.clone();
            std::thread::spawn(move || h.accept(sender(i as u8), send("same-id")).unwrap())
        })
        .collect();
    while h.tx.len() < N {
        std::thread::yield_now();
    }
    let before = h.stats();
    assert!(held.release());
    let receipts: Vec<Receipt> = senders.into_iter().map(|t| t.join().unwrap()).collect();
    settle(&h);
    let mut seqs: Vec<u64> = receipts.iter().map(|r| r.sequence).collect();
    seqs.sort();
    assert_eq!(seqs, (1..=N as u64).collect::<Vec<_>>());
    let after = h.stats();
    assert_eq!(
        after.syncs - before.syncs,
        1,
        "one fdatasync for the whole batch"
    );
    assert_eq!(after.batches, after.syncs);
    assert!(after.max_batch >= N as u64);
}

#[test]
fn failed_sync_answers_the_batch_and_poisons_the_writer() {
    let home = TempHome::new("poison");
    let s = open_with_faults(
        &home,
        Faults {
            fail_sync_at: Some(2),
            ..Faults::default()
        },
    );
    let h = s.handle();
    h.set_live(ME);
    h.accept(sender(1), send("m0")).unwrap();
    let e = h.accept(sender(1), send("m1")).unwrap_err();
    assert_eq!(e.code, Code::Io);
    let e = h.accept(sender(1), send("m2")).unwrap_err();
    assert_eq!(e.code, Code::RecoveryRequired);
    assert_eq!(
        h.read(ReadQuery::default()).unwrap_err().code,
        Code::RecoveryRequired
    );
    assert!(h.stats().poisoned);
    s.close().unwrap();
    let s = open(&home, &limits()).unwrap();
    let held: Vec<String> = image(&s.handle())
        .inbox
        .into_iter()
        .map(|e| e.message_id)
        .collect();
    assert!(held.starts_with(&["m0".to_string()]), "{held:?}");
    assert!(!held.contains(&"m2".to_string()));
}

#[test]
fn recover_unread_reviews_an_old_store_without_touching_it() {
    let home = TempHome::new("recover");
    let s = open(&home, &limits()).unwrap();
    let h = s.handle();
    h.accept(sender(1), send("m0")).unwrap();
    h.accept(sender(1), send("m1")).unwrap();
    h.mark(ME, MessageRef::Sequence(1), ReceiptState::Consumed)
        .unwrap();
    s.close().unwrap();
    // A torn tail (written into the room) is ignored in memory but not cut by a review.
    let mut set = files(&home.dir());
    let j = set.get_mut(paths::JOURNAL).unwrap();
    tear_next_frame(j, 1, 4);
    restore(&home, &set);
    let unread = recover_unread(&home.0, INSTANCE, SESSION, &limits()).unwrap();
    assert_eq!(
        unread
            .iter()
            .map(|e| e.message_id.as_str())
            .collect::<Vec<_>>(),
        vec!["m1"]
    );
    assert_eq!(files(&home.dir()), set);
    assert_eq!(
        recover_unread(&home.0, INSTANCE, "s-other", &limits())
            .unwrap_err()
            .code,
        Code::ScopeDenied
    );
    assert_eq!(
        recover_unread(&home.0, "i-nothere", SESSION, &limits())
            .unwrap_err()
            .code,
        Code::NotFound
    );
}

#[test]
fn waiters_wake_on_commit_and_on_cancel() {
    let home = TempHome::new("wait");
    let s = open(&home, &limits()).unwrap();
    let h = s.handle();
    let seen = h.change_generation();
    let cancel = AtomicBool::new(false);
    // Nothing new: returns at the deadline with the same counter.
    assert_eq!(h.wait_for_change(seen, 1, &cancel), seen);
    let waiter = {
        let h = h.clone();
        std::thread::spawn(move || h.wait_for_change(seen, 30_000, &AtomicBool::new(false)))
    };
    h.accept(sender(1), send("m0")).unwrap();
    assert!(waiter.join().unwrap() > seen);
    let cancel = std::sync::Arc::new(AtomicBool::new(false));
    let waiter = {
        let (h, c) = (h.clone(), cancel.clone());
        std::thread::spawn(move || h.wait_for_change(u64::MAX - 1, 30_000, &c))
    };
    cancel.store(true, std::sync::atomic::Ordering::Release);
    h.wake_waiters();
    assert!(waiter.join().unwrap() < u64::MAX - 1);
    // The woken variant never re-checks on its own: a commit or a wake-up ends it.
    let seen = h.change_generation();
    assert_eq!(
        h.wait_for_change_woken(seen, 1, &AtomicBool::new(false)),
        seen
    );
    let waiter = {
        let h = h.clone();
        std::thread::spawn(move || h.wait_for_change_woken(seen, 600_000, &AtomicBool::new(false)))
    };
    h.accept(sender(1), send("m1")).unwrap();
    assert!(waiter.join().unwrap() > seen);
    let cancel = std::sync::Arc::new(AtomicBool::new(false));
    let waiter = {
        let (h, c) = (h.clone(), cancel.clone());
        std::thread::spawn(move || h.wait_for_change_woken(u64::MAX - 1, 600_000, &c))
    };
    cancel.store(true, std::sync::atomic::Ordering::Release);
    h.wake_waiters();
    assert!(waiter.join().unwrap() < u64::MAX - 1);
}

mod model {
    //! Crash at sync N: random operations against a simple model; after each acknowledged
    //! operation the disk image is captured; a crash is simulated at a random point with a
    //! random torn (truncated or zero-filled) tail of the next batch, and reopening must give
    //! exactly the acknowledged state: every acknowledged accept present once.
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Op {
        Accept { sender: u8, id: u8 },
        Consume { seq: u8 },
        Sweep,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0u8..3, 0u8..12).prop_map(|(sender, id)| Op::Accept { sender, id }),
            2 => (1u8..10).prop_map(|seq| Op::Consume { seq }),
            1 => Just(Op::Sweep),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]
        #[test]
        fn crash_at_any_sync_keeps_exactly_the_acknowledged_state(
            ops in proptest::collection::vec(op(), 1..24),
            crash_pick in any::<prop::sample::Index>(),
            torn_pick in any::<prop::sample::Index>(),
            zero_fill in any::<bool>(),
        ) {
            let home = TempHome::new("model");
            let mut l = limits();
            l.journal_bytes = 4_096;
            let s = open(&home, &l).unwrap();
            let h = s.handle();
            // Disk image and acknowledged accepts after each operation.
            let mut disks = vec![files(&home.dir())];
            let mut model: BTreeMap<(u8, u8), u64> = BTreeMap::new();
            let mut models = vec![model.clone()];
            let mut images = vec![image(&h)];
            for op in &ops {
                match op {
                    Op::Accept { sender: s, id } => {
                        let r = h.accept(sender(*s), send(&format!("m{id}"))).unwrap();
                        let prev = model.insert((*s, *id), r.sequence);
                        prop_assert!(prev.is_none_or(|p| p == r.sequence), "dedup must return the original sequence");
                    }
                    Op::Consume { seq } => {
                        let _ = h.mark(ME, MessageRef::Sequence(u64::from(*seq)), ReceiptState::Consumed);
                    }
                    Op::Sweep => {
                        h.sweep().unwrap();
                    }
                }
                settle(&h);
                disks.push(files(&home.dir()));
                models.push(model.clone());
                images.push(image(&h));
            }
            s.close().unwrap();
            let k = crash_pick.index(ops.len());
            // The disk after op k, plus a torn prefix of op k+1's frame when it was an append.
            let mut disk = disks[k].clone();
            // Written at the logical end: into the preallocated room (the rest of the room
            // stays zeros) or, as in a journal without room, cut at the torn byte.
            let (cur, next) = (&disks[k][paths::JOURNAL], &disks[k + 1][paths::JOURNAL]);
            let (cur_end, next_end) = (logical_len(cur), logical_len(next));
            // A device tears at sector boundaries: the sectors before one landed, the rest
            // hold what was there (the previous end mark, room).
            let mut kept = k;
            if next_end > cur_end && next[..cur_end] == cur[..cur_end] {
                let sector = journal::SECTOR_BYTES as usize;
                let stop = next_end + journal::MARK_BYTES;
                let first = (cur_end / sector + 1) * sector;
                let cuts: Vec<usize> =
                    std::iter::once(cur_end).chain((first..stop).step_by(sector)).collect();
                let b = cuts[torn_pick.index(cuts.len())];
                let mut j = if zero_fill {
                    cur.clone()
                } else {
                    cur[..cur_end + journal::MARK_BYTES].to_vec()
                };
                j.resize(j.len().max(b), 0);
                j[cur_end..b].copy_from_slice(&next[cur_end..b]);
                disk.insert(paths::JOURNAL.into(), j);
                if b >= next_end {
                    // The frame landed whole, only its mark is torn: it is kept.
                    kept = k + 1;
                }
            }
            restore(&home, &disk);
            let s = open(&home, &l).unwrap();
            let got = image(&s.handle());
            prop_assert_eq!(&got, &images[kept]);
            for ((snd, id), seq) in &models[kept] {
                let want = format!("m{id}");
                let held: Vec<_> = got.inbox.iter().filter(|e| e.message_id == want && e.from == sender(*snd)).collect();
                prop_assert_eq!(held.len(), 1);
                prop_assert_eq!(held[0].sequence, *seq);
            }
            s.close().unwrap();
        }
    }
}

#[test]
fn files_stay_within_storage_bytes_when_admission_says_full() {
    let home = TempHome::new("storage");
    let mut l = limits();
    l.storage_bytes = 256 * 1024;
    l.journal_bytes = 64 * 1024;
    let s = open(&home, &l).unwrap();
    let h = s.handle();
    // Worst-case escaping: every byte of content is a control character.
    let content = "\u{1}".repeat(1_500);
    let mut n = 0;
    let err = loop {
        let mut m = send(&format!("m{n}"));
        m.body.content = content.clone();
        match h.accept(sender(1), m) {
            Ok(_) => n += 1,
            Err(e) => break e,
        }
        assert!(n < 10_000);
    };
    assert_eq!(err.code, Code::QueueFull);
    settle(&h);
    let size = |name: &str| std::fs::metadata(home.dir().join(name)).map_or(0, |m| m.len());
    let total = size(paths::SNAPSHOT) + size(paths::JOURNAL);
    assert!(h.stats().compactions > 0);
    assert!(
        total <= l.storage_bytes,
        "snapshot + journal = {total} > {}",
        l.storage_bytes
    );
    s.close().unwrap();
    let s = open(&home, &l).unwrap();
    assert_eq!(s.handle().unread().unwrap().len(), n);
}

#[test]
fn two_roots_exchange_a_message_and_its_receipts() {
    let (ha, hb) = (TempHome::new("root-a"), TempHome::new("root-b"));
    let l = limits();
    let a_me = Principal {
        instance_id: "i-a".into(),
        run_id: None,
        peer_id: "p-a".into(),
    };
    let b_me = Principal {
        instance_id: INSTANCE.into(),
        run_id: None,
        peer_id: ME.into(),
    };
    let sa = Store::open(&ha.0, "i-a", SESSION, &l).unwrap();
    let sb = open(&hb, &l).unwrap();
    let (a, b) = (sa.handle(), sb.handle());
    a.set_live("p-a");
    // A records its intent, "sends", and records B's custody receipt.
    let to_b = TargetRef {
        peer_id: ME.into(),
        instance_id: INSTANCE.into(),
        run_id: None,
    };
    let intent = OutboundSend {
        from_peer_id: "p-a".into(),
        to: to_b,
        message_id: derive_message_id("p-a", "tool-call-1"),
        body: MessageBody {
            content: "build ready?".into(),
            topic: Some("build".into()),
            reply_to: None,
        },
        correlation_id: None,
        expires_at_ms: None,
    };
    let entry = a.outbox_intent(intent.clone()).unwrap();
    assert_eq!(a.route_pending("p-a", ME).unwrap().len(), 1);
    let wire = InboundSend {
        origin: None,
        to_peer_id: ME.into(),
        message_id: entry.message_id.clone(),
        body: MessageBody {
            content: entry.body.content.clone(),
            topic: entry.body.topic.clone(),
            reply_to: None,
        },
        correlation_id: Some(entry.correlation_id.clone()),
        expires_at_ms: Some(entry.expires_at_ms),
        from_alias: None,
    };
    let receipt = b.accept(a_me.clone(), wire).unwrap();
    a.outbox_result(ME, &entry.message_id, Ok(receipt.clone()))
        .unwrap();
    assert!(a.route_pending("p-a", ME).unwrap().is_empty());
    // B consumes; the consumed receipt is pushed to A and acknowledged.
    b.mark(
        ME,
        MessageRef::Sequence(receipt.sequence),
        ReceiptState::Consumed,
    )
    .unwrap();
    let pushes = b.pending_pushes(10).unwrap();
    assert_eq!(pushes.len(), 1);
    assert_eq!(pushes[0].to, a_me);
    let seen = a.change_generation();
    a.record_receipt(b_me.clone(), pushes[0].receipt.clone())
        .unwrap();
    assert!(a.wait_for_change(seen, 1_000, &AtomicBool::new(false)) > seen);
    b.receipt_delivered(pushes[0].cursor).unwrap();
    assert!(b.pending_pushes(10).unwrap().is_empty());
    let q = ReadQuery {
        recipient_peer_id: "p-a".into(),
        events_after: Some(0),
        ..Default::default()
    };
    let states: Vec<ReceiptState> = a
        .read(q)
        .unwrap()
        .events
        .iter()
        .map(|e| e.receipt.state)
        .collect();
    assert_eq!(states, vec![ReceiptState::Accepted, ReceiptState::Consumed]);
    // B replies within the conversation; A accepts it, keeping the correlation.
    let reply = b
        .outbox_intent(OutboundSend {
            from_peer_id: ME.into(),
            to: TargetRef {
                peer_id: "p-a".into(),
                instance_id: "i-a".into(),
                run_id: None,
            },
            message_id: new_message_id(),
            body: MessageBody {
                content: "yes".into(),
                topic: None,
                reply_to: Some(entry.message_id.clone()),
            },
            correlation_id: None,
            expires_at_ms: None,
        })
        .unwrap();
    let wire = InboundSend {
        origin: None,
        to_peer_id: "p-a".into(),
        message_id: reply.message_id.clone(),
        body: MessageBody {
            content: reply.body.content.clone(),
            topic: None,
            reply_to: reply.body.reply_to.clone(),
        },
        correlation_id: Some(reply.correlation_id.clone()),
        expires_at_ms: Some(reply.expires_at_ms),
        from_alias: None,
    };
    let r = a.accept(b_me.clone(), wire).unwrap();
    assert_eq!(r.correlation_id, entry.correlation_id);
    b.outbox_result("p-a", &reply.message_id, Ok(r)).unwrap();
    assert_eq!(
        b.status(a_me, &entry.message_id, ME).unwrap().state,
        ReceiptState::Replied
    );
}

#[test]
fn a_checksummed_record_that_contradicts_the_state_requires_recovery() {
    let home = TempHome::new("contradict");
    open(&home, &limits()).unwrap().close().unwrap();
    let mut set = files(&home.dir());
    let mut j = journal::encode_header(1).to_vec();
    j.extend(
        journal::encode_frame(
            1,
            &[Record::InboxRemoved {
                recipient: ME.into(),
                sequence: 9,
            }],
        )
        .unwrap(),
    );
    set.insert(paths::JOURNAL.into(), j);
    restore(&home, &set);
    assert_eq!(
        open(&home, &limits()).err().unwrap().code,
        Code::RecoveryRequired
    );
    assert_eq!(files(&home.dir()), set);
}

/// A store whose every journal fdatasync waits while the returned gate is closed (`true`,
/// as it starts).
fn open_with_sync_held(home: &TempHome) -> (Store, HeldSync) {
    let gate = Arc::new((parking_lot::Mutex::new(true), parking_lot::Condvar::new()));
    let faults = Faults {
        hold_sync: Some(gate.clone()),
        ..Faults::default()
    };
    (open_with_faults(home, faults), gate)
}

fn open_with_faults(home: &TempHome, faults: Faults) -> Store {
    Store::open_with(&home.0, INSTANCE, SESSION, &limits(), faults).unwrap()
}

type HeldSync = Arc<(parking_lot::Mutex<bool>, parking_lot::Condvar)>;

/// A store writer held inside a read job: everything queued meanwhile waits behind it until
/// [`WriterHeld::release`] (or the drop, so a failing test never leaves the writer stuck).
pub(crate) struct WriterHeld {
    release: Option<crossbeam_channel::Sender<()>>,
    job: Option<std::thread::JoinHandle<Result<bool>>>,
}

/// Holds `h`'s writer; returns once the writer is inside the read job.
pub(crate) fn hold_writer(h: &StoreHandle) -> WriterHeld {
    let (entered_tx, entered_rx) = crossbeam_channel::bounded::<()>(1);
    let (release_tx, release_rx) = crossbeam_channel::bounded::<()>(1);
    let h = h.clone();
    let job = std::thread::spawn(move || {
        h.query_in_writer(move |_| entered_tx.send(()).is_ok() && release_rx.recv().is_ok())
    });
    entered_rx.recv().unwrap();
    WriterHeld {
        release: Some(release_tx),
        job: Some(job),
    }
}

impl WriterHeld {
    /// Lets the writer go on; true when the read job ran and was released by this call.
    pub(crate) fn release(mut self) -> bool {
        if let Some(tx) = self.release.take() {
            let _ = tx.send(());
        }
        self.job.take().is_some_and(|j| j.join().unwrap().unwrap())
    }
}

impl Drop for WriterHeld {
    fn drop(&mut self) {
        drop(self.release.take());
        if let Some(j) = self.job.take() {
            let _ = j.join();
        }
    }
}

#[test]
fn reads_run_in_the_caller_and_see_only_durable_state_unless_they_peek() {
    let home = TempHome::new("peek");
    let (s, gate) = open_with_sync_held(&home);
    let h = s.handle();
    h.set_live(ME);
    // Nothing in flight: a read is answered in this thread, with no job for the writer.
    let jobs = h.stats().jobs;
    assert_eq!(h.query(|m| m.unread().len()).unwrap(), 0);
    assert_eq!(h.stats().jobs, jobs);
    // An applied-only write is answered while its batch's fdatasync is held back.
    let w = h.clone();
    let applied = w
        .write_applied(|m, r, now| m.accept(&sender(1), send("m0"), r, now))
        .unwrap();
    assert_eq!(applied.sequence, 1);
    assert_eq!(h.stats().syncs, 0, "answered before its sync");
    // Our own bookkeeping sees it; a durable read waits for the sync.
    assert_eq!(h.peek(|m| m.unread().len()).unwrap(), 1);
    let (tx, rx) = crossbeam_channel::bounded(1);
    let reader = {
        let h = h.clone();
        std::thread::spawn(move || tx.send(h.query(|m| m.unread().len()).unwrap()))
    };
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert!(
        rx.try_recv().is_err(),
        "a durable read saw an unsynced record"
    );
    *gate.0.lock() = false;
    gate.1.notify_all();
    assert_eq!(rx.recv().unwrap(), 1);
    reader.join().unwrap().unwrap();
    assert_eq!(h.stats().syncs, 1);
    // All durable again: back in the caller's thread.
    let jobs = h.stats().jobs;
    assert_eq!(h.query(|m| m.unread().len()).unwrap(), 1);
    assert_eq!(h.stats().jobs, jobs);
}

#[test]
fn applied_only_batches_ride_the_next_sync() {
    let home = TempHome::new("deferred");
    let s = open(&home, &limits()).unwrap();
    let h = s.handle();
    h.set_live(ME);
    let syncs = h.stats().syncs;
    h.write_applied(|m, r, now| m.accept(&sender(1), send("m0"), r, now))
        .unwrap();
    // The next durable write's one fdatasync covers both frames.
    h.accept(sender(1), send("m1")).unwrap();
    let st = h.stats();
    assert_eq!(st.syncs - syncs, 1);
    assert_eq!(st.batches, 2);
    // Alone, a deferred frame is synced by a durable read, or once the store stays quiet.
    h.write_applied(|m, r, now| m.accept(&sender(1), send("m2"), r, now))
        .unwrap();
    assert_eq!(h.query(|m| m.unread().len()).unwrap(), 3);
    assert_eq!(h.stats().syncs - syncs, 2);
    h.write_applied(|m, r, now| m.accept(&sender(1), send("m3"), r, now))
        .unwrap();
    let t = std::time::Instant::now();
    while h.stats().syncs - syncs < 3 {
        assert!(
            t.elapsed() < std::time::Duration::from_secs(60),
            "never synced"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(h.stats().batches, 4);
    // A close leaves a sync point that covers everything.
    s.close().unwrap();
    let s = open(&home, &limits()).unwrap();
    assert_eq!(s.handle().query(|m| m.unread().len()).unwrap(), 4);
}

#[test]
fn a_written_write_is_answered_before_its_sync_and_its_ticket_waits_for_it() {
    let home = TempHome::new("written");
    let (s, gate) = open_with_sync_held(&home);
    let h = s.handle();
    h.set_live(ME);
    let empty = journal_len(&home);
    // Answered while its fdatasync is held, its frame already in the file.
    let (r, ticket) = h
        .write_written(|m, r, now| m.accept(&sender(1), send("m0"), r, now))
        .unwrap();
    assert_eq!(r.sequence, 1);
    assert!(
        journal_len(&home) > empty,
        "answered before its frame was written"
    );
    assert_eq!(h.stats().syncs, 0);
    // Every applied batch is written: a route may send what it peeks.
    h.wait_written().unwrap();
    // The ticket's wait ends only with the sync.
    let (tx, rx) = crossbeam_channel::bounded(1);
    let waiter = {
        let h = h.clone();
        std::thread::spawn(move || tx.send(h.wait_durable(ticket)).unwrap())
    };
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert!(rx.try_recv().is_err(), "durable before its fdatasync");
    *gate.0.lock() = false;
    gate.1.notify_all();
    rx.recv().unwrap().unwrap();
    waiter.join().unwrap();
    assert_eq!(h.stats().syncs, 1);
    // A retry adds no records: its ticket is the batch it read, already durable.
    let (_, again) = h
        .write_written(|m, r, now| m.accept(&sender(1), send("m0"), r, now))
        .unwrap();
    assert_eq!(again, ticket);
    h.wait_durable(again).unwrap();
    assert_eq!(h.stats().syncs, 1);
}

/// A written write's fdatasync (which the writer thread runs for the leader that wrote it)
/// fails: the caller's wait fails, and the next leader sees the poisoning and writes nothing.
#[test]
fn a_failed_sync_fails_the_wait_of_a_written_write() {
    let home = TempHome::new("writtenfail");
    let s = open_with_faults(
        &home,
        Faults {
            fail_sync_at: Some(1),
            ..Faults::default()
        },
    );
    let h = s.handle();
    h.set_live(ME);
    let (_, ticket) = h
        .write_written(|m, r, now| m.accept(&sender(1), send("m0"), r, now))
        .unwrap();
    assert_eq!(
        h.wait_durable(ticket).unwrap_err().code,
        Code::RecoveryRequired
    );
    assert!(h.stats().poisoned);
    let len = journal_len(&home);
    let e = h.accept(sender(1), send("m1")).unwrap_err();
    assert_eq!(e.code, Code::RecoveryRequired);
    let e = h
        .write_written(|m, r, now| m.accept(&sender(1), send("m2"), r, now))
        .unwrap_err();
    assert_eq!(e.code, Code::RecoveryRequired);
    assert_eq!(
        journal_len(&home),
        len,
        "nothing written after the poisoning"
    );
}

/// A read of durable state waits for the writes queued without waiting before it (the
/// sender's copy of a receipt its caller already heard), then for their sync: `peer status`
/// right after a send never shows the entry unresolved.
#[test]
fn a_durable_read_sees_a_write_queued_before_it() {
    let home = TempHome::new("queued-read");
    let s = open(&home, &limits()).unwrap();
    let h = s.handle();
    // Nothing queued: answered in this thread.
    let t = h
        .write_queued(|m, r, now| m.accept(&sender(1), send("m0"), r, now))
        .unwrap();
    assert_eq!(h.query(|m| m.unread().len()).unwrap(), 1);
    drop(t);
    // Hold the writer in a read job, queue a write behind it, read from another thread.
    let held = hold_writer(&h);
    let t = h
        .write_queued(|m, r, now| m.accept(&sender(1), send("m1"), r, now))
        .unwrap();
    let (tx, rx) = crossbeam_channel::bounded(1);
    let reader = {
        let h = h.clone();
        std::thread::spawn(move || tx.send(h.query(|m| m.unread().len()).unwrap()).unwrap())
    };
    std::thread::sleep(std::time::Duration::from_millis(50));
    let early = rx.try_recv();
    assert!(held.release());
    assert!(
        early.is_err(),
        "a durable read ran before a write queued ahead of it"
    );
    assert_eq!(rx.recv().unwrap(), 2);
    reader.join().unwrap();
    drop(t);
}

/// An uncontended write runs its group commit in the calling thread: no hand-off to the
/// writer thread and back.
#[test]
fn a_caller_that_finds_the_writer_free_commits_in_its_own_thread() {
    let home = TempHome::new("lead");
    let s = open(&home, &limits()).unwrap();
    let h = s.handle();
    // The writer thread's start-up upkeep (preallocation) holds the writer for a moment: a
    // caller then is a follower, as it should be. Wait until the thread sleeps.
    settle(&h);
    wait_writer_asleep(&h);
    let me = std::thread::current().id();
    let (ran_in, syncs) = (Arc::new(parking_lot::Mutex::new(None)), h.stats().syncs);
    let seen = ran_in.clone();
    let r = h
        .write(move |m, r, now| {
            *seen.lock() = Some(std::thread::current().id());
            m.accept(&sender(1), send("m0"), r, now)
        })
        .unwrap();
    assert_eq!(r.sequence, 1);
    assert_eq!(*ran_in.lock(), Some(me), "applied in the caller's thread");
    assert_eq!(h.stats().syncs - syncs, 1, "and synced before it returned");
    // A written write is not synced on its way; waiting for it leads the sync.
    let (_, ticket) = h
        .write_written(|m, r, now| m.accept(&sender(1), send("m1"), r, now))
        .unwrap();
    h.wait_durable(ticket).unwrap();
    assert_eq!(h.stats().syncs - syncs, 2);
}

/// A job queued while a leader holds the writer is taken after it (by the writer thread, with
/// nobody else submitting): a durable write, a written one and a read of durable state.
#[test]
fn a_job_queued_while_a_leader_holds_the_writer_is_answered() {
    let home = TempHome::new("follow");
    let s = open(&home, &limits()).unwrap();
    let h = s.handle();
    for kind in 0..3u8 {
        // The holder is a leader: a caller's read job running in its own thread.
        let held = hold_writer(&h);
        assert!(h.core.try_lock().is_none(), "the leader holds the writer");
        let (tx, rx) = crossbeam_channel::bounded(1);
        let follower = {
            let h = h.clone();
            std::thread::spawn(move || {
                let id = format!("f{kind}");
                let r = match kind {
                    0 => h.accept(sender(1), send(&id)).map(|r| r.sequence),
                    1 => h
                        .write_written(move |m, r, now| m.accept(&sender(1), send(&id), r, now))
                        .and_then(|(r, t)| h.wait_durable(t).map(|()| r.sequence)),
                    _ => h.query_in_writer(|m| m.unread().len() as u64),
                };
                tx.send(r).unwrap();
            })
        };
        while h.tx.is_empty() {
            std::thread::yield_now();
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(rx.try_recv().is_err(), "answered while the writer was held");
        assert!(held.release());
        let want = if kind == 2 { 2 } else { u64::from(kind) + 1 };
        assert_eq!(rx.recv().unwrap().unwrap(), want, "job {kind}");
        follower.join().unwrap();
    }
    settle(&h);
    assert!(h.tx.is_empty());
}

/// Many callers leading and following at once, with durable, written and applied-only
/// writes: every write is answered once with its own sequence, and the journal replays to
/// the same state.
#[test]
fn concurrent_leaders_answer_every_job_once_and_replay_to_the_same_state() {
    concurrent_leaders(&limits(), "leaders");
}

/// The same with a small journal: compaction and preallocation run in the writer thread while
/// callers lead.
#[test]
fn concurrent_leaders_with_compaction_and_preallocation_between_their_batches() {
    let mut l = limits();
    l.journal_bytes = 16 * 1024;
    let home = concurrent_leaders(&l, "leaders-compact");
    let s = open(&home, &l).unwrap();
    assert!(s.handle().stats().generation > 1, "compaction ran");
}

fn concurrent_leaders(l: &Limits, tag: &str) -> TempHome {
    const THREADS: usize = 8;
    const EACH: usize = 40;
    let home = TempHome::new(tag);
    let s = open(&home, l).unwrap();
    let h = s.handle();
    let ran = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (h, ran) = (h.clone(), ran.clone());
            std::thread::spawn(move || {
                let mut seqs = Vec::new();
                for i in 0..EACH {
                    let (id, ran) = (format!("t{t}-{i}"), ran.clone());
                    let from = sender(t as u8);
                    let op = move |m: &mut Machine, r: &Recipients, now| {
                        ran.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        m.accept(&from, send(&id), r, now)
                    };
                    let r = match (t + i) % 3 {
                        0 => h.write(op).unwrap(),
                        1 => {
                            let (r, ticket) = h.write_written(op).unwrap();
                            h.wait_durable(ticket).unwrap();
                            r
                        }
                        _ => h.write_applied(op).unwrap(),
                    };
                    seqs.push(r.sequence);
                }
                seqs
            })
        })
        .collect();
    let mut seqs: Vec<u64> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    seqs.sort_unstable();
    let total = (THREADS * EACH) as u64;
    assert_eq!(seqs, (1..=total).collect::<Vec<_>>(), "each answered once");
    assert_eq!(ran.load(std::sync::atomic::Ordering::Relaxed), total);
    settle(&h);
    let st = h.stats();
    assert!(!st.poisoned);
    assert_eq!(st.records, total, "{st:?}");
    let want = image(&h);
    assert_eq!(want.inbox.len() as u64, total);
    s.close().unwrap();
    let s = open(&home, l).unwrap();
    assert_eq!(
        image(&s.handle()),
        want,
        "the journal replays to the same state"
    );
    drop(s);
    home
}

/// A held fdatasync blocks the leader that runs it: its caller is not answered, and callers
/// arriving meanwhile queue behind it; both are answered once the sync is let go.
#[test]
fn a_held_sync_blocks_the_leader_and_queues_the_rest() {
    let home = TempHome::new("leadheld");
    let (s, gate) = open_with_sync_held(&home);
    let h = s.handle();
    h.set_live(ME);
    // The writer thread still in its first look at the queue holds the writer: the first
    // caller would then follow, and the thread would run its batch.
    wait_writer_asleep(&h);
    let spawn_accept = |id: &'static str| {
        let (h, (tx, rx)) = (h.clone(), crossbeam_channel::bounded(1));
        let me = std::thread::spawn(move || {
            let tid = std::thread::current().id();
            let ran = Arc::new(parking_lot::Mutex::new(None));
            let seen = ran.clone();
            let r = h.write(move |m, r, now| {
                *seen.lock() = Some(std::thread::current().id());
                m.accept(&sender(1), send(id), r, now)
            });
            tx.send((r.map(|r| r.sequence), *ran.lock() == Some(tid)))
                .unwrap();
        });
        (me, rx)
    };
    let (first, first_rx) = spawn_accept("m0");
    // The leader has written its frame and waits in the held sync, holding the writer.
    while h.stats().batches == 0 {
        std::thread::yield_now();
    }
    assert!(h.core.try_lock().is_none());
    let (second, second_rx) = spawn_accept("m1");
    while h.tx.is_empty() {
        std::thread::yield_now();
    }
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert!(first_rx.try_recv().is_err(), "answered before its sync");
    assert!(second_rx.try_recv().is_err(), "answered behind a held sync");
    assert_eq!(h.stats().syncs, 0);
    *gate.0.lock() = false;
    gate.1.notify_all();
    let (r0, led) = first_rx.recv().unwrap();
    assert_eq!(r0.unwrap(), 1);
    assert!(led, "the first caller led its own batch");
    assert_eq!(second_rx.recv().unwrap().0.unwrap(), 2);
    first.join().unwrap();
    second.join().unwrap();
}

/// A send's intent is answered once its frame is written and written out to the device,
/// without an fdatasync; the ticket says so; the writer thread's timer still syncs it soon.
#[test]
fn an_intent_frame_is_written_out_not_synced_and_the_timer_still_syncs_it() {
    // The deferred sync's timer (`DEFERRED_SYNC_MS`) may fire between the two writes on a
    // loaded machine, and then the write-out rightly covers less: such a try proves nothing
    // and is made again on a new store.
    for attempt in 0.. {
        assert!(
            attempt < 20,
            "the timer synced between the two writes every time"
        );
        let home = TempHome::new("writeout");
        let s = open(&home, &limits()).unwrap();
        let h = s.handle();
        h.set_live(ME);
        let before = h.stats();
        // A deferred frame first: the intent's write-out covers it too, so no unwritten gap
        // can lie before the intent's frame after a power loss.
        let start = h.stats().journal_bytes;
        h.write_applied(|m, r, now| m.accept(&sender(1), send("m0"), r, now))
            .unwrap();
        let (_, ticket) = h
            .write_written(|m, r, now| m.accept(&sender(1), send("m1"), r, now))
            .unwrap();
        let st = h.stats();
        if st.syncs != before.syncs {
            continue;
        }
        assert_eq!(
            ticket.frame,
            flush::IntentFrame {
                in_room: true,
                written_out: true
            }
        );
        assert_eq!(st.write_outs - before.write_outs, 1);
        assert_eq!(
            st.write_out_bytes - before.write_out_bytes,
            st.journal_bytes - start + journal::MARK_BYTES as u64,
            "the write-out covers every byte since the last fdatasync"
        );
        // The safety net: the deferred sync happens by itself.
        let t = std::time::Instant::now();
        while h.stats().syncs == before.syncs {
            assert!(
                t.elapsed() < std::time::Duration::from_secs(60),
                "never synced"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        h.wait_durable(ticket).unwrap();
        return;
    }
}

/// A sender whose intent nobody covered leads its fdatasync itself, in its own thread, instead
/// of waiting for the writer thread's timer.
#[test]
fn wait_durable_leads_the_sync_of_a_written_out_intent() {
    let home = TempHome::new("leadsync");
    let threads = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let s = open_with_faults(
        &home,
        Faults {
            no_deferred_timer: true,
            sync_threads: Some(threads.clone()),
            ..Faults::default()
        },
    );
    let h = s.handle();
    h.set_live(ME);
    let syncs = h.stats().syncs;
    let (_, ticket) = h
        .write_written(|m, r, now| m.accept(&sender(1), send("m0"), r, now))
        .unwrap();
    assert_eq!(
        h.stats().syncs,
        syncs,
        "the intent was not synced on its way"
    );
    threads.lock().clear();
    h.wait_durable(ticket).unwrap();
    assert_eq!(h.stats().syncs - syncs, 1);
    assert_eq!(*threads.lock(), vec![std::thread::current().id()]);
    // Durable now: a second wait syncs nothing.
    h.wait_durable(ticket).unwrap();
    assert_eq!(h.stats().syncs - syncs, 1);
}

/// A recipient states a device flush only for its own new accept whose batch fdatasynced
/// after it was queued, and only on a journal whose fdatasync flushes its device.
#[test]
fn an_accept_states_its_flush_only_when_it_wrote_and_synced() {
    let home = TempHome::new("stating");
    let s = open(&home, &limits()).unwrap();
    let h = s.handle();
    let dev = h.device();
    let (r, stated) = h.accept_stating(sender(1), send("m0")).unwrap();
    assert_eq!(r.sequence, 1);
    assert_eq!(stated, dev.flushes.then_some(dev.dev));
    // A retry answered from the state wrote nothing: no statement.
    let (again, stated) = h.accept_stating(sender(1), send("m0")).unwrap();
    assert_eq!(again.sequence, 1);
    assert_eq!(stated, None);
    // A store told its fdatasync does not flush states nothing.
    drop(s);
    let home = TempHome::new("stating-off");
    let s = open_with_faults(
        &home,
        Faults {
            unflushed: true,
            ..Faults::default()
        },
    );
    let h = s.handle();
    h.set_live(ME);
    assert!(!h.device().flushes);
    assert_eq!(h.accept_stating(sender(1), send("m0")).unwrap().1, None);
}

/// A failed write-out fails the intent and poisons the store like a failed fdatasync: the
/// error it reported would not be reported again by a later fdatasync of the same file.
#[test]
fn a_failed_write_out_fails_the_intent_and_poisons() {
    let home = TempHome::new("writeoutfail");
    let s = open_with_faults(
        &home,
        Faults {
            fail_write_out: true,
            ..Faults::default()
        },
    );
    let h = s.handle();
    h.set_live(ME);
    let e = h
        .write_written(|m, r, now| m.accept(&sender(1), send("m0"), r, now))
        .unwrap_err();
    assert_eq!(e.code, Code::Io, "{e:?}");
    assert!(h.stats().poisoned);
    let later = h.accept(sender(1), send("m1")).unwrap_err();
    assert_eq!(later.code, Code::RecoveryRequired);
}
