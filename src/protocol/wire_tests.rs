//! The one decoder of peer requests (`rpc::parse`, the version check, then the method's own
//! decoder) and the typed encoder: what the encoder writes decodes back whole and serialises
//! to the bytes its `Value` gives; unusual frames (key order, duplicate and unknown keys) mean
//! what they always meant; each malformed field is refused with its code and exact text.

use super::message::{MessageBody, PeerSend, Receipt, ReceiptPush, ReceiptState};
use super::rpc::Id;
use crate::error::{Code, Error};
use crate::protocol::rpc::{self, Incoming};
use crate::protocol::strategies::{opt_text, receipt_state, text};
use proptest::prelude::*;
use serde_json::{Value, json};
use std::borrow::Cow;

/// A decoded `peer.send` or `peer.receipt` request.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Request {
    id: Id,
    call: Call,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Call {
    Send(PeerSend<'static>),
    Receipt(ReceiptPush),
}

const TO: &str = "p-0123456789abcdef01234567";

/// What the decoder makes of a frame: the request, or the error it answers with.
fn decode(frame: &[u8]) -> Result<Request, (Code, String)> {
    let fail = |e: Error| (e.code, e.message);
    let (id, method, params) = match rpc::parse(frame) {
        Ok(Incoming::Request { id, method, params }) => (id, method, params),
        Ok(other) => return Err((Code::InvalidRequest, format!("not a request: {other:?}"))),
        Err(r) => return Err((r.error.code, r.error.message)),
    };
    rpc::check_version(&params).map_err(fail)?;
    let call = match method.as_str() {
        "peer.send" => Call::Send(PeerSend::decode(params).map_err(fail)?),
        "peer.receipt" => Call::Receipt(ReceiptPush::decode(params).map_err(fail)?),
        other => return Err((Code::MethodNotFound, other.to_string())),
    };
    Ok(Request { id, call })
}

fn frame(id: &Id, method: &str, params: &Value) -> Vec<u8> {
    let mut f = rpc::encode_request(id, method, params);
    f.pop();
    f
}

fn sample_send() -> PeerSend<'static> {
    PeerSend {
        version: 1,
        message_id: "m-1".into(),
        to: TO.into(),
        from_run: Some("r-1".into()),
        body: Cow::Owned(MessageBody {
            content: "hello \"quoted\" \u{e9}\n".into(),
            topic: Some("t".into()),
            reply_to: Some("m-0".into()),
        }),
        correlation_id: Some("m-0".into()),
        expires_at_ms: Some(1_700_000_000_000),
    }
}

fn sample_push() -> ReceiptPush {
    ReceiptPush {
        version: 1,
        from_run: None,
        receipt: Receipt {
            message_id: "m-1".into(),
            from_peer_id: "p-aaaaaaaaaaaaaaaaaaaaaaaa".into(),
            to_peer_id: TO.into(),
            state: ReceiptState::Replied,
            sequence: 3,
            correlation_id: "m-1".into(),
            at_ms: 42,
            reply_message_id: Some("m-2".into()),
            code: None,
        },
    }
}

/// The frames our own encoder writes decode here, to what the general path gives.
#[test]
fn decodes_what_our_encoder_writes() {
    let minimal = PeerSend {
        from_run: None,
        body: Cow::Owned(MessageBody::text("hi")),
        correlation_id: None,
        expires_at_ms: None,
        ..sample_send()
    };
    for (id, send) in [
        (Id::Num(7), sample_send()),
        (Id::Str("c-1".into()), minimal),
    ] {
        let f = frame(&id, "peer.send", &serde_json::to_value(&send).unwrap());
        let want = Request {
            id,
            call: Call::Send(send),
        };
        assert_eq!(decode(&f), Ok(want));
    }
    let push = sample_push();
    let f = frame(
        &Id::Num(-3),
        "peer.receipt",
        &serde_json::to_value(&push).unwrap(),
    );
    let want = Request {
        id: Id::Num(-3),
        call: Call::Receipt(push),
    };
    assert_eq!(decode(&f), Ok(want));
}

