//! The `/ask` endpoint and the lifecycle of asks: validation, authentication, policy, the
//! owner's approval, one answerer per ask, and async asks (`202` + `askId`, then
//! pending → running → answered / declined / failed). Finished results stay readable for
//! `resultTtlMs` (10 minutes by default) after they finish. Stored asks, asks in flight and
//! concurrent answerers are bounded.
//!
//! `/ask/status` does not hand out an answer for the `askId` alone: `POST /ask/status` with
//! the same credentials as `/ask` (token, or a signature with purpose `status`) returns the
//! answer to the friend who asked; `GET /ask/status?askId=` (dsh-ask-peer's form, no
//! credentials) returns it to the address the ask came from (or the friend a mutual-TLS
//! handshake proved) while the result lives, and to anyone else a finished answer reads as
//! `failed` with an error naming `POST /ask/status`: never `answered` without the answer.

use super::ServerState;
use super::answer::{self, Answer, Work};
use super::approval::Outcome;
use super::config::Mode;
use super::http::{ApiError, Request, Response};
use super::loose::{Loose, typed};
use crate::config::internal::ASK_QUESTION_CHARS_MAX;
use parking_lot::{Condvar, Mutex};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

/// Where an ask is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Pending,
    Running,
    Answered,
    Declined,
    Failed,
}

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Running => "running",
            Status::Answered => "answered",
            Status::Declined => "declined",
            Status::Failed => "failed",
        }
    }
    fn is_final(self) -> bool {
        matches!(self, Status::Answered | Status::Declined | Status::Failed)
    }
}

/// A validated `/ask` body.
#[derive(Clone, Debug)]
pub struct AskRequest {
    pub caller: String,
    pub question: String,
    pub context_files: Vec<String>,
    pub timeout_ms: u64,
    pub is_async: bool,
}

/// An `/ask` body as it arrives (dsh-ask-peer's members plus our `async`); each member kept
/// apart from a wrong-typed one so [`parse_ask`] refuses it with its own message. The
/// credentials are read by the authentication.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AskBody {
    #[serde(default)]
    pub protocol_version: Option<Loose<u64>>,
    #[serde(default)]
    pub caller: Option<Loose<String>>,
    #[serde(default)]
    pub question: Option<Loose<String>>,
    #[serde(default)]
    pub context_files: Option<Loose<Vec<Loose<String>>>>,
    #[serde(default)]
    pub timeout_ms: Option<Loose<u64>>,
    #[serde(default, rename = "async")]
    pub is_async: Option<Loose<bool>>,
}

/// Validates an `/ask` body against the configured bounds (pure).
pub fn parse_ask(
    body: &AskBody,
    config: &super::config::AskConfig,
) -> Result<AskRequest, ApiError> {
    let required =
        || ApiError::bad_request("protocolVersion, caller, and a non-empty question are required");
    if typed(&body.protocol_version) != Some(&super::PROTOCOL_VERSION) {
        return Err(required());
    }
    let caller = typed(&body.caller).ok_or_else(required)?;
    let question = typed(&body.question)
        .filter(|q| !q.trim().is_empty())
        .ok_or_else(required)?;
    if question.chars().count() > ASK_QUESTION_CHARS_MAX {
        return Err(ApiError::bad_request(format!(
            "question exceeds {ASK_QUESTION_CHARS_MAX} characters"
        )));
    }
    let mut context_files = Vec::new();
    match &body.context_files {
        None => {}
        Some(Loose::Is(items)) => {
            if items.len() > config.max_context_files {
                return Err(ApiError::bad_request(format!(
                    "at most {} contextFiles are accepted",
                    config.max_context_files
                )));
            }
            for item in items {
                let path = item
                    .as_ref()
                    .ok_or_else(|| ApiError::bad_request("contextFiles must be strings"))?;
                context_files.push(path.to_string());
            }
        }
        Some(_) => return Err(ApiError::bad_request("contextFiles must be an array")),
    }
    let timeout_ms = match &body.timeout_ms {
        None => config.timeout_ms,
        Some(v) => match v.as_ref() {
            Some(n) if *n > 0 => (*n).min(config.timeout_ms),
            _ => {
                return Err(ApiError::bad_request(
                    "timeoutMs must be a positive integer",
                ));
            }
        },
    };
    let is_async = match &body.is_async {
        None => false,
        Some(Loose::Is(b)) => *b,
        Some(_) => return Err(ApiError::bad_request("async must be true or false")),
    };
    Ok(AskRequest {
        caller: caller.to_string(),
        question: question.to_string(),
        context_files,
        timeout_ms,
        is_async,
    })
}

