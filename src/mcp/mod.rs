//! `peer mcp`: the Model Context Protocol front end over stdio. JSON-RPC 2.0, one message per
//! line, lifecycle of MCP revision 2025-11-25 (older handshake revisions negotiated), the four
//! peer tools, cancellation, and `peer_update` events as `notifications/message`.
//!
//! Threads (all scoped, joined before [`serve`] returns): the caller's thread reads stdin with
//! a bounded line reader and runs the sans-IO [`session::Session`]; [`WORKERS`] workers run
//! tool calls so a 30-second `peer_messages` wait never blocks `ping`; whoever answers writes
//! stdout itself ([`out::Output`]: one writer at a time, no writer thread); one forwarder turns
//! host events into notifications once the client is initialized.
//!
//! A short call runs in the reader itself when nothing else has been sent meanwhile: handing
//! it to a worker costs a wake-up of another thread (on a VM, an inter-processor interrupt
//! and an exit to the hypervisor) before any work starts, for the call an agent makes most,
//! one `send_peer_message` at a time. Which calls may run inline is decided by what they
//! can block on ([`runs_inline`]): sends, `list_peers`, `peer_messages` without `waitMs`,
//! and resource operations that do not wait are bounded by the local store and, for a send,
//! by one acknowledgement deadline (`acknowledgementMs`); a waiting `peer_messages`, a
//! waiting resource request and the ask tools (another machine's agent) can take seconds to
//! minutes and always go to a worker, so such a wait never delays a send or a ping behind
//! it. A short call is still handed off when more input is already buffered or readable
//! (the client sent requests back to back, or a batch): those overlap, and the workers keep
//! running them concurrently. The price is what arrives while an inline call runs: it is
//! read when that call ends, at most its acknowledgement deadline later (usually the one
//! durable round trip the call takes); a cancellation of the inline call itself then finds
//! it answered, which MCP allows (a client ignores a response to a request it cancelled). A
//! send never looked at its cancel flag, so cancelling one only ever suppressed its answer.
//! Queue bounds are unchanged: an inline call takes no queue slot, and the reader runs at
//! most one at a time.

mod lines;
mod out;
mod queue;
mod session;
mod wrap;

pub use lines::Input;
pub use wrap::tool_result;

use crate::config::Limits;
use crate::error::{Code, Error, Result};
use crate::runtime::events::Event;
use crate::toolspec::{ResourceArgs, ToolCall, ToolHost};
use crossbeam_channel::{Receiver, bounded, select};
use out::Output;
use parking_lot::Mutex;
use queue::TrySendError;
use serde_json::{Value, json};
use session::{Action, Session, error_response};
use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

pub use crate::config::internal::MCP_WORKERS as WORKERS;

/// Severity of `peer_update` notifications (index into the RFC 5424 levels: "notice").
const EVENT_LEVEL: u8 = 2;

/// One queued tool call.
struct Job {
    id: Value,
    key: String,
    call: ToolCall,
    cancel: Arc<AtomicBool>,
    /// The batch whose array this call's answer goes into; `None` for a call on its own line.
    batch: Option<Arc<BatchAnswers>>,
}

/// The answers of one JSON-RPC batch, collected as its elements are answered (tool calls on
/// the workers, the rest at once) and written as one array after the last (JSON-RPC 2.0,
/// section 6). Notifications and cancelled calls add nothing; a batch with nothing to answer
/// writes nothing.
struct BatchAnswers {
    /// Answers still to come, and the answer lines so far (without their `\n`).
    state: Mutex<(usize, Vec<Vec<u8>>)>,
}

impl BatchAnswers {
    fn new(expected: usize) -> Arc<BatchAnswers> {
        Arc::new(BatchAnswers {
            state: Mutex::new((expected, Vec::new())),
        })
    }

