//! The root runtime: one process's identity, namespace, presence record and heartbeat, and
//! (as later modules arrive) its endpoint, store and tool implementations. A root lives for a
//! `peer host`, a `peer mcp`, or one `peer --as ALIAS` command.

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
}

/// What `shutdown` tears down, in order.
struct Owned {
    endpoint: Endpoint,
    store: Store,
    heartbeat: (Sender<()>, JoinHandle<()>),
    worker: JoinHandle<()>,
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
        // Before any secret or key exists in this process's memory.
        crate::hardening::no_core_dumps()?;
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
                degraded: None,
            },
        };
        let secret = zeroize::Zeroizing::new(control::new_secret());
        let mut token = [0u8; 16];
        identity::random_bytes(&mut token);
        let store_handle = store.handle();
        store_handle.set_live(&peer_id);
        // Bind before advertising: a published endpoint is one that answers.
        let publisher = Arc::new(Publisher::publish(&ns.active_agents(), record)?);
        let core = Arc::new(Core {
            socket_path: socket.path.clone(),
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
        });
        let _ = core_cell.set(Arc::downgrade(&core));
        let started = Self::start_owned(core.clone(), store, me, &secret, &socket);
        let (endpoint, store, control_path) = match started {
            Ok(v) => v,
            Err((e, store)) => {
                let _ = core.publisher.remove();
                let _ = store.close();
                return Err(e);
            }
        };
        let heartbeat = spawn_heartbeat(core.publisher.clone(), core.limits().heartbeat_ms)?;
        // Position the resource event cursor before the ready line, so no change is missed.
        let resource_cursor = resources::publish_events(&core, None);
        let worker = spawn_worker(core.clone(), resource_cursor)?;
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
            }),
        })
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
            Arc::new(handler::RootHandler(core.clone())),
            Arc::new(PresenceVerifier(core.clone())),
        ) {
            Ok(e) => e,
            Err(e) => return Err((e, store)),
        };
        let cf = control::ControlFile {
            version: 1,
            endpoint: socket.path.clone(),
            secret: identity::b64(secret),
            instance_id: core.instance_id.clone(),
            peer_id: core.peer_id.clone(),
            home: core.ns.home.clone(),
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
        owned.endpoint.shutdown();
        control::remove(&self.control_path, &self.core.instance_id);
        for run in self.core.runs.lock().live() {
            let path = control::path_in(
                &self.core.control_dir(),
                &self.core.instance_id,
                Some(&run.run_id),
            );
            control::remove(&path, &self.core.instance_id);
        }
        let (stop, handle) = owned.heartbeat;
        drop(stop);
        let _ = handle.join();
        let _ = self.core.publisher.remove();
        let _ = owned.store.close();
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
/// expiry and retention. Woken by every durable store change.
fn spawn_worker(
    core: Arc<Core>,
    mut resource_cursor: Option<resource::EventCursor>,
) -> Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("root-worker".into())
        .spawn(move || {
            let mut last_sweep = Instant::now();
            // Expiry and retention are honoured within a quarter of their configured span.
            let l = core.limits();
            let sweep_every =
                (l.expiry_ms.min(l.retention_ms) / 4).clamp(WORKER_TICK_MS, RETENTION_SWEEP_MS);
            let mut last_restart = Instant::now();
            let mut seen = core.store.change_generation();
            let mut degraded = false;
            while !core.stopping.load(Ordering::SeqCst) {
                if !degraded && core.store.stats().poisoned {
                    degraded = true;
                    core.advertise_degraded();
                }
                core.push_receipts();
                resource_cursor = resources::publish_events(&core, resource_cursor);
                let restart =
                    last_restart.elapsed() >= Duration::from_millis(send::GAVE_UP_RETRY_MS);
                if restart {
                    last_restart = Instant::now();
                }
                core.retry_routes(restart);
                if last_sweep.elapsed() >= Duration::from_millis(sweep_every) {
                    let _ = core.store.sweep();
                    last_sweep = Instant::now();
                }
                seen = core
                    .store
                    .wait_for_change(seen, WORKER_TICK_MS, &core.stopping);
            }
        })
        .map_err(|e| {
            Error::new(
                Code::Io,
                format!("cannot start the root worker thread: {e}"),
            )
        })
}