struct Job {
    caller: String,
    /// The address the ask came from: `GET /ask/status` (which carries no credentials)
    /// returns the answer to it alone.
    asker_ip: IpAddr,
    status: Status,
    answer: Option<Answer>,
    error: Option<ApiError>,
    done_ms: Option<u64>,
}

/// Async asks and the answerer slots.
pub struct Jobs {
    map: Mutex<HashMap<String, Job>>,
    answering: Mutex<usize>,
    freed: Condvar,
    max_stored: usize,
    max_in_flight: usize,
    max_answering: usize,
    ttl_ms: u64,
}

/// Holds one answerer slot while alive.
pub struct Slot<'a>(&'a Jobs);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut n = self.0.answering.lock();
        *n = n.saturating_sub(1);
        self.0.freed.notify_one();
    }
}

impl Jobs {
    pub fn new(config: &super::config::AskConfig) -> Jobs {
        Jobs {
            map: Mutex::new(HashMap::new()),
            answering: Mutex::new(0),
            freed: Condvar::new(),
            max_stored: config.max_stored_asks,
            max_in_flight: config.max_concurrent_asks + config.max_pending_approvals,
            max_answering: config.max_concurrent_asks,
            ttl_ms: config.result_ttl_ms,
        }
    }

    /// An answerer slot, waiting up to `wait` for one when `maxConcurrentAsks` answerers run
    /// (a synchronous ask does not wait; an async one waits up to its timeout); 429 after.
    pub fn slot(&self, wait: Duration) -> Result<Slot<'_>, ApiError> {
        let deadline = std::time::Instant::now() + wait;
        let mut n = self.answering.lock();
        while *n >= self.max_answering {
            let timed_out = wait.is_zero() || self.freed.wait_until(&mut n, deadline).timed_out();
            if timed_out && *n >= self.max_answering {
                return Err(ApiError::rate_limited(
                    "all answerers are busy; retry later",
                ));
            }
        }
        *n += 1;
        Ok(Slot(self))
    }

    fn purge(&self, map: &mut HashMap<String, Job>, now: u64) {
        map.retain(|_, j| {
            j.done_ms
                .is_none_or(|d| now.saturating_sub(d) < self.ttl_ms)
        });
    }

    /// Stores a new async ask.
    pub fn create(
        &self,
        ask_id: &str,
        caller: &str,
        asker_ip: IpAddr,
        status: Status,
    ) -> Result<(), ApiError> {
        let mut map = self.map.lock();
        self.purge(&mut map, crate::clock::now_ms());
        let in_flight = map.values().filter(|j| !j.status.is_final()).count();
        if map.len() >= self.max_stored || in_flight >= self.max_in_flight {
            return Err(ApiError::rate_limited("too many stored asks; retry later"));
        }
        map.insert(
            ask_id.to_string(),
            Job {
                caller: caller.to_string(),
                asker_ip,
                status,
                answer: None,
                error: None,
                done_ms: None,
            },
        );
        Ok(())
    }

    pub fn set_running(&self, ask_id: &str) {
        if let Some(j) = self.map.lock().get_mut(ask_id) {
            j.status = Status::Running;
        }
    }

    pub fn finish(&self, ask_id: &str, result: Result<Answer, ApiError>) {
        let mut map = self.map.lock();
        if let Some(j) = map.get_mut(ask_id) {
            j.done_ms = Some(crate::clock::now_ms());
            match result {
                Ok(a) => {
                    j.status = Status::Answered;
                    j.answer = Some(a);
                }
                Err(e) => {
                    j.status = if e.code == "declined" {
                        Status::Declined
                    } else {
                        Status::Failed
                    };
                    j.error = Some(e);
                }
            }
        }
    }

    /// The status view: `None` when unknown, expired, or asked for by another friend. The
    /// asker gets the answer or the error; anyone else (only possible over `GET`) never sees
    /// `answered` without an answer: see [`stranger_view`].
    pub fn view(&self, ask_id: &str, who: Viewer<'_>) -> Option<StatusView> {
        let mut map = self.map.lock();
        self.purge(&mut map, crate::clock::now_ms());
        let job = map.get(ask_id)?;
        let is_asker = match who {
            Viewer::Friend(c) if c != job.caller => return None,
            Viewer::Friend(_) => true,
            Viewer::Address(ip) => ip == job.asker_ip,
        };
        if !is_asker {
            return Some(stranger_view(job));
        }
        Some(StatusView {
            status: job.status.name(),
            answer: job.answer.as_ref().map(|a| a.text.clone()),
            truncated: job.answer.as_ref().map(|a| a.truncated),
            error: job.error.as_ref().map(|e| e.message.clone()),
            error_code: job.error.as_ref().map(|e| e.code),
            ..StatusView::default()
        })
    }
}

