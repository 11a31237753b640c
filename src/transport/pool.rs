//! Outbound authenticated connections: at most `connections` cached (least recently used
//! closed first), read leader/follower style (the requesting thread reads its own answer,
//! routing others' answers by id and notifications to the sink; a background thread reads
//! only while no request does), at most `pendingRequests` in flight, a deadline per request,
//! and every pending request settled with `DISCONNECTED` when its connection drops.

use super::connection::{self, FrameReader, Outgoing, ReadEvent};
use super::{LocalIdentity, PeerInfo, Target};
use crate::config::Limits;
use crate::config::internal::{POOL_BUSY_RECHECK as BUSY_RECHECK, POOL_QUIET as QUIET};
use crate::error::{Code, Error, Result};
use crate::protocol::handshake::{Expected, Initiator};
use crate::protocol::message::{self, ReceiptPush};
use crate::protocol::peer::receipt_notification;
use crate::protocol::rpc::{self, Id, Incoming};
use parking_lot::{Condvar, Mutex};
use serde_json::Value;
use std::collections::HashMap;
use std::io;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Receives the `peer.receipt` notifications (advisory `peer.subscribe` updates) arriving on
/// outbound connections, decoded; any other notification is dropped before it. It runs on
/// whichever thread is reading the connection (its background thread or a requesting
/// thread): keep it short and non-blocking.
pub type NotificationSink = Arc<dyn Fn(&PeerInfo, ReceiptPush) + Send + Sync>;

/// First request id after the handshake's ids 1 and 2.
const FIRST_REQUEST_ID: i64 = 3;

/// A connection's read side, under one lock.
struct Waiters {
    /// Answers by request id (`None` until answered); the map is `None` once dead.
    pending: Option<HashMap<i64, Option<Result<Value>>>>,
    /// The frame reader while nobody reads; the thread reading takes it out.
    reader: Option<FrameReader>,
    /// When a request last finished reading.
    last_active: Instant,
}

/// How a call ended.
enum Outcome {
    Done(Result<Value>),
    /// The frame cannot have reached the peer: retrying on a fresh connection is safe.
    Undelivered(Error),
}

/// One outbound connection. Reading is leader/follower: a requesting thread that finds the
/// reader free reads frames itself until its own answer arrives, routing other answers to
/// their waiters and notifications to the sink, then hands the reader back; the others wait
/// on `answered`. The background thread reads only once requests stopped for `QUIET`, so a
/// lone request costs no thread hand-off.
struct OutConn {
    peer: PeerInfo,
    target: Target,
    out: Outgoing,
    sink: NotificationSink,
    state: Mutex<Waiters>,
    /// An answer landed, the reader came back, or the connection died.
    answered: Condvar,
    /// Wakes the background thread early (only when the connection dies).
    idle: Condvar,
    next_id: AtomicI64,
    last_used: AtomicU64,
}

impl OutConn {
    /// Dead as far as we already know, without a system call.
    fn is_known_dead(&self) -> bool {
        self.out.is_closed() || self.state.lock().pending.is_none()
    }

    fn is_alive(&self) -> bool {
        !self.is_known_dead() && !self.out.peer_closed()
    }

    /// Worth a request: not known dead and, after `QUIET`, not hung up by the peer (a
    /// connection that just answered skips the probe; a hang-up since then shows as a
    /// broken pipe, which a pool request retries).
    fn is_usable(&self) -> bool {
        let quiet = {
            let st = self.state.lock();
            if st.pending.is_none() {
                return false;
            }
            st.last_active.elapsed() >= QUIET
        };
        !(self.out.is_closed() || quiet && self.out.peer_closed())
    }

    /// Marks the connection dead and settles every waiter with `DISCONNECTED`.
    fn die(&self) {
        self.out.abort();
        self.state.lock().pending = None;
        self.answered.notify_all();
        self.idle.notify_all();
    }

