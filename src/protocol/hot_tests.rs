//! The typed decoder against the general path (`rpc::parse`, the version check, the method's
//! own decoder): it decodes what our encoder writes, never accepts what the general path
//! refuses, and decodes to the same request; malformed frames keep the general path's texts.

use super::*;
use crate::error::{Code, Error};
use crate::protocol::rpc::{self, Incoming};
use crate::protocol::strategies::{opt_text, receipt_state, text};
use proptest::prelude::*;
use serde_json::{Value, json};

const TO: &str = "p-0123456789abcdef01234567";

/// What the general path makes of a frame: the request, or the error it answers with.
fn general(frame: &[u8]) -> Result<HotRequest, (Code, String)> {
    let fail = |e: Error| (e.code, e.message);
    let (id, method, params) = match rpc::parse(frame) {
        Ok(Incoming::Request { id, method, params }) => (id, method, params),
        Ok(other) => return Err((Code::InvalidRequest, format!("not a request: {other:?}"))),
        Err(r) => return Err((r.error.code, r.error.message)),
    };
    rpc::check_version(&params).map_err(fail)?;
    let call = match method.as_str() {
        "peer.send" => HotCall::Send(PeerSend::decode(params).map_err(fail)?),
        "peer.receipt" => HotCall::Receipt(ReceiptPush::decode(params).map_err(fail)?),
        other => return Err((Code::MethodNotFound, other.to_string())),
    };
    Ok(HotRequest { id, call })
}

fn frame(id: &Id, method: &str, params: &Value) -> Vec<u8> {
    let mut f = rpc::encode_request(id, method, params);
    f.pop();
    f
}

fn sample_send() -> PeerSend {
    PeerSend {
        version: 1,
        message_id: "m-1".into(),
        to: TO.into(),
        from_run: Some("r-1".into()),
        body: MessageBody {
            content: "hello \"quoted\" \u{e9}\n".into(),
            topic: Some("t".into()),
            reply_to: Some("m-0".into()),
        },
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
        body: MessageBody::text("hi"),
        correlation_id: None,
        expires_at_ms: None,
        ..sample_send()
    };
    for (id, send) in [
        (Id::Num(7), sample_send()),
        (Id::Str("c-1".into()), minimal),
    ] {
        let f = frame(&id, "peer.send", &serde_json::to_value(&send).unwrap());
        let want = HotRequest {
            id,
            call: HotCall::Send(send),
        };
        assert_eq!(decode(&f), Some(want.clone()));
        assert_eq!(general(&f), Ok(want));
    }
    let push = sample_push();
    let f = frame(
        &Id::Num(-3),
        "peer.receipt",
        &serde_json::to_value(&push).unwrap(),
    );
    let want = HotRequest {
        id: Id::Num(-3),
        call: HotCall::Receipt(push),
    };
    assert_eq!(decode(&f), Some(want.clone()));
    assert_eq!(general(&f), Ok(want));
}

/// Unusual but valid frames (key order, duplicates, unknown keys, a `null` fromRun) are left
/// to the general path or decoded alike; other methods are never decoded here.
#[test]
fn unusual_frames_take_the_general_path() {
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
    for (n, f) in cases.iter().enumerate() {
        assert_eq!(decode(f.as_bytes()), None, "{f}");
        // The last two are not hot requests at all (another method, a notification).
        assert_eq!(general(f.as_bytes()).is_ok(), n < 5, "{f}");
    }
    let null_run = r#"{"id":1,"jsonrpc":"2.0","method":"peer.send","params":{"content":"c","fromRun":null,"messageId":"m-1","to":"p-x"}}"#;
    assert_eq!(
        decode(null_run.as_bytes()).map(Ok),
        Some(general(null_run.as_bytes()))
    );
}

