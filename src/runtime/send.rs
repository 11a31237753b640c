//! Outbound custody: outbox intent before the first byte, per-route ordering (an unresolved
//! head is retried with bounded backoff before anything behind it moves), delivery to another
//! root over the authenticated pool or to our own runs in-process, and the background workers
//! that retry stuck routes and push recipient-side receipts back to their senders.

use super::core::{Caller, Core, Route};
use crate::error::{Code, Error, Result};
use crate::messaging::{
    InboundSend, MessageBody, MessageRef, OutboundSend, OutboxEntry, Principal, Receipt,
    RouteDecision, TargetRef, is_retryable,
};
use crate::protocol::message::{PeerSend, ReceiptPush};
use crate::store::flush::{self, Answer};
use crate::{clock, directory};
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::config::internal::PUSH_BATCH;
use crate::config::internal::ROUTES_PER_PASS;
use crate::config::internal::WORKER_TICK_MS;
/// A route that gave up is tried again after this long.
pub const GAVE_UP_RETRY_MS: u64 = 5_000;

/// What a send needs beyond the tool arguments.
pub struct SendRequest {
    pub to: String,
    pub body: MessageBody,
    pub message_id: String,
}

impl Core {
    /// Resolves `to` to an exact incarnation: one of our own runs (or ourselves), or a live
    /// peer in the caller's scope.
    pub fn resolve_target(&self, to: &str) -> Result<TargetRef> {
        let name = to.strip_prefix('@').unwrap_or(to);
        if let Some(own) = self.own_run_target(name) {
            return own;
        }
        // Read before resolving: a change after this makes the cached entry invalid. A read
        // reused for a moment (`NAME_RECHECK_MS` says why a restart is still noticed).
        let mtime = self.presence.recent_directory_mtime();
        // Liveness still comes from evidence: a process provably gone is not reused.
        if let Some(t) = self.presence.cached_name(name, mtime)
            && matches!(
                self.presence.reach_of(&t.instance_id),
                super::core::Reach::Live(_)
            )
        {
            return Ok(t);
        }
        let viewer = self.viewer(None)?;
        match directory::resolve_cached(
            &self.ns,
            self.limits(),
            &viewer,
            name,
            &self.presence.files,
        ) {
            Ok(t) => {
                let t = TargetRef {
                    peer_id: t.peer_id,
                    instance_id: t.instance_id,
                    run_id: t.run_id,
                };
                self.presence.remember_name(name, mtime, &t);
                Ok(t)
            }
            Err(e)
                if matches!(e.code, Code::PeerOffline | Code::TargetEnded)
                    && crate::mention::is_peer_id(name) =>
            {
                self.known_incarnation_or_ended(name, e)
            }
            Err(e) => Err(e),
        }
    }

    /// One of our own runs named `name` (or its alias), or `TARGET_ENDED` for a retired run;
    /// `None` when `name` is not one of ours.
    fn own_run_target(&self, name: &str) -> Option<Result<TargetRef>> {
        let runs = self.runs.lock();
        let mine = runs.by_peer_or_alias(name);
        if mine.len() == 1 {
            return Some(Ok(TargetRef {
                peer_id: mine[0].peer_id.clone(),
                instance_id: self.instance_id.clone(),
                run_id: Some(mine[0].run_id.clone()),
            }));
        }
        if runs.is_retired_peer(name) {
            return Some(Err(Error::new(
                Code::TargetEnded,
                format!("run {name} has been retired"),
            )));
        }
        None
    }

    /// A peerId we have exchanged mail with names an exact incarnation even when the
    /// directory no longer lists it: its owning root answers for retired runs, and a vanished
    /// owner means the incarnation ended. Unknown peerIds keep the directory's error `e`.
    fn known_incarnation_or_ended(&self, name: &str, e: Error) -> Result<TargetRef> {
        match self.known_incarnation(name) {
            Some(t)
                if !matches!(
                    self.presence.reach_of(&t.instance_id),
                    super::core::Reach::Gone(_)
                ) =>
            {
                Ok(t)
            }
            Some(_) => Err(Error::new(
                Code::TargetEnded,
                format!("{name} has ended; refresh discovery and pick the current incarnation"),
            )),
            None => Err(e),
        }
    }

