//! Per-sender-instance token buckets (`ratePerSecond`, `rateBurst`). In memory only: a restart
//! gives every sender a full bucket, which costs at most one burst.

use crate::config::Limits;
use std::collections::HashMap;

#[derive(Clone, Debug, PartialEq)]
struct Bucket {
    /// Tokens scaled by 1000 so refills at millisecond resolution stay integral.
    milli_tokens: u64,
    at_ms: u64,
}

/// Buckets keyed by sender instance id, bounded by `inboundConnections` idle-pruned entries.
#[derive(Clone, Debug, Default)]
pub struct RateTable {
    buckets: HashMap<String, Bucket>,
}

impl RateTable {
    fn refilled(limits: &Limits, b: &Bucket, now_ms: u64) -> u64 {
        let cap = limits.rate_burst.saturating_mul(1000);
        let gained = now_ms
            .saturating_sub(b.at_ms)
            .saturating_mul(limits.rate_per_second);
        b.milli_tokens.saturating_add(gained).min(cap)
    }

    /// True when `instance` may send one more message now (does not take the token).
    pub fn allows(&self, limits: &Limits, instance: &str, now_ms: u64) -> bool {
        match self.buckets.get(instance) {
            None => limits.rate_burst >= 1,
            Some(b) => Self::refilled(limits, b, now_ms) >= 1000,
        }
    }

    /// Takes one token for an admitted message.
    pub fn take(&mut self, limits: &Limits, instance: &str, now_ms: u64) {
        self.prune(limits, now_ms);
        let full = Bucket {
            milli_tokens: limits.rate_burst.saturating_mul(1000),
            at_ms: now_ms,
        };
        let b = self.buckets.entry(instance.to_string()).or_insert(full);
        let tokens = Self::refilled(limits, b, now_ms);
        *b = Bucket {
            milli_tokens: tokens.saturating_sub(1000),
            at_ms: now_ms,
        };
    }

    /// Keeps the table bounded: buckets that refilled completely carry no information.
    fn prune(&mut self, limits: &Limits, now_ms: u64) {
        let bound = limits.inbound_connections.max(1) as usize;
        if self.buckets.len() < bound {
            return;
        }
        let cap = limits.rate_burst.saturating_mul(1000);
        self.buckets
            .retain(|_, b| Self::refilled(limits, b, now_ms) < cap);
        if self.buckets.len() >= bound {
            // Still full of active senders: forget the one idle longest (it regains a burst).
            if let Some(oldest) = self
                .buckets
                .iter()
                .min_by_key(|(_, b)| b.at_ms)
                .map(|(k, _)| k.clone())
            {
                self.buckets.remove(&oldest);
            }
        }
    }

    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }
}
