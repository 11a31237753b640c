//! The event bus of a root: `peer_update` and `resource_update` events fanned out to bounded
//! subscriber queues (`peer host --json`, MCP notifications, waiting readers). A subscriber
//! that does not keep up loses events, never blocks the root; the loss is counted and shown.
//! Events are published typed and encoded once, as the JSON text subscribers print or
//! forward, shared by every subscriber: this module is the runtime's event-stream edge.

use crate::protocol::message::{Field, WithFields};
use crossbeam_channel::{Receiver, Sender, TrySendError, bounded};
use parking_lot::Mutex;
use serde::Serialize;
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

pub use crate::config::internal::SUBSCRIBER_QUEUE;
pub use crate::config::internal::SUBSCRIBERS_MAX;

/// Called after an event was queued for a subscriber that sleeps on something other than its
/// channel (keep it short: it runs in the publishing thread).
pub type Notify = Arc<dyn Fn() + Send + Sync>;

/// One published event as every subscriber gets it: a JSON object (with its `busSequence`,
/// keys in the order a `Value` object writes them) in compact text. `peer host --json` writes
/// it as it is; a subscriber that needs fields parses it.
pub type Event = Arc<str>;

/// What the bus can publish: an event that encodes itself with its bus sequence number.
pub trait Encode {
    /// The event's JSON text with `busSequence` added, byte for byte what serialising the
    /// event's `Value` with that key inserted writes (`by_value`).
    fn encode(&self, bus_sequence: u64) -> serde_json::Result<String>;
}

/// The general encoding: the event's `Value` (an object, so its keys sorted), `busSequence`
/// inserted. Events published rarely use it; the frequent ones write the same bytes from a
/// struct whose fields are declared in that sorted order, without building the `Value`.
pub fn by_value<T: Serialize>(event: &T, bus_sequence: u64) -> serde_json::Result<String> {
    let mut v = serde_json::to_value(event)?;
    if let Some(obj) = v.as_object_mut() {
        obj.insert("busSequence".into(), Value::from(bus_sequence));
    }
    serde_json::to_string(&v)
}

#[derive(Default)]
pub struct Bus {
    subscribers: Mutex<Vec<(Sender<Event>, Option<Notify>)>>,
    /// `subscribers.len()` as of its last change, read without the lock: with nobody
    /// subscribed (a `peer host` that prints nothing) a publish costs one atomic load.
    listening: AtomicUsize,
    sequence: AtomicU64,
    dropped: AtomicU64,
}

impl Bus {
    /// A new subscription; `None` when the bus already has its maximum. Closed subscriptions
    /// are pruned at the next publish.
    pub fn subscribe(&self) -> Option<Receiver<Event>> {
        self.subscribe_notified(None)
    }

    /// [`subscribe`](Self::subscribe), calling `notify` after each event queued for it: a
    /// subscriber waiting on several sources sleeps on one condition variable instead of a
    /// channel select, which spins and calls `sched_yield` before it parks.
    pub fn subscribe_notified(&self, notify: Option<Notify>) -> Option<Receiver<Event>> {
        let mut subs = self.subscribers.lock();
        if subs.len() >= SUBSCRIBERS_MAX {
            return None;
        }
        let (tx, rx) = bounded(SUBSCRIBER_QUEUE);
        subs.push((tx, notify));
        self.listening.store(subs.len(), Ordering::SeqCst);
        Some(rx)
    }

