//! JSON-RPC 2.0 message shapes on the peer wire: one frame parses into a typed [`Incoming`] or
//! into a [`Reject`] that already knows the error response to send. Also the encoders that turn
//! outgoing messages into one line plus `\n`. serde_json's 128-level recursion limit turns deeply
//! nested input into an ordinary parse error, never a stack overflow.

use crate::config::internal::{
    RPC_ID_BYTES_MAX as ID_BYTES_MAX, RPC_METHOD_BYTES_MAX as METHOD_BYTES_MAX,
};
use crate::error::{Code, Error};
use serde_json::{Map, Value, json};

/// JSON-RPC's number for "not valid JSON".
pub const PARSE_ERROR: i64 = -32700;

/// A JSON-RPC id: a string (≤ [`ID_BYTES_MAX`] bytes) or an integer.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Id {
    Num(i64),
    Str(String),
}

impl Id {
    pub fn to_value(&self) -> Value {
        match self {
            Id::Num(n) => json!(n),
            Id::Str(s) => json!(s),
        }
    }

    fn from_value(v: &Value) -> Option<Id> {
        match v {
            Value::Number(n) => n.as_i64().map(Id::Num),
            Value::String(s) if s.len() <= ID_BYTES_MAX => Some(Id::Str(s.clone())),
            _ => None,
        }
    }
}

/// One validated incoming message.
#[derive(Clone, Debug, PartialEq)]
pub enum Incoming {
    Request {
        id: Id,
        method: String,
        params: Map<String, Value>,
    },
    Notification {
        method: String,
        params: Map<String, Value>,
    },
    /// `Ok(result)` or `Err(error object)`. `id` is `None` only for an error answering a
    /// frame whose id could not be read (`"id":null`).
    Response {
        id: Option<Id>,
        result: Result<Value, Value>,
    },
}

/// A frame that is not a valid message, with what to answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Reject {
    /// The request id when it could be read, so the sender can match the error.
    pub id: Option<Id>,
    /// `PARSE_ERROR` for bytes that are not JSON, else the error's own number.
    pub number: i64,
    pub error: Error,
}

impl Reject {
    fn invalid(id: Option<Id>, message: &str) -> Reject {
        let error = Error::new(Code::InvalidRequest, message);
        Reject {
            id,
            number: error.code.rpc_number(),
            error,
        }
    }

    /// The error response line for this reject.
    pub fn to_line(&self) -> Vec<u8> {
        let mut obj = self.error.to_rpc();
        obj["code"] = json!(self.number);
        line(&json!({"jsonrpc": "2.0", "id": self.id.as_ref().map(Id::to_value), "error": obj}))
    }
}

/// `METHOD_NOT_FOUND` for a `kind` (`method`, `local method`) no reader knows, its name
/// echoed bounded and sanitized.
pub fn unknown_method(kind: &str, method: &str) -> Error {
    Error::new(
        Code::MethodNotFound,
        format!(
            "unknown {kind} {}",
            crate::sanitize::line(method, crate::config::internal::ECHO_CHARS_MAX)
        ),
    )
}

/// Parses one frame (without its newline). Never panics, whatever the bytes.
pub fn parse(frame: &[u8]) -> Result<Incoming, Reject> {
    let top: Top = match serde_json::from_slice(frame) {
        Ok(v) => v,
        Err(e) => {
            let error = Error::new(
                Code::InvalidRequest,
                format!("frame is not valid JSON ({e})"),
            );
            return Err(Reject {
                id: None,
                number: PARSE_ERROR,
                error,
            });
        }
    };
    let Top::Object(mut obj) = top else {
        return Err(Reject::invalid(None, "frame must be a JSON object"));
    };
    let id = match &obj.id {
        None => None,
        Some(Value::Null) if obj.method.is_none() => return parse_null_id_error(&mut obj),
        Some(v) => match Id::from_value(v) {
            Some(id) => Some(id),
            None => {
                let why =
                    format!("id must be a string of at most {ID_BYTES_MAX} bytes or an integer");
                return Err(Reject::invalid(None, &why));
            }
        },
    };
    if obj.jsonrpc.as_ref().and_then(Value::as_str) != Some("2.0") {
        return Err(Reject::invalid(id, "jsonrpc must be \"2.0\""));
    }
    if obj.method.is_some() {
        return parse_call(id, &mut obj);
    }
    parse_response(id, &mut obj)
}

