//! Test-only proptest strategies for the wire types, shared by the suites that hold a typed
//! encoder or decoder to the general `Value` path.

use super::message::ReceiptState;
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
