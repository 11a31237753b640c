//! The typed tool answers encode to the objects the tools built by hand before: same keys,
//! same values, `null` where an optional field is absent.

use super::*;
use crate::protocol::message::ReceiptState;
use serde_json::json;

fn receipt() -> Receipt {
    Receipt {
        message_id: "m-1".into(),
        from_peer_id: "p-a".into(),
        to_peer_id: "p-b".into(),
        state: ReceiptState::Accepted,
        sequence: 4,
        correlation_id: "m-1".into(),
        at_ms: 9,
        reply_message_id: None,
        code: None,
    }
}

fn bytes(v: &impl Serialize) -> String {
    serde_json::to_string(&serde_json::to_value(v).unwrap()).unwrap()
}

/// What a reader decodes from an answer's JSON text is the answer that was written.
pub(crate) fn round_trip<T>(v: &T)
where
    T: Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let text = serde_json::to_string(v).unwrap();
    assert_eq!(&serde_json::from_str::<T>(&text).unwrap(), v, "{text}");
}

#[test]
fn a_send_answer_is_the_receipt_plus_names() {
    let r = receipt();
    let mut old = serde_json::to_value(&r).unwrap();
    let o = old.as_object_mut().unwrap();
    o.insert("to".into(), json!("p-b"));
    o.insert("from".into(), json!("p-a"));
    o.insert("mentions".into(), json!(["carol"]));
    o.insert("toAlias".into(), json!(null));
    let new = SendAnswer {
        receipt: r,
        to: "p-b".into(),
        from: "p-a".into(),
        mentions: vec!["carol".into()],
        to_alias: None,
    };
    assert_eq!(bytes(&new), bytes(&old));
}

#[test]
fn every_message_answer_reads_back_as_written() {
    let send = SendAnswer {
        receipt: Receipt {
            code: Some("QUEUE_FULL".into()),
            reply_message_id: Some("m-2".into()),
            ..receipt()
        },
        to: "p-b".into(),
        from: "p-a".into(),
        mentions: vec!["carol".into()],
        to_alias: Some("bob".into()),
    };
    round_trip(&send);
    let page = MessagesPage {
        messages: vec![],
        events: vec![receipt()],
        cursor: 3,
        event_cursor: 4,
        more: true,
    };
    round_trip(&page);
    round_trip(&ErrorCode {
        code: "QUEUE_FULL".into(),
    });
}

/// One received message with its optional fields partly set.
pub(crate) fn message_view() -> MessageView {
    MessageView {
        sequence: 1,
        message_id: "m-1".into(),
        from: "p-a".into(),
        from_peer_id: "p-a".into(),
        from_alias: None,
        from_instance_id: "i-a".into(),
        from_run_id: None,
        to: "p-b".into(),
        content: "hi @carol".into(),
        topic: Some("t".into()),
        reply_to: None,
        correlation_id: "m-1".into(),
        state: "accepted",
        accepted_at_ms: 5,
        sent_at: "1970-01-01T00:00:00.005Z".into(),
        expires_at_ms: 6,
        mentions: vec!["carol".into()],
    }
}

#[test]
fn a_message_page_has_the_old_keys() {
    let view = message_view();
    let old_view = json!({
        "sequence": 1, "messageId": "m-1", "from": "p-a", "fromPeerId": "p-a",
        "fromAlias": null, "fromInstanceId": "i-a", "fromRunId": null, "to": "p-b",
        "content": "hi @carol", "topic": "t", "replyTo": null, "correlationId": "m-1",
        "state": "accepted", "acceptedAtMs": 5, "sentAt": "1970-01-01T00:00:00.005Z",
        "expiresAtMs": 6, "mentions": ["carol"],
    });
    assert_eq!(bytes(&view), bytes(&old_view));
    round_trip(&view);
    let page = ToolAnswer::Messages(MessagesPage {
        messages: vec![view],
        events: vec![receipt()],
        cursor: 1,
        event_cursor: 2,
        more: false,
    });
    let old = json!({"messages": [old_view], "events": [receipt()], "cursor": 1,
        "eventCursor": 2, "more": false});
    assert_eq!(bytes(&page), bytes(&old));
    let peers = ToolAnswer::Peers(PeersPage {
        peers: vec![],
        cursor: Some("c".into()),
    });
    assert_eq!(bytes(&peers), bytes(&json!({"peers": [], "cursor": "c"})));
    if let ToolAnswer::Peers(p) = &peers {
        round_trip(p);
    }
}

