//! Per-connection plumbing shared by both directions: the bounded outgoing queue drained by a
//! writer thread with a write deadline, the frame reader with read deadlines, the
//! [`Notifier`] handle, and the SO_PEERCRED same-user check.

use crate::error::{Code, Error, Result};
use crate::protocol::frame::{FrameDecoder, FrameError};
use crate::protocol::rpc;
use crossbeam_channel::{Receiver, Sender, bounded};
use nix::sys::socket::{MsgFlags, send};
use parking_lot::Mutex;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub(crate) use crate::config::internal::READ_CHUNK_BYTES;

/// An item of the outgoing queue.
pub(crate) enum Out {
    Frame(Vec<u8>),
    /// Flush what is queued, then shut the socket down.
    Close,
}

/// The sending half of one connection: bounded queue, writer thread, closed flag.
///
/// A frame may also be written directly by the thread that produced it when nothing is
/// queued, which saves two thread hand-offs per round trip. `write_lock` serialises the
/// writer thread and direct writers; `queued` counts frames enqueued but not yet written, so
/// a direct write never overtakes a queued frame.
///
/// The writer thread starts with the first frame that has to be queued (a full socket buffer,
/// a notification): most connections answer every request directly and never need one, so
/// a root with many connections does not keep an idle writer thread for each.
#[derive(Clone)]
pub(crate) struct Outgoing {
    tx: Sender<Out>,
    writer: Arc<Mutex<Writer>>,
    closed: Arc<AtomicBool>,
    stream: Arc<UnixStream>,
    write_lock: Arc<Mutex<UnixStream>>,
    queued: Arc<AtomicUsize>,
    write_ms: u64,
}

/// The writer thread's state.
enum Writer {
    /// Not needed yet; holds the queue's receiving end for it.
    Idle(Receiver<Out>),
    Running,
    /// Closed before it was ever needed.
    Closed,
}

impl Outgoing {
    /// The sending half of `stream` with a queue of `capacity` frames (its writer thread
    /// starts when the first frame is queued).
    pub(crate) fn spawn(stream: &UnixStream, capacity: u64, write_ms: u64) -> Result<Outgoing> {
        let clone = || {
            stream
                .try_clone()
                .map_err(|e| io_err("cannot clone a socket", &e))
        };
        let write_lock = Arc::new(Mutex::new(clone()?));
        let handle = Arc::new(clone()?);
        let (tx, rx) = bounded::<Out>(usize::try_from(capacity).unwrap_or(usize::MAX).max(1));
        Ok(Outgoing {
            tx,
            writer: Arc::new(Mutex::new(Writer::Idle(rx))),
            closed: Arc::new(AtomicBool::new(false)),
            stream: handle,
            write_lock,
            queued: Arc::new(AtomicUsize::new(0)),
            write_ms,
        })
    }

    /// Starts the writer thread unless it runs; `DISCONNECTED` once closed.
    fn ensure_writer(&self) -> Result<()> {
        let mut writer = self.writer.lock();
        let rx = match std::mem::replace(&mut *writer, Writer::Running) {
            Writer::Running => return Ok(()),
            Writer::Closed => {
                *writer = Writer::Closed;
                return Err(disconnected());
            }
            Writer::Idle(rx) => rx,
        };
        let (lock, count, write_ms) = (self.write_lock.clone(), self.queued.clone(), self.write_ms);
        let spawned = std::thread::Builder::new()
            .name("peer-writer".into())
            .spawn(move || {
                while let Ok(Out::Frame(bytes)) = rx.recv() {
                    let mut writer = lock.lock();
                    let written = write_with_deadline(&mut writer, &bytes, write_ms);
                    count.fetch_sub(1, Ordering::AcqRel);
                    if written.is_err() {
                        break;
                    }
                }
                let _ = lock.lock().shutdown(std::net::Shutdown::Both);
            });
        if let Err(e) = spawned {
            *writer = Writer::Closed;
            drop(writer);
            self.abort();
            return Err(io_err("cannot start a writer thread", &e));
        }
        Ok(())
    }

    /// Writes `frame` at once from this thread when no queued frame is waiting; `None` when
    /// it must be queued instead. A failed direct write closes the connection.
    fn write_direct(&self, frame: &[u8], write_ms: u64) -> Option<io::Result<()>> {
        let mut writer = self.write_lock.lock();
        if self.queued.load(Ordering::Acquire) != 0 {
            return None;
        }
        let written = write_with_deadline(&mut writer, frame, write_ms);
        drop(writer);
        if written.is_err() {
            self.abort();
        }
        Some(written)
    }

