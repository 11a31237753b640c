//! The typed lines say, byte for byte, what the lines read from the answer's JSON object by
//! key said (the `old_*` functions below are those readers, kept as the reference), and the
//! answers the CLI decodes read back as the root wrote them.

use super::*;
use crate::protocol::message::ReceiptState;
use crate::runtime::handler::{Failure, Info, RunPublished};
use crate::toolspec::answer::ErrorCode;
use serde_json::{Value, json};

fn old_s(r: &Value, k: &str, max: usize) -> String {
    r.get(k)
        .and_then(Value::as_str)
        .map(|v| sanitize::line(v, max))
        .unwrap_or_else(|| "-".into())
}

fn old_add_aliases(names: &HashMap<String, String>, r: &mut Value) {
    let Value::Object(m) = r else { return };
    for (id_key, alias_key) in [("toPeerId", "toAlias"), ("fromPeerId", "fromAlias")] {
        let known = m.get(alias_key).is_some_and(Value::is_string);
        let alias = m
            .get(id_key)
            .and_then(Value::as_str)
            .and_then(|id| names.get(id));
        if let (false, Some(alias)) = (known, alias) {
            m.insert(alias_key.into(), Value::from(alias.clone()));
        }
    }
}

fn old_describe_receipt(r: &Value) -> String {
    let seq = r.get("sequence").and_then(Value::as_u64);
    let seq = seq.map(|n| format!(" as #{n}")).unwrap_or_default();
    let err = r
        .get("error")
        .and_then(|e| e.get("code"))
        .or_else(|| r.get("code"));
    let err = err.and_then(Value::as_str).map(|c| format!(" ({c})"));
    let id = match r.get("to").and_then(Value::as_str) {
        Some(_) => old_s(r, "to", 80),
        None => old_s(r, "toPeerId", 80),
    };
    let unmarked = r.get("markReplied").and_then(|e| e.get("code"));
    let unmarked = unmarked.and_then(Value::as_str);
    let unmarked = unmarked.map(|c| format!(" (the original could not be marked replied: {c})"));
    let reason = r.get("reason").and_then(Value::as_str);
    let reason = reason.map(|why| format!(" — {}", sanitize::line(why, 300)));
    let to = match r.get("toAlias").and_then(Value::as_str) {
        Some(alias) => format!("{} ({id})", sanitize::line(alias, 64)),
        None => id,
    };
    format!(
        "{} {to}{seq}: message {} (correlation {}){}{}{}",
        old_s(r, "state", 80),
        old_s(r, "messageId", 80),
        old_s(r, "correlationId", 80),
        err.unwrap_or_default(),
        unmarked.unwrap_or_default(),
        reason.unwrap_or_default()
    )
}

fn old_describe_consumed(r: &Value) -> String {
    let from = match r.get("fromAlias").and_then(Value::as_str) {
        Some(alias) => format!(
            "{} ({})",
            sanitize::line(alias, 64),
            old_s(r, "fromPeerId", 80)
        ),
        None => old_s(r, "fromPeerId", 80),
    };
    let seq = r.get("sequence").and_then(Value::as_u64);
    let seq = seq.map(|n| format!(" #{n}")).unwrap_or_default();
    format!(
        "{}: message {}{seq} from {from}",
        old_s(r, "state", 80),
        old_s(r, "messageId", 80)
    )
}

fn old_describe_message(m: &Value) -> String {
    let seq = m.get("sequence").and_then(Value::as_u64).unwrap_or(0);
    let topic = m.get("topic").and_then(Value::as_str);
    let topic = topic.map(|t| format!(" [{}]", sanitize::line(t, 60)));
    let reply = m.get("replyTo").and_then(Value::as_str);
    let reply = reply.map(|t| format!(" (reply to {})", sanitize::line(t, 60)));
    let body = sanitize::text(m.get("content").and_then(Value::as_str).unwrap_or(""));
    let body: Vec<String> = body.lines().map(|l| format!("  | {l}")).collect();
    format!(
        "#{seq} from {} ({}){}{} — message {} [{}]\n{}",
        old_s(m, "fromAlias", 80),
        old_s(m, "from", 80),
        topic.unwrap_or_default(),
        reply.unwrap_or_default(),
        old_s(m, "messageId", 80),
        old_s(m, "state", 80),
        body.join("\n")
    )
}

fn receipt(state: ReceiptState, code: Option<&str>) -> Receipt {
    Receipt {
        message_id: "m-1\u{1b}[2J".into(),
        from_peer_id: "p-a".into(),
        to_peer_id: "p-b".into(),
        state,
        sequence: 7,
        correlation_id: "c-1".into(),
        at_ms: 9,
        reply_message_id: None,
        code: code.map(str::to_string),
    }
}

fn sent_view(state: &'static str, reason: Option<&str>, code: Option<&str>) -> SentView {
    SentView {
        message_id: "m-2".into(),
        to: "@bob".into(),
        to_peer_id: "p-b".into(),
        to_instance_id: "i-b".into(),
        to_run_id: None,
        correlation_id: "m-2".into(),
        reply_to: None,
        state,
        sequence: (state != "unresolved").then_some(3),
        reply_message_id: None,
        error: code.map(|c| ErrorCode { code: c.into() }),
        created_at_ms: 1,
        updated_at_ms: 2,
        reason: reason.map(str::to_string),
        redelivered_from: None,
    }
}

