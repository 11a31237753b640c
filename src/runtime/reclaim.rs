//! Reclaiming what dead roots left behind: a peerwire presence record (one with a valid
//! `communication` advertisement) whose process is provably gone (pid + start time + boot id,
//! see `presence::process_gone`) is removed with its socket and control file, under the
//! namespace's reclaim lock, exactly as its owner would have on exit: each file only after
//! re-reading it and finding that instance. Records of other programs (no `communication`),
//! malformed ones, and ones whose process may still run (stopped, unknown) are never touched.

use super::control;
use super::core::Core;
use crate::config::internal::RECLAIM_PER_PASS;
use crate::fsutil::FileLock;
use crate::presence::{self, Entry};
use crate::process::Probe;
use std::os::unix::fs::FileTypeExt;

/// The lock that serialises reclaimers (`<coord>/peer-runtime/.reclaim.lock`).
const RECLAIM_LOCK: &str = ".reclaim.lock";

/// One bounded pass; returns how many records were removed.
pub fn reclaim_dead(core: &Core) -> usize {
    let dir = core.site.ns().active_agents();
    let now = crate::clock::now_ms();
    let probe = Probe::new();
    let dead: Vec<Entry> = presence::unrefreshed_names(&dir, core.limits(), RECLAIM_PER_PASS)
        .iter()
        .map(|n| presence::read_one(&dir, n, core.limits(), now))
        .filter(|e| !e.is_live() && e.advert.is_some())
        .filter(|e| {
            e.advert
                .as_ref()
                .is_some_and(|a| !core.me.is(&a.instance_id))
        })
        .filter(|e| presence::process_gone(e, &probe).is_some())
        .take(RECLAIM_PER_PASS)
        .collect();
    if dead.is_empty() {
        return 0;
    }
    // Another root reclaiming right now will do it: never wait for it.
    let Ok(_lock) = FileLock::acquire(&core.site.ns().runtime_dir().join(RECLAIM_LOCK), 0) else {
        return 0;
    };
    dead.iter().filter(|e| reclaim_one(core, e, &probe)).count()
}

/// Removes one dead incarnation's record, socket and control file; true when the record went.
fn reclaim_one(core: &Core, listed: &Entry, probe: &Probe) -> bool {
    let Some(ad) = listed.advert.as_ref() else {
        return false;
    };
    let instance = ad.instance_id.clone();
    let dir = core.site.ns().active_agents();
    // Re-read under the lock: still this instance, still provably gone.
    let now = crate::clock::now_ms();
    let e = presence::read_one(&dir, &listed.file, core.limits(), now);
    let same = e.advert.as_ref().is_some_and(|a| a.instance_id == instance);
    if !same || e.is_live() || presence::process_gone(&e, probe).is_none() {
        return false;
    }
    // The socket and control file only where this namespace would have put them for that
    // instance: an advertised path is never trusted to name what we delete.
    if let Ok(place) = crate::paths::socket_place(core.site.ns(), &instance)
        && ad.endpoint == place.advertised
    {
        if std::fs::symlink_metadata(&place.path).is_ok_and(|m| m.file_type().is_socket()) {
            let _ = std::fs::remove_file(&place.path);
        }
        if let Some(parent) = place.path.parent() {
            control::remove(&parent.join(format!("{instance}.ctl")), &instance);
        }
    }
    std::fs::remove_file(dir.join(&listed.file)).is_ok()
}
