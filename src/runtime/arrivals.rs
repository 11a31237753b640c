//! The inbound side's memory (`Arrivals`): accepted `peer.send` arrivals whose answer is being
//! written, announced right after it, and the receipt events already shown to each model; and
//! announcing an arrival (the event bus, the auto handler).

use super::auto::Auto;
use super::events::Bus;
use crate::messaging::Receipt;
use parking_lot::Mutex;
use std::collections::HashMap;

/// What announcing an accepted `peer.send` needs besides its receipt.
pub struct ArrivalNote {
    pub reply_to: Option<String>,
    pub from_alias: Option<String>,
}

#[derive(Default)]
pub struct Arrivals {
    /// Accepted `peer.send` arrivals whose answer is being written ([`Self::defer`]).
    deferred: Mutex<Vec<(Receipt, ArrivalNote)>>,
    /// (message, event) cursors of what each local peer's model was already shown (in memory:
    /// a restarted root shows them again, which is harmless).
    model_cursors: Mutex<HashMap<String, (u64, u64)>>,
}

impl Arrivals {
    /// Keeps the arrival of a `peer.send` this root just accepted until its answer is written
    /// ([`announce_deferred`](Self::announce_deferred), from `Handler::after_reply`), so
    /// encoding and publishing the event is not on the sender's path. At most one per
    /// connection thread waits here: each announces after its own answer.
    pub fn defer(&self, receipt: Receipt, note: ArrivalNote) {
        self.deferred.lock().push((receipt, note));
    }

    /// Announces every arrival kept by [`defer`](Self::defer).
    pub fn announce_deferred(&self, bus: &Bus, auto: &Auto) {
        let pending = {
            let mut kept = self.deferred.lock();
            if kept.is_empty() {
                return;
            }
            std::mem::take(&mut *kept)
        };
        for (r, note) in pending {
            announce(
                bus,
                auto,
                &r,
                note.reply_to.as_deref(),
                note.from_alias.as_deref(),
            );
        }
    }

    /// (message, event) cursors of what a model was already shown.
    pub fn model_cursors(&self, peer_id: &str) -> (u64, u64) {
        self.model_cursors
            .lock()
            .get(peer_id)
            .copied()
            .unwrap_or((0, 0))
    }

    /// Advances the model's cursors; never moves them back.
    pub fn advance_model_cursors(&self, peer_id: &str, messages: Option<u64>, events: u64) {
        let mut m = self.model_cursors.lock();
        if m.len() >= crate::config::internal::MODEL_CURSORS_MAX && !m.contains_key(peer_id) {
            return;
        }
        let c = m.entry(peer_id.to_string()).or_insert((0, 0));
        if let Some(n) = messages {
            c.0 = c.0.max(n);
        }
        c.1 = c.1.max(events);
    }
}

/// Publishes the arrival of `r` on `bus` and wakes the `auto` handler.
pub fn announce(
    bus: &Bus,
    auto: &Auto,
    r: &Receipt,
    reply_to: Option<&str>,
    from_alias: Option<&str>,
) {
    bus.publish(&super::events::MessageArrived::of(r, reply_to, from_alias));
    auto.offer(|| super::auto::Arrival {
        message_id: r.message_id.clone(),
        from: r.from_peer_id.clone(),
        correlation_id: r.correlation_id.clone(),
        recipient: r.to_peer_id.clone(),
    });
}
