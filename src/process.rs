//! Processes on this machine, read from `/proc`: process-start evidence (pid + start time,
//! field 22 of `/proc/PID/stat`, + boot id) and the liveness verdict for recorded evidence,
//! parents, children and process groups. Presence, reclamation and the resource coordinator
//! all judge "is that process still the one recorded" here. Never guesses: anything it cannot
//! read is `Life::Unknown`, which the coordinator keeps for an operator.

use crate::config::internal::PARENT_WALK_MAX;
use crate::error::{Code, Error, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

use crate::config::internal::PROC_STAT_BYTES_MAX;

/// Who started a process, precisely enough to tell it from a later process with the same pid:
/// pid, start time in clock ticks after boot (field 22 of `/proc/PID/stat`) and the boot id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessEvidence {
    pub pid: u32,
    pub start_time: u64,
    pub boot_id: String,
}

impl ProcessEvidence {
    /// Evidence that cannot decide anything (pid 0 or no boot id): an operator must look.
    pub fn is_missing(&self) -> bool {
        self.pid == 0 || self.boot_id.is_empty() || self.start_time == 0
    }
}

/// What a liveness probe can say about a recorded process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Life {
    Alive,
    /// Provably gone: no such pid, a different start time, or a different boot.
    Gone,
    /// Evidence missing or unreadable: never reclaimed, reported for an operator.
    Unknown,
}

/// Reads evidence of processes on this boot. Holds the boot id read once at creation.
#[derive(Clone, Debug)]
pub struct Probe {
    boot_id: Option<String>,
}

/// The state letter and start time of a `/proc/PID/stat` line. The comm field (2) may contain
/// spaces and `)`, so fields are counted after the LAST `)`.
pub fn parse_stat(stat: &str) -> Option<(char, u64)> {
    parse_stat_fields(stat).map(|(state, _, start)| (state, start))
}

/// State (field 3), process group (field 5) and start time (field 22).
fn parse_stat_fields(stat: &str) -> Option<(char, i64, u64)> {
    parse_stat_all(stat).map(|(state, _, pgrp, start)| (state, pgrp, start))
}

/// State (3), parent pid (4), process group (5) and start time (22).
fn parse_stat_all(stat: &str) -> Option<(char, i64, i64, u64)> {
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    // Field 22 (`starttime`) is 17 fields after field 5.
    let start = fields.nth(16)?.parse().ok()?;
    Some((state, ppid, pgrp, start))
}

/// The parent pid of a live process, from `/proc/PID/stat`.
pub fn parent_of(pid: u32) -> Option<u32> {
    let stat = read_small(
        &std::path::Path::new("/proc")
            .join(pid.to_string())
            .join("stat"),
    )
    .ok()?;
    let (_, ppid, _, _) = parse_stat_all(&stat)?;
    u32::try_from(ppid).ok()
}

/// The real owner (uid) of a live process: the owner of its `/proc/PID` directory.
pub fn owner_of(pid: u32) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/{pid}"))
        .ok()
        .map(|m| m.uid())
}

/// True when `pid` descends from `ancestor` (bounded walk up the parent chain).
pub fn descends_from(pid: u32, ancestor: u32) -> bool {
    let mut p = pid;
    for _ in 0..PARENT_WALK_MAX {
        match parent_of(p) {
            Some(pp) if pp == ancestor => return true,
            Some(pp) if pp > 1 => p = pp,
            _ => return false,
        }
    }
    false
}

/// Calls `each(pid, ppid, pgrp, state)` for every process in `/proc` until it returns true;
/// processes that vanish during the scan are skipped. `None` when `/proc` cannot be listed.
fn scan_proc(mut each: impl FnMut(i64, i64, i64, char) -> bool) -> Option<()> {
    let entries = std::fs::read_dir("/proc").ok()?;
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i64>() else {
            continue;
        };
        let Ok(stat) = read_small(&entry.path().join("stat")) else {
            continue;
        };
        if let Some((state, ppid, pgrp, _)) = parse_stat_all(&stat)
            && each(pid, ppid, pgrp, state)
        {
            break;
        }
    }
    Some(())
}