    /// Stamps `event` with a bus sequence number and offers it to every subscriber. An event
    /// that cannot be encoded (none of ours) is counted as dropped. With no subscriber the
    /// event is only numbered: nobody could receive it, so it is not encoded.
    pub fn publish<T: Encode + ?Sized>(&self, event: &T) {
        let seq = self.sequence.fetch_add(1, Ordering::SeqCst) + 1;
        if self.listening.load(Ordering::SeqCst) == 0 {
            return;
        }
        let Ok(text) = event.encode(seq) else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        // Encoded once outside the lock; each subscriber gets a reference to the same text.
        let event: Event = Arc::from(text);
        // The subscribers' wake-ups run after the lock is released: a wake-up is a futex
        // syscall, and connection threads publishing arrivals at once would otherwise queue
        // on this lock behind it (spinning, then yielding, then parking).
        let mut wake: Vec<Notify> = Vec::new();
        let mut subs = self.subscribers.lock();
        subs.retain(|(s, notify)| match s.try_send(event.clone()) {
            Ok(()) => {
                wake.extend(notify.iter().cloned());
                true
            }
            Err(TrySendError::Full(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(TrySendError::Disconnected(_)) => false,
        });
        self.listening.store(subs.len(), Ordering::SeqCst);
        drop(subs);
        for n in wake {
            n();
        }
    }

    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// The `event` of every message, receipt and problem event.
const PEER_UPDATE: &str = "peer_update";

/// A message arrived for one of this root's recipients.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageArrived<'a> {
    event: &'static str,
    kind: &'static str,
    pub recipient: &'a str,
    pub message_id: &'a str,
    pub from: &'a str,
    pub from_alias: Option<&'a str>,
    pub sequence: u64,
    pub correlation_id: &'a str,
    pub reply_to: Option<&'a str>,
}

impl<'a> MessageArrived<'a> {
    /// The arrival `receipt` (the recipient's first) stands for.
    pub fn of(
        receipt: &'a crate::messaging::Receipt,
        reply_to: Option<&'a str>,
        from_alias: Option<&'a str>,
    ) -> MessageArrived<'a> {
        MessageArrived {
            event: PEER_UPDATE,
            kind: "message",
            recipient: &receipt.to_peer_id,
            message_id: &receipt.message_id,
            from: &receipt.from_peer_id,
            from_alias,
            sequence: receipt.sequence,
            correlation_id: &receipt.correlation_id,
            reply_to,
        }
    }
}

/// One per message a root receives: the encoding its `peer host --json` spends most on. The
/// keys are written in sorted order (the order a `Value` object writes them), and a string
/// that needs no escape (its ids always, and almost every alias) is copied as it is instead of
/// going through the serializer's byte-by-byte escaping.
impl Encode for MessageArrived<'_> {
    fn encode(&self, bus_sequence: u64) -> serde_json::Result<String> {
        use std::fmt::Write;
        // Four ids, an alias and the fixed keys: 256 bytes took a second buffer.
        let mut out = String::with_capacity(512);
        // Writing into a String cannot fail.
        let _ = write!(out, "{{\"busSequence\":{bus_sequence},\"correlationId\":");
        push_json_str(&mut out, self.correlation_id)?;
        out.push_str(",\"event\":");
        push_json_str(&mut out, self.event)?;
        out.push_str(",\"from\":");
        push_json_str(&mut out, self.from)?;
        out.push_str(",\"fromAlias\":");
        push_json_opt(&mut out, self.from_alias)?;
        out.push_str(",\"kind\":");
        push_json_str(&mut out, self.kind)?;
        out.push_str(",\"messageId\":");
        push_json_str(&mut out, self.message_id)?;
        out.push_str(",\"recipient\":");
        push_json_str(&mut out, self.recipient)?;
        out.push_str(",\"replyTo\":");
        push_json_opt(&mut out, self.reply_to)?;
        let _ = write!(out, ",\"sequence\":{}}}", self.sequence);
        Ok(out)
    }
}

/// `s` as a JSON string, the bytes serde_json writes: it escapes exactly the control
/// characters, `"` and `\\`, so text without them is written between quotes as it is.
fn push_json_str(out: &mut String, s: &str) -> serde_json::Result<()> {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push('"');
        out.push_str(s);
        out.push('"');
    } else {
        out.push_str(&serde_json::to_string(s)?);
    }
    Ok(())
}

fn push_json_opt(out: &mut String, s: Option<&str>) -> serde_json::Result<()> {
    match s {
        Some(s) => push_json_str(out, s),
        None => {
            out.push_str("null");
            Ok(())
        }
    }
}

/// A receipt of one of this root's sent messages changed.
#[derive(Serialize)]
pub struct ReceiptChanged<'a> {
    event: &'static str,
    kind: &'static str,
    #[serde(flatten)]
    pub receipt: &'a crate::messaging::Receipt,
}

impl<'a> ReceiptChanged<'a> {
    pub fn of(receipt: &'a crate::messaging::Receipt) -> ReceiptChanged<'a> {
        ReceiptChanged {
            event: PEER_UPDATE,
            kind: "receipt",
            receipt,
        }
    }
}

/// One or more per message a root sends (accepted, then consumed, replied…): the receipt's
/// fields flattened beside the bus sequence, in sorted key order (see [`Encode`]).
impl Encode for ReceiptChanged<'_> {
    fn encode(&self, bus_sequence: u64) -> serde_json::Result<String> {
        let extra = [
            ("busSequence", Field::Num(bus_sequence)),
            ("event", Field::Str(self.event)),
            ("kind", Field::Str(self.kind)),
        ];
        serde_json::to_string(&WithFields(self.receipt, &extra))
    }
}

