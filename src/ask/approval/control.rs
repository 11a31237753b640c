//! The owner's local control channel: a Unix socket `<home>/ask/run/<pid>.sock` (0600, in the
//! private 0700 run directory) through which `peer ask decide` hands a decision to the server
//! that holds the ask. It never passes the HTTP limiter, so traffic to the public port cannot
//! make the owner's own decision fail; the kernel's SO_PEERCRED must name the server's own
//! user, and the one-time decision token is still required. One bounded JSON line each way.

use super::super::ServerState;
use super::super::http::ApiError;
use crate::config::internal::{APPROVAL_IO_TIMEOUT, APPROVAL_LINE_BYTES_MAX, APPROVAL_POLL_MS};
use crate::error::{Code, Error, Result};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The socket of the server with this pid in `run_dir`.
pub fn socket_path(run_dir: &Path, pid: u32) -> PathBuf {
    run_dir.join(format!("{pid}.sock"))
}

/// Binds the socket (replacing a stale one of a dead process with our pid) and makes it 0600.
pub fn bind(path: &Path) -> Result<UnixListener> {
    let _ = std::fs::remove_file(path);
    // A namespace path too long for `sun_path` (108 bytes) fails here, naming the path.
    let listener =
        UnixListener::bind(path).map_err(|e| Error::io("cannot bind control socket", path, &e))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| Error::io("cannot protect control socket", path, &e))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::io("control socket", path, &e))?;
    Ok(listener)
}

/// Serves decisions until the server stops (one at a time: only the owner connects).
pub fn serve(listener: UnixListener, state: Arc<ServerState>) {
    while !state.stopping.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => exchange(stream, &state),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let mut fds = [nix::poll::PollFd::new(
                    listener.as_fd(),
                    nix::poll::PollFlags::POLLIN,
                )];
                let _ = nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(APPROVAL_POLL_MS));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

fn exchange(stream: UnixStream, state: &ServerState) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(APPROVAL_IO_TIMEOUT));
    let _ = stream.set_write_timeout(Some(APPROVAL_IO_TIMEOUT));
    let result = same_user(&stream).and_then(|()| {
        let line = read_line(&stream).ok_or_else(|| ApiError::bad_request("no request line"))?;
        let req: Value = serde_json::from_str(&line)
            .map_err(|_| ApiError::bad_request("request must be JSON"))?;
        let s = |k: &str| req.get(k).and_then(Value::as_str).unwrap_or("");
        state
            .approvals
            .decide(s("askId"), s("token"), s("decision"))
    });
    let reply = match result {
        Ok(()) => json!({"status": 200, "body": {"ok": true}}),
        Err(e) => json!({"status": e.status, "body": e.response().body}),
    };
    let mut stream = stream;
    let _ = stream.write_all(format!("{reply}\n").as_bytes());
}

/// The kernel's word on who connected: only the server's own user may decide.
fn same_user(stream: &UnixStream) -> std::result::Result<(), ApiError> {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    let cred = getsockopt(stream, PeerCredentials)
        .map_err(|_| ApiError::forbidden("cannot read the caller's credentials"))?;
    if cred.uid() != nix::unistd::geteuid().as_raw() {
        return Err(ApiError::forbidden(
            "only the server's own user decides asks",
        ));
    }
    Ok(())
}

fn read_line(stream: &UnixStream) -> Option<String> {
    let mut line = String::new();
    BufReader::new(stream.take(APPROVAL_LINE_BYTES_MAX))
        .read_line(&mut line)
        .ok()?;
    Some(line)
}

/// Sends the owner's decision to the server listening on `socket`.
pub fn send(socket: &Path, ask_id: &str, token: &str, decision: &str) -> Result<()> {
    let mut stream = UnixStream::connect(socket).map_err(|e| {
        Error::new(
            Code::Io,
            format!(
                "cannot reach the ask server's control socket {}: {e}",
                socket.display()
            ),
        )
    })?;
    let _ = stream.set_read_timeout(Some(APPROVAL_IO_TIMEOUT));
    let _ = stream.set_write_timeout(Some(APPROVAL_IO_TIMEOUT));
    let req = json!({"askId": ask_id, "token": token, "decision": decision});
    stream
        .write_all(format!("{req}\n").as_bytes())
        .map_err(|e| Error::new(Code::Io, format!("control socket: {e}")))?;
    let line = read_line(&stream)
        .filter(|l| !l.is_empty())
        .ok_or_else(|| Error::new(Code::Io, "the ask server gave no answer"))?;
    let reply: Value = serde_json::from_str(&line)
        .map_err(|_| Error::new(Code::Io, "the ask server's answer is not JSON"))?;
    let status = reply.get("status").and_then(Value::as_u64).unwrap_or(500) as u16;
    if status == 200 {
        return Ok(());
    }
    Err(super::super::client::error_of(
        status,
        reply.get("body").unwrap_or(&Value::Null),
    ))
}
