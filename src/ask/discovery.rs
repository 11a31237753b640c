//! The discovery side of the ask server and its clients: `GET /advertise`, `GET /sign/card`,
//! `POST /sign/verify`, `POST /recommend` (answered and forwarded), `GET /recommend/pending`
//! (refused: owner only) and `POST /friend/decision`; the roster refresher; and the outbound
//! halves front ends call (fetch an advert or a card, ask a friend for a recommendation).
//!
//! Every card that reaches the owner has been verified against the recommended agent's own
//! key, and, when that agent is one of our friends, against the key we pinned for it.

pub mod friends;
pub mod tools;

use crate::config::internal::{
    ADVERT_CACHE_MS, CARD_FETCH_MS, RECOMMEND_FORWARD_MS_PER_HOP, ROSTER_FRESH_MS,
};

use super::advertise::{self, Roster, Watched};
use super::card::{self, Card};
use super::client;
use super::config::{AskConfig, Friend};
use super::keys::AskKey;
use super::recommend::{self, pending};
use super::server::{ApiError, Request, Response, ServerState};
use crate::error::{Code, Error, Result};
use crate::{clock, sanitize};
use parking_lot::Mutex;
use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// The `purpose` a signed `/recommend` body carries.
pub const RECOMMEND_PURPOSE: &str = "recommend";

/// Discovery state of one running server.
#[derive(Default)]
pub struct State {
    roster: OnceLock<Arc<Roster>>,
    advert: Mutex<Option<(u64, Value)>>,
}

impl State {
    /// The roster (empty until the server started).
    pub fn roster(&self) -> Option<Arc<Roster>> {
        self.roster.get().cloned()
    }
}

/// The directory of the owner's discovery state (`recommendations.json`, `roster.json`).
pub fn state_dir(home: &Path) -> PathBuf {
    home.join("ask")
}

/// Starts the roster refresher of a server; it ends when the server stops (it holds only a
/// weak reference, so it never keeps a stopped server alive).
pub fn on_start(state: &Arc<ServerState>) {
    let roster = Arc::new(Roster::new(Some(&state_dir(&state.home))));
    let _ = state.discovery.roster.set(roster.clone());
    let watched: Vec<Watched> = state.config.peers.iter().map(watched).collect();
    let friends = state.config.peers.clone();
    let server = Arc::downgrade(state);
    // The roster is an optimisation: without the thread, /recommend and peers fetch themselves.
    let _ = advertise::spawn_refresher(
        roster,
        state.config.roster_refresh_ms,
        watched,
        Box::new(
            move |name: &str| match friends.iter().find(|f| f.name == name) {
                Some(f) => fetch_advert_raw(f, crate::config::internal::ADVERT_FETCH_MS),
                None => Err("not a friend".into()),
            },
        ),
        Box::new(move || {
            server
                .upgrade()
                .is_none_or(|s| s.stopping.load(std::sync::atomic::Ordering::SeqCst))
        }),
    );
}

/// The ask server a session root (`peer host`, `peer mcp`) runs beside itself when the
/// namespace's `ask.listen` is true; answers run in `ask.workspace`, else the root's
/// workspace. `None` when `listen` is false.
pub fn serve_beside_root(
    home: &Path,
    workspace: &Path,
) -> Result<Option<super::server::ServerHandle>> {
    let mut cfg = AskConfig::load(home)?;
    if !cfg.listen {
        return Ok(None);
    }
    if cfg.workspace.is_none() {
        cfg.workspace = Some(workspace.to_path_buf());
    }
    super::server::start(home, cfg, None).map(Some)
}

/// `{listen, port, peer, fingerprint}` of a running ask server, for ready lines.
pub fn server_view(h: &super::server::ServerHandle) -> Value {
    json!({
        "listen": h.state.listen.to_string(),
        "port": h.state.listen.port(),
        "peer": h.state.config.caller_name,
        "fingerprint": h.state.key.fingerprint(),
    })
}

fn watched(f: &Friend) -> Watched {
    Watched {
        name: f.name.clone(),
        key: f.key,
    }
}

