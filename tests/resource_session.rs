//! Resources held for whole sessions, through the real binaries: `peer res` inside
//! `peer host -- CMD` acts for the session (PEER_HOLDER_PID) and a second session's `peer run`
//! waits for its release; the `coordinate_resource` tool over the trusted local channel;
//! `resource_update` events on `peer host --json`; child runs without `resource.control`
//! unless delegated. Ordering comes from files and the coordinator's state; waits are bounded.

use crate::common;

use common::*;
use peerwire::error::Code;
use peerwire::transport::LocalClient;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

const PEER_RES: &str = env!("CARGO_BIN_EXE_peer-res");

/// A shell fragment that waits (at most 30 s, then exits 9) for file `f`.
fn sh_wait(f: &Path) -> String {
    format!(
        "i=0; while [ ! -f '{}' ]; do i=$((i+1)); [ $i -gt 1500 ] && exit 9; sleep 0.02; done",
        f.display()
    )
}

fn sync_dir(ns: &Ns) -> PathBuf {
    let d = ns.root.join("sync");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `peer-res --json NAME`, parsed; `Null` when the resource does not exist yet.
fn res_status(ns: &Ns, name: &str) -> Value {
    let out = Command::new(PEER_RES)
        .arg("--home")
        .arg(&ns.home)
        .args(["--json", name])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.lines().next().unwrap_or("null")).unwrap_or(Value::Null)
}

fn last_json_line(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    serde_json::from_str(text.lines().last().unwrap_or("null")).unwrap_or(Value::Null)
}

fn client_of(host: &Host) -> LocalClient {
    host.client()
}

fn tool(client: &mut LocalClient, args: Value) -> peerwire::error::Result<Value> {
    client.call_raw(
        "local.tool",
        &json!({"tool": "coordinate_resource", "args": args}),
        10_000,
    )
}

#[test]
fn a_session_holds_until_peer_res_release_and_a_second_sessions_gate_waits_fifo() {
    let ns = Ns::new("ressess");
    let d = sync_dir(&ns);
    let holder = format!(
        "peer --json res request db > '{req}' || exit 3; touch '{held}'; {w}; \
         touch '{released}'; peer --json res release db > '{rel}' || exit 4",
        req = d.join("req.json").display(),
        held = d.join("held").display(),
        w = sh_wait(&d.join("release")),
        rel = d.join("rel.json").display(),
        released = d.join("released").display(),
    );
    let mut a = ns.host(&["--alias", "a", "--", "sh", "-c", &holder]);
    assert!(eventually(30, || d.join("held").exists()), "no grant");
    let req = last_json_line(&d.join("req.json"));
    assert_eq!(req["state"], json!("granted"), "{req}");
    let st = res_status(&ns, "db");
    let h = &st["holders"][0];
    // Held for the session: its root process and its peer id, not the short-lived CLI.
    assert_eq!(h["pid"], json!(a.pid()), "{st}");
    assert_eq!(h["principal"], json!(format!("peer:{}", a.field("peerId"))));
    assert_eq!(h["life"], json!("alive"));

    let waiter = format!(
        "peer --json run --resource db -- sh -c 'test -f {released} && touch {ran}' > '{out}'; touch '{done}'",
        released = d.join("released").display(),
        ran = d.join("b-ran").display(),
        out = d.join("b.json").display(),
        done = d.join("b-done").display(),
    );
    let mut b = ns.host(&["--alias", "b", "--", "sh", "-c", &waiter]);
    assert!(
        eventually(30, || res_status(&ns, "db")["queue"]
            .as_array()
            .is_some_and(|q| q.len() == 1)),
        "second session never queued"
    );
    assert!(!d.join("b-done").exists(), "the gate ran while db was held");
    std::fs::write(d.join("release"), "").unwrap();
    assert!(
        eventually(30, || d.join("b-done").exists()),
        "gate never ran"
    );
    assert!(
        d.join("b-ran").exists(),
        "the command ran before the release"
    );
    // The holder's CLI writes its answer after the release returns: wait for the session.
    assert_eq!(a.wait(), Some(0));
    let rel = last_json_line(&d.join("rel.json"));
    assert_eq!(rel["state"], json!("released"), "{rel}");
    let run = last_json_line(&d.join("b.json"));
    assert_eq!(run["status"], json!(0), "{run}");
    assert!(run["token"].as_u64() > req["token"].as_u64(), "{run} {req}");
    assert_eq!(b.wait(), Some(0));
    assert!(
        res_status(&ns, "db")["holders"]
            .as_array()
            .unwrap()
            .is_empty()
    );
}

