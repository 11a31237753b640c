//! Socket-level tests: real Unix sockets in unique temporary directories, in-process
//! endpoints with a small echo handler, and a raw client for every malformed input.

use super::*;
use crate::config::Limits;
use crate::error::{Code, Error};
use crate::identity::{self, KeyPair};
use crate::protocol::handshake::{self, Expected, Initiator, Party, Role};
use crate::protocol::local::{LocalCall, LocalRequest};
use crate::protocol::message::{Receipt, ReceiptPush, ReceiptState};
use crate::protocol::peer::PeerRequest;
use crate::protocol::rpc::{self, Id, Incoming};
use crossbeam_channel::{Receiver, Sender, unbounded};
use parking_lot::Mutex;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Generous bound for "eventually": never a performance assertion.
const PATIENCE: Duration = Duration::from_secs(20);

use crate::fsutil::TempDir;

#[derive(Default)]
struct Adverts(Mutex<HashMap<String, [u8; 32]>>);

impl Verifier for Adverts {
    fn advertised_key(&self, instance_id: &str) -> Option<[u8; 32]> {
        self.0.lock().get(instance_id).copied()
    }
}

/// Answers real typed requests. On the peer side a `peer.status` names what to do by its
/// `messageId` and carries the test's params as JSON text in `to` (see [`status`]): `echo`
/// answers who asked and what; `wait` blocks until released (or 10 s) to hold a request in
/// flight; `notify` notifies before answering, `later` 20 ms after; `panic`, `huge` and `big`
/// do what they say. On the local side every call is echoed, and the tool `notify` notifies.
struct Echo {
    entered: Sender<()>,
    release: Receiver<()>,
    /// `after_reply` calls so far.
    replied: Arc<AtomicUsize>,
}

/// The params of a `peer.status` that asks [`Echo`] for `what` with `params`.
fn status(what: &str, params: Value) -> Value {
    json!({"messageId": what, "to": params.to_string()})
}

impl Handler for Echo {
    fn peer_request(&self, from: &PeerInfo, req: PeerRequest, notify: &Notifier) -> Result<Answer> {
        let PeerRequest::Status(q) = req else {
            return Err(Error::new(Code::MethodNotFound, "Echo answers peer.status"));
        };
        let params: Value = serde_json::from_str(&q.to).unwrap_or(Value::Null);
        let answer = match q.message_id.as_str() {
            "echo" => json!({"from": from.instance_id, "method": "peer.status", "params": params}),
            "notify" => {
                // Anything but a well-formed `peer.receipt` never reaches the sink.
                notify.notify("test.note", &params)?;
                notify.notify("peer.receipt", &json!({"messageId": 1}))?;
                notify.push_receipt(&marked_push(&q.to))?;
                json!({"ok": true})
            }
            "later" => {
                // Notifies after the answer went out, when no request is in flight.
                let notify = notify.clone();
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(20));
                    let _ = notify.push_receipt(&marked_push(&params.to_string()));
                });
                json!({"ok": true})
            }
            "panic" => panic!("test handler panics on purpose"),
            "huge" => json!("x".repeat(2000)),
            "big" => json!("x".repeat(800)),
            "wait" => {
                let _ = self.entered.send(());
                let _ = self.release.recv_timeout(Duration::from_secs(10));
                json!({"waited": true})
            }
            other => {
                return Err(Error::new(Code::NotFound, format!("no message {other}")));
            }
        };
        Answer::of(&answer)
    }

    fn local_request(
        &self,
        run_id: Option<&str>,
        req: LocalRequest,
        notify: &Notifier,
    ) -> Result<Answer> {
        if let LocalCall::Tool(t) = &req.call
            && t.tool == "notify"
        {
            notify.notify("local.note", &t.args)?;
        }
        let (method, params) = req.encode();
        Answer::of(&json!({"local": true, "run": run_id, "method": method, "params": params}))
    }

    fn after_reply(&self) {
        self.replied.fetch_add(1, Ordering::SeqCst);
    }
}

fn limits() -> Limits {
    Limits {
        frame_bytes: 1024,
        handshake_ms: 5_000,
        acknowledgement_ms: 10_000,
        write_ms: 2_000,
        idle_ms: 30_000,
        inbound_connections: 8,
        outgoing_frames: 16,
        ..Limits::default()
    }
}

struct Node {
    me: LocalIdentity,
    endpoint: Option<Endpoint>,
    target: Target,
    entered: Receiver<()>,
    release: Sender<()>,
    replied: Arc<AtomicUsize>,
}

const SECRET: [u8; 32] = [42; 32];

/// A fresh identity whose public key `adverts` advertises.
fn advertised_identity(adverts: &Adverts) -> (Arc<KeyPair>, LocalIdentity) {
    let keys = Arc::new(KeyPair::generate());
    let me = LocalIdentity {
        instance_id: identity::new_instance_id(),
        keys: keys.clone(),
    };
    adverts
        .0
        .lock()
        .insert(me.instance_id.clone(), keys.public());
    (keys, me)
}

fn node(dir: &Path, name: &str, adverts: &Arc<Adverts>, limits: &Limits) -> Node {
    let (keys, me) = advertised_identity(adverts);
    let path = dir.join(format!("{name}.sock"));
    let (entered_tx, entered) = unbounded();
    let (release, release_rx) = unbounded();
    let replied = Arc::new(AtomicUsize::new(0));
    let handler = Arc::new(Echo {
        entered: entered_tx,
        release: release_rx,
        replied: replied.clone(),
    });
    let endpoint =
        Endpoint::bind(&path, me.clone(), limits, SECRET, handler, adverts.clone()).unwrap();
    let target = Target {
        instance_id: me.instance_id.clone(),
        endpoint: path,
        public_key: keys.public(),
    };
    Node {
        me,
        endpoint: Some(endpoint),
        target,
        entered,
        release,
        replied,
    }
}

