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
