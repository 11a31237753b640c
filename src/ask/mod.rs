//! The cross-machine ask: a small HTTP/1.1 JSON protocol, wire compatible with dsh-ask-peer,
//! through which one machine's agent asks a trusted friend's agent a question about the
//! friend's workspace. Every machine is both a client and a server; friends are configured
//! addresses. See peer-ask(1) and the "HTTP ask protocol" section of peer-protocol(7).
//!
//! Layout (one job per module):
//! - `canon` — canonical JSON, the `ed25519:` key form, fingerprints, signatures (pure).
//! - `keys` — this agent's Ed25519 key pair in `keyDir`.
//! - `config` — the `"ask"` object of `<home>/config.json`, strictly validated.
//! - `http` — bounded HTTP/1.1 request reading and response writing (heads via `httparse`),
//!   and the `Request`, `Response` and `ApiError` types of every endpoint.
//! - `client` — a small blocking HTTP client with deadlines and bounded responses;
//!   `chunked` decodes Node-style chunked bodies within bounds.
//! - `server` — the listener and its bounded connection threads.
//! - `tls` — TLS pinned to card keys (certificates of the card key, the pinned verifier, mutual
//!   TLS) and the client's TLS-or-plain policy per friend.
//! - `auth` — allowlist, tokens, signatures with timestamp, nonce and replay set; rate limits.
//! - `approval` — per-friend modes and the owner's pending decisions; `notify` tells the
//!   owner's front ends that one waits.
//! - `jobs` — async asks and their lifecycle.
//! - `answer`, `sandbox` — one fresh, sandboxed answerer process per approved ask.
//! - `a2a` — A2A 1.0 on the same port: the signed agent card, JSON-RPC tasks over the asks,
//!   SSE streams.
//! - `api` — what front ends call: `ask`, `status`.
//! - `card`, `advertise`, `recommend`, `discovery` — friend cards, adverts, recommendations.
//! - `owner_page` — the owner's approval page on loopback, behind a secret printed at start.
//!
//! This root holds what the endpoint files share — `ServerState`, the router and `start` — so
//! that the files import each other in one direction only (tests/architecture.rs): endpoint
//! files depend on the root and on lower files, never on `server`'s internals.

#![forbid(unsafe_code)]

pub mod a2a;
pub mod advertise;
pub mod answer;
pub mod api;
pub mod approval;
pub mod auth;
pub mod canon;
pub mod card;
pub mod chunked;
pub mod client;
pub mod config;
pub mod discovery;
pub mod egress;
pub mod http;
pub mod jobs;
pub mod keys;
pub mod loose;
pub mod notify;
pub mod owner_page;
pub mod recommend;
pub mod sandbox;
pub mod server;
pub mod tls;
pub mod workspace_answer;

/// The only protocol version dsh-ask-peer speaks; required exactly on `/ask` and `/recommend`.
pub const PROTOCOL_VERSION: u64 = 1;

/// The environment marker every answerer process gets. `peer ask` refuses to run under it,
/// so an answer cannot trigger another ask. It is a courtesy check; the enforcement is that the
/// answerer's sandbox cannot read the namespace that holds the ask configuration and keys.
pub const ANSWERER_ENV: &str = "PEER_ASK_ANSWERER";

use crate::error::{Code, Error, Result};
use config::AskConfig;
use http::{ApiError, Request, Response};
use keys::AskKey;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// Everything the connection threads share.
pub struct ServerState {
    pub config: AskConfig,
    pub home: PathBuf,
    /// The directory answerers run in (canonical).
    pub workspace: PathBuf,
    /// This agent's key (created in `keyDir` at start).
    pub key: AskKey,
    /// TLS with a certificate of `key`, for connections that open with a handshake.
    pub tls: Arc<rustls::ServerConfig>,
    /// The bound address.
    pub listen: SocketAddr,
    pub guard: auth::Guard,
    pub approvals: approval::Approvals,
    pub jobs: jobs::Jobs,
    /// What A2A tasks add to the asks they are.
    pub a2a: a2a::task::Tasks,
    /// The answerer's containment layers on this machine (probed at start).
    pub sandbox: sandbox::Layers,
    /// State owned by the discovery endpoints (adverts, cards, recommendations).
    pub discovery: discovery::State,
    /// Who hears that an ask waits for approval.
    pub notify: notify::Notifier,
    /// Set when the server is stopping: waits end early.
    pub stopping: AtomicBool,
    /// The owner's approval page: its secret and open streams (`owner_page`).
    pub owner: owner_page::Owner,
}

