//! Durability under SIGKILL between real `peer host` processes (the crash rule of custody): a
//! sender streams messages with explicit ids through its trusted local channel while the
//! receiver (or the sender) is killed after a random delay. Every message the sender saw
//! `accepted` must be in that receiving incarnation's store exactly once; retries of the
//! unacknowledged ones to the next incarnation converge to exactly one entry there; the
//! receiver never holds a message the sender's outbox does not know. A third loop restarts one
//! sender session 100 times (SIGKILL mid-stream, or SIGSTOP/SIGCONT then a clean stop) while
//! the receiver is stopped past staleMs in some rounds: every message the sender's root took
//! custody of ends delivered exactly once, with no sender record contradicting the receiver.
//! About 370 kill and stop points in all, plus 40 kills of a receiver whose store compacts
//! every few messages (some land inside a compaction: its temp file is left). Also: a killed host's journal with a flipped byte
//! needs recovery and is left untouched; a torn tail is ignored; a sender whose intent
//! fdatasync is held (debug builds' `PEERWIRE_TEST_HOLD_SYNC`; its receiver states no device
//! flush, `PEERWIRE_TEST_UNFLUSHED`) delivers but answers only after that sync, and a kill while it is held leaves the intent for the next incarnation to re-ask.
//!
//! SIGKILL keeps the page cache, so these loops prove the ordering (journal write before the
//! answer, outbox intent before the first byte, replay of whatever the dead process wrote);
//! power-loss durability of the fdatasync itself is covered by the store's own reasoning and
//! its torn-tail unit tests, not by anything a test process can do.

use crate::common;

use common::*;
use nix::sys::signal::Signal;
use peerwire::config::Config;
use peerwire::error::Code;
use peerwire::messaging::ReceiptState;
use peerwire::store::{self, paths};
use peerwire::transport::LocalClient;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Kills per test (two tests: receiver kills and sender kills, ≥ 200 kill points overall).
const KILLS: usize = 105;
/// Fresh messages a sender offers one incarnation at most.
const STREAM_MAX: usize = 40;

fn crash_config(ns: &Ns) {
    crash_config_with(ns, json!({}));
}

/// Fast retries so a sender notices a dead peer quickly; no rate or queue bound in the way of
/// the stream (those rules have their own tests in messaging.rs); plus `extra` limits.
fn crash_config_with(ns: &Ns, extra: Value) {
    let mut limits = json!({
        "acknowledgementMs": 200,
        "routeRetries": 1,
        "ratePerSecond": 1_000_000,
        "rateBurst": 1_000_000,
        "inboxMessages": 1_000_000,
    });
    if let (Some(l), Some(e)) = (limits.as_object_mut(), extra.as_object()) {
        l.extend(e.clone());
    }
    ns.config(json!({ "limits": limits }));
}

fn send(c: &mut LocalClient, to: &str, id: &str) -> peerwire::error::Result<Value> {
    c.call_raw(
        "local.tool",
        &json!({"version": 1, "tool": "send_peer_message",
               "args": {"to": to, "content": format!("content of {id}")}, "messageId": id}),
        20_000,
    )
}

fn rand_below(n: u64) -> u64 {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).unwrap();
    u64::from_le_bytes(b) % n.max(1)
}

/// What one sender thread saw: ids answered `accepted`, ids attempted without that answer.
#[derive(Default)]
struct Seen {
    /// Send calls made (a carried id counts twice).
    offered: usize,
    accepted: Vec<String>,
    unacknowledged: Vec<String>,
}

