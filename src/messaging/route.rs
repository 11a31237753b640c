//! Per-route send order (sender → recipient): only the unresolved head may be sent; it is
//! retried with bounded exponential backoff (`routeRetries`, capped at `acknowledgementMs`)
//! before any later message on that route advances. Pure: the caller supplies time and the
//! route's head, its first unresolved entry (from `route_view`).

use super::types::OutboxEntry;
use crate::config::Limits;

/// What the route's sender thread should do now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RouteDecision {
    /// Nothing unresolved on this route.
    Idle,
    /// Send (or resend) this message id now.
    Send(String),
    /// The head is backing off; ask again at this time.
    WaitUntil(u64),
    /// The head failed `routeRetries` times; report it and call `reset` on an explicit retry,
    /// a reconnect, or let expiry resolve it. Later messages stay behind it.
    GaveUp(String),
}

/// Retry bookkeeping of one route's head. In memory: after a restart the head is simply
/// retried from attempt zero.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RouteQueue {
    head: Option<String>,
    failures: u64,
    next_at_ms: u64,
    in_flight: bool,
}

impl RouteQueue {
    pub fn new() -> RouteQueue {
        RouteQueue::default()
    }

    /// The backoff after `failures` failed attempts: acknowledgementMs / 2^(routeRetries −
    /// failures), so the last retry waits a whole acknowledgement period.
    pub fn backoff_ms(limits: &Limits, failures: u64) -> u64 {
        let shift = limits.route_retries.saturating_sub(failures).min(63) as u32;
        (limits.acknowledgement_ms >> shift).max(1)
    }

    /// Decides what to do given the route's head (its first unresolved entry in send order).
    pub fn next(
        &mut self,
        head: Option<&OutboxEntry>,
        limits: &Limits,
        now_ms: u64,
    ) -> RouteDecision {
        let Some(head) = head else {
            *self = RouteQueue::default();
            return RouteDecision::Idle;
        };
        if self.head.as_deref() != Some(head.message_id.as_str()) {
            *self = RouteQueue {
                head: Some(head.message_id.clone()),
                ..RouteQueue::default()
            };
        }
        if self.failures > limits.route_retries {
            return RouteDecision::GaveUp(head.message_id.clone());
        }
        if self.in_flight {
            return RouteDecision::WaitUntil(now_ms.saturating_add(limits.acknowledgement_ms));
        }
        if now_ms < self.next_at_ms {
            return RouteDecision::WaitUntil(self.next_at_ms);
        }
        self.in_flight = true;
        RouteDecision::Send(head.message_id.clone())
    }

    /// True when `message_id` is the head and may be transmitted now (the tests' statement
    /// of the rule; the send path acts on `next`'s decision).
    #[cfg(test)]
    pub fn may_send(&self, head: Option<&OutboxEntry>, message_id: &str) -> bool {
        head.is_some_and(|h| h.message_id == message_id)
            && self.head.as_deref() == Some(message_id)
            && self.in_flight
    }

    /// The attempt for the head failed with a retryable code.
    pub fn failed(&mut self, message_id: &str, limits: &Limits, now_ms: u64) {
        if self.head.as_deref() != Some(message_id) {
            return;
        }
        self.in_flight = false;
        self.failures += 1;
        self.next_at_ms = now_ms.saturating_add(Self::backoff_ms(limits, self.failures));
    }

    /// The attempt got an answer that resolved the entry (accepted or refused).
    pub fn resolved(&mut self, message_id: &str) {
        if self.head.as_deref() == Some(message_id) {
            *self = RouteQueue::default();
        }
    }

    /// Start the head's retries over (explicit user retry, or the target reconnected).
    pub fn reset(&mut self) {
        *self = RouteQueue::default();
    }

    pub fn failures(&self) -> u64 {
        self.failures
    }
}