    /// One request on this connection; `text_len` is the peer text `params` carry (the
    /// frame's buffer is sized for it).
    fn call<P: serde::Serialize + ?Sized>(
        &self,
        method: &str,
        (params, text_len): (&P, usize),
        deadline: Instant,
        limits: &Limits,
    ) -> Outcome {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let frame = rpc::encode_request_with(&Id::Num(id), method, params, text_len);
        if let Err(e) = connection::check_frame_len(&frame, limits.frame_bytes) {
            return Outcome::Done(Err(e));
        }
        {
            let mut st = self.state.lock();
            let Some(map) = st.pending.as_mut() else {
                return Outcome::Undelivered(connection::disconnected());
            };
            if map.len() as u64 >= limits.pending_requests {
                return Outcome::Done(Err(Error::new(
                    Code::QueueFull,
                    format!(
                        "{} requests already in flight to {} (pendingRequests); retry later",
                        map.len(),
                        self.peer.instance_id
                    ),
                )));
            }
            map.insert(id, None);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let write_ms = u64::try_from(left.as_millis()).unwrap_or(u64::MAX);
        if let Err(failure) = self.out.send_request(frame, write_ms) {
            self.forget(id);
            if failure.undelivered {
                self.die();
                return Outcome::Undelivered(failure.error);
            }
            return Outcome::Done(Err(failure.error));
        }
        Outcome::Done(self.await_answer(id, method, deadline))
    }

    /// Waits for answer `id`, reading it ourselves whenever the reader is free.
    fn await_answer(&self, id: i64, method: &str, deadline: Instant) -> Result<Value> {
        let mut st = self.state.lock();
        loop {
            let Some(map) = st.pending.as_mut() else {
                return Err(connection::disconnected());
            };
            let Some(slot) = map.get_mut(&id) else {
                return Err(connection::disconnected());
            };
            if let Some(answer) = slot.take() {
                map.remove(&id);
                return answer;
            }
            if Instant::now() >= deadline {
                map.remove(&id);
                return Err(Error::new(
                    Code::Timeout,
                    format!(
                        "{method} to {} got no answer before its deadline",
                        self.peer.instance_id
                    ),
                ));
            }
            if let Some(reader) = st.reader.take() {
                drop(st);
                if let Some(answer) = self.lead(id, reader, deadline) {
                    return answer;
                }
                st = self.state.lock();
                continue;
            }
            let _ = self.answered.wait_until(&mut st, deadline);
        }
    }

    /// Reads as the leader until answer `id` arrives (`Some`), or the deadline passes or the
    /// connection ends (`None`: the caller re-checks its slot).
    fn lead(&self, id: i64, reader: FrameReader, deadline: Instant) -> Option<Result<Value>> {
        let mut reading = Reading::new(self, reader, true);
        loop {
            match reading.next(Some(deadline))? {
                ReadEvent::Frame(frame) => {
                    if let Some(answer) = self.route(&frame, Some(id)) {
                        reading.drain();
                        return Some(answer);
                    }
                }
                ReadEvent::InvalidUtf8 => {}
                ReadEvent::TimedOut => return None,
                _ => {
                    self.die();
                    return None;
                }
            }
        }
    }

    /// Delivers one incoming frame. Returns the answer when it is `mine`.
    fn route(&self, frame: &[u8], mine: Option<i64>) -> Option<Result<Value>> {
        match rpc::parse(frame) {
            Ok(Incoming::Response {
                id: Some(Id::Num(id)),
                result,
            }) => {
                let result = result.map_err(|obj| Error::from_rpc(&obj));
                return self.settle(id, result, mine);
            }
            Ok(Incoming::Notification { method, params }) => {
                // Only a well-formed `peer.receipt` reaches the sink; others are dropped.
                let push = receipt_notification(&method, params)?;
                // The sink may run on a requesting thread: a panic in it must not unwind
                // into an unrelated pool request. It ends this connection, as it always did.
                let deliver = || (self.sink)(&self.peer, push);
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(deliver)).is_err() {
                    self.die();
                }
            }
            Ok(Incoming::Request { id, .. }) => {
                let e = Error::new(
                    Code::MethodNotFound,
                    "this connection does not accept requests",
                );
                let _ = self.out.try_send(rpc::encode_error(Some(&id), &e));
            }
            // A connection-level error (id null) precedes a close; other ids are not ours.
            Ok(Incoming::Response { .. }) | Err(_) => {}
        }
        None
    }

    /// Hands answer `id` to its waiter; returns it when it is `mine`.
    fn settle(&self, id: i64, result: Result<Value>, mine: Option<i64>) -> Option<Result<Value>> {
        if mine == Some(id) {
            self.forget(id);
            return Some(result);
        }
        let mut st = self.state.lock();
        // Answers to requests that already gave up are dropped.
        if let Some(slot) = st.pending.as_mut().and_then(|m| m.get_mut(&id)) {
            *slot = Some(result);
            drop(st);
            self.answered.notify_all();
        }
        None
    }

    fn forget(&self, id: i64) {
        if let Some(map) = self.state.lock().pending.as_mut() {
            map.remove(&id);
        }
    }
}

