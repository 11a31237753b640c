//! A restarted session takes over what its dead predecessors could not deliver: at start, every
//! other store of this session whose lock nobody holds (its owner is gone: the kernel drops a
//! process's flock when it dies) hands its root's unresolved outbox entries to this root, which
//! sends them under the same message ids; recipients deduplicate by sending session, so a
//! message a dead incarnation did get accepted is not stored twice. A predecessor store is
//! opened (and so changed: a torn tail cut, its sync point rewritten) only after all of it
//! verified; one that did not stays byte for byte as it was, reported once on stderr and in
//! `peer status` with its path and the `peer recover` command. A verified predecessor left
//! with nothing unresolved and nothing unread is removed; anything else stays for
//! `peer recover`.

use super::core::{Core, UnverifiedStore};
use crate::config::internal::STORES_SCANNED_MAX;
use crate::error::{Code, Error, Result};
use crate::messaging::OutboxEntry;
use crate::store::{Store, paths};

/// What one start took over.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Adopted {
    /// Predecessor stores handed over.
    pub stores: u64,
    /// Unresolved messages now in our outbox.
    pub messages: u64,
    /// Predecessor stores removed because nothing in them was left.
    pub removed: u64,
}

/// Takes over the unresolved messages of this session's dead earlier incarnations. Failures
/// with one store (damaged, full) are reported as problems and leave it as it was.
pub fn adopt_predecessors(core: &Core) -> Adopted {
    let mut done = Adopted::default();
    let root = core.site.home().join("peer-messages");
    let Ok(dir) = std::fs::read_dir(&root) else {
        return done;
    };
    let mut names: Vec<String> = dir
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !core.me.is(n) && crate::identity::is_valid_id(n))
        .take(STORES_SCANNED_MAX)
        .collect();
    names.sort();
    for name in names {
        let dir = paths::store_dir(core.site.home(), &name);
        match crate::store::recovery::read_identity(&dir) {
            Ok(Some(id)) if id.session_id == core.me.session_id() && id.instance_id == name => {}
            _ => continue,
        }
        match adopt_one(core, &name) {
            Ok(None) => {}
            Ok(Some((n, removed))) => {
                done.stores += 1;
                done.messages += n;
                done.removed += u64::from(removed);
            }
            // A store that did not verify (damaged, or refused for any reason) is evidence:
            // it stays where it is, untouched, and the operator is told once where and how
            // to review it.
            Err(e) => {
                let recover = format!(
                    "peer recover --instance {name} --session-id {}",
                    core.me.session_id()
                );
                core.report_problem(
                    &format!(
                        "taking over the unresolved messages of instance {name} (its store {} was left as it was; review it with: {recover})",
                        dir.display()
                    ),
                    &e,
                );
                core.problems.add_unverified(UnverifiedStore {
                    instance_id: name.clone(),
                    path: dir.display().to_string(),
                    recover,
                    code: e.code.name(),
                    message: e.message.clone(),
                });
            }
        }
    }
    done
}

/// Hands one predecessor store over; None when its owner still runs.
fn adopt_one(core: &Core, instance: &str) -> Result<Option<(u64, bool)>> {
    let mut limits = core.limits().clone();
    // A live incarnation holds its store lock for its whole life: do not wait for it.
    limits.lock_ms = 0;
    let old = match Store::open(core.site.home(), instance, core.me.session_id(), &limits) {
        Ok(s) => s,
        Err(e) if e.code == Code::Timeout => return Ok(None),
        Err(e) => return Err(e),
    };
    let h = old.handle();
    let root_peer = crate::identity::peer_id(instance, None);
    let entries: Vec<OutboxEntry> = h.query(move |m| {
        let mut v: Vec<OutboxEntry> = m
            .state()
            .unresolved_outbox()
            .filter(|e| e.from_peer_id == root_peer)
            .cloned()
            .collect();
        v.sort_by_key(|e| e.order);
        v
    })?;
    let mut taken = 0;
    for e in &entries {
        // Ours first, durably; only then is it forgotten there (a crash in between leaves it
        // in both, and the next start's adoption finds ours already holds it).
        core.store.adopt(e.clone(), core.me.peer_id())?;
        h.hand_over(&e.to.peer_id, &e.message_id)?;
        taken += 1;
    }
    let empty = h.query(|m| m.pending_routes().is_empty() && m.unread().is_empty())?;
    let dir = old.dir().to_path_buf();
    old.close()
        .map_err(|e| Error::new(e.code, format!("closing {}: {}", dir.display(), e.message)))?;
    if empty {
        crate::store::remove_store_dir(&dir);
    }
    Ok(Some((taken, empty)))
}
