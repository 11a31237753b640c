//! The shared state of a running root (`Core`): identity, configuration, the store handle, the
//! outbound pool, published runs, the event bus and the automatic-reply budget. Connection
//! threads, the background workers and in-process adapters all hold an `Arc<Core>`.

use super::auto::{Budget, Runner};
use super::events::Bus;
use super::runs::Runs;
use crate::config::{Config, Limits};
use crate::directory::WorkspaceId;
use crate::error::{Code, Error, Result};
use crate::messaging::{Principal, RouteQueue};
use crate::paths::Namespace;
use crate::presence::{self, Publisher};
use crate::resource::evidence::Probe;
use crate::store::StoreHandle;
use crate::transport::{Notifier, Pool, Target, Verifier};
use crate::{clock, identity};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// Route queues by (sender peerId, recipient peerId).
pub type RouteMap = HashMap<(String, String), Arc<Mutex<RouteQueue>>>;

/// Subscribed senders by (sender instance, message id), with the last state notified.
pub type SubscriptionMap =
    HashMap<(String, String), (Notifier, Option<crate::messaging::ReceiptState>)>;

pub use crate::config::internal::SUBSCRIPTIONS_MAX;

/// Who is calling a tool or local method: the root itself or one of its child runs.
#[derive(Clone, Debug)]
pub struct Caller {
    pub peer_id: String,
    pub run_id: Option<String>,
    pub alias: String,
    pub capabilities: Vec<String>,
    /// The call comes from the auto handler: its sends spend the conversation budget.
    pub automatic: bool,
}

pub struct Core {
    pub ns: Namespace,
    pub config: Config,
    pub workspace: WorkspaceId,
    pub session_id: String,
    pub instance_id: String,
    pub peer_id: String,
    pub alias: String,
    pub capabilities: Vec<String>,
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
    pub(crate) routes: Mutex<RouteMap>,
    /// The last retryable failure of each blocked route and when the route started failing,
    /// so messages behind its head and `peer status` report the real cause.
    pub(crate) route_errors: Mutex<HashMap<(String, String), (Error, u64)>>,
    pub(crate) subscriptions: Mutex<SubscriptionMap>,
    /// Receipt events already shown to a model, per local peer (in memory: a restarted root
    /// shows them again, which is harmless).
    pub(crate) model_cursors: Mutex<HashMap<String, (u64, u64)>>,
    /// Parsed presence records, reused while unchanged on disk.
    pub presence_cache: presence::ReadCache,
    /// Recently looked-up advertisements by instance (a short TTL: presence is a hint and a
    /// failed connect or handshake re-reads it).
    pub(crate) adverts: Mutex<HashMap<String, CachedReach>>,
    /// The latest background failures (sweeps, reply bookkeeping), newest last, for
    /// `local.info`; each is also logged on stderr and published as an event.
    pub(crate) problems: Mutex<std::collections::VecDeque<Problem>>,
}

/// One failure the root could not hand to a caller.
#[derive(Clone, Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Problem {
    pub at_ms: u64,
    /// What was being done (`sweep`, `mark replied`).
    pub what: String,
    pub code: &'static str,
    pub message: String,
}

/// Background failures remembered for `local.info`.
const PROBLEMS_MAX: usize = 16;

/// A looked-up instance: when, what it is, and the sessionId its record states.
pub type CachedReach = (std::time::Instant, Reach, Option<String>);

/// What a sender knows about another instance, from its presence record and process evidence.
#[derive(Clone, Debug)]
pub enum Reach {
    /// Current record.
    Live(presence::Advertisement),
    /// The record is there but has not been refreshed since the given time, and nothing
    /// proves its process gone: stopped, suspended or slow. Still the same incarnation.
    Silent(presence::Advertisement, String),
    /// Provably ended (the reason says how): its owner removed the record or its process no
    /// longer runs.
    Gone(String),
    /// Nothing can be concluded now (unreadable record or directory).
    Unknown(String),
}

/// How long a looked-up advertisement is reused.
const ADVERT_TTL_MS: u128 = 1_000;
use crate::config::internal::ADVERTS_MAX;