/// The reader, held by the thread currently reading. Dropping it hands the reader back and
/// wakes waiters; a panic (e.g. in the sink) kills the connection instead, so no waiter is
/// left without a reader.
struct Reading<'a> {
    conn: &'a OutConn,
    reader: Option<FrameReader>,
    /// A request's leader (counts as activity), not the background thread.
    request: bool,
}

impl<'a> Reading<'a> {
    fn new(conn: &'a OutConn, reader: FrameReader, request: bool) -> Reading<'a> {
        Reading {
            conn,
            reader: Some(reader),
            request,
        }
    }

    fn next(&mut self, deadline: Option<Instant>) -> Option<ReadEvent> {
        Some(self.reader.as_mut()?.next(deadline))
    }

    /// Routes frames already buffered (no system call), so none waits in the decoder for
    /// bytes that may never come.
    fn drain(&mut self) {
        let Some(reader) = self.reader.as_mut() else {
            return;
        };
        loop {
            match reader.next(Some(Instant::now())) {
                ReadEvent::Frame(frame) => {
                    self.conn.route(&frame, None);
                }
                ReadEvent::InvalidUtf8 => {}
                ReadEvent::TimedOut => return,
                _ => return self.conn.die(),
            }
        }
    }
}

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        let Some(reader) = self.reader.take() else {
            return;
        };
        if std::thread::panicking() {
            return self.conn.die();
        }
        {
            let mut st = self.conn.state.lock();
            st.reader = Some(reader);
            if self.request {
                st.last_active = Instant::now();
            }
        }
        self.conn.answered.notify_all();
    }
}

struct Inner {
    me: LocalIdentity,
    limits: Limits,
    sink: NotificationSink,
    conns: Mutex<Vec<Arc<OutConn>>>,
    clock: AtomicU64,
}

impl Drop for Inner {
    fn drop(&mut self) {
        for conn in self.conns.lock().drain(..) {
            conn.die();
        }
    }
}

/// Outbound authenticated connections, shareable across threads.
pub struct Pool {
    inner: Arc<Inner>,
}

impl Pool {
    pub fn new(me: LocalIdentity, limits: &Limits, on_notification: NotificationSink) -> Pool {
        Pool {
            inner: Arc::new(Inner {
                me,
                limits: limits.clone(),
                sink: on_notification,
                conns: Mutex::new(Vec::new()),
                clock: AtomicU64::new(0),
            }),
        }
    }

    /// The probe path: sends one request of any method with untyped params to `target` and
    /// waits for its answer as it came. The runtime speaks through the typed methods below;
    /// this is for tests and benchmarks that send what no typed request can (hostile frames,
    /// unknown methods). `timeout_ms` 0 means `acknowledgementMs`. Connects (with a fresh
    /// handshake) when no live connection is cached. Errors: `PEER_OFFLINE` (no listener),
    /// `TARGET_ENDED` (another incarnation answers), `AUTH_FAILED`, `QUEUE_FULL`, `TIMEOUT`,
    /// `DISCONNECTED`, or the peer's own error.
    pub fn request_raw(
        &self,
        target: &Target,
        method: &str,
        params: Value,
        timeout_ms: u64,
    ) -> Result<Value> {
        self.reply(target, method, (&params, 0), timeout_ms)
    }

    /// [`Pool::request_raw`] with params of any type that serialises as their `Value` would (a
    /// `Value`, or a typed request's sorted params), the answer as it came. `params` comes
    /// with the bytes of peer text it carries (its frame's buffer is sized for them).
    fn reply<P: serde::Serialize + ?Sized>(
        &self,
        target: &Target,
        method: &str,
        params: (&P, usize),
        timeout_ms: u64,
    ) -> Result<Value> {
        let ms = if timeout_ms == 0 {
            self.inner.limits.acknowledgement_ms
        } else {
            timeout_ms
        };
        let deadline = Instant::now() + Duration::from_millis(ms);
        let conn = self.connection(target, deadline)?;
        match conn.call(method, params, deadline, &self.inner.limits) {
            Outcome::Done(result) => result,
            // The cached connection had ended unseen; one fresh connection is tried.
            Outcome::Undelivered(_) => {
                let conn = self.connection(target, deadline)?;
                match conn.call(method, params, deadline, &self.inner.limits) {
                    Outcome::Done(result) => result,
                    Outcome::Undelivered(e) => Err(e),
                }
            }
        }
    }

    /// `peer.send` to `target`: the recipient's custody receipt with its `flushedDevice`
    /// statement, if any, or its typed refusal.
    pub fn peer_send(
        &self,
        target: &Target,
        send: &message::PeerSend<'_>,
        timeout_ms: u64,
    ) -> Result<(message::Receipt, Option<u64>)> {
        let params = (send, send.content_len());
        let v = self.reply(target, "peer.send", params, timeout_ms)?;
        let stated = v.get(message::FLUSHED_DEVICE).and_then(Value::as_u64);
        Ok((message::Receipt::decode(v)?, stated))
    }