/// Answers the discovery endpoints; `None` for every other path.
pub fn route(state: &Arc<ServerState>, req: &Request) -> Option<Response> {
    let result = match (req.method.as_str(), req.path.as_str()) {
        ("GET", "/advertise") => Ok(Response::ok(own_advert(state))),
        ("GET", "/sign/card") => sign_card(state),
        ("POST", "/sign/verify") => verify_card(req),
        ("POST", "/recommend") => handle_recommend(state, req),
        ("GET", "/recommend/pending") => Err(ApiError::forbidden(
            "pending recommendations and their decision tokens are shown only to the owner: \
             run 'peer ask friends pending' on this machine",
        )),
        ("POST", "/friend/decision") => friend_decision(state, req),
        _ => return None,
    };
    Some(result.unwrap_or_else(|e| e.response()))
}

/// This agent's advert, signed, recomputed at most once per [`ADVERT_CACHE_MS`].
fn own_advert(state: &ServerState) -> Value {
    let now = clock::now_ms();
    let mut cache = state.discovery.advert.lock();
    if let Some((at, v)) = &*cache
        && now.saturating_sub(*at) < ADVERT_CACHE_MS
    {
        return v.clone();
    }
    let v = build_advert(
        &state.home,
        &state.config,
        &state.workspace,
        &state.key,
        now,
    );
    *cache = Some((now, v.clone()));
    v
}

/// Builds and signs the advert of the namespace at `home`.
pub fn build_advert(
    home: &Path,
    cfg: &AskConfig,
    workspace: &Path,
    key: &AskKey,
    now_ms: u64,
) -> Value {
    let sessions = live_sessions(home, workspace, now_ms);
    let local = advertise::Local {
        name: &cfg.caller_name,
        description: &cfg.description,
        tags: &cfg.tags,
        workspace,
    };
    let unsigned = advertise::build(&local, sessions, now_ms);
    advertise::sign(unsigned, &key.public(), |m| key.sign(m))
}

fn live_sessions(home: &Path, workspace: &Path, now_ms: u64) -> Vec<Value> {
    // The advert is best effort about sessions: an unreadable presence directory shows none.
    let Ok(config) = crate::config::Config::load(home) else {
        return Vec::new();
    };
    let ns = crate::paths::Namespace::new(home.to_path_buf(), &config);
    match crate::presence::read_all(&ns.active_agents(), &config.limits, now_ms) {
        Ok(entries) => advertise::sessions(&entries, workspace, now_ms),
        Err(_) => Vec::new(),
    }
}

/// The host a card of ours names: `explicit`, else `advertisedHost`, else `listenHost` when
/// it is a real address. A wildcard listen host is not silently turned into loopback (a
/// friend on another machine could never reach that): the owner must say.
pub fn card_host(cfg: &AskConfig, explicit: Option<&str>) -> Result<String> {
    if let Some(h) = explicit {
        return Ok(h.to_string());
    }
    if let Some(h) = &cfg.advertised_host {
        return Ok(h.clone());
    }
    let h = cfg
        .listen_host
        .trim_start_matches('[')
        .trim_end_matches(']');
    let wildcard = h
        .parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_unspecified());
    if wildcard || h.is_empty() {
        return Err(Error::new(
            Code::ConfigInvalid,
            format!(
                "ask.listenHost {:?} listens on every address, so it names none a friend can reach: \
                 set ask.advertisedHost to this machine's address (or pass --host)",
                sanitize::line(&cfg.listen_host, 60)
            ),
        ));
    }
    Ok(h.to_string())
}

/// Issues a card for this agent.
pub fn own_card(cfg: &AskConfig, key: &AskKey, host: &str, port: u16, now_ms: u64) -> String {
    let public = key.public();
    card::issue(
        &card::Issue {
            name: &cfg.caller_name,
            host,
            port,
            public: &public,
            description: &cfg.description,
            tags: &cfg.tags,
            issued: now_ms,
            // The ask server always answers TLS with this key on its port.
            tls: true,
        },
        |m| key.sign(m),
    )
}

/// `{card, name, host, port, publicKey, fingerprint, expiresAt}` for a fresh card.
pub fn card_view(card_str: &str, key: &AskKey) -> Value {
    let parsed = card::parse(card_str).map(|(c, _)| c);
    let (name, host, port, expires) = match &parsed {
        Ok(c) => (c.name.clone(), c.host.clone(), c.port, c.expires_at()),
        Err(_) => (String::new(), String::new(), 0, 0),
    };
    json!({
        "card": card_str,
        "name": name,
        "host": host,
        "port": port,
        "publicKey": key.sign_string(),
        "fingerprint": key.fingerprint(),
        "expiresAt": clock::iso8601(expires),
    })
}