    /// One element's answer line (`None`: it gets none); the last one writes the array.
    fn put(
        &self,
        out: &Output<impl Write>,
        line: Option<Vec<u8>>,
    ) -> std::result::Result<(), out::Closed> {
        let done = {
            let mut st = self.state.lock();
            if let Some(mut line) = line {
                if line.last() == Some(&b'\n') {
                    line.pop();
                }
                st.1.push(line);
            }
            st.0 = st.0.saturating_sub(1);
            (st.0 == 0).then(|| std::mem::take(&mut st.1))
        };
        match done {
            Some(parts) if !parts.is_empty() => {
                let mut array =
                    Vec::with_capacity(parts.iter().map(|p| p.len() + 1).sum::<usize>() + 2);
                array.push(b'[');
                for (i, p) in parts.iter().enumerate() {
                    if i > 0 {
                        array.push(b',');
                    }
                    array.extend_from_slice(p);
                }
                array.extend_from_slice(b"]\n");
                out.send_line(array)
            }
            _ => Ok(()),
        }
    }
}

/// Writes `line` on its own, or into its batch's array.
fn deliver(
    out: &Output<impl Write>,
    batch: Option<&Arc<BatchAnswers>>,
    line: Vec<u8>,
) -> std::result::Result<(), out::Closed> {
    match batch {
        Some(b) => b.put(out, Some(line)),
        None => out.send_line(line),
    }
}

fn line_of(msg: &Value) -> Vec<u8> {
    let mut line = serde_json::to_vec(msg).unwrap_or_default();
    line.push(b'\n');
    line
}

/// Cancel flags of calls queued or running, by serialized JSON-RPC id.
#[derive(Default)]
struct InFlight {
    map: Mutex<HashMap<String, Arc<AtomicBool>>>,
}

impl InFlight {
    /// Registers a call; `None` when the id is already in flight.
    fn insert(&self, key: &str) -> Option<Arc<AtomicBool>> {
        let mut map = self.map.lock();
        if map.contains_key(key) {
            return None;
        }
        let flag = Arc::new(AtomicBool::new(false));
        map.insert(key.to_string(), flag.clone());
        Some(flag)
    }
    fn remove(&self, key: &str) {
        self.map.lock().remove(key);
    }
    fn cancel(&self, key: &str) {
        if let Some(flag) = self.map.lock().get(key) {
            flag.store(true, Ordering::SeqCst);
        }
    }
    fn cancel_all(&self) {
        for flag in self.map.lock().values() {
            flag.store(true, Ordering::SeqCst);
        }
    }
}

/// The channels and shared state the reader uses to act on [`Action`]s.
struct Shell<'a, W: Write> {
    host: &'a dyn ToolHost,
    out: &'a Output<W>,
    jobs: queue::Sender<Job>,
    inflight: &'a InFlight,
    initialized: Option<crossbeam_channel::Sender<()>>,
}

/// Serves MCP on `input`/`output` until `input` ends, then cancels every call, joins all
/// threads and returns. Only a read error on `input` is an error; a closed `output` ends
/// writing and the server keeps draining `input` until EOF.
pub fn serve(
    host: Arc<dyn ToolHost>,
    events: Receiver<Event>,
    mut input: impl Input,
    output: impl Write + Send,
    limits: &Limits,
) -> Result<()> {
    let bound = |n: u64| usize::try_from(n).unwrap_or(usize::MAX).max(1);
    let out = Output::new(output, bound(limits.outgoing_frames));
    let (job_tx, job_rx) = queue::bounded::<Job>(bound(limits.pending_requests));
    let (init_tx, init_rx) = bounded::<()>(1);
    let (stop_tx, stop_rx) = bounded::<()>(0);
    let log_level = Arc::new(AtomicU8::new(0));
    let inflight = InFlight::default();
    let mut session = Session::new(limits, log_level.clone());
    session.set_ask_tools(host.offers_ask_tools());
    std::thread::scope(|s| {
        for _ in 0..WORKERS {
            let (host, jobs, out, inflight) = (host.clone(), job_rx.clone(), &out, &inflight);
            s.spawn(move || work(&*host, jobs, out, inflight));
        }
        // Only the workers hold the job queue's receiving end: once they all ended (their
        // output closed), a new call is refused at once instead of queued for nobody.
        drop(job_rx);
        let forward_out = &out;
        s.spawn(move || forward_events(events, init_rx, stop_rx, forward_out, &log_level));
        let mut shell = Shell {
            host: &*host,
            out: &out,
            jobs: job_tx,
            inflight: &inflight,
            initialized: Some(init_tx),
        };
        let result = read_all(&mut input, limits, &mut session, &mut shell);
        // Shutdown: cancel everything, then close every channel so each thread ends.
        inflight.cancel_all();
        drop(shell);
        drop(stop_tx);
        result
    })
}

