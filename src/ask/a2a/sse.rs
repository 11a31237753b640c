//! The SSE writer of `SendStreamingMessage` and `SubscribeToTask`: the current `Task` first,
//! then a status update on every state change (and the answer artifact before the final
//! `completed` update), ending after a terminal state. Each event is a JSON-RPC response with
//! the request's id. A stream lasts at most as long as its task can (`task_deadline`), stops
//! when the server stops, and a client that does not read within the write timeout is dropped;
//! a comment line every `A2A_SSE_KEEPALIVE` keeps idle proxies from closing it.

use super::super::ServerState;
use super::super::tls::Wire;
use super::task::State;
use crate::config::internal::{A2A_SSE_KEEPALIVE, A2A_SSE_WRITE_TIMEOUT};
use serde_json::{Value, json};
use std::sync::atomic::Ordering;
use std::time::Instant;

/// One stream to write.
pub struct Plan {
    rpc_id: Value,
    task_id: String,
    caller: String,
    deadline: Instant,
}

impl Plan {
    pub fn new(rpc_id: &Value, task_id: &str, caller: &str, state: &ServerState) -> Plan {
        Plan {
            rpc_id: rpc_id.clone(),
            task_id: task_id.to_string(),
            caller: caller.to_string(),
            deadline: Instant::now() + super::task_deadline(state),
        }
    }

    fn event(&self, result: impl serde::Serialize) -> Vec<u8> {
        let v = json!({"jsonrpc": "2.0", "id": self.rpc_id, "result": result});
        format!("data: {v}\n\n").into_bytes()
    }
}

/// The response head of a stream (no length: the stream ends when the connection closes).
pub fn head() -> &'static [u8] {
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n\
      access-control-allow-origin: *\r\nconnection: close\r\n\r\n"
}

/// Writes the stream until the task ends, the deadline passes, or the client goes.
pub fn run<S: Wire>(stream: &mut S, state: &ServerState, plan: &Plan) {
    let _ = stream
        .socket()
        .set_write_timeout(Some(A2A_SSE_WRITE_TIMEOUT));
    let send = |stream: &mut S, bytes: &[u8]| stream.write_all(bytes).and_then(|()| stream.flush());
    if send(stream, head()).is_err() {
        return;
    }
    let mut last: Option<State> = None;
    let mut quiet_since = Instant::now();
    let mut pause = crate::config::internal::A2A_POLL_FIRST;
    while Instant::now() < plan.deadline && !state.stopping.load(Ordering::SeqCst) {
        let Some(snap) = state.a2a.snapshot(&plan.task_id, &plan.caller, &state.jobs) else {
            return;
        };
        let mut out = Vec::new();
        match last {
            None => out.extend(plan.event(json!({"task": snap.task()}))),
            Some(s) if s != snap.state => {
                if let Some(a) = snap.artifact_update() {
                    out.extend(plan.event(a));
                }
                out.extend(plan.event(snap.status_update()));
            }
            _ if quiet_since.elapsed() >= A2A_SSE_KEEPALIVE => {
                out.extend_from_slice(b": keepalive\n\n")
            }
            _ => {}
        }
        if !out.is_empty() {
            if send(stream, &out).is_err() {
                return;
            }
            quiet_since = Instant::now();
        }
        if snap.state.is_terminal() {
            return;
        }
        if last != Some(snap.state) {
            pause = crate::config::internal::A2A_POLL_FIRST;
        }
        last = Some(snap.state);
        std::thread::sleep(pause);
        pause = (pause * 2).min(crate::config::internal::A2A_POLL);
    }
}