/// Unusual but valid frames (key order, duplicates, unknown keys, a `null` fromRun) are
/// accepted: a duplicate key's last value counts, unknown keys are ignored.
#[test]
fn unusual_frames_keep_their_meaning() {
    let p = r#"{"messageId":"m-1","to":"p-x","content":"c"}"#;
    let cases = [
        format!(r#"{{"params":{p},"jsonrpc":"2.0","id":1,"method":"peer.send"}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":1,"id":2,"method":"peer.send","params":{p}}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"peer.send","params":{p},"x":1}}"#),
        r#"{"jsonrpc":"2.0","id":1,"method":"peer.send","params":{"messageId":"m-1","messageId":"m-2","to":"p-x","content":"c"}}"#.to_string(),
        r#"{"jsonrpc":"2.0","id":1,"method":"peer.send","params":{"messageId":"m-1","to":"p-x","content":"c","extra":[1]}}"#.to_string(),
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"peer.status","params":{p}}}"#),
        format!(r#"{{"jsonrpc":"2.0","method":"peer.send","params":{p}}}"#),
    ];
    let sent = |id: i64, message_id: &str| Request {
        id: Id::Num(id),
        call: Call::Send(PeerSend {
            version: 1,
            message_id: message_id.to_string().into(),
            to: "p-x".into(),
            from_run: None,
            body: Cow::Owned(MessageBody::text("c")),
            correlation_id: None,
            expires_at_ms: None,
        }),
    };
    for (n, f) in cases.iter().enumerate() {
        let got = decode(f.as_bytes());
        match n {
            1 => assert_eq!(got, Ok(sent(2, "m-1")), "{f}"),
            3 => assert_eq!(got, Ok(sent(1, "m-2")), "{f}"),
            // Not a peer.send request at all (another method, a notification).
            5 | 6 => assert!(got.is_err(), "{f}"),
            _ => assert_eq!(got, Ok(sent(1, "m-1")), "{f}"),
        }
    }
    let null_run = r#"{"id":1,"jsonrpc":"2.0","method":"peer.send","params":{"content":"c","fromRun":null,"messageId":"m-1","to":"p-x"}}"#;
    assert_eq!(decode(null_run.as_bytes()), Ok(sent(1, "m-1")));
}

