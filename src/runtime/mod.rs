//! The root runtime: one process's identity, namespace, presence record and heartbeat, and
//! (as later modules arrive) its endpoint, store and tool implementations. A root lives for a
//! `peer host`, a `peer mcp`, or one `peer --as ALIAS` command.

use crate::clock;
pub mod auto;
pub mod control;
pub mod events;

use crate::config::{Config, Limits};
use crate::directory::{self, Viewer, WorkspaceId};
use crate::error::{Code, Error, Result};
use crate::identity::{self, KeyPair};
use crate::paths::{self, Namespace, SocketPlace};
use crate::presence::{self, Advertisement, Publisher, Record};
use crossbeam_channel::{Sender, bounded};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

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

/// A running root.
pub struct Root {
    pub ns: Namespace,
    pub config: Config,
    pub workspace: WorkspaceId,
    pub session_id: String,
    pub instance_id: String,
    pub peer_id: String,
    pub alias: String,
    pub keys: Arc<KeyPair>,
    pub socket: SocketPlace,
    pub capabilities: Vec<String>,
    publisher: Arc<Publisher>,
    heartbeat: Option<(Sender<()>, JoinHandle<()>)>,
}

impl Root {
    /// Loads and validates the configuration, prepares the namespace, creates the identity and
    /// publishes presence. Fails with `COMMUNICATION_DISABLED` when the file says so.
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
                    "--session-id must be 1-96 chars of [A-Za-z0-9_.-]",
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
            },
        };
        let publisher = Arc::new(Publisher::publish(&ns.active_agents(), record)?);
        let mut root = Root {
            ns,
            config,
            workspace,
            session_id,
            instance_id,
            peer_id,
            alias,
            keys,
            socket,
            capabilities,
            publisher,
            heartbeat: None,
        };
        root.heartbeat = Some(spawn_heartbeat(
            root.publisher.clone(),
            root.config.limits.heartbeat_ms,
        )?);
        Ok(root)
    }

    pub fn limits(&self) -> &Limits {
        &self.config.limits
    }

    pub fn publisher(&self) -> &Publisher {
        &self.publisher
    }

    /// The viewer for directory queries made by this root.
    pub fn viewer(&self, scope: Option<crate::config::Scope>) -> Result<Viewer> {
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
        Ok(Viewer {
            ws: self.workspace.clone(),
            scope,
            self_instance: Some(self.instance_id.clone()),
        })
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
            "presence": self.publisher.path().to_string_lossy(),
            "workspace": self.workspace.workspace.to_string_lossy(),
            "pid": std::process::id(),
        })
    }

    /// Stops the heartbeat and removes exactly our own presence record.
    pub fn shutdown(mut self) {
        self.stop_heartbeat();
        let _ = self.publisher.remove();
    }

    fn stop_heartbeat(&mut self) {
        if let Some((stop, handle)) = self.heartbeat.take() {
            drop(stop);
            let _ = handle.join();
        }
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        if self.heartbeat.is_some() {
            self.stop_heartbeat();
            let _ = self.publisher.remove();
        }
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