fn sign_card(state: &ServerState) -> std::result::Result<Response, ApiError> {
    let host =
        card_host(&state.config, None).map_err(|e| ApiError::new(500, "internal", e.message))?;
    let card = own_card(
        &state.config,
        &state.key,
        &host,
        state.listen.port(),
        clock::now_ms(),
    );
    Ok(Response::ok(card_view(&card, &state.key)))
}

/// `/sign/verify` and `peer ask card verify`: `{ok:true, peer, payload, fingerprint,
/// expiresAt}` or `{ok:false, reason}`.
pub fn verify_view(card_str: &str, now_ms: u64) -> Value {
    match card::verify(card_str, now_ms) {
        Ok(c) => json!({
            "ok": true,
            "peer": c.peer_view(),
            "payload": c.payload,
            "fingerprint": super::canon::fingerprint(&c.key),
            "expiresAt": clock::iso8601(c.expires_at()),
        }),
        Err(e) => json!({"ok": false, "reason": e.to_string()}),
    }
}

fn verify_card(req: &Request) -> std::result::Result<Response, ApiError> {
    let body = req.json_object()?;
    let Some(card_str) = body.get("card").and_then(Value::as_str) else {
        return Err(ApiError::bad_request("card (string) is required"));
    };
    Ok(Response::ok(verify_view(card_str, clock::now_ms())))
}

fn handle_recommend(state: &ServerState, req: &Request) -> std::result::Result<Response, ApiError> {
    let body = req.json_object()?;
    if body.get("protocolVersion").and_then(Value::as_u64) != Some(super::PROTOCOL_VERSION) {
        return Err(ApiError::bad_request(
            "protocolVersion 1 and a caller are required",
        ));
    }
    let now = clock::now_ms();
    // Unlike dsh-ask-peer, `deny` also refuses recommendations: they would reveal this
    // owner's friends to someone the owner refuses. Each one spends the friend's budget,
    // since it can cost several outbound fetches.
    let friend = state.guard.authenticate_request(
        &state.config,
        req,
        &body,
        RECOMMEND_PURPOSE,
        now,
        |f| {
            super::auth::not_denied(f)?;
            state.guard.charge_friend(&f.name, now)
        },
    )?;
    let r = recommend::parse_request(&friend.name, &Value::Object(body))
        .map_err(ApiError::bad_request)?;
    let roster = state.discovery.roster();
    let answer = recommend_here(&state.config, &state.key, roster.as_deref(), &r)?;
    Ok(Response::ok(answer))
}

/// A friend's JSON answer to `GET path`, or the one-line reason it failed.
fn get_from(f: &Friend, path: &str, timeout_ms: u64) -> std::result::Result<Value, String> {
    super::tls::target(f, None)
        .and_then(|t| client::get_json_from(&t, path, Duration::from_millis(timeout_ms)))
        .and_then(client::Reply::into_result)
        .map_err(|e| e.message)
}

/// One friend's card: `GET /sign/card`, verified, naming that friend, with the pinned key
/// when we pinned one.
pub fn fetch_card(
    f: &Friend,
    timeout_ms: u64,
    now_ms: u64,
) -> std::result::Result<(String, Card), String> {
    let body = get_from(f, "/sign/card", timeout_ms)?;
    let card_str = body
        .get("card")
        .and_then(Value::as_str)
        .ok_or("the answer carries no card")?;
    let c = card::verify(card_str, now_ms).map_err(|e| e.to_string())?;
    if c.name != f.name {
        return Err(format!(
            "the card names {:?}, not {:?}",
            sanitize::line(&c.name, 64),
            f.name
        ));
    }
    if f.key.is_some_and(|k| k != c.key) {
        return Err("the card's key is not the key pinned for this friend".into());
    }
    Ok((card_str.to_string(), c))
}

