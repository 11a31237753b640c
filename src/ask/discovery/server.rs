//! The discovery endpoints of this ask server: `GET /advertise` (this agent's signed advert),
//! `GET /sign/card`, `POST /sign/verify`, `POST /recommend` (answered here or forwarded with
//! one hop less), `GET /recommend/pending` (refused: owner only) and `POST /friend/decision`;
//! the roster refresher a server starts; and this agent's own card.

use super::client::{fetch_advert_raw, fetch_adverts, fetch_card, forward};
use super::views::{card_view, verify_view};
use super::{RECOMMEND_PURPOSE, decide, node_budget_ms, state_dir};
use crate::ask::advertise::{self, Advert, AdvertSession, CheckedAdvert, Roster, Watched};
use crate::ask::card::{self, Card};
use crate::ask::config::{AskConfig, Friend};
use crate::ask::keys::AskKey;
use crate::ask::loose::{Loose, typed};
use crate::ask::recommend::{self, RecommendReply, RecommendRequest, Via, pending};
use crate::ask::server::{ApiError, Request, Response, ServerState};
use crate::config::internal::{ADVERT_CACHE_MS, CARD_FETCH_MS, ROSTER_FRESH_MS};
use crate::error::{Code, Error, Result};
use crate::{clock, sanitize};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

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
) -> Result<Option<crate::ask::server::ServerHandle>> {
    let mut cfg = AskConfig::load(home)?;
    if !cfg.listen {
        return Ok(None);
    }
    if cfg.workspace.is_none() {
        cfg.workspace = Some(workspace.to_path_buf());
    }
    crate::ask::server::start(home, cfg, None).map(Some)
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
        ("GET", "/advertise") => Ok(Response::ok_typed(&own_advert(state))),
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
fn own_advert(state: &ServerState) -> Advert {
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
) -> Advert {
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

fn live_sessions(home: &Path, workspace: &Path, now_ms: u64) -> Vec<AdvertSession> {
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
    Ok(Response::ok_typed(&card_view(&card, &state.key)))
}

fn verify_card(req: &Request) -> std::result::Result<Response, ApiError> {
    req.json_object()?;
    let body: CardBody = req.json_body()?;
    let Some(card_str) = typed(&body.card) else {
        return Err(ApiError::bad_request("card (string) is required"));
    };
    Ok(Response::ok_typed(&verify_view(card_str, clock::now_ms())))
}

fn handle_recommend(state: &ServerState, req: &Request) -> std::result::Result<Response, ApiError> {
    let body = req.json_object()?;
    let fields: RecommendRequest = req.json_body()?;
    if typed(&fields.protocol_version) != Some(&crate::ask::PROTOCOL_VERSION) {
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
            crate::ask::auth::not_denied(f)?;
            state.guard.charge_friend(&f.name, now)
        },
    )?;
    let r = recommend::parse_request(&friend.name, &fields).map_err(ApiError::bad_request)?;
    let roster = state.discovery.roster();
    let answer = recommend_here(&state.config, &state.key, roster.as_deref(), &r)?;
    Ok(Response::ok_typed(&answer))
}

fn no_recommendation(message: &str) -> ApiError {
    ApiError::new(404, "no_recommendation", message)
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
) -> std::result::Result<RecommendReply, ApiError> {
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
fn recommendation(card_str: String, c: &Card, via: Via) -> RecommendReply {
    RecommendReply {
        ok: true,
        from: Some(c.name.clone()),
        card: Some(card_str),
        via,
    }
}

/// What each candidate is known to know: the roster's fresh advert, else one fetched now.
fn known_of(
    candidates: &[&Friend],
    roster: Option<&Roster>,
    timeout_ms: u64,
) -> Vec<recommend::Known> {
    let now = clock::now_ms();
    let fresh = |f: &Friend| -> Option<CheckedAdvert> {
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

/// The body of `POST /sign/verify`.
#[derive(Default, Deserialize)]
struct CardBody {
    #[serde(default)]
    card: Option<Loose<String>>,
}

/// The body of `POST /friend/decision`.
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DecisionBody {
    #[serde(default)]
    decision: Option<Loose<String>>,
    #[serde(default)]
    rec_id: Option<Loose<String>>,
    #[serde(default)]
    token: Option<Loose<String>>,
}

/// The answer of `POST /friend/decision`: `{ok, peer?}`.
#[derive(Serialize)]
struct DecisionReply {
    ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    peer: Option<super::AddedPeer>,
}

fn friend_decision(state: &ServerState, req: &Request) -> std::result::Result<Response, ApiError> {
    // Token guessing is charged to the address like any refused authentication.
    let now = clock::now_ms();
    state.guard.admit_address(req.ip(), now)?;
    let refused = |message: String| {
        state.guard.note_failure(req.ip(), now);
        ApiError::forbidden(message)
    };
    req.json_object()?;
    let body: DecisionBody = req.json_body()?;
    let decision = typed(&body.decision)
        .and_then(|d| pending::Decision::parse(d))
        .ok_or_else(|| ApiError::bad_request("decision must be add or decline"))?;
    let (Some(rec_id), Some(token)) = (typed(&body.rec_id), typed(&body.token)) else {
        return Err(ApiError::bad_request(
            "recId and token (strings) are required",
        ));
    };
    match decide(&state.home, rec_id, Some(token), decision, "ask", false) {
        Ok(d) => Ok(Response::ok_typed(&DecisionReply {
            ok: true,
            peer: d.peer,
        })),
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
            serde_json::json!({"ask": {"peers": [{"name": "mute", "host": "127.0.0.1", "port": port, "token": "kQ3vZr8TnW1pLx6YcB0dHs4JmE9gUf2Ka7oRi5Nw-tA"}]}})
                .to_string()
                .as_bytes(),
        )
        .unwrap()
        .peers;
        let key = AskKey::from_seed(&[4u8; 32]);
        let req = recommend::parse_request("ada", &Default::default()).unwrap();
        let e = recommend_here(&c, &key, None, &req).unwrap_err();
        assert_eq!(e.code, "no_recommendation");
        assert!(e.message.contains("mute"), "{}", e.message);
    }
}
