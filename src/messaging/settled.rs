//! The compact in-memory form of a resolved outbox entry. A sender keeps every resolved entry
//! for `retentionMs` (dedup of a retried id, `peer status`, later receipts), so its size is
//! what a long-lived sender's memory grows by: the route (sender peer id and target) is shared
//! with every other entry of that route (interned), the body is its SHA-256 as 32 bytes, times
//! are offsets from the creation time, the receipt keeps only what differs from the entry, and
//! the rarely set fields live behind one optional box. [`Settled::to_entry`] gives back
//! exactly the [`OutboxEntry`] it was made from; an entry that cannot be rebuilt exactly (or
//! whose times do not fit the offsets) stays in full form.

use super::types::{MessageBody, OutboxEntry, Receipt, ReceiptState, TargetRef};
use std::collections::HashSet;
use std::sync::Arc;

/// One sender → target pair, shared by every resolved entry sent on it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Route {
    pub from_peer_id: String,
    pub to: TargetRef,
}

/// Shared copies of the routes that resolved entries name.
#[derive(Clone, Debug, Default)]
pub(crate) struct Interner {
    routes: HashSet<Arc<Route>>,
}

/// The interner is a cache of what the entries name; two states with the same entries are
/// equal whatever their interners hold.
impl PartialEq for Interner {
    fn eq(&self, _: &Interner) -> bool {
        true
    }
}
impl Eq for Interner {}

impl Interner {
    pub fn route(&mut self, from_peer_id: &str, to: &TargetRef) -> Arc<Route> {
        let probe = Route {
            from_peer_id: from_peer_id.to_string(),
            to: to.clone(),
        };
        if let Some(a) = self.routes.get(&probe) {
            return a.clone();
        }
        let a = Arc::new(probe);
        self.routes.insert(a.clone());
        a
    }

    /// Forgets the shared route of a removed entry once nothing else holds it (the set and
    /// the removed key are its last two holders).
    pub fn release(&mut self, route: &Arc<Route>) {
        if Arc::strong_count(route) <= 2 {
            self.routes.remove(&**route);
        }
    }

    /// The target with this peer id, if a resolved entry names it.
    pub fn target_of(&self, peer_id: &str) -> Option<&TargetRef> {
        self.routes
            .iter()
            .find(|r| r.to.peer_id == peer_id)
            .map(|r| &r.to)
    }
}

/// Key of a resolved entry, ordered by (hash of the message id, message id, target peer id):
/// every entry sent under one id is one range, and ids that grow in order (a counter, a
/// timestamp) still land at scattered places in the tree. Appending in key order leaves every
/// B-tree leaf just over half full; scattered inserts fill them further.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SettledKey {
    hash: u64,
    pub message_id: Box<str>,
    pub route: Arc<Route>,
}

/// FNV-1a: stable across runs and builds (the order only needs to be deterministic).
fn id_hash(id: &str) -> u64 {
    id.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl SettledKey {
    pub fn new(message_id: &str, route: Arc<Route>) -> SettledKey {
        SettledKey {
            hash: id_hash(message_id),
            message_id: message_id.into(),
            route,
        }
    }

    /// A key to look up (target peer id, message id); the sender is not part of the order.
    pub fn probe(message_id: &str, to_peer_id: &str) -> SettledKey {
        SettledKey::new(
            message_id,
            Arc::new(Route {
                from_peer_id: String::new(),
                to: TargetRef {
                    peer_id: to_peer_id.to_string(),
                    instance_id: String::new(),
                    run_id: None,
                },
            }),
        )
    }

    pub fn to_peer_id(&self) -> &str {
        &self.route.to.peer_id
    }
}

impl Ord for SettledKey {
    fn cmp(&self, o: &SettledKey) -> std::cmp::Ordering {
        self.order_parts().cmp(&o.order_parts())
    }
}

/// What a [`SettledKey`] is ordered by, so the map is searched with a borrowed
/// [`SettledProbe`] instead of a probe key built with an `Arc`ed route (four allocations per
/// lookup, one or two lookups per send).
pub(crate) trait SettledOrder {
    fn order_parts(&self) -> (u64, &str, &str);
}

impl SettledOrder for SettledKey {
    fn order_parts(&self) -> (u64, &str, &str) {
        (self.hash, &self.message_id, self.to_peer_id())
    }
}

/// A borrowed lookup key: (message id, target peer id).
pub(crate) struct SettledProbe<'a> {
    hash: u64,
    message_id: &'a str,
    to_peer_id: &'a str,
}

impl<'a> SettledProbe<'a> {
    pub fn new(message_id: &'a str, to_peer_id: &'a str) -> SettledProbe<'a> {
        SettledProbe {
            hash: id_hash(message_id),
            message_id,
            to_peer_id,
        }
    }

    /// As the map's key type borrows it.
    pub fn key(&self) -> &(dyn SettledOrder + 'a) {
        self
    }
}

impl SettledOrder for SettledProbe<'_> {
    fn order_parts(&self) -> (u64, &str, &str) {
        (self.hash, self.message_id, self.to_peer_id)
    }
}

impl<'a> std::borrow::Borrow<dyn SettledOrder + 'a> for SettledKey {
    fn borrow(&self) -> &(dyn SettledOrder + 'a) {
        self
    }
}

order_by_parts!(SettledOrder, order_parts);

