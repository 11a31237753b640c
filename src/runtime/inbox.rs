//! The recipient's own messages: finding one by id, consuming it (context journal first, then
//! the consumed receipt), and refusing a message past its expiry.

use super::core::Core;
use crate::clock;
use crate::error::{Code, Error, Result};
use crate::messaging::{InboxEntry, MessageRef, Receipt, ReceiptState};

impl Core {
    /// Local reads of one recipient entry by message id (for consume/reply).
    pub fn inbox_entry(&self, recipient: &str, message_id: &str) -> Result<InboxEntry> {
        let (r, id) = (recipient.to_string(), message_id.to_string());
        self.store
            .query(move |m| m.find_inbox(&r, &MessageRef::Id(id)).cloned())?
            .map_err(|e| {
                Error::new(
                    e.code,
                    format!(
                        "no single message {message_id} in this inbox ({})",
                        e.message
                    ),
                )
            })
    }

    /// Consumes one message: the context journal first, then the consumed receipt.
    pub fn consume(
        &self,
        recipient: &str,
        message_id: &str,
        note: Option<&str>,
    ) -> Result<Receipt> {
        let e = self.inbox_entry(recipient, message_id)?;
        self.consume_entry(&e, note.unwrap_or("taken into context by the recipient"))
    }

    /// Records context for `e` (unless already marked), then marks it consumed. A message past
    /// its expiry is recorded expired instead and the call fails with `EXPIRED`.
    pub fn consume_entry(&self, e: &InboxEntry, note: &str) -> Result<Receipt> {
        let reference = MessageRef::Sequence(e.sequence);
        if !e.context_marked {
            let r = self
                .store
                .record_context(&e.recipient_peer_id, reference.clone(), note)?;
            refuse_expired(&r)?;
        }
        let r = self
            .store
            .mark(&e.recipient_peer_id, reference, ReceiptState::Consumed)?;
        refuse_expired(&r)?;
        Ok(r)
    }
}

/// A recipient-side transition that found the message expired fails with `EXPIRED`.
pub fn refuse_expired(r: &Receipt) -> Result<()> {
    if r.state == ReceiptState::Expired {
        return Err(Error::new(
            Code::Expired,
            format!(
                "message {} has expired (recorded {}); it can no longer be consumed or replied to",
                r.message_id,
                clock::iso8601(r.at_ms)
            ),
        ));
    }
    Ok(())
}