/// Who reads a status.
#[derive(Clone, Copy, Debug)]
pub enum Viewer<'a> {
    /// An authenticated friend (`POST /ask/status`, or `GET` over mutual TLS).
    Friend(&'a str),
    /// An unauthenticated `GET /ask/status` from this address.
    Address(IpAddr),
}

/// What a `GET /ask/status` from another address learns: the state, but an answer only to
/// its asker, so a finished answer reads as `failed` with an error naming the way to it
/// (dsh-ask-peer's client would otherwise show an empty answer as a success).
fn stranger_view(job: &Job) -> StatusView {
    let hint = "the answer is given only to the asker: from another address, use POST \
                /ask/status with the credentials of the ask";
    match job.status {
        Status::Answered => StatusView {
            status: "failed",
            error: Some(hint.to_string()),
            error_code: Some("answer_withheld"),
            ..StatusView::default()
        },
        Status::Failed | Status::Declined => {
            let code = job.error.as_ref().map_or("ask_failed", |e| e.code);
            StatusView {
                status: job.status.name(),
                error_code: Some(code),
                error: Some(format!(
                    "the ask ended {code}; details only to the asker (POST /ask/status)"
                )),
                ..StatusView::default()
            }
        }
        s => StatusView {
            status: s.name(),
            ..StatusView::default()
        },
    }
}

/// What `/ask/status` answers: `{ok, status, answer?, truncated?, error?, errorCode?}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusView {
    pub ok: bool,
    pub status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truncated: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_code: Option<&'static str>,
}

impl Default for StatusView {
    fn default() -> StatusView {
        StatusView {
            ok: true,
            status: "",
            answer: None,
            truncated: None,
            error: None,
            error_code: None,
        }
    }
}

/// What `POST /ask` answers: `{ok, answer, truncated}`, or `{ok, askId}` (202) when async.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct AskReply {
    ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    answer: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    truncated: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ask_id: Option<String>,
}

/// The body of `POST /ask/status` beside its credentials.
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StatusBody {
    #[serde(default)]
    ask_id: Option<Loose<String>>,
}