/// One friend's advert as received (checked by the caller).
fn fetch_advert_raw(f: &Friend, timeout_ms: u64) -> std::result::Result<Value, String> {
    let v = get_from(f, "/advertise", timeout_ms)?;
    if v.to_string().len() > crate::config::internal::ADVERT_BYTES_MAX {
        return Err(format!(
            "advert is larger than {} bytes",
            crate::config::internal::ADVERT_BYTES_MAX
        ));
    }
    Ok(v)
}

/// One friend's checked advert, fetched now.
pub fn fetch_advert(f: &Friend, timeout_ms: u64) -> std::result::Result<Value, String> {
    fetch_advert_raw(f, timeout_ms)
        .and_then(|v| advertise::check(&f.name, f.key.as_ref(), &v, clock::now_ms()))
}

/// Fetches the adverts of `friends` now, a bounded number at a time
/// ([`crate::config::internal::ADVERT_FETCH_PARALLEL`]).
pub fn fetch_adverts(
    friends: &[Friend],
    timeout_ms: u64,
) -> Vec<(String, std::result::Result<Value, String>)> {
    let mut out = Vec::with_capacity(friends.len());
    for chunk in friends.chunks(crate::config::internal::ADVERT_FETCH_PARALLEL) {
        std::thread::scope(|s| {
            let handles: Vec<_> = chunk
                .iter()
                .map(|f| s.spawn(move || (f.name.clone(), fetch_advert(f, timeout_ms))))
                .collect();
            for h in handles {
                if let Ok(r) = h.join() {
                    out.push(r);
                }
            }
        });
    }
    out
}

/// The peers listing: one object per configured friend, from the roster (refreshed first
/// when asked or empty). Shared by `peer ask peers` and the `peers_list` tool.
pub fn peers_listing(home: &Path, cfg: &AskConfig, refresh: bool) -> Vec<Value> {
    let roster = Roster::new(Some(&state_dir(home)));
    let mut seen = roster.snapshot();
    let now = clock::now_ms();
    // Fetch the friends never tried, and, with a refresh interval, those tried longer ago than
    // it (no server may be running to keep the roster fresh); the rest come from the roster.
    let every = cfg
        .roster_refresh_ms
        .max(crate::config::internal::ROSTER_REFRESH_MS_MIN);
    let due: Vec<Friend> = cfg
        .peers
        .iter()
        .filter(|f| {
            refresh
                || match seen.get(&f.name).and_then(|s| s.checked_at_ms) {
                    None => true,
                    Some(at) => cfg.roster_refresh_ms > 0 && now.saturating_sub(at) > every,
                }
        })
        .cloned()
        .collect();
    if !due.is_empty() {
        for (name, got) in fetch_adverts(&due, crate::config::internal::ADVERT_FETCH_MS) {
            let pinned = cfg.friend(&name).and_then(|f| f.key);
            roster.record(&name, pinned.as_ref(), got, clock::now_ms());
        }
        roster.save();
        seen = roster.snapshot();
    }
    let now = clock::now_ms();
    cfg.peers
        .iter()
        .map(|f| {
            let s = seen.get(&f.name).cloned().unwrap_or_default();
            let ad = s.advert_for(f.key.as_ref()).cloned().unwrap_or(Value::Null);
            json!({
                "peer": f.name,
                "host": f.host,
                "port": f.port,
                "mode": f.mode.name(),
                "keyed": f.key.is_some(),
                "fingerprint": f.key.as_ref().map(super::canon::fingerprint),
                "reachable": s.reachable(),
                "lastSeen": s.last_seen_ms.map(clock::iso8601),
                "ageMs": s.last_seen_ms.map(|t| now.saturating_sub(t)),
                "signed": ad.get("signed").cloned().unwrap_or(json!(false)),
                "description": ad.get("description").cloned().unwrap_or(json!("")),
                "tags": ad.get("tags").cloned().unwrap_or(json!([])),
                "workspace": ad.get("workspace").cloned().unwrap_or(json!("")),
                "sessions": ad.get("sessions").cloned().unwrap_or(json!([])),
                "error": s.last_error,
            })
        })
        .collect()
}

fn no_recommendation(message: &str) -> ApiError {
    ApiError::new(404, "no_recommendation", message)
}

/// The time one node spends on a request that may still travel `hops`: a parent waits as long
/// for a forwarded request (see `forward`), so every fetch below is clipped to what is left
/// and a request tree never outlives its root's wait.
pub fn node_budget_ms(hops: u64) -> u64 {
    RECOMMEND_FORWARD_MS_PER_HOP * (hops + 1) + CARD_FETCH_MS
}

