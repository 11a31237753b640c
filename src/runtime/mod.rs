//! The root runtime: one process's identity, namespace, presence record and heartbeat, and
//! (as later modules arrive) its endpoint, store and tool implementations. A root lives for a
//! `peer host`, a `peer mcp`, or one `peer --as ALIAS` command.

pub mod adopt;
pub mod auto;
pub mod control;
pub mod core;
pub mod events;
pub mod handler;
pub mod resources;
pub mod runs;
pub mod send;
pub mod tools;

use self::core::{Core, PresenceVerifier};
use crate::clock;
use crate::config::{Config, IdleBehavior};
use crate::directory;
use crate::error::{Code, Error, Result};
use crate::identity::{self, KeyPair};
use crate::paths::{self, Namespace, SocketPlace};
use crate::presence::{self, Advertisement, Publisher, Record};
use crate::resource;
use crate::store::Store;
use crate::transport::{Endpoint, LocalIdentity, Pool};
use crossbeam_channel::{Sender, bounded};
use parking_lot::Mutex;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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
}

/// The sessionId of the one-off roots acting as `alias` (`peer --as ALIAS`): one session for
/// every invocation with that alias in this namespace, so a retry from a later invocation is
/// recognised by its recipient (dedup spans a session's incarnations) and a later invocation
/// finds the undelivered messages of an earlier one.
pub fn one_off_session(alias: &str) -> String {
    format!("as-{alias}")
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

/// What `shutdown` tears down, in order.
struct Owned {
    endpoint: Endpoint,
    store: Store,
    heartbeat: (Sender<()>, JoinHandle<()>),
    worker: JoinHandle<()>,
    resource_events: (std::os::unix::net::UnixStream, JoinHandle<()>),
}

impl std::ops::Deref for Root {
    type Target = Core;
    fn deref(&self) -> &Core {
        &self.core
    }
}

impl Root {
    /// Loads and validates the configuration, prepares the namespace, creates the identity,
    /// opens the store, binds the endpoint and publishes presence. Fails with
    /// `COMMUNICATION_DISABLED` when the file says so.
    pub fn start(opts: &RootOptions) -> Result<Root> {
        let home = crate::config::resolve_home(opts.home.as_deref())?;
        // Refuse an unsafe namespace before reading anything inside it.
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
        let cwd = match &opts.workspace {
            Some(w) => w.clone(),
            None => std::env::current_dir().map_err(|e| {
                Error::new(Code::Io, format!("cannot read the current directory: {e}"))
            })?,
        };
        let workspace = directory::canonical_workspace(&cwd)?;
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
        let peer_id = identity::peer_id(&instance_id, None);
        let keys = Arc::new(KeyPair::generate());
        let socket = paths::socket_place(&ns, &instance_id)?;
        let capabilities = root_capabilities(&config);
        let limits = config.limits.clone();
        let store = Store::open(&ns.home, &instance_id, &session_id, &limits)?;
        let me = LocalIdentity {
            instance_id: instance_id.clone(),
            keys: keys.clone(),
        };
        let core_cell: Arc<OnceLock<Weak<Core>>> = Arc::new(OnceLock::new());
        let sink_cell = core_cell.clone();
        let pool = Pool::new(
            me.clone(),
            &limits,
            Arc::new(move |from, method, params| {
                if let Some(core) = sink_cell.get().and_then(Weak::upgrade) {
                    handler::RootHandler(core).on_notification(from, method, params);
                }
            }),
        );
        // Our own start evidence lets others prove this incarnation gone once it is.
        let own = resource::evidence::Probe::new().own().ok();
        let record = Record {
            version: 1,
            pid: std::process::id(),
            session_id: session_id.clone(),
            workspace_root: workspace.workspace.to_string_lossy().into_owned(),
            project_name: workspace
                .workspace
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            provider: "peerwire".into(),
            model: "none".into(),
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
                instance_id: instance_id.clone(),
                peer_id: peer_id.clone(),
                endpoint: socket.advertised.clone(),
                public_key: keys.spki_b64(),
                capabilities: capabilities.clone(),
                scope: config.scope.name().into(),
                workspace: workspace.workspace.to_string_lossy().into_owned(),
                repository: workspace
                    .repository
                    .as_ref()
                    .map(|r| r.to_string_lossy().into_owned()),
                alias: alias.clone(),
                runs: Vec::new(),
                process_start_time: own.as_ref().map(|e| e.start_time),
                boot_id: own.map(|e| e.boot_id),
            },
        };
        let secret = control::new_secret();
        let mut token = [0u8; 16];
        identity::random_bytes(&mut token);
        let store_handle = store.handle();
        store_handle.set_live(&peer_id);
        // Bind before advertising: a published endpoint is one that answers.
        let publisher = Arc::new(Publisher::publish(&ns.active_agents(), record)?);
        let core = Arc::new(Core {
            ns,
            auto_budget: Arc::new(auto::Budget::new(config.limits.automatic_replies)),
            config,
            workspace,
            session_id,
            instance_id,
            peer_id,
            alias,
            capabilities,
            store: store_handle,
            pool,
            bus: events::Bus::default(),
            runs: Mutex::new(runs::Runs::default()),
            publisher,
            auto_token: identity::hex(&token),
            auto: Mutex::new(None),
            stopping: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            routes: Mutex::new(Default::default()),
            route_errors: Mutex::new(Default::default()),
            subscriptions: Mutex::new(Default::default()),
            model_cursors: Mutex::new(Default::default()),
            presence_cache: presence::ReadCache::default(),
            adverts: Mutex::new(Default::default()),
            problems: Mutex::new(Default::default()),
        });
        let _ = core_cell.set(Arc::downgrade(&core));
        let started = Self::start_owned(core.clone(), store, me, secret, &socket);
        let (endpoint, store, control_path) = match started {
            Ok(v) => v,
            Err((e, store)) => {
                let _ = core.publisher.remove();
                let _ = store.close();
                return Err(e);
            }
        };
        // Before the worker starts: what dead predecessors of this session left unresolved is
        // ours to deliver (the worker's retry pass sends it).
        adopt::adopt_predecessors(&core);
        let heartbeat = spawn_heartbeat(core.publisher.clone(), core.limits().heartbeat_ms)?;
        // Position the resource event cursor before the ready line, so no change is missed.
        let resource_cursor = resources::publish_events(&core, None);
        let resource_events = resources::spawn_events(core.clone(), resource_cursor)?;
        let worker = spawn_worker(core.clone())?;
        if core.config.idle_behavior == IdleBehavior::Auto {
            let env = vec![
                (
                    control::ENV_CONTROL.to_string(),
                    control_path.to_string_lossy().into_owned(),
                ),
                (
                    "PEER_HOME".to_string(),
                    core.ns.home.to_string_lossy().into_owned(),
                ),
                (auto::ENV_AUTO.to_string(), core.auto_token.clone()),
                (
                    "PEER_HOLDER_PID".to_string(),
                    std::process::id().to_string(),
                ),
            ];
            let command = core.config.auto_command.clone().unwrap_or_default();
            *core.auto.lock() = Some(auto::Runner::start(command, env, core.auto_budget.clone())?);
        }
        Ok(Root {
            core,
            socket,
            control_path,
            inner: Some(Owned {
                endpoint,
                store,
                heartbeat,
                worker,
                resource_events,
            }),
            one_off: opts.one_off,
        })
    }

    #[allow(clippy::result_large_err)]
    fn start_owned(
        core: Arc<Core>,
        store: Store,
        me: LocalIdentity,
        secret: [u8; 32],
        socket: &SocketPlace,
    ) -> std::result::Result<(Endpoint, Store, PathBuf), (Error, Store)> {
        let limits = core.limits().clone();
        let endpoint = match Endpoint::bind(
            &socket.path,
            me,
            &limits,
            secret,
            Arc::new(handler::RootHandler(core.clone())),
            Arc::new(PresenceVerifier(core.clone())),
        ) {
            Ok(e) => e,
            Err(e) => return Err((e, store)),
        };
        let cf = control::ControlFile {
            version: 1,
            endpoint: socket.path.clone(),
            secret: identity::b64(&secret),
            instance_id: core.instance_id.clone(),
            peer_id: core.peer_id.clone(),
            home: core.ns.home.clone(),
        };
        let dir = socket
            .path
            .parent()
            .map(PathBuf::from)
            .unwrap_or_else(|| core.ns.runtime_dir());
        match control::write(&dir, &cf) {
            Ok(path) => Ok((endpoint, store, path)),
            Err(e) => {
                endpoint.shutdown();
                Err((e, store))
            }
        }
    }

    /// The `ready` event printed by `peer host --json` once the root accepts connections.
    pub fn ready_event(&self) -> Value {
        json!({
            "event": "ready",
            "peerId": self.peer_id,
            "instanceId": self.instance_id,
            "sessionId": self.session_id,
            "alias": self.alias,
            "endpoint": self.socket.path.to_string_lossy(),
            "control": self.control_path.to_string_lossy(),
            "presence": self.publisher.path().to_string_lossy(),
            "workspace": self.workspace.workspace.to_string_lossy(),
            "pid": std::process::id(),
        })
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
        if let Some(runner) = self.core.auto.lock().take() {
            runner.shutdown();
        }
        let _ = owned.worker.join();
        let (stop, handle) = owned.resource_events;
        drop(stop);
        let _ = handle.join();
        owned.endpoint.shutdown();
        control::remove(&self.control_path, &self.core.instance_id);
        let (stop, handle) = owned.heartbeat;
        drop(stop);
        let _ = handle.join();
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

/// Refreshes the record every `interval_ms` until the sender is dropped.
fn spawn_heartbeat(
    publisher: Arc<Publisher>,
    interval_ms: u64,
) -> Result<(Sender<()>, JoinHandle<()>)> {
    let (tx, rx) = bounded::<()>(1);
    let handle = std::thread::Builder::new()
        .name("heartbeat".into())
        .spawn(move || {
            // recv_timeout returns Err(Disconnected) when the root drops the sender: stop.
            while let Err(crossbeam_channel::RecvTimeoutError::Timeout) =
                rx.recv_timeout(Duration::from_millis(interval_ms))
            {
                // A failed refresh is retried at the next beat; readers see us stale meanwhile.
                let _ = publisher.refresh();
            }
        })
        .map_err(|e| Error::new(Code::Io, format!("cannot start the heartbeat thread: {e}")))?;
    Ok((tx, handle))
}

use crate::config::internal::RETENTION_SWEEP_MS;
use crate::config::internal::WORKER_TICK_MS;

/// The background worker: pushes receipts back to senders, retries stuck routes, sweeps
/// expiry and retention. It sleeps until a durable store change (or the root stopping, which
/// wakes it) or its next deadline: the next sweep, and while routes or receipt pushes are
/// still unresolved, the next retry. An idle root with nothing unresolved sleeps until the
/// next sweep.
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
            let mut seen = core.store.change_generation();
            while !core.stopping.load(Ordering::SeqCst) {
                core.push_receipts();
                let restart =
                    last_restart.elapsed() >= Duration::from_millis(send::GAVE_UP_RETRY_MS);
                if restart {
                    last_restart = Instant::now();
                }
                core.retry_routes(restart);
                if last_sweep.elapsed() >= sweep_every {
                    if let Err(e) = core.store.sweep() {
                        core.report_problem("the expiry and retention sweep", &e);
                    }
                    last_sweep = Instant::now();
                }
                let unresolved = core
                    .store
                    .query(|m| !m.pending_routes().is_empty() || !m.pending_pushes(1).is_empty())
                    .unwrap_or(true);
                let mut wait = sweep_every.saturating_sub(last_sweep.elapsed());
                if unresolved {
                    wait = wait.min(Duration::from_millis(WORKER_TICK_MS));
                }
                seen =
                    core.store
                        .wait_for_change_woken(seen, wait.as_millis() as u64, &core.stopping);
            }
        })
        .map_err(|e| {
            Error::new(
                Code::Io,
                format!("cannot start the root worker thread: {e}"),
            )
        })
}
