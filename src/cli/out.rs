//! The one way commands write to standard output and standard error. A reader that went away
//! (`peer-dir | head -1`, `peer inbox --follow | true`) is not a failure: the write answers
//! [`closed`], which every entry point turns into a quiet exit with status 0 — after a root has
//! removed its own files, because the error travels the normal return path instead of a panic
//! or a restored SIGPIPE that would kill the process before its cleanup.

use crate::error::{Error, Result};
use std::io::Write;
use std::os::fd::AsFd;

/// The error a write to a closed standard output returns.
pub fn closed() -> Error {
    Error::stdout_closed()
}

/// True for the error of [`closed`]: the caller ends quietly with status 0.
pub fn is_closed(e: &Error) -> bool {
    e.is_stdout_closed()
}

/// Writes `text` to standard output as it is and flushes.
pub fn text(text: &str) -> Result<()> {
    bytes(text.as_bytes())
}

/// Writes `bytes` to standard output as they are and flushes.
pub fn bytes(bytes: &[u8]) -> Result<()> {
    #[cfg(test)]
    if MUTED.with(|m| m.get()) {
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .map_err(|e| write_error(&e))
}

/// Writes one line (a newline is added) to standard output and flushes.
pub fn line(line: &str) -> Result<()> {
    #[cfg(test)]
    if MUTED.with(|m| m.get()) {
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    out.write_all(line.as_bytes())
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush())
        .map_err(|e| write_error(&e))
}

/// Writes one JSON value as one line to standard output.
pub fn json(v: &serde_json::Value) -> Result<()> {
    line(&v.to_string())
}

/// Writes one line to standard error. A closed or failing stderr is ignored: there is nowhere
/// left to report it, and it must not end a root before its cleanup.
pub fn err_line(line: &str) {
    let mut err = std::io::stderr().lock();
    let _ = err
        .write_all(line.as_bytes())
        .and_then(|()| err.write_all(b"\n"))
        .and_then(|()| err.flush());
}

/// Writes `text` to standard error as it is (no newline), ignoring failures like
/// [`err_line`].
pub fn err_text(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes()).and_then(|()| err.flush());
}

/// Maps a failed write: a broken pipe is [`closed`], anything else an `IO_ERROR`.
pub fn write_error(e: &std::io::Error) -> Error {
    Error::stdout_write(e)
}

/// True when standard output is a pipe or socket whose reader has gone, found without writing
/// (poll reports `POLLERR`/`POLLHUP` on the write end). A command that waits long between
/// lines (`peer inbox --follow`) checks this so `| head -1` ends it without a further line.
pub fn reader_gone() -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let stdout = std::io::stdout();
    let mut fds = [PollFd::new(stdout.as_fd(), PollFlags::empty())];
    match poll(&mut fds, PollTimeout::ZERO) {
        Ok(n) if n > 0 => fds[0]
            .revents()
            .is_some_and(|r| r.intersects(PollFlags::POLLERR | PollFlags::POLLHUP)),
        _ => false,
    }
}

#[cfg(test)]
thread_local! {
    static MUTED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with this thread's standard output writes dropped (the flag table's tests probe
/// parsers that print their `--help`).
#[cfg(test)]
pub fn muted<T>(f: impl FnOnce() -> T) -> T {
    MUTED.with(|m| m.set(true));
    let r = f();
    MUTED.with(|m| m.set(false));
    r
}
