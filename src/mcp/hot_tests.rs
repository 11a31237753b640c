use super::*;
use crate::config::Limits;
use crate::mcp::session::{Action, LATEST_PROTOCOL_VERSION, Session};
use proptest::prelude::*;
use std::sync::Arc;
use std::sync::atomic::AtomicU8;

const TO: &str = "p-0123456789abcdef01234567";

fn initialized() -> Session {
    let mut s = Session::new(&Limits::default(), Arc::new(AtomicU8::new(0)));
    let init = format!(
        r#"{{"jsonrpc":"2.0","id":0,"method":"initialize","params":{{"protocolVersion":"{LATEST_PROTOCOL_VERSION}"}}}}"#
    );
    assert!(matches!(s.handle(init.as_bytes()), Action::Reply(_)));
    s
}

/// What a session does with the line: through the typed decoder where it says yes, and
/// through the `Value` tree only. Compared as their debug text (`Action` holds `Value`s and
/// typed calls, both printed in full).
fn both(line: &str) -> (String, String) {
    let typed = format!("{:?}", initialized().handle(line.as_bytes()));
    let general = format!("{:?}", initialized().handle_general(line.as_bytes()));
    (typed, general)
}

fn object(pairs: &[(String, String)]) -> String {
    let body: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}:{v}")).collect();
    format!("{{{}}}", body.join(","))
}

/// A value for an argument: strings the checks take and refuse, and every other kind.
fn arg_value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("null".to_string()),
        Just("\"alice\"".to_string()),
        Just("\"@alice\"".to_string()),
        Just("\"@@alice\"".to_string()),
        Just(format!("\"{TO}\"")),
        Just("\"m-1\"".to_string()),
        Just("\"hello \\\"there\\\" \\u00e9\\n\"".to_string()),
        Just("\"one\\u0001line\"".to_string()),
        Just("\"  \\t \"".to_string()),
        Just("\"\"".to_string()),
        Just(format!("\"{}\"", "x".repeat(97))),
        Just(format!("\"{}\"", "y".repeat(201))),
        Just(format!("\"{}\"", "\u{e9}".repeat(60))),
        Just("1".to_string()),
        Just("true".to_string()),
        Just("[]".to_string()),
        Just("{}".to_string()),
    ]
}

/// One object member: a key the decoder knows (sometimes written with an escape), or another.
fn member(
    keys: &'static [&'static str],
    value: BoxedStrategy<String>,
) -> impl Strategy<Value = (String, String)> {
    let key = prop_oneof![
        8 => prop::sample::select(keys).prop_map(|k| format!("\"{k}\"")),
        1 => Just("\"t\\u006f\"".to_string()),
        1 => Just("\"x\"".to_string()),
    ];
    (key, value)
}

/// Members of an object: usually each known key once with a likely value, in any order, at
/// times one more member (a duplicate, an unknown key or an escaped one).
fn members(
    valid: Vec<(&'static str, String)>,
    keys: &'static [&'static str],
    value: BoxedStrategy<String>,
) -> impl Strategy<Value = Vec<(String, String)>> {
    let each: Vec<_> = valid
        .into_iter()
        .map(|(k, v)| {
            let value = prop_oneof![3 => Just(v), 1 => value.clone()];
            proptest::option::weighted(0.9, value.prop_map(move |v| (format!("\"{k}\""), v)))
        })
        .collect();
    (each, proptest::option::weighted(0.2, member(keys, value)))
        .prop_map(|(each, extra)| each.into_iter().flatten().chain(extra).collect::<Vec<_>>())
        .prop_shuffle()
}

const ARG_KEYS: [&str; 4] = ["to", "content", "topic", "replyTo"];
const PARAM_KEYS: [&str; 3] = ["name", "arguments", "_meta"];
const ENVELOPE_KEYS: [&str; 4] = ["jsonrpc", "id", "method", "params"];

fn arguments() -> impl Strategy<Value = String> {
    let valid = vec![
        ("to", "\"@alice\"".to_string()),
        ("content", "\"hi\"".to_string()),
        ("topic", "\"t\"".to_string()),
        ("replyTo", "\"m-1\"".to_string()),
    ];
    prop_oneof![
        8 => members(valid, &ARG_KEYS, arg_value().boxed()).prop_map(|m| object(&m)),
        1 => Just("null".to_string()),
        1 => Just("[]".to_string()),
    ]
}

fn params() -> impl Strategy<Value = String> {
    let name = prop_oneof![
        6 => Just("\"send_peer_message\"".to_string()),
        1 => Just("\"list_peers\"".to_string()),
        1 => Just("\"nope\"".to_string()),
        1 => Just("null".to_string()),
    ];
    let meta = prop_oneof![
        Just("{\"progressToken\":1}".to_string()),
        Just("null".to_string()),
        Just("[1,{\"a\":[]}]".to_string()),
    ];
    (name, arguments(), proptest::option::weighted(0.3, meta)).prop_flat_map(|(n, a, m)| {
        let mut valid = vec![("name", n), ("arguments", a)];
        valid.extend(m.map(|m| ("_meta", m)));
        members(valid, &PARAM_KEYS, arg_value().boxed()).prop_map(|m| object(&m))
    })
}

