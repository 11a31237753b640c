//! The sending side's part (`Outbox`): the authenticated pool to other roots, route queues by
//! (sender, recipient) with the last retryable failure of each blocked route, the receipt
//! subscriptions of connected senders and the backoff of receipt pushes; and what the search
//! for lost recipient copies remembers between passes (`Repair`). What drives them is in
//! `route`, `deliver`, `send` and `repair`.

use crate::config::internal::{
    PUSH_RETRY_MAX_MS, SUBSCRIPTIONS_MAX, TARGET_SESSIONS_MAX, WORKER_TICK_MS,
};
use crate::error::{Code, Error, Result};
use crate::messaging::{ReceiptState, RouteQueue, RouteView};
use crate::store::{Applying, StoreHandle};
use crate::transport::{Notifier, Pool};
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

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

pub struct Outbox {
    /// Authenticated connections to other roots.
    pool: Pool,
    routes: Mutex<RouteMap>,
    /// The last retryable failure of each blocked route and when the route started failing,
    /// so messages behind its head and `peer status` report the real cause.
    route_errors: Mutex<HashMap<(String, String), (Error, u64)>>,
    subscriptions: Mutex<SubscriptionMap>,
    /// Receipt pushes that failed with a retryable answer, by sender instance: (consecutive
    /// failures, next attempt in ms). Bounded by `SUBSCRIPTIONS_MAX`; cleared when nothing is
    /// queued.
    push_retry: Mutex<HashMap<String, (u32, u64)>>,
}

impl Outbox {
    pub fn new(pool: Pool) -> Outbox {
        Outbox {
            pool,
            routes: Mutex::default(),
            route_errors: Mutex::default(),
            subscriptions: Mutex::default(),
            push_retry: Mutex::default(),
        }
    }

    /// The connections to other roots.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The route of `from` to `to`, made when new. Past `4 × connections` routes, the ones
    /// nobody holds and that keep nothing are dropped first.
    pub fn route(&self, from: &str, to: &str, connections: u64) -> Arc<Mutex<Route>> {
        let mut routes = self.routes.lock();
        if routes.len() > 4 * connections as usize {
            routes.retain(|_, r| Arc::strong_count(r) > 1 || r.lock().worth_keeping());
        }
        routes
            .entry((from.to_string(), to.to_string()))
            .or_default()
            .clone()
    }

    /// The last retryable failure of the route of `from` to `to` and since when it fails.
    pub fn route_error(&self, from: &str, to: &str) -> Option<(Error, u64)> {
        self.route_errors
            .lock()
            .get(&(from.to_string(), to.to_string()))
            .cloned()
    }

    /// The route of `from` to `to` got an answer: it no longer fails.
    pub fn route_answered(&self, from: &str, to: &str) {
        let mut errors = self.route_errors.lock();
        // The key is built only when there is a failure to clear (two copies per send).
        if !errors.is_empty() {
            errors.remove(&(from.to_string(), to.to_string()));
        }
    }

    /// The route of `from` to `to` failed with the retryable `e` at `now_ms`: remembered as
    /// its latest cause, failing since its first (at most `4 × connections` routes).
    pub fn route_failed(&self, from: &str, to: &str, e: &Error, now_ms: u64, connections: u64) {
        let mut errors = self.route_errors.lock();
        let key = (from.to_string(), to.to_string());
        if let Some(slot) = errors.get_mut(&key) {
            slot.0 = e.clone();
        } else if errors.len() < 4 * connections as usize {
            errors.insert(key, (e.clone(), now_ms));
        }
    }

    /// Nothing is queued to push: every backoff is forgotten.
    pub fn pushes_done(&self) {
        self.push_retry.lock().clear();
    }

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

/// What the search for lost recipient copies (`super::repair`) remembers between passes.
#[derive(Default)]
pub struct Repair {
    last: Mutex<Option<Instant>>,
    /// Whether the last pass found accepted messages to watch: only then does the worker
    /// wake for the next one, so an idle root keeps its idle wake-up rate.
    watching: AtomicBool,
    /// Target instance → the session its live record stated.
    sessions: Mutex<HashMap<String, String>>,
    /// Ended target instances whose successor said their store verified and holds their mail
    /// (`TARGET_ENDED`): not asked about again (at most [`TARGET_SESSIONS_MAX`]).
    vouched: Mutex<HashSet<String>>,
}

impl Repair {
    pub fn sessions_known(&self) -> u64 {
        self.sessions.lock().len() as u64
    }

