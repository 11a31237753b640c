//! The typed messaging params against the JSON the hand-written encoders and readers produced
//! and accepted: the same bytes out, the same values in, the same error codes.

use super::*;
use serde_json::json;
use std::borrow::Cow;

const TO: &str = "p-0123456789abcdef01234567";

fn bytes(v: &impl Serialize) -> String {
    // What the frame encoder writes: a `Value` (keys in sorted order) on one line.
    serde_json::to_string(&serde_json::to_value(v).unwrap()).unwrap()
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        other => panic!("not an object: {other}"),
    }
}

fn sample_send() -> PeerSend<'static> {
    PeerSend {
        version: 1,
        message_id: "m-1".into(),
        to: TO.into(),
        from_run: None,
        body: Cow::Owned(MessageBody::text("hello")),
        correlation_id: Some("m-1".into()),
        expires_at_ms: Some(1_700_000_000_000),
    }
}

#[test]
fn peer_send_encodes_the_bytes_the_old_encoder_wrote() {
    // The object the sender used to build by hand for `peer.send`.
    let old = json!({
        "version": 1,
        "messageId": "m-1",
        "to": TO,
        "fromRun": null,
        "content": "hello",
        "topic": null,
        "replyTo": null,
        "correlationId": "m-1",
        "expiresAt": 1_700_000_000_000u64,
    });
    assert_eq!(bytes(&sample_send()), bytes(&old));
    let mut threaded = sample_send();
    threaded.from_run = Some("r-1".into());
    threaded.body.to_mut().topic = Some("build".into());
    threaded.body.to_mut().reply_to = Some("m-0".into());
    let old = json!({
        "version": 1, "messageId": "m-1", "to": TO, "fromRun": "r-1", "content": "hello",
        "topic": "build", "replyTo": "m-0", "correlationId": "m-1",
        "expiresAt": 1_700_000_000_000u64,
    });
    assert_eq!(bytes(&threaded), bytes(&old));
    assert_eq!(PeerSend::decode(obj(old)).unwrap(), threaded);
}

#[test]
fn peer_send_reads_what_the_old_reader_accepted() {
    // Optional fields absent or null, no version, unknown fields ignored.
    let minimal = json!({"messageId": "m-1", "to": TO, "content": "hello", "extra": [1]});
    let got = PeerSend::decode(obj(minimal)).unwrap();
    assert_eq!(*got.body, MessageBody::text("hello"));
    assert_eq!(
        (got.from_run, got.correlation_id, got.expires_at_ms),
        (None, None, None)
    );
    let nulls = json!({"version": 1, "messageId": "m-1", "to": TO, "content": "", "topic": null,
        "replyTo": null, "correlationId": null, "expiresAt": null, "fromRun": null});
    assert_eq!(PeerSend::decode(obj(nulls)).unwrap().body.content, "");
}

#[test]
fn peer_send_refuses_what_the_old_reader_refused_with_usage() {
    let good = || json!({"messageId": "m-1", "to": TO, "content": "hello"});
    let cases: Vec<(&str, Value)> = vec![
        ("messageId", Value::Null),
        ("messageId", json!("bad id")),
        ("messageId", json!(7)),
        ("to", Value::Null),
        ("to", json!(["x"])),
        ("content", Value::Null),
        ("content", json!(5)),
        ("topic", json!(5)),
        ("replyTo", json!("not/an/id")),
        ("correlationId", json!(1)),
        ("fromRun", json!("a b")),
        ("fromRun", json!(true)),
        ("expiresAt", json!(-1)),
        ("expiresAt", json!(1.5)),
        ("expiresAt", json!("soon")),
    ];
    for (key, value) in cases {
        let mut p = obj(good());
        p.insert(key.into(), value.clone());
        let err = PeerSend::decode(p).expect_err(&format!("{key}={value} must fail"));
        assert_eq!(err.code, Code::Usage, "{key}={value}: {err}");
    }
    for key in ["messageId", "to", "content"] {
        let mut p = obj(good());
        p.remove(key);
        assert_eq!(PeerSend::decode(p).unwrap_err().code, Code::Usage, "{key}");
    }
}

fn sample_receipt() -> Receipt {
    Receipt {
        message_id: "m-1".into(),
        from_peer_id: "p-aaaaaaaaaaaaaaaaaaaaaaaa".into(),
        to_peer_id: TO.into(),
        state: ReceiptState::Consumed,
        sequence: 3,
        correlation_id: "m-1".into(),
        at_ms: 42,
        reply_message_id: None,
        code: None,
    }
}

