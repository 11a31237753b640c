//! What front ends show of discovery (`peer ask`, the MCP ask tools, a root's ready line):
//! this server's listen line, a fresh or verified card, the friends listing from the roster.

use super::client::fetch_adverts;
use super::state_dir;
use crate::ask::advertise::Roster;
use crate::ask::card;
use crate::ask::config::{AskConfig, Friend};
use crate::ask::keys::AskKey;
use crate::clock;
use serde_json::{Value, json};
use std::path::Path;

/// `{listen, port, peer, fingerprint}` of a running ask server, for ready lines.
pub fn server_view(h: &crate::ask::server::ServerHandle) -> Value {
    json!({
        "listen": h.state.listen.to_string(),
        "port": h.state.listen.port(),
        "peer": h.state.config.caller_name,
        "fingerprint": h.state.key.fingerprint(),
    })
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

/// A card document minus its `signature`: the signed object, as shown.
fn payload_of(document: &str) -> Value {
    let mut v: Value = serde_json::from_str(document).unwrap_or_default();
    if let Some(m) = v.as_object_mut() {
        m.remove("signature");
    }
    v
}

/// `/sign/verify` and `peer ask card verify`: `{ok:true, peer, payload, fingerprint,
/// expiresAt}` or `{ok:false, reason}`.
pub fn verify_view(card_str: &str, now_ms: u64) -> Value {
    match card::verify(card_str, now_ms) {
        Ok(c) => json!({
            "ok": true,
            "peer": c.peer_view(),
            "payload": payload_of(&c.document),
            "fingerprint": crate::ask::canon::fingerprint(&c.key),
            "expiresAt": clock::iso8601(c.expires_at()),
        }),
        Err(e) => json!({"ok": false, "reason": e.to_string()}),
    }
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
            let ad = s.advert_for(f.key.as_ref()).cloned().unwrap_or_default();
            json!({
                "peer": f.name,
                "host": f.host,
                "port": f.port,
                "mode": f.mode.name(),
                "keyed": f.key.is_some(),
                "fingerprint": f.key.as_ref().map(crate::ask::canon::fingerprint),
                "reachable": s.reachable(),
                "lastSeen": s.last_seen_ms.map(clock::iso8601),
                "ageMs": s.last_seen_ms.map(|t| now.saturating_sub(t)),
                "signed": ad.signed,
                "description": ad.description,
                "tags": ad.tags,
                "workspace": ad.workspace,
                "sessions": ad.sessions,
                "error": s.last_error,
            })
        })
        .collect()
}
