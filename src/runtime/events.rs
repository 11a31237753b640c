//! The event bus of a root: `peer_update` and `resource_update` events fanned out to bounded
//! subscriber queues (`peer host --json`, MCP notifications, waiting readers). A subscriber
//! that does not keep up loses events, never blocks the root; the loss is counted and shown.

use crossbeam_channel::{Receiver, Sender, TrySendError, bounded};
use parking_lot::Mutex;
use serde_json::Value;
use std::sync::atomic::{AtomicU64, Ordering};

pub use crate::config::internal::SUBSCRIBER_QUEUE;
pub use crate::config::internal::SUBSCRIBERS_MAX;

#[derive(Default)]
pub struct Bus {
    subscribers: Mutex<Vec<Sender<Value>>>,
    sequence: AtomicU64,
    dropped: AtomicU64,
}

impl Bus {
    /// A new subscription; `None` when the bus already has its maximum. Closed subscriptions
    /// are pruned at the next publish.
    pub fn subscribe(&self) -> Option<Receiver<Value>> {
        let mut subs = self.subscribers.lock();
        if subs.len() >= SUBSCRIBERS_MAX {
            return None;
        }
        let (tx, rx) = bounded(SUBSCRIBER_QUEUE);
        subs.push(tx);
        Some(rx)
    }

    /// Stamps `event` with a bus sequence number and offers it to every subscriber.
    pub fn publish(&self, mut event: Value) {
        let seq = self.sequence.fetch_add(1, Ordering::SeqCst) + 1;
        if let Some(obj) = event.as_object_mut() {
            obj.insert("busSequence".into(), Value::from(seq));
        }
        let mut subs = self.subscribers.lock();
        subs.retain(|s| match s.try_send(event.clone()) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(TrySendError::Disconnected(_)) => false,
        });
    }

    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}
