//! Keeps `man/peer-protocol.7` honest: its example exchange parses with the real parser as
//! the documented kinds, and its error table matches `Code`.

use super::rpc::{self, Incoming};
use crate::error::Code;

const PAGE: &str = include_str!("../../man/man7/peer-protocol.7");

/// Undoes the groff escapes the page uses inside examples.
fn unescape(line: &str) -> String {
    line.replace("\\-", "-")
        .replace("\\(dq", "\"")
        .replace("\\e", "\\")
        .replace("\\&", "")
}

/// The lines of each `.EX`/`.EE` block after the `.SH` heading `section`.
fn example_lines(section: &str) -> Vec<String> {
    let mut out = Vec::new();
    let (mut in_section, mut in_example) = (false, false);
    for line in PAGE.lines() {
        if let Some(heading) = line.strip_prefix(".SH ") {
            in_section = heading.trim_matches('"') == section;
        } else if line == ".EX" {
            in_example = true;
        } else if line == ".EE" {
            in_example = false;
        } else if in_section && in_example {
            out.push(unescape(line));
        }
    }
    out
}

#[derive(Debug, PartialEq)]
enum Kind {
    Request(&'static str),
    Notification(&'static str),
    Result,
}

fn kind_of(line: &str) -> (String, bool) {
    match rpc::parse(line.as_bytes()) {
        Ok(Incoming::Request { method, .. }) => (format!("request {method}"), true),
        Ok(Incoming::Notification { method, .. }) => (format!("notification {method}"), true),
        Ok(Incoming::Response { result, .. }) => ("result".into(), result.is_ok()),
        Err(r) => panic!("example line does not parse: {} ({line})", r.error),
    }
}

#[test]
fn the_example_exchange_parses_as_documented() {
    let lines = example_lines("EXAMPLE");
    let expected = [
        Kind::Request("peer.hello"),
        Kind::Result,
        Kind::Request("peer.auth"),
        Kind::Result,
        Kind::Request("peer.send"),
        Kind::Result,
        Kind::Request("peer.subscribe"),
        Kind::Result,
        Kind::Notification("peer.receipt"),
    ];
    assert_eq!(lines.len(), expected.len(), "{lines:#?}");
    for (line, want) in lines.iter().zip(expected) {
        let (got, ok) = kind_of(line);
        let want = match want {
            Kind::Request(m) => format!("request {m}"),
            Kind::Notification(m) => format!("notification {m}"),
            Kind::Result => "result".into(),
        };
        assert_eq!(got, want);
        assert!(ok, "{line}");
        let v: serde_json::Value = serde_json::from_str(line).unwrap_or_default();
        if let Some(params) = v.get("params").filter(|_| got != "request peer.auth") {
            assert_eq!(params["version"], serde_json::json!(1), "{line}");
        }
    }
    // The hello carries a real SPKI key and a 32-byte nonce.
    let hello: serde_json::Value = serde_json::from_str(&lines[0]).unwrap_or_default();
    let key = hello["params"]["publicKey"].as_str().unwrap_or("");
    assert!(crate::identity::parse_spki_b64(key).is_some());
    let nonce = crate::identity::unb64(hello["params"]["nonce"].as_str().unwrap_or(""));
    assert_eq!(nonce.map(|n| n.len()), Some(32));
}

#[test]
fn the_error_table_matches_the_codes() {
    let mut rows = std::collections::HashMap::new();
    for line in PAGE.lines() {
        let Some(rest) = line.strip_prefix(".BR ") else {
            continue;
        };
        let Some((name, number)) = rest.split_once(" \" (\\-") else {
            continue;
        };
        let Some(number) = number.strip_suffix(")\"") else {
            continue;
        };
        rows.insert(name.to_string(), number.parse::<i64>().map(|n| -n));
    }
    for code in Code::ALL {
        assert_eq!(
            rows.get(code.name()),
            Some(&Ok(code.rpc_number())),
            "{code} in peer-protocol(7)"
        );
    }
    assert_eq!(rows.len(), Code::ALL.len());
}

/// The example handshake is a real one: both proofs verify over the documented transcript
/// built from the values on the page.
#[test]
fn the_example_proofs_verify_over_the_documented_transcript() {
    use super::handshake::{Party, Role, transcript};
    use crate::identity::{parse_spki_b64, unb64, verify};
    let lines = example_lines("EXAMPLE");
    let json = |i: usize| serde_json::from_str::<serde_json::Value>(&lines[i]).unwrap_or_default();
    let (hello, answer, auth) = (json(0), json(1), json(2));
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
    let key =
        |v: &serde_json::Value| parse_spki_b64(v.as_str().unwrap_or_default()).unwrap_or([0; 32]);
    let bytes = |v: &serde_json::Value| unb64(v.as_str().unwrap_or_default()).unwrap_or_default();
    let nonce = |v: &serde_json::Value| <[u8; 32]>::try_from(bytes(v)).unwrap_or([0; 32]);
    let (h, r) = (&hello["params"], &answer["result"]);
    let initiator = Party {
        instance_id: text(&h["instanceId"]),
        public_key: key(&h["publicKey"]),
    };
    let responder = Party {
        instance_id: text(&r["instanceId"]),
        public_key: key(&r["publicKey"]),
    };
    assert_eq!(text(&h["expect"]), responder.instance_id);
    let (ni, nr) = (nonce(&h["nonce"]), nonce(&r["nonce"]));
    let signed_r = transcript(Role::Responder, &initiator, &responder, &ni, &nr);
    assert!(verify(
        &responder.public_key,
        &signed_r,
        &bytes(&r["proof"])
    ));
    let signed_i = transcript(Role::Initiator, &initiator, &responder, &ni, &nr);
    assert!(verify(
        &initiator.public_key,
        &signed_i,
        &bytes(&auth["params"]["proof"])
    ));
    assert!(!verify(
        &initiator.public_key,
        &signed_r,
        &bytes(&auth["params"]["proof"])
    ));
}

/// The example's receipts are exactly the serde form of `messaging::Receipt`, their peerIds
/// are derived from the handshake's instance ids, and the pushed notification carries the
/// receipt plus `version` and `fromRun`.
#[test]
fn the_example_receipts_have_the_runtime_shape() {
    use crate::identity::peer_id;
    use crate::messaging::Receipt;
    let lines = example_lines("EXAMPLE");
    let json = |i: usize| serde_json::from_str::<serde_json::Value>(&lines[i]).unwrap_or_default();
    let hello = json(0);
    let initiator = hello["params"]["instanceId"].as_str().unwrap_or_default();
    let responder = hello["params"]["expect"].as_str().unwrap_or_default();
    let roundtrip = |v: &serde_json::Value| {
        let r: Receipt = serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{e}: {v}"));
        assert_eq!(
            serde_json::to_value(&r).ok().as_ref(),
            Some(v),
            "field names"
        );
        r
    };
    let send = json(4);
    assert_eq!(send["params"]["fromRun"], serde_json::Value::Null);
    for i in [5, 7] {
        let r = roundtrip(&json(i)["result"]);
        assert_eq!(r.from_peer_id, peer_id(initiator, None));
        assert_eq!(r.to_peer_id, peer_id(responder, None));
        assert_eq!(send["params"]["to"], serde_json::json!(r.to_peer_id));
    }
    let mut note = json(8)["params"].clone();
    let params = note
        .as_object_mut()
        .map(|o| (o.remove("version"), o.remove("fromRun")));
    assert_eq!(
        params,
        Some((Some(serde_json::json!(1)), Some(serde_json::Value::Null)))
    );
    let r = roundtrip(&note);
    assert_eq!(r.state.name(), "consumed");
}

/// The receipt states and their order appear in the page as the messaging layer defines them.
#[test]
fn the_page_documents_every_receipt_state() {
    for state in [
        "accepted", "prepared", "consumed", "replied", "refused", "expired",
    ] {
        assert!(
            PAGE.contains(&format!(".B {state}")) || PAGE.contains(&format!(".BR {state}")),
            "{state}"
        );
    }
    for method in [
        "local.info",
        "local.tool",
        "local.consume",
        "local.prepare",
        "local.reply",
        "local.status",
        "local.wait_receipt",
        "local.run.publish",
        "local.run.retire",
    ] {
        assert!(PAGE.contains(&format!(".B {method}\n")), "{method}");
        assert!(super::access::is_local_only(method), "{method}");
    }
}
