//! The root runtime: one process's identity, namespace, presence record and heartbeat, and
//! (as later modules arrive) its endpoint, store and tool implementations. A root lives for a
//! `peer host`, a `peer mcp`, or one `peer --as ALIAS` command.

pub(crate) mod adopt;
pub(crate) mod arrivals;
pub(crate) mod auto;
pub mod control;
pub mod core;
pub(crate) mod deliver;
pub(crate) mod dispatch;
pub(crate) mod events;
pub(crate) mod handler;
pub(crate) mod inbox;
pub(crate) mod incarnation;
pub(crate) mod model_tools;
pub(crate) mod outbox;
pub(crate) mod presence_cache;
pub(crate) mod problems;
pub(crate) mod reclaim;
pub(crate) mod repair;
pub(crate) mod resolve;
pub(crate) mod resources;
pub(crate) mod route;
pub(crate) mod runs;
pub(crate) mod send;
pub(crate) mod site;

pub use handler::HOLD_ANSWER_ENV;

use self::core::{Core, PresenceVerifier};
use self::outbox::Outbox;
use self::presence_cache::PresenceCache;
use crate::clock;
use crate::config::{Config, IdleBehavior};
use crate::directory;
use crate::error::{Code, Error, Result};
use crate::identity::{self, KeyPair};
use crate::paths::{self, Namespace, SocketPlace};
use crate::presence::{self, Advertisement, Publisher, Record};
use crate::store::Store;
use crate::transport::{Endpoint, LocalIdentity, Pool};
use crossbeam_channel::{Sender, bounded};
use parking_lot::Mutex;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What a root tells its front end once it accepts connections: who it is and where its
/// files are.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Ready {
    /// Always `ready`.
    pub event: &'static str,
    pub peer_id: String,
    pub instance_id: String,
    pub session_id: String,
    pub alias: String,
    pub endpoint: String,
    pub control: String,
    pub presence: String,
    pub workspace: String,
    pub pid: u32,
}

/// How a root is started.
#[derive(Clone, Debug, Default)]
pub struct RootOptions {
    pub home: Option<PathBuf>,
    pub session_id: Option<String>,
    pub alias: Option<String>,
    pub workspace: Option<PathBuf>,
    /// Presence `mode`: `command` for hosts and CLI roots, `rpc` for MCP.
    pub mode: &'static str,
    /// A one-off root (`--as`): on shutdown its store directory is removed when nothing in it
    /// is unresolved (no unacknowledged outbox entry, no unconsumed inbox message).
    pub one_off: bool,
    /// What the root serves (the hosted command's name, `mcp`), shown beside the alias in the
    /// presence `model` field, which Autohand's agent list prints.
    pub purpose: Option<String>,
}

/// The sessionId of the one-off roots acting as `alias` (`peer --as ALIAS`): one session for
/// every invocation with that alias in this namespace, so a retry from a later invocation is
/// recognised by its recipient (dedup spans a session's incarnations) and a later invocation
/// finds the undelivered messages of an earlier one.
pub fn one_off_session(alias: &str) -> String {
    format!("as-{alias}")
}

/// The presence `model` text: the alias, and what the root serves when known, so a person
/// can tell sessions apart in a listing that shows only project, model, session and pid.
pub fn presence_model(alias: &str, purpose: Option<&str>) -> String {
    let alias = crate::sanitize::line(alias, 64);
    match purpose.map(|p| crate::sanitize::line(p, 40)) {
        Some(p) if !p.trim().is_empty() => format!("{alias} ({})", p.trim()),
        _ => alias,
    }
}