#[test]
fn the_tool_requests_releases_and_needs_resource_control_for_policy() {
    let ns = Ns::new("restool");
    let host = ns.host(&["--alias", "t"]);
    let mut c = client_of(&host);
    let got = tool(
        &mut c,
        json!({"op": "request", "resource": "db", "waitMs": 0}),
    )
    .unwrap();
    assert_eq!(got["state"], json!("granted"), "{got}");
    assert!(got["token"].as_u64().is_some_and(|t| t >= 1), "{got}");
    let st = tool(&mut c, json!({"op": "status", "resource": "db"})).unwrap();
    let h = &st["resources"][0]["holders"][0];
    assert_eq!(
        h["principal"],
        json!(format!("peer:{}", host.field("peerId")))
    );
    assert_eq!(h["pid"], json!(host.pid()));
    let rel = tool(&mut c, json!({"op": "release", "resource": "db"})).unwrap();
    assert_eq!(rel["state"], json!("released"), "{rel}");
    for denied in [
        json!({"op": "set_controller", "resource": "db"}),
        json!({"op": "grant", "resource": "db", "ticket": "t-9"}),
    ] {
        let e = tool(&mut c, denied.clone()).unwrap_err();
        assert_eq!(e.code, Code::CapabilityDenied, "{denied}: {}", e.message);
    }

    let ns = Ns::new("restoolctl");
    ns.config(json!({"allowResourceControl": true}));
    let host = ns.host(&["--alias", "boss"]);
    let mut c = client_of(&host);
    let pol = tool(&mut c, json!({"op": "set_controller", "resource": "db"})).unwrap();
    assert!(pol["epoch"].as_u64().is_some(), "{pol}");
    let q = tool(&mut c, json!({"op": "request", "resource": "db"})).unwrap();
    assert_eq!(q["state"], json!("queued"), "controlled: {q}");
    let ticket = q["ticket"].as_str().unwrap().to_string();
    let g = tool(
        &mut c,
        json!({"op": "grant", "resource": "db", "ticket": ticket}),
    )
    .unwrap();
    assert_eq!(g["state"], json!("granted"), "{g}");
}

/// Reads `host`'s NDJSON stdout on a thread, so the test can wait with a bound.
fn events_of(host: &mut Host) -> mpsc::Receiver<Value> {
    let lines = host.lines.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in lines.map_while(|l| l.ok()) {
            if let Ok(v) = serde_json::from_str::<Value>(&l)
                && tx.send(v).is_err()
            {
                return;
            }
        }
    });
    rx
}

