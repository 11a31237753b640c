//! The custody rules of messaging between real `peer host` processes: retry-stable ids and
//! MESSAGE_ID_CONFLICT, per-route order with a stuck head, forward-only receipts,
//! INVALID_REPLY, QUEUE_FULL and its same-id retry, rate limiting without duplicates, expiry,
//! retention, restart without acting on old mail (and `peer recover`), MESSAGE_TOO_LARGE.

use crate::common;

use common::*;
use nix::sys::signal::Signal;
use peerwire::error::Code;
use peerwire::store::paths;
use peerwire::transport::LocalClient;
use serde_json::{Value, json};
use std::process::Output;

fn code_of(o: &Output) -> Option<i32> {
    o.status.code()
}

fn client(host: &Host) -> LocalClient {
    host.client()
}

fn send(c: &mut LocalClient, to: &str, id: &str, content: &str) -> peerwire::error::Result<Value> {
    c.call_raw(
        "local.tool",
        &json!({"version": 1, "tool": "send_peer_message",
               "args": {"to": to, "content": content}, "messageId": id}),
        60_000,
    )
}

/// Every retained message in `host`'s inbox, in sequence order.
fn inbox(host: &Host) -> Vec<Value> {
    all_messages(&mut client(host), json!({}))
}

fn with_id<'a>(msgs: &'a [Value], id: &str) -> Vec<&'a Value> {
    msgs.iter()
        .filter(|m| m["messageId"] == json!(id))
        .collect()
}

/// The sender-side state of one message (`peer --json status ID`).
fn status(ns: &Ns, host: &Host, id: &str) -> String {
    let o = peer_as(ns, host, &["--json", "status", id]);
    json_of(&o)["state"].as_str().unwrap_or("?").to_string()
}

fn quick_routes(ns: &Ns, extra: Value) {
    let mut limits = json!({"acknowledgementMs": 300, "routeRetries": 1});
    if let (Some(l), Some(e)) = (limits.as_object_mut(), extra.as_object()) {
        l.extend(e.clone());
    }
    ns.config(json!({ "limits": limits }));
}

/// A root's journal counters so far, from `local.info`: (fdatasyncs, of them the ones a send
/// led for its own intent).
fn syncs(c: &mut LocalClient) -> (u64, u64) {
    let info = c
        .call_raw("local.info", &json!({"version": 1}), 10_000)
        .unwrap();
    let n = |k: &str| {
        info["store"][k]
            .as_u64()
            .unwrap_or_else(|| panic!("local.info store.{k}: {info}"))
    };
    (n("syncs"), n("intentSyncs"))
}

/// A stream of `N` sends between two roots on one filesystem: (sender fdatasyncs, of them led
/// for an intent, receiver fdatasyncs). `unflushed` starts the receiver with
/// `PEERWIRE_TEST_UNFLUSHED`: it states no device flush, as an older peer or one on another
/// filesystem.
fn stream_syncs(tag: &str, n: u64, unflushed: bool) -> (u64, u64, u64) {
    let ns = Ns::new(tag);
    ns.config(json!({"limits": {
        "ratePerSecond": 1_000_000,
        "rateBurst": 1_000_000,
        "inboxMessages": 1_000,
    }}));
    let alice = ns.host(&["--alias", "alice"]);
    let bob = ns.host_with(&["--alias", "bob"], |c| {
        if unflushed {
            c.env(peerwire::store::UNFLUSHED_ENV, "1");
        }
    });
    let to = bob.field("peerId");
    let (mut c, mut b) = (client(&alice), client(&bob));
    send(&mut c, &to, "warm-0", "warm up the connection").unwrap();
    let (before, led_before) = syncs(&mut c);
    let (bob_before, _) = syncs(&mut b);
    for i in 0..n {
        let r = send(&mut c, &to, &format!("s-{i}"), "hello").unwrap();
        assert_eq!(r["state"], json!("accepted"), "{r}");
    }
    let (after, led_after) = syncs(&mut c);
    let (bob_after, _) = syncs(&mut b);
    assert_eq!(inbox(&bob).len() as u64, n + 1);
    (
        after - before,
        led_after - led_before,
        bob_after - bob_before,
    )
}

