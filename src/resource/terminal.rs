//! Terminal foreground hand-over for `peer run`. The command runs in its own process group;
//! when the gate was started in the foreground of a terminal, that group must become the
//! terminal's foreground group, or an interactive command would be stopped (SIGTTIN/SIGTTOU)
//! the first time it reads or configures the terminal. The gate takes the foreground back
//! after the last descendant ends. SIGTTOU is blocked around each `tcsetpgrp`, as POSIX
//! allows a background process to change the foreground group while blocking it.

use nix::sys::signal::{SigSet, Signal};
use nix::unistd::Pid;

/// Standard input, when it is a terminal whose foreground group is the gate's.
#[derive(Clone, Copy, Debug)]
pub struct Foreground {
    gate_group: Pid,
}

const STDIN: i32 = 0;

fn foreground_group() -> Option<Pid> {
    // SAFETY: tcgetpgrp only reads the terminal state of descriptor 0; no memory is shared.
    let pgrp = unsafe { nix::libc::tcgetpgrp(STDIN) };
    (pgrp > 0).then(|| Pid::from_raw(pgrp))
}

/// Makes `group` the terminal's foreground group with SIGTTOU blocked; async-signal-safe
/// (used between fork and exec as well).
pub fn hand_to(group: Pid) -> bool {
    let mut ttou = SigSet::empty();
    ttou.add(Signal::SIGTTOU);
    let blocked = ttou.thread_block().is_ok();
    // SAFETY: tcsetpgrp only changes the terminal's foreground group; no memory is shared.
    let ok = unsafe { nix::libc::tcsetpgrp(STDIN, group.as_raw()) } == 0;
    if blocked {
        let _ = ttou.thread_unblock();
    }
    ok
}

impl Foreground {
    /// `Some` when stdin is a terminal and the gate's group is in its foreground.
    pub fn detect() -> Option<Foreground> {
        let gate_group = nix::unistd::getpgrp();
        (foreground_group() == Some(gate_group)).then_some(Foreground { gate_group })
    }

    /// Gives the terminal back to the gate's group.
    pub fn restore(&self) {
        let _ = hand_to(self.gate_group);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_terminal_nothing_is_handed_over() {
        // Test runners give no controlling terminal on stdin (or a pipe): detection says no.
        if foreground_group().is_none() {
            assert!(Foreground::detect().is_none());
        }
    }
}