/// The `peer.receipt` push `Echo` sends for a test's marker (JSON text), carried in the
/// receipt's `messageId` and `correlationId`.
fn marked_push(marker: &str) -> ReceiptPush {
    ReceiptPush {
        version: crate::protocol::PROTOCOL_VERSION,
        from_run: None,
        receipt: Receipt {
            message_id: marker.to_string(),
            from_peer_id: "p-from".into(),
            to_peer_id: "p-to".into(),
            state: ReceiptState::Accepted,
            sequence: 1,
            correlation_id: marker.to_string(),
            at_ms: 1,
            reply_message_id: None,
            code: None,
        },
    }
}

/// The marker `marked_push` put in a push, checked to be in both fields.
fn marker(push: &ReceiptPush) -> Value {
    assert_eq!(push.receipt.message_id, push.receipt.correlation_id);
    serde_json::from_str(&push.receipt.message_id).unwrap()
}

/// (sender instance, decoded `peer.receipt`) of a notification the pool's sink received.
type Note = (String, ReceiptPush);

fn pool_for(node: &Node, limits: &Limits) -> (Pool, Receiver<Note>) {
    let (tx, rx) = unbounded();
    let sink: NotificationSink = Arc::new(move |from: &PeerInfo, push| {
        let _ = tx.send((from.instance_id.clone(), push));
    });
    (Pool::new(node.me.clone(), limits, sink), rx)
}

/// The setup most socket tests share: endpoints `a` and `b` in a fresh directory, both
/// advertised, and a pool for `a` (in an `Arc`, for tests that hand it to threads) whose
/// notifications arrive on `notes`. Borrow it, `let Pair { a, b, .. } = &pair(limits());`,
/// so that it lives to the end of the test: a by-value pattern would drop the fields it
/// leaves out, the directory with them, at once. Fields drop in declaration order, as the
/// locals this replaced did: the pool, then the endpoints, and the directory last, so each
/// endpoint still finds (and removes) its socket when it stops.
struct Pair {
    pool: Arc<Pool>,
    notes: Receiver<Note>,
    b: Node,
    a: Node,
    adverts: Arc<Adverts>,
    limits: Limits,
    dir: TempDir,
}

fn pair(limits: Limits) -> Pair {
    let dir = TempDir::new("transport").unwrap();
    let adverts = Arc::new(Adverts::default());
    let a = node(&dir, "a", &adverts, &limits);
    let b = node(&dir, "b", &adverts, &limits);
    let (pool, notes) = pool_for(&a, &limits);
    Pair {
        pool: Arc::new(pool),
        notes,
        b,
        a,
        adverts,
        limits,
        dir,
    }
}

/// A raw line-level client for malformed input.
struct Raw {
    stream: UnixStream,
    lines: BufReader<UnixStream>,
}

impl Raw {
    fn connect(path: &Path) -> Raw {
        let stream = UnixStream::connect(path).unwrap();
        stream.set_read_timeout(Some(PATIENCE)).unwrap();
        let lines = BufReader::new(stream.try_clone().unwrap());
        Raw { stream, lines }
    }

    fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    /// The next line as JSON; `None` at end of stream.
    fn recv(&mut self) -> Option<Value> {
        let mut line = String::new();
        match self.lines.read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(serde_json::from_str(&line).unwrap()),
        }
    }

    fn expect_error(&mut self, code: Code) -> Value {
        let v = self
            .recv()
            .unwrap_or_else(|| panic!("closed before the {code} error"));
        assert_eq!(v["error"]["data"]["code"], json!(code.name()), "{v}");
        v
    }

    fn expect_closed(&mut self) {
        assert_eq!(self.recv(), None, "connection should be closed");
    }

    /// Performs the initiator side by hand; returns the initiator nonce used.
    fn authenticate(&mut self, me: &LocalIdentity, target: &Target, nonce: [u8; 32]) {
        let expected = Expected {
            instance_id: target.instance_id.clone(),
            public_key: target.public_key,
        };
        let (mut init, hello) = Initiator::start(&me.instance_id, None, &me.keys, expected, nonce);
        self.send(&hello);
        let mut frame = Some(hello);
        while frame.is_some() {
            let v = self.recv().unwrap();
            let msg = rpc::parse(v.to_string().as_bytes()).unwrap();
            frame = init.on_message(msg, &me.keys).unwrap();
            if let Some(f) = &frame {
                self.send(f);
            }
        }
    }

    fn request(&mut self, id: i64, method: &str, params: Value) -> Value {
        self.send(&rpc::encode_request(&Id::Num(id), method, &params));
        let v = self.recv().unwrap();
        assert_eq!(v["id"], json!(id), "{v}");
        v
    }
}

fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(start.elapsed() < PATIENCE, "{what} did not happen");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn endpoint_and_pool_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Endpoint>();
    check::<Pool>();
    check::<Notifier>();
}

