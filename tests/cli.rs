//! The `peer` CLI between real processes: a shell script that sends, waits for
//! a reply and checks exit codes; typed errors for bad input; sanitized output; child runs that
//! route through their parent and end with TARGET_ENDED; two auto peers stopping at the budget.

use crate::common;

use common::*;
use nix::sys::signal::Signal;
use peerwire::error::Code;
use serde_json::{Value, json};
use std::process::Stdio;

#[test]
fn a_shell_script_sends_waits_for_a_reply_and_checks_exit_codes() {
    let ns = Ns::new("script");
    // bob answers the first message it gets, using only the CLI.
    let responder = r#"
        exec 2>>"$TRACE"
        out=$(peer --json inbox --wait 20000) || exit 90
        id=$(printf '%s' "$out" | sed -n 's/.*"messageId":"\([^"]*\)".*/\1/p' | head -n 1)
        [ -n "$id" ] || exit 91
        peer reply "$id" "pong" >/dev/null || exit 92
        peer consume "$id" >/dev/null 2>&1
        # Stay alive until alice says she is done: her same-id resend below names @bob, and an
        # ended bob no longer resolves by alias. A wait also ends on other news (the receipt of
        # bob's reply), so wait again, a bounded number of times, until "done" is there.
        for i in $(seq 50); do
            out=$(peer --json inbox --wait 20000); st=$?
            echo "bob wait $i: exit $st: $out" | cut -c1-300 >&2
            printf '%s' "$out" | grep -q '"content":"done"' && exit 0
        done
        exit 93
    "#;
    let script = r#"
        exec 2>>"$TRACE"
        peer send @nobody "x" 2>/dev/null; [ $? -eq 12 ] || exit 80
        out=$(peer --json send @bob "ping" --wait-receipt accepted --timeout 5000) || exit 81
        id=$(printf '%s' "$out" | sed -n 's/.*"messageId":"\([^"]*\)".*/\1/p')
        [ -n "$id" ] || exit 82
        peer --json send @bob "ping" --message-id "$id" >/dev/null || exit 83
        peer send @bob "different" --message-id "$id" 2>/dev/null; [ $? -eq 21 ] || exit 84
        reply=$(peer --json inbox --reply-to "$id" --wait 20000) || exit 85
        printf '%s' "$reply" | grep -q '"content":"pong"' || exit 86
        # The replied receipt travels back on its own: poll a bounded number of times.
        for i in $(seq 100); do peer status "$id" | grep -q replied && break; sleep 0.05; done
        peer status "$id" | grep -q replied || exit 88
        peer send @bob "done" >/dev/null || exit 89
        exit 0
    "#;
    // Both scripts append their stderr, and bob each wait's outcome, to one trace that a
    // failure prints first (CI output is cut to its first lines).
    let trace = ns.root.join("trace");
    let trace_env = format!("TRACE={}", trace.display());
    let mut bob = ns.host(&[
        "--alias", "bob", "--", "env", &trace_env, "sh", "-c", responder,
    ]);
    let o = ns.peer(&[
        "--json", "host", "--alias", "alice", "--", "env", &trace_env, "sh", "-c", script,
    ]);
    let trace_text = || std::fs::read_to_string(&trace).unwrap_or_default();
    if o.status.code() != Some(0) {
        let (bob_ended, bob_stderr) = bob.end_for_report();
        panic!(
            "script exited {:?}; trace:\n{}\nbob's root ended {bob_ended:?}, stderr: {bob_stderr}\nalice's root stderr: {}\nstdout: {}",
            o.status.code(),
            trace_text(),
            stderr(&o),
            String::from_utf8_lossy(&o.stdout)
        );
    }
    assert_eq!(
        bob.wait(),
        Some(0),
        "responder failed; trace:\n{}",
        trace_text()
    );
}