impl Core {
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
                    "scope {} exceeds the configured maximum {}",
                    scope.name(),
                    max.name()
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
            capabilities: run.capabilities.clone(),
            automatic,
        })
    }

    /// The live advertisement of another instance (cached for a second).
    pub fn advertisement_of(&self, instance_id: &str) -> Option<presence::Advertisement> {
        match self.reach_of(instance_id) {
            Reach::Live(ad) => Some(ad),
            _ => None,
        }
    }

    /// What presence and process evidence say about another instance (cached for a second).
    pub fn reach_of(&self, instance_id: &str) -> Reach {
        self.reach_and_session(instance_id).0
    }

    /// The sessionId another instance's presence record states (the record its handshake key
    /// is verified against), when it has a readable record.
    pub fn session_of(&self, instance_id: &str) -> Option<String> {
        if instance_id == self.instance_id {
            return Some(self.session_id.clone());
        }
        self.reach_and_session(instance_id).1
    }

    fn reach_and_session(&self, instance_id: &str) -> (Reach, Option<String>) {
        if let Some((at, reach, session)) = self.adverts.lock().get(instance_id)
            && at.elapsed().as_millis() < ADVERT_TTL_MS
        {
            return (reach.clone(), session.clone());
        }
        let (reach, session) = self.read_reach(instance_id);
        let mut cache = self.adverts.lock();
        if cache.len() >= ADVERTS_MAX {
            cache.retain(|_, (at, _, _)| at.elapsed().as_millis() < ADVERT_TTL_MS);
        }
        if cache.len() < ADVERTS_MAX {
            cache.insert(
                instance_id.to_string(),
                (std::time::Instant::now(), reach.clone(), session.clone()),
            );
        }
        (reach, session)
    }

    /// Forgets a cached advertisement after a failed delivery.
    pub fn forget_advertisement(&self, instance_id: &str) {
        self.adverts.lock().remove(instance_id);
    }

    /// Reads the record of another instance, found by its instance-qualified file name, and
    /// classifies it: live, silent (present but not refreshed; its process may be stopped) or
    /// gone (no record, or its process provably no longer runs).
    fn read_reach(&self, instance_id: &str) -> (Reach, Option<String>) {
        if !identity::is_valid_id(instance_id) {
            return (
                Reach::Gone(format!("{instance_id:?} is not an instance id")),
                None,
            );
        }
        let dir = self.ns.active_agents();
        let suffix = format!(".{instance_id}.json");
        let names: Vec<String> = match std::fs::read_dir(&dir) {
            Ok(rd) => rd
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(&suffix))
                .take(8)
                .collect(),
            Err(e) => {
                return (
                    Reach::Unknown(format!("cannot list {}: {e}", dir.display())),
                    None,
                );
            }
        };
        let now = clock::now_ms();
        let mut unreadable = None;
        for n in &names {
            let e = presence::read_one(&dir, n, self.limits(), now);
            let Some(ad) = e.advert.clone().filter(|ad| ad.instance_id == instance_id) else {
                if let presence::Liveness::Invalid(why) = &e.liveness {
                    unreadable = Some(why.clone());
                }
                continue;
            };
            let session = Some(e.session_id.clone()).filter(|s| identity::is_valid_id(s));
            if e.is_live() {
                return (Reach::Live(ad), session);
            }
            if let Some(why) = presence::process_gone(&e, &Probe::new()) {
                // What the record stated stays true of the incarnation after it ended.
                return (Reach::Gone(why), session);
            }
            let since = e
                .updated_at_ms
                .map_or_else(|| "an unreadable time".to_string(), clock::iso8601);
            return (Reach::Silent(ad, since), session);
        }
        let reach = match unreadable {
            // A record we cannot read proves nothing either way.
            Some(why) => Reach::Unknown(format!("its presence record is unreadable: {why}")),
            None => Reach::Gone("its presence record was removed by its owner".into()),
        };
        (reach, None)
    }

    /// Where to reach another instance. A silent record (no heartbeat, process still there) is
    /// still tried: only evidence that the incarnation is gone yields `TARGET_ENDED`.
    pub fn target_of_instance(&self, instance_id: &str) -> Result<Target> {
        let ad = match self.reach_of(instance_id) {
            Reach::Live(ad) | Reach::Silent(ad, _) => ad,
            Reach::Gone(why) => {
                return Err(Error::new(
                    Code::TargetEnded,
                    format!("instance {instance_id} has ended: {why}"),
                ));
            }
            Reach::Unknown(why) => {
                return Err(Error::new(
                    Code::PeerOffline,
                    format!("instance {instance_id} cannot be reached now: {why}"),
                ));
            }
        };
        let public_key = identity::parse_spki_b64(&ad.public_key)
            .ok_or_else(|| Error::new(Code::AuthFailed, "advertised public key is malformed"))?;
        Ok(Target {
            instance_id: ad.instance_id.clone(),
            endpoint: self.ns.endpoint_path(&ad.endpoint)?,
            public_key,
        })
    }

    /// The latest outbox entry `from` sent under `message_id` (whatever its target).
    pub fn sent_message(
        &self,
        from: &str,
        message_id: &str,
    ) -> Result<crate::messaging::OutboxEntry> {
        let (me, id) = (from.to_string(), message_id.to_string());
        self.store
            .query(move |m| {
                m.state()
                    .outbox_by_id(&id)
                    .filter(|e| e.from_peer_id == me)
                    .max_by_key(|e| e.order)
                    .cloned()
            })?
            .ok_or_else(|| Error::new(Code::NotFound, "this session sent no message with that id"))
    }

    /// Rewrites our presence record with the current runs.
    pub fn publish_runs(&self) {
        let ads = self.runs.lock().ads();
        let _ = self.publisher.update(|r| r.communication.runs = ads);
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
        self.bus.publish(serde_json::json!({
            "event": "peer_update",
            "kind": "problem",
            "what": p.what,
            "code": p.code,
            "message": p.message,
        }));
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
        if m.len() >= 1024 && !m.contains_key(peer_id) {
            return;
        }
        let c = m.entry(peer_id.to_string()).or_insert((0, 0));
        if let Some(n) = messages {
            c.0 = c.0.max(n);
        }
        c.1 = c.1.max(events);
    }

    /// Remembers a receipt subscription of a connected sender (bounded).
    pub fn subscribe(&self, sender_instance: &str, message_id: &str, notifier: &Notifier) {
        let mut subs = self.subscriptions.lock();
        subs.retain(|_, (n, _)| !n.is_closed());
        if subs.len() < SUBSCRIPTIONS_MAX {
            subs.insert(
                (sender_instance.to_string(), message_id.to_string()),
                (notifier.clone(), None),
            );
        }
    }

    /// Tells a subscribed sender about a receipt change once per state (durable pushes may
    /// be retried many times; notifications are not repeated). Final states end the
    /// subscription.
    pub fn notify_subscriber(
        &self,
        sender_instance: &str,
        r: &crate::messaging::Receipt,
        from_run: Option<&str>,
    ) {
        let key = (sender_instance.to_string(), r.message_id.clone());
        let mut subs = self.subscriptions.lock();
        let Some((n, last)) = subs.get_mut(&key) else {
            return;
        };
        if *last == Some(r.state) {
            return;
        }
        *last = Some(r.state);
        let _ = n.notify("peer.receipt", r.notification_params(from_run));
        if r.state.is_final() {
            subs.remove(&key);
        }
    }
}

/// Presence-backed key lookup for the endpoint's handshake.
pub struct PresenceVerifier(pub Arc<Core>);

impl Verifier for PresenceVerifier {
    /// A silent record's key is still its owner's statement: an instance that just resumed
    /// from a stop is authenticated before its next heartbeat.
    fn advertised_key(&self, instance_id: &str) -> Option<[u8; 32]> {
        let ad = match self.0.reach_of(instance_id) {
            Reach::Live(ad) | Reach::Silent(ad, _) => ad,
            Reach::Gone(_) | Reach::Unknown(_) => return None,
        };
        identity::parse_spki_b64(&ad.public_key)
    }
}