    /// `peer.status` to `target`: its receipt for one of our messages, or its refusal
    /// (`NOT_FOUND` when it holds no such message).
    pub fn peer_status(
        &self,
        target: &Target,
        q: &message::PeerStatus,
        timeout_ms: u64,
    ) -> Result<message::Receipt> {
        let params = (&q.encode(), 0);
        message::Receipt::decode(self.reply(target, "peer.status", params, timeout_ms)?)
    }

    /// `peer.receipt` to `target`: hands over one recipient-side receipt.
    pub fn push_receipt(
        &self,
        target: &Target,
        push: &message::ReceiptPush,
        timeout_ms: u64,
    ) -> Result<()> {
        // The answer is an empty acknowledgement: nothing of it is read.
        self.reply(target, "peer.receipt", (push, 0), timeout_ms)
            .map(|_| ())
    }

    /// Cached live connections.
    pub fn cached_connections(&self) -> usize {
        self.inner
            .conns
            .lock()
            .iter()
            .filter(|c| c.is_alive())
            .count()
    }

    /// Closes the cached connection to `instance_id`, if any (e.g. after the target ended).
    pub fn forget(&self, instance_id: &str) {
        let mut conns = self.inner.conns.lock();
        conns.retain(|c| {
            let keep = c.target.instance_id != instance_id;
            if !keep {
                c.die();
            }
            keep
        });
    }

    fn connection(&self, target: &Target, deadline: Instant) -> Result<Arc<OutConn>> {
        let tick = self.inner.clock.fetch_add(1, Ordering::Relaxed);
        if let Some(conn) = self.cached(target, tick) {
            return Ok(conn);
        }
        let fresh = connect(&self.inner, target, deadline)?;
        let mut conns = self.inner.conns.lock();
        // Another thread may have connected meanwhile: keep one connection per target.
        if let Some(existing) = conns.iter().find(|c| c.target == *target && c.is_alive()) {
            fresh.die();
            existing.last_used.store(tick, Ordering::Relaxed);
            return Ok(existing.clone());
        }
        fresh.last_used.store(tick, Ordering::Relaxed);
        conns.push(fresh.clone());
        let cap = usize::try_from(self.inner.limits.connections)
            .unwrap_or(usize::MAX)
            .max(1);
        while conns.len() > cap {
            let Some(oldest) =
                (0..conns.len()).min_by_key(|i| conns[*i].last_used.load(Ordering::Relaxed))
            else {
                break;
            };
            conns.swap_remove(oldest).die();
        }
        Ok(fresh)
    }

    /// A live cached connection to exactly `target`; dead or outdated ones are dropped.
    fn cached(&self, target: &Target, tick: u64) -> Option<Arc<OutConn>> {
        let mut conns = self.inner.conns.lock();
        conns.retain(|c| {
            // Only the connection about to be used may pay for a liveness probe.
            let keep = if c.target.instance_id == target.instance_id {
                c.target == *target && c.is_usable()
            } else {
                !c.is_known_dead()
            };
            if !keep {
                c.die();
            }
            keep
        });
        let conn = conns.iter().find(|c| c.target == *target)?;
        conn.last_used.store(tick, Ordering::Relaxed);
        Some(conn.clone())
    }
}

fn offline(target: &Target, e: &io::Error) -> Error {
    let code = match e.kind() {
        io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused => Code::PeerOffline,
        io::ErrorKind::TimedOut => Code::Timeout,
        _ => Code::Io,
    };
    Error::new(
        code,
        format!(
            "cannot connect to {} at {}: {e}",
            target.instance_id,
            target.endpoint.display()
        ),
    )
}

