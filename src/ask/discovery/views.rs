//! What front ends show of discovery (`peer ask`, the MCP ask tools, a root's ready line):
//! this server's listen line, a fresh or verified card, the friends listing from the roster.

use super::client::fetch_adverts;
use super::state_dir;
use crate::ask::advertise::AdvertSession;
use crate::ask::advertise::Roster;
use crate::ask::card;
use crate::ask::card::PeerView;
use crate::ask::config::{AskConfig, Friend};
use crate::ask::keys::AskKey;
use crate::clock;
use serde::Serialize;
use serde_json::value::RawValue;
use std::path::Path;

/// A running ask server for ready lines: `{listen, port, peer, fingerprint}`.
#[derive(Clone, Debug, Serialize)]
pub struct ServerView {
    pub listen: String,
    pub port: u16,
    pub peer: String,
    pub fingerprint: String,
}

/// `{listen, port, peer, fingerprint}` of a running ask server, for ready lines.
pub fn server_view(h: &crate::ask::server::ServerHandle) -> ServerView {
    ServerView {
        listen: h.state.listen.to_string(),
        port: h.state.listen.port(),
        peer: h.state.config.caller_name.clone(),
        fingerprint: h.state.key.fingerprint(),
    }
}

/// A fresh card of ours: `{card, name, host, port, publicKey, fingerprint, expiresAt}`.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CardView {
    pub card: String,
    pub name: String,
    pub host: String,
    pub port: u16,
    pub public_key: String,
    pub fingerprint: String,
    pub expires_at: String,
}

/// The view of a fresh card of ours.
pub fn card_view(card_str: &str, key: &AskKey) -> CardView {
    let parsed = card::parse(card_str).map(|(c, _)| c);
    let (name, host, port, expires) = match &parsed {
        Ok(c) => (c.name.clone(), c.host.clone(), c.port, c.expires_at()),
        Err(_) => (String::new(), String::new(), 0, 0),
    };
    CardView {
        card: card_str.to_string(),
        name,
        host,
        port,
        public_key: key.sign_string(),
        fingerprint: key.fingerprint(),
        expires_at: clock::iso8601(expires),
    }
}

/// What checking a card found: `{ok:true, peer, payload, fingerprint, expiresAt}` (the
/// payload is the signed document, without its signature) or `{ok:false, reason}`.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VerifyView {
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer: Option<PeerView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload: Option<Box<RawValue>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `/sign/verify` and `peer ask card verify`.
pub fn verify_view(card_str: &str, now_ms: u64) -> VerifyView {
    match card::verify(card_str, now_ms) {
        Ok(c) => VerifyView {
            ok: true,
            peer: Some(c.peer_view()),
            payload: crate::ask::canon::object_without(&c.document, &["signature"]),
            fingerprint: Some(crate::ask::canon::fingerprint(&c.key)),
            expires_at: Some(clock::iso8601(c.expires_at())),
            reason: None,
        },
        Err(e) => VerifyView {
            ok: false,
            peer: None,
            payload: None,
            fingerprint: None,
            expires_at: None,
            reason: Some(e.to_string()),
        },
    }
}

/// One configured friend in the peers listing, from the roster: who and where, whether its
/// last advert fetch worked, and that advert's checked text (empty when none is known).
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PeerListing {
    pub peer: String,
    pub host: String,
    pub port: u16,
    pub mode: &'static str,
    pub keyed: bool,
    pub fingerprint: Option<String>,
    pub reachable: bool,
    pub last_seen: Option<String>,
    pub age_ms: Option<u64>,
    pub signed: bool,
    pub description: String,
    pub tags: Vec<String>,
    pub workspace: String,
    pub sessions: Vec<AdvertSession>,
    pub error: Option<String>,
}

/// The peers listing: one object per configured friend, from the roster (refreshed first
/// when asked or empty). Shared by `peer ask peers` and the `peers_list` tool.
pub fn peers_listing(home: &Path, cfg: &AskConfig, refresh: bool) -> Vec<PeerListing> {
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
            let ad = s.advert_for(f.key.as_ref()).cloned().unwrap_or_default();
            PeerListing {
                peer: f.name.clone(),
                host: f.host.clone(),
                port: f.port,
                mode: f.mode.name(),
                keyed: f.key.is_some(),
                fingerprint: f.key.as_ref().map(crate::ask::canon::fingerprint),
                reachable: s.reachable(),
                last_seen: s.last_seen_ms.map(clock::iso8601),
                age_ms: s.last_seen_ms.map(|t| now.saturating_sub(t)),
                signed: ad.signed,
                description: ad.description,
                tags: ad.tags,
                workspace: ad.workspace,
                sessions: ad.sessions,
                error: s.last_error,
            }
        })
        .collect()
}