fn parse_call(id: Option<Id>, obj: &mut Members) -> Result<Incoming, Reject> {
    let method = match obj.method.take() {
        Some(Value::String(m)) if !m.is_empty() && m.len() <= METHOD_BYTES_MAX => m,
        _ => {
            let why =
                format!("method must be a non-empty string of at most {METHOD_BYTES_MAX} bytes");
            return Err(Reject::invalid(id, &why));
        }
    };
    let params = match obj.params.take() {
        None => Map::new(),
        Some(Value::Object(p)) => p,
        Some(_) => return Err(Reject::invalid(id, "params must be an object when present")),
    };
    Ok(match id {
        Some(id) => Incoming::Request { id, method, params },
        None => Incoming::Notification { method, params },
    })
}

/// `"id":null` is only meaningful on an error answering an unreadable frame.
fn parse_null_id_error(obj: &mut Members) -> Result<Incoming, Reject> {
    if obj.jsonrpc.as_ref().and_then(Value::as_str) != Some("2.0") {
        return Err(Reject::invalid(None, "jsonrpc must be \"2.0\""));
    }
    match (obj.result.take(), obj.error.take()) {
        (None, Some(error @ Value::Object(_))) => Ok(Incoming::Response {
            id: None,
            result: Err(error),
        }),
        _ => Err(Reject::invalid(
            None,
            "a null id is only allowed on an error response",
        )),
    }
}

fn parse_response(id: Option<Id>, obj: &mut Members) -> Result<Incoming, Reject> {
    let Some(id) = id else {
        return Err(Reject::invalid(
            None,
            "a response needs an id; a call needs a method",
        ));
    };
    let id = Some(id);
    match (obj.result.take(), obj.error.take()) {
        (Some(result), None) => Ok(Incoming::Response {
            id,
            result: Ok(result),
        }),
        (None, Some(error @ Value::Object(_))) => Ok(Incoming::Response {
            id,
            result: Err(error),
        }),
        _ => Err(Reject::invalid(
            id,
            "a response needs exactly one of result or error (an object)",
        )),
    }
}

/// A frame's top level as `parse` reads it, in one pass: an object's members, or anything
/// else (read whole, so that malformed or too deeply nested JSON anywhere is still a parse
/// error, as it was when the frame was one `Value`).
enum Top {
    Object(Members),
    Other,
}

/// The members of a frame object the decoder looks at, each read as a `Value` where it
/// stands (so the recursion limit counts the frame's own depth); a repeated key's last value
/// counts, as in a `Value` map. Other members are read (to the same checks) and dropped.
#[derive(Default)]
struct Members {
    jsonrpc: Option<Value>,
    id: Option<Value>,
    method: Option<Value>,
    params: Option<Value>,
    result: Option<Value>,
    error: Option<Value>,
}

/// A member name of a frame object.
enum Key {
    Jsonrpc,
    Id,
    Method,
    Params,
    Result,
    Error,
    Other,
}

impl<'de> serde::Deserialize<'de> for Key {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Key, D::Error> {
        struct Name;
        impl serde::de::Visitor<'_> for Name {
            type Value = Key;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a member name")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Key, E> {
                Ok(match s {
                    "jsonrpc" => Key::Jsonrpc,
                    "id" => Key::Id,
                    "method" => Key::Method,
                    "params" => Key::Params,
                    "result" => Key::Result,
                    "error" => Key::Error,
                    _ => Key::Other,
                })
            }
        }
        d.deserialize_str(Name)
    }
}

impl<'de> serde::Deserialize<'de> for Top {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Top, D::Error> {
        d.deserialize_any(TopVisitor)
    }
}

struct TopVisitor;