    /// Enqueues for the writer thread, waiting at most `wait` for room (`None`: no wait).
    fn enqueue(&self, frame: Vec<u8>, wait: Option<Duration>) -> Result<()> {
        self.ensure_writer()?;
        self.queued.fetch_add(1, Ordering::AcqRel);
        let sent = match wait {
            Some(wait) => self
                .tx
                .send_timeout(Out::Frame(frame), wait)
                .map_err(|e| e.is_timeout()),
            None => self.tx.try_send(Out::Frame(frame)).map_err(|e| e.is_full()),
        };
        let Err(full) = sent else { return Ok(()) };
        self.queued.fetch_sub(1, Ordering::AcqRel);
        if !full {
            return Err(disconnected());
        }
        Err(Error::new(
            Code::QueueFull,
            "the connection's outgoing queue is full (outgoingFrames); retry later",
        ))
    }

    /// Sends a frame, waiting at most `write_ms`: a peer that does not read gets its
    /// connection closed instead of wedging the caller.
    pub(crate) fn send(&self, frame: Vec<u8>) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(disconnected());
        }
        if let Some(result) = self.write_direct(&frame, self.write_ms) {
            return result.map_err(|e| write_failed(&e));
        }
        self.enqueue(frame, Some(Duration::from_millis(self.write_ms)))
            .map_err(|e| {
                self.close();
                match e.code {
                    Code::QueueFull => Error::new(
                        Code::Timeout,
                        "the peer did not read its answers within writeMs; connection closed",
                    ),
                    _ => e,
                }
            })
    }

    /// For requests: writes directly when possible (within `write_ms`, capped by the
    /// connection's writeMs), else queues without waiting (`QUEUE_FULL` when full).
    pub(crate) fn send_request(
        &self,
        frame: Vec<u8>,
        write_ms: u64,
    ) -> std::result::Result<(), SendFailure> {
        if self.closed.load(Ordering::Acquire) {
            return Err(SendFailure {
                error: disconnected(),
                undelivered: true,
            });
        }
        match self.write_direct(&frame, write_ms.clamp(1, self.write_ms)) {
            Some(Ok(())) => Ok(()),
            Some(Err(e)) => Err(SendFailure {
                error: write_failed(&e),
                undelivered: peer_gone(&e),
            }),
            None => self.enqueue(frame, None).map_err(|error| SendFailure {
                error,
                undelivered: false,
            }),
        }
    }

    /// Blocks until the socket has bytes to read or the peer hung up, without consuming
    /// anything. `false` when polling itself failed.
    pub(crate) fn wait_readable(&self) -> bool {
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        use std::os::fd::AsFd;
        loop {
            let mut fds = [PollFd::new(self.stream.as_fd(), PollFlags::POLLIN)];
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) => return true,
                Err(nix::errno::Errno::EINTR) => {}
                Err(_) => return false,
            }
        }
    }

    /// Queues a frame without waiting: `QUEUE_FULL` when the queue is full. Used for
    /// notifications, which must never block the thread that emits them.
    pub(crate) fn try_send(&self, frame: Vec<u8>) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(disconnected());
        }
        self.enqueue(frame, None)
    }

    /// Flushes queued frames, then closes. Idempotent; never blocks longer than `write_ms`.
    pub(crate) fn close(&self) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        {
            let mut writer = self.writer.lock();
            if let Writer::Idle(_) = *writer {
                // Nothing was ever queued: no writer to flush through. Shutting down under
                // the write lock waits for a direct write in progress (bounded by writeMs).
                *writer = Writer::Closed;
                drop(writer);
                let _ = self.write_lock.lock().shutdown(std::net::Shutdown::Both);
                return;
            }
        }
        if self
            .tx
            .send_timeout(Out::Close, Duration::from_millis(self.write_ms))
            .is_err()
        {
            // The writer is stuck or gone: cutting the socket releases it.
            let _ = self.stream.shutdown(std::net::Shutdown::Both);
        }
    }

    /// Closes at once without flushing (shutdown, eviction).
    pub(crate) fn abort(&self) {
        self.closed.store(true, Ordering::Release);
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// True when the peer has already closed: a non-consuming, non-blocking peek sees end of
    /// stream (or an error). Lets a cached connection be replaced before a request is risked
    /// on it, even if its reader thread has not yet noticed.
    pub(crate) fn peer_closed(&self) -> bool {
        use nix::sys::socket::recv;
        let mut probe = [0u8; 1];
        match recv(
            self.stream.as_raw_fd(),
            &mut probe,
            MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT,
        ) {
            Ok(0) => true,
            Ok(_) => false,
            Err(nix::errno::Errno::EAGAIN) | Err(nix::errno::Errno::EINTR) => false,
            Err(_) => true,
        }
    }
}

