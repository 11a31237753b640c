//! `peer ask` to an A2A agent (a friend with `"protocol": "a2a"`): fetch its agent card, check
//! the card's JWS when a key is pinned for the friend, then A2A 1.0 JSON-RPC at the card's
//! `JSONRPC` interface: `SendMessage` with `returnImmediately` (`--async` prints the task id),
//! `GetTask` to poll, `CancelTask` when our deadline passes. The friend's token goes as
//! `Authorization: Bearer`, only to the host the card came from.
//!
//! Plain HTTP only (`http://` card URLs): there is no CA store here, and an A2A agent does not
//! speak our key-pinned TLS. Without a pinned key the card is taken as fetched, so the endpoint
//! is as trustworthy as the network path, like any plain-HTTP ask; with one, a card whose
//! signatures do not verify with that key is refused before a question is sent.

use super::super::api::{AskOutcome, AskStatus};
use super::super::client::{Reply, request_with};
use super::super::config::{AskConfig, Friend};
use super::super::tls::Target;
use super::card::{self, PROTOCOL_VERSION};
use crate::config::internal::{
    A2A_CALL_TIMEOUT, A2A_CARD_TIMEOUT, A2A_CLIENT_POLL, A2A_CLIENT_SLACK,
};
use crate::error::{Code, Error, Result};
use serde_json::{Map, Value, json};
use std::time::{Duration, Instant};

/// An `http://host[:port]/path` URL, split.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Url {
    pub host: String,
    pub port: u16,
    pub path: String,
}

/// Parses an `http://` URL (pure); IPv6 hosts in brackets.
pub fn parse_url(url: &str) -> Option<Url> {
    let rest = url.strip_prefix("http://")?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (h, after) = v6.split_once(']')?;
        (h, after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    let port = match port {
        Some(p) => p.parse().ok().filter(|p| *p > 0)?,
        None => 80,
    };
    let ok = |s: &str| s.bytes().all(|b| b.is_ascii_graphic());
    (!host.is_empty() && !authority.contains('@') && ok(host) && ok(path)).then(|| Url {
        host: host.to_string(),
        port,
        path: path.to_string(),
    })
}

fn refused(message: String) -> Error {
    Error::new(Code::InvalidRequest, message)
}

/// The friend's card URL (configured, or the well-known path on its host and port).
fn card_url(f: &Friend) -> Result<Url> {
    let url = f.card_url.clone().unwrap_or_else(|| {
        let host = if f.host.contains(':') {
            format!("[{}]", f.host)
        } else {
            f.host.clone()
        };
        format!("http://{host}:{}{}", f.port, card::CARD_PATH)
    });
    parse_url(&url).ok_or_else(|| refused(format!("{}: cardUrl is not an http:// URL", f.name)))
}

/// Fetches the card, verifies it when a key is pinned, and returns the JSON-RPC endpoint.
pub fn endpoint(f: &Friend) -> Result<Url> {
    let at = card_url(f)?;
    let reply = request_with(
        &Target::plain(&at.host, at.port),
        "GET",
        &at.path,
        &[],
        None,
        A2A_CARD_TIMEOUT,
    )?;
    let Value::Object(card) = reply.into_result()? else {
        return Err(refused(format!(
            "{}: the agent card is not a JSON object",
            f.name
        )));
    };
    if let Some(key) = &f.key
        && !card::verify(&card, key)
    {
        return Err(Error::new(
            Code::AuthFailed,
            format!(
                "{}: the agent card's signature does not verify with the pinned publicKey \
                 (EdDSA JWS over the JCS form of the card)",
                f.name
            ),
        ));
    }
    let interfaces = card
        .get("supportedInterfaces")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let url = interfaces
        .iter()
        .take(16)
        .filter(|i| {
            i.get("protocolBinding")
                .and_then(Value::as_str)
                .is_some_and(|b| b.eq_ignore_ascii_case("JSONRPC"))
                && i.get("protocolVersion").and_then(Value::as_str) == Some(PROTOCOL_VERSION)
        })
        .find_map(|i| i.get("url").and_then(Value::as_str))
        .ok_or_else(|| {
            refused(format!(
                "{}: the agent card offers no JSONRPC interface of A2A {PROTOCOL_VERSION}",
                f.name
            ))
        })?;
    let rpc = parse_url(url).ok_or_else(|| {
        refused(format!(
            "{}: the card's JSONRPC url is not an http:// URL",
            f.name
        ))
    })?;
    // The token goes only where the card came from: a card cannot send it elsewhere.
    if rpc.host != at.host {
        return Err(refused(format!(
            "{}: the card's endpoint host {} is not the card's host {}",
            f.name,
            crate::sanitize::line(&rpc.host, 64),
            at.host
        )));
    }
    Ok(rpc)
}

/// One JSON-RPC call; the `result`, or the agent's error as ours.
fn call(f: &Friend, rpc: &Url, method: &str, params: Value, timeout: Duration) -> Result<Value> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let bytes = serde_json::to_vec(&body).unwrap_or_default();
    let bearer = f.token.as_ref().map(|t| format!("Bearer {t}"));
    let mut headers = vec![("a2a-version", PROTOCOL_VERSION)];
    if let Some(b) = &bearer
        && !b.contains(['\r', '\n'])
    {
        headers.push(("authorization", b.as_str()));
    }
    let Reply { status, body } = request_with(
        &Target::plain(&rpc.host, rpc.port),
        "POST",
        &rpc.path,
        &headers,
        Some(&bytes),
        timeout,
    )?;
    if status == 401 || status == 403 {
        return Err(Error::new(
            Code::AuthFailed,
            format!(
                "{} refused the call (HTTP {status}): check the friend's token",
                f.name
            ),
        ));
    }
    if let Some(e) = body.get("error") {
        let code = e.get("code").and_then(Value::as_i64).unwrap_or(0);
        let message = e.get("message").and_then(Value::as_str).unwrap_or("");
        let ours = if code == -32001 {
            Code::NotFound
        } else {
            Code::AskFailed
        };
        return Err(Error::new(
            ours,
            format!(
                "{} answered {method} with error {code}: {}",
                f.name,
                crate::sanitize::line(message, 400)
            ),
        ));
    }
    body.get("result")
        .cloned()
        .filter(|_| (200..300).contains(&status))
        .ok_or_else(|| {
            refused(format!(
                "{} answered {method} with HTTP {status} and no result",
                f.name
            ))
        })
}

