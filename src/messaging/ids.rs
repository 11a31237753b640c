//! Message ids: retry-stable ids for explicit tool calls, fresh ids for user submissions.

/// The id of a message sent by an explicit tool call: a hash of the actual caller's peerId and
/// the tool-call id, so a retried tool call reuses it and the receiver deduplicates.
pub fn derive_message_id(caller_peer_id: &str, tool_call_id: &str) -> String {
    let h = crate::identity::sha256_hex(&[
        b"peerwire/message-id/v1\0",
        caller_peer_id.as_bytes(),
        b"\0",
        tool_call_id.as_bytes(),
    ]);
    format!("m-{}", &h[..32])
}

/// A fresh id for a new user submission (128 random bits).
pub fn new_message_id() -> String {
    let mut b = [0u8; 16];
    crate::identity::random_bytes(&mut b);
    format!("m-{}", crate::identity::hex(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_ids_are_stable_and_caller_bound() {
        let a = derive_message_id("p-1", "call-7");
        assert_eq!(a, derive_message_id("p-1", "call-7"));
        assert_ne!(a, derive_message_id("p-2", "call-7"));
        assert_ne!(a, derive_message_id("p-1", "call-8"));
        // The separator keeps ("p-1", "0call") and ("p-10", "call") apart.
        assert_ne!(
            derive_message_id("p-1", "0call"),
            derive_message_id("p-10", "call")
        );
        assert!(crate::identity::is_valid_id(&a));
        assert_ne!(new_message_id(), new_message_id());
        assert!(crate::identity::is_valid_id(&new_message_id()));
    }
}
