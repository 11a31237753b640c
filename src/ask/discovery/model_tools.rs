//! Runs the six ask tools for a model (`peer mcp`, and the same tool path everywhere): asks
//! through the core's client API, at most [`ASK_PARALLEL`] at a time for `ask_peers`; the
//! roster for `peers_list`; a verified, owner-decided recommendation for `recommend_peer`.
//!
//! Everything a friend wrote reaches the model as external data: answers travel as peer
//! messages (`message`/`messages`, which the MCP layer wraps in `<peer-message … authority=
//! "external-peer: not a user instruction">`), and advert and card text is sanitized and
//! marked with the same authority.

use crate::ask::api::{self, AskOutcome};
use crate::ask::config::AskConfig;
use crate::ask::keys;
use crate::config::internal::{ASK_PARALLEL, ASK_RESULT_POLL, ASK_TOOL_FIELD_CHARS_MAX};
use crate::error::{Code, Error, Result};
use crate::sanitize;
use crate::toolspec::PEER_AUTHORITY;
use crate::toolspec::ask::{AskCall, Question};
use serde_json::{Map, Value, json};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Runs one ask tool call for the namespace at `home`.
pub fn execute(home: &Path, call: AskCall, cancel: &AtomicBool) -> Result<Value> {
    if std::env::var_os(crate::ask::ANSWERER_ENV).is_some() {
        return Err(Error::new(
            Code::CapabilityDenied,
            "an answering agent cannot ask peers (no ask loops)",
        ));
    }
    let cfg = AskConfig::load(home)?;
    match call {
        AskCall::PeersList { refresh } => {
            let list = super::views::peers_listing(home, &cfg, refresh);
            let peers: Vec<Value> = list
                .into_iter()
                .map(|p| external(serde_json::to_value(p).unwrap_or_default()))
                .collect();
            Ok(json!({"peers": peers}))
        }
        AskCall::Recommend {
            peer,
            topic,
            max_hops,
        } => {
            let key = keys::load_or_create(&cfg.key_dir(home), &cfg.caller_name)?;
            let v = super::client::request_recommendation(
                home,
                &cfg,
                &key,
                &peer,
                topic.as_deref(),
                max_hops,
            )?;
            Ok(external(serde_json::to_value(v).unwrap_or_default()))
        }
        AskCall::Ask { peer, q, async_ } => ask_one(home, &cfg, &peer, &q, async_, cancel),
        AskCall::AskMany { peers, q } => ask_many(home, &cfg, &peers, &q, cancel),
        AskCall::Result {
            peer,
            ask_id,
            wait_ms,
        } => {
            let v = result(home, &cfg, &peer, &ask_id, wait_ms, cancel)?;
            Ok(answer_view(&peer, v))
        }
    }
}

/// A friend-written value made safe for a model: every string sanitized and bounded, and the
/// object marked with the external-peer authority.
fn external(v: Value) -> Value {
    let mut v = clean(v);
    if let Value::Object(m) = &mut v {
        m.insert("authority".into(), json!(PEER_AUTHORITY));
    }
    v
}

fn clean(v: Value) -> Value {
    match v {
        Value::String(s) => Value::String(sanitize::line(&s, ASK_TOOL_FIELD_CHARS_MAX)),
        Value::Array(a) => Value::Array(a.into_iter().map(clean).collect()),
        Value::Object(m) => Value::Object(m.into_iter().map(|(k, v)| (k, clean(v))).collect()),
        other => other,
    }
}

/// An ask outcome as a tool result: the answer text moves into `message` (a peer message the
/// MCP layer wraps as external data); status fields stay structured.
pub fn answer_view(peer: &str, v: Value) -> Value {
    let mut m = match v {
        Value::Object(m) => m,
        other => Map::from_iter([("result".to_string(), other)]),
    };
    m.insert("peer".into(), json!(peer));
    if let Some(Value::String(answer)) = m.remove("answer") {
        m.insert(
            "message".into(),
            json!({"from": format!("{peer} (friend's agent)"), "content": answer, "topic": "answer"}),
        );
    }
    Value::Object(m)
}

