//! The durable custody state and the journal records that change it. `State::apply` is the
//! only mutator: live operations and crash recovery replay the same records through it, so
//! the recovered state is the acknowledged state by construction.

use super::settled::{Interner, Settled, SettledKey, SettledProbe};
use super::types::{
    ContextEntry, InboxEntry, OutboxEntry, Principal, PushEntry, Receipt, ReceiptEvent,
    ReceiptState, TargetRef,
};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

pub use crate::config::internal::ENTRY_OVERHEAD_BYTES;
pub use crate::config::internal::RECEIPT_RESERVE_BYTES;

/// One journal record. Serialised with a short tag; the frame checksum covers it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "camelCase")]
// The outbox entry is the one large variant and the most frequent record (one per send):
// boxing it would add an allocation to every send for a size only records in flight pay.
#[allow(clippy::large_enum_variant)]
pub enum Record {
    InboxAdded {
        /// Shared with the state that applies it, so applying it copies no message.
        entry: Arc<InboxEntry>,
    },
    InboxState {
        recipient: String,
        sequence: u64,
        state: ReceiptState,
        at_ms: u64,
        reply_message_id: Option<String>,
    },
    Context {
        entry: ContextEntry,
    },
    PushQueued {
        push: PushEntry,
    },
    PushDone {
        cursor: u64,
    },
    OutboxAdded {
        entry: OutboxEntry,
    },
    OutboxReceipt {
        to_peer_id: String,
        message_id: String,
        receipt: Receipt,
        at_ms: u64,
        /// The cursor of the receipt event this change adds to its sender's event stream: the
        /// [`ReceiptEvent`] of `receipt.from_peer_id` with this receipt at `at_ms`, so the
        /// journal holds the receipt once. Absent when no event goes with it, and in the
        /// records of older builds, which wrote the event as its own [`Record::Event`].
        #[serde(default, skip_serializing_if = "Option::is_none")]
        event: Option<u64>,
    },
    Event {
        event: ReceiptEvent,
    },
    InboxRemoved {
        recipient: String,
        sequence: u64,
    },
    OutboxRemoved {
        to_peer_id: String,
        message_id: String,
    },
    EventRemoved {
        cursor: u64,
    },
    /// A later incarnation of the message's sending session retried it: custody answers (the
    /// receipt, later pushes, replies) now go to that incarnation.
    InboxSender {
        recipient: String,
        sequence: u64,
        from: Principal,
    },
}

impl Record {
    /// Bytes of peer text this record carries (a message's content, a context note): what
    /// makes one record much longer than another, so a frame's buffer is sized for it.
    pub fn text_len(&self) -> usize {
        match self {
            Record::InboxAdded { entry } => entry.body.content.len(),
            Record::OutboxAdded { entry } => entry.body.content.len(),
            Record::Context { entry } => entry.note.len(),
            _ => 0,
        }
    }
}

/// Dedup identity of an inbound message: sender instance, sender run, message id, recipient.
pub type DedupKey = (String, Option<String>, String, String);

/// Dedup identity across a sending session's incarnations: sender sessionId, sender run,
/// message id, recipient.
pub type OriginKey = (String, Option<String>, String, String);

/// The hash maps of [`State`]: every accepted message looks up and inserts its dedup and
/// origin keys (four strings each) and its recipient's counters, and SipHash cost more than
/// the map work itself. foldhash is seeded per process (minimally DoS-resistant), and a
/// peer's keys are bounded by `Limits` (inbox entries) before they reach a map.
pub(crate) type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// The whole custody state of one instance store, with derived indexes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct State {
    /// (recipient peerId, sequence) → entry.
    /// Shared with the record that added each entry until that record is journaled; an entry
    /// changed later is copied only if its record is still held (`Arc::make_mut`).
    pub(crate) inbox: BTreeMap<(String, u64), Arc<InboxEntry>>,
    pub(crate) dedup: FastMap<DedupKey, (String, u64)>,
    pub(crate) origins: FastMap<OriginKey, (String, u64)>,
    /// The sending session each sender instance stated (from entries that carry an origin),
    /// so a message processed after its sender's record vanished is still scoped to it.
    /// instance → (origin, entries from it that carry an origin); an instance is forgotten with
    /// its last entry (an instance whose entries moved to a later incarnation is kept).
    pub(crate) instance_origins: FastMap<String, (String, u64)>,
    /// Unconsumed (accepted or prepared) count per recipient.
    pub(crate) unconsumed: FastMap<String, u64>,
    pub(crate) next_sequence: BTreeMap<String, u64>,
    /// (to peerId, message id) → entry, for unresolved entries (and resolved ones whose
    /// compact form would not rebuild them exactly).
    pub(crate) outbox: BTreeMap<(String, String), OutboxEntry>,
    /// Resolved outbox entries in compact form (see [`Settled`]), by (message id, target).
    pub(crate) settled: BTreeMap<SettledKey, Settled>,
    pub(crate) interner: Interner,
    /// Unresolved outbox entries per route: (from peerId, to peerId) → send order → message
    /// id. Every per-send lookup goes through this, so its cost does not grow with history.
    pub(crate) pending: BTreeMap<(String, String), BTreeMap<u64, String>>,
    /// (message id, to peerId) of every entry in `outbox`: finds a sent message by id alone
    /// (`settled` is ordered by id itself).
    pub(crate) sent_ids: BTreeSet<(String, String)>,
    /// (first target's peerId, message id) of every message sent again to a successor
    /// incarnation (from the copies' `redelivered_from`; those copies stay in `outbox`).
    pub(crate) redelivered: BTreeSet<(String, String)>,
    pub(crate) context: BTreeMap<(String, u64), ContextEntry>,
    pub(crate) pushes: BTreeMap<u64, PushEntry>,
    pub(crate) events: BTreeMap<u64, ReceiptEvent>,
    /// Event cursors per local peer, oldest first (bounds each peer's event feed).
    pub(crate) peer_events: FastMap<String, BTreeSet<u64>>,
    pub(crate) next_order: u64,
    pub(crate) next_push: u64,
    pub(crate) next_event: u64,
    /// Estimated stored bytes of everything above (see [`ENTRY_OVERHEAD_BYTES`]).
    pub(crate) live_bytes: u64,
}

