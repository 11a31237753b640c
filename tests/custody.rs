//! Custody that never lies, between real processes: a stopped receiver is not a refusal, expiry
//! holds on every read path, one-off `--as` senders are idempotent and leave no store behind,
//! a restarted sender finds its predecessors' undelivered mail, and dead presence records are
//! reclaimed without hiding live peers.

use crate::common;

use common::*;
use nix::sys::signal::Signal;
use peerwire::config::Limits;
use peerwire::error::Code;
use peerwire::runtime::control;
use peerwire::transport::LocalClient;
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;

fn client(host: &Host) -> LocalClient {
    host.client()
}

/// `peer --json status ID` acting for `host`, parsed.
fn status_of(ns: &Ns, host: &Host, id: &str) -> Value {
    json_of(&peer_as(ns, host, &["--json", "status", id]))
}

fn state_of(ns: &Ns, host: &Host, id: &str) -> String {
    status_of(ns, host, id)["state"]
        .as_str()
        .unwrap_or("?")
        .to_string()
}

/// Every retained message of `host`'s inbox with this id.
fn inbox_with(host: &Host, id: &str) -> Vec<Value> {
    let page = client(host)
        .call_raw(
            "local.tool",
            &json!({"version": 1, "tool": "peer_messages", "args": {"messageId": id}}),
            20_000,
        )
        .unwrap();
    page["messages"].as_array().cloned().unwrap_or_default()
}

/// Short heartbeats and staleness so a stop outlives `staleMs` quickly; quick route retries.
fn quick(ns: &Ns) {
    ns.config(json!({"limits": {
        "heartbeatMs": 100, "staleMs": 600, "acknowledgementMs": 300, "routeRetries": 1
    }}));
}