/// Milliseconds left before `deadline`.
fn left_ms(deadline: Instant) -> u64 {
    u64::try_from(
        deadline
            .saturating_duration_since(Instant::now())
            .as_millis(),
    )
    .unwrap_or(0)
}

/// Answers one `/recommend` at this node: score the candidates' adverts (the roster's when
/// fresh, else fetched now), try the best cards directly, forward with one hop less, fall back
/// to any friend's card; `{ok, from, card, via?}` or 404 `no_recommendation`.
pub fn recommend_here(
    cfg: &AskConfig,
    key: &AskKey,
    roster: Option<&Roster>,
    req: &recommend::Request,
) -> std::result::Result<Value, ApiError> {
    let me = cfg.caller_name.as_str();
    let candidates = candidates_of(cfg, req)?;
    let deadline = Instant::now() + Duration::from_millis(node_budget_ms(req.max_hops));
    let known = known_of(
        &candidates,
        roster,
        crate::config::internal::ADVERT_FETCH_MS.min(left_ms(deadline) / 2),
    );
    let plan = recommend::plan(&known, req);
    let now = clock::now_ms();
    // Below this much time a fetch is not started: the answer would come too late anyway.
    let enough = |ms: u64| ms >= 100;
    let mut tried: Vec<String> = Vec::new();
    let mut errors: Vec<String> = Vec::new();
    for name in &plan.direct {
        let Some(f) = cfg.friend(name) else { continue };
        let t = CARD_FETCH_MS.min(left_ms(deadline));
        if !enough(t) {
            break;
        }
        tried.push(name.clone());
        match fetch_card(f, t, now) {
            Ok((s, c)) => return Ok(recommendation(s, &c, recommend::via(me, req, None))),
            Err(e) => errors.push(format!("{name}: {e}")),
        }
    }
    for name in &plan.forward {
        let Some(f) = cfg.friend(name) else { continue };
        let t = left_ms(deadline);
        if !enough(t) {
            break;
        }
        match forward(cfg, key, f, req, t) {
            Ok((s, c, child)) => {
                return Ok(recommendation(s, &c, recommend::via(me, req, Some(&child))));
            }
            Err(e) => errors.push(format!("{name} (forwarded): {e}")),
        }
    }
    for name in plan.fallback.iter().filter(|n| !tried.contains(n)) {
        let Some(f) = cfg.friend(name) else { continue };
        let t = CARD_FETCH_MS.min(left_ms(deadline));
        if !enough(t) {
            errors.push("the time budget of this request is spent".into());
            break;
        }
        match fetch_card(f, t, now) {
            Ok((s, c)) => return Ok(recommendation(s, &c, recommend::via(me, req, None))),
            Err(e) => errors.push(format!("{name}: {e}")),
        }
    }
    let missed = plan.direct.is_empty() && plan.fallback.is_empty();
    Err(no_recommendation(&no_match_text(req, missed, errors)))
}

/// Why a `/recommend` found nobody: that no friend here matched the topic, and the friends
/// that failed.
fn no_match_text(req: &recommend::Request, missed: bool, errors: Vec<String>) -> String {
    let mut parts = Vec::new();
    if let (true, Some(t)) = (missed, &req.topic) {
        parts.push(format!(
            "no friend here advertises {:?}",
            sanitize::line(t, 80)
        ));
    }
    parts.extend(errors);
    format!("no reachable friend to recommend ({})", parts.join("; "))
}

/// The friends a `/recommend` may name: every friend but the ones already visited.
fn candidates_of<'a>(
    cfg: &'a AskConfig,
    req: &recommend::Request,
) -> std::result::Result<Vec<&'a Friend>, ApiError> {
    if cfg.peers.is_empty() {
        return Err(no_recommendation("you have no friends to recommend"));
    }
    let names: Vec<String> = cfg.peers.iter().map(|f| f.name.clone()).collect();
    let candidates: Vec<&Friend> = recommend::candidates(&names, req, &cfg.caller_name)
        .iter()
        .filter_map(|n| cfg.friend(n))
        .collect();
    if candidates.is_empty() {
        return Err(no_recommendation(
            "no friend is left to recommend (all were already visited)",
        ));
    }
    Ok(candidates)
}