#[test]
fn two_endpoints_authenticate_mutually_and_exchange_requests() {
    let Pair {
        a,
        b,
        pool: pool_a,
        notes: notes_a,
        limits: l,
        ..
    } = &pair(limits());
    let (pool_b, _) = pool_for(b, l);
    for i in 0..3 {
        let v = pool_a
            .request_raw(
                &b.target,
                "peer.status",
                status("echo", json!({"n": i, "from": "forged"})),
                0,
            )
            .unwrap();
        assert_eq!(
            v["from"],
            json!(a.me.instance_id),
            "sender comes from the connection"
        );
        assert_eq!(v["params"]["n"], json!(i));
    }
    assert_eq!(pool_a.cached_connections(), 1);
    let v = pool_b
        .request_raw(&a.target, "peer.status", status("echo", json!({})), 0)
        .unwrap();
    assert_eq!(v["from"], json!(b.me.instance_id));
    // A notification pushed by B's handler reaches A's sink on the same connection.
    pool_a
        .request_raw(
            &b.target,
            "peer.status",
            status("notify", json!({"x": 1})),
            0,
        )
        .unwrap();
    let (from, push) = notes_a.recv_timeout(PATIENCE).unwrap();
    assert_eq!(
        (from.as_str(), &marker(&push)["x"]),
        (b.me.instance_id.as_str(), &json!(1))
    );
    let e = pool_a
        .request_raw(&b.target, "no.such", json!({}), 0)
        .unwrap_err();
    assert_eq!(e.code, Code::MethodNotFound);
}

#[test]
fn local_only_methods_are_refused_over_the_peer_channel() {
    let Pair { b, pool, .. } = &pair(limits());
    for m in [
        "peer.read",
        "local.status",
        "resource.request",
        "resource.grant",
    ] {
        let e = pool.request_raw(&b.target, m, json!({}), 0).unwrap_err();
        assert_eq!(e.code, Code::CapabilityDenied, "{m}");
    }
    let e = pool
        .request_raw(&b.target, "peer.hello", json!({}), 0)
        .unwrap_err();
    assert_eq!(e.code, Code::InvalidRequest);
    let e = pool
        .request_raw(
            &b.target,
            "peer.status",
            json!({"messageId": "echo", "to": "{}", "version": 2}),
            0,
        )
        .unwrap_err();
    assert_eq!(e.code, Code::InvalidRequest, "protocol version 1 only");
    assert!(
        pool.request_raw(&b.target, "peer.status", status("echo", json!({})), 0)
            .is_ok(),
        "connection still serves"
    );
}

/// The handler hears after every answer it gave, on either channel, errors included: the
/// root does a send's leftover bookkeeping there, off the next request's path.
#[test]
fn the_handler_hears_after_each_reply() {
    let Pair {
        a, b, limits: l, ..
    } = &pair(limits());
    let (pool_b, _) = pool_for(b, l);
    let mut client = LocalClient::connect(&a.target.endpoint, SECRET, l).unwrap();
    client.call_raw("local.info", &json!({}), 0).unwrap();
    pool_b
        .request_raw(&a.target, "peer.status", status("echo", json!({})), 0)
        .unwrap();
    let e = pool_b.request_raw(&a.target, "no.such", json!({}), 0);
    assert_eq!(e.unwrap_err().code, Code::MethodNotFound);
    eventually("three after_reply calls", || {
        a.replied.load(Ordering::SeqCst) == 3
    });
    assert_eq!(b.replied.load(Ordering::SeqCst), 0, "b answered nothing");
}

#[test]
fn local_channel_needs_the_secret() {
    let dir = TempDir::new("transport").unwrap();
    let adverts = Arc::new(Adverts::default());
    let l = limits();
    let a = node(&dir, "a", &adverts, &l);
    let mut client = LocalClient::connect(&a.target.endpoint, SECRET, &l).unwrap();
    let v = client.call_raw("local.info", &json!({}), 0).unwrap();
    assert_eq!(v["local"], json!(true));
    let v = client
        .call_raw("local.status", &json!({"messageId": "m-1"}), 0)
        .unwrap();
    assert_eq!(
        (&v["method"], &v["params"]["messageId"]),
        (&json!("local.status"), &json!("m-1"))
    );
    let e = LocalClient::connect(&a.target.endpoint, [0; 32], &l)
        .err()
        .unwrap();
    assert_eq!(e.code, Code::AuthFailed);
    let e = LocalClient::connect(&dir.join("missing.sock"), SECRET, &l)
        .err()
        .unwrap();
    assert_eq!(e.code, Code::PeerOffline);
}

#[test]
fn oversize_frames_are_answered_then_closed() {
    let Pair { a, b, .. } = &pair(limits());
    // Without a newline, before the handshake.
    let mut raw = Raw::connect(&b.target.endpoint);
    raw.send(&vec![b'x'; 2048]);
    raw.expect_error(Code::FrameTooLarge);
    raw.expect_closed();
    // With a newline, after the handshake.
    let mut raw = Raw::connect(&b.target.endpoint);
    raw.authenticate(&a.me, &b.target, [1; 32]);
    let mut big = vec![b'x'; 2048];
    big.push(b'\n');
    raw.send(&big);
    raw.expect_error(Code::FrameTooLarge);
    raw.expect_closed();
}

#[test]
fn byte_at_a_time_delivery_works() {
    let Pair { a, b, .. } = &pair(limits());
    let mut raw = Raw::connect(&b.target.endpoint);
    raw.authenticate(&a.me, &b.target, [2; 32]);
    let frame = rpc::encode_request(
        &Id::Num(9),
        "peer.status",
        &status("echo", json!({"text": "snow ☃ é"})),
    );
    for byte in &frame {
        raw.send(std::slice::from_ref(byte));
    }
    let v = raw.recv().unwrap();
    assert_eq!(v["result"]["params"]["text"], json!("snow ☃ é"));
}

#[test]
fn a_thousand_coalesced_frames_are_all_answered_in_order() {
    let Pair { a, b, .. } = &pair(limits());
    let mut raw = Raw::connect(&b.target.endpoint);
    raw.authenticate(&a.me, &b.target, [3; 32]);
    let mut batch = Vec::new();
    for i in 0..1000 {
        batch.extend(rpc::encode_request(
            &Id::Num(i),
            "peer.status",
            &status("echo", json!({"i": i})),
        ));
    }
    // Written from another thread so our reading keeps the server's answers flowing.
    let mut writer = raw.stream.try_clone().unwrap();
    let t = std::thread::spawn(move || writer.write_all(&batch).is_ok());
    for i in 0..1000 {
        let v = raw.recv().unwrap();
        assert_eq!(v["id"], json!(i));
        assert_eq!(v["result"]["params"]["i"], json!(i));
    }
    assert!(t.join().unwrap());
}