#[test]
fn a_stopped_receiver_is_not_a_refusal_and_its_later_receipts_count() {
    let ns = Ns::new("stall");
    quick(&ns);
    let alice = ns.host(&["--alias", "alice"]);
    let bob = ns.host(&["--alias", "bob"]);
    let to = bob.field("peerId");
    let warm = peer_as(
        &ns,
        &alice,
        &["send", &to, "warm-up", "--message-id", "w-1"],
    );
    assert_eq!(warm.status.code(), Some(0), "{}", stderr(&warm));

    bob.pause();
    // Well past staleMs: bob's record is stale by age, but his process still exists.
    std::thread::sleep(Duration::from_millis(1_500));
    let o = peer_as(
        &ns,
        &alice,
        &["send", &to, "during the stop", "--message-id", "s-1"],
    );
    assert_eq!(
        o.status.code(),
        Some(Code::Timeout.exit_status()),
        "a send to a stopped receiver must end 'not yet acknowledged': {}",
        stderr(&o)
    );
    assert!(stderr(&o).contains("stays in the outbox"), "{}", stderr(&o));
    // The stop lasts several more staleMs periods; the entry stays unresolved with a reason.
    std::thread::sleep(Duration::from_millis(2_000));
    let st = status_of(&ns, &alice, "s-1");
    assert_eq!(st["state"], json!("unresolved"), "{st}");
    let reason = st["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("not answering since"), "{st}");
    let human =
        String::from_utf8_lossy(&peer_as(&ns, &alice, &["status", "s-1"]).stdout).into_owned();
    assert!(
        human.contains("unresolved") && human.contains("not answering since"),
        "{human}"
    );

    bob.signal(Signal::SIGCONT);
    // The background retry delivers it; bob's store holds it once.
    assert!(
        eventually(30, || state_of(&ns, &alice, "s-1") == "accepted"),
        "the entry never moved forward after the receiver resumed: {}",
        status_of(&ns, &alice, "s-1")
    );
    let held = inbox_with(&bob, "s-1");
    assert_eq!(held.len(), 1, "{held:?}");
    // A retry with the same id returns the true receipt.
    let again = peer_as(
        &ns,
        &alice,
        &[
            "--json",
            "send",
            &to,
            "during the stop",
            "--message-id",
            "s-1",
        ],
    );
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    assert_eq!(json_of(&again)["sequence"], held[0]["sequence"]);
    // bob's consumption reaches alice.
    let c = peer_as(&ns, &bob, &["consume", "s-1"]);
    assert_eq!(c.status.code(), Some(0), "{}", stderr(&c));
    assert!(
        eventually(30, || state_of(&ns, &alice, "s-1") == "consumed"),
        "{}",
        status_of(&ns, &alice, "s-1")
    );
}

/// A root that stops while it owes a sender the `accepted` of a message it already holds
/// durably answers before it goes, instead of cutting the connection: the cut made the
/// sender's retry find an ended root and report TARGET_ENDED for a message its recipient held
/// (and had read: CI saw it once, a script's recipient exiting right after reading the
/// message). The answer is held (debug builds' `PEERWIRE_TEST_HOLD_ANSWER`) until the stopping
/// root has closed its listener, the point where it used to cut every connection.
#[test]
fn a_stopping_receiver_still_answers_the_sends_it_accepted() {
    let ns = Ns::new("drain");
    // Room under load: the drain waits up to acknowledgementMs for a held answer.
    ns.config(json!({"limits": {"acknowledgementMs": 10_000}}));
    let alice = ns.host(&["--alias", "alice"]);
    let hold = ns.root.join("hold-answer");
    let mut bob = ns.host_with(&["--alias", "bob"], |c| {
        c.env(peerwire::runtime::HOLD_ANSWER_ENV, &hold);
    });
    let (to, endpoint) = (bob.field("peerId"), bob.field("endpoint"));
    std::fs::write(&hold, b"").unwrap();
    let (tx, answer) = std::sync::mpsc::channel();
    let mut c = client(&alice);
    let sender = std::thread::spawn(move || {
        let _ = tx.send(c.call_raw(
            "local.tool",
            &json!({"version": 1, "tool": "send_peer_message",
                   "args": {"to": to, "content": "last words"}, "messageId": "d-1"}),
            30_000,
        ));
    });
    assert!(
        eventually(20, || inbox_with(&bob, "d-1").len() == 1),
        "bob never held the message"
    );
    bob.signal(Signal::SIGTERM);
    assert!(
        eventually(20, || std::os::unix::net::UnixStream::connect(&endpoint)
            .is_err()),
        "bob never closed his listener"
    );
    std::fs::remove_file(&hold).unwrap();
    let r = answer
        .recv_timeout(Duration::from_secs(30))
        .unwrap()
        .unwrap_or_else(|e| panic!("the sender was not answered: {e}"));
    assert_eq!(r["state"], json!("accepted"), "{r}");
    sender.join().unwrap();
    assert_eq!(bob.wait(), Some(0), "bob's root did not stop cleanly");
    assert_eq!(state_of(&ns, &alice, "d-1"), "accepted");
    // Exactly once in the stopped root's store.
    let limits = peerwire::config::Config::load(&ns.home).unwrap().limits;
    let review = peerwire::store::review(
        &ns.home,
        &bob.field("instanceId"),
        &bob.field("sessionId"),
        &limits,
    )
    .unwrap();
    let held = review.unread.iter().filter(|e| e.message_id == "d-1");
    assert_eq!(held.count(), 1);
}

#[test]
fn target_ended_needs_evidence_that_the_incarnation_is_gone() {
    let ns = Ns::new("ended");
    quick(&ns);
    let alice = ns.host(&["--alias", "alice"]);
    let mut bob = ns.host(&["--alias", "bob"]);
    let to = bob.field("peerId");
    let warm = peer_as(
        &ns,
        &alice,
        &["send", &to, "warm-up", "--message-id", "w-1"],
    );
    assert_eq!(warm.status.code(), Some(0), "{}", stderr(&warm));
    bob.pause();
    let o = peer_as(&ns, &alice, &["send", &to, "queued", "--message-id", "e-1"]);
    assert_eq!(
        o.status.code(),
        Some(Code::Timeout.exit_status()),
        "{}",
        stderr(&o)
    );
    // SIGKILL leaves the record behind; the process is provably gone (reaped).
    bob.signal(Signal::SIGKILL);
    bob.wait();
    assert!(
        eventually(30, || {
            let st = status_of(&ns, &alice, "e-1");
            st["state"] == json!("refused") && st["error"]["code"] == json!("TARGET_ENDED")
        }),
        "{}",
        status_of(&ns, &alice, "e-1")
    );
}

/// A bare authenticated sender: a presence record with our identity and pid, and a pool.
struct WireSender {
    pool: peerwire::transport::Pool,
    _presence: peerwire::presence::Publisher,
}

impl WireSender {
    fn publish(host: &Host) -> WireSender {
        use peerwire::identity::{self, KeyPair};
        use peerwire::presence::{Publisher, Record};
        let bytes = std::fs::read(host.field("presence")).unwrap();
        let mut rec: Record = serde_json::from_slice(&bytes).unwrap();
        let keys = std::sync::Arc::new(KeyPair::generate());
        let instance_id = identity::new_instance_id();
        rec.pid = std::process::id();
        rec.session_id = identity::new_session_id();
        rec.communication.instance_id = instance_id.clone();
        rec.communication.peer_id = identity::peer_id(&instance_id, None);
        rec.communication.public_key = keys.spki_b64();
        rec.communication.endpoint = format!("peer-runtime/{instance_id}.sock");
        rec.communication.alias = format!("wire-{}", &instance_id[instance_id.len() - 4..]);
        rec.communication.runs = Vec::new();
        rec.communication.process_start_time = None;
        rec.communication.boot_id = None;
        let dir = Path::new(&host.field("presence"))
            .parent()
            .unwrap()
            .to_path_buf();
        let presence = Publisher::publish(&dir, rec).unwrap();
        let me = peerwire::transport::LocalIdentity { instance_id, keys };
        WireSender {
            pool: peerwire::transport::Pool::new(
                me,
                &Limits::default(),
                std::sync::Arc::new(|_, _| {}),
            ),
            _presence: presence,
        }
    }

    fn send(&self, host: &Host, id: &str, expires_at_ms: u64) -> peerwire::error::Result<Value> {
        let rec: Value =
            serde_json::from_slice(&std::fs::read(host.field("presence")).unwrap()).unwrap();
        let key = rec["communication"]["publicKey"].as_str().unwrap();
        let target = peerwire::transport::Target {
            instance_id: host.field("instanceId"),
            endpoint: host.field("endpoint").into(),
            public_key: peerwire::identity::parse_spki_b64(key).unwrap(),
        };
        self.pool.request_raw(
            &target,
            "peer.send",
            json!({"version": 1, "messageId": id, "to": host.field("peerId"),
                   "content": "short-lived", "expiresAt": expires_at_ms}),
            10_000,
        )
    }
}

#[test]
fn expiry_holds_on_every_read_path_before_any_sweep() {
    // Default limits: expiryMs is ten minutes, so the sweep runs once a minute and cannot be
    // what makes these messages expired.
    let ns = Ns::new("expiry-read");
    let bob = ns.host(&["--alias", "bob"]);
    let wire = WireSender::publish(&bob);
    let soon = peerwire::clock::now_ms() + 2_000;
    for id in ["x-read", "x-consume", "x-reply", "x-prepare"] {
        let r = wire.send(&bob, id, soon).unwrap();
        assert_eq!(r["state"], json!("accepted"), "{r}");
    }
    std::thread::sleep(Duration::from_millis(
        soon.saturating_sub(peerwire::clock::now_ms()) + 200,
    ));
    // Reading: the inbox shows it expired.
    let read = inbox_with(&bob, "x-read");
    assert_eq!(read[0]["state"], json!("expired"), "{read:?}");
    // Consuming fails with EXPIRED, and the message is recorded expired.
    let o = peer_as(&ns, &bob, &["consume", "x-consume"]);
    assert_eq!(
        o.status.code(),
        Some(Code::Expired.exit_status()),
        "{}",
        stderr(&o)
    );
    let o = peer_as(&ns, &bob, &["consume", "x-consume"]);
    assert_eq!(
        o.status.code(),
        Some(Code::Expired.exit_status()),
        "{}",
        stderr(&o)
    );
    // Replying fails with EXPIRED and sends nothing.
    let o = peer_as(&ns, &bob, &["reply", "x-reply", "too late"]);
    assert_eq!(
        o.status.code(),
        Some(Code::Expired.exit_status()),
        "{}",
        stderr(&o)
    );
    // Preparing (recording context) fails too.
    let mut c = client(&bob);
    let e = c
        .call_raw(
            "local.prepare",
            &json!({"version": 1, "messageId": "x-prepare"}),
            20_000,
        )
        .unwrap_err();
    assert_eq!(e.code, Code::Expired, "{e}");
    // The sender's retry of the same id sees the expired receipt, not accepted.
    let again = wire.send(&bob, "x-read", soon);
    match again {
        Ok(r) => assert_eq!(r["state"], json!("expired"), "{r}"),
        Err(e) => assert_eq!(e.code, Code::Expired, "{e}"),
    }
    // A model reading its messages is not handed expired mail as new context.
    let page = c
        .call_raw(
            "local.tool",
            &json!({"version": 1, "tool": "peer_messages", "args": {}}),
            20_000,
        )
        .unwrap();
    for m in page["messages"].as_array().unwrap() {
        assert_eq!(m["state"], json!("expired"), "{m}");
    }
}

#[test]
fn one_off_sends_are_idempotent_across_invocations_and_leave_no_store_behind() {
    let ns = Ns::new("oneoff");
    let bob = ns.host(&["--alias", "bob"]);
    let to = bob.field("peerId");
    let stores = ns.home.join("peer-messages");
    // A shell script's retry loop: 30 invocations, each a one-off root of its own; every
    // second one repeats the id of the one before it.
    let script = r#"
        i=0
        while [ $i -lt 30 ]; do
            id="loop-$((i / 2))"
            peer --home "$H" --json --as alice send "$TO" "text of $id" --message-id "$id" \
                >>"$OUT" || echo "exit $? for $id" >>"$OUT"
            i=$((i + 1))
        done
    "#;
    let out = ns.root.join("loop.out");
    let o = std::process::Command::new("sh")
        .arg("-c")
        .arg(script)
        .env("H", &ns.home)
        .env("TO", &to)
        .env("OUT", &out)
        .env("PATH", path_with_peer())
        .env_remove("PEER_CONTROL")
        .current_dir(&ns.work)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&out).unwrap();
    let receipts: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|_| panic!("not a receipt: {l}")))
        .collect();
    assert_eq!(receipts.len(), 30, "{text}");
    for pair in receipts.chunks(2) {
        assert_eq!(pair[0]["state"], json!("accepted"), "{pair:?}");
        assert_eq!(pair[0]["messageId"], pair[1]["messageId"]);
        assert_eq!(pair[0]["sequence"], pair[1]["sequence"], "{pair:?}");
    }
    for n in 0..15 {
        assert_eq!(inbox_with(&bob, &format!("loop-{n}")).len(), 1, "loop-{n}");
    }
    // New text under a used id: MESSAGE_ID_CONFLICT from a fresh invocation.
    let o = ns.peer(&[
        "--as",
        "alice",
        "send",
        &to,
        "changed",
        "--message-id",
        "loop-3",
    ]);
    assert_eq!(
        o.status.code(),
        Some(Code::MessageIdConflict.exit_status()),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        inbox_with(&bob, "loop-3")[0]["content"],
        json!("text of loop-3")
    );
    // Only bob's store is left: 31 one-off roots reclaimed theirs.
    let left = files_in(&stores);
    assert_eq!(left, vec![bob.field("instanceId")], "{left:?}");
}

