//! Outbound authenticated connections: at most `connections` cached (least recently used
//! closed first), each with one reader thread that routes responses by id and hands
//! notifications to the sink, at most `pendingRequests` in flight, a deadline per request, and
//! every pending request settled with `DISCONNECTED` when its connection drops.

use super::wire::{self, FrameReader, Outgoing, ReadEvent};
use super::{LocalIdentity, PeerInfo, Target};
use crate::config::Limits;
use crate::error::{Code, Error, Result};
use crate::protocol::handshake::{Expected, Initiator};
use crate::protocol::rpc::{self, Id, Incoming};
use crossbeam_channel::{RecvTimeoutError, Sender, bounded};
use parking_lot::Mutex;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::io;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Receives notifications arriving on outbound connections (e.g. `peer.receipt`). It runs on
/// the connection's reader thread: keep it short and non-blocking.
pub type NotificationSink = Arc<dyn Fn(&PeerInfo, &str, Map<String, Value>) + Send + Sync>;

/// First request id after the handshake's ids 1 and 2.
const FIRST_REQUEST_ID: i64 = 3;

struct OutConn {
    peer: PeerInfo,
    target: Target,
    out: Outgoing,
    /// Waiters by request id; `None` once the connection is dead (under the same lock).
    pending: Mutex<Option<HashMap<i64, Sender<Result<Value>>>>>,
    next_id: AtomicI64,
    last_used: AtomicU64,
}

impl OutConn {
    /// Dead as far as we already know, without a system call.
    fn is_known_dead(&self) -> bool {
        self.out.is_closed() || self.pending.lock().is_none()
    }

    fn is_alive(&self) -> bool {
        !self.is_known_dead() && !self.out.peer_closed()
    }

    /// Marks the connection dead and settles every waiter with `DISCONNECTED`.
    fn die(&self) {
        self.out.abort();
        // Dropping the senders wakes each waiter with a disconnect.
        self.pending.lock().take();
    }

    fn call(
        &self,
        method: &str,
        params: &Value,
        deadline: Instant,
        limits: &Limits,
    ) -> Result<Value> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let frame = rpc::encode_request(&Id::Num(id), method, params);
        wire::check_frame_len(&frame, limits.frame_bytes)?;
        let (tx, rx) = bounded(1);
        {
            let mut pending = self.pending.lock();
            let Some(map) = pending.as_mut() else {
                return Err(wire::disconnected());
            };
            if map.len() as u64 >= limits.pending_requests {
                return Err(Error::new(
                    Code::QueueFull,
                    format!(
                        "{} requests already in flight to {} (pendingRequests); retry later",
                        map.len(),
                        self.peer.instance_id
                    ),
                ));
            }
            map.insert(id, tx);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let write_ms = u64::try_from(left.as_millis()).unwrap_or(u64::MAX);
        if let Err(e) = self.out.send_request(frame, write_ms) {
            self.forget(id);
            return Err(e);
        }
        match rx.recv_deadline(deadline) {
            Ok(result) => result,
            Err(RecvTimeoutError::Timeout) => {
                self.forget(id);
                Err(Error::new(
                    Code::Timeout,
                    format!(
                        "{method} to {} got no answer before its deadline",
                        self.peer.instance_id
                    ),
                ))
            }
            Err(RecvTimeoutError::Disconnected) => Err(wire::disconnected()),
        }
    }

    fn forget(&self, id: i64) {
        if let Some(map) = self.pending.lock().as_mut() {
            map.remove(&id);
        }
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

    /// Sends one request to `target` and waits for its answer. `timeout_ms` 0 means
    /// `acknowledgementMs`. Connects (with a fresh handshake) when no live connection is cached.
    /// Errors: `PEER_OFFLINE` (no listener), `TARGET_ENDED` (another incarnation answers),
    /// `AUTH_FAILED`, `QUEUE_FULL`, `TIMEOUT`, `DISCONNECTED`, or the peer's own error.
    pub fn request(
        &self,
        target: &Target,
        method: &str,
        params: Value,
        timeout_ms: u64,
    ) -> Result<Value> {
        let ms = if timeout_ms == 0 {
            self.inner.limits.acknowledgement_ms
        } else {
            timeout_ms
        };
        let deadline = Instant::now() + Duration::from_millis(ms);
        let conn = self.connection(target, deadline)?;
        conn.call(method, &params, deadline, &self.inner.limits)
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
            // Only the connection about to be used pays for the liveness probe.
            let keep = if c.target.instance_id == target.instance_id {
                c.target == *target && c.is_alive()
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
        wire::connect_bounded(&target.endpoint, deadline).map_err(|e| offline(target, &e))?;
    wire::check_same_user(&stream)?;
    let read_half = stream
        .try_clone()
        .map_err(|e| wire::io_err("cannot clone a socket", &e))?;
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
        wire::write_with_deadline(&mut stream, &frame, ms).map_err(|e| handshake_io(target, &e))?;
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
    mut reader: FrameReader,
) -> Result<Arc<OutConn>> {
    let out = Outgoing::spawn(stream, inner.limits.outgoing_frames, inner.limits.write_ms)?;
    let conn = Arc::new(OutConn {
        peer: PeerInfo {
            instance_id: target.instance_id.clone(),
            run_id: None,
        },
        target: target.clone(),
        out,
        pending: Mutex::new(Some(HashMap::new())),
        next_id: AtomicI64::new(FIRST_REQUEST_ID),
        last_used: AtomicU64::new(0),
    });
    let (c, sink) = (conn.clone(), inner.sink.clone());
    let spawned = std::thread::Builder::new()
        .name("peer-out-reader".into())
        .spawn(move || {
            let conn = DieOnDrop(c);
            read_loop(&conn.0, &mut reader, &sink);
        });
    if let Err(e) = spawned {
        conn.die();
        return Err(wire::io_err("cannot start a reader thread", &e));
    }
    Ok(conn)
}

/// Settles a connection's waiters when its reader ends, even if the sink panics.
struct DieOnDrop(Arc<OutConn>);

impl Drop for DieOnDrop {
    fn drop(&mut self) {
        self.0.die();
    }
}

fn read_loop(conn: &OutConn, reader: &mut FrameReader, sink: &NotificationSink) {
    loop {
        let frame = match reader.next(None) {
            ReadEvent::Frame(frame) => frame,
            ReadEvent::InvalidUtf8 => continue,
            _ => return,
        };
        match rpc::parse(&frame) {
            Ok(Incoming::Response {
                id: Some(Id::Num(id)),
                result,
            }) => {
                let waiter = conn.pending.lock().as_mut().and_then(|m| m.remove(&id));
                if let Some(waiter) = waiter {
                    let _ = waiter.try_send(result.map_err(|obj| Error::from_rpc(&obj)));
                }
            }
            Ok(Incoming::Notification { method, params }) => sink(&conn.peer, &method, params),
            Ok(Incoming::Request { id, .. }) => {
                let e = Error::new(
                    Code::MethodNotFound,
                    "this connection does not accept requests",
                );
                let _ = conn.out.try_send(rpc::encode_error(Some(&id), &e));
            }
            // A connection-level error (id null) precedes a close; other ids are not ours.
            Ok(Incoming::Response { .. }) | Err(_) => {}
        }
    }
}