/// Closes (flushing) when dropped, including during a panic unwind.
pub(crate) struct CloseOnDrop(pub(crate) Outgoing);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// Why a request frame was not sent.
pub(crate) struct SendFailure {
    pub(crate) error: Error,
    /// The peer cannot have read the frame (the connection was closed before writing, or the
    /// peer was already gone), so retrying on a fresh connection cannot duplicate it.
    pub(crate) undelivered: bool,
}

/// A write the kernel refused because the peer closed or shut down its end: nothing of the
/// frame can have been read by it.
fn peer_gone(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset | io::ErrorKind::NotConnected
    )
}

fn write_failed(e: &io::Error) -> Error {
    Error::new(
        Code::Disconnected,
        format!("writing to the peer failed or exceeded writeMs ({e}); connection closed"),
    )
}

pub(crate) fn disconnected() -> Error {
    Error::new(
        Code::Disconnected,
        "the connection closed; retry to reconnect",
    )
}

pub(crate) fn io_err(what: &str, e: &io::Error) -> Error {
    Error::new(Code::Io, format!("{what}: {e}"))
}

/// Writes all of `bytes` within `write_ms` in total.
pub(crate) fn write_with_deadline(
    stream: &mut UnixStream,
    bytes: &[u8],
    write_ms: u64,
) -> io::Result<()> {
    // The common case, a frame that fits the socket buffer, costs one send(2) and no timeout
    // bookkeeping; only a full buffer falls through to the deadline loop.
    let mut rest = bytes;
    loop {
        match send(
            stream.as_raw_fd(),
            rest,
            MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT,
        ) {
            Ok(0) if !rest.is_empty() => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            Ok(n) => rest = rest.get(n..).unwrap_or_default(),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(nix::errno::Errno::EAGAIN) => {}
            Err(e) => return Err(io::Error::from(e)),
        }
        break;
    }
    let deadline = Instant::now() + Duration::from_millis(write_ms);
    while !rest.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::from(io::ErrorKind::TimedOut));
        }
        stream.set_write_timeout(Some(left))?;
        // MSG_NOSIGNAL: a vanished peer is an EPIPE error here, whatever the process's
        // SIGPIPE disposition (a CLI may restore the default to exit quietly on a closed pipe).
        match send(stream.as_raw_fd(), rest, MsgFlags::MSG_NOSIGNAL) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            Ok(n) => rest = rest.get(n..).unwrap_or_default(),
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(io::Error::from(e)),
        }
    }
    Ok(())
}

/// Pushes notifications onto one connection's bounded outgoing queue, e.g. `peer.receipt`
/// after `peer.subscribe`. Cheap to clone; keep it as long as the subscription lives.
#[derive(Clone)]
pub struct Notifier {
    out: Outgoing,
    frame_bytes: u64,
}

impl Notifier {
    pub(crate) fn new(out: Outgoing, frame_bytes: u64) -> Notifier {
        Notifier { out, frame_bytes }
    }

    /// Queues one notification without blocking: `QUEUE_FULL` when the queue is full,
    /// `DISCONNECTED` once the connection closed, `FRAME_TOO_LARGE` past `frameBytes`.
    /// A `peer.receipt` notification (advisory; the durable copy is a request).
    pub fn push_receipt(&self, push: &crate::protocol::message::ReceiptPush) -> Result<()> {
        self.notify("peer.receipt", push)
    }

    /// Queues one notification; `params` a `Value` object or typed params that serialise as
    /// their `Value` would.
    pub fn notify<P: serde::Serialize + ?Sized>(&self, method: &str, params: &P) -> Result<()> {
        let frame = rpc::encode_notification(method, params);
        check_frame_len(&frame, self.frame_bytes)?;
        self.out.try_send(frame)
    }

    /// True once the connection is closed; subscriptions holding this can be dropped.
    pub fn is_closed(&self) -> bool {
        self.out.is_closed()
    }
}

/// An encoded frame (with its `\n`) must fit `frameBytes`.
pub(crate) fn check_frame_len(frame: &[u8], frame_bytes: u64) -> Result<()> {
    if frame.len() as u64 > frame_bytes.saturating_add(1) {
        return Err(Error::new(
            Code::FrameTooLarge,
            format!(
                "a {}-byte frame exceeds frameBytes ({frame_bytes})",
                frame.len() - 1
            ),
        ));
    }
    Ok(())
}