#[test]
fn a_truncated_journal_of_a_cleanly_stopped_store_requires_recovery() {
    let ns = Ns::new("synccut");
    let alice = ns.host(&["--alias", "alice"]);
    let mut bob = ns.host(&["--alias", "bob", "--session-id", "s-bob"]);
    let old = bob.field("instanceId");
    for n in 0..3 {
        let o = peer_as(
            &ns,
            &alice,
            &[
                "send",
                &bob.field("peerId"),
                "kept",
                "--message-id",
                &format!("k-{n}"),
            ],
        );
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    }
    bob.signal(Signal::SIGTERM);
    assert_eq!(bob.wait(), Some(0));
    let journal =
        peerwire::store::paths::store_dir(&ns.home, &old).join(peerwire::store::paths::JOURNAL);
    let full = std::fs::read(&journal).unwrap();
    // The frames, without the zero-filled room preallocated after them.
    let full = &full[..journal_frames_end(&full)];
    let ok = ns.peer(&[
        "--json",
        "recover",
        "--instance",
        &old,
        "--session-id",
        "s-bob",
    ]);
    assert_eq!(ok.status.code(), Some(0), "{}", stderr(&ok));
    assert_eq!(json_of(&ok)["unread"].as_array().map(Vec::len), Some(3));
    assert_eq!(json_of(&ok)["tornTail"]["bytes"], json!(0));
    let header = 32;
    for cut in [
        full.len() - 1,
        full.len() - 40,
        (full.len() + header) / 2,
        header + 3,
    ] {
        std::fs::write(&journal, &full[..cut]).unwrap();
        let o = ns.peer(&["recover", "--instance", &old, "--session-id", "s-bob"]);
        assert_eq!(
            o.status.code(),
            Some(Code::RecoveryRequired.exit_status()),
            "cut at {cut}: {}",
            stderr(&o)
        );
        // The end mark (or, where the cut could be a torn write, the sync point) tells.
        let said = stderr(&o);
        assert!(
            said.contains("sync point") || said.contains("committed"),
            "{said}"
        );
    }
}

