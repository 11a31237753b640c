//! The owner's consent for friends in `ask` mode. Each pending ask gets a one-time decision
//! token (128 random bits, compared in constant time). The pending list and its tokens are
//! written only to a private file in the namespace (`<home>/ask/run/<pid>.json`, 0600 in a
//! 0700 directory) that `peer ask pending` and `peer ask decide` read; no HTTP endpoint lists
//! them. `peer ask decide` hands the decision to the server over its local control socket
//! (`control`), never through the HTTP port and its limiter. `POST /ask/decision` (kept for
//! dsh-ask-peer's decision URL) takes a decision with its token, and only as
//! `Content-Type: application/json` and, when a browser names an `Origin`, from the server's
//! own origin, so a web page cannot post one. No decision within `approvalTimeoutMs` fails
//! closed.

pub mod control;
pub mod owner;

use crate::config::internal::{
    APPROVAL_QUESTION_SHOWN_CHARS, APPROVAL_RUN_FILE_BYTES_MAX, APPROVAL_RUN_FILES_MAX,
};

use super::ServerState;
use super::http::{ApiError, Request, Response};
use super::loose::{Loose, typed};
use crate::error::{Code, Error, Result};
use parking_lot::{Condvar, Mutex};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Approve,
    Decline,
}

/// How a wait for the owner ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Approved,
    Declined,
    /// No decision in time (or the server is stopping): fail closed.
    TimedOut,
}

struct Pending {
    caller: String,
    question: String,
    context_files: Vec<String>,
    token: String,
    created_ms: u64,
    expires_ms: u64,
    decision: Option<Decision>,
}

/// Pending asks waiting for the owner.
pub struct Approvals {
    pending: Mutex<HashMap<String, Pending>>,
    changed: Condvar,
    file: PathBuf,
    socket: PathBuf,
    listen: SocketAddr,
    max: usize,
}

impl Approvals {
    pub fn new(home: &Path, listen: SocketAddr, max: usize) -> Result<Approvals> {
        let dir = home.join("ask").join("run");
        crate::fsutil::ensure_private_dir(&dir)?;
        let a = Approvals {
            pending: Mutex::new(HashMap::new()),
            changed: Condvar::new(),
            file: dir.join(format!("{}.json", std::process::id())),
            socket: control::socket_path(&dir, std::process::id()),
            listen,
            max,
        };
        a.write_owner_file(&HashMap::new());
        Ok(a)
    }

    /// Registers an ask for the owner; 429 when `maxPendingApprovals` are already waiting.
    pub fn register(
        &self,
        ask_id: &str,
        caller: &str,
        question: &str,
        context_files: &[String],
        timeout_ms: u64,
    ) -> std::result::Result<(), ApiError> {
        let mut token = [0u8; 16];
        crate::identity::random_bytes(&mut token);
        let now = crate::clock::now_ms();
        let mut map = self.pending.lock();
        if map.len() >= self.max {
            return Err(ApiError::rate_limited(
                "too many asks are waiting for the owner's decision",
            ));
        }
        map.insert(
            ask_id.to_string(),
            Pending {
                caller: caller.to_string(),
                question: crate::sanitize::clamp(question, APPROVAL_QUESTION_SHOWN_CHARS),
                context_files: context_files.to_vec(),
                token: super::canon::b64url(&token),
                created_ms: now,
                expires_ms: now + timeout_ms,
                decision: None,
            },
        );
        self.write_owner_file(&map);
        Ok(())
    }

    /// Waits for the owner's decision until `timeout` (or until the server stops).
    pub fn wait(&self, ask_id: &str, timeout: Duration, stopping: &AtomicBool) -> Outcome {
        let deadline = Instant::now() + timeout;
        let mut map = self.pending.lock();
        let outcome = loop {
            match map.get(ask_id).and_then(|p| p.decision) {
                Some(Decision::Approve) => break Outcome::Approved,
                Some(Decision::Decline) => break Outcome::Declined,
                None => {}
            }
            if stopping.load(Ordering::SeqCst)
                || !map.contains_key(ask_id)
                || self.changed.wait_until(&mut map, deadline).timed_out()
            {
                // One last look: a decision may have landed with the timeout.
                break match map.get(ask_id).and_then(|p| p.decision) {
                    Some(Decision::Approve) => Outcome::Approved,
                    Some(Decision::Decline) => Outcome::Declined,
                    None => Outcome::TimedOut,
                };
            }
        };
        map.remove(ask_id);
        self.write_owner_file(&map);
        outcome
    }

