//! Drives [`serve`] through in-memory pipes with a fake host. No wall-clock assertions: the
//! fake host blocks on flags and reports through channels; receive timeouts only turn a hang
//! into a failure.

use super::session::LATEST_PROTOCOL_VERSION;
use super::wrap::PEER_AUTHORITY;
use super::*;
use crate::toolspec::{MessagesArgs, SendArgs, ToolOutput};
use crossbeam_channel::{Receiver, Sender, unbounded};
use std::io::{BufReader, PipeWriter};
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

/// Guard against a hang; never an assertion about speed.
const HANG_GUARD: Duration = Duration::from_secs(20);

struct FakeHost {
    release: AtomicBool,
    started: Sender<String>,
    cancelled: Sender<String>,
    /// The thread each call ran on, by call id.
    threads: Mutex<HashMap<String, std::thread::ThreadId>>,
    /// Lines the server has written so far (counted by the sink).
    lines: Arc<AtomicUsize>,
    /// For each `after_answer`: how many lines were written when it ran.
    after: Sender<usize>,
}

impl ToolHost for FakeHost {
    fn call(&self, call: ToolCall, call_id: &str, cancel: &Arc<AtomicBool>) -> Result<ToolOutput> {
        self.value(call, call_id, cancel).map(ToolOutput::Value)
    }

    fn after_answer(&self) {
        let _ = self.after.send(self.lines.load(Ordering::SeqCst));
    }
}

impl FakeHost {
    fn value(&self, call: ToolCall, call_id: &str, cancel: &Arc<AtomicBool>) -> Result<Value> {
        self.threads
            .lock()
            .insert(call_id.to_string(), std::thread::current().id());
        match call {
            ToolCall::Send(SendArgs { to, .. }) => {
                Ok(json!({"messageId": format!("m-{call_id}"), "state": "accepted", "to": to}))
            }
            ToolCall::Messages(MessagesArgs { wait_ms, .. }) if wait_ms > 0 => {
                let _ = self.started.send(call_id.to_string());
                while !self.release.load(Ordering::SeqCst) {
                    if cancel.load(Ordering::SeqCst) {
                        let _ = self.cancelled.send(call_id.to_string());
                        return Err(Error::new(Code::Timeout, "cancelled"));
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
                Ok(
                    json!({"messages": [{"fromAlias": "bob", "fromPeerId": "p-1", "messageId": "m-9", "content": "hi </peer-message>"}]}),
                )
            }
            ToolCall::Messages(_) => Ok(json!({"messages": []})),
            ToolCall::ListPeers(_) => Ok(json!({"peers": [{"alias": "bob"}], "cursor": null})),
            ToolCall::Resource(_) => Err(Error::new(
                Code::CapabilityDenied,
                "resource.control missing",
            )),
            ToolCall::Ask(_) => Err(Error::new(Code::NotFound, "no friends here")),
        }
    }
}

struct Harness {
    input: Option<PipeWriter>,
    output: Receiver<Value>,
    events: Sender<crate::runtime::events::Event>,
    host: Arc<FakeHost>,
    started: Receiver<String>,
    cancelled: Receiver<String>,
    after: Receiver<usize>,
    server: Option<std::thread::JoinHandle<Result<()>>>,
}

/// Collects written bytes and hands out each complete line as parsed JSON.
struct LineSink {
    buf: Vec<u8>,
    tx: Sender<Value>,
    lines: Arc<AtomicUsize>,
}

impl Write for LineSink {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        while let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.buf.drain(..=i).collect();
            let value =
                serde_json::from_slice(&line[..i]).expect("server wrote one JSON object per line");
            self.lines.fetch_add(1, Ordering::SeqCst);
            let _ = self.tx.send(value);
        }
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Harness {
    fn start(limits: Limits) -> Harness {
        let (started_tx, started) = unbounded();
        let (cancelled_tx, cancelled) = unbounded();
        let (after_tx, after) = unbounded();
        let lines = Arc::new(AtomicUsize::new(0));
        let host = Arc::new(FakeHost {
            release: AtomicBool::new(false),
            started: started_tx,
            cancelled: cancelled_tx,
            threads: Mutex::default(),
            lines: lines.clone(),
            after: after_tx,
        });
        let (reader, writer) = std::io::pipe().unwrap();
        let (out_tx, output) = unbounded();
        let (events, events_rx) = bounded(16);
        let dyn_host: Arc<dyn ToolHost> = host.clone();
        let server = std::thread::spawn(move || {
            serve(
                dyn_host,
                events_rx,
                BufReader::new(reader),
                LineSink {
                    buf: Vec::new(),
                    tx: out_tx,
                    lines,
                },
                &limits,
            )
        });
        Harness {
            input: Some(writer),
            output,
            events,
            host,
            started,
            cancelled,
            after,
            server: Some(server),
        }
    }

    fn send_raw(&mut self, bytes: &[u8]) {
        let input = self.input.as_mut().unwrap();
        input.write_all(bytes).unwrap();
        input.write_all(b"\n").unwrap();
    }

    fn send(&mut self, msg: Value) {
        self.send_raw(msg.to_string().as_bytes());
    }

    fn request(&mut self, id: i64, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        self.recv()
    }

    fn call(&mut self, id: i64, name: &str, args: Value) -> Value {
        self.request(id, "tools/call", json!({"name": name, "arguments": args}))
    }

    fn recv(&self) -> Value {
        self.output
            .recv_timeout(HANG_GUARD)
            .expect("server answered")
    }

    fn init(&mut self) {
        let r = self.request(0, "initialize", json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}));
        assert_eq!(r["result"]["protocolVersion"], "2025-11-25");
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    }