/// Sends `carry` (each twice: a caller retry with the same id) then fresh ids until the first
/// failure, `stop`, or `STREAM_MAX`.
fn stream(
    mut c: LocalClient,
    to: String,
    carry: Vec<String>,
    fresh_prefix: String,
    started: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
) -> Seen {
    let mut seen = Seen::default();
    let mut plan: Vec<(String, usize)> = carry.into_iter().map(|id| (id, 2)).collect();
    plan.extend((0..STREAM_MAX).map(|n| (format!("{fresh_prefix}-{n}"), 1)));
    let mut failed = false;
    for (id, tries) in plan {
        if failed || stop.load(Ordering::SeqCst) {
            // Carried ids stay owed to the next incarnation; fresh ones were never offered.
            if tries == 2 {
                seen.unacknowledged.push(id);
            }
            continue;
        }
        let mut ok = false;
        for _ in 0..tries {
            seen.offered += 1;
            match send(&mut c, &to, &id) {
                Ok(r) => {
                    assert_eq!(r["messageId"], json!(id));
                    assert_eq!(r["state"], json!("accepted"), "{r}");
                    ok = true;
                }
                Err(e) => {
                    if std::env::var_os("CRASH_DEBUG").is_some() {
                        eprintln!("{id}: {e}");
                    }
                    ok = false;
                    break;
                }
            }
        }
        // The kill clock starts once the connection is up and the first answer is in, so the
        // random delay lands among journal writes, fsyncs and answers, not the handshake.
        started.store(true, Ordering::SeqCst);
        if ok {
            seen.accepted.push(id);
        } else {
            failed = true;
            seen.unacknowledged.push(id);
        }
    }
    seen
}

/// Counts of every message id in a map.
fn counts<'a>(ids: impl Iterator<Item = &'a str>) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for id in ids {
        *m.entry(id.to_string()).or_insert(0) += 1;
    }
    m
}

#[derive(Default, Debug)]
struct Tally {
    kills: usize,
    sent: usize,
    accepted: usize,
    in_doubt: usize,
    /// Answered `accepted`, the sender's copy of the receipt not yet durable at the kill.
    unrecorded: usize,
    lost: usize,
    duplicated: usize,
    phantom: usize,
    /// Killed incarnations whose store had compacted (a snapshot exists).
    compacted: usize,
    /// Killed incarnations that left a compaction's temp file behind (killed inside one).
    mid_compaction: usize,
}

impl Tally {
    /// Checks one receiving incarnation's ids against what the sender planned and saw.
    fn check(&mut self, held: &BTreeMap<String, usize>, planned: &BTreeSet<String>, seen: &Seen) {
        self.sent += seen.offered;
        self.accepted += seen.accepted.len();
        for id in &seen.accepted {
            if !held.contains_key(id) {
                self.lost += 1;
                eprintln!("LOST {id}");
            }
        }
        for (id, n) in held {
            if *n > 1 {
                self.duplicated += n - 1;
                eprintln!("DUPLICATED {id} x{n}");
            }
            if !planned.contains(id) {
                self.phantom += 1;
                eprintln!("PHANTOM {id}");
            }
            if seen.unacknowledged.contains(id) {
                self.in_doubt += 1;
            }
        }
    }
}

#[test]
fn receiver_killed_at_random_points_loses_and_duplicates_nothing() {
    let ns = Ns::new("crashrx");
    crash_config(&ns);
    let tally = receiver_kill_loop(&ns, KILLS);
    eprintln!("receiver kills: {tally:?}");
    assert_eq!(tally.kills, KILLS);
    assert_eq!((tally.lost, tally.duplicated, tally.phantom), (0, 0, 0));
    assert!(tally.accepted > KILLS, "the stream barely ran: {tally:?}");
}

/// Kills during compaction: the receiver's store compacts after about 1 KiB of journal and
/// then whenever the journal has grown as large as the snapshot (after 2, 4, 8, 16 … messages),
/// so random kills land before, inside (snapshot temp written or renamed, journal swapped or
/// not, sync point old or new) and after compactions.
#[test]
fn receiver_killed_while_compacting_loses_and_duplicates_nothing() {
    const COMPACTION_KILLS: usize = 40;
    let ns = Ns::new("crashcompact");
    crash_config_with(&ns, json!({"journalBytes": 1_024}));
    let tally = receiver_kill_loop(&ns, COMPACTION_KILLS);
    eprintln!("receiver kills while compacting: {tally:?}");
    assert_eq!(tally.kills, COMPACTION_KILLS);
    assert_eq!((tally.lost, tally.duplicated, tally.phantom), (0, 0, 0));
    assert!(
        tally.compacted > COMPACTION_KILLS / 2,
        "too few incarnations compacted: {tally:?}"
    );
}

