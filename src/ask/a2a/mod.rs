//! A2A 1.0 on the ask port (JSON-RPC binding, the revision the `a2a-sdk` 1.3.0 and
//! `@a2a-js/sdk` 1.3.0 clients speak): the signed agent card, and `SendMessage` (blocking, or
//! at once with `configuration.returnImmediately`), `GetTask`, `CancelTask`,
//! `SendStreamingMessage` and `SubscribeToTask` at `POST /a2a`. Every send makes an async ask
//! (`task`), so owner approval, the contained answerer, the rate limits and the stored-asks
//! bounds are exactly the ask's. Callers are friends: a bearer token equal to the token
//! configured for one, or the card key a friend pinned, proved in the TLS handshake. Anyone
//! else gets HTTP 401 (no credentials) or 403 (wrong ones) before the body is parsed.
//! `client` is the other direction: `peer ask` to an A2A agent.

pub mod card;
pub mod client;
pub mod sse;
pub mod task;

use crate::config::internal::{A2A_POLL, A2A_POLL_FIRST};

use super::ServerState;
use super::answer::{self, Work};
use super::config::Friend;
use super::http::{ApiError, Request, Response};
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// JSON-RPC and A2A error codes the clients map to typed errors.
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;
const INTERNAL: i64 = -32603;
const TASK_NOT_FOUND: i64 = -32001;
const TASK_NOT_CANCELABLE: i64 = -32002;
const UNSUPPORTED: i64 = -32004;
const CONTENT_TYPE: i64 = -32005;
const VERSION_NOT_SUPPORTED: i64 = -32009;

/// What an A2A request gets.
pub enum Reply {
    Now(Response),
    /// An SSE stream of one task's events.
    Stream(sse::Plan),
}

/// Answers the card and the JSON-RPC endpoint; `None` for other paths.
pub fn handle(state: &Arc<ServerState>, req: &Request) -> Option<Reply> {
    match (req.method.as_str(), req.path.as_str()) {
        ("GET", card::CARD_PATH) => {
            let authority = authority(req).unwrap_or_else(|| state.reachable_addr().to_string());
            let c = card::signed(&state.key, &state.config.caller_name, &authority);
            Some(Reply::Now(Response::ok(c)))
        }
        ("POST", card::RPC_PATH) => Some(rpc(state, req)),
        _ => None,
    }
}

/// The request's `Host` when it is a plain host[:port], so the card names the address the
/// client reached.
fn authority(req: &Request) -> Option<String> {
    let host = req.header("host")?.trim();
    let ok = !host.is_empty()
        && host.len() <= 255
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".-:[]".contains(c));
    ok.then(|| host.to_string())
}