/// A random version-4 UUID, the form dsh-ask-peer uses for ask ids.
pub fn new_ask_id() -> String {
    let mut b = [0u8; 16];
    crate::identity::random_bytes(&mut b);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = crate::identity::hex(&b);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// `POST /ask`.
pub fn handle_ask(state: &Arc<ServerState>, req: &Request) -> Result<Response, ApiError> {
    let now = crate::clock::now_ms();
    let body = req.json_object()?;
    let ask = parse_ask(&req.json_body()?, &state.config)?;
    let friend = state
        .guard
        .authenticate_request(&state.config, req, &body, "ask", now, |f| {
            super::auth::not_denied(f)?;
            state.guard.charge_friend(&f.name, now)
        })?;
    answer::ready(state)?;
    let files = answer::read_context(state, &ask.context_files)?;
    let work = Work {
        ask_id: new_ask_id(),
        caller: friend.name.clone(),
        mode: friend.mode,
        question: ask.question,
        context_paths: ask.context_files,
        files,
        timeout_ms: ask.timeout_ms,
    };
    // Registered before anything answers the caller, so `peer ask pending` sees an ask the
    // moment its 202 is out.
    register_approval(state, &work)?;
    if !ask.is_async {
        let a = process(state, &work, false, &|| {})?;
        return Ok(Response::ok_typed(&AskReply {
            ok: true,
            answer: Some(a.text),
            truncated: Some(a.truncated),
            ask_id: None,
        }));
    }
    let ask_id = start_async(state, work, req.ip(), |_| {})?;
    let queued = AskReply {
        ok: true,
        answer: None,
        truncated: None,
        ask_id: Some(ask_id),
    };
    Ok(Response::typed(202, &queued))
}

/// Starts an ask whose approval is already registered as an async job on its own thread;
/// `created` runs once the job exists, before the answer can start (A2A records its task
/// there). Returns the ask id. Used by `POST /ask` with `"async": true` and by A2A sends.
pub fn start_async(
    state: &Arc<ServerState>,
    work: Work,
    asker: IpAddr,
    created: impl FnOnce(&str),
) -> Result<String, ApiError> {
    let first = if work.mode == Mode::Ask {
        Status::Pending
    } else {
        Status::Running
    };
    if let Err(e) = state.jobs.create(&work.ask_id, &work.caller, asker, first) {
        state.approvals.forget(&work.ask_id);
        return Err(e);
    }
    created(&work.ask_id);
    let ask_id = work.ask_id.clone();
    let st = state.clone();
    let spawned = std::thread::Builder::new()
        .name("ask-async".into())
        .spawn(move || {
            let result = process(&st, &work, true, &|| st.jobs.set_running(&work.ask_id));
            st.jobs.finish(&work.ask_id, result);
        });
    if spawned.is_err() {
        state.approvals.forget(&ask_id);
        state
            .jobs
            .finish(&ask_id, Err(ApiError::internal("cannot start the ask")));
    }
    Ok(ask_id)
}

/// In `ask` mode, puts the ask before the owner (nothing in the other modes).
pub fn register_approval(state: &ServerState, work: &Work) -> Result<(), ApiError> {
    if work.mode != Mode::Ask {
        return Ok(());
    }
    state.approvals.register(
        &work.ask_id,
        &work.caller,
        &work.question,
        &work.context_paths,
        state.config.approval_timeout_ms,
    )?;
    notify_owner(state, work);
    Ok(())
}

/// Tells the owner's front ends that `work` waits for their decision.
fn notify_owner(state: &ServerState, work: &Work) {
    state.notify.pending(&super::notify::Notice::new(
        &state.home,
        &work.ask_id,
        &work.caller,
        &work.question,
        state.config.approval_timeout_ms,
    ));
}

/// The owner's decision (in `ask` mode; registered by [`register_approval`]), then one
/// answerer in a slot.
pub fn process(
    state: &ServerState,
    work: &Work,
    is_async: bool,
    on_running: &dyn Fn(),
) -> Result<Answer, ApiError> {
    if work.mode == Mode::Ask {
        let wait = Duration::from_millis(state.config.approval_timeout_ms);
        match state.approvals.wait(&work.ask_id, wait, &state.stopping) {
            Outcome::Approved => {}
            Outcome::Declined => {
                return Err(ApiError::new(403, "declined", "the owner declined the ask"));
            }
            Outcome::TimedOut => {
                return Err(ApiError::new(
                    403,
                    "approval_unavailable",
                    "no owner decision within approvalTimeoutMs; the ask failed closed",
                ));
            }
        }
    }
    let wait = if is_async {
        Duration::from_millis(work.timeout_ms)
    } else {
        Duration::ZERO
    };
    let _slot = state.jobs.slot(wait)?;
    on_running();
    answer::run(state, work)
}

/// A `GET /ask/status` caller: the friend whose key its mutual-TLS handshake proved, else
/// its address.
fn get_viewer<'a>(state: &'a ServerState, req: &Request) -> Viewer<'a> {
    match super::auth::tls_friend(&state.config, req) {
        Some(f) => Viewer::Friend(&f.name),
        None => Viewer::Address(req.ip()),
    }
}

