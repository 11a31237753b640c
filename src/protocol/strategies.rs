//! Test-only proptest strategies for the wire types, shared by the suites that hold a typed
//! encoder or decoder to the general `Value` path.

use super::message::{Receipt, ReceiptState};
use crate::tools::answer::SendAnswer;
use proptest::prelude::*;

/// Any text, escapes, control characters and non-ASCII included.
pub fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("m-1".to_string()),
        Just("q\"uote\\back/slash\u{1}\u{1f}\t\n\u{7f}\u{e9}\u{2028}\u{1f600}".to_string()),
        any::<String>(),
    ]
}

pub fn opt_text() -> impl Strategy<Value = Option<String>> {
    proptest::option::of(text())
}

/// Every receipt state.
pub fn receipt_state() -> impl Strategy<Value = ReceiptState> {
    prop_oneof![
        Just(ReceiptState::Accepted),
        Just(ReceiptState::Prepared),
        Just(ReceiptState::Consumed),
        Just(ReceiptState::Replied),
        Just(ReceiptState::Refused),
        Just(ReceiptState::Expired),
    ]
}

/// Any send answer (receipt fields, names, mentions, alias).
pub fn send_answer() -> impl Strategy<Value = SendAnswer> {
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