/// The serialisable form of [`State`] (`messages.json`'s `state`): plain lists, indexes dropped.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StateImage {
    pub inbox: Vec<InboxEntry>,
    pub outbox: Vec<OutboxEntry>,
    pub context: Vec<ContextEntry>,
    pub pushes: Vec<PushEntry>,
    pub events: Vec<ReceiptEvent>,
    pub next_sequence: Vec<(String, u64)>,
    pub next_order: u64,
    pub next_push: u64,
    pub next_event: u64,
}

/// A `(String, String)` key as two borrowed strings, so the outbox maps are searched by the
/// `&str`s a caller holds without building an owned pair (two allocations and their frees per
/// lookup, several lookups per send). Orders exactly as the owned tuple does.
pub(crate) trait StrPair {
    fn strs(&self) -> (&str, &str);
}

impl StrPair for (String, String) {
    fn strs(&self) -> (&str, &str) {
        (&self.0, &self.1)
    }
}

impl StrPair for (&str, &str) {
    fn strs(&self) -> (&str, &str) {
        (self.0, self.1)
    }
}

impl<'a> std::borrow::Borrow<dyn StrPair + 'a> for (String, String) {
    fn borrow(&self) -> &(dyn StrPair + 'a) {
        self
    }
}

order_by_parts!(StrPair, strs);

/// The lookup key `(a, b)` for a `(String, String)`-keyed map, borrowed (see [`StrPair`]).
macro_rules! pair {
    ($a:expr, $b:expr) => {
        &(
            {
                let a: &str = $a;
                a
            },
            {
                let b: &str = $b;
                b
            },
        ) as &dyn StrPair
    };
}

/// Bytes `s` takes as a JSON string body: control characters become `\u00XX` (6 bytes),
/// quotes and backslashes 2; so admission never underestimates escaped content.
pub(crate) fn json_len(s: &str) -> u64 {
    // Counted in byte lanes over chunks of 255 (a count per chunk fits a u8) so the compiler
    // vectorises it 16 bytes at a time: a send's content is measured on every admission and
    // resolution.
    let extra: u64 = s
        .as_bytes()
        .chunks(255)
        .map(|chunk| {
            let count = |hit: fn(u8) -> bool| {
                chunk
                    .iter()
                    .fold(0u8, |n, &b| n.wrapping_add(u8::from(hit(b))))
            };
            let quoted = count(|b| b == b'"' || b == b'\\');
            let control = count(|b| b < 0x20);
            u64::from(quoted) + 5 * u64::from(control)
        })
        .sum();
    s.len() as u64 + extra
}

fn opt_len(s: &Option<String>) -> u64 {
    s.as_ref().map_or(0, |s| json_len(s))
}

pub(crate) fn inbox_cost(e: &InboxEntry) -> u64 {
    ENTRY_OVERHEAD_BYTES
        + json_len(&e.body.content)
        + (e.message_id.len() + e.recipient_peer_id.len() + e.correlation_id.len()) as u64
        + (e.from.instance_id.len() + e.from.peer_id.len()) as u64
        + opt_len(&e.from.run_id)
        + opt_len(&e.body.topic)
        + opt_len(&e.body.reply_to)
}

pub(crate) fn outbox_cost(e: &OutboxEntry) -> u64 {
    ENTRY_OVERHEAD_BYTES
        + json_len(&e.body.content)
        + e.content_digest.as_ref().map_or(0, |d| d.len() as u64)
        + (e.message_id.len() + e.from_peer_id.len() + e.correlation_id.len()) as u64
        + (e.to.instance_id.len() + e.to.peer_id.len()) as u64
        + opt_len(&e.to.run_id)
        + opt_len(&e.body.topic)
        + opt_len(&e.body.reply_to)
}

