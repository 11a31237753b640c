//! The typed local calls against the params objects the CLI built by hand and the root read
//! by hand: the same bytes out, the same values in, the same error codes.

use super::*;
use serde_json::json;

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        other => panic!("not an object: {other}"),
    }
}

fn line(v: &Value) -> String {
    serde_json::to_string(v).unwrap()
}

fn tool(name: &str, args: Value) -> LocalTool {
    LocalTool {
        tool: name.into(),
        args,
        ..LocalTool::default()
    }
}

#[test]
fn encodes_the_params_the_cli_built_by_hand() {
    // `peer send bob hi --message-id m-1` inside a run with an automatic-reply budget.
    let req = LocalRequest {
        run_id: Some("r-1".into()),
        auto: Some("c-1".into()),
        call: LocalCall::Tool(LocalTool {
            message_id: Some("m-1".into()),
            ..tool("send_peer_message", json!({"to": "bob", "content": "hi"}))
        }),
    };
    let old = json!({"tool": "send_peer_message", "args": {"to": "bob", "content": "hi"},
        "messageId": "m-1", "version": 1, "runId": "r-1", "auto": "c-1"});
    assert_eq!(req.encode(), ("local.tool", old.clone()));
    assert_eq!(line(&req.encode().1), line(&old));
    // `peer inbox --wait 5`: unconsumed only, a message ends the wait.
    let req = LocalRequest::root(LocalCall::Tool(LocalTool {
        unconsumed: true,
        wait_for: Some("message".into()),
        events_after: Some(4),
        ..tool("peer_messages", json!({"waitMs": 5}))
    }));
    let old = json!({"tool": "peer_messages", "args": {"waitMs": 5}, "unconsumed": true,
        "waitFor": "message", "eventsAfter": 4, "version": 1});
    assert_eq!(req.encode().1, old);
    let cases = [
        (
            LocalCall::Consume(MessageNote {
                message_id: "m-1".into(),
                note: None,
            }),
            json!({"messageId": "m-1", "note": null, "version": 1}),
        ),
        (
            LocalCall::Reply(LocalReply {
                message_id: "m-1".into(),
                content: "ok".into(),
                topic: None,
                reply_id: None,
            }),
            json!({"messageId": "m-1", "content": "ok", "topic": null, "version": 1}),
        ),
        (
            LocalCall::Status(SentMessage {
                message_id: "m-1".into(),
            }),
            json!({"messageId": "m-1", "version": 1}),
        ),
        (
            LocalCall::WaitReceipt(WaitReceipt {
                message_id: "m-1".into(),
                state: Some("consumed".into()),
                wait_ms: Some(30_000),
            }),
            json!({"messageId": "m-1", "state": "consumed", "waitMs": 30_000, "version": 1}),
        ),
        (
            LocalCall::RunRetire(RunRetire { run: "r-1".into() }),
            json!({"run": "r-1", "version": 1}),
        ),
        (LocalCall::Info, json!({"version": 1})),
    ];
    for (call, old) in cases {
        let req = LocalRequest::root(call.clone());
        assert_eq!(line(&req.encode().1), line(&old), "{}", call.method());
        let (method, params) = req.encode();
        assert_eq!(LocalRequest::decode(method, obj(params)).unwrap(), req);
    }
}

#[test]
fn reads_the_envelope_fields_of_a_tool_call_leniently_as_before() {
    let p = json!({"tool": "peer_messages", "callId": 5, "messageId": ["x"], "eventsAfter": -2,
        "unconsumed": "yes", "waitFor": 1, "extra": true});
    let got = LocalCall::decode("local.tool", obj(p)).unwrap();
    assert_eq!(got, LocalCall::Tool(tool("peer_messages", json!({}))));
    let p = json!({"tool": "list_peers", "args": null, "unconsumed": false});
    let LocalCall::Tool(t) = LocalCall::decode("local.tool", obj(p)).unwrap() else {
        panic!("not a tool call")
    };
    assert_eq!(
        t.args,
        Value::Null,
        "null arguments are the tool reader's to judge"
    );
    let p = json!({"alias": "w", "delegateControl": "true"});
    let LocalCall::RunPublish(r) = LocalCall::decode("local.run.publish", obj(p)).unwrap() else {
        panic!("not a publish")
    };
    assert!(!r.delegate_control, "only JSON true delegates");
}

#[test]
fn refuses_what_the_hand_written_reader_refused() {
    let usage = [
        ("local.tool", json!({})),
        ("local.tool", json!({"tool": 1})),
        ("local.consume", json!({})),
        ("local.consume", json!({"messageId": "m", "note": 3})),
        ("local.prepare", json!({"messageId": null})),
        ("local.reply", json!({"messageId": "m"})),
        (
            "local.reply",
            json!({"messageId": "m", "content": "x", "topic": 1}),
        ),
        (
            "local.reply",
            json!({"messageId": "m", "content": "x", "replyId": "a b"}),
        ),
        ("local.status", json!({"messageId": 7})),
        ("local.wait_receipt", json!({"state": "accepted"})),
        ("local.run.publish", json!({})),
        ("local.run.retire", json!({"run": null})),
        ("local.info", json!({"runId": "not an id"})),
        ("local.info", json!({"runId": 3})),
        ("local.info", json!({"auto": false})),
    ];
    for (method, p) in usage {
        let err = LocalRequest::decode(method, obj(p.clone())).expect_err(&format!("{p}"));
        assert_eq!(err.code, Code::Usage, "{method} {p}: {err}");
    }
    let err = LocalRequest::decode("local.nope", Map::new()).unwrap_err();
    assert_eq!(err.code, Code::MethodNotFound);
}