/// Connects, authenticates as initiator within `handshakeMs` (and the request deadline), and
/// starts the connection's reader thread.
fn connect(inner: &Arc<Inner>, target: &Target, deadline: Instant) -> Result<Arc<OutConn>> {
    let limits = &inner.limits;
    let deadline = deadline.min(Instant::now() + Duration::from_millis(limits.handshake_ms));
    let mut stream =
        connection::connect_bounded(&target.endpoint, deadline).map_err(|e| offline(target, &e))?;
    connection::check_same_user(&stream)?;
    let read_half = stream
        .try_clone()
        .map_err(|e| connection::io_err("cannot clone a socket", &e))?;
    let mut reader = FrameReader::new(read_half, limits.frame_bytes);
    let mut nonce = [0u8; 32];
    crate::identity::random_bytes(&mut nonce);
    let expected = Expected {
        instance_id: target.instance_id.clone(),
        public_key: target.public_key,
    };
    let keys = inner.me.keys.clone();
    let (mut init, mut frame) =
        Initiator::start(&inner.me.instance_id, None, &keys, expected, nonce);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let ms = u64::try_from(left.as_millis()).unwrap_or(u64::MAX).max(1);
        connection::write_with_deadline(&mut stream, &frame, ms)
            .map_err(|e| handshake_io(target, &e))?;
        let msg = match reader.next(Some(deadline)) {
            ReadEvent::Frame(bytes) => rpc::parse(&bytes).map_err(|r| r.error)?,
            ReadEvent::TimedOut => {
                return Err(Error::new(
                    Code::Timeout,
                    format!(
                        "handshake with {} did not finish within handshakeMs",
                        target.instance_id
                    ),
                ));
            }
            _ => {
                return Err(Error::new(
                    Code::Disconnected,
                    "the peer closed the connection during the handshake",
                ));
            }
        };
        match init.on_message(msg, &keys)? {
            Some(next) => frame = next,
            None => break,
        }
    }
    start_reader(inner, target, &stream, reader)
}

fn handshake_io(target: &Target, e: &io::Error) -> Error {
    Error::new(
        Code::Disconnected,
        format!("handshake with {} failed: {e}", target.instance_id),
    )
}

fn start_reader(
    inner: &Arc<Inner>,
    target: &Target,
    stream: &UnixStream,
    reader: FrameReader,
) -> Result<Arc<OutConn>> {
    let out = Outgoing::spawn(stream, inner.limits.outgoing_frames, inner.limits.write_ms)?;
    let conn = Arc::new(OutConn {
        peer: PeerInfo::new(target.instance_id.clone(), None),
        target: target.clone(),
        out,
        sink: inner.sink.clone(),
        state: Mutex::new(Waiters {
            pending: Some(HashMap::new()),
            reader: Some(reader),
            last_active: Instant::now(),
        }),
        answered: Condvar::new(),
        idle: Condvar::new(),
        next_id: AtomicI64::new(FIRST_REQUEST_ID),
        last_used: AtomicU64::new(0),
    });
    let c = conn.clone();
    let spawned = std::thread::Builder::new()
        .name("peer-out-reader".into())
        .spawn(move || {
            let conn = DieOnDrop(c);
            background(&conn.0);
        });
    if let Err(e) = spawned {
        conn.die();
        return Err(connection::io_err("cannot start a reader thread", &e));
    }
    Ok(conn)
}

/// Settles a connection's waiters when its background thread ends, even if the sink panics.
struct DieOnDrop(Arc<OutConn>);

impl Drop for DieOnDrop {
    fn drop(&mut self) {
        self.0.die();
    }
}

/// Reads while no request does: notifications and the peer's hang-up. It waits for the
/// socket to become readable without holding the reader, so a request arriving meanwhile
/// still reads its own answer.
fn background(conn: &OutConn) {
    loop {
        if !wait_quiet(conn) || !conn.out.wait_readable() {
            return;
        }
        let reader = {
            let mut st = conn.state.lock();
            match &st.pending {
                None => return,
                // A request that read meanwhile may have consumed what woke us.
                Some(map) if map.is_empty() && st.last_active.elapsed() >= QUIET => {
                    st.reader.take()
                }
                Some(_) => None,
            }
        };
        // Someone else reads (or a request is about to): back to waiting for quiet.
        let Some(reader) = reader else { continue };
        let mut reading = Reading::new(conn, reader, false);
        match reading.next(None) {
            Some(ReadEvent::Frame(frame)) => {
                conn.route(&frame, None);
                reading.drain();
            }
            Some(ReadEvent::InvalidUtf8) => {}
            _ => return,
        }
    }
}

/// Waits until no request has read for `QUIET`, nobody reads and nothing is pending.
/// `false` once the connection is dead.
fn wait_quiet(conn: &OutConn) -> bool {
    let mut st = conn.state.lock();
    loop {
        let Some(map) = &st.pending else {
            return false;
        };
        let quiet_for = st.last_active.elapsed();
        let busy = !map.is_empty() || st.reader.is_none();
        if !busy && quiet_for >= QUIET {
            return true;
        }
        let wait = if busy {
            BUSY_RECHECK
        } else {
            QUIET.saturating_sub(quiet_for)
        };
        let _ = conn.idle.wait_for(&mut st, wait);
    }
}