    /// Records the owner's decision; the token works once.
    pub fn decide(
        &self,
        ask_id: &str,
        token: &str,
        decision: &str,
    ) -> std::result::Result<(), ApiError> {
        let mut map = self.pending.lock();
        let valid = map.get(ask_id).is_some_and(|p| {
            p.decision.is_none() && !token.is_empty() && super::auth::secret_eq(token, &p.token)
        });
        if !valid {
            return Err(ApiError::forbidden("invalid decision token"));
        }
        // A bad decision value leaves the ask pending, with its token still valid.
        let d = match decision {
            "approve" => Decision::Approve,
            "decline" => Decision::Decline,
            _ => return Err(ApiError::bad_request("decision must be approve or decline")),
        };
        if let Some(p) = map.get_mut(ask_id) {
            p.decision = Some(d);
        }
        self.changed.notify_all();
        Ok(())
    }

    /// Withdraws an ask nobody will wait for (its job could not be created or started).
    pub fn forget(&self, ask_id: &str) {
        let mut map = self.pending.lock();
        if map.remove(ask_id).is_some() {
            self.write_owner_file(&map);
        }
    }

    pub fn wake_all(&self) {
        self.changed.notify_all();
    }

    pub fn remove_owner_file(&self) {
        let _ = std::fs::remove_file(&self.file);
        let _ = std::fs::remove_file(&self.socket);
    }

    /// Binds this server's control socket (see [`control`]).
    pub fn bind_control(&self) -> Result<std::os::unix::net::UnixListener> {
        control::bind(&self.socket)
    }

    fn write_owner_file(&self, map: &HashMap<String, Pending>) {
        let pending: Vec<RunEntry> = map
            .iter()
            .filter(|(_, p)| p.decision.is_none())
            .map(|(id, p)| RunEntry {
                ask_id: id.clone(),
                caller: p.caller.clone(),
                context_files: p.context_files.clone(),
                created_at: crate::clock::iso8601(p.created_ms),
                decision_token: p.token.clone(),
                expires_at: crate::clock::iso8601(p.expires_ms),
                question: p.question.clone(),
            })
            .collect();
        let mut reach = self.listen;
        if reach.ip().is_unspecified() {
            reach.set_ip(std::net::IpAddr::from([127, 0, 0, 1]));
        }
        let doc = RunFile {
            listen: reach.to_string(),
            pending,
            pid: std::process::id(),
        };
        // Losing this file only hides pending asks from the CLI; they still time out closed.
        let _ = crate::fsutil::atomic_write(
            &self.file,
            &serde_json::to_vec(&doc).unwrap_or_default(),
            crate::fsutil::Durability::Visible,
        );
    }
}

/// `POST /ask/decision {askId, token, decision}`.
pub fn handle_decision(
    state: &ServerState,
    req: &Request,
) -> std::result::Result<Response, ApiError> {
    let now = crate::clock::now_ms();
    state.guard.admit_address(req.ip(), now)?;
    browser_safe(state, req)?;
    req.json_object()?;
    let body: DecisionBody = req.json_body()?;
    let result =
        state
            .approvals
            .decide(text(&body.ask_id), text(&body.token), text(&body.decision));
    if let Err(e) = &result
        && e.status == 403
    {
        state.guard.note_failure(req.ip(), now);
    }
    result.map(|()| Response::ok_typed(&Done { ok: true }))
}

/// A member that arrived as a string, else empty.
fn text(v: &Option<Loose<String>>) -> &str {
    typed(v).map(String::as_str).unwrap_or("")
}

/// `{"ok": true}`.
#[derive(Serialize)]
pub struct Done {
    pub ok: bool,
}

/// The body of `POST /ask/decision`; a missing or wrong-typed member reads as empty.
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DecisionBody {
    #[serde(default)]
    ask_id: Option<Loose<String>>,
    #[serde(default)]
    token: Option<Loose<String>>,
    #[serde(default)]
    decision: Option<Loose<String>>,
}