#[test]
fn receipt_push_encodes_the_bytes_the_old_encoder_wrote() {
    let r = sample_receipt();
    // The old params: the receipt's own fields plus `version` and `fromRun`.
    let mut old = serde_json::to_value(&r).unwrap();
    old.as_object_mut()
        .unwrap()
        .insert("version".into(), json!(1));
    old.as_object_mut()
        .unwrap()
        .insert("fromRun".into(), Value::Null);
    let push = ReceiptPush {
        version: 1,
        from_run: None,
        receipt: r.clone(),
    };
    assert_eq!(bytes(&push), bytes(&old));
    assert!(
        !bytes(&push).contains("replyMessageId"),
        "absent stays absent"
    );
    let decoded = ReceiptPush::decode(obj(old)).unwrap();
    assert_eq!(decoded, push);
    let replied = Receipt {
        state: ReceiptState::Replied,
        reply_message_id: Some("m-2".into()),
        ..r
    };
    let push = ReceiptPush {
        version: 1,
        from_run: Some("r-1".into()),
        receipt: replied,
    };
    assert_eq!(
        ReceiptPush::decode(obj(serde_json::to_value(&push).unwrap())).unwrap(),
        push
    );
}

#[test]
fn receipt_push_keeps_its_two_error_codes() {
    let good = || obj(serde_json::to_value(sample_receipt()).unwrap());
    let mut p = good();
    p.insert("fromRun".into(), json!(5));
    assert_eq!(ReceiptPush::decode(p).unwrap_err().code, Code::Usage);
    let mut p = good();
    p.insert("fromRun".into(), json!("bad run"));
    assert_eq!(ReceiptPush::decode(p).unwrap_err().code, Code::Usage);
    for (key, value) in [("state", json!("lost")), ("sequence", json!(-1))] {
        let mut p = good();
        p.insert(key.into(), value);
        assert_eq!(
            ReceiptPush::decode(p).unwrap_err().code,
            Code::InvalidRequest
        );
    }
    let mut p = good();
    p.remove("atMs");
    assert_eq!(
        ReceiptPush::decode(p).unwrap_err().code,
        Code::InvalidRequest
    );
}

#[test]
fn a_receipt_answer_round_trips_and_a_malformed_one_is_invalid_request() {
    let r = Receipt {
        state: ReceiptState::Refused,
        code: Some("QUEUE_FULL".into()),
        sequence: 0,
        ..sample_receipt()
    };
    let v = serde_json::to_value(&r).unwrap();
    assert_eq!(v["code"], "QUEUE_FULL");
    assert_eq!(v["state"], "refused");
    assert_eq!(Receipt::decode(v).unwrap(), r);
    assert_eq!(
        Receipt::decode(json!({"messageId": "m"})).unwrap_err().code,
        Code::InvalidRequest
    );
}

#[test]
fn peer_status_reads_ids_strictly() {
    let s = PeerStatus::decode(&obj(json!({"messageId": "m-1", "to": TO, "fromRun": null})));
    assert_eq!(s.unwrap().message_id, "m-1");
    for p in [
        json!({"to": TO}),
        json!({"messageId": "m 1", "to": TO}),
        json!({"messageId": "m-1"}),
        json!({"messageId": "m-1", "to": 5}),
    ] {
        assert_eq!(PeerStatus::decode(&obj(p)).unwrap_err().code, Code::Usage);
    }
}

#[test]
fn waitable_states_are_the_four_progress_states() {
    for s in ["accepted", "prepared", "consumed", "replied"] {
        assert_eq!(ReceiptState::waitable(s).map(ReceiptState::name), Some(s));
    }
    assert_eq!(ReceiptState::waitable("refused"), None);
    assert_eq!(ReceiptState::waitable(""), None);
}

proptest::proptest! {
    /// The receipt's direct JSON text is the bytes of its `Value`, whatever its strings hold.
    #[test]
    fn receipt_text_is_the_bytes_of_its_value(
        id in ".{0,12}", corr in "[a-z\"\\\\\u{1}é]{0,8}", reply in proptest::option::of(".{0,6}"),
        code in proptest::option::of("[A-Z_]{0,10}"), seq in proptest::prelude::any::<u64>(),
        at in proptest::prelude::any::<u64>(), state in 0usize..6,
    ) {
        let states = [ReceiptState::Accepted, ReceiptState::Prepared, ReceiptState::Consumed,
            ReceiptState::Replied, ReceiptState::Refused, ReceiptState::Expired];
        let r = Receipt {
            message_id: id,
            from_peer_id: "p-a".into(),
            to_peer_id: TO.into(),
            state: states[state],
            sequence: seq,
            correlation_id: corr,
            at_ms: at,
            reply_message_id: reply,
            code,
        };
        let via_value = serde_json::to_vec(&serde_json::to_value(&r).unwrap()).unwrap();
        proptest::prop_assert_eq!(r.to_json(), via_value);
    }
}
