//! The custody state machine: every operation validates against the state, returns the journal
//! records it produced (already applied) and its answer. No I/O, no clock: `now_ms` is passed
//! in, so tests drive it deterministically and the store replays its records after a crash.

use super::rate::RateTable;
use super::state::{Record, State};
use super::types::{InboxEntry, ReadQuery, ReadResult, ReceiptState};
use crate::config::Limits;
use crate::error::{Code, Error, Result};

/// The answer of a mutating operation plus the records to append before acknowledging it.
pub type Outcome<T> = Result<(T, Vec<Record>)>;

/// Custody rules over one instance store's [`State`].
#[derive(Clone, Debug)]
pub struct Machine {
    pub(crate) state: State,
    pub(crate) limits: Limits,
    pub(crate) rate: RateTable,
}

impl Machine {
    pub fn new(limits: Limits) -> Machine {
        Machine::from_state(State::default(), limits)
    }

    pub fn from_state(state: State, limits: Limits) -> Machine {
        Machine {
            state,
            limits,
            rate: RateTable::default(),
        }
    }

    pub fn state(&self) -> &State {
        &self.state
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Applies `records` to the state and hands them back for the journal.
    pub(crate) fn commit(&mut self, records: Vec<Record>) -> Vec<Record> {
        for r in &records {
            assert!(
                self.state.fits(r),
                "an operation produced a record that does not fit: {r:?}"
            );
            self.state.apply(r);
        }
        records
    }

    /// Bytes the live state may use: `storageBytes` minus the journal's share (the journal is
    /// compacted at [`Machine::journal_threshold`]), so snapshot + journal stay within
    /// `storageBytes` up to one commit batch.
    pub fn storage_budget(&self) -> u64 {
        self.limits
            .storage_bytes
            .saturating_sub(self.journal_threshold())
    }

    /// Journal size that triggers compaction: `journalBytes`, at most half of `storageBytes`.
    pub fn journal_threshold(&self) -> u64 {
        self.limits.journal_bytes.min(self.limits.storage_bytes / 2)
    }

    /// Journal size at which the writer compacts, given the current snapshot's size: the
    /// journal threshold, or as many bytes as the snapshot holds when that is more (so a
    /// compaction rewrites at most about one snapshot byte per journal byte appended since the
    /// last), but never so many that snapshot + journal pass `storageBytes`.
    pub fn compaction_trigger(&self, snapshot_bytes: u64) -> u64 {
        let room = self.limits.storage_bytes.saturating_sub(snapshot_bytes);
        self.journal_threshold().max(snapshot_bytes.min(room))
    }

    pub(crate) fn check_space(&self, cost: u64, what: &str) -> Result<()> {
        let budget = self.storage_budget();
        if self.state.live_bytes.saturating_add(cost) > budget {
            return Err(Error::new(
                Code::QueueFull,
                format!(
                    "{what}: the store holds {} of its {budget}-byte budget (storageBytes); let existing messages be consumed or expire",
                    self.state.live_bytes
                ),
            ));
        }
        Ok(())
    }

    pub(crate) fn check_id(what: &str, id: &str) -> Result<()> {
        if !crate::identity::is_valid_id(id) {
            return Err(Error::new(
                Code::InvalidRequest,
                format!(
                    "{what} must be 1-{} characters of letters, digits, '-', '_' or '.'",
                    crate::config::internal::ID_CHARS_MAX
                ),
            ));
        }
        Ok(())
    }

    pub(crate) fn check_content(&self, content: &str, topic: &Option<String>) -> Result<()> {
        let max = self.limits.message_bytes;
        if content.len() as u64 > max {
            return Err(Error::new(
                Code::MessageTooLarge,
                format!(
                    "content is {} UTF-8 bytes, over messageBytes ({max}); shorten it or send a file path",
                    content.len()
                ),
            ));
        }
        if topic.as_ref().is_some_and(|t| t.len() as u64 > max) {
            return Err(Error::new(
                Code::MessageTooLarge,
                format!("topic is over messageBytes ({max})"),
            ));
        }
        Ok(())
    }

    /// The absolute expiry for a send: absent → now + expiryMs; past → EXPIRED; beyond
    /// now + maxExpiryMs → EXPIRED naming the bound.
    pub(crate) fn expiry(&self, expires_at_ms: Option<u64>, now_ms: u64) -> Result<u64> {
        let at = expires_at_ms.unwrap_or(now_ms.saturating_add(self.limits.expiry_ms));
        if at <= now_ms {
            return Err(Error::new(
                Code::Expired,
                "the message expired before it was accepted",
            ));
        }
        let max = now_ms.saturating_add(self.limits.max_expiry_ms);
        if at > max {
            return Err(Error::new(
                Code::Expired,
                format!(
                    "expiresAt is more than maxExpiryMs ({} ms) ahead; choose an earlier expiry",
                    self.limits.max_expiry_ms
                ),
            ));
        }
        Ok(at)
    }

    /// Looks up one of `recipient`'s messages by sequence or (unambiguous) message id.
    pub(crate) fn find_inbox(
        &self,
        recipient: &str,
        r: &super::types::MessageRef,
    ) -> Result<&InboxEntry> {
        use super::types::MessageRef;
        let not_found = || {
            Error::new(
                Code::NotFound,
                format!("no message {r} in the inbox of {recipient}"),
            )
        };
        match r {
            MessageRef::Sequence(seq) => self
                .state
                .inbox
                .get(&(recipient.to_string(), *seq))
                .map(|e| &**e)
                .ok_or_else(not_found),
            MessageRef::Id(wanted) => {
                let range = (recipient.to_string(), 0)..=(recipient.to_string(), u64::MAX);
                let mine = self.state.inbox.range(range).map(|(_, e)| e);
                let ids =
                    super::types::ids_matching(wanted, mine.clone().map(|e| e.message_id.as_str()));
                let id = match ids.as_slice() {
                    [] => return Err(not_found()),
                    [one] => *one,
                    several => {
                        return Err(super::types::ambiguous_prefix(wanted, several, "message"));
                    }
                };
                let mut hits = mine.filter(|e| e.message_id == id);
                let first = hits.next().ok_or_else(not_found)?;
                if hits.next().is_some() {
                    return Err(Error::new(
                        Code::AmbiguousTarget,
                        format!(
                            "two senders used message id {id}; name the message by its sequence"
                        ),
                    ));
                }
                Ok(first)
            }
        }
    }

    /// Trusted local read: one recipient's messages after a sequence cursor, filtered, plus the
    /// receipt events of that peer's outbox after an event cursor. Pure query; a message past
    /// its `expiresAt` at `now_ms` reads as expired even before a sweep records it.
    pub fn read(&self, q: &ReadQuery, now_ms: u64) -> ReadResult {
        let page = self.limits.directory_page_size.max(1);
        let limit = if q.limit == 0 || q.limit > page {
            page
        } else {
            q.limit
        } as usize;
        let after = q.after.unwrap_or(0);
        let range = (q.recipient_peer_id.clone(), after.saturating_add(1))
            ..=(q.recipient_peer_id.clone(), u64::MAX);
        let mut matching = self.state.inbox.range(range).map(|(_, e)| e).filter(|e| {
            q.from.as_ref().is_none_or(|f| &e.from.peer_id == f)
                && q.reply_to
                    .as_ref()
                    .is_none_or(|r| e.body.reply_to.as_ref() == Some(r))
                && q.message_id.as_ref().is_none_or(|m| &e.message_id == m)
                && (!q.unconsumed_only
                    || matches!(e.state, ReceiptState::Accepted | ReceiptState::Prepared))
        });
        let messages: Vec<InboxEntry> = matching
            .by_ref()
            .take(limit)
            .map(|e| as_of(e, now_ms))
            .collect();
        let mut more = matching.next().is_some();
        let next_after = messages.last().map_or(after, |e| e.sequence);
        let mut events = Vec::new();
        let mut next_event_cursor = q.events_after.unwrap_or(0);
        if let Some(ev_after) = q.events_after {
            let mut it = self
                .state
                .events
                .range(ev_after.saturating_add(1)..)
                .map(|(_, e)| e)
                .filter(|e| e.local_peer_id == q.recipient_peer_id);
            events = it.by_ref().take(limit).cloned().collect();
            more |= it.next().is_some();
            next_event_cursor = events.last().map_or(ev_after, |e| e.cursor);
        }
        ReadResult {
            messages,
            events,
            next_after,
            next_event_cursor,
            more,
        }
    }

    /// Unconsumed (accepted or prepared) messages of every recipient, for operator review.
    pub fn unread(&self) -> Vec<InboxEntry> {
        self.state
            .inbox
            .values()
            .filter(|e| matches!(e.state, ReceiptState::Accepted | ReceiptState::Prepared))
            .map(|e| InboxEntry::clone(e))
            .collect()
    }
}

/// True when `e` is unconsumed and past its expiry at `now_ms`: it is expired, whether or not a
/// sweep has recorded that yet.
pub fn expiry_due(e: &InboxEntry, now_ms: u64) -> bool {
    e.expires_at_ms <= now_ms && e.state.may_become(ReceiptState::Expired)
}

/// `e` as it stands at `now_ms`: an entry past its expiry reads as expired (at its expiry).
pub fn as_of(e: &InboxEntry, now_ms: u64) -> InboxEntry {
    let mut e = e.clone();
    if expiry_due(&e, now_ms) {
        e.state = ReceiptState::Expired;
        e.state_at_ms = e.expires_at_ms;
    }
    e
}
