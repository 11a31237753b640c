//! Custody rules of peer messaging as a pure state machine (no files, sockets or clock):
//! acceptance and deduplication, outbox intent, receipts that only move forward, reply and
//! correlation validation, per-route ordering, expiry and retention. `crate::store` makes
//! its records durable; the transport and runtime drive it.
//!
//! - `types`: principals, sends, receipts, entries, queries.
//! - `state`: the durable state and the journal records applied to it.
//! - `machine`: shared checks and local reads.
//! - `inbound`: receiver custody, recipient transitions, receipt pushes, status.
//! - `outbound`: outbox intent, custody answers, receipts from targets, route queues.
//! - `route`: which outbox entry of a route may go next.
//! - `settled`: the compact in-memory form of resolved outbox entries.
//! - `retention`: expiry and retention sweeps.
//! - `rate`: per-sender token buckets.
//! - `ids`: retry-stable and fresh message ids.
#![forbid(unsafe_code)]

/// `Eq` and `Ord` for a borrowed-key trait object `dyn $trait`, by the tuple its method
/// `$parts` returns: an owned map key and the borrowed probe that implement the trait then
/// compare exactly alike, so a `BTreeMap` is searched without building an owned key.
macro_rules! order_by_parts {
    ($trait:ident, $parts:ident) => {
        impl PartialEq for dyn $trait + '_ {
            fn eq(&self, o: &Self) -> bool {
                self.$parts() == o.$parts()
            }
        }

        impl Eq for dyn $trait + '_ {}

        impl PartialOrd for dyn $trait + '_ {
            fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
                Some(self.cmp(o))
            }
        }

        impl Ord for dyn $trait + '_ {
            fn cmp(&self, o: &Self) -> std::cmp::Ordering {
                self.$parts().cmp(&o.$parts())
            }
        }
    };
}

pub(crate) mod ids;
pub(crate) mod inbound;
pub(crate) mod machine;
pub(crate) mod outbound;
pub mod rate;
pub(crate) mod retention;
pub(crate) mod route;
pub(crate) mod settled;
pub(crate) mod state;
pub(crate) mod types;

#[cfg(test)]
mod tests;

pub use ids::{derive_message_id, new_message_id};
pub use machine::{Machine, Outcome};
pub use outbound::{RouteView, is_retryable};
pub use route::{RouteDecision, RouteQueue};
pub use state::{Record, State, StateImage};
pub use types::*;