/// The malformed `peer.send` and `peer.receipt` params the message tests refuse: never
/// decoded here, and the general path still answers each with its code and exact text.
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
        assert_eq!(decode(&f), None, "{key}");
        let (code, message) = general(&f).unwrap_err();
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
        assert_eq!(decode(&f), None, "{key}");
        let got = general(&f).unwrap_err();
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
    /// Frames shaped as our encoder writes them (sorted keys, no duplicates): the typed
    /// decoder accepts exactly what the general path accepts, with the same request.
    #[test]
    fn accepts_exactly_what_the_general_path_accepts(
        send in any::<bool>(),
        sp in params(&SEND_KEYS),
        rp in params(&RECEIPT_KEYS),
        id in id_text(),
        v in prop_oneof![Just("\"2.0\""), Just("\"1.0\""), Just("2")],
    ) {
        let (method, p) = if send { ("peer.send", sp) } else { ("peer.receipt", rp) };
        let f = object(&[
            ("id".into(), id),
            ("jsonrpc".into(), v.to_string()),
            ("method".into(), format!("\"{method}\"")),
            ("params".into(), object(&p)),
        ]);
        let typed = decode(f.as_bytes());
        let old = general(f.as_bytes()).ok();
        prop_assert_eq!(typed, old, "{}", f);
    }

    /// Any arrangement (duplicates, unknown keys, any order): what the typed decoder accepts,
    /// the general path accepts as the same request.
    #[test]
    fn never_accepts_what_the_general_path_refuses(
        mut sp in params(&SEND_KEYS),
        extra in proptest::collection::vec(
            (prop_oneof![Just("to"), Just("messageId"), Just("other"), Just("version")], field_value()), 0..3),
        envelope in proptest::sample::subsequence(vec!["id", "jsonrpc", "method", "params", "id", "method"], 0..=6),
        shuffle in any::<proptest::sample::Index>(),
    ) {
        for (k, v) in extra {
            if let Some(v) = v {
                let at = shuffle.index(sp.len() + 1);
                sp.insert(at, (k.to_string(), v));
            }
        }
        let pairs: Vec<(String, String)> = envelope.iter().map(|k| {
            let v = match *k {
                "id" => "3".to_string(),
                "jsonrpc" => "\"2.0\"".to_string(),
                "method" => "\"peer.send\"".to_string(),
                _ => object(&sp),
            };
            (k.to_string(), v)
        }).collect();
        let f = object(&pairs);
        if let Some(req) = decode(f.as_bytes()) {
            prop_assert_eq!(Ok(req), general(f.as_bytes()), "{}", f);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = decode(&bytes);
    }
}

/// What the general path makes of an answer frame: its id and successful result, if any.
fn general_result(frame: &[u8]) -> Option<(i64, Value)> {
    match rpc::parse(frame) {
        Ok(Incoming::Response {
            id: Some(Id::Num(id)),
            result: Ok(v),
        }) => Some((id, v)),
        _ => None,
    }
}

/// What the sender made of a `peer.send` answer before the typed path: `rpc::parse`, then
/// `Receipt::decode` of the result.
fn general_receipt(frame: &[u8]) -> Option<Result<Receipt, (Code, String)>> {
    let (_, v) = general_result(frame)?;
    Some(Receipt::decode(v).map_err(|e| (e.code, e.message)))
}

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
    let mut f = rpc::encode_result(&Id::Num(12), &serde_json::to_value(&r).unwrap());
    assert_eq!(f.pop(), Some(b'\n'));
    let (id, raw) = decode_result(&f).expect("a plain success answer");
    assert_eq!(id, 12);
    assert_eq!(receipt_answer(&raw).unwrap(), r);
    // Error answers, string ids, notifications and requests are the general path's.
    for other in [
        r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"x"}}"#,
        r#"{"jsonrpc":"2.0","id":"s-1","result":{}}"#,
        r#"{"jsonrpc":"2.0","id":1,"result":{},"result":{}}"#,
        r#"{"jsonrpc":"2.0","id":1,"result":{},"method":"peer.send"}"#,
        r#"{"jsonrpc":"2.0","method":"peer.receipt","params":{}}"#,
        r#"{"jsonrpc":"1.0","id":1,"result":{}}"#,
        r#"{"jsonrpc":"2.0","id":1.0,"result":{}}"#,
        r#"{"jsonrpc":"2.0","id":1,"result":{}} x"#,
    ] {
        assert!(decode_result(other.as_bytes()).is_none(), "{other}");
    }
}