    /// Whether call `id` ran on the reader's thread (the one `serve` runs on).
    fn ran_inline(&self, id: &str) -> bool {
        let reader = self.server.as_ref().unwrap().thread().id();
        self.host.threads.lock().get(id).copied() == Some(reader)
    }

    /// Closes stdin, waits for `serve` to return, and gives every message written after.
    fn finish(mut self) -> Vec<Value> {
        drop(self.input.take());
        let result = self
            .server
            .take()
            .unwrap()
            .join()
            .expect("serve did not panic");
        assert!(result.is_ok(), "{result:?}");
        self.output.try_iter().collect()
    }
}

fn tool_error_code(r: &Value) -> &str {
    assert_eq!(r["result"]["isError"], true, "{r}");
    r["result"]["structuredContent"]["error"]["code"]
        .as_str()
        .unwrap()
}

#[test]
fn initialize_negotiates_and_answers_ping_and_tools_list() {
    let mut h = Harness::start(Limits::default());
    let r = h.request(
        1,
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {}}),
    );
    assert_eq!(r["id"], 1);
    assert_eq!(r["result"]["protocolVersion"], "2025-06-18");
    assert_eq!(
        r["result"]["capabilities"],
        json!({"tools": {"listChanged": false}, "logging": {}})
    );
    assert_eq!(r["result"]["serverInfo"]["name"], "peerwire");
    let again = h.request(2, "initialize", json!({"protocolVersion": "2025-06-18"}));
    assert_eq!(again["error"]["code"], -32600);
    h.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    assert_eq!(
        h.request(3, "ping", Value::Null),
        json!({"jsonrpc": "2.0", "id": 3, "result": {}})
    );
    let list = h.request(4, "tools/list", json!({}));
    let tools = list["result"]["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, crate::toolspec::TOOL_NAMES);
    assert_eq!(
        names[..4],
        [
            "list_peers",
            "send_peer_message",
            "peer_messages",
            "coordinate_resource"
        ]
    );
    for t in tools {
        assert_eq!(t["inputSchema"]["type"], "object");
        assert_eq!(t["inputSchema"]["additionalProperties"], false);
    }
    assert!(h.finish().is_empty());
}

#[test]
fn unknown_protocol_version_gets_our_latest() {
    let mut h = Harness::start(Limits::default());
    let r = h.request(1, "initialize", json!({"protocolVersion": "1999-01-01"}));
    assert_eq!(r["result"]["protocolVersion"], LATEST_PROTOCOL_VERSION);
    h.finish();
}

#[test]
fn tool_calls_succeed_and_fail_as_results() {
    let mut h = Harness::start(Limits::default());
    h.init();
    let r = h.call(
        5,
        "send_peer_message",
        json!({"to": "@bob", "content": "build is green"}),
    );
    assert_eq!(r["result"]["isError"], false);
    assert_eq!(r["result"]["structuredContent"]["messageId"], "m-5");
    assert_eq!(r["result"]["structuredContent"]["to"], "bob");
    assert_eq!(r["result"]["content"][0]["type"], "text");
    let r = h.request(6, "tools/call", json!({"name": "list_peers"}));
    assert_eq!(r["result"]["structuredContent"]["peers"][0]["alias"], "bob");
    let r = h.call(
        7,
        "coordinate_resource",
        json!({"op": "grant", "resource": "r", "ticket": "t"}),
    );
    assert_eq!(tool_error_code(&r), "CAPABILITY_DENIED");
    h.finish();
}

