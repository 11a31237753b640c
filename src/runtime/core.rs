//! The shared state of a running root (`Core`), a struct of parts, each a type that owns its
//! fields: where it runs (`Site`), who it is (`Incarnation`), the store handle, the event bus,
//! published runs, other instances' presence, the sending side (`Outbox`), the inbound side
//! (`Arrivals`), the automatic-reply handler (`Auto`), background problems and the search for
//! lost copies (`Repair`). Connection threads, the background workers and in-process adapters
//! all hold an `Arc<Core>`. What needs several parts is an `impl Core` in the file of the job:
//! `resolve` (names → targets, sender facts), `send`, `route`, `deliver`, `arrivals`, `inbox`.

use super::arrivals::Arrivals;
use super::auto::Auto;
use super::events::Bus;
use super::problems::Problems;

use super::runs::Runs;
use crate::config::Limits;
use crate::error::{Code, Error, Result};
use crate::presence::Publisher;
use crate::store::StoreHandle;
use crate::transport::Verifier;
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// What a root whose message store failed a write advertises and answers in `local.info`.
pub const STORE_FAILED: &str = "the message store failed a write (disk full or read-only) and accepts nothing more; everything acknowledged is in its journal: free space or make the disk writable, then restart this root (peer host, peer mcp) to recover";

pub use super::arrivals::ArrivalNote;
pub use super::incarnation::{Caller, Incarnation};
pub use super::outbox::{Outbox, Repair, Route, RouteMap, SubscriptionMap};
pub use super::presence_cache::{PresenceCache, Reach};
pub use super::problems::{Problem, UnverifiedStore};
pub use super::site::Site;

pub struct Core {
    /// Where the root runs and under which configuration.
    pub site: Site,
    /// Who the root is.
    pub me: Incarnation,
    pub store: StoreHandle,
    pub bus: Bus,
    pub(super) runs: Mutex<Runs>,
    pub(super) publisher: Arc<Publisher>,
    /// Other instances' presence: parsed records and looked-up advertisements.
    pub(super) presence: PresenceCache,
    /// The sending side: the pool, route queues, receipt subscriptions and push backoff.
    pub(super) outbox: Outbox,
    /// The inbound side: deferred arrival announcements and the models' cursors.
    pub(super) arrivals: Arrivals,
    pub(super) auto: Auto,
    pub(super) problems: Problems,
    pub(super) repair: Repair,
    /// Set when the root is shutting down: waits end, workers stop.
    pub stopping: Arc<AtomicBool>,
}

impl Core {
    /// The directory holding this root's control file and its runs' control files.
    pub fn control_dir(&self) -> std::path::PathBuf {
        self.site.control_dir()
    }

    pub fn limits(&self) -> &Limits {
        self.site.limits()
    }

    /// The viewer for directory queries made by this root.
    pub fn viewer(&self, scope: Option<crate::config::Scope>) -> Result<crate::directory::Viewer> {
        self.site.viewer(scope, self.me.instance_id())
    }

    /// The caller for a trusted local request: the root, or a live run named by `runId`.
    pub fn caller_for(&self, run_id: Option<&str>, auto_token: Option<&str>) -> Result<Caller> {
        let automatic = self.auto.is_automatic(auto_token);
        let Some(run_id) = run_id else {
            return Ok(Caller {
                automatic,
                ..self.me.root_caller()
            });
        };
        let runs = self.runs.lock();
        let run = runs
            .get(run_id)
            .ok_or_else(|| Error::new(Code::TargetEnded, "this child run has been retired"))?;
        Ok(Caller {
            peer_id: run.peer_id.clone(),
            run_id: Some(run.run_id.clone()),
            alias: run.alias.clone(),
            capabilities: run.capabilities.as_slice().into(),
            automatic,
        })
    }

    /// Why this root cannot take messages and how its owner recovers, once its store failed
    /// a write; `None` while healthy.
    pub fn degraded(&self) -> Option<&'static str> {
        self.store.stats().poisoned.then_some(STORE_FAILED)
    }

    /// Tells every reader of the presence record that messaging is off, and why.
    pub fn advertise_degraded(&self) {
        let reason = self.degraded().map(str::to_string);
        let _ = self.publisher.update(|r| r.communication.degraded = reason);
    }

    /// Rewrites our presence record with the current runs.
    pub fn publish_runs(&self) {
        let ads = self.runs.lock().ads();
        let _ = self.publisher.update(|r| r.communication.runs = ads);
    }

    /// Makes a failure that has no caller to answer visible: stderr (the root's log), the
    /// event bus and `local.info` (`problems`, the latest few).
    pub fn report_problem(&self, what: &str, e: &Error) {
        self.problems.report(&self.bus, what, e);
    }

    /// Keeps an accepted arrival until its answer is written (see [`Arrivals::defer`]).
    pub fn defer_arrival(&self, receipt: crate::messaging::Receipt, note: ArrivalNote) {
        self.arrivals.defer(receipt, note);
    }

    /// Announces the arrivals kept until their answers were written.
    pub fn announce_deferred(&self) {
        self.arrivals.announce_deferred(&self.bus, &self.auto);
    }

    /// The runId behind one of our peerIds (live or retired); None for the root.
    pub fn run_of_peer(&self, peer_id: &str) -> Option<String> {
        if peer_id == self.me.peer_id() {
            return None;
        }
        let runs = self.runs.lock();
        runs.live()
            .find(|r| r.peer_id == peer_id)
            .map(|r| r.run_id.clone())
    }
}

/// Presence-backed key lookup for the endpoint's handshake.
pub struct PresenceVerifier(pub Arc<Core>);

impl Verifier for PresenceVerifier {
    /// A silent record's key is still its owner's statement: an instance that just resumed
    /// from a stop is authenticated before its next heartbeat.
    fn advertised_key(&self, instance_id: &str) -> Option<[u8; 32]> {
        let ad = match self.0.presence.reach_of(instance_id) {
            Reach::Live(ad) | Reach::Silent(ad, _) => ad,
            Reach::Gone(_) | Reach::Unknown(_) => return None,
        };
        self.0.presence.public_key(&ad.public_key)
    }
}
