//! The owner's approval page: `GET /owner` and its script, style, state, live event stream
//! (`/owner/events`, server-sent events) and decisions (`POST /owner/decide`), served on the
//! ask server's own port but only to loopback callers that name this server as their `Host`
//! (everyone else gets 404), and only with the owner's secret: 256 random bits made at start,
//! printed once on stderr as `http://127.0.0.1:PORT/owner?secret=…` and kept only in memory.
//! Opening that URL sets the secret as an `HttpOnly; SameSite=Strict` cookie for `/owner` and
//! redirects to the bare page, so the secret leaves the address bar, page script can never read
//! it, and the browser sends it with the `EventSource` stream (which cannot carry a custom
//! header) and with the page's own requests only. Every response carries a strict
//! Content-Security-Policy (no inline script), `X-Frame-Options: DENY`, `Cache-Control:
//! no-store` and `Referrer-Policy: no-referrer`. Decisions must be JSON from the page's own
//! `Origin`. The page renders friend text with `textContent` only.

use super::ServerState;
use super::http::{ApiError, Request};
use super::recommend::pending;
use super::tls::Wire;
use crate::config::internal::{
    OWNER_PAGE_HEARTBEAT, OWNER_PAGE_POLL, OWNER_PAGE_STREAM_DURATION, OWNER_PAGE_STREAMS_MAX,
    OWNER_PAGE_WRITE_TIMEOUT,
};
use serde_json::{Value, json};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

const PAGE_HTML: &str = include_str!("owner_page/page.html");
const PAGE_JS: &str = include_str!("owner_page/app.js");
const PAGE_CSS: &str = include_str!("owner_page/app.css");

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'none'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'";

/// The owner's secret and the open streams.
pub struct Owner {
    secret: String,
    streams: AtomicUsize,
}

impl Default for Owner {
    fn default() -> Self {
        Owner::new()
    }
}

impl Owner {
    /// A fresh secret of 256 random bits.
    pub fn new() -> Owner {
        let mut bits = [0u8; 32];
        crate::identity::random_bytes(&mut bits);
        Owner {
            secret: super::canon::b64url(&bits),
            streams: AtomicUsize::new(0),
        }
    }

    /// The URL the owner opens, for a server reachable at `addr`; `None` when `addr` is not a
    /// loopback address (the page is served to loopback callers only).
    pub fn url(&self, addr: SocketAddr) -> Option<String> {
        is_loopback(addr.ip()).then(|| format!("http://{addr}/owner?secret={}", self.secret))
    }
}

/// True for the paths this module answers.
pub fn is_owner_path(path: &str) -> bool {
    path == "/owner" || path.starts_with("/owner/")
}

/// True when `ip` is a loopback address, an IPv4-mapped one included.
pub fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => a.is_loopback(),
        IpAddr::V6(a) => a.is_loopback() || a.to_ipv4_mapped().is_some_and(|v| v.is_loopback()),
    }
}

/// One response of this module: status, content type, extra headers, body.
struct Reply {
    status: u16,
    content_type: &'static str,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
}

impl Reply {
    fn new(status: u16, content_type: &'static str, body: impl Into<Vec<u8>>) -> Reply {
        Reply {
            status,
            content_type,
            headers: Vec::new(),
            body: body.into(),
        }
    }
    fn json(status: u16, v: &Value) -> Reply {
        Reply::new(status, "application/json", v.to_string())
    }
    fn error(e: &ApiError) -> Reply {
        Reply::json(e.status, &e.response().body.unwrap_or(Value::Null))
    }
    fn text(status: u16, text: &str) -> Reply {
        Reply::new(status, "text/plain; charset=utf-8", format!("{text}\n"))
    }
}

