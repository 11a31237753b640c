//! State-machine tests: one per custody rule, driven without files or clocks.
#![allow(clippy::field_reassign_with_default)]

use super::*;
use crate::config::Limits;
use crate::error::Code;

const ME: &str = "p-me";
const CHILD: &str = "p-child";
const NOW: u64 = 1_000_000;

fn alice() -> Principal {
    Principal {
        instance_id: "i-alice".into(),
        run_id: None,
        peer_id: "p-alice".into(),
    }
}

fn alice_restarted() -> Principal {
    Principal {
        instance_id: "i-alice2".into(),
        run_id: None,
        peer_id: "p-alice2".into(),
    }
}

fn bob() -> Principal {
    Principal {
        instance_id: "i-bob".into(),
        run_id: None,
        peer_id: "p-bob".into(),
    }
}

fn target(p: &Principal) -> TargetRef {
    TargetRef {
        peer_id: p.peer_id.clone(),
        instance_id: p.instance_id.clone(),
        run_id: p.run_id.clone(),
    }
}

fn recipients() -> Recipients {
    Recipients::with_live(&[ME, CHILD])
}

fn send(id: &str, content: &str) -> InboundSend {
    InboundSend {
        origin: None,
        to_peer_id: ME.into(),
        message_id: id.into(),
        body: MessageBody {
            content: content.into(),
            topic: None,
            reply_to: None,
        },
        correlation_id: None,
        expires_at_ms: None,
        from_alias: None,
    }
}

fn out(id: &str, to: &Principal) -> OutboundSend {
    OutboundSend {
        from_peer_id: ME.into(),
        to: target(to),
        message_id: id.into(),
        body: MessageBody {
            content: format!("hello {id}"),
            topic: None,
            reply_to: None,
        },
        correlation_id: None,
        expires_at_ms: None,
    }
}

/// The receipt of a message from us that `to` accepted as its first, with the id as its
/// correlation.
fn accepted_by(to: &str, id: &str) -> Receipt {
    Receipt {
        message_id: id.into(),
        from_peer_id: ME.into(),
        to_peer_id: to.into(),
        state: ReceiptState::Accepted,
        sequence: 1,
        correlation_id: id.into(),
        at_ms: NOW,
        reply_message_id: None,
        code: None,
    }
}

fn machine() -> Machine {
    Machine::new(Limits::default())
}

fn code<T: std::fmt::Debug>(r: crate::error::Result<T>) -> Code {
    r.expect_err("expected an error").code
}

#[test]
fn accept_assigns_per_recipient_sequences_and_default_correlation() {
    let mut m = machine();
    let (r1, recs) = m
        .accept(&alice(), send("m1", "a"), &recipients(), NOW)
        .unwrap();
    assert_eq!(
        (r1.sequence, r1.state, r1.correlation_id.as_str()),
        (1, ReceiptState::Accepted, "m1")
    );
    assert_eq!(recs.len(), 1);
    let mut s = send("m2", "b");
    s.to_peer_id = CHILD.into();
    s.correlation_id = Some("c-9".into());
    let (r2, _) = m.accept(&bob(), s, &recipients(), NOW).unwrap();
    assert_eq!(
        (
            r2.sequence,
            r2.correlation_id.as_str(),
            r2.to_peer_id.as_str()
        ),
        (1, "c-9", CHILD)
    );
    let (r3, _) = m
        .accept(&bob(), send("m3", "c"), &recipients(), NOW)
        .unwrap();
    assert_eq!(r3.sequence, 2);
    let e = m.state().inbox().next().unwrap();
    assert_eq!(e.expires_at_ms, NOW + Limits::default().expiry_ms);
}

#[test]
fn retry_returns_original_receipt_without_second_entry() {
    let mut m = machine();
    let (r1, _) = m
        .accept(&alice(), send("m1", "a"), &recipients(), NOW)
        .unwrap();
    let (r2, recs) = m
        .accept(&alice(), send("m1", "a"), &recipients(), NOW + 5)
        .unwrap();
    assert_eq!(r1, r2);
    assert!(recs.is_empty());
    assert_eq!(m.state().inbox().count(), 1);
    // The same id from another sender, or to another recipient, is a different message.
    let (r3, _) = m
        .accept(&bob(), send("m1", "a"), &recipients(), NOW)
        .unwrap();
    assert_eq!(r3.sequence, 2);
}

#[test]
fn dedup_precedes_rate_and_capacity() {
    let mut limits = Limits::default();
    limits.inbox_messages = 1;
    limits.rate_burst = 1;
    let mut m = Machine::new(limits);
    let (r1, _) = m
        .accept(&alice(), send("m1", "a"), &recipients(), NOW)
        .unwrap();
    assert_eq!(
        code(m.accept(&alice(), send("m2", "b"), &recipients(), NOW)),
        Code::RateLimited
    );
    let (again, _) = m
        .accept(&alice(), send("m1", "a"), &recipients(), NOW)
        .unwrap();
    assert_eq!(again, r1);
}

#[test]
fn changed_content_topic_or_reply_conflicts() {
    let mut m = machine();
    m.accept(&alice(), send("m1", "a"), &recipients(), NOW)
        .unwrap();
    assert_eq!(
        code(m.accept(&alice(), send("m1", "b"), &recipients(), NOW)),
        Code::MessageIdConflict
    );
    let mut s = send("m1", "a");
    s.body.topic = Some("t".into());
    assert_eq!(
        code(m.accept(&alice(), s, &recipients(), NOW)),
        Code::MessageIdConflict
    );
    let mut m2 = machine();
    m2.outbox_intent(out("x1", &alice()), NOW).unwrap();
    let mut o = out("x1", &alice());
    o.body.content = "changed".into();
    assert_eq!(code(m2.outbox_intent(o, NOW)), Code::MessageIdConflict);
    let (same, recs) = m2.outbox_intent(out("x1", &alice()), NOW).unwrap();
    assert!(recs.is_empty());
    assert_eq!(same.message_id, "x1");
}

#[test]
fn liveness_size_and_ids_are_checked() {
    let mut m = machine();
    let mut rec = recipients();
    rec.ended.insert("p-gone".into());
    let mut s = send("m1", "a");
    s.to_peer_id = "p-gone".into();
    assert_eq!(
        code(m.accept(&alice(), s.clone(), &rec, NOW)),
        Code::TargetEnded
    );
    s.to_peer_id = "p-unknown".into();
    assert_eq!(code(m.accept(&alice(), s, &rec, NOW)), Code::NotFound);
    let big = "é".repeat(4_001); // 8,002 UTF-8 bytes, 4,001 chars
    assert_eq!(
        code(m.accept(&alice(), send("m2", &big), &rec, NOW)),
        Code::MessageTooLarge
    );
    let edge = "x".repeat(8_000);
    m.accept(&alice(), send("m3", &edge), &rec, NOW).unwrap();
    assert_eq!(
        code(m.accept(&alice(), send("bad id", "a"), &rec, NOW)),
        Code::InvalidRequest
    );
}

#[test]
fn expiry_rules() {
    let mut m = machine();
    let lim = Limits::default();
    let mut s = send("m1", "a");
    s.expires_at_ms = Some(NOW);
    assert_eq!(
        code(m.accept(&alice(), s.clone(), &recipients(), NOW)),
        Code::Expired
    );
    s.expires_at_ms = Some(NOW + lim.max_expiry_ms + 1);
    assert_eq!(
        code(m.accept(&alice(), s.clone(), &recipients(), NOW)),
        Code::Expired
    );
    s.expires_at_ms = Some(NOW + lim.max_expiry_ms);
    m.accept(&alice(), s, &recipients(), NOW).unwrap();
    // Sweep expires the unconsumed message and queues a receipt for its sender.
    let (rep, recs) = m.sweep(NOW + lim.max_expiry_ms).unwrap();
    assert_eq!(rep.expired_inbox, 1);
    assert!(!recs.is_empty());
    assert_eq!(
        m.status(&alice(), "m1", ME, NOW).unwrap().state,
        ReceiptState::Expired
    );
    let pushes = m.pending_pushes(10);
    assert_eq!(pushes.len(), 1);
    assert_eq!(
        (pushes[0].receipt.state, &pushes[0].to),
        (ReceiptState::Expired, &alice())
    );
}