fn rpc_error(id: &Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

fn rpc_result(id: &Value, result: impl serde::Serialize) -> Response {
    Response::ok(json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

fn refusal(status: u16, message: &str) -> Reply {
    Reply::Now(Response::json(
        status,
        rpc_error(&Value::Null, INVALID_REQUEST, message),
    ))
}

fn rpc(state: &Arc<ServerState>, req: &Request) -> Reply {
    let now = crate::clock::now_ms();
    if let Err(e) = state.guard.admit_address(req.ip(), now) {
        return refusal(e.status, &e.message);
    }
    let friend = match caller(&state.config, req) {
        Ok(f) => f,
        Err(e) => {
            state.guard.note_failure(req.ip(), now);
            return refusal(e.status, &e.message);
        }
    };
    let body = match serde_json::from_slice::<Value>(&req.body) {
        Ok(Value::Object(body)) => body,
        Ok(_) => {
            let m = "a JSON-RPC request object is required (batches are not served)";
            return Reply::Now(Response::ok(rpc_error(&Value::Null, INVALID_REQUEST, m)));
        }
        Err(_) => return Reply::Now(Response::ok(rpc_error(&Value::Null, -32700, "parse error"))),
    };
    let id = body.get("id").cloned().unwrap_or(Value::Null);
    let method = body.get("method").and_then(Value::as_str).unwrap_or("");
    let empty = Map::new();
    let params = body
        .get("params")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    if let Some(v) = req.header("a2a-version")
        && !matches!(v.trim(), "1.0" | "1")
    {
        let m = format!(
            "A2A version {} is not served; this server speaks {}",
            crate::sanitize::line(v, 16),
            card::PROTOCOL_VERSION
        );
        return Reply::Now(Response::ok(rpc_error(&id, VERSION_NOT_SUPPORTED, &m)));
    }
    if body.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Reply::Now(Response::ok(rpc_error(
            &id,
            INVALID_REQUEST,
            "jsonrpc must be \"2.0\"",
        )));
    }
    let out = dispatch(state, friend, req.ip(), method, params, &id);
    match out {
        Ok(Reply::Now(r)) => Reply::Now(r),
        Ok(s) => s,
        Err((code, message)) => Reply::Now(Response::ok(rpc_error(&id, code, &message))),
    }
}

type RpcResult = Result<Reply, (i64, String)>;

fn dispatch(
    state: &Arc<ServerState>,
    friend: &Friend,
    asker: std::net::IpAddr,
    method: &str,
    params: &Map<String, Value>,
    id: &Value,
) -> RpcResult {
    let me = friend.name.as_str();
    match method {
        "SendMessage" => {
            let task_id = send(state, friend, asker, params)?;
            let immediate = params
                .get("configuration")
                .and_then(|c| c.get("returnImmediately"))
                .and_then(Value::as_bool)
                .unwrap_or(false);
            if !immediate {
                wait_terminal(state, &task_id, me);
            }
            let snap = snapshot(state, &task_id, me)?;
            Ok(Reply::Now(rpc_result(id, json!({"task": snap.task()}))))
        }
        "SendStreamingMessage" => {
            let task_id = send(state, friend, asker, params)?;
            Ok(Reply::Stream(sse::Plan::new(id, &task_id, me, state)))
        }
        "GetTask" => {
            let snap = snapshot(state, task_param(params)?, me)?;
            Ok(Reply::Now(rpc_result(id, snap.task())))
        }
        "SubscribeToTask" => {
            let task_id = task_param(params)?;
            snapshot(state, task_id, me)?;
            Ok(Reply::Stream(sse::Plan::new(id, task_id, me, state)))
        }
        "CancelTask" => {
            let task_id = task_param(params)?;
            cancel(state, task_id, me)?;
            let snap = snapshot(state, task_id, me)?;
            Ok(Reply::Now(rpc_result(id, snap.task())))
        }
        "" => Err((INVALID_REQUEST, "method is required".into())),
        m => Err((
            METHOD_NOT_FOUND,
            format!("method {} is not served", crate::sanitize::line(m, 64)),
        )),
    }
}

fn task_param(params: &Map<String, Value>) -> Result<&str, (i64, String)> {
    params
        .get("id")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty() && s.len() <= 64)
        .ok_or((INVALID_PARAMS, "params.id (the task id) is required".into()))
}

fn snapshot(state: &ServerState, id: &str, caller: &str) -> Result<task::Snapshot, (i64, String)> {
    state.a2a.snapshot(id, caller, &state.jobs).ok_or((
        TASK_NOT_FOUND,
        "task not found (unknown, another caller's, or expired)".into(),
    ))
}

/// Cancels a task: a pending approval is withdrawn (the owner's list no longer shows it); an
/// answerer already running is not stopped (it ends at its timeout) but its answer is not
/// handed out.
fn cancel(state: &ServerState, id: &str, caller: &str) -> Result<(), (i64, String)> {
    match state.a2a.cancel(id, caller, &state.jobs) {
        None => Err((TASK_NOT_FOUND, "task not found".into())),
        Some(Err(s)) => Err((
            TASK_NOT_CANCELABLE,
            format!("the task already ended ({})", s.name()),
        )),
        Some(Ok(())) => {
            state.approvals.forget(id);
            state.approvals.wake_all();
            Ok(())
        }
    }
}

/// Who is calling: the friend whose pinned key the TLS client proved, or the friend whose
/// configured token is the bearer token. 401 without credentials, 403 with unknown ones.
fn caller<'c>(config: &'c super::config::AskConfig, req: &Request) -> Result<&'c Friend, ApiError> {
    if let Some(f) = super::auth::tls_friend(config, req) {
        return Ok(f);
    }
    let auth = req.header("authorization").map(str::trim);
    let Some(auth) = auth else {
        return Err(ApiError::new(
            401,
            "unauthorized",
            "A2A callers authenticate with Authorization: Bearer <token> or mutual TLS",
        ));
    };
    let token = auth
        .strip_prefix("Bearer ")
        .or_else(|| auth.strip_prefix("bearer "))
        .map(str::trim)
        .unwrap_or("");
    // Every configured token is compared, so the time taken does not tell which one matched.
    let mut found = None;
    for f in &config.peers {
        if let Some(t) = f.token.as_deref().filter(|t| !t.is_empty())
            && !token.is_empty()
            && super::auth::secret_eq(token, t)
            && found.is_none()
        {
            found = Some(f);
        }
    }
    found.ok_or_else(|| ApiError::forbidden("invalid token"))
}

