//! Damage below the commit mark is never a torn tail, between real processes: a killed
//! receiver's journal (before and after compaction, with some messages consumed) and a killed
//! sender's journal holding an unresolved intent are zeroed from, and cut at, every frame
//! boundary. Each case either reviews with every acknowledged message (and no consumed one
//! back as unread) or answers RECOVERY_REQUIRED naming the damaged byte, with every file left
//! as it was; none is silent. A deleted or older `messages.sync` is refused, and a restarted
//! session leaves a damaged predecessor's store where it is and says so.

use crate::common;

use common::*;
use nix::sys::signal::Signal;
use peerwire::error::Code;
use peerwire::store::paths;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

/// The store's files and their bytes; the lock file (which holds the last opener's pid, not
/// store data) is left out.
fn store_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    file_bytes(dir, &[paths::LOCK])
}

fn ids_of(v: &Value, key: &str) -> BTreeSet<String> {
    v[key]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|m| m["messageId"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn send(ns: &Ns, from: &Host, to: &str, id: &str) -> std::process::Output {
    peer_as(
        ns,
        from,
        &["send", to, &format!("text of {id}"), "--message-id", id],
    )
}

/// What one damage matrix found.
#[derive(Debug, Default)]
struct Tally {
    reviewed: usize,
    refused: usize,
}

/// Zeroes the journal of the store in `dir` from, and cuts it at, each of its frame
/// boundaries (the header's end, every frame's end), and reviews each: a review that succeeds
/// must pass `check` (every acknowledged message, nothing consumed back); a refusal must be
/// RECOVERY_REQUIRED naming the boundary, with no file changed. Restores the journal.
fn damage_every_boundary(
    ns: &Ns,
    dir: &Path,
    instance: &str,
    session: &str,
    check: &dyn Fn(&Value) -> Result<(), String>,
) -> Tally {
    let path = dir.join(paths::JOURNAL);
    let whole = std::fs::read(&path).unwrap();
    let o = recover_review(ns, instance, session);
    assert_eq!(o.status.code(), Some(0), "intact: {}", stderr(&o));
    check(&json_of(&o)).unwrap_or_else(|e| panic!("intact store: {e}"));
    let mut tally = Tally::default();
    for at in journal_frame_starts(&whole) {
        for zeros in [true, false] {
            let damaged = if zeros {
                let mut d = whole.clone();
                d[at..].fill(0);
                d
            } else {
                whole[..at].to_vec()
            };
            std::fs::write(&path, &damaged).unwrap();
            let before = store_files(dir);
            let o = recover_review(ns, instance, session);
            let how = if zeros { "zeros from" } else { "cut at" };
            let said = format!("{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
            match o.status.code() {
                Some(0) => {
                    check(&json_of(&o))
                        .unwrap_or_else(|e| panic!("{how} byte {at} reviewed silently: {e}"));
                    tally.reviewed += 1;
                }
                Some(c) if c == Code::RecoveryRequired.exit_status() => {
                    assert!(
                        said.contains(&format!("byte {at}")),
                        "{how} {at}: the refusal names the damaged byte: {said}"
                    );
                    tally.refused += 1;
                }
                other => panic!("{how} {at}: exit {other:?}: {}", stderr(&o)),
            }
            assert!(
                store_files(dir) == before,
                "{how} {at}: review changed files"
            );
        }
    }
    std::fs::write(&path, &whole).unwrap();
    tally
}

/// Every acknowledged, unconsumed message is unread, and no consumed one is.
fn unread_is(
    want: &BTreeSet<String>,
    consumed: &BTreeSet<String>,
) -> impl Fn(&Value) -> Result<(), String> {
    let (want, consumed) = (want.clone(), consumed.clone());
    move |v: &Value| {
        let got = ids_of(v, "unread");
        if let Some(back) = got.intersection(&consumed).next() {
            return Err(format!("consumed {back} is unread again"));
        }
        if got != want {
            return Err(format!("unread {got:?}, acknowledged {want:?}"));
        }
        Ok(())
    }
}

/// Sends `ids` from alice to bob (all must be accepted) and consumes `consume` on bob's side.
fn deliver(ns: &Ns, alice: &Host, bob: &Host, ids: &[String], consume: &[String]) {
    let to = bob.field("peerId");
    for id in ids {
        let o = send(ns, alice, &to, id);
        assert_eq!(o.status.code(), Some(0), "{id}: {}", stderr(&o));
        if consume.contains(id) {
            let c = peer_as(ns, bob, &["consume", id]);
            assert_eq!(c.status.code(), Some(0), "{}", stderr(&c));
        }
    }
}

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

#[test]
fn a_receivers_journal_damaged_at_any_frame_boundary_is_refused_never_silent() {
    let ns = Ns::new("dmgrecv");
    let alice = ns.host(&["--alias", "alice"]);
    let mut bob = ns.host(&["--alias", "bob", "--session-id", "s-dmg"]);
    let instance = bob.field("instanceId");
    let ids = names("r", 7);
    let consumed: Vec<String> = vec![ids[1].clone(), ids[4].clone()];
    deliver(&ns, &alice, &bob, &ids, &consumed);
    bob.signal(Signal::SIGKILL);
    bob.wait();
    let dir = paths::store_dir(&ns.home, &instance);
    let consumed: BTreeSet<String> = consumed.into_iter().collect();
    let want: BTreeSet<String> = ids
        .iter()
        .filter(|i| !consumed.contains(*i))
        .cloned()
        .collect();
    let t = damage_every_boundary(&ns, &dir, &instance, "s-dmg", &unread_is(&want, &consumed));
    eprintln!("receiver, one generation: {t:?}");
    assert!(t.refused >= 2 * 8, "{t:?}");

    // messages.sync deleted: a store with records and no record of how far it committed.
    let sync = std::fs::read(dir.join(paths::SYNC)).unwrap();
    std::fs::remove_file(dir.join(paths::SYNC)).unwrap();
    let before = store_files(&dir);
    let o = recover_review(&ns, &instance, "s-dmg");
    assert_eq!(
        o.status.code(),
        Some(exit_of(Code::RecoveryRequired)),
        "{}",
        stderr(&o)
    );
    let said = format!("{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
    assert!(said.contains("messages.sync"), "{said}");
    assert!(store_files(&dir) == before);
    std::fs::write(dir.join(paths::SYNC), sync).unwrap();
}

#[test]
fn a_compacted_receivers_journal_damaged_at_any_boundary_never_brings_consumed_mail_back() {
    let ns = Ns::new("dmgcomp");
    // A small journal: the store compacts every few messages.
    ns.config(json!({"limits": {"journalBytes": 1_024}}));
    let alice = ns.host(&["--alias", "alice"]);
    let mut bob = ns.host(&["--alias", "bob", "--session-id", "s-dmgc"]);
    let instance = bob.field("instanceId");
    let dir = paths::store_dir(&ns.home, &instance);
    let first_sync = std::fs::read(dir.join(paths::SYNC)).unwrap();
    let ids = names("c", 9);
    let consumed: Vec<String> = vec![ids[0].clone(), ids[3].clone(), ids[7].clone()];
    deliver(&ns, &alice, &bob, &ids, &consumed);
    let info = json_of(&peer_as(&ns, &bob, &["--json", "status"]));
    // Two at least: the first sync point is then older than the snapshot.
    assert!(
        info["store"]["compactions"].as_u64().unwrap_or(0) >= 2,
        "too few compactions ran: {info}"
    );
    bob.signal(Signal::SIGKILL);
    bob.wait();
    let consumed: BTreeSet<String> = consumed.into_iter().collect();
    let want: BTreeSet<String> = ids
        .iter()
        .filter(|i| !consumed.contains(*i))
        .cloned()
        .collect();
    let check = unread_is(&want, &consumed);
    let t = damage_every_boundary(&ns, &dir, &instance, "s-dmgc", &check);
    eprintln!("receiver, compacted: {t:?}");
    assert!(t.refused >= 2, "{t:?}");

    // The journal gone after a compaction, or an older messages.sync: refused too.
    for (what, name, bytes) in [
        ("journal deleted", paths::JOURNAL, None),
        ("older sync point", paths::SYNC, Some(first_sync.clone())),
        ("sync point deleted", paths::SYNC, None),
    ] {
        let saved = std::fs::read(dir.join(name)).unwrap();
        match &bytes {
            Some(b) => std::fs::write(dir.join(name), b).unwrap(),
            None => std::fs::remove_file(dir.join(name)).unwrap(),
        }
        let before = store_files(&dir);
        let o = recover_review(&ns, &instance, "s-dmgc");
        if o.status.code() == Some(0) {
            check(&json_of(&o)).unwrap_or_else(|e| panic!("{what}: silent: {e}"));
            panic!("{what}: reviewed as whole");
        }
        assert_eq!(
            o.status.code(),
            Some(exit_of(Code::RecoveryRequired)),
            "{what}: {}",
            stderr(&o)
        );
        assert!(store_files(&dir) == before, "{what}");
        std::fs::write(dir.join(name), saved).unwrap();
    }
}

#[test]
fn a_senders_journal_with_an_unresolved_intent_damaged_at_any_boundary_is_refused() {
    let ns = Ns::new("dmgsend");
    ns.config(json!({"limits": {
        "heartbeatMs": 100, "staleMs": 600, "acknowledgementMs": 300, "routeRetries": 1
    }}));
    let mut alice = ns.host(&["--alias", "alice", "--session-id", "s-dmga"]);
    let bob = ns.host(&["--alias", "bob"]);
    let instance = alice.field("instanceId");
    let to = bob.field("peerId");
    for id in ["w-1", "w-2"] {
        let o = send(&ns, &alice, &to, id);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    }
    bob.pause();
    std::thread::sleep(Duration::from_millis(1_000));
    // Not acknowledged by bob: it stays in alice's outbox, a promise about her store.
    let o = send(&ns, &alice, &to, "u-1");
    assert_eq!(
        o.status.code(),
        Some(exit_of(Code::Timeout)),
        "{}",
        stderr(&o)
    );
    alice.signal(Signal::SIGKILL);
    alice.wait();
    let dir = paths::store_dir(&ns.home, &instance);
    let check = |v: &Value| {
        let got = ids_of(v, "unresolved");
        if got.contains("u-1") {
            Ok(())
        } else {
            Err(format!("the unresolved intent u-1 is gone: {got:?}"))
        }
    };
    let t = damage_every_boundary(&ns, &dir, &instance, "s-dmga", &check);
    eprintln!("sender: {t:?}");
    assert!(t.refused >= 2 * 3, "{t:?}");
    bob.signal(Signal::SIGCONT);
}

#[test]
fn a_restart_over_a_damaged_predecessor_leaves_it_and_says_so_once() {
    let ns = Ns::new("dmgadopt");
    let alice = ns.host(&["--alias", "alice"]);
    let mut bob = ns.host(&["--alias", "bob", "--session-id", "s-dmgr"]);
    let old = bob.field("instanceId");
    deliver(&ns, &alice, &bob, &names("a", 4), &[]);
    bob.signal(Signal::SIGKILL);
    bob.wait();
    let dir = paths::store_dir(&ns.home, &old);
    let journal = dir.join(paths::JOURNAL);
    let mut bytes = std::fs::read(&journal).unwrap();
    // Zero-filled from the second frame on, as a lost write cache can leave it.
    let at = journal_frame_starts(&bytes)[2];
    bytes[at..].fill(0);
    std::fs::write(&journal, &bytes).unwrap();
    let before = store_files(&dir);

    let mut bob2 = ns.host(&["--alias", "bob", "--session-id", "s-dmgr"]);
    assert_ne!(bob2.field("instanceId"), old);
    let status = json_of(&peer_as(&ns, &bob2, &["--json", "status"]));
    let recover = format!("peer recover --instance {old} --session-id s-dmgr");
    let problems = status["problems"].as_array().cloned().unwrap_or_default();
    let told: Vec<&Value> = problems
        .iter()
        .filter(|p| p["what"].as_str().is_some_and(|w| w.contains(&recover)))
        .collect();
    assert_eq!(told.len(), 1, "{status}");
    assert_eq!(told[0]["code"], json!("RECOVERY_REQUIRED"), "{status}");
    assert!(
        told[0]["what"]
            .as_str()
            .unwrap()
            .contains(&dir.display().to_string()),
        "{status}"
    );
    let listed = &status["store"]["predecessorsUnverified"];
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{status}");
    assert_eq!(listed[0]["instanceId"], json!(old), "{status}");
    assert_eq!(
        listed[0]["path"],
        json!(dir.display().to_string()),
        "{status}"
    );
    assert_eq!(listed[0]["recover"], json!(recover), "{status}");
    assert!(
        store_files(&dir) == before,
        "the damaged predecessor was touched"
    );
    let (_, err) = bob2.end_for_report();
    assert_eq!(err.matches(&recover).count(), 1, "{err}");
    // Still there for review, and still refused.
    let o = recover_review(&ns, &old, "s-dmgr");
    assert_eq!(
        o.status.code(),
        Some(exit_of(Code::RecoveryRequired)),
        "{}",
        stderr(&o)
    );
}

/// Message ids in a `peer --json inbox --all` answer, with repeats.
fn inbox_ids(ns: &Ns, host: &Host) -> Vec<String> {
    let v = json_of(&peer_as(ns, host, &["--json", "inbox", "--all"]));
    let mut ids: Vec<String> = v["messages"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|m| m["messageId"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    ids.sort();
    ids
}

/// Kills `host` and zeroes its journal from the second frame on: its restart sets it aside.
fn kill_and_damage(ns: &Ns, host: &mut Host) -> String {
    let old = host.field("instanceId");
    host.signal(Signal::SIGKILL);
    host.wait();
    let journal = paths::store_dir(&ns.home, &old).join(paths::JOURNAL);
    let mut bytes = std::fs::read(&journal).unwrap();
    let at = journal_frame_starts(&bytes)[2];
    bytes[at..].fill(0);
    std::fs::write(&journal, &bytes).unwrap();
    old
}

/// Waits until `host`'s root knows the session of a recipient it holds accepted mail for
/// (what lets it find that recipient's successor later).
fn knows_recipient_session(ns: &Ns, host: &Host) {
    assert!(
        eventually(60, || {
            let s = json_of(&peer_as(ns, host, &["--json", "status"]));
            s["store"]["recipientSessionsKnown"].as_u64().unwrap_or(0) >= 1
        }),
        "the sender never looked up its recipient's session"
    );
}

#[test]
fn a_recipient_that_lost_its_store_gets_every_accepted_message_again_exactly_once() {
    let ns = Ns::new("dmgrepair");
    let mut alice = ns.host(&["--alias", "alice"]);
    let mut bob = ns.host(&["--alias", "bob", "--session-id", "s-rep"]);
    let old_peer = bob.field("peerId");
    let ids = names("r", 5);
    deliver(&ns, &alice, &bob, &ids, &[]);
    knows_recipient_session(&ns, &alice);
    kill_and_damage(&ns, &mut bob);

    let bob2 = ns.host(&["--alias", "bob", "--session-id", "s-rep"]);
    let status = json_of(&peer_as(&ns, &bob2, &["--json", "status"]));
    assert_eq!(
        status["store"]["predecessorsUnverified"]
            .as_array()
            .map(Vec::len),
        Some(1),
        "{status}"
    );
    let mut want = ids.clone();
    want.sort();
    assert!(
        eventually(60, || inbox_ids(&ns, &bob2) == want),
        "bob's successor holds {:?}, wanted {want:?}",
        inbox_ids(&ns, &bob2)
    );
    let s = json_of(&peer_as(&ns, &alice, &["--json", "status"]));
    assert_eq!(s["store"]["redelivered"], json!(5), "{s}");
    let one = json_of(&peer_as(&ns, &alice, &["--json", "status", "r-3"]));
    assert_eq!(one["redeliveredFrom"], json!(old_peer), "{one}");
    assert_eq!(one["toPeerId"], json!(bob2.field("peerId")), "{one}");
    assert_eq!(one["state"], json!("accepted"), "{one}");
    // Asked again later, nothing is sent a third time.
    std::thread::sleep(Duration::from_millis(4_500));
    assert_eq!(inbox_ids(&ns, &bob2), want);
    let (_, err) = alice.end_for_report();
    assert_eq!(
        err.matches("sent again under the same id").count(),
        5,
        "{err}"
    );
}

#[test]
fn a_restart_over_an_intact_store_is_not_sent_the_mail_again() {
    let ns = Ns::new("dmgintact");
    let mut alice = ns.host(&["--alias", "alice"]);
    let mut bob = ns.host(&["--alias", "bob", "--session-id", "s-int"]);
    let old = bob.field("instanceId");
    deliver(&ns, &alice, &bob, &names("k", 3), &[]);
    knows_recipient_session(&ns, &alice);
    bob.signal(Signal::SIGKILL);
    bob.wait();
    let bob2 = ns.host(&["--alias", "bob", "--session-id", "s-int"]);
    // Several passes of the sender's search: the predecessor's store holds the mail.
    std::thread::sleep(Duration::from_millis(6_000));
    assert!(inbox_ids(&ns, &bob2).is_empty());
    let s = json_of(&peer_as(&ns, &alice, &["--json", "status"]));
    assert_eq!(s["store"]["redelivered"], json!(0), "{s}");
    let o = recover_review(&ns, &old, "s-int");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(ids_of(&json_of(&o), "unread").len(), 3);
    let (_, err) = alice.end_for_report();
    assert!(!err.contains("sent again"), "{err}");
}

#[test]
fn when_both_copies_are_lost_both_sides_say_so() {
    let ns = Ns::new("dmgboth");
    let mut alice = ns.host(&["--alias", "alice", "--session-id", "s-bota"]);
    let mut bob = ns.host(&["--alias", "bob", "--session-id", "s-botb"]);
    deliver(&ns, &alice, &bob, &names("b", 3), &[]);
    let old_alice = kill_and_damage(&ns, &mut alice);
    let old_bob = kill_and_damage(&ns, &mut bob);
    let alice2 = ns.host(&["--alias", "alice", "--session-id", "s-bota"]);
    let bob2 = ns.host(&["--alias", "bob", "--session-id", "s-botb"]);
    for (host, old) in [(&alice2, &old_alice), (&bob2, &old_bob)] {
        let s = json_of(&peer_as(&ns, host, &["--json", "status"]));
        let listed = &s["store"]["predecessorsUnverified"];
        assert_eq!(listed.as_array().map(Vec::len), Some(1), "{s}");
        assert_eq!(listed[0]["instanceId"], json!(old), "{s}");
    }
    assert!(inbox_ids(&ns, &bob2).is_empty());
}
