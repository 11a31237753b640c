//! Route driving: per-route ordering (an unresolved head is retried with bounded backoff
//! before anything behind it moves), one delivery attempt of a head and what it records, the
//! answer a caller hears, and the background pass that retries stuck routes.

use super::core::{Core, Route};
use crate::clock;
use crate::error::{Code, Error, Result};
use crate::messaging::{
    OutboxEntry, Receipt, ReceiptState, RouteDecision, TargetRef, is_retryable,
};
use crate::store::flush::Answer;
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::config::internal::ROUTES_PER_PASS;

impl Core {
    /// The route of `from` to `to` (see [`Outbox::route`](super::outbox::Outbox::route)).
    pub(super) fn route(&self, from: &str, to: &str) -> Arc<Mutex<Route>> {
        self.outbox.route(from, to, self.limits().connections)
    }

    /// Works a route until `want` is resolved (or the head gives up / `wait` is false and the
    /// head is backing off). Returns `want`'s answer when asked for one.
    pub fn drive_route(
        &self,
        from: &str,
        to: &TargetRef,
        want: Option<&str>,
        wait: bool,
    ) -> Option<Result<Receipt>> {
        self.drive_route_stated(from, to, want, wait)
            .map(|a| a.map(|(r, _)| r))
    }

    /// [`drive_route`](Self::drive_route), with how the recipient answered: `Accepted` only
    /// for an `accepted` receipt this very call's attempt of `want` got (never one read from
    /// the stored state or another caller's attempt).
    fn drive_route_stated(
        &self,
        from: &str,
        to: &TargetRef,
        want: Option<&str>,
        wait: bool,
    ) -> Option<Result<(Receipt, Answer)>> {
        let route = self.route(from, &to.peer_id);
        self.drive_route_on(&route, from, to, want, wait)
    }

    /// [`drive_route_stated`](Self::drive_route_stated) on `route`, the route of `from` to
    /// `to` the caller already holds (a send looks it up once, not once more to drive it).
    pub(super) fn drive_route_on(
        &self,
        route: &Mutex<Route>,
        from: &str,
        to: &TargetRef,
        want: Option<&str>,
        wait: bool,
    ) -> Option<Result<(Receipt, Answer)>> {
        let from_state = |r: Result<Receipt>| r.map(|r| (r, Answer::Other));
        let mut r = route.lock();
        let mut last_err: Option<Error> = None;
        loop {
            let view = match r.settled_view(&self.store, from, &to.peer_id, want) {
                Ok(v) => v,
                Err(e) => return want.map(|_| Err(e)),
            };
            if let Some(w) = want.filter(|_| !view.want_pending) {
                return Some(from_state(self.outbox_answer(from, &to.peer_id, w)));
            }
            let head = view.head.as_ref();
            match r.queue.next(head, self.limits(), clock::now_ms()) {
                RouteDecision::Idle => {
                    return want.map(|w| from_state(self.outbox_answer(from, &to.peer_id, w)));
                }
                RouteDecision::Send(id) => {
                    let Some(entry) = head.filter(|e| e.message_id == id) else {
                        continue;
                    };
                    // The head was read as applied: an intent another caller just made may
                    // not be in the journal file yet, and no byte of it leaves before it is.
                    if let Err(e) = self.store.wait_written() {
                        return want.map(|_| Err(e));
                    }
                    match self.attempt(entry, &mut r) {
                        // The answer is the receipt in hand: our copy of it may not be
                        // applied yet (the route waits for it before its next read).
                        Ok((receipt, stated)) if want == Some(id.as_str()) => {
                            return Some(attempt_answer(receipt, stated));
                        }
                        Ok(_) => {}
                        Err(e) => last_err = Some(e),
                    }
                }
                RouteDecision::WaitUntil(at) if wait && !self.stopping.load(Ordering::SeqCst) => {
                    let pause = at
                        .saturating_sub(clock::now_ms())
                        .min(self.limits().acknowledgement_ms);
                    std::thread::sleep(Duration::from_millis(pause.max(1)));
                }
                RouteDecision::WaitUntil(_) | RouteDecision::GaveUp(_) => {
                    let head = head.map(|e| e.message_id.clone()).unwrap_or_default();
                    let cause = last_err
                        .take()
                        .or_else(|| self.outbox.route_error(from, &to.peer_id).map(|(e, _)| e));
                    return want.map(|w| Err(blocked(w, &head, cause)));
                }
            }
        }
    }