/// Validates the message, applies the friend's mode and rate, registers the ask with the
/// owner (in `ask` mode) and starts it as an async ask; returns the task id.
fn send(
    state: &Arc<ServerState>,
    friend: &Friend,
    asker: std::net::IpAddr,
    params: &Map<String, Value>,
) -> Result<String, (i64, String)> {
    let api = |e: ApiError| {
        (
            if e.status >= 500 {
                INTERNAL
            } else {
                INVALID_REQUEST
            },
            e.message,
        )
    };
    let msg = params
        .get("message")
        .and_then(Value::as_object)
        .ok_or((INVALID_PARAMS, "params.message is required".to_string()))?;
    let question = question_of(msg)?;
    if msg
        .get("taskId")
        .and_then(Value::as_str)
        .is_some_and(|t| !t.is_empty())
    {
        return Err((
            UNSUPPORTED,
            "a message continues no task here: every ask is a new task".into(),
        ));
    }
    super::auth::not_denied(friend).map_err(|e| (INVALID_REQUEST, e.message))?;
    let now = crate::clock::now_ms();
    state.guard.charge_friend(&friend.name, now).map_err(api)?;
    answer::ready(state).map_err(api)?;
    let work = Work {
        ask_id: super::jobs::new_ask_id(),
        caller: friend.name.clone(),
        mode: friend.mode,
        question,
        context_paths: Vec::new(),
        files: Vec::new(),
        timeout_ms: state.config.timeout_ms,
    };
    let context_id = msg
        .get("contextId")
        .and_then(Value::as_str)
        .filter(|c| !c.is_empty() && c.len() <= 128)
        .map(str::to_string)
        .unwrap_or_else(super::jobs::new_ask_id);
    start(state, work, &context_id, asker).map_err(api)
}

/// The text parts of a message, joined; other parts are refused.
fn question_of(msg: &Map<String, Value>) -> Result<String, (i64, String)> {
    let parts = msg
        .get("parts")
        .and_then(Value::as_array)
        .ok_or((INVALID_PARAMS, "message.parts is required".to_string()))?;
    let mut texts = Vec::new();
    for p in parts.iter().take(64) {
        match p.get("text").and_then(Value::as_str) {
            Some(t) => texts.push(t),
            None => {
                return Err((
                    CONTENT_TYPE,
                    "only text parts are accepted (a question in plain text)".into(),
                ));
            }
        }
    }
    let q = texts.join("\n");
    if q.trim().is_empty() {
        return Err((INVALID_PARAMS, "the message has no text".into()));
    }
    if q.chars().count() > crate::config::internal::ASK_QUESTION_CHARS_MAX {
        return Err((
            INVALID_PARAMS,
            format!(
                "question exceeds {} characters",
                crate::config::internal::ASK_QUESTION_CHARS_MAX
            ),
        ));
    }
    Ok(q)
}

/// Starts `work` as an async ask, exactly as `POST /ask` with `"async": true` does (the
/// owner is asked and told in `ask` mode), and records its task.
fn start(
    state: &Arc<ServerState>,
    work: Work,
    context_id: &str,
    asker: std::net::IpAddr,
) -> Result<String, ApiError> {
    super::jobs::register_approval(state, &work)?;
    let caller = work.caller.clone();
    super::jobs::start_async(state, work, asker, |id| {
        state.a2a.add(id, &caller, context_id, &state.jobs)
    })
}

/// The longest a task can take: the owner's approval window, the answerer's timeout, and a
/// margin for the answerer's start and its slot.
pub fn task_deadline(state: &ServerState) -> Duration {
    Duration::from_millis(state.config.approval_timeout_ms + 2 * state.config.timeout_ms + 5_000)
}

/// Waits (bounded by [`task_deadline`] and the server's stop) until the task ends.
fn wait_terminal(state: &ServerState, id: &str, caller: &str) {
    let deadline = Instant::now() + task_deadline(state);
    let mut pause = A2A_POLL_FIRST;
    while Instant::now() < deadline && !state.stopping.load(std::sync::atomic::Ordering::SeqCst) {
        match state.a2a.snapshot(id, caller, &state.jobs) {
            Some(s) if !s.state.is_terminal() => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(A2A_POLL);
            }
            _ => return,
        }
    }
}