/// What one read produced.
pub(crate) enum ReadEvent {
    Frame(Vec<u8>),
    InvalidUtf8,
    TooLarge,
    TimedOut,
    Closed,
}

/// Reads frames from a stream through the bounded decoder.
///
/// It sleeps in poll(2) for `POLLIN`, never in a blocking read: a Unix stream socket wakes
/// every sleeper on its wait queue, blocked readers included, each time the peer consumes a
/// frame this side wrote (the freed buffer space is announced as writable), so a reader
/// blocked in read(2) while the peer reads our answer is woken for nothing, a context switch
/// and often a cross-CPU wake-up per frame. A poll(2) sleeper for `POLLIN` is not woken by
/// that announcement. The read itself then never blocks, and read deadlines are poll's own
/// timeout (no `SO_RCVTIMEO` to re-arm).
pub(crate) struct FrameReader {
    stream: UnixStream,
    decoder: FrameDecoder,
    chunk: Vec<u8>,
}

/// What waiting for bytes ended with.
enum Readiness {
    /// Bytes, end of stream or an error to read.
    Ready,
    TimedOut,
    Failed,
}

impl FrameReader {
    pub(crate) fn new(stream: UnixStream, frame_bytes: u64) -> FrameReader {
        let max = usize::try_from(frame_bytes).unwrap_or(usize::MAX);
        FrameReader {
            stream,
            decoder: FrameDecoder::new(max),
            chunk: vec![0; READ_CHUNK_BYTES],
        }
    }

    /// Accepts frames up to `frame_bytes` from now on.
    pub(crate) fn set_frame_bytes(&mut self, frame_bytes: u64) {
        self.decoder
            .set_max_frame_bytes(usize::try_from(frame_bytes).unwrap_or(usize::MAX));
    }

    /// The next frame, waiting until `deadline` (forever when `None`).
    pub(crate) fn next(&mut self, deadline: Option<Instant>) -> ReadEvent {
        use nix::sys::socket::recv;
        loop {
            match self.decoder.next_frame() {
                Some(Ok(frame)) => return ReadEvent::Frame(frame),
                Some(Err(FrameError::InvalidUtf8)) => return ReadEvent::InvalidUtf8,
                Some(Err(FrameError::TooLarge)) => return ReadEvent::TooLarge,
                None if self.decoder.is_failed() => return ReadEvent::Closed,
                None => {}
            }
            match self.wait_readable(deadline) {
                Readiness::Ready => {}
                Readiness::TimedOut => return ReadEvent::TimedOut,
                Readiness::Failed => return ReadEvent::Closed,
            }
            match recv(
                self.stream.as_raw_fd(),
                &mut self.chunk,
                MsgFlags::MSG_DONTWAIT,
            ) {
                Ok(0) => return ReadEvent::Closed,
                Ok(n) => self.decoder.push(self.chunk.get(..n).unwrap_or_default()),
                // Readable turned out empty (another reader of a shared socket, a spurious
                // readiness): wait again.
                Err(nix::errno::Errno::EAGAIN) | Err(nix::errno::Errno::EINTR) => {}
                Err(_) => return ReadEvent::Closed,
            }
        }
    }

    /// Sleeps in poll(2) until the socket is readable (or hung up) or `deadline` passes.
    fn wait_readable(&self, deadline: Option<Instant>) -> Readiness {
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        use std::os::fd::AsFd;
        loop {
            let timeout = match deadline {
                None => PollTimeout::NONE,
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => poll_timeout(left),
                    _ => return Readiness::TimedOut,
                },
            };
            let mut fds = [PollFd::new(self.stream.as_fd(), PollFlags::POLLIN)];
            match poll(&mut fds, timeout) {
                // Timed out: the loop re-checks the deadline (poll may end a little early).
                Ok(0) => {}
                Ok(_) => return Readiness::Ready,
                Err(nix::errno::Errno::EINTR) => {}
                Err(_) => return Readiness::Failed,
            }
        }
    }
}

/// `left` as poll(2)'s timeout, rounded up to whole milliseconds so that a wait never ends
/// before its deadline only to poll again with a zero timeout (capped at poll's maximum).
fn poll_timeout(left: Duration) -> nix::poll::PollTimeout {
    let ms = left.as_micros().div_ceil(1000);
    let ms = i32::try_from(ms).unwrap_or(i32::MAX);
    nix::poll::PollTimeout::try_from(ms).unwrap_or(nix::poll::PollTimeout::MAX)
}

