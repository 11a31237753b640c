//! Discovery calls to friends: fetch an advert or a card, forward or send a `/recommend`
//! (authenticated and signed like an ask), and the owner's side of a recommendation — every
//! card that reaches the owner has been verified against the recommended agent's own key and,
//! when that agent is one of our friends, against the key we pinned for it.

use super::{RECOMMEND_PURPOSE, node_budget_ms, state_dir};
use crate::ask::advertise::{self, CheckedAdvert};
use crate::ask::card::{self, Card};
use crate::ask::client;
use crate::ask::config::{AskConfig, Friend};
use crate::ask::keys::AskKey;
use crate::ask::recommend::{self, RecommendReply, Via, pending};
use crate::error::{Code, Error, Result};
use crate::{clock, sanitize};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use std::path::Path;
use std::time::Duration;

/// A friend's JSON answer to `GET path`, or the one-line reason it failed.
fn get_from(f: &Friend, path: &str, timeout_ms: u64) -> std::result::Result<Value, String> {
    crate::ask::tls::target(f, None)
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
pub(super) fn fetch_advert_raw(
    f: &Friend,
    timeout_ms: u64,
) -> std::result::Result<Box<RawValue>, String> {
    let text = get_from(f, "/advertise", timeout_ms)?.to_string();
    if text.len() > crate::config::internal::ADVERT_BYTES_MAX {
        return Err(format!(
            "advert is larger than {} bytes",
            crate::config::internal::ADVERT_BYTES_MAX
        ));
    }
    RawValue::from_string(text).map_err(|e| e.to_string())
}

/// One friend's checked advert, fetched now.
pub fn fetch_advert(f: &Friend, timeout_ms: u64) -> std::result::Result<CheckedAdvert, String> {
    fetch_advert_raw(f, timeout_ms)
        .and_then(|v| advertise::check(&f.name, f.key.as_ref(), &v, clock::now_ms()))
}

/// Fetches the adverts of `friends` now, a bounded number at a time
/// ([`crate::config::internal::ADVERT_FETCH_PARALLEL`]).
pub fn fetch_adverts(
    friends: &[Friend],
    timeout_ms: u64,
) -> Vec<(String, std::result::Result<CheckedAdvert, String>)> {
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

/// Forwards `req` to friend `f` with one hop less and this node added to the path, signed by
/// this node, waiting at most the child's budget (and what this node has left). The answer's card must verify against its own key and name the agent `from`
/// names.
pub(super) fn forward(
    cfg: &AskConfig,
    key: &AskKey,
    f: &Friend,
    req: &recommend::Request,
    left_ms: u64,
) -> std::result::Result<(String, Card, Via), String> {
    let hops = req.max_hops.saturating_sub(1);
    let path = recommend::forward_path(req, &cfg.caller_name);
    let timeout = node_budget_ms(hops).min(left_ms);
    let reply = post_recommend(cfg, key, f, req.topic.as_deref(), hops, &path, timeout)
        .map_err(|e| e.message)?;
    let (card_str, c) = checked_answer(&reply, clock::now_ms())?;
    Ok((card_str, c, reply.via))
}

/// The card of a `/recommend` answer, verified against its own key, and naming `from`.
pub fn checked_answer(
    reply: &RecommendReply,
    now_ms: u64,
) -> std::result::Result<(String, Card), String> {
    let card_str = reply.card.as_deref().ok_or("the answer carries no card")?;
    let c =
        card::verify(card_str, now_ms).map_err(|e| format!("recommended card is invalid: {e}"))?;
    if reply.from.as_deref() != Some(c.name.as_str()) {
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
    t: &crate::ask::tls::Target,
    mut body: Map<String, Value>,
    purpose: &str,
) -> Value {
    if let Some(t) = &f.token {
        body.insert("token".into(), json!(t));
    }
    if !t.proves_caller() {
        crate::ask::auth::sign_body(key, &mut body, purpose, &f.name, clock::now_ms());
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
) -> Result<RecommendReply> {
    let mut body = Map::new();
    body.insert(
        "protocolVersion".into(),
        json!(crate::ask::PROTOCOL_VERSION),
    );
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
    let target = crate::ask::tls::target(f, Some(key))?;
    let body = credentials(key, f, &target, body, RECOMMEND_PURPOSE);
    client::post_json_to(
        &target,
        "/recommend",
        &body,
        Duration::from_millis(timeout_ms),
    )?
    .into_typed()
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
    let via = reply.via;
    let mut out = json!({
        "peer": peer,
        "from": c.name,
        "recommended": c.peer_view(),
        "via": via,
        "fingerprint": crate::ask::canon::fingerprint(&c.key),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ask::discovery::server::own_card;

    fn reply(v: Value) -> RecommendReply {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_recommendation_must_name_its_own_card() {
        let key = AskKey::from_seed(&[3u8; 32]);
        let c = AskConfig::default();
        let now = clock::now_ms();
        let card_str = own_card(&c, &key, "127.0.0.1", 9, now);
        let ok = json!({"ok": true, "from": "local", "card": card_str});
        assert_eq!(
            checked_answer(&reply(ok.clone()), now).unwrap().1.name,
            "local"
        );
        let lying = json!({"ok": true, "from": "carol", "card": card_str});
        assert!(checked_answer(&reply(lying), now).is_err());
        let expired = json!({"ok": true, "from": "local", "card": card_str});
        assert!(
            checked_answer(
                &reply(expired),
                now + crate::config::internal::CARD_TTL_MS + 1
            )
            .is_err()
        );
        assert!(checked_answer(&reply(json!({"ok": true, "from": "local"})), now).is_err());
    }
}