/// A `/recommend` answer: `{ok, from, card, via?}`.
fn recommendation(card_str: String, c: &Card, via: Vec<String>) -> Value {
    let mut m = Map::new();
    m.insert("ok".into(), json!(true));
    m.insert("from".into(), json!(c.name));
    m.insert("card".into(), json!(card_str));
    if !via.is_empty() {
        m.insert("via".into(), json!(via));
    }
    Value::Object(m)
}

/// What each candidate is known to know: the roster's fresh advert, else one fetched now.
fn known_of(
    candidates: &[&Friend],
    roster: Option<&Roster>,
    timeout_ms: u64,
) -> Vec<recommend::Known> {
    let now = clock::now_ms();
    let fresh = |f: &Friend| -> Option<Value> {
        let seen = roster?.get(&f.name)?;
        let at = seen.last_seen_ms?;
        let advert = seen.advert_for(f.key.as_ref())?.clone();
        (now.saturating_sub(at) <= ROSTER_FRESH_MS).then_some(advert)
    };
    let stale: Vec<Friend> = candidates
        .iter()
        .filter(|f| fresh(f).is_none())
        .map(|f| (*f).clone())
        .collect();
    let fetched = fetch_adverts(&stale, timeout_ms);
    candidates
        .iter()
        .map(|f| {
            let advert = fresh(f).or_else(|| {
                fetched
                    .iter()
                    .find(|(n, _)| n == &f.name)
                    .and_then(|(_, r)| r.as_ref().ok().cloned())
            });
            recommend::Known::from_advert(&f.name, advert.as_ref())
        })
        .collect()
}

/// Forwards `req` to friend `f` with one hop less and this node added to the path, signed by
/// this node, waiting at most the child's budget (and what this node has left). The answer's card must verify against its own key and name the agent `from`
/// names.
fn forward(
    cfg: &AskConfig,
    key: &AskKey,
    f: &Friend,
    req: &recommend::Request,
    left_ms: u64,
) -> std::result::Result<(String, Card, Vec<String>), String> {
    let hops = req.max_hops.saturating_sub(1);
    let path = recommend::forward_path(req, &cfg.caller_name);
    let timeout = node_budget_ms(hops).min(left_ms);
    let reply = post_recommend(cfg, key, f, req.topic.as_deref(), hops, &path, timeout)
        .map_err(|e| e.message)?;
    let (card_str, c) = checked_answer(&reply, clock::now_ms())?;
    let via = recommend::clean_via(reply.get("via"));
    Ok((card_str, c, via))
}

/// The card of a `/recommend` answer, verified against its own key, and naming `from`.
pub fn checked_answer(reply: &Value, now_ms: u64) -> std::result::Result<(String, Card), String> {
    let card_str = reply
        .get("card")
        .and_then(Value::as_str)
        .ok_or("the answer carries no card")?;
    let c =
        card::verify(card_str, now_ms).map_err(|e| format!("recommended card is invalid: {e}"))?;
    if reply.get("from").and_then(Value::as_str) != Some(c.name.as_str()) {
        return Err("the answer's `from` is not the name on the card".into());
    }
    Ok((card_str.to_string(), c))
}

/// Adds our credentials for friend `f` to an outbound body, as the core's asks do: the
/// friend's token when one is configured, and our replay-safe signature unless the
/// connection itself proves us (`t` is mutual TLS), so either kind of entry for us on the
/// other side authenticates it.
pub fn credentials(
    key: &AskKey,
    f: &Friend,
    t: &super::tls::Target,
    mut body: Map<String, Value>,
    purpose: &str,
) -> Value {
    if let Some(t) = &f.token {
        body.insert("token".into(), json!(t));
    }
    if !t.proves_caller() {
        super::auth::sign_body(key, &mut body, purpose, &f.name, clock::now_ms());
    }
    Value::Object(body)
}

