//! The compact in-memory form of a resolved outbox entry. A sender keeps every resolved entry
//! for `retentionMs` (dedup of a retried id, `peer status`, later receipts), so its size is
//! what a long-lived sender's memory grows by: peer ids and targets are shared with every
//! other entry of the same route (interned), the body is its SHA-256 as 32 bytes, the
//! receipt keeps only what differs from the entry, and the rarely set fields live behind one
//! optional box. [`Settled::to_entry`] gives back exactly the [`OutboxEntry`] it was made
//! from; an entry that cannot be rebuilt exactly stays in full form.

use super::types::{MessageBody, OutboxEntry, Receipt, ReceiptState, TargetRef};
use std::collections::HashSet;
use std::sync::Arc;

/// Shared copies of the peer ids and targets that resolved entries name.
#[derive(Clone, Debug, Default)]
pub(crate) struct Interner {
    peers: HashSet<Arc<str>>,
    targets: HashSet<Arc<TargetRef>>,
}

/// Interned strings are a cache of what the entries name; two states with the same entries
/// are equal whatever their interners hold.
impl PartialEq for Interner {
    fn eq(&self, _: &Interner) -> bool {
        true
    }
}
impl Eq for Interner {}

impl Interner {
    pub fn peer(&mut self, s: &str) -> Arc<str> {
        if let Some(a) = self.peers.get(s) {
            return a.clone();
        }
        let a: Arc<str> = Arc::from(s);
        self.peers.insert(a.clone());
        a
    }

    pub fn target(&mut self, t: &TargetRef) -> Arc<TargetRef> {
        if let Some(a) = self.targets.get(t) {
            return a.clone();
        }
        let a = Arc::new(t.clone());
        self.targets.insert(a.clone());
        a
    }

    /// Forgets the shared copies of `s` once nothing else holds them.
    pub fn release(&mut self, s: &Settled, to: &Arc<TargetRef>) {
        // Held by the set, the caller's `to` and (for `from`) nothing else once removed.
        if Arc::strong_count(to) <= 2 {
            self.targets.remove(&**to);
        }
        if Arc::strong_count(&s.from_peer_id) <= 2 {
            self.peers.remove(&*s.from_peer_id);
        }
    }

    /// The target with this peer id, if a resolved entry names it.
    pub fn target_of(&self, peer_id: &str) -> Option<&TargetRef> {
        self.targets
            .iter()
            .find(|t| t.peer_id == peer_id)
            .map(|t| &**t)
    }
}

/// Key of a resolved entry, ordered by (hash of the message id, message id, target peer id):
/// every entry sent under one id is one range, and ids that grow in order (a counter, a
/// timestamp) still land at scattered places in the tree. Appending in key order leaves every
/// B-tree leaf just over half full; scattered inserts fill them to about 70 %, a fifth less
/// memory per entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SettledKey {
    hash: u64,
    pub message_id: Box<str>,
    pub to: Arc<TargetRef>,
}

/// FNV-1a: stable across runs and builds (the order only needs to be deterministic).
fn id_hash(id: &str) -> u64 {
    id.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl SettledKey {
    pub fn new(message_id: &str, to: Arc<TargetRef>) -> SettledKey {
        SettledKey {
            hash: id_hash(message_id),
            message_id: message_id.into(),
            to,
        }
    }
}

impl Ord for SettledKey {
    fn cmp(&self, o: &SettledKey) -> std::cmp::Ordering {
        (self.hash, &*self.message_id, self.to.peer_id.as_str()).cmp(&(
            o.hash,
            &*o.message_id,
            o.to.peer_id.as_str(),
        ))
    }
}
impl PartialOrd for SettledKey {
    fn partial_cmp(&self, o: &SettledKey) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Body {
    /// SHA-256 of a body that was dropped at resolution.
    Digest([u8; 32]),
    /// A body short enough to keep (see `OutboxEntry::drop_body`).
    Text(Box<str>),
}

/// Fields most entries leave unset.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Rare {
    topic: Option<String>,
    reply_to: Option<String>,
    /// None: the correlation id is the message id.
    correlation_id: Option<String>,
    reply_message_id: Option<String>,
    code: Option<String>,
}

/// A resolved outbox entry (its key holds the message id and target).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Settled {
    order: u64,
    pub from_peer_id: Arc<str>,
    body: Body,
    expires_at_ms: u64,
    created_at_ms: u64,
    updated_at_ms: u64,
    state: ReceiptState,
    sequence: u64,
    receipt_at_ms: u64,
    rare: Option<Box<Rare>>,
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

impl Settled {
    /// The compact form of a resolved entry, or None when it would not rebuild exactly (no
    /// receipt, a receipt naming other ids, an unusual digest).
    pub fn from_entry(e: &OutboxEntry, interner: &mut Interner) -> Option<(SettledKey, Settled)> {
        let r = e.receipt.as_ref()?;
        if r.message_id != e.message_id
            || r.from_peer_id != e.from_peer_id
            || r.to_peer_id != e.to.peer_id
            || r.correlation_id != e.correlation_id
        {
            return None;
        }
        let body = match &e.content_digest {
            Some(d) if e.body.content.is_empty() => Body::Digest(digest_bytes(d)?),
            Some(_) => return None,
            None => Body::Text(e.body.content.as_str().into()),
        };
        let rare = Rare {
            topic: e.body.topic.clone(),
            reply_to: e.body.reply_to.clone(),
            correlation_id: (e.correlation_id != e.message_id).then(|| e.correlation_id.clone()),
            reply_message_id: r.reply_message_id.clone(),
            code: r.code.clone(),
        };
        let key = SettledKey::new(&e.message_id, interner.target(&e.to));
        let s = Settled {
            order: e.order,
            from_peer_id: interner.peer(&e.from_peer_id),
            body,
            expires_at_ms: e.expires_at_ms,
            created_at_ms: e.created_at_ms,
            updated_at_ms: e.updated_at_ms,
            state: r.state,
            sequence: r.sequence,
            receipt_at_ms: r.at_ms,
            rare: (rare != Rare::default()).then(|| Box::new(rare)),
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
        let (content, content_digest) = match &self.body {
            Body::Digest(d) => (String::new(), Some(crate::identity::hex(d))),
            Body::Text(t) => (t.to_string(), None),
        };
        OutboxEntry {
            order: self.order,
            from_peer_id: self.from_peer_id.to_string(),
            to: (*key.to).clone(),
            message_id: message_id.clone(),
            body: MessageBody {
                content,
                topic: rare.and_then(|r| r.topic.clone()),
                reply_to: rare.and_then(|r| r.reply_to.clone()),
            },
            content_digest,
            correlation_id: correlation_id.clone(),
            expires_at_ms: self.expires_at_ms,
            created_at_ms: self.created_at_ms,
            receipt: Some(Receipt {
                message_id,
                from_peer_id: self.from_peer_id.to_string(),
                to_peer_id: key.to.peer_id.clone(),
                state: self.state,
                sequence: self.sequence,
                correlation_id,
                at_ms: self.receipt_at_ms,
                reply_message_id: rare.and_then(|r| r.reply_message_id.clone()),
                code: rare.and_then(|r| r.code.clone()),
            }),
            updated_at_ms: self.updated_at_ms,
        }
    }

    pub fn order(&self) -> u64 {
        self.order
    }

    /// What retention needs: (receipt state, expiry, last update).
    pub fn retention_view(&self) -> (ReceiptState, u64, u64) {
        (self.state, self.expires_at_ms, self.updated_at_ms)
    }
}