#[test]
fn invalid_utf8_and_bad_json_lose_only_that_frame() {
    let Pair { a, b, .. } = &pair(limits());
    let mut raw = Raw::connect(&b.target.endpoint);
    raw.authenticate(&a.me, &b.target, [4; 32]);
    raw.send(b"{\"a\":\"\xff\xfe\"}\n");
    let v = raw.expect_error(Code::InvalidRequest);
    assert_eq!(v["error"]["code"], json!(-32700));
    assert_eq!(v["id"], Value::Null);
    raw.send(b"{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"m\",\"params\":[]}\n");
    let v = raw.expect_error(Code::InvalidRequest);
    assert_eq!(
        (v["id"].clone(), v["error"]["code"].clone()),
        (json!(5), json!(-32600))
    );
    assert_eq!(
        raw.request(6, "peer.status", status("echo", json!({})))["result"]["method"],
        json!("peer.status")
    );
}

#[test]
fn deeply_nested_json_is_an_error_not_a_crash() {
    let Pair { a, b, .. } = &pair(Limits {
        frame_bytes: 256 * 1024,
        ..limits()
    });
    let mut raw = Raw::connect(&b.target.endpoint);
    raw.authenticate(&a.me, &b.target, [5; 32]);
    let mut deep = vec![b'['; 100_000];
    deep.push(b'\n');
    raw.send(&deep);
    assert_eq!(
        raw.expect_error(Code::InvalidRequest)["error"]["code"],
        json!(-32700)
    );
    assert_eq!(
        raw.request(7, "peer.status", status("echo", json!({})))["result"]["method"],
        json!("peer.status")
    );
}

#[test]
fn a_method_before_the_handshake_is_refused_and_closed() {
    let dir = TempDir::new("transport").unwrap();
    let adverts = Arc::new(Adverts::default());
    let b = node(&dir, "b", &adverts, &limits());
    let mut raw = Raw::connect(&b.target.endpoint);
    raw.send(&rpc::encode_request(
        &Id::Num(1),
        "peer.send",
        &json!({"version": 1}),
    ));
    raw.expect_error(Code::AuthFailed);
    raw.expect_closed();
}

#[test]
fn a_proof_over_a_different_transcript_is_refused() {
    let Pair { a, b, .. } = &pair(limits());
    let mut raw = Raw::connect(&b.target.endpoint);
    let expected = Expected {
        instance_id: b.me.instance_id.clone(),
        public_key: b.target.public_key,
    };
    let (_, hello) = Initiator::start(&a.me.instance_id, None, &a.me.keys, expected, [6; 32]);
    raw.send(&hello);
    let answer = raw.recv().unwrap();
    let nr: [u8; 32] = identity::unb64(answer["result"]["nonce"].as_str().unwrap())
        .unwrap()
        .try_into()
        .unwrap();
    let i = Party {
        instance_id: a.me.instance_id.clone(),
        public_key: a.me.keys.public(),
    };
    let r = Party {
        instance_id: b.me.instance_id.clone(),
        public_key: b.target.public_key,
    };
    // Right key, right role, but the responder nonce of another session.
    let other = handshake::transcript(Role::Initiator, &i, &r, &[6; 32], &[0; 32]);
    assert_ne!(nr, [0; 32]);
    let proof = identity::b64(&a.me.keys.sign(&other));
    raw.send(&rpc::encode_request(
        &Id::Num(2),
        "peer.auth",
        &json!({"proof": proof}),
    ));
    raw.expect_error(Code::AuthFailed);
    raw.expect_closed();
}

#[test]
fn a_replayed_nonce_is_refused() {
    let Pair { a, b, .. } = &pair(limits());
    let mut first = Raw::connect(&b.target.endpoint);
    first.authenticate(&a.me, &b.target, [7; 32]);
    let mut replay = Raw::connect(&b.target.endpoint);
    let expected = Expected {
        instance_id: b.me.instance_id.clone(),
        public_key: b.target.public_key,
    };
    let (_, hello) = Initiator::start(&a.me.instance_id, None, &a.me.keys, expected, [7; 32]);
    replay.send(&hello);
    let v = replay.expect_error(Code::AuthFailed);
    assert!(
        v["error"]["message"].as_str().unwrap().contains("replayed"),
        "{v}"
    );
    replay.expect_closed();
}

#[test]
fn a_valid_key_with_the_wrong_instance_id_is_refused() {
    let Pair {
        a,
        b,
        dir,
        adverts,
        limits: l,
        ..
    } = &pair(limits());
    let c = node(dir, "c", adverts, l);
    // A holds its own valid key but claims to be C.
    let mut raw = Raw::connect(&b.target.endpoint);
    let expected = Expected {
        instance_id: b.me.instance_id.clone(),
        public_key: b.target.public_key,
    };
    let (_, hello) = Initiator::start(&c.me.instance_id, None, &a.me.keys, expected, [8; 32]);
    raw.send(&hello);
    raw.expect_error(Code::AuthFailed);
    raw.expect_closed();
}

