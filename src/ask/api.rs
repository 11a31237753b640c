//! What front ends call to ask a friend: `ask` and `status`, with typed results. A friend with
//! a pinned key is asked over TLS pinned to that key, presenting ours (mutual TLS), which
//! authenticates the request; any other request is signed with this agent's key (purpose and
//! audience inside the signed bytes, see `auth`). The friend's token rides along when one is
//! configured, so either kind of friend entry on the other side authenticates us. An answerer
//! process cannot ask (no loops). A friend with `"protocol": "a2a"` is asked over A2A
//! instead (`a2a::client`).

use super::config::{AskConfig, Friend, Protocol};
use super::keys::AskKey;
use super::tls::Target;
use crate::config::internal::{ASK_CLIENT_SLACK, ASK_STATUS_TIMEOUT};
use crate::error::{Code, Error, Result};
use serde_json::{Map, Value, json};
use std::path::Path;
use std::time::Duration;

/// The result of an ask.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AskOutcome {
    /// A synchronous answer.
    Answered { answer: String, truncated: bool },
    /// An async ask was accepted; poll `status` with this id.
    Queued { ask_id: String },
}

/// The state of an async ask as its asker sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AskStatus {
    /// `pending`, `running`, `answered`, `declined` or `failed`.
    pub status: String,
    pub answer: Option<String>,
    pub truncated: bool,
    pub error: Option<String>,
}

fn friend<'c>(config: &'c AskConfig, peer: &str) -> Result<&'c Friend> {
    if std::env::var_os(super::ANSWERER_ENV).is_some() {
        return Err(Error::new(
            Code::CapabilityDenied,
            "an answerer cannot ask peers (no ask loops)",
        ));
    }
    config.friend(peer).ok_or_else(|| {
        Error::new(
            Code::NotFound,
            format!(
                "no friend named {:?} in ask.peers (see peer-config(5))",
                crate::sanitize::line(peer, 64)
            ),
        )
    })
}

/// A request body with our name, the friend's token (if any) and, unless the connection
/// proves who we are (mutual TLS), our signature.
fn signed_body(
    key: &AskKey,
    config: &AskConfig,
    friend: &Friend,
    target: &Target,
    purpose: &str,
    mut body: Map<String, Value>,
) -> Map<String, Value> {
    body.insert("protocolVersion".into(), json!(super::PROTOCOL_VERSION));
    body.insert("caller".into(), json!(config.caller_name));
    if let Some(t) = &friend.token {
        body.insert("token".into(), json!(t));
    }
    if !target.proves_caller() {
        super::auth::sign_body(
            key,
            &mut body,
            purpose,
            &friend.name,
            crate::clock::now_ms(),
        );
    }
    body
}

/// Asks `peer` a question, optionally naming files of its workspace and optionally async.
pub fn ask(
    home: &Path,
    config: &AskConfig,
    peer: &str,
    question: &str,
    context_files: &[String],
    is_async: bool,
) -> Result<AskOutcome> {
    let f = friend(config, peer)?;
    if question.trim().is_empty() {
        return Err(Error::new(Code::Usage, "the question is empty"));
    }
    if f.protocol == Protocol::A2a {
        if !context_files.is_empty() {
            return Err(Error::new(
                Code::Usage,
                "--context-file names the friend's files, which A2A has no field for",
            ));
        }
        return super::a2a::client::ask(config, f, question, is_async);
    }
    let mut body = Map::new();
    body.insert("question".into(), json!(question));
    if !context_files.is_empty() {
        body.insert("contextFiles".into(), json!(context_files));
    }
    body.insert("timeoutMs".into(), json!(config.timeout_ms));
    if is_async {
        body.insert("async".into(), json!(true));
    }
    let key = super::keys::load_or_create(&config.key_dir(home), &config.caller_name)?;
    let target = super::tls::target(f, Some(&key))?;
    let body = Value::Object(signed_body(&key, config, f, &target, "ask", body));
    let timeout = if is_async {
        ASK_STATUS_TIMEOUT
    } else {
        Duration::from_millis(config.timeout_ms) + ASK_CLIENT_SLACK
    };
    let reply = super::client::post_json_to(&target, "/ask", &body, timeout)?.into_result()?;
    if is_async {
        let ask_id = reply
            .get("askId")
            .and_then(Value::as_str)
            .ok_or_else(|| Error::new(Code::InvalidRequest, "the peer returned no askId"))?;
        return Ok(AskOutcome::Queued {
            ask_id: ask_id.to_string(),
        });
    }
    let answer = reply
        .get("answer")
        .and_then(Value::as_str)
        .ok_or_else(|| Error::new(Code::InvalidRequest, "the peer returned no answer"))?;
    Ok(AskOutcome::Answered {
        answer: answer.to_string(),
        truncated: reply
            .get("truncated")
            .and_then(Value::as_bool)
            .unwrap_or(false),
    })
}

/// Whether a 404 is our server's "unknown or expired ask" (then there is nothing to fall back
/// to) rather than a server without `POST /ask/status`.
fn is_unknown_ask(body: &Value) -> bool {
    body.pointer("/error/message")
        .and_then(Value::as_str)
        .is_some_and(|m| m.starts_with("unknown or expired ask"))
}

/// `GET /ask/status?askId=`, dsh-ask-peer's form (it has no `POST /ask/status`): it carries
/// no credentials, so the friend answers by the asking address (see peer-ask(1)).
fn get_status(target: &Target, ask_id: &str) -> Result<super::client::Reply> {
    let mut q = String::with_capacity(ask_id.len());
    for b in ask_id.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            q.push(b as char);
        } else {
            q.push_str(&format!("%{b:02X}"));
        }
    }
    let path = format!("/ask/status?askId={q}");
    super::client::get_json_from(target, &path, ASK_STATUS_TIMEOUT)
}

/// The status (and, once answered, the answer) of an async ask we made; against a server
/// without `POST /ask/status` (404 or 405), the `GET` form.
pub fn status(home: &Path, config: &AskConfig, peer: &str, ask_id: &str) -> Result<AskStatus> {
    let f = friend(config, peer)?;
    if f.protocol == Protocol::A2a {
        return super::a2a::client::status(config, f, ask_id);
    }
    let mut body = Map::new();
    body.insert("askId".into(), json!(ask_id));
    let key = super::keys::load_or_create(&config.key_dir(home), &config.caller_name)?;
    let target = super::tls::target(f, Some(&key))?;
    let body = Value::Object(signed_body(&key, config, f, &target, "status", body));
    let reply = super::client::post_json_to(&target, "/ask/status", &body, ASK_STATUS_TIMEOUT)?;
    let reply = if matches!(reply.status, 404 | 405) && !is_unknown_ask(&reply.body) {
        get_status(&target, ask_id)?
    } else {
        reply
    }
    .into_result()?;
    let s = |k: &str| reply.get(k).and_then(Value::as_str).map(String::from);
    Ok(AskStatus {
        status: s("status")
            .ok_or_else(|| Error::new(Code::InvalidRequest, "the peer returned no status"))?,
        answer: s("answer"),
        truncated: reply
            .get("truncated")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        error: s("error"),
    })
}
