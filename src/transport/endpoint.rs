//! The root's listening endpoint: binds the private socket, checks each caller's uid, bounds
//! the number of connection threads, runs the handshake within `handshakeMs`, then serves
//! authenticated calls until the peer leaves, idles past `idleMs`, or breaks the framing.
//! Shutdown removes the socket only if it is still the inode this endpoint created.

use super::admission::{Admission, Class};
use super::connection::{self, FrameReader, Notifier, Outgoing, ReadEvent};
use super::{Handler, LocalIdentity, PeerInfo, Verifier};
use crate::config::Limits;
use crate::error::{Code, Error, Result};
use crate::protocol::access;
use crate::protocol::handshake::{Channel, RecentNonces, Responder, ResponderCtx, Step};
use crate::protocol::local::LocalRequest;
use crate::protocol::peer::PeerRequest;
use crate::protocol::rpc::{self, Id, Incoming};
use parking_lot::{Condvar, Mutex};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::config::internal::SOCKET_PATH_BYTES_MAX;

struct Shared {
    me: LocalIdentity,
    limits: Limits,
    /// Wiped when the endpoint's last connection thread lets go of it.
    local_secret: zeroize::Zeroizing<[u8; 32]>,
    handler: Arc<dyn Handler>,
    verifier: Arc<dyn Verifier>,
    nonces: Mutex<RecentNonces>,
    stopping: AtomicBool,
    /// Live connections, so shutdown can cut them; the map's size is the thread count.
    conns: Mutex<HashMap<u64, Arc<UnixStream>>>,
    /// Notified each time a connection thread ends, for shutdown's drain.
    conn_ended: Condvar,
    /// Budgets of unauthenticated, peer and local connections.
    admission: Mutex<Admission>,
    next_conn: AtomicU64,
}

/// A listening endpoint. Dropping it (or [`Endpoint::shutdown`]) stops accepting, closes
/// live connections and removes the socket if it is still ours.
pub struct Endpoint {
    shared: Arc<Shared>,
    listener: Arc<UnixListener>,
    acceptor: Option<JoinHandle<()>>,
    path: PathBuf,
    dev_ino: (u64, u64),
}