/// `POST /recommend` to friend `f`, authenticated and signed like an ask.
pub fn post_recommend(
    cfg: &AskConfig,
    key: &AskKey,
    f: &Friend,
    topic: Option<&str>,
    max_hops: u64,
    path: &[String],
    timeout_ms: u64,
) -> Result<Value> {
    let mut body = Map::new();
    body.insert("protocolVersion".into(), json!(super::PROTOCOL_VERSION));
    body.insert("caller".into(), json!(cfg.caller_name));
    if let Some(t) = topic {
        body.insert("topic".into(), json!(t));
    }
    // As dsh's client: maxHops only when positive, path only when non-empty.
    if max_hops > 0 {
        body.insert("maxHops".into(), json!(max_hops));
    }
    if !path.is_empty() {
        body.insert("path".into(), json!(path));
    }
    let target = super::tls::target(f, Some(key))?;
    let body = credentials(key, f, &target, body, RECOMMEND_PURPOSE);
    client::post_json_to(
        &target,
        "/recommend",
        &body,
        Duration::from_millis(timeout_ms),
    )?
    .into_result()
}

/// What the owner's side does with a recommendation: ask friend `peer`, verify the card,
/// and keep it waiting for the owner's decision. Returns the view front ends show.
pub fn request_recommendation(
    home: &Path,
    cfg: &AskConfig,
    key: &AskKey,
    peer: &str,
    topic: Option<&str>,
    max_hops: u64,
) -> Result<Value> {
    let f = cfg.friend(peer).ok_or_else(|| {
        Error::new(
            Code::NotFound,
            format!(
                "{:?} is not a configured friend (ask.peers)",
                sanitize::line(peer, 64)
            ),
        )
    })?;
    let hops = max_hops.min(crate::config::internal::RECOMMEND_HOPS_MAX);
    // The friend's own budget, plus the network and its bookkeeping.
    let timeout = node_budget_ms(hops) + 1_000;
    let reply = post_recommend(cfg, key, f, topic, hops, &[], timeout)?;
    let now = clock::now_ms();
    let (card_str, c) = checked_answer(&reply, now).map_err(|e| Error::new(Code::AuthFailed, e))?;
    let via = recommend::clean_via(reply.get("via"));
    let mut out = json!({
        "peer": peer,
        "from": c.name,
        "recommended": c.peer_view(),
        "via": via,
        "fingerprint": super::canon::fingerprint(&c.key),
    });
    if c.key == key.public() {
        out["status"] = json!("self");
        return Ok(out);
    }
    if cfg.peers.iter().any(|p| p.key == Some(c.key)) {
        out["status"] = json!("already_a_friend");
        return Ok(out);
    }
    let store = pending::Store::new(&state_dir(home));
    let p = store.add(
        peer,
        via,
        &card_str,
        &c.public_key,
        topic.map(str::to_string),
        now,
    )?;
    out["recId"] = json!(p.rec_id);
    out["status"] = json!("awaiting_user_approval");
    Ok(out)
}

/// Carries out the owner's decision on a waiting recommendation (`token` on the HTTP path).
/// `add` re-verifies the card and adds it to `ask.peers` (never replacing a friend of the
/// same name with another key unless `replace`).
pub fn decide(
    home: &Path,
    rec_id: &str,
    token: Option<&str>,
    decision: pending::Decision,
    mode: &str,
    replace: bool,
) -> Result<Value> {
    let store = pending::Store::new(&state_dir(home));
    let now = clock::now_ms();
    store.decide(rec_id, token, now, |p| match decision {
        pending::Decision::Decline => Ok(json!({"recId": p.rec_id, "decision": "declined"})),
        pending::Decision::Add => {
            let c = card::verify(&p.card, now).map_err(|e| {
                Error::new(
                    Code::AuthFailed,
                    format!("the recommended card no longer verifies: {e}"),
                )
            })?;
            let merged = friends::add_to_config(home, &c, mode, replace, |bytes| {
                AskConfig::parse(bytes).map(|_| ())
            })?;
            Ok(json!({
                "recId": p.rec_id,
                "decision": "added",
                "result": merged.name(),
                "peer": {"name": c.name, "host": c.host, "port": c.port},
            }))
        }
    })
}