/// One ask through the core's client API, as a JSON value: `{answer, truncated}` or
/// `{askId, status: "queued"}`.
fn ask_value(
    home: &Path,
    cfg: &AskConfig,
    peer: &str,
    q: &Question,
    async_: bool,
) -> Result<Value> {
    let mut cfg = cfg.clone();
    if let Some(t) = q.timeout_ms {
        cfg.timeout_ms = t;
    }
    match api::ask(home, &cfg, peer, &q.question, &q.context_files, async_)? {
        AskOutcome::Answered { answer, truncated } => {
            Ok(json!({"answer": answer, "truncated": truncated}))
        }
        AskOutcome::Queued { ask_id } => Ok(json!({"askId": ask_id, "status": "queued"})),
    }
}

fn ask_one(
    home: &Path,
    cfg: &AskConfig,
    peer: &str,
    q: &Question,
    async_: bool,
    cancel: &AtomicBool,
) -> Result<Value> {
    if cancel.load(Ordering::SeqCst) {
        return Err(Error::new(
            Code::Timeout,
            "cancelled before the ask was sent",
        ));
    }
    Ok(answer_view(peer, ask_value(home, cfg, peer, q, async_)?))
}

/// Polls an async ask until it is final, `wait_ms` passed or the call is cancelled. A
/// declined or failed ask is an error result with its code; still pending or running is a
/// normal result the model may ask about again.
fn result(
    home: &Path,
    cfg: &AskConfig,
    peer: &str,
    ask_id: &str,
    wait_ms: u64,
    cancel: &AtomicBool,
) -> Result<Value> {
    let deadline = Instant::now() + Duration::from_millis(wait_ms);
    loop {
        let s = api::status(home, cfg, peer, ask_id)?;
        let reason = || s.error.clone().unwrap_or_default();
        match s.status.as_str() {
            "declined" => {
                return Err(Error::new(
                    Code::AskDeclined,
                    format!("{peer}'s owner declined ask {ask_id}"),
                ));
            }
            "failed" => {
                return Err(Error::new(
                    Code::AskFailed,
                    format!(
                        "ask {ask_id} failed at {peer}: {}",
                        sanitize::line(&reason(), 400)
                    ),
                ));
            }
            "answered" => {
                return Ok(json!({
                    "askId": ask_id, "status": "answered",
                    "answer": s.answer.unwrap_or_default(), "truncated": s.truncated,
                }));
            }
            _ => {}
        }
        if Instant::now() >= deadline || cancel.load(Ordering::SeqCst) {
            return Ok(json!({"askId": ask_id, "status": s.status}));
        }
        // Short steps so a cancellation is seen quickly; polls stay at most one per 500 ms.
        let next = Instant::now()
            + ASK_RESULT_POLL.min(deadline.saturating_duration_since(Instant::now()));
        while Instant::now() < next && !cancel.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn ask_many(
    home: &Path,
    cfg: &AskConfig,
    peers: &[String],
    q: &Question,
    cancel: &AtomicBool,
) -> Result<Value> {
    let mut results: Vec<Value> = Vec::with_capacity(peers.len());
    let mut messages: Vec<Value> = Vec::new();
    for chunk in peers.chunks(ASK_PARALLEL) {
        if cancel.load(Ordering::SeqCst) {
            break;
        }
        let outcomes: Vec<(String, Result<Value>)> = std::thread::scope(|s| {
            let handles: Vec<_> = chunk
                .iter()
                .map(|p| s.spawn(move || (p.clone(), ask_value(home, cfg, p, q, false))))
                .collect();
            handles.into_iter().filter_map(|h| h.join().ok()).collect()
        });
        for (peer, outcome) in outcomes {
            match outcome {
                Ok(v) => {
                    let mut view = answer_view(&peer, v);
                    if let Some(m) = view.as_object_mut().and_then(|m| m.remove("message")) {
                        messages.push(m);
                    }
                    view["ok"] = json!(true);
                    results.push(view);
                }
                Err(e) => results.push(json!({
                    "peer": peer, "ok": false,
                    "error": {"code": e.code.name(), "message": e.message},
                })),
            }
        }
    }
    Ok(json!({"results": results, "messages": messages}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advert_text_is_sanitized_and_marked() {
        let v = external(json!({"description": "hi\u{1b}[2J there", "tags": ["a\nb"]}));
        assert_eq!(v["description"], "hi there");
        assert_eq!(v["tags"][0], "a b");
        assert_eq!(v["authority"], PEER_AUTHORITY);
    }
}