#[test]
fn bad_cli_input_gets_typed_errors_and_exit_statuses() {
    let ns = Ns::new("badcli");
    let alice = ns.host(&["--alias", "alice"]);
    let bob1 = ns.host(&["--alias", "bob"]);
    let bob2 = ns.host(&["--alias", "bob"]);
    // An alias matching two live peers.
    let o = peer_as(&ns, &alice, &["send", "@bob", "hi"]);
    assert_eq!(
        o.status.code(),
        Some(Code::AmbiguousTarget.exit_status()),
        "{}",
        stderr(&o)
    );
    assert!(
        stderr(&o).contains(&bob1.field("peerId")) && stderr(&o).contains(&bob2.field("peerId"))
    );
    // Outside a session without --as.
    let o = ns.peer(&["send", "@alice", "hi"]);
    assert_eq!(o.status.code(), Some(Code::Usage.exit_status()));
    // A stdin message over the limit.
    let mut child = ns
        .cmd(PEER)
        .env("PEER_CONTROL", alice.field("control"))
        .args(["send", &bob1.field("peerId"), "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    let _ = child.stdin.take().unwrap().write_all(&vec![b'x'; 9000]);
    let o = child.wait_with_output().unwrap();
    assert_eq!(
        o.status.code(),
        Some(Code::MessageTooLarge.exit_status()),
        "{}",
        stderr(&o)
    );
    // waitMs above the bound.
    let o = peer_as(&ns, &alice, &["inbox", "--wait", "30001"]);
    assert_eq!(
        o.status.code(),
        Some(Code::Usage.exit_status()),
        "{}",
        stderr(&o)
    );
    assert!(stderr(&o).contains("waitMs"));
    // A reply to a message that came from someone else.
    let sent = json_of(&peer_as(
        &ns,
        &bob1,
        &["--json", "send", &alice.field("peerId"), "from bob1"],
    ));
    let id = sent["messageId"].as_str().unwrap().to_string();
    let o = peer_as(
        &ns,
        &bob2,
        &["send", &alice.field("peerId"), "sneaky", "--reply-to", &id],
    );
    assert_eq!(
        o.status.code(),
        Some(Code::InvalidReply.exit_status()),
        "{}",
        stderr(&o)
    );
    // Unknown subcommand flag and --help everywhere.
    for sub in [
        "host",
        "send",
        "inbox",
        "reply",
        "consume",
        "status",
        "chat",
        "lab",
        "mcp",
        "run-child",
        "recover",
        "dir",
    ] {
        let o = ns.peer(&[sub, "--help"]);
        assert_eq!(o.status.code(), Some(0), "peer {sub} --help");
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("usage: peer"),
            "peer {sub} --help"
        );
    }
    let o = peer_as(&ns, &alice, &["send", "--bogus"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn terminal_escapes_in_content_and_aliases_never_reach_the_terminal() {
    let ns = Ns::new("escapes");
    let alice = ns.host(&["--alias", "alice"]);
    let bob = ns.host(&["--alias", "bob"]);
    let evil = "\u{1b}]0;owned\u{7}hello\u{1b}[31m red\u{1b}[0m \u{202e}tnet\u{9b}2J";
    let o = peer_as(&ns, &alice, &["send", "@bob", evil]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = peer_as(&ns, &bob, &["inbox"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("hello red"), "{text}");
    assert!(
        !text.contains('\u{1b}') && !text.contains('\u{202e}') && !text.contains('\u{9b}'),
        "{text:?}"
    );
    // The JSON form keeps the exact bytes for programs (escaped by JSON).
    let v = json_of(&peer_as(&ns, &bob, &["--json", "inbox"]));
    assert_eq!(v["messages"][0]["content"], json!(evil));
    // An alias with escapes is refused before it is ever advertised.
    let o = ns.peer(&["host", "--alias", "x\u{1b}[2Jy"]);
    assert_eq!(o.status.code(), Some(Code::Usage.exit_status()));
}

#[test]
fn sends_to_a_killed_peer_are_typed_and_nothing_is_lost() {
    let ns = Ns::new("killed");
    let alice = ns.host(&["--alias", "alice"]);
    let mut bob = ns.host(&["--alias", "bob"]);
    let bob_id = bob.field("peerId");
    let first = json_of(&peer_as(
        &ns,
        &alice,
        &["--json", "send", &bob_id, "before"],
    ));
    assert_eq!(first["state"], json!("accepted"));
    bob.signal(Signal::SIGKILL);
    bob.wait();
    // The record stays on disk but is stale: the exact incarnation has ended.
    let o = peer_as(&ns, &alice, &["send", &bob_id, "after"]);
    assert_eq!(
        o.status.code(),
        Some(Code::TargetEnded.exit_status()),
        "{}",
        stderr(&o)
    );
    let o = peer_as(&ns, &alice, &["send", "@bob", "after"]);
    assert_eq!(
        o.status.code(),
        Some(Code::PeerOffline.exit_status()),
        "{}",
        stderr(&o)
    );
    // What bob accepted before dying is still in his store for review.
    let o = ns.peer(&[
        "--json",
        "recover",
        "--instance",
        &bob.field("instanceId"),
        "--session-id",
        &bob.field("sessionId"),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json_of(&o);
    assert_eq!(v["unread"][0]["content"], json!("before"));
    let o = ns.peer(&[
        "recover",
        "--instance",
        &bob.field("instanceId"),
        "--session-id",
        "someone-else",
    ]);
    assert!(!o.status.success());
}

#[test]
fn child_runs_route_through_their_parent_and_end_with_target_ended() {
    let ns = Ns::new("runs");
    let dir = ns.root.join("sync");
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.to_string_lossy().to_string();
    let parent_script = format!(
        r#"peer run-child --alias helper -- sh -c 'touch {d}/ready; while [ ! -f {d}/go ]; do sleep 0.02; done; peer --json inbox > {d}/inbox.json; peer reply "$(sed -n "s/.*\"messageId\":\"\([^\"]*\)\".*/\1/p" {d}/inbox.json | head -n 1)" "done by helper"'
           touch {d}/retired; while [ ! -f {d}/stop ]; do sleep 0.02; done"#
    );
    let mut parent = ns.host(&["--alias", "parent", "--", "sh", "-c", &parent_script]);
    let asker = ns.host(&["--alias", "asker"]);
    assert!(
        eventually(20, || dir.join("ready").exists()),
        "child run never started"
    );
    let list = ns.listing(&[]);
    let helper = list
        .iter()
        .find(|p| p["alias"] == json!("helper"))
        .expect("helper listed")
        .clone();
    assert_eq!(helper["runOf"], json!(parent.field("peerId")));
    let helper_id = helper["peerId"].as_str().unwrap().to_string();
    let r = json_of(&peer_as(
        &ns,
        &asker,
        &["--json", "send", "@helper", "please do it"],
    ));
    assert_eq!(r["state"], json!("accepted"));
    assert_eq!(r["toPeerId"], json!(helper_id));
    std::fs::write(dir.join("go"), "").unwrap();
    assert!(
        eventually(20, || dir.join("retired").exists()),
        "run never retired"
    );
    let inbox: Value =
        serde_json::from_slice(&std::fs::read(dir.join("inbox.json")).unwrap()).unwrap();
    assert_eq!(inbox["messages"][0]["content"], json!("please do it"));
    let reply = json_of(&peer_as(
        &ns,
        &asker,
        &["--json", "inbox", "--wait", "5000"],
    ));
    assert_eq!(reply["messages"][0]["fromPeerId"], json!(helper_id));
    assert_eq!(reply["messages"][0]["content"], json!("done by helper"));
    // The run is retired but its parent lives: sends to the run are TARGET_ENDED.
    let o = peer_as(&ns, &asker, &["send", &helper_id, "too late"]);
    assert_eq!(
        o.status.code(),
        Some(Code::TargetEnded.exit_status()),
        "{}",
        stderr(&o)
    );
    assert!(
        ns.listing(&[])
            .iter()
            .all(|p| p["alias"] != json!("helper"))
    );
    std::fs::write(dir.join("stop"), "").unwrap();
    assert_eq!(parent.wait(), Some(0));
}

#[test]
fn two_auto_peers_stop_at_the_reply_budget() {
    let ns = Ns::new("auto");
    ns.config(json!({
        "idleBehavior": "auto",
        "autoCommand": ["sh", "-c", "peer reply \"$PEER_MESSAGE_ID\" pong >/dev/null 2>&1"],
        "limits": {"automaticReplies": 3}
    }));
    let a = ns.host(&["--alias", "ping"]);
    let b = ns.host(&["--alias", "pong"]);
    let o = peer_as(&ns, &a, &["send", "@pong", "start"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let count = |h: &Host| -> usize {
        let v = json_of(&peer_as(&ns, h, &["--json", "inbox", "--all"]));
        v["messages"].as_array().map_or(0, Vec::len)
    };
    // pong gets the user's message and 3 automatic ones; ping gets 3 automatic replies.
    assert!(
        eventually(60, || count(&b) == 4 && count(&a) == 3),
        "ping {} pong {}",
        count(&a),
        count(&b)
    );
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_eq!(
        (count(&a), count(&b)),
        (3, 4),
        "the reply budget did not stop the ping-pong"
    );
}

#[test]
fn mentions_and_chat_share_one_parser() {
    let ns = Ns::new("mention");
    let alice = ns.host(&["--alias", "alice"]);
    let bob = ns.host(&["--alias", "bob"]);
    // One argument in composer form: the leading @ is the recipient, inline @refs are metadata.
    let o = peer_as(
        &ns,
        &alice,
        &["send", "@bob please ask @carol about the build"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json_of(&peer_as(&ns, &bob, &["--json", "inbox"]));
    assert_eq!(
        v["messages"][0]["content"],
        json!("please ask @carol about the build")
    );
    assert_eq!(v["messages"][0]["mentions"], json!(["carol"]));
    // peer chat without a terminal reads lines: a leading @ sends and sets the recipient.
    let mut chat = ns
        .cmd(PEER)
        .env("PEER_CONTROL", alice.field("control"))
        .arg("chat")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut input = chat.stdin.take().unwrap();
        input
            .write_all(b"@bob first line\nsecond line\n/to nobody-here\n/quit\n")
            .unwrap();
    }
    let out = chat.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let v = json_of(&peer_as(&ns, &bob, &["--json", "inbox", "--after", "1"]));
    let texts: Vec<&str> = v["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["first line", "second line"]);
}

#[test]
fn a_host_holding_secrets_is_not_dumpable() {
    let ns = Ns::new("dumpable");
    let host = ns.host(&["--alias", "keeper"]);
    let cf =
        peerwire::runtime::control::read(std::path::Path::new(&host.field("control"))).unwrap();
    let mut client = peerwire::transport::LocalClient::connect(
        &cf.endpoint,
        cf.secret_bytes().unwrap(),
        &peerwire::config::Limits::default(),
    )
    .unwrap();
    let info = client
        .call_raw("local.info", &json!({"version": 1}), 5_000)
        .unwrap();
    assert_eq!(info["dumpable"], json!(false), "{info}");
    // The kernel's view (telling only when the tests do not run as root): the files of a
    // non-dumpable process belong to root, whoever runs it.
    if !nix::unistd::getuid().is_root() {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(format!("/proc/{}/environ", host.pid())).unwrap();
        assert_eq!(
            meta.uid(),
            0,
            "/proc/PID of a non-dumpable process is root's"
        );
    }
}