    /// Whether a pass is due (the last began `every` ago or more); if so, it begins now.
    pub(super) fn pass_due(&self, every: Duration) -> bool {
        let mut last = self.last.lock();
        if last.is_some_and(|t| t.elapsed() < every) {
            return false;
        }
        *last = Some(Instant::now());
        true
    }

    pub(super) fn watching(&self) -> bool {
        self.watching.load(Ordering::Relaxed)
    }

    pub(super) fn set_watching(&self, watching: bool) {
        self.watching.store(watching, Ordering::Relaxed);
    }

    pub(super) fn vouched(&self) -> HashSet<String> {
        self.vouched.lock().clone()
    }

    pub(super) fn vouch(&self, instance_id: &str) {
        let mut vouched = self.vouched.lock();
        if vouched.len() < TARGET_SESSIONS_MAX {
            vouched.insert(instance_id.to_string());
        }
    }

    pub(super) fn remember_session(&self, instance_id: &str, session: String) {
        let mut sessions = self.sessions.lock();
        if sessions.len() < TARGET_SESSIONS_MAX || sessions.contains_key(instance_id) {
            sessions.insert(instance_id.to_string(), session);
        }
    }

    pub(super) fn session_of(&self, instance_id: &str) -> Option<String> {
        self.sessions.lock().get(instance_id).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outbox() -> Outbox {
        let me = crate::transport::LocalIdentity {
            instance_id: crate::identity::new_instance_id(),
            keys: Arc::new(crate::identity::KeyPair::generate()),
        };
        let limits = crate::config::Limits::default();
        Outbox::new(Pool::new(me, &limits, Arc::new(|_, _| {})))
    }

    #[test]
    fn a_failing_route_keeps_its_first_failure_time_and_latest_cause_until_answered() {
        let o = outbox();
        o.route_failed("a", "b", &Error::new(Code::PeerOffline, "first"), 10, 16);
        o.route_failed("a", "b", &Error::new(Code::Timeout, "second"), 20, 16);
        let (e, since) = o.route_error("a", "b").unwrap();
        assert_eq!(
            (e.code, e.message.as_str(), since),
            (Code::Timeout, "second", 10)
        );
        assert!(o.route_error("b", "a").is_none(), "a route has a direction");
        o.route_answered("a", "b");
        assert!(o.route_error("a", "b").is_none());
    }

    #[test]
    fn remembered_route_failures_are_bounded_by_four_per_connection() {
        let o = outbox();
        let timeout = Error::new(Code::Timeout, "t");
        for i in 0..10 {
            o.route_failed("a", &format!("p{i}"), &timeout, 1, 2);
        }
        let kept = (0..10)
            .filter(|i| o.route_error("a", &format!("p{i}")).is_some())
            .count();
        assert_eq!(kept, 8);
    }

    #[test]
    fn a_held_route_is_shared_and_survives_the_pruning_of_idle_ones() {
        let o = outbox();
        let held = o.route("a", "b", 1);
        assert!(Arc::ptr_eq(&held, &o.route("a", "b", 1)));
        for i in 0..8 {
            drop(o.route("a", &format!("p{i}"), 1));
        }
        assert!(Arc::ptr_eq(&held, &o.route("a", "b", 1)));
        assert!(
            o.routes.lock().len() <= 4 + 1,
            "idle routes past the bound are dropped"
        );
    }

    #[test]
    fn repair_memory_is_bounded_and_a_pass_begins_once_per_interval() {
        let r = Repair::default();
        for i in 0..TARGET_SESSIONS_MAX + 5 {
            r.remember_session(&format!("i{i}"), format!("s{i}"));
            r.vouch(&format!("i{i}"));
        }
        assert_eq!(r.sessions_known(), TARGET_SESSIONS_MAX as u64);
        assert_eq!(r.vouched().len(), TARGET_SESSIONS_MAX);
        // A known instance's session is still updated at the bound.
        r.remember_session("i0", "s-new".into());
        assert_eq!(r.session_of("i0").as_deref(), Some("s-new"));
        let hour = Duration::from_secs(3600);
        assert!(r.pass_due(hour));
        assert!(!r.pass_due(hour), "the second pass waits for the interval");
        assert!(r.pass_due(Duration::ZERO));
    }
}

#[cfg(test)]
#[path = "outbox_tests.rs"]
mod store_tests;