impl ServerState {
    /// The address to show in decision URLs and cards: a wildcard bind becomes loopback.
    pub fn reachable_addr(&self) -> SocketAddr {
        let mut a = self.listen;
        if a.ip().is_unspecified() {
            a.set_ip(IpAddr::from([127, 0, 0, 1]));
        }
        a
    }
}

/// `GET /health`: `{ok, peer}`.
#[derive(serde::Serialize)]
struct Health<'a> {
    ok: bool,
    peer: &'a str,
}

/// Routes one request. The discovery endpoints are answered by `discovery::route`.
pub fn route(state: &Arc<ServerState>, req: &Request) -> Response {
    if req.method == "OPTIONS" {
        return Response::no_content();
    }
    if let Some(resp) = discovery::server::route(state, req) {
        return resp;
    }
    let result = match (req.method.as_str(), req.path.as_str()) {
        ("GET", "/health") => Ok(Response::ok_typed(&Health {
            ok: true,
            peer: &state.config.caller_name,
        })),
        ("POST", "/ask") => jobs::handle_ask(state, req),
        ("POST", "/ask/decision") => approval::handle_decision(state, req),
        ("GET", "/ask/status") | ("POST", "/ask/status") => jobs::handle_status(state, req),
        _ => Err(ApiError::not_found(format!(
            "unknown path {}",
            crate::sanitize::line(&req.path, 200)
        ))),
    };
    result.unwrap_or_else(|e| e.response())
}

/// Serves an `/owner` path (the owner's approval page writes its own responses: HTML, event
/// streams) and says so; any other path is left to [`route`].
pub fn serve_owner_page<S: tls::Wire>(
    stream: &mut S,
    req: &Request,
    state: &Arc<ServerState>,
) -> bool {
    if !owner_page::is_owner_path(&req.path) {
        return false;
    }
    owner_page::serve(stream, req, state);
    true
}

/// Binds `listenHost:listenPort` (overridable), loads or creates the key, and starts serving.
pub fn start(
    home: &Path,
    config: AskConfig,
    bind: Option<SocketAddr>,
) -> Result<server::ServerHandle> {
    let workspace = match &config.workspace {
        Some(w) => w.clone(),
        None => std::env::current_dir().map_err(|e| Error::new(Code::Io, format!("cwd: {e}")))?,
    };
    let workspace = std::fs::canonicalize(&workspace)
        .map_err(|e| Error::io("cannot open workspace", &workspace, &e))?;
    // The answerer's sandbox hides the namespace and keyDir; a workspace inside them could
    // neither be read by it nor serve context files.
    for (what, dir) in [
        ("the namespace", home.to_path_buf()),
        ("ask.keyDir", config.key_dir(home)),
    ] {
        let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
        if workspace.starts_with(&dir) {
            return Err(Error::new(
                Code::ConfigInvalid,
                format!(
                    "ask.workspace {} lies inside {what} ({}), which answerers cannot read",
                    workspace.display(),
                    dir.display()
                ),
            ));
        }
    }
    let key = keys::load_or_create(&config.key_dir(home), &config.caller_name)?;
    let tls = tls::server_config(&key)?;
    let addr = match bind {
        Some(a) => a,
        None => resolve_bind(&config.listen_host, config.listen_port)?,
    };
    let listener = TcpListener::bind(addr)
        .map_err(|e| Error::new(Code::Io, format!("cannot listen on {addr}: {e}")))?;
    let listen = listener
        .local_addr()
        .map_err(|e| Error::new(Code::Io, format!("listener address: {e}")))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::new(Code::Io, format!("listener: {e}")))?;
    let state = Arc::new(ServerState {
        guard: auth::Guard::new(&config, Some(home.join("ask").join("nonces"))),
        approvals: approval::Approvals::new(home, listen, config.max_pending_approvals)?,
        jobs: jobs::Jobs::new(&config),
        a2a: a2a::task::Tasks::new(config.max_stored_asks),
        sandbox: answer::probe_layers(home, &config, &workspace),
        discovery: discovery::State::default(),
        notify: notify::Notifier::default(),
        stopping: AtomicBool::new(false),
        owner: owner_page::Owner::new(),
        config,
        home: home.to_path_buf(),
        workspace,
        key,
        tls,
        listen,
    });
    discovery::server::on_start(&state);
    server::spawn(listener, state)
}

fn resolve_bind(host: &str, port: u16) -> Result<SocketAddr> {
    use std::net::ToSocketAddrs;
    (host, port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| {
            Error::new(
                Code::ConfigInvalid,
                format!("ask.listenHost {host:?} does not resolve"),
            )
        })
}