/// Waits (bounded) for `resource_update` events of `name` until one of kind `until`.
fn updates_until(rx: &mpsc::Receiver<Value>, name: &str, until: &str, secs: u64) -> Vec<Value> {
    let mut got = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(v) if v["event"] == json!("resource_update") && v["resource"] == json!(name) => {
                let done = v["kind"] == json!(until);
                got.push(v);
                if done {
                    break;
                }
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    got
}

#[test]
fn peer_host_json_prints_resource_updates_of_other_sessions() {
    let ns = Ns::new("resevents");
    let mut watcher = ns.host(&["--alias", "watch"]);
    let rx = events_of(&mut watcher);
    // The watcher's worker starts following the journals just after it is ready; a warm-up
    // resource proves it does before the run under test (a run it missed is simply repeated).
    let warm = (0..20).any(|_| {
        assert!(
            ns.peer(&["run", "--resource", "warm", "--", "true"])
                .status
                .success()
        );
        !updates_until(&rx, "warm", "released", 2).is_empty()
    });
    assert!(warm, "the watcher never reported any resource_update");
    let mut other = ns.host(&[
        "--alias",
        "other",
        "--",
        "peer",
        "run",
        "--resource",
        "port:3000",
        "--",
        "true",
    ]);
    assert_eq!(other.wait(), Some(0));
    let ev = updates_until(&rx, "port:3000", "released", 30);
    let kinds: Vec<&str> = ev.iter().filter_map(|e| e["kind"].as_str()).collect();
    assert!(kinds.contains(&"granted"), "{ev:?}");
    assert_eq!(kinds.last(), Some(&"released"), "{ev:?}");
    let mut last = 0;
    for e in &ev {
        assert!(e["request"].as_str().is_some_and(|r| !r.is_empty()), "{e}");
        assert_eq!(e["epoch"], json!(1), "{e}");
        let seq = e["sequence"].as_u64().unwrap();
        assert!(seq > last, "sequences increase: {ev:?}");
        last = seq;
    }
}

/// `set-controller` from a child run of a root that has `resource.control`, the command
/// prefixed by `prefix` (e.g. `env -u PEER_RUN_ID` to shed the run's variable).
fn child_set_controller(delegate: bool, prefix: &str) -> (Option<i32>, String) {
    let ns = Ns::new(if delegate { "resdeleg" } else { "resnodeleg" });
    ns.config(json!({"allowResourceControl": true}));
    let d = sync_dir(&ns);
    let flag = if delegate { "--delegate-control" } else { "" };
    let script = format!(
        "peer run-child --alias w {flag} -- sh -c '{prefix} peer res set-controller db 2> {err}; echo $? > {rc}'",
        err = d.join("err").display(),
        rc = d.join("rc").display(),
    );
    let mut host = ns.host(&["--alias", "root", "--", "sh", "-c", &script]);
    assert_eq!(host.wait(), Some(0));
    let rc = std::fs::read_to_string(d.join("rc")).unwrap_or_default();
    let err = std::fs::read_to_string(d.join("err")).unwrap_or_default();
    (rc.trim().parse().ok(), err)
}

#[test]
fn a_child_run_gets_resource_control_only_when_delegated() {
    let (rc, err) = child_set_controller(false, "");
    assert_eq!(rc, Some(Code::CapabilityDenied.exit_status()), "{err}");
    assert!(err.contains("CAPABILITY_DENIED"), "{err}");
    let (rc, err) = child_set_controller(true, "");
    assert_eq!(rc, Some(0), "{err}");
}

#[test]
fn a_child_run_that_sheds_its_variables_is_still_the_run() {
    // The run's capabilities come from the secret its control file holds, not from
    // PEER_RUN_ID: dropping or changing the variable gains nothing.
    for prefix in ["env -u PEER_RUN_ID", "env PEER_RUN_ID=r-0000000000000000"] {
        let (rc, err) = child_set_controller(false, prefix);
        assert_eq!(
            rc,
            Some(Code::CapabilityDenied.exit_status()),
            "{prefix}: {err}"
        );
    }
    // Sending without the variable still sends as the run, never as the root.
    let ns = Ns::new("runsend");
    let d = sync_dir(&ns);
    let _other = ns.host(&["--alias", "other"]);
    let script = format!(
        "peer run-child --alias w -- sh -c 'env -u PEER_RUN_ID peer --json send @other hi > {out} 2>&1; env -u PEER_RUN_ID peer --json run-child -- true > {nested} 2>&1; echo $? > {rc}; cat \"$PEER_CONTROL\" > /dev/null && echo own > {ctl}'",
        out = d.join("send.json").display(),
        nested = d.join("nested").display(),
        rc = d.join("rc").display(),
        ctl = d.join("ctl").display(),
    );
    let mut host = ns.host(&["--alias", "root", "--", "sh", "-c", &script]);
    assert_eq!(host.wait(), Some(0));
    let sent = last_json_line(&d.join("send.json"));
    assert_eq!(sent["state"], "accepted", "{sent}");
    let from = sent["from"].as_str().unwrap_or_default().to_string();
    assert!(!from.is_empty(), "{sent}");
    assert_ne!(from, host.field("peerId"), "sent as the root");
    let nested = std::fs::read_to_string(d.join("nested")).unwrap_or_default();
    assert_eq!(
        std::fs::read_to_string(d.join("rc"))
            .unwrap_or_default()
            .trim(),
        "125",
        "a run cannot publish runs (a wrapper's own failure is 125): {nested}"
    );
    assert!(nested.contains("CAPABILITY_DENIED"), "{nested}");
    assert_eq!(
        std::fs::read_to_string(d.join("ctl"))
            .unwrap_or_default()
            .trim(),
        "own"
    );
    let control = host.field("control");
    let dir = Path::new(&control).parent().unwrap();
    let left: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&host.field("instanceId")))
        .collect();
    assert!(left.is_empty(), "run control files left behind: {left:?}");
}

#[test]
fn a_detached_command_of_the_session_anchors_to_the_root_it_proves_by_its_socket() {
    // In another session (setsid) the root is neither an ancestor in the same session nor a
    // descendant: the kernel's SO_PEERCRED on the root's socket is what vouches for it.
    let ns = Ns::new("resdetach");
    let d = sync_dir(&ns);
    let script = format!(
        "setsid -w peer --json res request db > {out} 2> {err}",
        out = d.join("out").display(),
        err = d.join("err").display(),
    );
    let mut host = ns.host(&["--alias", "root", "--", "sh", "-c", &script]);
    assert_eq!(host.wait(), Some(0));
    let err = std::fs::read_to_string(d.join("err")).unwrap_or_default();
    let out = last_json_line(&d.join("out"));
    assert_eq!(out["state"], "granted", "{out} {err}");
}