/// Starts a receiver `kills` times, streams to it from one sender and SIGKILLs it at a random
/// point; checks each dead incarnation's store against what the sender saw.
fn receiver_kill_loop(ns: &Ns, kills: usize) -> Tally {
    let limits = Config::load(&ns.home).unwrap().limits;
    let alice = ns.host(&["--alias", "alice"]);
    let mut tally = Tally::default();
    let mut carry: Vec<String> = Vec::new();
    for kill in 0..kills {
        let mut bob = ns.host(&["--alias", "bob"]);
        let (bob_instance, bob_session) = (bob.field("instanceId"), bob.field("sessionId"));
        let started = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let planned: BTreeSet<String> = carry
            .iter()
            .cloned()
            .chain((0..STREAM_MAX).map(|n| format!("rx{kill}-{n}")))
            .collect();
        let worker = {
            let (c, to) = (alice.client(), bob.field("peerId"));
            let (carry, started, stop) = (carry.clone(), started.clone(), stop.clone());
            std::thread::spawn(move || stream(c, to, carry, format!("rx{kill}"), started, stop))
        };
        assert!(eventually(10, || started.load(Ordering::SeqCst)));
        // Every third incarnation is also frozen for a while first: the sender times out and
        // retries, so the receiver sees the same message again after it wakes (dedup).
        if kill % 3 == 1 {
            bob.signal(Signal::SIGSTOP);
            std::thread::sleep(Duration::from_millis(rand_below(400)));
            bob.signal(Signal::SIGCONT);
        }
        std::thread::sleep(Duration::from_micros(rand_below(30_000)));
        bob.signal(Signal::SIGKILL);
        bob.wait();
        stop.store(true, Ordering::SeqCst);
        let seen = worker.join().unwrap();
        let unread = store::recover_unread(&ns.home, &bob_instance, &bob_session, &limits)
            .unwrap_or_else(|e| panic!("incarnation {bob_instance} unreadable: {e}"));
        assert!(
            unread
                .iter()
                .all(|e| e.from.peer_id == alice.field("peerId"))
        );
        let held = counts(unread.iter().map(|e| e.message_id.as_str()));
        tally.kills += 1;
        // Reading the dead store is read-only: what the kill left is still there.
        let dir = paths::store_dir(&ns.home, &bob_instance);
        if dir.join(paths::SNAPSHOT).exists() {
            tally.compacted += 1;
        }
        let left_temp = std::fs::read_dir(&dir).unwrap().flatten().any(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name == paths::JOURNAL_TMP || name.starts_with(".messages.json.")
        });
        if left_temp {
            tally.mid_compaction += 1;
        }
        tally.check(&held, &planned, &seen);
        carry = seen.unacknowledged;
    }
    tally
}

/// Every message of one recipient from `from`, through the recipient's local channel.
fn inbox_from(c: &mut LocalClient, from: &str) -> Vec<Value> {
    all_messages(c, json!({"from": from}))
}

