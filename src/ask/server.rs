//! The ask server's shell: a std `TcpListener`, one thread per connection up to
//! `maxConnections` (past it a caller gets a canned 429 from the acceptor and costs no
//! thread), the `Request`/`Response` types, the `ServerState` every connection shares, and the
//! router. Policy lives in `auth`, `approval`, `jobs` and `answer`; discovery endpoints in
//! `discovery`.

use super::config::AskConfig;
use super::keys::AskKey;
use crate::error::{Code, Error, Result};
use serde_json::{Map, Value, json};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long a response write may take before the client is dropped.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the acceptor looks at the stop flag.
const ACCEPT_POLL_MS: u16 = 200;

/// An HTTP-level refusal: status, dsh error code, one-line message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    pub status: u16,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn new(status: u16, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: crate::sanitize::line(&message.into(), 400),
        }
    }
    pub fn bad_request(m: impl Into<String>) -> ApiError {
        ApiError::new(400, "bad_request", m)
    }
    pub fn forbidden(m: impl Into<String>) -> ApiError {
        ApiError::new(403, "forbidden", m)
    }
    pub fn not_found(m: impl Into<String>) -> ApiError {
        ApiError::new(404, "not_found", m)
    }
    pub fn too_large(n: u64) -> ApiError {
        ApiError::new(
            413,
            "payload_too_large",
            format!(
                "body of {n} bytes exceeds {} bytes",
                super::http::BODY_BYTES_MAX
            ),
        )
    }
    pub fn rate_limited(m: impl Into<String>) -> ApiError {
        ApiError::new(429, "rate_limited", m)
    }
    pub fn ask_failed(m: impl Into<String>) -> ApiError {
        ApiError::new(500, "ask_failed", m)
    }
    pub fn internal(m: impl Into<String>) -> ApiError {
        ApiError::new(500, "internal", m)
    }
    pub fn response(&self) -> Response {
        Response::json(
            self.status,
            json!({"ok": false, "error": {"code": self.code, "message": self.message}}),
        )
    }
}

/// One parsed request.
#[derive(Clone, Debug)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub query: String,
    /// Lower-case names.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub peer: SocketAddr,
}

impl Request {
    /// The body as a JSON object (`400 request body must be JSON` otherwise).
    pub fn json_object(&self) -> std::result::Result<Map<String, Value>, ApiError> {
        match serde_json::from_slice::<Value>(&self.body) {
            Ok(Value::Object(m)) => Ok(m),
            _ => Err(ApiError::bad_request("request body must be JSON")),
        }
    }

    /// A query parameter, percent-decoded.
    pub fn query_param(&self, name: &str) -> Option<String> {
        self.query.split('&').find_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (k == name).then(|| percent_decode(v))
        })
    }

    pub fn ip(&self) -> IpAddr {
        self.peer.ip()
    }
}