#[test]
fn a_silent_client_is_released_at_the_handshake_deadline() {
    let dir = TempDir::new("transport").unwrap();
    let adverts = Arc::new(Adverts::default());
    let l = Limits {
        handshake_ms: 200,
        ..limits()
    };
    let b = node(&dir, "b", &adverts, &l);
    let endpoint = b.endpoint.as_ref().unwrap();
    let mut raw = Raw::connect(&b.target.endpoint);
    eventually("the connection is admitted", || {
        endpoint.active_connections() == 1
    });
    raw.expect_error(Code::AuthFailed);
    raw.expect_closed();
    eventually("the thread is released", || {
        endpoint.active_connections() == 0
    });
}

#[test]
fn two_hundred_connections_at_once_are_bounded_and_refused_cleanly() {
    let Pair { b, pool, .. } = &pair(limits());
    let endpoint = b.endpoint.as_ref().unwrap();
    // None of them speaks: the unauthenticated budget (8 here) keeps the newest, cutting the
    // oldest with QUEUE_FULL; the survivors time out with AUTH_FAILED. One answer each.
    let mut conns: Vec<Raw> = (0..200).map(|_| Raw::connect(&b.target.endpoint)).collect();
    let (mut cut, mut timed_out) = (0, 0);
    for raw in conns.iter_mut() {
        let v = raw.recv().expect("every connection gets one answer");
        match v["error"]["data"]["code"].as_str() {
            Some("QUEUE_FULL") => cut += 1,
            Some("AUTH_FAILED") => timed_out += 1,
            _ => panic!("unexpected {v}"),
        }
        raw.expect_closed();
        // Cut threads take a moment to end; the thread count never passes both budgets.
        assert!(endpoint.active_connections() <= 8 + 8);
    }
    assert_eq!(cut + timed_out, 200);
    assert!(
        timed_out <= 8,
        "{timed_out} outlived the unauthenticated budget"
    );
    drop(conns);
    eventually("admitted connections end", || {
        endpoint.active_connections() == 0
    });
    assert!(
        pool.request_raw(&b.target, "peer.status", status("echo", json!({})), 0)
            .is_ok()
    );
}

#[test]
fn stale_incarnation_offline_and_reconnect() {
    let Pair {
        a,
        b,
        pool,
        dir,
        adverts,
        limits: l,
        ..
    } = &mut pair(limits());
    pool.request_raw(&b.target, "peer.status", status("echo", json!({})), 0)
        .unwrap();
    // B restarts as a new incarnation on the same path.
    b.endpoint.take().unwrap().shutdown();
    let e = pool
        .request_raw(&b.target, "peer.status", status("echo", json!({})), 0)
        .unwrap_err();
    assert_eq!(e.code, Code::PeerOffline, "{e}");
    let b2 = node(dir, "b", adverts, l);
    let e = pool
        .request_raw(&b.target, "peer.status", status("echo", json!({})), 0)
        .unwrap_err();
    assert_eq!(e.code, Code::TargetEnded, "{e}");
    let v = pool
        .request_raw(&b2.target, "peer.status", status("echo", json!({})), 0)
        .unwrap();
    assert_eq!(v["from"], json!(a.me.instance_id));
}

#[test]
fn deadlines_bounds_and_disconnects_settle_requests() {
    // A short acknowledgementMs bounds the endpoint's drain at shutdown (the requests below
    // name their own deadlines, except the quick echoes).
    let Pair { b, pool, .. } = &mut pair(Limits {
        pending_requests: 1,
        acknowledgement_ms: 1_000,
        ..limits()
    });
    // Connect first, so the short deadline below covers only the request.
    pool.request_raw(&b.target, "peer.status", status("echo", json!({})), 0)
        .unwrap();
    // A request past its deadline: TIMEOUT.
    let e = pool
        .request_raw(&b.target, "peer.status", status("wait", json!({})), 100)
        .unwrap_err();
    assert_eq!(e.code, Code::Timeout);
    b.entered.recv_timeout(PATIENCE).unwrap();
    b.release.send(()).unwrap();
    // One in flight fills pendingRequests = 1.
    let (p, t) = (pool.clone(), b.target.clone());
    let waiter = std::thread::spawn(move || {
        p.request_raw(&t, "peer.status", status("wait", json!({})), 15_000)
    });
    b.entered.recv_timeout(PATIENCE).unwrap();
    let e = pool
        .request_raw(&b.target, "peer.status", status("echo", json!({})), 0)
        .unwrap_err();
    assert_eq!(e.code, Code::QueueFull);
    // The endpoint goes away while its handler stays wedged (for up to 10 s) past the drain's
    // acknowledgementMs: the drain gives up and cuts, and the pending request settles with
    // DISCONNECTED.
    let endpoint = b.endpoint.take().unwrap();
    endpoint.shutdown();
    assert_eq!(waiter.join().unwrap().unwrap_err().code, Code::Disconnected);
    let _ = b.release.send(());
}

/// A stopping endpoint answers a request it already read before it cuts the connection: the
/// handler finishing while the endpoint drains (within acknowledgementMs) still reaches its
/// caller.
#[test]
fn a_stopping_endpoint_answers_what_it_already_read() {
    let Pair { b, pool, .. } = &mut pair(limits());
    let (p, t) = (pool.clone(), b.target.clone());
    let waiter = std::thread::spawn(move || {
        p.request_raw(&t, "peer.status", status("wait", json!({})), 15_000)
    });
    b.entered.recv_timeout(PATIENCE).unwrap();
    let release = b.release.clone();
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        let _ = release.send(());
    });
    b.endpoint.take().unwrap().shutdown();
    assert_eq!(waiter.join().unwrap().unwrap(), json!({"waited": true}));
    releaser.join().unwrap();
    // Nothing new is read once it stopped.
    assert!(
        pool.request_raw(&b.target, "peer.status", status("echo", json!({})), 0)
            .is_err()
    );
}