impl<'de> serde::de::Visitor<'de> for TopVisitor {
    type Value = Top;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Top, A::Error> {
        let mut m = Members::default();
        while let Some(key) = map.next_key::<Key>()? {
            let value: Value = map.next_value()?;
            let slot = match key {
                Key::Jsonrpc => &mut m.jsonrpc,
                Key::Id => &mut m.id,
                Key::Method => &mut m.method,
                Key::Params => &mut m.params,
                Key::Result => &mut m.result,
                Key::Error => &mut m.error,
                Key::Other => continue,
            };
            *slot = Some(value);
        }
        Ok(Top::Object(m))
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Top, A::Error> {
        while seq.next_element::<Value>()?.is_some() {}
        Ok(Top::Other)
    }
    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Top, E> {
        Ok(Top::Other)
    }
    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Top, E> {
        Ok(Top::Other)
    }
    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Top, E> {
        Ok(Top::Other)
    }
    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Top, E> {
        Ok(Top::Other)
    }
    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Top, E> {
        Ok(Top::Other)
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<Top, E> {
        Ok(Top::Other)
    }
}

/// Serialises one message as a frame: compact JSON plus `\n`. Serialising a `Value` or an
/// [`Envelope`] of them cannot fail (all keys are strings), so an impossible failure yields an
/// empty frame.
pub fn line<T: serde::Serialize + ?Sized>(value: &T) -> Vec<u8> {
    line_with(value, 0)
}

/// [`line`] for a message that carries `text_len` bytes of peer text (a `peer.send`'s
/// content): its buffer is sized for that text too, so a kilobyte message is written into one
/// buffer instead of one per doubling.
pub fn line_with<T: serde::Serialize + ?Sized>(value: &T, text_len: usize) -> Vec<u8> {
    let mut out = json_sized(
        value,
        LINE_CAPACITY.saturating_add(escaped_len_hint(text_len)),
    );
    out.push(b'\n');
    out
}

/// `value` as compact JSON text, written into a buffer of `capacity` bytes reserved up front
/// (serde_json's own starts at 128 bytes and doubles: three buffers for a receipt). A failure,
/// impossible for the types written here (every map key is a string), yields empty text.
pub fn json_sized<T: serde::Serialize + ?Sized>(value: &T, capacity: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(capacity);
    if serde_json::to_writer(&mut out, value).is_err() {
        out.clear();
    }
    out
}

/// Bytes reserved for a frame before it is serialised: a `peer.send` with a short body and
/// its answer fit.
const LINE_CAPACITY: usize = 512;

/// Room for `len` bytes of text once written as a JSON string: the text and a sixteenth more
/// for escapes (line breaks and quotes in prose and code). More escaping than that grows the
/// buffer once.
pub fn escaped_len_hint(len: usize) -> usize {
    len.saturating_add(len / 16)
}

/// The envelope of a request, a notification or a result, serialised from borrowed parts:
/// building a `Value` envelope first copied the whole `params` or `result` tree on every
/// frame. The fields are in the order a `Value` object writes its keys (sorted), so the bytes
/// are the ones such an envelope gave. `P` is the params' type: a `Value`, or a typed
/// request's params whose fields are written in sorted order (the same bytes again).
#[derive(serde::Serialize)]
struct Envelope<'a, P: ?Sized = Value> {
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<Value>,
    jsonrpc: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    method: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    params: Option<&'a P>,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a Value>,
}

/// A request frame. `params` is a `Value` object, or typed params that serialise as the
/// bytes their `Value` would (keys in sorted order, e.g. [`crate::protocol::message::PeerSend`]).
pub fn encode_request<P: serde::Serialize + ?Sized>(id: &Id, method: &str, params: &P) -> Vec<u8> {
    encode_request_with(id, method, params, 0)
}

/// [`encode_request`] for params that carry `text_len` bytes of peer text (see [`line_with`]).
pub fn encode_request_with<P: serde::Serialize + ?Sized>(
    id: &Id,
    method: &str,
    params: &P,
    text_len: usize,
) -> Vec<u8> {
    let envelope = Envelope {
        id: Some(id.to_value()),
        jsonrpc: "2.0",
        method: Some(method),
        params: Some(params),
        result: None,
    };
    line_with(&envelope, text_len)
}

/// A notification frame; `params` as for [`encode_request`].
pub fn encode_notification<P: serde::Serialize + ?Sized>(method: &str, params: &P) -> Vec<u8> {
    line(&Envelope {
        id: None,
        jsonrpc: "2.0",
        method: Some(method),
        params: Some(params),
        result: None,
    })
}

pub fn encode_result(id: &Id, result: &Value) -> Vec<u8> {
    line(&Envelope::<Value> {
        id: Some(id.to_value()),
        jsonrpc: "2.0",
        method: None,
        params: None,
        result: Some(result),
    })
}

/// [`encode_result`] for a result already written as compact JSON text (`json`, keys in
/// sorted order): the same bytes, without a `Value` of the result.
pub fn encode_result_json(id: &Id, json: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(json.len() + 48);
    out.extend_from_slice(b"{\"id\":");
    match id {
        Id::Num(n) => out.extend_from_slice(n.to_string().as_bytes()),
        Id::Str(s) => {
            if serde_json::to_writer(&mut out, s).is_err() {
                return encode_result(id, &Value::Null);
            }
        }
    }
    out.extend_from_slice(b",\"jsonrpc\":\"2.0\",\"result\":");
    out.extend_from_slice(json);
    out.extend_from_slice(b"}\n");
    out
}

/// An error response: `{"code":N,"message":…,"data":{"code":NAME}}`; `id` null when unknown.
pub fn encode_error(id: Option<&Id>, error: &Error) -> Vec<u8> {
    line(&json!({"jsonrpc": "2.0", "id": id.map(Id::to_value), "error": error.to_rpc()}))
}

/// An error response carrying a prepared error object (used when `data` holds more than the
/// code name, e.g. `data.reason`).
pub fn encode_error_object(id: Option<&Id>, error: &Value) -> Vec<u8> {
    line(&json!({"jsonrpc": "2.0", "id": id.map(Id::to_value), "error": error}))
}

/// Reads an optional `version` param: absent is accepted, anything but 1 is refused.
pub fn check_version(params: &Map<String, Value>) -> Result<(), Error> {
    match params.get("version") {
        None => Ok(()),
        Some(v) if v.as_u64() == Some(super::PROTOCOL_VERSION) => Ok(()),
        Some(_) => Err(Error::new(
            Code::InvalidRequest,
            "params.version must be 1; upgrade the older peer",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `peer.send` carrying kilobytes of content fits the buffer sized for it up front,
    /// and is the same frame the unsized encoder writes.
    #[test]
    fn a_send_frame_is_sized_for_its_content() {
        for len in [0usize, 200, 4000, 8000] {
            let content = "word ".repeat(len / 5);
            let params = json!({"content": content, "messageId": "m-1", "to": "p-someone"});
            let id = Id::Num(12);
            let frame = encode_request_with(&id, "peer.send", &params, content.len());
            let sized = LINE_CAPACITY + escaped_len_hint(content.len());
            assert!(frame.len() <= sized, "{len} bytes");
            assert_eq!(frame, encode_request(&id, "peer.send", &params));
        }
    }

    /// The borrowed envelopes write exactly the bytes a `Value` envelope wrote.
    #[test]
    fn envelopes_are_the_bytes_a_value_envelope_gave() {
        let ids = [Id::Num(7), Id::Num(-1), Id::Str("a\"b\u{1}é".into())];
        let bodies = [
            json!({}),
            json!(null),
            json!({"z": 1, "a": [1, "x\n", {"k": null}], "m": {"é": true, "b": 2.5}}),
            json!("just text"),
        ];
        for id in &ids {
            for b in &bodies {
                assert_eq!(
                    encode_request(id, "peer.send", b),
                    line(
                        &json!({"jsonrpc": "2.0", "id": id.to_value(), "method": "peer.send",
                        "params": b})
                    )
                );
                assert_eq!(
                    encode_result(id, b),
                    line(&json!({"jsonrpc": "2.0", "id": id.to_value(), "result": b}))
                );
                assert_eq!(
                    encode_notification("peer.receipt", b),
                    line(&json!({"jsonrpc": "2.0", "method": "peer.receipt", "params": b}))
                );
            }
        }
    }

    /// A result written from its JSON text is the bytes of the `Value` envelope.
    #[test]
    fn results_from_json_text_are_the_bytes_of_a_value_envelope() {
        let ids = [
            Id::Num(7),
            Id::Num(-1),
            Id::Num(i64::MIN),
            Id::Str("a\"b\u{1}é".into()),
        ];
        let bodies = [
            json!({}),
            json!({"z": 1, "a": [1, "x\n", {"k": null}], "m": {"é": true}}),
            json!("text"),
        ];
        for id in &ids {
            for b in &bodies {
                let text = serde_json::to_vec(b).unwrap();
                assert_eq!(encode_result_json(id, &text), encode_result(id, b));
            }
        }
    }

    fn reject(frame: &[u8]) -> Reject {
        match parse(frame) {
            Err(r) => r,
            Ok(m) => panic!("accepted {m:?}"),
        }
    }

    #[test]
    fn parses_the_three_kinds() {
        let r = parse(br#"{"jsonrpc":"2.0","id":"a","method":"peer.send","params":{"version":1}}"#);
        assert!(
            matches!(r, Ok(Incoming::Request { id: Id::Str(ref s), ref method, .. }) if s == "a" && method == "peer.send")
        );
        let n = parse(br#"{"jsonrpc":"2.0","method":"peer.receipt"}"#);
        assert!(matches!(n, Ok(Incoming::Notification { ref params, .. }) if params.is_empty()));
        let ok = parse(br#"{"jsonrpc":"2.0","id":7,"result":{"ok":true}}"#);
        assert_eq!(
            ok,
            Ok(Incoming::Response {
                id: Some(Id::Num(7)),
                result: Ok(json!({"ok": true}))
            })
        );
        let null = parse(br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700}}"#);
        assert!(matches!(
            null,
            Ok(Incoming::Response {
                id: None,
                result: Err(_)
            })
        ));
        let err = parse(br#"{"jsonrpc":"2.0","id":7,"error":{"code":-32600}}"#);
        assert!(matches!(err, Ok(Incoming::Response { result: Err(_), .. })));
    }

    #[test]
    fn bad_shapes_are_invalid_requests() {
        let long_id = format!(
            r#"{{"jsonrpc":"2.0","id":"{}","method":"m"}}"#,
            "x".repeat(ID_BYTES_MAX + 1)
        );
        let cases: [&[u8]; 12] = [
            b"[]",
            b"1",
            br#"{"id":1,"method":"m"}"#,
            br#"{"jsonrpc":"1.0","id":1,"method":"m"}"#,
            br#"{"jsonrpc":"2.0","id":1.5,"method":"m"}"#,
            br#"{"jsonrpc":"2.0","id":null,"method":"m"}"#,
            br#"{"jsonrpc":"2.0","id":null,"result":1}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":7}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"m","params":[1]}"#,
            br#"{"jsonrpc":"2.0","id":1}"#,
            br#"{"jsonrpc":"2.0","id":1,"result":1,"error":{}}"#,
            long_id.as_bytes(),
        ];
        for frame in cases {
            let r = reject(frame);
            assert_eq!(r.number, -32600, "{}", String::from_utf8_lossy(frame));
            assert_eq!(r.error.code, Code::InvalidRequest);
        }
        assert_eq!(
            reject(br#"{"jsonrpc":"2.0","id":3,"method":""}"#).id,
            Some(Id::Num(3))
        );
    }

    #[test]
    fn not_json_is_a_parse_error_with_data_code() {
        let r = reject(b"{nope");
        assert_eq!(r.number, PARSE_ERROR);
        let line = r.to_line();
        assert_eq!(line.last(), Some(&b'\n'));
        let v: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(v["error"]["code"], json!(-32700));
        assert_eq!(v["error"]["data"]["code"], json!("INVALID_REQUEST"));
        assert_eq!(v["id"], Value::Null);
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        let deep = "[".repeat(100_000);
        assert_eq!(reject(deep.as_bytes()).number, PARSE_ERROR);
        let nested = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"m","params":{{"a":{}1{}}}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        assert_eq!(reject(nested.as_bytes()).number, PARSE_ERROR);
    }

    /// Read in one pass, a frame still means what its `Value` meant: a repeated member's
    /// last value counts, and a member the decoder ignores is still checked whole.
    #[test]
    fn one_pass_members_mean_what_the_value_meant() {
        let dup = br#"{"jsonrpc":"1.0","jsonrpc":"2.0","id":1,"method":"m","params":[1],"params":{"a":1}}"#;
        assert!(matches!(parse(dup), Ok(Incoming::Request { ref params, .. }) if params["a"] == 1));
        let deep = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"m","x":{}1{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        assert_eq!(reject(deep.as_bytes()).number, PARSE_ERROR);
        let huge = br#"{"jsonrpc":"2.0","id":1,"method":"m","x":1e400}"#;
        assert_eq!(reject(huge).number, PARSE_ERROR);
        let top = format!("{}1{}", "[".repeat(127), "]".repeat(127));
        assert_eq!(reject(top.as_bytes()).number, -32600);
        let top = format!("{}1{}", "[".repeat(129), "]".repeat(129));
        assert_eq!(reject(top.as_bytes()).number, PARSE_ERROR);
    }

    #[test]
    fn encoders_round_trip() {
        let id = Id::Str("rpc-1".into());
        let req = encode_request(&id, "peer.status", &json!({"messageId": "m"}));
        assert!(!req[..req.len() - 1].contains(&b'\n'));
        let parsed = parse(&req[..req.len() - 1]).unwrap();
        assert!(matches!(parsed, Incoming::Request { ref method, .. } if method == "peer.status"));
        let e = Error::new(Code::QueueFull, "full");
        let resp = encode_error(Some(&id), &e);
        match parse(&resp[..resp.len() - 1]).unwrap() {
            Incoming::Response {
                id: got,
                result: Err(obj),
            } => {
                assert_eq!(got, Some(id));
                assert_eq!(Error::from_rpc(&obj), e);
            }
            other => panic!("{other:?}"),
        }
        let n = encode_notification("peer.receipt", &json!({}));
        assert!(matches!(
            parse(&n[..n.len() - 1]),
            Ok(Incoming::Notification { .. })
        ));
        let r = encode_result(&Id::Num(-4), &json!(null));
        assert!(matches!(
            parse(&r[..r.len() - 1]),
            Ok(Incoming::Response {
                result: Ok(Value::Null),
                ..
            })
        ));
    }

    #[test]
    fn version_is_separate_from_jsonrpc() {
        let mut p = Map::new();
        assert!(check_version(&p).is_ok());
        p.insert("version".into(), json!(1));
        assert!(check_version(&p).is_ok());
        p.insert("version".into(), json!("2.0"));
        assert!(check_version(&p).is_err());
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
            let _ = parse(&bytes);
        }

        #[test]
        fn arbitrary_json_values_parse_or_reject(v in json_strategy()) {
            let text = v.to_string();
            if let Err(r) = parse(text.as_bytes()) {
                proptest::prop_assert_eq!(r.error.code, Code::InvalidRequest);
            }
        }
    }

    fn json_strategy() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            "[a-z.0-9]{0,8}".prop_map(Value::String),
            Just(json!("2.0")),
            Just(json!("peer.send")),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            let keys = prop_oneof![
                Just("jsonrpc".to_string()),
                Just("id".to_string()),
                Just("method".to_string()),
                Just("params".to_string()),
                Just("result".to_string()),
                Just("error".to_string()),
                "[a-z]{1,4}",
            ];
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map(keys, inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }
}
