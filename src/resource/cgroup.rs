//! A cgroup v2 per launch, when this process's cgroup is writable: the command joins it
//! between fork and exec (a write of "0" to a descriptor opened beforehand), every descendant
//! stays in it whatever sessions or process groups it creates, and the launch lives exactly
//! while the cgroup is populated. Otherwise the gate falls back to its subreaper and the
//! recorded process groups. `PEER_GATE_CGROUP=0` forces the fallback.

use crate::config::internal::CGROUP_FILE_BYTES_MAX;
use crate::process::Life;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Environment variable that disables cgroup tracking (`0`).
pub const ENV_GATE_CGROUP: &str = "PEER_GATE_CGROUP";

/// A created launch cgroup and the open `cgroup.procs` the child writes itself into.
pub struct LaunchGroup {
    pub path: PathBuf,
    pub procs: File,
}

fn read_small(path: &Path) -> Option<String> {
    let mut s = String::new();
    File::open(path)
        .ok()?
        .take(CGROUP_FILE_BYTES_MAX)
        .read_to_string(&mut s)
        .ok()?;
    Some(s)
}

/// This process's cgroup v2 directory: the cgroup2 mount plus the `0::` path.
fn own_cgroup() -> Option<PathBuf> {
    let mounts = read_small(Path::new("/proc/self/mountinfo"))?;
    let mount = mounts.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        (right.split_whitespace().next()? == "cgroup2").then(|| left.split_whitespace().nth(4))?
    })?;
    let own = read_small(Path::new("/proc/self/cgroup"))?;
    let rel = own.lines().find_map(|l| l.strip_prefix("0::"))?;
    let rel = rel.trim().trim_start_matches('/');
    if rel.contains("..") {
        return None;
    }
    Some(Path::new(mount).join(rel))
}

/// Creates `peerwire-<tag>` under this process's cgroup, or `None` when cgroup v2 is absent,
/// not writable, or disabled.
pub fn create(tag: &str) -> Option<LaunchGroup> {
    if std::env::var(ENV_GATE_CGROUP).is_ok_and(|v| v == "0") {
        return None;
    }
    let path = own_cgroup()?.join(format!("peerwire-{tag}"));
    std::fs::create_dir(&path).ok()?;
    match std::fs::OpenOptions::new()
        .write(true)
        .open(path.join("cgroup.procs"))
    {
        Ok(procs) => Some(LaunchGroup { path, procs }),
        Err(_) => {
            let _ = std::fs::remove_dir(&path);
            None
        }
    }
}

/// Alive while any process is in the cgroup; gone when it is empty or was removed.
pub fn life(path: &Path) -> Life {
    if !path.starts_with("/") || path.components().any(|c| c.as_os_str() == "..") {
        return Life::Unknown;
    }
    match read_small(&path.join("cgroup.events")) {
        Some(events) if events.lines().any(|l| l == "populated 1") => Life::Alive,
        Some(events) if events.lines().any(|l| l == "populated 0") => Life::Gone,
        Some(_) => Life::Unknown,
        None if !path.exists() => Life::Gone,
        None => Life::Unknown,
    }
}

/// Kills every process in the launch cgroup (`cgroup.kill`, Linux 5.14+).
pub fn kill(path: &Path) {
    let _ = std::fs::write(path.join("cgroup.kill"), b"1");
}

/// Removes an empty launch cgroup (a populated one is left: it still holds the resource).
pub fn remove(path: &Path) {
    if life(path) == Life::Gone {
        let _ = std::fs::remove_dir(path);
    }
}
