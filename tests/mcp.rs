//! Two `peer mcp` roots driven by the official MCP Python SDK client exchange a
//! message, a reply and receipts, and every tool's bad input comes back as its typed error.

use crate::common;

use common::*;
use serde_json::json;
use std::process::Command;

fn python() -> String {
    std::env::var("PEER_TEST_PYTHON")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| {
            let local = concat!(env!("CARGO_MANIFEST_DIR"), "/.venv/bin/python");
            assert!(
                std::path::Path::new(local).exists(),
                "the MCP SDK venv is missing: run 'bash tests/run.sh'"
            );
            local.to_string()
        })
}

fn run_script(ns: &Ns, script: serde_json::Value) -> (bool, String) {
    let path = ns.root.join("script.json");
    std::fs::write(&path, script.to_string()).unwrap();
    let out = Command::new(python())
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp_client.py"))
        .arg(&path)
        .current_dir(&ns.work)
        .env_remove("PEER_CONTROL")
        .output()
        .unwrap();
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn server(ns: &Ns, alias: &str) -> serde_json::Value {
    json!({"command": [PEER, "--home", ns.home.to_string_lossy(), "mcp", "--alias", alias]})
}

#[test]
fn two_mcp_roots_exchange_messages_receipts_and_typed_errors() {
    let ns = Ns::new("mcp");
    let script = json!({
        "sessions": {"a": server(&ns, "alice"), "b": server(&ns, "bob")},
        "steps": [
            {"session": "a", "tool": "list_peers", "args": {}, "expect_text_contains": "bob", "retry": {"attempts": 20, "delay_ms": 100}},
            {"session": "a", "tool": "send_peer_message", "args": {"to": "@bob", "content": "hi bob", "topic": "build"},
             "expect": {"state": "accepted", "sequence": 1}, "save": {"m1": "messageId", "corr": "correlationId"}},
            {"session": "b", "await_notification": {"event": "peer_update", "kind": "message"}},
            {"session": "b", "tool": "peer_messages", "args": {"waitMs": 5000},
             "expect": {"messages.0.messageId": "${m1}", "messages.0.content": "hi bob", "messages.0.fromAlias": "alice"},
             "expect_text_contains": "<peer-message"},
            {"session": "b", "tool": "send_peer_message", "args": {"to": "alice", "content": "hello alice", "replyTo": "${m1}"},
             "expect": {"state": "accepted", "correlationId": "${corr}"}},
            {"session": "a", "tool": "peer_messages", "args": {"waitMs": 5000},
             "expect": {"messages.0.replyTo": "${m1}", "messages.0.correlationId": "${corr}"}},
            {"session": "a", "tool": "peer_messages", "args": {"after": 0, "replyTo": "${m1}"},
             "expect": {"messages.0.state": "consumed"}},
            {"session": "a", "tool": "peer_messages", "args": {"after": 0, "messageId": "nothing-here"}, "expect": {"messages": []}},
            {"session": "a", "await_notification": {"event": "peer_update", "kind": "receipt", "state": "replied", "messageId": "${m1}"}},
            {"session": "a", "tool": "peer_messages", "args": {"waitMs": 300}, "expect": {"messages": []}},
            {"session": "a", "tool": "coordinate_resource", "args": {"op": "status", "resource": "port:3000"}},
            {"session": "a", "tool": "peer_messages", "args": {"waitMs": 30001}, "expect_error_code": "USAGE"},
            {"session": "a", "tool": "send_peer_message", "args": {"to": "bob"}, "expect_error_code": "USAGE"},
            {"session": "a", "tool": "send_peer_message", "args": {"to": "bob", "content": "x", "extra": 1}, "expect_error_code": "USAGE"},
            {"session": "a", "tool": "send_peer_message", "args": {"to": "bob", "content": 7}, "expect_error_code": "USAGE"},
            {"session": "a", "tool": "send_peer_message", "args": {"to": "nobody", "content": "x"}, "expect_error_code": "PEER_OFFLINE"},
            {"session": "a", "tool": "send_peer_message", "args": {"to": "bob", "content": "x".repeat(8001)}, "expect_error_code": "MESSAGE_TOO_LARGE"},
            {"session": "a", "tool": "send_peer_message", "args": {"to": "bob", "content": "x", "replyTo": "m-not-received"}, "expect_error_code": "INVALID_REPLY"},
            {"session": "a", "tool": "no_such_tool", "args": {}, "expect_protocol_error": -32602},
            {"session": "a", "ping": true}
        ]
    });
    let (ok, text) = run_script(&ns, script);
    assert!(ok, "MCP script failed:\n{text}");
}

/// Every id, cursor and token a tool returns goes back in where a tool asks for one, through
/// the official SDK client: the fencing token as `request` returns it (a number), tickets,
/// message ids, peerIds and cursors.
#[test]
fn every_returned_id_and_token_is_accepted_back() {
    let ns = Ns::new("mcp-roundtrip");
    let script = json!({
        "sessions": {"a": server(&ns, "alice"), "b": server(&ns, "bob")},
        "steps": [
            {"session": "a", "tool": "coordinate_resource", "args": {"op": "request", "resource": "port:3000"},
             "expect": {"state": "granted"}, "save": {"token": "token", "ticket1": "ticket"}},
            {"session": "a", "tool": "coordinate_resource", "args": {"op": "release", "resource": "port:3000", "token": "${token}"}},
            {"session": "a", "tool": "coordinate_resource", "args": {"op": "request", "resource": "port:3000"},
             "expect": {"state": "granted"}, "save": {"ticket2": "ticket"}},
            {"session": "a", "tool": "coordinate_resource", "args": {"op": "release", "resource": "port:3000", "ticket": "${ticket2}"}},
            {"session": "a", "tool": "coordinate_resource", "args": {"op": "status", "resource": "port:3000"},
             "expect": {"resources.0.holders": []}},
            {"session": "a", "tool": "list_peers", "args": {"query": "bob"}, "save": {"bob": "peers.0.peerId"},
             "retry": {"attempts": 20, "delay_ms": 100}},
            {"session": "a", "tool": "send_peer_message", "args": {"to": "${bob}", "content": "to a peerId"},
             "expect": {"state": "accepted"}, "save": {"m1": "messageId", "bob_again": "to"}},
            {"session": "a", "tool": "send_peer_message", "args": {"to": "${bob_again}", "content": "to the receipt's to"},
             "expect": {"state": "accepted"}},
            {"session": "b", "tool": "peer_messages", "args": {"waitMs": 5000},
             "save": {"from": "messages.0.from", "got": "messages.0.messageId", "cursor": "cursor"}},
            {"session": "b", "tool": "peer_messages", "args": {"after": 0, "messageId": "${got}", "from": "${from}"},
             "expect": {"messages.0.messageId": "${m1}"}},
            {"session": "b", "tool": "peer_messages", "args": {"after": "${cursor}"}},
            {"session": "b", "tool": "send_peer_message", "args": {"to": "${from}", "content": "reply", "replyTo": "${got}"},
             "expect": {"state": "accepted"}}
        ]
    });
    let (ok, text) = run_script(&ns, script);
    assert!(ok, "{text}");
}

/// A `peer mcp` driven over raw stdio, one JSON-RPC message per line, so a test can write
/// several requests at once and see in which order the answers come.
struct RawMcp {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    lines: std::sync::mpsc::Receiver<serde_json::Value>,
}

impl RawMcp {
    fn start(ns: &Ns, alias: &str) -> RawMcp {
        use std::io::BufRead;
        let mut child = ns
            .cmd(PEER)
            .args(["mcp", "--alias", alias])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let out = std::io::BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in out.lines().map_while(|l| l.ok()) {
                let v = serde_json::from_str(&line).expect("one JSON object per line");
                if tx.send(v).is_err() {
                    return;
                }
            }
        });
        let mut m = RawMcp {
            stdin: child.stdin.take(),
            child,
            lines,
        };
        m.write(&[json!({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})]);
        assert_eq!(m.next()["id"], "init");
        m.write(&[json!({"jsonrpc": "2.0", "method": "notifications/initialized"})]);
        m
    }

    /// Writes the messages with one write, so the server finds them all waiting at once.
    fn write(&mut self, msgs: &[serde_json::Value]) {
        use std::io::Write;
        let text: String = msgs.iter().map(|m| format!("{m}\n")).collect();
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(text.as_bytes()).unwrap();
        stdin.flush().unwrap();
    }

    /// The next answer (notifications skipped); the timeout only turns a hang into a failure.
    fn next(&self) -> serde_json::Value {
        loop {
            let v = self
                .lines
                .recv_timeout(std::time::Duration::from_secs(30))
                .expect("peer mcp answered");
            if v.get("id").is_some() {
                return v;
            }
        }
    }

    /// Closes stdin and returns every answer written until the server exited.
    fn finish(mut self) -> Vec<serde_json::Value> {
        drop(self.stdin.take());
        let status = self.child.wait().unwrap();
        assert!(status.success(), "peer mcp exited with {status}");
        self.lines
            .try_iter()
            .filter(|v| v.get("id").is_some())
            .collect()
    }
}

