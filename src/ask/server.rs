//! The ask server's shell: a std `TcpListener`, one thread per connection up to
//! `maxConnections` in all and `maxConnectionsPerAddress` from any one source address (past
//! either a caller gets a canned 429 from the acceptor and costs no thread, so one address's
//! slow connections cannot take every thread), reading one bounded request per connection
//! within the head and body deadlines and writing the router's response.
//! The state, the router and `start` live in the module root; the request and response types
//! in `http` (re-exported here).

pub use super::http::{ApiError, Request, Response};
pub use super::{ServerState, start};
use crate::config::internal::{ASK_ACCEPT_POLL_MS, ASK_WRITE_TIMEOUT};
use crate::error::{Code, Error, Result};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A running server.
pub struct ServerHandle {
    pub state: Arc<ServerState>,
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
    control: Option<JoinHandle<()>>,
}

impl ServerHandle {
    pub fn addr(&self) -> SocketAddr {
        self.state.listen
    }

    /// Stops accepting, ends waits, removes the owner's state file, joins the acceptor.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.state.stopping.store(true, Ordering::SeqCst);
        self.state.approvals.wake_all();
        for t in [self.acceptor.take(), self.control.take()]
            .into_iter()
            .flatten()
        {
            let _ = t.join();
        }
        self.state.approvals.remove_owner_file();
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Starts the acceptor thread on a bound, non-blocking listener.
pub(super) fn spawn(listener: TcpListener, state: Arc<ServerState>) -> Result<ServerHandle> {
    let stop = Arc::new(AtomicBool::new(false));
    let control = state.approvals.bind_control()?;
    let control = {
        let state = state.clone();
        std::thread::Builder::new()
            .name("ask-control".into())
            .spawn(move || super::approval::control::serve(control, state))
            .map_err(|e| Error::new(Code::Io, format!("cannot start control socket: {e}")))?
    };
    let acceptor = {
        let (state, stop) = (state.clone(), stop.clone());
        std::thread::Builder::new()
            .name("ask-acceptor".into())
            .spawn(move || accept_loop(listener, state, stop))
            .map_err(|e| Error::new(Code::Io, format!("cannot start acceptor: {e}")))?
    };
    Ok(ServerHandle {
        state,
        stop,
        acceptor: Some(acceptor),
        control: Some(control),
    })
}

/// Open connections, in all and per source address (an entry exists only while its address
/// holds one, so the map is bounded by `maxConnections`).
#[derive(Default)]
struct Slots {
    open: Mutex<(usize, HashMap<IpAddr, usize>)>,
}

/// One admitted connection; gives its slot back when dropped.
struct Slot {
    slots: Arc<Slots>,
    ip: IpAddr,
}

impl Slots {
    fn acquire(self: &Arc<Self>, ip: IpAddr, total_max: usize, per_max: usize) -> Option<Slot> {
        let mut g = self.open.lock();
        let (total, per) = &mut *g;
        let mine = per.get(&ip).copied().unwrap_or(0);
        if *total >= total_max || mine >= per_max {
            return None;
        }
        *total += 1;
        per.insert(ip, mine + 1);
        Some(Slot {
            slots: self.clone(),
            ip,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut g = self.slots.open.lock();
        let (total, per) = &mut *g;
        *total = total.saturating_sub(1);
        if let Some(n) = per.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                per.remove(&self.ip);
            }
        }
    }
}

fn accept_loop(listener: TcpListener, state: Arc<ServerState>, stop: Arc<AtomicBool>) {
    let active = Arc::new(Slots::default());
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, peer)) => admit(stream, peer, &state, &active),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let mut fds = [nix::poll::PollFd::new(
                    listener.as_fd(),
                    nix::poll::PollFlags::POLLIN,
                )];
                let _ = nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(ASK_ACCEPT_POLL_MS));
            }
            // EMFILE and friends: back off briefly instead of spinning.
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Gives the connection a thread, or a canned 429 when all are busy or its address holds its
/// share already.
fn admit(mut stream: TcpStream, peer: SocketAddr, state: &Arc<ServerState>, active: &Arc<Slots>) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_nodelay(true);
    let cfg = &state.config;
    let Some(slot) = active.acquire(
        peer.ip(),
        cfg.max_connections,
        cfg.max_connections_per_address,
    ) else {
        let busy = ApiError::rate_limited("server busy: too many open connections");
        super::http::write_response(
            &mut stream,
            429,
            &busy.response().bytes(),
            Duration::from_millis(100),
        );
        return;
    };
    let state = state.clone();
    // A failed spawn drops the closure, and with it the slot.
    let _ = std::thread::Builder::new()
        .name("ask-conn".into())
        .spawn(move || {
            let _slot = slot;
            serve_connection(stream, peer, &state);
        });
}

/// Serves one connection: TLS when its first byte opens a TLS handshake, plain HTTP
/// otherwise (dsh-ask-peer friends, loopback tools), both within the header deadline.
fn serve_connection(stream: TcpStream, peer: SocketAddr, state: &Arc<ServerState>) {
    let head_timeout = Duration::from_millis(state.config.header_timeout_ms);
    let head_deadline = Instant::now() + head_timeout;
    let mut first = [0u8; 1];
    let peeked = stream
        .set_read_timeout(Some(head_timeout))
        .and_then(|()| stream.peek(&mut first));
    if !matches!(peeked, Ok(1)) {
        return;
    }
    if first[0] != super::tls::HANDSHAKE_RECORD {
        let mut stream = stream;
        serve_request(&mut stream, peer, None, head_deadline, state);
        return;
    }
    let Some((mut tls, client_key)) = super::tls::accept(stream, &state.tls, head_deadline) else {
        return;
    };
    serve_request(&mut tls, peer, client_key, head_deadline, state);
    super::tls::finish(&mut tls);
}

/// Reads one request (its head by `head_deadline`), routes it and writes the response.
fn serve_request<S: super::tls::Wire>(
    stream: &mut S,
    peer: SocketAddr,
    tls_peer_key: Option<[u8; 32]>,
    head_deadline: Instant,
    state: &Arc<ServerState>,
) {
    let head_timeout = head_deadline.saturating_duration_since(Instant::now());
    let body_timeout = Duration::from_millis(state.config.body_timeout_ms);
    let resp = match super::http::read_request(stream, head_timeout, body_timeout) {
        Ok((head, body)) => {
            let req = Request {
                method: head.method,
                path: head.path,
                query: head.query,
                headers: head.headers,
                body,
                peer,
                tls_peer_key,
            };
            if super::serve_owner_page(stream, &req, state) {
                return;
            }
            match super::a2a::handle(state, &req) {
                Some(super::a2a::Reply::Stream(plan)) => {
                    return super::a2a::sse::run(stream, state, &plan);
                }
                Some(super::a2a::Reply::Now(resp)) => resp,
                None => super::route(state, &req),
            }
        }
        Err(super::http::ReadFailure::Reply(e)) => {
            let resp = e.response();
            super::http::write_response(stream, resp.status, &resp.bytes(), ASK_WRITE_TIMEOUT);
            super::http::drain_after_refusal(
                stream,
                crate::config::internal::ASK_DRAIN_BYTES_MAX,
                crate::config::internal::ASK_DRAIN_TIME,
            );
            return;
        }
        Err(super::http::ReadFailure::Drop) => return,
    };
    super::http::write_response(stream, resp.status, &resp.bytes(), ASK_WRITE_TIMEOUT);
}