#[test]
fn a_sent_view_has_the_old_keys_and_a_reason_only_when_given() {
    let view = SentView {
        message_id: "m-1".into(),
        to: "p-b".into(),
        to_peer_id: "p-b".into(),
        to_instance_id: "i-b".into(),
        to_run_id: None,
        correlation_id: "m-1".into(),
        reply_to: None,
        state: "refused",
        sequence: Some(0),
        reply_message_id: None,
        error: Some(ErrorCode {
            code: "QUEUE_FULL".into(),
        }),
        created_at_ms: 1,
        updated_at_ms: 2,
        reason: None,
        redelivered_from: None,
    };
    let old = json!({
        "messageId": "m-1", "to": "p-b", "toPeerId": "p-b", "toInstanceId": "i-b",
        "toRunId": null, "correlationId": "m-1", "replyTo": null, "state": "refused",
        "sequence": 0, "replyMessageId": null, "error": {"code": "QUEUE_FULL"},
        "createdAtMs": 1, "updatedAtMs": 2,
    });
    assert_eq!(bytes(&view), bytes(&old));
    round_trip(&view);
    // A fixed word outside its writer's words is refused, not taken.
    assert_eq!(
        serde_json::from_value::<SentView>(old.clone()).unwrap(),
        view
    );
    let mut sideways = old.clone();
    sideways["state"] = json!("sideways");
    assert!(serde_json::from_value::<SentView>(sideways).is_err());
    let unresolved = SentView {
        reason: Some("waits".into()),
        error: None,
        ..view
    };
    let v = serde_json::to_value(&unresolved).unwrap();
    assert_eq!(
        (v["reason"].clone(), v["error"].clone()),
        (json!("waits"), json!(null))
    );
    round_trip(&SentView {
        state: "unresolved",
        redelivered_from: Some("i-c".into()),
        ..unresolved
    });
}

#[test]
fn a_peer_view_has_the_old_keys_and_capabilities_only_for_a_root() {
    let run = PeerView {
        peer_id: Some("p-r".into()),
        alias: Some("worker".into()),
        run_of: Some("p-a".into()),
        session_id: "s-1".into(),
        project: "proj".into(),
        workspace: "/w".into(),
        pid: 42,
        mode: "command".into(),
        status: "idle",
        age_ms: Some(10),
        state: "live",
        reason: None,
        messaging: true,
        messaging_error: None,
        is_self: false,
        in_scope: true,
        capabilities: None,
        scope: None,
    };
    let old = json!({
        "peerId": "p-r", "alias": "worker", "runOf": "p-a", "sessionId": "s-1",
        "project": "proj", "workspace": "/w", "pid": 42, "mode": "command", "status": "idle",
        "ageMs": 10, "state": "live", "reason": null, "messaging": true,
        "messagingError": null, "self": false, "inScope": true,
    });
    assert_eq!(bytes(&run), bytes(&old));
    let root = PeerView {
        run_of: None,
        capabilities: Some(vec!["message.send".into()]),
        scope: Some("workspace".into()),
        ..run.clone()
    };
    let mut old_root = old;
    let o = old_root.as_object_mut().unwrap();
    o.insert("runOf".into(), json!(null));
    o.insert("capabilities".into(), json!(["message.send"]));
    o.insert("scope".into(), json!("workspace"));
    assert_eq!(bytes(&root), bytes(&old_root));
    round_trip(&run);
    round_trip(&PeerView {
        status: "working",
        state: "stale",
        ..root
    });
    assert!(run.matches("work") && run.matches("proj") && !run.matches("nothing"));
}

/// Any send answer (receipt fields, names, mentions, alias), for the suites that hold a typed
/// send answer's text to its `Value` (here and the MCP response line).
pub(crate) fn send_answer() -> impl proptest::strategy::Strategy<Value = SendAnswer> {
    use crate::protocol::strategies::{receipt_state, text};
    use proptest::prelude::*;
    (
        (
            text(),
            text(),
            text(),
            receipt_state(),
            any::<u64>(),
            text(),
            any::<u64>(),
        ),
        (proptest::option::of(text()), proptest::option::of(text())),
        (text(), text(), proptest::collection::vec(text(), 0..3)),
        proptest::option::of(text()),
    )
        .prop_map(
            |(r, (reply, code), (to, from, mentions), to_alias)| SendAnswer {
                receipt: Receipt {
                    message_id: r.0,
                    from_peer_id: r.1,
                    to_peer_id: r.2,
                    state: r.3,
                    sequence: r.4,
                    correlation_id: r.5,
                    at_ms: r.6,
                    reply_message_id: reply,
                    code,
                },
                to,
                from,
                mentions,
                to_alias,
            },
        )
}

mod json_text {
    use super::send_answer as answer;
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// A send's answer written as JSON text is byte for byte the text of its `Value`,
        /// alone and as the tool answer it travels in.
        #[test]
        fn send_answer_text_is_the_bytes_of_its_value(a in answer()) {
            let text = String::from_utf8(a.to_json()).unwrap();
            prop_assert_eq!(&text, &bytes(&a));
            // A reader gets the answer back from either text (a tool result's `ok` aside).
            prop_assert_eq!(&serde_json::from_str::<SendAnswer>(&text).unwrap(), &a);
            let tool = serde_json::from_str::<SendAnswer>(&a.to_tool_json()).unwrap();
            prop_assert_eq!(&tool, &a);
            prop_assert_eq!(&text, &bytes(&ToolAnswer::Sent(a)));
        }
    }
}