#[test]
fn queue_full_at_inbox_limit_and_retry_after_consumption() {
    let mut limits = Limits::default();
    limits.rate_burst = 1_000;
    let mut m = Machine::new(limits.clone());
    for i in 0..limits.inbox_messages {
        m.accept(&alice(), send(&format!("m{i}"), "x"), &recipients(), NOW)
            .unwrap();
    }
    let thirty_third = send("m-33", "x");
    assert_eq!(
        code(m.accept(&alice(), thirty_third.clone(), &recipients(), NOW)),
        Code::QueueFull
    );
    // Another recipient of the same root has its own queue.
    let mut s = send("m-child", "x");
    s.to_peer_id = CHILD.into();
    m.accept(&alice(), s, &recipients(), NOW).unwrap();
    m.mark(ME, &MessageRef::Sequence(1), ReceiptState::Consumed, NOW)
        .unwrap();
    let (r, _) = m
        .accept(&alice(), thirty_third, &recipients(), NOW)
        .unwrap();
    assert_eq!(r.sequence, limits.inbox_messages + 1);
}

#[test]
fn storage_budget_refuses_before_dropping_anything() {
    let mut limits = Limits::default();
    limits.rate_burst = 1_000;
    limits.inbox_messages = 1_000;
    limits.storage_bytes = 64 * 1024;
    limits.journal_bytes = 16 * 1024;
    let mut m = Machine::new(limits);
    let mut accepted = 0;
    let err = loop {
        match m.accept(
            &alice(),
            send(&format!("m{accepted}"), &"y".repeat(2_000)),
            &recipients(),
            NOW,
        ) {
            Ok(_) => accepted += 1,
            Err(e) => break e,
        }
    };
    assert_eq!(err.code, Code::QueueFull);
    assert!(accepted > 0);
    assert_eq!(m.state().inbox().count(), accepted);
    assert!(m.state().live_bytes() <= m.storage_budget());
    // Transitions of admitted messages are never refused for space.
    for seq in 1..=accepted as u64 {
        m.mark(ME, &MessageRef::Sequence(seq), ReceiptState::Consumed, NOW)
            .unwrap();
    }
}

#[test]
fn rate_limit_refills_over_time() {
    let mut limits = Limits::default();
    limits.rate_burst = 2;
    limits.rate_per_second = 10;
    let mut m = Machine::new(limits);
    m.accept(&alice(), send("m1", "a"), &recipients(), NOW)
        .unwrap();
    m.accept(&alice(), send("m2", "a"), &recipients(), NOW)
        .unwrap();
    assert_eq!(
        code(m.accept(&alice(), send("m3", "a"), &recipients(), NOW)),
        Code::RateLimited
    );
    // Another sender instance has its own bucket.
    m.accept(&bob(), send("m3", "a"), &recipients(), NOW)
        .unwrap();
    assert_eq!(
        code(m.accept(&alice(), send("m3", "a"), &recipients(), NOW + 99)),
        Code::RateLimited
    );
    m.accept(&alice(), send("m3", "a"), &recipients(), NOW + 100)
        .unwrap();
}

#[test]
fn receipts_never_regress_at_the_recipient() {
    let mut m = machine();
    m.accept(&alice(), send("m1", "a"), &recipients(), NOW)
        .unwrap();
    let seq = MessageRef::Sequence(1);
    let (r, _) = m
        .record_context(ME, &seq, "shown in turn 4", NOW + 1)
        .unwrap();
    assert_eq!(r.state, ReceiptState::Prepared);
    let (r, _) = m.mark(ME, &seq, ReceiptState::Consumed, NOW + 2).unwrap();
    assert_eq!(r.state, ReceiptState::Consumed);
    let (r, recs) = m.mark(ME, &seq, ReceiptState::Prepared, NOW + 3).unwrap();
    assert_eq!((r.state, recs.len()), (ReceiptState::Consumed, 0));
    // Expiry after consumption changes nothing.
    m.sweep(NOW + 10 * 3_600_000).unwrap();
    assert_eq!(
        m.status(&alice(), "m1", ME, NOW).unwrap().state,
        ReceiptState::Consumed
    );
    let ctx = m.state().context_of(ME, 1).unwrap();
    assert_eq!(
        (ctx.note.as_str(), ctx.implicit),
        ("shown in turn 4", false)
    );
    // A push per transition, in order.
    let states: Vec<ReceiptState> = m
        .pending_pushes(10)
        .iter()
        .map(|p| p.receipt.state)
        .collect();
    assert_eq!(states, vec![ReceiptState::Prepared, ReceiptState::Consumed]);
    let cursor = m.pending_pushes(1)[0].cursor;
    m.receipt_delivered(cursor).unwrap();
    assert_eq!(m.pending_pushes(10).len(), 1);
}

#[test]
fn a_page_is_consumed_in_one_write_and_stops_at_an_expired_message() {
    let mut m = machine();
    let r = recipients();
    for id in ["c1", "c2", "c3"] {
        m.accept(&alice(), send(id, "x"), &r, NOW).unwrap();
    }
    m.record_context(ME, &MessageRef::Sequence(2), "", NOW)
        .unwrap();
    let page = vec![
        (MessageRef::Sequence(1), false),
        (MessageRef::Sequence(2), true),
    ];
    let ((receipts, failed), records) = m.consume_page(ME, &page, "read", NOW).unwrap();
    assert!(failed.is_none());
    assert_eq!(receipts.len(), 2);
    assert!(receipts.iter().all(|r| r.state == ReceiptState::Consumed));
    // One context record for the unmarked message, none for the marked one.
    let contexts = records
        .iter()
        .filter(|r| matches!(r, Record::Context { .. }))
        .count();
    assert_eq!(contexts, 1);
    // Past its expiry: the page stops there with the expired receipt, nothing after it moves.
    let late = NOW + Limits::default().max_expiry_ms + 1;
    let page = vec![
        (MessageRef::Sequence(3), false),
        (MessageRef::Sequence(99), false),
    ];
    let ((receipts, failed), _) = m.consume_page(ME, &page, "read", late).unwrap();
    assert!(failed.is_none());
    assert_eq!(receipts.len(), 1);
    assert_eq!(receipts[0].state, ReceiptState::Expired);
    // An unknown message ends the page with its error; earlier ones stay consumed.
    let page = vec![(MessageRef::Sequence(99), false)];
    let ((receipts, failed), _) = m.consume_page(ME, &page, "read", NOW).unwrap();
    assert!(receipts.is_empty());
    assert_eq!(failed.unwrap().code, Code::NotFound);
}

#[test]
fn consuming_without_prepare_records_implicit_context() {
    let mut m = machine();
    m.accept(&alice(), send("m1", "a"), &recipients(), NOW)
        .unwrap();
    let (_, recs) = m
        .mark(
            ME,
            &MessageRef::Id("m1".into()),
            ReceiptState::Consumed,
            NOW,
        )
        .unwrap();
    assert!(
        matches!(recs[0], Record::Context { .. }),
        "context must precede consumption: {recs:?}"
    );
    assert!(m.state().context_of(ME, 1).unwrap().implicit);
    assert_eq!(
        code(m.mark(ME, &MessageRef::Sequence(9), ReceiptState::Consumed, NOW)),
        Code::NotFound
    );
    assert_eq!(
        code(m.mark(ME, &MessageRef::Sequence(1), ReceiptState::Replied, NOW)),
        Code::Usage
    );
}

/// A receipt for a message this store never recorded (its intent lost with a power loss while
/// the recipient's copy survived) is refused with NOT_FOUND: no entry is invented, no record
/// written, and the recipient's push treats that answer as final.
#[test]
fn a_receipt_for_an_unknown_message_is_not_found_and_changes_nothing() {
    let mut m = machine();
    let before = m.state().clone();
    let r = Receipt {
        message_id: "never-sent".into(),
        from_peer_id: ME.into(),
        to_peer_id: "p-alice".into(),
        state: ReceiptState::Consumed,
        sequence: 3,
        correlation_id: "never-sent".into(),
        at_ms: NOW,
        reply_message_id: None,
        code: None,
    };
    assert_eq!(code(m.record_receipt(&alice(), &r, NOW)), Code::NotFound);
    assert_eq!(*m.state(), before);
}