fn percent_decode(s: &str) -> String {
    fn hex(b: u8) -> Option<u8> {
        (b as char).to_digit(16).map(|d| d as u8)
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let decoded = match bytes[i] {
            b'%' if i + 2 < bytes.len() => hex(bytes[i + 1])
                .zip(hex(bytes[i + 2]))
                .map(|(h, l)| h * 16 + l),
            _ => None,
        };
        match (decoded, bytes[i]) {
            (Some(b), _) => {
                out.push(b);
                i += 3;
                continue;
            }
            (None, b'+') => out.push(b' '),
            (None, b) => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A response: status and an optional JSON body.
#[derive(Clone, Debug)]
pub struct Response {
    pub status: u16,
    pub body: Option<Value>,
}

impl Response {
    pub fn json(status: u16, body: Value) -> Response {
        Response {
            status,
            body: Some(body),
        }
    }
    pub fn ok(body: Value) -> Response {
        Response::json(200, body)
    }
    pub fn no_content() -> Response {
        Response {
            status: 204,
            body: None,
        }
    }
    pub fn bytes(&self) -> Vec<u8> {
        match &self.body {
            Some(v) => serde_json::to_vec(v).unwrap_or_default(),
            None => Vec::new(),
        }
    }
}

/// Everything the connection threads share.
pub struct ServerState {
    pub config: AskConfig,
    pub home: PathBuf,
    /// The directory answerers run in (canonical).
    pub workspace: PathBuf,
    /// This agent's key (created in `keyDir` at start).
    pub key: AskKey,
    /// The bound address.
    pub listen: SocketAddr,
    pub guard: super::auth::Guard,
    pub approvals: super::approval::Approvals,
    pub jobs: super::jobs::Jobs,
    /// Whether this kernel enforces Landlock (probed at start).
    pub sandbox: super::sandbox::Support,
    /// State owned by the discovery endpoints (adverts, cards, recommendations).
    pub discovery: super::discovery::State,
    /// Set when the server is stopping: waits end early.
    pub stopping: AtomicBool,
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

/// Routes one request. The discovery endpoints are answered by `discovery::route`.
pub fn route(state: &Arc<ServerState>, req: &Request) -> Response {
    if req.method == "OPTIONS" {
        return Response::no_content();
    }
    if let Some(resp) = super::discovery::route(state, req) {
        return resp;
    }
    let result = match (req.method.as_str(), req.path.as_str()) {
        ("GET", "/health") => Ok(Response::ok(
            json!({"ok": true, "peer": state.config.caller_name}),
        )),
        ("POST", "/ask") => super::jobs::handle_ask(state, req),
        ("POST", "/ask/decision") => super::approval::handle_decision(state, req),
        ("GET", "/ask/status") | ("POST", "/ask/status") => super::jobs::handle_status(state, req),
        _ => Err(ApiError::not_found(format!(
            "unknown path {}",
            crate::sanitize::line(&req.path, 200)
        ))),
    };
    result.unwrap_or_else(|e| e.response())
}

/// A running server.
pub struct ServerHandle {
    pub state: Arc<ServerState>,
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl ServerHandle {
    pub fn addr(&self) -> SocketAddr {
        self.state.listen
    }

    /// Stops accepting, ends waits, removes the owner's state file, joins the acceptor.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.state.stopping.store(true, Ordering::SeqCst);
        self.state.approvals.wake_all();
        if let Some(t) = self.acceptor.take() {
            let _ = t.join();
        }
        self.state.approvals.remove_owner_file();
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Binds `listenHost:listenPort` (overridable), loads or creates the key, and starts serving.
pub fn start(home: &Path, config: AskConfig, bind: Option<SocketAddr>) -> Result<ServerHandle> {
    let workspace = match &config.workspace {
        Some(w) => w.clone(),
        None => std::env::current_dir().map_err(|e| Error::new(Code::Io, format!("cwd: {e}")))?,
    };
    let workspace = std::fs::canonicalize(&workspace)
        .map_err(|e| Error::io("cannot open workspace", &workspace, &e))?;
    let key = super::keys::load_or_create(&config.key_dir(home), &config.caller_name)?;
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
        guard: super::auth::Guard::new(&config),
        approvals: super::approval::Approvals::new(home, listen, config.max_pending_approvals)?,
        jobs: super::jobs::Jobs::new(&config),
        sandbox: super::sandbox::Support::probe(),
        discovery: super::discovery::State::default(),
        stopping: AtomicBool::new(false),
        config,
        home: home.to_path_buf(),
        workspace,
        key,
        listen,
    });
    super::discovery::on_start(&state);
    let stop = Arc::new(AtomicBool::new(false));
    let acceptor = {
        let (state, stop) = (state.clone(), stop.clone());
        std::thread::Builder::new()
            .name("ask-acceptor".into())
            .spawn(move || accept_loop(listener, state, stop))
            .map_err(|e| Error::new(Code::Io, format!("cannot start acceptor: {e}")))?
    };
    Ok(ServerHandle {
        state,
        stop,
        acceptor: Some(acceptor),
    })
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

fn accept_loop(listener: TcpListener, state: Arc<ServerState>, stop: Arc<AtomicBool>) {
    let active = Arc::new(AtomicUsize::new(0));
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, peer)) => admit(stream, peer, &state, &active),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let mut fds = [nix::poll::PollFd::new(
                    listener.as_fd(),
                    nix::poll::PollFlags::POLLIN,
                )];
                let _ = nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(ACCEPT_POLL_MS));
            }
            // EMFILE and friends: back off briefly instead of spinning.
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Gives the connection a thread, or a canned 429 when all are busy.
fn admit(
    mut stream: TcpStream,
    peer: SocketAddr,
    state: &Arc<ServerState>,
    active: &Arc<AtomicUsize>,
) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_nodelay(true);
    if active.fetch_add(1, Ordering::SeqCst) >= state.config.max_connections {
        active.fetch_sub(1, Ordering::SeqCst);
        let busy = ApiError::rate_limited("server busy: too many open connections");
        super::http::write_response(
            &mut stream,
            429,
            &busy.response().bytes(),
            Duration::from_millis(100),
        );
        return;
    }
    let (state, active2) = (state.clone(), active.clone());
    let spawned = std::thread::Builder::new()
        .name("ask-conn".into())
        .spawn(move || {
            serve_connection(stream, peer, &state);
            active2.fetch_sub(1, Ordering::SeqCst);
        });
    if spawned.is_err() {
        active.fetch_sub(1, Ordering::SeqCst);
    }
}

fn serve_connection(mut stream: TcpStream, peer: SocketAddr, state: &Arc<ServerState>) {
    let head_timeout = Duration::from_millis(state.config.header_timeout_ms);
    let body_timeout = Duration::from_millis(state.config.body_timeout_ms);
    let resp = match super::http::read_request(&mut stream, head_timeout, body_timeout) {
        Ok((head, body)) => {
            let req = Request {
                method: head.method,
                path: head.path,
                query: head.query,
                headers: head.headers,
                body,
                peer,
            };
            route(state, &req)
        }
        Err(super::http::ReadFailure::Reply(e)) => e.response(),
        Err(super::http::ReadFailure::Drop) => return,
    };
    super::http::write_response(&mut stream, resp.status, &resp.bytes(), WRITE_TIMEOUT);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_params_decode() {
        let req = Request {
            method: "GET".into(),
            path: "/ask/status".into(),
            query: "x=1&askId=a%2Db+c&bad=%zz".into(),
            headers: vec![],
            body: vec![],
            peer: "127.0.0.1:1".parse().unwrap(),
        };
        assert_eq!(req.query_param("askId").as_deref(), Some("a-b c"));
        assert_eq!(req.query_param("bad").as_deref(), Some("%zz"));
        assert_eq!(req.query_param("nope"), None);
    }
}
