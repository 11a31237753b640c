//! The event bus of a root: `peer_update` and `resource_update` events fanned out to bounded
//! subscriber queues (`peer host --json`, MCP notifications, waiting readers). A subscriber
//! that does not keep up loses events, never blocks the root; the loss is counted and shown.
//! Events are published typed and kept as the JSON objects subscribers print or forward: this
//! module is the runtime's event-stream edge.

use crate::protocol::message;
use crossbeam_channel::{Receiver, Sender, TrySendError, bounded};
use parking_lot::Mutex;
use serde::Serialize;
use serde_json::Value;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

pub use crate::config::internal::SUBSCRIBER_QUEUE;
pub use crate::config::internal::SUBSCRIBERS_MAX;

/// Called after an event was queued for a subscriber that sleeps on something other than its
/// channel (keep it short: it runs in the publishing thread).
pub type Notify = std::sync::Arc<dyn Fn() + Send + Sync>;

#[derive(Default)]
pub struct Bus {
    subscribers: Mutex<Vec<(Sender<Value>, Option<Notify>)>>,
    /// `subscribers.len()` as of its last change, read without the lock: with nobody
    /// subscribed (a `peer host` that prints nothing) a publish costs one atomic load.
    listening: AtomicUsize,
    sequence: AtomicU64,
    dropped: AtomicU64,
}

impl Bus {
    /// A new subscription; `None` when the bus already has its maximum. Closed subscriptions
    /// are pruned at the next publish.
    pub fn subscribe(&self) -> Option<Receiver<Value>> {
        self.subscribe_notified(None)
    }

    /// [`subscribe`](Self::subscribe), calling `notify` after each event queued for it: a
    /// subscriber waiting on several sources sleeps on one condition variable instead of a
    /// channel select, which spins and calls `sched_yield` before it parks.
    pub fn subscribe_notified(&self, notify: Option<Notify>) -> Option<Receiver<Value>> {
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
    pub fn publish<T: Serialize>(&self, event: &T) {
        let seq = self.sequence.fetch_add(1, Ordering::SeqCst) + 1;
        if self.listening.load(Ordering::SeqCst) == 0 {
            return;
        }
        let Ok(mut event) = serde_json::to_value(event) else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        if let Some(obj) = event.as_object_mut() {
            obj.insert("busSequence".into(), Value::from(seq));
        }
        // The subscribers' wake-ups run after the lock is released: a wake-up is a futex
        // syscall, and connection threads publishing arrivals at once would otherwise queue
        // on this lock behind it (spinning, then yielding, then parking).
        let mut wake: Vec<Notify> = Vec::new();
        let mut subs = self.subscribers.lock();
        // The last subscriber (usually the only one) gets the event itself, not a copy.
        let mut left = subs.len();
        subs.retain(|(s, notify)| {
            left = left.saturating_sub(1);
            let copy = if left == 0 {
                std::mem::take(&mut event)
            } else {
                event.clone()
            };
            match s.try_send(copy) {
                Ok(()) => {
                    wake.extend(notify.iter().cloned());
                    true
                }
                Err(TrySendError::Full(_)) => {
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                    true
                }
                Err(TrySendError::Disconnected(_)) => false,
            }
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

/// A receipt of one of this root's sent messages changed.
#[derive(Serialize)]
pub struct ReceiptChanged {
    event: &'static str,
    kind: &'static str,
    #[serde(flatten)]
    pub receipt: message::Receipt,
}

impl ReceiptChanged {
    pub fn of(receipt: &crate::messaging::Receipt) -> ReceiptChanged {
        ReceiptChanged {
            event: PEER_UPDATE,
            kind: "receipt",
            receipt: receipt.clone().into(),
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messaging::{Receipt, ReceiptState};
    use serde_json::json;

    fn next(rx: &crossbeam_channel::Receiver<Value>) -> Value {
        rx.try_recv().expect("an event")
    }

    /// The typed events are the objects the bus carried when they were built by hand.
    #[test]
    fn events_keep_their_shape() {
        let bus = Bus::default();
        let rx = bus.subscribe().unwrap();
        let r = Receipt {
            message_id: "m-1".into(),
            from_peer_id: "p-a".into(),
            to_peer_id: "p-b".into(),
            state: ReceiptState::Consumed,
            sequence: 3,
            correlation_id: "m-0".into(),
            at_ms: 7,
            reply_message_id: None,
            code: None,
        };
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

    /// Every live subscriber gets the same event, the last one included (it gets the event
    /// itself rather than a copy); a closed one is pruned.
    #[test]
    fn every_subscriber_gets_the_same_event() {
        let bus = Bus::default();
        let (a, b) = (bus.subscribe().unwrap(), bus.subscribe().unwrap());
        drop(bus.subscribe().unwrap());
        let c = bus.subscribe().unwrap();
        bus.publish(&ProblemRecorded::of("sweep", "IO", "disk full"));
        let want = json!({"event": "peer_update", "kind": "problem", "what": "sweep",
            "code": "IO", "message": "disk full", "busSequence": 1});
        for rx in [&a, &b, &c] {
            assert_eq!(next(rx), want);
        }
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
        use std::sync::{Arc, OnceLock};
        let bus = Arc::new(Bus::default());
        let rx_slot: Arc<OnceLock<Receiver<Value>>> = Arc::new(OnceLock::new());
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