fn read_all(
    input: &mut impl Input,
    limits: &Limits,
    session: &mut Session,
    shell: &mut Shell<impl Write>,
) -> Result<()> {
    let max = usize::try_from(limits.frame_bytes).unwrap_or(usize::MAX);
    let mut reader = lines::LineReader::new(max);
    loop {
        let line = reader.next(input).map_err(|e| {
            Error::new(
                Code::Io,
                format!("reading MCP input from stdin failed: {e}"),
            )
        })?;
        match line {
            lines::Line::Eof => return Ok(()),
            lines::Line::TooLong => {
                let text = format!(
                    "line longer than frameBytes ({max} bytes) was discarded; send smaller messages"
                );
                shell.send(error_response(
                    Value::Null,
                    session::INVALID_REQUEST,
                    Code::FrameTooLarge,
                    &text,
                ));
            }
            lines::Line::Complete(buf) => match session.handle(&buf) {
                // Checked last: the poll is a system call, paid only by a call that could
                // run here.
                Action::Call { id, call }
                    if runs_inline(&call) && !reader.has_buffered() && !input.has_pending() =>
                {
                    shell.run_inline(id, call);
                }
                action => shell.act(action),
            },
        }
    }
}

impl<W: Write> Shell<'_, W> {
    fn send(&self, msg: Value) {
        // A closed writer means stdout is gone; keep reading so EOF still shuts down cleanly.
        let _ = self.out.send(&msg);
    }

    fn act(&mut self, action: Action) {
        match action {
            Action::Reply(msg) => self.send(msg),
            Action::Call { id, call } => self.enqueue(id, call),
            Action::Cancel(id) => self.inflight.cancel(&id.to_string()),
            Action::Initialized => {
                if let Some(tx) = self.initialized.take() {
                    let _ = tx.send(());
                }
            }
            Action::Nothing => {}
            Action::Batch(actions) => self.act_batch(actions),
        }
    }

    /// A batch's elements: requests answered into one array, the rest acted on at once.
    fn act_batch(&mut self, actions: Vec<Action>) {
        let expected = actions
            .iter()
            .filter(|a| matches!(a, Action::Reply(_) | Action::Call { .. }))
            .count();
        let batch = BatchAnswers::new(expected);
        for action in actions {
            match action {
                // A closed stdout is seen by the next write; keep reading until EOF.
                Action::Reply(msg) => {
                    let _ = batch.put(self.out, Some(line_of(&msg)));
                }
                Action::Call { id, call } => self.enqueue_in(id, call, Some(batch.clone())),
                other => self.act(other),
            }
        }
    }

    /// Registers the call as in flight; `None` (and the client answered) when its id is
    /// already in progress.
    fn register(&self, id: Value, call: ToolCall, batch: Option<Arc<BatchAnswers>>) -> Option<Job> {
        let key = id.to_string();
        let Some(cancel) = self.inflight.insert(&key) else {
            let text = "a request with this id is still in progress; use a new id";
            let msg = error_response(id, session::INVALID_REQUEST, Code::InvalidRequest, text);
            let _ = deliver(self.out, batch.as_ref(), line_of(&msg));
            return None;
        };
        Some(Job {
            id,
            key,
            call,
            cancel,
            batch,
        })
    }

    /// Runs the call in the reader's thread and answers it (see the module comment).
    fn run_inline(&self, id: Value, call: ToolCall) {
        if let Some(job) = self.register(id, call, None) {
            // A closed stdout is seen by the next send; keep reading until EOF.
            let _ = answer(self.host, job, self.out, self.inflight);
        }
    }

    fn enqueue(&self, id: Value, call: ToolCall) {
        self.enqueue_in(id, call, None);
    }

    fn enqueue_in(&self, id: Value, call: ToolCall, batch: Option<Arc<BatchAnswers>>) {
        let Some(job) = self.register(id, call, batch) else {
            return;
        };
        match self.jobs.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(job) | TrySendError::Disconnected(job)) => {
                self.inflight.remove(&job.key);
                let e = Error::new(
                    Code::QueueFull,
                    "too many tool calls are in progress; retry when one finishes",
                );
                let msg = session::call_response(job.id, tool_result(Err(e)));
                let _ = deliver(self.out, job.batch.as_ref(), line_of(&msg));
            }
        }
    }
}