#[test]
fn sender_killed_at_random_points_keeps_outbox_ahead_of_the_wire() {
    let ns = Ns::new("crashtx");
    crash_config(&ns);
    let limits = Config::load(&ns.home).unwrap().limits;
    let bob = ns.host(&["--alias", "bob"]);
    let mut bob_client = bob.client();
    let mut tally = Tally::default();
    let mut carry: Vec<String> = Vec::new();
    for kill in 0..KILLS {
        let mut alice = ns.host(&["--alias", "alice"]);
        let (alice_instance, alice_peer) = (alice.field("instanceId"), alice.field("peerId"));
        let started = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let planned: BTreeSet<String> = carry
            .iter()
            .cloned()
            .chain((0..STREAM_MAX).map(|n| format!("tx{kill}-{n}")))
            .collect();
        let worker = {
            let (c, to) = (alice.client(), bob.field("peerId"));
            let (carry, started, stop) = (carry.clone(), started.clone(), stop.clone());
            std::thread::spawn(move || stream(c, to, carry, format!("tx{kill}"), started, stop))
        };
        assert!(eventually(10, || started.load(Ordering::SeqCst)));
        std::thread::sleep(Duration::from_micros(rand_below(30_000)));
        alice.signal(Signal::SIGKILL);
        alice.wait();
        stop.store(true, Ordering::SeqCst);
        let seen = worker.join().unwrap();
        // The dead sender's outbox: every intent was written before its first byte.
        let loaded = store::recovery::load(&paths::store_dir(&ns.home, &alice_instance), &limits)
            .unwrap_or_else(|e| panic!("sender store {alice_instance} unreadable: {e}"));
        let outbox: BTreeMap<String, Option<ReceiptState>> = loaded
            .state
            .outbox()
            .map(|e| (e.message_id.clone(), e.receipt.as_ref().map(|r| r.state)))
            .collect();
        let got = inbox_from(&mut bob_client, &alice_peer);
        let held = counts(got.iter().map(|m| m["messageId"].as_str().unwrap_or("")));
        // `accepted` reaches the caller once the receiver made the message durable; the
        // sender's copy of that receipt is not waited for, so a kill can leave the entry
        // unresolved (its intent is durable): recovery re-asks and the receiver, which holds
        // it exactly once, answers the original receipt. The sender never records anything
        // but `accepted` for it.
        for id in &seen.accepted {
            match outbox.get(id) {
                Some(Some(ReceiptState::Accepted)) => {}
                Some(None) => {
                    tally.unrecorded += 1;
                    assert_eq!(
                        held.get(id),
                        Some(&1),
                        "{id} was answered accepted, is unresolved at the sender and not held once by the receiver"
                    );
                }
                other => {
                    panic!("{id} was answered accepted but the sender's outbox says {other:?}")
                }
            }
        }
        for id in held.keys() {
            assert!(
                outbox.contains_key(id),
                "{id} reached the receiver without an outbox intent at the sender"
            );
        }
        tally.kills += 1;
        tally.check(&held, &planned, &seen);
        carry = seen.unacknowledged;
    }
    eprintln!("sender kills: {tally:?}");
    assert_eq!(tally.kills, KILLS);
    assert_eq!((tally.lost, tally.duplicated, tally.phantom), (0, 0, 0));
    assert!(tally.accepted > KILLS, "the stream barely ran: {tally:?}");
}

/// Every file of a store directory with its bytes.
fn snapshot_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    file_bytes(dir, &[])
}