#[test]
fn sender_receipts_never_regress_and_need_the_exact_target() {
    let mut m = machine();
    m.outbox_intent(out("x1", &alice()), NOW).unwrap();
    assert_eq!(m.route_pending(ME, "p-alice").len(), 1);
    let mut r = Receipt {
        message_id: "x1".into(),
        from_peer_id: ME.into(),
        to_peer_id: "p-alice".into(),
        state: ReceiptState::Accepted,
        sequence: 7,
        correlation_id: "x1".into(),
        at_ms: NOW,
        reply_message_id: None,
        code: None,
    };
    m.outbox_result("p-alice", "x1", Ok(r.clone()), NOW)
        .unwrap();
    assert!(m.route_pending(ME, "p-alice").is_empty());
    r.state = ReceiptState::Consumed;
    // A receipt from another incarnation is refused.
    let mut impostor = alice();
    impostor.instance_id = "i-other".into();
    assert_eq!(
        code(m.record_receipt(&impostor, &r, NOW)),
        Code::InvalidRequest
    );
    let (e, _) = m.record_receipt(&alice(), &r, NOW).unwrap();
    assert_eq!(e.receipt.as_ref().unwrap().state, ReceiptState::Consumed);
    // Late refusal / expiry / older receipts do not overwrite consumption.
    let (e, recs) = m
        .outbox_result("p-alice", "x1", Err(Code::ScopeDenied), NOW)
        .unwrap();
    assert!(recs.is_empty());
    assert_eq!(e.receipt.as_ref().unwrap().state, ReceiptState::Consumed);
    r.state = ReceiptState::Prepared;
    let (e, _) = m.record_receipt(&alice(), &r, NOW).unwrap();
    assert_eq!(e.receipt.as_ref().unwrap().state, ReceiptState::Consumed);
    // Events: accepted then consumed, readable by the sending local peer.
    let q = ReadQuery {
        recipient_peer_id: ME.into(),
        events_after: Some(0),
        ..Default::default()
    };
    let states: Vec<ReceiptState> = m
        .read(&q, NOW)
        .events
        .iter()
        .map(|e| e.receipt.state)
        .collect();
    assert_eq!(states, vec![ReceiptState::Accepted, ReceiptState::Consumed]);
}

#[test]
fn resolved_entries_leave_the_route_index_and_keep_only_a_digest() {
    let mut m = machine();
    let accepted = |id: &str| accepted_by("p-alice", id);
    let long = |id: &str| {
        let mut o = out(id, &alice());
        o.body.content = format!("{id} {}", "x".repeat(500));
        o
    };
    for id in ["h1", "h2", "h3"] {
        m.outbox_intent(long(id), NOW).unwrap();
    }
    m.outbox_intent(out("b1", &bob()), NOW).unwrap();
    let ids = |m: &Machine| -> Vec<String> {
        m.route_pending(ME, "p-alice")
            .into_iter()
            .map(|e| e.message_id)
            .collect()
    };
    assert_eq!(ids(&m), ["h1", "h2", "h3"]);
    assert_eq!(m.route_head(ME, "p-alice").unwrap().message_id, "h1");
    assert_eq!(m.pending_routes().len(), 2);
    m.outbox_result("p-alice", "h2", Ok(accepted("h2")), NOW)
        .unwrap();
    assert_eq!(ids(&m), ["h1", "h3"]);
    // Accepted only: the body stays, the other copy of the message being the recipient's.
    let e = m.state().outbox_get("p-alice", "h2").unwrap();
    assert_eq!(e.body.content, long("h2").body.content);
    let mut consumed = accepted("h2");
    consumed.state = ReceiptState::Consumed;
    consumed.at_ms = NOW + 1;
    let before = m.state().live_bytes();
    m.record_receipt(&alice(), &consumed, NOW + 1).unwrap();
    let e = m.state().outbox_get("p-alice", "h2").unwrap();
    assert!(e.body.content.is_empty());
    assert!(e.has_content(&long("h2").body.content) && !e.has_content(&long("h1").body.content));
    // The dropped body no longer counts against the storage budget.
    assert!(m.state().live_bytes() < before);
    // A retry with the same content gets the original; other content still conflicts.
    let (again, recs) = m.outbox_intent(long("h2"), NOW).unwrap();
    assert!(recs.is_empty() && again.receipt.is_some());
    let mut other = long("h2");
    other.body.content = "changed".into();
    assert_eq!(code(m.outbox_intent(other, NOW)), Code::MessageIdConflict);
    for id in ["h1", "h3"] {
        m.outbox_result("p-alice", id, Ok(accepted(id)), NOW)
            .unwrap();
    }
    assert!(ids(&m).is_empty() && m.route_head(ME, "p-alice").is_none());
    assert_eq!(
        m.pending_routes(),
        vec![(ME.to_string(), "p-bob".to_string())]
    );
    assert_eq!(m.state().outbox_by_id("h2").count(), 1);
    // The indexes are derived: a snapshot image rebuilds exactly the same state.
    assert_eq!(State::from_image(m.state().image()), *m.state());
}

#[test]
fn retryable_failures_leave_the_entry_unresolved_refusals_end_it() {
    let mut m = machine();
    m.outbox_intent(out("x1", &alice()), NOW).unwrap();
    m.outbox_intent(out("x2", &alice()), NOW).unwrap();
    for c in [
        Code::PeerOffline,
        Code::Timeout,
        Code::Disconnected,
        Code::QueueFull,
        Code::RateLimited,
    ] {
        let (e, recs) = m.outbox_result("p-alice", "x1", Err(c), NOW).unwrap();
        assert!(e.receipt.is_none() && recs.is_empty(), "{c}");
    }
    let (e, _) = m
        .outbox_result("p-alice", "x1", Err(Code::MessageTooLarge), NOW)
        .unwrap();
    let r = e.receipt.unwrap();
    assert_eq!(
        (r.state, r.code.as_deref()),
        (ReceiptState::Refused, Some("MESSAGE_TOO_LARGE"))
    );
    let ids: Vec<String> = m
        .route_pending(ME, "p-alice")
        .into_iter()
        .map(|e| e.message_id)
        .collect();
    assert_eq!(ids, vec!["x2".to_string()]);
}

#[test]
fn a_retry_from_another_incarnation_of_the_same_session_gets_the_original() {
    let mut m = machine();
    let mut first = send("m1", "hello");
    first.origin = Some("s-alice".into());
    let (r1, _) = m
        .accept(&alice(), first.clone(), &recipients(), NOW)
        .unwrap();
    // The restarted sender (same session, new instance) retries: no second entry, custody
    // (and later receipts) move to it.
    let (r2, recs) = m
        .accept(&alice_restarted(), first.clone(), &recipients(), NOW)
        .unwrap();
    assert_eq!(
        (r2.sequence, r2.state),
        (r1.sequence, ReceiptState::Accepted)
    );
    assert_eq!(r2.from_peer_id, alice_restarted().peer_id);
    assert_eq!(recs.len(), 1);
    assert_eq!(m.state().inbox().count(), 1);
    assert_eq!(m.state().inbox().next().unwrap().from, alice_restarted());
    // The old incarnation's own retry no longer matches by instance but still by origin.
    let (r3, _) = m
        .accept(&alice(), first.clone(), &recipients(), NOW)
        .unwrap();
    assert_eq!(r3.sequence, r1.sequence);
    // New content under the same id from the session: a conflict.
    let mut changed = first.clone();
    changed.body.content = "other".into();
    assert_eq!(
        code(m.accept(&alice_restarted(), changed, &recipients(), NOW)),
        Code::MessageIdConflict
    );
    // Another session's message with the same id is its own message.
    let mut other = first.clone();
    other.origin = Some("s-bob".into());
    let (r4, _) = m.accept(&bob(), other, &recipients(), NOW).unwrap();
    assert_ne!(r4.sequence, r1.sequence);
    // Replay of the journal reproduces the indexes.
    let image = m.state().image();
    assert_eq!(State::from_image(image.clone()).image(), image);
}

