//! The outside half of `answerNetwork`: a small HTTP CONNECT proxy per answerer, in the
//! server's (host) network namespace, listening on a Unix socket in a private directory that
//! the sandbox binds into the answerer's root (`/run/peer-proxy/proxy.sock`). It connects only
//! to the configured `host:port` destinations (compared as written, case-insensitively) and
//! answers anything else with 403. The inside half (`sandbox::ns`) makes it reachable at
//! `127.0.0.1:PORT` in the answerer's network namespace as `HTTPS_PROXY`.
//!
//! Bounded: at most [`EGRESS_TUNNELS_MAX`] tunnels at once, a request head of at most
//! [`EGRESS_HEAD_BYTES_MAX`] bytes read within [`EGRESS_HEAD_TIMEOUT`], connects within
//! [`EGRESS_CONNECT_TIMEOUT`]; a tunnel ends when the answerer's namespace dies (its end
//! closes) or after [`EGRESS_IDLE_TIMEOUT`] without traffic, and the listener stops when this
//! value is dropped.

use crate::config::internal::{
    EGRESS_CONNECT_TIMEOUT, EGRESS_HEAD_BYTES_MAX, EGRESS_HEAD_TIMEOUT, EGRESS_IDLE_TIMEOUT,
    EGRESS_TUNNELS_MAX,
};
use crate::fsutil::TempDir;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

pub const SOCKET_NAME: &str = "proxy.sock";

/// A running proxy; stops (and removes its directory) on drop.
pub struct Egress {
    dir: TempDir,
    stop: Arc<AtomicBool>,
}

impl Egress {
    /// Binds the socket and starts the acceptor thread.
    pub fn start(allowed: &[String]) -> std::io::Result<Egress> {
        let dir = TempDir::new("ask-net").map_err(|e| std::io::Error::other(e.message))?;
        let listener = UnixListener::bind(dir.join(SOCKET_NAME))?;
        let stop = Arc::new(AtomicBool::new(false));
        let allowed: Arc<Vec<String>> = Arc::new(allowed.to_vec());
        let flag = stop.clone();
        std::thread::spawn(move || accept_loop(listener, allowed, flag));
        Ok(Egress { dir, stop })
    }

    /// The directory holding the socket (bound into the sandbox).
    pub fn dir(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }
}

impl Drop for Egress {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the blocking accept so the thread sees the flag.
        let _ = UnixStream::connect(self.dir.join(SOCKET_NAME));
    }
}

fn accept_loop(listener: UnixListener, allowed: Arc<Vec<String>>, stop: Arc<AtomicBool>) {
    let open = Arc::new(AtomicUsize::new(0));
    for conn in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(conn) = conn else { continue };
        if open.fetch_add(1, Ordering::SeqCst) >= EGRESS_TUNNELS_MAX {
            open.fetch_sub(1, Ordering::SeqCst);
            let _ = (&conn).write_all(b"HTTP/1.1 429 Too Many Requests\r\n\r\n");
            continue;
        }
        let (allowed, open) = (allowed.clone(), open.clone());
        std::thread::spawn(move || {
            tunnel(conn, &allowed);
            open.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

/// The destination of a `CONNECT host:port HTTP/1.x` head, lower-cased (pure).
pub fn connect_target(head: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(head).ok()?;
    let line = text.split("\r\n").next()?;
    let mut words = line.split(' ');
    let (method, target, version) = (words.next()?, words.next()?, words.next()?);
    (method == "CONNECT" && version.starts_with("HTTP/1.") && words.next().is_none())
        .then(|| target.to_ascii_lowercase())
}

fn read_head(conn: &mut UnixStream) -> Option<Vec<u8>> {
    conn.set_read_timeout(Some(EGRESS_HEAD_TIMEOUT)).ok()?;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    // Byte by byte: nothing after the head may be consumed (it belongs to the tunnel).
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() >= EGRESS_HEAD_BYTES_MAX || conn.read(&mut byte).ok()? == 0 {
            return None;
        }
        head.push(byte[0]);
    }
    conn.set_read_timeout(None).ok()?;
    Some(head)
}

fn tunnel(mut conn: UnixStream, allowed: &[String]) {
    let Some(target) = read_head(&mut conn).and_then(|h| connect_target(&h)) else {
        let _ = conn.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n");
        return;
    };
    if !allowed.contains(&target) {
        let _ = conn.write_all(b"HTTP/1.1 403 Forbidden\r\n\r\n");
        return;
    }
    let remote = target.to_socket_addrs().ok().and_then(|mut a| {
        a.find_map(|a| TcpStream::connect_timeout(&a, EGRESS_CONNECT_TIMEOUT).ok())
    });
    let Some(remote) = remote else {
        let _ = conn.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n");
        return;
    };
    if conn
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .is_err()
    {
        return;
    }
    let idle = Some(EGRESS_IDLE_TIMEOUT);
    if conn.set_read_timeout(idle).is_err() || remote.set_read_timeout(idle).is_err() {
        return;
    }
    splice(remote, conn);
}

/// Copies bytes both ways between a TCP and a Unix stream until both sides have ended (each
/// direction's end is passed on as a write shutdown). The forwarder inside the answerer's
/// network namespace uses it too.
pub(crate) fn splice(tcp: TcpStream, unix: UnixStream) {
    let (Ok(mut tcp2), Ok(mut unix2)) = (tcp.try_clone(), unix.try_clone()) else {
        return;
    };
    let up = std::thread::spawn(move || {
        let _ = std::io::copy(&mut tcp2, &mut unix2);
        let _ = unix2.shutdown(Shutdown::Write);
    });
    let (mut tcp, mut unix) = (tcp, unix);
    let _ = std::io::copy(&mut unix, &mut tcp);
    let _ = tcp.shutdown(Shutdown::Write);
    let _ = up.join();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_plain_connect_head_names_a_target() {
        let t = |h: &str| connect_target(h.as_bytes());
        assert_eq!(
            t("CONNECT Api.Example.com:443 HTTP/1.1\r\nHost: x\r\n\r\n").as_deref(),
            Some("api.example.com:443")
        );
        assert_eq!(t("GET http://x/ HTTP/1.1\r\n\r\n"), None);
        assert_eq!(t("CONNECT a:1 HTTP/2\r\n\r\n"), None);
        assert_eq!(t("CONNECT a:1 HTTP/1.1 extra\r\n\r\n"), None);
    }
}
