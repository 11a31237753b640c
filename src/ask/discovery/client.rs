//! Discovery calls to friends: fetch an advert or a card, forward or send a `/recommend`
//! (authenticated and signed like an ask), and the owner's side of a recommendation — every
//! card that reaches the owner has been verified against the recommended agent's own key and,
//! when that agent is one of our friends, against the key we pinned for it.

use super::{RECOMMEND_PURPOSE, node_budget_ms, state_dir};
use crate::ask::advertise::{self, CheckedAdvert};
use crate::ask::card::PeerView;
use crate::ask::card::{self, Card};
use crate::ask::client;
use crate::ask::config::{AskConfig, Friend};
use crate::ask::keys::AskKey;
use crate::ask::loose::{Loose, typed};
use crate::ask::recommend::{self, RecommendReply, Via, pending};
use crate::error::{Code, Error, Result};
use crate::{clock, sanitize};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use std::path::Path;
use std::time::Duration;

/// A friend's answer to `GET path`, or the one-line reason it failed.
fn get_from(f: &Friend, path: &str, timeout_ms: u64) -> std::result::Result<client::Reply, String> {
    crate::ask::tls::target(f, None)
        .and_then(|t| client::get_json_from(&t, path, Duration::from_millis(timeout_ms)))
        .map_err(|e| e.message)
}

/// The answer of `GET /sign/card` (only the member we read).
#[derive(Default, Deserialize)]
struct CardReply {
    #[serde(default)]
    card: Option<Loose<String>>,
}

/// One friend's card: `GET /sign/card`, verified, naming that friend, with the pinned key
/// when we pinned one.
pub fn fetch_card(
    f: &Friend,
    timeout_ms: u64,
    now_ms: u64,
) -> std::result::Result<(String, Card), String> {
    let body: CardReply = get_from(f, "/sign/card", timeout_ms)?
        .into_typed()
        .map_err(|e| e.message)?;
    let card_str = typed(&body.card).ok_or("the answer carries no card")?;
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
    let text = get_from(f, "/advertise", timeout_ms)?
        .into_text()
        .map_err(|e| e.message)?;
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

/// The members of `POST /recommend` before the credentials; as dsh's client sends them,
/// `maxHops` only when positive and `path` only when non-empty.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RecommendBody<'a> {
    protocol_version: u64,
    caller: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    topic: Option<&'a str>,
    #[serde(skip_serializing_if = "is_zero")]
    max_hops: u64,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    path: &'a [String],
}

fn is_zero(n: &u64) -> bool {
    *n == 0
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
    let body = RecommendBody {
        protocol_version: crate::ask::PROTOCOL_VERSION,
        caller: &cfg.caller_name,
        topic,
        max_hops,
        path,
    };
    let target = crate::ask::tls::target(f, Some(key))?;
    let body = crate::ask::auth::credentials(
        key,
        &body,
        f.token.as_deref(),
        target.proves_caller(),
        RECOMMEND_PURPOSE,
        &f.name,
    );
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
) -> Result<Recommended> {
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
    let mut out = Recommended {
        peer: peer.to_string(),
        from: c.name.clone(),
        recommended: c.peer_view(),
        via: reply.via,
        fingerprint: crate::ask::canon::fingerprint(&c.key),
        status: "self",
        rec_id: None,
    };
    if c.key == key.public() {
        return Ok(out);
    }
    if cfg.peers.iter().any(|p| p.key == Some(c.key)) {
        out.status = "already_a_friend";
        return Ok(out);
    }
    let store = pending::Store::new(&state_dir(home));
    let p = store.add(
        peer,
        out.via.clone(),
        &card_str,
        &c.public_key,
        topic.map(str::to_string),
        now,
    )?;
    out.rec_id = Some(p.rec_id);
    out.status = "awaiting_user_approval";
    Ok(out)
}

/// A recommendation as front ends show it: who was asked, the recommended card, the chain
/// it came through, and what became of it (`self`, `already_a_friend`, or
/// `awaiting_user_approval` with its `recId`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Recommended {
    pub peer: String,
    pub from: String,
    pub recommended: PeerView,
    pub via: Via,
    pub fingerprint: String,
    pub status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rec_id: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ask::discovery::server::own_card;
    use serde_json::{Value, json};

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