fn request_id() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => Just("7".to_string()),
        1 => Just("-5".to_string()),
        1 => Just("18446744073709551615".to_string()),
        1 => Just("1.5".to_string()),
        1 => Just("-0".to_string()),
        1 => Just("null".to_string()),
        4 => Just("\"r-1\"".to_string()),
        1 => Just("\"\\u00e9\"".to_string()),
        1 => Just("true".to_string()),
        1 => Just("{}".to_string()),
    ]
}

fn line() -> impl Strategy<Value = String> {
    let method = prop_oneof![
        6 => Just("\"tools/call\"".to_string()),
        1 => Just("\"ping\"".to_string()),
        1 => Just("1".to_string()),
    ];
    let version = prop_oneof![
        6 => Just("\"2.0\"".to_string()),
        1 => Just("\"1.0\"".to_string()),
    ];
    (version, request_id(), method, params()).prop_flat_map(|(v, i, m, p)| {
        let valid = vec![("jsonrpc", v), ("id", i), ("method", m), ("params", p)];
        let other = prop_oneof![arg_value(), Just("\"tools/call\"".to_string())];
        members(valid, &ENVELOPE_KEYS, other.boxed()).prop_map(|m| object(&m))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Lines of every shape: where the typed decoder says yes, the session does exactly what
    /// the `Value` path does (the same call, or the same error answer).
    #[test]
    fn a_line_means_what_the_general_path_reads(line in line()) {
        let (typed, general) = both(&line);
        prop_assert_eq!(typed, general, "{}", line);
    }
}

#[test]
fn plain_sends_are_decoded() {
    for line in [
        // As the official Python SDK orders a request.
        r#"{"method":"tools/call","params":{"name":"send_peer_message","arguments":{"to":"@rx","content":"hi"}},"jsonrpc":"2.0","id":3}"#,
        r#"{"jsonrpc":"2.0","id":"a-1","method":"tools/call","params":{"_meta":{"progressToken":1},"name":"send_peer_message","arguments":{"content":"hi","to":"rx","topic":null,"replyTo":"m-1"}}}"#,
        r#" {"jsonrpc":"2.0","id":-2,"method":"tools/call","params":{"arguments":{"to":"rx","content":"\u00e9 \"q\""},"name":"send_peer_message"}} "#,
    ] {
        let send = decode_send(line.as_bytes());
        assert!(send.is_some(), "{line}");
        let (typed, general) = both(line);
        assert_eq!(typed, general, "{line}");
        assert!(typed.starts_with("Call"), "{typed}");
    }
    let bad_args = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"send_peer_message","arguments":{"to":"a b","content":"hi"}}}"#;
    let send = decode_send(bad_args.as_bytes()).expect("plain, though its `to` is refused");
    assert_eq!(send.to, "a b");
    let (typed, general) = both(bad_args);
    assert_eq!(typed, general);
    assert!(typed.starts_with("Reply"), "{typed}");
}

#[test]
fn unusual_lines_take_the_general_path() {
    let args = r#""arguments":{"content":"hi","to":"bob"}"#;
    let name = r#""name":"send_peer_message""#;
    for line in [
        format!(r#"{{"jsonrpc":"2.0","id":1,"params":{{{name},{args}}},"method":"tools/call"}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{{name},{args},"x":1}}}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{{name},{args},{name}}}}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/call","params":{{{name},{args}}}}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":1.0,"method":"tools/call","params":{{{name},{args}}}}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{{{name},{args}}}}}"#),
        format!(r#"{{"jsonrpc":"2.0","method":"tools/call","params":{{{name},{args}}}}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{{name},{args}}},"result":1}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{{name},{args}}}}} x"#),
        format!(r#"[{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{{name},{args}}}}}]"#),
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"list_peers",{args}}}}}"#),
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"send_peer_message","arguments":{"content":"hi","to":null}}}"#.to_string(),
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"send_peer_message","arguments":{"content":"hi","to":"b","to":"c"}}}"#.to_string(),
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"send_peer_message"}}"#.to_string(),
    ] {
        assert!(decode_send(line.as_bytes()).is_none(), "{line}");
        let (typed, general) = both(&line);
        assert_eq!(typed, general, "{line}");
    }
}

#[test]
fn before_initialize_a_send_is_refused_as_before() {
    let line = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"send_peer_message","arguments":{"content":"hi","to":"bob"}}}"#;
    let mut s = Session::new(&Limits::default(), Arc::new(AtomicU8::new(0)));
    let Action::Reply(r) = s.handle(line.as_bytes()) else {
        panic!("a call before initialize is answered with an error");
    };
    assert_eq!(r["error"]["code"], -32600);
}