/// Process groups of the live descendants of `root` other than `except` (the command's own
/// group): where daemonizing descendants went with `setsid` or `setpgid`. Bounded by the
/// process table; `None` when `/proc` cannot be listed.
pub fn descendant_groups(root: u32, except: i32) -> Option<Vec<i32>> {
    let mut table: Vec<(i64, i64, i64)> = Vec::new();
    scan_proc(|pid, ppid, pgrp, state| {
        if !matches!(state, 'Z' | 'X') {
            table.push((pid, ppid, pgrp));
        }
        false
    })?;
    let mut inside = vec![i64::from(root)];
    let mut groups = Vec::new();
    // Parents may be listed after their children: repeat until no new descendant appears.
    let mut grew = true;
    while grew {
        grew = false;
        for &(pid, ppid, pgrp) in &table {
            if inside.contains(&ppid) && !inside.contains(&pid) {
                inside.push(pid);
                grew = true;
                if let Ok(g) = i32::try_from(pgrp)
                    && g > 1
                    && g != except
                    && !groups.contains(&g)
                {
                    groups.push(g);
                }
            }
        }
    }
    Some(groups)
}

/// Live (non-zombie) children of `parent`: for a subreaper, this includes re-parented
/// descendants that left the command's process group.
pub fn children_of(parent: u32) -> Vec<i32> {
    let mut out = Vec::new();
    scan_proc(|pid, ppid, _, state| {
        if ppid == i64::from(parent) && !matches!(state, 'Z' | 'X') {
            out.extend(i32::try_from(pid));
        }
        false
    });
    out
}

fn read_small(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut s = String::new();
    std::fs::File::open(path)?
        .take(PROC_STAT_BYTES_MAX)
        .read_to_string(&mut s)?;
    Ok(s)
}

impl Probe {
    /// Reads `/proc/sys/kernel/random/boot_id`; without it every verdict is `Unknown`.
    pub fn new() -> Probe {
        let boot_id = read_small(Path::new("/proc/sys/kernel/random/boot_id"))
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty());
        Probe { boot_id }
    }

    /// A probe with a fixed boot id (tests).
    pub fn with_boot_id(boot_id: Option<String>) -> Probe {
        Probe { boot_id }
    }

    /// Evidence of a running process.
    pub fn evidence(&self, pid: u32) -> Result<ProcessEvidence> {
        let Some(boot_id) = self.boot_id.clone() else {
            return Err(Error::new(
                Code::UnsupportedPlatform,
                "cannot read /proc/sys/kernel/random/boot_id; process evidence needs Linux /proc",
            ));
        };
        let path = format!("/proc/{pid}/stat");
        let stat = read_small(Path::new(&path))
            .map_err(|e| Error::io("cannot read", Path::new(&path), &e))?;
        let Some((_, start_time)) = parse_stat(&stat) else {
            return Err(Error::new(
                Code::Io,
                format!("{path} does not have the expected fields"),
            ));
        };
        Ok(ProcessEvidence {
            pid,
            start_time,
            boot_id,
        })
    }

    /// Evidence of this process.
    pub fn own(&self) -> Result<ProcessEvidence> {
        self.evidence(std::process::id())
    }

    /// Whether the recorded process still runs. A zombie has exited: it is gone.
    pub fn life(&self, e: &ProcessEvidence) -> Life {
        let Some(boot) = &self.boot_id else {
            return Life::Unknown;
        };
        if e.is_missing() {
            return Life::Unknown;
        }
        if &e.boot_id != boot {
            return Life::Gone;
        }
        let stat = match read_small(Path::new(&format!("/proc/{}/stat", e.pid))) {
            Ok(s) => s,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Life::Gone,
            Err(err) if err.raw_os_error() == Some(nix::libc::ESRCH) => return Life::Gone,
            Err(_) => return Life::Unknown,
        };
        match parse_stat(&stat) {
            None => Life::Unknown,
            Some((_, start)) if start != e.start_time => Life::Gone,
            Some(('Z' | 'X', _)) => Life::Gone,
            Some(_) => Life::Alive,
        }
    }
}