/// The malformed `peer.send` and `peer.receipt` params: each refused with its code and exact
/// text.
#[test]
fn malformed_params_keep_the_general_paths_code_and_text() {
    let send = |key: &str, value: Value| {
        let mut p = json!({"messageId": "m-1", "to": TO, "content": "hello"});
        match value {
            Value::Null if key.starts_with('-') => {
                p.as_object_mut().unwrap().remove(&key[1..]);
            }
            v => p[key] = v,
        }
        frame(&Id::Num(1), "peer.send", &p)
    };
    let sends: Vec<(&str, Value, &str)> = vec![
        (
            "messageId",
            Value::Null,
            "peer.send params: invalid type: null, expected a string",
        ),
        (
            "messageId",
            json!("bad id"),
            "params.messageId \"bad id\" is not an id ([A-Za-z0-9_.-], at most 96)",
        ),
        (
            "messageId",
            json!(7),
            "peer.send params: invalid type: integer `7`, expected a string",
        ),
        (
            "to",
            json!(["x"]),
            "peer.send params: invalid type: sequence, expected a string",
        ),
        (
            "content",
            json!(5),
            "peer.send params: invalid type: integer `5`, expected a string",
        ),
        (
            "topic",
            json!(5),
            "peer.send params: invalid type: integer `5`, expected a string",
        ),
        (
            "replyTo",
            json!("not/an/id"),
            "params.replyTo \"not/an/id\" is not an id ([A-Za-z0-9_.-], at most 96)",
        ),
        (
            "correlationId",
            json!(1),
            "peer.send params: invalid type: integer `1`, expected a string",
        ),
        (
            "fromRun",
            json!("a b"),
            "params.fromRun \"a b\" is not an id ([A-Za-z0-9_.-], at most 96)",
        ),
        (
            "fromRun",
            json!(true),
            "peer.send params: invalid type: boolean `true`, expected a string",
        ),
        (
            "expiresAt",
            json!(-1),
            "peer.send params: invalid value: integer `-1`, expected u64",
        ),
        (
            "expiresAt",
            json!(1.5),
            "peer.send params: invalid type: floating point `1.5`, expected u64",
        ),
        (
            "expiresAt",
            json!("soon"),
            "peer.send params: invalid type: string \"soon\", expected u64",
        ),
        (
            "-messageId",
            Value::Null,
            "peer.send params: missing field `messageId`",
        ),
        (
            "-content",
            Value::Null,
            "peer.send params: missing field `content`",
        ),
        (
            "version",
            json!(2),
            "params.version must be 1; upgrade the older peer",
        ),
        (
            "version",
            Value::Null,
            "params.version must be 1; upgrade the older peer",
        ),
    ];
    for (key, value, text) in sends {
        let f = send(key, value);
        let (code, message) = decode(&f).unwrap_err();
        let want = if key == "version" {
            Code::InvalidRequest
        } else {
            Code::Usage
        };
        assert_eq!((code, message.as_str()), (want, text), "{key}");
    }
    let push = |key: &str, value: Value| {
        let mut p = serde_json::to_value(sample_push()).unwrap();
        match value {
            Value::Null => {
                p.as_object_mut().unwrap().remove(key);
            }
            v => p[key] = v,
        }
        frame(&Id::Num(1), "peer.receipt", &p)
    };
    let pushes: Vec<(&str, Value, Code, &str)> = vec![
        (
            "fromRun",
            json!(5),
            Code::Usage,
            "params.fromRun must be a string",
        ),
        (
            "fromRun",
            json!("bad run"),
            Code::Usage,
            "params.fromRun \"bad run\" is not an id ([A-Za-z0-9_.-], at most 96)",
        ),
        (
            "state",
            json!("lost"),
            Code::InvalidRequest,
            "the peer answered with a malformed receipt: unknown variant `lost`, expected one of `accepted`, `prepared`, `consumed`, `replied`, `refused`, `expired`",
        ),
        (
            "sequence",
            json!(-1),
            Code::InvalidRequest,
            "the peer answered with a malformed receipt: invalid value: integer `-1`, expected u64",
        ),
        (
            "atMs",
            Value::Null,
            Code::InvalidRequest,
            "the peer answered with a malformed receipt: missing field `atMs`",
        ),
    ];
    for (key, value, code, text) in pushes {
        let f = push(key, value);
        let got = decode(&f).unwrap_err();
        assert_eq!((got.0, got.1.as_str()), (code, text), "{key}");
    }
}

/// A value of the right shape for `key`, so that generated params are often valid.
fn valid_for(key: &str) -> String {
    match key {
        "expiresAt" | "sequence" | "atMs" | "flushedDevice" => "5",
        "version" => "1",
        "state" => "\"accepted\"",
        _ => "\"m-1\"",
    }
    .to_string()
}

/// `key`'s value in generated params: mostly right, else any shape of any kind.
fn keyed_value(key: &'static str) -> impl Strategy<Value = Option<String>> {
    prop_oneof![3 => Just(Some(valid_for(key))), 2 => field_value()]
}

/// A field's value in generated params: valid and invalid shapes of every kind.
fn field_value() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        Just(None),
        Just(Some("null".to_string())),
        Just(Some("\"m-1\"".to_string())),
        Just(Some("\"p-x\"".to_string())),
        Just(Some("\"bad id\"".to_string())),
        Just(Some("\"esc\\u0061ped\"".to_string())),
        Just(Some(format!("\"{}\"", "x".repeat(200)))),
        Just(Some("\"\"".to_string())),
        Just(Some("1".to_string())),
        Just(Some("-1".to_string())),
        Just(Some("1.0".to_string())),
        Just(Some("18446744073709551615".to_string())),
        Just(Some("true".to_string())),
        Just(Some("[]".to_string())),
        Just(Some("{}".to_string())),
        Just(Some("\"accepted\"".to_string())),
        Just(Some("\"replied\"".to_string())),
    ]
}

const SEND_KEYS: [&str; 9] = [
    "content",
    "correlationId",
    "expiresAt",
    "fromRun",
    "messageId",
    "replyTo",
    "to",
    "topic",
    "version",
];

const RECEIPT_KEYS: [&str; 11] = [
    "atMs",
    "code",
    "correlationId",
    "fromPeerId",
    "fromRun",
    "messageId",
    "replyMessageId",
    "sequence",
    "state",
    "toPeerId",
    "version",
];