proptest! {
    /// Any arrangement of an answer's envelope and receipt: what the typed path accepts, the
    /// general path reads as the same id and result, and the receipt (or the error text for a
    /// malformed one) is the one the general path gives.
    #[test]
    fn answers_decode_as_the_general_path_decodes_them(
        rp in params(&RECEIPT_KEYS),
        id in id_text(),
        v in prop_oneof![Just("\"2.0\""), Just("\"1.0\""), Just("\"2\\u002e0\"")],
        envelope in proptest::sample::subsequence(
            vec!["id", "jsonrpc", "result", "error", "result", "method", "id"], 0..=7),
        shuffle in any::<bool>(),
    ) {
        let mut keys = envelope;
        if shuffle {
            keys.reverse();
        }
        let pairs: Vec<(String, String)> = keys
            .iter()
            .map(|k| {
                let value = match *k {
                    "id" => id.clone(),
                    "jsonrpc" => v.to_string(),
                    "result" => object(&rp),
                    "error" => r#"{"code":-32600,"message":"no"}"#.to_string(),
                    _ => "\"peer.send\"".to_string(),
                };
                (k.to_string(), value)
            })
            .collect();
        let f = object(&pairs);
        if let Some((id, raw)) = decode_result(f.as_bytes()) {
            let (gid, gv) = general_result(f.as_bytes()).expect("the general path accepts it");
            prop_assert_eq!(id, gid, "{}", f);
            prop_assert_eq!(serde_json::from_str::<Value>(raw.get()).unwrap(), gv, "{}", f);
            let typed = receipt_answer(&raw).map_err(|e| (e.code, e.message));
            prop_assert_eq!(Some(typed), general_receipt(f.as_bytes()), "{}", f);
        }
    }

    /// Receipts in the shape our encoder writes them (sorted keys, no duplicates) are always
    /// taken by the typed path, with the general path's receipt or error.
    #[test]
    fn plain_answers_take_the_typed_path(rp in params(&RECEIPT_KEYS), id in -5i64..5) {
        let f = object(&[
            ("id".into(), id.to_string()),
            ("jsonrpc".into(), "\"2.0\"".into()),
            ("result".into(), object(&rp)),
        ]);
        let (got, raw) = decode_result(f.as_bytes()).expect("a plain success answer");
        prop_assert_eq!(got, id);
        let typed = receipt_answer(&raw).map_err(|e| (e.code, e.message));
        prop_assert_eq!(Some(typed), general_receipt(f.as_bytes()), "{}", f);
    }
}

/// What the two separate passes give for an answer's JSON text.
fn two_passes(raw: &RawValue) -> Result<(Receipt, Option<u64>), (Code, String)> {
    receipt_answer(raw)
        .map(|r| (r, flushed_device(raw)))
        .map_err(|e| (e.code, e.message))
}

#[test]
fn a_stated_receipt_is_what_the_two_passes_give() {
    let base = r#""atMs":9,"correlationId":"c","fromPeerId":"p-a","messageId":"m-1","sequence":2,"state":"accepted","toPeerId":"p-b""#;
    for extra in [
        "",
        r#","flushedDevice":2049"#,
        r#","flushedDevice":null"#,
        r#","flushedDevice":"2049""#,
        r#","flushedDevice":-1"#,
        r#","flushedDevice":1.5"#,
        r#","flushedDevice":18446744073709551615"#,
        r#","flushedDevice":1,"flushedDevice":2"#,
        r#","messageId":"m-2""#,
        r#","code":"QUEUE_FULL","replyMessageId":null"#,
        r#","unknown":{"a":[1,2]}"#,
    ] {
        let text = format!("{{{base}{extra}}}");
        let raw = RawValue::from_string(text.clone()).unwrap();
        let one = stated_receipt(&raw).map_err(|e| (e.code, e.message));
        assert_eq!(one, two_passes(&raw), "{text}");
    }
    let stated = format!("{{{base},\"flushedDevice\":2049}}");
    let (_, device) = stated_receipt(&RawValue::from_string(stated).unwrap()).unwrap();
    assert_eq!(device, Some(2049));
}