fn send_call(id: &str, to: &str, content: &str) -> serde_json::Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "send_peer_message", "arguments": {"to": to, "content": content}}})
}

/// Short calls run in the server's reader thread when nothing else is waiting; this checks
/// what that must not change: a long wait never delays a send or a ping behind it, requests
/// written together are all answered (concurrently, by the workers), every answer is the
/// right one for its id, and a cancelled wait is never answered.
#[test]
fn inline_calls_keep_waits_concurrent_answers_exact_and_cancellation() {
    let ns = Ns::new("mcp-inline");
    ns.config(json!({"limits": {"ratePerSecond": 1000, "rateBurst": 1000}}));
    let _bob = ns.host(&["--alias", "bob"]);
    let mut m = RawMcp::start(&ns, "alice");
    // Filtered for a message that never comes (so receipt events do not end it either): this
    // wait lasts until it is cancelled.
    m.write(&[json!({"jsonrpc": "2.0", "id": "w", "method": "tools/call", "params": {"name": "peer_messages", "arguments": {"waitMs": 30000, "messageId": "m-never"}}})]);
    let mut seqs = Vec::new();
    let mut ids = std::collections::HashSet::new();
    let mut check = |r: &serde_json::Value, id: &str| {
        assert_eq!(r["id"], id, "an answer for another call came first: {r}");
        let s = &r["result"]["structuredContent"];
        assert_eq!(s["state"], "accepted", "{r}");
        assert!(
            ids.insert(s["messageId"].as_str().unwrap().to_string()),
            "{r}"
        );
        seqs.push(s["sequence"].as_u64().unwrap());
    };
    // One at a time, while the wait is running.
    for id in ["s1", "s2", "s3"] {
        m.write(&[send_call(id, "bob", id)]);
        let r = m.next();
        check(&r, id);
    }
    m.write(&[json!({"jsonrpc": "2.0", "id": "p", "method": "ping"})]);
    assert_eq!(m.next()["id"], "p");
    // Written together: every one answered once, in whatever order the workers finish.
    let batch = ["b1", "b2", "b3", "b4"];
    let calls: Vec<_> = batch.iter().map(|id| send_call(id, "bob", id)).collect();
    m.write(&calls);
    let mut got: Vec<serde_json::Value> = (0..batch.len()).map(|_| m.next()).collect();
    got.sort_by_key(|r| r["id"].as_str().unwrap().to_string());
    for (r, id) in got.iter().zip(batch) {
        check(r, id);
    }
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=7).collect::<Vec<u64>>());
    // A refused send is answered as its typed error, and serving goes on.
    m.write(&[send_call("big", "bob", &"x".repeat(8001))]);
    let r = m.next();
    assert_eq!(r["id"], "big");
    assert_eq!(
        r["result"]["structuredContent"]["error"]["code"],
        "MESSAGE_TOO_LARGE"
    );
    // The wait's id is still in flight; once cancelled, the wait is never answered.
    m.write(&[send_call("w", "bob", "same id")]);
    assert_eq!(m.next()["error"]["data"]["code"], "INVALID_REQUEST");
    m.write(&[
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "w"}}),
        json!({"jsonrpc": "2.0", "id": "p2", "method": "ping"}),
    ]);
    assert_eq!(m.next()["id"], "p2");
    m.write(&[send_call("last", "bob", "after the cancel")]);
    let r = m.next();
    assert_eq!(r["id"], "last");
    assert_eq!(r["result"]["structuredContent"]["state"], "accepted");
    let rest = m.finish();
    assert!(
        rest.iter().all(|r| r["id"] != "w"),
        "cancelled wait answered: {rest:?}"
    );
}