/// The receiver's accept fdatasync, stated as `flushedDevice`, also flushes the sender's
/// written-out intent when both journals share an ext4 device: a stream of sends then costs
/// the sender no fdatasync of its own on any send's path (only the writer thread's deferred
/// sync every `DEFERRED_SYNC_MS`), while the receiver still makes one per accept. Before, the
/// sender made one per message (its intent). On another filesystem the statement is never made
/// and the sender syncs every intent itself, as checked by the next test.
#[test]
fn a_stream_of_sends_rides_the_receivers_flush_on_a_shared_ext4_device() {
    const N: u64 = 40;
    let probe = peerwire::fsutil::TempDir::new("flush-probe").unwrap();
    let f = std::fs::File::create(probe.join("f")).unwrap();
    if !peerwire::store::flush::Device::of(&f).flushes {
        eprintln!(
            "skipped: the test directory's filesystem does not flush on fdatasync (not ext4)"
        );
        return;
    }
    let (sender, led, receiver) = stream_syncs("flushride", N, false);
    assert_eq!(led, 0, "the sender synced {led} intents itself");
    assert!(
        sender < N,
        "{sender} sender fdatasyncs for {N} sends (only deferred ones expected)"
    );
    assert!(
        receiver >= N,
        "{receiver} receiver fdatasyncs for {N} accepts (one each)"
    );
}

/// A receiver that states no device flush (an older peer, another filesystem): the sender
/// makes every intent durable itself before it reports `accepted`, so each send costs it an
/// fdatasync, led by the sending thread unless the deferred sync came first.
#[test]
fn a_sender_syncs_its_intent_itself_when_the_receiver_states_no_flush() {
    const N: u64 = 40;
    let (sender, led, _) = stream_syncs("flushnone", N, true);
    assert!(
        sender >= N,
        "{sender} sender fdatasyncs for {N} sends: each intent must be synced before its answer"
    );
    assert!(led > 0, "no intent sync was led by a send");
}

#[test]
fn a_retried_message_id_returns_the_original_receipt_and_a_conflict_is_refused() {
    let ns = Ns::new("dedup");
    let alice = ns.host(&["--alias", "alice"]);
    let bob = ns.host(&["--alias", "bob"]);
    let to = bob.field("peerId");
    let first = peer_as(
        &ns,
        &alice,
        &["--json", "send", &to, "hello", "--message-id", "d-1"],
    );
    assert_eq!(code_of(&first), Some(0), "{}", stderr(&first));
    let again = peer_as(
        &ns,
        &alice,
        &["--json", "send", &to, "hello", "--message-id", "d-1"],
    );
    assert_eq!(code_of(&again), Some(0), "{}", stderr(&again));
    let (a, b) = (json_of(&first), json_of(&again));
    assert_eq!(a["state"], json!("accepted"));
    assert_eq!(
        (&a["messageId"], &a["sequence"], &a["correlationId"]),
        (&b["messageId"], &b["sequence"], &b["correlationId"])
    );
    let o = peer_as(&ns, &alice, &["send", &to, "other", "--message-id", "d-1"]);
    assert_eq!(
        code_of(&o),
        Some(Code::MessageIdConflict.exit_status()),
        "{}",
        stderr(&o)
    );
    let got = inbox(&bob);
    let d1 = with_id(&got, "d-1");
    assert_eq!(d1.len(), 1, "{got:?}");
    assert_eq!(d1[0]["content"], json!("hello"));
}