fn small_cost(note: &str) -> u64 {
    ENTRY_OVERHEAD_BYTES + json_len(note)
}

/// A dedup or origin key as borrowed parts. The maps are keyed by the owned tuples; a lookup
/// goes through [`KeyParts`] with this instead, so checking a message against the indexes
/// (three times per accept) does not copy four strings each time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct KeyRef<'a>(pub &'a str, pub Option<&'a str>, pub &'a str, pub &'a str);

/// What an owned key and a [`KeyRef`] have in common: both hash and compare as their parts
/// (one `Hash` for both, so a lookup with either finds the same entry).
pub(crate) trait KeyParts {
    fn parts(&self) -> KeyRef<'_>;
}

impl KeyParts for (String, Option<String>, String, String) {
    fn parts(&self) -> KeyRef<'_> {
        KeyRef(&self.0, self.1.as_deref(), &self.2, &self.3)
    }
}

impl KeyParts for KeyRef<'_> {
    fn parts(&self) -> KeyRef<'_> {
        *self
    }
}

impl<'a> std::borrow::Borrow<dyn KeyParts + 'a> for (String, Option<String>, String, String) {
    fn borrow(&self) -> &(dyn KeyParts + 'a) {
        self
    }
}

impl<'a> KeyRef<'a> {
    /// The form a map lookup takes.
    pub(crate) fn find(&self) -> &(dyn KeyParts + 'a) {
        self
    }
}

/// The owned tuple hashes as its parts do: a tuple hashes its fields in order, exactly as
/// `KeyRef`'s derived `Hash` does (an `Option<String>` as the `Option<&str>` it derefs to);
/// `owned_and_borrowed_keys_hash_alike` holds them to it.
impl std::hash::Hash for dyn KeyParts + '_ {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.parts().hash(state);
    }
}

impl PartialEq for dyn KeyParts + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for dyn KeyParts + '_ {}

/// [`dedup_key`] borrowed.
pub(crate) fn dedup_ref(e: &InboxEntry) -> KeyRef<'_> {
    KeyRef(
        &e.from.instance_id,
        e.from.run_id.as_deref(),
        &e.message_id,
        &e.recipient_peer_id,
    )
}

/// [`origin_key`] borrowed.
pub(crate) fn origin_ref(e: &InboxEntry) -> Option<KeyRef<'_>> {
    Some(KeyRef(
        e.origin.as_deref()?,
        e.from.run_id.as_deref(),
        &e.message_id,
        &e.recipient_peer_id,
    ))
}

pub(crate) fn dedup_key(e: &InboxEntry) -> DedupKey {
    (
        e.from.instance_id.clone(),
        e.from.run_id.clone(),
        e.message_id.clone(),
        e.recipient_peer_id.clone(),
    )
}

pub(crate) fn origin_key(e: &InboxEntry) -> Option<OriginKey> {
    Some((
        e.origin.clone()?,
        e.from.run_id.clone(),
        e.message_id.clone(),
        e.recipient_peer_id.clone(),
    ))
}

fn is_unconsumed(s: ReceiptState) -> bool {
    matches!(s, ReceiptState::Accepted | ReceiptState::Prepared)
}

