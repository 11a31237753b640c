//! Wake-ups for waiters without a daemon. A waiter watches `<coord>/peer-resources/` with
//! inotify for two events on its resource: the resource file being replaced (`IN_MOVED_TO`:
//! every transaction that changes it, such as a release that grants the next ticket) and the
//! `<hash>.live` file being closed after writing (`IN_CLOSE_WRITE`: every holder and waiter
//! keeps it open, and the kernel closes it when that process dies, even by SIGKILL). A bounded
//! fallback poll (`Limits.heartbeat_ms`) covers what inotify cannot see, such as the death of
//! a session that holds a grant through `peer res request`.

use crate::error::{Error, Result};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use std::ffi::OsString;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

/// Why a wait ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wake {
    /// The resource file changed or a holder/waiter closed its live file.
    Changed,
    /// The timeout passed; the caller re-checks anyway.
    Timeout,
    /// The extra descriptor (a signal self-pipe) became readable.
    Extra,
}

/// An inotify watch on one resource's files.
#[derive(Debug)]
pub struct Watch {
    inotify: Inotify,
    names: [OsString; 2],
}

impl Watch {
    /// Starts watching before the first check, so no change between check and wait is lost.
    pub fn new(dir: &Path, hash: &str) -> Result<Watch> {
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
            .map_err(|e| Error::io("cannot start inotify for", dir, &std::io::Error::from(e)))?;
        inotify
            .add_watch(
                dir,
                AddWatchFlags::IN_MOVED_TO
                    | AddWatchFlags::IN_CLOSE_WRITE
                    | AddWatchFlags::IN_ONLYDIR,
            )
            .map_err(|e| Error::io("cannot watch", dir, &std::io::Error::from(e)))?;
        let names = [
            OsString::from(format!("{hash}.json")),
            OsString::from(format!("{hash}.live")),
        ];
        Ok(Watch { inotify, names })
    }

    /// Waits at most `timeout_ms` for a relevant change or for `extra` to become readable.
    pub fn wait(&self, timeout_ms: u64, extra: Option<BorrowedFd<'_>>) -> Result<Wake> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(timeout_ms);
        loop {
            let left = deadline
                .saturating_duration_since(std::time::Instant::now())
                .as_millis() as u64;
            let mut fds = vec![PollFd::new(self.inotify.as_fd(), PollFlags::POLLIN)];
            if let Some(fd) = extra {
                fds.push(PollFd::new(fd, PollFlags::POLLIN));
            }
            match poll(
                &mut fds,
                PollTimeout::from(left.min(u64::from(u16::MAX)) as u16),
            ) {
                Ok(0) => return Ok(Wake::Timeout),
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => {
                    return Err(Error::new(
                        crate::error::Code::Io,
                        format!("poll on inotify failed: {e}"),
                    ));
                }
            }
            if fds
                .get(1)
                .and_then(|f| f.revents())
                .is_some_and(|r| !r.is_empty())
            {
                return Ok(Wake::Extra);
            }
            if self.relevant()? {
                return Ok(Wake::Changed);
            }
            if left == 0 {
                return Ok(Wake::Timeout);
            }
        }
    }

    /// Discards queued events. Safe right before a fresh check of the state: whatever they
    /// announced is visible to that check, so only later changes need to wake us.
    pub fn drain(&self) -> Result<()> {
        self.relevant().map(|_| ())
    }

    /// Drains queued events; true when one names our files (or the queue overflowed).
    fn relevant(&self) -> Result<bool> {
        let mut hit = false;
        loop {
            match self.inotify.read_events() {
                Ok(events) if events.is_empty() => return Ok(hit),
                Ok(events) => {
                    hit |= events.iter().any(|e| {
                        e.mask.contains(AddWatchFlags::IN_Q_OVERFLOW)
                            || e.name.as_ref().is_some_and(|n| self.names.contains(n))
                    });
                }
                Err(nix::errno::Errno::EAGAIN) => return Ok(hit),
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => {
                    return Err(Error::new(
                        crate::error::Code::Io,
                        format!("reading inotify events failed: {e}"),
                    ));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replacing_the_resource_file_or_closing_the_live_file_wakes() {
        let dir = crate::fsutil::TempDir::new("notify").unwrap();
        let w = Watch::new(&dir, "abc").unwrap();
        assert_eq!(w.wait(10, None).unwrap(), Wake::Timeout);
        crate::fsutil::atomic_write(
            &dir.join("other.json"),
            b"x",
            crate::fsutil::Durability::Visible,
        )
        .unwrap();
        assert_eq!(
            w.wait(10, None).unwrap(),
            Wake::Timeout,
            "other files do not wake"
        );
        crate::fsutil::atomic_write(
            &dir.join("abc.json"),
            b"x",
            crate::fsutil::Durability::Visible,
        )
        .unwrap();
        assert_eq!(w.wait(5_000, None).unwrap(), Wake::Changed);
        drop(crate::fsutil::open_private_rw(&dir.join("abc.live")).unwrap());
        assert_eq!(w.wait(5_000, None).unwrap(), Wake::Changed);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