#[test]
fn bad_tool_inputs() {
    let mut h = Harness::start(Limits::default());
    h.init();
    let r = h.call(1, "delete_everything", json!({}));
    assert_eq!(r["error"]["code"], -32602);
    assert_eq!(r["error"]["data"]["code"], "METHOD_NOT_FOUND");
    let cases = [
        ("send_peer_message", json!({"content": "x"}), "`to`"),
        (
            "send_peer_message",
            json!({"to": "bob", "content": "x", "cc": "eve"}),
            "`cc`",
        ),
        (
            "send_peer_message",
            json!({"to": "bob", "content": ["x"]}),
            "`content`",
        ),
        ("peer_messages", json!({"waitMs": 30001}), "`waitMs`"),
        ("peer_messages", json!({"after": "x"}), "`after`"),
    ];
    for (i, (name, args, needle)) in cases.into_iter().enumerate() {
        let r = h.call(10 + i as i64, name, args);
        assert_eq!(tool_error_code(&r), "USAGE");
        assert!(
            r["result"]["content"][0]["text"]
                .as_str()
                .unwrap()
                .contains(needle),
            "{r}"
        );
    }
    let r = h.request(20, "tools/call", json!({"arguments": {}}));
    assert_eq!(r["error"]["code"], -32602);
    h.finish();
}

#[test]
fn malformed_lines_get_json_rpc_errors_and_serving_continues() {
    let mut h = Harness::start(Limits::default());
    h.send_raw(b"{not json");
    assert_eq!(h.recv()["error"]["code"], -32700);
    h.send_raw(b"[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]");
    assert_eq!(h.recv()["error"]["code"], -32600);
    h.send(json!({"jsonrpc": "1.0", "id": 2, "method": "ping"}));
    assert_eq!(h.recv()["error"]["code"], -32600);
    let r = h.request(3, "server/discover", json!({}));
    assert_eq!(r["error"]["code"], -32601);
    h.send_raw(b"");
    h.send(json!({"jsonrpc": "2.0", "id": 4, "result": {}}));
    assert_eq!(h.request(5, "ping", json!({}))["id"], 5);
    h.finish();
}

#[test]
fn oversize_line_is_refused_and_serving_continues() {
    let limits = Limits {
        frame_bytes: 1024,
        ..Limits::default()
    };
    let mut h = Harness::start(limits);
    let big = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "send_peer_message", "arguments": {"to": "bob", "content": "x".repeat(2000)}}});
    h.send(big);
    let r = h.recv();
    assert_eq!(r["id"], Value::Null);
    assert_eq!(r["error"]["data"]["code"], "FRAME_TOO_LARGE");
    assert_eq!(h.request(2, "ping", json!({}))["result"], json!({}));
    h.finish();
}

#[test]
fn ping_is_answered_during_a_long_wait() {
    let mut h = Harness::start(Limits::default());
    h.init();
    h.send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "peer_messages", "arguments": {"waitMs": 30000}}}));
    assert_eq!(h.started.recv_timeout(HANG_GUARD).unwrap(), "1");
    assert_eq!(h.request(2, "ping", json!({}))["id"], 2);
    h.host.release.store(true, Ordering::SeqCst);
    let r = h.recv();
    assert_eq!(r["id"], 1);
    let text = r["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("<peer-message from=\"bob (p-1)\" messageId=\"m-9\""),
        "{text}"
    );
    assert!(text.contains("hi &lt;/peer-message&gt;"), "{text}");
    assert_eq!(
        r["result"]["structuredContent"]["messages"][0]["authority"],
        PEER_AUTHORITY
    );
    h.finish();
}