/// A background failure no caller could be told about.
#[derive(Serialize)]
pub struct ProblemRecorded<'a> {
    event: &'static str,
    kind: &'static str,
    pub what: &'a str,
    pub code: &'a str,
    pub message: &'a str,
}

impl<'a> ProblemRecorded<'a> {
    pub fn of(what: &'a str, code: &'a str, message: &'a str) -> ProblemRecorded<'a> {
        ProblemRecorded {
            event: PEER_UPDATE,
            kind: "problem",
            what,
            code,
            message,
        }
    }
}

/// An accepted message sent again because its recipient's successor had lost the copy.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageRedelivered<'a> {
    event: &'static str,
    kind: &'static str,
    pub message_id: &'a str,
    /// The ended incarnation that had accepted the first copy.
    pub lost_by: &'a str,
    /// The successor the copy goes to.
    pub to: &'a str,
}

impl<'a> MessageRedelivered<'a> {
    pub fn of(message_id: &'a str, lost_by: &'a str, to: &'a str) -> MessageRedelivered<'a> {
        MessageRedelivered {
            event: PEER_UPDATE,
            kind: "redelivered",
            message_id,
            lost_by,
            to,
        }
    }
}

/// Rare: through the `Value`.
impl Encode for MessageRedelivered<'_> {
    fn encode(&self, bus_sequence: u64) -> serde_json::Result<String> {
        by_value(self, bus_sequence)
    }
}

/// Rare: through the `Value`.
impl Encode for ProblemRecorded<'_> {
    fn encode(&self, bus_sequence: u64) -> serde_json::Result<String> {
        by_value(self, bus_sequence)
    }
}