#[test]
fn a_recipient_receipt_outranks_a_failure_it_never_confirmed() {
    let mut m = machine();
    m.outbox_intent(out("x1", &alice()), NOW).unwrap();
    // Our own expiry of an entry that never got an answer: sequence 0.
    m.sweep(NOW + Limits::default().expiry_ms + 1).unwrap();
    let e = m.outbox_entry("p-alice", "x1").unwrap().clone();
    assert_eq!(
        e.receipt.as_ref().map(|r| r.state),
        Some(ReceiptState::Expired)
    );
    // The recipient did hold it (its custody answer was lost) and reports it consumed.
    let consumed = Receipt {
        message_id: "x1".into(),
        from_peer_id: ME.into(),
        to_peer_id: "p-alice".into(),
        state: ReceiptState::Consumed,
        sequence: 7,
        correlation_id: "x1".into(),
        at_ms: NOW,
        reply_message_id: None,
        code: None,
    };
    let (e, recs) = m.record_receipt(&alice(), &consumed, NOW).unwrap();
    assert_eq!(
        e.receipt.as_ref().map(|r| r.state),
        Some(ReceiptState::Consumed)
    );
    assert!(!recs.is_empty());
    // A confirmed failure (the recipient's own expiry, sequence above 0) stays final.
    let mut expired = consumed.clone();
    expired.state = ReceiptState::Expired;
    let mut m2 = machine();
    m2.outbox_intent(out("x1", &alice()), NOW).unwrap();
    m2.record_receipt(&alice(), &expired, NOW).unwrap();
    let (e, recs) = m2.record_receipt(&alice(), &consumed, NOW).unwrap();
    assert_eq!(
        e.receipt.as_ref().map(|r| r.state),
        Some(ReceiptState::Expired)
    );
    assert!(recs.is_empty());
}

#[test]
fn replies_are_validated_on_both_sides() {
    // Our side sent x1 to alice; alice's reply is accepted and keeps our correlation.
    let mut m = machine();
    let mut o = out("x1", &alice());
    o.correlation_id = Some("c-1".into());
    m.outbox_intent(o, NOW).unwrap();
    let mut reply = send("r1", "answer");
    reply.body.reply_to = Some("x1".into());
    let (r, _) = m
        .accept(&alice(), reply.clone(), &recipients(), NOW)
        .unwrap();
    assert_eq!(r.correlation_id, "c-1");
    // Another peer cannot reply to it; nor can a restarted alice; nor a reply to an unknown id.
    let mut r2 = reply.clone();
    r2.message_id = "r2".into();
    assert_eq!(
        code(m.accept(&bob(), r2.clone(), &recipients(), NOW)),
        Code::InvalidReply
    );
    assert_eq!(
        code(m.accept(&alice_restarted(), r2.clone(), &recipients(), NOW)),
        Code::InvalidReply
    );
    r2.body.reply_to = Some("nope".into());
    assert_eq!(
        code(m.accept(&alice(), r2, &recipients(), NOW)),
        Code::InvalidReply
    );
    // A different correlation id under the same conversation is refused.
    let mut r3 = reply.clone();
    r3.message_id = "r3".into();
    r3.correlation_id = Some("c-other".into());
    assert_eq!(
        code(m.accept(&alice(), r3, &recipients(), NOW)),
        Code::InvalidReply
    );
    // The reply went to ME; the child cannot claim it as a reply to its own message.
    let mut r4 = reply.clone();
    r4.message_id = "r4".into();
    r4.to_peer_id = CHILD.into();
    assert_eq!(
        code(m.accept(&alice(), r4, &recipients(), NOW)),
        Code::InvalidReply
    );
}

#[test]
fn sender_side_reply_needs_a_message_from_that_exact_incarnation() {
    let mut m = machine();
    let mut s = send("m1", "question");
    s.correlation_id = Some("c-7".into());
    m.accept(&alice(), s, &recipients(), NOW).unwrap();
    let mut o = out("x1", &alice());
    o.body.reply_to = Some("m1".into());
    let (e, _) = m.outbox_intent(o, NOW).unwrap();
    assert_eq!(e.correlation_id, "c-7");
    let mut o2 = out("x2", &alice_restarted());
    o2.body.reply_to = Some("m1".into());
    assert_eq!(code(m.outbox_intent(o2, NOW)), Code::InvalidReply);
    let mut o3 = out("x3", &bob());
    o3.body.reply_to = Some("m1".into());
    assert_eq!(code(m.outbox_intent(o3, NOW)), Code::InvalidReply);
    // Custody of the reply marks the question replied (with an implicit context marker).
    let r = Receipt {
        message_id: "x1".into(),
        from_peer_id: ME.into(),
        to_peer_id: "p-alice".into(),
        state: ReceiptState::Accepted,
        sequence: 3,
        correlation_id: "c-7".into(),
        at_ms: NOW,
        reply_message_id: None,
        code: None,
    };
    m.outbox_result("p-alice", "x1", Ok(r), NOW + 1).unwrap();
    let st = m.status(&alice(), "m1", ME, NOW).unwrap();
    assert_eq!(
        (st.state, st.reply_message_id.as_deref()),
        (ReceiptState::Replied, Some("x1"))
    );
    assert!(m.state().context_of(ME, 1).unwrap().implicit);
}

#[test]
fn status_only_for_the_original_sender() {
    let mut m = machine();
    m.accept(&alice(), send("m1", "a"), &recipients(), NOW)
        .unwrap();
    assert_eq!(
        m.status(&alice(), "m1", ME, NOW).unwrap().state,
        ReceiptState::Accepted
    );
    assert_eq!(code(m.status(&bob(), "m1", ME, NOW)), Code::NotFound);
    assert_eq!(
        code(m.status(&alice_restarted(), "m1", ME, NOW)),
        Code::NotFound
    );
}

#[test]
fn retention_removes_only_final_records() {
    let mut limits = Limits::default();
    limits.retention_ms = 1_000;
    limits.max_expiry_ms = 1_000_000_000;
    let mut m = Machine::new(limits);
    let long = |id: &str| {
        let mut s = send(id, "a");
        s.expires_at_ms = Some(NOW + 500_000_000);
        s
    };
    m.accept(&alice(), long("keep-accepted"), &recipients(), NOW)
        .unwrap();
    m.accept(&alice(), long("keep-prepared"), &recipients(), NOW)
        .unwrap();
    m.accept(&alice(), long("drop-consumed"), &recipients(), NOW)
        .unwrap();
    m.mark(ME, &MessageRef::Sequence(2), ReceiptState::Prepared, NOW)
        .unwrap();
    m.mark(ME, &MessageRef::Sequence(3), ReceiptState::Consumed, NOW)
        .unwrap();
    m.outbox_intent(out("unresolved", &alice()), NOW).unwrap();
    let (rep, _) = m.sweep(NOW + 5_000).unwrap();
    assert_eq!(rep.removed_inbox, 1);
    let left: Vec<&str> = m.state().inbox().map(|e| e.message_id.as_str()).collect();
    assert_eq!(left, vec!["keep-accepted", "keep-prepared"]);
    assert_eq!(m.state().outbox().count(), 1);
    assert!(m.state().context_of(ME, 3).is_none());
    // The removed message's dedup identity is gone with it; the held ones still dedup.
    let (r, recs) = m
        .accept(&alice(), long("keep-accepted"), &recipients(), NOW + 5_000)
        .unwrap();
    assert_eq!((r.sequence, recs.len()), (1, 0));
}

#[test]
fn read_filters_pages_and_cursors() {
    let mut limits = Limits::default();
    limits.directory_page_size = 2;
    let mut m = Machine::new(limits);
    for (i, p) in [alice(), bob(), alice(), alice()].iter().enumerate() {
        m.accept(p, send(&format!("m{i}"), "a"), &recipients(), NOW)
            .unwrap();
    }
    let q = ReadQuery {
        recipient_peer_id: ME.into(),
        limit: 10,
        ..Default::default()
    };
    let page = m.read(&q, NOW);
    assert_eq!(
        (page.messages.len(), page.more, page.next_after),
        (2, true, 2)
    );
    let page2 = m.read(
        &ReadQuery {
            after: Some(page.next_after),
            ..q.clone()
        },
        NOW,
    );
    assert_eq!((page2.messages.len(), page2.more), (2, false));
    let from_bob = m.read(
        &ReadQuery {
            from: Some("p-bob".into()),
            ..q.clone()
        },
        NOW,
    );
    assert_eq!(from_bob.messages.len(), 1);
    let by_id = m.read(
        &ReadQuery {
            message_id: Some("m3".into()),
            ..q.clone()
        },
        NOW,
    );
    assert_eq!(by_id.messages[0].sequence, 4);
    assert!(
        m.read(
            &ReadQuery {
                recipient_peer_id: CHILD.into(),
                ..q
            },
            NOW
        )
        .messages
        .is_empty()
    );
}