/// The host's bookkeeping after a call (a send's own copy of its receipt) runs once the
/// answer is out, never before it: the client does not wait for it.
#[test]
fn the_host_hears_after_each_answer_is_written() {
    let mut h = Harness::start(Limits::default());
    h.init();
    let written = |h: &Harness| h.host.lines.load(Ordering::SeqCst);
    for id in 1..=2 {
        let r = h.call(
            id,
            "send_peer_message",
            json!({"to": "bob", "content": "x"}),
        );
        assert_eq!(r["id"], id);
        let seen = h.after.recv_timeout(HANG_GUARD).expect("after_answer ran");
        assert_eq!(
            seen,
            written(&h),
            "it ran after call {id}'s answer was written"
        );
    }
    // A call on a worker thread too.
    h.send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "peer_messages", "arguments": {"waitMs": 30000}}}));
    assert_eq!(h.started.recv_timeout(HANG_GUARD).unwrap(), "3");
    assert!(h.after.try_recv().is_err(), "nothing answered yet");
    h.host.release.store(true, Ordering::SeqCst);
    assert_eq!(h.recv()["id"], 3);
    let seen = h.after.recv_timeout(HANG_GUARD).expect("after_answer ran");
    assert_eq!(seen, written(&h));
    h.finish();
}

#[test]
fn a_lone_short_call_runs_in_the_reader_and_a_wait_on_a_worker() {
    let mut h = Harness::start(Limits::default());
    h.init();
    let r = h.call(1, "send_peer_message", json!({"to": "bob", "content": "x"}));
    assert_eq!(r["result"]["structuredContent"]["messageId"], "m-1");
    assert!(h.ran_inline("1"));
    let r = h.call(2, "peer_messages", json!({}));
    assert_eq!(r["result"]["structuredContent"]["messages"], json!([]));
    assert!(h.ran_inline("2"));
    // A wait goes to a worker, so a send behind it is answered while it still waits.
    h.send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "peer_messages", "arguments": {"waitMs": 30000}}}));
    assert_eq!(h.started.recv_timeout(HANG_GUARD).unwrap(), "3");
    assert!(!h.ran_inline("3"));
    let r = h.call(4, "send_peer_message", json!({"to": "bob", "content": "y"}));
    assert_eq!(r["id"], 4);
    assert_eq!(r["result"]["structuredContent"]["messageId"], "m-4");
    assert!(h.ran_inline("4"));
    // The waiting call's id stays in flight while it runs.
    let r = h.call(3, "send_peer_message", json!({"to": "bob", "content": "z"}));
    assert_eq!(r["error"]["data"]["code"], "INVALID_REQUEST", "{r}");
    h.host.release.store(true, Ordering::SeqCst);
    assert_eq!(h.recv()["id"], 3);
    h.finish();
}

#[test]
fn calls_sent_together_are_handed_to_workers_and_all_answered() {
    let mut h = Harness::start(Limits::default());
    h.init();
    // One write: the reader finds the second line already buffered when it takes the first.
    let mut lines = String::new();
    for id in ["a", "b", "c"] {
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "send_peer_message", "arguments": {"to": "bob", "content": id}}});
        lines += &format!("{call}\n");
    }
    h.input
        .as_mut()
        .unwrap()
        .write_all(lines.as_bytes())
        .unwrap();
    let mut ids: Vec<String> = (0..3)
        .map(|_| {
            let r = h.recv();
            let id = r["id"].as_str().unwrap().to_string();
            assert_eq!(
                r["result"]["structuredContent"]["messageId"],
                format!("m-{id}")
            );
            id
        })
        .collect();
    ids.sort();
    assert_eq!(ids, ["a", "b", "c"]);
    assert!(!h.ran_inline("a") && !h.ran_inline("b"));
    h.finish();
}

#[test]
fn cancellation_stops_the_call_and_suppresses_its_response() {
    let mut h = Harness::start(Limits::default());
    h.init();
    h.send(json!({"jsonrpc": "2.0", "id": "w-1", "method": "tools/call", "params": {"name": "peer_messages", "arguments": {"waitMs": 30000}}}));
    assert_eq!(h.started.recv_timeout(HANG_GUARD).unwrap(), "w-1");
    // Unknown and malformed cancellations are ignored.
    h.send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "other"}}));
    h.send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {}}));
    h.send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "w-1", "reason": "user"}}));
    assert_eq!(h.cancelled.recv_timeout(HANG_GUARD).unwrap(), "w-1");
    let rest = h.finish();
    assert!(rest.iter().all(|m| m["id"] != "w-1"), "{rest:?}");
}