impl State {
    /// Applies one record. Records come from our own operations or from a checksummed journal;
    /// a record naming something absent is skipped rather than trusted to panic.
    pub fn apply(&mut self, record: &Record) {
        match record {
            Record::InboxAdded { entry } => self.add_inbox(Arc::clone(entry)),
            Record::InboxState {
                recipient,
                sequence,
                state,
                at_ms,
                reply_message_id,
            } => self.set_inbox_state(recipient, *sequence, *state, *at_ms, reply_message_id),
            Record::Context { entry } => self.add_context(entry),
            Record::PushQueued { push } => {
                self.live_bytes += ENTRY_OVERHEAD_BYTES;
                self.next_push = self.next_push.max(push.cursor + 1);
                self.pushes.insert(push.cursor, push.clone());
            }
            Record::PushDone { cursor } => {
                if self.pushes.remove(cursor).is_some() {
                    self.live_bytes = self.live_bytes.saturating_sub(ENTRY_OVERHEAD_BYTES);
                }
            }
            Record::OutboxAdded { entry } => {
                self.live_bytes += outbox_cost(entry);
                self.next_order = self.next_order.max(entry.order + 1);
                if entry.receipt.is_none() {
                    self.pending_insert(entry);
                }
                self.insert_outbox(entry.clone());
            }
            Record::OutboxReceipt {
                to_peer_id,
                message_id,
                receipt,
                at_ms,
                event,
            } => {
                self.set_outbox_receipt(to_peer_id, message_id, receipt, *at_ms);
                if let Some(cursor) = *event {
                    self.add_event(ReceiptEvent {
                        cursor,
                        local_peer_id: receipt.from_peer_id.clone(),
                        receipt: receipt.clone(),
                        at_ms: *at_ms,
                    });
                }
            }
            Record::Event { event } => self.add_event(event.clone()),
            Record::InboxRemoved {
                recipient,
                sequence,
            } => self.remove_inbox(recipient, *sequence),
            Record::OutboxRemoved {
                to_peer_id,
                message_id,
            } => {
                if let Some(e) = self.take_outbox(to_peer_id, message_id) {
                    self.live_bytes = self.live_bytes.saturating_sub(outbox_cost(&e));
                    if e.receipt.is_none() {
                        self.pending_remove(&e);
                    }
                }
            }
            Record::EventRemoved { cursor } => {
                if let Some(ev) = self.events.remove(cursor) {
                    self.live_bytes = self.live_bytes.saturating_sub(ENTRY_OVERHEAD_BYTES);
                    if let Some(set) = self.peer_events.get_mut(&ev.local_peer_id) {
                        set.remove(cursor);
                        if set.is_empty() {
                            self.peer_events.remove(&ev.local_peer_id);
                        }
                    }
                }
            }
            Record::InboxSender {
                recipient,
                sequence,
                from,
            } => {
                let key = (recipient.clone(), *sequence);
                let Some(e) = self.inbox.get_mut(&key) else {
                    return;
                };
                let before = InboxEntry::clone(e);
                let e = Arc::make_mut(e);
                e.from = from.clone();
                let after = e.clone();
                self.dedup.remove(&dedup_key(&before));
                self.dedup.insert(dedup_key(&after), key);
                // The earlier instance keeps its session mapping (until the store is next
                // loaded): a late frame of that dead incarnation, processed after its record
                // is gone, still finds its session.
                self.count_origin(&after, true);
            }
        }
    }

    fn add_event(&mut self, event: ReceiptEvent) {
        self.live_bytes += ENTRY_OVERHEAD_BYTES;
        self.next_event = self.next_event.max(event.cursor + 1);
        self.peer_events
            .entry(event.local_peer_id.clone())
            .or_default()
            .insert(event.cursor);
        self.events.insert(event.cursor, event);
    }

    fn add_context(&mut self, entry: &ContextEntry) {
        let key = (entry.recipient_peer_id.clone(), entry.sequence);
        assert!(
            !self.context.contains_key(&key),
            "one context marker per message"
        );
        self.live_bytes += small_cost(&entry.note);
        if let Some(e) = self.inbox.get_mut(&key) {
            Arc::make_mut(e).context_marked = true;
        }
        if let Some(old) = self.context.insert(key, entry.clone()) {
            self.live_bytes = self.live_bytes.saturating_sub(small_cost(&old.note));
        }
    }

    /// Sets an outbox entry's receipt. The first answer resolves the entry: it leaves the
    /// route's pending index and its body is replaced by a digest (enough to recognise a retry
    /// with other content as MESSAGE_ID_CONFLICT; nothing sends it again).
    fn set_outbox_receipt(&mut self, to: &str, id: &str, receipt: &Receipt, at_ms: u64) {
        let Some(mut e) = self.take_outbox(to, id) else {
            return;
        };
        assert!(
            e.receipt.as_ref().is_none_or(|r| receipt.may_replace(r)),
            "receipts move forward only"
        );
        let resolves = e.receipt.is_none();
        let before = outbox_cost(&e);
        e.receipt = Some(receipt.clone());
        e.updated_at_ms = at_ms;
        // An accepted message keeps its body: while the recipient has not read it, its copy
        // is the only other one, and if it is lost this one is sent again. Bounded: only while
        // the state is small, so unread mail cannot grow the sender without limit.
        let keep = receipt.state == ReceiptState::Accepted
            && self.live_bytes < crate::config::internal::KEEP_ACCEPTED_BODIES_BELOW_BYTES;
        if !keep {
            e.drop_body();
        }
        let after = outbox_cost(&e);
        self.live_bytes = self.live_bytes.saturating_sub(before) + after;
        if resolves {
            self.pending_remove_key(&e.from_peer_id, to, e.order);
        }
        self.insert_outbox(e);
    }

    /// Files an entry: resolved ones in compact form when it rebuilds them exactly.
    fn insert_outbox(&mut self, e: OutboxEntry) {
        if e.receipt.is_some()
            && let Some((key, s)) = Settled::from_entry(&e, &mut self.interner)
        {
            self.settled.insert(key, s);
            return;
        }
        self.sent_ids
            .insert((e.message_id.clone(), e.to.peer_id.clone()));
        if let Some(first) = &e.redelivered_from {
            self.redelivered
                .insert((first.clone(), e.message_id.clone()));
        }
        self.outbox
            .insert((e.to.peer_id.clone(), e.message_id.clone()), e);
    }

