//! Two copies, one loss repaired. An `accepted` message exists twice: in the recipient's
//! store and, with its body kept, in our outbox. When the recipient incarnation has ended and
//! a successor of its session is live, the worker asks that successor (`peer.status`, naming
//! the first target) about each such message; `NOT_FOUND` means the copy was lost with its
//! store (set aside as damaged, or gone), and the message is sent again under the same id to
//! the successor, recorded durably (`redeliveredFrom`) and reported. On the recipient side,
//! [`predecessor_answer`] says which: a predecessor's store that verified holds it
//! (`TARGET_ENDED`, no repeat), one that was set aside or is absent lost it (`NOT_FOUND`).
//! Bounded: one pass per [`CHECK_EVERY_MS`], at most [`TARGETS_PER_PASS`] targets looked up
//! and [`CHECKS_PER_PASS`] questions asked.

use super::core::{Core, Reach};
use crate::config::internal::{
    PREDECESSOR_STORES_MAX as STORES_MAX, REPAIR_CHECK_EVERY_MS as CHECK_EVERY_MS,
    REPAIR_CHECKS_PER_PASS as CHECKS_PER_PASS, REPAIR_TARGETS_PER_PASS as TARGETS_PER_PASS,
    SUCCESSOR_RECORDS_MAX,
};
use crate::error::{Code, Error};
use crate::messaging::{OutboxEntry, TargetRef};
use crate::protocol::message::PeerStatus;
use crate::{identity, presence};
use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// One bounded pass at most every [`CHECK_EVERY_MS`]; says whether accepted messages are
/// held (then the worker wakes for the next pass in [`CHECK_EVERY_MS`], else in
/// `REPAIR_IDLE_LOOK_MS`).
pub fn check(core: &Core) -> bool {
    if !core.repair.pass_due(Duration::from_millis(CHECK_EVERY_MS)) {
        return core.repair.watching();
    }
    let me = core.me.instance_id().to_string();
    let targets: Vec<TargetRef> = core
        .store
        .query(move |m| m.state().accepted_targets(&me, TARGETS_PER_PASS))
        .unwrap_or_default();
    let watching = !targets.is_empty();
    core.repair.set_watching(watching);
    // The successors first, then one query for the messages to ask about.
    let vouched = core.repair.vouched();
    let successors: HashMap<String, TargetRef> = targets
        .iter()
        .filter(|t| !vouched.contains(&t.instance_id))
        .filter_map(|t| Some((t.peer_id.clone(), successor_of(core, t)?)))
        .collect();
    if successors.is_empty() {
        return watching;
    }
    let peers: HashSet<String> = successors.keys().cloned().collect();
    let entries: Vec<OutboxEntry> = core
        .store
        .query(move |m| {
            m.state()
                .accepted_held(&|to| peers.contains(&to.peer_id), CHECKS_PER_PASS)
        })
        .unwrap_or_default();
    for e in entries {
        if let Some(successor) = successors.get(&e.to.peer_id) {
            ask_and_repair(core, successor, &e);
        }
    }
    watching
}

/// The live successor incarnation of an ended target's session, if there is one. A target
/// still live (or silent, or unknown) has none; its session is remembered for later.
fn successor_of(core: &Core, t: &TargetRef) -> Option<TargetRef> {
    let (reach, session) = core.presence.reach_and_session(&t.instance_id);
    match reach {
        Reach::Gone(_) => {}
        _ => {
            if let Some(s) = session {
                core.repair.remember_session(&t.instance_id, s);
            }
            return None;
        }
    }
    let session = session.or_else(|| core.repair.session_of(&t.instance_id))?;
    let dir = core.site.ns().active_agents();
    let prefix = presence::file_name(&session, "");
    let names: Vec<String> = std::fs::read_dir(&dir)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(prefix.trim_end_matches(".json")))
        .take(SUCCESSOR_RECORDS_MAX)
        .collect();
    let now = crate::clock::now_ms();
    names.iter().find_map(|n| {
        let e = presence::read_one(&dir, n, core.limits(), now);
        let ad = e.advert.as_ref().filter(|_| e.is_live())?;
        (e.session_id == session && ad.instance_id != t.instance_id && !core.me.is(&ad.instance_id))
            .then(|| TargetRef {
                peer_id: identity::peer_id(&ad.instance_id, None),
                instance_id: ad.instance_id.clone(),
                run_id: None,
            })
    })
}

/// Asks `successor` about `e`; on `NOT_FOUND` sends it again there and says so.
fn ask_and_repair(core: &Core, successor: &TargetRef, e: &OutboxEntry) {
    let Ok(target) = core.presence.target_of_instance(&successor.instance_id) else {
        return;
    };
    let q = PeerStatus {
        from_run: core.run_of_peer(&e.from_peer_id),
        message_id: e.message_id.clone(),
        to: e.to.peer_id.clone(),
    };
    match core.outbox.pool().peer_status(&target, &q, 0) {
        Err(err) if err.code == Code::NotFound => {}
        // Its store verified and holds the mail: nothing of that instance needs asking again.
        Err(err) if err.code == Code::TargetEnded => {
            core.repair.vouch(&e.to.instance_id);
            return;
        }
        // Held (a receipt), or no answer now.
        _ => return,
    }
    match core
        .store
        .redeliver(&e.to.peer_id, &e.message_id, successor.clone())
    {
        Ok(true) => {
            eprintln!(
                "peer: message {} was accepted by {} (instance {}), whose successor {} does not hold it: its copy was lost; sent again under the same id",
                crate::sanitize::line(&e.message_id, 200),
                e.to.peer_id,
                e.to.instance_id,
                successor.peer_id
            );
            core.bus.publish(&super::events::MessageRedelivered::of(
                &e.message_id,
                &e.to.peer_id,
                &successor.peer_id,
            ));
            core.store.nudge_worker();
        }
        Ok(false) => {}
        Err(err) => core.report_problem(&format!("sending message {} again", e.message_id), &err),
    }
}

/// The recipient side: what a root answers about `to`, a peerId that is not its own. A
/// predecessor of its session whose store is here and verified (or another instance's store
/// it cannot vouch for) holds the message: `TARGET_ENDED`. A predecessor whose store was set
/// aside at start, or whose store is absent, lost it: `NOT_FOUND`.
pub fn predecessor_answer(core: &Core, to: &str, message_id: &str) -> Error {
    let lost = |why: &str| {
        Error::new(
            Code::NotFound,
            format!("unknown: no message {message_id} to {to} is held here ({why})"),
        )
    };
    let set_aside = core
        .problems
        .set_aside(|u| identity::peer_id(&u.instance_id, None) == to);
    if set_aside {
        return lost("its store was set aside as damaged");
    }
    let root = core.site.home().join("peer-messages");
    let found = std::fs::read_dir(&root).ok().and_then(|d| {
        d.filter_map(|e| e.ok())
            .take(STORES_MAX)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| identity::is_valid_id(n) && identity::peer_id(n, None) == to)
            .find(|n| {
                let dir = crate::store::paths::store_dir(core.site.home(), n);
                matches!(crate::store::recovery::read_identity(&dir), Ok(Some(id)) if id.instance_id == *n)
            })
    });
    match found {
        Some(n) => Error::new(
            Code::TargetEnded,
            format!(
                "{to} has ended; its store (instance {n}) is still here and holds what it accepted: review it with peer recover --instance {n}"
            ),
        ),
        None => lost("no store of that incarnation is here"),
    }
}