#[test]
fn a_route_keeps_send_order_and_a_stopped_receiver_holds_everything_behind_its_head() {
    let ns = Ns::new("order");
    quick_routes(&ns, json!({}));
    let alice = ns.host(&["--alias", "alice"]);
    let bob = ns.host(&["--alias", "bob"]);
    let to = bob.field("peerId");
    let mut c = client(&alice);
    let mut last = 0;
    for n in 0..5 {
        let r = send(&mut c, &to, &format!("o-{n}"), "x").unwrap();
        let seq = r["sequence"].as_u64().unwrap();
        assert!(seq > last, "sequence went from {last} to {seq}");
        last = seq;
    }
    bob.pause();
    // The head times out (retryable): it stays unresolved and the later ones wait behind it.
    for n in 5..8 {
        let e = send(&mut c, &to, &format!("o-{n}"), "x").unwrap_err();
        assert!(
            matches!(
                e.code,
                Code::Timeout | Code::PeerOffline | Code::Disconnected
            ),
            "{e}"
        );
    }
    for n in 5..8 {
        assert_eq!(status(&ns, &alice, &format!("o-{n}")), "unresolved");
    }
    let o = peer_as(&ns, &alice, &["send", &to, "x", "--message-id", "o-7"]);
    assert!(stderr(&o).contains("o-5"), "{}", stderr(&o));
    bob.signal(Signal::SIGCONT);
    assert!(
        eventually(60, || (5..8).all(|n| status(
            &ns,
            &alice,
            &format!("o-{n}")
        ) == "accepted")),
        "the route did not drain after the receiver woke"
    );
    let got = inbox(&bob);
    let order: Vec<&str> = got.iter().filter_map(|m| m["messageId"].as_str()).collect();
    let want: Vec<String> = (0..8).map(|n| format!("o-{n}")).collect();
    assert_eq!(order, want, "arrival order differs from send order");
    let seqs: Vec<u64> = got.iter().filter_map(|m| m["sequence"].as_u64()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
}

#[test]
fn receipts_only_move_forward() {
    let ns = Ns::new("forward");
    let alice = ns.host(&["--alias", "alice"]);
    let bob = ns.host(&["--alias", "bob"]);
    let to = bob.field("peerId");
    let mut c = client(&alice);
    send(&mut c, &to, "f-1", "one").unwrap();
    send(&mut c, &to, "f-2", "two").unwrap();

    let o = peer_as(&ns, &bob, &["consume", "f-1"]);
    assert_eq!(code_of(&o), Some(0), "{}", stderr(&o));
    assert!(eventually(20, || status(&ns, &alice, "f-1") == "consumed"));
    // A late "prepared" (context recorded again) leaves it consumed.
    let mut b = client(&bob);
    let _ = b.call_raw(
        "local.prepare",
        &json!({"version": 1, "messageId": "f-1"}),
        20_000,
    );
    let state_of = |id: &str| with_id(&inbox(&bob), id)[0]["state"].clone();
    assert_eq!(state_of("f-1"), json!("consumed"));

    let o = peer_as(&ns, &bob, &["reply", "f-2", "done"]);
    assert_eq!(code_of(&o), Some(0), "{}", stderr(&o));
    assert!(eventually(20, || status(&ns, &alice, "f-2") == "replied"));
    let _ = peer_as(&ns, &bob, &["consume", "f-2"]);
    let _ = b.call_raw(
        "local.prepare",
        &json!({"version": 1, "messageId": "f-2"}),
        20_000,
    );
    assert_eq!(state_of("f-2"), json!("replied"));
    // Give any pushed receipt time to land, then check the sender still agrees.
    std::thread::sleep(std::time::Duration::from_millis(600));
    assert_eq!(status(&ns, &alice, "f-1"), "consumed");
    assert_eq!(status(&ns, &alice, "f-2"), "replied");
}

#[test]
fn replies_must_answer_the_exact_incarnation_that_sent_the_original() {
    let ns = Ns::new("invreply");
    let mut alice = ns.host(&["--alias", "alice", "--session-id", "s-alice"]);
    let bob = ns.host(&["--alias", "bob"]);
    let carol = ns.host(&["--alias", "carol"]);
    let (a, b) = (alice.field("peerId"), bob.field("peerId"));
    // carol → alice; alice claims to answer it in a message to bob.
    send(&mut client(&carol), &a, "c-1", "from carol").unwrap();
    let o = peer_as(&ns, &alice, &["send", &b, "re", "--reply-to", "c-1"]);
    assert_eq!(
        code_of(&o),
        Some(Code::InvalidReply.exit_status()),
        "{}",
        stderr(&o)
    );
    // bob → alice, alice restarts (same session): the new instance never received b-1.
    send(&mut client(&bob), &a, "b-1", "from bob").unwrap();
    send(&mut client(&alice), &b, "a-1", "from alice").unwrap();
    alice.signal(Signal::SIGTERM);
    alice.wait();
    let alice2 = ns.host(&["--alias", "alice", "--session-id", "s-alice"]);
    assert_ne!(alice2.field("instanceId"), alice.field("instanceId"));
    let o = peer_as(&ns, &alice2, &["send", &b, "re", "--reply-to", "b-1"]);
    assert_eq!(
        code_of(&o),
        Some(Code::InvalidReply.exit_status()),
        "{}",
        stderr(&o)
    );
    // bob answering the old incarnation's a-1 reaches no one: that alice has ended.
    let o = peer_as(&ns, &bob, &["reply", "a-1", "too late"]);
    assert_eq!(
        code_of(&o),
        Some(Code::TargetEnded.exit_status()),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_full_inbox_refuses_and_the_same_id_is_accepted_after_a_consume() {
    let ns = Ns::new("qfull");
    quick_routes(&ns, json!({"inboxMessages": 3}));
    let alice = ns.host(&["--alias", "alice"]);
    let bob = ns.host(&["--alias", "bob"]);
    let to = bob.field("peerId");
    for n in 0..3 {
        let o = peer_as(
            &ns,
            &alice,
            &["send", &to, "x", "--message-id", &format!("q-{n}")],
        );
        assert_eq!(code_of(&o), Some(0), "{}", stderr(&o));
    }
    let o = peer_as(&ns, &alice, &["send", &to, "x", "--message-id", "q-3"]);
    assert_eq!(
        code_of(&o),
        Some(Code::QueueFull.exit_status()),
        "{}",
        stderr(&o)
    );
    let o = peer_as(&ns, &bob, &["consume", "q-0"]);
    assert_eq!(code_of(&o), Some(0), "{}", stderr(&o));
    // The caller retries the same id once room appeared.
    let mut tries = 0;
    let accepted = eventually(30, || {
        tries += 1;
        let o = peer_as(
            &ns,
            &alice,
            &["--json", "send", &to, "x", "--message-id", "q-3"],
        );
        code_of(&o) == Some(0) && json_of(&o)["state"] == json!("accepted")
    });
    assert!(accepted, "q-3 was not accepted after a consume");
    // A caller's retry starts the given-up route over: the first retry succeeds.
    assert_eq!(tries, 1, "q-3 needed {tries} retries");
    let got = inbox(&bob);
    assert_eq!(with_id(&got, "q-3").len(), 1, "{got:?}");
}

#[test]
fn rate_limited_sends_are_retried_and_never_duplicated() {
    let ns = Ns::new("rate");
    quick_routes(&ns, json!({"ratePerSecond": 1, "rateBurst": 2}));
    let alice = ns.host(&["--alias", "alice"]);
    let bob = ns.host(&["--alias", "bob"]);
    let to = bob.field("peerId");
    let mut c = client(&alice);
    let ids: Vec<String> = (0..6).map(|n| format!("r-{n}")).collect();
    let mut limited = 0;
    for id in &ids {
        match send(&mut c, &to, id, "x") {
            Ok(r) => assert_eq!(r["state"], json!("accepted")),
            Err(e) => {
                assert_eq!(e.code, Code::RateLimited, "{e}");
                limited += 1;
            }
        }
    }
    assert!(
        limited > 0,
        "six quick sends against a burst of 2 were never limited"
    );
    // Retrying with the same ids converges: each accepted, each once, in send order.
    let mut tries = 0;
    for id in &ids {
        assert!(
            eventually(60, || {
                tries += 1;
                send(&mut c, &to, id, "x").is_ok()
            }),
            "{id} never got through"
        );
    }
    eprintln!("{limited} of 6 sends rate-limited; {tries} calls until all accepted");
    let got = inbox(&bob);
    let order: Vec<&str> = got.iter().filter_map(|m| m["messageId"].as_str()).collect();
    assert_eq!(order, ids, "duplicates or reordering under rate limiting");
}

#[test]
fn unconsumed_mail_expires_and_consumed_mail_is_swept_after_retention() {
    // Needs the root worker to sweep at a cadence derived from expiryMs/retentionMs; with the
    // fixed 60 s sweep (src/runtime/mod.rs RETENTION_SWEEP_MS) this waits for that sweep.
    let exp = Ns::new("expiry");
    exp.config(json!({"limits": {"expiryMs": 400}}));
    let ret = Ns::new("retain");
    ret.config(json!({"limits": {"retentionMs": 400}}));
    let (ea, eb) = (exp.host(&["--alias", "a"]), exp.host(&["--alias", "b"]));
    let (ra, rb) = (ret.host(&["--alias", "a"]), ret.host(&["--alias", "b"]));
    send(&mut client(&ea), &eb.field("peerId"), "e-1", "soon stale").unwrap();
    let mut rc = client(&ra);
    send(&mut rc, &rb.field("peerId"), "t-1", "consumed").unwrap();
    send(&mut rc, &rb.field("peerId"), "t-2", "kept").unwrap();
    let o = peer_as(&ret, &rb, &["consume", "t-1"]);
    assert_eq!(code_of(&o), Some(0), "{}", stderr(&o));

    assert!(
        eventually(90, || status(&exp, &ea, "e-1") == "expired"),
        "the sender never saw its unconsumed message expire"
    );
    assert_eq!(with_id(&inbox(&eb), "e-1")[0]["state"], json!("expired"));
    assert!(
        eventually(90, || with_id(&inbox(&rb), "t-1").is_empty()),
        "a consumed message outlived retentionMs"
    );
    let kept = inbox(&rb);
    assert_eq!(
        with_id(&kept, "t-2").len(),
        1,
        "an unconsumed message was swept"
    );
    assert_eq!(with_id(&kept, "t-2")[0]["state"], json!("accepted"));
}

#[test]
fn a_restarted_host_leaves_old_mail_to_recover_and_a_corrupt_journal_is_untouched() {
    let ns = Ns::new("recover");
    let alice = ns.host(&["--alias", "alice"]);
    let mut bob = ns.host(&["--alias", "bob", "--session-id", "s-bob"]);
    let old = bob.field("instanceId");
    send(
        &mut client(&alice),
        &bob.field("peerId"),
        "old-1",
        "before restart",
    )
    .unwrap();
    bob.signal(Signal::SIGTERM);
    bob.wait();
    let bob2 = ns.host(&["--alias", "bob", "--session-id", "s-bob"]);
    assert_ne!(bob2.field("instanceId"), old);
    assert!(
        inbox(&bob2).is_empty(),
        "a new incarnation acted on old mail"
    );
    // Review from inside the new session (its session id) and from outside (explicit).
    for o in [
        peer_as(&ns, &bob2, &["--json", "recover", "--instance", &old]),
        ns.peer(&[
            "--json",
            "recover",
            "--instance",
            &old,
            "--session-id",
            "s-bob",
        ]),
    ] {
        assert_eq!(code_of(&o), Some(0), "{}", stderr(&o));
        let v = json_of(&o);
        let ids: Vec<&str> = v["unread"]
            .as_array()
            .map(|a| a.iter().filter_map(|m| m["messageId"].as_str()).collect())
            .unwrap_or_default();
        assert_eq!(ids, ["old-1"], "{v}");
    }
    assert!(inbox(&bob2).is_empty(), "review moved mail");
    // A flipped byte in the stopped instance's journal: refused, nothing rewritten.
    let dir = paths::store_dir(&ns.home, &old);
    let journal = dir.join(paths::JOURNAL);
    let mut bytes = std::fs::read(&journal).unwrap();
    let mid = journal_frames_end(&bytes) / 2;
    bytes[mid] ^= 0x01;
    std::fs::write(&journal, &bytes).unwrap();
    let before: Vec<(String, Vec<u8>)> = files_in(&dir)
        .into_iter()
        .map(|n| (n.clone(), std::fs::read(dir.join(&n)).unwrap()))
        .collect();
    let o = ns.peer(&["recover", "--instance", &old, "--session-id", "s-bob"]);
    assert_eq!(
        code_of(&o),
        Some(Code::RecoveryRequired.exit_status()),
        "{}",
        stderr(&o)
    );
    let after: Vec<(String, Vec<u8>)> = files_in(&dir)
        .into_iter()
        .map(|n| (n.clone(), std::fs::read(dir.join(&n)).unwrap()))
        .collect();
    assert_eq!(before, after, "a refused recovery changed the files");
}

#[test]
fn a_message_over_8000_bytes_is_refused() {
    let ns = Ns::new("toolarge");
    let alice = ns.host(&["--alias", "alice"]);
    let bob = ns.host(&["--alias", "bob"]);
    let to = bob.field("peerId");
    let big = "x".repeat(8_001);
    let o = peer_as(&ns, &alice, &["send", &to, &big, "--message-id", "big-1"]);
    assert_eq!(
        code_of(&o),
        Some(Code::MessageTooLarge.exit_status()),
        "{}",
        stderr(&o)
    );
    let fits = "x".repeat(8_000);
    let o = peer_as(&ns, &alice, &["send", &to, &fits, "--message-id", "fit-1"]);
    assert_eq!(code_of(&o), Some(0), "{}", stderr(&o));
    let got = inbox(&bob);
    assert!(with_id(&got, "big-1").is_empty());
    assert_eq!(with_id(&got, "fit-1").len(), 1);
    assert!(
        peer_as(&ns, &alice, &["status", "big-1"])
            .status
            .code()
            .is_some_and(|c| c != 0),
        "a refused oversize message left an outbox entry"
    );
}