    /// Removes an entry from whichever map holds it, in full form.
    fn take_outbox(&mut self, to: &str, id: &str) -> Option<OutboxEntry> {
        if let Some(e) = self.outbox.remove(pair!(to, id)) {
            self.sent_ids.remove(pair!(id, to));
            if let Some(first) = &e.redelivered_from {
                self.redelivered.remove(pair!(first, id));
            }
            return Some(e);
        }
        let (key, s) = self.settled.remove_entry(SettledProbe::new(id, to).key())?;
        let e = s.to_entry(&key);
        self.interner.release(&key.route);
        Some(e)
    }

    /// Whether an outbox entry with this target and id exists (resolved or not).
    pub fn has_outbox(&self, to: &str, id: &str) -> bool {
        self.outbox.contains_key(pair!(to, id))
            || self.settled.contains_key(SettledProbe::new(id, to).key())
    }

    fn pending_insert(&mut self, e: &OutboxEntry) {
        let id = e.message_id.clone();
        match self.pending.get_mut(pair!(&e.from_peer_id, &e.to.peer_id)) {
            Some(route) => {
                route.insert(e.order, id);
            }
            None => {
                let key = (e.from_peer_id.clone(), e.to.peer_id.clone());
                self.pending.insert(key, BTreeMap::from([(e.order, id)]));
            }
        }
    }

    fn pending_remove(&mut self, e: &OutboxEntry) {
        self.pending_remove_key(&e.from_peer_id, &e.to.peer_id, e.order);
    }

    fn pending_remove_key(&mut self, from: &str, to: &str, order: u64) {
        if let Some(route) = self.pending.get_mut(pair!(from, to)) {
            route.remove(&order);
            if route.is_empty() {
                self.pending.remove(pair!(from, to));
            }
        }
    }

    /// Message ids of the unresolved entries of one route, in send order.
    pub fn route_pending_ids(&self, from: &str, to: &str) -> impl Iterator<Item = &String> {
        self.pending
            .get(pair!(from, to))
            .into_iter()
            .flat_map(|r| r.values())
    }