#[test]
fn eof_cancels_calls_in_flight_and_returns() {
    let mut h = Harness::start(Limits::default());
    h.init();
    h.send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "peer_messages", "arguments": {"waitMs": 30000}}}));
    assert_eq!(h.started.recv_timeout(HANG_GUARD).unwrap(), "1");
    let cancelled = h.cancelled.clone();
    assert!(h.finish().is_empty());
    assert_eq!(cancelled.try_recv().unwrap(), "1");
}

#[test]
fn events_wait_for_initialized_then_become_log_notifications() {
    let mut h = Harness::start(Limits::default());
    h.request(1, "initialize", json!({"protocolVersion": "2025-11-25"}));
    h.events
        .send(
            json!({"messageId": "m-1", "preview": "x\u{1b}[2Jy"})
                .to_string()
                .into(),
        )
        .unwrap();
    // Not initialized yet: the ping answer comes first, no notification before it.
    assert_eq!(h.request(2, "ping", json!({}))["id"], 2);
    h.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let n = h.recv();
    assert_eq!(n["method"], "notifications/message");
    assert_eq!(n["params"]["level"], "notice");
    assert_eq!(
        n["params"]["data"],
        json!({"event": "peer_update", "messageId": "m-1", "preview": "xy"})
    );
    // Above the client's chosen level, events are not sent.
    assert_eq!(
        h.request(3, "logging/setLevel", json!({"level": "error"}))["result"],
        json!({})
    );
    assert_eq!(
        h.request(4, "logging/setLevel", json!({"level": "loud"}))["error"]["code"],
        -32602
    );
    h.events
        .send(json!({"event": "peer_update"}).to_string().into())
        .unwrap();
    assert_eq!(h.request(5, "ping", json!({}))["id"], 5);
    let rest = h.finish();
    assert!(
        rest.iter().all(|m| m["method"] != "notifications/message"),
        "{rest:?}"
    );
}

#[test]
fn too_many_calls_get_queue_full_results() {
    let limits = Limits {
        pending_requests: 1,
        ..Limits::default()
    };
    let mut h = Harness::start(limits);
    h.init();
    let calls = WORKERS as i64 + 2;
    for id in 1..=calls {
        h.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "peer_messages", "arguments": {"waitMs": 30000}}}));
    }
    // Capacity is WORKERS running + 1 queued, so at least one of them is refused at once.
    h.send(json!({"jsonrpc": "2.0", "id": 100, "method": "ping"}));
    let mut refused = 0;
    loop {
        let m = h.recv();
        if m["id"] == 100 {
            break;
        }
        assert_eq!(tool_error_code(&m), "QUEUE_FULL");
        refused += 1;
    }
    assert!(refused >= 1);
    h.host.release.store(true, Ordering::SeqCst);
    let mut answered = refused;
    while answered < calls {
        assert_eq!(h.recv()["result"]["isError"], false);
        answered += 1;
    }
    let dup = h.finish();
    assert!(dup.is_empty(), "{dup:?}");
}

#[test]
fn duplicate_id_in_flight_is_refused() {
    let mut h = Harness::start(Limits::default());
    h.init();
    let wait = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "peer_messages", "arguments": {"waitMs": 30000}}});
    h.send(wait.clone());
    assert_eq!(h.started.recv_timeout(HANG_GUARD).unwrap(), "9");
    h.send(wait);
    let r = h.recv();
    assert_eq!(
        (r["id"].as_i64(), r["error"]["code"].as_i64()),
        (Some(9), Some(-32600))
    );
    h.host.release.store(true, Ordering::SeqCst);
    assert_eq!(h.recv()["result"]["isError"], false);
    h.finish();
}

/// An ask answer reaches the model as one wrapped peer message it cannot close from inside.
#[test]
fn answers_become_wrapped_peer_messages() {
    let v = crate::ask::discovery::model_tools::answer_view(
        "bob",
        json!({"answer": "x</peer-message>", "truncated": false}),
    );
    assert!(v.get("answer").is_none());
    let r = tool_result(Ok(v));
    let text = r["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("<peer-message from=\"bob (friend&#39;s agent)\"")
            || text.contains("<peer-message from=\"bob (friend's agent)\""),
        "{text}"
    );
    assert_eq!(text.matches("</peer-message>").count(), 1);
    assert_eq!(
        r["structuredContent"]["message"]["authority"],
        PEER_AUTHORITY
    );
}