/// The head every response of the page carries (no CORS headers: the page is same-origin).
fn head(status: u16, content_type: &str, extra: &[(&'static str, String)]) -> String {
    let mut out = format!(
        "HTTP/1.1 {status} {}\r\ncontent-type: {content_type}\r\n\
         content-security-policy: {CSP}\r\nx-frame-options: DENY\r\n\
         x-content-type-options: nosniff\r\ncache-control: no-store\r\n\
         referrer-policy: no-referrer\r\ncross-origin-opener-policy: same-origin\r\n\
         cross-origin-resource-policy: same-origin\r\n",
        super::http::reason(status)
    );
    for (k, v) in extra {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out
}

fn write_reply<S: Wire>(stream: &mut S, r: &Reply) {
    let mut bytes = head(r.status, r.content_type, &r.headers);
    bytes.push_str(&format!(
        "content-length: {}\r\nconnection: close\r\n\r\n",
        r.body.len()
    ));
    let mut bytes = bytes.into_bytes();
    bytes.extend_from_slice(&r.body);
    let _ = stream
        .socket()
        .set_write_timeout(Some(OWNER_PAGE_WRITE_TIMEOUT));
    let _ = stream.write_all(&bytes);
    let _ = stream.flush();
}

/// Serves one request to an `/owner` path on `stream`.
pub fn serve<S: Wire>(stream: &mut S, req: &Request, state: &Arc<ServerState>) {
    if !admitted(state, req) {
        // The same answer as an unknown path: a remote caller learns nothing of the page.
        let e = ApiError::not_found(format!(
            "unknown path {}",
            crate::sanitize::line(&req.path, 200)
        ));
        return write_reply(stream, &Reply::error(&e));
    }
    if (req.method.as_str(), req.path.as_str()) == ("GET", "/owner")
        && let Some(presented) = req.query_param("secret")
    {
        return write_reply(stream, &enter(state, &presented));
    }
    if !has_secret(state, req) {
        let text = "forbidden: open the owner URL that 'peer ask serve' printed on its stderr";
        return write_reply(stream, &Reply::text(403, text));
    }
    let reply = match (req.method.as_str(), req.path.as_str()) {
        ("GET", "/owner") => Reply::new(200, "text/html; charset=utf-8", PAGE_HTML),
        ("GET", "/owner/app.js") => Reply::new(200, "text/javascript; charset=utf-8", PAGE_JS),
        ("GET", "/owner/app.css") => Reply::new(200, "text/css; charset=utf-8", PAGE_CSS),
        ("GET", "/owner/state") => Reply::json(200, &snapshot(state)),
        ("GET", "/owner/events") => return events(stream, state),
        ("POST", "/owner/decide") => decide(state, req).unwrap_or_else(|e| Reply::error(&e)),
        (_, "/owner" | "/owner/app.js" | "/owner/app.css" | "/owner/state" | "/owner/events")
        | (_, "/owner/decide") => Reply::text(405, "method not allowed"),
        _ => Reply::text(404, "not found"),
    };
    write_reply(stream, &reply);
}

/// Loopback callers only, naming this server as their `Host`: a page on another site that
/// rebinds its name to 127.0.0.1 sends its own name and is refused before the secret matters.
fn admitted(state: &ServerState, req: &Request) -> bool {
    admits(req.ip(), req.header("host"), state.listen)
}

/// The rule of [`admitted`] on its own: a loopback caller naming a loopback host of this port.
pub fn admits(peer: IpAddr, host: Option<&str>, listen: SocketAddr) -> bool {
    is_loopback(peer) && host.is_some_and(|h| own_host(listen, h))
}

fn own_host(listen: SocketAddr, host: &str) -> bool {
    let port = listen.port();
    let host = host.trim();
    [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
    ]
    .iter()
    .any(|h| h.eq_ignore_ascii_case(host))
}

/// The cookie's name carries the port: cookies are shared by every port of a host.
fn cookie_name(state: &ServerState) -> String {
    format!("peer-owner-{}", state.listen.port())
}

fn has_secret(state: &ServerState, req: &Request) -> bool {
    let name = cookie_name(state);
    let presented = req
        .headers
        .iter()
        .filter(|(k, _)| k == "cookie")
        .flat_map(|(_, v)| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim());
    presented.is_some_and(|p| super::auth::secret_eq(p, &state.owner.secret))
}

/// `GET /owner?secret=…`: a matching secret becomes the cookie and the browser is sent to the
/// bare page; anything else is 403.
fn enter(state: &ServerState, presented: &str) -> Reply {
    if !super::auth::secret_eq(presented, &state.owner.secret) {
        return Reply::text(403, "forbidden: wrong owner secret");
    }
    let mut r = Reply::text(303, "see /owner");
    r.headers.push(("location", "/owner".into()));
    r.headers.push((
        "set-cookie",
        format!(
            "{}={}; Path=/owner; HttpOnly; SameSite=Strict",
            cookie_name(state),
            state.owner.secret
        ),
    ));
    r
}

/// What the page shows: pending asks and recommendations (no decision tokens, raw friend text
/// that the page puts into `textContent`).
fn snapshot(state: &ServerState) -> Value {
    let now = crate::clock::now_ms();
    let recs: Vec<Value> = pending::Store::new(&super::discovery::state_dir(&state.home))
        .list(now)
        .unwrap_or_default()
        .iter()
        .map(|p| {
            let mut v = serde_json::to_value(p.view(now)).unwrap_or_default();
            if let Some(m) = v.as_object_mut() {
                m.remove("card");
            }
            v
        })
        .collect();
    json!({
        "peer": state.config.caller_name,
        "asks": state.approvals.owner_list(),
        "recommendations": recs,
    })
}

/// `POST /owner/decide {kind: "ask"|"recommendation", id, decision}`.
fn decide(state: &ServerState, req: &Request) -> Result<Reply, ApiError> {
    same_origin_json(state, req)?;
    let body = req.json_object()?;
    let s = |k: &str| body.get(k).and_then(Value::as_str).unwrap_or("");
    match s("kind") {
        "ask" => {
            state.approvals.decide_as_owner(s("id"), s("decision"))?;
            Ok(Reply::json(200, &json!({"ok": true})))
        }
        "recommendation" => {
            let d = pending::Decision::parse(s("decision"))
                .ok_or_else(|| ApiError::bad_request("decision must be add or decline"))?;
            let v = super::discovery::decide(&state.home, s("id"), None, d, "ask", false).map_err(
                |e| match e.code {
                    crate::error::Code::NotFound => ApiError::not_found(e.message),
                    _ => ApiError::new(409, "not_added", e.message),
                },
            )?;
            Ok(Reply::json(200, &json!({"ok": true, "result": v})))
        }
        _ => Err(ApiError::bad_request("kind must be ask or recommendation")),
    }
}

/// A decision is JSON (a form or `text/plain` post from another page cannot be) and names this
/// page's own origin (every browser sends `Origin` on a `fetch` POST).
fn same_origin_json(state: &ServerState, req: &Request) -> Result<(), ApiError> {
    req.decision_is_json()?;
    let origin_ok = req.header("origin").is_some_and(|o| {
        o.strip_prefix("http://")
            .is_some_and(|host| own_host(state.listen, host))
    });
    if !origin_ok {
        return Err(ApiError::forbidden(
            "a decision must come from the owner page's own origin",
        ));
    }
    Ok(())
}

/// Takes one of the `OWNER_PAGE_STREAMS_MAX` stream places; gives it back when dropped.
struct StreamPlace<'a>(&'a AtomicUsize);

impl<'a> StreamPlace<'a> {
    fn take(n: &'a AtomicUsize) -> Option<StreamPlace<'a>> {
        n.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |k| {
            (k < OWNER_PAGE_STREAMS_MAX).then_some(k + 1)
        })
        .ok()
        .map(|_| StreamPlace(n))
    }
}

impl Drop for StreamPlace<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// `GET /owner/events`: the state now and on every change, a heartbeat while idle, for at most
/// `OWNER_PAGE_STREAM_DURATION`; ends early when a write fails or the server stops.
fn events<S: Wire>(stream: &mut S, state: &ServerState) {
    let Some(_place) = StreamPlace::take(&state.owner.streams) else {
        let e = ApiError::rate_limited(format!(
            "{OWNER_PAGE_STREAMS_MAX} owner pages are already open; close one"
        ));
        return write_reply(stream, &Reply::error(&e));
    };
    let _ = stream
        .socket()
        .set_write_timeout(Some(OWNER_PAGE_WRITE_TIMEOUT));
    let start = head(200, "text/event-stream", &[]) + "connection: close\r\n\r\nretry: 2000\n\n";
    if stream.write_all(start.as_bytes()).is_err() {
        return;
    }
    let began = Instant::now();
    let mut last = String::new();
    let mut quiet_since = Instant::now();
    while began.elapsed() < OWNER_PAGE_STREAM_DURATION && !state.stopping.load(Ordering::SeqCst) {
        let now = snapshot(state).to_string();
        let chunk = if now != last {
            last = now;
            format!("event: state\ndata: {last}\n\n")
        } else if quiet_since.elapsed() >= OWNER_PAGE_HEARTBEAT {
            ": heartbeat\n\n".to_string()
        } else if hung_up(stream.socket()) {
            return;
        } else {
            std::thread::sleep(OWNER_PAGE_POLL);
            continue;
        };
        quiet_since = Instant::now();
        if stream.write_all(chunk.as_bytes()).is_err() || stream.flush().is_err() {
            return;
        }
    }
}

/// True when the browser closed its side (a closed tab): its place is given back at once
/// instead of at the next failed write.
fn hung_up(sock: &std::net::TcpStream) -> bool {
    let mut b = [0u8; 1];
    if sock.set_nonblocking(true).is_err() {
        return false;
    }
    let r = sock.peek(&mut b);
    let _ = sock.set_nonblocking(false);
    matches!(r, Ok(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_addresses_are_loopback() {
        for a in ["127.0.0.1", "127.0.0.2", "::1", "::ffff:127.0.0.1"] {
            assert!(is_loopback(a.parse().unwrap()), "{a}");
        }
        for a in [
            "192.168.1.5",
            "10.0.0.1",
            "0.0.0.0",
            "::",
            "::ffff:10.0.0.1",
            "fe80::1",
            "2001:db8::1",
        ] {
            assert!(!is_loopback(a.parse().unwrap()), "{a}");
        }
    }

    #[test]
    fn remote_callers_and_foreign_host_names_are_not_admitted() {
        let listen: SocketAddr = "0.0.0.0:4100".parse().unwrap();
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        assert!(admits(lo, Some("127.0.0.1:4100"), listen));
        assert!(admits(lo, Some("localhost:4100"), listen));
        assert!(admits("::1".parse().unwrap(), Some("[::1]:4100"), listen));
        // A friend on the network, even naming the loopback host.
        let remote: IpAddr = "192.168.1.7".parse().unwrap();
        assert!(!admits(remote, Some("127.0.0.1:4100"), listen));
        assert!(!admits(remote, Some("192.168.1.5:4100"), listen));
        // DNS rebinding: a loopback caller (a browser) naming another site, or no host.
        assert!(!admits(lo, Some("evil.example:4100"), listen));
        assert!(!admits(lo, Some("127.0.0.1:4101"), listen));
        assert!(!admits(lo, None, listen));
    }

    #[test]
    fn the_url_is_for_loopback_only_and_carries_256_bits() {
        let o = Owner::new();
        assert_eq!(o.secret.len(), 43, "32 bytes in unpadded base64url");
        assert_ne!(o.secret, Owner::new().secret);
        let url = o.url("127.0.0.1:4100".parse().unwrap()).unwrap();
        assert_eq!(
            url,
            format!("http://127.0.0.1:4100/owner?secret={}", o.secret)
        );
        assert!(o.url("192.168.1.5:4100".parse().unwrap()).is_none());
    }

    #[test]
    fn every_reply_carries_the_browser_headers() {
        let h = head(200, "text/html", &[]);
        for needed in [
            "content-security-policy: default-src 'none'; script-src 'self';",
            "x-frame-options: DENY",
            "cache-control: no-store",
            "referrer-policy: no-referrer",
        ] {
            assert!(h.contains(needed), "{needed}");
        }
        assert!(!h.contains("access-control-allow-origin"));
        assert!(!CSP.contains("unsafe-inline"));
        assert!(!PAGE_HTML.contains("<script>"), "no inline script");
        assert!(
            !PAGE_JS.contains("innerHTML"),
            "peer text only as textContent"
        );
    }
}