#[test]
fn route_queue_serializes_and_backs_off() {
    let limits = Limits::default();
    let mut m = machine();
    m.outbox_intent(out("x1", &alice()), NOW).unwrap();
    m.outbox_intent(out("x2", &alice()), NOW).unwrap();
    let view = m.route_view(ME, "p-alice", None);
    let pending = view.head.as_ref();
    let mut q = RouteQueue::new();
    assert_eq!(
        q.next(pending, &limits, NOW),
        RouteDecision::Send("x1".into())
    );
    assert!(q.may_send(pending, "x1"));
    assert!(
        !q.may_send(pending, "x2"),
        "a later message never overtakes the head"
    );
    let mut t = NOW;
    for failure in 1..=limits.route_retries {
        q.failed("x1", &limits, t);
        let wait = RouteQueue::backoff_ms(&limits, failure);
        assert_eq!(
            q.next(pending, &limits, t),
            RouteDecision::WaitUntil(t + wait)
        );
        t += wait;
        assert_eq!(
            q.next(pending, &limits, t),
            RouteDecision::Send("x1".into())
        );
    }
    assert_eq!(
        RouteQueue::backoff_ms(&limits, limits.route_retries),
        limits.acknowledgement_ms
    );
    q.failed("x1", &limits, t);
    assert_eq!(
        q.next(pending, &limits, t + limits.acknowledgement_ms),
        RouteDecision::GaveUp("x1".into())
    );
    q.reset();
    assert_eq!(
        q.next(pending, &limits, t),
        RouteDecision::Send("x1".into())
    );
    m.outbox_result("p-alice", "x1", Err(Code::ScopeDenied), t)
        .unwrap();
    q.resolved("x1");
    let view = m.route_view(ME, "p-alice", None);
    assert_eq!(
        q.next(view.head.as_ref(), &limits, t),
        RouteDecision::Send("x2".into())
    );
    assert_eq!(q.next(None, &limits, t), RouteDecision::Idle);
}

/// A route's driver reads its head and whether the message it waits for is still
/// unresolved there, as the whole list of unresolved entries would tell it, whatever the
/// backlog behind the head.
#[test]
fn a_route_view_is_the_head_of_the_unresolved_list() {
    let mut m = machine();
    let ids: Vec<String> = (0..6).map(|i| format!("q{i}")).collect();
    for id in &ids {
        m.outbox_intent(out(id, &alice()), NOW).unwrap();
    }
    m.outbox_intent(out("b1", &bob()), NOW).unwrap();
    let check = |m: &Machine| {
        let pending = m.route_pending(ME, "p-alice");
        for want in ids.iter().map(String::as_str).chain(["b1", "nope"]) {
            let view = m.route_view(ME, "p-alice", Some(want));
            assert_eq!(view.head.as_ref(), pending.first(), "{want}");
            assert_eq!(
                view.want_pending,
                pending.iter().any(|e| e.message_id == want),
                "{want}"
            );
        }
        assert!(!m.route_view(ME, "p-alice", None).want_pending);
        // Another sender's route to the same target holds none of them.
        assert!(!m.route_view("p-other", "p-alice", Some("q1")).want_pending);
    };
    check(&m);
    // Resolved at the head, in the middle, and at the end.
    for id in ["q0", "q3", "q5"] {
        m.outbox_result("p-alice", id, Err(Code::ScopeDenied), NOW)
            .unwrap();
        check(&m);
    }
    assert_eq!(
        m.route_view(ME, "p-alice", None).head.map(|e| e.message_id),
        Some("q1".to_string())
    );
}

#[test]
fn replaying_records_rebuilds_the_same_state() {
    let mut m = machine();
    let mut log = Vec::new();
    log.extend(
        m.accept(&alice(), send("m1", "a"), &recipients(), NOW)
            .unwrap()
            .1,
    );
    log.extend(m.outbox_intent(out("x1", &bob()), NOW).unwrap().1);
    log.extend(
        m.mark(ME, &MessageRef::Sequence(1), ReceiptState::Consumed, NOW)
            .unwrap()
            .1,
    );
    log.extend(m.sweep(NOW + 100_000_000).unwrap().1);
    let mut replay = State::default();
    for r in &log {
        replay.apply(r);
    }
    assert_eq!(replay.image(), m.state().image());
    assert_eq!(
        State::from_image(m.state().image()).image(),
        m.state().image()
    );
    assert_eq!(
        State::from_image(m.state().image()).live_bytes(),
        m.state().live_bytes()
    );
}

/// An accept's record and the state share one copy of the message; a later change copies it
/// only while the record still holds it (the record keeps what was accepted, for the journal).
#[test]
fn an_accepted_entry_is_shared_with_its_record_and_copied_only_on_a_change() {
    let mut m = machine();
    let (_, recs) = m
        .accept(&alice(), send("m1", "a"), &recipients(), NOW)
        .unwrap();
    let Some(Record::InboxAdded { entry }) = recs.first() else {
        panic!("an accept adds an inbox entry: {recs:?}");
    };
    let key = (entry.recipient_peer_id.clone(), entry.sequence);
    assert!(std::sync::Arc::ptr_eq(entry, &m.state().inbox[&key]));
    // Prepared while the record is held: the state's copy changes, the record's does not.
    m.mark(ME, &MessageRef::Sequence(1), ReceiptState::Prepared, NOW)
        .unwrap();
    assert_eq!(entry.state, ReceiptState::Accepted);
    assert_eq!(m.state().inbox[&key].state, ReceiptState::Prepared);
    assert!(!std::sync::Arc::ptr_eq(entry, &m.state().inbox[&key]));
    // Once the record is gone (journaled), a change edits the state's copy in place.
    drop(recs);
    let before = std::sync::Arc::as_ptr(&m.state().inbox[&key]);
    m.mark(
        ME,
        &MessageRef::Sequence(1),
        ReceiptState::Consumed,
        NOW + 1,
    )
    .unwrap();
    assert_eq!(std::sync::Arc::as_ptr(&m.state().inbox[&key]), before);
    assert_eq!(m.state().inbox[&key].state, ReceiptState::Consumed);
}

#[test]
fn sweep_is_bounded_by_commit_batch() {
    let mut limits = Limits::default();
    limits.commit_batch = 4;
    limits.rate_burst = 1_000;
    let mut m = Machine::new(limits.clone());
    for i in 0..10 {
        m.accept(&alice(), send(&format!("m{i}"), "a"), &recipients(), NOW)
            .unwrap();
    }
    let later = NOW + limits.expiry_ms;
    let (rep, recs) = m.sweep(later).unwrap();
    assert!(rep.more && recs.len() <= 4, "{rep:?} {}", recs.len());
    let mut total = rep.expired_inbox;
    for _ in 0..10 {
        let (rep, _) = m.sweep(later).unwrap();
        total += rep.expired_inbox;
        if !rep.more {
            break;
        }
    }
    assert_eq!(total, 10);
}

#[test]
fn rate_table_stays_bounded() {
    let mut limits = Limits::default();
    limits.inbound_connections = 8;
    let mut t = rate::RateTable::default();
    for i in 0..100 {
        t.take(&limits, &format!("i-{i}"), NOW);
    }
    assert!(t.len() <= 8, "{}", t.len());
}

mod model {
    //! Random operation sequences: receipts never regress, queues stay within their limits,
    //! sequences only grow, and replaying the produced records rebuilds the same state.
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[derive(Clone, Debug)]
    enum Op {
        /// `origin`: the sender states its session; senders 0 and 1 are two incarnations of
        /// one session, sender 2 another.
        Accept {
            sender: u8,
            id: u8,
            child: bool,
            origin: bool,
        },
        Mark {
            seq: u8,
            consume: bool,
        },
        Intent {
            id: u8,
            sender: u8,
        },
        Answer {
            id: u8,
            sender: u8,
            ok: bool,
        },
        Receipt {
            id: u8,
            sender: u8,
            state: u8,
        },
        Sweep {
            advance_s: u16,
        },
    }