#[test]
fn the_pool_keeps_at_most_its_connection_bound() {
    let Pair {
        b,
        pool,
        dir,
        adverts,
        limits: l,
        ..
    } = &pair(Limits {
        connections: 1,
        ..limits()
    });
    let c = node(dir, "c", adverts, l);
    pool.request_raw(&b.target, "peer.status", status("echo", json!({})), 0)
        .unwrap();
    pool.request_raw(&c.target, "peer.status", status("echo", json!({})), 0)
        .unwrap();
    assert_eq!(pool.cached_connections(), 1);
    pool.request_raw(&b.target, "peer.status", status("echo", json!({})), 0)
        .unwrap();
    assert_eq!(pool.cached_connections(), 1);
}

#[test]
fn a_peer_that_never_reads_cannot_wedge_the_endpoint() {
    let Pair { a, b, pool, .. } = &pair(Limits {
        write_ms: 200,
        outgoing_frames: 2,
        frame_bytes: 4096,
        ..limits()
    });
    let endpoint = b.endpoint.as_ref().unwrap();
    let mut raw = Raw::connect(&b.target.endpoint);
    raw.authenticate(&a.me, &b.target, [9; 32]);
    let mut writer = raw.stream.try_clone().unwrap();
    // Thousands of requests whose answers are never read.
    let t = std::thread::spawn(move || {
        for i in 10..20_000 {
            if writer
                .write_all(&rpc::encode_request(
                    &Id::Num(i),
                    "peer.status",
                    &status("big", json!({})),
                ))
                .is_err()
            {
                return;
            }
        }
    });
    eventually("the stuck connection is closed", || {
        endpoint.active_connections() == 0
    });
    assert!(
        pool.request_raw(&b.target, "peer.status", status("echo", json!({})), 0)
            .is_ok()
    );
    drop(raw);
    let _ = t.join();
}

#[test]
fn shutdown_removes_only_its_own_socket() {
    let dir = TempDir::new("transport").unwrap();
    let adverts = Arc::new(Adverts::default());
    let l = limits();
    let mut a = node(&dir, "a", &adverts, &l);
    let path = a.target.endpoint.clone();
    let e = Endpoint::bind(
        &path,
        a.me.clone(),
        &l,
        SECRET,
        Arc::new(Echo {
            entered: unbounded().0,
            release: unbounded().1,
            replied: Arc::default(),
        }),
        adverts.clone(),
    );
    assert_eq!(
        e.err().unwrap().code,
        Code::Io,
        "an existing path is never taken over"
    );
    a.endpoint.take().unwrap().shutdown();
    assert!(
        std::fs::symlink_metadata(&path).is_err(),
        "our socket is removed"
    );
    // Someone else's file at the path survives our shutdown.
    let mut b = node(&dir, "b", &adverts, &l);
    let bpath = b.target.endpoint.clone();
    std::fs::remove_file(&bpath).unwrap();
    std::fs::write(&bpath, b"not ours").unwrap();
    b.endpoint.take().unwrap().shutdown();
    assert_eq!(std::fs::read(&bpath).unwrap(), b"not ours");
}

#[test]
fn socket_file_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new("transport").unwrap();
    let adverts = Arc::new(Adverts::default());
    let a = node(&dir, "a", &adverts, &limits());
    let mode = std::fs::symlink_metadata(&a.target.endpoint)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let long = dir.join("x".repeat(120));
    let e = Endpoint::bind(
        &long,
        a.me.clone(),
        &limits(),
        SECRET,
        Arc::new(Echo {
            entered: unbounded().0,
            release: unbounded().1,
            replied: Arc::default(),
        }),
        adverts.clone(),
    );
    assert!(e.err().unwrap().message.contains("Unix sockets allow"));
}

#[test]
fn incoming_parse_is_used_for_handshake_answers() {
    // Guards the raw helper: a parsed answer to hello is a response with id 1.
    let v = json!({"jsonrpc": "2.0", "id": 1, "result": {}});
    assert!(matches!(
        rpc::parse(v.to_string().as_bytes()),
        Ok(Incoming::Response {
            id: Some(Id::Num(1)),
            ..
        })
    ));
}

#[test]
fn idle_authenticated_connections_are_closed() {
    let Pair { a, b, .. } = &pair(Limits {
        idle_ms: 200,
        ..limits()
    });
    let mut raw = Raw::connect(&b.target.endpoint);
    raw.authenticate(&a.me, &b.target, [10; 32]);
    raw.expect_error(Code::Timeout);
    raw.expect_closed();
}

#[test]
fn notifications_are_bounded_by_the_outgoing_queue() {
    // The far end never reads: the kernel buffer fills, the writer blocks, the queue fills.
    let (near, far) = UnixStream::pair().unwrap();
    let out = super::connection::Outgoing::spawn(&near, 1, 60_000).unwrap();
    let notifier = Notifier::new(out.clone(), 4096);
    let payload = json!({"pad": "x".repeat(1000)});
    let mut first_error = None;
    for _ in 0..1_000_000 {
        if let Err(e) = notifier.notify("peer.receipt", &payload) {
            first_error = Some(e.code);
            break;
        }
    }
    assert_eq!(first_error, Some(Code::QueueFull));
    let e = notifier
        .notify("peer.receipt", &json!({"pad": "x".repeat(5000)}))
        .unwrap_err();
    assert_eq!(e.code, Code::FrameTooLarge);
    drop(far);
    out.abort();
    assert!(notifier.is_closed());
    assert_eq!(
        notifier
            .notify("peer.receipt", &json!({}))
            .unwrap_err()
            .code,
        Code::Disconnected
    );
}