    /// One delivery attempt of a route's head. A failure is recorded durably before anyone
    /// hears it; a receipt is queued for recording and returned at once, with the
    /// recipient's `flushedDevice` statement.
    fn attempt(&self, entry: &OutboxEntry, r: &mut Route) -> Result<(Receipt, Option<u64>)> {
        let outcome = self.deliver(entry);
        let e = match outcome {
            Ok((receipt, stated)) => {
                r.queue.resolved(&entry.message_id);
                self.outbox
                    .route_answered(&entry.from_peer_id, &entry.to.peer_id);
                // A receipt is the recipient's durable statement and the caller holds it: our
                // copy need be neither durable nor applied before the caller hears `accepted`
                // (a crash before its record is durable only makes recovery re-ask, and the
                // recipient answers the same receipt). The route keeps the ticket and waits for
                // it before it next reads its route (`Route::settled_view`).
                match self.store.outbox_receipt_queued(
                    &entry.to.peer_id,
                    &entry.message_id,
                    receipt.clone(),
                ) {
                    Ok(ticket) => r.receipt = Some(ticket),
                    // Not recorded: the entry stays unresolved and the worker re-asks.
                    Err(_) => self.store.nudge_worker(),
                }
                return Ok((receipt, stated));
            }
            Err(e) => e,
        };
        // A failure we record is our own verdict, so it is durable before anyone hears it (a
        // retryable one records nothing). If recording fails the store is poisoned, which the
        // route's next read reports.
        let _ = self
            .store
            .outbox_result(&entry.to.peer_id, &entry.message_id, Err(e.code));
        match e {
            e if is_retryable(e.code) => {
                let now = clock::now_ms();
                r.queue.failed(&entry.message_id, self.limits(), now);
                self.outbox.route_failed(
                    &entry.from_peer_id,
                    &entry.to.peer_id,
                    &e,
                    now,
                    self.limits().connections,
                );
                Err(e)
            }
            e => {
                // A typed refusal is terminal: the route moves on.
                r.queue.resolved(&entry.message_id);
                Err(e)
            }
        }
    }

    /// The current answer for one of our outbox entries: its receipt, or the refusal.
    pub(super) fn outbox_answer(&self, from: &str, to: &str, message_id: &str) -> Result<Receipt> {
        let (f, t, id) = (from.to_string(), to.to_string(), message_id.to_string());
        // The applied state: it includes a receipt whose fdatasync may still be running (see
        // `StoreHandle::outbox_receipt_queued`).
        let entry = self
            .store
            .peek(move |m| {
                m.state()
                    .outbox_get(&t, &id)
                    .filter(|e| e.from_peer_id == f)
            })?
            .ok_or_else(|| Error::new(Code::NotFound, format!("no outbox entry {message_id}")))?;
        match entry.receipt {
            Some(r) => receipt_answer(r),
            None => Err(Error::new(
                Code::Timeout,
                format!(
                    "message {message_id} is not yet acknowledged; it stays queued in the outbox"
                ),
            )),
        }
    }

    /// One pass of the route retrier: every route with an unresolved head gets one
    /// non-waiting drive. Heads that gave up start over when `restart_gave_up` is set (the
    /// worker does so every `GAVE_UP_RETRY_MS`). Returns whether any route was unresolved
    /// (true also when the store could not say).
    pub fn retry_routes(&self, restart_gave_up: bool) -> bool {
        let Ok(routes) = self.store.pending_routes() else {
            return true;
        };
        let pending = !routes.is_empty();
        for (from, to_peer) in routes.into_iter().take(ROUTES_PER_PASS) {
            let (f, t) = (from.clone(), to_peer.clone());
            let head = self
                .store
                .peek(move |m| m.route_head(&f, &t).map(|e| e.to.clone()));
            let Ok(Some(target)) = head else { continue };
            {
                let route = self.route(&from, &to_peer);
                // A caller holds this route (the map and we hold the other two
                // references): it drives the route itself as soon as its intent is written.
                if Arc::strong_count(&route) > 2 {
                    continue;
                }
                // A sender is working this route right now: leave it to them.
                let Some(mut q) = route.try_lock() else {
                    continue;
                };
                // Only look: `next` would mark the head in flight without sending it.
                let gave_up = q.queue.failures() > self.limits().route_retries;
                if gave_up && restart_gave_up {
                    q.queue.reset();
                }
            }
            let _ = self.drive_route(&from, &target, None, false);
        }
        pending
    }
}

/// The answer of a caller's own delivery attempt: the receipt (or the refusal it states), and
/// the recipient's `flushedDevice` statement, which counts only for an `accepted` receipt.
fn attempt_answer(receipt: Receipt, stated: Option<u64>) -> Result<(Receipt, Answer)> {
    let answer = match receipt.state {
        ReceiptState::Accepted => Answer::Accepted(stated),
        _ => Answer::Other,
    };
    receipt_answer(receipt).map(|r| (r, answer))
}

/// What a send's caller hears for a receipt: the receipt, or the refusal it states.
fn receipt_answer(r: Receipt) -> Result<Receipt> {
    if r.state != ReceiptState::Refused {
        return Ok(r);
    }
    let code = r
        .code
        .as_deref()
        .and_then(Code::from_name)
        .unwrap_or(Code::Io);
    // TARGET_ENDED is also our own verdict when a retry finds the incarnation gone: say what
    // the evidence shows (it has ended), not that the recipient refused anything.
    let why = if code == Code::TargetEnded {
        format!(
            "{} has ended; message {} is not retried",
            r.to_peer_id, r.message_id
        )
    } else {
        format!("{} refused message {}", r.to_peer_id, r.message_id)
    };
    Err(Error::new(code, why))
}

fn blocked(want: &str, head: &str, cause: Option<Error>) -> Error {
    let (code, why) = match cause {
        Some(e) if matches!(e.code, Code::QueueFull | Code::RateLimited) => (e.code, e.message),
        Some(e) => (
            Code::Timeout,
            format!("not yet acknowledged ({}: {})", e.code.name(), e.message),
        ),
        None => (
            Code::Timeout,
            "not yet acknowledged: the recipient did not answer".to_string(),
        ),
    };
    if head == want || head.is_empty() {
        Error::new(
            code,
            format!("{why}; message {want} stays in the outbox and is retried in the background"),
        )
    } else {
        Error::new(
            code,
            format!("{why}; message {want} waits behind unresolved message {head} on this route"),
        )
    }
}