/// A resource journal entry (at most a few per resource operation): through the `Value`.
impl Encode for crate::toolspec::resource_answer::ResourceUpdate {
    fn encode(&self, bus_sequence: u64) -> serde_json::Result<String> {
        by_value(self, bus_sequence)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messaging::{Receipt, ReceiptState};
    use crate::protocol::strategies::{opt_text, receipt_state, text};
    use proptest::prelude::*;
    use serde_json::json;

    fn next(rx: &Receiver<Event>) -> Value {
        serde_json::from_str(&rx.try_recv().expect("an event")).expect("JSON text")
    }

    fn receipt() -> Receipt {
        Receipt {
            message_id: "m-1".into(),
            from_peer_id: "p-a".into(),
            to_peer_id: "p-b".into(),
            state: ReceiptState::Consumed,
            sequence: 3,
            correlation_id: "m-0".into(),
            at_ms: 7,
            reply_message_id: None,
            code: None,
        }
    }

    /// The typed events are the objects the bus carried when they were built by hand.
    #[test]
    fn events_keep_their_shape() {
        let bus = Bus::default();
        let rx = bus.subscribe().unwrap();
        let r = receipt();
        bus.publish(&MessageArrived::of(&r, Some("m-0"), None));
        assert_eq!(
            next(&rx),
            json!({"event": "peer_update", "kind": "message", "recipient": "p-b",
                "messageId": "m-1", "from": "p-a", "fromAlias": null, "sequence": 3,
                "correlationId": "m-0", "replyTo": "m-0", "busSequence": 1})
        );
        bus.publish(&ReceiptChanged::of(&r));
        let mut old = serde_json::to_value(&r).unwrap();
        let o = old.as_object_mut().unwrap();
        o.insert("event".into(), json!("peer_update"));
        o.insert("kind".into(), json!("receipt"));
        o.insert("busSequence".into(), json!(2));
        assert_eq!(next(&rx), old);
        bus.publish(&ProblemRecorded::of("sweep", "IO", "disk full"));
        assert_eq!(
            next(&rx),
            json!({"event": "peer_update", "kind": "problem", "what": "sweep", "code": "IO",
                "message": "disk full", "busSequence": 3})
        );
    }

    fn arb_receipt() -> impl Strategy<Value = Receipt> {
        (
            (text(), text(), text(), receipt_state()),
            (any::<u64>(), text(), any::<u64>(), opt_text(), opt_text()),
        )
            .prop_map(
                |((m, f, t, state), (sequence, c, at_ms, reply, code))| Receipt {
                    message_id: m,
                    from_peer_id: f,
                    to_peer_id: t,
                    state,
                    sequence,
                    correlation_id: c,
                    at_ms,
                    reply_message_id: reply,
                    code,
                },
            )
    }

    /// The text the old bus printed: the event's wire form as a `Value`, `busSequence`
    /// inserted, serialised (an arrival was its struct's `Value`; a receipt change flattened
    /// the wire receipt).
    fn old_receipt_text(r: &Receipt, seq: u64) -> String {
        let mut v = serde_json::to_value(r.clone()).unwrap();
        let o = v.as_object_mut().unwrap();
        o.insert("event".into(), json!("peer_update"));
        o.insert("kind".into(), json!("receipt"));
        o.insert("busSequence".into(), json!(seq));
        serde_json::to_string(&v).unwrap()
    }

    proptest! {
        /// The sorted structs write byte for byte what the `Value` path wrote, for any text
        /// (escapes, control characters, non-ASCII) and any numbers.
        #[test]
        fn typed_encodings_are_the_value_path_bytes(
            r in arb_receipt(),
            reply_to in opt_text(),
            alias in opt_text(),
            seq in any::<u64>(),
        ) {
            let arrival = MessageArrived::of(&r, reply_to.as_deref(), alias.as_deref());
            prop_assert_eq!(arrival.encode(seq).unwrap(), by_value(&arrival, seq).unwrap());
            let change = ReceiptChanged::of(&r);
            prop_assert_eq!(change.encode(seq).unwrap(), old_receipt_text(&r, seq));
            prop_assert_eq!(change.encode(seq).unwrap(), by_value(&change, seq).unwrap());
        }
    }

    /// Every live subscriber gets the same event, one shared text; a closed one is pruned.
    #[test]
    fn every_subscriber_gets_the_same_event() {
        let bus = Bus::default();
        let (a, b) = (bus.subscribe().unwrap(), bus.subscribe().unwrap());
        drop(bus.subscribe().unwrap());
        let c = bus.subscribe().unwrap();
        bus.publish(&ProblemRecorded::of("sweep", "IO", "disk full"));
        let want = r#"{"busSequence":1,"code":"IO","event":"peer_update","kind":"problem","message":"disk full","what":"sweep"}"#;
        let got: Vec<Event> = [&a, &b, &c]
            .iter()
            .map(|rx| rx.try_recv().unwrap())
            .collect();
        for e in &got {
            assert_eq!(&**e, want);
        }
        assert!(Arc::ptr_eq(&got[0], &got[2]));
        assert_eq!(bus.subscribers.lock().len(), 3);
    }

    /// With nobody subscribed an event is numbered but not kept; a later subscriber gets the
    /// next events, numbered on; once the last subscriber is gone and pruned, publishing is
    /// back to numbering only.
    #[test]
    fn events_nobody_listens_to_are_only_numbered() {
        let bus = Bus::default();
        bus.publish(&ProblemRecorded::of("sweep", "IO", "disk full"));
        assert_eq!(bus.listening.load(Ordering::SeqCst), 0);
        let rx = bus.subscribe().unwrap();
        bus.publish(&ProblemRecorded::of("sweep", "IO", "disk full"));
        assert_eq!(next(&rx)["busSequence"], json!(2));
        assert!(rx.try_recv().is_err());
        drop(rx);
        bus.publish(&ProblemRecorded::of("sweep", "IO", "disk full"));
        assert_eq!(bus.listening.load(Ordering::SeqCst), 0);
        assert_eq!(bus.dropped(), 0);
    }

    /// A subscriber's wake-up runs after the event is queued and outside the bus's lock: a
    /// wake-up that uses the bus itself (here: counts its subscriptions by adding one) does
    /// not deadlock, and it sees the event already queued.
    #[test]
    fn wake_ups_run_outside_the_lock_after_the_event_is_queued() {
        use std::sync::OnceLock;
        let bus = Arc::new(Bus::default());
        let rx_slot: Arc<OnceLock<Receiver<Event>>> = Arc::new(OnceLock::new());
        let seen = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let (b, slot, s) = (Arc::downgrade(&bus), rx_slot.clone(), seen.clone());
        let notify: Notify = Arc::new(move || {
            let queued = slot.get().map_or(0, |rx| rx.len());
            let extra = b.upgrade().and_then(|bus| bus.subscribe()).is_some();
            s.lock().push((queued, extra));
        });
        let rx = bus.subscribe_notified(Some(notify)).unwrap();
        rx_slot.set(rx).unwrap();
        bus.publish(&ProblemRecorded::of("sweep", "IO", "disk full"));
        bus.publish(&ProblemRecorded::of("sweep", "IO", "disk full"));
        assert_eq!(*seen.lock(), vec![(1, true), (2, true)]);
    }
}