#[test]
fn a_panicking_handler_releases_its_connection() {
    let Pair { b, pool, .. } = &pair(limits());
    let endpoint = b.endpoint.as_ref().unwrap();
    let e = pool
        .request_raw(&b.target, "peer.status", status("panic", json!({})), 0)
        .unwrap_err();
    assert_eq!(e.code, Code::Disconnected);
    eventually("the slot is freed", || endpoint.active_connections() == 0);
    assert!(
        pool.request_raw(&b.target, "peer.status", status("echo", json!({})), 0)
            .is_ok(),
        "reconnects"
    );
}

#[test]
fn concurrent_requests_on_one_connection_are_routed_by_id() {
    let Pair { b, pool, .. } = &pair(limits());
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let (pool, target) = (pool.clone(), b.target.clone());
            std::thread::spawn(move || {
                for i in 0..50 {
                    let v = pool
                        .request_raw(
                            &target,
                            "peer.status",
                            status("echo", json!({"t": t, "i": i})),
                            10_000,
                        )
                        .unwrap();
                    assert_eq!(
                        (v["params"]["t"].clone(), v["params"]["i"].clone()),
                        (json!(t), json!(i))
                    );
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(pool.cached_connections(), 1);
}

#[test]
fn notifications_interleaved_with_requests_all_reach_the_sink_in_order() {
    let Pair { b, pool, notes, .. } = &pair(limits());
    // Each note is queued before its answer, so the requesting thread reads most of them;
    // the last ones may be left to the background reader.
    for i in 0..200 {
        let v = pool
            .request_raw(
                &b.target,
                "peer.status",
                status("notify", json!({"i": i})),
                0,
            )
            .unwrap();
        assert_eq!(v, json!({"ok": true}));
    }
    for i in 0..200 {
        let (from, push) = notes.recv_timeout(PATIENCE).unwrap();
        assert_eq!(from.as_str(), b.me.instance_id.as_str());
        assert_eq!(marker(&push)["i"], json!(i));
    }
    // Asks Echo for one note in `mode`, and returns the marker of the next note that arrives.
    let note_after = |mode: &str, i: &str| {
        let params = status(mode, json!({ "i": i }));
        pool.request_raw(&b.target, "peer.status", params, 0)
            .unwrap();
        marker(&notes.recv_timeout(PATIENCE).unwrap().1)["i"].clone()
    };
    // With no request in flight, a note still arrives (read by the background thread).
    assert_eq!(note_after("later", "later"), json!("later"));
    // And the connection still serves requests afterwards.
    assert_eq!(note_after("notify", "last"), json!("last"));
    assert_eq!(pool.cached_connections(), 1);
}

#[test]
fn a_panicking_sink_ends_only_its_connection_and_never_the_caller() {
    let Pair {
        a, b, limits: l, ..
    } = &pair(limits());
    let sink: NotificationSink = Arc::new(|_: &PeerInfo, push: ReceiptPush| {
        assert_eq!(push.receipt.message_id, "", "this sink panics on purpose");
    });
    let pool = Pool::new(a.me.clone(), l, sink);
    // Whichever thread reads the note, the request settles instead of unwinding or hanging.
    match pool.request_raw(&b.target, "peer.status", status("notify", json!({})), 0) {
        Ok(v) => assert_eq!(v, json!({"ok": true})),
        Err(e) => assert_eq!(e.code, Code::Disconnected, "{e}"),
    }
    eventually("the connection ends", || pool.cached_connections() == 0);
    let v = pool
        .request_raw(&b.target, "peer.status", status("echo", json!({})), 0)
        .unwrap();
    assert_eq!(v["from"], json!(a.me.instance_id));
}

#[test]
fn a_handshake_delivered_byte_by_byte_succeeds() {
    let Pair { a, b, .. } = &pair(limits());
    let mut raw = Raw::connect(&b.target.endpoint);
    let expected = Expected {
        instance_id: b.me.instance_id.clone(),
        public_key: b.target.public_key,
    };
    let (mut init, hello) =
        Initiator::start(&a.me.instance_id, None, &a.me.keys, expected, [11; 32]);
    let mut frame = Some(hello);
    while let Some(f) = frame {
        for byte in &f {
            raw.send(std::slice::from_ref(byte));
        }
        let msg = rpc::parse(raw.recv().unwrap().to_string().as_bytes()).unwrap();
        frame = init.on_message(msg, &a.me.keys).unwrap();
    }
    assert!(init.is_done());
    assert_eq!(
        raw.request(3, "peer.status", status("echo", json!({})))["result"]["from"],
        json!(a.me.instance_id)
    );
}

#[test]
fn silent_responders_time_out_and_dead_sockets_are_offline() {
    let dir = TempDir::new("transport").unwrap();
    let adverts = Arc::new(Adverts::default());
    let l = Limits {
        handshake_ms: 200,
        ..limits()
    };
    let a = node(&dir, "a", &adverts, &l);
    let (pool, _) = pool_for(&a, &l);
    let keys = KeyPair::generate();
    // A listener that accepts but never answers the hello.
    let path = dir.join("mute.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let target = Target {
        instance_id: "i-mute".into(),
        endpoint: path.clone(),
        public_key: keys.public(),
    };
    let e = pool
        .request_raw(&target, "peer.status", status("echo", json!({})), 0)
        .unwrap_err();
    assert_eq!(e.code, Code::Timeout, "{e}");
    // The same socket file with no listener behind it: connection refused.
    drop(listener);
    let e = pool
        .request_raw(&target, "peer.status", status("echo", json!({})), 0)
        .unwrap_err();
    assert_eq!(e.code, Code::PeerOffline, "{e}");
}

#[test]
fn a_full_listen_backlog_times_out_instead_of_hanging() {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, UnixAddr, connect, socket};
    use std::os::fd::AsRawFd;
    let dir = TempDir::new("transport").unwrap();
    let adverts = Arc::new(Adverts::default());
    let l = Limits {
        handshake_ms: 200,
        ..limits()
    };
    let a = node(&dir, "a", &adverts, &l);
    let path = dir.join("frozen.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let addr = UnixAddr::new(&path).unwrap();
    let mut held = Vec::new();
    for _ in 0..20_000 {
        let flags = SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC;
        let fd = socket(AddressFamily::Unix, SockType::Stream, flags, None).unwrap();
        if connect(fd.as_raw_fd(), &addr).is_err() {
            break; // the backlog is full
        }
        held.push(fd);
    }
    let target = Target {
        instance_id: "i-frozen".into(),
        endpoint: path.clone(),
        public_key: [0; 32],
    };
    let (pool, _) = pool_for(&a, &l);
    let e = pool
        .request_raw(&target, "peer.status", status("echo", json!({})), 0)
        .unwrap_err();
    assert_eq!(e.code, Code::Timeout, "{e}");
    let e = LocalClient::connect(&path, SECRET, &l).err().unwrap();
    assert_eq!(e.code, Code::Timeout, "{e}");
}

#[test]
fn oversize_answers_become_errors_and_local_notifications_arrive() {
    let Pair {
        b, pool, limits: l, ..
    } = &pair(limits());
    let e = pool
        .request_raw(&b.target, "peer.status", status("huge", json!({})), 0)
        .unwrap_err();
    assert_eq!(e.code, Code::FrameTooLarge);
    assert!(
        pool.request_raw(&b.target, "peer.status", status("echo", json!({})), 0)
            .is_ok(),
        "connection continues"
    );
    let e = pool
        .request_raw(
            &b.target,
            "peer.status",
            status("echo", json!({"pad": "x".repeat(2000)})),
            0,
        )
        .unwrap_err();
    assert_eq!(
        e.code,
        Code::FrameTooLarge,
        "oversize requests are refused before sending"
    );
    let mut client = LocalClient::connect(&b.target.endpoint, SECRET, l).unwrap();
    client
        .call_raw(
            "local.tool",
            &json!({"tool": "notify", "args": {"n": 5}}),
            0,
        )
        .unwrap();
    let (method, params) = client.next_notification(10_000).unwrap().unwrap();
    assert_eq!((method.as_str(), &params["n"]), ("local.note", &json!(5)));
    assert_eq!(client.next_notification(10).unwrap(), None);
}

/// Records each `peer.send` that reached the handler.
struct SendRecorder(Mutex<Vec<String>>);

impl Handler for SendRecorder {
    fn peer_request(&self, _from: &PeerInfo, req: PeerRequest, _: &Notifier) -> Result<Answer> {
        let PeerRequest::Send(send) = req else {
            return Err(Error::new(Code::MethodNotFound, "only peer.send here"));
        };
        self.0.lock().push("peer.send".to_string());
        Ok(Answer(
            serde_json::to_vec(&json!({"messageId": send.message_id})).unwrap(),
        ))
    }

    fn local_request(&self, _: Option<&str>, _: LocalRequest, _: &Notifier) -> Result<Answer> {
        Answer::of(&json!({}))
    }
}

/// A `peer.send` reaches the handler typed, plain or unusual (an unknown key); a malformed
/// one or one of another version is refused with its code's text before it does.
#[test]
fn peer_sends_reach_the_handler_typed_and_malformed_ones_are_refused() {
    let dir = TempDir::new("transport").unwrap();
    let adverts = Arc::new(Adverts::default());
    let l = limits();
    let a = node(&dir, "a", &adverts, &l);
    let (keys, me) = advertised_identity(&adverts);
    let path = dir.join("hot.sock");
    let seen = Arc::new(SendRecorder(Mutex::new(Vec::new())));
    let _endpoint = Endpoint::bind(&path, me.clone(), &l, SECRET, seen.clone(), adverts).unwrap();
    let target = Target {
        instance_id: me.instance_id,
        endpoint: path.clone(),
        public_key: keys.public(),
    };
    let mut raw = Raw::connect(&path);
    raw.authenticate(&a.me, &target, [9; 32]);
    let good = json!({"messageId": "m-1", "to": "p-x", "content": "hi", "version": 1});
    let v = raw.request(1, "peer.send", good.clone());
    assert_eq!(v["result"]["messageId"], json!("m-1"), "{v}");
    let mut unusual = good.clone();
    unusual["extra"] = json!(1);
    let v = raw.request(2, "peer.send", unusual);
    assert_eq!(v["result"]["messageId"], json!("m-1"), "{v}");
    let mut bad = good.clone();
    bad["messageId"] = json!("bad id");
    let v = raw.request(3, "peer.send", bad);
    assert_eq!(
        v["error"]["message"],
        json!("params.messageId \"bad id\" is not an id ([A-Za-z0-9_.-], at most 96)"),
        "{v}"
    );
    let mut old = good;
    old["version"] = json!(2);
    let v = raw.request(4, "peer.send", old);
    assert_eq!(
        v["error"]["message"],
        json!("params.version must be 1; upgrade the older peer")
    );
    assert_eq!(*seen.0.lock(), vec!["peer.send", "peer.send"]);
}

#[test]
fn peer_info_peer_id_matches_identity_for_every_run() {
    let info = PeerInfo::new("i-7".into(), None);
    let runs = [
        Some("r-1"),
        None,
        Some("r-2"),
        Some("r-1"),
        None,
        Some("r-2"),
    ];
    for run in runs {
        assert_eq!(
            info.peer_id(run),
            crate::identity::peer_id("i-7", run),
            "{run:?}"
        );
    }
    // The memo does not take part in equality.
    assert_eq!(info, PeerInfo::new("i-7".into(), None));
    assert_ne!(info, PeerInfo::new("i-7".into(), Some("r-1".into())));
}