/// Whether a call may run in the reader's thread: it cannot wait for anything but the local
/// store and, for a send, one acknowledgement deadline (see the module comment).
fn runs_inline(call: &ToolCall) -> bool {
    match call {
        ToolCall::ListPeers(_) | ToolCall::Send(_) => true,
        ToolCall::Messages(m) => m.wait_ms == 0,
        ToolCall::Resource(ResourceArgs::Request { wait_ms, .. }) => wait_ms.unwrap_or(0) == 0,
        ToolCall::Resource(_) => true,
        ToolCall::Ask(_) => false,
    }
}

fn work(
    host: &dyn ToolHost,
    jobs: queue::Receiver<Job>,
    out: &Output<impl Write>,
    inflight: &InFlight,
) {
    while let Some(job) = jobs.recv() {
        if answer(host, job, out, inflight).is_err() {
            return;
        }
    }
}

/// Runs one call and writes its answer, unless it was cancelled. Errors once stdout is gone.
fn answer(
    host: &dyn ToolHost,
    job: Job,
    out: &Output<impl Write>,
    inflight: &InFlight,
) -> std::result::Result<(), out::Closed> {
    let call_id = match &job.id {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let outcome = if job.cancel.load(Ordering::SeqCst) {
        None
    } else {
        // A panicking host must not take the server down; the caller gets an error result.
        let run = std::panic::AssertUnwindSafe(|| host.call(job.call, &call_id, &job.cancel));
        Some(std::panic::catch_unwind(run).unwrap_or_else(|_| {
            Err(Error::new(
                Code::Io,
                "the tool failed unexpectedly (internal panic); see the server log",
            ))
        }))
    };
    inflight.remove(&job.key);
    // Cancelled calls get no response (MCP cancellation: the client ignores it anyway); in a
    // batch they still count as done.
    let outcome = outcome.filter(|_| !job.cancel.load(Ordering::SeqCst));
    match (outcome, &job.batch) {
        (Some(outcome), batch) => {
            let sent = deliver(
                out,
                batch.as_ref(),
                session::call_response_line(&job.id, outcome),
            );
            host.after_answer();
            sent
        }
        (None, Some(batch)) => batch.put(out, None),
        (None, None) => Ok(()),
    }
}

fn forward_events(
    events: Receiver<Event>,
    init: Receiver<()>,
    stop: Receiver<()>,
    out: &Output<impl Write>,
    level: &AtomicU8,
) {
    // Hold events until the client said initialized; they wait in the host's bounded channel.
    select! {
        recv(init) -> got => if got.is_err() { return },
        recv(stop) -> _ => return,
    }
    loop {
        select! {
            recv(events) -> event => match event {
                Ok(event) if level.load(Ordering::Relaxed) <= EVENT_LEVEL => {
                    // The bus's text is JSON it encoded itself; nothing else is forwarded.
                    let Ok(event) = serde_json::from_str(&event) else {
                        continue;
                    };
                    if out.send(&event_notification(event)).is_err() {
                        return;
                    }
                }
                Ok(_) => {}
                Err(_) => return,
            },
            recv(stop) -> _ => return,
        }
    }
}

/// A host event as an MCP logging notification; `event: "peer_update"` is added when the host
/// did not name the event, and every string is sanitized for display.
fn event_notification(event: Value) -> Value {
    let mut data = sanitize_strings(event);
    if let Value::Object(map) = &mut data {
        map.entry("event").or_insert(json!("peer_update"));
    }
    json!({
        "jsonrpc": "2.0",
        "method": "notifications/message",
        "params": { "level": "notice", "logger": "peerwire", "data": data },
    })
}

fn sanitize_strings(v: Value) -> Value {
    match v {
        Value::String(s) => Value::String(crate::sanitize::text(&s)),
        Value::Array(a) => Value::Array(a.into_iter().map(sanitize_strings).collect()),
        Value::Object(m) => Value::Object(
            m.into_iter()
                .map(|(k, v)| (k, sanitize_strings(v)))
                .collect(),
        ),
        other => other,
    }
}

#[cfg(test)]
mod tests;