    fn principal(n: u8) -> Principal {
        Principal {
            instance_id: format!("i-{n}"),
            run_id: None,
            peer_id: format!("p-{n}"),
        }
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            5 => (0u8..3, 0u8..8, any::<bool>(), any::<bool>()).prop_map(|(sender, id, child, origin)| Op::Accept { sender, id, child, origin }),
            3 => (1u8..12, any::<bool>()).prop_map(|(seq, consume)| Op::Mark { seq, consume }),
            2 => (0u8..6, 0u8..3).prop_map(|(id, sender)| Op::Intent { id, sender }),
            2 => (0u8..6, 0u8..3, any::<bool>()).prop_map(|(id, sender, ok)| Op::Answer { id, sender, ok }),
            2 => (0u8..6, 0u8..3, 0u8..6).prop_map(|(id, sender, state)| Op::Receipt { id, sender, state }),
            1 => (0u16..4000).prop_map(|advance_s| Op::Sweep { advance_s }),
        ]
    }

    const STATES: [ReceiptState; 6] = [
        ReceiptState::Accepted,
        ReceiptState::Prepared,
        ReceiptState::Consumed,
        ReceiptState::Replied,
        ReceiptState::Refused,
        ReceiptState::Expired,
    ];

    fn run(m: &mut Machine, op: &Op, now: &mut u64) -> Vec<Record> {
        let recs = match op {
            Op::Accept {
                sender,
                id,
                child,
                origin,
            } => {
                let mut s = send(&format!("m{id}"), "body");
                if *child {
                    s.to_peer_id = CHILD.into();
                }
                if *origin {
                    s.origin = Some(format!("s-{}", sender / 2));
                }
                m.accept(&principal(*sender), s, &recipients(), *now)
                    .map(|x| x.1)
            }
            Op::Mark { seq, consume } => {
                let st = if *consume {
                    ReceiptState::Consumed
                } else {
                    ReceiptState::Prepared
                };
                m.mark(ME, &MessageRef::Sequence(u64::from(*seq)), st, *now)
                    .map(|x| x.1)
            }
            Op::Intent { id, sender } => m
                .outbox_intent(out(&format!("x{id}"), &principal(*sender)), *now)
                .map(|x| x.1),
            Op::Answer { id, sender, ok } => {
                let p = principal(*sender);
                let answer = if *ok {
                    Ok(Receipt {
                        message_id: format!("x{id}"),
                        from_peer_id: ME.into(),
                        to_peer_id: p.peer_id.clone(),
                        state: ReceiptState::Accepted,
                        sequence: 1,
                        correlation_id: String::new(),
                        at_ms: *now,
                        reply_message_id: None,
                        code: None,
                    })
                } else {
                    Err(Code::ScopeDenied)
                };
                m.outbox_result(&p.peer_id, &format!("x{id}"), answer, *now)
                    .map(|x| x.1)
            }
            Op::Receipt { id, sender, state } => {
                let p = principal(*sender);
                let r = Receipt {
                    message_id: format!("x{id}"),
                    from_peer_id: ME.into(),
                    to_peer_id: p.peer_id.clone(),
                    state: STATES[usize::from(*state)],
                    sequence: 1,
                    correlation_id: String::new(),
                    at_ms: *now,
                    reply_message_id: None,
                    code: None,
                };
                m.record_receipt(&p, &r, *now).map(|x| x.1)
            }
            Op::Sweep { advance_s } => {
                *now += u64::from(*advance_s) * 1000;
                m.sweep(*now).map(|x| x.1)
            }
        };
        recs.unwrap_or_default()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]
        #[test]
        fn invariants_hold_for_any_sequence(ops in proptest::collection::vec(op(), 1..60)) {
            let mut limits = Limits::default();
            limits.inbox_messages = 4;
            limits.retention_ms = 600_000;
            let mut m = Machine::new(limits.clone());
            let mut now = NOW;
            let mut log = Vec::new();
            let mut seen: HashMap<(String, u64), (ReceiptState, String)> = HashMap::new();
            let mut outbox_seen: HashMap<(String, String), Receipt> = HashMap::new();
            let mut last_seq: HashMap<String, u64> = HashMap::new();
            for op in &ops {
                log.extend(run(&mut m, op, &mut now));
                for e in m.state().inbox() {
                    let key = (e.recipient_peer_id.clone(), e.sequence);
                    if let Some((old, id)) = seen.get(&key) {
                        prop_assert_eq!(id, &e.message_id, "a sequence is never reused");
                        prop_assert!(*old == e.state || old.may_become(e.state), "{:?} -> {:?}", old, e.state);
                    } else {
                        let last = last_seq.entry(e.recipient_peer_id.clone()).or_insert(0);
                        prop_assert!(e.sequence > *last, "sequences only grow");
                        *last = e.sequence;
                    }
                    seen.insert(key, (e.state, e.message_id.clone()));
                }
                // Retention forgets removed entries; a later entry may reuse the identity.
                outbox_seen.retain(|k: &(String, String), _| m.state().has_outbox(&k.0, &k.1));
                for e in m.state().outbox() {
                    if let Some(r) = &e.receipt {
                        let key = (e.to.peer_id.clone(), e.message_id.clone());
                        if let Some(old) = outbox_seen.get(&key) {
                            prop_assert!(old.state == r.state || r.may_replace(old), "{:?} -> {:?}", old, r);
                        }
                        outbox_seen.insert(key, r.clone());
                    }
                }
                for r in [ME, CHILD] {
                    prop_assert!(m.state().unconsumed(r) <= limits.inbox_messages);
                }
                // One entry per (sending session, run, message id, recipient), whichever
                // incarnation of the session sent or retried it.
                let mut by_origin = std::collections::HashSet::new();
                for e in m.state().inbox() {
                    if let Some(o) = &e.origin {
                        let key = (o.clone(), e.from.run_id.clone(), e.message_id.clone(), e.recipient_peer_id.clone());
                        prop_assert!(by_origin.insert(key), "two entries for one session's message {}", e.message_id);
                    }
                }
            }
            let mut replay = State::default();
            for r in &log {
                prop_assert!(replay.fits(r), "record does not fit on replay: {:?}", r);
                replay.apply(r);
            }
            prop_assert_eq!(replay.image(), m.state().image());
            prop_assert_eq!(State::from_image(m.state().image()).image(), m.state().image());
        }
    }
}

#[test]
fn read_of_unconsumed_skips_consumed_messages_and_pages_over_them() {
    let mut m = machine();
    for i in 0..3 {
        m.accept(&alice(), send(&format!("u{i}"), "a"), &recipients(), NOW)
            .unwrap();
    }
    m.mark(ME, &MessageRef::Sequence(2), ReceiptState::Consumed, NOW)
        .unwrap();
    let q = ReadQuery {
        recipient_peer_id: ME.into(),
        unconsumed_only: true,
        ..Default::default()
    };
    let seqs: Vec<u64> = m
        .read(&q, NOW)
        .messages
        .iter()
        .map(|e| e.sequence)
        .collect();
    assert_eq!(seqs, [1, 3]);
    let all = ReadQuery {
        unconsumed_only: false,
        ..q
    };
    assert_eq!(m.read(&all, NOW).messages.len(), 3);
}

#[test]
fn a_unique_prefix_names_a_message_and_errors_show_no_debug_text() {
    let mut m = machine();
    for id in ["m-3161aa", "m-3161bb", "m-4000cc"] {
        m.accept(&alice(), send(id, "a"), &recipients(), NOW)
            .unwrap();
    }
    let find = |m: &Machine, r: &str| {
        m.find_inbox(ME, &MessageRef::Id(r.into()))
            .map(|e| e.sequence)
    };
    assert_eq!(find(&m, "m-4000cc").unwrap(), 3);
    assert_eq!(find(&m, "m-4000").unwrap(), 3);
    let e = find(&m, "m-3161").unwrap_err();
    assert_eq!(e.code, Code::AmbiguousTarget);
    assert!(e.message.contains("m-3161aa, m-3161bb"), "{}", e.message);
    // Too short to be a prefix; not found, said without Rust debug text.
    let e = find(&m, "m-4").unwrap_err();
    assert_eq!(e.code, Code::NotFound);
    assert_eq!(e.message, format!("no message m-4 in the inbox of {ME}"));
    // The consumed message is the one the prefix named.
    m.mark(
        ME,
        &MessageRef::Id("m-3161b".into()),
        ReceiptState::Consumed,
        NOW,
    )
    .unwrap();
    assert_eq!(
        m.find_inbox(ME, &MessageRef::Sequence(2)).unwrap().state,
        ReceiptState::Consumed
    );
}

