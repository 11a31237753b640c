//! Stop requests for roots: SIGINT, SIGTERM and SIGHUP set a flag and make a self-pipe
//! readable, so a root ends through its normal shutdown (which removes exactly the presence
//! record, socket and control file it owns) instead of dying with them left behind.
//!
//! Only commands that own a root install this; every other command keeps the default
//! dispositions and simply dies on a signal, as a shell user expects.

use crate::error::{Code, Error, Result};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The signals that ask a root to stop.
pub const STOP_SIGNALS: [i32; 3] = [
    signal_hook::consts::SIGINT,
    signal_hook::consts::SIGTERM,
    signal_hook::consts::SIGHUP,
];

/// An installed stop request: which signal came (0 = none) and a descriptor that becomes
/// readable when one does. Nobody reads the descriptor, so it stays readable for every waiter.
pub struct Stop {
    signal: Arc<AtomicUsize>,
    wake: UnixStream,
}

impl std::fmt::Debug for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stop")
            .field("signal", &self.signal.load(Ordering::SeqCst))
            .finish()
    }
}

impl Stop {
    /// Installs the handlers for [`STOP_SIGNALS`].
    pub fn install() -> Result<Stop> {
        let fail = |e: std::io::Error| {
            Error::new(Code::Io, format!("cannot install signal handlers: {e}"))
        };
        let signal = Arc::new(AtomicUsize::new(0));
        let (wake, notify) = UnixStream::pair().map_err(fail)?;
        for sig in STOP_SIGNALS {
            signal_hook::flag::register_usize(sig, signal.clone(), sig as usize).map_err(fail)?;
            signal_hook::low_level::pipe::register(sig, notify.try_clone().map_err(fail)?)
                .map_err(fail)?;
        }
        Ok(Stop { signal, wake })
    }

    /// The signal that asked to stop, if one did.
    pub fn signal(&self) -> Option<i32> {
        match self.signal.load(Ordering::SeqCst) {
            0 => None,
            s => i32::try_from(s).ok(),
        }
    }

    /// The shell's status for a command ended by a signal: 128 + its number.
    pub fn exit_status(&self) -> Option<i32> {
        self.signal().map(|s| 128 + s)
    }

    /// A descriptor that is readable once a stop signal has arrived.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.wake.as_fd()
    }

    /// Blocks until a stop signal arrives (no polling: one `poll` on the wake descriptor).
    pub fn wait(&self) {
        let mut fds = [PollFd::new(self.fd(), PollFlags::POLLIN)];
        loop {
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(n) if n > 0 => return,
                Err(nix::errno::Errno::EINTR) | Ok(_) => continue,
                Err(_) => return,
            }
        }
    }

    /// Runs `f` on a thread of its own once a stop signal arrives (used to wake a root's
    /// blocking waits so the main thread can shut it down).
    pub fn on_stop(self: &Arc<Self>, f: impl FnOnce() + Send + 'static) -> Result<()> {
        let me = self.clone();
        std::thread::Builder::new()
            .name("stop-signal".into())
            .spawn(move || {
                let mut fds = [PollFd::new(me.fd(), PollFlags::POLLIN)];
                loop {
                    match poll(&mut fds, PollTimeout::NONE) {
                        Ok(n) if n > 0 => break,
                        Err(nix::errno::Errno::EINTR) | Ok(_) => continue,
                        Err(_) => return,
                    }
                }
                f();
            })
            .map(drop)
            .map_err(|e| Error::new(Code::Io, format!("cannot start the signal thread: {e}")))
    }
}

/// Standard input that reads as end-of-file once a stop signal has arrived, so a loop
/// blocked reading it (the MCP server) ends normally.
pub struct StopAwareInput {
    input: std::fs::File,
    stop: Arc<Stop>,
}

impl StopAwareInput {
    /// Reads the process's standard input through a duplicate of descriptor 0 (no buffer of
    /// its own, so `poll` sees exactly what is unread).
    pub fn stdin(stop: Arc<Stop>) -> Result<StopAwareInput> {
        let fd: OwnedFd = std::io::stdin()
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| Error::new(Code::Io, format!("cannot read standard input: {e}")))?;
        Ok(StopAwareInput {
            input: std::fs::File::from(fd),
            stop,
        })
    }
}

/// Standard input's descriptor, so the MCP server can ask whether more input is waiting.
impl std::os::fd::AsFd for StopAwareInput {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.input.as_fd()
    }
}

impl Read for StopAwareInput {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            if self.stop.signal().is_some() {
                return Ok(0);
            }
            let mut fds = [
                PollFd::new(self.input.as_fd(), PollFlags::POLLIN),
                PollFd::new(self.stop.fd(), PollFlags::POLLIN),
            ];
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(std::io::Error::from(e)),
            }
            let ready = |f: &PollFd| f.revents().is_some_and(|r| !r.is_empty());
            if ready(&fds[1]) {
                return Ok(0);
            }
            if ready(&fds[0]) {
                return self.input.read(buf);
            }
        }
    }
}