/// A JSON object written by hand from `(key, value text)` pairs, duplicates and all.
fn object(pairs: &[(String, String)]) -> String {
    let body: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{}:{v}", serde_json::to_string(k).unwrap()))
        .collect();
    format!("{{{}}}", body.join(","))
}

fn params(keys: &'static [&'static str]) -> impl Strategy<Value = Vec<(String, String)>> {
    let values: Vec<_> = keys.iter().map(|k| keyed_value(k)).collect();
    values.prop_map(move |vals| {
        keys.iter()
            .zip(vals)
            .filter_map(|(k, v)| v.map(|v| (k.to_string(), v)))
            .collect()
    })
}

fn id_text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("1".to_string()),
        Just("-9".to_string()),
        Just("9223372036854775808".to_string()),
        Just("1.5".to_string()),
        Just("null".to_string()),
        Just("\"c-1\"".to_string()),
        Just(format!("\"{}\"", "i".repeat(129))),
        Just("[1]".to_string()),
    ]
}

proptest! {
    /// Frames of generated params in any arrangement (duplicates, unknown keys, any order,
    /// valid and invalid values): what the decoder accepts carries checked ids, and written
    /// again by the typed encoder it decodes to the same request.
    #[test]
    fn accepted_requests_round_trip(
        send in any::<bool>(),
        mut sp in params(&SEND_KEYS),
        rp in params(&RECEIPT_KEYS),
        extra in proptest::collection::vec(
            (prop_oneof![Just("to"), Just("messageId"), Just("other"), Just("version")], field_value()), 0..3),
        shuffle in any::<proptest::sample::Index>(),
        id in id_text(),
        v in prop_oneof![Just("\"2.0\""), Just("\"1.0\""), Just("2")],
    ) {
        for (k, v) in extra {
            if let Some(v) = v {
                let at = shuffle.index(sp.len() + 1);
                sp.insert(at, (k.to_string(), v));
            }
        }
        let (method, p) = if send { ("peer.send", sp) } else { ("peer.receipt", rp) };
        let f = object(&[
            ("id".into(), id),
            ("jsonrpc".into(), v.to_string()),
            ("method".into(), format!("\"{method}\"")),
            ("params".into(), object(&p)),
        ]);
        let Ok(req) = decode(f.as_bytes()) else {
            return Ok(());
        };
        let mut again = match &req.call {
            Call::Send(s) => {
                for id in [Some(s.message_id.as_ref()), s.from_run.as_deref(), s.body.reply_to.as_deref()] {
                    prop_assert!(id.is_none_or(crate::identity::is_valid_id), "{}", f);
                }
                rpc::encode_request(&req.id, method, s)
            }
            Call::Receipt(r) => rpc::encode_request(&req.id, method, r),
        };
        again.pop();
        prop_assert_eq!(decode(&again), Ok(req), "{}", f);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = decode(&bytes);
    }
}

/// A receipt our encoder writes as an answer is read back by the sender whole.
#[test]
fn decodes_the_receipt_answer_our_encoder_writes() {
    let r = Receipt {
        message_id: "m-1".into(),
        from_peer_id: TO.into(),
        to_peer_id: TO.into(),
        state: ReceiptState::Accepted,
        sequence: 4,
        correlation_id: "c-\"1\"".into(),
        at_ms: 9,
        reply_message_id: None,
        code: None,
    };
    let mut f = rpc::encode_result_json(&Id::Num(12), &r.to_json_stating(Some(7)));
    assert_eq!(f.pop(), Some(b'\n'));
    let Ok(Incoming::Response {
        id: Some(Id::Num(12)),
        result: Ok(v),
    }) = rpc::parse(&f)
    else {
        panic!("a success answer")
    };
    assert_eq!(v[crate::protocol::message::FLUSHED_DEVICE], json!(7));
    assert_eq!(Receipt::decode(v).unwrap(), r);
}

fn any_send() -> impl Strategy<Value = PeerSend<'static>> {
    (
        (any::<u64>(), text(), text(), opt_text()),
        (text(), opt_text(), opt_text()),
        (opt_text(), proptest::option::of(any::<u64>())),
    )
        .prop_map(
            |((version, message_id, to, from_run), body, rest)| PeerSend {
                version,
                message_id: message_id.into(),
                to: to.into(),
                from_run: from_run.map(Cow::Owned),
                body: Cow::Owned(MessageBody {
                    content: body.0,
                    topic: body.1,
                    reply_to: body.2,
                }),
                correlation_id: rest.0.map(Cow::Owned),
                expires_at_ms: rest.1,
            },
        )
}