/// The owner's run file of one server (`ask/run/<pid>.json`, 0600): where it listens and the
/// asks waiting for a decision, tokens included. Members in key order, as the JSON has them.
#[derive(Default, Serialize, Deserialize)]
struct RunFile {
    #[serde(default)]
    listen: String,
    #[serde(default)]
    pending: Vec<RunEntry>,
    #[serde(default)]
    pid: u32,
}

#[derive(Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct RunEntry {
    ask_id: String,
    caller: String,
    context_files: Vec<String>,
    created_at: String,
    decision_token: String,
    expires_at: String,
    question: String,
}

/// A page in a browser may post to any address, but without a CORS preflight only as a form
/// or `text/plain`, and always naming its `Origin`. A decision must be JSON, and a browser's
/// `Origin` must be this server's own.
fn browser_safe(state: &ServerState, req: &Request) -> std::result::Result<(), ApiError> {
    req.decision_is_json()?;
    if let Some(origin) = req.header("origin") {
        let reach = state.reachable_addr();
        let own = [
            format!("http://{reach}"),
            format!("http://{}", state.listen),
            format!("http://localhost:{}", reach.port()),
        ];
        if !own.iter().any(|o| o.eq_ignore_ascii_case(origin.trim())) {
            return Err(ApiError::forbidden(
                "a decision from another origin is refused",
            ));
        }
    }
    Ok(())
}

/// One pending ask as the owner sees it, with where to send the decision; as JSON without
/// the decision token.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingView {
    pub ask_id: String,
    pub caller: String,
    pub question: String,
    pub context_files: Vec<String>,
    pub expires_at: String,
    #[serde(skip)]
    token: String,
    #[serde(skip)]
    socket: PathBuf,
}

/// Reads the pending asks of this namespace's running servers (local owner state).
pub fn list_pending(home: &Path) -> Result<Vec<PendingView>> {
    let dir = home.join("ask").join("run");
    if let Err(e) = crate::fsutil::check_private_dir(&dir) {
        return if e.code == Code::NotFound {
            Ok(Vec::new())
        } else {
            Err(e)
        };
    }
    let mut out = Vec::new();
    let entries = std::fs::read_dir(&dir).map_err(|e| Error::io("cannot list", &dir, &e))?;
    for entry in entries.flatten().take(APPROVAL_RUN_FILES_MAX) {
        let path = entry.path();
        let Some(pid) = path
            .file_stem()
            .and_then(|s| s.to_str())
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if path.extension().and_then(|e| e.to_str()) != Some("json") || !alive(pid) {
            continue;
        }
        let Ok(bytes) = crate::fsutil::read_private_bounded(&path, APPROVAL_RUN_FILE_BYTES_MAX)
        else {
            continue;
        };
        let Ok(doc) = serde_json::from_slice::<RunFile>(&bytes) else {
            continue;
        };
        let socket = control::socket_path(&dir, pid as u32);
        for p in doc.pending {
            out.push(PendingView {
                ask_id: p.ask_id,
                caller: p.caller,
                question: p.question,
                context_files: p.context_files,
                expires_at: p.expires_at,
                token: p.decision_token,
                socket: socket.clone(),
            });
        }
    }
    out.sort_by(|a, b| a.expires_at.cmp(&b.expires_at));
    Ok(out)
}

fn alive(pid: i32) -> bool {
    pid > 0 && nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
}

/// The pending ask `wanted` names: its id, or a unique prefix of it (at least six
/// characters), as message ids are named.
fn pick_pending(list: Vec<PendingView>, wanted: &str) -> Result<PendingView> {
    use crate::messaging::types::{ambiguous_prefix, ids_matching};
    let hits = ids_matching(wanted, list.iter().map(|p| p.ask_id.as_str()));
    let one = match hits.as_slice() {
        [one] => one.to_string(),
        [] => {
            return Err(Error::new(
                Code::NotFound,
                format!(
                    "no pending ask {} in this namespace (see peer ask pending)",
                    crate::sanitize::line(wanted, 64)
                ),
            ));
        }
        several => return Err(ambiguous_prefix(wanted, several, "pending ask")),
    };
    list.into_iter()
        .find(|p| p.ask_id == one)
        .ok_or_else(|| Error::new(Code::NotFound, "the pending ask vanished"))
}