/// `GET /ask/status?askId=` (dsh-ask-peer's form: the answer to the asking address or
/// friend, see [`Jobs::view`]) and `POST /ask/status` (authenticated).
pub fn handle_status(state: &ServerState, req: &Request) -> Result<Response, ApiError> {
    let unknown = |id: &str| {
        ApiError::not_found(format!(
            "unknown or expired ask {}",
            crate::sanitize::line(id, 64)
        ))
    };
    if req.method == "GET" {
        let id = req
            .query_param("askId")
            .filter(|s| !s.is_empty())
            .ok_or_else(|| ApiError::bad_request("askId is required"))?;
        return state
            .jobs
            .view(&id, get_viewer(state, req))
            .map(|v| Response::ok_typed(&v))
            .ok_or_else(|| unknown(&id));
    }
    let now = crate::clock::now_ms();
    let body = req.json_object()?;
    let fields: StatusBody = req.json_body()?;
    let id = typed(&fields.ask_id)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| ApiError::bad_request("askId is required"))?;
    // A denied friend learns nothing, and polls are rate limited per friend (apart from its
    // asks) before the request's nonce is kept.
    let friend =
        state
            .guard
            .authenticate_request(&state.config, req, &body, "status", now, |f| {
                super::auth::not_denied(f)?;
                state.guard.charge_status(&f.name, now)
            })?;
    state
        .jobs
        .view(id, Viewer::Friend(&friend.name))
        .map(|v| Response::ok_typed(&v))
        .ok_or_else(|| unknown(id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ask::config::AskConfig;
    use serde_json::{Value, json};

    fn json_of(v: Option<StatusView>) -> Value {
        serde_json::to_value(v.unwrap()).unwrap()
    }

    fn body(v: Value) -> AskBody {
        serde_json::from_value(v).unwrap()
    }

    /// A member named twice is refused before validation: the signature (checked over the
    /// object as a last-wins reader sees it) must not vouch for another reading.
    #[test]
    fn an_ask_body_naming_a_member_twice_is_refused() {
        let once = r#"{"caller":"ada","question":"why?"}"#;
        assert!(serde_json::from_str::<AskBody>(once).is_ok());
        let twice = r#"{"caller":"ada","question":"why?","question":"drop the table"}"#;
        assert!(serde_json::from_str::<AskBody>(twice).is_err());
    }

    #[test]
    fn ask_bodies_are_validated() {
        let c = AskConfig::default();
        let ok = parse_ask(
            &body(json!({"protocolVersion": 1, "caller": "a", "question": "q", "timeoutMs": 999_999_999, "async": true})),
            &c,
        )
        .unwrap();
        assert_eq!(ok.timeout_ms, c.timeout_ms);
        assert!(ok.is_async);
        for bad in [
            json!({"protocolVersion": 2, "caller": "a", "question": "q"}),
            json!({"protocolVersion": 1, "caller": "a", "question": "  "}),
            json!({"protocolVersion": 1, "question": "q"}),
            json!({"protocolVersion": 1, "caller": "a", "question": "q", "contextFiles": "x"}),
            json!({"protocolVersion": 1, "caller": "a", "question": "q", "contextFiles": [1]}),
            json!({"protocolVersion": 1, "caller": "a", "question": "q", "timeoutMs": -1}),
            json!({"protocolVersion": 1, "caller": "a", "question": "q", "async": "yes"}),
        ] {
            assert_eq!(
                parse_ask(&body(bad.clone()), &c).unwrap_err().status,
                400,
                "{bad}"
            );
        }
    }

    #[test]
    fn answerer_slots_are_bounded_and_async_asks_wait_for_one() {
        let jobs = Arc::new(Jobs::new(&AskConfig {
            max_concurrent_asks: 1,
            ..AskConfig::default()
        }));
        let held = jobs.slot(Duration::ZERO).unwrap();
        assert_eq!(jobs.slot(Duration::ZERO).err().unwrap().status, 429);
        assert_eq!(
            jobs.slot(Duration::from_millis(20)).err().unwrap().status,
            429
        );
        let j = jobs.clone();
        let waiter = std::thread::spawn(move || j.slot(Duration::from_secs(10)).is_ok());
        std::thread::sleep(Duration::from_millis(30));
        drop(held);
        assert!(waiter.join().unwrap());
    }

    #[test]
    fn results_are_only_for_the_asker_and_expire() {
        let c = AskConfig {
            result_ttl_ms: 30,
            max_stored_asks: 2,
            ..AskConfig::default()
        };
        let jobs = Jobs::new(&c);
        let (home, away) = (IpAddr::from([10, 0, 0, 1]), IpAddr::from([10, 0, 0, 2]));
        jobs.create("a", "ada", home, Status::Running).unwrap();
        jobs.finish(
            "a",
            Ok(Answer {
                text: "42".into(),
                truncated: false,
            }),
        );
        let stranger = json_of(jobs.view("a", Viewer::Address(away)));
        assert_eq!(stranger["status"], "failed", "{stranger}");
        assert!(
            stranger["error"]
                .as_str()
                .unwrap()
                .contains("POST /ask/status")
        );
        assert!(stranger.get("answer").is_none());
        assert_eq!(
            json_of(jobs.view("a", Viewer::Address(home)))["answer"],
            "42"
        );
        assert_eq!(
            json_of(jobs.view("a", Viewer::Friend("ada")))["answer"],
            "42"
        );
        assert!(jobs.view("a", Viewer::Friend("eve")).is_none());
        jobs.create("b", "ada", home, Status::Pending).unwrap();
        assert_eq!(
            jobs.create("c", "ada", home, Status::Pending)
                .unwrap_err()
                .status,
            429
        );
        std::thread::sleep(Duration::from_millis(40));
        assert!(jobs.view("a", Viewer::Friend("ada")).is_none());
        assert!(
            jobs.view("b", Viewer::Address(away)).is_some(),
            "unfinished asks do not expire"
        );
        assert!(new_ask_id().len() == 36);
    }

    #[test]
    fn every_failed_status_carries_an_error() {
        let jobs = Jobs::new(&AskConfig::default());
        let (home, away) = (IpAddr::from([10, 0, 0, 1]), IpAddr::from([10, 0, 0, 2]));
        jobs.create("f", "ada", home, Status::Running).unwrap();
        jobs.finish("f", Err(ApiError::ask_failed("the answerer crashed")));
        for who in [
            Viewer::Address(home),
            Viewer::Address(away),
            Viewer::Friend("ada"),
        ] {
            let v = json_of(jobs.view("f", who));
            assert_eq!(v["status"], "failed");
            assert!(v["error"].as_str().is_some_and(|e| !e.is_empty()), "{v}");
        }
        assert!(
            json_of(jobs.view("f", Viewer::Address(away)))["error"]
                .as_str()
                .is_some_and(|e| !e.contains("crashed"))
        );
    }
}