fn any_push() -> impl Strategy<Value = ReceiptPush> {
    (
        (any::<u64>(), opt_text(), text(), text(), text()),
        (receipt_state(), any::<u64>(), text(), any::<u64>()),
        (opt_text(), opt_text()),
    )
        .prop_map(
            |((version, from_run, message_id, from_peer_id, to_peer_id), mid, (reply, code))| {
                ReceiptPush {
                    version,
                    from_run,
                    receipt: Receipt {
                        message_id,
                        from_peer_id,
                        to_peer_id,
                        state: mid.0,
                        sequence: mid.1,
                        correlation_id: mid.2,
                        at_ms: mid.3,
                        reply_message_id: reply,
                        code,
                    },
                }
            },
        )
}

/// The frame the general encoder writes: the params' `Value`, then the envelope.
fn value_frame<T: serde::Serialize>(id: &Id, method: &str, params: &T) -> Vec<u8> {
    let v = serde_json::to_value(params).unwrap();
    rpc::encode_request(id, method, &v)
}

proptest! {
    /// The typed params of `peer.send` and `peer.receipt` serialise to the bytes their `Value`
    /// gives, as params, in a request frame and in a notification frame, and the typed
    /// decoder reads a frame of valid ones back as the same request.
    #[test]
    fn typed_params_encode_as_their_value(send in any_send(), push in any_push(), n in any::<i64>()) {
        let id = Id::Num(n);
        let sv = serde_json::to_value(&send).unwrap();
        prop_assert_eq!(serde_json::to_vec(&send).unwrap(), serde_json::to_vec(&sv).unwrap());
        prop_assert_eq!(
            rpc::encode_request(&id, "peer.send", &send),
            value_frame(&id, "peer.send", &send)
        );
        let pv = serde_json::to_value(&push).unwrap();
        prop_assert_eq!(serde_json::to_vec(&push).unwrap(), serde_json::to_vec(&pv).unwrap());
        prop_assert_eq!(
            rpc::encode_request(&id, "peer.receipt", &push),
            value_frame(&id, "peer.receipt", &push)
        );
        prop_assert_eq!(
            rpc::encode_notification("peer.receipt", &push),
            rpc::encode_notification("peer.receipt", &pv)
        );
    }

    /// What the typed encoder writes for a valid request, the decoder reads back whole.
    #[test]
    fn typed_frames_decode_to_the_request(mut send in any_send(), mut push in any_push(), n in any::<i64>()) {
        let id = Id::Num(n);
        send.version = 1;
        push.version = 1;
        let mut f = rpc::encode_request(&id, "peer.send", &send);
        f.pop();
        read_back(&f, Request { id: id.clone(), call: Call::Send(send) })?;
        let mut f = rpc::encode_request(&id, "peer.receipt", &push);
        f.pop();
        read_back(&f, Request { id, call: Call::Receipt(push) })?;
    }
}

/// `frame` decodes to `want`, or (generated ids need not be ids) is refused as `USAGE`.
fn read_back(frame: &[u8], want: Request) -> Result<(), TestCaseError> {
    match decode(frame) {
        Ok(got) => prop_assert_eq!(got, want),
        Err((code, message)) => {
            prop_assert_eq!(code, Code::Usage);
            prop_assert!(message.contains("is not an id"), "{}", message);
        }
    }
    Ok(())
}

/// A sample request, sent through the typed encoder, is decoded to itself.
#[test]
fn sample_requests_round_trip_through_the_typed_encoder() {
    let send = sample_send();
    let mut f = rpc::encode_request(&Id::Num(7), "peer.send", &send);
    f.pop();
    assert_eq!(
        decode(&f),
        Ok(Request {
            id: Id::Num(7),
            call: Call::Send(send)
        })
    );
    let push = sample_push();
    let mut f = rpc::encode_request(&Id::Num(8), "peer.receipt", &push);
    f.pop();
    assert_eq!(
        decode(&f),
        Ok(Request {
            id: Id::Num(8),
            call: Call::Receipt(push)
        })
    );
}