    /// Sends one message for `caller` and returns its custody receipt. Retries of the same
    /// message id return the original receipt.
    pub fn send_message(&self, caller: &Caller, req: SendRequest) -> Result<Receipt> {
        self.check_size(&req.body.content)?;
        let to = self.resolve_target(&req.to)?;
        self.send_to(caller, to, req)
    }

    /// Replies go to the exact incarnation that sent `original`, never to an alias: a
    /// restarted sender answers `TARGET_ENDED`.
    pub fn send_reply(
        &self,
        caller: &Caller,
        req: SendRequest,
        original: &crate::messaging::InboxEntry,
    ) -> Result<Receipt> {
        self.check_size(&req.body.content)?;
        let to = TargetRef {
            peer_id: original.from.peer_id.clone(),
            instance_id: original.from.instance_id.clone(),
            run_id: original.from.run_id.clone(),
        };
        self.send_to(caller, to, req)
    }

    fn check_size(&self, content: &str) -> Result<()> {
        let bytes = content.len() as u64;
        if bytes > self.limits().message_bytes {
            return Err(Error::new(
                Code::MessageTooLarge,
                format!(
                    "the message is {bytes} bytes; messageBytes allows {}",
                    self.limits().message_bytes
                ),
            ));
        }
        Ok(())
    }

    fn send_to(&self, caller: &Caller, to: TargetRef, req: SendRequest) -> Result<Receipt> {
        if caller.automatic {
            let correlation =
                self.correlation_for(caller, req.body.reply_to.as_deref(), &req.message_id);
            self.auto_budget.take(&correlation)?;
        }
        let intent = OutboundSend {
            from_peer_id: caller.peer_id.clone(),
            to: to.clone(),
            message_id: req.message_id.clone(),
            body: req.body,
            correlation_id: None,
            expires_at_ms: None,
        };
        // Held from before the intent is written until the send returns: the root worker
        // leaves a route a caller is about to drive to the caller instead of racing it for
        // the route lock (`retry_routes`).
        let route = self.route(&caller.peer_id, &to.peer_id);
        // The intent is in the journal file and written out to the device before the first
        // byte leaves (a crash of this process cannot lose it; the device's next cache flush
        // makes it durable).
        let (entry, intent_sync) = self.store.outbox_intent_written(intent)?;
        let answer = self.answer_send(caller, &to, &req.message_id, &entry, &route);
        // Nobody hears an answer before the intent is durable: `accepted` means both the
        // recipient's record and ours survive a power loss. The recipient's stated flush of our
        // device covers it when every condition of `flush::covered` holds; otherwise we
        // fdatasync it now. A failure we recorded was appended after the intent, so its own
        // fdatasync already covered it; then this returns at once.
        let stated = match &answer {
            Ok((_, a)) => *a,
            Err(_) => Answer::Other,
        };
        if !flush::covered(self.store.device(), intent_sync.frame, stated) {
            self.store.wait_durable(intent_sync)?;
        }
        answer.map(|(r, _)| r)
    }

    /// Drives the route of a just-written intent until `message_id` has an answer, and how
    /// the recipient answered (see [`Answer`]).
    fn answer_send(
        &self,
        caller: &Caller,
        to: &TargetRef,
        message_id: &str,
        entry: &OutboxEntry,
        route: &Mutex<Route>,
    ) -> Result<(Receipt, Answer)> {
        if entry.receipt.is_some() {
            self.outbox_answer(&caller.peer_id, &to.peer_id, message_id)
                .map(|r| (r, Answer::Other))
        } else {
            // A caller's send is a fresh attempt: a route whose head gave up starts over.
            {
                let mut r = route.lock();
                if r.queue.failures() > self.limits().route_retries {
                    r.queue.reset();
                }
            }
            let answer = self
                .drive_route_on(route, &caller.peer_id, to, Some(message_id), true)
                .unwrap_or_else(|| {
                    Err(Error::new(
                        Code::NotFound,
                        "the message left the outbox unexpectedly",
                    ))
                });
            if answer.is_err() {
                // The intent's commit did not wake the root worker: it retries from now on.
                self.store.nudge_worker();
            }
            answer
        }
    }

    /// The exact incarnation behind a peerId we sent to or received from before.
    fn known_incarnation(&self, peer_id: &str) -> Option<TargetRef> {
        let p = peer_id.to_string();
        self.store
            .query(move |m| {
                let sent = m.state().sent_target(&p);
                sent.or_else(|| {
                    m.state()
                        .inbox()
                        .find(|e| e.from.peer_id == p)
                        .map(|e| TargetRef {
                            peer_id: e.from.peer_id.clone(),
                            instance_id: e.from.instance_id.clone(),
                            run_id: e.from.run_id.clone(),
                        })
                })
            })
            .ok()
            .flatten()
    }

