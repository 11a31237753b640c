//! What front ends call to ask a friend: `ask` and `status`, with typed results. A friend with
//! a pinned key is asked over TLS pinned to that key, presenting ours (mutual TLS), which
//! authenticates the request; any other request is signed with this agent's key (purpose and
//! audience inside the signed bytes, see `auth`). The friend's token rides along when one is
//! configured, so either kind of friend entry on the other side authenticates us. An answerer
//! process cannot ask (no loops). A friend with `"protocol": "a2a"` is asked over A2A
//! instead (`a2a::client`).

use super::auth::Credentialed;
use super::config::{AskConfig, Friend, Protocol};
use super::keys::AskKey;
use super::loose::{Loose, typed};
use super::tls::Target;
use crate::config::internal::{ASK_CLIENT_SLACK, ASK_STATUS_TIMEOUT};
use crate::error::{Code, Error, Result};
use serde::{Deserialize, Serialize};
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

/// The members of `POST /ask` before the credentials.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct AskBody<'a> {
    protocol_version: u64,
    caller: &'a str,
    question: &'a str,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    context_files: &'a [String],
    timeout_ms: u64,
    #[serde(rename = "async", skip_serializing_if = "std::ops::Not::not")]
    is_async: bool,
}

/// The members of `POST /ask/status` before the credentials.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct StatusBody<'a> {
    protocol_version: u64,
    caller: &'a str,
    ask_id: &'a str,
}

/// What a friend answers to an ask or a status poll (only the members we read; each `None`
/// unless it has its type).
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Answered {
    #[serde(default)]
    ask_id: Option<Loose<String>>,
    #[serde(default)]
    status: Option<Loose<String>>,
    #[serde(default)]
    answer: Option<Loose<String>>,
    #[serde(default)]
    truncated: Option<Loose<bool>>,
    #[serde(default)]
    error: Option<Loose<String>>,
}

/// `body` with the friend's token (if any) and, unless the connection proves who we are
/// (mutual TLS), our signature.
fn signed_body<'a, T: Serialize>(
    key: &AskKey,
    friend: &'a Friend,
    target: &Target,
    purpose: &str,
    body: &'a T,
) -> Credentialed<'a, T> {
    super::auth::credentials(
        key,
        body,
        friend.token.as_deref(),
        target.proves_caller(),
        purpose,
        &friend.name,
    )
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
    let body = AskBody {
        protocol_version: super::PROTOCOL_VERSION,
        caller: &config.caller_name,
        question,
        context_files,
        timeout_ms: config.timeout_ms,
        is_async,
    };
    let key = super::keys::load_or_create(&config.key_dir(home), &config.caller_name)?;
    let target = super::tls::target(f, Some(&key))?;
    let body = signed_body(&key, f, &target, "ask", &body);
    let timeout = if is_async {
        ASK_STATUS_TIMEOUT
    } else {
        Duration::from_millis(config.timeout_ms) + ASK_CLIENT_SLACK
    };
    let reply: Answered =
        super::client::post_json_to(&target, "/ask", &body, timeout)?.into_typed()?;
    if is_async {
        let ask_id = typed(&reply.ask_id)
            .ok_or_else(|| Error::new(Code::InvalidRequest, "the peer returned no askId"))?;
        return Ok(AskOutcome::Queued {
            ask_id: ask_id.to_string(),
        });
    }
    let answer = typed(&reply.answer)
        .ok_or_else(|| Error::new(Code::InvalidRequest, "the peer returned no answer"))?;
    Ok(AskOutcome::Answered {
        answer: answer.to_string(),
        truncated: typed(&reply.truncated).copied().unwrap_or(false),
    })
}

/// Whether a 404 is our server's "unknown or expired ask" (then there is nothing to fall back
/// to) rather than a server without `POST /ask/status`.
fn is_unknown_ask(reply: &super::client::Reply) -> bool {
    reply
        .error_message()
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
    let body = StatusBody {
        protocol_version: super::PROTOCOL_VERSION,
        caller: &config.caller_name,
        ask_id,
    };
    let key = super::keys::load_or_create(&config.key_dir(home), &config.caller_name)?;
    let target = super::tls::target(f, Some(&key))?;
    let body = signed_body(&key, f, &target, "status", &body);
    let reply = super::client::post_json_to(&target, "/ask/status", &body, ASK_STATUS_TIMEOUT)?;
    let reply: Answered = if matches!(reply.status, 404 | 405) && !is_unknown_ask(&reply) {
        get_status(&target, ask_id)?
    } else {
        reply
    }
    .into_typed()?;
    let s = |v: &Option<Loose<String>>| typed(v).cloned();
    Ok(AskStatus {
        status: s(&reply.status)
            .ok_or_else(|| Error::new(Code::InvalidRequest, "the peer returned no status"))?,
        answer: s(&reply.answer),
        truncated: typed(&reply.truncated).copied().unwrap_or(false),
        error: s(&reply.error),
    })
}