proptest! {
    /// Any arrangement of a `peer.send` answer's fields, valid or not: the one-pass decode
    /// gives the receipt (or the error text) and the statement the two passes give.
    #[test]
    fn stated_receipts_decode_as_the_two_passes(
        p in params(&RECEIPT_KEYS),
        device in keyed_value("flushedDevice"),
        at in any::<usize>(),
        dup in proptest::option::of(0usize..12),
    ) {
        let mut pairs = p;
        if let Some(v) = device {
            pairs.insert(at % (pairs.len() + 1), ("flushedDevice".to_string(), v));
        }
        if let Some(i) = dup
            && let Some(pair) = pairs.get(i % pairs.len().max(1)).cloned()
        {
            pairs.push(pair);
        }
        let text = object(&pairs);
        let raw = RawValue::from_string(text.clone()).unwrap();
        let one = stated_receipt(&raw).map_err(|e| (e.code, e.message));
        prop_assert_eq!(one, two_passes(&raw), "{}", text);
    }
}

fn any_send() -> impl Strategy<Value = PeerSend> {
    (
        (any::<u64>(), text(), text(), opt_text()),
        (text(), opt_text(), opt_text()),
        (opt_text(), proptest::option::of(any::<u64>())),
    )
        .prop_map(
            |((version, message_id, to, from_run), body, rest)| PeerSend {
                version,
                message_id,
                to,
                from_run,
                body: MessageBody {
                    content: body.0,
                    topic: body.1,
                    reply_to: body.2,
                },
                correlation_id: rest.0,
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
        prop_assert_eq!(serde_json::to_vec(&send.sorted()).unwrap(), serde_json::to_vec(&sv).unwrap());
        prop_assert_eq!(
            rpc::encode_request(&id, "peer.send", &send.sorted()),
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

    /// What the typed encoder writes for a valid request, the typed decoder reads back whole.
    #[test]
    fn typed_frames_decode_to_the_request(mut send in any_send(), mut push in any_push(), n in any::<i64>()) {
        let id = Id::Num(n);
        send.version = 1;
        push.version = 1;
        let mut f = rpc::encode_request(&id, "peer.send", &send.sorted());
        f.pop();
        prop_assert_eq!(decode(&f), general(&f).ok());
        let mut f = rpc::encode_request(&id, "peer.receipt", &push);
        f.pop();
        prop_assert_eq!(decode(&f), general(&f).ok());
    }
}

/// A sample request, sent through the typed encoder, is decoded on the fast path to itself.
#[test]
fn sample_requests_round_trip_through_the_typed_encoder() {
    let send = sample_send();
    let mut f = rpc::encode_request(&Id::Num(7), "peer.send", &send.sorted());
    f.pop();
    assert_eq!(
        decode(&f),
        Some(HotRequest {
            id: Id::Num(7),
            call: HotCall::Send(send)
        })
    );
    let push = sample_push();
    let mut f = rpc::encode_request(&Id::Num(8), "peer.receipt", &push);
    f.pop();
    assert_eq!(
        decode(&f),
        Some(HotRequest {
            id: Id::Num(8),
            call: HotCall::Receipt(push)
        })
    );
}

/// What the general path makes of a local frame: the request's id, the tool call's
/// envelope options (`messageId`, `callId`) and its checked arguments, or the error it answers
/// with. `None` when it is not a plain root-level `send_peer_message` call at all.
type LocalOutcome = (
    Id,
    Option<String>,
    Option<String>,
    Result<crate::toolspec::SendArgs, (Code, String)>,
);

fn general_local(frame: &[u8]) -> Option<LocalOutcome> {
    use crate::protocol::local::{LocalCall, LocalRequest};
    let Ok(Incoming::Request { id, method, params }) = rpc::parse(frame) else {
        return None;
    };
    rpc::check_version(&params).ok()?;
    let req = LocalRequest::decode(&method, params).ok()?;
    let LocalCall::Tool(t) = req.call else {
        return None;
    };
    if req.run_id.is_some() || req.auto.is_some() || t.tool != "send_peer_message" {
        return None;
    }
    let args =
        match crate::toolspec::parse_call(&t.tool, &t.args, &crate::config::Limits::default()) {
            Ok(crate::toolspec::ToolCall::Send(a)) => Ok(a),
            Ok(other) => panic!("send_peer_message parsed as {other:?}"),
            Err(e) => Err((e.code, e.message)),
        };
    Some((id, t.message_id, t.call_id, args))
}

fn typed_local(frame: &[u8]) -> Option<LocalOutcome> {
    let s = decode_local_send(frame)?;
    let args = crate::toolspec::send_args(&s.to, s.content, s.topic, s.reply_to)
        .map_err(|e| (e.code, e.message));
    Some((s.id, s.message_id, s.call_id, args))
}

/// A local field's value: strings the checks take and refuse, and every other kind.
fn local_value() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        Just(None),
        Just(Some("null".to_string())),
        Just(Some("\"alice\"".to_string())),
        Just(Some("\"@alice\"".to_string())),
        Just(Some("\"@@alice\"".to_string())),
        Just(Some(format!("\"{TO}\""))),
        Just(Some("\"m-1\"".to_string())),
        Just(Some("\"bad id\"".to_string())),
        Just(Some("\"hello \\\"there\\\" \\u00e9\\n\"".to_string())),
        Just(Some("\"one\\u0001line\"".to_string())),
        Just(Some("\"  \\t \"".to_string())),
        Just(Some("\"\"".to_string())),
        Just(Some(format!("\"{}\"", "x".repeat(97)))),
        Just(Some(format!("\"{}\"", "y".repeat(201)))),
        Just(Some(format!("\"{}\"", "\u{e9}".repeat(60)))),
        Just(Some("1".to_string())),
        Just(Some("true".to_string())),
        Just(Some("[]".to_string())),
        Just(Some("{}".to_string())),
    ]
}

const LOCAL_ARG_KEYS: [&str; 4] = ["content", "replyTo", "to", "topic"];

fn local_pairs(keys: &'static [&'static str]) -> impl Strategy<Value = Vec<(String, String)>> {
    let values: Vec<_> = keys
        .iter()
        .map(|k| {
            let valid = match *k {
                "to" => "\"alice\"",
                "content" => "\"hi\"",
                "topic" => "\"t\"",
                _ => "\"m-1\"",
            };
            prop_oneof![2 => Just(Some(valid.to_string())), 3 => local_value()]
        })
        .collect();
    values.prop_map(move |vals| {
        keys.iter()
            .zip(vals)
            .filter_map(|(k, v)| v.map(|v| (k.to_string(), v)))
            .collect()
    })
}