#[test]
fn resolved_entries_are_held_compactly_and_rebuild_exactly() {
    use super::settled::{Interner, Settled};
    let mut interner = Interner::default();
    let base = |id: &str| OutboxEntry {
        order: 7,
        from_peer_id: ME.into(),
        to: target(&alice()),
        message_id: id.into(),
        body: MessageBody::text(""),
        content_digest: Some(OutboxEntry::digest_of("a body")),
        correlation_id: id.into(),
        expires_at_ms: NOW + 5,
        created_at_ms: NOW,
        receipt: Some(Receipt {
            message_id: id.into(),
            from_peer_id: ME.into(),
            to_peer_id: "p-alice".into(),
            state: ReceiptState::Consumed,
            sequence: 3,
            correlation_id: id.into(),
            at_ms: NOW + 1,
            reply_message_id: None,
            code: None,
        }),
        updated_at_ms: NOW + 2,
        redelivered_from: None,
    };
    let mut rare = base("m-rare");
    rare.body.topic = Some("t".into());
    rare.body.reply_to = Some("m-0".into());
    rare.correlation_id = "c-1".into();
    rare.to.run_id = Some("r-1".into());
    let r = rare.receipt.as_mut().unwrap();
    r.correlation_id = "c-1".into();
    r.reply_message_id = Some("m-9".into());
    r.state = ReceiptState::Replied;
    let mut refused = base("m-refused");
    refused.receipt.as_mut().unwrap().state = ReceiptState::Refused;
    refused.receipt.as_mut().unwrap().code = Some("QUEUE_FULL".into());
    let mut short = base("m-short");
    short.body.content = "short body".into();
    short.content_digest = None;
    // A receipt older than the entry (the original receipt of an adopted entry's dedup).
    let mut older = base("m-older");
    older.receipt.as_mut().unwrap().at_ms = NOW - 5_000;
    for e in [base("m-plain"), rare, refused, short, older] {
        let (key, s) = Settled::from_entry(&e, &mut interner).expect("compactable");
        assert_eq!(s.to_entry(&key), e);
    }
    // Anything that would not rebuild exactly stays in full form.
    let mut upper = base("m-upper");
    upper.content_digest = Some(OutboxEntry::digest_of("x").to_uppercase());
    let mut foreign = base("m-foreign");
    foreign.receipt.as_mut().unwrap().correlation_id = "other".into();
    let mut unresolved = base("m-open");
    unresolved.receipt = None;
    let mut far = base("m-far");
    far.expires_at_ms = NOW + 30 * 24 * 3_600_000;
    for e in [upper, foreign, unresolved, far] {
        assert!(Settled::from_entry(&e, &mut interner).is_none());
    }
    // Through the machine: resolved entries live compactly, share their target, and read back
    // (status, dedup, replay) exactly as before.
    let mut m = machine();
    for i in 0..20 {
        let id = format!("s{i}");
        m.outbox_intent(out(&id, &alice()), NOW).unwrap();
        let (_, recs) = m
            .outbox_result(
                "p-alice",
                &id,
                Ok(Receipt {
                    message_id: id.clone(),
                    from_peer_id: ME.into(),
                    to_peer_id: "p-alice".into(),
                    state: ReceiptState::Accepted,
                    sequence: i + 1,
                    correlation_id: id.clone(),
                    at_ms: NOW,
                    reply_message_id: None,
                    code: None,
                }),
                NOW,
            )
            .unwrap();
        assert!(!recs.is_empty());
    }
    assert_eq!((m.state().settled.len(), m.state().outbox.len()), (20, 0));
    // One id to two targets: both found by id, resolved or not.
    m.outbox_intent(out("s3", &bob()), NOW).unwrap();
    assert_eq!(m.state().outbox_by_id("s3").count(), 2);
    let bob_receipt = Receipt {
        message_id: "s3".into(),
        from_peer_id: ME.into(),
        to_peer_id: "p-bob".into(),
        state: ReceiptState::Accepted,
        sequence: 1,
        correlation_id: "s3".into(),
        at_ms: NOW,
        reply_message_id: None,
        code: None,
    };
    m.outbox_result("p-bob", "s3", Ok(bob_receipt), NOW)
        .unwrap();
    let by_id: Vec<String> = m.state().outbox_by_id("s3").map(|e| e.to.peer_id).collect();
    assert_eq!(by_id.len(), 2);
    assert!(by_id.contains(&"p-alice".to_string()) && by_id.contains(&"p-bob".to_string()));
    assert_eq!(m.state().outbox_by_id("s30").count(), 0);
    assert_eq!(m.state().outbox().count(), 21);
    assert_eq!(m.state().sent_target("p-alice"), Some(target(&alice())));
    let (again, recs) = m.outbox_intent(out("s3", &alice()), NOW).unwrap();
    assert!(recs.is_empty() && again.receipt.unwrap().sequence == 4);
    assert_eq!(State::from_image(m.state().image()), *m.state());
}

#[test]
fn receipt_events_are_bounded_per_local_peer() {
    let kept = crate::config::internal::RECEIPT_EVENTS_KEPT;
    let mut m = machine();
    let mut records = Vec::new();
    let n = kept + 5;
    for i in 0..n {
        let id = format!("e{i}");
        records.extend(m.outbox_intent(out(&id, &alice()), NOW).unwrap().1);
        let receipt = Receipt {
            message_id: id.clone(),
            from_peer_id: ME.into(),
            to_peer_id: "p-alice".into(),
            state: ReceiptState::Accepted,
            sequence: i as u64 + 1,
            correlation_id: id.clone(),
            at_ms: NOW,
            reply_message_id: None,
            code: None,
        };
        records.extend(m.outbox_result("p-alice", &id, Ok(receipt), NOW).unwrap().1);
    }
    assert_eq!(m.state().events.len(), kept);
    // The oldest went first: the feed starts at the sixth event.
    let first = *m.state().events.keys().next().unwrap();
    assert_eq!(first, 6);
    let page = m.read(
        &ReadQuery {
            recipient_peer_id: ME.into(),
            events_after: Some(0),
            ..ReadQuery::default()
        },
        NOW,
    );
    assert_eq!(page.events[0].cursor, 6);
    // Replaying the journal records gives the same bounded state.
    let mut replay = State::default();
    for r in &records {
        assert!(replay.fits(r), "{r:?}");
        replay.apply(r);
    }
    assert_eq!(replay, *m.state());
}

mod json_length {
    use super::state::json_len;
    use proptest::prelude::*;

    /// The byte-at-a-time rule `json_len` implements: quotes and backslashes take 2 bytes,
    /// control characters 6 (`\u00XX`).
    fn by_byte(s: &str) -> u64 {
        s.bytes()
            .map(|b| match b {
                b'"' | b'\\' => 2,
                0..0x20 => 6,
                _ => 1,
            })
            .sum()
    }

    proptest! {
        /// The vectorised count is the byte-at-a-time rule, and never less than what
        /// serde_json writes for the string.
        #[test]
        fn json_len_counts_every_escape(s in prop_oneof![
            any::<String>(),
            "[\"\\\\\\x00-\\x1f a-z\\u{e9}]{0,300}",
        ]) {
            prop_assert_eq!(json_len(&s), by_byte(&s));
            prop_assert!(json_len(&s) + 2 >= serde_json::to_string(&s).unwrap().len() as u64);
        }
    }
}

/// Key parts for the borrowed-key suites: short strings from a tiny alphabet, so keys collide
/// and share prefixes often, or any string.
fn short_or_any() -> impl proptest::strategy::Strategy<Value = String> {
    proptest::prop_oneof!["[ab]{0,3}", proptest::arbitrary::any::<String>()]
}

mod borrowed_pairs {
    use super::state::StrPair;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    use super::short_or_any as s;