impl Default for Probe {
    fn default() -> Probe {
        Probe::new()
    }
}

/// Whether a process group still has a running (non-zombie) member. Used for launches whose
/// workload outlives the gate. `kill(-pgid, 0)` answers "no member at all" cheaply; otherwise
/// `/proc` is scanned, because orphaned zombies (under an init that does not reap) still count
/// as members for `kill` but hold nothing.
pub fn group_life(pgid: i32) -> Life {
    if pgid <= 1 {
        return Life::Unknown;
    }
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(-pgid), None) {
        Ok(()) | Err(nix::errno::Errno::EPERM) => {}
        Err(nix::errno::Errno::ESRCH) => return Life::Gone,
        Err(_) => return Life::Unknown,
    }
    // Orphaned zombies still count for `kill` but hold nothing: look for a running member.
    let mut alive = false;
    let scanned = scan_proc(|_, _, pgrp, state| {
        alive = pgrp == i64::from(pgid) && !matches!(state, 'Z' | 'X');
        alive
    });
    match (scanned, alive) {
        (None, _) => Life::Unknown,
        (_, true) => Life::Alive,
        _ => Life::Gone,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_parsing_survives_hostile_comm_fields() {
        let tail = "S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 987654 20 21";
        assert_eq!(parse_stat(&format!("42 (sh) {tail}")), Some(('S', 987654)));
        assert_eq!(
            parse_stat_fields(&format!("42 (sh) {tail}")),
            Some(('S', 2, 987654))
        );
        assert_eq!(
            parse_stat(&format!("42 (a) b) c (d) {tail}")),
            Some(('S', 987654))
        );
        assert_eq!(parse_stat(&format!("42 ( ) ) {tail}")), Some(('S', 987654)));
        assert_eq!(parse_stat("42 (sh) S 1 2"), None);
        assert_eq!(parse_stat("no parenthesis"), None);
        assert_eq!(
            parse_stat("42 (x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 notanumber"),
            None
        );
    }

    #[test]
    fn own_evidence_is_alive_and_changed_evidence_is_gone() {
        let probe = Probe::new();
        let me = probe.own().unwrap();
        assert_eq!(probe.life(&me), Life::Alive);
        let mut reused = me.clone();
        reused.start_time += 1;
        assert_eq!(
            probe.life(&reused),
            Life::Gone,
            "same pid, different start: pid reuse"
        );
        let mut other_boot = me.clone();
        other_boot.boot_id = "another-boot".into();
        assert_eq!(probe.life(&other_boot), Life::Gone);
        let mut missing = me.clone();
        missing.boot_id.clear();
        assert_eq!(probe.life(&missing), Life::Unknown);
        assert_eq!(Probe::with_boot_id(None).life(&me), Life::Unknown);
    }

    #[test]
    fn an_exited_and_reaped_child_is_gone() {
        let probe = Probe::new();
        let mut child = std::process::Command::new("sh")
            .arg("-c")
            .arg("exit 0")
            .spawn()
            .unwrap();
        let ev = probe.evidence(child.id());
        child.wait().unwrap();
        // The child may have exited before we read it; either way it is gone now.
        if let Ok(ev) = ev {
            assert_eq!(probe.life(&ev), Life::Gone);
        }
        assert_eq!(group_life(i32::MAX - 7), Life::Gone);
    }

    #[test]
    fn a_group_lives_while_a_member_runs_and_zombies_do_not_count() {
        use std::os::unix::process::CommandExt;
        let mut sleeper = std::process::Command::new("sleep")
            .arg("5")
            .process_group(0)
            .spawn()
            .unwrap();
        assert_eq!(group_life(sleeper.id() as i32), Life::Alive);
        sleeper.kill().unwrap();
        // Not yet reaped: a zombie member only.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while group_life(sleeper.id() as i32) != Life::Gone && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(group_life(sleeper.id() as i32), Life::Gone);
        sleeper.wait().unwrap();
        assert_eq!(group_life(sleeper.id() as i32), Life::Gone);
    }
}