/// A local frame: the envelope in order, params from `extra` plus the usual keys.
fn local_frame(
    id: &str,
    method: &str,
    tool: &str,
    args: &[(String, String)],
    extra: &[(String, String)],
) -> String {
    let mut params = vec![("args".to_string(), object(args))];
    params.extend(extra.iter().cloned());
    params.push(("tool".to_string(), tool.to_string()));
    params.sort_by(|a, b| a.0.cmp(&b.0));
    object(&[
        ("id".into(), id.to_string()),
        ("jsonrpc".into(), "\"2.0\"".into()),
        ("method".into(), method.to_string()),
        ("params".into(), object(&params)),
    ])
}

proptest! {
    /// Local send frames of every shape: what the typed decoder accepts, the general path
    /// reads as the same call with the same options, and the arguments check to the same
    /// typed arguments or the same error.
    #[test]
    fn local_sends_decode_as_the_general_path_reads_them(
        args in local_pairs(&LOCAL_ARG_KEYS),
        message_id in local_value(),
        call_id in local_value(),
        other in proptest::option::of((
            prop_oneof![Just("version"), Just("runId"), Just("auto"), Just("eventsAfter"), Just("to")],
            prop_oneof![Just("1"), Just("2"), Just("null"), Just("\"r-1\"")],
        )),
        id in id_text(),
        method in prop_oneof![3 => Just("\"local.tool\""), 1 => Just("\"local.info\"")],
        tool in prop_oneof![3 => Just("\"send_peer_message\""), 1 => Just("\"peer_messages\""), 1 => Just("1")],
    ) {
        let mut extra = Vec::new();
        if let Some(m) = message_id {
            extra.push(("messageId".to_string(), m));
        }
        if let Some(c) = call_id {
            extra.push(("callId".to_string(), c));
        }
        if let Some((k, v)) = other {
            extra.push((k.to_string(), v.to_string()));
        }
        let f = local_frame(&id, method, tool, &args, &extra);
        if let Some(typed) = typed_local(f.as_bytes()) {
            prop_assert_eq!(Some(typed), general_local(f.as_bytes()), "{}", f);
        }
    }

    /// Sends as the local adapters write them (strings, sorted keys) always take the typed
    /// path, whatever the strings hold.
    #[test]
    fn plain_local_sends_take_the_typed_path(
        to in local_string(), content in local_string(),
        topic in proptest::option::of(local_string()),
        reply_to in proptest::option::of(local_string()),
        message_id in proptest::option::of(local_string()),
        n in any::<i64>(),
    ) {
        let mut args = serde_json::Map::new();
        args.insert("to".into(), json!(to));
        args.insert("content".into(), json!(content));
        if let Some(t) = topic {
            args.insert("topic".into(), json!(t));
        }
        if let Some(r) = reply_to {
            args.insert("replyTo".into(), json!(r));
        }
        let mut p = json!({"tool": "send_peer_message", "args": args});
        if let Some(m) = message_id {
            p["messageId"] = json!(m);
        }
        let mut f = rpc::encode_request(&Id::Num(n), "local.tool", &p);
        f.pop();
        let typed = typed_local(&f);
        prop_assert!(typed.is_some());
        prop_assert_eq!(typed, general_local(&f));
    }
}