    proptest! {
        /// A map keyed by owned pairs finds, and misses, exactly what the borrowed key does:
        /// the two orders agree.
        #[test]
        fn a_borrowed_pair_finds_what_the_owned_pair_finds(
            keys in proptest::collection::vec((s(), s()), 0..12),
            probe in (s(), s()),
        ) {
            let map: BTreeMap<(String, String), usize> =
                keys.iter().cloned().enumerate().map(|(i, k)| (k, i)).collect();
            let borrowed = &(probe.0.as_str(), probe.1.as_str()) as &dyn StrPair;
            prop_assert_eq!(map.get(borrowed), map.get(&probe));
            for k in map.keys() {
                let b = &(k.0.as_str(), k.1.as_str()) as &dyn StrPair;
                prop_assert_eq!(map.get(b), map.get(k));
                prop_assert_eq!(
                    b.cmp(borrowed),
                    k.cmp(&probe),
                );
            }
        }
    }
}

mod settled_probes {
    use super::settled::{SettledKey, SettledProbe};
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    use super::short_or_any as s;

    proptest! {
        /// A borrowed probe finds, and misses, what an owned probe key finds, in a map of
        /// resolved-entry keys: the two orders agree.
        #[test]
        fn a_borrowed_probe_finds_what_an_owned_probe_finds(
            keys in proptest::collection::vec((s(), s()), 0..12),
            probe in (s(), s()),
        ) {
            let map: BTreeMap<SettledKey, usize> = keys
                .iter()
                .enumerate()
                .map(|(i, (id, to))| (SettledKey::probe(id, to), i))
                .collect();
            let owned = SettledKey::probe(&probe.0, &probe.1);
            prop_assert_eq!(map.get(SettledProbe::new(&probe.0, &probe.1).key()), map.get(&owned));
            for (id, to) in &keys {
                let b = SettledProbe::new(id, to);
                prop_assert_eq!(map.get(b.key()), map.get(&SettledKey::probe(id, to)));
            }
        }
    }
}

proptest::proptest! {
    /// An owned dedup/origin key and its borrowed parts hash alike and compare alike, so a
    /// lookup with either finds the same entry (and a key that differs in any part, the run's
    /// absence included, finds nothing).
    #[test]
    fn owned_and_borrowed_keys_hash_alike(
        a in crate::protocol::strategies::text(),
        run in crate::protocol::strategies::opt_text(),
        c in crate::protocol::strategies::text(),
        d in crate::protocol::strategies::text(),
        other_run in crate::protocol::strategies::opt_text(),
    ) {
        use std::hash::BuildHasher;
        let owned: state::DedupKey = (a.clone(), run.clone(), c.clone(), d.clone());
        let borrowed = state::KeyRef(&a, run.as_deref(), &c, &d);
        let hasher = foldhash::fast::RandomState::default();
        let dyn_owned: &dyn state::KeyParts = &owned;
        proptest::prop_assert_eq!(hasher.hash_one(&owned), hasher.hash_one(borrowed.find()));
        proptest::prop_assert_eq!(hasher.hash_one(dyn_owned), hasher.hash_one(borrowed.find()));
        let mut map: state::FastMap<state::DedupKey, u64> = Default::default();
        map.insert(owned, 7);
        proptest::prop_assert_eq!(map.get(borrowed.find()), Some(&7));
        let other = state::KeyRef(&a, other_run.as_deref(), &c, &d);
        proptest::prop_assert_eq!(map.contains_key(other.find()), other_run == run);
    }
}

/// The receipt a custody answer records is journalled once: its change carries the cursor of
/// the sender's event, which replay derives from it, instead of a second record repeating the
/// receipt. A store written before that (the change, then its own `Event`) replays to the
/// same state.
#[test]
fn a_custody_answer_journals_its_receipt_once() {
    let mut m = machine();
    let mut log = m.outbox_intent(out("x1", &alice()), NOW).unwrap().1;
    let receipt = accepted_by("p-alice", "x1");
    let cursor = m.state().next_event.max(1);
    let (_, records) = m
        .outbox_result("p-alice", "x1", Ok(receipt.clone()), NOW + 5)
        .unwrap();
    assert_eq!(
        records,
        [Record::OutboxReceipt {
            to_peer_id: "p-alice".into(),
            message_id: "x1".into(),
            receipt: receipt.clone(),
            at_ms: NOW + 5,
            event: Some(cursor),
        }]
    );
    let event = ReceiptEvent {
        cursor,
        local_peer_id: ME.into(),
        receipt: receipt.clone(),
        at_ms: NOW + 5,
    };
    assert_eq!(m.state().events.get(&cursor), Some(&event));
    assert_eq!(m.state().next_event, cursor + 1);
    // The journal text names the cursor once and holds one copy of the receipt.
    let text = serde_json::to_string(&records).unwrap();
    assert_eq!(text.matches("\"messageId\":\"x1\"").count(), 1, "{text}");
    assert!(text.contains("\"event\":1"), "{text}");
    // Replay, and replay of the form older builds wrote, rebuild the same state.
    log.extend(records);
    let mut replay = State::default();
    log.iter().for_each(|r| replay.apply(r));
    assert_eq!(replay.image(), m.state().image());
    let mut older = State::default();
    older.apply(&log[0]);
    older.apply(&Record::OutboxReceipt {
        to_peer_id: "p-alice".into(),
        message_id: "x1".into(),
        receipt,
        at_ms: NOW + 5,
        event: None,
    });
    older.apply(&Record::Event { event });
    assert_eq!(older.image(), m.state().image());
    assert_eq!(older.live_bytes(), m.state().live_bytes());
    // A record without the field (an older build's) reads as carrying no event.
    let old: Record =
        serde_json::from_str(&text[1..text.len() - 1].replace(",\"event\":1", "")).unwrap();
    assert!(matches!(old, Record::OutboxReceipt { event: None, .. }));
}

/// A sender at its bound of kept receipt events drops its oldest one in the same batch as the
/// change that adds the new one.
#[test]
fn a_custody_answer_at_the_event_bound_drops_the_oldest_event() {
    let kept = crate::config::internal::RECEIPT_EVENTS_KEPT as u64;
    let mut m = machine();
    m.limits.inbox_messages = kept + 10;
    let accepted = |id: &str| accepted_by("p-alice", id);
    for i in 0..=kept {
        let id = format!("x{i}");
        m.outbox_intent(out(&id, &alice()), NOW).unwrap();
        let (_, records) = m
            .outbox_result("p-alice", &id, Ok(accepted(&id)), NOW)
            .unwrap();
        let room: Vec<_> = records
            .iter()
            .filter(|r| matches!(r, Record::EventRemoved { .. }))
            .collect();
        assert_eq!(
            room.len(),
            usize::from(i == kept),
            "answer {i}: {records:?}"
        );
    }
    let cursors: Vec<u64> = m.state().events.keys().copied().collect();
    assert_eq!(cursors.len() as u64, kept);
    assert_eq!(cursors.first(), Some(&2), "the oldest event went");
    assert_eq!(State::from_image(m.state().image()), *m.state());
}

#[test]
fn an_accepted_message_is_sent_again_once_to_its_recipients_successor() {
    let mut m = machine();
    for id in ["k1", "k2"] {
        m.outbox_intent(out(id, &alice()), NOW).unwrap();
        m.outbox_result("p-alice", id, Ok(accepted_by("p-alice", id)), NOW)
            .unwrap();
    }
    // k2 was read: the recipient's copy no longer matters.
    let mut consumed = accepted_by("p-alice", "k2");
    consumed.state = ReceiptState::Consumed;
    m.record_receipt(&alice(), &consumed, NOW + 1).unwrap();
    let held = m.state().accepted_held(&|_| true, 10);
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].message_id, "k1");
    let to = target(&alice_restarted());
    let (sent, recs) = m.redeliver("p-alice", "k1", to.clone(), NOW + 2).unwrap();
    assert!(sent && recs.len() == 1);
    let copy = m.state().outbox_get("p-alice2", "k1").unwrap();
    assert_eq!(copy.redelivered_from.as_deref(), Some("p-alice"));
    assert!(copy.receipt.is_none() && copy.body.content == held[0].body.content);
    assert_eq!(m.route_head(ME, "p-alice2").unwrap().message_id, "k1");
    assert_eq!(m.state().redelivered_count(), 1);
    assert!(m.state().accepted_held(&|_| true, 10).is_empty());
    assert!(!m.redeliver("p-alice", "k1", to.clone(), NOW + 3).unwrap().0);
    assert!(!m.redeliver("p-alice", "k2", to, NOW + 3).unwrap().0);
}