    /// Every outbox entry sent under `message_id`, whatever its target.
    pub fn outbox_by_id<'a>(&'a self, message_id: &'a str) -> impl Iterator<Item = OutboxEntry> {
        let full = self
            .sent_ids
            .range((message_id.to_string(), String::new())..)
            .take_while(move |(id, _)| id == message_id)
            .filter_map(move |(id, to)| self.outbox.get(&(to.clone(), id.clone())).cloned());
        let from = SettledKey::probe(message_id, "");
        let settled = self
            .settled
            .range(from..)
            .take_while(move |(k, _)| &*k.message_id == message_id)
            .map(|(k, s)| s.to_entry(k));
        full.chain(settled)
    }

    /// Whether `message_id` is one of the route's unresolved entries (by its send order:
    /// no walk over the route).
    pub fn route_holds(&self, from: &str, to: &str, message_id: &str) -> bool {
        let Some(e) = self.unresolved_get(to, message_id) else {
            return false;
        };
        self.pending
            .get(pair!(from, to))
            .and_then(|r| r.get(&e.order))
            .is_some_and(|id| id == message_id)
    }

    /// How many entries of one route are unresolved.
    pub fn route_pending_count(&self, from: &str, to: &str) -> usize {
        self.pending.get(pair!(from, to)).map_or(0, |r| r.len())
    }

    /// Every route with unresolved entries, (from, to) in order.
    pub fn pending_route_keys(&self) -> impl Iterator<Item = &(String, String)> {
        self.pending.keys()
    }

    fn add_inbox(&mut self, entry: Arc<InboxEntry>) {
        let key = (entry.recipient_peer_id.clone(), entry.sequence);
        // The recipient is almost always known already: its counters are updated in place,
        // and its peerId copied only for a first entry.
        let recipient = &entry.recipient_peer_id;
        match self.next_sequence.get_mut(recipient) {
            Some(next) => *next = (*next).max(entry.sequence + 1),
            None => {
                self.next_sequence
                    .insert(recipient.clone(), entry.sequence + 1);
            }
        }
        if is_unconsumed(entry.state) {
            match self.unconsumed.get_mut(recipient) {
                Some(n) => *n += 1,
                None => {
                    self.unconsumed.insert(recipient.clone(), 1);
                }
            }
        }
        self.live_bytes += inbox_cost(&entry) + RECEIPT_RESERVE_BYTES;
        self.dedup.insert(dedup_key(&entry), key.clone());
        if let Some(o) = origin_key(&entry) {
            self.origins.insert(o, key.clone());
        }
        self.count_origin(&entry, true);
        self.inbox.insert(key, entry);
    }

    /// Keeps `instance_origins` in step with the entries that carry an origin.
    fn count_origin(&mut self, e: &InboxEntry, added: bool) {
        let Some(origin) = &e.origin else {
            return;
        };
        let instance = &e.from.instance_id;
        if added {
            match self.instance_origins.get_mut(instance) {
                Some(slot) => slot.1 += 1,
                None => {
                    self.instance_origins
                        .insert(instance.clone(), (origin.clone(), 1));
                }
            }
        } else if let Some(slot) = self.instance_origins.get_mut(instance) {
            slot.1 = slot.1.saturating_sub(1);
            if slot.1 == 0 {
                self.instance_origins.remove(instance);
            }
        }
    }

    fn set_inbox_state(
        &mut self,
        recipient: &str,
        seq: u64,
        state: ReceiptState,
        at: u64,
        reply: &Option<String>,
    ) {
        let Some(e) = self.inbox.get_mut(&(recipient.to_string(), seq)) else {
            return;
        };
        let e = Arc::make_mut(e);
        let was = is_unconsumed(e.state);
        e.state = state;
        e.state_at_ms = at;
        if reply.is_some() {
            e.reply_message_id = reply.clone();
        }
        if was
            && !is_unconsumed(state)
            && let Some(n) = self.unconsumed.get_mut(recipient)
        {
            *n = n.saturating_sub(1);
        }
    }

    fn remove_inbox(&mut self, recipient: &str, seq: u64) {
        let key = (recipient.to_string(), seq);
        let Some(e) = self.inbox.remove(&key) else {
            return;
        };
        if is_unconsumed(e.state)
            && let Some(n) = self.unconsumed.get_mut(recipient)
        {
            *n = n.saturating_sub(1);
        }
        self.live_bytes = self
            .live_bytes
            .saturating_sub(inbox_cost(&e) + RECEIPT_RESERVE_BYTES);
        self.dedup.remove(dedup_ref(&e).find());
        self.count_origin(&e, false);
        if let Some(o) = origin_ref(&e)
            && self.origins.get(o.find()) == Some(&key)
        {
            self.origins.remove(o.find());
        }
        if let Some(c) = self.context.remove(&key) {
            self.live_bytes = self.live_bytes.saturating_sub(small_cost(&c.note));
        }
    }

    /// True when `record` is a valid next step from this state: what it adds is absent, what
    /// it changes or removes exists, and receipts only move forward. Recovery refuses a
    /// journal whose records do not fit (RECOVERY_REQUIRED); live operations assert it.
    pub fn fits(&self, record: &Record) -> bool {
        let inbox = |r: &String, s: &u64| self.inbox.get(&(r.clone(), *s));
        match record {
            Record::InboxAdded { entry } => {
                !self
                    .inbox
                    .contains_key(&(entry.recipient_peer_id.clone(), entry.sequence))
                    && !self.dedup.contains_key(dedup_ref(entry).find())
                    && origin_ref(entry).is_none_or(|o| !self.origins.contains_key(o.find()))
            }
            Record::InboxState {
                recipient,
                sequence,
                state,
                ..
            } => inbox(recipient, sequence).is_some_and(|e| e.state.may_become(*state)),
            Record::Context { entry } => {
                inbox(&entry.recipient_peer_id, &entry.sequence).is_some()
                    && !self
                        .context
                        .contains_key(&(entry.recipient_peer_id.clone(), entry.sequence))
            }
            Record::PushQueued { push } => !self.pushes.contains_key(&push.cursor),
            Record::PushDone { cursor } => self.pushes.contains_key(cursor),
            Record::OutboxAdded { entry } => !self.has_outbox(&entry.to.peer_id, &entry.message_id),
            Record::OutboxReceipt {
                to_peer_id,
                message_id,
                receipt,
                event,
                ..
            } => {
                self.outbox_view(to_peer_id, message_id)
                    .is_some_and(|e| e.receipt.as_ref().is_none_or(|r| receipt.may_replace(r)))
                    && event.is_none_or(|c| !self.events.contains_key(&c))
            }
            Record::Event { event } => !self.events.contains_key(&event.cursor),
            Record::InboxRemoved {
                recipient,
                sequence,
            } => inbox(recipient, sequence).is_some(),
            Record::OutboxRemoved {
                to_peer_id,
                message_id,
            } => self.has_outbox(to_peer_id, message_id),
            Record::EventRemoved { cursor } => self.events.contains_key(cursor),
            Record::InboxSender {
                recipient,
                sequence,
                from,
            } => inbox(recipient, sequence).is_some_and(|e| {
                let mut moved = InboxEntry::clone(e);
                moved.from = from.clone();
                moved.from.run_id == e.from.run_id && !self.dedup.contains_key(&dedup_key(&moved))
            }),
        }
    }

    /// The serialisable image for a snapshot.
    pub fn image(&self) -> StateImage {
        StateImage {
            inbox: self.inbox.values().map(|e| InboxEntry::clone(e)).collect(),
            outbox: self.outbox().collect(),
            context: self.context.values().cloned().collect(),
            pushes: self.pushes.values().cloned().collect(),
            events: self.events.values().cloned().collect(),
            next_sequence: self
                .next_sequence
                .iter()
                .map(|(k, v)| (k.clone(), *v))
                .collect(),
            next_order: self.next_order,
            next_push: self.next_push,
            next_event: self.next_event,
        }
    }

    /// The snapshot image as a serialisable view: the same JSON as `image()` serialised,
    /// produced entry by entry without copying the state (compaction writes it streaming).
    pub fn image_view(&self) -> impl Serialize + '_ {
        ImageView(self)
    }

    /// Rebuilds the state and its indexes from a snapshot image.
    pub fn from_image(image: StateImage) -> State {
        let mut s = State::default();
        for entry in image.inbox {
            s.add_inbox(Arc::new(entry));
        }
        for entry in image.outbox {
            s.apply(&Record::OutboxAdded { entry });
        }
        for entry in image.context {
            s.apply(&Record::Context { entry });
        }
        for push in image.pushes {
            s.apply(&Record::PushQueued { push });
        }
        for event in image.events {
            s.apply(&Record::Event { event });
        }
        for (peer, next) in image.next_sequence {
            let n = s.next_sequence.entry(peer).or_insert(1);
            *n = (*n).max(next);
        }
        s.next_order = s.next_order.max(image.next_order);
        s.next_push = s.next_push.max(image.next_push);
        s.next_event = s.next_event.max(image.next_event);
        s
    }

    /// All inbox entries in (recipient, sequence) order.
    pub fn inbox(&self) -> impl Iterator<Item = &InboxEntry> {
        self.inbox.values().map(|e| &**e)
    }

    /// All outbox entries (resolved ones rebuilt from their compact form).
    pub fn outbox(&self) -> impl Iterator<Item = OutboxEntry> + '_ {
        self.outbox
            .values()
            .cloned()
            .chain(self.settled.iter().map(|(k, s)| s.to_entry(k)))
    }

    /// (from peerId, to peerId, message id, send order) of every outbox entry, without
    /// rebuilding the entries.
    pub fn outbox_keys(&self) -> impl Iterator<Item = (&str, &str, &str, u64)> {
        let full = self.outbox.values().map(|e| {
            (
                e.from_peer_id.as_str(),
                e.to.peer_id.as_str(),
                e.message_id.as_str(),
                e.order,
            )
        });
        let settled = self.settled.iter().map(|(k, s)| {
            (
                k.route.from_peer_id.as_str(),
                k.to_peer_id(),
                &*k.message_id,
                s.order(),
            )
        });
        full.chain(settled)
    }

    /// Entries a recipient answered `accepted` for and nothing later, that still hold their
    /// body and were not sent again: the messages whose other copy is only the recipient's.
    /// Full-form entries first, then compact ones; `pick` chooses by target, at most `max`.
    pub fn accepted_held(&self, pick: &dyn Fn(&TargetRef) -> bool, max: usize) -> Vec<OutboxEntry> {
        let (full, compact) = self.accepted_bodies();
        let full = full.filter(|e| pick(&e.to)).cloned();
        let compact = compact
            .filter(|(k, _)| pick(&k.route.to))
            .map(|(k, s)| s.to_entry(k));
        full.chain(compact).take(max).collect()
    }

    /// The full-form and the compact entries that [`accepted_held`](Self::accepted_held)
    /// draws from: answered `accepted` and nothing later, body kept, not sent again.
    fn accepted_bodies(
        &self,
    ) -> (
        impl Iterator<Item = &OutboxEntry>,
        impl Iterator<Item = (&SettledKey, &Settled)>,
    ) {
        let held = |to: &str, id: &str| !self.redelivered.contains(pair!(to, id));
        let full = self.outbox.values().filter(move |e| {
            e.receipt
                .as_ref()
                .is_some_and(|r| r.state == ReceiptState::Accepted)
                && e.content_digest.is_none()
                && held(&e.to.peer_id, &e.message_id)
        });
        let compact = self.settled.iter().filter(move |(k, s)| {
            s.holds_body()
                && s.retention_view().0 == ReceiptState::Accepted
                && held(k.to_peer_id(), &k.message_id)
        });
        (full, compact)
    }

    /// The distinct root targets on other instances than `own_instance` of
    /// [`accepted_held`](Self::accepted_held) entries, at most `max`.
    pub fn accepted_targets(&self, own_instance: &str, max: usize) -> Vec<TargetRef> {
        let mut seen: BTreeSet<String> = BTreeSet::new();
        let mut out = Vec::new();
        let remote = |t: &TargetRef| t.instance_id != own_instance && t.run_id.is_none();
        let (full, compact) = self.accepted_bodies();
        for t in full.map(|e| &e.to).chain(compact.map(|(k, _)| &k.route.to)) {
            if out.len() >= max {
                break;
            }
            if remote(t) && seen.insert(t.peer_id.clone()) {
                out.push(t.clone());
            }
        }
        out
    }

    /// How many messages this store sent again to a successor incarnation.
    pub fn redelivered_count(&self) -> usize {
        self.redelivered.len()
    }

    /// Unresolved outbox entries (never in compact form).
    pub fn unresolved_outbox(&self) -> impl Iterator<Item = &OutboxEntry> {
        self.outbox.values().filter(|e| e.receipt.is_none())
    }

    /// The exact incarnation behind a peerId we sent to, if any outbox entry names it.
    pub fn sent_target(&self, peer_id: &str) -> Option<TargetRef> {
        self.interner.target_of(peer_id).cloned().or_else(|| {
            self.outbox
                .values()
                .find(|e| e.to.peer_id == peer_id)
                .map(|e| e.to.clone())
        })
    }

    /// One outbox entry by its target and message id.
    pub fn outbox_get(&self, to_peer_id: &str, message_id: &str) -> Option<OutboxEntry> {
        self.outbox_view(to_peer_id, message_id)
            .map(Cow::into_owned)
    }

    /// [`outbox_get`](Self::outbox_get) borrowed when the entry is unresolved (the common
    /// case on the send path: no copy of the entry and its body), rebuilt when settled.
    pub(crate) fn outbox_view(
        &self,
        to_peer_id: &str,
        message_id: &str,
    ) -> Option<Cow<'_, OutboxEntry>> {
        if let Some(e) = self.outbox.get(pair!(to_peer_id, message_id)) {
            return Some(Cow::Borrowed(e));
        }
        let probe = SettledProbe::new(message_id, to_peer_id);
        let (k, s) = self.settled.get_key_value(probe.key())?;
        Some(Cow::Owned(s.to_entry(k)))
    }

    /// The unresolved (full-form) outbox entry by its target and message id.
    pub(crate) fn unresolved_get(
        &self,
        to_peer_id: &str,
        message_id: &str,
    ) -> Option<&OutboxEntry> {
        self.outbox
            .get(pair!(to_peer_id, message_id))
            .filter(|e| e.receipt.is_none())
    }

    /// The record that makes room for one more event of `local_peer_id`: removing its
    /// oldest once it holds `RECEIPT_EVENTS_KEPT`.
    pub(crate) fn event_room(&self, local_peer_id: &str) -> Option<Record> {
        let cursors = self.peer_events.get(local_peer_id)?;
        if cursors.len() < crate::config::internal::RECEIPT_EVENTS_KEPT {
            return None;
        }
        let cursor = *cursors.first()?;
        Some(Record::EventRemoved { cursor })
    }

    /// Events beyond `RECEIPT_EVENTS_KEPT` per local peer (a store written before the bound),
    /// oldest first.
    pub(crate) fn events_over_bound(&self) -> impl Iterator<Item = u64> + '_ {
        let kept = crate::config::internal::RECEIPT_EVENTS_KEPT;
        self.peer_events
            .values()
            .flat_map(move |c| c.iter().take(c.len().saturating_sub(kept)).copied())
    }

    /// The context-journal entry of one message, if any.
    pub fn context_of(&self, recipient: &str, sequence: u64) -> Option<&ContextEntry> {
        self.context.get(&(recipient.to_string(), sequence))
    }

    /// Estimated stored bytes (what admission compares with the storage budget).
    pub fn live_bytes(&self) -> u64 {
        self.live_bytes
    }

    /// The sending session `instance_id` stated with an earlier message, if any.
    pub fn origin_of(&self, instance_id: &str) -> Option<&String> {
        self.instance_origins.get(instance_id).map(|(o, _)| o)
    }

    /// Unconsumed messages held for `recipient`.
    pub fn unconsumed(&self, recipient: &str) -> u64 {
        self.unconsumed.get(recipient).copied().unwrap_or(0)
    }
}