impl Endpoint {
    /// Binds `path` (its directory is created or checked private, 0700) and starts accepting.
    /// An existing file at `path` is never removed: binding fails instead.
    pub fn bind(
        path: &Path,
        me: LocalIdentity,
        limits: &Limits,
        local_secret: [u8; 32],
        handler: Arc<dyn Handler>,
        verifier: Arc<dyn Verifier>,
    ) -> Result<Endpoint> {
        let listener = Arc::new(bind_private(path)?);
        let meta =
            std::fs::symlink_metadata(path).map_err(|e| Error::io("cannot stat", path, &e))?;
        let shared = Arc::new(Shared {
            me,
            limits: limits.clone(),
            local_secret: zeroize::Zeroizing::new(local_secret),
            handler,
            verifier,
            nonces: Mutex::new(RecentNonces::new(
                usize::try_from(limits.recent_nonces).unwrap_or(usize::MAX),
            )),
            stopping: AtomicBool::new(false),
            conns: Mutex::new(HashMap::new()),
            conn_ended: Condvar::new(),
            admission: Mutex::new(Admission::new(limits.inbound_connections)),
            next_conn: AtomicU64::new(0),
        });
        let (s, l) = (shared.clone(), listener.clone());
        let acceptor = std::thread::Builder::new()
            .name("peer-acceptor".into())
            .spawn(move || accept_loop(&s, &l))
            .map_err(|e| connection::io_err("cannot start the acceptor thread", &e))?;
        Ok(Endpoint {
            shared,
            listener,
            acceptor: Some(acceptor),
            path: path.to_path_buf(),
            dev_ino: (meta.dev(), meta.ino()),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Connections currently being served (handshaking or authenticated).
    pub fn active_connections(&self) -> usize {
        self.shared.conns.lock().len()
    }

    /// Stops accepting, closes live connections, removes our own socket file.
    pub fn shutdown(self) {
        drop(self);
    }

    /// True while the path still names the socket this endpoint bound.
    fn path_is_ours(&self) -> bool {
        std::fs::symlink_metadata(&self.path).is_ok_and(|m| (m.dev(), m.ino()) == self.dev_ino)
    }

    /// Lets every connection answer the requests it has already read before it is cut: a
    /// send whose record is durable here must not lose its `accepted` on the way out (its
    /// sender would retry an ended root and record the message as undeliverable). Each
    /// connection's read side is shut, so its thread reads what the peer already sent, then
    /// end of file, and ends after answering; nothing new is read. A thread still busy after
    /// `acknowledgementMs` (the longest a caller waits for an answer anyway) is cut. The
    /// root's own waits end on its stopping flag, which is set before this runs.
    fn drain(&self) {
        let mut conns = self.shared.conns.lock();
        for stream in conns.values() {
            let _ = stream.shutdown(std::net::Shutdown::Read);
        }
        let deadline =
            Instant::now() + Duration::from_millis(self.shared.limits.acknowledgement_ms);
        while !conns.is_empty() {
            if self
                .shared
                .conn_ended
                .wait_until(&mut conns, deadline)
                .timed_out()
            {
                return;
            }
        }
    }

    fn stop(&mut self) {
        self.shared.stopping.store(true, Ordering::Release);
        // Linux wakes a blocked accept() on shutdown(2) of the listener; the connect covers
        // systems that do not (only to our own socket, never a successor's).
        let _ =
            nix::sys::socket::shutdown(self.listener.as_raw_fd(), nix::sys::socket::Shutdown::Both);
        if self.path_is_ours() {
            let wake_by = Instant::now() + Duration::from_millis(self.shared.limits.write_ms);
            let _ = connection::connect_bounded(&self.path, wake_by);
        }
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        self.drain();
        for stream in self.shared.conns.lock().values() {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
        if self.path_is_ours() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.stop();
    }
}

fn bind_private(path: &Path) -> Result<UnixListener> {
    if path.as_os_str().len() > SOCKET_PATH_BYTES_MAX {
        return Err(Error::new(
            Code::Io,
            format!(
                "socket path {} is {} bytes; Unix sockets allow {SOCKET_PATH_BYTES_MAX}: use a shorter runtime directory",
                path.display(),
                path.as_os_str().len()
            ),
        ));
    }
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    crate::fsutil::ensure_private_dir(dir)?;
    if std::fs::symlink_metadata(path).is_ok() {
        return Err(Error::new(
            Code::Io,
            format!(
                "{} already exists; another root may own it, so it is never removed automatically",
                path.display()
            ),
        ));
    }
    let listener = UnixListener::bind(path).map_err(|e| Error::io("cannot bind", path, &e))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| Error::io("cannot chmod", path, &e))?;
    Ok(listener)
}

fn accept_loop(shared: &Arc<Shared>, listener: &UnixListener) {
    loop {
        let accepted = listener.accept();
        if shared.stopping.load(Ordering::Acquire) {
            return;
        }
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(_) => {
                // EMFILE and friends: back off briefly instead of spinning.
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        if connection::check_same_user(&stream).is_err() {
            continue; // dropped unread
        }
        admit(shared, stream);
    }
}

/// Starts a connection thread. A full unauthenticated budget cuts its oldest connection
/// (which is then answered AUTH_FAILED by its own thread); the thread count stays within
/// [`Admission::threads_max`].
fn admit(shared: &Arc<Shared>, stream: UnixStream) {
    let Ok(handle) = stream.try_clone() else {
        return;
    };
    let id = shared.next_conn.fetch_add(1, Ordering::Relaxed);
    {
        let mut conns = shared.conns.lock();
        let mut admission = shared.admission.lock();
        if conns.len() >= admission.threads_max() {
            drop((conns, admission));
            refuse_busy(stream, shared.limits.write_ms);
            return;
        }
        if let Some(old) = admission.arrive(id)
            && let Some(cut) = conns.get(&old)
        {
            cut_unauthenticated(cut);
        }
        conns.insert(id, Arc::new(handle));
    }
    let s = shared.clone();
    let spawned = std::thread::Builder::new()
        .name("peer-conn".into())
        .spawn(move || {
            let _slot = Slot {
                shared: s.clone(),
                id,
            };
            serve(&s, stream, id);
        });
    if spawned.is_err() {
        shared.conns.lock().remove(&id);
        shared.admission.lock().leave(id);
    }
}

/// Frees a connection's slot when its thread ends, even by a panicking handler, so a bug
/// cannot slowly exhaust `inboundConnections`.
struct Slot {
    shared: Arc<Shared>,
    id: u64,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.shared.conns.lock().remove(&self.id);
        self.shared.admission.lock().leave(self.id);
        self.shared.conn_ended.notify_all();
    }
}

/// Answers the oldest unauthenticated connection with one error line (a single non-blocking
/// send: the acceptor never waits on a client) and closes it; its thread then ends.
fn cut_unauthenticated(stream: &UnixStream) {
    use nix::sys::socket::{MsgFlags, send};
    let err = Error::new(
        Code::QueueFull,
        "too many connections still in the handshake; this, the oldest, was closed: retry",
    );
    let line = rpc::encode_error(None, &err);
    let _ = send(
        stream.as_raw_fd(),
        &line,
        MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT,
    );
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

fn refuse_busy(mut stream: UnixStream, write_ms: u64) {
    let err = Error::new(
        Code::QueueFull,
        "too many connections (inboundConnections); retry later",
    );
    let _ = connection::write_with_deadline(&mut stream, &rpc::encode_error(None, &err), write_ms);
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

fn serve(shared: &Shared, stream: UnixStream, id: u64) {
    let Ok(out) = Outgoing::spawn(
        &stream,
        shared.limits.outgoing_frames,
        shared.limits.write_ms,
    ) else {
        return;
    };
    let _close = connection::CloseOnDrop(out.clone());
    let mut reader = FrameReader::new(stream, shared.limits.frame_bytes);
    if let Some(channel) = handshake(shared, &mut reader, &out) {
        let class = match channel {
            Channel::Peer { .. } => Class::Peer,
            Channel::Local | Channel::Run { .. } => Class::Local,
        };
        if !shared.admission.lock().authenticate(id, class) {
            let err = Error::new(
                Code::QueueFull,
                "too many connections (inboundConnections); retry later",
            );
            let _ = out.send(rpc::encode_error(None, &err));
            return;
        }
        let notifier = Notifier::new(out.clone(), shared.limits.frame_bytes);
        serve_authenticated(shared, &mut reader, &out, &channel, &notifier);
    }
}

/// Runs the responder until the channel is established; `None` means refused (answer queued).
fn handshake(shared: &Shared, reader: &mut FrameReader, out: &Outgoing) -> Option<Channel> {
    let deadline = Instant::now() + Duration::from_millis(shared.limits.handshake_ms);
    let mut nonce = [0u8; 32];
    crate::identity::random_bytes(&mut nonce);
    let mut responder = Responder::new(nonce);
    let verifier = shared.verifier.clone();
    let lookup = move |id: &str| verifier.advertised_key(id);
    let handler = shared.handler.clone();
    let run_secret = move |secret: &[u8; 32]| handler.run_for_secret(secret);
    let mut remember = |n: &[u8; 32]| shared.nonces.lock().insert(n);
    let mut ctx = ResponderCtx {
        instance_id: &shared.me.instance_id,
        keys: &shared.me.keys,
        local_secret: &shared.local_secret,
        run_secret: &run_secret,
        advertised_key: &lookup,
        remember_nonce: &mut remember,
    };
    loop {
        let frame = match reader.next(Some(deadline)) {
            ReadEvent::Frame(frame) => frame,
            other => {
                let _ = answer_read_failure(out, &other, Code::AuthFailed);
                return None;
            }
        };
        let msg = match rpc::parse(&frame) {
            Ok(msg) => msg,
            Err(reject) => {
                let _ = out.send(reject.to_line());
                return None;
            }
        };
        match responder.on_message(msg, &mut ctx) {
            Step::Continue(reply) => out.send(reply).ok()?,
            Step::Established { reply, channel } => {
                out.send(reply).ok()?;
                return Some(channel);
            }
            Step::Refuse { reply, .. } => {
                let _ = out.send(reply);
                return None;
            }
        }
    }
}

/// Queues the answer a non-frame read deserves. `Err` means: close the connection.
fn answer_read_failure(out: &Outgoing, event: &ReadEvent, timeout_code: Code) -> Result<()> {
    let err = match event {
        ReadEvent::Frame(_) => return Ok(()),
        ReadEvent::InvalidUtf8 => {
            let e = Error::new(Code::InvalidRequest, "frame is not valid UTF-8");
            let reject = rpc::Reject {
                id: None,
                number: rpc::PARSE_ERROR,
                error: e,
            };
            return out.send(reject.to_line());
        }
        ReadEvent::TooLarge => Error::new(Code::FrameTooLarge, "frame exceeds frameBytes; closing"),
        ReadEvent::TimedOut if timeout_code == Code::AuthFailed => Error::new(
            Code::AuthFailed,
            "handshake did not finish within handshakeMs; closing",
        ),
        ReadEvent::TimedOut => Error::new(Code::Timeout, "connection idle for idleMs; closing"),
        ReadEvent::Closed => return Err(connection::disconnected()),
    };
    let _ = out.send(rpc::encode_error(None, &err));
    Err(err)
}

/// The authenticated peer of a peer channel.
fn peer_of(channel: &Channel) -> Option<PeerInfo> {
    match channel {
        Channel::Peer {
            instance_id,
            run_id,
        } => Some(PeerInfo::new(instance_id.clone(), run_id.clone())),
        Channel::Local | Channel::Run { .. } => None,
    }
}

fn serve_authenticated(
    shared: &Shared,
    reader: &mut FrameReader,
    out: &Outgoing,
    channel: &Channel,
    notifier: &Notifier,
) {
    let peer = peer_of(channel);
    loop {
        let deadline = Instant::now() + Duration::from_millis(shared.limits.idle_ms);
        let frame = match reader.next(Some(deadline)) {
            ReadEvent::Frame(frame) => frame,
            ReadEvent::InvalidUtf8 => {
                match answer_read_failure(out, &ReadEvent::InvalidUtf8, Code::Timeout) {
                    Ok(()) => continue,
                    Err(_) => return,
                }
            }
            other => {
                let _ = answer_read_failure(out, &other, Code::Timeout);
                return;
            }
        };
        let reply = match rpc::parse(&frame) {
            Err(reject) => Some(reject.to_line()),
            Ok(Incoming::Request { id, method, params }) => Some(dispatch(
                shared,
                channel,
                peer.as_ref(),
                &id,
                &method,
                params,
                notifier,
            )),
            Ok(Incoming::Notification { method, params }) => {
                if let Some(from) = &peer
                    && access::authorize(channel, &method).is_ok()
                    && let Some(push) = crate::protocol::peer::receipt_notification(&method, params)
                {
                    shared.handler.receipt_notification(from, push);
                }
                None
            }
            // Inbound connections never carry our requests, so stray responses are dropped.
            Ok(Incoming::Response { .. }) => None,
        };
        if let Some(reply) = reply
            && !answered(shared, out, reply)
        {
            return;
        }
    }
}

/// Sends one reply, then lets the handler do what the answer did not need
/// (`Handler::after_reply`); false once the connection is closed.
fn answered(shared: &Shared, out: &Outgoing, reply: Vec<u8>) -> bool {
    let sent = out.send(reply).is_ok();
    // Also when the answer could not be written: the request's bookkeeping still happens.
    shared.handler.after_reply();
    sent
}

/// Answers one request. The checks keep their order: the version and the channel's access
/// first, then the params are decoded into the channel's typed request, then the handler.
fn dispatch(
    shared: &Shared,
    channel: &Channel,
    peer: Option<&PeerInfo>,
    id: &Id,
    method: &str,
    params: Map<String, Value>,
    notifier: &Notifier,
) -> Vec<u8> {
    let checked = rpc::check_version(&params).and_then(|()| access::authorize(channel, method));
    let handler = &shared.handler;
    let result = checked.and_then(|()| match (peer, channel) {
        (Some(from), _) => PeerRequest::decode(method, params)
            .and_then(|req| handler.peer_request(from, req, notifier)),
        (None, Channel::Run { run_id }) => LocalRequest::decode(method, params)
            .and_then(|req| handler.local_request(Some(run_id), req, notifier)),
        (None, _) => LocalRequest::decode(method, params)
            .and_then(|req| handler.local_request(None, req, notifier)),
    });
    answer(shared, id, result)
}

/// The response line for one call's result, an error when it exceeds `frameBytes`.
fn answer(shared: &Shared, id: &Id, result: Result<super::Answer>) -> Vec<u8> {
    let frame = match result {
        Ok(super::Answer(json)) => rpc::encode_result_json(id, &json),
        Err(e) => return rpc::encode_error(Some(id), &e),
    };
    match connection::check_frame_len(&frame, shared.limits.frame_bytes) {
        Ok(()) => frame,
        Err(e) => rpc::encode_error(Some(id), &e),
    }
}
