//! Custody that never lies, between real processes: a stopped receiver is not a refusal, expiry
//! holds on every read path, one-off `--as` senders are idempotent and leave no store behind,
//! a restarted sender finds its predecessors' undelivered mail, and dead presence records are
//! reclaimed without hiding live peers.

mod common;

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
    let cf = control::read(Path::new(&host.field("control"))).unwrap();
    LocalClient::connect(&cf.endpoint, cf.secret_bytes().unwrap(), &Limits::default()).unwrap()
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
        .call(
            "local.tool",
            json!({"version": 1, "tool": "peer_messages", "args": {"messageId": id}}),
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

    bob.signal(Signal::SIGSTOP);
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
    bob.signal(Signal::SIGSTOP);
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