/// Serialises a [`State`] exactly as its [`StateImage`] (same fields, order and element
/// types), one entry at a time.
struct ImageView<'a>(&'a State);

/// A sequence produced on demand from an iterator factory.
struct SeqOf<F>(F);

impl<F, I> Serialize for SeqOf<F>
where
    F: Fn() -> I,
    I: Iterator,
    I::Item: Serialize,
{
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq((self.0)())
    }
}

impl Serialize for ImageView<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let st = self.0;
        let mut out = s.serialize_struct("StateImage", 9)?;
        out.serialize_field("inbox", &SeqOf(|| st.inbox.values()))?;
        out.serialize_field("outbox", &SeqOf(|| st.outbox()))?;
        out.serialize_field("context", &SeqOf(|| st.context.values()))?;
        out.serialize_field("pushes", &SeqOf(|| st.pushes.values()))?;
        out.serialize_field("events", &SeqOf(|| st.events.values()))?;
        out.serialize_field(
            "nextSequence",
            &SeqOf(|| st.next_sequence.iter().map(|(k, v)| (k, *v))),
        )?;
        out.serialize_field("nextOrder", &st.next_order)?;
        out.serialize_field("nextPush", &st.next_push)?;
        out.serialize_field("nextEvent", &st.next_event)?;
        out.end()
    }
}
