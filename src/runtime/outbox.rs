//! The sending side's shared state: route queues by (sender, recipient) with the last
//! retryable failure of each blocked route, and the receipt subscriptions of connected
//! senders. The delivery and push logic that drives them is in `send`.

use crate::config::internal::SUBSCRIPTIONS_MAX;
use crate::error::Error;
use crate::messaging::{ReceiptState, RouteQueue};
use crate::transport::Notifier;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

/// Route queues by (sender peerId, recipient peerId).
pub type RouteMap = HashMap<(String, String), Arc<Mutex<RouteQueue>>>;

/// Subscribed senders by (sender instance, message id), with the last state notified.
pub type SubscriptionMap = HashMap<(String, String), (Notifier, Option<ReceiptState>)>;

#[derive(Default)]
pub struct Outbox {
    pub(crate) routes: Mutex<RouteMap>,
    /// The last retryable failure of each blocked route and when the route started failing,
    /// so messages behind its head and `peer status` report the real cause.
    pub(crate) route_errors: Mutex<HashMap<(String, String), (Error, u64)>>,
    pub(crate) subscriptions: Mutex<SubscriptionMap>,
}

impl Outbox {
    /// Remembers a receipt subscription of a connected sender (bounded).
    pub fn subscribe(&self, sender_instance: &str, message_id: &str, notifier: &Notifier) {
        let mut subs = self.subscriptions.lock();
        subs.retain(|_, (n, _)| !n.is_closed());
        if subs.len() < SUBSCRIPTIONS_MAX {
            subs.insert(
                (sender_instance.to_string(), message_id.to_string()),
                (notifier.clone(), None),
            );
        }
    }

    /// Tells a subscribed sender about a receipt change once per state (durable pushes may
    /// be retried many times; notifications are not repeated). Final states end the
    /// subscription.
    pub fn notify_subscriber(
        &self,
        sender_instance: &str,
        r: &crate::messaging::Receipt,
        from_run: Option<&str>,
    ) {
        let key = (sender_instance.to_string(), r.message_id.clone());
        let mut subs = self.subscriptions.lock();
        let Some((n, last)) = subs.get_mut(&key) else {
            return;
        };
        if *last == Some(r.state) {
            return;
        }
        *last = Some(r.state);
        let _ = n.push_receipt(&crate::protocol::message::ReceiptPush {
            version: crate::protocol::PROTOCOL_VERSION,
            from_run: from_run.map(str::to_string),
            receipt: r.clone().into(),
        });
        if r.state.is_final() {
            subs.remove(&key);
        }
    }
}