/// Refuses a connection from another OS user; runs before any byte is read.
pub(crate) fn check_same_user(stream: &UnixStream) -> Result<()> {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    let cred = getsockopt(stream, PeerCredentials).map_err(|e| {
        Error::new(
            Code::Io,
            format!("cannot read the peer's credentials (SO_PEERCRED): {e}"),
        )
    })?;
    let me = nix::unistd::geteuid().as_raw();
    if cred.uid() != me {
        return Err(Error::new(
            Code::AuthFailed,
            format!(
                "connection from uid {} refused; only uid {me} may connect",
                cred.uid()
            ),
        ));
    }
    Ok(())
}

/// Connects to a Unix socket without ever blocking past `deadline`. A blocking `connect(2)`
/// waits indefinitely when the listener's backlog is full (a frozen root), so the socket is
/// non-blocking while connecting and a full backlog is retried until the deadline.
pub(crate) fn connect_bounded(path: &std::path::Path, deadline: Instant) -> io::Result<UnixStream> {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, UnixAddr, connect, socket};
    let addr = UnixAddr::new(path).map_err(io::Error::from)?;
    loop {
        let flags = SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC;
        let fd =
            socket(AddressFamily::Unix, SockType::Stream, flags, None).map_err(io::Error::from)?;
        match connect(fd.as_raw_fd(), &addr) {
            Ok(()) => {
                let stream = UnixStream::from(fd);
                stream.set_nonblocking(false)?;
                return Ok(stream);
            }
            Err(nix::errno::Errno::EAGAIN) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(nix::errno::Errno::EAGAIN) => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the listener's backlog stayed full until the deadline",
                ));
            }
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(io::Error::from(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn poll_timeouts_round_up_to_whole_milliseconds() {
        use nix::poll::PollTimeout;
        let t = |d: Duration| i32::from(poll_timeout(d));
        assert_eq!(t(Duration::from_micros(1)), 1);
        assert_eq!(t(Duration::from_millis(5)), 5);
        assert_eq!(t(Duration::from_micros(5_001)), 6);
        assert_eq!(
            t(Duration::from_secs(u64::MAX / 4)),
            i32::from(PollTimeout::MAX)
        );
    }

    /// A read times out at its deadline, never before; bytes already there, or written while
    /// the reader sleeps, are read; a peer that hangs up ends the stream.
    #[test]
    fn reads_wait_until_their_deadline_and_wake_for_bytes() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let mut r = FrameReader::new(a, 1 << 16);
        let deadline = Instant::now() + Duration::from_millis(20) + Duration::from_micros(900);
        assert!(matches!(r.next(Some(deadline)), ReadEvent::TimedOut));
        assert!(Instant::now() >= deadline);
        b.write_all(b"{\"a\":1}\n{\"b\"").unwrap();
        match r.next(Some(Instant::now() + Duration::from_secs(10))) {
            ReadEvent::Frame(f) => assert_eq!(f, b"{\"a\":1}".to_vec()),
            _ => panic!("the frame already there was not read"),
        }
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            b.write_all(b":2}\n").unwrap();
            b
        });
        match r.next(None) {
            ReadEvent::Frame(f) => assert_eq!(f, b"{\"b\":2}".to_vec()),
            _ => panic!("the frame written later was not read"),
        }
        drop(writer.join().unwrap());
        assert!(matches!(r.next(None), ReadEvent::Closed));
    }

    fn writer_idle(out: &Outgoing) -> bool {
        matches!(*out.writer.lock(), Writer::Idle(_))
    }

    /// Frames written directly start no writer thread, and closing such a connection still
    /// ends the stream; the first queued frame starts it, and queued frames are delivered
    /// before the close.
    #[test]
    fn the_writer_thread_starts_with_the_first_queued_frame() {
        use std::io::Read;
        let (near, mut far) = UnixStream::pair().unwrap();
        let out = Outgoing::spawn(&near, 4, 5_000).unwrap();
        out.send(b"direct\n".to_vec()).unwrap();
        assert!(writer_idle(&out));
        out.close();
        assert!(matches!(*out.writer.lock(), Writer::Closed));
        let mut got = Vec::new();
        far.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"direct\n");
        assert_eq!(
            out.try_send(b"late\n".to_vec()).unwrap_err().code,
            Code::Disconnected
        );

        let (near, mut far) = UnixStream::pair().unwrap();
        let out = Outgoing::spawn(&near, 4, 5_000).unwrap();
        out.try_send(b"queued 1\n".to_vec()).unwrap();
        assert!(matches!(*out.writer.lock(), Writer::Running));
        out.try_send(b"queued 2\n".to_vec()).unwrap();
        out.close();
        let mut got = Vec::new();
        far.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"queued 1\nqueued 2\n");
    }
}