fn friend_decision(state: &ServerState, req: &Request) -> std::result::Result<Response, ApiError> {
    // Token guessing is charged to the address like any refused authentication.
    let now = clock::now_ms();
    state.guard.admit_address(req.ip(), now)?;
    let refused = |message: String| {
        state.guard.note_failure(req.ip(), now);
        ApiError::forbidden(message)
    };
    let body = req.json_object()?;
    let decision = body
        .get("decision")
        .and_then(Value::as_str)
        .and_then(pending::Decision::parse)
        .ok_or_else(|| ApiError::bad_request("decision must be add or decline"))?;
    let (Some(rec_id), Some(token)) = (
        body.get("recId").and_then(Value::as_str),
        body.get("token").and_then(Value::as_str),
    ) else {
        return Err(ApiError::bad_request(
            "recId and token (strings) are required",
        ));
    };
    match decide(&state.home, rec_id, Some(token), decision, "ask", false) {
        Ok(v) => {
            let mut out = json!({"ok": true});
            if let Some(peer) = v.get("peer") {
                out["peer"] = peer.clone();
            }
            Ok(Response::ok(out))
        }
        // An unknown id and a wrong token look alike to a caller without the token.
        Err(e) if e.code == Code::NotFound || e.message == pending::INVALID_TOKEN => {
            Err(refused(pending::INVALID_TOKEN.to_string()))
        }
        Err(e) if e.code == Code::AuthFailed => Err(ApiError::forbidden(e.message)),
        Err(e) => Err(ApiError::internal(e.message)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(listen_host: &str, advertised: Option<&str>) -> AskConfig {
        AskConfig {
            listen_host: listen_host.into(),
            advertised_host: advertised.map(str::to_string),
            ..AskConfig::default()
        }
    }

    #[test]
    fn cards_name_a_reachable_host_or_none() {
        for wildcard in ["0.0.0.0", "::", "[::]", ""] {
            let e = card_host(&cfg(wildcard, None), None).unwrap_err();
            assert_eq!(e.code, Code::ConfigInvalid);
            assert!(e.message.contains("advertisedHost"), "{}", e.message);
        }
        assert_eq!(
            card_host(&cfg("0.0.0.0", Some("10.0.0.5")), None).unwrap(),
            "10.0.0.5"
        );
        assert_eq!(
            card_host(&cfg("0.0.0.0", None), Some("h.example")).unwrap(),
            "h.example"
        );
        assert_eq!(
            card_host(&cfg("192.0.2.4", None), None).unwrap(),
            "192.0.2.4"
        );
        assert_eq!(
            card_host(&cfg("[2001:db8::1]", None), None).unwrap(),
            "2001:db8::1"
        );
    }

    #[test]
    fn a_silent_friend_costs_a_bounded_wait_and_no_recommendation() {
        // A listener that never answers: connections complete in its backlog, replies never
        // come, so every fetch runs into its (clipped) timeout.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = silent.local_addr().unwrap().port();
        let mut c = cfg("127.0.0.1", None);
        c.caller_name = "bob".into();
        c.peers = AskConfig::parse(
            json!({"ask": {"peers": [{"name": "mute", "host": "127.0.0.1", "port": port, "token": "kQ3vZr8TnW1pLx6YcB0dHs4JmE9gUf2Ka7oRi5Nw-tA"}]}})
                .to_string()
                .as_bytes(),
        )
        .unwrap()
        .peers;
        let key = AskKey::from_seed(&[4u8; 32]);
        let req = recommend::parse_request("ada", &json!({"maxHops": 0})).unwrap();
        let e = recommend_here(&c, &key, None, &req).unwrap_err();
        assert_eq!(e.code, "no_recommendation");
        assert!(e.message.contains("mute"), "{}", e.message);
    }

    #[test]
    fn a_recommendation_must_name_its_own_card() {
        let key = AskKey::from_seed(&[3u8; 32]);
        let c = cfg("127.0.0.1", None);
        let now = clock::now_ms();
        let card_str = own_card(&c, &key, "127.0.0.1", 9, now);
        let ok = json!({"ok": true, "from": "local", "card": card_str});
        assert_eq!(checked_answer(&ok, now).unwrap().1.name, "local");
        let lying = json!({"ok": true, "from": "carol", "card": card_str});
        assert!(checked_answer(&lying, now).is_err());
        let expired = json!({"ok": true, "from": "local", "card": card_str});
        assert!(checked_answer(&expired, now + crate::config::internal::CARD_TTL_MS + 1).is_err());
        assert!(checked_answer(&json!({"ok": true, "from": "local"}), now).is_err());
    }
}
