//! The sending side's shared state: route queues by (sender, recipient) with the last
//! retryable failure of each blocked route, and the receipt subscriptions of connected
//! senders; what the search for lost recipient copies remembers between passes. The delivery
//! and push logic that drives them is in `send` (and `repair`).

use crate::config::internal::{PUSH_RETRY_MAX_MS, SUBSCRIPTIONS_MAX, WORKER_TICK_MS};
use crate::error::{Code, Error, Result};
use crate::messaging::{ReceiptState, RouteQueue, RouteView};
use crate::store::{Applying, StoreHandle};
use crate::transport::Notifier;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// Route queues by (sender peerId, recipient peerId).
pub type RouteMap = HashMap<(String, String), Arc<Mutex<Route>>>;

/// One route's bookkeeping, under the mutex every driver of the route holds: the retry state
/// of its head, and the receipt it last recorded while that record may not be applied yet.
#[derive(Default)]
pub struct Route {
    pub queue: RouteQueue,
    /// The sender's copy of the last receipt this route got, queued to the store writer
    /// without waiting: until it is applied, a read of the route's unresolved entries would
    /// still list that message, so the next driver waits for it first
    /// ([`settled_view`](Self::settled_view)).
    pub receipt: Option<Applying<()>>,
}

impl Route {
    /// The route as applied (its head, and whether `want` is still unresolved on it), read
    /// only once the receipt this route last queued is applied: otherwise the message that
    /// receipt resolved would still be the head and sent again. Usually it already is: the
    /// writer takes jobs in order and took it long before any job queued after it.
    pub fn settled_view(
        &mut self,
        store: &StoreHandle,
        from: &str,
        to: &str,
        want: Option<&str>,
    ) -> Result<RouteView> {
        if let Some(ticket) = self.receipt.take() {
            match store.wait_applied(ticket) {
                // A write the custody machine refused applied nothing: the state reads as is.
                Err(e) if matches!(e.code, Code::Timeout | Code::Disconnected) => return Err(e),
                _ => {}
            }
        }
        store.route_view(from, to, want)
    }

    /// Whether the route holds anything worth keeping when nobody drives it: a head that
    /// failed, or a receipt not yet applied.
    pub fn worth_keeping(&self) -> bool {
        self.queue.failures() > 0 || self.receipt.as_ref().is_some_and(|t| !t.is_done())
    }
}

/// Subscribed senders by (sender instance, message id), with the last state notified.
pub type SubscriptionMap = HashMap<(String, String), (Notifier, Option<ReceiptState>)>;

#[derive(Default)]
pub struct Outbox {
    pub(crate) routes: Mutex<RouteMap>,
    /// The last retryable failure of each blocked route and when the route started failing,
    /// so messages behind its head and `peer status` report the real cause.
    pub(crate) route_errors: Mutex<HashMap<(String, String), (Error, u64)>>,
    pub(crate) subscriptions: Mutex<SubscriptionMap>,
    /// Receipt pushes that failed with a retryable answer, by sender instance: (consecutive
    /// failures, next attempt in ms). Bounded by `SUBSCRIPTIONS_MAX`; cleared when nothing is
    /// queued.
    pub(crate) push_retry: Mutex<HashMap<String, (u32, u64)>>,
}

impl Outbox {
    /// When pushes to `instance` are backed off at `now_ms`: the time of the next attempt.
    pub fn push_deferred(&self, instance: &str, now_ms: u64) -> Option<u64> {
        let retry = self.push_retry.lock();
        retry
            .get(instance)
            .map(|(_, at)| *at)
            .filter(|at| *at > now_ms)
    }

    /// A push to `instance` failed with a retryable answer: the next attempt waits
    /// `WORKER_TICK_MS` doubled per consecutive failure, at most `PUSH_RETRY_MAX_MS` (the
    /// sender is not proven gone, so it is never given up on). Returns that time.
    pub fn push_failed(&self, instance: &str, now_ms: u64) -> u64 {
        let mut retry = self.push_retry.lock();
        let failures = retry.get(instance).map_or(0, |(n, _)| *n).saturating_add(1);
        let delay = WORKER_TICK_MS
            .saturating_mul(1u64 << failures.min(16))
            .min(PUSH_RETRY_MAX_MS);
        let at = now_ms.saturating_add(delay);
        if retry.len() < SUBSCRIPTIONS_MAX || retry.contains_key(instance) {
            retry.insert(instance.to_string(), (failures, at));
        }
        at
    }

    /// A push to `instance` was answered: no backoff any more.
    pub fn push_succeeded(&self, instance: &str) {
        self.push_retry.lock().remove(instance);
    }

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
            receipt: r.clone(),
        });
        if r.state.is_final() {
            subs.remove(&key);
        }
    }
}

/// Remembered target sessions (their records are reclaimed once they end).
pub const SESSIONS_MAX: usize = 1024;

/// What the search for lost recipient copies (`super::repair`) remembers between passes.
#[derive(Default)]
pub struct Repair {
    pub(crate) last: Mutex<Option<Instant>>,
    /// Whether the last pass found accepted messages to watch: only then does the worker
    /// wake for the next one, so an idle root keeps its idle wake-up rate.
    pub(crate) watching: std::sync::atomic::AtomicBool,
    /// Target instance → the session its live record stated.
    pub(crate) sessions: Mutex<HashMap<String, String>>,
    /// Ended target instances whose successor said their store verified and holds their mail
    /// (`TARGET_ENDED`): not asked about again (at most [`SESSIONS_MAX`]).
    pub(crate) vouched: Mutex<std::collections::HashSet<String>>,
}

impl Repair {
    pub fn sessions_known(&self) -> u64 {
        self.sessions.lock().len() as u64
    }
}