/// Every answer that prints as a receipt line, with and without the aliases a person sees.
fn receipt_answers() -> Vec<(Value, ReceiptLine)> {
    let send = |alias: Option<&str>| SendAnswer {
        receipt: receipt(ReceiptState::Accepted, None),
        to: "p-b".into(),
        from: "p-a".into(),
        mentions: vec![],
        to_alias: alias.map(str::to_string),
    };
    let reply = |failure: Option<Failure>| ReplyAnswer {
        receipt: receipt(ReceiptState::Accepted, None),
        mark_replied: failure,
    };
    let unmarked = Failure {
        code: "IO_ERROR",
        message: "disk".into(),
    };
    let mut all: Vec<(Value, ReceiptLine)> = Vec::new();
    let mut add = |v: Value, line: ReceiptLine| all.push((v, line));
    add(json!(send(None)), send(None).into());
    add(json!(send(Some("bob\u{7}"))), send(Some("bob\u{7}")).into());
    add(json!(reply(None)), reply(None).into());
    add(
        json!(reply(Some(unmarked))),
        reply(Some(Failure {
            code: "IO_ERROR",
            message: "disk".into(),
        }))
        .into(),
    );
    for r in [
        receipt(ReceiptState::Consumed, None),
        receipt(ReceiptState::Refused, Some("QUEUE_FULL")),
    ] {
        add(json!(r), r.clone().into());
    }
    for v in [
        sent_view("unresolved", Some("waits for\nthe peer"), None),
        sent_view("refused", None, Some("QUEUE_FULL")),
        sent_view("replied", None, None),
    ] {
        add(json!(v), v.clone().into());
    }
    all
}

#[test]
fn receipt_lines_say_what_the_keyed_readers_said() {
    let names: HashMap<String, String> = [
        ("p-a".to_string(), "ada".to_string()),
        ("p-b".into(), "bo\u{1b}b".into()),
    ]
    .into();
    for (value, line) in receipt_answers() {
        assert_eq!(line.describe(), old_describe_receipt(&value), "{value}");
        assert_eq!(
            line.describe_consumed(),
            old_describe_consumed(&value),
            "{value}"
        );
        let (mut value, mut line) = (value, line);
        old_add_aliases(&names, &mut value);
        line.add_aliases(&names);
        assert_eq!(line.describe(), old_describe_receipt(&value), "{value}");
        assert_eq!(
            line.describe_consumed(),
            old_describe_consumed(&value),
            "{value}"
        );
    }
}

#[test]
fn message_lines_say_what_the_keyed_reader_said() {
    let view = MessageView {
        sequence: 4,
        from_alias: None,
        content: "two\nlines \u{1b}[31mred".into(),
        topic: None,
        state: "consumed",
        ..crate::toolspec::answer::tests::message_view()
    };
    let named = MessageView {
        from_alias: Some("ada".into()),
        topic: Some("build\u{7}".into()),
        reply_to: Some("m-0".into()),
        ..view.clone()
    };
    for m in [view, named] {
        assert_eq!(describe_message(&m), old_describe_message(&json!(m)));
    }
}

/// `value` decodes into `T` and encodes back to itself.
fn reads_back<T: serde::Serialize + serde::de::DeserializeOwned>(value: Value) {
    let typed: T = crate::cli::decode(&value).unwrap();
    assert_eq!(serde_json::to_value(&typed).unwrap(), value);
}

#[test]
fn the_root_s_answers_read_back_as_written() {
    let problem = json!({"atMs": 1, "what": "sweep", "code": "IO_ERROR", "message": "disk"});
    let unverified = json!({"instanceId": "i-0", "path": "/s", "recover": "peer recover",
        "code": "RECOVERY_REQUIRED", "message": "torn"});
    let store = |state: &str, recovery: Value| {
        json!({"state": state, "recovery": recovery, "tornTailBytes": 3, "tornTailBatches": 1,
            "poisoned": false, "syncs": 4, "intentSyncs": 1, "writeOuts": 2, "batches": 5,
            "jobs": 6, "compactions": 0, "journalBytes": 7, "snapshotBytes": 8,
            "snapshotBytesWritten": 9, "predecessorsUnverified": [unverified.clone()],
            "redelivered": 0, "recipientSessionsKnown": 1})
    };
    let failed = json!(crate::runtime::core::STORE_FAILED);
    for store in [store("ok", Value::Null), store("failed", failed)] {
        reads_back::<Info>(json!({"peerId": "p-a", "runId": null, "alias": "ada",
            "instanceId": "i-a", "sessionId": "s-1", "capabilities": ["message.send"],
            "eventsDropped": 0, "dumpable": false, "store": store, "problems": [problem.clone()],
            "limits": {"messageBytes": 1, "waitMsMax": 2, "acknowledgementMs": 3,
                "frameBytes": 4}}));
    }
    let reply = json!(ReplyAnswer {
        receipt: receipt(ReceiptState::Accepted, None),
        mark_replied: Some(Failure {
            code: "IO_ERROR",
            message: "disk".into(),
        }),
    });
    reads_back::<ReplyAnswer>(reply);
    reads_back::<RunPublished>(json!({"runId": "r-1", "peerId": "p-r", "alias": "w",
        "capabilities": [], "control": "/c"}));
    let mut sideways = problem;
    sideways["code"] = json!("NOT_A_CODE");
    assert!(crate::cli::decode::<crate::runtime::core::Problem>(&sideways).is_err());
}