fn local_string() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("alice".to_string()),
        Just("@bob".to_string()),
        Just(TO.to_string()),
        Just(" ".to_string()),
        Just(String::new()),
        Just("tab\there".to_string()),
        Just("x".repeat(300)),
        any::<String>(),
    ]
}

/// Frames the typed local decoder leaves to the general path: a run or automatic-reply
/// envelope, another tool or method, duplicates, unknown keys, arguments of other types.
#[test]
fn unusual_local_frames_take_the_general_path() {
    let base = r#""args":{"content":"hi","to":"bob"},"tool":"send_peer_message""#;
    let ok = format!(r#"{{"id":1,"jsonrpc":"2.0","method":"local.tool","params":{{{base}}}}}"#);
    assert!(decode_local_send(ok.as_bytes()).is_some());
    for f in [
        format!(r#"{{"id":1,"jsonrpc":"2.0","method":"local.tool","params":{{{base},"runId":"r-1"}}}}"#),
        format!(r#"{{"id":1,"jsonrpc":"2.0","method":"local.tool","params":{{{base},"auto":"c"}}}}"#),
        format!(r#"{{"id":1,"jsonrpc":"2.0","method":"local.tool","params":{{{base},"tool":"x"}}}}"#),
        format!(r#"{{"id":1,"jsonrpc":"2.0","params":{{{base}}},"method":"local.tool"}}"#),
        format!(r#"{{"id":1,"jsonrpc":"2.0","method":"local.info","params":{{{base}}}}}"#),
        format!(r#"{{"id":1,"jsonrpc":"2.0","method":"local.tool","params":{{{base},"version":2}}}}"#),
        format!(r#"{{"id":1,"jsonrpc":"2.0","method":"local.tool","params":{{{base},"messageId":5}}}}"#),
        r#"{"id":1,"jsonrpc":"2.0","method":"local.tool","params":{"args":{"content":"hi","to":"bob","to":"x"},"tool":"send_peer_message"}}"#.to_string(),
        r#"{"id":1,"jsonrpc":"2.0","method":"local.tool","params":{"args":{"content":"hi","to":null},"tool":"send_peer_message"}}"#.to_string(),
        r#"{"id":1,"jsonrpc":"2.0","method":"local.tool","params":{"args":{"content":"hi","to":"b","x":1},"tool":"send_peer_message"}}"#.to_string(),
        r#"{"id":1,"jsonrpc":"2.0","method":"local.tool","params":{"tool":"send_peer_message"}}"#.to_string(),
    ] {
        assert!(decode_local_send(f.as_bytes()).is_none(), "{f}");
    }
}
