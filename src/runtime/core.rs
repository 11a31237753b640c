//! The shared state of a running root (`Core`): identity, configuration, the store handle, the
//! outbound pool, published runs, the event bus and the automatic-reply budget. Connection
//! threads, the background workers and in-process adapters all hold an `Arc<Core>`.

use super::auto::{Budget, Runner};
use super::events::Bus;
use super::runs::Runs;
use crate::config::{Config, Limits};
use crate::directory::WorkspaceId;
use crate::error::{Code, Error, Result};
use crate::messaging::Principal;
use crate::paths::Namespace;
use crate::presence::Publisher;
use crate::store::StoreHandle;
use crate::transport::{Pool, Verifier};
use crate::{clock, identity};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// What a root whose message store failed a write advertises and answers in `local.info`.
pub const STORE_FAILED: &str = "the message store failed a write (disk full or read-only) and accepts nothing more; everything acknowledged is in its journal: free space or make the disk writable, then restart this root (peer host, peer mcp) to recover";

pub use super::outbox::{Outbox, Route, RouteMap, SubscriptionMap};
pub use super::presence_cache::{PresenceCache, Reach};

/// Who is calling a tool or local method: the root itself or one of its child runs.
#[derive(Clone, Debug)]
pub struct Caller {
    pub peer_id: String,
    pub run_id: Option<String>,
    pub alias: String,
    /// Shared with the root's own list when the caller is the root (every MCP call is).
    pub capabilities: Arc<[String]>,
    /// The call comes from the auto handler: its sends spend the conversation budget.
    pub automatic: bool,
}

pub struct Core {
    pub ns: Namespace,
    /// The endpoint's socket; control files live in its directory.
    pub socket_path: std::path::PathBuf,
    pub config: Config,
    pub workspace: WorkspaceId,
    pub session_id: String,
    pub instance_id: String,
    pub peer_id: String,
    pub alias: String,
    pub capabilities: Arc<[String]>,
    pub store: StoreHandle,
    pub pool: Pool,
    pub bus: Bus,
    pub runs: Mutex<Runs>,
    pub publisher: Arc<Publisher>,
    pub auto_budget: Arc<Budget>,
    pub auto_token: String,
    pub auto: Mutex<Option<Runner>>,
    /// Set when the root is shutting down: waits end, workers stop.
    pub stopping: Arc<AtomicBool>,
    /// Route queues, their last failures and receipt subscriptions.
    pub(crate) outbox: Outbox,
    /// Receipt events already shown to a model, per local peer (in memory: a restarted root
    /// shows them again, which is harmless).
    pub(crate) model_cursors: Mutex<HashMap<String, (u64, u64)>>,
    /// Other instances' presence: parsed records and looked-up advertisements.
    pub presence: PresenceCache,
    /// The latest background failures (sweeps, reply bookkeeping), newest last, for
    /// `local.info`; each is also logged on stderr and published as an event.
    pub(crate) problems: Mutex<std::collections::VecDeque<Problem>>,
    /// Predecessor stores of this session that did not verify at start and were left as they
    /// were (at most the stores one start scans).
    pub(crate) unverified_stores: Mutex<Vec<UnverifiedStore>>,
    /// What the search for lost recipient copies remembers (`super::repair`).
    pub(crate) repair: super::outbox::Repair,
    /// Accepted `peer.send` arrivals whose answer is being written, announced right after it
    /// (`Core::defer_arrival`).
    pub(crate) arrivals: Mutex<Vec<(crate::messaging::Receipt, ArrivalNote)>>,
}

/// What announcing an accepted `peer.send` needs besides its receipt.
pub struct ArrivalNote {
    pub reply_to: Option<String>,
    pub from_alias: Option<String>,
}

/// One failure the root could not hand to a caller.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Problem {
    pub at_ms: u64,
    /// What was being done (`sweep`, `mark replied`).
    pub what: String,
    #[serde(deserialize_with = "crate::toolspec::words::code")]
    pub code: crate::toolspec::words::Word,
    pub message: String,
}

/// A predecessor store adoption refused to touch: where it is and how to review it.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UnverifiedStore {
    pub instance_id: String,
    pub path: String,
    /// The command that reviews it read-only.
    pub recover: String,
    #[serde(deserialize_with = "crate::toolspec::words::code")]
    pub code: crate::toolspec::words::Word,
    pub message: String,
}

/// Background failures remembered for `local.info`.
const PROBLEMS_MAX: usize = 16;