/// Sends the owner's decision for a pending ask to the server holding it; returns the full
/// ask id (`ask_id` may be a unique prefix).
pub fn decide_local(home: &Path, ask_id: &str, decision: &str) -> Result<String> {
    if decision != "approve" && decision != "decline" {
        return Err(Error::new(
            Code::Usage,
            "decision must be approve or decline",
        ));
    }
    let p = pick_pending(list_pending(home)?, ask_id)?;
    control::send(&p.socket, &p.ask_id, &p.token, decision)?;
    Ok(p.ask_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_owner_names_a_pending_ask_by_a_unique_prefix() {
        let view = |id: &str| PendingView {
            ask_id: id.into(),
            caller: "ada".into(),
            question: "q".into(),
            context_files: vec![],
            expires_at: String::new(),
            token: "t".into(),
            socket: PathBuf::from("/nonexistent"),
        };
        let list = || {
            vec![
                view("66cc680b-0000-4000-8000-000000000001"),
                view("66cc77aa-0000-4000-8000-000000000002"),
            ]
        };
        let id = |r: Result<PendingView>| r.map(|p| p.ask_id);
        assert_eq!(
            id(pick_pending(list(), "66cc680b")).unwrap(),
            "66cc680b-0000-4000-8000-000000000001"
        );
        let full = "66cc77aa-0000-4000-8000-000000000002";
        assert_eq!(id(pick_pending(list(), full)).unwrap(), full);
        let e = id(pick_pending(list(), "66cc")).unwrap_err();
        assert_eq!(e.code, Code::NotFound, "shorter than six characters");
        let e = id(pick_pending(list(), "66cc6")).unwrap_err();
        assert_eq!(e.code, Code::NotFound);
        let e = id(pick_pending(list(), "66cc68")).map(|_| ());
        assert!(e.is_ok());
        let e = id(pick_pending(list(), "66cc6z")).unwrap_err();
        assert_eq!(e.code, Code::NotFound);
        let both = vec![view("66cc680b-1"), view("66cc680b-2")];
        let e = id(pick_pending(both, "66cc680b")).unwrap_err();
        assert_eq!(e.code, Code::AmbiguousTarget, "{}", e.message);
    }

    fn approvals() -> (Approvals, crate::fsutil::TempDir) {
        let home = crate::fsutil::TempDir::new("approve").unwrap();
        let a = Approvals::new(&home, "127.0.0.1:9".parse().unwrap(), 2).unwrap();
        (a, home)
    }

    #[test]
    fn decisions_need_the_one_time_token() {
        let (a, home) = approvals();
        a.register("id1", "ada", "q?", &[], 10_000).unwrap();
        let listed = list_pending(&home).unwrap();
        assert_eq!(listed.len(), 1);
        assert!(
            !serde_json::to_string(&listed[0])
                .unwrap()
                .contains(&listed[0].token)
        );
        let token = listed[0].token.clone();
        assert_eq!(a.decide("id1", "wrong", "approve").unwrap_err().status, 403);
        assert_eq!(a.decide("id1", "", "approve").unwrap_err().status, 403);
        assert_eq!(a.decide("id1", &token, "maybe").unwrap_err().status, 400);
        a.decide("id1", &token, "decline").unwrap();
        assert_eq!(a.decide("id1", &token, "approve").unwrap_err().status, 403);
        let stop = AtomicBool::new(false);
        assert_eq!(
            a.wait("id1", Duration::from_secs(1), &stop),
            Outcome::Declined
        );
        assert!(list_pending(&home).unwrap().is_empty());
    }

    #[test]
    fn no_decision_fails_closed_and_capacity_is_bounded() {
        let (a, _home) = approvals();
        a.register("x", "ada", "q", &[], 10).unwrap();
        a.register("y", "ada", "q", &[], 10).unwrap();
        assert_eq!(
            a.register("z", "ada", "q", &[], 10).unwrap_err().status,
            429
        );
        let stop = AtomicBool::new(false);
        assert_eq!(
            a.wait("x", Duration::from_millis(20), &stop),
            Outcome::TimedOut
        );
    }
}