fn unread_ids(o: &std::process::Output) -> Vec<String> {
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    v["unread"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|m| m["messageId"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_killed_hosts_journal_torn_or_flipped_is_reviewed_or_refused_untouched() {
    let ns = Ns::new("crashflip");
    crash_config(&ns);
    let alice = ns.host(&["--alias", "alice"]);
    let mut bob = ns.host(&["--alias", "bob", "--session-id", "s-flip"]);
    let (bob_instance, bob_peer) = (bob.field("instanceId"), bob.field("peerId"));
    let mut c = alice.client();
    let ids: Vec<String> = (0..6).map(|n| format!("f-{n}")).collect();
    for id in &ids {
        send(&mut c, &bob_peer, id).unwrap();
    }
    bob.signal(Signal::SIGKILL);
    bob.wait();
    let dir = paths::store_dir(&ns.home, &bob_instance);
    let journal = dir.join(paths::JOURNAL);

    // Intact: every accepted message is there for review.
    let o = recover_review(&ns, &bob_instance, "s-flip");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(unread_ids(&o), ids);

    // A torn tail (one more batch cut short at a sector boundary, as a power loss mid-write
    // leaves it) is ignored read-only: the messages are all there and no file changes.
    let whole = std::fs::read(&journal).unwrap();
    let end = journal_frames_end(&whole);
    std::fs::write(&journal, journal_with_torn_frame(&whole)).unwrap();
    let before = snapshot_files(&dir);
    let o = recover_review(&ns, &bob_instance, "s-flip");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let kept = unread_ids(&o);
    assert_eq!(kept, ids, "a torn tail lost an acknowledged batch");
    assert_eq!(snapshot_files(&dir), before, "review changed the store");

    // One flipped bit in the middle: RECOVERY_REQUIRED, bytes unchanged.
    let mut flipped = whole.clone();
    let mid = end / 2;
    flipped[mid] ^= 0x10;
    std::fs::write(&journal, &flipped).unwrap();
    let before = snapshot_files(&dir);
    let o = recover_review(&ns, &bob_instance, "s-flip");
    assert_eq!(
        o.status.code(),
        Some(Code::RecoveryRequired.exit_status()),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        snapshot_files(&dir),
        before,
        "a refused recovery changed the store"
    );

    // The wrong session id is refused too, without reading further.
    std::fs::write(&journal, &whole).unwrap();
    let o = recover_review(&ns, &bob_instance, "s-other");
    assert_ne!(o.status.code(), Some(0));
}

/// Rounds of the mixed sender-restart test (each ≥ 1 kill or stop point).
const ROUNDS: usize = 100;

#[test]
fn sender_restarts_and_stops_deliver_every_message_exactly_once() {
    // A sender session (fixed --session-id) restarted every round: SIGKILLed mid-stream, or
    // stopped (SIGSTOP/SIGCONT) and then terminated cleanly; the receiver is stopped longer
    // than staleMs in some rounds. Nobody retries by hand: each new incarnation takes over what
    // its dead predecessors left unresolved. At the end every id a send call answered
    // `accepted` or "not yet acknowledged" is in the receiver's store exactly once, nothing
    // else is, no sender store is left with an unresolved entry, and no sender record
    // contradicts the receiver's (a failure where the receiver holds the message).
    let ns = Ns::new("crashmix");
    // Room for every message of every round in the receiver's store: sends are fast enough
    // (one fdatasync each) that 100 rounds of a stream outgrow the default storageBytes, and a
    // full store answers QUEUE_FULL, which would hold the route's head (and everything behind
    // it) unresolved, correctly but beside this test's point.
    crash_config_with(
        &ns,
        json!({"heartbeatMs": 100, "staleMs": 500, "storageBytes": 64u64 << 20}),
    );
    let limits = Config::load(&ns.home).unwrap().limits;
    let bob = ns.host(&["--alias", "bob"]);
    let to = bob.field("peerId");
    let (mut kills, mut stops) = (0usize, 0usize);
    // Ids the sender's root took custody of (answered accepted or "queued"), and ids whose
    // call died with the root (custody unknown).
    let (mut owed, mut unknown) = (BTreeSet::new(), BTreeSet::new());
    let mut instances = Vec::new();
    for round in 0..ROUNDS {
        let mut alice = ns.host(&["--alias", "alice", "--session-id", "s-mix"]);
        instances.push(alice.field("instanceId"));
        let started = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let worker = {
            let (c, to) = (alice.client(), to.clone());
            let (started, stop) = (started.clone(), stop.clone());
            std::thread::spawn(move || stream_custody(c, to, format!("mx{round}"), started, stop))
        };
        assert!(eventually(10, || started.load(Ordering::SeqCst)));
        std::thread::sleep(Duration::from_micros(rand_below(20_000)));
        match round % 4 {
            // The receiver stops for longer than staleMs while the sender keeps going.
            1 => {
                bob.signal(Signal::SIGSTOP);
                stops += 1;
                std::thread::sleep(Duration::from_millis(300 + rand_below(600)));
                bob.signal(Signal::SIGCONT);
                alice.signal(Signal::SIGKILL);
                kills += 1;
            }
            // The sender itself is stopped, resumed and ends cleanly.
            3 => {
                alice.signal(Signal::SIGSTOP);
                stops += 1;
                std::thread::sleep(Duration::from_millis(rand_below(300)));
                alice.signal(Signal::SIGCONT);
                alice.signal(Signal::SIGTERM);
            }
            _ => {
                alice.signal(Signal::SIGKILL);
                kills += 1;
            }
        }
        alice.wait();
        stop.store(true, Ordering::SeqCst);
        let (custody, died) = worker.join().unwrap();
        owed.extend(custody);
        unknown.extend(died);
    }
    // The last incarnation takes over whatever is left and delivers it.
    let alice = ns.host(&["--alias", "alice", "--session-id", "s-mix"]);
    let me = alice.field("instanceId");
    let unresolved = || -> Vec<String> {
        let mut left = Vec::new();
        for inst in instances.iter().chain([&me]) {
            if let Ok(r) = store::review(&ns.home, inst, "s-mix", &limits) {
                left.extend(r.unresolved.into_iter().map(|e| e.message_id));
            }
        }
        left
    };
    assert!(
        eventually(60, || unresolved().is_empty()),
        "still unresolved at the end: {:?}",
        unresolved()
    );
    let got = inbox_from_all(&mut bob.client());
    let held = counts(got.iter().map(|m| m["messageId"].as_str().unwrap_or("")));
    let (mut lost, mut duplicated, mut phantom, mut contradictions) = (0, 0, 0, 0);
    for id in &owed {
        if !held.contains_key(id) {
            lost += 1;
            eprintln!("LOST {id}");
        }
    }
    for (id, n) in &held {
        if *n > 1 {
            duplicated += n - 1;
            eprintln!("DUPLICATED {id} x{n}");
        }
        if !owed.contains(id) && !unknown.contains(id) {
            phantom += 1;
            eprintln!("PHANTOM {id}");
        }
    }
    // Every sender record still on disk agrees with the receiver.
    let state_at_bob: BTreeMap<String, String> = got
        .iter()
        .map(|m| {
            (
                m["messageId"].as_str().unwrap_or("").to_string(),
                m["state"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    for inst in instances.iter().chain([&me]) {
        let dir = paths::store_dir(&ns.home, inst);
        let Ok(loaded) = store::recovery::load(&dir, &limits) else {
            continue;
        };
        for e in loaded.state.outbox() {
            let Some(r) = &e.receipt else { continue };
            let at_bob = state_at_bob.get(&e.message_id);
            let contradicts = match at_bob {
                Some(_) => r.state.is_failure(),
                None => !r.state.is_failure(),
            };
            if contradicts {
                contradictions += 1;
                eprintln!(
                    "CONTRADICTION {}: sender says {:?}, receiver holds {at_bob:?}",
                    e.message_id, r.state
                );
            }
        }
    }
    eprintln!(
        "sender restarts: {ROUNDS} rounds, {kills} kills, {stops} stops, {} owed, {} unknown, \
         {} held; lost {lost}, duplicated {duplicated}, phantom {phantom}, contradictions \
         {contradictions}",
        owed.len(),
        unknown.len(),
        held.len()
    );
    assert!(owed.len() > ROUNDS, "the stream barely ran");
    assert_eq!((lost, duplicated, phantom, contradictions), (0, 0, 0, 0));
}

/// Sends fresh ids until `stop` or the first failure; returns (ids the root took custody of:
/// answered accepted or "not yet acknowledged, still queued"; ids whose call ended without a
/// custody answer from the root, e.g. because the root died).
fn stream_custody(
    mut c: LocalClient,
    to: String,
    prefix: String,
    started: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
) -> (Vec<String>, Vec<String>) {
    let (mut custody, mut died) = (Vec::new(), Vec::new());
    for n in 0..STREAM_MAX {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let id = format!("{prefix}-{n}");
        let r = send(&mut c, &to, &id);
        started.store(true, Ordering::SeqCst);
        match r {
            Ok(v) => {
                assert_eq!(v["state"], json!("accepted"), "{v}");
                custody.push(id);
            }
            Err(e) if e.code == Code::Timeout && e.message.contains("stays in the outbox") => {
                custody.push(id);
            }
            Err(_) => {
                died.push(id);
                break;
            }
        }
    }
    (custody, died)
}

/// Every message of a recipient (any sender), through its local channel.
fn inbox_from_all(c: &mut LocalClient) -> Vec<Value> {
    all_messages(c, json!({}))
}

/// How many times the receiver holds `id` unconsumed (read-only, from its store files).
fn held_by(ns: &Ns, host: &Host, id: &str) -> usize {
    let limits = Config::load(&ns.home).unwrap().limits;
    let (instance, session) = (host.field("instanceId"), host.field("sessionId"));
    store::review(&ns.home, &instance, &session, &limits)
        .map(|r| r.unread.iter().filter(|e| e.message_id == id).count())
        .unwrap_or(0)
}

/// The sender's intent is in its journal file before the first byte leaves, and its fdatasync
/// runs while the message is delivered: with that sync held, the recipient already holds the
/// message, yet the caller is not told `accepted` until the intent is durable. A SIGKILL while
/// the sync is held leaves the written intent unresolved in the dead store; the next
/// incarnation re-asks and the recipient still holds the message exactly once.
#[test]
fn accepted_waits_for_the_senders_intent_sync_which_overlaps_delivery() {
    let ns = Ns::new("crashhold");
    // Store waits are bounded by 4 × acknowledgementMs: room for the held sync under load.
    ns.config(json!({"limits": {"acknowledgementMs": 5_000}}));
    let limits = Config::load(&ns.home).unwrap().limits;
    // Bob states no device flush: on a shared ext4 device his accept's fdatasync would
    // otherwise make alice's written-out intent durable, and she would not sync it herself.
    let bob = ns.host_with(&["--alias", "bob"], |c| {
        c.env(store::UNFLUSHED_ENV, "1");
    });
    let bob_peer = bob.field("peerId");
    let hold = ns.root.join("hold-sync");
    let alice_host = || {
        ns.host_with(&["--alias", "alice", "--session-id", "s-hold"], |c| {
            c.env(store::HOLD_SYNC_ENV, &hold);
        })
    };
    let mut alice = alice_host();
    let alice_instance = alice.field("instanceId");
    let send_in_background = |id: &'static str| {
        let (tx, rx) = std::sync::mpsc::channel();
        let (mut c, to) = (alice.client(), bob_peer.clone());
        let t = std::thread::spawn(move || {
            let _ = tx.send(send(&mut c, &to, id));
        });
        (t, rx)
    };

    // A durable read syncs whatever the sender's store wrote without a sync so far, so the
    // hold below stops the next intent's fdatasync, not an earlier frame's.
    let settle = || all_messages(&mut alice.client(), json!({}));
    // Held sync: delivered, not yet answered; released: accepted.
    settle();
    std::fs::write(&hold, b"").unwrap();
    let (t, answer) = send_in_background("held-1");
    assert!(
        eventually(20, || held_by(&ns, &bob, "held-1") == 1),
        "the receiver never got the message while the sender's intent fdatasync was held"
    );
    std::thread::sleep(Duration::from_millis(200));
    let early = answer.try_recv();
    assert!(
        early.is_err(),
        "the caller heard an answer before the sender's intent was durable: {early:?}"
    );
    std::fs::remove_file(&hold).unwrap();
    let r = answer
        .recv_timeout(Duration::from_secs(20))
        .unwrap()
        .unwrap();
    assert_eq!(r["state"], json!("accepted"), "{r}");
    t.join().unwrap();

    // Killed while the intent's sync is held: the caller never hears accepted.
    settle();
    std::fs::write(&hold, b"").unwrap();
    let (t, answer) = send_in_background("held-2");
    assert!(eventually(20, || held_by(&ns, &bob, "held-2") == 1));
    alice.signal(Signal::SIGKILL);
    alice.wait();
    t.join().unwrap();
    let told = answer.recv_timeout(Duration::from_secs(20)).unwrap();
    assert!(
        told.is_err(),
        "told {told:?} though the intent never became durable"
    );
    std::fs::remove_file(&hold).unwrap();
    // The intent was written (a kill keeps the page cache): unresolved, to be re-asked.
    let dir = paths::store_dir(&ns.home, &alice_instance);
    let loaded = store::recovery::load(&dir, &limits).unwrap();
    let entry = loaded.state.outbox().find(|e| e.message_id == "held-2");
    assert!(
        entry.is_some_and(|e| e.receipt.is_none()),
        "the dead sender's outbox should hold held-2 unresolved"
    );

    // The next incarnation takes it over and re-asks; the receiver deduplicates.
    let alice2 = alice_host();
    let unresolved = || -> usize {
        [&alice_instance, &alice2.field("instanceId")]
            .iter()
            .filter_map(|i| store::review(&ns.home, i, "s-hold", &limits).ok())
            .map(|r| r.unresolved.len())
            .sum()
    };
    assert!(
        eventually(30, || unresolved() == 0),
        "still unresolved after the restart"
    );
    assert_eq!(held_by(&ns, &bob, "held-1"), 1);
    assert_eq!(held_by(&ns, &bob, "held-2"), 1);
}