impl Core {
    /// The directory holding this root's control file and its runs' control files.
    pub fn control_dir(&self) -> std::path::PathBuf {
        self.socket_path
            .parent()
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| self.ns.runtime_dir())
    }

    pub fn limits(&self) -> &Limits {
        &self.config.limits
    }

    /// The viewer for directory queries made by this root.
    pub fn viewer(&self, scope: Option<crate::config::Scope>) -> Result<crate::directory::Viewer> {
        let max = self.config.scope;
        let scope = scope.unwrap_or(max);
        if scope > max {
            return Err(Error::new(
                Code::ScopeDenied,
                format!(
                    "scope {} exceeds the configured maximum {}; raise \"scope\" in sessions.communication of {} and restart",
                    scope.name(),
                    max.name(),
                    self.ns.home.join("config.json").display()
                ),
            ));
        }
        Ok(crate::directory::Viewer {
            ws: self.workspace.clone(),
            scope,
            self_instance: Some(self.instance_id.clone()),
        })
    }

    /// The principal of one of this root's own peers (itself or a child run), as a receiving
    /// side sees it.
    pub fn principal_of(&self, peer_id: &str, run_id: Option<String>) -> Principal {
        Principal {
            instance_id: self.instance_id.clone(),
            run_id,
            peer_id: peer_id.to_string(),
        }
    }

    /// The root itself as a caller.
    pub fn root_caller(&self) -> Caller {
        Caller {
            peer_id: self.peer_id.clone(),
            run_id: None,
            alias: self.alias.clone(),
            capabilities: self.capabilities.clone(),
            automatic: false,
        }
    }

    /// The caller for a trusted local request: the root, or a live run named by `runId`.
    pub fn caller_for(&self, run_id: Option<&str>, auto_token: Option<&str>) -> Result<Caller> {
        let automatic =
            auto_token.is_some_and(|t| identity::ct_eq(t.as_bytes(), self.auto_token.as_bytes()));
        let Some(run_id) = run_id else {
            return Ok(Caller {
                automatic,
                ..self.root_caller()
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

    /// The latest outbox entry `from` sent under `message_id` (whatever its target).
    pub fn sent_message(
        &self,
        from: &str,
        message_id: &str,
    ) -> Result<crate::messaging::OutboxEntry> {
        let (me, wanted) = (from.to_string(), message_id.to_string());
        self.store.query(move |m| {
            // Keys only: resolved entries are rebuilt just for the one returned.
            let mine: Vec<(&str, &str, u64)> = m
                .state()
                .outbox_keys()
                .filter(|(from, ..)| *from == me)
                .map(|(_, to, id, order)| (to, id, order))
                .collect();
            let ids = crate::messaging::ids_matching(&wanted, mine.iter().map(|(_, id, _)| *id));
            match ids.as_slice() {
                [id] => mine
                    .iter()
                    .filter(|(_, i, _)| i == id)
                    .max_by_key(|(.., order)| *order)
                    .and_then(|(to, i, _)| m.state().outbox_get(to, i))
                    .ok_or_else(|| Error::new(Code::NotFound, "no such sent message")),
                [] => Err(Error::new(
                    Code::NotFound,
                    format!(
                        "this session sent no message {}",
                        crate::sanitize::line(&wanted, 100)
                    ),
                )),
                several => Err(crate::messaging::ambiguous_prefix(
                    &wanted,
                    several,
                    "sent message",
                )),
            }
        })?
    }

    /// The recipient's scope check of a `peer.send`: the sender's own live advertisement
    /// (`communication.workspace` and `communication.repository`, the one its handshake was
    /// checked against) must fall inside this root's configured scope. Our own instance passes.
    pub fn check_sender_scope(&self, who: &crate::messaging::Principal) -> Result<()> {
        if who.instance_id == self.instance_id {
            return Ok(());
        }
        self.scope_admits(
            who,
            self.presence.advertisement_of(&who.instance_id).as_deref(),
        )
    }

    /// What taking custody of a `peer.send` needs to know about its sender, from one presence
    /// lookup: the sessionId its record states ([`session_of`](Self::session_of)), the scope
    /// check ([`check_sender_scope`](Self::check_sender_scope)) and its alias
    /// ([`alias_of`](Self::alias_of)).
    pub fn sender_facts(
        &self,
        who: &crate::messaging::Principal,
    ) -> Result<(Option<String>, Option<String>)> {
        if who.instance_id == self.instance_id {
            return Ok((Some(self.session_id.clone()), self.alias_of(who)));
        }
        let (reach, session) = self.presence.reach_and_session(&who.instance_id);
        let ad = match reach {
            super::presence_cache::Reach::Live(ad) => Some(ad),
            _ => None,
        };
        self.scope_admits(who, ad.as_deref())?;
        Ok((session, ad.and_then(|ad| advertised_alias(&ad, who))))
    }

    /// The scope check against the sender's live advertisement `ad` (none: refused).
    fn scope_admits(
        &self,
        who: &crate::messaging::Principal,
        ad: Option<&crate::presence::Advertisement>,
    ) -> Result<()> {
        let viewer = self.viewer(None)?;
        let Some(ad) = ad else {
            return Err(Error::new(
                Code::ScopeDenied,
                format!(
                    "sender {} has no live advertisement to check its scope against",
                    who.peer_id
                ),
            ));
        };
        let repo = ad.repository.as_deref().map(std::path::Path::new);
        if viewer.sees_place(std::path::Path::new(&ad.workspace), repo) {
            return Ok(());
        }
        Err(Error::new(
            Code::ScopeDenied,
            format!(
                "sender {} (workspace {}) is outside the recipient's {} scope; the recipient must set a wider \"scope\" in sessions.communication of its config.json",
                who.peer_id,
                crate::sanitize::line(&ad.workspace, 200),
                viewer.scope.name()
            ),
        ))
    }

    /// The alias a sender states for itself in its advertisement (its run's alias for a child
    /// run); our own roots and runs from our own state. `None` when it advertises none.
    pub fn alias_of(&self, who: &crate::messaging::Principal) -> Option<String> {
        if who.instance_id == self.instance_id {
            return match &who.run_id {
                None => Some(self.alias.clone()),
                Some(run) => self
                    .runs
                    .lock()
                    .live()
                    .find(|r| &r.run_id == run)
                    .map(|r| r.alias.clone()),
            };
        }
        let ad = self.presence.advertisement_of(&who.instance_id)?;
        advertised_alias(&ad, who)
    }

    /// Rewrites our presence record with the current runs.
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

    pub fn publish_runs(&self) {
        let ads = self.runs.lock().ads();
        let _ = self.publisher.update(|r| r.communication.runs = ads);
    }

    /// The sessionId another instance states in its presence record (ours for ourselves).
    pub fn session_of(&self, instance_id: &str) -> Option<String> {
        if instance_id == self.instance_id {
            return Some(self.session_id.clone());
        }
        self.presence.session_of(instance_id)
    }

    /// Makes a failure that has no caller to answer visible: stderr (the root's log), the
    /// event bus and `local.info` (`problems`, the latest few).
    pub fn report_problem(&self, what: &str, e: &Error) {
        let p = Problem {
            at_ms: clock::now_ms(),
            what: what.to_string(),
            code: e.code.name(),
            message: e.message.clone(),
        };
        let mut problems = self.problems.lock();
        // A failure that repeats (a poisoned store fails every sweep) is logged once.
        if let Some(last) = problems.back_mut()
            && (last.what.as_str(), last.code, last.message.as_str())
                == (p.what.as_str(), p.code, p.message.as_str())
        {
            last.at_ms = p.at_ms;
            return;
        }
        eprintln!(
            "peer: warning: {what} failed: {}: {}",
            p.code,
            crate::sanitize::line(&p.message, 300)
        );
        self.bus.publish(&super::events::ProblemRecorded::of(
            &p.what, p.code, &p.message,
        ));
        if problems.len() >= PROBLEMS_MAX {
            problems.pop_front();
        }
        problems.push_back(p);
    }

    /// The remembered background failures, oldest first.
    pub fn problems(&self) -> Vec<Problem> {
        self.problems.lock().iter().cloned().collect()
    }

    /// (message, event) cursors of what a model was already shown.
    pub fn model_cursors(&self, peer_id: &str) -> (u64, u64) {
        self.model_cursors
            .lock()
            .get(peer_id)
            .copied()
            .unwrap_or((0, 0))
    }

    /// Advances the model's cursors; never moves them back.
    pub fn advance_model_cursors(&self, peer_id: &str, messages: Option<u64>, events: u64) {
        let mut m = self.model_cursors.lock();
        if m.len() >= crate::config::internal::MODEL_CURSORS_MAX && !m.contains_key(peer_id) {
            return;
        }
        let c = m.entry(peer_id.to_string()).or_insert((0, 0));
        if let Some(n) = messages {
            c.0 = c.0.max(n);
        }
        c.1 = c.1.max(events);
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

/// The alias another root's advertisement states for `who` (its run's, for a child run).
fn advertised_alias(
    ad: &crate::presence::Advertisement,
    who: &crate::messaging::Principal,
) -> Option<String> {
    match &who.run_id {
        None => Some(ad.alias.clone()),
        Some(run) => ad
            .runs
            .iter()
            .find(|r| &r.run_id == run)
            .map(|r| r.alias.clone()),
    }
}