/// The capabilities a root grants itself from its configuration.
pub fn root_capabilities(config: &Config) -> Vec<String> {
    let mut caps: Vec<String> = [
        "message.send",
        "message.receive",
        "message.wait",
        "resource.request",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if config.allow_resource_control {
        caps.push("resource.control".into());
    }
    caps
}

/// A running root: the shared [`Core`] plus the resources only the owner may stop.
pub struct Root {
    pub core: Arc<Core>,
    pub socket: SocketPlace,
    pub control_path: PathBuf,
    inner: Option<Owned>,
    one_off: bool,
}

/// What `shutdown` tears down, in order. The threads are `None` while the root is still
/// starting, so a start that fails half-way is undone by the same `stop`.
struct Owned {
    endpoint: Endpoint,
    store: Store,
    heartbeat: Option<(Sender<()>, JoinHandle<()>)>,
    worker: Option<JoinHandle<()>>,
    resource_events: Option<(std::os::unix::net::UnixStream, JoinHandle<()>)>,
}

/// Who a new root is: ids, alias, keys and where its socket goes.
struct Identity {
    session_id: String,
    instance_id: String,
    peer_id: String,
    alias: String,
    keys: Arc<KeyPair>,
    socket: SocketPlace,
}

impl Root {
    /// Loads and validates the configuration, prepares the namespace, creates the identity,
    /// opens the store, binds the endpoint, writes the control file and only then publishes
    /// presence: a published endpoint is one that answers. Fails with
    /// `COMMUNICATION_DISABLED` when the file says so.
    pub fn start(opts: &RootOptions) -> Result<Root> {
        // Before any secret or key exists in this process's memory.
        crate::hardening::no_core_dumps()?;
        let (ns, config) = open_namespace(opts.home.as_deref())?;
        let workspace = workspace_of(opts)?;
        let id = identify(opts, &ns, &config, &workspace)?;
        let store = Store::open(&ns.home, &id.instance_id, &id.session_id, &config.limits)?;
        let me = LocalIdentity {
            instance_id: id.instance_id.clone(),
            keys: id.keys.clone(),
        };
        let (core, socket) = assemble_core(opts, ns, config, workspace, id, &store, &me);
        // Wiped from this stack frame when start returns; the endpoint keeps its own copy.
        let secret = zeroize::Zeroizing::new(control::new_secret());
        let (endpoint, store, control_path) =
            Self::start_owned(core.clone(), store, me, &secret, &socket).map_err(
                |(e, store)| {
                    let _ = store.close();
                    e
                },
            )?;
        // From here on, dropping `root` undoes everything started so far.
        let mut root = Root {
            core,
            socket,
            control_path,
            inner: Some(Owned {
                endpoint,
                store,
                heartbeat: None,
                worker: None,
                resource_events: None,
            }),
            one_off: opts.one_off,
        };
        root.core.publisher.refresh()?;
        root.start_threads()?;
        Ok(root)
    }

    /// The heartbeat, the root worker and (in auto idle behaviour) the handler runner.
    fn start_threads(&mut self) -> Result<()> {
        let core = self.core.clone();
        // Before the worker starts: what dead predecessors of this session left unresolved is
        // ours to deliver (the worker's retry pass sends it); dead roots' leftovers go.
        adopt::adopt_predecessors(&core);
        reclaim::reclaim_dead(&core);
        let heartbeat = spawn_heartbeat(core.clone(), core.limits().heartbeat_ms)?;
        if let Some(owned) = self.inner.as_mut() {
            owned.heartbeat = Some(heartbeat);
        }
        // Position the resource event cursor before the ready line, so no change is missed.
        let resource_cursor = resources::publish_events(&core, None);
        let resource_events = resources::spawn_events(core.clone(), resource_cursor)?;
        if let Some(owned) = self.inner.as_mut() {
            owned.resource_events = Some(resource_events);
        }
        let worker = spawn_worker(core.clone())?;
        if let Some(owned) = self.inner.as_mut() {
            owned.worker = Some(worker);
        }
        if core.site.config().idle_behavior == IdleBehavior::Auto {
            let env = vec![
                (
                    control::ENV_CONTROL.to_string(),
                    self.control_path.to_string_lossy().into_owned(),
                ),
                (
                    "PEER_HOME".to_string(),
                    core.site.home().to_string_lossy().into_owned(),
                ),
                (auto::ENV_AUTO.to_string(), core.auto.token().to_string()),
                (
                    "PEER_HOLDER_PID".to_string(),
                    std::process::id().to_string(),
                ),
            ];
            let mut env = env;
            // As for a `peer host -- CMD` child: `peer` in the handler is this peer.
            if let Some(Ok(path)) = crate::paths::path_with_own_dir().map(|p| p.into_string()) {
                env.push(("PATH".to_string(), path));
            }
            let command = core.site.config().auto_command.clone().unwrap_or_default();
            core.auto.start(command, env)?;
        }
        Ok(())
    }

    #[allow(clippy::result_large_err)]
    fn start_owned(
        core: Arc<Core>,
        store: Store,
        me: LocalIdentity,
        secret: &[u8; 32],
        socket: &SocketPlace,
    ) -> std::result::Result<(Endpoint, Store, PathBuf), (Error, Store)> {
        let limits = core.limits().clone();
        let endpoint = match Endpoint::bind(
            &socket.path,
            me,
            &limits,
            *secret,
            Arc::new(dispatch::RootHandler(core.clone())),
            Arc::new(PresenceVerifier(core.clone())),
        ) {
            Ok(e) => e,
            Err(e) => return Err((e, store)),
        };
        let cf = control::ControlFile {
            version: 1,
            endpoint: socket.path.clone(),
            secret: identity::b64(secret),
            instance_id: core.me.instance_id().to_string(),
            peer_id: core.me.peer_id().to_string(),
            home: core.site.home().to_path_buf(),
            run_id: None,
        };
        match control::write(&core.control_dir(), &cf) {
            Ok(path) => Ok((endpoint, store, path)),
            Err(e) => {
                endpoint.shutdown();
                Err((e, store))
            }
        }
    }

    /// The `ready` event printed by `peer host --json` once the root accepts connections.
    pub fn ready_event(&self) -> Ready {
        let text = |p: &std::path::Path| p.to_string_lossy().into_owned();
        Ready {
            event: "ready",
            peer_id: self.core.me.peer_id().to_string(),
            instance_id: self.core.me.instance_id().to_string(),
            session_id: self.core.me.session_id().to_string(),
            alias: self.core.me.alias().to_string(),
            endpoint: text(&self.socket.path),
            control: text(&self.control_path),
            presence: text(self.core.publisher.path()),
            workspace: text(&self.core.site.workspace().workspace),
            pid: std::process::id(),
        }
    }

    /// Stops everything this root started and removes exactly its own files.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        let Some(owned) = self.inner.take() else {
            return;
        };
        self.core.stopping.store(true, Ordering::SeqCst);
        self.core.store.wake_waiters();
        self.core.auto.shutdown();
        if let Some(worker) = owned.worker {
            let _ = worker.join();
        }
        if let Some((stop, handle)) = owned.resource_events {
            drop(stop);
            let _ = handle.join();
        }
        owned.endpoint.shutdown();
        let me = self.core.me.instance_id();
        control::remove(&self.control_path, me);
        for run in self.core.runs.lock().live() {
            let path = control::path_in(&self.core.control_dir(), me, Some(&run.run_id));
            control::remove(&path, me);
        }
        if let Some((stop, handle)) = owned.heartbeat {
            drop(stop);
            let _ = handle.join();
        }
        let _ = self.core.publisher.remove();
        // Nothing moves any more (worker joined, endpoint closed): a one-off root whose store
        // holds nothing unresolved leaves no directory behind.
        let reclaim = self.one_off
            && self
                .core
                .store
                .query(|m| m.pending_routes().is_empty() && m.unread().is_empty())
                .unwrap_or(false);
        let dir = owned.store.dir().to_path_buf();
        let closed = owned.store.close();
        if reclaim && closed.is_ok() {
            crate::store::remove_store_dir(&dir);
        }
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Resolves the namespace, refuses a symlinked one before reading anything inside it, loads
/// the configuration and prepares the shared directories.
fn open_namespace(home: Option<&std::path::Path>) -> Result<(Namespace, Config)> {
    let home = crate::config::resolve_home(home)?;
    if let Ok(meta) = std::fs::symlink_metadata(&home)
        && meta.file_type().is_symlink()
    {
        return Err(Error::new(
            Code::UnsafePath,
            format!(
                "{} is a symbolic link; use the real directory as --home",
                home.display()
            ),
        ));
    }
    let config = Config::load(&home)?;
    if config.enabled == Some(false) {
        return Err(Error::new(
            Code::CommunicationDisabled,
            format!(
                "sessions.communication.enabled is false in {}; set it to true in each participant and restart",
                home.join("config.json").display()
            ),
        ));
    }
    let ns = Namespace::new(home, &config);
    ns.prepare()?;
    Ok((ns, config))
}

/// The canonical workspace: `--workspace` or the current directory.
fn workspace_of(opts: &RootOptions) -> Result<directory::WorkspaceId> {
    let cwd = match &opts.workspace {
        Some(w) => w.clone(),
        None => std::env::current_dir()
            .map_err(|e| Error::new(Code::Io, format!("cannot read the current directory: {e}")))?,
    };
    directory::canonical_workspace(&cwd)
}

/// A new incarnation's ids, alias, key pair and socket place.
fn identify(
    opts: &RootOptions,
    ns: &Namespace,
    config: &Config,
    workspace: &directory::WorkspaceId,
) -> Result<Identity> {
    let session_id = match &opts.session_id {
        Some(s) if identity::is_valid_id(s) => s.clone(),
        Some(_) => {
            return Err(Error::new(
                Code::Usage,
                format!(
                    "--session-id must be 1-{} chars of [A-Za-z0-9_.-]",
                    crate::config::internal::ID_CHARS_MAX
                ),
            ));
        }
        None => identity::new_session_id(),
    };
    let alias = match opts.alias.clone().or_else(|| config.alias.clone()) {
        Some(a) => {
            identity::validate_alias(&a)?;
            a
        }
        None => identity::generated_alias(&workspace.workspace),
    };
    let instance_id = identity::new_instance_id();
    Ok(Identity {
        session_id,
        peer_id: identity::peer_id(&instance_id, None),
        socket: paths::socket_place(ns, &instance_id)?,
        instance_id,
        alias,
        keys: Arc::new(KeyPair::generate()),
    })
}

/// The shared state of a new root, with every part it is made of in place: the store
/// handle marked live, the notifying pool that reaches it once it exists, a prepared (not yet
/// published) presence record. Returns it with the socket place the identity chose.
fn assemble_core(
    opts: &RootOptions,
    ns: Namespace,
    config: Config,
    workspace: directory::WorkspaceId,
    id: Identity,
    store: &Store,
    me: &LocalIdentity,
) -> (Arc<Core>, SocketPlace) {
    let core_cell: Arc<OnceLock<Weak<Core>>> = Arc::new(OnceLock::new());
    let pool = notifying_pool(me.clone(), &config.limits, core_cell.clone());
    let capabilities = root_capabilities(&config);
    let record = presence_record(opts, &config, &workspace, &id, &capabilities);
    let store_handle = store.handle();
    store_handle.set_live(&id.peer_id);
    let publisher = Arc::new(Publisher::prepare(&ns.active_agents(), record));
    let presence = PresenceCache::new(ns.clone(), config.limits.clone());
    let core = Arc::new(Core {
        presence,
        auto: auto::Auto::new(config.limits.automatic_replies),
        site: site::Site::new(ns, id.socket.path.clone(), config, workspace),
        me: incarnation::Incarnation::new(
            id.session_id,
            id.instance_id,
            id.peer_id,
            id.alias,
            capabilities.into(),
        ),
        store: store_handle,
        bus: events::Bus::default(),
        runs: Mutex::new(runs::Runs::default()),
        publisher,
        stopping: Arc::new(std::sync::atomic::AtomicBool::new(false)),
        outbox: Outbox::new(pool),
        arrivals: arrivals::Arrivals::default(),
        problems: problems::Problems::default(),
        repair: outbox::Repair::default(),
    });
    let _ = core_cell.set(Arc::downgrade(&core));
    (core, id.socket)
}

/// The outbound pool, whose notifications (pushed receipts) go to the root's handler once the
/// core exists.
fn notifying_pool(
    me: LocalIdentity,
    limits: &crate::config::Limits,
    core_cell: Arc<OnceLock<Weak<Core>>>,
) -> Pool {
    Pool::new(
        me,
        limits,
        Arc::new(move |from, push| {
            if let Some(core) = core_cell.get().and_then(Weak::upgrade) {
                handler::receipt_notification(&core, from, push);
            }
        }),
    )
}

/// This root's presence record (presence v1 plus its `communication` advertisement).
fn presence_record(
    opts: &RootOptions,
    config: &Config,
    workspace: &directory::WorkspaceId,
    id: &Identity,
    capabilities: &[String],
) -> Record {
    let path_text = |p: &std::path::Path| p.to_string_lossy().into_owned();
    let own = crate::process::Probe::new().own().ok();
    Record {
        version: 1,
        pid: std::process::id(),
        session_id: id.session_id.clone(),
        workspace_root: path_text(&workspace.workspace),
        project_name: workspace
            .workspace
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        provider: "peerwire".into(),
        model: presence_model(&id.alias, opts.purpose.as_deref()),
        mode: if opts.mode.is_empty() {
            "command"
        } else {
            opts.mode
        }
        .into(),
        status: "idle".into(),
        started_at: clock::iso8601(clock::now_ms()),
        updated_at: String::new(),
        message_count: 0,
        context_percent: 100,
        tokens_used: 0,
        communication: Advertisement {
            protocol_version: presence::PROTOCOL_VERSION,
            instance_id: id.instance_id.clone(),
            peer_id: id.peer_id.clone(),
            endpoint: id.socket.advertised.clone(),
            public_key: id.keys.spki_b64(),
            capabilities: capabilities.to_vec(),
            scope: config.scope.name().into(),
            workspace: path_text(&workspace.workspace),
            repository: workspace.repository.as_deref().map(path_text),
            alias: id.alias.clone(),
            runs: Vec::new(),
            // Our own start evidence lets others prove this incarnation gone once it is.
            process_start_time: own.as_ref().map(|e| e.start_time),
            boot_id: own.map(|e| e.boot_id),
            degraded: None,
        },
    }
}

/// Refreshes the record every `interval_ms` until the sender is dropped, and reclaims dead
/// roots' leftovers on the first beat at least `GAVE_UP_RETRY_MS` after the last pass: the
/// heartbeat wakes anyway, so the reclaim costs an idle root no wakeup of its own.
fn spawn_heartbeat(core: Arc<Core>, interval_ms: u64) -> Result<(Sender<()>, JoinHandle<()>)> {
    let (tx, rx) = bounded::<()>(1);
    let handle = std::thread::Builder::new()
        .name("heartbeat".into())
        .spawn(move || {
            let reclaim_every = Duration::from_millis(crate::config::internal::GAVE_UP_RETRY_MS);
            let mut last_reclaim = Instant::now();
            // recv_timeout returns Err(Disconnected) when the root drops the sender: stop.
            while let Err(crossbeam_channel::RecvTimeoutError::Timeout) =
                rx.recv_timeout(Duration::from_millis(interval_ms))
            {
                // A failed refresh is retried at the next beat; readers see us stale meanwhile.
                let _ = core.publisher.refresh();
                if last_reclaim.elapsed() >= reclaim_every {
                    last_reclaim = Instant::now();
                    // Dead roots' records, sockets and control files, a bounded batch.
                    reclaim::reclaim_dead(&core);
                }
            }
        })
        .map_err(|e| Error::new(Code::Io, format!("cannot start the heartbeat thread: {e}")))?;
    Ok((tx, handle))
}

use crate::config::internal::RETENTION_SWEEP_MS;
use crate::config::internal::WORKER_TICK_MS;

/// The background worker: pushes receipts back to senders, retries stuck routes, sweeps
/// expiry and retention. It sleeps until a durable store change it acts on (a receipt to
/// push, a route no caller drives — not the accepts, intents and receipts of the send path —
/// or a send that left its route unresolved; the root stopping wakes it too) or its next
/// deadline: the next sweep, and while routes or receipt pushes are still unresolved, the next
/// retry, and the search for lost recipient copies (every 2 s while accepted messages are held,
/// else every 10 s). Otherwise an idle root wakes only for the sweep (the heartbeat thread
/// reclaims dead roots' records).
fn spawn_worker(core: Arc<Core>) -> Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("root-worker".into())
        .spawn(move || {
            let mut last_sweep = Instant::now();
            // Expiry and retention are honoured within a quarter of their configured span.
            let l = core.limits();
            let sweep_every = Duration::from_millis(
                (l.expiry_ms.min(l.retention_ms) / 4).clamp(WORKER_TICK_MS, RETENTION_SWEEP_MS),
            );
            let mut last_restart = Instant::now();
            let mut seen = core.store.worker_generation();
            let mut degraded = false;
            while !core.stopping.load(Ordering::SeqCst) {
                if !degraded && core.store.stats().poisoned {
                    degraded = true;
                    core.advertise_degraded();
                }
                let pushes = core.push_receipts();
                let restart = last_restart.elapsed()
                    >= Duration::from_millis(crate::config::internal::GAVE_UP_RETRY_MS);
                if restart {
                    last_restart = Instant::now();
                }
                let watching = repair::check(&core);
                let routes = core.retry_routes(restart);
                if last_sweep.elapsed() >= sweep_every {
                    if let Err(e) = core.store.sweep() {
                        core.report_problem("the expiry and retention sweep", &e);
                    }
                    last_sweep = Instant::now();
                }
                let mut wait = sweep_every.saturating_sub(last_sweep.elapsed());
                if let Some(next_push) = pushes {
                    wait = wait.min(next_push);
                }
                // While accepted messages are held, the search for lost copies runs at its own
                // pace even when nothing else is due; an idle root does not wake for it.
                wait = wait.min(Duration::from_millis(if watching {
                    crate::config::internal::REPAIR_CHECK_EVERY_MS
                } else {
                    crate::config::internal::REPAIR_IDLE_LOOK_MS
                }));
                if routes {
                    // Routes that gave up restart every GAVE_UP_RETRY_MS: a tick covers it.
                    wait = wait.min(Duration::from_millis(WORKER_TICK_MS));
                }
                seen = core
                    .store
                    .wait_for_worker(seen, wait.as_millis() as u64, &core.stopping);
            }
        })
        .map_err(|e| {
            Error::new(
                Code::Io,
                format!("cannot start the root worker thread: {e}"),
            )
        })
}