    /// The conversation an automatic send belongs to: its reply's correlation, or a new one.
    fn correlation_for(&self, caller: &Caller, reply_to: Option<&str>, message_id: &str) -> String {
        let Some(reply_to) = reply_to else {
            return message_id.to_string();
        };
        let recipient = caller.peer_id.clone();
        let id = reply_to.to_string();
        self.store
            .query(move |m| {
                m.find_inbox(&recipient, &MessageRef::Id(id))
                    .map(|e| e.correlation_id.clone())
                    .ok()
            })
            .ok()
            .flatten()
            .unwrap_or_else(|| reply_to.to_string())
    }

    fn route(&self, from: &str, to: &str) -> Arc<Mutex<Route>> {
        let mut routes = self.outbox.routes.lock();
        if routes.len() > 4 * self.limits().connections as usize {
            routes.retain(|_, r| Arc::strong_count(r) > 1 || r.lock().worth_keeping());
        }
        routes
            .entry((from.to_string(), to.to_string()))
            .or_default()
            .clone()
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
    fn drive_route_on(
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
                    let cause = last_err.take().or_else(|| {
                        self.outbox
                            .route_errors
                            .lock()
                            .get(&(from.to_string(), to.peer_id.clone()))
                            .map(|(e, _)| e.clone())
                    });
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
        let key = || (entry.from_peer_id.clone(), entry.to.peer_id.clone());
        let e = match outcome {
            Ok((receipt, stated)) => {
                r.queue.resolved(&entry.message_id);
                // The key is built only when there is a failure to clear (two copies per send).
                let mut errors = self.outbox.route_errors.lock();
                if !errors.is_empty() {
                    errors.remove(&key());
                }
                drop(errors);
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
                let mut errors = self.outbox.route_errors.lock();
                let key = key();
                if let Some(slot) = errors.get_mut(&key) {
                    slot.0 = e.clone();
                } else if errors.len() < 4 * self.limits().connections as usize {
                    errors.insert(key, (e.clone(), now));
                }
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
    fn outbox_answer(&self, from: &str, to: &str, message_id: &str) -> Result<Receipt> {
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

    /// Hands one outbox entry to its recipient: in-process for our own runs (no statement: our
    /// own accept's sync is ours), otherwise over an authenticated connection to the target
    /// instance, with what its answer states (`flushedDevice`).
    fn deliver(&self, entry: &OutboxEntry) -> Result<(Receipt, Option<u64>)> {
        let from_run = self.run_of_peer(&entry.from_peer_id);
        if entry.to.instance_id == self.instance_id {
            let from = self.principal_of(&entry.from_peer_id, from_run);
            let alias = self.alias_of(&from);
            let send = InboundSend {
                origin: Some(self.session_id.clone()),
                to_peer_id: entry.to.peer_id.clone(),
                message_id: entry.message_id.clone(),
                body: entry.body.clone(),
                correlation_id: Some(entry.correlation_id.clone()),
                expires_at_ms: Some(entry.expires_at_ms),
                from_alias: alias.clone(),
            };
            let r = self.store.accept(from, send)?;
            self.announce_arrival(&r, entry.body.reply_to.as_deref(), alias.as_deref());
            return Ok((r, None));
        }
        // One lookup answers both where the target is and whether it is silent.
        let reach = self.presence.reach_of(&entry.to.instance_id);
        let silent = match &reach {
            super::core::Reach::Silent(_, since) => Some(since.clone()),
            _ => None,
        };
        let target = self.presence.target_of(&entry.to.instance_id, reach)?;
        let send = PeerSend::of_parts(
            &entry.message_id,
            &entry.to.peer_id,
            from_run.as_deref(),
            &entry.body,
            Some(&entry.correlation_id),
            Some(entry.expires_at_ms),
        );
        let (r, stated) = self
            .pool
            .peer_send(&target, &send, self.limits().acknowledgement_ms)
            .inspect_err(|e| {
                // The advertisement may be what is wrong: read it afresh next time.
                if matches!(
                    e.code,
                    Code::PeerOffline | Code::TargetEnded | Code::AuthFailed | Code::Disconnected
                ) {
                    self.presence.forget_advertisement(&entry.to.instance_id);
                }
            })
            .map_err(|e| match &silent {
                Some(since) if is_retryable(e.code) => Error::new(
                    e.code,
                    format!(
                        "target not answering since {since} (no heartbeat; its process still exists): {}",
                        e.message
                    ),
                ),
                _ => e,
            })?;
        Ok((r, stated))
    }

    /// Why an unresolved outbox entry is still unresolved, for `peer status`: the route's last
    /// failure and since when, or the head it waits behind.
    pub fn unresolved_reason(&self, e: &OutboxEntry) -> String {
        let key = (e.from_peer_id.clone(), e.to.peer_id.clone());
        let head = self
            .store
            .route_view(&e.from_peer_id, &e.to.peer_id, None)
            .ok()
            .and_then(|v| v.head.map(|h| h.message_id));
        if let Some(h) = head.filter(|h| *h != e.message_id) {
            return format!("waits behind unresolved message {h} on this route");
        }
        match self.outbox.route_errors.lock().get(&key) {
            Some((err, since)) => format!(
                "{} ({}); failing since {}; retried in the background",
                err.message,
                err.code.name(),
                clock::iso8601(*since)
            ),
            None => "not yet acknowledged; retried in the background".to_string(),
        }
    }

    /// The runId behind one of our peerIds (live or retired); None for the root.
    pub fn run_of_peer(&self, peer_id: &str) -> Option<String> {
        if peer_id == self.peer_id {
            return None;
        }
        let runs = self.runs.lock();
        runs.live()
            .find(|r| r.peer_id == peer_id)
            .map(|r| r.run_id.clone())
    }

    /// Keeps the arrival of a `peer.send` this root just accepted until its answer is written
    /// ([`announce_deferred`](Self::announce_deferred), from `Handler::after_reply`), so
    /// encoding and publishing the event is not on the sender's path. At most one per
    /// connection thread waits here: each announces after its own answer.
    pub fn defer_arrival(&self, receipt: Receipt, note: super::core::ArrivalNote) {
        self.arrivals.lock().push((receipt, note));
    }

    /// Announces every arrival kept by [`defer_arrival`](Self::defer_arrival).
    pub fn announce_deferred(&self) {
        let pending = {
            let mut kept = self.arrivals.lock();
            if kept.is_empty() {
                return;
            }
            std::mem::take(&mut *kept)
        };
        for (r, note) in pending {
            self.announce_arrival(&r, note.reply_to.as_deref(), note.from_alias.as_deref());
        }
    }

    /// Publishes the arrival event and wakes the auto handler.
    pub fn announce_arrival(&self, r: &Receipt, reply_to: Option<&str>, from_alias: Option<&str>) {
        self.bus
            .publish(&super::events::MessageArrived::of(r, reply_to, from_alias));
        if let Some(runner) = self.auto.lock().as_ref() {
            runner.offer(super::auto::Arrival {
                message_id: r.message_id.clone(),
                from: r.from_peer_id.clone(),
                correlation_id: r.correlation_id.clone(),
                recipient: r.to_peer_id.clone(),
            });
        }
    }

    /// Pushes pending recipient-side receipts to their senders. A sender that fails with a
    /// retryable answer (stopped, not answering) is backed off (`Outbox::push_failed`): its
    /// pushes stay queued, in order, while other senders' go ahead. Returns how long the
    /// caller may sleep before the next attempt is due: None when nothing is pending.
    pub fn push_receipts(&self) -> Option<Duration> {
        let tick = Duration::from_millis(WORKER_TICK_MS);
        let Ok(pushes) = self.store.pending_pushes(PUSH_BATCH) else {
            return Some(tick);
        };
        if pushes.is_empty() {
            self.outbox.push_retry.lock().clear();
            return None;
        }
        let now = clock::now_ms();
        let mut deferred_until: Option<u64> = None;
        let mut defer = |at: u64| deferred_until = Some(deferred_until.map_or(at, |d| d.min(at)));
        let mut delivered = false;
        for p in pushes {
            if let Some(at) = self.outbox.push_deferred(&p.to.instance_id, now) {
                defer(at);
                continue;
            }
            match self.push_one(&p.to, &p.receipt) {
                Ok(()) => self.outbox.push_succeeded(&p.to.instance_id),
                Err(e) if is_retryable(e.code) => {
                    defer(self.outbox.push_failed(&p.to.instance_id, now));
                    continue;
                }
                // The sender is gone or refuses: its copy stays as it was; ours is final.
                Err(_) => self.outbox.push_succeeded(&p.to.instance_id),
            }
            delivered = true;
            let _ = self.store.receipt_delivered(p.cursor);
        }
        match deferred_until {
            // Delivered ones changed the store, which wakes the caller for the rest anyway.
            Some(at) if !delivered => Some(Duration::from_millis(at.saturating_sub(now))),
            _ => Some(tick),
        }
    }

    fn push_one(&self, to: &Principal, receipt: &Receipt) -> Result<()> {
        let from_run = self.run_of_peer(&receipt.to_peer_id);
        self.outbox
            .notify_subscriber(&to.instance_id, receipt, from_run.as_deref());
        if to.instance_id == self.instance_id {
            let me = self.principal_of(&receipt.to_peer_id, from_run);
            self.store.record_receipt(me, receipt.clone())?;
            self.announce_receipt(receipt);
            return Ok(());
        }
        let target = self.presence.target_of_instance(&to.instance_id)?;
        let push = ReceiptPush {
            version: crate::protocol::PROTOCOL_VERSION,
            from_run,
            receipt: receipt.clone(),
        };
        self.pool
            .push_receipt(&target, &push, self.limits().acknowledgement_ms)
    }

    /// Publishes a receipt change on our outbox.
    pub fn announce_receipt(&self, r: &Receipt) {
        self.bus.publish(&super::events::ReceiptChanged::of(r));
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

    /// Local reads of one recipient entry by message id (for consume/reply).
    pub fn inbox_entry(
        &self,
        recipient: &str,
        message_id: &str,
    ) -> Result<crate::messaging::InboxEntry> {
        let (r, id) = (recipient.to_string(), message_id.to_string());
        self.store
            .query(move |m| m.find_inbox(&r, &MessageRef::Id(id)).cloned())?
            .map_err(|e| {
                Error::new(
                    e.code,
                    format!(
                        "no single message {message_id} in this inbox ({})",
                        e.message
                    ),
                )
            })
    }

    /// Consumes one message: the context journal first, then the consumed receipt.
    pub fn consume(
        &self,
        recipient: &str,
        message_id: &str,
        note: Option<&str>,
    ) -> Result<Receipt> {
        let e = self.inbox_entry(recipient, message_id)?;
        self.consume_entry(&e, note.unwrap_or("taken into context by the recipient"))
    }

    /// Records context for `e` (unless already marked), then marks it consumed. A message past
    /// its expiry is recorded expired instead and the call fails with `EXPIRED`.
    pub fn consume_entry(&self, e: &crate::messaging::InboxEntry, note: &str) -> Result<Receipt> {
        let reference = MessageRef::Sequence(e.sequence);
        if !e.context_marked {
            let r = self
                .store
                .record_context(&e.recipient_peer_id, reference.clone(), note)?;
            refuse_expired(&r)?;
        }
        let r = self.store.mark(
            &e.recipient_peer_id,
            reference,
            crate::messaging::ReceiptState::Consumed,
        )?;
        refuse_expired(&r)?;
        Ok(r)
    }
}

/// A recipient-side transition that found the message expired fails with `EXPIRED`.
pub fn refuse_expired(r: &Receipt) -> Result<()> {
    if r.state == crate::messaging::ReceiptState::Expired {
        return Err(Error::new(
            Code::Expired,
            format!(
                "message {} has expired (recorded {}); it can no longer be consumed or replied to",
                r.message_id,
                clock::iso8601(r.at_ms)
            ),
        ));
    }
    Ok(())
}

/// The answer of a caller's own delivery attempt: the receipt (or the refusal it states), and
/// the recipient's `flushedDevice` statement, which counts only for an `accepted` receipt.
fn attempt_answer(receipt: Receipt, stated: Option<u64>) -> Result<(Receipt, Answer)> {
    let answer = match receipt.state {
        crate::messaging::ReceiptState::Accepted => Answer::Accepted(stated),
        _ => Answer::Other,
    };
    receipt_answer(receipt).map(|r| (r, answer))
}

/// What a send's caller hears for a receipt: the receipt, or the refusal it states.
fn receipt_answer(r: Receipt) -> Result<Receipt> {
    if r.state != crate::messaging::ReceiptState::Refused {
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