impl PartialOrd for SettledKey {
    fn partial_cmp(&self, o: &SettledKey) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

/// Fields most entries leave unset.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Rare {
    /// A body short enough to be kept (see `OutboxEntry::drop_body`); None: dropped, the
    /// digest stands for it.
    text: Option<String>,
    topic: Option<String>,
    reply_to: Option<String>,
    /// None: the correlation id is the message id.
    correlation_id: Option<String>,
    reply_message_id: Option<String>,
    code: Option<String>,
}

/// A resolved outbox entry (its key holds the message id and route).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Settled {
    order: u64,
    created_at_ms: u64,
    sequence: u64,
    /// SHA-256 of the dropped body (zero when the body is kept in `rare.text`).
    digest: [u8; 32],
    rare: Option<Box<Rare>>,
    /// Offsets from `created_at_ms`.
    expires_in_ms: i32,
    updated_in_ms: i32,
    receipt_in_ms: i32,
    state: ReceiptState,
}

fn digest_bytes(hex: &str) -> Option<[u8; 32]> {
    let b = hex.as_bytes();
    if b.len() != 64 {
        return None;
    }
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; 32];
    for (i, pair) in b.chunks(2).enumerate() {
        out[i] = nibble(pair[0])? << 4 | nibble(pair[1])?;
    }
    Some(out)
}

/// `at - base` when it fits an i32 of milliseconds (about ±24 days).
fn offset(base: u64, at: u64) -> Option<i32> {
    let d = i128::from(at) - i128::from(base);
    i32::try_from(d).ok()
}

fn at(base: u64, offset: i32) -> u64 {
    base.saturating_add_signed(i64::from(offset))
}

impl Settled {
    /// The compact form of a resolved entry, or None when it would not rebuild exactly (no
    /// receipt, a receipt naming other ids, an unusual digest, times too far apart).
    pub fn from_entry(e: &OutboxEntry, interner: &mut Interner) -> Option<(SettledKey, Settled)> {
        let r = e.receipt.as_ref()?;
        if e.redelivered_from.is_some()
            || r.message_id != e.message_id
            || r.from_peer_id != e.from_peer_id
            || r.to_peer_id != e.to.peer_id
            || r.correlation_id != e.correlation_id
        {
            return None;
        }
        let (digest, text) = match &e.content_digest {
            Some(d) if e.body.content.is_empty() => (digest_bytes(d)?, None),
            Some(_) => return None,
            None => ([0; 32], Some(e.body.content.clone())),
        };
        let base = e.created_at_ms;
        let (expires_in_ms, updated_in_ms, receipt_in_ms) = (
            offset(base, e.expires_at_ms)?,
            offset(base, e.updated_at_ms)?,
            offset(base, r.at_ms)?,
        );
        let rare = Rare {
            text,
            topic: e.body.topic.clone(),
            reply_to: e.body.reply_to.clone(),
            correlation_id: (e.correlation_id != e.message_id).then(|| e.correlation_id.clone()),
            reply_message_id: r.reply_message_id.clone(),
            code: r.code.clone(),
        };
        let key = SettledKey::new(&e.message_id, interner.route(&e.from_peer_id, &e.to));
        let s = Settled {
            order: e.order,
            created_at_ms: base,
            sequence: r.sequence,
            digest,
            rare: (rare != Rare::default()).then(|| Box::new(rare)),
            expires_in_ms,
            updated_in_ms,
            receipt_in_ms,
            state: r.state,
        };
        Some((key, s))
    }

    /// The entry exactly as it was before compaction.
    pub fn to_entry(&self, key: &SettledKey) -> OutboxEntry {
        let rare = self.rare.as_deref();
        let message_id = key.message_id.to_string();
        let correlation_id = rare
            .and_then(|r| r.correlation_id.clone())
            .unwrap_or_else(|| message_id.clone());
        let (content, content_digest) = match rare.and_then(|r| r.text.clone()) {
            Some(text) => (text, None),
            None => (String::new(), Some(crate::identity::hex(&self.digest))),
        };
        let base = self.created_at_ms;
        let from_peer_id = key.route.from_peer_id.clone();
        OutboxEntry {
            order: self.order,
            from_peer_id: from_peer_id.clone(),
            to: key.route.to.clone(),
            message_id: message_id.clone(),
            body: MessageBody {
                content,
                topic: rare.and_then(|r| r.topic.clone()),
                reply_to: rare.and_then(|r| r.reply_to.clone()),
            },
            content_digest,
            correlation_id: correlation_id.clone(),
            expires_at_ms: at(base, self.expires_in_ms),
            created_at_ms: base,
            receipt: Some(Receipt {
                message_id,
                from_peer_id,
                to_peer_id: key.route.to.peer_id.clone(),
                state: self.state,
                sequence: self.sequence,
                correlation_id,
                at_ms: at(base, self.receipt_in_ms),
                reply_message_id: rare.and_then(|r| r.reply_message_id.clone()),
                code: rare.and_then(|r| r.code.clone()),
            }),
            updated_at_ms: at(base, self.updated_in_ms),
            redelivered_from: None,
        }
    }

    pub fn order(&self) -> u64 {
        self.order
    }

    /// Whether the entry still holds its body (only then can it be sent again).
    pub fn holds_body(&self) -> bool {
        self.rare.as_ref().is_some_and(|r| r.text.is_some())
    }

    /// What retention needs: (receipt state, expiry, last update).
    pub fn retention_view(&self) -> (ReceiptState, u64, u64) {
        let base = self.created_at_ms;
        (
            self.state,
            at(base, self.expires_in_ms),
            at(base, self.updated_in_ms),
        )
    }
}