#[test]
fn a_failing_sweep_is_visible_in_the_log_and_in_local_info() {
    use std::os::unix::process::CommandExt;
    let ns = Ns::new("sweepfail");
    ns.config(json!({"limits": {"expiryMs": 2000}}));
    let alice = ns.host(&["--alias", "alice"]);
    // bob may write files of at most 64 KiB (and ignores SIGXFSZ): his journal's write fails
    // once it would pass that, which poisons his store; every later sweep fails.
    let mut bob = ns.host_with(&["--alias", "bob"], |cmd| unsafe {
        cmd.pre_exec(|| {
            let limit = nix::libc::rlimit {
                rlim_cur: 64 * 1024,
                rlim_max: 64 * 1024,
            };
            if nix::libc::setrlimit(nix::libc::RLIMIT_FSIZE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            nix::sys::signal::signal(
                nix::sys::signal::Signal::SIGXFSZ,
                nix::sys::signal::SigHandler::SigIgn,
            )
            .map_err(std::io::Error::from)?;
            Ok(())
        });
    });
    let to = bob.field("peerId");
    let big = "x".repeat(7_900);
    let mut refused = None;
    for n in 0..20 {
        let o = peer_as(
            &ns,
            &alice,
            &["send", &to, &big, "--message-id", &format!("b-{n}")],
        );
        if o.status.code() != Some(0) {
            refused = Some(stderr(&o));
            break;
        }
    }
    assert!(
        refused.is_some(),
        "bob's journal never hit its file size limit"
    );
    let info = || {
        client(&bob)
            .call_raw("local.info", &json!({"version": 1}), 10_000)
            .unwrap()
    };
    assert!(
        eventually(30, || info()["problems"].as_array().is_some_and(|p| p
            .iter()
            .any(|p| p["what"].as_str().is_some_and(|w| w.contains("sweep"))
                && p["code"] == json!("RECOVERY_REQUIRED")))),
        "{}",
        info()
    );
    assert_eq!(info()["store"]["poisoned"], json!(true));
    // `peer status` shows the same to a person, and a receipt lookup points at it.
    let health = peer_as(&ns, &bob, &["status"]);
    assert_eq!(health.status.code(), Some(0), "{}", stderr(&health));
    let said = String::from_utf8_lossy(&health.stdout).to_string();
    assert!(
        said.contains("background failure:") && said.contains("sweep"),
        "{said}"
    );
    let as_json = json_of(&peer_as(&ns, &bob, &["--json", "status"]));
    assert!(
        as_json["problems"]
            .as_array()
            .is_some_and(|p| !p.is_empty()),
        "{as_json}"
    );
    // The root's log (stderr) says it once, however often the sweep fails.
    let mut log = bob.child.as_mut().unwrap().stderr.take().unwrap();
    bob.signal(Signal::SIGTERM);
    bob.wait();
    let mut text = String::new();
    std::io::Read::read_to_string(&mut log, &mut text).unwrap();
    let warnings = text
        .lines()
        .filter(|l| l.contains("warning") && l.contains("sweep"))
        .count();
    assert_eq!(warnings, 1, "{text}");
}

#[test]
fn a_restarted_sender_delivers_what_its_dead_predecessor_left_exactly_once() {
    let ns = Ns::new("restart");
    quick(&ns);
    let mut alice = ns.host(&["--alias", "alice", "--session-id", "s-alice"]);
    let bob = ns.host(&["--alias", "bob"]);
    let to = bob.field("peerId");
    let old = alice.field("instanceId");
    let warm = peer_as(
        &ns,
        &alice,
        &["send", &to, "warm-up", "--message-id", "w-1"],
    );
    assert_eq!(warm.status.code(), Some(0), "{}", stderr(&warm));
    bob.pause();
    // o-1 goes out on the open connection and waits in bob's socket: bob will take it from
    // the dead incarnation. o-2 waits behind it and never leaves alice's outbox.
    for id in ["o-1", "o-2"] {
        let o = peer_as(
            &ns,
            &alice,
            &["send", &to, &format!("text {id}"), "--message-id", id],
        );
        assert_eq!(
            o.status.code(),
            Some(Code::Timeout.exit_status()),
            "{}",
            stderr(&o)
        );
    }
    // peer status says why each is unresolved: o-2 waits behind the route's head, o-1.
    let why = |id: &str| {
        status_of(&ns, &alice, id)["reason"]
            .as_str()
            .map(str::to_string)
    };
    let behind = why("o-2").unwrap_or_default();
    assert!(
        behind.contains("waits behind unresolved message o-1"),
        "{behind}"
    );
    let head = why("o-1").unwrap_or_default();
    assert!(!head.contains("waits behind"), "{head}");
    alice.signal(Signal::SIGKILL);
    alice.wait();
    // Before anyone takes over, the old store shows both as unresolved.
    let o = ns.peer(&[
        "--json",
        "recover",
        "--instance",
        &old,
        "--session-id",
        "s-alice",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let ids: Vec<String> = json_of(&o)["unresolved"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["messageId"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids, ["o-1", "o-2"]);
    let alice2 = ns.host(&["--alias", "alice", "--session-id", "s-alice"]);
    for id in ["o-1", "o-2"] {
        assert_eq!(state_of(&ns, &alice2, id), "unresolved", "{id}");
    }
    bob.signal(Signal::SIGCONT);
    for id in ["o-1", "o-2"] {
        assert!(
            eventually(30, || state_of(&ns, &alice2, id) == "accepted"),
            "{id}: {}",
            status_of(&ns, &alice2, id)
        );
        let held = inbox_with(&bob, id);
        assert_eq!(held.len(), 1, "{id}: {held:?}");
        assert_eq!(held[0]["content"], json!(format!("text {id}")));
    }
    // bob's later receipts reach the new incarnation.
    let c = peer_as(&ns, &bob, &["consume", "o-1"]);
    assert_eq!(c.status.code(), Some(0), "{}", stderr(&c));
    assert!(eventually(30, || state_of(&ns, &alice2, "o-1") == "consumed"));
    // Nothing was left in the dead incarnation's store: it is gone.
    assert!(!peerwire::store::paths::store_dir(&ns.home, &old).exists());
}

/// A pid that no longer runs (a reaped child of ours).
fn dead_pid() -> u32 {
    let mut c = std::process::Command::new("true").spawn().unwrap();
    let pid = c.id();
    c.wait().unwrap();
    pid
}

#[test]
fn dead_records_are_reclaimed_and_never_hide_a_live_peer() {
    let ns = Ns::new("reclaim");
    ns.config(json!({"limits": {"presenceFiles": 50, "heartbeatMs": 100, "staleMs": 1000}}));
    let bob = ns.host(&["--alias", "bob"]);
    let agents = Path::new(&bob.field("presence"))
        .parent()
        .unwrap()
        .to_path_buf();
    let template: Value =
        serde_json::from_slice(&std::fs::read(bob.field("presence")).unwrap()).unwrap();
    let runtime = Path::new(&bob.field("control"))
        .parent()
        .unwrap()
        .to_path_buf();
    let shared_runtime = template["communication"]["endpoint"]
        .as_str()
        .unwrap()
        .starts_with("peer-runtime/");
    // 200 records of dead peerwire roots, named to sort before bob's, with their sockets and
    // control files; and 5 records of another program (no `communication`), also dead.
    let mut planted = Vec::new();
    let pids: Vec<u32> = (0..205).map(|_| dead_pid()).collect();
    for (n, pid) in pids.iter().take(200).enumerate() {
        let instance = peerwire::identity::new_instance_id();
        let mut rec = template.clone();
        rec["pid"] = json!(pid);
        rec["sessionId"] = json!(format!("aaa-dead-{n}"));
        let c = &mut rec["communication"];
        c["instanceId"] = json!(instance);
        c["peerId"] = json!(peerwire::identity::peer_id(&instance, None));
        c["alias"] = json!(format!("dead{n}"));
        c["processStartTime"] = json!(1);
        let name = format!("aaa-dead-{n}.{instance}.json");
        if shared_runtime {
            c["endpoint"] = json!(format!("peer-runtime/{instance}.sock"));
            let sock = runtime.join(format!("{instance}.sock"));
            drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
            control::write(
                &runtime,
                &control::ControlFile {
                    version: 1,
                    endpoint: sock,
                    secret: peerwire::identity::b64(&[7u8; 32]),
                    instance_id: instance.clone(),
                    peer_id: peerwire::identity::peer_id(&instance, None),
                    home: ns.home.clone(),
                    run_id: None,
                },
            )
            .unwrap();
        }
        peerwire::fsutil::atomic_write(
            &agents.join(&name),
            rec.to_string().as_bytes(),
            peerwire::fsutil::Durability::Visible,
        )
        .unwrap();
        planted.push((name, instance));
    }
    let mut foreign = Vec::new();
    for (n, pid) in pids.iter().skip(200).enumerate() {
        let mut rec = template.clone();
        rec.as_object_mut().unwrap().remove("communication");
        rec["pid"] = json!(pid);
        rec["sessionId"] = json!(format!("aaa-autohand-{n}"));
        let name = format!("aaa-autohand-{n}.json");
        peerwire::fsutil::atomic_write(
            &agents.join(&name),
            rec.to_string().as_bytes(),
            peerwire::fsutil::Durability::Visible,
        )
        .unwrap();
        foreign.push(name);
    }
    // Listings keep the most recently refreshed records: bob is listed despite 205 dead ones
    // sorting first and presenceFiles 50.
    assert!(
        eventually(20, || ns
            .listing(&["--all"])
            .iter()
            .any(|p| p["alias"] == json!("bob"))),
        "{:?}",
        ns.listing(&["--all"])
    );
    // A root reclaims the dead peerwire records, sockets and control files once they have not
    // been written for staleMs; alice reaches bob.
    std::thread::sleep(Duration::from_millis(1_200));
    let alice = ns.host(&["--alias", "alice"]);
    assert!(
        eventually(30, || planted
            .iter()
            .all(|(name, _)| !agents.join(name).exists())),
        "dead records are still there: {}",
        planted
            .iter()
            .filter(|(n, _)| agents.join(n).exists())
            .count()
    );
    if shared_runtime {
        for (_, instance) in &planted {
            assert!(!runtime.join(format!("{instance}.sock")).exists());
            assert!(!runtime.join(format!("{instance}.ctl")).exists());
        }
    }
    for name in &foreign {
        assert!(
            agents.join(name).exists(),
            "{name} of another program was deleted"
        );
    }
    assert!(Path::new(&bob.field("presence")).exists());
    assert!(Path::new(&bob.field("control")).exists());
    let o = peer_as(&ns, &alice, &["send", "@bob", "after the cleanup"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}