/// The task's state name and the parts of interest: status text and artifact text.
struct TaskView {
    id: String,
    state: String,
    status_text: String,
    answer: String,
}

fn texts(parts: Option<&Value>) -> String {
    parts
        .and_then(Value::as_array)
        .map(|ps| {
            ps.iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("")
        })
        .unwrap_or_default()
}

fn view(task: &Value) -> Result<TaskView> {
    let obj: &Map<String, Value> = task
        .as_object()
        .ok_or_else(|| refused("the agent returned no task".into()))?;
    let status = obj.get("status");
    let artifacts = obj.get("artifacts").and_then(Value::as_array);
    Ok(TaskView {
        id: obj
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        state: status
            .and_then(|s| s.get("state"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        status_text: texts(
            status
                .and_then(|s| s.get("message"))
                .and_then(|m| m.get("parts")),
        ),
        answer: artifacts
            .map(|a| {
                a.iter()
                    .take(64)
                    .map(|x| texts(x.get("parts")))
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default(),
    })
}

fn is_active(state: &str) -> bool {
    matches!(state, "TASK_STATE_SUBMITTED" | "TASK_STATE_WORKING" | "")
}

/// Asks an A2A friend; an unfinished task past our deadline is canceled.
pub fn ask(config: &AskConfig, f: &Friend, question: &str, is_async: bool) -> Result<AskOutcome> {
    let rpc = endpoint(f)?;
    let mut nonce = [0u8; 16];
    crate::identity::random_bytes(&mut nonce);
    let params = json!({
        "message": {
            "messageId": crate::identity::hex(&nonce),
            "role": "ROLE_USER",
            "parts": [{"text": question}],
        },
        "configuration": {"returnImmediately": true, "acceptedOutputModes": ["text/plain"]},
    });
    let deadline = Instant::now() + Duration::from_millis(config.timeout_ms) + A2A_CLIENT_SLACK;
    let result = call(f, &rpc, "SendMessage", params, A2A_CALL_TIMEOUT)?;
    let mut task = view(result.get("task").unwrap_or(&Value::Null))?;
    if is_async {
        return Ok(AskOutcome::Queued { ask_id: task.id });
    }
    // Sent with returnImmediately, so the task can be canceled at our deadline; polls start
    // fast (most answers are quick) and slow down to `A2A_CLIENT_POLL`.
    let mut pause = Duration::from_millis(10);
    while is_active(&task.state) {
        if Instant::now() >= deadline {
            let _ = call(
                f,
                &rpc,
                "CancelTask",
                json!({"id": task.id}),
                A2A_CALL_TIMEOUT,
            );
            return Err(Error::new(
                Code::Timeout,
                format!(
                    "{} did not finish within timeoutMs; task {} was canceled",
                    f.name,
                    crate::sanitize::line(&task.id, 64)
                ),
            ));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(A2A_CLIENT_POLL);
        task = view(&call(
            f,
            &rpc,
            "GetTask",
            json!({"id": task.id}),
            A2A_CALL_TIMEOUT,
        )?)?;
    }
    outcome(config, f, task)
}

fn outcome(config: &AskConfig, f: &Friend, task: TaskView) -> Result<AskOutcome> {
    let why = |what: &str| {
        let detail = crate::sanitize::line(&task.status_text, 400);
        format!(
            "{} {what}{}",
            f.name,
            if detail.is_empty() {
                String::new()
            } else {
                format!(": {detail}")
            }
        )
    };
    match task.state.as_str() {
        "TASK_STATE_COMPLETED" => {
            let a = super::super::answer::cap_answer(&task.answer, config.max_answer_chars);
            Ok(AskOutcome::Answered {
                answer: a.text,
                truncated: a.truncated,
            })
        }
        "TASK_STATE_REJECTED" => Err(Error::new(Code::AskDeclined, why("declined the ask"))),
        "TASK_STATE_CANCELED" => Err(Error::new(Code::AskFailed, why("canceled the task"))),
        "TASK_STATE_FAILED" => Err(Error::new(Code::AskFailed, why("failed the task"))),
        other => Err(Error::new(
            Code::AskFailed,
            why(&format!(
                "stopped the task in state {} (not handled by peer ask)",
                crate::sanitize::line(other, 40)
            )),
        )),
    }
}

/// `GetTask`, as an ask status (pending, running, answered, declined, failed).
pub fn status(config: &AskConfig, f: &Friend, task_id: &str) -> Result<AskStatus> {
    let rpc = endpoint(f)?;
    let task = view(&call(
        f,
        &rpc,
        "GetTask",
        json!({"id": task_id}),
        A2A_CALL_TIMEOUT,
    )?)?;
    let word = match task.state.as_str() {
        "TASK_STATE_SUBMITTED" | "" => "pending",
        "TASK_STATE_WORKING" => "running",
        "TASK_STATE_COMPLETED" => "answered",
        "TASK_STATE_REJECTED" => "declined",
        _ => "failed",
    };
    let answered = word == "answered";
    let a = super::super::answer::cap_answer(&task.answer, config.max_answer_chars);
    Ok(AskStatus {
        status: word.to_string(),
        answer: answered.then_some(a.text),
        truncated: answered && a.truncated,
        error: (word == "failed" || word == "declined").then(|| {
            format!(
                "{} ({})",
                crate::sanitize::line(&task.status_text, 400),
                crate::sanitize::line(&task.state, 40)
            )
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a2a_friends_are_configured_strictly() {
        let parse = |friend: Value| {
            AskConfig::parse(
                json!({"ask": {"callerName": "ada", "peers": [friend]}})
                    .to_string()
                    .as_bytes(),
            )
        };
        let c =
            parse(json!({"name": "x", "host": "h", "protocol": "a2a", "cardUrl": "http://h:1/c"}))
                .unwrap();
        assert_eq!(
            c.peers[0].protocol,
            super::super::super::config::Protocol::A2a
        );
        assert_eq!(card_url(&c.peers[0]).unwrap().path, "/c");
        for bad in [
            json!({"name": "x", "host": "h", "protocol": "grpc"}),
            json!({"name": "x", "host": "h", "cardUrl": "https://h/c"}),
            json!({"name": "x", "host": "h", "cardUrl": "http://h/a b"}),
        ] {
            assert!(parse(bad.clone()).is_err(), "{bad}");
        }
        let d = parse(json!({"name": "x", "host": "::1", "port": 9, "protocol": "a2a"})).unwrap();
        assert_eq!(
            card_url(&d.peers[0]).unwrap(),
            Url {
                host: "::1".into(),
                port: 9,
                path: card::CARD_PATH.into()
            }
        );
    }

    #[test]
    fn urls_parse_strictly() {
        assert_eq!(
            parse_url("http://127.0.0.1:9/a2a"),
            Some(Url {
                host: "127.0.0.1".into(),
                port: 9,
                path: "/a2a".into()
            })
        );
        assert_eq!(parse_url("http://h").unwrap().port, 80);
        assert_eq!(parse_url("http://[::1]:7/").unwrap().host, "::1");
        for bad in [
            "https://h/",
            "http://u@h/",
            "http://h:0/",
            "http://:1/",
            "http://h/a b",
        ] {
            assert_eq!(parse_url(bad), None, "{bad}");
        }
    }
}
